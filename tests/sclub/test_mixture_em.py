"""EM for the user-level mixture of linear regressions (specs/clustering.md D2)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from hierbandit.sclub.mixture_em import fit_mixture_em, user_loglik
from hierbandit.stats.partitions import adjusted_rand_index


def planted(rng, U=45, d=3, K=3, n=12, sigma=0.2, sep=1.0):
    mu = sep * rng.standard_normal((K, d))
    z = np.arange(U) % K
    G = np.zeros((U, d, d))
    b = np.zeros((U, d))
    rr = np.zeros(U)
    N = np.full(U, n)
    raw = []
    for u in range(U):
        X = rng.standard_normal((n, d))
        y = X @ mu[z[u]] + sigma * rng.standard_normal(n)
        G[u], b[u], rr[u] = X.T @ X, X.T @ y, y @ y
        raw.append((X, y))
    return G, b, rr, N, z, mu, raw


def test_user_loglik_matches_brute_force(rng):
    G, b, rr, N, _, _, raw = planted(rng, U=6)
    means = rng.standard_normal((4, 3))
    ll = user_loglik(G, b, rr, N, means, 0.3**2)
    for u, (X, y) in enumerate(raw):
        for k in range(4):
            ref = multivariate_normal(X @ means[k], 0.09 * np.eye(len(y))).logpdf(y)
            assert ll[u, k] == pytest.approx(ref, rel=1e-10)


def test_em_recovers_planted_partition(rng):
    G, b, rr, N, z, mu, _ = planted(rng)
    res = fit_mixture_em(G, b, rr, N, 3, rng=0)
    assert res.converged
    assert adjusted_rand_index(res.labels, z) == 1.0
    assert res.sigma2 == pytest.approx(0.04, rel=0.3)
    # component means match the planted ones up to relabelling
    order = [np.bincount(res.labels[z == k]).argmax() for k in range(3)]
    np.testing.assert_allclose(res.means[order], mu, atol=0.1)
    P = res.coclustering()
    same = z[:, None] == z[None, :]
    assert P[same].min() > 0.99 and P[~same].max() < 0.01
    np.testing.assert_allclose(np.diag(P), 1.0)
    # the objective never decreases
    assert np.all(np.diff(res.history) > -1e-8 * np.abs(res.history[1:]))
    ds = res.to_dataset()
    assert ds["responsibilities"].shape == (45, 3)


def test_sparse_prior_and_bic(rng):
    G, b, rr, N, z, _, _ = planted(rng, sep=1.5)
    over = fit_mixture_em(G, b, rr, N, 8, alpha0=0.5, rng=1)
    assert adjusted_rand_index(over.labels, z) > 0.6
    assert over.weights.sum() == pytest.approx(1.0)
    fits = {k: fit_mixture_em(G, b, rr, N, k, rng=2) for k in (1, 2, 3, 4)}
    bic = {k: f.bic(N.sum()) for k, f in fits.items()}
    assert min(bic, key=bic.get) == 3


def test_users_without_data_follow_the_weights(rng):
    G, b, rr, N, z, _, _ = planted(rng)
    G[0], b[0], rr[0], N[0] = 0.0, 0.0, 0.0, 0
    res = fit_mixture_em(G, b, rr, N, 3, rng=0)
    np.testing.assert_allclose(res.responsibilities[0], res.weights, atol=1e-12)
    assert adjusted_rand_index(res.labels[1:], z[1:]) == 1.0


@pytest.mark.parametrize(
    ("mutate", "exc", "match"),
    [
        (lambda a: {**a, "b": a["b"][:, :2]}, ValueError, "G must have shape"),
        (lambda a: {**a, "rr": a["rr"][:3]}, ValueError, "rr must have shape"),
        (lambda a: {**a, "N": -a["N"]}, ValueError, "non-negative"),
        (lambda a: {**a, "N": a["N"].astype(bool)}, TypeError, "numeric counts"),
        (lambda a: {**a, "b": np.where(a["b"] > 0, np.nan, a["b"])}, ValueError, "finite"),
        (lambda a: {**a, "G": a["G"] + np.triu(np.ones(3), 1)}, ValueError, "symmetric"),
        (lambda a: {**a, "K": 0}, ValueError, "n_components"),
        (lambda a: {**a, "K": 100}, ValueError, "n_components must be <="),
    ],
)
def test_validation(mutate, exc, match, rng):
    G, b, rr, N, _, _, _ = planted(rng, U=9)
    args = mutate({"G": G, "b": b, "rr": rr, "N": N, "K": 2})
    with pytest.raises(exc, match=match):
        fit_mixture_em(args["G"], args["b"], args["rr"], args["N"], args["K"])
    with pytest.raises(ValueError, match="alpha0"):
        fit_mixture_em(G, b, rr, N, 2, alpha0=0.0)
