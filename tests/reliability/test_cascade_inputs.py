"""Property-based tests of the cascading bandit's entry points: the seven episode policies,
``CascadeEnv``, ``read_cascade_log`` and ``fit_cascade_prior(method="laplace")``.

Every call with generated input either succeeds with a valid result or raises a clear
``ValueError``/``TypeError`` naming the argument; a rejected call leaves the policy's state
bit-identical and never modifies the caller's data (docs/reliability.md).
"""

import copy

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierbandit._validation import MAX_FEATURE
from hierbandit.bayes import fit_cascade_prior
from hierbandit.cascade import policies as cascade
from hierbandit.cascade.env import CascadeEnv, simulate_episode
from hierbandit.data import read_cascade_log
from tests.conftest import snapshot

from ._common import (
    CASCADE_POLICIES,
    SETTINGS,
    SMALL,
    check_outcome,
    ids,
    index,
    matrices,
    pairs,
    valid_array,
    valid_id,
)

N, H, K, d = 3, 3, 4, 2
p = d + K
NAMES = list(CASCADE_POLICIES)
REWARDS = np.array([1.0, 1.5, 2.0, 3.0])


def _make(name, **kw):
    cls = getattr(cascade, name)
    args = (K, d, REWARDS, H) + ((50,) if name == "AUCBBP" else ())
    return cls(*args, rng=0, **kw)


def _trained(name):
    pol = _make(name)
    env = CascadeEnv(N, H, K, d, rewards=REWARDS, rng=0)
    ro = env.rollout(8, rng=1)
    for t in range(8):
        pol.start_episode(ro.contexts[t])
        arms, clicks = simulate_episode(ro.click_prob[t], ro.uniforms[t], pol.select)
        pol.update(ro.contexts[t], arms, clicks)
    return pol


POLICIES = {name: _trained(name) for name in NAMES}


def _valid_contexts(x):
    """A finite (N, d) context array, N >= 1, within the context bound MAX_FEATURE."""
    return valid_array(x, (None, d), min_rows=1) and (
        np.size(x) == 0 or float(np.max(np.abs(np.asarray(x, dtype=float)))) <= MAX_FEATURE
    )


def _check_posterior(pol):
    post = pol.posterior()
    mean, cov = post["mean"].values, post["cov"].values
    assert mean.shape == (pol.n_params,) and np.all(np.isfinite(mean))
    assert np.all(np.isfinite(cov)) and np.allclose(cov, cov.T, rtol=1e-10, atol=0)
    np.linalg.cholesky(cov)


# ---------------------------------------------------------------------- policies


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(contexts=matrices(d, max_rows=4))
def test_start_episode_never_corrupts(name, contexts):
    pol = copy.deepcopy(POLICIES[name])
    before = snapshot(pol)
    valid = _valid_contexts(contexts)
    check_outcome(pol, before, lambda: pol.start_episode(contexts), valid, ("contexts",))
    if valid:
        n = len(contexts)
        slate = np.stack([pol.select(h) for h in range(H)], axis=1)
        assert slate.shape == (n, H) and np.all((slate >= 0) & (slate < K))


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(
    step=index(H),
    active=st.one_of(
        st.none(),
        st.lists(st.booleans(), min_size=0, max_size=N + 1),
        st.sampled_from([np.ones(N, dtype=int), np.ones(N), "yes", np.ones((N, 1), dtype=bool)]),
    ),
)
def test_select_never_corrupts(name, step, active):
    pol = copy.deepcopy(POLICIES[name])
    pol.start_episode(np.ones((N, d)))
    before = snapshot(pol)
    act = None if active is None else np.asarray(active)
    valid_active = act is None or (act.dtype == bool and act.shape == (N,))
    valid = valid_id(step, H) and valid_active
    arms = check_outcome(pol, before, lambda: pol.select(step, active), valid, ("step", "active"))
    if valid:
        assert arms.shape == (N,) and np.all((arms >= 0) & (arms < K))


def test_select_before_start_episode_is_refused():
    pol = _make("UCBBP")
    with pytest.raises(RuntimeError, match="start_episode"):
        pol.select(0)


def _feedback(a):
    """A valid episode: user 0 clicks at position 1, user 1 never clicks, user 2 clicks at 0."""
    arms = np.array([[a[0], a[1], -1], [a[2], a[3], a[4]], [a[5], -1, -1]], dtype=np.int64)
    clicks = np.array([[0, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=np.int8)
    X = np.array([[0.5, -1.0], [2.0, 0.3], [-0.7, 0.1]])
    return X, arms, clicks


def _corrupt(kind, X, arms, clicks):
    """Apply a named corruption; returns (X, arms, clicks, valid, names)."""
    X, arms, clicks = X.copy(), arms.copy(), clicks.copy()
    valid, names = False, ("arms",)
    if kind == "none":
        valid = True
    elif kind == "shown_after_click":
        arms[0, 2] = 0
    elif kind == "click_then_more":
        clicks[1, 0] = 1
    elif kind == "two_clicks":
        clicks[0, 0] = 1
        names = ("clicks",)
    elif kind == "short_without_click":
        arms[1, 2] = -1
    elif kind == "gap":
        arms[1, 0] = -1
    elif kind == "click_not_shown":
        clicks[2, 1] = 1
        names = ("clicks",)
    elif kind == "arm_too_large":
        arms[0, 0] = K
    elif kind == "arm_below_minus_one":
        arms[0, 0] = -2
    elif kind == "float_arms":
        arms = arms.astype(float)
    elif kind == "bool_arms":
        arms = arms >= 0
    elif kind == "click_two":
        clicks[2, 0] = 2
        names = ("clicks",)
    elif kind == "click_nan":
        clicks = clicks.astype(float)
        clicks[1, 1] = np.nan
        names = ("clicks",)
    elif kind == "bool_clicks":
        clicks = clicks.astype(bool)
        valid = True
    elif kind == "list_clicks":
        clicks = clicks.tolist()
        valid = True
    elif kind == "string_clicks":
        clicks = clicks.astype(str)
        names = ("clicks",)
    elif kind in ("ctx_nan", "ctx_inf", "ctx_huge", "ctx_tiny", "ctx_bound", "ctx_beyond"):
        X[1, 0] = {
            "ctx_nan": np.nan,
            "ctx_inf": -np.inf,
            "ctx_huge": 1e300,
            "ctx_tiny": 1e-300,
            "ctx_bound": -MAX_FEATURE,
            "ctx_beyond": 1.001 * MAX_FEATURE,
        }[kind]
        valid = kind in ("ctx_tiny", "ctx_bound")
        names = ("contexts",)
    elif kind == "ctx_width":
        X = np.ones((N, d + 1))
        names = ("contexts",)
    elif kind == "ctx_users":
        X = X[:2]
        names = ("arms", "contexts")
    elif kind == "arms_shape":
        arms = np.concatenate([arms, np.full((N, 1), -1)], axis=1)
    elif kind == "clicks_shape":
        clicks = clicks[:, :2]
        names = ("clicks",)
    else:  # pragma: no cover
        raise AssertionError(kind)
    return X, arms, clicks, valid, names


CORRUPTIONS = [
    "none",
    "shown_after_click",
    "click_then_more",
    "two_clicks",
    "short_without_click",
    "gap",
    "click_not_shown",
    "arm_too_large",
    "arm_below_minus_one",
    "float_arms",
    "bool_arms",
    "click_two",
    "click_nan",
    "bool_clicks",
    "list_clicks",
    "string_clicks",
    "ctx_nan",
    "ctx_inf",
    "ctx_huge",
    "ctx_tiny",
    "ctx_bound",
    "ctx_beyond",
    "ctx_width",
    "ctx_users",
    "arms_shape",
    "clicks_shape",
]


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(
    a=st.lists(st.integers(0, K - 1), min_size=6, max_size=6),
    kind=st.sampled_from(CORRUPTIONS),
)
def test_update_never_corrupts(name, a, kind):
    pol = copy.deepcopy(POLICIES[name])
    before = snapshot(pol)
    X, arms, clicks, valid, names = _corrupt(kind, *_feedback(a))
    X_in, arms_in = np.copy(X), np.copy(arms)
    check_outcome(pol, before, lambda: pol.update(X, arms, clicks), valid, names)
    np.testing.assert_array_equal(X, X_in)  # the caller's arrays are not modified
    np.testing.assert_array_equal(arms, arms_in)
    if valid:
        assert pol.t == POLICIES[name].t + 1
        _check_posterior(pol)
        slate = pol.recommend(X)
        assert slate.shape == (N, H) and np.all((slate >= 0) & (slate < K))


COMMON = {
    "n_arms": pairs((K, True), (0, False), (-1, False), (2.0, False), ("4", False)),
    "n_features": pairs((d, True), (0, False), (True, False), (None, False)),
    "rewards": pairs(
        (REWARDS, True),
        (REWARDS * 1e-300, True),
        (np.array([1.0, 0.0, 1.0, 1.0]), False),
        (np.array([1.0, np.nan, 1.0, 1.0]), False),
        (np.array([1.0, 2.0]), False),
        ("linspace", False),
        (np.array([1e300, 1.0, 1.0, 1.0]), False),
    ),
    "horizon": pairs((H, True), (1, True), (0, False), (2.5, False)),
    "lam": pairs(
        (1.0, True),
        (1e-6, True),
        (1e6, True),
        (1e-7, False),
        (1e7, False),
        (0.0, False),
        (np.inf, False),
        (10**400, False),
        ("1", False),
    ),
    "prior": pairs(
        (None, True),
        ((np.zeros(p), np.eye(p)), True),
        ((np.zeros(p), -np.eye(p)), False),
        ((np.zeros(p + 1), np.eye(p)), False),
        ((np.full(p, np.nan), np.eye(p)), False),
        ((np.zeros(p), np.zeros((p, p))), False),
        ("normal", False),
    ),
}
LOGISTIC = {
    "update_rule": pairs(("newton1", True), ("paper_literal", True), ("newton", False)),
    "warmup": pairs((0, True), (2, True), (-1, False), (1.0, False)),
    "tie_break": pairs(("first", True), ("random", True), ("last", False)),
}
EXTRA = {
    "UCBBP": {
        **LOGISTIC,
        # δ enters only the theory-sized β: with a constant β any finite δ is accepted
        "beta_delta": pairs(
            ({"beta": 0.5, "delta": 0.05}, True),
            ({"beta": 0.5, "delta": 0.5}, True),
            ({"beta": 0.5, "delta": np.nan}, False),
            ({"beta": "theory", "delta": 0.05}, True),
            ({"beta": "theory", "delta": 1e-300}, True),
            ({"beta": "theory", "delta": 0.0}, False),
            ({"beta": "theory", "delta": 0.5}, False),
            ({"beta": "theory", "delta": np.nan}, False),
            ({"beta": -0.1, "delta": 0.05}, False),
            ({"beta": "auto", "delta": 0.05}, False),
        ),
        "c_z": pairs((None, True), (2.0, True), (0.0, False), (-1.0, False)),
        "theory_variant": pairs(("thm5.2", True), ("lemma13.16", True), ("x", False)),
    },
    "AUCBBP": {
        **LOGISTIC,
        "n_episodes": pairs((50, True), (2, True), (1, False), (0, False), (10.0, False)),
        "rank_pool": pairs(("all", True), ("active", True), ("some", False)),
    },
    "CascadeEpsilonGreedy": {
        **LOGISTIC,
        "epsilon": pairs((0.0, True), (1.0, True), (0.3, True), (1.5, False), (-0.1, False)),
    },
    "CascadeGreedy": LOGISTIC,
    "CascadeRandom": {"update_rule": LOGISTIC["update_rule"]},
    "CascadeLinUCB": {
        "alpha": pairs((0.0, True), (2.0, True), (-1.0, False), (np.nan, False)),
        "slate": pairs(("rank", True), ("plan", True), ("best", False)),
        "tie_break": LOGISTIC["tie_break"],
    },
    "CascadeLinTS": {
        "sigma": pairs(
            (0.0, True), (0.5, True), (1e6, True), (1e7, False), (-0.5, False), (None, False)
        ),
        "slate": pairs(("rank", True), ("plan", True), ("x", False)),
        "tie_break": LOGISTIC["tie_break"],
    },
}


@pytest.mark.parametrize("name", NAMES)
@SMALL
@given(data=st.data())
def test_constructor_validates(name, data):
    spec = {**COMMON, **EXTRA[name]}
    chosen = {k: data.draw(v, label=k) for k, v in spec.items()}
    kw = {k: v for k, (v, _) in chosen.items() if k != "beta_delta"}
    kw.update(chosen.get("beta_delta", ({}, True))[0])
    # the prior's length follows the drawn sizes only when they are the defaults
    if not (isinstance(kw["n_arms"], int) and kw["n_arms"] == K and kw["n_features"] == d):
        kw["prior"], chosen["prior"] = None, (None, True)
    valid = all(ok for _, ok in chosen.values())
    names = (*spec, "beta", "delta", "prior mean", "prior cov")
    cls = getattr(cascade, name)
    pos = [kw.pop(k) for k in ("n_arms", "n_features", "rewards", "horizon")]
    if name == "AUCBBP":
        pos.append(kw.pop("n_episodes"))
    pol = check_outcome(None, None, lambda: cls(*pos, rng=0, **kw), valid, names)
    if pol is not None:
        assert pol.t == 0
        _check_posterior(pol)
        slate = pol.recommend(np.zeros((2, d)))
        assert slate.shape == (2, pos[3])


# ---------------------------------------------------------------------- environment

ENV_ARGS = {
    "n_users": pairs((3, True), (1, True), (0, False), (1.5, False), ("3", False)),
    "horizon": pairs((2, True), (0, False), (None, False)),
    "n_arms": pairs((3, True), (-1, False), (True, False)),
    "n_features": pairs((2, True), (0, False)),
    "rewards": pairs(
        ("linspace", True),
        ("flat", False),
        (np.array([1.0, 2.0, 3.0]), True),
        (np.array([1.0, -2.0, 3.0]), False),
        (np.array([1.0, 2.0]), False),
    ),
    "intercepts": pairs(
        ("linspace", True),
        ((0.0, -1.0), True),
        (np.array([0.0, 1.0, np.inf]), False),
        (np.array([0.0, 1.0, 2.0]), True),
        ("ramp", False),
    ),
    "theta_x_scale": pairs(
        (1.0, True),
        (0.0, True),
        ("sqrt_d", True),
        (-1.0, False),
        (np.nan, False),
        ("big", False),
        (True, False),
    ),
    "theta_x": pairs((None, True), (np.array([0.3, -0.2]), True), (np.array([np.nan, 0.0]), False)),
    "contexts": pairs(("gaussian", True), ("uniform", False)),
}


@SETTINGS
@given(data=st.data(), horizon=ids)
def test_cascade_env_validates(data, horizon):
    chosen = {k: data.draw(v, label=k) for k, v in ENV_ARGS.items()}
    kw = {k: v for k, (v, _) in chosen.items()}
    valid = all(ok for _, ok in chosen.values())
    env = check_outcome(None, None, lambda: CascadeEnv(rng=0, **kw), valid, tuple(ENV_ARGS))
    if env is None:
        return
    before = snapshot(env)
    ok = valid_id(horizon, 10**6) and int(horizon) >= 1 and int(horizon) <= 30
    if isinstance(horizon, int) and horizon > 30:
        return
    ro = check_outcome(env, before, lambda: env.rollout(horizon, rng=1), ok, ("n_episodes",))
    if ro is not None:
        assert ro.contexts.shape == (int(horizon), env.n_users, env.n_features)
        assert np.all((ro.click_prob >= 0) & (ro.click_prob <= 1))
        assert np.all(np.isfinite(ro.optimal_value)) and np.all(ro.optimal_value >= 0)
        assert np.all((ro.optimal_slate >= 0) & (ro.optimal_slate < env.n_arms))


@SETTINGS
@given(contexts=matrices(2, max_rows=3), slate_value=st.sampled_from([0, 2, 3, -1, 1.0]))
def test_cascade_env_queries_validate(contexts, slate_value):
    env = CascadeEnv(3, 2, 3, 2, rng=0)
    before = snapshot(env)
    # one context (d,) or a batch (..., d), finite and bounded
    nd = np.ndim(contexts) if not isinstance(contexts, str | dict) and contexts is not None else 0
    valid = nd >= 1 and valid_array(contexts, (None,) * (nd - 1) + (2,))
    P = check_outcome(env, before, lambda: env.click_probabilities(contexts), valid, ("contexts",))
    if P is not None:
        lead = np.shape(contexts)[:-1]
        assert P.shape == (*lead, 3) and np.all((P >= 0) & (P <= 1))
        slates = np.full((*lead, 2), slate_value)
        ok = isinstance(slate_value, int) and 0 <= slate_value < 3
        v = check_outcome(
            env, before, lambda: env.value(contexts, slates), ok, ("slates", "contexts")
        )
        if v is not None:
            opt = env.optimal_value(contexts)
            assert np.all(v <= opt + 1e-12) and np.all(v >= 0)


# ---------------------------------------------------------------------- historical logs


def _log(n_episodes=12):
    env = CascadeEnv(3, 2, 3, 2, rng=0)
    return env.simulate_log(n_episodes, rng=1)


LOG = _log()

LOG_CORRUPTIONS = [
    ("none", True),
    ("x0_nan", False),
    ("x1_inf", False),
    ("x0_huge", False),
    ("x0_tiny", True),
    ("click_two", False),
    ("click_nan", False),
    ("click_str", False),
    ("arm_negative", False),
    ("arm_fraction", False),
    ("arm_str", False),
    ("user_nan", False),
    ("duplicate_row", False),
    ("drop_first_position", False),
    ("row_after_click", False),
    ("context_changes", False),
    ("drop_click_column", False),
    ("empty", False),
]
LOG_NAMES = ("episode", "user", "position", "arm", "click", "x0", "x1", "data", "feature")


def _corrupt_log(kind, seed):
    df = LOG.copy()
    g = np.random.default_rng(seed)
    i = int(g.integers(len(df)))
    if kind == "x0_nan":
        df.loc[i, "x0"] = np.nan
    elif kind == "x1_inf":
        df.loc[i, "x1"] = -np.inf
    elif kind == "x0_huge":
        sess = (df["episode"] == df.loc[i, "episode"]) & (df["user"] == df.loc[i, "user"])
        df.loc[sess, "x0"] = 1e300
    elif kind == "x0_tiny":
        sess = (df["episode"] == df.loc[i, "episode"]) & (df["user"] == df.loc[i, "user"])
        df.loc[sess, "x0"] = 1e-300
    elif kind == "click_two":
        df.loc[i, "click"] = 2
    elif kind == "click_nan":
        df["click"] = df["click"].astype(float)
        df.loc[i, "click"] = np.nan
    elif kind == "click_str":
        df["click"] = df["click"].astype(str)
    elif kind == "arm_negative":
        df.loc[i, "arm"] = -1
    elif kind == "arm_fraction":
        df["arm"] = df["arm"].astype(float)
        df.loc[i, "arm"] = 0.5
    elif kind == "arm_str":
        df["arm"] = df["arm"].astype(object)
        df.loc[i, "arm"] = "a"
    elif kind == "user_nan":
        df["user"] = df["user"].astype(float)
        df.loc[i, "user"] = np.nan
    elif kind == "duplicate_row":
        df = pd.concat([df, df.iloc[[i]]], ignore_index=True)
    elif kind == "drop_first_position":
        pos = df["position"].to_numpy()
        first = np.flatnonzero((pos[:-1] == 0) & (pos[1:] == 1))  # sessions of 2+ rows
        df = df.drop(index=int(first[i % first.size])).reset_index(drop=True)
    elif kind == "row_after_click":
        clicked = np.flatnonzero(df["click"].to_numpy() == 1)
        j = int(clicked[i % clicked.size])
        extra = df.iloc[[j]].copy()
        extra["position"] += 1
        extra["click"] = 0
        df = pd.concat([df, extra], ignore_index=True)
    elif kind == "context_changes":
        second = np.flatnonzero(df["position"].to_numpy() == 1)
        df.loc[int(second[i % second.size]), "x1"] += 1.0
    elif kind == "drop_click_column":
        df = df.drop(columns="click")
    elif kind == "empty":
        df = df.iloc[:0]
    return df


@SMALL
@given(case=st.sampled_from(LOG_CORRUPTIONS), seed=st.integers(0, 10**6))
def test_read_and_fit_cascade_log(case, seed):
    kind, valid = case
    df = _corrupt_log(kind, seed)
    original = df.copy(deep=True)
    log = check_outcome(None, None, lambda: read_cascade_log(df), valid, LOG_NAMES)
    pd.testing.assert_frame_equal(df, original)  # the caller's table is unchanged
    prior = check_outcome(
        None, None, lambda: fit_cascade_prior(df, method="laplace"), valid, LOG_NAMES
    )
    pd.testing.assert_frame_equal(df, original)
    if valid:
        assert log.n_arms == 3 and log.X.shape[1] == 2
        assert np.all(np.isfinite(prior.mean)) and np.all(np.isfinite(prior.cov))
        np.linalg.cholesky(prior.cov)
        # the fitted prior warm-starts every logistic policy
        pol = cascade.UCBBP(3, 2, [1.0, 2.0, 3.0], 2, prior=prior, rng=0)
        _check_posterior(pol)


@SMALL
@given(
    features=st.sampled_from([None, ["x0"], ["x0", "x0"], ["x9"], [], ["arm"], [1], "x1"]),
    n_arms=st.sampled_from([None, 3, 5, 2, 0, 2.5]),
    lam=st.sampled_from([1.0, 0.0, -1.0, np.nan, 1e-8]),
)
def test_fit_cascade_prior_arguments(features, n_arms, lam):
    ok_features = features is None or features in (["x0"], "x1")
    ok_arms = n_arms is None or (isinstance(n_arms, int) and n_arms >= 3)
    ok_lam = lam in (1.0, 1e-8)
    valid = ok_features and ok_arms and ok_lam
    kw = {"features": features, "n_arms": n_arms}
    prior = check_outcome(
        None,
        None,
        lambda: fit_cascade_prior(LOG, method="laplace", lam=lam, **kw),
        valid,
        ("features", "n_arms", "lam", "arm"),
    )
    if prior is not None:
        n_feat = 2 if features is None else 1
        assert prior.mean.shape == (n_feat + (n_arms or 3),)
        np.linalg.cholesky(prior.cov)
