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
    "MAX_FEATURE",
    "MAX_REG",
    "MAX_VARIANCE",
    "MIN_REG",
    "MIN_VARIANCE",
    "as_generator",
    "check_choice",
    "check_covariance",
    "check_feature_array",
    "check_features",
    "check_index",
    "check_matrix",
    "check_positive_int",
    "check_regularisation",
    "check_scalar",
    "check_scale",
    "check_variance",
    "check_vector",
]


#: Largest magnitude accepted in data arrays (rewards, and the data of the offline and
#: exploration algorithms). Squares and sums of squares of such values stay far from overflow,
#: so statistics built from accepted data are always finite; larger values are rejected as
#: almost certainly corrupt.
MAX_ABS = 1e100

#: Largest magnitude of a context (feature) value accepted by the online policies (the six
#: ``Policy`` classes, the cascade and the clustering policies). Their posterior covariances
#: are inverses of regulariser + Σ x xᵀ, whose regulariser float64 resolves only while |x|² is
#: small against regulariser/ε. Measured against exact rational arithmetic on adversarial rows
#: (several features at the bound at once, tiny and subnormal ones beside them) at unit
#: regularisation, the worst scaled error of a covariance is 2e-3 (EbmTS/EbmUCB at their
#: defaults) and at most 3e-4 (ridge and cascade policies) at 1e6; 0.5 and 5e-2 at 1e7; 100 %
#: and more at 1e8 (docs/reliability.md). Covariances stay positive semi-definite at any
#: magnitude; a smaller regulariser lowers the accurate range by its square root.
MAX_FEATURE = 1e6

#: largest number of state entries (e.g. instances × arms × features²) a policy allocates
MAX_STATE_ENTRIES = 10**8

#: Bounds of the regularisation parameters of the online policies (``ridge``, ``lam``, ``reg``)
#: and of the scale parameters that multiply a posterior covariance (LinTS ``v``,
#: CascadeLinTS ``sigma``). The error of a covariance in the directions only the regulariser
#: sees is about ε·|x|²/regulariser: measured after unit-scale rows it is 2e-10 at 1e-6
#: (7e-12 at 1e-4, 2e-8 at 1e-8, 3e-6 at 1e-10, 6e-4 at 1e-12). 1e6 mirrors the lower bound:
#: a unit-scale row is then 1e-6 of the prior's information and is resolved to the same 2e-10.
MIN_REG = 1e-6
MAX_REG = 1e6

#: Bounds of noise variances given to the online policies (EbmTS/EbmUCB ``sigma2_init``, the
#: floor of σ̂²): products with the Gram matrices of accepted contexts stay finite.
MIN_VARIANCE = 1e-100
MAX_VARIANCE = 1e100


def _check_finite(arr: np.ndarray, name: str, max_abs: float | None, hint: str = "") -> None:
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    if max_abs is not None and arr.size and np.max(np.abs(arr)) > max_abs:
        raise ValueError(
            f"{name} must have magnitude <= {max_abs:g}{hint}, got {np.max(np.abs(arr)):g}"
        )


#: appended to the message refusing a context beyond :data:`MAX_FEATURE`
FEATURE_HINT = " (the range float64 carries for the posterior covariances; rescale the features)"


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
    _check_finite(arr, name, max_abs, FEATURE_HINT if max_abs == MAX_FEATURE else "")
    return arr


def check_features(value: Any, length: int, name: str = "context") -> np.ndarray:
    """:func:`check_vector` with the context bound :data:`MAX_FEATURE` of the online policies."""
    return check_vector(value, length, name, max_abs=MAX_FEATURE)


def check_feature_array(arr: np.ndarray, name: str) -> None:
    """Refuse a float array (already finite-checked or not) with an entry beyond
    :data:`MAX_FEATURE` (or not finite), naming ``name``."""
    _check_finite(arr, name, MAX_FEATURE, FEATURE_HINT)


def check_regularisation(value: Any, name: str, *, low: float = MIN_REG) -> float:
    """A regularisation (or covariance scale) parameter in ``[low, MAX_REG]``
    (:data:`MIN_REG`, :data:`MAX_REG`)."""
    v = check_scalar(value, name, low=0.0, low_inclusive=False)
    if not low <= v <= MAX_REG:
        raise ValueError(
            f"{name} must be in [{low:g}, {MAX_REG:g}] (the range the posterior numerics are "
            f"measured for; rescale the features instead), got {v:g}"
        )
    return v


def check_scale(value: Any, name: str) -> float:
    """A non-negative scale that multiplies a posterior covariance (LinTS ``v``, CascadeLinTS
    ``sigma``), at most :data:`MAX_REG`."""
    v = check_scalar(value, name, low=0.0)
    if v > MAX_REG:
        raise ValueError(
            f"{name} must be in [0, {MAX_REG:g}] (it multiplies a posterior covariance), got {v:g}"
        )
    return v


def check_variance(value: Any, name: str) -> float:
    """A noise variance in ``[MIN_VARIANCE, MAX_VARIANCE]``."""
    v = check_scalar(value, name, low=0.0, low_inclusive=False)
    if not MIN_VARIANCE <= v <= MAX_VARIANCE:
        raise ValueError(f"{name} must be in [{MIN_VARIANCE:g}, {MAX_VARIANCE:g}], got {v:g}")
    return v


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
    _check_finite(arr, name, max_abs, FEATURE_HINT if max_abs == MAX_FEATURE else "")
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
    try:
        value = float(value)
    except OverflowError:  # a Python int beyond the float range (e.g. 10**400)
        bits = int(value).bit_length()
        raise ValueError(
            f"{name} must be finite, got an integer of {bits} bits (beyond the float range)"
        ) from None
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
