"""LinUCB, LinTS and OLSBandit: exact indices, sampling law, forced sampling, learning, checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from hierbandit.ebm.linear import (
    LinTS,
    LinUCB,
    OLSBandit,
    forced_sampling_arm,
    forced_sampling_schedule,
)
from hierbandit.stats.suffstats import suffstats
from tests.conftest import snapshot

# ---------------------------------------------------------------------- helpers


def easy_problem(n_instances: int = 2, seed: int = 0):
    """Two arms, d = 2 (intercept + one covariate): arm 0 wins for u < 0.5, arm 1 otherwise."""
    rng = np.random.default_rng(seed)
    beta = np.empty((n_instances, 2, 2))
    for j in range(n_instances):
        shift = 0.1 * rng.normal()
        beta[j, 0] = [0.5 + shift, -1.0]
        beta[j, 1] = [0.0 + shift, 1.0]
    return beta


def run_policy(policy, beta: np.ndarray, T: int, seed: int = 1, noise: float = 0.3):
    """Play ``T`` rounds with instances arriving in turn; returns the per-round regret."""
    rng = np.random.default_rng(seed)
    N = beta.shape[0]
    regret = np.empty(T)
    for t in range(T):
        j = t % N
        x = np.array([1.0, rng.normal()])
        mu = beta[j] @ x
        k = policy.select(j, x)
        regret[t] = mu.max() - mu[k]
        policy.update(j, x, k, float(mu[k] + noise * rng.normal()))
    return regret


def feed(policy, T: int, seed: int = 3):
    """Random (instance, context, arm, reward) updates; returns the rows."""
    rng = np.random.default_rng(seed)
    N, K, d = policy.n_instances, policy.n_arms, policy.n_features
    J = rng.integers(N, size=T)
    X = rng.normal(size=(T, d))
    A = rng.integers(K, size=T)
    y = rng.normal(size=T)
    for t in range(T):
        policy.update(int(J[t]), X[t], int(A[t]), float(y[t]))
    return J, X, A, y


POLICIES = [
    (LinUCB, {}),
    (LinTS, {}),
    (LinTS, {"v_schedule": "sqrt_log_t"}),
    (OLSBandit, {}),
    (OLSBandit, {"clock": "global", "warmup": False}),
]


# ---------------------------------------------------------------------- forced sampling


def test_forced_schedule_K2_q1():
    arms = forced_sampling_schedule(40, 2, 1)
    assert set(np.flatnonzero(arms == 0) + 1) == {1, 3, 7, 15, 31}
    assert set(np.flatnonzero(arms == 1) + 1) == {2, 4, 8, 16, 32}
    assert forced_sampling_arm(63, 2, 1) == 0
    assert forced_sampling_arm(64, 2, 1) == 1
    assert forced_sampling_arm(65, 2, 1) == -1


def test_forced_schedule_K5_q50():
    arms = forced_sampling_schedule(4000, 5, 50)
    forced = np.flatnonzero(arms >= 0) + 1
    expected = np.concatenate(
        [np.arange(a, b + 1) for a, b in [(1, 500), (751, 1000), (1751, 2000), (3751, 4000)]]
    )
    np.testing.assert_array_equal(forced, expected)
    for start in (1, 251, 751, 1751, 3751):
        for k in range(5):
            block = arms[start - 1 + 50 * k : start - 1 + 50 * (k + 1)]
            np.testing.assert_array_equal(block, k)


def test_forced_schedule_warmup():
    # K = 2, d = 3: rounds 1-6 round robin, then the schedule from round 7 on (7, 8 forced)
    arms = forced_sampling_schedule(10, 2, 1, warmup_rounds=6)
    np.testing.assert_array_equal(arms, [0, 1, 0, 1, 0, 1, 0, 1, -1, -1])
    np.testing.assert_array_equal(forced_sampling_schedule(0, 2, 1), [])


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "name"),
    [
        ((0, 2, 1), {}, ValueError, "tau"),
        ((1.0, 2, 1), {}, TypeError, "tau"),
        ((1, 0, 1), {}, ValueError, "n_arms"),
        ((1, 2, 0), {}, ValueError, "q"),
        ((1, 2, 1), {"warmup_rounds": -1}, ValueError, "warmup_rounds"),
    ],
)
def test_forced_schedule_validation(args, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        forced_sampling_arm(*args, **kwargs)


# ---------------------------------------------------------------------- LinUCB


def test_linucb_index_matches_numpy():
    p = LinUCB(3, 4, 3, alpha=0.7, ridge=2.0, rng=0)
    ids, X, arms, y = feed(p, 300)
    x = np.array([0.3, -1.2, 0.8])
    for j in range(3):
        idx = p.index(j, x)
        for k in range(4):
            rows = (ids == j) & (arms == k)
            Am = 2.0 * np.eye(3) + X[rows].T @ X[rows]
            theta = np.linalg.solve(Am, X[rows].T @ y[rows])
            want = x @ theta + 0.7 * math.sqrt(x @ np.linalg.solve(Am, x))
            assert idx[k] == pytest.approx(want, abs=1e-10)
        assert p.select(j, x) == int(np.argmax(idx))


def test_linucb_untrained_ties_break_randomly():
    p = LinUCB(1, 3, 2, rng=5)
    picks = {p.select(0, [1.0, 0.0]) for _ in range(60)}
    assert picks == {0, 1, 2}
    q = LinUCB(1, 3, 2, tie_break="first")
    assert {q.select(0, [1.0, 0.0]) for _ in range(10)} == {0}


# ---------------------------------------------------------------------- LinTS


def test_lints_reproducible():
    beta = easy_problem()
    r1 = run_policy(LinTS(2, 2, 2, rng=11), beta, 300)
    r2 = run_policy(LinTS(2, 2, 2, rng=11), beta, 300)
    r3 = run_policy(LinTS(2, 2, 2, rng=12), beta, 300)
    np.testing.assert_array_equal(r1, r2)
    assert not np.array_equal(r1, r3)


def test_lints_sample_distribution():
    p = LinTS(2, 2, 3, v=0.8, ridge=1.5, rng=7)
    ids, X, arms, y = feed(p, 40)
    j = 1
    x = np.array([0.5, 1.0, -0.3])
    rows = ids == j
    s = suffstats(X[rows], y[rows], arms[rows], 2)
    B = s.G + 1.5 * np.eye(3)
    mean = np.array([x @ np.linalg.solve(B[k], s.b[k]) for k in range(2)])
    var = np.array([0.64 * x @ np.linalg.solve(B[k], x) for k in range(2)])
    n = 20000
    draws = np.array([p.sample_scores(j, x) for _ in range(n)])
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 4.5 * np.sqrt(var / n))
    np.testing.assert_allclose(draws.var(0), var, rtol=0.05)
    assert abs(np.corrcoef(draws.T)[0, 1]) < 0.04
    # the decision law: P(arm 0) = Φ((m0 − m1)/sqrt(v0 + v1))
    p0 = norm.cdf((mean[0] - mean[1]) / np.sqrt(var.sum()))
    picks = np.array([p.select(j, x) for _ in range(n)])
    assert abs(np.mean(picks == 0) - p0) < 4.5 * math.sqrt(p0 * (1 - p0) / n)


def test_lints_sqrt_log_t_schedule():
    p = LinTS(1, 2, 2, v=2.0, v_schedule="sqrt_log_t", rng=0)
    assert p.v_t() == 0.0
    np.testing.assert_array_equal(p.posterior()["cov"].values, 0.0)
    feed(p, 9)
    assert p.v_t() == pytest.approx(2.0 * math.sqrt(math.log(10)))
    post = p.posterior()
    np.testing.assert_allclose(
        post["cov"].values[:, 0], 4.0 * math.log(10) * p.stats.Ainv, rtol=1e-12
    )
    hyp = p.hyperparameters()
    np.testing.assert_allclose(hyp["Sigma"].values[0], 4.0 * math.log(10) * np.eye(2))
    np.testing.assert_allclose(hyp["sigma2"].values, 4.0 * math.log(10))


# ---------------------------------------------------------------------- OLSBandit


def test_olsbandit_forced_rounds_local_clock():
    N, K, d = 2, 2, 3
    p = OLSBandit(N, K, d, rng=0)  # warm-up K·d = 6 rounds, then the q = 1 schedule
    sched = forced_sampling_schedule(80, K, 1, warmup_rounds=K * d)
    rng = np.random.default_rng(0)
    counts = np.zeros(N, dtype=int)
    n_forced = np.zeros((K, N), dtype=int)
    for _ in range(80):
        j = int(rng.integers(N))
        x = rng.normal(size=d)
        f = sched[counts[j]]
        assert p.forced_arm(j) == f
        k = p.select(j, x)
        if f >= 0:
            assert k == f
            n_forced[k, j] += 1
        p.update(j, x, k, float(rng.normal()))
        counts[j] += 1
    np.testing.assert_array_equal(p.n_rounds, counts)
    np.testing.assert_array_equal(p.forced_stats.n.reshape(K, N), n_forced)
    assert p.all_stats.n.sum() == 80


def test_olsbandit_global_clock():
    p = OLSBandit(3, 2, 1, warmup=False, clock="global", rng=0)
    sched = forced_sampling_schedule(20, 2, 1)
    for t in range(20):
        j = t % 3
        assert p.forced_arm(j) == sched[t]
        k = p.select(j, [1.0])
        p.update(j, [1.0], k, 0.0)


def test_olsbandit_filter():
    # N = 1, K = 2, d = 1, no warm-up: local rounds 5 and 6 are free
    for h, want in ((15.0, 0), (25.0, 1)):
        p = OLSBandit(1, 2, 1, h=h, warmup=False, rng=0)
        for t in range(4):
            p.update(0, [1.0], t % 2, 0.0)
        assert p.forced_arm(0) == -1
        p.forced_stats.coef[:] = [[10.0], [0.0]]  # forced: arm 0 far ahead (gap 10 > h/2 = 7.5)
        p.all_stats.coef[:] = [[0.0], [1.0]]  # all-sample: arm 1 better
        assert p.select(0, [1.0]) == want


def test_olsbandit_posterior_is_ols():
    p = OLSBandit(2, 2, 2, rng=0)
    ids, X, arms, y = feed(p, 200)
    post = p.posterior()
    rss = np.zeros(2)
    dof = np.zeros(2)
    for k in range(2):
        for j in range(2):
            rows = (ids == j) & (arms == k)
            coef = np.linalg.lstsq(X[rows], y[rows], rcond=None)[0]
            np.testing.assert_allclose(post["mean"].values[k, j], coef, atol=1e-10)
            rss[k] += np.sum((y[rows] - X[rows] @ coef) ** 2)
            dof[k] += rows.sum() - 2
    s2 = rss / dof
    np.testing.assert_allclose(p.residual_variance(), s2, rtol=1e-9)
    rows = (ids == 1) & (arms == 0)
    cov = s2[0] * np.linalg.inv(X[rows].T @ X[rows] + 1e-6 * np.eye(2))
    np.testing.assert_allclose(post["cov"].values[0, 1], cov, rtol=1e-9)
    hyp = p.hyperparameters()
    assert np.all(np.isinf(np.diagonal(hyp["Sigma"].values, axis1=1, axis2=2)))
    assert np.all(hyp["Sigma"].values[:, 0, 1] == 0.0)
    np.testing.assert_allclose(hyp["sigma2"].values, s2, rtol=1e-9)
    assert float(hyp["h"]) == 15.0 and int(hyp["q"]) == 1


# ---------------------------------------------------------------------- shared behaviour


@pytest.mark.parametrize(("cls", "kwargs"), POLICIES)
def test_learns_easy_problem(cls, kwargs):
    beta = easy_problem()
    regret = run_policy(cls(2, 2, 2, rng=3, **kwargs), beta, 2000, noise=1.0)
    early, late = regret[:100].mean(), regret[-500:].mean()
    assert early > 0.01
    assert late < 0.25 * early


@pytest.mark.parametrize(("cls", "kwargs"), POLICIES)
def test_bad_input_leaves_state_unchanged(cls, kwargs):
    p = cls(3, 2, 2, rng=0, **kwargs)
    feed(p, 30)
    x = np.array([0.5, -0.5])
    before = snapshot(p)
    bad_calls = [
        (lambda: p.select(0, [1.0, 2.0, 3.0]), ValueError, "context"),
        (lambda: p.select(0, [np.nan, 1.0]), ValueError, "context"),
        (lambda: p.select(0, ["a", "b"]), TypeError, "context"),
        (lambda: p.select(3, x), ValueError, "instance"),
        (lambda: p.select(-1, x), ValueError, "instance"),
        (lambda: p.select(1.0, x), TypeError, "instance"),
        (lambda: p.select(True, x), TypeError, "instance"),
        (lambda: p.select("0", x), TypeError, "instance"),
        (lambda: p.update(0, x, 2, 1.0), ValueError, "arm"),
        (lambda: p.update(0, x, 1.0, 1.0), TypeError, "arm"),
        (lambda: p.update(0, [np.inf, 0.0], 0, 1.0), ValueError, "context"),
        (lambda: p.update(0, x[:1], 0, 1.0), ValueError, "context"),
        (lambda: p.update(5, x, 0, 1.0), ValueError, "instance"),
        (lambda: p.update(0, x, 0, np.nan), ValueError, "reward"),
        (lambda: p.update(0, x, 0, "1"), TypeError, "reward"),
    ]
    for call, exc, name in bad_calls:
        with pytest.raises(exc, match=name):
            call()
        assert snapshot(p) == before


@pytest.mark.parametrize(
    ("cls", "kwargs", "exc", "name"),
    [
        (LinUCB, {"alpha": -1.0}, ValueError, "alpha"),
        (LinUCB, {"alpha": np.nan}, ValueError, "alpha"),
        (LinUCB, {"ridge": 0.0}, ValueError, "ridge"),
        (LinUCB, {"alpha": "1"}, TypeError, "alpha"),
        (LinUCB, {"recompute_every": 0}, ValueError, "recompute_every"),
        (LinUCB, {"n_arms": 0}, ValueError, "n_arms"),
        (LinUCB, {"n_features": 2.0}, TypeError, "n_features"),
        (LinUCB, {"tie_break": "last"}, ValueError, "tie_break"),
        (LinUCB, {"rng": "seed"}, TypeError, "rng"),
        (LinTS, {"v": -0.1}, ValueError, "v"),
        (LinTS, {"v_schedule": "log"}, ValueError, "v_schedule"),
        (LinTS, {"ridge": -1.0}, ValueError, "ridge"),
        (OLSBandit, {"q": 0}, ValueError, "q"),
        (OLSBandit, {"q": 1.5}, TypeError, "q"),
        (OLSBandit, {"h": np.inf}, ValueError, "h"),
        (OLSBandit, {"h": -1.0}, ValueError, "h"),
        (OLSBandit, {"ridge": 0.0}, ValueError, "ridge"),
        (OLSBandit, {"warmup": "yes"}, TypeError, "warmup"),
        (OLSBandit, {"clock": "wall"}, ValueError, "clock"),
    ],
)
def test_constructor_validation(cls, kwargs, exc, name):
    args = {"n_instances": 2, "n_arms": 2, "n_features": 2} | kwargs
    with pytest.raises(exc, match=name):
        cls(**args)


@pytest.mark.parametrize(("cls", "kwargs"), POLICIES)
def test_clone_is_untrained_with_same_config(cls, kwargs):
    p = cls(2, 3, 2, rng=4, **kwargs)
    feed(p, 50)
    c = p.clone(rng=9)
    assert type(c) is cls
    params, cparams = p.get_params(), c.get_params()
    assert params.pop("rng") == 4 and cparams.pop("rng") == 9
    assert params == cparams
    assert c.t == 0
    fresh = cls(2, 3, 2, rng=9, **kwargs)
    assert snapshot(c) == snapshot(fresh)


@pytest.mark.parametrize(("cls", "kwargs"), POLICIES)
def test_posterior_and_hyperparameter_dims(cls, kwargs):
    N, K, d = 3, 4, 2
    p = cls(N, K, d, rng=0, **kwargs)
    feed(p, 60)
    post = p.posterior()
    assert post["mean"].dims == ("arm", "instance", "feature")
    assert post["mean"].shape == (K, N, d)
    assert post["cov"].dims == ("arm", "instance", "feature", "feature_")
    assert post["cov"].shape == (K, N, d, d)
    assert np.all(np.isfinite(post["mean"].values)) and np.all(np.isfinite(post["cov"].values))
    cov = post["cov"].values
    np.testing.assert_allclose(cov, np.swapaxes(cov, -1, -2), atol=1e-12)
    hyp = p.hyperparameters()
    assert hyp["Sigma"].dims == ("arm", "feature", "feature_")
    assert hyp["Sigma"].shape == (K, d, d)
    assert hyp["sigma2"].dims == ("arm",) and hyp["sigma2"].shape == (K,)


def test_linucb_lints_posterior_values():
    p = LinUCB(2, 2, 2, ridge=2.0, rng=0)
    feed(p, 40)
    post = p.posterior()
    np.testing.assert_array_equal(post["mean"].values[1, 0], p.stats.theta[0 * 2 + 1])
    np.testing.assert_array_equal(post["cov"].values[0, 1], p.stats.Ainv[1 * 2 + 0])
    np.testing.assert_allclose(p.hyperparameters()["Sigma"].values[1], 0.5 * np.eye(2))
    q = LinTS(2, 2, 2, v=0.5, ridge=2.0, rng=0)
    feed(q, 40)
    np.testing.assert_allclose(q.posterior()["cov"].values[0, 1], 0.25 * q.stats.Ainv[2])
    np.testing.assert_allclose(q.hyperparameters()["Sigma"].values[0], 0.125 * np.eye(2))
    np.testing.assert_allclose(q.hyperparameters()["sigma2"].values, 0.25)
