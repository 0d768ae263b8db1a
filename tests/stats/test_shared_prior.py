"""An informative prior N(m0, S0) on the shared mean (warm starts from fitted priors)."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.stats import posterior_given_hyper, suffstats


def _brute_force(G, b, Sigma, sigma2, m0, S0):
    N, d = b.shape
    Si = np.linalg.inv(Sigma)
    S0i = np.linalg.inv(S0)
    Q = np.zeros(((N + 1) * d, (N + 1) * d))
    h = np.zeros((N + 1) * d)
    Q[:d, :d] = S0i + N * Si
    h[:d] = S0i @ m0
    for j in range(N):
        sl = slice((j + 1) * d, (j + 2) * d)
        Q[:d, sl] = -Si
        Q[sl, :d] = -Si
        Q[sl, sl] = Si + G[j] / sigma2
        h[sl] = b[j] / sigma2
    C = np.linalg.inv(Q)
    return C @ h, C


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_informative_shared_prior_matches_joint_gaussian(seed):
    rng = np.random.default_rng(seed)
    d, sizes = 3, [0, 2, 5, 40]
    N = len(sizes)
    X = rng.normal(size=(sum(sizes), d))
    inst = np.repeat(np.arange(N), sizes)
    y = rng.normal(size=len(X))
    st = suffstats(X, y, inst, N)
    v = rng.normal(size=d)
    Sigma = np.outer(v, v) + 0.5 * np.eye(d)
    m0 = rng.normal(size=d)
    W = rng.normal(size=(d, d))
    S0 = W @ W.T + 0.1 * np.eye(d)
    post = posterior_given_hyper(st.G, st.b, Sigma, 0.6, 123.0, shared_prior=(m0, S0))
    mean, cov = _brute_force(st.G, st.b, Sigma, 0.6, m0, S0)
    np.testing.assert_allclose(post.shared_mean, mean[:d], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(post.shared_cov, cov[:d, :d], rtol=1e-9, atol=1e-12)
    for j in range(N):
        sl = slice((j + 1) * d, (j + 2) * d)
        np.testing.assert_allclose(post.mean[j], mean[sl], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(post.cov[j], cov[sl, sl], rtol=1e-9, atol=1e-12)
    # the empty instance's predictive: N(β̂0, Σ + Φ)
    np.testing.assert_allclose(post.cov[0], Sigma + post.shared_cov, rtol=1e-10)


def test_no_data_gives_the_prior():
    d = 2
    m0, S0 = np.array([1.0, -2.0]), np.array([[2.0, 0.3], [0.3, 1.0]])
    post = posterior_given_hyper(
        np.zeros((3, d, d)), np.zeros((3, d)), np.eye(d), 1.0, 1.0, shared_prior=(m0, S0)
    )
    np.testing.assert_allclose(post.shared_mean, m0)
    np.testing.assert_allclose(post.shared_cov, S0, rtol=1e-12)
    np.testing.assert_allclose(post.mean, np.tile(m0, (3, 1)))


@pytest.mark.parametrize(
    ("shared_prior", "exc", "name"),
    [
        (([0.0, 0.0], np.zeros((2, 2))), ValueError, "shared_prior cov"),
        (([0.0], np.eye(2)), ValueError, "shared_prior mean"),
        (([0.0, np.nan], np.eye(2)), ValueError, "shared_prior mean"),
        ((np.zeros(2),), TypeError, "shared_prior"),
        (([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]]), ValueError, "shared_prior cov"),
    ],
)
def test_shared_prior_validation(shared_prior, exc, name):
    with pytest.raises(exc, match=name):
        posterior_given_hyper(
            np.zeros((1, 2, 2)), np.zeros((1, 2)), np.eye(2), 1.0, 1.0, shared_prior=shared_prior
        )


def test_flat_prior_without_identifying_data_raises():
    G = np.zeros((2, 2, 2))
    G[0] = np.diag([1.0, 0.0])  # the second coordinate of the shared mean is never observed
    with pytest.raises(ValueError, match="lam"):
        posterior_given_hyper(G, np.zeros((2, 2)), np.eye(2), 1.0, 0.0)
