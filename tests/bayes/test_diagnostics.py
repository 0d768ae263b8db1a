"""ArviZ diagnostics of MCMC runs: thresholds, naming of the parameters at fault, reports, plots."""

from __future__ import annotations

import re
import types
import warnings

import arviz as az
import numpy as np
import pytest
import xarray as xr

from hierbandit.bayes import Diagnostics, diagnose

CHAINS, DRAWS = 4, 1000
ARMS = ["Action", "Comedy"]
FEATURES = ["intercept", "age", "weekend"]
N_SIGMA = 2 * 3 * 4 // 2  # two arms × the d(d+1)/2 distinct entries of a symmetric 3 × 3 Σ


@pytest.fixture(autouse=True)
def _agg_backend():
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")
    yield
    plt.close("all")


def _idata(rng, *, shift=None, ar=None, diverging=0, named=False, symmetric=True):
    """Independent normal draws of ``mu`` and a symmetric ``Sigma`` (arm 2, feature 3,
    feature_ 3), in ArviZ's DataTree layout.

    ``shift`` moves chain 1 of ``Sigma[0, 1, 2]`` (and so of its mirror ``Sigma[0, 2, 1]``, and
    of ``mu``) by that much; ``ar`` makes ``mu`` an AR(1) chain with that coefficient;
    ``diverging`` marks that many transitions; ``named`` labels the arms and features by name
    rather than by position; ``symmetric=False`` draws every entry of ``Sigma`` independently.
    """
    mu = rng.normal(size=(CHAINS, DRAWS))
    Sigma = rng.normal(size=(CHAINS, DRAWS, 2, 3, 3))
    if symmetric:
        Sigma = (Sigma + np.swapaxes(Sigma, -1, -2)) / np.sqrt(2.0)
    if shift is not None:
        mu[1] += shift
        Sigma[1, :, 0, 1, 2] += shift
        if symmetric:
            Sigma[1, :, 0, 2, 1] += shift
    if ar is not None:
        e = rng.normal(size=(CHAINS, DRAWS))
        for t in range(1, DRAWS):
            e[:, t] = ar * e[:, t - 1] + np.sqrt(1 - ar**2) * e[:, t]
        mu = e
    div = np.zeros((CHAINS, DRAWS), dtype=bool)
    div.flat[:diverging] = True
    coords = {"arm": ARMS, "feature": FEATURES, "feature_": FEATURES} if named else None
    return az.from_dict(
        {"posterior": {"mu": mu, "Sigma": Sigma}, "sample_stats": {"diverging": div}},
        dims={"Sigma": ["arm", "feature", "feature_"]},
        coords=coords,
    )


def _sigma_rows(index) -> list[str]:
    return [name for name in index if name.startswith("Sigma[")]


def test_well_mixed_run_is_ok(rng) -> None:
    idata = _idata(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diag = diagnose(idata)
    assert isinstance(diag, Diagnostics)
    assert diag.ok and diag.problems == []
    assert diag.divergences == 0
    assert diag.n_chains == CHAINS and diag.n_draws == DRAWS
    assert len(diag.summary) == 1 + N_SIGMA
    assert {"r_hat", "ess_bulk", "ess_tail", "mcse_mean", "mcse_sd", "hdi94_lb", "hdi94_ub"} <= set(
        diag.summary.columns
    )
    assert diag.max_rhat < 1.01 and diag.min_ess_bulk > 400
    md = diag.to_markdown()
    assert "MCMC diagnostics: OK" in md and "| parameter |" in md
    assert f"{1 + N_SIGMA} parameters" in md
    assert "ok=True" in repr(diag)


def test_chains_at_different_values_name_the_parameter_and_warn(rng) -> None:
    idata = _idata(rng, shift=3.0)  # outside pytest.warns, which reports an error as DID NOT WARN
    pattern = (
        r"Sigma: 1 of 12 entries fails: r_hat > 1\.01 in 1 \(worst ([\d.]+) at Sigma\[0, 2, 1\]\)"
    )
    with pytest.warns(UserWarning, match=pattern) as record:
        diag = diagnose(idata)
    assert len(record) == 1  # one warning listing every problem
    assert "mu: 1 of 1 entry fails: r_hat > 1.01" in str(record[0].message)
    assert not diag.ok
    # one line per variable; the failing scalars by name in ``failures``
    assert {p.split(":")[0] for p in diag.problems} == {"mu", "Sigma"}
    assert set(diag.failures["parameter"]) == {"mu", "Sigma[0, 2, 1]"}  # the pair once
    line = next(p for p in diag.problems if p.startswith("Sigma:"))
    value = float(re.search(pattern, line).group(1))
    assert value > 1.01
    assert value == pytest.approx(diag.summary.loc["Sigma[0, 2, 1]", "r_hat"], abs=5e-4)
    f = diag.failures
    row = f[(f["parameter"] == "Sigma[0, 2, 1]") & (f["check"] == "r_hat")].iloc[0]
    assert row["variable"] == "Sigma" and row["threshold"] == 1.01
    assert row["value"] == diag.summary.loc["Sigma[0, 2, 1]", "r_hat"]
    assert diag.max_rhat == pytest.approx(diag.summary["r_hat"].max())
    md = diag.to_markdown()
    assert "problem" in md and "Sigma[0, 2, 1]" in md


def test_symmetric_matrix_counts_each_pair_once_by_name(rng) -> None:
    diag = diagnose(_idata(rng, shift=3.0, named=True), warn=False)
    rows = _sigma_rows(diag.summary.index)
    assert len(rows) == N_SIGMA == len(set(rows))
    want = [
        f"Sigma[{arm}, {FEATURES[i]}, {FEATURES[j]}]"
        for arm in ARMS
        for i in range(3)
        for j in range(i + 1)
    ]
    assert rows == want  # the lower triangle, diagonal included, row by row
    assert "Sigma[Action, age, weekend]" not in diag.summary.index  # its mirror is the one kept
    assert set(diag.failures["parameter"]) == {"mu", "Sigma[Action, weekend, age]"}
    assert "at Sigma[Action, weekend, age])" in " ".join(diag.problems)
    assert not any("[0" in p or ", 1" in p for p in diag.problems)  # names, not positions
    # entries that are not a symmetric matrix are all kept
    full = diagnose(_idata(rng, symmetric=False, named=True), warn=False)
    assert len(_sigma_rows(full.summary.index)) == 2 * 3 * 3
    assert "Sigma[Action, age, weekend]" in full.summary.index


def test_names_replace_codes_in_the_labels(rng) -> None:
    idata = _idata(rng, shift=3.0)
    diag = diagnose(idata, names={"arm": ARMS, "feature": FEATURES}, warn=False)
    assert _sigma_rows(diag.summary.index)[:2] == [
        "Sigma[Action, intercept, intercept]",
        "Sigma[Action, age, intercept]",
    ]
    assert "r_hat > 1.01 in 1 (worst" in " ".join(diag.problems)
    assert "at Sigma[Action, weekend, age])" in " ".join(diag.problems)
    only_mu = diagnose(idata, var_names="mu", names={"arm": ARMS}, warn=False)
    assert list(only_mu.summary.index) == ["mu"]  # names of the run's dimensions, used or not
    with pytest.raises(ValueError, match="3 values of 'feature'"):
        diagnose(idata, names={"feature": ["a", "b"]})
    with pytest.raises(ValueError, match="no dimension"):
        diagnose(idata, names={"user": ["a"]})


def test_each_row_carries_its_own_parameter_when_the_dims_differ(rng) -> None:
    """``beta0`` (arm, feature) beside ``beta`` (arm, instance, feature): every row of the
    summary, and so every problem it names, is that parameter's (ArviZ's summary of the two at
    once pairs some labels with another parameter's values)."""
    means0 = 10.0 * np.arange(6).reshape(2, 3)
    means = 100.0 + 10.0 * np.arange(24).reshape(2, 4, 3)
    post = xr.Dataset(
        {
            "beta0": (("chain", "draw", "arm", "feature"),
                      rng.normal(size=(2, 400, 2, 3)) + means0),
            "beta": (("chain", "draw", "arm", "instance", "feature"),
                     rng.normal(size=(2, 400, 2, 4, 3)) + means),
        },
        coords={"arm": [0, 1], "instance": [0, 1, 2, 3], "feature": ["a", "b", "c"]},
    )  # fmt: skip
    diag = diagnose(xr.DataTree.from_dict({"posterior": post}), warn=False)
    assert len(diag.summary) == 6 + 24
    for k in range(2):
        for i, f in enumerate("abc"):
            assert abs(diag.summary.loc[f"beta0[{k}, {f}]", "mean"] - means0[k, i]) < 0.5
            for j in range(4):
                assert abs(diag.summary.loc[f"beta[{k}, {j}, {f}]", "mean"] - means[k, j, i]) < 0.5


def test_low_ess_and_divergences_are_problems(rng) -> None:
    idata = _idata(rng, ar=0.99, diverging=5)
    with pytest.warns(UserWarning, match="divergences: 5 > 0"):
        diag = diagnose(idata, ess_min=400)
    assert diag.divergences == 5
    assert any(p.startswith("mu:") and "ess_bulk < 400 in 1" in p for p in diag.problems)
    assert not any(p.startswith("Sigma") for p in diag.problems)


def test_tail_ess_is_that_of_the_5_and_95_percent_quantiles(rng) -> None:
    """As in ArviZ 0.x and Vehtari et al. (2021); ArviZ 1's summary would take the quantiles
    from its credible-interval setting (11 % and 89 % by default)."""
    idata = _idata(rng, ar=0.9)
    diag = diagnose(idata, warn=False)
    for name, sel in (("mu", {}), ("Sigma[0, 2, 1]", {"arm": 0, "feature": 2, "feature_": 1})):
        var = name.split("[")[0]
        want = az.ess(idata, var_names=[var], method="tail", prob=(0.05, 0.95))[var].sel(sel)
        assert diag.summary.loc[name, "ess_tail"] == pytest.approx(float(want), rel=1e-12)


def test_thresholds_and_var_names(rng) -> None:
    idata = _idata(rng, shift=3.0)
    only_mu = diagnose(idata, var_names="mu", warn=False)
    assert list(only_mu.summary.index) == ["mu"]
    assert {p.split(":")[0] for p in only_mu.problems} == {"mu"}
    lenient = diagnose(idata, var_names=["~mu"], rhat_max=10.0, ess_min=0, warn=False)
    assert lenient.ok
    assert len(lenient.summary) == N_SIGMA
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = diagnose(idata, warn=False)  # problems, but no warning
    assert not quiet.ok


def test_accepts_objects_holding_idata(rng) -> None:
    idata = _idata(rng)
    holder = types.SimpleNamespace(idata=idata)
    diag = diagnose(holder)
    assert diag.ok and diag.idata is idata
    shifted = types.SimpleNamespace(idata=_idata(rng, shift=3.0))
    with pytest.warns(UserWarning, match=r"MCMC diagnostics found 2 problem\(s\)") as record:
        diagnose(shifted)
    assert len(record) == 1


@pytest.mark.parametrize(
    ("obj", "kwargs", "exc", "match"),
    [
        ("not a run", {}, TypeError, "obj must be an xarray.DataTree"),
        (types.SimpleNamespace(idata=None), {}, TypeError, "obj must be"),
        (xr.Dataset(), {}, TypeError, "obj must be"),
        (xr.DataTree(), {}, ValueError, "no posterior"),
        (None, {"rhat_max": 0.9}, ValueError, "rhat_max must be >= 1"),
        (None, {"ess_min": -1}, ValueError, "ess_min must be >= 0"),
    ],
)
def test_bad_input(rng, obj, kwargs, exc, match) -> None:
    obj = _idata(rng) if obj is None else obj
    with pytest.raises(exc, match=match):
        diagnose(obj, **kwargs)


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_trace_plot(rng, tmp_path) -> None:
    diag = diagnose(_idata(rng, named=True), warn=False)
    fig = diag.plot_trace(tmp_path / "trace.png")
    assert (tmp_path / "trace.png").stat().st_size > 0
    assert len(fig.axes) == 4  # two variables × (density, trace)
    # one line per chain and distinct entry of Σ in its trace panel (compact)
    assert max(len(ax.lines) for ax in fig.axes) >= CHAINS * N_SIGMA // 2
    fig = diag.plot_trace(compact=False, var_names=["Sigma"], coords={"arm": ["Comedy"]})
    labels = {text for ax in fig.axes for text in (ax.get_xlabel(), ax.get_ylabel())}
    assert "Sigma[Comedy, weekend, age]" in labels and "Sigma[Comedy, age, weekend]" not in labels
    assert sum(label.startswith("Sigma[Comedy, ") for label in labels) == N_SIGMA // 2
    assert len(fig.axes) == 2 * N_SIGMA // 2
    assert diag.plot_trace(var_names=["mu"]) is not None  # no path: nothing saved, still a figure


def test_forest_plot_labels_rhat_and_ess(rng, tmp_path) -> None:
    diag = diagnose(_idata(rng, shift=3.0, named=True), warn=False)
    fig = diag.plot_forest(tmp_path / "forest.png")
    assert (tmp_path / "forest.png").stat().st_size > 0
    texts = _texts(fig)
    labels = [t for t in texts if t.startswith(("mu", "Sigma["))]
    assert sorted(labels) == sorted(diag.summary.index)  # each distinct entry once, by name
    assert "Sigma[Action, weekend, age]" in labels and "Sigma[Action, age, weekend]" not in labels
    by_column = {ax.get_xticklabels()[0].get_text(): ax for ax in fig.axes if ax.texts}
    assert {"parameter", "R-hat", "ESS bulk"} <= set(by_column)
    rhat_texts = [t.get_text() for t in by_column["R-hat"].texts]
    want = sorted(f"{v:.3f}" for v in diag.summary["r_hat"])
    assert sorted(rhat_texts) == want  # the R-hat column is filled, one value per parameter
    ess_texts = [t.get_text() for t in by_column["ESS bulk"].texts]
    assert sorted(ess_texts) == sorted(f"{v:.0f}" for v in diag.summary["ess_bulk"])
    red = {t.get_text() for t in by_column["R-hat"].texts if t.get_color() == "red"}
    flagged = diag.summary.loc[["mu", "Sigma[Action, weekend, age]"], "r_hat"]
    assert red == {f"{v:.3f}" for v in flagged}
    fig = diag.plot_forest(var_names=["mu"], combined=True)
    assert [t for t in _texts(fig) if t.startswith("mu")] == ["mu"]
