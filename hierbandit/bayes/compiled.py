"""The collapsed model's log density and gradient as one compiled kernel, for nutpie.

:func:`~hierbandit.bayes.models.collapsed_model` defines the model; this module evaluates the
same log density (the PyMC model's, normalising constants and the Jacobians of PyMC's
transforms included) and its gradient in the model's unconstrained coordinates with a numba
kernel over the per-(arm, instance) sufficient statistics, and hands it to nutpie as a C
function: nutpie's Rust sampler calls it without Python and without the GIL, one thread per
chain (``SamplerConfig(driver="kernel")``, the default of a collapsed full-Bayes fit;
docs/decisions/bayes.md, B18).

For one arm with Σ = LLᵀ, σ², prior precision λ of the shared mean and per-cell statistics
(G_j, b_j, q_j, n_j), B_j = I + LᵀG_jL/σ² = C_jC_jᵀ, W_j = C_j⁻¹LᵀG_j and w_j = C_j⁻¹Lᵀb_j:

* A_j = X_jᵀV_j⁻¹X_j = (G_j − W_jᵀW_j/σ²)/σ², r_j = X_jᵀV_j⁻¹y_j = (b_j − W_jᵀw_j/σ²)/σ²,
  y_jᵀV_j⁻¹y_j = (q_j − w_jᵀw_j/σ²)/σ², log|V_j| = n_j log σ² + log|B_j|
  (``hierbandit.bayes.models``, module docstring; ebm eq. 4.3);
* with the shared mean integrated out, P = λI + Σ_j A_j, r = Σ_j r_j, m = P⁻¹r, S = P⁻¹:
  ℓ = −½Σ_j[n_j log 2π + log|V_j| + y_jᵀV_j⁻¹y_j] + ½rᵀm − ½log|P| + (d/2) log λ;
* the gradient in Σ by Fisher's identity (the score of the collapsed model is the posterior
  mean of the score given β₀ ~ N(m, S); ``hierbandit.stats.marginal``, module docstring, gives
  the score given β₀): with g_j = r_j − A_jm,
  ∂ℓ/∂Σ = Γ = ½Σ_j[g_jg_jᵀ + A_jSA_j − A_j], and ∂ℓ/∂L = 2ΓL;
* the gradient in σ² from homogeneity: the covariance of the arm's stacked rewards,
  blockdiag(V_j) + λ⁻¹XXᵀ, is linear in (Σ, σ², λ⁻¹), so scaling all three by c scales it by c
  and tr(ΓΣ) + σ²∂ℓ/∂σ² − λ∂ℓ/∂λ = ½(yᵀCov⁻¹y − T), with T = Σ_j n_j,
  yᵀCov⁻¹y = Σ_j y_jᵀV_j⁻¹y_j − rᵀm and, by Fisher's identity again,
  ∂ℓ/∂λ = d/(2λ) − ½(mᵀm + tr S).

Γ needs m, which needs every cell; expanding g_jg_jᵀ + A_jSA_j = r_jr_jᵀ − r_j(A_jm)ᵀ −
(A_jm)r_jᵀ + A_j(mmᵀ + S)A_j, one pass over the cells accumulates Σ_j r_jr_jᵀ, Σ_j A_j ⊗ r_j
and Σ_j A_j ⊗ A_j (symmetric pairs only) and the rest follows per arm. With the shared mean
sampled (``collapse_shared_mean=False``) the same sums serve with m = β₀, S = 0 and no λ.

The cells are processed in blocks of :data:`BLOCK` (structure of arrays: every entry of every
small matrix is a vector over the block's cells), so the inner loops run over contiguous cells
and vectorise; an empty cell contributes exactly 0 (G = 0, b = 0, q = 0 make B = I), with no
branch. The per-cell log-determinants are multiplied up and logged once per 1e150.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import njit

__all__ = ["BLOCK", "compile_collapsed", "kernel_data", "logp_and_grad"]

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
_LOG_2PI = float(np.log(2.0 * np.pi))
_HALF_LOG_2_OVER_PI = float(0.5 * np.log(2.0 / np.pi))

#: cells per block of the kernel's vectorised loops
BLOCK = 64

#: layout of the kernel's data buffer: a header of ``_HEADER`` doubles, then the Beta
#: parameters of the CPCs, the rows per arm, and the statistics (K, R, N) with
#: R = d(d+1)/2 + d + 1 rows per arm: the lower triangle of G row by row, b, q
_HEADER = 16
(
    _H_K,
    _H_N,
    _H_D,
    _H_COLLAPSED,
    _H_LAM,
    _H_SD_SCALE,
    _H_NOISE_SCALE,
    _H_BLOCK,
    _H_TOTAL,
    _H_NDIM,
) = range(10)

# status codes for nutpie: 0 success; positive: recoverable (the proposal is rejected)
_OK, _NONFINITE_GRAD, _NONFINITE_LOGP, _BAD_DIM = 0, 3, 4, -1


def kernel_data(model: Any) -> np.ndarray:
    """The kernel's data buffer for a model built by
    :func:`~hierbandit.bayes.models.collapsed_model`: its sufficient statistics (read from the
    model's data containers) and hyperpriors (``hb_meta["hyper"]``), in one float64 array."""
    meta = getattr(model, "hb_meta", None) or {}
    if meta.get("kind") != "collapsed":
        raise ValueError(
            "model: the compiled kernel evaluates the collapsed model only "
            "(hierbandit.bayes.collapsed_model); sample other models with driver='pymc'"
        )
    hyper = meta["hyper"]
    G = np.asarray(model["suff_G"].get_value(), dtype=float)
    b = np.asarray(model["suff_b"].get_value(), dtype=float)
    q = np.asarray(model["suff_q"].get_value(), dtype=float)
    n = np.asarray(model["suff_n"].get_value(), dtype=float)
    Kn, N, d = b.shape
    rows, cols = np.tril_indices(d)
    stats = np.concatenate(
        [
            np.moveaxis(G[:, :, rows, cols], 1, 2),  # (K, d(d+1)/2, N)
            np.moveaxis(b, 1, 2),  # (K, d, N)
            q[:, None, :],  # (K, 1, N)
        ],
        axis=1,
    )
    pairs = [(i, j) for i in range(d) for j in range(i)]
    alpha = np.array([hyper["lkj_eta"] + (d - j - 2) / 2.0 for _, j in pairs], dtype=float)
    header = np.zeros(_HEADER)
    header[[_H_K, _H_N, _H_D]] = Kn, N, d
    header[_H_COLLAPSED] = 1.0 if meta["collapse_shared_mean"] else 0.0
    header[_H_LAM] = hyper["lam"]
    header[_H_SD_SCALE] = hyper["sd_scale"]
    header[_H_NOISE_SCALE] = hyper["noise_scale"]
    header[_H_BLOCK] = BLOCK
    header[_H_NDIM] = n_params(Kn, d, bool(meta["collapse_shared_mean"]))
    buf = np.concatenate([header, alpha, n.sum(axis=1), stats.ravel()])
    buf[_H_TOTAL] = buf.size
    return np.ascontiguousarray(buf, dtype=np.float64)


def n_params(K: int, d: int, collapsed: bool) -> int:
    """Unconstrained coordinates: log sds (K, d), logit CPCs (K, d(d−1)/2), log σ (K) and,
    unless the shared mean is integrated out, β₀ (K, d)."""
    return K * d + K * (d * (d - 1) // 2) + K + (0 if collapsed else K * d)


@njit(**_JIT)
def _softplus(x):  # pragma: no cover - compiled
    """log(1 + eˣ) without overflow."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit(**_JIT)
def _arm_sums(D, L, s2, sums):  # pragma: no cover - compiled
    """One arm's sums over its N cells (``D`` (R, N): the lower triangle of G row by row, b, q),
    given Σ = LLᵀ and σ²; returns Σ_j log|B_j|.

    ``sums`` (S, block) receives per-lane partial sums (lane t: the cells t, t + block, ...),
    row by row: Σ y_jᵀV_j⁻¹y_j (1), Σ A_j (lower triangle, d(d+1)/2), Σ r_j (d), Σ r_jr_jᵀ
    (lower triangle), Σ A_j ⊗ r_j (pair p of A, entry e of r: p·d + e) and Σ A_j ⊗ A_j (pairs
    p2 ≤ p1: p1(p1+1)/2 + p2); :func:`_n_sums` rows in all.
    """
    d = L.shape[0]
    npr = d * (d + 1) // 2
    N = D.shape[1]
    nb_max = sums.shape[1]  # the block
    U = np.empty((d, d, nb_max))
    C = np.empty((d, d, nb_max))
    ic = np.empty((d, nb_max))
    W = np.empty((d, d, nb_max))
    u = np.empty((d, nb_max))
    w = np.empty((d, nb_max))
    A = np.empty((npr, nb_max))
    r = np.empty((d, nb_max))
    det = np.empty(nb_max)
    # lower-triangle pair index of (a, c)
    pid = np.empty((d, d), dtype=np.int64)
    for a in range(d):
        for c in range(a + 1):
            pid[a, c] = a * (a + 1) // 2 + c
            pid[c, a] = pid[a, c]
    o_yvy = 0
    o_P = 1
    o_r = o_P + npr
    o_Rr = o_r + d
    o_Ar = o_Rr + npr
    o_AA = o_Ar + npr * d
    inv_s2 = 1.0 / s2
    logdet = 0.0
    prod = 1.0
    for s in range(sums.shape[0]):
        for t in range(nb_max):
            sums[s, t] = 0.0
    for j0 in range(0, N, nb_max):
        nb = min(nb_max, N - j0)
        # U = LᵀG (L lower: L[a, i] ≠ 0 only for a ≥ i), u = Lᵀb
        for i in range(d):
            for c in range(d):
                for t in range(nb):
                    U[i, c, t] = 0.0
                for a in range(i, d):
                    lai = L[a, i]
                    row = pid[a, c]
                    for t in range(nb):
                        U[i, c, t] += lai * D[row, j0 + t]
            for t in range(nb):
                u[i, t] = 0.0
            for a in range(i, d):
                lai = L[a, i]
                for t in range(nb):
                    u[i, t] += lai * D[npr + a, j0 + t]
        # B = I + U L / σ² (lower triangle) and its Cholesky factor C, in place
        for i in range(d):
            for k in range(i + 1):
                for t in range(nb):
                    C[i, k, t] = 0.0
                for c in range(k, d):
                    lck = L[c, k] * inv_s2
                    for t in range(nb):
                        C[i, k, t] += U[i, c, t] * lck
                if i == k:
                    for t in range(nb):
                        C[i, i, t] += 1.0
        for i in range(d):
            for k in range(i + 1):
                for m in range(k):
                    for t in range(nb):
                        C[i, k, t] -= C[i, m, t] * C[k, m, t]
                if i == k:
                    for t in range(nb):
                        v = np.sqrt(C[i, i, t])
                        C[i, i, t] = v
                        ic[i, t] = 1.0 / v
                else:
                    for t in range(nb):
                        C[i, k, t] *= ic[k, t]
        for t in range(nb):
            det[t] = 1.0
        for i in range(d):
            for t in range(nb):
                det[t] *= C[i, i, t] * C[i, i, t]
        # log|B| = Σ log det, multiplied up and logged rarely (det ≥ 1)
        for t in range(nb):
            dt = det[t]
            if dt > 1e150:  # inf or NaN included below
                for i in range(d):
                    logdet += 2.0 * np.log(C[i, i, t])
            elif not dt >= 1.0:  # NaN (bad input) or rounding below 1
                logdet += np.log(dt)
            else:
                prod *= dt
                if prod > 1e150:
                    logdet += np.log(prod)
                    prod = 1.0
        # W = C⁻¹U (column by column), w = C⁻¹u
        for c in range(d):
            for i in range(d):
                for t in range(nb):
                    W[i, c, t] = U[i, c, t]
                for m in range(i):
                    for t in range(nb):
                        W[i, c, t] -= C[i, m, t] * W[m, c, t]
                for t in range(nb):
                    W[i, c, t] *= ic[i, t]
        for i in range(d):
            for t in range(nb):
                w[i, t] = u[i, t]
            for m in range(i):
                for t in range(nb):
                    w[i, t] -= C[i, m, t] * w[m, t]
            for t in range(nb):
                w[i, t] *= ic[i, t]
        # A = (G − WᵀW/σ²)/σ², r = (b − Wᵀw/σ²)/σ², yᵀV⁻¹y = (q − wᵀw/σ²)/σ²
        for a in range(d):
            for c in range(a + 1):
                p = pid[a, c]
                for t in range(nb):
                    A[p, t] = 0.0
                for i in range(d):
                    for t in range(nb):
                        A[p, t] += W[i, a, t] * W[i, c, t]
                for t in range(nb):
                    A[p, t] = (D[p, j0 + t] - A[p, t] * inv_s2) * inv_s2
            for t in range(nb):
                r[a, t] = 0.0
            for i in range(d):
                for t in range(nb):
                    r[a, t] += W[i, a, t] * w[i, t]
            for t in range(nb):
                r[a, t] = (D[npr + a, j0 + t] - r[a, t] * inv_s2) * inv_s2
        row_q = npr + d
        for t in range(nb):
            ww = 0.0
            for i in range(d):
                ww += w[i, t] * w[i, t]
            sums[o_yvy, t] += (D[row_q, j0 + t] - ww * inv_s2) * inv_s2
        # the sums: P, r, Σ r rᵀ, Σ A ⊗ r, Σ A ⊗ A (pairs p2 ≤ p1)
        for p in range(npr):
            for t in range(nb):
                sums[o_P + p, t] += A[p, t]
        for a in range(d):
            for t in range(nb):
                sums[o_r + a, t] += r[a, t]
            for c in range(a + 1):
                p = pid[a, c]
                for t in range(nb):
                    sums[o_Rr + p, t] += r[a, t] * r[c, t]
        for p in range(npr):
            for e in range(d):
                o = o_Ar + p * d + e
                for t in range(nb):
                    sums[o, t] += A[p, t] * r[e, t]
            for p2 in range(p + 1):
                o = o_AA + p * (p + 1) // 2 + p2
                for t in range(nb):
                    sums[o, t] += A[p, t] * A[p2, t]
    return logdet + np.log(prod)


@njit(**_JIT)
def _n_sums(d):  # pragma: no cover - compiled
    """Rows of the sums of :func:`_arm_sums` for dimension d."""
    npr = d * (d + 1) // 2
    return 1 + npr + d + npr + npr * d + npr * (npr + 1) // 2


@njit(**_JIT)
def _arm_loglik(D, T, L, s2, lam, collapsed, beta0, nb_max, gS, gbeta0):  # pragma: no cover
    """One arm's collapsed log-likelihood, ∂ℓ/∂Σ into ``gS`` (d, d), and σ²∂ℓ/∂σ² (returned);
    with ``collapsed`` False the shared mean is ``beta0`` and ∂ℓ/∂β₀ goes to ``gbeta0``.

    Returns ``(ll, s2_dll_ds2)``.
    """
    d = L.shape[0]
    npr = d * (d + 1) // 2
    sums = np.empty((_n_sums(d), nb_max))
    logdetB = _arm_sums(D, L, s2, sums)
    tot = np.empty(sums.shape[0])
    for s in range(sums.shape[0]):
        acc = 0.0
        for t in range(nb_max):
            acc += sums[s, t]
        tot[s] = acc
    o_P = 1
    o_r = o_P + npr
    o_Rr = o_r + d
    o_Ar = o_Rr + npr
    o_AA = o_Ar + npr * d
    yvy = tot[0]
    P = np.empty((d, d))
    Rr = np.empty((d, d))
    rs = np.empty(d)
    for a in range(d):
        rs[a] = tot[o_r + a]
        for c in range(a + 1):
            p = a * (a + 1) // 2 + c
            P[a, c] = tot[o_P + p]
            P[c, a] = P[a, c]
            Rr[a, c] = tot[o_Rr + p]
            Rr[c, a] = Rr[a, c]
    base = -0.5 * (T * _LOG_2PI + T * np.log(s2) + logdetB + yvy)
    m = np.empty(d)
    Q = np.empty((d, d))
    if collapsed:
        # P + λI = LP LPᵀ; m = (P + λI)⁻¹ r; S = (P + λI)⁻¹
        LP = np.zeros((d, d))
        for i in range(d):
            for k in range(i + 1):
                v = P[i, k] + (lam if i == k else 0.0)
                for a in range(k):
                    v -= LP[i, a] * LP[k, a]
                if i == k:
                    LP[i, i] = np.sqrt(v)
                else:
                    LP[i, k] = v / LP[k, k]
        logdetP = 0.0
        for i in range(d):
            logdetP += 2.0 * np.log(LP[i, i])
        # inverse of LP (lower), then S = LP⁻ᵀ LP⁻¹
        Li = np.zeros((d, d))
        for c in range(d):
            for i in range(c, d):
                v = 1.0 if i == c else 0.0
                for a in range(c, i):
                    v -= LP[i, a] * Li[a, c]
                Li[i, c] = v / LP[i, i]
        S = np.empty((d, d))
        for i in range(d):
            for k in range(i + 1):
                v = 0.0
                for a in range(i, d):
                    v += Li[a, i] * Li[a, k]
                S[i, k] = v
                S[k, i] = v
        rm = 0.0
        trS = 0.0
        mm = 0.0
        for i in range(d):
            v = 0.0
            for k in range(d):
                v += S[i, k] * rs[k]
            m[i] = v
        for i in range(d):
            rm += rs[i] * m[i]
            trS += S[i, i]
            mm += m[i] * m[i]
        for i in range(d):
            for k in range(d):
                Q[i, k] = m[i] * m[k] + S[i, k]
        ll = base + 0.5 * rm - 0.5 * logdetP + 0.5 * d * np.log(lam)
        scale_term = 0.5 * (yvy - rm - T) + 0.5 * d - 0.5 * lam * (mm + trS)
    else:
        Pb = np.empty(d)
        for i in range(d):
            m[i] = beta0[i]
        bPb = 0.0
        br = 0.0
        for i in range(d):
            v = 0.0
            for k in range(d):
                v += P[i, k] * m[k]
            Pb[i] = v
            bPb += m[i] * v
            br += m[i] * rs[i]
        for i in range(d):
            gbeta0[i] = rs[i] - Pb[i]
            for k in range(d):
                Q[i, k] = m[i] * m[k]
        ll = base + br - 0.5 * bPb
        scale_term = 0.5 * (yvy - 2.0 * br + bPb - T)
    # Γ = ½[Σ r rᵀ − Σ r (A m)ᵀ − Σ (A m) rᵀ + Σ A Q A − P]
    for a in range(d):
        for b_ in range(a + 1):
            v = Rr[a, b_] - P[a, b_]
            for c in range(d):
                pbc = (b_ * (b_ + 1) // 2 + c) if c <= b_ else (c * (c + 1) // 2 + b_)
                pac = (a * (a + 1) // 2 + c) if c <= a else (c * (c + 1) // 2 + a)
                v -= m[c] * (tot[o_Ar + pbc * d + a] + tot[o_Ar + pac * d + b_])
                for e in range(d):
                    peb = (e * (e + 1) // 2 + b_) if b_ <= e else (b_ * (b_ + 1) // 2 + e)
                    if pac >= peb:
                        o = o_AA + pac * (pac + 1) // 2 + peb
                    else:
                        o = o_AA + peb * (peb + 1) // 2 + pac
                    v += Q[c, e] * tot[o]
            gS[a, b_] = 0.5 * v
            gS[b_, a] = 0.5 * v
    # σ² ∂ℓ/∂σ² = ½(yᵀCov⁻¹y − T) − tr(ΓΣ) [+ λ ∂ℓ/∂λ when β₀ is integrated out]
    trGS = 0.0
    for a in range(d):
        for b_ in range(d):
            sab = 0.0
            for c in range(d):
                sab += L[a, c] * L[b_, c]
            trGS += gS[a, b_] * sab
    return ll, scale_term - trGS


@njit(**_JIT)
def logp_and_grad(x, buf, grad):  # pragma: no cover - compiled
    """The collapsed model's log density at the unconstrained point ``x`` and its gradient
    (into ``grad``), from the buffer of :func:`kernel_data`.

    ``x`` is laid out as PyMC and nutpie lay out the model's value variables: ``Sigma_sd_log__``
    (K, d), ``Sigma_cpc_logodds__`` (K, d(d−1)/2, absent for d = 1), ``sigma_log__`` (K) and,
    with the shared mean sampled, ``beta0`` (K, d), each in C order. Returns the log density
    (PyMC's ``model.logp()``: priors, Jacobians of the log and log-odds transforms, and the
    ``marginal_loglik`` potential).
    """
    Kn = int(buf[_H_K])
    N = int(buf[_H_N])
    d = int(buf[_H_D])
    collapsed = buf[_H_COLLAPSED] != 0.0
    lam = buf[_H_LAM]
    sd_scale = buf[_H_SD_SCALE]
    noise_scale = buf[_H_NOISE_SCALE]
    nb_max = int(buf[_H_BLOCK])
    npair = d * (d - 1) // 2
    npr = d * (d + 1) // 2
    R = npr + d + 1
    o_alpha = _HEADER
    o_T = o_alpha + npair
    o_D = o_T + Kn
    stats = buf[o_D : o_D + Kn * R * N].reshape((Kn, R, N))
    ox_cpc = Kn * d
    ox_sig = ox_cpc + Kn * npair
    ox_b0 = ox_sig + Kn
    L = np.zeros((d, d))
    Wm = np.zeros((d, d))
    sd = np.empty(d)
    gS = np.empty((d, d))
    gL = np.empty((d, d))
    gW = np.empty((d, d))
    gb0 = np.zeros(d)
    beta0 = np.zeros(d)
    Z = np.zeros((d, d))  # the CPCs z_ij and 1 − acc_j of the row recursion, per row
    Tm = np.ones((d, d))
    logp = 0.0
    log_norm_sd = _HALF_LOG_2_OVER_PI - np.log(sd_scale)
    log_norm_noise = _HALF_LOG_2_OVER_PI - np.log(noise_scale)
    for k in range(Kn):
        # priors: HalfNormal sds and noise sd (log transform), Beta CPCs (log-odds transform)
        for i in range(d):
            xs = x[k * d + i]
            s = np.exp(xs)
            sd[i] = s
            logp += log_norm_sd - 0.5 * (s / sd_scale) ** 2 + xs
            grad[k * d + i] = 1.0 - (s / sd_scale) ** 2
        xsig = x[ox_sig + k]
        sig = np.exp(xsig)
        s2 = sig * sig
        logp += log_norm_noise - 0.5 * (sig / noise_scale) ** 2 + xsig
        grad[ox_sig + k] = 1.0 - (sig / noise_scale) ** 2
        for p in range(npair):
            xc = x[ox_cpc + k * npair + p]
            al = buf[o_alpha + p]
            # α(log u + log(1 − u)) − log B(α, α), u = expit(x)
            logp += -al * (_softplus(-xc) + _softplus(xc)) - (
                2.0 * math.lgamma(al) - math.lgamma(2.0 * al)
            )
            u = 1.0 / (1.0 + np.exp(-xc))
            grad[ox_cpc + k * npair + p] = al * (1.0 - 2.0 * u)
        if not collapsed:
            for i in range(d):
                bv = x[ox_b0 + k * d + i]
                beta0[i] = bv
                logp += -0.5 * _LOG_2PI + 0.5 * np.log(lam) - 0.5 * lam * bv * bv
                grad[ox_b0 + k * d + i] = -lam * bv
        # L = diag(sd) W from the CPCs z = 2u − 1 (models._cholesky_entries)
        p = 0
        for i in range(d):
            acc = 0.0
            for j in range(i):
                xc = x[ox_cpc + k * npair + p]
                z = 2.0 / (1.0 + np.exp(-xc)) - 1.0
                Z[i, j] = z
                t = 1.0 - acc
                Tm[i, j] = t
                Wm[i, j] = z * np.sqrt(t) if j > 0 else z
                acc += Wm[i, j] * Wm[i, j]
                p += 1
            Wm[i, i] = np.sqrt(1.0 - acc)
            for j in range(i + 1):
                L[i, j] = sd[i] * Wm[i, j]
        ll, s2_dll = _arm_loglik(
            stats[k], buf[o_T + k], L, s2, lam, collapsed, beta0, nb_max, gS, gb0
        )
        logp += ll
        grad[ox_sig + k] += 2.0 * s2_dll
        if not collapsed:
            for i in range(d):
                grad[ox_b0 + k * d + i] += gb0[i]
        # ∂ℓ/∂L = 2ΓL (lower triangle), then to the sds and the CPCs
        for i in range(d):
            for j in range(i + 1):
                v = 0.0
                for a in range(d):
                    v += gS[i, a] * L[a, j]
                gL[i, j] = 2.0 * v
        p0 = k * npair
        for i in range(d):
            gsd = 0.0
            for j in range(i + 1):
                gsd += gL[i, j] * Wm[i, j]
                gW[i, j] = gL[i, j] * sd[i]
            grad[k * d + i] += gsd * sd[i]
            # reverse of the row recursion: W_ij = z_ij √(1 − acc_j), W_ii = √(1 − acc_i)
            row0 = p0 + i * (i - 1) // 2
            gacc = -0.5 * gW[i, i] / Wm[i, i] if i > 0 else 0.0
            for j in range(i - 1, -1, -1):
                g_w = gW[i, j] + 2.0 * Wm[i, j] * gacc
                xc = x[ox_cpc + row0 + j]
                u = 1.0 / (1.0 + np.exp(-xc))
                if j > 0:
                    st = np.sqrt(Tm[i, j])
                    gz = g_w * st
                    gacc += -0.5 * g_w * Z[i, j] / st
                else:
                    gz = g_w
                grad[ox_cpc + row0 + j] += gz * 2.0 * u * (1.0 - u)
    return logp


@njit(**_JIT)
def expand(x, buf, out):  # pragma: no cover - compiled
    """The stored variables of one draw at the unconstrained point ``x``: Σ (K, d, d), σ (K)
    and, with the shared mean sampled, β₀ (K, d), one after the other in ``out``
    (``models.constrain_draws`` in compiled form)."""
    Kn = int(buf[_H_K])
    d = int(buf[_H_D])
    collapsed = buf[_H_COLLAPSED] != 0.0
    npair = d * (d - 1) // 2
    ox_cpc = Kn * d
    ox_sig = ox_cpc + Kn * npair
    ox_b0 = ox_sig + Kn
    o_sig = Kn * d * d
    L = np.zeros((d, d))
    for k in range(Kn):
        p = 0
        for i in range(d):
            s = np.exp(x[k * d + i])
            acc = 0.0
            for j in range(i):
                z = 2.0 / (1.0 + np.exp(-x[ox_cpc + k * npair + p])) - 1.0
                w = z * np.sqrt(1.0 - acc) if j > 0 else z
                acc += w * w
                L[i, j] = s * w
                p += 1
            L[i, i] = s * np.sqrt(1.0 - acc)
        for i in range(d):
            for j in range(d):
                v = 0.0
                for a in range(min(i, j) + 1):
                    v += L[i, a] * L[j, a]
                out[k * d * d + i * d + j] = v
        out[o_sig + k] = np.exp(x[ox_sig + k])
        if not collapsed:
            for i in range(d):
                out[o_sig + Kn + k * d + i] = x[ox_b0 + k * d + i]


_CFUNCS: list[Any] = []


def _cfuncs() -> tuple[Any, Any]:
    """The C entry points nutpie calls (compiled on first use, then from numba's cache):
    ``logp(dim, x, grad, logp, data) -> status`` and
    ``expand(dim, n_expanded, x, out, data) -> status``, ``data`` the :func:`kernel_data`
    buffer. Status 0 is success; 3 and 4 (a non-finite gradient or log density: nutpie rejects
    the proposal) are recoverable; −1 (wrong sizes) is not."""
    if _CFUNCS:
        return _CFUNCS[0], _CFUNCS[1]
    from numba import carray, types

    sig_logp = types.int64(
        types.uint64,
        types.CPointer(types.double),
        types.CPointer(types.double),
        types.CPointer(types.double),
        types.voidptr,
    )
    sig_expand = types.int64(
        types.uint64,
        types.uint64,
        types.CPointer(types.double),
        types.CPointer(types.double),
        types.voidptr,
    )

    @numba.cfunc(sig_logp, cache=True, nogil=True, error_model="numpy")
    def logp_c(dim, x_, out_, logp_, data_):  # pragma: no cover - compiled
        head = carray(data_, (_HEADER,), dtype=np.float64)
        if dim != int(head[_H_NDIM]):
            return _BAD_DIM
        buf = carray(data_, (int(head[_H_TOTAL]),), dtype=np.float64)
        x = carray(x_, (dim,))
        grad = carray(out_, (dim,))
        value = logp_and_grad(x, buf, grad)
        logp_[0] = value
        for i in range(dim):
            if not np.isfinite(grad[i]):
                return _NONFINITE_GRAD
        if not np.isfinite(value):
            return _NONFINITE_LOGP
        return _OK

    @numba.cfunc(sig_expand, cache=True, nogil=True, error_model="numpy")
    def expand_c(dim, n_expanded, x_, out_, data_):  # pragma: no cover - compiled
        head = carray(data_, (_HEADER,), dtype=np.float64)
        if dim != int(head[_H_NDIM]):
            return _BAD_DIM
        buf = carray(data_, (int(head[_H_TOTAL]),), dtype=np.float64)
        x = carray(x_, (dim,))
        out = carray(out_, (n_expanded,))
        expand(x, buf, out)
        return _OK

    _CFUNCS[:] = [logp_c, expand_c]
    return logp_c, expand_c


def compile_collapsed(model: Any) -> Any:
    """A nutpie model of ``model`` (built by :func:`~hierbandit.bayes.models.collapsed_model`)
    whose log density and gradient are the compiled kernel (:func:`logp_and_grad`) and whose
    draws are expanded to ``Sigma``, ``sigma`` and, with the shared mean sampled, ``beta0``
    (:func:`expand`). The initial points are PyMC's, jittered as nutpie's own compilation of a
    PyMC model jitters them. Pass it to ``nutpie.sample``.

    Raises
    ------
    ValueError
        If ``model`` is not a collapsed model built by the package.
    """
    import threading

    import pandas as pd
    from nutpie.compile_pymc import CompiledPyMCModel
    from pymc.initial_point import make_initial_point_fn

    buf = kernel_data(model)
    Kn, d = int(buf[_H_K]), int(buf[_H_D])
    collapsed = buf[_H_COLLAPSED] != 0.0
    n_dim = int(buf[_H_NDIM])
    logp_c, expand_c = _cfuncs()
    names = ["Sigma", "sigma"] + ([] if collapsed else ["beta0"])
    shapes = [(Kn, d, d), (Kn,)] + ([] if collapsed else [(Kn, d)])
    all_dims = {
        "Sigma": ("arm", "feature", "feature_"),
        "sigma": ("arm",),
        "beta0": ("arm", "feature"),
    }
    ends = np.cumsum([int(np.prod(s)) for s in shapes])
    slices = [slice(int(e - np.prod(s)), int(e)) for s, e in zip(shapes, ends, strict=True)]
    value_names = [model.rvs_to_values[rv].name for rv in model.free_RVs]
    point_fn = make_initial_point_fn(
        model=model, jitter_rvs=set(model.free_RVs), return_transformed=True
    )
    lock = threading.Lock()

    def initial_point(seed: int) -> np.ndarray:
        with lock:  # nutpie calls it from its chains' threads
            point = point_fn(seed)
        flat = np.concatenate([np.asarray(point[n], dtype=float).ravel() for n in value_names])
        if flat.size != n_dim:  # pragma: no cover - the model and the kernel disagree
            raise ValueError(f"initial point of size {flat.size}; the kernel expects {n_dim}")
        return flat

    coords = {
        k: pd.Index(np.asarray(v))
        for k, v in model.coords.items()
        if k in ("arm", "feature", "feature_")
    }
    return CompiledPyMCModel(
        _n_dim=n_dim,
        dims={n: all_dims[n] for n in names},
        _coords=coords,
        _shapes=dict(zip(names, shapes, strict=True)),
        compiled_logp_func=logp_c,
        compiled_expand_func=expand_c,
        initial_point_func=initial_point,
        shared_data={},
        shared_var_keys={},
        user_data=buf,
        n_expanded=int(ends[-1]),
        shape_info=(names, slices, shapes),
        logp_func=None,
        expand_func=None,
        reparameterized_names=[],
    )
