"""Long-run numerical stability with ill-conditioned contexts.

Contexts have near-collinear features and feature scales from 1e-6 to the largest accepted
context magnitude (``MAX_FEATURE`` = 1e6, reached by the last feature). After many updates
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

SCLUB (compiled loop, splits and merges under way) and UCBBP (one-step Newton updates of the
logistic information matrix) are checked in the same way:

* SCLUB: user statistics G, b against the batch sums (≤ 1e-9), every live cluster's G, b
  against the exact sums of its members' statistics (≤ 1e-9) and its counts exactly; user and
  cluster inverses exactly symmetric, positive definite and within 1e-6 (scaled) of the batch
  inverses; cluster predictions within 1e-6 of their scale;
* UCBBP: the information matrix A = λI + Σ w z zᵀ (weights at the pre-update estimate) against
  the batch sum of the same weighted rows (≤ 1e-9), its stored Cholesky factor (‖D(LLᵀ − A)D‖
  ≤ 1e-12·p), and the covariance A⁻¹ exactly symmetric, positive definite and within 1e-6
  (scaled) of the inverse of the batch A.

Every test runs on two streams: the plain one, and one that opens with rows holding a single
feature at ±(0.5…1)·MAX_FEATURE (Sherman–Morrison steps with 1 + xᵀA⁻¹x up to 1e12, which the
statistics must refactorise instead). The default suite runs 20,000 updates (10,000 UCBBP
episodes); ``-m slow`` runs 10⁶ (docs/reliability.md).
"""

import numpy as np
import pytest

from hierbandit._validation import MAX_FEATURE
from hierbandit.ebm import EbmTS, LinUCB
from hierbandit.stats import posterior_given_hyper, suffstats

N, K = 3, 2
#: feature scales; the largest is the largest accepted context magnitude
SCALES = np.array([1e-6, 1e-6, 1.0, MAX_FEATURE])
d = SCALES.size


def _contexts(T, g, lead=0):
    """Rows z·SCALES with z a standard normal truncated to ±3 and divided by 3, so that the
    last feature spans the whole accepted range [−MAX_FEATURE, MAX_FEATURE].

    The first ``lead`` rows instead carry the last feature alone at ±(0.5…1)·MAX_FEATURE (a
    raw count): each is a Sherman–Morrison step with 1 + xᵀA⁻¹x up to 1e12 for a fresh unit.
    """
    z = g.normal(size=(T, d))
    out = np.abs(z) > 3.0
    while out.any():
        z[out] = g.normal(size=int(out.sum()))
        out = np.abs(z) > 3.0
    z /= 3.0
    z[:, 1] = (z[:, 0] + 1e-4 * z[:, 1]) / (1.0 + 1e-4)  # near-collinear pair, still in ±1
    n = min(lead, T)
    z[:n, :-1] = 0.0
    z[:n, -1] = g.choice([-1.0, 1.0], n) * g.uniform(0.5, 1.0, n)
    return z * SCALES


#: the parameter cases of every stability test: the plain stream, and one that opens with rows
#: holding a single feature at the largest accepted magnitude
LEADS = pytest.mark.parametrize("lead", [0, 40], ids=["scale", "bound_first"])


def _scaled_rel_err(got, want, A):
    D = np.sqrt(np.diag(A))
    num = np.linalg.norm(D[:, None] * (got - want) * D[None, :])
    den = np.linalg.norm(D[:, None] * want * D[None, :])
    return num / den


def _inv(A):
    """A⁻¹ of a symmetric positive definite A through its diagonally scaled form (the batch
    reference: accurate for graded matrices, whatever the feature scales)."""
    D = 1 / np.sqrt(np.diag(A))
    return D[:, None] * np.linalg.inv(D[:, None] * A * D[None, :]) * D[None, :]


def _is_spd(M):
    if not np.array_equal(M, M.T):
        return False
    D = 1 / np.sqrt(np.diag(M))
    try:
        np.linalg.cholesky(D[:, None] * M * D[None, :])
    except np.linalg.LinAlgError:
        return False
    return True


def _stream(T, seed, lead=0):
    g = np.random.default_rng(seed)
    X = _contexts(T, g, lead)
    J = g.integers(0, N, T)
    beta = g.normal(size=(K, N, d)) / SCALES
    return X, J, beta, g


def _run_linucb(T, lead=0):
    X, J, beta, g = _stream(T, 0, lead)
    policy = LinUCB(N, K, d, rng=0)
    arms = np.empty(T, dtype=int)
    Y = np.empty(T)
    for t in range(T):
        k = policy._select(int(J[t]), X[t])
        y = X[t] @ beta[k, J[t]] + g.normal()
        policy._update(int(J[t]), X[t], k, y)
        arms[t], Y[t] = k, y
        if t + 1 == lead:  # right after the rows at the bound, before later rows dilute them
            _check_linucb(policy, X[:lead], J[:lead], arms[:lead], Y[:lead])
    _check_linucb(policy, X, J, arms, Y)


def _check_linucb(policy, X, J, arms, Y):
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
            Ainv = _inv(A)
            assert _is_spd(stats.Ainv[u])
            assert _scaled_rel_err(stats.Ainv[u], Ainv, A) <= 1e-6
            if rows.sum():
                theta = Ainv @ b
                pred, ref = Xr @ stats.theta[u], Xr @ theta
                assert np.max(np.abs(pred - ref)) <= 1e-6 * (np.max(np.abs(ref)) + 1.0)


def _run_ebm(T, lead=0):
    X, J, beta, g = _stream(T, 1, lead)
    policy = EbmTS(N, K, d, rng=0, hyper_update_every=50)
    arms = np.empty(T, dtype=int)
    Y = np.empty(T)
    for t in range(T):
        k = policy._select(int(J[t]), X[t])
        y = X[t] @ beta[k, J[t]] + g.normal()
        policy._update(int(J[t]), X[t], k, y)
        arms[t], Y[t] = k, y
        if t + 1 == lead:
            _check_ebm(policy, X[:lead], J[:lead], arms[:lead], Y[:lead])
    _check_ebm(policy, X, J, arms, Y)


def _check_ebm(policy, X, J, arms, Y):
    post = policy.posterior()
    G = policy.G  # a dense copy built from the pairs
    for k in range(K):
        rows = arms == k
        st = suffstats(X[rows], Y[rows], J[rows], N)
        for j in range(N):
            Gj = st.G[j]
            if np.linalg.norm(Gj):
                assert np.linalg.norm(G[k, j] - Gj) <= 1e-9 * np.linalg.norm(Gj)
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


@LEADS
def test_linucb_stable_short(lead):
    _run_linucb(20_000, lead)


@LEADS
def test_ebmts_stable_short(lead):
    _run_ebm(20_000, lead)


@pytest.mark.slow
@LEADS
def test_linucb_stable_million(lead):
    _run_linucb(1_000_000, lead)


@pytest.mark.slow
@LEADS
def test_ebmts_stable_million(lead):
    _run_ebm(1_000_000, lead)


# ---------------------------------------------------------------------- SCLUB

U_SCLUB, L_ITEMS = 6, 5


def _sclub_stream(T, g, theta, lead=0):
    """Rounds of ill-conditioned candidate items with Gaussian rewards for the compiled loop
    (the first ``lead`` rounds offer only single-feature items at the bound)."""
    users = g.integers(0, U_SCLUB, T)
    items = _contexts(T * L_ITEMS, g, lead * L_ITEMS).reshape(T, L_ITEMS, d)
    means = np.einsum("tld,td->tl", items, theta[users])
    noise = g.normal(size=T)
    return users, items, means, noise


def _run_sclub(T, lead=0, chunk=50_000):
    from hierbandit.sclub.policies import SCLUB

    g = np.random.default_rng(2)
    # two true clusters of users; coefficients scaled so that x θ is O(1)
    theta = np.where(np.arange(U_SCLUB)[:, None] < 3, 1.0, -1.0) * g.normal(size=d) / SCALES
    policy = SCLUB(U_SCLUB, d, rng=0)
    G = np.zeros((U_SCLUB, d, d))
    b = np.zeros((U_SCLUB, d))
    n = np.zeros(U_SCLUB, dtype=np.int64)
    n_splits = n_merges = 0
    # the rounds at the bound form a block of their own, checked on its own
    blocks = ([lead] if lead else []) + [chunk] * -(-(T - lead) // chunk)
    start = 0
    for size in blocks:
        size = min(size, T - start)
        users, items, means, noise = _sclub_stream(size, g, theta, lead if start == 0 else 0)
        choices, ncl = policy.run(users, items, means, noise, bernoulli=False)
        X = items[np.arange(users.size), choices]
        y = means[np.arange(users.size), choices] + noise
        # batch sums of the same rows, one matrix product per user
        for u in range(U_SCLUB):
            rows = users == u
            G[u] += X[rows].T @ X[rows]
            b[u] += X[rows].T @ y[rows]
            n[u] += rows.sum()
        n_splits += int(np.sum(np.diff(ncl) > 0))
        n_merges += int(np.sum(np.diff(ncl) < 0))
        start += size
        if start == lead:
            _check_sclub(policy, G, b, n)
    assert policy.t == T
    _check_sclub(policy, G, b, n)
    return n_splits, n_merges


def _check_sclub(policy, G, b, n):
    """User and cluster statistics of ``policy`` against the batch sums ``G``, ``b``, ``n``."""
    us = policy.stats.users
    np.testing.assert_array_equal(us.n, n)
    reg = policy.reg
    for u in range(U_SCLUB):
        if n[u]:
            assert np.linalg.norm(us.G[u] - G[u]) <= 1e-9 * np.linalg.norm(G[u])
            assert np.linalg.norm(us.b[u] - b[u]) <= 1e-9 * np.linalg.norm(b[u])
        A = reg * np.eye(d) + G[u]
        assert _is_spd(us.Ainv[u])
        assert _scaled_rel_err(us.Ainv[u], _inv(A), A) <= 1e-6
    cs = policy.stats
    live = np.flatnonzero(cs.size > 0)
    assert live.size == policy.n_clusters and cs.size[live].sum() == U_SCLUB
    for c in live:
        members = np.flatnonzero(cs.labels == c)
        assert members.size == cs.size[c]
        # cluster statistics are the exact sums of their members' statistics
        Gc, bc = us.G[members].sum(0), us.b[members].sum(0)
        assert cs.n[c] == us.n[members].sum()
        assert np.linalg.norm(cs.G[c] - Gc) <= 1e-9 * np.linalg.norm(Gc)
        assert np.linalg.norm(cs.b[c] - bc) <= 1e-9 * np.linalg.norm(bc)
        # ... and the cluster inverse matches the batch inverse of reg·I + Σ G_i
        Ac = reg * np.eye(d) + G[members].sum(0)
        assert _is_spd(cs.Ainv[c])
        assert _scaled_rel_err(cs.Ainv[c], _inv(Ac), Ac) <= 1e-6
        theta_c = _inv(Ac) @ b[members].sum(0)
        Xc = _contexts(200, np.random.default_rng(9))
        pred, ref = Xc @ cs.theta[c], Xc @ theta_c
        assert np.max(np.abs(pred - ref)) <= 1e-6 * (np.max(np.abs(ref)) + 1.0)


# ---------------------------------------------------------------------- UCBBP

N_USERS, H_STEPS, K_ARMS = 2, 2, 3


def _run_ucbbp(T, lead=0, chunk=20_000):
    from scipy.special import expit

    from hierbandit.cascade.env import simulate_episode
    from hierbandit.cascade.policies import UCBBP

    g = np.random.default_rng(3)
    p = d + K_ARMS
    theta_true = np.concatenate([0.5 * g.normal(size=d) / SCALES, [0.5, -0.5, -1.5]])
    rewards = np.array([1.0, 2.0, 3.0])
    policy = UCBBP(K_ARMS, d, rewards, H_STEPS, rng=0)
    est = policy.estimator
    A_batch = policy.lam * np.eye(p)
    Zs, Ws = [], []
    for t in range(T):
        X = _contexts(N_USERS, g, N_USERS if t < lead else 0)
        probs = expit((X @ theta_true[:d])[:, None] + theta_true[d:])
        policy._start(X)
        arms, clicks = simulate_episode(probs, g.random((N_USERS, H_STEPS)), policy._select)
        # the rows this episode adds, weighted at the pre-update estimate (newton1)
        shown = arms >= 0
        n_idx, h_idx = np.nonzero(shown)
        Z = np.zeros((n_idx.size, p))
        Z[:, :d] = X[n_idx]
        Z[np.arange(n_idx.size), d + arms[n_idx, h_idx]] = 1.0
        ph = expit(Z @ est.theta)
        Zs.append(Z)
        Ws.append(ph * (1.0 - ph))
        policy._update(X, arms, clicks)
        if len(Zs) == chunk or t == T - 1 or t + 1 == lead:
            Zc, wc = np.concatenate(Zs), np.concatenate(Ws)
            A_batch += Zc.T @ (wc[:, None] * Zc)
            Zs, Ws = [], []
        if t + 1 == lead:
            _check_ucbbp(policy, A_batch)
    assert policy.t == T
    _check_ucbbp(policy, A_batch)


def _check_ucbbp(policy, A_batch):
    est, p = policy.estimator, policy.n_params
    A = est.A
    assert np.all(np.isfinite(A)) and np.all(np.isfinite(est.theta))
    assert np.array_equal(A, A.T)
    # the information matrix matches the batch sum of the same weighted rows
    assert np.linalg.norm(A - A_batch) <= 1e-9 * np.linalg.norm(A_batch)
    # its stored Cholesky factor reproduces it (after the diagonal scaling)
    Lc = np.tril(est._chol)
    D = 1 / np.sqrt(np.diag(A))
    rec = D[:, None] * (Lc @ Lc.T - A) * D[None, :]
    assert np.linalg.norm(rec) <= 1e-12 * p
    # the covariance A⁻¹ is symmetric positive definite and matches the batch inverse
    cov = est.cov
    assert _is_spd(cov) and _is_spd(A)
    assert _scaled_rel_err(cov, _inv(A_batch), A_batch) <= 1e-6
    post = policy.posterior()
    assert np.all(np.isfinite(post["mean"].values)) and np.all(np.isfinite(post["cov"].values))


@LEADS
def test_sclub_stable_short(lead):
    n_splits, _ = _run_sclub(20_000, lead)
    assert n_splits > 0  # the check covers clusters created by splits


@LEADS
def test_ucbbp_stable_short(lead):
    _run_ucbbp(10_000, lead)


@pytest.mark.slow
@LEADS
def test_sclub_stable_million(lead):
    _run_sclub(1_000_000, lead)


@pytest.mark.slow
@LEADS
def test_ucbbp_stable_million(lead):
    _run_ucbbp(1_000_000, lead)
