"""Tests of the per-unit sufficient statistics G = XᵀX, b = Xᵀy, q = yᵀy, n (spec ebm.md §2.1)."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

from hierbandit.stats import SuffStats, suffstats


def _direct(X, y, g, n_groups):
    d = X.shape[1]
    G = np.zeros((n_groups, d, d))
    b = np.zeros((n_groups, d))
    q = np.zeros(n_groups)
    n = np.zeros(n_groups, dtype=np.int64)
    for t in range(X.shape[0]):
        G[g[t]] += np.outer(X[t], X[t])
        b[g[t]] += X[t] * y[t]
        q[g[t]] += y[t] ** 2
        n[g[t]] += 1
    return G, b, q, n


@pytest.mark.parametrize(("T", "d", "n_groups"), [(0, 2, 3), (1, 1, 1), (17, 3, 5), (200, 4, 7)])
def test_suffstats_equal_direct_sums(T, d, n_groups):
    rng = np.random.default_rng(T + 10 * d)
    X = rng.normal(size=(T, d))
    y = rng.normal(size=T)
    g = rng.integers(0, max(n_groups - 1, 1), size=T)  # the last group often stays empty
    s = suffstats(X, y, g, n_groups)
    assert isinstance(s, SuffStats)
    G, b, q, n = _direct(X, y, g, n_groups)
    np.testing.assert_allclose(s.G, G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.b, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.q, q, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(s.n, n)
    assert s.n.sum() == T
    # per-group matrix products, the textbook definition
    for j in range(n_groups):
        Xj, yj = X[g == j], y[g == j]
        np.testing.assert_allclose(s.G[j], Xj.T @ Xj, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(s.b[j], Xj.T @ yj, rtol=1e-12, atol=1e-12)
        assert s.q[j] == pytest.approx(yj @ yj, rel=1e-12, abs=1e-12)
        np.testing.assert_array_equal(s.G[j], s.G[j].T)


def test_suffstats_dtypes_and_shapes():
    s = suffstats(np.eye(2, dtype=int), [1, 2], np.array([0, 1], dtype=np.int32), 3)
    assert s.G.dtype == np.float64
    assert s.b.dtype == np.float64
    assert s.q.dtype == np.float64
    assert s.n.dtype == np.int64
    assert s.G.shape == (3, 2, 2)
    assert s.b.shape == (3, 2)
    assert s.q.shape == (3,)
    assert s.n.shape == (3,)
    assert s.n.tolist() == [1, 1, 0]
    assert s.b[1].tolist() == [0.0, 2.0]
    assert s.q.tolist() == [1.0, 4.0, 0.0]
    np.testing.assert_array_equal(s.G[2], 0.0)


def test_suffstats_are_additive_and_order_free():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 3))
    y = rng.normal(size=50)
    g = rng.integers(0, 4, size=50)
    full = suffstats(X, y, g, 4)
    a = suffstats(X[:20], y[:20], g[:20], 4)
    b = suffstats(X[20:], y[20:], g[20:], 4)
    for f, fa, fb in zip(full, a, b, strict=True):
        np.testing.assert_allclose(f, fa + fb, rtol=1e-12, atol=1e-12)
    perm = rng.permutation(50)
    shuffled = suffstats(X[perm], y[perm], g[perm], 4)
    for f, fs in zip(full, shuffled, strict=True):
        np.testing.assert_allclose(f, fs, rtol=1e-12, atol=1e-12)


def test_suffstats_input_is_not_modified_and_integral_float_ids_accepted():
    X = np.arange(6.0).reshape(3, 2)
    y = np.array([1.0, -1.0, 2.0])
    g = np.array([2.0, 0.0, 2.0])
    X0, y0, g0 = X.copy(), y.copy(), g.copy()
    s = suffstats(X, y, g, 3)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(g, g0)
    assert s.n.tolist() == [1, 0, 2]


@pytest.mark.parametrize(
    ("args", "exc", "name"),
    [
        ((np.ones(3), np.ones(3), [0, 0, 0], 1), ValueError, "X"),
        ((np.ones((3, 0)), np.ones(3), [0, 0, 0], 1), ValueError, "X"),
        ((np.full((3, 2), np.nan), np.ones(3), [0, 0, 0], 1), ValueError, "X"),
        ((np.ones((3, 2)), np.ones(2), [0, 0, 0], 1), ValueError, "y"),
        ((np.ones((3, 2)), [1.0, np.inf, 0.0], [0, 0, 0], 1), ValueError, "y"),
        ((np.ones((3, 2)), [True, False, True], [0, 0, 0], 1), TypeError, "y"),
        ((np.ones((3, 2)), np.ones(3), [0, 0], 1), ValueError, "instance"),
        ((np.ones((3, 2)), np.ones(3), [0, 1, 2], 2), ValueError, "instance"),
        ((np.ones((3, 2)), np.ones(3), [0, -1, 0], 2), ValueError, "instance"),
        ((np.ones((3, 2)), np.ones(3), [0, 0.5, 0], 2), TypeError, "instance"),
        ((np.ones((3, 2)), np.ones(3), [True, False, True], 2), TypeError, "instance"),
        ((np.ones((3, 2)), np.ones(3), [0, 0, 0], 0), ValueError, "n_instances"),
        ((np.ones((3, 2)), np.ones(3), [0, 0, 0], 1.0), TypeError, "n_instances"),
    ],
)
def test_suffstats_validation(args, exc, name):
    with pytest.raises(exc, match=rf"\b{name}\b"):
        suffstats(*args)


@pytest.mark.parametrize("module", ["hierbandit.stats.suffstats", "hierbandit.stats.hierarchical"])
def test_docstring_examples(module):
    mod = importlib.import_module(module)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
