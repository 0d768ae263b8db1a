"""Long-run numerical stability with ill-conditioned contexts.

Contexts have near-collinear features and feature scales from 1e-6 to 1e6. After many updates
every stored covariance must stay symmetric positive definite, and the incremental state must
match a batch recomputation from the same data:

* sufficient statistics G, b (exact sums): relative error ≤ 1e-9 (Frobenius, per unit);
* LinUCB's Sherman–Morrison inverse A⁻¹ against the inverse of the batch A, compared after the
  diagonal scaling D = diag(A)^{1/2} that removes the feature scales: ‖D(A⁻¹_inc − A⁻¹)D‖ /
  ‖D A⁻¹ D‖ ≤ 1e-6, and the ridge estimates' predictions x θ on the data within 1e-6 of their
  scale;
* EbmTS's posterior (incremental, with hyperparameters re-estimated along the way) against the
  batch closed form with the same final hyperparameters: relative error ≤ 1e-6 on the means and
  covariances (after the same diagonal scaling).

The default suite runs 20,000 updates; ``-m slow`` runs 10⁶ (docs/reliability.md).
"""

import numpy as np
import pytest

from hierbandit.policies import EbmTS, LinUCB
from hierbandit.stats import posterior_given_hyper, suffstats

N, K = 3, 2
SCALES = np.array([1e-6, 1e-6, 1.0, 1e6])
d = SCALES.size


def _contexts(T, g):
    z = g.normal(size=(T, d))
    z[:, 1] = z[:, 0] + 1e-4 * z[:, 1]  # near-collinear pair
    return z * SCALES


def _scaled_rel_err(got, want, A):
    D = np.sqrt(np.diag(A))
    num = np.linalg.norm(D[:, None] * (got - want) * D[None, :])
    den = np.linalg.norm(D[:, None] * want * D[None, :])
    return num / den


def _is_spd(M):
    if not np.array_equal(M, M.T):
        return False
    D = 1 / np.sqrt(np.diag(M))
    try:
        np.linalg.cholesky(D[:, None] * M * D[None, :])
    except np.linalg.LinAlgError:
        return False
    return True


def _stream(T, seed):
    g = np.random.default_rng(seed)
    X = _contexts(T, g)
    J = g.integers(0, N, T)
    beta = g.normal(size=(K, N, d)) / SCALES
    return X, J, beta, g


def _run_linucb(T):
    X, J, beta, g = _stream(T, 0)
    policy = LinUCB(N, K, d, rng=0)
    arms = np.empty(T, dtype=int)
    Y = np.empty(T)
    for t in range(T):
        k = policy._select(int(J[t]), X[t])
        y = X[t] @ beta[k, J[t]] + g.normal()
        policy._update(int(J[t]), X[t], k, y)
        arms[t], Y[t] = k, y
    stats = policy.stats
    for j in range(N):
        for k in range(K):
            u = j * K + k if stats.n_units == N * K else None
            assert u is not None
            rows = (j == J) & (arms == k)
            Xr, yr = X[rows], Y[rows]
            G, b = Xr.T @ Xr, Xr.T @ yr
            if rows.sum():
                assert np.linalg.norm(stats.G[u] - G) <= 1e-9 * np.linalg.norm(G)
                assert np.linalg.norm(stats.b[u] - b) <= 1e-9 * np.linalg.norm(b) + 1e-300
            A = np.eye(d) + G
            Ainv = np.linalg.inv(A)
            assert _is_spd(stats.Ainv[u])
            assert _scaled_rel_err(stats.Ainv[u], Ainv, A) <= 1e-6
            if rows.sum():
                theta = np.linalg.solve(A, b)
                pred, ref = Xr @ stats.theta[u], Xr @ theta
                assert np.max(np.abs(pred - ref)) <= 1e-6 * (np.max(np.abs(ref)) + 1.0)


def _run_ebm(T):
    X, J, beta, g = _stream(T, 1)
    policy = EbmTS(N, K, d, rng=0, hyper_update_every=50)
    arms = np.empty(T, dtype=int)
    Y = np.empty(T)
    for t in range(T):
        k = policy._select(int(J[t]), X[t])
        y = X[t] @ beta[k, J[t]] + g.normal()
        policy._update(int(J[t]), X[t], k, y)
        arms[t], Y[t] = k, y
    post = policy.posterior()
    for k in range(K):
        rows = arms == k
        st = suffstats(X[rows], Y[rows], J[rows], N)
        for j in range(N):
            Gj = st.G[j]
            if np.linalg.norm(Gj):
                assert np.linalg.norm(policy.G[k, j] - Gj) <= 1e-9 * np.linalg.norm(Gj)
        assert _is_spd(policy.Sigma[k]) and policy.sigma2[k] > 0
        ref = posterior_given_hyper(st.G, st.b, policy.Sigma[k], policy.sigma2[k], policy.lam)
        for j in range(N):
            cov = post["cov"].values[k, j]
            assert _is_spd(cov)
            A = np.eye(d) + st.G[j]
            assert _scaled_rel_err(cov, ref.cov[j], A) <= 1e-6
            m, mr = post["mean"].values[k, j], ref.mean[j]
            Xk = X[rows & (j == J)]
            if len(Xk):
                err = np.max(np.abs(Xk @ (m - mr)))
                assert err <= 1e-6 * (np.max(np.abs(Xk @ mr)) + 1.0)


def test_linucb_stable_short():
    _run_linucb(20_000)


def test_ebmts_stable_short():
    _run_ebm(20_000)


@pytest.mark.slow
def test_linucb_stable_million():
    _run_linucb(1_000_000)


@pytest.mark.slow
def test_ebmts_stable_million():
    _run_ebm(1_000_000)
