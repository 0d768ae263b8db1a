"""Argument checking shared by every public entry point.

Every check raises before any state is touched, and the message names the argument, so a
rejected call leaves a model exactly as it was.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = [
    "MAX_ABS",
    "as_generator",
    "check_choice",
    "check_covariance",
    "check_index",
    "check_matrix",
    "check_positive_int",
    "check_scalar",
    "check_vector",
]


#: Largest magnitude accepted in data arrays (contexts, features, rewards). Squares and sums of
#: squares of such values stay far from overflow, so statistics built from accepted data are
#: always finite; larger values are rejected as almost certainly corrupt.
MAX_ABS = 1e100


def _check_finite(arr: np.ndarray, name: str, max_abs: float | None) -> None:
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    if max_abs is not None and arr.size and np.max(np.abs(arr)) > max_abs:
        raise ValueError(f"{name} must have magnitude <= {max_abs:g}, got {np.max(np.abs(arr)):g}")


def check_index(value: Any, upper: int, name: str) -> int:
    """Return ``value`` as a Python int in ``[0, upper)``.

    Booleans, floats (even integral ones) and strings are rejected with ``TypeError``; an integer
    outside the range raises ``ValueError``.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
            value = value.item()
        else:
            raise TypeError(f"{name} must be an integer id, got {type(value).__name__} {value!r}")
    value = int(value)
    if not 0 <= value < upper:
        raise ValueError(f"{name} must be in [0, {upper}), got {value}")
    return value


def _as_float_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, str | bytes):
        raise TypeError(f"{name} must be numeric, got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic objects
        raise TypeError(f"{name} must be array-like of numbers") from exc
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    if arr.dtype.kind == "b":
        raise TypeError(f"{name} must be numeric, got booleans")
    return arr.astype(np.float64, copy=True)


def check_vector(
    value: Any, length: int, name: str, *, max_abs: float | None = MAX_ABS
) -> np.ndarray:
    """Return a finite float64 copy of ``value`` with shape ``(length,)``, entries bounded by
    ``max_abs`` in magnitude (``None``: no bound)."""
    arr = _as_float_array(value, name)
    if arr.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got {arr.shape}")
    _check_finite(arr, name, max_abs)
    return arr


def check_matrix(
    value: Any,
    shape: tuple[int | None, int | None],
    name: str,
    *,
    max_abs: float | None = MAX_ABS,
) -> np.ndarray:
    """Return a finite float64 copy of a 2-D array; ``None`` in ``shape`` means any length;
    entries bounded by ``max_abs`` in magnitude (``None``: no bound)."""
    arr = _as_float_array(value, name)
    if arr.ndim != 2 or any(
        s is not None and s != a for s, a in zip(shape, arr.shape, strict=True)
    ):
        want = tuple("any" if s is None else s for s in shape)
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    _check_finite(arr, name, max_abs)
    return arr


def check_scalar(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    max_abs: float | None = None,
) -> float:
    """Return ``value`` as a finite float, optionally bounded below/above and in magnitude
    (pass ``max_abs=MAX_ABS`` for data such as rewards)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
            value = value.item()
        else:
            raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if low is not None and (value < low or (not low_inclusive and value == low)):
        op = ">=" if low_inclusive else ">"
        raise ValueError(f"{name} must be {op} {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}")
    if max_abs is not None and abs(value) > max_abs:
        raise ValueError(f"{name} must have magnitude <= {max_abs:g}, got {value:g}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a bool; anything but a Python or NumPy bool is a ``TypeError``."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int ``>= minimum``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_covariance(value: Any, d: int, name: str, *, batch: int | None = None) -> np.ndarray:
    """Return a symmetric positive semi-definite ``(d, d)`` (or ``(batch, d, d)``) copy.

    Symmetry is checked to a relative tolerance of 1e-8 and the result is exactly symmetrised;
    eigenvalues below ``-1e-10 * max(1, |largest|)`` are rejected as not PSD.
    """
    arr = _as_float_array(value, name)
    want = (d, d) if batch is None else (batch, d, d)
    if batch is not None and arr.shape == (d, d):
        arr = np.broadcast_to(arr, want).copy()
    if arr.shape != want:
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    scale = max(1.0, float(np.max(np.abs(arr)))) if arr.size else 1.0
    if not np.allclose(arr, np.swapaxes(arr, -1, -2), rtol=1e-8, atol=1e-10 * scale):
        raise ValueError(f"{name} must be symmetric")
    arr = 0.5 * (arr + np.swapaxes(arr, -1, -2))
    eig = np.linalg.eigvalsh(arr)
    top = np.max(np.abs(eig), axis=-1, keepdims=True) if eig.size else np.ones(1)
    if np.any(eig < -1e-10 * np.maximum(1.0, top)):
        raise ValueError(
            f"{name} must be positive semi-definite (smallest eigenvalue {eig.min():.3g})"
        )
    return arr


def check_choice(value: Any, choices: tuple[Any, ...], name: str) -> Any:
    """Return ``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def as_generator(rng: Any, name: str = "rng") -> np.random.Generator:
    """Turn ``None``, an int seed, a SeedSequence or a Generator into a ``numpy.random.Generator``."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        if rng < 0:
            raise ValueError(f"{name} seed must be non-negative, got {rng}")
        return np.random.default_rng(int(rng))
    raise TypeError(f"{name} must be None, an int seed, a SeedSequence or a numpy Generator")
