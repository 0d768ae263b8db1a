"""Sampling vs closed form (docs/bayes.md §6): the fixed-hyperparameter PyMC model.

Fast tests: the model's log density against a brute-force joint Gaussian (every instance, and
with the instances without data collapsed), the closed form's xarray layout, validation, the
prior-object form, and small NUTS runs that must agree with the closed form. Slow tests: the
acceptance criterion of docs/bayes.md §6 on the ebm synthetic setting, and the defaults at 150
instances of a sparse log (docs/decisions/bayes.md, B13).
"""

from __future__ import annotations

import time
import warnings

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import pytest
import scipy.stats as st

from hierbandit.bayes import (
    ClosedFormComparison,
    closed_form_posterior,
    compare_closed_form,
    conditional_model,
    diagnose,
)
from hierbandit.bayes import conditional as conditional_module
from hierbandit.bayes import sampling as sampling_module
from hierbandit.bayes.conditional import CLOSED_FORM_SAMPLER, family_bound, family_tolerance
from hierbandit.data import read_log
from hierbandit.stats import hierarchical_posterior

D = 2
ARM_LABELS = (3, 7)
INSTANCE_LABELS = (10, 20, 30)
# rows per (arm, instance): arm 3 never saw instance 10 and arm 7 never saw instance 30 (empty
# instances), T < d and T > d both occur
SIZES = {3: (0, 2, 8), 7: (5, 1, 0)}
SIGMA2 = np.array([0.7, 1.3])
LAM = 1.0


def _tiny_frame(seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for arm, sizes in SIZES.items():
        for inst, n in zip(INSTANCE_LABELS, sizes, strict=True):
            for _ in range(n):
                x = rng.normal(size=D)
                y = x @ [1.0, -0.5] + rng.normal() * 0.8
                rows.append({"user": inst, "item": arm, "click": y, "age": x[0], "score": x[1]})
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)


def _tiny_sigma() -> np.ndarray:
    b = np.array([1.0, 0.5])
    # arm 3: full rank; arm 7: singular (rank one), which the eigen square root handles exactly
    return np.stack([np.outer(b, b) + np.eye(D), np.outer(b, b)])


def _read(df: pd.DataFrame):
    return read_log(df, instance="user", arm="item", reward="click", features=["age", "score"])


@pytest.fixture(scope="module")
def tiny_log():
    return _read(_tiny_frame())


@pytest.fixture(scope="module")
def tiny_comparison() -> ClosedFormComparison:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a clean run warns about nothing
        return compare_closed_form(
            _tiny_frame(),
            _tiny_sigma(),
            SIGMA2,
            LAM,
            draws=1000,
            tune=500,
            chains=2,
            random_seed=11,
            instance="user",
            arm="item",
            reward="click",
            features=["age", "score"],
        )


# ----------------------------------------------------------------------------- the MCMC run


def test_tiny_comparison_agrees(tiny_comparison: ClosedFormComparison) -> None:
    res = tiny_comparison
    assert res.all_ok, res.worst()
    assert res.verdict == "agree"
    assert res.max_abs_z <= 4.0
    assert res.diagnostics.ok, res.diagnostics.problems
    assert res.diagnostics.divergences == 0
    # the default route: the direct numpyro driver, diagonal mass matrix (B13), the whitened
    # model with the likelihood from each cell's sufficient statistics
    assert res.settings["route"] == CLOSED_FORM_SAMPLER.label()
    assert res.idata["posterior"].attrs["inference_library"] == "numpyro"
    assert res.settings["parameterization"] == "whitened" and res.settings["dense_mass"] is False
    assert res.settings["likelihood"] == "suffstats"
    assert res.settings["collapse_empty"] is True
    assert set(res.settings["timings"]) == {"closed_form", "model", "sampling", "table",
                                            "diagnostics"}  # fmt: skip
    assert "ClosedFormComparison(" in repr(res)


#: the defaults of compare_closed_form before B13: pm.sample with nutpie, non-centred, a dense
#: mass matrix, every (arm, instance) sampled
EARLIER_DEFAULTS = {
    "nuts_sampler": "nutpie",
    "driver": "pymc",
    "parameterization": "noncentered",
    "dense_mass": True,
    "collapse_empty": False,
}


@pytest.mark.parametrize(
    "route",
    [
        pytest.param({"nuts_sampler": "numpyro", "driver": "pymc"}, id="pm-numpyro"),
        pytest.param(EARLIER_DEFAULTS, id="earlier-defaults"),
    ],
)
def test_every_route_agrees_with_the_closed_form(route) -> None:
    """``pm.sample`` with numpyro, and the earlier defaults (``pm.sample`` with nutpie,
    non-centred, dense mass matrix, nothing collapsed), agree with the closed form."""
    res = compare_closed_form(
        _read(_tiny_frame()), _tiny_sigma(), SIGMA2, LAM, draws=1000, tune=500,
        random_seed=5, progressbar=False, **route,
    )  # fmt: skip
    assert res.diagnostics.ok, res.diagnostics.problems
    assert res.all_ok, res.worst()
    assert res.settings["nuts_sampler"] == route["nuts_sampler"]
    if route.get("collapse_empty") is False:
        # the earlier layout: one row per (arm, instance), instances without data included
        assert res.idata.posterior["beta"].dims[2:] == ("arm", "instance", "feature")
        assert "beta[3, 10, age]" in res.table.index
        assert (res.table["n_instances"].dropna() == 1).all()


def test_table_has_one_row_per_parameter(tiny_comparison: ClosedFormComparison) -> None:
    t = tiny_comparison.table
    K, N = len(ARM_LABELS), len(INSTANCE_LABELS)
    assert tiny_comparison.n_params == K * N * D + K * D == len(t)
    assert list(t.columns) == [
        "variable", "arm", "instance", "feature", "n_instances", "closed_mean", "closed_sd",
        "mcmc_mean", "mcmc_sd", "mcse_mean", "mcse_sd", "z_mean", "z_sd", "r_hat", "ess_bulk",
        "ok",
    ]  # fmt: skip
    assert t.index.is_unique
    assert "beta[7, 20, score]" in t.index and "beta0[3, age]" in t.index
    row = t.loc["beta[7, 20, score]"]
    assert (row["arm"], row["instance"], row["feature"]) == (7, 20, "score")
    assert t.loc["beta0[3, age]", "instance"] is None
    # the closed-form columns are the closed form, the z-scores are what they say
    cf = tiny_comparison.closed_form
    assert row["closed_mean"] == cf["mean"].sel(arm=7, instance=20, feature="score").item()
    assert t.loc["beta0[3, age]", "closed_sd"] == pytest.approx(
        cf["shared_sd"].sel(arm=3, feature="age").item()
    )
    z = (t["mcmc_mean"] - t["closed_mean"]) / t["mcse_mean"]
    np.testing.assert_allclose(t["z_mean"], z)
    post = tiny_comparison.idata.posterior
    assert row["mcmc_mean"] == pytest.approx(
        post["beta"].sel(cell="7, 20", feature="score").mean().item()
    )
    # arm 3 never saw instance 10, arm 7 never saw instance 30: one collapsed row each
    assert "beta[3, 10, age]" not in t.index
    empty = t.loc["beta[3, instances without data (n=1), age]"]
    assert empty["instance"] is None and empty["n_instances"] == 1
    assert empty["closed_mean"] == cf["mean"].sel(arm=3, instance=10, feature="age").item()
    assert (t["mcse_mean"] > 0).all() and (t["mcse_sd"] > 0).all()


def test_comparison_extras(tiny_comparison: ClosedFormComparison, tmp_path) -> None:
    res = tiny_comparison
    assert list(res.worst(3).index) == list(
        res.table[["z_mean", "z_sd"]].abs().max(axis=1).nlargest(3).index
    )
    cov = res.covariance_table()
    assert len(cov) == len(ARM_LABELS) * (len(INSTANCE_LABELS) + 1)
    assert (cov["rel_frobenius"] < 0.25).all()
    # empty instance: predictive N(β̂₀, Σ + Φ)
    cf = res.closed_form
    np.testing.assert_allclose(
        cf["cov"].sel(arm=3, instance=10), _tiny_sigma()[0] + cf["shared_cov"].sel(arm=3).values
    )
    fig = res.plot(tmp_path / "cmp.png")
    assert (tmp_path / "cmp.png").stat().st_size > 0
    assert len(fig.axes) == 2
    again = diagnose(res, warn=False)
    assert again.ok and again.n_chains == 2 and again.n_draws == 1000


# ----------------------------------------------------------------------------- the model


def _joint_posterior_reference(log, Sigma, sigma2, lam):
    """Per arm, the exact posterior of (β₀, β_1..β_N) from the arrow precision Q (the joint
    Gaussian of the two-level model, docs/maths/ebm.md §1)."""
    N, d = log.n_instances, log.n_features
    out = []
    for k in range(log.n_arms):
        Si = np.linalg.inv(Sigma[k])
        Q = np.zeros(((N + 1) * d, (N + 1) * d))
        h = np.zeros((N + 1) * d)
        Q[:d, :d] = lam * np.eye(d) + N * Si
        for j in range(N):
            rows = (log.arm == k) & (log.instance == j)
            Xj, yj = log.X[rows], log.y[rows]
            s = slice((j + 1) * d, (j + 2) * d)
            Q[:d, s] = Q[s, :d] = -Si
            Q[s, s] = Si + Xj.T @ Xj / sigma2[k]
            h[s] = Xj.T @ yj / sigma2[k]
        cov = np.linalg.inv(Q)
        out.append(st.multivariate_normal(cov @ h, 0.5 * (cov + cov.T)))
    return out


def _brute_log_joint(log, Sigma, sigma2, lam, beta0, beta):
    """log p(β₀, β, y) by the definition of the model, with scipy densities."""
    lp = 0.0
    for k in range(log.n_arms):
        lp += st.multivariate_normal(np.zeros(log.n_features), np.eye(log.n_features) / lam).logpdf(
            beta0[k]
        )
        for j in range(log.n_instances):
            lp += st.multivariate_normal(beta0[k], Sigma[k]).logpdf(beta[k, j])
    mu = np.array([log.X[t] @ beta[log.arm[t], log.instance[t]] for t in range(len(log.y))])
    lp += st.norm(mu, np.sqrt(sigma2[log.arm])).logpdf(log.y).sum()
    return lp


@pytest.mark.parametrize("parameterization", ["noncentered", "centered"])
def test_logp_is_the_joint_gaussian(tiny_log, parameterization: str) -> None:
    Sigma = np.stack([_tiny_sigma()[0], np.array([[2.0, 0.3], [0.3, 0.5]])])  # full rank
    sigma2, lam = SIGMA2, 0.5
    model = conditional_model(tiny_log, Sigma, sigma2, lam, parameterization=parameterization)
    logp = model.compile_logp()
    beta_of = model.compile_fn(
        model.replace_rvs_by_values([model["beta"]])[0],
        inputs=model.value_vars,
        on_unused_input="ignore",
    )
    posterior = _joint_posterior_reference(tiny_log, Sigma, sigma2, lam)
    rng = np.random.default_rng(5)
    ip = model.initial_point()
    diffs_joint, diffs_post = [], []
    for _ in range(3):
        point = {name: rng.normal(size=ip[name].shape) for name in ip}
        beta = beta_of(point)
        beta0 = point["beta0"]
        lp_model = float(logp(point))
        diffs_joint.append(lp_model - _brute_log_joint(tiny_log, Sigma, sigma2, lam, beta0, beta))
        theta = [np.concatenate([beta0[k], beta[k].ravel()]) for k in range(2)]
        diffs_post.append(
            lp_model - sum(p.logpdf(t) for p, t in zip(posterior, theta, strict=True))
        )
    # the offsets are constants: log|det L| per instance (non-centred) and the log evidence
    np.testing.assert_allclose(np.ptp(diffs_joint), 0.0, atol=1e-8)
    np.testing.assert_allclose(np.ptp(diffs_post), 0.0, atol=1e-8)
    if parameterization == "noncentered":
        half_logdet = 0.5 * np.linalg.slogdet(Sigma)[1].sum() * tiny_log.n_instances
        np.testing.assert_allclose(diffs_joint[0], half_logdet, atol=1e-8)
    else:
        np.testing.assert_allclose(diffs_joint[0], 0.0, atol=1e-8)


def test_model_structure(tiny_log) -> None:
    model = conditional_model(tiny_log, _tiny_sigma(), SIGMA2, LAM)
    assert list(model.coords["arm"]) == list(ARM_LABELS)
    assert list(model.coords["instance"]) == list(INSTANCE_LABELS)
    assert list(model.coords["feature"]) == ["age", "score"]
    assert model.named_vars_to_dims["beta"] == ("arm", "instance", "feature")
    assert model.named_vars_to_dims["beta0"] == ("arm", "feature")
    assert {v.name for v in model.free_RVs} == {"beta0", "z"}
    assert {v.name for v in model.deterministics} == {"beta"}
    assert model["y"].owner is not None and len(model.observed_RVs) == 1
    assert model.named_vars_to_dims["y"] == ("row",)
    np.testing.assert_array_equal(model["X"].get_value(), tiny_log.X)
    # a singular Σ: the prior draws of beta - beta0 stay on the range of Σ (rank one)
    prior = pm.sample_prior_predictive(
        draws=200, model=model, random_seed=0, var_names=["beta", "beta0"]
    )
    dev = (prior.prior["beta"] - prior.prior["beta0"]).sel(arm=7).values.reshape(-1, D)
    b = np.array([1.0, 0.5])
    np.testing.assert_allclose(dev @ np.array([-b[1], b[0]]), 0.0, atol=1e-10)
    centred = conditional_model(tiny_log, _tiny_sigma(), SIGMA2, LAM, parameterization="centered")
    assert {v.name for v in centred.free_RVs} == {"beta0", "eta"}
    prior = pm.sample_prior_predictive(
        draws=200, model=centred, random_seed=0, var_names=["beta", "beta0"]
    )
    dev = (prior.prior["beta"] - prior.prior["beta0"]).sel(arm=7).values.reshape(-1, D)
    np.testing.assert_allclose(dev @ np.array([-b[1], b[0]]), 0.0, atol=1e-10)


def test_flat_hyperprior_when_lam_is_zero(tiny_log) -> None:
    model = conditional_model(tiny_log, _tiny_sigma(), SIGMA2, 0.0)
    assert type(model["beta0"].owner.op).__name__.startswith("Flat")


def test_closed_form_posterior_matches_stats(tiny_log) -> None:
    Sigma = _tiny_sigma()
    cf = closed_form_posterior(tiny_log, Sigma[0], SIGMA2, LAM)  # one Σ for every arm
    assert cf["mean"].dims == ("arm", "instance", "feature")
    assert cf["cov_between"].dims == ("arm", "instance", "instance_", "feature", "feature_")
    assert list(cf["arm"].values) == list(ARM_LABELS)
    np.testing.assert_array_equal(cf["n_rows"].values, [SIZES[3], SIZES[7]])
    for k in range(2):
        X, y, inst = tiny_log.arm_rows(k)
        ref = hierarchical_posterior(X, y, inst, 3, Sigma[0], SIGMA2[k], LAM)
        np.testing.assert_allclose(cf["mean"].isel(arm=k).values, ref["mean"].values)
        np.testing.assert_allclose(cf["cov"].isel(arm=k).values, ref["cov"].values)
        np.testing.assert_allclose(cf["shared_mean"].isel(arm=k).values, ref["shared_mean"].values)
        np.testing.assert_allclose(
            cf["sd"].isel(arm=k).values ** 2,
            np.diagonal(ref["cov"].values, axis1=-2, axis2=-1),
        )
        between = cf["cov_between"].isel(arm=k).values
        np.testing.assert_allclose(between[[0, 1, 2], [0, 1, 2]], ref["cov"].values)


# ----------------------------------------------------------------------------- validation


@pytest.fixture
def no_sampling(monkeypatch):
    def boom(*args, **kwargs):  # pragma: no cover - reaching it is the failure
        raise AssertionError("a sampler or the model was reached")

    monkeypatch.setattr(pm, "sample", boom)
    monkeypatch.setattr(sampling_module, "sample", boom)
    monkeypatch.setattr(conditional_module, "_build_model", boom)
    return boom


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"Sigma": np.eye(3)}, ValueError, r"Sigma must have shape \(2, 2\) or \(2, 2, 2\)"),
        ({"Sigma": np.zeros((3, 2, 2))}, ValueError, "Sigma must have shape"),
        ({"Sigma": np.array([[1.0, 2.0], [2.0, 1.0]])}, ValueError, "Sigma must be positive"),
        ({"Sigma": np.array([[1.0, 0.5], [0.0, 1.0]])}, ValueError, "Sigma must be symmetric"),
        ({"Sigma": np.array([[np.nan, 0.0], [0.0, 1.0]])}, ValueError, "Sigma must be finite"),
        ({"Sigma": "eye"}, TypeError, "Sigma must be numeric"),
        ({"sigma2": 0.0}, ValueError, "sigma2 must be > 0"),
        ({"sigma2": [1.0, -1.0]}, ValueError, "sigma2 must be > 0"),
        ({"sigma2": [1.0, 1.0, 1.0]}, ValueError, r"sigma2 must have shape \(2,\)"),
        ({"lam": -1.0}, ValueError, "lam must be >= 0"),
        ({"lam": float("inf")}, ValueError, "lam must be finite"),
        ({"draws": 0}, ValueError, "draws must be >= 4"),
        ({"chains": 1.5}, TypeError, "chains must be an integer"),
        ({"target_accept": 1.0}, ValueError, "target_accept must be < 1"),
        ({"tolerance": 0.0}, ValueError, "tolerance must be > 0"),
        ({"nuts_sampler": "stan"}, ValueError, "nuts_sampler must be one of"),
        ({"parameterization": "centred"}, ValueError, "parameterization must be one of"),
        ({"dense_mass": "yes"}, TypeError, "dense_mass must be a bool"),
        ({"collapse_empty": "yes"}, TypeError, "collapse_empty must be"),
        ({"driver": "stan"}, ValueError, "driver must be one of"),
        ({"lam": None}, TypeError, r"needs prior, or Sigma, sigma2 and lam: \['lam'\]"),
    ],
)
def test_compare_validates_before_sampling(
    no_sampling, monkeypatch, tiny_log, kwargs, exc, match
) -> None:
    monkeypatch.setattr(conditional_module, "closed_form_posterior", no_sampling)
    args = {"Sigma": np.eye(D), "sigma2": 1.0, "lam": 1.0} | kwargs
    with pytest.raises(exc, match=match):
        compare_closed_form(tiny_log, **args)


def test_conditional_model_validates(tiny_log) -> None:
    with pytest.raises(ValueError, match="Sigma must be positive"):
        conditional_model(tiny_log, -np.eye(D), 1.0, 1.0)
    with pytest.raises(ValueError, match="sigma2 must be > 0"):
        conditional_model(tiny_log, np.eye(D), -1.0, 1.0)
    with pytest.raises(ValueError, match="parameterization"):
        conditional_model(tiny_log, np.eye(D), 1.0, 1.0, parameterization="whatever")


def test_improper_flat_prior_is_rejected_before_sampling(no_sampling, tiny_log) -> None:
    # arm 7 has 6 rows but instance 30 none and a rank-one Σ: with lam = 0 and only one row of
    # a two-dimensional arm the shared mean is not identified
    df = _tiny_frame()
    one_row = pd.concat([df[df["item"] == 3], df[df["item"] == 7].head(1)])
    with pytest.raises(ValueError, match=r"arm 7: .*improper"):
        compare_closed_form(_read(one_row), np.eye(D), 1.0, 0.0)


# ----------------------------------------------------------------------------- collapsing, priors

SPARSE_ARMS = (3, 5, 9)


def _sparse_frame(n: int = 12, seed: int = 3) -> pd.DataFrame:
    """``n`` users (ids 100, 101, …), arms 3, 5 and 9, d = 2; each user has rows in 1 or 2 of the 3 arms,
    1 to 12 rows a cell (data-poor and data-rich cells side by side)."""
    rng = np.random.default_rng(seed)
    beta0 = rng.normal(size=(3, D))
    rows = []
    for j in range(n):
        for k in sorted(rng.choice(3, rng.integers(1, 3), replace=False)):
            b = beta0[k] + 0.7 * rng.normal(size=D)
            for _ in range(rng.integers(1, 13)):
                x = rng.normal(size=D)
                y = x @ b + rng.normal()
                rows.append(
                    {"user": 100 + j, "item": SPARSE_ARMS[k], "click": y, "age": x[0],
                     "score": x[1]}
                )  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def sparse_log():
    return _read(_sparse_frame())


@pytest.fixture(scope="module")
def sparse_prior(sparse_log):
    from hierbandit.bayes import fit_prior

    return fit_prior(sparse_log, method="ml")


@pytest.fixture(scope="module")
def sparse_comparison(sparse_log, sparse_prior) -> ClosedFormComparison:
    """The defaults on a small sparse log, from the prior object."""
    return compare_closed_form(sparse_log, sparse_prior, random_seed=2, progressbar=False)


def _empty_counts(log) -> np.ndarray:
    counts = np.zeros((log.n_arms, log.n_instances), dtype=int)
    np.add.at(counts, (log.arm, log.instance), 1)
    return counts


def test_defaults_agree_on_a_sparse_log(sparse_comparison, sparse_log) -> None:
    res = sparse_comparison
    counts = _empty_counts(sparse_log)
    assert (counts == 0).any(axis=1).all()  # every arm has users without data
    assert res.verdict == "agree", (res.diagnostics.problems, res.worst())
    assert res.settings["lam"] == 0.0  # the ML fit's recorded lam
    # once per arm: the cells with data and one collapsed vector per arm, then beta0
    n_cells = int((counts > 0).sum()) + sparse_log.n_arms
    assert res.n_params == (n_cells + sparse_log.n_arms) * D
    assert res.idata.posterior["beta"].sizes["cell"] == n_cells
    # the default tolerance is the family-wise bound over every z-score of every check (B14):
    # the marginal means and sds, the cross-covariances and the predictive checks
    assert res.tolerance == family_bound(int(res.checks()["z_scores"].sum()))
    assert res.tolerance > family_tolerance(res.n_params)
    assert res.table["ok"].equals(
        (res.table["z_mean"].abs() <= res.tolerance) & (res.table["z_sd"].abs() <= res.tolerance)
    )


def test_the_family_tolerance_keeps_chance_failures_at_one_percent() -> None:
    """Bonferroni over the 2P z-scores: P(max |z| > t) ≤ 1 % for standard normal z-scores, and
    never below the fixed bound 4 (B14). Checked against the exact chance for independent z."""
    from scipy.stats import norm

    assert family_tolerance(1) == family_tolerance(78) == 4.0
    assert family_tolerance(79) > 4.0
    for P, t in ((165, 4.171), (465, 4.401), (1140, 4.592), (2265, 4.733)):
        assert family_tolerance(P) == pytest.approx(t, abs=1e-3)
        chance = 1 - (1 - 2 * norm.sf(family_tolerance(P))) ** (2 * P)
        assert 0.0099 < chance <= 0.01
    assert family_tolerance(1140, alpha=0.05) < family_tolerance(1140)
    with pytest.raises(ValueError, match="alpha"):
        family_tolerance(10, alpha=0.0)


def test_collapsed_rows_are_the_shared_posterior_plus_sigma(sparse_comparison, sparse_log):
    res, t, cf = sparse_comparison, sparse_comparison.table, sparse_comparison.closed_form
    counts = _empty_counts(sparse_log)
    collapsed = t[(t["variable"] == "beta") & t["instance"].isna()]
    assert len(collapsed) == sparse_log.n_arms * D  # once per arm and feature
    for k, arm in enumerate(SPARSE_ARMS):
        n = int((counts[k] == 0).sum())
        for f, feature in enumerate(("age", "score")):
            row = t.loc[f"beta[{arm}, instances without data (n={n}), {feature}]"]
            assert row["arm"] == arm and row["n_instances"] == n
            # the closed form of an instance without data: N(β̂₀, Φ + Σ), the same for all
            cov = cf["shared_cov"].isel(arm=k).values + cf["Sigma"].isel(arm=k).values
            assert row["closed_mean"] == pytest.approx(
                cf["shared_mean"].isel(arm=k, feature=f).item(), rel=1e-12, abs=1e-12
            )
            assert row["closed_sd"] == pytest.approx(np.sqrt(cov[f, f]), rel=1e-12)
            empties = np.flatnonzero(counts[k] == 0)
            np.testing.assert_allclose(
                cf["mean"].isel(arm=k, instance=empties, feature=f), row["closed_mean"],
                rtol=1e-12, atol=1e-12,
            )  # fmt: skip
    # the views count a collapsed vector once too
    assert set(res.worst(len(t)).index) == set(t.index)
    cov_t = res.covariance_table()
    assert len(cov_t) == res.idata.posterior["beta"].sizes["cell"] + sparse_log.n_arms
    assert cov_t.loc[f"beta[3, instances without data (n={(counts[0] == 0).sum()})]",
                     "instance"] is None  # fmt: skip
    fig = res.plot()
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "instances without data" in labels
    # each row's ArviZ figures are its own parameter's
    post = res.idata.posterior
    row = collapsed.iloc[-1]
    cell = f"{row['arm']}, instances without data (n={row['n_instances']})"
    draws = post["beta"].sel(cell=cell, feature=row["feature"])
    assert row["mcmc_sd"] == pytest.approx(float(draws.std(ddof=1)))
    assert row["mcse_mean"] == pytest.approx(float(az.mcse(draws, method="mean")))
    assert row["ess_bulk"] == pytest.approx(float(az.ess(draws, method="bulk")))


@pytest.mark.parametrize("parameterization", ["noncentered", "centered"])
def test_collapsed_logp_is_the_joint_gaussian(tiny_log, parameterization: str) -> None:
    """With the instances without data collapsed the model is the joint density of β₀, the
    cells with data and one vector per arm drawn from N(β₀, Σ)."""
    Sigma = np.stack([_tiny_sigma()[0], np.array([[2.0, 0.3], [0.3, 0.5]])])
    lam = 0.5
    model = conditional_model(
        tiny_log, Sigma, SIGMA2, lam, parameterization=parameterization, collapse_empty=True
    )
    # arm 3 lacks instance 10, arm 7 instance 30
    assert list(model.coords["cell"]) == [
        "3, 20", "3, 30", "7, 10", "7, 20", "3, instances without data (n=1)",
        "7, instances without data (n=1)",
    ]  # fmt: skip
    arm_of = np.array([0, 0, 1, 1, 0, 1])
    inst_of = {(0, 1): 0, (0, 2): 1, (1, 0): 2, (1, 1): 3}
    logp = model.compile_logp()
    beta_of = model.compile_fn(
        model.replace_rvs_by_values([model["beta"]])[0],
        inputs=model.value_vars,
        on_unused_input="ignore",
    )
    rng = np.random.default_rng(8)
    ip = model.initial_point()
    diffs = []
    for _ in range(3):
        point = {name: rng.normal(size=ip[name].shape) for name in ip}
        beta, beta0 = beta_of(point), point["beta0"]
        # the direct driver's NumPy map gives the same coefficients
        mapped = model.hb_meta["constrain"](model, {k: v[None, None] for k, v in point.items()})
        np.testing.assert_allclose(mapped["beta"][0, 0], beta, atol=1e-12)
        lp = sum(
            st.multivariate_normal(np.zeros(D), np.eye(D) / lam).logpdf(beta0[k]) for k in range(2)
        )
        lp += sum(
            st.multivariate_normal(beta0[arm_of[c]], Sigma[arm_of[c]]).logpdf(beta[c])
            for c in range(6)
        )
        cell = np.array(
            [inst_of[(a, j)] for a, j in zip(tiny_log.arm, tiny_log.instance, strict=True)]
        )
        mu = np.einsum("td,td->t", tiny_log.X, beta[cell])
        lp += st.norm(mu, np.sqrt(SIGMA2[tiny_log.arm])).logpdf(tiny_log.y).sum()
        diffs.append(float(logp(point)) - lp)
    np.testing.assert_allclose(np.ptp(diffs), 0.0, atol=1e-8)
    if parameterization == "noncentered":
        np.testing.assert_allclose(
            diffs[0], 0.5 * (3 * np.linalg.slogdet(Sigma)[1]).sum(), atol=1e-8
        )
    else:
        np.testing.assert_allclose(diffs[0], 0.0, atol=1e-8)


def test_prior_object_equals_explicit_hyperparameters(sparse_log, sparse_prior) -> None:
    short = {"draws": 60, "tune": 60, "random_seed": 9, "progressbar": False, "warn": False}
    by_prior = compare_closed_form(sparse_log, sparse_prior, **short)
    by_keyword = compare_closed_form(sparse_log, prior=sparse_prior, **short)
    explicit = compare_closed_form(
        sparse_log, sparse_prior.Sigma, sparse_prior.sigma2, 0.0, **short
    )
    pd.testing.assert_frame_equal(by_prior.table, explicit.table)
    pd.testing.assert_frame_equal(by_keyword.table, explicit.table)
    assert by_prior.closed_form.identical(explicit.closed_form)


class _Stop(Exception):
    pass


@pytest.fixture
def captured(monkeypatch):
    """The model and configuration of the next ``sample`` call, which is not run."""
    got = {}

    def fake(model, sampler=None, **kwargs):
        got["model"], got["config"], got["kwargs"] = model, sampler, kwargs
        raise _Stop

    monkeypatch.setattr(sampling_module, "sample", fake)
    return got


def test_prior_lam_and_order(captured, sparse_log, sparse_prior) -> None:
    # lam from the prior's provenance (the ML fit records 0: a flat prior on β₀) unless given
    with pytest.raises(_Stop):
        compare_closed_form(sparse_log, sparse_prior)
    assert captured["config"] == CLOSED_FORM_SAMPLER
    assert captured["kwargs"] == {"dense_mass": False}
    # the whitened model: flat ζ and ξ, beta0 = m + Tζ, the priors as potentials
    model = captured["model"]
    assert {v.name for v in model.free_RVs} == {"zeta", "xi"}
    assert {v.name for v in model.potentials} == {"u_prior", "loglik"}  # no prior on β₀
    with pytest.raises(_Stop):
        compare_closed_form(sparse_log, sparse_prior, lam=0.5)
    assert {v.name for v in captured["model"].potentials} == {"beta0_prior", "u_prior", "loglik"}
    # a prior whose arms and features are in another order is read in the log's order
    from hierbandit.bayes import HierarchicalPrior

    ds = sparse_prior.dataset
    flipped = HierarchicalPrior(
        ds.isel(arm=[2, 0, 1], feature=[1, 0], feature_=[1, 0]), sparse_prior.idata
    )
    S1, s1, lam1 = conditional_module._from_prior(sparse_prior, sparse_log, None)
    S2, s2, lam2 = conditional_module._from_prior(flipped, sparse_log, None)
    np.testing.assert_array_equal(S1, S2)
    np.testing.assert_array_equal(s1, s2)
    assert lam1 == lam2 == 0.0


def test_mismatched_prior_is_rejected_naming_prior(no_sampling, sparse_log, sparse_prior):
    from hierbandit.bayes import HierarchicalPrior, fit_prior

    df = _sparse_frame()
    two_arms = fit_prior(_read(df[df["item"] != 9]), method="ml")
    with pytest.raises(ValueError, match=r"prior does not match the log: its arms are \[3, 5\]"):
        compare_closed_form(sparse_log, two_arms)
    renamed = HierarchicalPrior(
        sparse_prior.dataset.assign_coords(feature=["age", "x"], feature_=["age", "x"])
    )
    with pytest.raises(ValueError, match="prior does not match the log: its features"):
        compare_closed_form(sparse_log, renamed)
    with pytest.raises(TypeError, match="prior must be a HierarchicalPrior"):
        compare_closed_form(sparse_log, prior={"Sigma": np.eye(D)})
    with pytest.raises(TypeError, match="prior replaces Sigma and sigma2"):
        compare_closed_form(sparse_log, sparse_prior, 1.0)
    with pytest.raises(TypeError, match="give the prior once"):
        compare_closed_form(sparse_log, sparse_prior, prior=sparse_prior)
    bare = HierarchicalPrior(sparse_prior.dataset.drop_attrs())
    with pytest.raises(ValueError, match="lam is required: prior records no lam"):
        compare_closed_form(sparse_log, bare)


# ----------------------------------------------------------------------------- lazy imports


# ----------------------------------------------------------------------------- slow: docs/bayes.md §6


def _ebm_synthetic_log(seed: int = 0):
    """N = 10, K = 5, d = 3, 2,000 rows of a uniform-random policy on the ebm environment."""
    from hierbandit.ebm.env import HierarchicalLinearEnv

    env = HierarchicalLinearEnv(10, 5, 3, rng=seed)
    T = 2000
    ro = env.rollout(T, rng=seed + 1)
    arm = np.random.default_rng(seed + 2).integers(0, env.n_arms, size=T)
    df = pd.DataFrame(
        {
            "instance": ro.instance,
            "arm": arm,
            "reward": ro.reward[np.arange(T), arm],
            **{f"x{i}": ro.context[:, i] for i in range(env.n_features)},
        }
    )
    return env, read_log(df, features=[f"x{i}" for i in range(env.n_features)])


@pytest.mark.slow
def test_mcmc_matches_closed_form_on_the_ebm_setting() -> None:
    env, log = _ebm_synthetic_log()
    assert log.n_instances == 10 and log.n_arms == 5 and log.n_features == 3
    start = time.perf_counter()
    res = compare_closed_form(
        log, env.Sigma, 1.0, 1e-3, draws=4000, tune=1000, chains=2, random_seed=2026, ess_min=1000
    )
    wall = time.perf_counter() - start
    worst = res.worst(3)
    print(
        f"\nebm setting, {res.n_params} parameters: wall {wall:.1f} s (sampling "
        f"{res.settings['wall_time']:.1f} s), max |z| = {res.max_abs_z:.2f}, "
        f"max R-hat = {res.diagnostics.max_rhat:.4f}, min bulk ESS = "
        f"{res.diagnostics.min_ess_bulk:.0f}, divergences = {res.diagnostics.divergences}\n"
        f"{worst[['z_mean', 'z_sd', 'ess_bulk']]}"
    )
    # sampler health first: a failure here is a sampler problem, not a formula mismatch
    assert res.diagnostics.divergences == 0
    assert res.diagnostics.max_rhat <= 1.01
    assert res.diagnostics.min_ess_bulk >= 1000
    assert res.diagnostics.ok, res.diagnostics.problems
    # every instance coefficient and every shared mean within 4 MCSE (and every sd)
    assert res.n_params == 5 * 10 * 3 + 5 * 3
    assert res.all_ok, worst
    assert res.verdict == "agree"
    cov = res.covariance_table()
    print(f"max relative Frobenius error of the covariances: {cov['rel_frobenius'].max():.3f}")
    assert (cov.loc[cov.index.str.startswith("beta["), "rel_frobenius"] <= 0.1).all(), cov
    assert (cov["rel_frobenius"] <= 0.1).all(), cov


@pytest.mark.slow
def test_centered_parameterization_matches_closed_form() -> None:
    env, log = _ebm_synthetic_log()
    res = compare_closed_form(
        log, env.Sigma, 1.0, 1e-3, draws=2000, parameterization="centered", dense_mass=False,
        random_seed=7, ess_min=1000,
    )  # fmt: skip
    assert res.diagnostics.ok, res.diagnostics.problems
    assert res.all_ok, res.worst()


@pytest.mark.slow
def test_pymc_sampler_on_tiny_data() -> None:
    res = compare_closed_form(
        _read(_tiny_frame()), _tiny_sigma(), SIGMA2, LAM, draws=2000, tune=1000,
        nuts_sampler="pymc", random_seed=3, cores=1,
    )  # fmt: skip
    assert res.all_ok, res.worst()
    assert res.diagnostics.divergences == 0


def _movielens_like_frame(n: int, seed: int = 0) -> pd.DataFrame:
    """K = 5 arms, d = 3 (intercept and two features); every instance has rows in 2 or 3 arms,
    1 + NegBin(1, 0.1) rows a cell (as ``benchmarks/bench_closed_form.py``)."""
    g = np.random.default_rng(seed)
    K, d = 5, 3
    beta = (
        g.normal(size=(K, 1, d))
        + g.normal(size=(K, n, d)) @ np.linalg.cholesky(0.5 * np.eye(d) + 0.1).T
    )
    cells = [(j, int(k)) for j in range(n) for k in g.choice(K, g.integers(2, 4), replace=False)]
    sizes = 1 + g.negative_binomial(1, 0.1, size=len(cells))
    inst = np.repeat([c[0] for c in cells], sizes)
    arm = np.repeat([c[1] for c in cells], sizes)
    X = np.column_stack([np.ones(inst.size), g.normal(size=(inst.size, d - 1))])
    y = np.einsum("rd,rd->r", X, beta[arm, inst]) + g.normal(size=inst.size)
    return pd.DataFrame({"instance": inst, "arm": arm, "reward": y, "x0": X[:, 0],
                         "x1": X[:, 1], "x2": X[:, 2]})  # fmt: skip


@pytest.mark.slow
def test_defaults_at_150_instances_of_a_sparse_log() -> None:
    """The issue's size: 150 instances, K = 5, d = 3, rows in 2-3 arms of 5 (B13)."""
    from hierbandit.bayes import fit_prior

    log = read_log(_movielens_like_frame(150), features=["x0", "x1", "x2"])
    prior = fit_prior(log, method="ml")
    start = time.perf_counter()
    res = compare_closed_form(log, prior, progressbar=False, random_seed=1)
    wall = time.perf_counter() - start
    print(f"\n150 instances: {wall:.1f} s, {res!r}, timings {res.settings['timings']}")
    # a healthy run whose z-scores look standard normal; with about 2,300 z-scores a bound of
    # 4 fails by chance about once in seven runs (docs/bayes.md, section 6), so the verdict is
    # not asserted: this log and seed agree (max |z| 3.46, B13)
    assert res.diagnostics.ok, res.diagnostics.problems
    assert 0.9 < res.table["z_mean"].std() < 1.1 and 0.9 < res.table["z_sd"].std() < 1.1
    assert res.max_abs_z < 5.0, res.worst()
    collapsed = res.table[(res.table["variable"] == "beta") & res.table["instance"].isna()]
    assert len(collapsed) == 5 * 3
    assert collapsed["n_instances"].sum() == 3 * int((_empty_counts(log) == 0).sum())
