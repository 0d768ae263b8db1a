"""The cascading environment: exact planning, slate values, common random numbers, checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import expit

from hierbandit.cascade.env import (
    PRESETS,
    CascadeEnv,
    backward_plan,
    performance_difference,
    simulate_episode,
    slate_value,
)
from tests.conftest import snapshot


def _random_instance(rng, K, n=1):
    P = rng.uniform(0.02, 0.95, size=(n, K))
    e = rng.uniform(0.5, 3.0, size=K)
    return P, e


def _brute_force(P, e, H):
    """Values of every slate in [K]^H (with replacement), for each context."""
    K = P.shape[-1]
    slates = np.array(list(itertools.product(range(K), repeat=H)))
    vals = np.stack([slate_value(P, e, np.broadcast_to(s, (*P.shape[:-1], H))) for s in slates])
    return slates, vals


@pytest.mark.parametrize(("K", "H"), [(2, 1), (2, 3), (3, 2), (3, 3), (4, 3), (5, 2)])
def test_backward_plan_equals_brute_force_enumeration(rng, K, H):
    P, e = _random_instance(rng, K, n=25)
    Q, V = backward_plan(P, e, H)
    slates, vals = _brute_force(P, e, H)
    np.testing.assert_allclose(V[:, 0], vals.max(axis=0), rtol=1e-12)
    greedy = Q.argmax(axis=-1)
    np.testing.assert_allclose(slate_value(P, e, greedy), vals.max(axis=0), rtol=1e-12)
    # the argmax slate is an optimal slate (up to ties: unique here with continuous draws)
    best = slates[vals.argmax(axis=0)]
    np.testing.assert_array_equal(greedy, best)
    assert np.all(V[:, H] == 0)


def test_slate_value_matches_monte_carlo(rng):
    K, H, n = 4, 3, 100_000
    P, e = _random_instance(rng, K)
    slate = np.array([2, 0, 2])
    exact = slate_value(P[0], e, slate)
    U = rng.random((n, H))
    f = P[0, slate]
    hit = f > U
    clicked = hit.any(axis=1)
    first = hit.argmax(axis=1)
    reward = np.where(clicked, e[slate[first]], 0.0)
    se = reward.std(ddof=1) / np.sqrt(n)
    assert abs(reward.mean() - exact) < 4 * se


def test_proposition_4_2_click_probability_of_optimal_arm_nondecreasing(rng):
    """f_{k*_h} is non-decreasing in the step h, for any rewards (spec §2.4, A13)."""
    for _ in range(2000):
        K, H = int(rng.integers(2, 8)), int(rng.integers(1, 8))
        P, e = _random_instance(rng, K)
        if rng.random() < 0.5:  # the paper's opposite ordering
            P, e = -np.sort(-P, axis=-1), np.sort(e)
        Q, _ = backward_plan(P, e, H)
        k = Q[0].argmax(axis=-1)
        f = P[0, k]
        assert np.all(np.diff(f) >= -1e-12)


def test_proposition_4_1_counterexample_and_skip_never_better():
    """Unimodality in k fails (spec §2.4): Q = (0.9, 0.55, 0.9, 0.21) at h = H."""
    P = np.array([[0.9, 0.5, 0.45, 0.1]])
    e = np.array([1.0, 1.1, 2.0, 2.1])
    Q, V = backward_plan(P, e, 1)
    np.testing.assert_allclose(Q[0, 0], [0.9, 0.55, 0.9, 0.21])
    q = Q[0, 0]
    assert q[1] < q[0] and q[1] < q[2]  # two peaks
    rng = np.random.default_rng(3)
    P, e = _random_instance(rng, 5, n=500)
    Q, V = backward_plan(P, e, 4)
    assert np.all(Q.max(axis=-1) >= V[:, 1:] - 1e-12)  # skipping (value V_{h+1}) never wins


def test_performance_difference_telescopes_and_is_unbiased(rng):
    K, H = 3, 3
    P, e = _random_instance(rng, K)
    Q, V = backward_plan(P, e, H)
    slate = np.array([1, 1, 0])
    gap = V[0, :-1] - Q[0, np.arange(H), slate]
    reach = np.concatenate([[1.0], np.cumprod(1 - P[0, slate])[:-1]])
    exact = V[0, 0] - slate_value(P[0], e, slate)
    assert abs(np.sum(reach * gap) - exact) < 1e-12
    # the realised sum over displayed steps averages to the same value
    n = 40_000
    U = rng.random((n, H))
    arms, _ = simulate_episode(np.repeat(P, n, 0), U, lambda h, a: np.full(n, slate[h]))
    est = performance_difference(np.repeat(Q, n, 0), np.repeat(V, n, 0), arms)
    assert abs(est.mean() - exact) < 4 * est.std(ddof=1) / np.sqrt(n) + 1e-12


def test_simulate_episode_follows_the_cascade_rule(rng):
    N, H, K = 200, 4, 3
    P = rng.uniform(0.1, 0.6, size=(N, K))
    U = rng.random((N, H))
    slate = rng.integers(K, size=(N, H))
    arms, clicks = simulate_episode(P, U, lambda h, a: slate[:, h])
    for n in range(N):
        hit = U[n] < P[n, slate[n]]
        if hit.any():
            h = int(hit.argmax())
            assert clicks[n].sum() == 1 and clicks[n, h] == 1
            np.testing.assert_array_equal(arms[n, : h + 1], slate[n, : h + 1])
            assert np.all(arms[n, h + 1 :] == -1)
        else:
            assert clicks[n].sum() == 0
            np.testing.assert_array_equal(arms[n], slate[n])


def test_rollout_common_random_numbers_and_prefix():
    env = CascadeEnv.preset("mccb-repro", n_users=7, rng=0)
    a = env.rollout(20, rng=5)
    b = env.rollout(20, rng=5)
    c = env.rollout(8, rng=5)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a, c, strict=True):
        np.testing.assert_array_equal(x[:8], y)
    np.testing.assert_allclose(a.click_prob, env.click_probabilities(a.contexts))
    np.testing.assert_allclose(a.optimal_value, env.optimal_value(a.contexts))
    np.testing.assert_allclose(a.optimal_value, env.value(a.contexts, a.optimal_slate))
    assert a.n_episodes == 20 and a.uniforms.shape == (20, 7, 3)


def test_preset_matches_spec_section_6_3():
    env = CascadeEnv.preset("mccb-repro", n_users=10, rng=1)
    d, K = env.n_features, env.n_arms
    assert (d, K, env.horizon) == (5, 5, 3)
    np.testing.assert_allclose(env.rewards, np.linspace(1, 3, 5))
    np.testing.assert_allclose(env.theta[d:], np.linspace(0.5, -2.5, 5))
    assert abs(np.linalg.norm(env.theta[:d]) - 1.0) < 1e-12
    # mean click probabilities of the arms ≈ (0.60, 0.45, 0.30, 0.19, 0.11) (x ~ N(0, I))
    roll = env.rollout(400, rng=2)
    np.testing.assert_allclose(
        roll.click_prob.mean(axis=(0, 1)), [0.60, 0.45, 0.30, 0.19, 0.11], atol=0.02
    )
    assert abs(roll.optimal_value.mean() - 1.33) < 0.03
    bayes = CascadeEnv.preset("mccb-bayes", rng=1)
    np.testing.assert_allclose(bayes.theta[3:], [0.5, -0.5, -1.5])
    assert abs(np.linalg.norm(bayes.theta[:3]) - 1 / np.sqrt(3)) < 1e-12
    assert set(PRESETS) >= {"mccb-repro", "mccb-bayes"}


def test_clone_redraws_unless_fixed():
    env = CascadeEnv(n_users=3, rng=1)
    other = env.clone(rng=2)
    assert not np.array_equal(env.theta, other.theta)
    np.testing.assert_array_equal(env.theta[5:], other.theta[5:])
    same = env.clone(rng=1)
    np.testing.assert_array_equal(env.theta, same.theta)
    theta = np.arange(10) / 10.0
    fixed = CascadeEnv(n_users=3, theta=theta)
    np.testing.assert_array_equal(fixed.clone(rng=9).theta, theta)
    np.testing.assert_array_equal(fixed.clone(rng=9, n_users=8).theta, theta)
    assert fixed.clone(n_users=8).n_users == 8
    ds = fixed.parameters()
    assert ds["theta"].dims == ("param",) and list(ds["param"].values[:2]) == ["x0", "x1"]


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"rewards": [1.0, 2.0, 0.0, 1.0, 1.0]}, ValueError, "rewards"),
        ({"rewards": [1.0, 2.0, -1.0, 1.0, 1.0]}, ValueError, "e_k > 0"),
        ({"rewards": [1.0, np.nan, 1.0, 1.0, 1.0]}, ValueError, "rewards"),
        ({"rewards": [1.0, 2.0]}, ValueError, "rewards"),
        ({"horizon": 0}, ValueError, "horizon"),
        ({"n_users": 0}, ValueError, "n_users"),
        ({"theta": np.full(10, np.nan)}, ValueError, "theta"),
        ({"theta": np.ones(9)}, ValueError, "theta"),
        ({"contexts": "uniform"}, ValueError, "contexts"),
        ({"horizon": 2.0}, TypeError, "horizon"),
    ],
)
def test_env_rejects_bad_configuration(kwargs, err, match):
    with pytest.raises(err, match=match):
        CascadeEnv(**kwargs)


def test_env_rejects_bad_inputs_and_changes_nothing():
    env = CascadeEnv(n_users=4, rng=0)
    before = snapshot(env)
    X = np.zeros((4, 5))
    with pytest.raises(ValueError, match="contexts"):
        env.click_probabilities(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="finite"):
        env.optimal_value(np.full((4, 5), np.nan))
    with pytest.raises(ValueError, match="unknown arms"):
        env.value(X, np.full((4, 3), 5))
    with pytest.raises(ValueError, match="slates"):
        env.value(X, np.zeros((4, 2), dtype=int))
    with pytest.raises(TypeError, match="integer"):
        env.value(X, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="rewards"):
        backward_plan(np.full((2, 3), 0.5), [1.0, 0.0, 1.0], 2)
    with pytest.raises(ValueError, match="horizon"):
        backward_plan(np.full((2, 3), 0.5), [1.0, 1.0, 1.0], 0)
    with pytest.raises(ValueError, match="probabilities"):
        backward_plan(np.full((2, 3), np.nan), [1.0, 1.0, 1.0], 2)
    assert snapshot(env) == before
    with pytest.raises(ValueError):
        env.theta[0] = 1.0  # read-only


def test_simulate_log_rows_follow_the_cascade_rule():
    env = CascadeEnv.preset("mccb-bayes", n_users=5, rng=0)
    df = env.simulate_log(12, rng=1)
    assert list(df.columns[:5]) == ["episode", "user", "position", "arm", "click"]
    for (_, _), g in df.groupby(["episode", "user"]):
        assert list(g["position"]) == list(range(len(g)))
        assert g["click"].sum() <= 1
        if g["click"].sum() == 1:
            assert g["click"].iloc[-1] == 1
        else:
            assert len(g) == env.horizon
        assert g[["x0", "x1", "x2"]].nunique().max() == 1
    # the click frequencies agree with the model
    d = env.n_features
    eta = df[["x0", "x1", "x2"]].to_numpy() @ env.theta[:d] + env.theta[d + df["arm"]]
    assert abs(df["click"].mean() - expit(eta).mean()) < 0.06
