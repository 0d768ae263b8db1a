"""Property-based tests of pure exploration (BOC): the instance constructor ``ClusterBandit``,
``class_mean_instance``, the explorers ``BOC``/``BOCLE``/``Uniform``/``Oracle`` (constructors,
step API, ``run``), the lower bound, and confidence levels down to δ = e^{-400} and the
smallest double δ = 5e-324.

Every call either returns a valid result or raises ``ValueError``/``TypeError`` naming the
argument, and a rejected call leaves the explorer bit-identical (docs/reliability.md).
"""

import copy
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierbandit.boc import (
    BOC,
    BOCLE,
    Oracle,
    Uniform,
    lower_bound,
    optimal_allocation,
    stopping_times,
)
from hierbandit.boc.instances import ClusterBandit, class_mean_instance, synthetic_instance
from tests.conftest import snapshot

from ._common import (
    MAX_DATA,
    SETTINGS,
    SMALL,
    check_outcome,
    floats,
    index,
    matrices,
    pairs,
    valid_array,
    valid_id,
    vectors,
)

EASY = synthetic_instance("easy")  # M = 11 arms, K = 4 clusters, d = 3


def _valid_labels(labels):
    if isinstance(labels, str | bytes) or labels is None:
        return None
    try:
        arr = np.asarray(labels)
    except Exception:
        return None
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iuf":
        return None
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)) or np.any(arr < 0):
        return None
    arr = arr.astype(np.int64)
    K = int(arr.max()) + 1
    if np.any(np.bincount(arr, minlength=K) == 0) or arr.size <= K:
        return None
    return K


def _valid_centres(centres, K):
    if not valid_array(centres, (K, None)):
        return False
    U = np.asarray(centres, dtype=float)
    if U.shape[1] == 0:
        return False
    return all(not np.array_equal(U[i], U[j]) for i in range(K) for j in range(i + 1, K))


@SETTINGS
@given(
    labels=st.one_of(
        st.lists(st.integers(-1, 3), min_size=0, max_size=7),
        st.lists(st.sampled_from([0.0, 1.0, 0.5, np.nan]), min_size=3, max_size=5),
        st.sampled_from(["0101", None, [True, False, True], [[0, 1, 0]]]),
    ),
    centres=st.one_of(matrices(2, max_rows=4), st.sampled_from([[[0.0, 0.0], [0.0, 0.0]]])),
)
def test_cluster_bandit_validates(labels, centres):
    K = _valid_labels(labels)
    valid = K is not None and _valid_centres(centres, K)
    inst = check_outcome(
        None, None, lambda: ClusterBandit(labels, centres), valid, ("labels", "centres")
    )
    if inst is not None:
        assert inst.n_arms == len(labels) and inst.n_clusters == K
        D = inst.hardness
        assert math.isfinite(D) and (D > 0 if K > 1 else D == 0.0)  # one cluster: D* = 0
        lb = inst.lower_bound()
        assert np.all(lb.lam > 0) and abs(lb.lam.sum() - 1) < 1e-9
        x = inst.sampler(0).pull(0)
        assert x.shape == (inst.n_features,) and np.all(np.isfinite(x))


@SMALL
@given(features=matrices(2, max_rows=6), classes=st.lists(st.integers(0, 2), max_size=6))
def test_class_mean_instance_validates(features, classes):
    ok_x = valid_array(features, (None, 2))
    n = np.shape(features)[0] if ok_x else -1
    y = np.asarray(classes)
    ok = ok_x and y.shape == (n,) and n > 0
    if ok:
        _, lab = np.unique(y, return_inverse=True)
        K = int(lab.max()) + 1
        X = np.asarray(features, dtype=float)
        cent = np.stack([X[lab == k].mean(0) for k in range(K)])
        ok = n > K and _valid_centres(cent, K)
    inst = check_outcome(
        None,
        None,
        lambda: class_mean_instance(features, classes, target_hardness=None),
        ok,
        ("features", "classes", "labels", "centres"),
    )
    if inst is not None:
        assert inst.n_arms == n


# ---------------------------------------------------------------------- explorers

COMMON = {
    "n_arms": pairs((11, True), (2, False), (1, False), (11.0, False), ("11", False)),
    "n_clusters": pairs((4, True), (11, False), (0, False), (None, False)),
    "n_features": pairs((3, True), (0, False), (True, False)),
    "confidence": pairs(
        ({}, True),
        ({"delta": 0.01}, True),
        ({"delta": 5e-324}, True),
        ({"log_inv_delta": 400.0}, True),
        ({"log_inv_delta": 1e-6}, True),
        ({"delta": 0.0}, False),
        ({"delta": 1.0}, False),
        ({"delta": np.nan}, False),
        ({"log_inv_delta": 0.0}, False),
        ({"log_inv_delta": -3.0}, False),
        ({"log_inv_delta": np.inf}, False),
        ({"delta": 0.1, "log_inv_delta": 2.0}, False),
    ),
    "threshold": pairs(("beta", True), ("beta_tilde", True), ("gamma", False)),
    "alt_pairs": pairs(("corrected", True), ("paper", True), ("all", False)),
    "first_seed": pairs(("first", True), ("heaviest", True), ("random", True), ("last", False)),
    "max_iter": pairs((1000, True), (1, True), (0, False), (2.5, False)),
}
EXTRA = {
    BOC: {
        "exploration_r": pairs(
            ({}, True),
            ({"exploration": "linear", "r": 0.5}, True),
            ({"exploration": "linear"}, False),
            ({"exploration": "linear", "r": 0.0}, False),
            ({"exploration": "linear", "r": 1.5}, False),
            ({"exploration": "random"}, False),
        )
    },
    BOCLE: {"r": pairs((0.5, True), (1.0, True), (0.0, False), (np.nan, False), ("a", False))},
    Uniform: {},
    Oracle: {
        "lam": pairs(
            (None, True),
            (np.full(11, 1 / 11), True),
            (np.full(11, 0.1), False),
            (np.r_[np.zeros(1), np.full(10, 0.1)], False),
            (np.full(10, 0.1), False),
        )
    },
}
NAMES = ("n_arms", "n_clusters", "n_features", "delta", "log_inv_delta", "threshold")
NAMES += ("alt_pairs", "first_seed", "max_iter", "exploration", "r", "lam", "K < M")


@pytest.mark.parametrize("cls", [BOC, BOCLE, Uniform, Oracle])
@SETTINGS
@given(data=st.data())
def test_explorer_constructor_validates(cls, data):
    spec = {**COMMON, **EXTRA[cls]}
    chosen = {k: data.draw(v, label=k) for k, v in spec.items()}
    kw = {}
    for k, (v, _) in chosen.items():
        if k in ("confidence", "exploration_r"):
            kw.update(v)
        else:
            kw[k] = v
    if cls is BOCLE and "r" not in kw:
        kw["r"] = 0.5
    valid = all(ok for _, ok in chosen.values())
    pos = [kw.pop(k) for k in ("n_arms", "n_clusters", "n_features")]
    alg = check_outcome(None, None, lambda: cls(*pos, rng=0, **kw), valid, NAMES)
    if alg is not None:
        res = alg.run(EASY, max_pulls=300, rng=0)
        assert res.n_pulls <= 300 and res.counts.sum() == res.n_pulls
        if res.stopped:
            assert res.labels.shape == (11,) and res.statistic >= res.beta


def _explorer_mid_run(cls, pulls=60, **kw):
    alg = cls(11, 4, 3, rng=0, **kw)
    if cls is Oracle:
        alg.set_target(EASY.lower_bound().lam)
    sampler = EASY.sampler(1)
    for _ in range(pulls):
        arm = alg.next_arm()
        alg.observe(arm, sampler.pull(arm))
    return alg


MID = {cls.__name__: _explorer_mid_run(cls) for cls in (BOC, Uniform, Oracle)}
MID["BOCLE"] = _explorer_mid_run(BOCLE, r=0.5)


@pytest.mark.parametrize("name", sorted(MID))
@SETTINGS
@given(arm=index(11), x=vectors(3))
def test_observe_never_corrupts(name, arm, x):
    alg = copy.deepcopy(MID[name])
    before = snapshot(alg)
    valid = valid_id(arm, 11) and valid_array(x, (3,))
    check_outcome(alg, before, lambda: alg.observe(arm, x), valid, ("arm", "x"))
    if valid:
        assert alg.t == MID[name].t + 1
        assert np.all(np.isfinite(alg.means))
        z, _, _ = alg.statistic()
        assert z >= 0 and not math.isnan(z)
        nxt = alg.next_arm()
        assert 0 <= nxt < 11 and alg.next_arm() == nxt  # idempotent until observe
        assert np.all(np.isfinite(alg.target)) and abs(alg.target.sum() - 1) < 1e-9


@SMALL
@given(value=floats, arm=st.integers(0, 10))
def test_observations_of_any_magnitude_are_bounded(value, arm):
    alg = copy.deepcopy(MID["BOC"])
    before = snapshot(alg)
    x = np.array([value, 0.0, 1.0])
    valid = math.isfinite(value) and abs(value) <= MAX_DATA
    check_outcome(alg, before, lambda: alg.observe(arm, x), valid, ("x",))
    if valid:
        assert np.all(np.isfinite(alg.means)) and np.isfinite(alg.statistic()[0])


def test_oracle_step_api_needs_a_target():
    alg = Oracle(11, 4, 3, rng=0)
    s = EASY.sampler(0)
    for _ in range(11):  # the initial pass needs no target
        arm = alg.next_arm()
        alg.observe(arm, s.pull(arm))
    before = snapshot(alg)
    with pytest.raises(ValueError, match="lam"):
        alg.next_arm()
    with pytest.raises(ValueError, match="lam"):
        alg.set_target(np.full(11, 0.5))
    assert snapshot(alg) == before
    alg.set_target(EASY.lower_bound().lam)
    assert 0 <= alg.next_arm() < 11


@pytest.mark.parametrize(
    "confidence",
    [
        {"delta": 0.01},
        {"delta": 1e-300},
        {"delta": 5e-324},
        {"log_inv_delta": 400.0},
        {"log_inv_delta": 1e-9},
    ],
)
@pytest.mark.parametrize("cls", [BOC, Uniform, Oracle])
def test_extreme_confidence_levels(cls, confidence):
    """δ far below the float range works through log(1/δ): the run stops with the right
    partition on the easy instance, and for log(1/δ) > 100 it takes more pulls than the lower
    bound of Theorem 3 (a bound on the mean; these seeded runs exceed it by far)."""
    alg = cls(11, 4, 3, rng=0, **confidence)
    res = alg.run(EASY, max_pulls=50_000, rng=0)
    assert res.stopped and res.correct
    L = res.log_inv_delta
    assert math.isfinite(L) and L > 0
    lb = lower_bound(EASY.labels, EASY.centres, **confidence)
    assert math.isfinite(lb) and lb >= 0
    if L > 100:
        assert res.n_pulls >= lb  # Theorem 3 (in expectation; the margin here is wide)


def test_stopping_times_are_monotone_in_confidence():
    Ls = [1e-6, 1.0, 10.0, 100.0, 400.0, -math.log(5e-324)]
    ds = stopping_times(BOC(11, 4, 3), EASY, Ls, rng=3, max_pulls=50_000)
    tau = ds["tau"].values
    assert np.all(ds["stopped"].values)
    assert np.all(np.diff(tau, axis=-1) >= 0)


@SMALL
@given(
    delta=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([5e-324])),
    L=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
)
def test_lower_bound_confidence_arguments(delta, L):
    kw = {"delta": delta} if L is None else {"log_inv_delta": L}
    valid = (0 < delta < 1) if L is None else (math.isfinite(L) and L > 0)
    lb = check_outcome(
        None,
        None,
        lambda: lower_bound(EASY.labels, EASY.centres, **kw),
        valid,
        ("delta", "log_inv_delta"),
    )
    if lb is not None:
        assert math.isfinite(lb) and lb >= 0
        D = optimal_allocation(EASY.labels, EASY.centres).hardness
        Lv = -math.log(delta) if L is None else L
        if Lv > 50:  # d_KL(δ, 1 − δ) = (1 − 2δ) log((1 − δ)/δ) ≈ log(1/δ)
            assert abs(lb / D - Lv) <= 1e-9 * Lv


def test_kl_term_when_delta_rounds_to_one():
    """log(1/δ) = L below the float spacing near 1 (δ rounds to 1): d_KL(δ, 1 − δ) is finite
    and equals −log L to first order (1 − δ ≈ L, 1 − 2δ ≈ −1)."""
    from hierbandit.boc import kl_bernoulli_delta

    for L in (1e-45, 1e-20, 1e-17):
        got = kl_bernoulli_delta(log_inv_delta=L)
        assert math.isfinite(got) and got == pytest.approx(-math.log(L), rel=1e-6)
    assert kl_bernoulli_delta(delta=0.5) == 0.0
    assert kl_bernoulli_delta(log_inv_delta=400.0) == pytest.approx(400.0, rel=1e-15)


def test_one_cluster_is_trivial():
    """K = 1 (allowed: K < M): no alternative partition, so D* = 0, the inner infimum is +∞,
    λ* is uniform, and every explorer stops at its first test with the right answer."""
    from hierbandit.boc import brute_force_hardness, inner_value

    inst = ClusterBandit([0, 0, 0], [[1.0, -2.0]])
    assert inst.hardness == 0.0 and brute_force_hardness(inst.labels, inst.centres).hardness == 0
    np.testing.assert_allclose(inst.lower_bound().lam, np.full(3, 1 / 3))
    assert inner_value(inst.labels, inst.centres, np.full(3, 1 / 3)) == math.inf
    assert lower_bound(inst.labels, inst.centres, log_inv_delta=400.0) == 0.0
    with pytest.raises(ValueError, match="target_hardness"):
        inst.rescaled(2.0)
    for cls in (BOC, Uniform, Oracle):
        res = cls(3, 1, 2, rng=0).run(inst, max_pulls=100, rng=0)
        assert res.stopped and res.correct and res.n_pulls == 4
