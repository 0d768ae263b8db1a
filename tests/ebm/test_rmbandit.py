"""RMEstimator (reconstruction) limits, the LASSO kernel, and RMBandit behaviour."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import trim_mean
from sklearn.linear_model import Lasso

from hierbandit.ebm.linear import OLSBandit, forced_sampling_schedule
from hierbandit.ebm.rmbandit import RMBandit, lasso_toward, rm_estimate, robust_aggregate
from hierbandit.stats.ridge import ols_solve
from hierbandit.stats.suffstats import suffstats
from tests.conftest import snapshot
from tests.ebm.test_linear import easy_problem, feed, run_policy


def multitask_data(rng, N=6, d=3, n=40, noise=0.5, beta=None):
    if beta is None:
        beta = rng.normal(size=d) + np.zeros((N, d))
    X = rng.normal(size=(N * n, d))
    g = np.repeat(np.arange(N), n)
    y = np.einsum("td,td->t", X, beta[g]) + noise * rng.normal(size=N * n)
    return X, y, g, suffstats(X, y, g, N)


# ---------------------------------------------------------------------- estimator


def test_lambda_huge_gives_aggregate(rng):
    *_, s = multitask_data(rng, beta=rng.normal(size=(6, 3)))
    est = rm_estimate(s.G, s.b, s.n, 1e12)
    np.testing.assert_array_equal(est.coef, np.broadcast_to(est.global_coef, (6, 3)))
    ols, _ = ols_solve(s.G, s.b, s.n)
    np.testing.assert_allclose(est.global_coef, np.median(ols, axis=0), atol=1e-14)
    assert est.n_used == 6


def test_lambda_zero_gives_per_instance_ols(rng):
    X, y, g, s = multitask_data(rng, beta=rng.normal(size=(6, 3)))
    est = rm_estimate(s.G, s.b, s.n, 0.0, tol=1e-14, max_iter=100_000)
    for j in range(6):
        want = np.linalg.lstsq(X[g == j], y[g == j], rcond=None)[0]
        np.testing.assert_allclose(est.coef[j], want, atol=1e-8)
    target = rm_estimate(s.G, s.b, s.n, 0.0, target=2, tol=1e-14, max_iter=100_000)
    np.testing.assert_allclose(target.coef, est.coef[2], atol=1e-12)


@pytest.mark.parametrize("aggregator", ["median", "trimmed"])
def test_aggregate_robust_to_one_shifted_instance(rng, aggregator):
    N, d = 7, 3
    beta = np.tile(np.array([1.0, -2.0, 0.5]), (N, 1))
    beta += 1e-3 * np.arange(N)[:, None]  # distinct but close instances
    X = rng.normal(size=(N * 10, d))
    g = np.repeat(np.arange(N), 10)
    y = np.einsum("td,td->t", X, beta[g])  # noiseless: OLS recovers beta exactly
    s = suffstats(X, y, g, N)
    base = rm_estimate(s.G, s.b, s.n, 1.0, aggregator=aggregator)
    shifted = beta.copy()
    shifted[0, 0] += 100.0
    y2 = np.einsum("td,td->t", X, shifted[g])
    s2 = suffstats(X, y2, g, N)
    moved = rm_estimate(s2.G, s2.b, s2.n, 1.0, aggregator=aggregator)
    # instance 0 was the smallest in coordinate 0 and becomes the largest: median/trimmed mean
    # move by at most one order statistic (1e-3), never by anything like 100
    assert np.max(np.abs(moved.global_coef - base.global_coef)) <= 1.5e-3
    np.testing.assert_allclose(moved.global_coef[1:], base.global_coef[1:], atol=1e-10)
    mean_shift = np.mean(s2.b) - np.mean(s.b)
    assert abs(mean_shift) > 0  # the plain mean would move by 100/7
    # a shift of an instance that stays in the upper half leaves the median unchanged
    up = beta.copy()
    up[-1, 2] += 100.0
    s3 = suffstats(X, np.einsum("td,td->t", X, up[g]), g, N)
    if aggregator == "median":
        np.testing.assert_allclose(
            rm_estimate(s3.G, s3.b, s3.n, 1.0).global_coef, base.global_coef, atol=1e-10
        )


def test_robust_aggregate_definitions(rng):
    B = rng.normal(size=(10, 4))
    np.testing.assert_allclose(robust_aggregate(B), np.median(B, axis=0), atol=1e-15)
    np.testing.assert_allclose(
        robust_aggregate(B, aggregator="trimmed", trim=0.2), trim_mean(B, 0.2, axis=0), atol=1e-14
    )
    np.testing.assert_allclose(
        robust_aggregate(B[:7], aggregator="trimmed", trim=0.3), trim_mean(B[:7], 0.3, axis=0)
    )
    with pytest.raises(ValueError, match="aggregator"):
        robust_aggregate(B, aggregator="mean")
    with pytest.raises(ValueError, match="trim"):
        robust_aggregate(B, aggregator="trimmed", trim=0.5)
    with pytest.raises(ValueError, match="B"):
        robust_aggregate(np.empty((0, 3)))


def test_identical_instances_close_to_pooled_ols(rng):
    beta = np.array([0.7, -1.0, 2.0])
    X, y, _, s = multitask_data(rng, N=8, n=400, beta=np.tile(beta, (8, 1)))
    pooled = np.linalg.lstsq(X, y, rcond=None)[0]
    # with the forced-sample penalty η₀ = 0.2 the small noise deviations are shrunk away
    est = rm_estimate(s.G, s.b, s.n, 0.2)
    np.testing.assert_allclose(est.global_coef, pooled, atol=0.03)
    np.testing.assert_allclose(est.coef, np.broadcast_to(pooled, (8, 3)), atol=0.03)


def test_data_poor_instance_and_fallbacks(rng):
    X, y, _, s = multitask_data(rng, N=5)
    n = s.n.copy()
    G, b = s.G.copy(), s.b.copy()
    G[0], b[0], n[0] = 0.0, 0.0, 0  # no data: returns the aggregate
    G[1] = np.outer(X[40], X[40])  # one row (< d): excluded from the aggregate
    b[1] = X[40] * y[40]
    n[1] = 1
    est = rm_estimate(G, b, n, 0.5)
    ols, _ = ols_solve(G, b, n)
    np.testing.assert_allclose(est.global_coef, np.median(ols[2:], axis=0), atol=1e-14)
    np.testing.assert_array_equal(est.coef[0], est.global_coef)
    assert est.n_used == 3
    # no instance with n >= d: the pooled OLS of everything
    few = np.array([1, 1, 1, 0, 0])
    Gp = np.stack([np.outer(X[t * 40], X[t * 40]) for t in range(3)] + [np.zeros((3, 3))] * 2)
    bp = np.stack([X[t * 40] * y[t * 40] for t in range(3)] + [np.zeros(3)] * 2)
    est = rm_estimate(Gp, bp, few, 1e9)
    pooled = np.linalg.solve(Gp.sum(0), bp.sum(0))
    np.testing.assert_allclose(est.global_coef, pooled, rtol=1e-8)
    assert est.n_used == 0


@pytest.mark.parametrize("lam", [0.01, 0.1, 0.5, 2.0])
def test_lasso_kernel_matches_sklearn(rng, lam):
    n, d = 50, 5
    X = rng.normal(size=(n, d)) @ (np.eye(d) + 0.3 * rng.normal(size=(d, d)))
    center = rng.normal(size=d)
    delta = np.zeros(d)
    delta[1] = 1.5
    y = X @ (center + delta) + 0.5 * rng.normal(size=n)
    ours = lasso_toward(X.T @ X, X.T @ y, n, center, lam, tol=1e-14, max_iter=100_000)
    sk = Lasso(alpha=lam / 2, fit_intercept=False, tol=1e-14, max_iter=1_000_000)
    sk.fit(X, y - X @ center)
    np.testing.assert_allclose(ours, center + sk.coef_, atol=1e-7)

    def objective(beta):
        return np.sum((y - X @ beta) ** 2) / n + lam * np.sum(np.abs(beta - center))

    # brute-force check: no random perturbation improves the objective
    f0 = objective(ours)
    for _ in range(200):
        assert objective(ours + 1e-3 * rng.normal(size=d)) >= f0 - 1e-12


def test_lasso_toward_validation():
    with pytest.raises(ValueError, match="center"):
        lasso_toward(np.eye(2), np.ones(2), 3, np.ones(3), 0.1)
    with pytest.raises(ValueError, match="lam"):
        lasso_toward(np.eye(2), np.ones(2), 3, np.ones(2), -0.1)
    with pytest.raises(TypeError, match="n must"):
        lasso_toward(np.eye(2), np.ones(2), 3.0, np.ones(2), 0.1)
    unchanged = lasso_toward(np.zeros((2, 2)), np.zeros(2), 0, [1, 2], 1.0)
    np.testing.assert_array_equal(unchanged, [1, 2])


def test_rm_estimate_validation(rng):
    _, _, _, s = multitask_data(rng, N=3)
    with pytest.raises(ValueError, match="lam"):
        rm_estimate(s.G, s.b, s.n, [0.1, 0.2])
    with pytest.raises(ValueError, match="G must"):
        rm_estimate(s.G[:2], s.b, s.n, 0.1)
    with pytest.raises(ValueError, match="target"):
        rm_estimate(s.G, s.b, s.n, 0.1, target=3)
    with pytest.raises(ValueError, match="n must"):
        rm_estimate(s.G, s.b, -s.n, 0.1)
    per_instance = rm_estimate(s.G, s.b, s.n, [0.0, 1e12, 0.1], tol=1e-14, max_iter=100_000)
    np.testing.assert_array_equal(per_instance.coef[1], per_instance.global_coef)
    np.testing.assert_allclose(per_instance.coef[0], per_instance.ols[0], atol=1e-8)


# ---------------------------------------------------------------------- the bandit


def test_forced_rounds_local_clock_q50():
    N, K, d = 2, 5, 2
    p = RMBandit(N, K, d, rng=0)
    sched = forced_sampling_schedule(1100, K, 50)
    rng = np.random.default_rng(1)
    counts = np.zeros(N, dtype=int)
    forced_n = np.zeros((K, N), dtype=int)
    for _ in range(2000):
        j = int(rng.integers(N))
        if counts[j] >= 1100:
            continue
        x = rng.normal(size=d)
        f = sched[counts[j]]
        assert p.forced_arm(j) == f
        k = p.select(j, x)
        if f >= 0:
            assert k == f
            forced_n[k, j] += 1
        p.update(j, x, k, float(rng.normal()))
        counts[j] += 1
    np.testing.assert_array_equal(p.forced_stats.n.reshape(K, N), forced_n)
    np.testing.assert_array_equal(p.n_rounds, counts)


def test_global_clock_and_penalties():
    N, K, d = 3, 2, 2
    p = RMBandit(N, K, d, q=2, clock="global", rng=0)
    sched = forced_sampling_schedule(30, K, 2)
    for t in range(30):
        assert p.forced_arm(t % N) == sched[t]
        k = p.select(t % N, [1.0, 0.5])
        p.update(t % N, [1.0, 0.5], k, 0.0)
    lam_f, lam_a = p.penalties(0)
    assert lam_f == 0.2
    np.testing.assert_allclose(lam_a, 0.2 * math.sqrt((math.log(31) + math.log(2)) / 31))
    n = p.all_stats.n.reshape(K, N)
    q = RMBandit(N, K, d, lambda_schedule="samples", rng=0)
    r = RMBandit(N, K, d, lambda_schedule="bias_floor", rng=0)
    for pol in (q, r):
        for t in range(30):
            pol.update(t % N, [1.0, 0.5], int(p.all_stats.n[0] > t), 0.0)
    nq = q.all_stats.n.reshape(K, N)
    tau = q.n_rounds[1] + 1
    np.testing.assert_allclose(
        q.penalties(1)[1], 0.2 * np.sqrt((math.log(tau) + math.log(2)) / np.maximum(nq[:, 1], 1))
    )
    want = [
        0.2
        * max(
            math.sqrt(math.log(2 * tau) / max(nq[k, 1], 1)),
            math.sqrt(2 * math.log(2 * N * tau) / max(nq[k].sum(), 1)),
        )
        for k in range(K)
    ]
    np.testing.assert_allclose(r.penalties(1)[1], want)
    assert n.sum() == 30


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"clock": "global"},
        {"aggregator": "trimmed"},
        {"lambda_schedule": "samples"},
        {"lambda_schedule": "bias_floor", "clock": "global"},
    ],
)
def test_learns_easy_problem(kwargs):
    beta = easy_problem(n_instances=3)
    # local clock, K = 2, q = 50: instance rounds 1-200, 301-400, 701-800, 1501-1600 forced
    regret = run_policy(RMBandit(3, 2, 2, rng=3, **kwargs), beta, 4200, noise=1.0)
    early, late = regret[:300].mean(), regret[-300:].mean()
    assert early > 0.1
    assert late < 0.2 * early


@pytest.mark.slow
def test_data_poor_instance_beats_olsbandit_late():
    """Sparse heterogeneity, data-poor instance 0 (``specs/rmbandit.md`` §7 item 4)."""
    N, K, d, T = 10, 2, 4, 30_000
    gen = np.random.default_rng(5)
    b0 = gen.normal(size=(K, d))
    beta = np.repeat(b0[None], N, axis=0)
    for j in range(N):
        for k in range(K):
            beta[j, k, gen.integers(d)] += gen.normal()
    p = np.full(N, 1.0)
    p[0] = 0.1
    p /= p.sum()
    J = gen.choice(N, size=T, p=p)
    X = gen.choice([-1.0, 1.0], size=(T, d)) + gen.normal(size=(T, d))
    E = gen.normal(size=T)
    late = {}
    policies = {"rm": RMBandit(N, K, d, clock="global", rng=1), "ols": OLSBandit(N, K, d, rng=1)}
    for name, pol in policies.items():
        reg = []
        for t in range(T):
            j, x = int(J[t]), X[t]
            mu = beta[j] @ x
            k = pol.select(j, x)
            if j == 0:
                reg.append(mu.max() - mu[k])
            pol.update(j, x, k, float(mu[k] + E[t]))
        late[name] = np.mean(reg[len(reg) // 2 :])
    assert late["rm"] <= late["ols"] + 0.02


def test_bad_input_leaves_state_unchanged():
    p = RMBandit(3, 2, 2, q=2, rng=0)
    feed(p, 40)
    x = np.array([0.5, -0.5])
    before = snapshot(p)
    bad_calls = [
        (lambda: p.select(0, [1.0, 2.0, 3.0]), ValueError, "context"),
        (lambda: p.select(0, [np.nan, 1.0]), ValueError, "context"),
        (lambda: p.select(3, x), ValueError, "instance"),
        (lambda: p.select(np.float64(1), x), TypeError, "instance"),
        (lambda: p.update(0, x, 2, 1.0), ValueError, "arm"),
        (lambda: p.update(0, x, "0", 1.0), TypeError, "arm"),
        (lambda: p.update(0, x, 0, np.inf), ValueError, "reward"),
        (lambda: p.forced_arm(-1), ValueError, "instance"),
        (lambda: p.penalties(1.5), TypeError, "instance"),
    ]
    for call, exc, name in bad_calls:
        with pytest.raises(exc, match=name):
            call()
        assert snapshot(p) == before


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"q": 0}, ValueError, "q"),
        ({"h": -1.0}, ValueError, "h"),
        ({"eta0": -0.1}, ValueError, "eta0"),
        ({"eta1_0": np.nan}, ValueError, "eta1_0"),
        ({"aggregator": "mean"}, ValueError, "aggregator"),
        ({"trim": 0.5}, ValueError, "trim"),
        ({"trim": -0.1}, ValueError, "trim"),
        ({"lambda_schedule": "fixed"}, ValueError, "lambda_schedule"),
        ({"clock": "wall"}, ValueError, "clock"),
        ({"ridge": 0.0}, ValueError, "ridge"),
        ({"lasso_max_iter": 0}, ValueError, "lasso_max_iter"),
        ({"lasso_tol": 0.0}, ValueError, "lasso_tol"),
    ],
)
def test_constructor_validation(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        RMBandit(2, 2, 2, **kwargs)


def test_clone_posterior_hyperparameters():
    N, K, d = 4, 3, 2
    p = RMBandit(N, K, d, q=3, aggregator="trimmed", clock="global", rng=2)
    feed(p, 200)
    c = p.clone()
    params, cparams = p.get_params(), c.get_params()
    params.pop("rng"), cparams.pop("rng")
    assert params == cparams and c.t == 0
    assert snapshot(c.all_stats) == snapshot(RMBandit(N, K, d).all_stats)
    post = p.posterior()
    assert post["mean"].dims == ("arm", "instance", "feature")
    assert post["mean"].shape == (K, N, d)
    assert post["cov"].shape == (K, N, d, d)
    assert post["global_mean"].dims == ("arm", "feature")
    assert np.all(np.isfinite(post["cov"].values))
    hyp = p.hyperparameters()
    assert hyp["Sigma"].shape == (K, d, d) and hyp["sigma2"].shape == (K,)
    assert np.all(np.isinf(np.diagonal(hyp["Sigma"].values, axis1=1, axis2=2)))
    np.testing.assert_array_equal(hyp["global_mean"].values, post["global_mean"].values)
    # the posterior mean is the all-sample RMEstimator at each instance's penalty
    A = p.all_stats
    k, j = 1, 2
    sl = slice(k * N, (k + 1) * N)
    lam = p.penalties(j)[1][k]
    est = rm_estimate(A.G[sl], A.b[sl], A.n[sl], lam, target=j, aggregator="trimmed")
    np.testing.assert_allclose(post["mean"].values[k, j], est.coef, atol=1e-12)
