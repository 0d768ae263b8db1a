"""Ridge and least-squares regression batched over units, from sufficient statistics.

A *unit* is whatever owns one linear model: an (instance, arm) pair in the per-instance linear
bandits, a user or a cluster in the clustering algorithms. Units are addressed by a flat integer
index so that every algorithm can lay them out as it likes (for instance ``unit = j * K + k``).

:class:`RidgeStats` keeps, for each unit u,

* the Gram matrix G_u = Σ x xᵀ, b_u = Σ x y, q_u = Σ y² and the row count n_u;
* the inverse A_u⁻¹ of the regularised design A_u = reg·I + G_u, maintained by Sherman–Morrison
  rank-one updates, A⁻¹ ← A⁻¹ − (A⁻¹x)(A⁻¹x)ᵀ / (1 + xᵀA⁻¹x), so that adding one observation
  costs O(d²) (the ridge regression of Li et al. 2010, Algorithm 1, and of Agrawal & Goyal 2013,
  Algorithm 1);
* the ridge estimate θ_u = A_u⁻¹ b_u.

Rank-one updates accumulate rounding error; every unit is recomputed exactly from (A_u, b_u)
after each ``recompute_every`` of its own updates, and :meth:`RidgeStats.recompute` does it on
demand. A step with 1 + xᵀA⁻¹x above ``SM_LIMIT`` = 1e4 (a row large against what the unit
knows, e.g. its first row carrying a raw count) would cancel all but that fraction of A⁻¹
along x, so the unit is recomputed exactly instead. When rounding hides the ridge in
reg·I + G (features so large that reg is below the resolution of G in some direction), the
inverse comes from the diagonally scaled eigendecomposition with the ridge's own bound as the
floor (:func:`~hierbandit.stats.kernels.psd_inverse_floor`): always symmetric positive
definite.

:func:`ols_solve` and :class:`OLSStats` are the least-squares counterpart used by the
forced-sampling bandits (Goldenshluger & Zeevi 2013; Bastani & Bayati 2020) and by the first step
of the robust multitask estimator: the exact OLS solution G⁻¹b once G is numerically full rank,
and the tiny-ridge solution (G + ridge·I)⁻¹b before that, refitted by one d×d Cholesky solve
whenever a unit receives a row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from hierbandit._validation import check_index, check_positive_int, check_scalar, check_vector
from hierbandit.stats.kernels import SM_LIMIT
from hierbandit.stats.linalg import (
    cholesky_lower,
    cholesky_solve,
    full_rank_cholesky,
    psd_inverse_floor,
    spd_inverse_floor,
    spd_inverse_floor_into,
)
from hierbandit.stats.suffstats import check_regression_data

__all__ = ["OLS_RANK_TOL", "SM_LIMIT", "OLSStats", "RidgeStats", "ols_solve"]

_JIT = {"cache": True, "nogil": True}

#: 1/tr(G⁻¹) at or below ``OLS_RANK_TOL * trace(G)`` marks G as not numerically full rank
#: (:func:`~hierbandit.stats.linalg.full_rank_cholesky`)
OLS_RANK_TOL = 1e-10


# ---------------------------------------------------------------------- kernels


@njit(**_JIT)
def sherman_morrison_add(Ainv, b, theta, u, x):
    """A⁻¹ ← (A + xxᵀ)⁻¹ by Sherman–Morrison and θ = A⁻¹b for unit ``u`` (``b`` already holds
    the new row). The upper triangle is updated and mirrored, so A⁻¹ stays exactly symmetric.
    O(d²). Always applies the step; :func:`sherman_morrison_step` refuses an ill-conditioned
    one, which callers that can refactorise use instead."""
    sherman_morrison_step(Ainv, b, theta, u, x, np.inf)


@njit(**_JIT)
def sherman_morrison_step(Ainv, b, theta, u, x, limit):
    """The Sherman–Morrison step of :func:`sherman_morrison_add` when it is well conditioned.

    With s = 1 + xᵀA⁻¹x the step subtracts (A⁻¹x)(A⁻¹x)ᵀ/s, which cancels all but a fraction
    1/s of A⁻¹ along x: its relative rounding error there is about ε·s. When s is above
    ``limit`` (or not a number ≥ 1/2, which a positive definite A⁻¹ cannot give) nothing is
    changed and False is returned; the caller then recomputes the unit exactly (Cholesky).
    Shared by the per-unit statistics here and the cluster statistics of
    :mod:`hierbandit.sclub.cluster_stats`.
    """
    d = x.shape[0]
    Ax = np.empty(d)
    s = 1.0
    for i in range(d):
        t = 0.0
        for k in range(d):
            t += Ainv[u, i, k] * x[k]
        Ax[i] = t
        s += x[i] * t
    if not (0.5 <= s <= limit):
        return False
    for i in range(d):
        ci = Ax[i] / s
        for k in range(i, d):
            v = Ainv[u, i, k] - ci * Ax[k]
            Ainv[u, i, k] = v
            Ainv[u, k, i] = v
    theta_unit(Ainv, b, theta, u)
    return True


@njit(**_JIT)
def solve_unit(G, b, reg, Ainv, theta, u):
    """Exact A⁻¹ = (reg·I + G)⁻¹ and θ = A⁻¹b for unit ``u`` (Cholesky).

    When rounding has made reg·I + G numerically singular (features so large that reg is below
    the resolution of G in some direction), the inverse comes from the eigendecomposition of
    the diagonally scaled A with its eigenvalues floored at the bound reg·I ⪯ A gives
    (:func:`~hierbandit.stats.kernels.psd_inverse_floor`), so it is always symmetric
    positive definite.
    """
    d = b.shape[1]
    A = np.empty((d, d))
    for i in range(d):
        for k in range(d):
            A[i, k] = 0.5 * (G[u, i, k] + G[u, k, i])
        A[i, i] += reg
    spd_inverse_floor(A, reg, Ainv[u])
    theta_unit(Ainv, b, theta, u)


@njit(**_JIT)
def theta_unit(Ainv, b, theta, u):
    """θ = A⁻¹b for unit ``u``."""
    d = b.shape[1]
    for i in range(d):
        t = 0.0
        for k in range(d):
            t += Ainv[u, i, k] * b[u, k]
        theta[u, i] = t


@njit(**_JIT)
def ridge_add(G, b, q, n, Ainv, theta, reg, u, x, y, recompute_every):
    """Add the row (x, y) to unit ``u``: statistics, Sherman–Morrison on A⁻¹, then θ = A⁻¹b.

    When the unit's count reaches a multiple of ``recompute_every`` (> 0), or when the
    Sherman–Morrison step is ill conditioned (1 + xᵀA⁻¹x > ``SM_LIMIT``: a row that is large
    against what the unit knows, typically one of its first rows), its inverse is recomputed
    exactly instead (O(d³)). O(d²) otherwise.
    """
    suff_add(G, b, q, n, u, x, y)
    if recompute_every > 0 and n[u] % recompute_every == 0:
        solve_unit(G, b, reg, Ainv, theta, u)
        return
    if not sherman_morrison_step(Ainv, b, theta, u, x, SM_LIMIT):
        solve_unit(G, b, reg, Ainv, theta, u)


@njit(**_JIT)
def ridge_add_rows(G, b, q, n, Ainv, theta, reg, units, X, Y, recompute_every):
    """:func:`ridge_add` of rows ``(X[t], Y[t])`` to ``units[t]``, in order."""
    for t in range(units.shape[0]):
        ridge_add(G, b, q, n, Ainv, theta, reg, units[t], X[t], Y[t], recompute_every)


@njit(**_JIT)
def recompute_units(G, b, reg, Ainv, theta, units):
    """Exact recomputation of A⁻¹ and θ for the listed units."""
    for t in range(units.shape[0]):
        solve_unit(G, b, reg, Ainv, theta, units[t])


@njit(**_JIT)
def suff_add(G, b, q, n, u, x, y):
    """Add the row (x, y) to the plain sufficient statistics of unit ``u``."""
    d = x.shape[0]
    for i in range(d):
        b[u, i] += x[i] * y
        for k in range(d):
            G[u, i, k] += x[i] * x[k]
    q[u] += y * y
    n[u] += 1


@njit(**_JIT)
def ols_solve_unit(G, b, n, ridge, out):
    """Least squares for one unit: G⁻¹b if G is numerically full rank, else (G + ridge·I)⁻¹b.

    G counts as full rank when n ≥ d and :func:`~hierbandit.stats.linalg.full_rank_cholesky`
    holds with ``OLS_RANK_TOL``. With no data (trace 0) the estimate is 0. Returns True when the
    exact OLS solution was used.
    """
    d = b.shape[0]
    tr = 0.0
    for i in range(d):
        tr += G[i, i]
    if tr <= 0.0:
        for i in range(d):
            out[i] = 0.0
        return False
    L = np.empty((d, d))
    if n >= d and full_rank_cholesky(G, OLS_RANK_TOL, L):
        cholesky_solve(L, b, out)
        return True
    M = np.empty((d, d))
    for i in range(d):
        for k in range(d):
            M[i, k] = 0.5 * (G[i, k] + G[k, i]) + (ridge if i == k else 0.0)
    if cholesky_lower(M, L):
        cholesky_solve(L, b, out)
        return False
    # G + ridge·I is positive definite, but rounding hid the ridge (huge features): solve
    # with the floored inverse of the scaled matrix instead
    Minv = np.empty((d, d))
    psd_inverse_floor(M, ridge, Minv)
    for i in range(d):
        t = 0.0
        for k in range(d):
            t += Minv[i, k] * b[k]
        out[i] = t
    return False


@njit(**_JIT)
def ridge_inverse_all(G, ridge, out):
    """(G_u + ridge·I)⁻¹ for every unit, symmetric positive definite (see :func:`solve_unit`)."""
    U, d = G.shape[0], G.shape[1]
    A = np.empty((d, d))
    L = np.empty((d, d))
    Li = np.empty((d, d))
    for u in range(U):
        for i in range(d):
            for k in range(d):
                A[i, k] = 0.5 * (G[u, i, k] + G[u, k, i])
            A[i, i] += ridge
        spd_inverse_floor_into(A, ridge, out[u], L, Li)


@njit(**_JIT)
def ols_solve_all(G, b, n, ridge, out, full):
    """:func:`ols_solve_unit` for every unit; ``full[u]`` records which solution was used."""
    for u in range(b.shape[0]):
        full[u] = ols_solve_unit(G[u], b[u], n[u], ridge, out[u])


# ---------------------------------------------------------------------- public API


def ols_solve(G: Any, b: Any, n: Any, ridge: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Per-unit least squares from sufficient statistics, with a tiny ridge before full rank.

    Parameters
    ----------
    G : array_like, shape (n_units, d, d)
        Gram matrices Σ x xᵀ.
    b : array_like, shape (n_units, d)
        Moment vectors Σ x y.
    n : array_like of int, shape (n_units,)
        Row counts.
    ridge : float, default 1e-6
        Ridge added to G while it is not numerically full rank (fewer than d rows, or
        1/tr(G⁻¹) at or below ``OLS_RANK_TOL · trace(G)``).

    Returns
    -------
    coef : ndarray, shape (n_units, d)
        G⁻¹b where G is full rank, (G + ridge·I)⁻¹b otherwise, 0 for units without data.
    full_rank : ndarray of bool, shape (n_units,)
        Whether the exact OLS solution was used.
    """
    b = np.asarray(b, dtype=float)
    if b.ndim != 2:
        raise ValueError(f"b must have shape (n_units, d), got {b.shape}")
    U, d = b.shape
    G = np.asarray(G, dtype=float)
    if G.shape != (U, d, d):
        raise ValueError(f"G must have shape {(U, d, d)}, got {G.shape}")
    n = np.asarray(n)
    if n.shape != (U,) or (U and n.dtype.kind not in "iu"):
        raise ValueError(f"n must be an integer array of shape ({U},), got {n.shape} {n.dtype}")
    if U and n.min() < 0:
        raise ValueError("n must be non-negative")
    if not (np.all(np.isfinite(G)) and np.all(np.isfinite(b))):
        raise ValueError("G and b must be finite (no NaN or inf)")
    ridge = check_scalar(ridge, "ridge", low=0.0, low_inclusive=False)
    out = np.zeros((U, d))
    full = np.zeros(U, dtype=np.bool_)
    G, b = np.ascontiguousarray(G), np.ascontiguousarray(b)
    ols_solve_all(G, b, n.astype(np.int64), ridge, out, full)
    return out, full


class _UnitStats:
    """Per-unit sufficient statistics G = Σxxᵀ, b = Σxy, q = Σy², n shared by the regressions
    below, with the validated :meth:`add` (subclasses implement the unchecked ``_add``)."""

    n_units: int
    n_features: int

    def _reset_suffstats(self) -> None:
        U, d = self.n_units, self.n_features
        self.G = np.zeros((U, d, d))
        self.b = np.zeros((U, d))
        self.q = np.zeros(U)
        self.n = np.zeros(U, dtype=np.int64)

    def add(self, unit: int, x: Any, y: float) -> None:
        """Add one observation ``(x, y)`` to ``unit`` (validated before any change)."""
        u = check_index(unit, self.n_units, "unit")
        x = check_vector(x, self.n_features, "x")
        y = check_scalar(y, "y")
        self._add(u, x, y)

    def _add(self, u: int, x: np.ndarray, y: float) -> None:
        raise NotImplementedError


class RidgeStats(_UnitStats):
    """Ridge regressions of many units with O(d²) Sherman–Morrison updates.

    Parameters
    ----------
    n_units : int
        Number of independent linear models.
    n_features : int
        Dimension d of the covariates.
    reg : float, default 1.0
        Ridge regularisation: A_u = reg·I + Σ x xᵀ (reg = 1 is the I + Σ x xᵀ of LinUCB and LinTS).
    recompute_every : int or None, default 10_000
        A unit's A⁻¹ and θ are recomputed exactly from (A, b) each time its row count reaches a
        multiple of this number, which bounds the drift of the rank-one updates. ``None`` never
        recomputes automatically.

    Attributes
    ----------
    G : ndarray, shape (n_units, d, d)
        Σ x xᵀ per unit.
    b : ndarray, shape (n_units, d)
        Σ x y per unit.
    q : ndarray, shape (n_units,)
        Σ y² per unit.
    n : ndarray of int64, shape (n_units,)
        Row count per unit.
    Ainv : ndarray, shape (n_units, d, d)
        (reg·I + G)⁻¹ per unit.
    theta : ndarray, shape (n_units, d)
        Ridge estimate A⁻¹ b per unit.

    Examples
    --------
    >>> import numpy as np
    >>> rs = RidgeStats(2, 2, reg=1.0)
    >>> rs.add(1, [1.0, 0.0], 2.0)
    >>> rs.theta[1].tolist()
    [1.0, 0.0]
    """

    def __init__(
        self,
        n_units: int,
        n_features: int,
        reg: float = 1.0,
        *,
        recompute_every: int | None = 10_000,
    ) -> None:
        self.n_units = check_positive_int(n_units, "n_units")
        self.n_features = check_positive_int(n_features, "n_features")
        self.reg = check_scalar(reg, "reg", low=0.0, low_inclusive=False)
        if recompute_every is not None:
            recompute_every = check_positive_int(recompute_every, "recompute_every")
        self.recompute_every = recompute_every
        self._every = 0 if recompute_every is None else recompute_every
        self.reset()

    def reset(self) -> None:
        """Forget all data: G = 0, b = 0, A⁻¹ = I/reg, θ = 0."""
        U, d = self.n_units, self.n_features
        self._reset_suffstats()
        self.Ainv = np.broadcast_to(np.eye(d) / self.reg, (U, d, d)).copy()
        self.theta = np.zeros((U, d))

    @property
    def A(self) -> np.ndarray:
        """The regularised designs reg·I + G, shape (n_units, d, d) (a new array)."""
        return self.G + self.reg * np.eye(self.n_features)

    def _add(self, u: int, x: np.ndarray, y: float) -> None:
        """Unchecked :meth:`add` for trusted callers (``x`` float64 of length d)."""
        ridge_add(
            self.G, self.b, self.q, self.n, self.Ainv, self.theta, self.reg, u, x, y, self._every
        )

    def add_batch(self, units: Any, X: Any, y: Any) -> None:
        """Add rows ``(X[t], y[t])`` to ``units[t]`` in order (validated before any change)."""
        X, y, units, _ = check_regression_data(
            X, y, units, self.n_units, group_name="units", n_groups_name="n_units"
        )
        if X.shape[1] != self.n_features:
            raise ValueError(f"X must have {self.n_features} columns, got {X.shape[1]}")
        self._add_rows(units.astype(np.int64), X, y)

    def _add_rows(self, units: np.ndarray, X: np.ndarray, y: np.ndarray) -> None:
        """Unchecked :meth:`add_batch` (int64 units, float64 rows): one compiled call."""
        ridge_add_rows(
            self.G,
            self.b,
            self.q,
            self.n,
            self.Ainv,
            self.theta,
            self.reg,
            units,
            X,
            y,
            self._every,
        )

    def recompute(self, units: Any = None) -> None:
        """Recompute A⁻¹ and θ exactly from (A, b) for ``units`` (default: all units)."""
        if units is None:
            idx = np.arange(self.n_units, dtype=np.int64)
        else:
            idx = np.atleast_1d(np.asarray(units))
            if idx.size and idx.dtype.kind not in "iu":
                raise TypeError(f"units must hold integer ids, got dtype {idx.dtype}")
            idx = idx.astype(np.int64).ravel()
            if idx.size and (idx.min() < 0 or idx.max() >= self.n_units):
                raise ValueError(f"units must be in [0, {self.n_units})")
        recompute_units(self.G, self.b, self.reg, self.Ainv, self.theta, idx)

    def __repr__(self) -> str:
        return (
            f"RidgeStats(n_units={self.n_units}, n_features={self.n_features}, reg={self.reg}, "
            f"recompute_every={self.recompute_every})"
        )


@njit(**_JIT)
def ols_add(G, b, q, n, coef, full, ridge, u, x, y):
    """Add the row (x, y) to unit ``u`` and refresh its least-squares estimate (O(d³))."""
    suff_add(G, b, q, n, u, x, y)
    full[u] = ols_solve_unit(G[u], b[u], n[u], ridge, coef[u])


@njit(**_JIT)
def residual_ss(G, b, q, coef, out):
    """RSS_u = q_u − 2 θ_uᵀ b_u + θ_uᵀ G_u θ_u per unit, clipped at 0."""
    U, d = b.shape
    for u in range(U):
        s = q[u]
        for i in range(d):
            t = 0.0
            for k in range(d):
                t += G[u, i, k] * coef[u, k]
            s += coef[u, i] * (t - 2.0 * b[u, i])
        out[u] = s if s > 0.0 else 0.0


class OLSStats(_UnitStats):
    """Least-squares regressions of many units, refitted exactly after every observation.

    The estimate of unit u is :func:`ols_solve` of its statistics: G⁻¹b once G is numerically
    full rank and (G + ridge·I)⁻¹b before (Goldenshluger & Zeevi 2013 fit OLS; the tiny ridge
    only defines the estimate while it does not exist). Each refit is one d×d Cholesky solve.

    Parameters
    ----------
    n_units : int
        Number of independent linear models.
    n_features : int
        Dimension d of the covariates.
    ridge : float, default 1e-6
        Ridge used while a unit's design is not full rank.

    Attributes
    ----------
    G, b, q, n
        Σ x xᵀ (n_units, d, d), Σ x y (n_units, d), Σ y² (n_units,) and row counts (int64).
    coef : ndarray, shape (n_units, d)
        Current least-squares estimate per unit (0 before any data).
    full_rank : ndarray of bool, shape (n_units,)
        Whether ``coef`` is the exact OLS solution.
    """

    def __init__(self, n_units: int, n_features: int, ridge: float = 1e-6) -> None:
        self.n_units = check_positive_int(n_units, "n_units")
        self.n_features = check_positive_int(n_features, "n_features")
        self.ridge = check_scalar(ridge, "ridge", low=0.0, low_inclusive=False)
        self.reset()

    def reset(self) -> None:
        """Forget all data."""
        U, d = self.n_units, self.n_features
        self._reset_suffstats()
        self.coef = np.zeros((U, d))
        self.full_rank = np.zeros(U, dtype=np.bool_)

    def _add(self, u: int, x: np.ndarray, y: float) -> None:
        """Unchecked :meth:`add` for trusted callers."""
        ols_add(self.G, self.b, self.q, self.n, self.coef, self.full_rank, self.ridge, u, x, y)

    def rss(self) -> np.ndarray:
        """Residual sum of squares of every unit at its current estimate, shape (n_units,)."""
        out = np.empty(self.n_units)
        residual_ss(self.G, self.b, self.q, self.coef, out)
        return out

    def cov_unscaled(self) -> np.ndarray:
        """(G + ridge·I)⁻¹ per unit, shape (n_units, d, d): the OLS covariance per unit noise."""
        out = np.empty_like(self.G)
        ridge_inverse_all(self.G, self.ridge, out)
        return out

    def __repr__(self) -> str:
        return f"OLSStats(n_units={self.n_units}, n_features={self.n_features}, ridge={self.ridge})"
