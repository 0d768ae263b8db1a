"""LinUCB and LinTS batches: one compiled call each way, the loop's arms and state bit for bit
(ties, allowed arms, the exact recomputations of the ridge inverses included)."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.ebm import LinTS, LinUCB
from tests.ebm.test_serving import _rounds

CONFIGS = [
    (LinUCB, {}),
    (LinUCB, {"tie_break": "first", "recompute_every": 7, "alpha": 0.5}),
    (LinTS, {}),
    (LinTS, {"v_schedule": "sqrt_log_t", "recompute_every": 5}),
]
STATE = ("G", "b", "q", "n", "Ainv", "theta")


def _same_state(p1, p2):
    assert p1.t == p2.t
    for name in STATE:
        assert np.array_equal(getattr(p1.stats, name), getattr(p2.stats, name)), name


@pytest.mark.parametrize(("cls", "kw"), CONFIGS)
def test_batches_equal_the_loop(cls, kw):
    N, K, d = 20, 4, 3
    loop, batch = cls(N, K, d, rng=3, **kw), cls(N, K, d, rng=3, **kw)
    rng = np.random.default_rng(0)
    for r, (J, X, Y) in enumerate(_rounds(rng, np.arange(N), d, 600, 40)):
        if r % 4 == 0:
            X[::3] = 0.0  # zero contexts tie every arm of an instance
        mask = rng.random((J.size, K)) < 0.6
        mask[np.arange(J.size), rng.integers(K, size=J.size)] = True
        allowed = [np.flatnonzero(m) for m in mask]
        arms = np.array(
            [loop.select(int(j), x, allowed=a) for j, x, a in zip(J, X, allowed, strict=True)]
        )
        got = batch.select_batch(J, X, allowed=mask)
        assert np.array_equal(got, arms)
        assert all(mask[i, k] for i, k in enumerate(got))
        plain = np.array([loop.select(int(j), x) for j, x in zip(J, X, strict=True)])
        assert np.array_equal(batch.select_batch(J, X), plain)
        for j, x, k, y in zip(J, X, arms, Y, strict=True):
            loop._update(int(j), x, int(k), float(y))
        batch.update_batch(J, X, arms, Y)
        _same_state(loop, batch)


def test_ridge_add_batch_is_the_loop_of_add():
    from hierbandit.stats.ridge import RidgeStats

    rng = np.random.default_rng(2)
    a, b = RidgeStats(6, 3, recompute_every=4), RidgeStats(6, 3, recompute_every=4)
    units = rng.integers(6, size=50)
    X = rng.normal(size=(50, 3)) * 10.0 ** rng.uniform(-1, 3, size=(50, 1))
    y = rng.normal(size=50)
    for u, x, v in zip(units, X, y, strict=True):
        a.add(int(u), x, float(v))
    b.add_batch(units, X, y)
    for name in STATE:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
