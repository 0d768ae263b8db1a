"""PyMC models: the collapsed likelihood is exact, the LKJ construction is the LKJ prior, and the
collapsed fit agrees with the plain model."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hierbandit.bayes.models import HyperPriors, collapsed_model, constrain_draws, uncollapsed_model
from hierbandit.data import read_log
from hierbandit.stats import collapsed_loglik, marginal_loglik

from .test_fit import synthetic_log


@pytest.fixture(scope="module")
def small_log():
    return read_log(synthetic_log(n_instances=4, n_arms=2, n_features=2, rows=160, seed=3))


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

    log = read_log(synthetic_log(n_instances=3, n_arms=3, n_features=4, rows=60))
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
    prior = fit_prior(df, method="mcmc", draws=1000, tune=1000, chains=2, random_seed=0)
    diag = diagnose(prior, var_names=["Sigma", "sigma"], warn=False)
    assert diag.divergences == 0
    assert diag.max_rhat <= 1.01
    assert diag.min_ess_bulk >= 1000
