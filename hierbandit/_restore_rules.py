"""Per-class rules for restored checkpoint state (see :mod:`hierbandit._restore`).

The template comparison fixes every attribute's type, shape and dtype to what the class's
constructor builds from the restored configuration; these rules name the attributes whose
shape depends on the run or that may hold ±inf, and check the *values* that compiled kernels
and index operations rely on: indices in range, member lists that terminate, counters that are
non-negative and agree with each other, pooled statistics equal to the sums of their members,
symmetric (positive semi-definite) matrices, and derived configuration equal to what the
constructor derives from the configuration. Each check raises ``ValueError`` naming the
attribute.

This module holds the checks shared by every class and the rules of the statistics objects;
each paper's folder keeps the rules of its own classes beside them, in ``_checkpoint_rules``,
registered when the folder is imported (as it is when a checkpoint names one of its classes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierbandit._restore import RULES, Rule

__all__ = [
    "SUM_RTOL",
    "SYM_RTOL",
    "check_suffstats",
    "close",
    "count",
    "fail",
    "fro",
    "in_range",
    "is_int",
    "nonneg",
    "pd",
    "positive",
    "psd",
    "symmetric",
]

_STATS = "hierbandit.stats."

#: relative tolerance of pooled sums against the sums of their members (drift in a long run
#: is ~1e-9)
SUM_RTOL = 1e-6
#: relative tolerance of symmetry and positive semi-definiteness
SYM_RTOL = 1e-8


# ---------------------------------------------------------------------- helpers


def fail(msg: str) -> None:
    raise ValueError(msg)


def is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def count(v: Any, name: str) -> int:
    """A non-negative integer scalar."""
    if not is_int(v) or v < 0:
        fail(f"{name} = {v!r} must be a non-negative integer")
    return int(v)


def in_range(arr: np.ndarray, lo: int, hi: int, name: str) -> None:
    """Every entry of ``arr`` in [lo, hi)."""
    a = np.asarray(arr)
    if a.size == 0:
        return
    bad = np.flatnonzero(((a < lo) | (a >= hi)).ravel())
    if bad.size:
        i = np.unravel_index(bad[0], a.shape)
        idx = ", ".join(map(str, i))
        fail(f"{name}[{idx}] = {a[i]} is out of range [{lo}, {hi})")


def nonneg(arr: np.ndarray, name: str) -> None:
    a = np.asarray(arr)
    if a.size and not np.all(a >= 0):
        fail(f"{name} holds negative values")


def positive(arr: Any, name: str) -> None:
    a = np.asarray(arr)
    if a.size and not np.all(a > 0):
        fail(f"{name} must be positive")


def fro(a: np.ndarray) -> np.ndarray:
    """Frobenius norms over the last two axes."""
    return np.sqrt(np.sum(a * a, axis=(-2, -1)))


def symmetric(M: np.ndarray, name: str, rtol: float = SYM_RTOL) -> None:
    """Every matrix of the stack ``M (..., p, p)`` symmetric within ``rtol`` (relative)."""
    M = np.asarray(M, dtype=float)
    if M.size == 0:
        return
    diff = fro(M - np.swapaxes(M, -1, -2))
    if not np.all(diff <= rtol * np.maximum(fro(M), 1e-300)):
        fail(f"{name} is not symmetric")


def psd(M: np.ndarray, name: str, rtol: float = SYM_RTOL) -> None:
    """Symmetric positive semi-definite within ``rtol`` of the largest eigenvalue."""
    symmetric(M, name, rtol)
    M = np.asarray(M, dtype=float)
    if M.size == 0:
        return
    ev = np.linalg.eigvalsh(0.5 * (M + np.swapaxes(M, -1, -2)))
    top = np.max(np.abs(ev), axis=-1, keepdims=True)
    if not np.all(ev >= -rtol * np.maximum(top, 1e-300)):
        fail(f"{name} is not positive semi-definite")


def pd(M: np.ndarray, name: str) -> None:
    """Symmetric positive definite (Cholesky succeeds)."""
    symmetric(M, name)
    try:
        np.linalg.cholesky(0.5 * (M + np.swapaxes(M, -1, -2)))
    except np.linalg.LinAlgError:
        fail(f"{name} is not positive definite")


def close(a: np.ndarray, b: np.ndarray, scale: np.ndarray, name: str) -> None:
    """|a − b| (Frobenius over trailing axes beyond the first) ≤ SUM_RTOL · scale."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    diff = np.sqrt(np.sum((a - b).reshape(a.shape[0], -1) ** 2, axis=1))
    bad = np.flatnonzero(~(diff <= SUM_RTOL * np.maximum(scale, 1e-12)))
    if bad.size:
        fail(f"{name}[{bad[0]}] differs from the sum over its members")


# ---------------------------------------------------------------------- statistics


def check_suffstats(G: np.ndarray, q: np.ndarray, n: np.ndarray, prefix: str = "") -> None:
    nonneg(n, prefix + "n")
    nonneg(q, prefix + "q")
    symmetric(G, prefix + "G")
    diag = np.diagonal(G, axis1=-2, axis2=-1)
    nonneg(diag, prefix + "G diagonal")


def _check_ridge(s: Any) -> None:
    check_suffstats(s.G, s.q, s.n)
    symmetric(s.Ainv, "Ainv")
    nonneg(np.diagonal(s.Ainv, axis1=-2, axis2=-1), "Ainv diagonal")
    # the inverse of reg·I + G has eigenvalues in (0, 1/reg]
    if s.Ainv.size and not np.all(np.diagonal(s.Ainv, axis1=-2, axis2=-1) <= (1 + 1e-6) / s.reg):
        fail("Ainv diagonal exceeds 1/reg")


def _check_ols(s: Any) -> None:
    check_suffstats(s.G, s.q, s.n)


RULES[_STATS + "ridge:RidgeStats"] = Rule(fixed=frozenset({"_every"}), check=_check_ridge)
RULES[_STATS + "ridge:OLSStats"] = Rule(check=_check_ols)


def _check_logistic(s: Any) -> None:
    p = s.n_params
    count(s.n_obs, "n_obs")
    symmetric(s.A, "A")
    pd(s.prior_precision, "prior_precision")
    L = np.tril(s._chol)
    if not np.all(np.diagonal(L) > 0):
        fail("_chol diagonal must be positive")
    scale = max(float(np.linalg.norm(s.A)), 1e-300)
    if not np.linalg.norm(L @ L.T - s.A) <= 1e-6 * scale:
        fail("_chol is not the Cholesky factor of A")
    if s._cov is not None:
        if not isinstance(s._cov, np.ndarray) or s._cov.shape != (p, p):
            fail("_cov has the wrong shape")
        if s._cov.dtype != np.float64 or not np.all(np.isfinite(s._cov)):
            fail("_cov must hold finite floats")
        symmetric(s._cov, "_cov")
    Z, y = s._Z, s._y
    if not (isinstance(Z, np.ndarray) and isinstance(y, np.ndarray)):
        fail("_Z and _y must be arrays")
    if Z.dtype != np.float64 or y.dtype != np.float64 or Z.ndim != 2 or y.ndim != 1:
        fail("_Z/_y have the wrong dtype or rank")
    if Z.shape[1] != p or Z.shape[0] != y.shape[0]:
        fail("_Z/_y have the wrong shape")
    if s.update_rule == "batch_map":
        if Z.shape[0] < s.n_obs:
            fail("_Z holds fewer rows than n_obs")
        if not (np.all(np.isfinite(Z[: s.n_obs])) and np.all(np.isin(y[: s.n_obs], (0.0, 1.0)))):
            fail("_Z/_y: stored rows must be finite with 0/1 responses")
    elif Z.shape[0]:
        fail("_Z holds rows although the update rule stores none")
    if s.max_iter < 1 or not (s.tol > 0):
        fail("max_iter/tol invalid")


RULES[_STATS + "logistic:OnlineLogistic"] = Rule(
    dynamic=frozenset({"_cov", "_Z", "_y"}),
    nonfinite=frozenset({"_Z", "_y"}),
    check=_check_logistic,
)


RULES[_STATS + "logistic:OnlineLogistic"] = Rule(
    dynamic=frozenset({"_cov", "_Z", "_y"}),
    nonfinite=frozenset({"_Z", "_y"}),
    check=_check_logistic,
)
