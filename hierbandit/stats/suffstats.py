"""Gaussian sufficient statistics of linear-regression data, per unit (instance, user, arm…)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from hierbandit._validation import check_matrix, check_positive_int

__all__ = ["SuffStats", "check_regression_data", "suffstats"]


class SuffStats(NamedTuple):
    """Per-unit sufficient statistics G = XᵀX, b = Xᵀy, q = yᵀy and the row count n."""

    G: np.ndarray  # (n_units, d, d)
    b: np.ndarray  # (n_units, d)
    q: np.ndarray  # (n_units,)
    n: np.ndarray  # (n_units,) int64


def check_regression_data(
    X: Any,
    y: Any,
    group: Any,
    n_groups: Any,
    *,
    group_name: str = "instance",
    n_groups_name: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Validate (X, y, group ids) rows and return float/int copies.

    ``group_name`` and ``n_groups_name`` (default ``f"n_{group_name}s"``) are the argument names
    the error messages use.
    """
    n_groups = check_positive_int(n_groups, n_groups_name or f"n_{group_name}s")
    X = check_matrix(X, (None, None), "X")
    T, d = X.shape
    if d == 0:
        raise ValueError("X must have at least one feature column")
    y_arr = np.asarray(y)
    if y_arr.dtype.kind not in "iuf":
        raise TypeError(f"y must be numeric, got dtype {y_arr.dtype}")
    y_arr = y_arr.astype(float)
    if y_arr.shape != (T,):
        raise ValueError(f"y must have shape ({T},) to match X, got {y_arr.shape}")
    if not np.all(np.isfinite(y_arr)):
        raise ValueError("y must be finite (no NaN or inf)")
    g = np.asarray(group)
    if g.shape != (T,):
        raise ValueError(f"{group_name} must have shape ({T},) to match X, got {g.shape}")
    if T and g.dtype.kind not in "iu":
        if g.dtype.kind == "f" and np.all(np.isfinite(g)) and np.all(g == np.round(g)):
            g = g.astype(np.int64)
        else:
            raise TypeError(f"{group_name} must hold integer ids, got dtype {g.dtype}")
    g = g.astype(np.int64)
    if T and (g.min() < 0 or g.max() >= n_groups):
        raise ValueError(
            f"{group_name} ids must be in [0, {n_groups}), got range [{g.min()}, {g.max()}]"
        )
    return X, y_arr, g, n_groups


def suffstats(X: Any, y: Any, group: Any, n_groups: int) -> SuffStats:
    """Sufficient statistics of rows ``(X[t], y[t])`` grouped by ``group[t]`` in ``[0, n_groups)``.

    Examples
    --------
    >>> import numpy as np
    >>> s = suffstats(np.eye(2), [1.0, 2.0], [0, 1], 3)
    >>> s.n.tolist(), s.b[1].tolist()
    ([1, 1, 0], [0.0, 2.0])
    """
    X, y, g, n_groups = check_regression_data(X, y, group, n_groups)
    d = X.shape[1]
    G = np.zeros((n_groups, d, d))
    np.add.at(G, g, X[:, :, None] * X[:, None, :])
    b = np.zeros((n_groups, d))
    np.add.at(b, g, X * y[:, None])
    q = np.bincount(g, weights=y * y, minlength=n_groups).astype(float)
    n = np.bincount(g, minlength=n_groups).astype(np.int64)
    return SuffStats(G, b, q, n)
