"""``Policy.choice_probabilities``: the probabilities agree with the frequencies of the policies'
own choices (Thompson sampling), are 1 at the index's argmax (UCB) and at a forced arm, and
computing them changes nothing."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from hierbandit.ebm.linear import LinTS, LinUCB, OLSBandit
from hierbandit.ebm.policy import EbmTS, EbmUCB
from hierbandit.ebm.rmbandit import RMBandit
from tests.conftest import snapshot

ARMS = ["red", "green", "blue"]
D = 2
#: identical requests per frequency check; every frequency within 5 binomial standard errors
N_REPEAT = 20_000


def _ebm(cls, seed=1, steps=80, **kw):
    """A growing EbmTS/EbmUCB with string instance ids (appearing as it runs) and string arm
    ids, after ``steps`` rounds of its own choices on a linear problem."""
    p = cls(n_arms=len(ARMS), n_features=D, arms=ARMS, a=1.0, rng=seed, **kw)
    rng = np.random.default_rng(seed + 100)
    beta = rng.normal(size=(len(ARMS), D))
    for _ in range(steps):
        j = f"user-{rng.integers(6)}"
        x = rng.normal(size=D)
        k = p.select(j, x)
        p.update(j, x, k, float(x @ beta[ARMS.index(k)] + rng.normal()))
    return p


def _linear(cls, seed=2, **kw):
    """LinTS/LinUCB with 4 instances and 4 arms after 60 random feedback rows."""
    p = cls(4, 4, D, rng=seed, **kw)
    rng = np.random.default_rng(seed + 100)
    n = 60
    X = rng.normal(size=(n, D))
    K = rng.integers(4, size=n)
    p.update_batch(rng.integers(4, size=n), X, K, X.sum(axis=1) * (K - 1.5) + rng.normal(size=n))
    return p


def _codes(policy, chosen):
    """Arm codes of the ids :meth:`select_batch` returned."""
    if policy.arms.kind == "range":
        return np.asarray(chosen, dtype=np.int64)
    return np.array([policy.arms.get(a) for a in chosen], dtype=np.int64)


def _assert_frequencies(policy, instance, x, allowed=None, *, spread=True):
    """One request repeated N_REPEAT times in one select_batch call (independent Thompson draws
    per row): each arm's frequency is within 5 binomial standard errors of its probability.
    ``allowed``: a boolean row (the repeated call takes the (B, K) mask, the probability call
    the collection of ids). Returns the probabilities."""
    K = policy.n_arms
    allowed_ids = None
    if allowed is not None:
        ids = policy.arms.to_numpy()
        allowed_ids = [[ids[k] for k in np.flatnonzero(allowed)]]
    P = policy.choice_probabilities([instance], x[None], allowed=allowed_ids)[0]
    chosen = policy.select_batch(
        [instance] * N_REPEAT,
        np.tile(x, (N_REPEAT, 1)),
        allowed=None if allowed is None else np.tile(allowed, (N_REPEAT, 1)),
    )
    freq = np.bincount(_codes(policy, chosen), minlength=K) / N_REPEAT
    pc = np.clip(P, 1 / N_REPEAT, 1 - 1 / N_REPEAT)
    se = np.sqrt(pc * (1 - pc) / N_REPEAT)
    assert np.all(np.abs(freq - P) <= 5 * se), (P, freq)
    assert abs(P.sum() - 1.0) < 1e-12
    if allowed is not None:
        assert np.all(P[~allowed] == 0.0) and np.all(freq[~allowed] == 0.0)
    if spread:  # a check with something to check: two arms each chosen at least 1% of the time
        assert np.count_nonzero(P > 0.01) >= 2, P
    return P


# ---------------------------------------------------------------------- Thompson sampling


@pytest.mark.parametrize("alpha_clock", ["global", "instance"])
def test_ebmts_probabilities_match_frequencies(alpha_clock):
    p = _ebm(EbmTS, alpha_clock=alpha_clock)
    assert p.t >= p.n_arms and p.n_instances == 6  # past the round robin, ids grown
    x = np.array([0.4, -0.7])
    P_seen = _assert_frequencies(p, "user-1", x)
    _assert_frequencies(p, "user-1", x, allowed=np.array([True, False, True]))
    # an id the policy has not seen: the shared posterior, and the id is not registered; on
    # its own clock it is at its first arrival, where α = a·sqrt(log 1) = 0: a greedy choice
    greedy = alpha_clock == "instance"
    P_new = _assert_frequencies(p, "someone-new", x, spread=not greedy)
    _assert_frequencies(
        p, "someone-new", x, allowed=np.array([False, True, True]), spread=not greedy
    )
    if greedy:
        assert sorted(P_new) == [0.0, 0.0, 1.0]
    assert p.n_instances == 6 and p.instances.get("someone-new") < 0
    assert np.abs(P_seen - P_new).max() > 1e-3  # the instance's own data matters


@pytest.mark.parametrize("v_schedule", ["constant", "sqrt_log_t"])
def test_lints_probabilities_match_frequencies(v_schedule):
    p = _linear(LinTS, v_schedule=v_schedule)
    x = np.array([0.5, 0.3])
    _assert_frequencies(p, 2, x)
    _assert_frequencies(p, 2, x, allowed=np.array([True, True, False, True]))
    _assert_frequencies(p, 0, x, allowed=np.array([False, True, True, False]))


@pytest.mark.parametrize("make", [lambda: _ebm(EbmTS), lambda: _linear(LinTS)])
def test_rows_of_a_batch_are_the_single_requests(make):
    p = make()
    rng = np.random.default_rng(5)
    insts = list(p.instances.to_numpy()[[0, 1, 1, 2]]) + (["new-a", "new-b"] if p.grow else [3, 0])
    X = rng.normal(size=(len(insts), D))
    allowed = rng.random((len(insts), p.n_arms)) < 0.7
    allowed[:, 0] = True
    for mask in (None, allowed):
        P = p.choice_probabilities(insts, X, allowed=mask)
        assert P.shape == (len(insts), p.n_arms)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        for i, (j, x) in enumerate(zip(insts, X, strict=True)):
            one = p.choice_probabilities(
                [j], x[None], allowed=None if mask is None else mask[i : i + 1]
            )
            np.testing.assert_array_equal(P[i], one[0])


# ---------------------------------------------------------------------- UCB


def _requests(p, rng, B=60):
    ids = list(p.instances.to_numpy())
    insts = [ids[i] for i in rng.integers(len(ids), size=B)]
    if p.grow:
        insts[::7] = [f"new-{i}" for i in range(len(insts[::7]))]
    return insts, rng.normal(size=(B, D))


@pytest.mark.parametrize("make", [lambda: _ebm(EbmUCB), lambda: _linear(LinUCB)])
def test_ucb_probability_one_at_the_chosen_arm(make):
    p = make()
    rng = np.random.default_rng(9)
    insts, X = _requests(p, rng)
    allowed = rng.random((len(insts), p.n_arms)) < 0.6
    allowed[np.arange(len(insts)), rng.integers(p.n_arms, size=len(insts))] = True
    for mask in (None, allowed):
        codes = _codes(p, p.select_batch(insts, X, allowed=mask))
        P = p.choice_probabilities(insts, X, allowed=mask)
        expect = np.zeros_like(P)
        expect[np.arange(len(insts)), codes] = 1.0
        np.testing.assert_array_equal(P, expect)
        if mask is not None:
            assert np.all(mask[np.arange(len(insts)), codes])
    # the choices do vary over the requests
    assert np.unique(codes).size >= 2


# ---------------------------------------------------------------------- no side effects


_ALL = [
    pytest.param(lambda: _ebm(EbmTS), id="EbmTS"),
    pytest.param(lambda: _ebm(EbmUCB), id="EbmUCB"),
    pytest.param(lambda: _ebm(EbmTS, steps=1), id="EbmTS-round-robin"),
    pytest.param(lambda: _ebm(EbmTS, steps=4, forced_init="per_instance"), id="EbmTS-per-instance"),
    pytest.param(lambda: _linear(LinTS), id="LinTS"),
    pytest.param(lambda: _linear(LinUCB), id="LinUCB"),
]


@pytest.mark.parametrize("make", _ALL)
def test_computing_probabilities_changes_nothing(make):
    p = make()
    clone = copy.deepcopy(p)
    rng = np.random.default_rng(13)
    insts, X = _requests(p, rng, B=40)
    before = snapshot(p)
    allowed = np.ones((len(insts), p.n_arms), dtype=bool)
    allowed[::2, 0] = False
    P = p.choice_probabilities(insts, X)
    p.choice_probabilities(insts, X, allowed=allowed)
    p.choice_probabilities(insts, X, arms=p.arms.to_numpy()[np.argmax(P, axis=1)])
    assert snapshot(p) == before
    # the next decisions (which draw from the policy's streams) are the clone's
    for mask in (None, allowed):
        np.testing.assert_array_equal(
            p.select_batch(insts, X, allowed=mask), clone.select_batch(insts, X, allowed=mask)
        )
    assert snapshot(p) == snapshot(clone)


# ---------------------------------------------------------------------- forced round robin


def test_global_round_robin_forces_probability_one():
    """forced_init="global": round t ≤ K plays arm t − 1 whoever arrives, so every request's
    probability is 1 there; a request that may not receive it is scored instead, as
    select_batch does."""
    p = EbmTS(n_arms=3, n_features=D, arms=ARMS, a=2.0, rng=3)
    rng = np.random.default_rng(4)
    insts = ["a", "b", "a", "c"]
    X = rng.normal(size=(4, D))
    for t, arm in enumerate(ARMS):
        assert p.t == t
        P = p.choice_probabilities(insts, X)
        np.testing.assert_array_equal(P, np.tile(np.eye(3)[t], (4, 1)))
        assert list(p.select_batch(insts, X)) == [arm] * 4
        np.testing.assert_array_equal(p.choice_probabilities(insts, X, arms=[arm] * 4), 1.0)
        other = ARMS[(t + 1) % 3]
        np.testing.assert_array_equal(p.choice_probabilities(insts, X, arms=[other] * 4), 0.0)
        if t == 1:
            # arm "green" is forced; a request that excludes it is scored over the others
            allowed = [["red", "blue"], ARMS, ["green"], ["blue", "red", "green"]]
            P = p.choice_probabilities(insts, X, allowed=allowed)
            np.testing.assert_array_equal(P[[1, 2, 3]], np.tile([0.0, 1.0, 0.0], (3, 1)))
            assert P[0, 1] == 0.0 and 0.02 < P[0, 0] < 0.98
            chosen = p.select_batch(insts, X, allowed=allowed)
            assert list(chosen[1:]) == ["green"] * 3
            _assert_frequencies(p, "a", X[0], allowed=np.array([True, False, True]))
        p.update(insts[t], X[t], arm, float(rng.normal()) + t)
    # past the round robin every request is scored
    P = p.choice_probabilities(insts, X)
    assert np.all(P.max(axis=1) < 1.0)


def test_per_instance_round_robin_forces_probability_one():
    """forced_init="per_instance": an instance's c-th arrival (c < K) plays arm c; an id not
    seen yet is at its first arrival."""
    p = EbmTS(n_arms=3, n_features=D, arms=ARMS, a=2.0, forced_init="per_instance", rng=6)
    rng = np.random.default_rng(7)
    for j, k in [("a", "red"), ("b", "red"), ("b", "green"), ("b", "blue"), ("c", "red")]:
        x = rng.normal(size=D)
        assert p.select(j, x) == k
        p.update(j, x, k, float(rng.normal()) + ARMS.index(k))
    insts = ["a", "b", "new", "c", "b"]
    X = rng.normal(size=(5, D))
    P = p.choice_probabilities(insts, X)
    forced = {0: 1, 2: 0, 3: 1}  # a: 1 arrival, new: 0, c: 1
    for i, k in forced.items():
        np.testing.assert_array_equal(P[i], np.eye(3)[k])
    assert np.all(P[[1, 4]].max(axis=1) < 0.98)  # b is past its round robin
    chosen = p.select_batch(insts, X)
    assert [chosen[i] for i in forced] == [ARMS[k] for k in forced.values()]
    # "a" may not receive its forced arm: scored instead, as select_batch does
    P = p.choice_probabilities(["a"], X[:1], allowed=[["red", "blue"]])
    assert P[0, 1] == 0.0 and P[0].max() < 1.0
    _assert_frequencies(p, "a", X[0], allowed=np.array([True, False, True]))
    _assert_frequencies(p, "b", X[1])


# ---------------------------------------------------------------------- arms=


@pytest.mark.parametrize(
    "make",
    [
        lambda: _ebm(EbmTS),
        lambda: _ebm(EbmUCB),
        lambda: _ebm(EbmTS, steps=4, forced_init="per_instance"),
        lambda: _linear(LinTS),
        lambda: _linear(LinUCB),
    ],
)
def test_arms_gives_the_entries_of_the_matrix(make):
    p = make()
    rng = np.random.default_rng(21)
    insts, X = _requests(p, rng, B=30)
    ids = p.arms.to_numpy()
    allowed = rng.random((len(insts), p.n_arms)) < 0.6
    allowed[:, 1] = True
    for mask in (None, allowed):
        P = p.choice_probabilities(insts, X, allowed=mask)
        for _ in range(3):
            codes = rng.integers(p.n_arms, size=len(insts))
            got = p.choice_probabilities(insts, X, allowed=mask, arms=list(ids[codes]))
            assert got.shape == (len(insts),)
            np.testing.assert_allclose(got, P[np.arange(len(insts)), codes], rtol=0, atol=1e-9)
        chosen = p.select_batch(insts, X, allowed=mask)
        got = p.choice_probabilities(insts, X, allowed=mask, arms=chosen)
        assert np.all(got > 0)
        if mask is not None:
            codes = np.argmin(mask, axis=1)  # a disallowed arm where there is one
            got = p.choice_probabilities(insts, X, allowed=mask, arms=list(ids[codes]))
            assert np.all(got[~mask[np.arange(len(insts)), codes]] == 0.0)


# ---------------------------------------------------------------------- refusals


@pytest.mark.parametrize("make", [lambda: _ebm(EbmTS), lambda: _linear(LinTS)])
def test_refused_inputs_name_the_argument_and_change_nothing(make):
    p = make()
    before = snapshot(p)
    ids = list(p.arms.to_numpy())
    inst = list(p.instances.to_numpy()[:2])
    X = np.zeros((2, D))
    bad_arm = "purple" if p.arms.kind == "str" else 7
    cases = [
        (ValueError, "contexts", dict(contexts=np.zeros((2, D + 1)))),
        (ValueError, "contexts", dict(contexts=np.full((2, D), np.nan))),
        (ValueError, "contexts", dict(contexts=np.zeros(D))),
        (ValueError, "instances", dict(instances=inst[:1])),
        (ValueError, "arms", dict(arms=ids[:1])),
        (ValueError, "arms", dict(arms=[ids[0], bad_arm])),
        (ValueError, "allowed", dict(allowed=[ids])),
        (ValueError, "allowed", dict(allowed=np.ones((2, p.n_arms + 1), dtype=bool))),
        (ValueError, r"allowed\[1\]", dict(allowed=[ids, []])),
        (ValueError, r"allowed\[0\]", dict(allowed=[[bad_arm], ids])),
        (TypeError, r"allowed\[0\]", dict(allowed=[ids[0], ids])),
    ]
    if p.arms.kind == "str":
        cases.append((ValueError, r"arms\[0\]", dict(arms=[0, 1])))
    else:
        cases.append((ValueError, "arms", dict(arms=[0, -1])))
        cases.append((ValueError, "instances", dict(instances=[0, 4])))
        cases.append((TypeError, "instances", dict(instances=["x", "y"])))
    for exc, name, kw in cases:
        args = {"instances": inst, "contexts": X, **kw}
        with pytest.raises(exc, match=name):
            p.choice_probabilities(args.pop("instances"), args.pop("contexts"), **args)
    assert snapshot(p) == before


@pytest.mark.parametrize("cls", [OLSBandit, RMBandit])
def test_forced_sampling_bandits_do_not_compute_probabilities(cls):
    p = cls(3, 3, D, rng=0)
    X = np.zeros((2, D))
    with pytest.raises(NotImplementedError, match=cls.__name__):
        p.choice_probabilities([0, 1], X)
    with pytest.raises(NotImplementedError, match=cls.__name__):
        p.choice_probabilities([0, 1], X, arms=[0, 2])
