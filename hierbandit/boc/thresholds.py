"""Confidence parameters and stopping thresholds of BOC (Section 5.3 and Section 6.1).

δ enters every formula only through ``log(1/δ)``, so that confidence levels far below the
smallest positive float (δ ≈ e^{-400}) work: every public function accepts either ``delta=`` or
``log_inv_delta=`` (exactly one).

* :func:`psi` — Ψ(x) = min_{h ∈ (1/2, 1)} (g_G(h) + x)/h with
  g_G(h) = 2h − 2h log(4h) + log ζ(2h) − ½ log(1 − h) (Kaufmann & Koolen 2021, used in eq. 8);
* :func:`beta_theory` — β(δ, t) = Σ_m 2d log(4 + log N_m(t)) + M d Ψ(log(1/δ)/(M d)), eq. (8);
* :func:`beta_heuristic` — β̃(δ, t) = log((1 + log t)^d / δ) = d log(1 + log t) + log(1/δ),
  Section 6.1 (the exponent-d reading, row 3 of docs/boc.md);
* :func:`kl_bernoulli_delta` — d_KL(δ, 1 − δ), the factor of the lower bound (Theorem 3).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from hierbandit._validation import check_scalar

__all__ = [
    "THRESHOLDS",
    "beta_heuristic",
    "beta_theory",
    "kl_bernoulli_delta",
    "log_inv_delta_of",
    "psi",
]

#: names of the two thresholds: ``"beta"`` is eq. (8), ``"beta_tilde"`` the heuristic of §6.1
THRESHOLDS = ("beta", "beta_tilde")


def log_inv_delta_of(delta: Any = None, log_inv_delta: Any = None) -> float:
    """``log(1/δ)`` from exactly one of ``delta`` (in (0, 1)) or ``log_inv_delta`` (> 0).

    Raises
    ------
    ValueError
        If both or neither are given, ``delta`` is outside (0, 1), or ``log_inv_delta ≤ 0``.
    """
    if (delta is None) == (log_inv_delta is None):
        raise ValueError("give exactly one of delta and log_inv_delta")
    if delta is not None:
        d = check_scalar(delta, "delta")
        if not 0.0 < d < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {d}")
        return float(-math.log(d))
    v = check_scalar(log_inv_delta, "log_inv_delta")
    if v <= 0.0:
        raise ValueError(f"log_inv_delta must be > 0 (delta in (0, 1)), got {v}")
    return v


def _g_gauss(h: float) -> float:
    from scipy.special import zeta

    return 2.0 * h - 2.0 * h * math.log(4.0 * h) + math.log(zeta(2.0 * h)) - 0.5 * math.log1p(-h)


@functools.lru_cache(maxsize=4096)
def _psi_cached(x: float) -> float:
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda h: (_g_gauss(h) + x) / h,
        bounds=(0.5 + 1e-9, 1.0 - 1e-12),
        method="bounded",
        options={"xatol": 1e-12, "maxiter": 500},
    )
    return float(res.fun)


def psi(x: float) -> float:
    """Ψ(x) of eq. (8): ``min_{h ∈ (1/2, 1)} (2h − 2h log(4h) + log ζ(2h) − ½ log(1−h) + x)/h``.

    The endpoints are singular (ζ(1) = ∞, log 0), so the minimum is over the open interval; the
    objective is unimodal in h (Remark 14 iii), hence a bounded scalar search. Values are cached.

    Examples
    --------
    >>> round(psi(1.0), 4), round(psi(100.0), 4)
    (2.5071, 102.9073)
    """
    x = check_scalar(x, "x", low=0.0)
    return _psi_cached(x)


def beta_theory(
    counts: Any, n_features: int, *, delta: Any = None, log_inv_delta: Any = None
) -> float:
    """β(δ, t) of eq. (8): ``Σ_m 2d log(4 + log N_m(t)) + M d Ψ(log(1/δ) / (M d))``.

    Parameters
    ----------
    counts : array_like, shape (M,)
        Pull counts N_m(t) ≥ 1.
    n_features
        Observation dimension d.
    delta, log_inv_delta
        The confidence level, exactly one of the two.
    """
    N = np.asarray(counts, dtype=float)
    if N.ndim != 1 or N.size == 0 or not np.all(np.isfinite(N)) or np.any(N < 1):
        raise ValueError("counts must be a non-empty 1-d array of pull counts >= 1")
    L = log_inv_delta_of(delta, log_inv_delta)
    M, d = N.size, int(n_features)
    return float(2 * d * np.log(4.0 + np.log(N)).sum() + M * d * psi(L / (M * d)))


def beta_heuristic(
    t: int, n_features: int, *, delta: Any = None, log_inv_delta: Any = None
) -> float:
    """β̃(δ, t) of Section 6.1: ``log((1 + log t)^d / δ) = d log(1 + log t) + log(1/δ)``."""
    if t < 1:
        raise ValueError(f"t must be >= 1, got {t}")
    L = log_inv_delta_of(delta, log_inv_delta)
    return float(n_features * math.log1p(math.log(t)) + L)


def kl_bernoulli_delta(*, delta: Any = None, log_inv_delta: Any = None) -> float:
    """d_KL(δ, 1 − δ) = (1 − 2δ) log((1 − δ)/δ), computed from log(1/δ) without underflow.

    ``1 − δ = −expm1(−L)`` keeps full precision for every ``L > 0``, also when δ rounds to 1
    (``L`` below the float spacing near 1), where ``log1p(−δ)`` would fail.
    """
    L = log_inv_delta_of(delta, log_inv_delta)
    d = math.exp(-L)
    return float((1.0 - 2.0 * d) * (L + math.log(-math.expm1(-L))))
