"""An explorer driven by ``observe()`` alone (any sampling rule, Remark 16) gets its estimate
refreshed lazily, so its stopping rule fires and it recommends a partition."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.boc.explorers import BOC, ClusteringExplorer, Oracle, Uniform
from hierbandit.boc.instances import synthetic_instance
from tests.conftest import snapshot


@pytest.fixture(scope="module")
def easy():
    return synthetic_instance("easy")


def _observe_round_robin(alg, inst, seed, budget=20_000):
    sampler = inst.sampler(seed)
    while alg.t < budget:
        a = alg.t % alg.n_arms
        alg.observe(a, sampler.pull(a))
        if alg.should_stop():
            return True
    return False


@pytest.mark.parametrize("cls", [BOC, Uniform])
def test_observe_driven_round_robin_stops_as_uniform_does(easy, cls):
    """Round robin through observe() alone is Uniform's sampling rule: the lazily refreshed
    estimate c_{t-1} is the one Uniform computes, so it stops at the same pull with the same
    partition."""
    ref = Uniform(11, 4, 3, delta=0.01).run(easy, rng=3)
    assert ref.stopped and ref.correct
    alg = cls(11, 4, 3, delta=0.01)
    assert _observe_round_robin(alg, easy, 3)
    assert alg.t == ref.n_pulls
    np.testing.assert_array_equal(alg.recommend(), ref.labels)
    z, _, _ = alg.statistic()
    assert z == pytest.approx(ref.statistic, rel=1e-12)


def test_observe_alone_runs_no_kmeans_until_asked(easy):
    """The refresh is lazy: observations only record; one K-means per query of a new t."""
    alg = BOC(11, 4, 3, delta=0.01)
    sampler = easy.sampler(0)
    for t in range(500):
        a = t % 11
        alg.observe(a, sampler.pull(a))
    assert alg.n_kmeans == 0 and alg.labels is None
    alg.should_stop()
    assert alg.n_kmeans == 1 and alg.labels is not None
    alg.statistic(), alg.recommend(), alg.should_stop()  # same t: no new K-means
    assert alg.n_kmeans == 1


def test_the_refreshed_estimate_is_that_of_the_data_before_the_last_observation(easy):
    """c_{t-1}: K-means on the data up to t - 1, as a step of Algorithm 1 would have it."""
    sampler = easy.sampler(1)
    xs = []
    for t in range(300):
        a = (7 * t) % 11
        xs.append((a, sampler.pull(a)))
    lazy = BOC(11, 4, 3)
    for a, x in xs:
        lazy.observe(a, x)
    lazy.should_stop()
    eager = BOC(11, 4, 3)
    for a, x in xs[:-1]:
        eager.observe(a, x)
    eager._estimate()
    np.testing.assert_array_equal(lazy.labels, eager.labels)
    np.testing.assert_array_equal(lazy.centres, eager.centres)


def test_no_estimate_while_an_arm_was_unpulled_before_the_last_observation(easy):
    alg = BOC(11, 4, 3)
    sampler = easy.sampler(0)
    for a in range(11):
        alg.observe(a, sampler.pull(a))
    # t = M: the first test is at t = M + 1
    assert not alg.should_stop()
    with pytest.raises(ValueError, match="no estimate"):
        alg.recommend()
    alg.observe(0, sampler.pull(0))
    alg.should_stop()
    assert alg.labels is not None
    alg.recommend()


def test_forced_step_after_observe_carries_the_refreshed_estimate(easy):
    """next_arm() on a forced-exploration step keeps (c_{t-1}, U_{t-1}): after observe-driven
    steps that is the refreshed estimate, not an older one."""
    sampler = easy.sampler(2)
    alg = BOC(11, 4, 3)
    for _ in range(30):
        alg.observe(0, sampler.pull(0))
    for a in range(1, 11):
        alg.observe(a, sampler.pull(a))
    for _ in range(30):
        alg.observe(1, sampler.pull(1))
    assert alg._forced_exploration()
    arm = alg.next_arm()
    assert alg.n_forced == 1 and alg.labels is not None
    ref = BOC(11, 4, 3)
    for name in ("counts", "sums", "means"):
        setattr(ref, name, getattr(alg, name).copy())
    ref.t = alg.t
    # the data up to t - 1: undo the last observation of arm 1
    ref.counts[1] -= 1
    ref.means[1] = alg._prev_mean
    ref._estimate()
    np.testing.assert_array_equal(alg.labels, ref.labels)
    assert arm == int(np.argmin(alg.counts))


@pytest.mark.parametrize("cls", [BOC, Oracle])
def test_a_stale_estimate_is_checkpointed(easy, cls, tmp_path):
    kw = {"lam": easy.lower_bound().lam} if cls is Oracle else {}
    alg = cls(11, 4, 3, delta=0.01, **kw)
    sampler = easy.sampler(4)
    for t in range(200):
        a = t % 11
        alg.observe(a, sampler.pull(a))
    restored = ClusteringExplorer.load(alg.save(tmp_path / "stale.nc"))
    assert snapshot(restored) == snapshot(alg)
    assert restored.statistic() == alg.statistic()
    np.testing.assert_array_equal(restored.recommend(), alg.recommend())
