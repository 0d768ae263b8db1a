"""UCBBP, AUCBBP and the cascading baselines: algorithms against direct computations."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy.special import expit

from hierbandit.cascade.env import CascadeEnv, simulate_episode
from hierbandit.cascade.policies import (
    AUCBBP,
    UCBBP,
    CascadeEpsilonGreedy,
    CascadeGreedy,
    CascadeLinTS,
    CascadeLinUCB,
    CascadeRandom,
    beta_theory,
    check_cascade_feedback,
    default_cz,
    exploration_budget,
    round_robin,
)
from hierbandit.stats.logistic import OnlineLogistic, penalized_map
from tests.conftest import snapshot

K, D, H = 5, 5, 3
E = np.linspace(1.0, 3.0, K)


def _env(N=12, seed=0):
    return CascadeEnv.preset("mccb-repro", n_users=N, rng=seed)


def _play(policy, env, T, seed=1, public=False):
    """Run ``policy`` for T episodes; return the slates, displayed arms and clicks."""
    roll = env.rollout(T, rng=seed)
    out = []
    for t in range(T):
        X, P, U = roll.contexts[t], roll.click_prob[t], roll.uniforms[t]
        if public:
            policy.start_episode(X)
            arms, clicks = simulate_episode(P, U, policy.select)
        else:
            policy._start(X)
            arms, clicks = simulate_episode(P, U, policy._select)
        slate = None if policy._slate is None else policy._slate.copy()
        out.append((slate, arms, clicks))
        if public:
            policy.update(X, arms, clicks)
        else:
            policy._update(X, arms, clicks)
    return out


def _feedback(rng, N=6):
    """A valid episode: random slates truncated at random clicks."""
    X = rng.standard_normal((N, D))
    P = rng.uniform(0.1, 0.6, (N, K))
    slate = rng.integers(K, size=(N, H))
    arms, clicks = simulate_episode(P, rng.random((N, H)), lambda h, a: slate[:, h])
    return X, arms, clicks


# ---------------------------------------------------------------------- helpers
def test_round_robin_definition():
    rr = round_robin(3, 4, H, K)
    for n in range(4):
        for h in range(H):
            assert rr[n, h] == (n + h + 2 * H) % K
    # over K consecutive episodes every user-step slot sees every arm exactly once
    seen = np.stack([round_robin(t, 4, H, K) for t in range(1, 6)])
    assert all(sorted(seen[:, n, h]) == list(range(K)) for n in range(4) for h in range(H))


def test_exploration_budget_table_spec_4_2():
    def row(T, N):
        M = [exploration_budget(t, N, T) for t in range(1, T + 1)]
        first_one = next(t for t, m in enumerate(M, start=1) if m == 1)
        return M[0], M[4], M[9], M[19], first_one, sum(M)

    assert row(500, 10) == (8, 4, 2, 1, 11, 532)
    assert row(500, 50) == (42, 22, 10, 2, 21, 747)
    assert row(500, 100) == (85, 44, 20, 4, 25, 1026)
    assert row(1000, 100) == (86, 48, 23, 5, 28, 1590)


def test_theory_beta_magnitudes_spec_3_5():
    cz = default_cz(5)
    assert abs(cz - 4.64) < 0.01
    for n, want in ((100, 728), (1000, 892), (10_000, 1030)):
        assert abs(beta_theory(n, 10, 3.0, cz, 1.0, 0.05) - want) / want < 0.005
    assert beta_theory(0, 10, 3.0, cz, 1.0, 0.05) == beta_theory(2, 10, 3.0, cz, 1.0, 0.05)
    no_cz = beta_theory(100, 10, 3.0, cz, 1.0, 0.05, "lemma13.16")
    assert abs(no_cz * cz - beta_theory(100, 10, 3.0, cz, 1.0, 0.05)) < 1e-9


# ---------------------------------------------------------------------- UCBBP
def test_ucbbp_index_matches_eq_1_by_loops(rng):
    env = _env()
    pol = UCBBP(K, D, E, H, beta=0.7, warmup=1, rng=0)
    _play(pol, env, 3)
    X = rng.standard_normal((6, D))
    pol.start_episode(X)
    th, A_inv = pol.estimator.theta, np.linalg.inv(pol.estimator.A)
    for n in range(6):
        p = expit(X[n] @ th[:D] + th[D:])
        V = 0.0
        Q = np.zeros((H, K))
        for h in range(H - 1, -1, -1):  # Algorithm 2
            Q[h] = p * E + (1 - p) * V
            V = Q[h].max()
        for h in range(H):
            U = np.empty(K)
            for k in range(K):
                z = np.concatenate([X[n], np.eye(K)[k]])
                U[k] = Q[h, k] + 0.7 * np.sqrt(z @ A_inv @ z)
            assert pol._slate[n, h] == U.argmax()


def test_ucbbp_warmup_is_round_robin_and_update_runs():
    env = _env(N=4)
    pol = UCBBP(K, D, E, H, warmup=2, rng=0)
    out = _play(pol, env, 3)
    np.testing.assert_array_equal(out[0][0], round_robin(1, 4, H, K))
    np.testing.assert_array_equal(out[1][0], round_robin(2, 4, H, K))
    assert pol.t == 3 and pol.estimator.n_obs == sum(int((o[1] >= 0).sum()) for o in out)


def test_ucbbp_with_beta_zero_equals_greedy():
    env = _env()
    a = _play(UCBBP(K, D, E, H, beta=0.0, rng=0), env, 25)
    b = _play(CascadeGreedy(K, D, E, H, rng=0), env, 25)
    for (sa, aa, _), (sb, ab, _) in zip(a, b, strict=True):
        np.testing.assert_array_equal(sa, sb)
        np.testing.assert_array_equal(aa, ab)


class _FullBudget(AUCBBP):
    def budget(self, n_users):
        return n_users


def test_aucbbp_with_full_budget_equals_ucbbp():
    env = _env()
    a = _play(UCBBP(K, D, E, H, beta="theory", rng=0), env, 25)
    b = _play(_FullBudget(K, D, E, H, 25, beta="theory", rng=0), env, 25)
    for (sa, aa, _), (sb, ab, _) in zip(a, b, strict=True):
        np.testing.assert_array_equal(sa, sb)
        np.testing.assert_array_equal(aa, ab)


def test_aucbbp_top_m_rule_by_loops(rng):
    env = _env(N=15)
    T = 30
    pol = AUCBBP(K, D, E, H, T, beta=2.0, rng=0)
    _play(pol, env, 4)
    X = rng.standard_normal((15, D))
    pol.start_episode(X)
    M = exploration_budget(5, 15, T)
    assert pol._budget == M and 1 <= M < 15
    Q = pol._greedy_tables(X)
    A_inv = np.linalg.inv(pol.estimator.A)
    beta = pol.confidence_radius()
    for h in range(H):
        k_ucb, k_grd, s = [], [], []
        for n in range(15):
            w = np.array(
                [
                    np.concatenate([X[n], np.eye(K)[k]])
                    @ A_inv
                    @ np.concatenate([X[n], np.eye(K)[k]])
                    for k in range(K)
                ]
            )
            ku = int(np.argmax(Q[n, h] + beta * np.sqrt(w)))
            k_ucb.append(ku)
            k_grd.append(int(np.argmax(Q[n, h])))
            s.append(w[ku])
        top = sorted(range(15), key=lambda n: (-s[n], n))[:M]
        for n in range(15):
            assert pol._slate[n, h] == (k_ucb[n] if n in top else k_grd[n])


def test_aucbbp_active_pool_ranks_only_active_users():
    env = _env(N=10)
    T = 40
    pol = AUCBBP(K, D, E, H, T, beta=2.0, rank_pool="active", rng=0)
    assert not pol.open_loop
    _play(pol, env, 6)
    X = np.random.default_rng(5).standard_normal((10, D))
    pol.start_episode(X)
    M = pol._budget
    active = np.zeros(10, dtype=bool)
    active[[1, 4, 7]] = True
    arms = pol.select(1, active)
    s = pol._score[:, 1]
    order = [n for n in np.argsort(-s, kind="stable") if active[n]][:M]
    for n in np.flatnonzero(active):
        want = pol._k_ucb[n, 1] if n in order else pol._k_greedy[n, 1]
        assert arms[n] == want
    # with everybody active it is the literal rule
    lit = AUCBBP(K, D, E, H, T, beta=2.0, rng=0)
    lit.estimator, lit.t = pol.estimator.copy(), pol.t  # the same learner state
    lit.start_episode(X)
    np.testing.assert_array_equal(pol.select(2, np.ones(10, bool)), lit._slate[:, 2])


def test_epsilon_greedy_rate_and_extremes():
    env = _env(N=50)
    pol = CascadeEpsilonGreedy(K, D, E, H, epsilon=0.3, warmup=0, rng=0)
    grd = CascadeGreedy(K, D, E, H, warmup=0, rng=0)
    X = env.rollout(1, rng=3).contexts[0]
    diff = []
    for _ in range(40):
        pol.start_episode(X)
        grd.start_episode(X)
        diff.append(pol._slate != grd._slate)
    rate = np.mean(diff)
    assert (
        abs(rate - 0.3 * (K - 1) / K) < 0.03
    )  # a random arm equals the greedy one 1/K of the time
    allrand = CascadeEpsilonGreedy(K, D, E, H, epsilon=1.0, warmup=0, rng=1)
    counts = np.bincount(allrand.recommend(np.zeros((2000, D))).ravel(), minlength=K)
    assert counts.min() > 0.8 * counts.mean()
    rnd = CascadeRandom(K, D, E, H, rng=2)
    assert rnd.recommend(np.zeros((5, D))).shape == (5, H)


def test_update_rules_match_direct_computation():
    env = _env(N=6)
    for rule in ("newton1", "paper_literal", "batch_map"):
        pol = UCBBP(K, D, E, H, update_rule=rule, rng=0)
        out = _play(pol, env, 8)
        X_all = env.rollout(8, rng=1).contexts
        est = OnlineLogistic(K + D, 1.0, rule)
        Zs, ys = [], []
        for t, (_, arms, clicks) in enumerate(out):
            n_idx, h_idx = np.nonzero(arms >= 0)
            Z = np.hstack([X_all[t][n_idx], np.eye(K)[arms[n_idx, h_idx]]])
            y = clicks[n_idx, h_idx].astype(float)
            est.update(Z, y)
            Zs.append(Z)
            ys.append(y)
        np.testing.assert_allclose(pol.theta, est.theta, rtol=1e-12, atol=1e-14)
        if rule == "batch_map":
            ref = penalized_map(np.vstack(Zs), np.concatenate(ys), lam=1.0, tol=1e-12)
            np.testing.assert_allclose(pol.theta, ref.theta, atol=1e-7)


def test_public_and_unchecked_paths_agree():
    env = _env()
    a = _play(UCBBP(K, D, E, H, rng=0), env, 10, public=True)
    b = _play(UCBBP(K, D, E, H, rng=0), env, 10, public=False)
    for (sa, aa, _), (sb, ab, _) in zip(a, b, strict=True):
        np.testing.assert_array_equal(sa, sb)
        np.testing.assert_array_equal(aa, ab)


def test_random_tie_break_picks_among_ties_only():
    pol = UCBBP(K, D, E, H, tie_break="random", rng=0)
    scores = np.array([[1.0, 3.0, 3.0, 0.0, 3.0]] * 3000)
    k = pol._argmax(scores)
    assert set(np.unique(k)) == {1, 2, 4}
    first = UCBBP(K, D, E, H, rng=0)._argmax(scores)
    assert np.all(first == 1)


# ---------------------------------------------------------------------- linear baselines
def test_cascade_linucb_ridge_and_ranking(rng):
    env = _env(N=8)
    pol = CascadeLinUCB(K, D, E, H, alpha=0.3, lam=2.0, rng=0)
    out = _play(pol, env, 5)
    X_all = env.rollout(5, rng=1).contexts
    Zs, ys = [], []
    for t, (_, arms, clicks) in enumerate(out):
        n_idx, h_idx = np.nonzero(arms >= 0)
        Zs.append(np.hstack([X_all[t][n_idx], np.eye(K)[arms[n_idx, h_idx]]]))
        ys.append(clicks[n_idx, h_idx].astype(float))
    Z, y = np.vstack(Zs), np.concatenate(ys)
    ridge = np.linalg.solve(2.0 * np.eye(K + D) + Z.T @ Z, Z.T @ y)
    np.testing.assert_allclose(pol.theta_bar, ridge, rtol=1e-10, atol=1e-12)
    X = rng.standard_normal((4, D))
    slates = pol.recommend(X)
    M_inv = np.linalg.inv(pol.M)
    for n in range(4):
        Zn = np.hstack([np.tile(X[n], (K, 1)), np.eye(K)])
        ucb = np.minimum(Zn @ ridge + 0.3 * np.sqrt(np.einsum("kp,pq,kq->k", Zn, M_inv, Zn)), 1.0)
        want = np.argsort(-np.clip(ucb, 0, 1) * E, kind="stable")[:H]
        np.testing.assert_array_equal(slates[n], want)
        assert len(set(slates[n])) == H  # distinct items, as in the original


def test_cascade_lints_with_zero_scale_equals_linucb_with_zero_width():
    env = _env()
    a = _play(CascadeLinTS(K, D, E, H, sigma=0.0, rng=0), env, 6)
    b = _play(CascadeLinUCB(K, D, E, H, alpha=0.0, rng=0), env, 6)
    for (sa, _, _), (sb, _, _) in zip(a, b, strict=True):
        np.testing.assert_array_equal(sa, sb)
    plan = CascadeLinUCB(K, D, E, H, slate="plan", rng=0)
    assert plan.recommend(np.zeros((3, D))).shape == (3, H)


# ---------------------------------------------------------------------- API and validation
def test_posterior_get_params_clone_and_prior():
    pol = AUCBBP(K, D, E, H, 50, beta="theory", update_rule="batch_map", rng=3)
    post = pol.posterior()
    assert isinstance(post, xr.Dataset)
    assert post["cov"].dims == ("param", "param_") and post.sizes["param"] == K + D
    assert list(post["param"].values[-1:]) == ["arm4"]
    params = pol.get_params()
    assert params["update_rule"] == "batch_map" and params["n_episodes"] == 50
    env = _env()
    a = _play(pol, env, 5)
    b = _play(pol.clone(rng="same"), env, 5)
    for (sa, _, _), (sb, _, _) in zip(a, b, strict=True):
        np.testing.assert_array_equal(sa, sb)
    for cls in (UCBBP, CascadeGreedy, CascadeRandom, CascadeLinUCB, CascadeLinTS):
        p = cls(K, D, E, H, rng=1)
        assert type(p.clone()) is cls and p.clone().get_params().keys() == p.get_params().keys()
    mean = np.linspace(-1, 1, K + D)
    cov = np.diag(np.linspace(0.5, 2.0, K + D))
    warm = UCBBP(K, D, E, H, prior=(mean, cov), rng=0)
    np.testing.assert_allclose(warm.theta, mean)
    np.testing.assert_allclose(warm.estimator.A, np.linalg.inv(cov))
    lin = CascadeLinUCB(K, D, E, H, prior=(mean, cov))
    np.testing.assert_allclose(lin.theta_bar, mean)
    with pytest.raises(ValueError, match="prior"):
        UCBBP(K, D, E, H, prior=(mean[:-1], cov))
    with pytest.raises(TypeError, match="prior"):
        UCBBP(K, D, E, H, prior="flat")


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"rewards": [1.0, 2.0, 0.0, 1.0, 1.0]}, ValueError, "e_k > 0"),
        ({"rewards": [1.0, 2.0, -3.0, 1.0, 1.0]}, ValueError, "e_k > 0"),
        ({"rewards": [1.0, np.nan, 1.0, 1.0, 1.0]}, ValueError, "finite"),
        ({"rewards": [1.0, 2.0]}, ValueError, "rewards"),
        ({"horizon": 0}, ValueError, "horizon"),
        ({"beta": "big"}, ValueError, "beta"),
        ({"beta": -1.0}, ValueError, "beta"),
        ({"beta": np.nan}, ValueError, "beta"),
        ({"lam": 0.0}, ValueError, "lam"),
        ({"delta": 0.5, "beta": "theory"}, ValueError, "delta"),
        ({"update_rule": "irls"}, ValueError, "update_rule"),
        ({"warmup": -1}, ValueError, "warmup"),
        ({"tie_break": "last"}, ValueError, "tie_break"),
        ({"theory_variant": "thm7.1"}, ValueError, "theory_variant"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, err, match):
    args = {"n_arms": K, "n_features": D, "rewards": E, "horizon": H, **kwargs}
    with pytest.raises(err, match=match):
        UCBBP(**args)


def test_aucbbp_rejects_short_horizon_and_bad_pool():
    with pytest.raises(ValueError, match="n_episodes"):
        AUCBBP(K, D, E, H, 1)
    with pytest.raises(ValueError, match="rank_pool"):
        AUCBBP(K, D, E, H, 10, rank_pool="some")
    with pytest.raises(ValueError, match="epsilon"):
        CascadeEpsilonGreedy(K, D, E, H, epsilon=1.5)


def _bad_feedbacks(rng):
    X, arms, clicks = _feedback(rng)
    out = []
    out.append(("contexts", (X[:, :3], arms, clicks), ValueError))
    out.append(("contexts", (np.where(X > 0, np.nan, X), arms, clicks), ValueError))
    out.append(("contexts", (X[0], arms, clicks), ValueError))
    a = arms.copy()
    a[0, 0] = K
    out.append(("unknown arms", (X, a, clicks), ValueError))
    a = arms.copy()
    a[0, 0] = -2
    out.append(("unknown arms", (X, a, clicks), ValueError))
    out.append(("integer", (X, arms.astype(float), clicks), TypeError))
    out.append(("arms must have shape", (X, arms[:, :2], clicks), ValueError))
    c = clicks.astype(float)
    c[0, 0] = np.nan
    out.append(("clicks", (X, arms, c), ValueError))
    c = clicks.copy()
    c[0, 0] = 2
    out.append(("0/1", (X, arms, c), ValueError))
    # cascade-rule violations on a fresh, fully displayed session
    a = np.tile(np.arange(H), (X.shape[0], 1))
    c = np.zeros_like(a)
    c[0, 0] = 1  # a click followed by displayed items
    out.append(("after a click", (X, a, c), ValueError))
    c = np.zeros_like(a)
    c[0, 0] = c[0, 2] = 1
    out.append(("at most one click", (X, a, c), ValueError))
    a2 = a.copy()
    a2[0, 1] = -1  # gap
    out.append(("prefix", (X, a2, np.zeros_like(a)), ValueError))
    a3 = a.copy()
    a3[0, 2] = -1  # short session without a click
    out.append(("without a click", (X, a3, np.zeros_like(a)), ValueError))
    c = np.zeros_like(a)
    a4 = a.copy()
    a4[0, 1:] = -1
    c[0, 2] = 1  # click where nothing was shown
    out.append(("nothing was displayed", (X, a4, c), ValueError))
    return out


@pytest.mark.parametrize(
    "policy_factory",
    [
        lambda: UCBBP(K, D, E, H, rng=0),
        lambda: AUCBBP(K, D, E, H, 20, beta="theory", rng=0),
        lambda: UCBBP(K, D, E, H, update_rule="batch_map", rng=0),
        lambda: CascadeEpsilonGreedy(K, D, E, H, rng=0),
        lambda: CascadeLinUCB(K, D, E, H, rng=0),
        lambda: CascadeLinTS(K, D, E, H, rng=0),
    ],
)
def test_bad_inputs_raise_and_change_nothing(policy_factory, rng):
    env = _env(N=6)
    pol = policy_factory()
    _play(pol, env, 3)
    for match, args, err in _bad_feedbacks(rng):
        before = snapshot(pol)
        with pytest.raises(err, match=match):
            pol.update(*args)
        assert snapshot(pol) == before, match
    before = snapshot(pol)
    with pytest.raises(ValueError, match="contexts"):
        pol.start_episode(np.zeros((4, D + 1)))
    with pytest.raises(ValueError, match="contexts"):
        pol.start_episode(np.full((4, D), np.inf))
    with pytest.raises(ValueError, match="contexts"):
        pol.start_episode(np.zeros((0, D)))
    with pytest.raises(RuntimeError, match="start_episode"):
        pol.select(0)
    assert snapshot(pol) == before
    pol.start_episode(np.zeros((4, D)))
    before = snapshot(pol)
    with pytest.raises(ValueError, match="step"):
        pol.select(H)
    with pytest.raises(TypeError, match="step"):
        pol.select(1.0)
    with pytest.raises(ValueError, match="active"):
        pol.select(0, np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="active"):
        pol.select(0, np.ones(4))
    assert snapshot(pol) == before


def test_check_cascade_feedback_accepts_valid_episodes(rng):
    for _ in range(20):
        X, arms, clicks = _feedback(rng)
        _, A, C = check_cascade_feedback(X, arms, clicks.astype(bool), D, K, H)
        assert A.dtype == np.int64 and C.dtype == np.int8
        np.testing.assert_array_equal(A, arms)
