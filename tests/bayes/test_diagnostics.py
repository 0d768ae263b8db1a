"""ArviZ diagnostics of MCMC runs: thresholds, naming of the parameters at fault, reports, plots."""

from __future__ import annotations

import types
import warnings

import arviz as az
import numpy as np
import pytest

from hierbandit.bayes import Diagnostics, diagnose

CHAINS, DRAWS = 4, 1000


@pytest.fixture(autouse=True)
def _agg_backend():
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")
    yield
    plt.close("all")


def _idata(rng, *, shift=None, ar=None, diverging=0):
    """Independent normal draws of ``mu`` and ``Sigma`` (2, 3, 3) with named coords.

    ``shift`` moves chain 1 of ``Sigma[0, 1, 2]`` (and of ``mu``) by that much; ``ar`` makes
    ``mu`` an AR(1) chain with that coefficient; ``diverging`` marks that many transitions.
    """
    mu = rng.normal(size=(CHAINS, DRAWS))
    Sigma = rng.normal(size=(CHAINS, DRAWS, 2, 3, 3))
    if shift is not None:
        mu[1] += shift
        Sigma[1, :, 0, 1, 2] += shift
    if ar is not None:
        e = rng.normal(size=(CHAINS, DRAWS))
        for t in range(1, DRAWS):
            e[:, t] = ar * e[:, t - 1] + np.sqrt(1 - ar**2) * e[:, t]
        mu = e
    div = np.zeros((CHAINS, DRAWS), dtype=bool)
    div.flat[:diverging] = True
    return az.from_dict(
        posterior={"mu": mu, "Sigma": Sigma},
        sample_stats={"diverging": div},
        dims={"Sigma": ["arm", "feature", "feature_"]},
    )


def test_well_mixed_run_is_ok(rng) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diag = diagnose(_idata(rng))
    assert isinstance(diag, Diagnostics)
    assert diag.ok and diag.problems == []
    assert diag.divergences == 0
    assert diag.n_chains == CHAINS and diag.n_draws == DRAWS
    assert len(diag.summary) == 1 + 2 * 3 * 3
    assert {"r_hat", "ess_bulk", "ess_tail", "mcse_mean", "mcse_sd"} <= set(diag.summary.columns)
    assert diag.max_rhat < 1.01 and diag.min_ess_bulk > 400
    md = diag.to_markdown()
    assert "MCMC diagnostics: OK" in md and "| parameter |" in md
    assert "ok=True" in repr(diag)


def test_chains_at_different_values_name_the_parameter_and_warn(rng) -> None:
    with pytest.warns(UserWarning, match=r"Sigma\[0, 1, 2\]: r_hat") as record:
        diag = diagnose(_idata(rng, shift=3.0))
    assert len(record) == 1  # one warning listing every problem
    assert "mu: r_hat" in str(record[0].message)
    assert not diag.ok
    named = {p.split(":")[0] for p in diag.problems}
    assert named == {"mu", "Sigma[0, 1, 2]"}
    line = next(p for p in diag.problems if p.startswith("Sigma[0, 1, 2]: r_hat"))
    value = float(line.split(": r_hat ")[1].split()[0])
    assert value > 1.01 and line.endswith("> 1.01")
    assert diag.max_rhat == pytest.approx(diag.summary["r_hat"].max())
    md = diag.to_markdown()
    assert "problem" in md and "Sigma[0, 1, 2]" in md


def test_low_ess_and_divergences_are_problems(rng) -> None:
    with pytest.warns(UserWarning, match="divergences: 5 > 0"):
        diag = diagnose(_idata(rng, ar=0.99, diverging=5), ess_min=400)
    assert diag.divergences == 5
    assert any(p.startswith("mu: ess_bulk") and p.endswith("< 400") for p in diag.problems)
    assert not any(p.startswith("Sigma") for p in diag.problems)


def test_thresholds_and_var_names(rng) -> None:
    idata = _idata(rng, shift=3.0)
    only_mu = diagnose(idata, var_names="mu", warn=False)
    assert list(only_mu.summary.index) == ["mu"]
    assert {p.split(":")[0] for p in only_mu.problems} == {"mu"}
    lenient = diagnose(idata, var_names=["~mu"], rhat_max=10.0, ess_min=0, warn=False)
    assert lenient.ok
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = diagnose(idata, warn=False)  # problems, but no warning
    assert not quiet.ok


def test_accepts_objects_holding_idata(rng) -> None:
    holder = types.SimpleNamespace(idata=_idata(rng))
    assert diagnose(holder).ok


@pytest.mark.parametrize(
    ("obj", "kwargs", "exc", "match"),
    [
        ("not a run", {}, TypeError, "obj must be an arviz.InferenceData"),
        (types.SimpleNamespace(idata=None), {}, TypeError, "obj must be"),
        (az.InferenceData(), {}, ValueError, "no posterior"),
        (None, {"rhat_max": 0.9}, ValueError, "rhat_max must be >= 1"),
        (None, {"ess_min": -1}, ValueError, "ess_min must be >= 0"),
    ],
)
def test_bad_input(rng, obj, kwargs, exc, match) -> None:
    obj = _idata(rng) if obj is None else obj
    with pytest.raises(exc, match=match):
        diagnose(obj, **kwargs)


def test_plots(rng, tmp_path) -> None:
    diag = diagnose(_idata(rng), warn=False)
    fig = diag.plot_trace(tmp_path / "trace.png")
    assert (tmp_path / "trace.png").stat().st_size > 0
    assert len(fig.axes) == 4  # two variables × (density, trace)
    fig = diag.plot_forest(tmp_path / "forest.png", var_names=["mu"])
    assert (tmp_path / "forest.png").stat().st_size > 0
    assert fig.axes
    assert diag.plot_trace(var_names=["mu"]) is not None  # no path: nothing saved, still a figure
