"""Ridge and least-squares statistics: incremental == batch, validation, drift control."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.stats.ridge import OLSStats, RidgeStats, ols_solve
from hierbandit.stats.suffstats import suffstats
from tests.conftest import snapshot


def _fill(rs: RidgeStats | OLSStats, rng: np.random.Generator, T: int):
    d = rs.n_features
    units = rng.integers(rs.n_units, size=T)
    X = rng.normal(size=(T, d)) * rng.uniform(0.2, 3.0, size=d)
    y = X @ rng.normal(size=d) + rng.normal(size=T)
    for t in range(T):
        rs.add(int(units[t]), X[t], float(y[t]))
    return units, X, y


def test_incremental_equals_batch(rng):
    rs = RidgeStats(4, 4, reg=0.5, recompute_every=None)
    units, X, y = _fill(rs, rng, 800)
    s = suffstats(X, y, units, 4)
    np.testing.assert_allclose(rs.G, s.G, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rs.b, s.b, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rs.q, s.q, rtol=1e-12)
    np.testing.assert_array_equal(rs.n, s.n)
    A = s.G + 0.5 * np.eye(4)
    Ainv = np.linalg.inv(A)
    theta = np.linalg.solve(A, s.b[..., None])[..., 0]
    np.testing.assert_allclose(rs.Ainv, Ainv, rtol=0, atol=1e-10)
    np.testing.assert_allclose(rs.theta, theta, rtol=0, atol=1e-10)
    np.testing.assert_allclose(rs.A, A, rtol=0, atol=1e-9)


def test_recompute_is_exact_and_close_to_incremental(rng):
    rs = RidgeStats(3, 3, recompute_every=None)
    _fill(rs, rng, 500)
    Ainv, theta = rs.Ainv.copy(), rs.theta.copy()
    rs.recompute()
    np.testing.assert_allclose(rs.Ainv, Ainv, atol=1e-10)
    np.testing.assert_allclose(rs.theta, theta, atol=1e-10)
    np.testing.assert_allclose(rs.Ainv @ rs.A, np.broadcast_to(np.eye(3), (3, 3, 3)), atol=1e-12)
    rs.recompute([1])
    rs.recompute(np.int64(2))
    with pytest.raises(ValueError, match="units"):
        rs.recompute([3])
    with pytest.raises(TypeError, match="units"):
        rs.recompute([0.5])


def test_periodic_recompute(rng):
    rs = RidgeStats(1, 3, recompute_every=7)
    ref = RidgeStats(1, 3, recompute_every=None)
    for _ in range(7):
        x, y = rng.normal(size=3), float(rng.normal())
        rs.add(0, x, y)
        ref.add(0, x, y)
    assert rs.n[0] == 7
    # the 7th update recomputed exactly: identical to an explicit recompute of the reference
    ref.recompute()
    np.testing.assert_array_equal(rs.Ainv, ref.Ainv)
    np.testing.assert_array_equal(rs.theta, ref.theta)


def test_single_observation():
    rs = RidgeStats(2, 2, reg=1.0)
    rs.add(1, [1.0, 0.0], 2.0)
    np.testing.assert_allclose(rs.theta, [[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(rs.Ainv[1], np.diag([0.5, 1.0]))
    np.testing.assert_allclose(rs.Ainv[0], np.eye(2))


def test_add_batch_equals_sequential(rng):
    a = RidgeStats(3, 2)
    b = RidgeStats(3, 2)
    units, X, y = _fill(a, rng, 50)
    b.add_batch(units, X, y)
    np.testing.assert_array_equal(a.Ainv, b.Ainv)
    np.testing.assert_array_equal(a.theta, b.theta)


@pytest.mark.parametrize(
    ("args", "exc", "name"),
    [
        ((3, [1.0, 2.0], 1.0), ValueError, "unit"),
        ((-1, [1.0, 2.0], 1.0), ValueError, "unit"),
        ((1.0, [1.0, 2.0], 1.0), TypeError, "unit"),
        ((0, [1.0, 2.0, 3.0], 1.0), ValueError, "x"),
        ((0, [np.nan, 2.0], 1.0), ValueError, "x"),
        ((0, [1.0, 2.0], np.inf), ValueError, "y"),
        ((0, [1.0, 2.0], "a"), TypeError, "y"),
    ],
)
def test_add_rejects_bad_input_without_change(rng, args, exc, name):
    rs = RidgeStats(3, 2)
    _fill(rs, rng, 10)
    before = snapshot(rs)
    with pytest.raises(exc, match=name):
        rs.add(*args)
    assert snapshot(rs) == before


def test_add_batch_rejects_before_change(rng):
    rs = RidgeStats(3, 2)
    _fill(rs, rng, 10)
    before = snapshot(rs)
    with pytest.raises(ValueError, match="units"):
        rs.add_batch([0, 5], np.ones((2, 2)), [1.0, 1.0])
    with pytest.raises(ValueError, match="y"):
        rs.add_batch([0, 1], np.ones((2, 2)), [1.0, np.nan])
    with pytest.raises(ValueError, match="X"):
        rs.add_batch([0, 1], np.ones((2, 3)), [1.0, 1.0])
    assert snapshot(rs) == before


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"n_units": 0}, ValueError, "n_units"),
        ({"n_features": 1.5}, TypeError, "n_features"),
        ({"reg": 0.0}, ValueError, "reg"),
        ({"reg": np.nan}, ValueError, "reg"),
        ({"recompute_every": 0}, ValueError, "recompute_every"),
    ],
)
def test_constructor_validation(kwargs, exc, name):
    args = {"n_units": 2, "n_features": 2} | kwargs
    with pytest.raises(exc, match=name):
        RidgeStats(**args)


def test_ols_solve_full_rank_and_fallback(rng):
    X = rng.normal(size=(20, 3))
    y = rng.normal(size=20)
    s = suffstats(np.vstack([X, X[:2]]), np.concatenate([y, y[:2]]), [0] * 20 + [1, 1], 3)
    coef, full = ols_solve(s.G, s.b, s.n)
    np.testing.assert_allclose(coef[0], np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-12)
    # two rows in d = 3: tiny ridge
    np.testing.assert_allclose(
        coef[1], np.linalg.solve(s.G[1] + 1e-6 * np.eye(3), s.b[1]), rtol=1e-10
    )
    np.testing.assert_array_equal(coef[2], 0.0)
    np.testing.assert_array_equal(full, [True, False, False])
    with pytest.raises(ValueError, match="ridge"):
        ols_solve(s.G, s.b, s.n, ridge=0.0)
    with pytest.raises(ValueError, match="n must"):
        ols_solve(s.G, s.b, s.n.astype(float))


def test_ols_stats_incremental(rng):
    st = OLSStats(3, 2)
    units, X, y = _fill(st, rng, 60)
    s = suffstats(X, y, units, 3)
    coef, full = ols_solve(s.G, s.b, s.n)
    np.testing.assert_allclose(st.coef, coef, atol=1e-12)
    np.testing.assert_array_equal(st.full_rank, full)
    rss = [np.sum((y[units == u] - X[units == u] @ st.coef[u]) ** 2) for u in range(3)]
    np.testing.assert_allclose(st.rss(), rss, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(st.cov_unscaled(), np.linalg.inv(s.G + 1e-6 * np.eye(2)), rtol=1e-10)
    before = snapshot(st)
    with pytest.raises(ValueError, match="x"):
        st.add(0, [1.0, np.nan], 0.0)
    assert snapshot(st) == before
