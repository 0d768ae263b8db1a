"""Property-based tests of the clustering policies' entry points (SCLUB, CLUB, LinUCB-One/Ind).

Every call with generated input either succeeds with a valid result or raises a clear
``ValueError``/``TypeError`` naming the argument, and a rejected call leaves the policy's state
bit-identical (docs/reliability.md lists the catalogue of inputs).
"""

import copy

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierbandit._validation import MAX_FEATURE
from hierbandit.sclub.policies import CLUB, SCLUB, LinUCBInd, LinUCBOne
from tests.conftest import snapshot

from ._common import (
    SETTINGS,
    SMALL,
    check_outcome,
    floats,
    ids,
    index,
    matrices,
    pairs,
    rewards,
    valid_array,
    valid_id,
    valid_real,
    vectors,
)

U, d = 5, 3
CLASSES = [SCLUB, CLUB, LinUCBOne, LinUCBInd]

#: rewards, plus Python integers beyond the float range
big_rewards = st.one_of(rewards, st.sampled_from([10**400, -(10**400)]))


def valid_features(x, shape, *, min_rows=0):
    """A finite item array of ``shape`` within the feature bound MAX_FEATURE."""
    return valid_array(x, shape, min_rows=min_rows) and (
        np.size(x) == 0 or float(np.max(np.abs(np.asarray(x, dtype=float)))) <= MAX_FEATURE
    )


def _trained(cls, **kw):
    p = cls(U, d, rng=0, **kw)
    g = np.random.default_rng(1)
    for _ in range(60):
        u, items = int(g.integers(U)), g.normal(size=(4, d))
        k = p.select(u, items)
        p.update(u, items[k], float(items[k, 0] * (u % 2) + 0.1 * g.normal()))
    return p


POLICIES = {
    "SCLUB": _trained(SCLUB, alpha_theta=0.3),
    "SCLUB-reference": _trained(SCLUB.reference),
    "CLUB": _trained(CLUB),
    "LinUCBOne": _trained(LinUCBOne),
    "LinUCBInd": _trained(LinUCBInd),
}


def _check_valid_state(policy):
    lab = policy.clusters().values
    assert lab.shape == (U,) and lab.min() == 0 and lab.max() == policy.n_clusters - 1
    us = policy.user_stats()
    for name in ("G", "b", "rr"):
        assert np.all(np.isfinite(us[name].values))
    G = us["G"].values
    assert np.array_equal(G, np.swapaxes(G, 1, 2))


@pytest.mark.parametrize("name", sorted(POLICIES))
@SETTINGS
@given(user=index(U), items=matrices(d))
def test_select_never_corrupts(name, user, items):
    policy = POLICIES[name]
    before = snapshot(policy)
    valid = valid_id(user, U) and valid_features(items, (None, d), min_rows=1)
    k = check_outcome(policy, before, lambda: policy.select(user, items), valid, ("user", "items"))
    if valid:
        assert isinstance(k, int) and 0 <= k < len(items)


@pytest.mark.parametrize("name", sorted(POLICIES))
@SETTINGS
@given(user=index(U), x=vectors(d), reward=big_rewards)
def test_update_never_corrupts(name, user, x, reward):
    policy = POLICIES[name]
    before = snapshot(policy)
    valid = (
        valid_id(user, U)
        and valid_features(x, (d,))
        and not (isinstance(reward, int) and abs(reward) > 1e308)
        and valid_real(reward)
    )
    names = ("user", "item_features", "reward")
    if not valid:
        check_outcome(policy, before, lambda: policy.update(user, x, reward), False, names)
        return
    trial = copy.deepcopy(policy)  # a valid update goes to a copy of the trained state
    check_outcome(trial, None, lambda: trial.update(user, x, reward), True, names)
    assert trial.t == policy.t + 1
    _check_valid_state(trial)
    k = trial.select(0, np.eye(d))
    assert 0 <= k < d


@pytest.mark.parametrize("name", ["SCLUB", "CLUB", "LinUCBInd"])
@SMALL
@given(
    users=st.one_of(
        st.lists(st.integers(-1, U), min_size=0, max_size=4),
        st.sampled_from([[0.0, 1.0], ["a"], [True], np.zeros((2, 1), dtype=int), None]),
    ),
    item_value=floats,
    L=st.integers(0, 2),
    width=st.sampled_from([d, d, d + 1]),
    noise_value=st.sampled_from([0.5, np.nan, 1e200]),
    bernoulli=st.sampled_from([True, False, 1, "yes"]),
)
def test_run_never_corrupts(name, users, item_value, L, width, noise_value, bernoulli):
    policy = POLICIES[name]
    before = snapshot(policy)
    arr = np.asarray(users) if users is not None else None
    ok_users = (
        arr is not None
        and arr.ndim == 1
        and (arr.size == 0 or (arr.dtype.kind in "iu" and arr.min() >= 0 and arr.max() < U))
    )
    T = len(arr) if arr is not None and arr.ndim >= 1 else 0
    items = np.full((T, L, width), item_value)
    items[:, :, 0] = 0.5
    means = np.full((T, L), 0.3)
    noise = np.full(T, noise_value)
    valid = (
        ok_users
        and width == d
        and L >= 1
        and valid_features(items, (T, L, d))
        and (T == 0 or valid_real(noise_value))
        and isinstance(bernoulli, bool)
    )
    names = ("users", "items", "means", "noise", "bernoulli")
    if not valid:
        check_outcome(
            policy,
            before,
            lambda: policy.run(users, items, means, noise, bernoulli=bernoulli),
            False,
            names,
        )
        return
    trial = copy.deepcopy(policy)
    choices, ncl = trial.run(users, items, means, noise, bernoulli=bernoulli)
    assert choices.shape == ncl.shape == (T,)
    assert np.all((choices >= 0) & (choices < L)) and np.all(ncl >= 1)
    _check_valid_state(trial)


def _int_arg(v):
    return valid_id(v, 10**9) and int(v) >= 1


COMMON = {
    "beta": pairs(
        ("anytime", True),
        (0.0, True),
        (2.5, True),
        (-1.0, False),
        (np.nan, False),
        (np.inf, False),
        ("theory", False),
        (None, False),
        (True, False),
    ),
    "bonus": pairs(("sqrt", True), ("no_sqrt", True), ("root", False), (None, False)),
    "reg": pairs(
        (1.0, True),
        (1e-6, True),
        (1e6, True),
        (1e-8, False),
        (1e7, False),
        (10**400, False),
        (0.0, False),
        (-1.0, False),
        (np.nan, False),
        ("1", False),
    ),
    "recompute_every": pairs(
        (None, True),
        (1, True),
        (2000, True),
        (0, False),
        (-3, False),
        (1.5, False),
        ("10", False),
    ),
    "tie_break": pairs(("random", True), ("first", True), ("last", False), (None, False)),
}
EXTRA = {
    SCLUB: {
        "alpha_theta": pairs((1.0, True), (1e-3, True), (0.0, False), (-1, False), (np.inf, False)),
        "alpha_p": pairs((0.7, True), (0.0, False), (np.nan, False), ("a", False)),
        "freq_test": pairs(("pairwise", True), ("cluster_avg", True), ("avg", False)),
        "use_frequency": pairs((True, True), (False, True), (1, False), ("yes", False)),
        "pivot": pairs(("phase_start", True), ("current", True), ("start", False)),
        "uncheck": pairs(("phase", True), ("round", True), (None, False)),
        "merge_scan": pairs(("current", True), ("all", True), ("some", False)),
        "double_count_split": pairs((False, True), (True, True), (0, False), (None, False)),
        "user_recompute_every": pairs((None, True), (10, True), (0, False), (2.0, False)),
    },
    CLUB: {
        "alpha_2": pairs((1.0, True), (0.0, False), (-2.0, False), (np.nan, False)),
        "graph": pairs(("erdos_renyi", True), ("complete", True), ("ring", False)),
        "edge_probability": pairs(
            (None, True),
            (0.0, True),
            (1.0, True),
            (0.3, True),
            (-0.1, False),
            (1.5, False),
            (np.nan, False),
            ("0.5", False),
        ),
        "user_recompute_every": pairs((None, True), (10, True), (-1, False)),
    },
}


@pytest.mark.parametrize("cls", CLASSES)
@SETTINGS
@given(data=st.data(), n_users=ids, n_features=ids)
def test_constructor_validates(cls, data, n_users, n_features):
    chosen = {k: data.draw(v, label=k) for k, v in {**COMMON, **EXTRA.get(cls, {})}.items()}
    kwargs = {k: v for k, (v, _) in chosen.items()}
    valid = (
        _int_arg(n_users)
        and _int_arg(n_features)
        and int(n_users) * int(n_features) ** 2 <= 10**8
        and all(ok for _, ok in chosen.values())
    )
    names = ("n_users", "n_features", *kwargs)
    p = check_outcome(None, None, lambda: cls(n_users, n_features, rng=0, **kwargs), valid, names)
    if p is not None:
        assert p.n_users == int(n_users) and p.t == 0
        assert p.select(0, np.ones((2, int(n_features)))) in (0, 1)


def test_huge_sizes_are_refused_before_allocating():
    with pytest.raises(ValueError, match="n_users"):
        SCLUB(2**40, 3)
    with pytest.raises(ValueError, match="n_users"):
        CLUB(200_000, 1)
    with pytest.raises(ValueError, match="n_users"):
        LinUCBInd(10**7, 10)
