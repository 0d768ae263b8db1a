"""The compiled multi-seed loop reproduces the per-seed Python loop exactly."""

from __future__ import annotations

import copy
import importlib
from types import SimpleNamespace

import numpy as np
import pytest
import xarray as xr

from hierbandit.ebm import (
    EbmTS,
    EbmUCB,
    HierarchicalLinearEnv,
    LinTS,
    LinUCB,
    Policy,
    batched_unsupported,
    run_batched,
)
from hierbandit.ebm.compiled import _argmax_tie, _independent
from hierbandit.experiments import simulate
from hierbandit.stats.empirical_bayes import EBOptions
from tests.conftest import snapshot

N, K, D = 6, 4, 3


def _rollouts(S, T, seed=0, zero_every=0):
    env = HierarchicalLinearEnv(N, K, D, arrival="data-poor", rng=seed)
    rolls = [env.rollout(T, rng=np.random.default_rng([seed, s])) for s in range(S)]
    inst = np.stack([r.instance for r in rolls])
    X = np.stack([r.context for r in rolls])
    R = np.stack([r.mean_reward + r.noise for r in rolls])
    if zero_every:
        X[:, ::zero_every] = 0.0  # every arm then has the same score: ties
    return inst, X, R


def _loop(policy, inst, X, R):
    """The reference: the unchecked select/update loop of ``simulate``, one round at a time."""
    arms = np.empty(len(inst), dtype=np.int64)
    for t in range(len(inst)):
        j, x = int(inst[t]), X[t].copy()
        k = policy._select(j, x)
        policy._update(j, x, k, float(R[t, k]))
        arms[t] = k
    return arms


def _prior():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((K, D, D))
    cov = A @ A.transpose(0, 2, 1) / D + 0.5 * np.eye(D)
    return SimpleNamespace(
        shared_mean=rng.standard_normal((K, D)),
        shared_cov=cov,
        Sigma=0.5 * cov,
        sigma2=np.full(K, 0.8),
    )


CONFIGS = {
    "ts-eb-every-pull": (EbmTS, {}),
    "ts-every-3-per-instance": (
        EbmTS,
        {"hyper_update_every": 3, "forced_init": "per_instance", "alpha_clock": "instance"},
    ),
    "ucb-every-pull-first": (EbmUCB, {"tie_break": "first", "a": 0.5}),
    "ucb-recompute-literal": (
        EbmUCB,
        {
            "hyper_update_every": 4,
            "recompute_every": 5,
            "mean_formula": "4.4-literal",
            "eb_options": EBOptions(threshold="none", eb_iters=2, estimate_sigma2=False),
        },
    ),
    "ts-fixed-threshold-debias": (
        EbmTS,
        {
            "lam": 0.1,
            "Sigma_init": 2.0 * np.eye(D),
            "sigma2_init": np.linspace(0.5, 1.5, K),
            "eb_options": EBOptions(threshold=0.05, debias_ols_noise=True, cv_splits=3),
        },
    ),
    "ts-prior-fixed": (EbmTS, {"prior": _prior(), "prior_mode": "fixed", "a": 1.0}),
    "ucb-prior-init": (EbmUCB, {"prior": _prior(), "hyper_update_every": 2}),
    "linucb": (LinUCB, {}),
    "linucb-first-recompute": (LinUCB, {"tie_break": "first", "recompute_every": 7}),
    "linucb-alpha0": (LinUCB, {"alpha": 0.0, "ridge": 2.0}),
    "lints": (LinTS, {}),
    "lints-sqrt-log": (LinTS, {"v_schedule": "sqrt_log_t", "recompute_every": None}),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_batched_equals_loop(name):
    cls, kw = CONFIGS[name]
    S, T = 3, 240
    inst, X, R = _rollouts(S, T, seed=len(name), zero_every=11)
    batched = [cls(N, K, D, rng=10 + s, **copy.deepcopy(kw)) for s in range(S)]
    looped = [cls(N, K, D, rng=10 + s, **copy.deepcopy(kw)) for s in range(S)]
    arms = run_batched(batched, inst, X, R)
    assert arms.shape == (S, T) and arms.dtype == np.int64
    for s in range(S):
        np.testing.assert_array_equal(arms[s], _loop(looped[s], inst[s], X[s], R[s]))
        # the whole final state, random-generator states included, is bit-for-bit the same
        assert snapshot(batched[s]) == snapshot(looped[s])


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
def test_batched_equals_loop_when_rank_one_steps_refactorise(cls):
    """Rows at the accepted magnitude bound make the hierarchical Sherman–Morrison step
    ill-conditioned; the policy then recomputes the arm, and so must the compiled loop."""
    S, T = 2, 120
    inst, X, R = _rollouts(S, T, seed=5)
    X[:, 3::7] *= 1e6 / np.abs(X[:, 3::7]).max()  # every 7th row at the bound
    kw = {"hyper_update_every": 50}
    batched = [cls(N, K, D, rng=10 + s, **kw) for s in range(S)]
    looped = [cls(N, K, D, rng=10 + s, **kw) for s in range(S)]
    arms = run_batched(batched, inst, X, R)
    for s in range(S):
        np.testing.assert_array_equal(arms[s], _loop(looped[s], inst[s], X[s], R[s]))
        assert snapshot(batched[s]) == snapshot(looped[s])


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB, LinUCB, LinTS])
def test_random_ties_are_exercised_and_reproduced(cls):
    # zero contexts give every arm the same score; LinUCB also ties on unseen (instance, arm)
    inst, X, R = _rollouts(2, 150, seed=3, zero_every=4)
    kw = {"a": 0.0} if cls in (EbmTS, EbmUCB) else {}
    batched = [cls(N, K, D, rng=s, **kw) for s in range(2)]
    looped = [cls(N, K, D, rng=s, **kw) for s in range(2)]
    fresh = cls(N, K, D, rng=0, **kw)
    run_batched(batched, inst, X, R)
    for s in range(2):
        _loop(looped[s], inst[s], X[s], R[s])
        assert snapshot(batched[s]) == snapshot(looped[s])
    assert batched[0]._tie_rng.bit_generator.state != fresh._tie_rng.bit_generator.state


@pytest.mark.parametrize("cls", [EbmTS, LinTS, LinUCB])
def test_continues_a_trained_policy(cls):
    # a policy part-way through a run (t > 0, arrival counts, rank-one counters) continues
    # exactly as the loop does: the batched run starts from whatever state it is given
    inst, X, R = _rollouts(1, 300, seed=9)
    kw = {"hyper_update_every": 5, "alpha_clock": "instance"} if cls is EbmTS else {}
    a, b = cls(N, K, D, rng=1, **kw), cls(N, K, D, rng=1, **kw)
    _loop(a, inst[0, :120], X[0, :120], R[0, :120])
    _loop(b, inst[0, :120], X[0, :120], R[0, :120])
    arms = run_batched([a], inst[:, 120:], X[:, 120:], R[:, 120:])
    np.testing.assert_array_equal(arms[0], _loop(b, inst[0, 120:], X[0, 120:], R[0, 120:]))
    assert a.t == b.t == 300
    assert snapshot(a) == snapshot(b)


def test_thread_count_does_not_change_results():
    inst, X, R = _rollouts(4, 200, seed=2)
    out = []
    for n_threads in (1, 2, 3):
        pols = [EbmTS(N, K, D, rng=s, hyper_update_every=2) for s in range(4)]
        out.append((run_batched(pols, inst, X, R, n_threads=n_threads), snapshot(pols)))
    assert all(np.array_equal(out[0][0], o[0]) and out[0][1] == o[1] for o in out[1:])


def test_mixed_classes_in_one_batch():
    inst, X, R = _rollouts(3, 100, seed=4)
    make = [lambda: EbmUCB(N, K, D, rng=1), lambda: LinUCB(N, K, D, rng=2), lambda: LinTS(N, K, D)]
    batched = [m() for m in make]
    looped = [m() for m in make]
    looped[2] = copy.deepcopy(batched[2])  # LinTS() without a seed: same fresh stream state
    arms = run_batched(batched, inst, X, R)
    for s in range(3):
        np.testing.assert_array_equal(arms[s], _loop(looped[s], inst[s], X[s], R[s]))


# ---------------------------------------------------------------------- random streams
def test_block_draws_equal_successive_draws():
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    block = a.standard_normal((50, K))
    rows = np.stack([b.standard_normal(K) for _ in range(50)])
    np.testing.assert_array_equal(block, rows)
    assert a.bit_generator.state == b.bit_generator.state


def test_compiled_tie_break_matches_numpy():
    # ``Policy._argmax`` draws ``integers(n_ties)`` (32-bit buffered draws); the compiled
    # tie-break draws the same values from the same Generator and leaves the same state. The
    # normal and uniform streams are checked by the Generator states in the snapshots above.
    a, b = np.random.default_rng(11), np.random.default_rng(11)
    for i in range(300):
        n_ties = 1 + i % 5
        scores = np.zeros(6)
        scores[:n_ties] = 1.0
        scores = scores[np.random.default_rng(i).permutation(6)]
        ties = np.flatnonzero(scores == scores.max())
        want = int(ties[b.integers(ties.size)]) if ties.size > 1 else int(ties[0])
        assert _argmax_tie(scores, True, a) == want
        if i % 7 == 0:
            np.testing.assert_array_equal(a.standard_normal(3), b.standard_normal(3))
    assert a.bit_generator.state == b.bit_generator.state
    assert _argmax_tie(np.array([1.0, np.nan, 3.0, np.nan]), True, a) == 1  # NumPy's argmax
    assert _argmax_tie(np.array([2.0, 5.0, 5.0]), False, a) == 1
    assert a.bit_generator.state == b.bit_generator.state


@pytest.mark.parametrize("forced_init", ["global", "per_instance"])
def test_forced_rounds_draw_nothing(forced_init):
    # with per-instance forcing, instance 0 arriving K times is all forced
    inst = np.zeros((1, K), dtype=np.int64)
    _, X, R = _rollouts(1, K)
    p = EbmTS(N, K, D, rng=3, forced_init=forced_init)
    fresh = EbmTS(N, K, D, rng=3)
    arms = run_batched([p], inst, X, R)
    np.testing.assert_array_equal(arms[0], np.arange(K))
    assert p._ts_rng.bit_generator.state == fresh._ts_rng.bit_generator.state
    assert p._tie_rng.bit_generator.state == fresh._tie_rng.bit_generator.state


# ---------------------------------------------------------------------- simulate integration
@pytest.fixture
def env():
    return HierarchicalLinearEnv(N, K, D, arrival="data-poor", rng=0)


class _Arm0(Policy):
    def _select(self, j, x):
        return 0

    def _update(self, j, x, k, y):
        self.t += 1

    def posterior(self):  # pragma: no cover - not needed
        raise NotImplementedError

    def hyperparameters(self):  # pragma: no cover - not needed
        raise NotImplementedError


def _policies():
    return {
        "ebmts": EbmTS(N, K, D),
        "ebmts100": EbmTS(N, K, D, hyper_update_every=100),
        "ebmucb": EbmUCB(N, K, D, forced_init="per_instance"),
        "arm0": _Arm0(N, K, D),
        "linucb": LinUCB(N, K, D),
        "lints": LinTS(N, K, D),
    }


@pytest.mark.parametrize("vectorize", ["auto", True])
def test_simulate_identical_either_way(env, vectorize):
    pols = _policies()
    if vectorize is True:
        del pols["arm0"]
    kw = {"seed": 4, "first_seed": 2}
    fast = simulate(pols, env, 120, 3, vectorize=vectorize, **kw)
    slow = simulate(pols, env, 120, 3, vectorize=False, **kw)
    xr.testing.assert_identical(fast, slow)


def test_simulate_one_seed_and_fixed_env(env):
    pols = {"ts": EbmTS(N, K, D, hyper_update_every=10), "lin": LinTS(N, K, D)}
    fast = simulate(pols, env, 80, 1, seed=1, redraw_env=False, vectorize=True)
    slow = simulate(pols, env, 80, 1, seed=1, redraw_env=False, vectorize=False)
    xr.testing.assert_identical(fast, slow)
    assert fast.sizes["seed"] == 1


def test_simulate_flushes_in_chunks(env, monkeypatch):
    sim_mod = importlib.import_module("hierbandit.experiments.simulate")
    monkeypatch.setattr(sim_mod._Batched, "max_bytes", 1)  # flush after every seed
    pols = {"ucb": EbmUCB(N, K, D), "lin": LinUCB(N, K, D)}
    fast = simulate(pols, env, 60, 3, vectorize=True)
    slow = simulate(pols, env, 60, 3, vectorize=False)
    xr.testing.assert_identical(fast, slow)


def test_simulate_auto_with_oracle_regret_uses_the_loop(env):
    pols = {"ucb": EbmUCB(N, K, D), "lin": LinUCB(N, K, D)}
    fast = simulate(pols, env, 40, 2, oracle_regret=True, vectorize="auto")
    slow = simulate(pols, env, 40, 2, oracle_regret=True, vectorize=False)
    xr.testing.assert_identical(fast, slow)


def test_simulate_vectorize_errors(env):
    with pytest.raises(TypeError, match=r"vectorize=True: policies\['arm0'\]: _Arm0"):
        simulate({"arm0": _Arm0(N, K, D)}, env, 10, 1, vectorize=True)
    with pytest.raises(ValueError, match="vectorize must be"):
        simulate({"lin": LinUCB(N, K, D)}, env, 10, 1, vectorize="yes")
    with pytest.raises(ValueError, match="vectorize must be"):
        simulate({"lin": LinUCB(N, K, D)}, env, 10, 1, vectorize=None)
    with pytest.raises(ValueError, match="oracle_regret"):
        simulate({"lin": LinUCB(N, K, D)}, env, 10, 1, oracle_regret=True, vectorize=True)


# ---------------------------------------------------------------------- errors
class _SubTS(EbmTS):
    pass


def test_batched_unsupported_reasons():
    assert batched_unsupported(EbmTS(N, K, D)) is None
    assert batched_unsupported(LinTS(N, K, D)) is None
    assert "_SubTS has no compiled loop" in batched_unsupported(_SubTS(N, K, D))
    assert "has no compiled loop" in batched_unsupported(_Arm0(N, K, D))
    p = LinUCB(N, K, D)
    p._select = lambda j, x: 0
    assert "replaces the method(s) ['_select']" in batched_unsupported(p)
    q = EbmUCB(N, K, D)
    q._pairs = q._pairs.astype(np.float32)
    assert "['_pairs']" in batched_unsupported(q)
    q = EbmUCB(N, K, D)
    q._pair_slot = q._pair_slot.astype(np.int64)
    assert "['_pair_slot']" in batched_unsupported(q)
    r = LinTS(N, K, D)
    r._sample_rng = np.random.RandomState(0)
    assert "_sample_rng is not a numpy Generator" in batched_unsupported(r)


def test_run_batched_validates_before_changing_anything():
    inst, X, R = _rollouts(2, 20)
    pols = [EbmTS(N, K, D, rng=s) for s in range(2)]
    before = snapshot(pols)
    bad_inst = inst.copy()
    bad_inst[1, 5] = N
    cases = [
        ((pols, bad_inst, X, R), {}, ValueError, "instances must be in"),
        ((pols, inst[:1], X, R), {}, ValueError, "instances must have shape"),
        ((pols, inst.astype(float), X, R), {}, TypeError, "instances must hold integers"),
        ((pols, inst, X[:, :, :2], R), {}, ValueError, "contexts must have shape"),
        ((pols, inst, X, R[:, :, :2]), {}, ValueError, "rewards must have shape"),
        ((pols, inst, X * np.nan, R), {}, ValueError, "must be finite"),
        (([pols[0], pols[0]], inst, X, R), {}, ValueError, "distinct"),
        (([pols[0], _SubTS(N, K, D)], inst, X, R), {}, TypeError, r"policies\[1\]"),
        (([pols[0], EbmTS(N + 1, K, D)], inst, X, R), {}, ValueError, r"policies\[1\] has"),
        (([], inst, X, R), {}, ValueError, "at least one"),
        ((pols, inst, X, R), {"n_threads": 0}, ValueError, "n_threads"),
        ((pols, inst, X, R), {"n_threads": 1.5}, TypeError, "n_threads"),
    ]
    for args, kw, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            run_batched(*args, **kw)
    assert snapshot(pols) == before


@pytest.mark.parametrize("cls", [EbmTS, LinTS])
def test_simulate_factory_returning_one_shared_policy(env, cls):
    # a factory that hands back the same object for every seed trains it across the seeds in
    # turn; the batched path then runs those seeds one after another, in the loop's order
    fast_p, slow_p = cls(N, K, D, rng=1), cls(N, K, D, rng=1)
    fast = simulate({"p": lambda rng: fast_p}, env, 50, 3, vectorize=True)
    slow = simulate({"p": lambda rng: slow_p}, env, 50, 3, vectorize=False)
    xr.testing.assert_identical(fast, slow)
    assert fast_p.t == 150
    assert snapshot(fast_p) == snapshot(slow_p)


def test_shared_generator_runs_in_order():
    inst, X, R = _rollouts(2, 80, seed=6)
    batched = [LinTS(N, K, D, rng=s) for s in range(2)]
    looped = [LinTS(N, K, D, rng=s) for s in range(2)]
    assert _independent(batched)
    for pols in (batched, looped):
        pols[1]._sample_rng = pols[0]._sample_rng
    assert not _independent(batched)
    e = EbmTS(N, K, D)
    e2 = EbmUCB(N, K, D)
    e2._pairs = e._pairs[:]  # a view of another policy's array
    assert not _independent([e, e2])
    arms = run_batched(batched, inst, X, R, n_threads=2)
    for s in range(2):
        np.testing.assert_array_equal(arms[s], _loop(looped[s], inst[s], X[s], R[s]))
    assert snapshot(batched) == snapshot(looped)
