"""BOC, Uniform and Oracle: sampling rules, step API, runner equivalence and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierbandit.boc import _kernels as kern
from hierbandit.boc.explorers import BOC, BOCLE, ExplorationResult, Oracle, Uniform
from hierbandit.boc.instances import synthetic_instance
from hierbandit.boc.stopping import stopping_times
from tests.conftest import snapshot


@pytest.fixture(scope="module")
def easy():
    return synthetic_instance("easy")


@pytest.fixture(scope="module")
def moderate():
    return synthetic_instance("moderate")


def _step_loop(alg, inst, seed, max_pulls=100_000):
    """Algorithm 1 through the public step API."""
    sampler = inst.sampler(seed)
    arms = []
    while alg.t < max_pulls:
        a = alg.next_arm()
        assert alg.next_arm() == a  # idempotent
        arms.append(a)
        alg.observe(a, sampler.pull(a))
        if alg.should_stop():
            break
    return arms


def test_initial_pass_then_first_test_after_m_pulls(easy):
    alg = BOC(11, 4, 3, log_inv_delta=1.0, threshold="beta_tilde")
    sampler = easy.sampler(0)
    for m in range(11):
        assert alg.next_arm() == m
        assert not alg.should_stop()
        alg.observe(m, sampler.pull(m))
    assert alg.labels is None
    with pytest.raises(ValueError, match="no estimate"):
        alg.recommend()
    alg.next_arm()  # t = M: forced exploration cannot fire, K-means runs
    assert alg.labels is not None and alg.n_kmeans == 1 and alg.n_forced == 0


@pytest.mark.parametrize("cls", [BOC, Uniform, Oracle])
@pytest.mark.parametrize("threshold", ["beta", "beta_tilde"])
def test_step_api_equals_run_and_the_multi_delta_runner(easy, cls, threshold):
    kw = {"lam": easy.lower_bound().lam} if cls is Oracle else {}
    for L in (3.0, 40.0):
        a = cls(11, 4, 3, log_inv_delta=L, threshold=threshold, **kw)
        _step_loop(a, easy, seed=7)
        b = cls(11, 4, 3, log_inv_delta=L, threshold=threshold, **kw)
        res = b.run(easy, rng=7)
        assert res.stopped and res.n_pulls == a.t
        np.testing.assert_array_equal(res.labels, a.recommend())
        np.testing.assert_array_equal(res.counts, a.counts)
        ds = stopping_times(cls(11, 4, 3, **kw), easy, [L, 1.0, 100.0], rng=7)
        assert int(ds.tau.sel(threshold=threshold, log_inv_delta=L)) == res.n_pulls
        assert bool(ds.correct.sel(threshold=threshold, log_inv_delta=L)) == res.correct
        np.testing.assert_array_equal(
            ds.labels.sel(threshold=threshold, log_inv_delta=L).values, res.labels
        )


def test_uniform_is_round_robin(easy):
    alg = Uniform(11, 4, 3)
    arms = _step_loop(alg, easy, seed=1, max_pulls=60)
    assert arms == [t % 11 for t in range(len(arms))]
    assert alg.n_kmeans == len(arms) - 11


def test_forced_exploration_guarantee_and_tracking(moderate):
    lam_star = moderate.lower_bound().lam
    for cls, kw in ((BOC, {}), (Oracle, {"lam": lam_star})):
        alg = cls(11, 4, 3, log_inv_delta=1e6, **kw)  # never stops
        sampler = moderate.sampler(3)
        worst = 0.0
        while alg.t < 30_000:
            if alg.t >= 11:
                # GK16 Lemma 7: N_m(t) ≥ (√t − M/2)₊ − 1 for every arm
                worst = min(worst, alg.counts.min() - (max(math.sqrt(alg.t) - 5.5, 0) - 1))
            a = alg.next_arm()
            alg.observe(a, sampler.pull(a))
        assert worst >= 0.0
        np.testing.assert_allclose(alg.counts / alg.t, lam_star, atol=0.01)
        assert alg.n_forced > 0


def test_d_tracking_picks_the_most_under_sampled_arm_with_smallest_index():
    alg = Oracle(4, 2, 1, lam=[0.25, 0.25, 0.25, 0.25])
    for a, x in [(0, 0.0), (1, 0.1), (2, 5.0), (3, 5.1)]:
        alg.observe(a, [x])
    for a, x in [(0, 0.0), (1, 0.1), (2, 5.0)]:
        alg.observe(a, [x])
    # t = 7, N = (2, 2, 2, 1): argmax(7/4 − N) = arm 3
    assert alg.next_arm() == 3
    alg.observe(3, [5.0])
    # t = 8, N = (2, 2, 2, 2): all scores equal → smallest index
    assert alg.next_arm() == 0
    lam = np.array([0.1, 0.2, 0.3, 0.4])
    alg.set_target(lam)
    alg.observe(0, [0.0])
    t, N = alg.t, alg.counts.copy()
    assert alg.next_arm() == int(np.argmax(t * lam - N))


def test_plugin_target_equals_the_lower_bound_of_the_estimate(moderate):
    from hierbandit.boc.lower_bound import optimal_allocation

    alg = BOC(11, 4, 3, log_inv_delta=1e6)
    sampler = moderate.sampler(2)
    while alg.t < 3000:
        a = alg.next_arm()
        alg.observe(a, sampler.pull(a))
    alg._estimate()
    lam = alg._plugin()
    lb = optimal_allocation(alg.labels, alg.centres)
    np.testing.assert_allclose(lam, lb.lam, rtol=1e-7)


def test_linear_exploration_projection():
    rng = np.random.default_rng(0)
    from scipy.optimize import minimize

    for _ in range(30):
        M = int(rng.integers(2, 12))
        lam = rng.dirichlet(np.ones(M) * 0.3)
        floor = rng.uniform(0, 1.0 / M)
        got = kern.project_floor(lam, floor)
        assert got.sum() == pytest.approx(1.0)
        assert got.min() >= floor - 1e-12
        res = minimize(
            lambda x, lam=lam: ((x - lam) ** 2).sum(),
            np.full(M, 1.0 / M),
            constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
            bounds=[(floor, 1)] * M,
            method="SLSQP",
            options={"ftol": 1e-14},
        )
        np.testing.assert_allclose(got, res.x, atol=1e-6)


def test_boc_le_tracks_a_floored_target_and_never_forces():
    inst = synthetic_instance("challenging", target_hardness=2.0)
    r = inst.separation_ratio
    alg = BOCLE(11, 4, 3, r=r, delta=0.1, threshold="beta_tilde")
    assert alg.name == "BOC-LE" and alg.exploration == "linear"
    res = alg.run(inst, rng=4)
    assert res.stopped and res.correct and res.info["n_forced"] == 0
    assert alg.target.min() >= r * r / 22 - 1e-12


def test_tiny_delta_works(easy):
    res = BOC(11, 4, 3, log_inv_delta=400.0).run(easy, rng=0)
    assert res.stopped and res.correct
    assert res.log_inv_delta == 400.0


def test_reproducible_and_clone(easy):
    a = BOC(11, 4, 3, delta=0.05, first_seed="random", rng=3)
    r1 = a.run(easy, rng=9)
    r2 = a.clone().run(easy, rng=9)
    assert r1.n_pulls == r2.n_pulls
    params = a.get_params()
    assert params["delta"] == 0.05 and params["first_seed"] == "random"
    b = a.with_confidence(log_inv_delta=30.0)
    assert b.log_inv_delta == 30.0 and b.delta is None


def test_result_to_xarray(easy):
    res = Uniform(11, 4, 3, delta=0.1, threshold="beta_tilde").run(easy, rng=0)
    assert isinstance(res, ExplorationResult)
    ds = res.to_xarray()
    assert ds.labels.dims == ("arm",) and ds.centres.dims == ("cluster", "feature")
    assert ds.attrs["n_pulls"] == res.n_pulls and ds.attrs["correct"] == 1


def test_budget_exhausted(easy):
    res = BOC(11, 4, 3, log_inv_delta=1e4).run(easy, max_pulls=50, rng=0)
    assert not res.stopped and res.n_pulls == 50


def test_paper_pair_set_runs(easy):
    res = BOC(11, 4, 3, delta=0.1, alt_pairs="paper").run(easy, rng=0)
    assert res.stopped and res.correct


def test_bad_observations_raise_and_change_nothing(easy):
    alg = BOC(11, 4, 3)
    sampler = easy.sampler(0)
    for _ in range(30):
        a = alg.next_arm()
        alg.observe(a, sampler.pull(a))
    alg.next_arm()
    before = snapshot(alg)
    bad = [
        (0, [np.nan, 0.0, 0.0], ValueError, "finite"),
        (0, [np.inf, 0.0, 0.0], ValueError, "finite"),
        (0, [0.0, 0.0], ValueError, "shape"),
        (11, [0.0, 0.0, 0.0], ValueError, "arm"),
        (-1, [0.0, 0.0, 0.0], ValueError, "arm"),
        (True, [0.0, 0.0, 0.0], TypeError, "arm"),
        (1.0, [0.0, 0.0, 0.0], TypeError, "arm"),
        (0, "abc", TypeError, "x"),
    ]
    for arm, x, err, match in bad:
        with pytest.raises(err, match=match):
            alg.observe(arm, x)
        assert snapshot(alg) == before


@pytest.mark.parametrize(
    ("args", "kwargs", "err", "match"),
    [
        ((4, 4, 1), {}, ValueError, "K < M"),
        ((4, 6, 1), {}, ValueError, "K < M"),
        ((4, 0, 1), {}, ValueError, "n_clusters"),
        ((4, 2, 1), {"delta": 0.0}, ValueError, "delta"),
        ((4, 2, 1), {"delta": 1.0}, ValueError, "delta"),
        ((4, 2, 1), {"delta": 1.5}, ValueError, "delta"),
        ((4, 2, 1), {"log_inv_delta": -1.0}, ValueError, "log_inv_delta"),
        ((4, 2, 1), {"delta": 0.1, "log_inv_delta": 2.0}, ValueError, "exactly one"),
        ((4, 2, 1), {"threshold": "gamma"}, ValueError, "threshold"),
        ((4, 2, 1), {"alt_pairs": "none"}, ValueError, "alt_pairs"),
        ((4, 2, 1), {"first_seed": "middle"}, ValueError, "first_seed"),
        ((4, 2, 1), {"exploration": "linear"}, ValueError, "needs r"),
        ((4, 2, 1), {"exploration": "linear", "r": 1.5}, ValueError, "r must"),
        ((4, 2, 1), {"exploration": "other"}, ValueError, "exploration"),
        ((4.0, 2, 1), {}, TypeError, "n_arms"),
    ],
)
def test_bad_construction_raises(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        BOC(*args, **kwargs)


def test_oracle_and_run_validation(easy):
    with pytest.raises(ValueError, match="lam"):
        Oracle(11, 4, 3, lam=np.full(11, 0.5))
    with pytest.raises(ValueError, match="lam"):
        Oracle(11, 4, 3, lam=np.r_[np.zeros(1), np.full(10, 0.1)])
    alg = Oracle(11, 4, 3)
    sampler = easy.sampler(0)
    for _ in range(11):
        a = alg.next_arm()
        alg.observe(a, sampler.pull(a))
    with pytest.raises(ValueError, match="lam"):
        alg.next_arm()
    res = Oracle(11, 4, 3, delta=0.1).run(easy, rng=0)  # takes λ* from the instance
    assert res.stopped and res.correct
    with pytest.raises(ValueError, match="n_arms"):
        BOC(10, 4, 3).run(easy)
    with pytest.raises(ValueError, match="n_features"):
        BOC(11, 4, 2).run(easy)
    with pytest.raises(TypeError, match="ClusterBandit"):
        BOC(11, 4, 3).run(object())
    with pytest.raises(ValueError, match="max_pulls"):
        BOC(11, 4, 3).run(easy, max_pulls=0)
    with pytest.raises(ValueError, match="log_inv_delta"):
        stopping_times(BOC(11, 4, 3), easy, [0.0])
    with pytest.raises(ValueError, match="thresholds"):
        stopping_times(BOC(11, 4, 3), easy, [1.0], thresholds=["gamma"])
