"""PyMC user-level mixture of linear regressions (docs/sclub.md, The Bayesian audit)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from hierbandit.bayes.sclub import fit_mixture, mixture_loglik, mixture_model, posterior_summary
from hierbandit.stats.partitions import adjusted_rand_index


def data(rng, U=24, d=2, n=12, sigma=0.2):
    mu = np.array([[1.0, 0.0], [-1.0, 0.5], [0.0, -1.0]])[:, :d]
    z = np.arange(U) % 3
    G = np.zeros((U, d, d))
    b = np.zeros((U, d))
    rr = np.zeros(U)
    raw = []
    for u in range(U):
        X = rng.standard_normal((n, d))
        y = X @ mu[z[u]] + sigma * rng.standard_normal(n)
        G[u], b[u], rr[u] = X.T @ X, X.T @ y, y @ y
        raw.append((X, y))
    return G, b, rr, np.full(U, n), z, raw


@pytest.mark.parametrize("partial", [False, True])
def test_numpy_loglik_matches_brute_force(partial, rng):
    G, b, rr, N, _, raw = data(rng, U=5)
    mu = rng.standard_normal((3, 2))
    sigma, tau = 0.3, (0.4 if partial else None)
    ll = mixture_loglik(G, b, rr, N, mu, sigma, tau)
    for u, (X, y) in enumerate(raw):
        cov = sigma**2 * np.eye(len(y)) + (tau**2 * X @ X.T if partial else 0.0)
        for k in range(3):
            assert ll[u, k] == pytest.approx(multivariate_normal(X @ mu[k], cov).logpdf(y))
    # batched over draws
    many = mixture_loglik(
        G,
        b,
        rr,
        N,
        np.stack([mu, 2 * mu]),
        np.array([sigma, 0.5]),
        None if tau is None else np.array([tau, 0.1]),
    )
    np.testing.assert_allclose(many[0], ll)


@pytest.mark.parametrize("kind", ["exact", "partial"])
def test_model_potential_is_the_per_user_marginal(kind, rng):
    """The PyMC potential equals Σ_u logsumexp_k(log w_k + ℓ_uk): z marginalised per user."""
    G, b, rr, N, _, _ = data(rng, U=6)
    model = mixture_model(G, b, rr, N, 3, kind=kind)
    assert model.hb_meta["trace_vars"][:3] == ["w", "mu", "sigma"]
    point = {
        k: v + 0.3 * rng.standard_normal(np.shape(v)) for k, v in model.initial_point().items()
    }
    pot = model.compile_fn(
        model.replace_rvs_by_values([model.potentials[0]])[0],
        inputs=model.value_vars,
        point_fn=True,
    )(point)
    rvs = [model["w"], model["mu"], model["sigma"]] + ([model["tau"]] if kind == "partial" else [])
    vals = model.compile_fn(
        model.replace_rvs_by_values(rvs), inputs=model.value_vars, point_fn=True
    )(point)
    ll = mixture_loglik(G, b, rr, N, vals[1], vals[2], vals[3] if kind == "partial" else None)
    assert float(pot) == pytest.approx(logsumexp(np.log(vals[0])[None] + ll, axis=1).sum())


def test_nuts_recovers_planted_partition(rng):
    G, b, rr, N, z, _ = data(rng)
    model = mixture_model(G, b, rr, N, 3, alpha0=1.0)
    idata = fit_mixture(model, draws=200, tune=200, chains=2, random_seed=1)
    summ = posterior_summary(idata, G, b, rr, N)
    assert adjusted_rand_index(summ["partition"].values, z) == 1.0
    P = summ["coclustering"].values
    same = z[:, None] == z[None, :]
    assert P[same].min() > 0.95 and P[~same].max() < 0.05
    assert np.all(summ["n_occupied"].values == 3)
    assert np.all(np.isfinite(summ["gap"].values)) and summ["gap"].median() > 1.0


def test_validation(rng):
    G, b, rr, N, _, _ = data(rng, U=3)
    with pytest.raises(ValueError, match="kind"):
        mixture_model(G, b, rr, N, 2, kind="soft")
    with pytest.raises(ValueError, match="alpha0"):
        mixture_model(G, b, rr, N, 2, alpha0=-1.0)
    with pytest.raises(ValueError, match="G must have shape"):
        mixture_model(G[:, :1], b, rr, N, 2)
    with pytest.raises(ValueError, match="method"):
        fit_mixture(mixture_model(G, b, rr, N, 2), method="mh")
