"""PyMC models: the collapsed likelihood is exact, the LKJ construction is the LKJ prior, and the
collapsed fit agrees with the plain model."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hierbandit.bayes.models import HyperPriors, collapsed_model, constrain_draws, uncollapsed_model
from hierbandit.data import read_log
from hierbandit.stats import collapsed_loglik, marginal_loglik

from .test_fit import features, synthetic_hlog, synthetic_log


@pytest.fixture(scope="module")
def small_log():
    return synthetic_hlog(n_instances=4, n_arms=2, n_features=2, rows=160, seed=3)


def _point(model, rng):
    """A random point in the unconstrained space and the constrained values it maps to."""
    ip = model.initial_point()
    raw = {k: v + rng.uniform(-0.5, 0.5, np.shape(v)) for k, v in ip.items()}
    cons = constrain_draws(model, {k: np.asarray(v)[None, None] for k, v in raw.items()})
    return raw, {k: v[0, 0] for k, v in cons.items()}


@pytest.mark.parametrize("algebra", ["batched", "soa"])
def test_collapsed_potential_is_the_exact_marginal_likelihood(small_log, algebra):
    hyper = HyperPriors(lam=0.05)
    model = collapsed_model(small_log, hyper=hyper, algebra=algebra)
    pot = model.compile_logp(vars=model.potentials, jacobian=False)
    st = small_log.suffstats()
    rng = np.random.default_rng(0)
    for _ in range(3):
        raw, cons = _point(model, rng)
        got = float(pot(raw))
        want = sum(
            collapsed_loglik(
                st.G[k], st.b[k], st.q[k], st.n[k], cons["Sigma"][k], cons["sigma"][k] ** 2, 0.05
            )
            for k in range(small_log.n_arms)
        )
        assert got == pytest.approx(want, rel=1e-9)


def test_the_default_algebra_is_unrolled_for_small_d(small_log):
    """``algebra="auto"`` (the default) unrolls the d×d algebra up to d = 8 and batches it
    above (docs/decisions/bayes.md, B12)."""
    from hierbandit.bayes._batched import UNROLL_MAX

    assert collapsed_model(small_log).hb_meta["algebra"] == "soa"
    wide = synthetic_hlog(n_instances=3, n_arms=1, n_features=UNROLL_MAX + 1, rows=60, seed=1)
    assert collapsed_model(wide).hb_meta["algebra"] == "batched"
    assert collapsed_model(wide, algebra="soa").hb_meta["algebra"] == "soa"


def test_collapsed_with_sampled_shared_mean_is_the_marginal_likelihood(small_log):
    model = collapsed_model(small_log, collapse_shared_mean=False)
    pot = model.compile_logp(vars=model.potentials, jacobian=False)
    st = small_log.suffstats()
    raw, cons = _point(model, np.random.default_rng(1))
    want = sum(
        marginal_loglik(
            st.G[k],
            st.b[k],
            st.q[k],
            st.n[k],
            cons["beta0"][k],
            cons["Sigma"][k],
            cons["sigma"][k] ** 2,
        )
        for k in range(small_log.n_arms)
    )
    assert float(pot(raw)) == pytest.approx(want, rel=1e-9)


def test_lkj_construction_has_the_lkj_marginals():
    """Under LKJ(η) every correlation is 2·Beta(η − 1 + d/2) − 1 (prior forward draws)."""
    import pymc as pm

    log = synthetic_hlog(n_instances=3, n_arms=3, n_features=4, rows=60)
    model = collapsed_model(log, hyper=HyperPriors(lkj_eta=2.0))
    draws = pm.draw(model["Sigma"], draws=3000, random_seed=1)  # (draws, K, d, d)
    sd = np.sqrt(np.diagonal(draws, axis1=-2, axis2=-1))
    corr = draws / (sd[..., :, None] * sd[..., None, :])
    a = 2.0 - 1.0 + 4 / 2.0
    for i, j in [(1, 0), (2, 0), (3, 1), (3, 2)]:
        r = corr[:, :, i, j].ravel()
        p = stats.kstest((r + 1) / 2, stats.beta(a, a).cdf).pvalue
        assert p > 1e-3, (i, j, p)


def test_uncollapsed_logp_matches_row_likelihood(small_log):
    model = uncollapsed_model(small_log)
    assert {"beta0", "z", "Sigma_sd", "sigma"} <= {v.name for v in model.free_RVs}


@pytest.mark.slow
def test_collapsed_and_uncollapsed_hyperparameter_posteriors_agree(small_log):
    """Issue criterion: the two models agree on Σ and σ within a few Monte-Carlo standard errors."""
    import arviz as az

    from hierbandit.bayes.sampling import sample

    hyper = HyperPriors(lam=0.01)
    kw = {"draws": 4000, "tune": 1500, "chains": 2, "target_accept": 0.95}
    a = sample(collapsed_model(small_log, hyper=hyper), random_seed=1, **kw)
    b = sample(uncollapsed_model(small_log, hyper=hyper), random_seed=2, **kw)
    for var in ("Sigma", "sigma"):
        sa, sb = az.summary(a, var_names=[var]), az.summary(b, var_names=[var])
        z = (sa["mean"] - sb["mean"]) / np.sqrt(sa["mcse_mean"] ** 2 + sb["mcse_mean"] ** 2)
        assert np.all(np.abs(z.dropna()) < 4.5), z.abs().max()
    assert int(a.sample_stats.diverging.sum()) == 0


@pytest.mark.slow
def test_ebm_synthetic_fit_is_clean():
    """Issue criterion: on the ebm synthetic setting (N = 10, K = 5, d = 3, T = 2,000) the
    collapsed fit has no divergences and R-hat ≤ 1.01, with bulk ESS ≥ 1,000."""
    from hierbandit.bayes import diagnose, fit_prior

    df = synthetic_log(n_instances=10, n_arms=5, n_features=3, rows=2000, seed=0)
    prior = fit_prior(
        df, features=features(df), method="mcmc", draws=1000, tune=1000, chains=2, random_seed=0
    )
    diag = diagnose(prior, var_names=["Sigma", "sigma"], warn=False)
    assert diag.divergences == 0
    assert diag.max_rhat <= 1.01
    assert diag.min_ess_bulk >= 1000


# ---------------------------------------------------------------------- model checking
def _draws(log, S, rng, singular=False):
    K, d = log.n_arms, log.n_features
    W = rng.normal(size=(S, K, d, d if not singular else 1))
    Sigma = 0.3 * W @ np.swapaxes(W, -1, -2)
    return rng.normal(size=(S, K, d)), Sigma, rng.random((S, K)) + 0.5


@pytest.mark.parametrize("singular", [False, True])
def test_instance_loglik_is_the_joint_gaussian_density_of_the_rows(small_log, singular):
    """Per draw and instance: Σ_k log N(y_kj; X_kjβ_k0, σ_k²I + X_kjΣ_kX_kjᵀ) from the raw rows
    (a rank-one Σ too); an arm without rows for the instance contributes nothing."""
    from hierbandit.bayes.models import instance_loglik

    rng = np.random.default_rng(2)
    beta0, Sigma, sigma = _draws(small_log, 3, rng, singular)
    got = instance_loglik(small_log, beta0, Sigma, sigma)
    assert got.shape == (3, small_log.n_instances)
    want = np.zeros_like(got)
    for s in range(3):
        for k in range(small_log.n_arms):
            for j in range(small_log.n_instances):
                rows = (small_log.arm == k) & (small_log.instance == j)
                X, y = small_log.X[rows], small_log.y[rows]
                cov = sigma[s, k] ** 2 * np.eye(len(y)) + X @ Sigma[s, k] @ X.T
                want[s, j] += stats.multivariate_normal(X @ beta0[s, k], cov).logpdf(y)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    # leading sample axes of any shape
    np.testing.assert_allclose(
        instance_loglik(small_log, beta0[None], Sigma[None], sigma[None])[0], got, rtol=1e-14
    )


def test_instance_loglik_over_several_blocks_with_empty_cells():
    """More instances than one block of the vectorised kernel (128), a partial last block and
    cells without rows: the joint Gaussian density of the rows, instance by instance."""
    from hierbandit.bayes.models import instance_loglik

    df = synthetic_log(n_instances=150, n_arms=2, n_features=3, rows=1500, seed=6)
    df = df[~((df["arm"] == 1) & (df["instance"] % 4 == 0))]
    log = read_log(df, features=features(df))
    assert (log.suffstats().n == 0).any()
    rng = np.random.default_rng(8)
    beta0, Sigma, sigma = _draws(log, 2, rng)
    got = instance_loglik(log, beta0, Sigma, sigma)
    want = np.zeros_like(got)
    for s in range(2):
        for k in range(log.n_arms):
            for j in range(log.n_instances):
                rows = (log.arm == k) & (log.instance == j)
                if not rows.any():
                    continue
                X, y = log.X[rows], log.y[rows]
                cov = sigma[s, k] ** 2 * np.eye(len(y)) + X @ Sigma[s, k] @ X.T
                want[s, j] += stats.multivariate_normal(X @ beta0[s, k], cov).logpdf(y)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_instance_loglik_is_the_same_whatever_the_split_over_threads(small_log, monkeypatch):
    """The draws are split over the cores: one thread or many, the same numbers."""
    from hierbandit.bayes import models
    from hierbandit.stats import threads

    beta0, Sigma, sigma = _draws(small_log, 7, np.random.default_rng(4), False)
    got = {}
    for n in (1, 2, 5):
        monkeypatch.setattr(threads, "available_threads", lambda n=n: n)
        got[n] = models.instance_loglik(small_log, beta0, Sigma, sigma)
    np.testing.assert_array_equal(got[1], got[2])
    np.testing.assert_array_equal(got[1], got[5])


def test_instance_loglik_sums_to_the_potential_with_the_shared_mean_given(small_log):
    """Summed over instances at fixed (β₀, Σ, σ): the collapsed model's potential with beta0."""
    from hierbandit.bayes.models import instance_loglik

    model = collapsed_model(small_log, collapse_shared_mean=False)
    pot = model.compile_logp(vars=model.potentials, jacobian=False)
    raw, cons = _point(model, np.random.default_rng(3))
    ll = instance_loglik(small_log.suffstats(), cons["beta0"], cons["Sigma"], cons["sigma"])
    assert ll.shape == (small_log.n_instances,)
    assert ll.sum() == pytest.approx(float(pot(raw)), rel=1e-10)


def test_observed_cells_hold_the_sufficient_statistics_of_the_non_empty_cells():
    import pandas as pd

    from hierbandit.bayes.models import observed_cells

    df = synthetic_log(n_instances=4, n_arms=2, n_features=2, rows=120, seed=5)
    df = df[~((df["arm"] == 1) & (df["instance"] == 2))]  # one empty cell
    log = read_log(df, features=features(df))
    obs = observed_cells(log)
    assert obs.sizes["cell"] == 7 and list(obs.data_vars) == ["mean_reward"]
    for c in range(7):
        k, j = int(obs["cell_arm"][c]), int(obs["cell_instance"][c])
        rows = df[(df["arm"] == k) & (df["instance"] == j)]
        X = rows[["x0", "x1"]].to_numpy()
        r = rows["reward"].to_numpy()
        assert int(obs["n_rows"][c]) == len(rows)
        np.testing.assert_allclose(obs["sum_xx"][c], X.T @ X, rtol=1e-12)
        np.testing.assert_allclose(obs["sum_xr"][c], X.T @ r, rtol=1e-12)
        assert float(obs["sum_rr"][c]) == pytest.approx(r @ r, rel=1e-12)
        np.testing.assert_allclose(obs["mean_x"][c], X.mean(axis=0), rtol=1e-12)
        assert float(obs["mean_reward"][c]) == pytest.approx(r.mean(), rel=1e-12)
    assert isinstance(obs.to_dataframe(), pd.DataFrame)


def test_cell_mean_predictive_has_the_mean_and_spread_of_a_replicated_cell_mean(small_log):
    """x̄ᵀβ_kj + N(0, σ_k²/n): the mean of the cell's rows replicated with the same contexts."""
    from hierbandit.bayes.models import cell_mean_predictive, observed_cells

    obs = observed_cells(small_log)
    K, N, d = small_log.n_arms, small_log.n_instances, small_log.n_features
    beta = np.random.default_rng(4).normal(size=(K, N, d))
    sigma = np.array([0.5, 2.0])
    S = 40_000
    draws = cell_mean_predictive(
        obs,
        np.broadcast_to(beta, (S, K, N, d)),
        np.broadcast_to(sigma, (S, K)),
        small_log.arm_labels,
        small_log.instance_labels,
        rng=0,
    )
    k, j = obs["cell_arm"].values, obs["cell_instance"].values
    mean = np.einsum("cd,cd->c", beta[k, j], obs["mean_x"].values)
    sd = sigma[k] / np.sqrt(obs["n_rows"].values)
    np.testing.assert_allclose(draws.mean(axis=0), mean, atol=5 * sd.max() / np.sqrt(S))
    np.testing.assert_allclose(draws.std(axis=0), sd, rtol=0.03)


def test_model_checks_need_the_shared_mean_draws(small_log):
    import arviz as az

    from hierbandit.bayes.models import add_model_checks

    rng = np.random.default_rng(0)
    idata = az.from_dict(
        {"posterior": {"Sigma": rng.random((1, 5, 2, 2, 2)), "sigma": rng.random((1, 5, 2))}},
        dims={"Sigma": ["arm", "feature", "feature_"], "sigma": ["arm"]},
    )
    with pytest.raises(ValueError, match=r"no \['beta0'\].*add_conditional_draws"):
        add_model_checks(idata, small_log)
