"""One arm's marginal likelihood and its gradient from per-cell sufficient statistics, with the
cells processed in blocks whose inner loops vectorise (structure of arrays).

Model (one arm of the ebm paper, §4; :mod:`hierbandit.stats.marginal`): cells j = 1..N with
statistics (G_j, b_j, q_j, n_j), β_j ~ N(β₀, Σ), y_j = X_jβ_j + N(0, σ²I), and β₀ given,
profiled out, or integrated out under N(0, λ⁻¹I). With Σ = LLᵀ (L lower triangular),
B_j = I + LᵀG_jL/σ² = C_jC_jᵀ, W_j = C_j⁻¹LᵀG_j and w_j = C_j⁻¹Lᵀb_j:

* A_j = X_jᵀV_j⁻¹X_j = (G_j − W_jᵀW_j/σ²)/σ², r_j = X_jᵀV_j⁻¹y_j = (b_j − W_jᵀw_j/σ²)/σ²,
  y_jᵀV_j⁻¹y_j = (q_j − w_jᵀw_j/σ²)/σ² and log|V_j| = n_j log σ² + log|B_j| (determinant lemma
  and Woodbury, ebm eq. 4.3, in the d×d form of ``hierbandit.bayes.models``);
* with P = Σ_j A_j, r = Σ_j r_j, T = Σ_j n_j and base = −½Σ_j[n_j log 2π + log|V_j| +
  y_jᵀV_j⁻¹y_j]:

  - β₀ given: ℓ = base + β₀ᵀr − ½β₀ᵀPβ₀, ∂ℓ/∂β₀ = r − Pβ₀;
  - β₀ integrated out: with P_λ = P + λI, m = P_λ⁻¹r, S = P_λ⁻¹,
    ℓ = base + ½rᵀm − ½log|P_λ| + (d/2) log λ (docs/bayes.md §3.1);
  - β₀ profiled: β̂₀ = P_λ⁻¹r maximises ℓ(β₀) − (λ/2)‖β₀‖², and by the envelope theorem the
    gradient of the profiled objective in (Σ, σ²) is that of ℓ(β₀) at β₀ = β̂₀ (the type-II
    ML objective of :func:`hierbandit.stats.fit_type2_ml`).

* the gradient in Σ: given β₀, ∂ℓ/∂Σ = ½Σ_j(g_jg_jᵀ − A_j) with g_j = r_j − A_jβ₀
  (``hierbandit.stats.marginal``, module docstring); with β₀ integrated out, by Fisher's
  identity, the posterior mean of that score under β₀ ~ N(m, S):
  Γ = ½Σ_j[g_jg_jᵀ + A_jSA_j − A_j] with g_j = r_j − A_jm. Then ∂ℓ/∂L = 2ΓL;
* the gradient in σ², from homogeneity: the covariance of the arm's stacked rewards
  (blockdiag(V_j), plus λ⁻¹XXᵀ when β₀ is integrated out) is linear in (Σ, σ², λ⁻¹), so
  scaling them all by c scales it by c, and tr(ΓΣ) + σ²∂ℓ/∂σ² [− λ∂ℓ/∂λ] = ½(ε − T), with
  ε = Σ_j(y_j − X_jβ₀)ᵀV_j⁻¹(y_j − X_jβ₀) = Σ_j y_jᵀV_j⁻¹y_j − 2β₀ᵀr + β₀ᵀPβ₀ given β₀ and
  ε = Σ_j y_jᵀV_j⁻¹y_j − rᵀm integrated, where by Fisher's identity again
  ∂ℓ/∂λ = d/(2λ) − ½(mᵀm + tr S).

Γ needs β₀ (or m), which needs every cell; expanding g_jg_jᵀ + A_jSA_j = r_jr_jᵀ − r_j(A_jm)ᵀ −
(A_jm)r_jᵀ + A_j(mmᵀ + S)A_j, one pass over the cells accumulates Σ_j r_jr_jᵀ, Σ_j A_j ⊗ r_j
and Σ_j A_j ⊗ A_j (symmetric pairs only) besides P, r and Σ_j y_jᵀV_j⁻¹y_j, and the rest
follows per arm in O(d⁴).

The cells are processed in blocks (every entry of every small matrix a vector over the block's
cells, sums kept per lane), so the inner loops run over contiguous cells and vectorise. An empty
cell contributes exactly 0 (G = 0, b = 0, q = 0 make B = I), with no branch; B_j ⪰ I, so its
Cholesky pivots are ≥ 1 and nothing is refused. The per-cell determinants are multiplied up
and logged once per factor of 1e150.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hierbandit.stats._arm_sums_unrolled import arm_sums_1, arm_sums_2, arm_sums_3, arm_sums_4

__all__ = ["GIVEN", "INTEGRATED", "PROFILED", "arm_loglik", "arm_stats", "arm_sums", "n_sums"]

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
_LOG_2PI = float(np.log(2.0 * np.pi))

#: what :func:`arm_loglik` does with the shared mean β₀
INTEGRATED, GIVEN, PROFILED = 0, 1, 2


def arm_stats(G: np.ndarray, b: np.ndarray, q: np.ndarray) -> np.ndarray:
    """One arm's statistics in the layout of :func:`arm_sums`: rows (R, N) with
    R = d(d+1)/2 + d + 1, the lower triangle of G_j row by row, then b_j, then q_j, for G
    (N, d, d), b (N, d), q (N,)."""
    G = np.asarray(G, dtype=float)
    d = G.shape[-1]
    rows, cols = np.tril_indices(d)
    return np.ascontiguousarray(
        np.concatenate([G[:, rows, cols].T, np.asarray(b, dtype=float).T, np.asarray(q)[None]])
    )


@njit(**_JIT)
def arm_sums(D, L, s2, sums):  # pragma: no cover - compiled
    """One arm's sums over its N cells (``D`` (R, N): the lower triangle of G row by row, b, q),
    given Σ = LLᵀ and σ²; returns Σ_j log|B_j|.

    ``sums`` (S, block) receives per-lane partial sums (lane t: the cells t, t + block, ...),
    row by row: Σ y_jᵀV_j⁻¹y_j (1), Σ A_j (lower triangle, d(d+1)/2), Σ r_j (d), Σ r_jr_jᵀ
    (lower triangle), Σ A_j ⊗ r_j (pair p of A, entry e of r: p·d + e) and Σ A_j ⊗ A_j (pairs
    p2 ≤ p1: p1(p1+1)/2 + p2); :func:`n_sums` rows in all.
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
def n_sums(d):  # pragma: no cover - compiled
    """Rows of the sums of :func:`arm_sums` for dimension d."""
    npr = d * (d + 1) // 2
    return 1 + npr + d + npr + npr * d + npr * (npr + 1) // 2


@njit(**_JIT)
def arm_loglik(D, T, L, s2, lam, mode, beta0, block, gS, gbeta0):  # pragma: no cover
    """One arm's log-likelihood (module docstring), ∂ℓ/∂Σ into ``gS`` (d, d) and σ²∂ℓ/∂σ².

    ``D`` is :func:`arm_stats`' layout, ``T`` = Σ_j n_j, Σ = LLᵀ (L lower triangular, (d, d)),
    σ² = ``s2``, ``lam`` = λ, ``block`` cells per block of the generic kernel
    (:func:`arm_sums`; d ≤ 4 runs its unrolled variant, :mod:`hierbandit.stats._arm_codegen`,
    the same sums to rounding). ``mode``: :data:`INTEGRATED` (β₀
    integrated out under N(0, λ⁻¹I); with λ = 0 the restricted likelihood, without the
    constant (d/2) log λ; β̂₀ = P_λ⁻¹r is written to ``beta0``), :data:`GIVEN` (β₀ =
    ``beta0``; ∂ℓ/∂β₀ goes to ``gbeta0``) or :data:`PROFILED` (β₀ = β̂₀, written to ``beta0``;
    the caller subtracts the penalty (λ/2)‖β̂₀‖²). Returns ``(ll, s2_dll_ds2, logdetP)``,
    logdetP = log|P_λ| (0 with β₀ given); a non-finite value means a d×d system failed (P_λ
    not positive definite, or non-finite input).
    """
    d = L.shape[0]
    npr = d * (d + 1) // 2
    tot = np.empty(n_sums(d))
    if d == 1:
        logdetB = arm_sums_1(D, L, s2, tot)
    elif d == 2:
        logdetB = arm_sums_2(D, L, s2, tot)
    elif d == 3:
        logdetB = arm_sums_3(D, L, s2, tot)
    elif d == 4:
        logdetB = arm_sums_4(D, L, s2, tot)
    else:
        sums = np.empty((tot.size, block))
        logdetB = arm_sums(D, L, s2, sums)
        for s in range(sums.shape[0]):
            acc = 0.0
            for t in range(block):
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
    S = np.zeros((d, d))
    logdetP = 0.0
    if mode != GIVEN:
        # P + λI = LP LPᵀ; S = (P + λI)⁻¹ = LP⁻ᵀLP⁻¹; m = S r
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
        for i in range(d):
            logdetP += 2.0 * np.log(LP[i, i])
        Li = np.zeros((d, d))
        for c in range(d):
            for i in range(c, d):
                v = 1.0 if i == c else 0.0
                for a in range(c, i):
                    v -= LP[i, a] * Li[a, c]
                Li[i, c] = v / LP[i, i]
        for i in range(d):
            for k in range(i + 1):
                v = 0.0
                for a in range(i, d):
                    v += Li[a, i] * Li[a, k]
                S[i, k] = v
                S[k, i] = v
        for i in range(d):
            v = 0.0
            for k in range(d):
                v += S[i, k] * rs[k]
            m[i] = v
    if mode == INTEGRATED:
        rm = 0.0
        trS = 0.0
        mm = 0.0
        for i in range(d):
            rm += rs[i] * m[i]
            trS += S[i, i]
            mm += m[i] * m[i]
        for i in range(d):
            beta0[i] = m[i]
            for k in range(d):
                Q[i, k] = m[i] * m[k] + S[i, k]
        # with λ = 0 the constant (d/2) log λ is left out: the restricted likelihood (REML)
        ll = base + 0.5 * rm - 0.5 * logdetP + (0.5 * d * np.log(lam) if lam > 0.0 else 0.0)
        scale_term = 0.5 * (yvy - rm - T) + 0.5 * d - 0.5 * lam * (mm + trS)
    else:
        if mode == PROFILED:
            for i in range(d):
                beta0[i] = m[i]
        else:
            for i in range(d):
                m[i] = beta0[i]
        bPb = 0.0
        br = 0.0
        for i in range(d):
            v = 0.0
            for k in range(d):
                v += P[i, k] * m[k]
            gbeta0[i] = rs[i] - v
            bPb += m[i] * v
            br += m[i] * rs[i]
        for i in range(d):
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
    # σ²∂ℓ/∂σ² = ½(ε − T) − tr(ΓΣ) [+ λ∂ℓ/∂λ with β₀ integrated out]
    trGS = 0.0
    for a in range(d):
        for b_ in range(d):
            sab = 0.0
            for c in range(min(a, b_) + 1):
                sab += L[a, c] * L[b_, c]
            trGS += gS[a, b_] * sab
    return ll, scale_term - trGS, logdetP
