"""Cascade policies serve batches: ``recommend_batch`` gives B users their slates in one call
and ``update_batch`` records B users' sessions (arrays or a DataFrame of displayed positions);
``end_episode`` learns from the episode's sessions at once. Batches equal the loop of one-user
calls in the same order, and the paper's episode (``recommend`` / ``update``), bit for bit:
slates, tie and exploration draws, and the state."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierbandit.cascade.env import CascadeEnv, simulate_episode
from hierbandit.cascade.policies import (
    AUCBBP,
    UCBBP,
    CascadeEpsilonGreedy,
    CascadeGreedy,
    CascadeLinTS,
    CascadeLinUCB,
    CascadeRandom,
)
from tests.conftest import snapshot

N, T = 12, 7
ENV = CascadeEnv.preset("mccb-repro", n_users=N, rng=0)
K, D, H = ENV.n_arms, ENV.n_features, ENV.horizon
FLAT = np.ones(K)  # equal rewards: every arm ties before anything is learned

CONFIGS = {
    "ucbbp": (UCBBP, {}),
    "ucbbp-ties": (UCBBP, {"warmup": 0, "tie_break": "random", "rewards": FLAT}),
    "ucbbp-theory": (UCBBP, {"beta": "theory", "warmup": 1}),
    "eps-greedy": (CascadeEpsilonGreedy, {"epsilon": 0.4}),
    "eps-greedy-ties": (
        CascadeEpsilonGreedy,
        {"warmup": 0, "tie_break": "random", "rewards": FLAT},
    ),
    "greedy-map": (CascadeGreedy, {"update_rule": "batch_map"}),
    "random": (CascadeRandom, {}),
    "linucb": (CascadeLinUCB, {"tie_break": "random", "rewards": FLAT}),
    "linucb-plan": (CascadeLinUCB, {"slate": "plan"}),
    "lints": (CascadeLinTS, {}),
    "lints-plan": (CascadeLinTS, {"slate": "plan", "tie_break": "random"}),
}


def _make(name):
    cls, kw = CONFIGS[name]
    kw = dict(kw)
    return cls(K, D, kw.pop("rewards", ENV.rewards), H, rng=9, **kw)


def _episodes(seed, masked):
    roll = ENV.rollout(T, rng=seed)
    rng = np.random.default_rng(seed)
    for t in range(T):
        X = roll.contexts[t].copy()
        X[::4] = 0.0  # users whose logits are the arm intercepts alone
        mask = None
        if masked and t % 2:
            mask = rng.random((N, K)) < 0.5
            mask[np.arange(N), rng.integers(K, size=N)] = True
            mask[0] = False
            mask[0, 2] = True  # one arm only: the slate repeats it
        yield X, mask, roll.click_prob[t], roll.uniforms[t]


def _state(p):
    """:func:`snapshot` of a policy, with the rows ``batch_map`` keeps instead of its whole
    buffer (whose spare capacity is uninitialised)."""
    snap = snapshot(p)
    est = getattr(p, "estimator", None)
    if est is not None:
        Z, y = est.stored_data()
        snap[1]["estimator"][1].update({"_Z": snapshot(Z), "_y": snapshot(y)})
    return snap


def _sessions(slates, probs, uniforms):
    return simulate_episode(probs, uniforms, lambda h, active: slates[:, h])


def _frame(X, arms, clicks, ids):
    """One row per displayed position, the sessions in order, each one's rows backwards."""
    n, h = np.nonzero(arms >= 0)
    order = np.lexsort((-h, n))
    n, h = n[order], h[order]
    frame = pd.DataFrame(X[n], columns=[f"x{j}" for j in range(D)])
    frame = frame.assign(user=np.asarray(ids, dtype=object)[n], position=h, arm=arms[n, h])
    return frame.assign(click=clicks[n, h])


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_batches_equal_the_loop_and_the_episode(name, masked):
    loop, batch, episode = _make(name), _make(name), _make(name)
    for t, (X, mask, probs, uniforms) in enumerate(_episodes(3, masked)):
        rows = [None if mask is None else mask[i : i + 1] for i in range(N)]
        one = np.concatenate(
            [loop.recommend_batch(X[i : i + 1], allowed=rows[i]) for i in range(N)]
        )
        cut = 5
        two = np.concatenate(
            [
                batch.recommend_batch(X[:cut], allowed=None if mask is None else mask[:cut]),
                batch.recommend_batch(X[cut:], allowed=None if mask is None else mask[cut:]),
            ]
        )
        plan = episode.recommend(X, allowed=mask)
        assert np.array_equal(one, two) and np.array_equal(two, plan)
        if mask is not None:
            assert np.take_along_axis(mask, two, axis=1).all()
            assert np.all(two[0] == 2)
        arms, clicks = _sessions(two, probs, uniforms)
        for i in range(N):
            loop.update_batch(X[i : i + 1], arms[i : i + 1], clicks[i : i + 1])
        if t % 2:
            batch.update_batch(_frame(X, arms, clicks, [f"u{i}" for i in range(N)]))
        else:
            batch.update_batch(X[:cut], arms[:cut], clicks[:cut])
            batch.update_batch(X[cut:], arms[cut:], clicks[cut:])
        loop.end_episode()
        batch.end_episode()
        episode.update(X, arms, clicks)
        assert _state(loop) == _state(batch) == _state(episode)
    assert episode.t == T


def test_ties_and_exploration_are_drawn():
    """The configurations above do draw: tied arms are spread by the draws, explored arms
    cover every allowed arm and only those."""
    p = _make("ucbbp-ties")
    slates = p.recommend_batch(np.zeros((400, D)))
    assert np.unique(slates[:, 0]).size == K
    g = CascadeEpsilonGreedy(K, D, ENV.rewards, H, epsilon=1.0, warmup=0, rng=0)
    mask = np.zeros((2000, K), dtype=bool)
    mask[:, [1, 3]] = True
    shown = g.recommend_batch(np.ones((2000, D)), allowed=mask)
    assert set(np.unique(shown)) == {1, 3}
    assert 0.45 < np.mean(shown == 1) < 0.55


def test_aucbbp_plans_an_episode_in_one_call():
    kw = {"n_episodes": 20, "rng": 4}
    a, b = AUCBBP(K, D, ENV.rewards, H, **kw), AUCBBP(K, D, ENV.rewards, H, **kw)
    active = AUCBBP(K, D, ENV.rewards, H, rank_pool="active", **kw)
    for X, mask, probs, uniforms in _episodes(5, masked=True):
        slates = a.recommend_batch(X, allowed=mask)
        assert np.array_equal(slates, b.recommend(X, allowed=mask))
        assert np.array_equal(slates, active.recommend_batch(X, allowed=mask))
        with pytest.raises(ValueError, match="one recommend_batch call"):
            a.recommend_batch(X[:1])
        arms, clicks = _sessions(slates, probs, uniforms)
        a.update_batch(X[:3], arms[:3], clicks[:3])
        a.update_batch(X[3:], arms[3:], clicks[3:])
        a.end_episode()
        b.update(X, arms, clicks)
        active.update(X, arms, clicks)
        plan_a, plan_b = _state(a)[1], _state(b)[1]
        for name in ("_k_ucb", "_k_greedy", "_score", "_budget"):  # the step-wise plan
            plan_a.pop(name), plan_b.pop(name)
        assert plan_a == plan_b
    assert a.t == T and a._k_ucb is None  # the serving calls leave the step-wise plan alone


def _bad_feedback():
    X = np.ones((3, D))
    arms = np.array([[0, 1, 2], [3, -1, -1], [4, 0, 1]])
    clicks = np.array([[0, 0, 1], [1, 0, 0], [0, 0, 0]])
    gap, late, unknown, nan = arms.copy(), clicks.copy(), arms.copy(), X.copy()
    gap[2, 1] = -1
    late[2, 2] = 1
    late[2, 0] = 1
    unknown[2, 2] = K
    nan[2, 0] = np.nan
    return [
        ((X, gap, clicks), ValueError, "prefix"),
        ((X, arms, late), ValueError, "at most one click"),
        ((X, unknown, clicks), ValueError, "unknown arms"),
        ((nan, arms, clicks), ValueError, "contexts"),
        ((X[:2], arms, clicks), ValueError, "arms must have shape"),
    ]


def _bad_frames():
    X = np.ones((3, D))
    arms = np.array([[0, 1, 2], [3, -1, -1], [4, 0, 1]])
    clicks = np.array([[0, 0, 1], [1, 0, 0], [0, 0, 0]])
    good = _frame(X, arms, clicks, ["a", "b", "c"]).sort_index()
    dup = pd.concat([good, good.iloc[[0]]])
    moved = good.copy()
    moved.loc[moved.index[-1], "x0"] = 5.0
    short = good[~((good["user"] == "c") & (good["position"] == 2))]
    far = good.copy()
    far.loc[far.index[0], "position"] = H
    text = good.assign(arm=good["arm"].astype(str))
    return [
        (dup, ValueError, "same position twice"),
        (moved, ValueError, "context of a session"),
        (short, ValueError, "must display all H"),
        (far, ValueError, "position column"),
        (text, TypeError, "arm column"),
        (good.drop(columns="click"), ValueError, "lacks the columns"),
    ]


@pytest.mark.parametrize(("args", "exc", "match"), _bad_feedback())
def test_bad_sessions_refuse_the_whole_batch(args, exc, match):
    p = _make("ucbbp")
    X, _, probs, uniforms = next(_episodes(1, masked=False))
    arms, clicks = _sessions(p.recommend_batch(X), probs, uniforms)
    p.update_batch(X, arms, clicks)
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        p.update_batch(*args)
    assert snapshot(p) == before


@pytest.mark.parametrize(("frame", "exc", "match"), _bad_frames())
def test_bad_frames_refuse_the_whole_batch(frame, exc, match):
    p = _make("lints")
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        p.update_batch(frame)
    assert snapshot(p) == before


def test_bad_requests_change_nothing():
    p = _make("eps-greedy")
    p.end_episode()
    p.end_episode()  # past the warm-up: the plan draws
    before = snapshot(p)
    for kwargs, exc in [
        ({"allowed": np.zeros((2, K), dtype=bool)}, ValueError),
        ({"allowed": np.ones((2, K - 1), dtype=bool)}, ValueError),
        ({"allowed": [[0], [K]]}, ValueError),
        ({"allowed": [[0], "a"]}, TypeError),
    ]:
        with pytest.raises(exc, match="allowed"):
            p.recommend_batch(np.ones((2, D)), **kwargs)
    with pytest.raises(ValueError, match="contexts"):
        p.recommend_batch(np.full((2, D), np.inf))
    assert snapshot(p) == before


@pytest.mark.parametrize("name", ["ucbbp", "eps-greedy", "lints", "greedy-map"])
def test_checkpoint_mid_episode_continues_identically(name, tmp_path):
    cls = CONFIGS[name][0]
    straight, saved = _make(name), _make(name)
    for t, (X, mask, probs, uniforms) in enumerate(_episodes(8, masked=True)):
        halves = []
        for i, p in enumerate((straight, saved)):
            first = p.recommend_batch(X[:6], allowed=None if mask is None else mask[:6])
            arms, clicks = _sessions(first, probs[:6], uniforms[:6])
            p.update_batch(X[:6], arms, clicks)
            if i == 1 and t in (1, 4):  # saved with users served and sessions recorded
                p.save(tmp_path / "p.nc")
                p = saved = cls.load(tmp_path / "p.nc")
                assert p._served == 6 and len(p._pending) == 1
            rest = p.recommend_batch(X[6:], allowed=None if mask is None else mask[6:])
            arms, clicks = _sessions(rest, probs[6:], uniforms[6:])
            p.update_batch(X[6:], arms, clicks)
            p.end_episode()
            halves.append((first, rest))
        assert all(np.array_equal(a, b) for a, b in zip(*halves, strict=True))
    assert _state(saved) == _state(straight)


def test_end_episode_without_feedback_counts_an_episode():
    p = _make("ucbbp")
    p.recommend_batch(np.ones((3, D)))
    before = p.estimator.theta.copy()
    p.end_episode()
    assert p.t == 1 and p._served == 0 and np.array_equal(p.estimator.theta, before)
