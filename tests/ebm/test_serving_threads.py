"""Batches of decisions split over threads: the arms and the state (random streams included)
do not depend on the number of threads, and equal the loop of single calls."""

from __future__ import annotations

import numpy as np
import pytest

import hierbandit.ebm.linear as linear
import hierbandit.ebm.policy as policy
from hierbandit.ebm import EbmTS, EbmUCB, LinTS, LinUCB
from hierbandit.stats.threads import beside, over_threads_now
from tests.conftest import snapshot

N, K, D = 40, 4, 3
B = 3 * policy._THREAD_CHUNK + 17  # three slices of work with two threads


def _policy(cls, **kw):
    p = cls(N, K, D, rng=5, **kw)
    rng = np.random.default_rng(1)
    J = rng.integers(0, 30, 300)  # instances 30-39 have no data
    X = rng.normal(size=(300, D))
    X[::50] = 0.0  # ties: every arm of a data-less instance scores the same on a zero context
    p.update_batch(J, X, rng.integers(0, K, 300), rng.normal(size=300))
    return p


def _requests():
    rng = np.random.default_rng(2)
    J = rng.integers(0, N, B)
    X = rng.normal(size=(B, D))
    X[::97] = 0.0
    mask = rng.random((B, K)) < 0.7
    mask[np.arange(B), rng.integers(0, K, B)] = True
    return J, X, mask


@pytest.mark.parametrize(
    ("cls", "kw"),
    [
        (EbmTS, {}),
        (EbmUCB, {"alpha_clock": "instance"}),
        (EbmTS, {"mean_formula": "4.4-literal", "tie_break": "first"}),
        (LinUCB, {}),
        (LinTS, {"v_schedule": "sqrt_log_t"}),
    ],
)
def test_threads_change_nothing(cls, kw, monkeypatch):
    J, X, mask = _requests()
    got = {}
    for threads in (1, 2, 3):
        for module in (policy, linear):
            monkeypatch.setattr(module, "serving_threads", lambda threads=threads: threads)
        p = _policy(cls, **kw)
        got[threads] = (
            p.select_batch(J, X),
            p.select_batch(J, X, allowed=mask),
            snapshot(p),
        )
    for threads in (2, 3):
        assert np.array_equal(got[threads][0], got[1][0])
        assert np.array_equal(got[threads][1], got[1][1])
        assert got[threads][2] == got[1][2]
    # and the loop of single calls (one request each, on the calling thread)
    loop = _policy(cls, **kw)
    arms = [loop.select(int(j), x) for j, x in zip(J[:500], X[:500], strict=True)]
    assert list(_policy(cls, **kw).select_batch(J[:500], X[:500])) == arms


def test_over_threads_now_covers_every_item_once_and_raises_the_first_error():
    seen = np.zeros(10_000, dtype=int)

    def work(lo, hi):
        seen[lo:hi] += 1

    over_threads_now(work, 10_000, 3, min_chunk=100)
    assert np.all(seen == 1)

    def bad(lo, hi):
        raise ValueError(f"slice {lo}")

    with pytest.raises(ValueError, match="slice 0"):
        over_threads_now(bad, 10_000, 2, min_chunk=100)
    assert beside(lambda a, b=0: a + b, 2, b=3).result() == 5


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
@pytest.mark.parametrize("recompute_every", [10_000, 3])
@pytest.mark.parametrize("recompute", ["local", "arm"])
def test_updates_split_by_arm_equal_the_loop(cls, recompute_every, recompute, monkeypatch):
    """With both hyperparameters fixed, a large batch of feedback runs its arms on two threads
    (after the bookkeeping that crosses arms): the state is the loop's, bit for bit, with new
    instances, new pairs and the drift control within the batch (with R = 3: under "local"
    pairs' refreshes and arms' re-solves, under "arm" with this budget the rebuild of an arm
    every 3 rows, while pairs whose first row comes later in the batch hold slots already)."""
    from hierbandit.stats.empirical_bayes import EBOptions
    from tests.ebm.test_serving import _same_state

    fixed = EBOptions(estimate_Sigma=False, estimate_sigma2=False)
    kw = {"eb_options": fixed, "recompute_every": recompute_every, "hyper_update_budget": 1e6,
          "recompute": recompute}  # fmt: skip
    rng = np.random.default_rng(3)
    J = rng.integers(0, 3_000, B)  # instances arrive within the batch (codes in first-seen order)
    X = rng.normal(size=(B, D))
    A = rng.integers(0, K, B)
    Y = rng.normal(size=B)
    got = []
    for threads in (1, 2):
        monkeypatch.setattr(policy, "serving_threads", lambda threads=threads: threads)
        p = cls(None, K, D, rng=4, **kw)
        p.update_batch(J[:50], X[:50], A[:50], Y[:50])
        p.update_batch(J[50:], X[50:], A[50:], Y[50:])
        got.append(p)
    loop = cls(None, K, D, rng=4, **kw)
    for j, x, k, y in zip(J.tolist(), X, A.tolist(), Y.tolist(), strict=True):
        loop.update(j, x, k, y)
    _same_state(got[0], got[1])
    _same_state(got[1], loop)
    assert got[1].n_pairs == len(set(zip(J.tolist(), A.tolist(), strict=True)))


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
@pytest.mark.parametrize(
    ("kw", "split"),
    [
        ({"hyper_update_budget": 0.1}, True),  # the default schedule, nothing due in the batch
        ({"hyper_update_budget": 10.0}, False),  # every N / 10 pulls: due within the batch
        ({"hyper_update_every": 100_000}, True),
        ({"hyper_update_every": 1_500}, False),
        ({"hyper_method": "ml", "hyper_update_budget": 0.1}, True),
        ({"hyper_method": "ml", "hyper_update_budget": 10.0}, False),
    ],
)
def test_updates_with_estimated_hyperparameters_split_only_when_none_is_due(
    cls, kw, split, monkeypatch
):
    """Estimating the hyperparameters, a large batch still runs its arms on two threads when
    no arm is due for a re-estimation within it (no draw from the shared generator), and in
    one pass in order otherwise: either way the state is the loop's, bit for bit."""
    from tests.ebm.test_serving import _same_state

    rng = np.random.default_rng(5)
    n = 2 * B
    J = rng.integers(0, 3_000, n)
    X = rng.normal(size=(n, D))
    A = rng.integers(0, K, n)
    Y = X @ np.array([0.5, -1.0, 0.3]) + rng.normal(size=n)
    splits = []
    real_beside = policy.beside

    def counting_beside(*args, **kwargs):
        splits.append(1)
        return real_beside(*args, **kwargs)

    monkeypatch.setattr(policy, "beside", counting_beside)
    monkeypatch.setattr(policy, "serving_threads", lambda: 2)
    p = cls(None, K, D, rng=4, **kw)
    p.update_batch(J[:B], X[:B], A[:B], Y[:B])  # warm: the re-estimations of the first pulls
    splits.clear()
    p.update_batch(J[B:], X[B:], A[B:], Y[B:])
    assert bool(splits) == split
    loop = cls(None, K, D, rng=4, **kw)
    for j, x, k, y in zip(J.tolist(), X, A.tolist(), Y.tolist(), strict=True):
        loop.update(j, x, k, y)
    _same_state(p, loop)
    assert p.hyperparameters()["Sigma"].values.tobytes() == (
        loop.hyperparameters()["Sigma"].values.tobytes()
    )
