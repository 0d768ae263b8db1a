"""Property-based tests of the online policies' public entry points.

Every call with generated input either succeeds with a valid result or raises a clear
``ValueError``/``TypeError`` naming the argument, and a rejected call leaves the policy's state
bit-identical (docs/reliability.md lists the catalogue of inputs).
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierbandit._validation import MAX_ABS, MAX_FEATURE
from hierbandit.ebm import EbmTS, EbmUCB, LinTS, LinUCB, OLSBandit, RMBandit
from tests.conftest import snapshot
from tests.reliability._common import SETTINGS, floats, ids

N, K, d = 3, 2, 2
CLASSES = [EbmTS, EbmUCB, LinUCB, LinTS, OLSBandit, RMBandit]

#: context values around the documented bound, tiny ones and subnormals
bound_values = st.sampled_from(
    [MAX_FEATURE, -MAX_FEATURE, 0.999 * MAX_FEATURE, 1.001 * MAX_FEATURE, 1e-300, 5e-324, 0.0]
)

vectors = st.one_of(
    st.lists(floats, min_size=0, max_size=4),
    st.lists(floats, min_size=d, max_size=d),
    st.lists(st.one_of(bound_values, st.floats(-3, 3)), min_size=d, max_size=d),
    st.sampled_from(
        [
            "ab",
            None,
            [[1.0, 2.0]],
            np.array([1, 2], dtype=np.complex128),
            np.array(["a", "b"]),
            np.array([True, False]),
            np.array([1, 2], dtype=np.int8),
            np.zeros((0,)),
            {"a": 1},
        ]
    ),
)
rewards = st.one_of(
    floats,
    st.sampled_from(["1", None, [1.0], np.array([1.0, 2.0]), 1 + 2j, 10**400, -(10**400)]),
)

MAX_CONTEXT = MAX_FEATURE  # documented magnitude bound of contexts
MAX_REWARD = MAX_ABS  # ... and of rewards


def _trained(cls):
    p = cls(N, K, d, rng=0)
    g = np.random.default_rng(1)
    for _t in range(30):
        j, x = int(g.integers(N)), g.normal(size=d)
        p.update(j, x, p.select(j, x), float(g.normal()))
    return p


POLICIES = {cls.__name__: _trained(cls) for cls in CLASSES}


def _valid_vector(x):
    try:
        arr = np.asarray(x)
    except Exception:
        return False
    return (
        not isinstance(x, str | dict)
        and x is not None
        and arr.shape == (d,)
        and arr.dtype.kind in "iuf"
        and np.all(np.isfinite(arr))
        and np.all(np.abs(arr) <= MAX_CONTEXT)
    )


def _valid_id(v, upper):
    return (
        isinstance(v, int | np.integer)
        and not isinstance(v, bool | np.bool_)
        and 0 <= int(v) < upper
    )


def _check_outcome(policy, before, call, valid, names):
    try:
        out = call()
    except (ValueError, TypeError) as exc:
        assert not valid, f"valid input rejected: {exc}"
        assert any(n in str(exc) for n in names), f"message does not name the argument: {exc}"
        assert snapshot(policy) == before, "a rejected call changed the state"
        return None
    assert valid, "invalid input accepted"
    return out


@pytest.mark.parametrize("name", sorted(POLICIES))
@SETTINGS
@given(instance=ids, context=vectors)
def test_select_never_corrupts(name, instance, context):
    policy = POLICIES[name]
    before = snapshot(policy)
    valid = _valid_id(instance, N) and _valid_vector(context)
    arm = _check_outcome(
        policy, before, lambda: policy.select(instance, context), valid, ("instance", "context")
    )
    if arm is not None:
        assert isinstance(arm, int) and 0 <= arm < K


@pytest.mark.parametrize("name", sorted(POLICIES))
@SETTINGS
@given(instance=ids, context=vectors, arm=ids, reward=rewards)
def test_update_never_corrupts(name, instance, context, arm, reward):
    policy = POLICIES[name].clone()
    g = np.random.default_rng(2)
    for _ in range(10):
        policy.update(int(g.integers(N)), g.normal(size=d), int(g.integers(K)), g.normal())
    before = snapshot(policy)
    valid_reward = (
        isinstance(reward, int | float | np.floating | np.integer)
        and not isinstance(reward, bool)
        and abs(reward) <= MAX_REWARD  # False for NaN; exact for huge Python ints
    )
    valid = _valid_id(instance, N) and _valid_vector(context) and _valid_id(arm, K) and valid_reward
    _check_outcome(
        policy,
        before,
        lambda: policy.update(instance, context, arm, reward),
        valid,
        ("instance", "context", "arm", "reward"),
    )
    if valid:
        post = policy.posterior()
        assert np.all(np.isfinite(post["mean"].values))
        assert np.all(np.isfinite(post["cov"].values))


@pytest.mark.parametrize("cls", CLASSES)
@SETTINGS
@given(
    n_instances=ids,
    n_arms=ids,
    n_features=ids,
    tie_break=st.sampled_from(["random", "first", "x", None, 1]),
)
def test_constructor_validates(cls, n_instances, n_arms, n_features, tie_break):
    valid = (
        all(_valid_id(v, 10**9) and int(v) >= 1 for v in (n_instances, n_arms, n_features))
        and tie_break in ("random", "first")
        and int(n_instances) * int(n_arms) * int(n_features) < 10**6
    )
    try:
        p = cls(n_instances, n_arms, n_features, tie_break=tie_break, rng=0)
    except (ValueError, TypeError) as exc:
        assert not valid, exc
        assert any(n in str(exc) for n in ("n_instances", "n_arms", "n_features", "tie_break")), exc
        return
    assert valid
    assert p.n_arms == int(n_arms)
