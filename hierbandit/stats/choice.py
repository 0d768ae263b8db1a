"""Choice probabilities of index policies: the chance that each arm has the largest score.

Thompson sampling and UCB policies of this package score arm k of a request as
``mu[k] + scale[k] * Z[k]``: with independent standard normals Z for Thompson sampling, and
with Z = 1 for UCB (a deterministic score). The probability that arm k is chosen is then

    P_k = E[ prod_{l != k} P(S_l < S_k) ]
        = ∫ φ(z) prod_{l != k} Φ((mu_k + s_k z − mu_l) / s_l) dz          (s_k > 0)

with Φ(·/0) read as a step, and ties between deterministic scores split evenly (the policies
break ties uniformly at random). This is what a logged decision needs as its propensity for
off-policy evaluation (inverse propensity weighting).

:func:`choice_probabilities` computes it by adaptive Gauss–Kronrod quadrature (7/15 points)
in z, started on panels cut at every other arm's crossing point z_l = (mu_l − mu_k)/s_k (and
out to 8.5 of its widths either side), to an absolute error of about 1e-12 per entry; a
probability below 1e-2 is integrated again to the same relative accuracy (the propensity of a
rare choice weighs most in inverse propensity weighting). Arms that cannot be reached within
8.5 standard deviations are given 0 without quadrature. The result of every request sums to 1 to rounding.
``tests/stats/test_choice.py`` checks it against scipy's adaptive quadrature and against the
frequencies of 10⁶ draws of the scores themselves.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["choice_probabilities", "chosen_probability"]

_JIT = {"cache": True, "nogil": True}

#: |z| beyond which the standard normal density is negligible (Φ(−8.5) ≈ 1e-17)
_ZMAX = 8.5
#: absolute error aimed at per probability
_TOL = 1e-10
#: where panels are cut around each crossing point, in units of its width: out to _ZMAX, where
#: the factor is 0 or 1 to 1e-17 (a panel that reaches past 4 widths into a wide stretch can
#: put all its nodes beyond the factor's tail, Φ(−4) ≈ 3e-5, and miss ~1e-5 × width unseen)
_CUTS = np.array([0.0, -1.0, 1.0, -4.0, 4.0, -_ZMAX, _ZMAX])
#: most intervals the adaptive quadrature may hold
_STACK = 400

# Gauss–Kronrod 7/15 nodes on [-1, 1]: the Kronrod nodes (positive half, 0 last), their
# weights, and the weights of the 7 Gauss nodes (Kronrod nodes 1, 3, 5 and 0)
_XK = np.array(
    [
        0.991455371120812639206854697526329,
        0.949107912342758524526189684047851,
        0.864864423359769072789712788640926,
        0.741531185599394439863864773280788,
        0.586087235467691130294144845693013,
        0.405845151377397166906606412076961,
        0.207784955007898467600689403773245,
        0.000000000000000000000000000000000,
    ]
)
_WK = np.array(
    [
        0.022935322010529224963732008058970,
        0.063092092629978553290700663189204,
        0.104790010322250183839876322541518,
        0.140653259715525918745189590510238,
        0.169004726639267902826583426598550,
        0.190350578064785409913256402421014,
        0.204432940075298892414161999234649,
        0.209482141084727828012999174891714,
    ]
)
_WG = np.array(
    [
        0.129484966168869693270611432679082,
        0.279705391489276667901467771423780,
        0.381830050505118944950369775488975,
        0.417959183673469387755102040816327,
    ]
)

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(**_JIT)
def _integrand(z, k, mu, s, live):
    """φ(z) · prod_{l live, l != k} P(S_l < mu_k + s_k z)."""
    v = mu[k] + s[k] * z
    f = math.exp(-0.5 * z * z) * _INV_SQRT_2PI
    for l in range(mu.shape[0]):
        if l == k or not live[l]:
            continue
        if s[l] > 0.0:
            f *= 0.5 * math.erfc(-(v - mu[l]) / (s[l] * _SQRT2))
        elif mu[l] >= v:
            return 0.0
        if f == 0.0:
            return 0.0
    return f


@njit(**_JIT)
def _gk15(a, b, k, mu, s, live):
    """Kronrod estimate of the integral over [a, b] and its difference from Gauss's."""
    c = 0.5 * (a + b)
    h = 0.5 * (b - a)
    fc = _integrand(c, k, mu, s, live)
    rk = fc * _WK[7]
    rg = fc * _WG[3]
    for i in range(7):
        f = _integrand(c - h * _XK[i], k, mu, s, live) + _integrand(c + h * _XK[i], k, mu, s, live)
        rk += _WK[i] * f
        if i % 2 == 1:
            rg += _WG[i // 2] * f
    return rk * h, abs((rk - rg) * h)


@njit(**_JIT)
def _arm_probability(k, mu, s, live, edges, lo_stack, hi_stack):
    """P_k for s_k > 0 by adaptive quadrature over the panels cut at the crossing points."""
    n = 0
    lo, hi = -_ZMAX, _ZMAX
    # below lo some arm beats k but with a negligible chance (deterministic arms: surely)
    for l in range(mu.shape[0]):
        if l != k and live[l]:
            lo = max(lo, (mu[l] - _ZMAX * s[l] - mu[k]) / s[k])
    if lo >= hi:
        return 0.0
    edges[n] = lo
    n += 1
    for l in range(mu.shape[0]):
        if l != k and live[l] and s[l] > 0.0:
            z0 = (mu[l] - mu[k]) / s[k]
            w = s[l] / s[k]
            if w >= 1.0:  # a factor as smooth as the density: one cut at its centre
                if lo < z0 < hi:
                    edges[n] = z0
                    n += 1
                continue
            # a factor that rises from 0 to 1 over a width w < 1 around z0: cut there and a
            # few widths either side, so that no panel hides a narrow rise
            for c in _CUTS:
                z = z0 + c * w
                if lo < z < hi:
                    edges[n] = z
                    n += 1
    edges[n] = hi
    n += 1
    edges[:n].sort()
    total = _adaptive(k, mu, s, live, edges, n, lo_stack, hi_stack, _TOL)
    if 0.0 < total < 1e-2:
        # a small probability: again to the same relative accuracy (the absolute tolerance
        # alone lets a panel of the whole range pass an integrand far below it)
        total = _adaptive(k, mu, s, live, edges, n, lo_stack, hi_stack, _TOL * total)
    return total


@njit(**_JIT)
def _adaptive(k, mu, s, live, edges, n, lo_stack, hi_stack, tol):
    """The integral over the panels ``edges[:n]``, each split until its error estimate is at
    most ``tol`` per unit length."""
    top = 0
    for i in range(n - 1):
        if edges[i + 1] > edges[i]:
            lo_stack[top] = edges[i]
            hi_stack[top] = edges[i + 1]
            top += 1
    total = 0.0
    while top > 0:
        top -= 1
        a, b = lo_stack[top], hi_stack[top]
        r, err = _gk15(a, b, k, mu, s, live)
        if err <= tol * (b - a) or top + 2 > lo_stack.shape[0] or b - a < 1e-7:
            total += r
        else:
            m = 0.5 * (a + b)
            lo_stack[top], hi_stack[top] = a, m
            lo_stack[top + 1], hi_stack[top + 1] = m, b
            top += 2
    return total


@njit(**_JIT)
def _choice_rows(MU, S, mask, arms, out):
    B, K = MU.shape
    live = np.empty(K, dtype=np.bool_)
    edges = np.empty(_CUTS.size * K + 2)
    lo_stack = np.empty(_STACK)
    hi_stack = np.empty(_STACK)
    for b in range(B):
        mu, s = MU[b], S[b]
        # arms allowed, and able to win: not below another allowed arm by 2 × 8.5 deviations
        floor = -np.inf
        for l in range(K):
            if mask[b, l]:
                floor = max(floor, mu[l] - _ZMAX * s[l])
        n_det_top = 0
        det_top = -np.inf
        for l in range(K):
            live[l] = mask[b, l] and mu[l] + _ZMAX * s[l] >= floor
            out[b, l] = 0.0
            if live[l] and s[l] == 0.0:
                if mu[l] > det_top:
                    det_top = mu[l]
                    n_det_top = 1
                elif mu[l] == det_top:
                    n_det_top += 1
        total = 0.0
        for k in range(K):
            if not live[k] or (arms[b] >= 0 and k != arms[b]):
                continue
            if s[k] > 0.0:
                p = _arm_probability(k, mu, s, live, edges, lo_stack, hi_stack)
            elif mu[k] < det_top:
                p = 0.0
            else:  # a deterministic arm at the top: beats every random arm, ties split
                p = 1.0 / n_det_top
                for l in range(K):
                    if live[l] and s[l] > 0.0:
                        p *= 0.5 * math.erfc(-(mu[k] - mu[l]) / (s[l] * _SQRT2))
            out[b, k] = p
            total += p
        if arms[b] < 0 and total > 0.0:
            for k in range(K):
                out[b, k] /= total


def _checked(mu: np.ndarray, scale: np.ndarray, mask: np.ndarray | None) -> tuple:
    mu = np.ascontiguousarray(mu, dtype=np.float64)
    scale = np.ascontiguousarray(scale, dtype=np.float64)
    if mu.ndim != 2 or scale.shape != mu.shape:
        raise ValueError(
            f"mu and scale must be (B, K) arrays of one shape, got {mu.shape}, {scale.shape}"
        )
    if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(scale)) and np.all(scale >= 0)):
        raise ValueError("mu must be finite and scale finite and non-negative")
    if mask is None:
        mask = np.ones(mu.shape, dtype=bool)
    mask = np.ascontiguousarray(mask, dtype=bool)
    if mask.shape != mu.shape or (mu.shape[0] and not mask.any(axis=1).all()):
        raise ValueError("mask must be a (B, K) boolean array allowing some arm in every row")
    return mu, scale, mask


def _deterministic(mu: np.ndarray, scale: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A deterministic index: probability 1 at the argmax, split evenly over ties."""
    scores = np.where(mask, mu + scale, -np.inf)
    top = scores == scores.max(axis=1, keepdims=True)
    return top / top.sum(axis=1, keepdims=True)


def choice_probabilities(
    mu: np.ndarray, scale: np.ndarray, mask: np.ndarray | None = None, *, random: bool = True
) -> np.ndarray:
    """Probability that each arm has the largest score ``mu + scale * Z``, per request.

    Parameters
    ----------
    mu, scale : (B, K) float arrays
        The scores' centres and scales (``scale >= 0``).
    mask : (B, K) bool array, optional
        The arms each request may receive (default all); the others get probability 0.
    random : bool
        ``True`` for Thompson sampling (Z independent standard normals), ``False`` for a
        deterministic index (Z = 1): the argmax gets probability 1, split evenly over ties.

    Returns
    -------
    (B, K) float array whose rows sum to 1.
    """
    mu, scale, mask = _checked(mu, scale, mask)
    if not random:
        return _deterministic(mu, scale, mask)
    out = np.empty(mu.shape)
    _choice_rows(mu, scale, mask, np.full(mu.shape[0], -1, dtype=np.int64), out)
    return out


def chosen_probability(
    mu: np.ndarray,
    scale: np.ndarray,
    arms: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    random: bool = True,
) -> np.ndarray:
    """The probability of one arm per request (``arms``, (B,) codes) under the scores of
    :func:`choice_probabilities`: the propensity of a logged decision. One quadrature per
    request instead of K (the row is not normalised: its error is the quadrature's, about
    1e-10)."""
    mu, scale, mask = _checked(mu, scale, mask)
    arms = np.asarray(arms, dtype=np.int64)
    B, K = mu.shape
    if arms.shape != (B,) or (B and (arms.min() < 0 or arms.max() >= K)):
        raise ValueError(f"arms must be {B} arm codes in [0, {K})")
    if not random:
        return _deterministic(mu, scale, mask)[np.arange(B), arms]
    out = np.zeros(mu.shape)
    _choice_rows(mu, scale, mask, arms, out)
    # unnormalised, a sure choice can come out a rounding error above 1
    return np.clip(out[np.arange(B), arms], 0.0, 1.0)
