"""``EbmPolicy.reserve``: room for the records of pairs to come, committed up front.

It changes capacity only: the state after any feedback is the state without it, bit for bit,
and a checkpoint keeps no spare room. Bad arguments are refused before anything changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.ebm import EbmTS, EbmUCB, policy
from hierbandit.stats.empirical_bayes import EBOptions
from tests.ebm.test_serving import _same_state


def _batches(rng, N, K, d, n=4, B=300):
    out = []
    for _ in range(n):
        J = rng.integers(0, N, B)
        X = rng.normal(size=(B, d))
        A = rng.integers(0, K, B)
        out.append((J, X, A, X[:, 0] + rng.normal(size=B)))
    return out


@pytest.mark.parametrize(
    "cls, kw, B",
    [
        (EbmTS, {}, 300),
        (EbmUCB, {}, 300),
        # batches of 5,000 rows with fixed hyperparameters: split over two threads by arm
        (EbmTS, {"eb_options": EBOptions(estimate_Sigma=False, estimate_sigma2=False)}, 5_000),
    ],
)
def test_reserve_changes_no_value(cls, kw, B, monkeypatch):
    """The same batches (in one kernel, or split over two threads) and single updates give
    the same state and decisions with and without reserve, before and after the room runs
    out."""
    monkeypatch.setattr(policy, "serving_threads", lambda: 2)
    rng = np.random.default_rng(0)
    N, K, d = 6_000 if B > 300 else 60, 4, 3
    batches = _batches(rng, N, K, d, B=B)
    a, b = cls(N, K, d, rng=1, **kw), cls(N, K, d, rng=1, **kw)
    room = B // 2  # fewer than the batches need: the buffer doubles after it
    b.reserve(room)
    assert b._pair_buffer().shape[0] == room and b.n_pairs == 0
    for J, X, A, Y in batches:
        assert np.array_equal(a.select_batch(J, X), b.select_batch(J, X))
        a.update_batch(J, X, A, Y)
        b.update_batch(J, X, A, Y)
        _same_state(a, b)
    j, x = 3, rng.normal(size=d)
    a.update(j, x, 1, 0.5)
    b.update(j, x, 1, 0.5)
    _same_state(a, b)
    assert a.n_pairs > room


def test_reserve_holds_the_room_and_commits_it(tmp_path):
    p = EbmTS(10, 3, 2, rng=0)
    p.update_batch([0, 1], np.ones((2, 2)), [0, 1], [1.0, 2.0])
    p.reserve(1_000)
    buf = p._pair_buffer()
    assert buf.shape[0] == 1_000 and p.n_pairs == 2
    assert np.all(buf[2:] == 0.0)  # written once
    p.reserve(10)  # fewer than it holds: nothing to grow
    assert p._pair_buffer() is buf
    p.save(tmp_path / "p.nc")
    q = EbmTS.load(tmp_path / "p.nc")
    assert q._pair_buffer().shape[0] == q.n_pairs == 2
    _same_state(p, q)


@pytest.mark.parametrize(
    "value, error",
    [(-1, ValueError), (2**31, ValueError), (2.0, TypeError), ("10", TypeError), (True, TypeError)],
)
def test_bad_reservations_are_refused_and_change_nothing(value, error):
    p = EbmTS(5, 2, 2, rng=0)
    p.update_batch([0], np.ones((1, 2)), [0], [1.0])
    before = p._pair_buffer()
    with pytest.raises(error, match="pairs"):
        p.reserve(value)
    assert p._pair_buffer() is before
