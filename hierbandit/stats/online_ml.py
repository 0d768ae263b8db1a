"""Online type-II maximum likelihood of one arm's hyperparameters (Σ, σ²): a few warm-started
Fisher-scoring steps on the exact collapsed marginal likelihood.

The ebm paper re-estimates (Σ, σ²) by moments (thresholded scatter of per-instance OLS estimates,
pooled residual variance; :mod:`hierbandit.stats.empirical_bayes`). The alternative here
maximises the likelihood of the arm's rewards with every coefficient integrated out,

    log p(y | Σ, σ²) = log ∫ Π_j N(y_j; X_jβ₀, V_j) N(β₀; m₀, P₀⁻¹) dβ₀,   V_j = X_jΣX_jᵀ + σ²I,

the density of the stacked rewards under N(Xm₀, W), W = blockdiag(V_j) + XP₀⁻¹Xᵀ, where
N(m₀, P₀⁻¹) (h₀ = P₀m₀) is the shared mean's prior the policy uses (the paper's N(0, λ⁻¹I), or a
fitted prior). It is evaluated from the per-instance sufficient statistics (G_j, b_j, q_j, n_j)
with d×d algebra only (:func:`hierbandit.stats.marginal._loglik_kernel`, docs/maths/ebm.md
§7.5):

    log p(y | Σ, σ²) = ℓ(β̂₀) − ½(β̂₀ − m₀)ᵀP₀(β̂₀ − m₀) + ½log|P₀| − ½log|P|,

with ℓ(β₀) = Σ_j log N(y_j; X_jβ₀, V_j), P = P₀ + Σ_j H_j, H_j = X_jᵀV_j⁻¹X_j and β̂₀ = P⁻¹r the
posterior mode of the shared mean (the same β̂₀, Φ = P⁻¹ as the policy's posterior, §4). With
λ → 0 it is the restricted (REML) likelihood; :func:`hierbandit.stats.fit_type2_ml` with
``beta0="integrate"`` maximises the same function offline.

Parametrisation and step. θ = (the lower triangle of the Cholesky factor L of Σ = LLᵀ, row by
row, its diagonal as log L_ii; log σ²), as offline. Each step solves I(θ)Δ = ∇F(θ) on the free
coordinates, with I(θ) the expected (Fisher) information of the collapsed model,

    I_ab = ½ tr(W⁻¹ ∂_aW W⁻¹ ∂_bW),   W⁻¹ = D⁻¹ − D⁻¹XΦXᵀD⁻¹,  D = blockdiag(V_j),

written in d×d sums over instances (docs/maths/ebm.md §7.5), and takes the longest step
Δ·2⁻ⁱ that passes an Armijo test on F itself: no accepted step lowers the likelihood. The cost of
a step is O(N d⁴) (the Fisher sums) plus O(N d³) per likelihood evaluation, with N the instances
that have data.

These kernels trust their inputs; :func:`online_ml_step` validates.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from hierbandit._validation import check_covariance, check_positive_int, check_scalar
from hierbandit.stats import kernels as K
from hierbandit.stats import linalg
from hierbandit.stats.empirical_bayes import EBOptions, _check_counts, _stats_arrays
from hierbandit.stats.hierarchical import shared_prior_arrays
from hierbandit.stats.marginal import _loglik_kernel

__all__ = ["OnlineMLResult", "online_ml_step"]

_JIT = {"cache": True, "nogil": True}

#: status of :func:`reestimate_arm_ml`: the step ran; the hyperparameters are not identifiable
#: yet (too few instances with a full-rank design, or no rows) and keep their values; the
#: likelihood could not be evaluated at the starting point (values kept)
ML_RAN, ML_NOT_IDENTIFIABLE, ML_FAILED = 0, 1, 2

#: the policies' stopping rule: no further step once its predicted gain in log-likelihood is
#: below this
ML_TOL = 1e-8

#: lower bound of L_ii² when ``eig_floor`` is 0 (keeps L⁻¹ far from overflow)
_MIN_DIAG2 = 1e-30
#: largest change of any coordinate of θ in one step (log-scale coordinates: a factor e⁴)
_MAX_STEP = 4.0
#: Armijo constant of the line search, and its largest number of halvings
_ARMIJO = 1e-4
_HALVINGS = 40


# ------------------------------------------------------------------------------ helpers


@njit(**_JIT)
def _mm_into(X, Y, out):
    """``out`` = X Y for square matrices of one size, each entry summed over l in order (the
    loops the kernels below would write out)."""
    d = X.shape[0]
    for i in range(d):
        for k in range(d):
            t = 0.0
            for l in range(d):
                t += X[i, l] * Y[l, k]
            out[i, k] = t


@njit(**_JIT)
def _vech(p, q):
    """Index of entry (p, q) of a symmetric d×d matrix in the lower triangle, row by row."""
    if p < q:
        p, q = q, p
    return p * (p + 1) // 2 + q


@njit(**_JIT)
def _theta_to_L(theta, L):
    """L (lower triangular, positive diagonal) from θ's first d(d+1)/2 entries."""
    d = L.shape[0]
    for i in range(d):
        for k in range(d):
            L[i, k] = 0.0
    u = 0
    for i in range(d):
        for k in range(i + 1):
            L[i, k] = np.exp(theta[u]) if i == k else theta[u]
            u += 1


@njit(**_JIT)
def _prior_constant(P0, h0):
    """½log|P₀| − ½m₀ᵀh₀ (m₀ = P₀⁻¹h₀): the part of the collapsed likelihood free of (Σ, σ²)."""
    d = h0.shape[0]
    LP = np.empty((d, d))
    if not linalg.cholesky_lower(P0, LP):
        return 0.0
    m0 = np.empty(d)
    linalg.cholesky_solve(LP, h0, m0)
    c = 0.0
    for i in range(d):
        c += np.log(LP[i, i]) - 0.5 * m0[i] * h0[i]
    return c


@njit(**_JIT)
def _collapsed(G, b, q, n, L, sigma2, P0, h0, const, grad, Ct, P, r, gS, beta0):
    """(status, F, ∂F/∂σ²): the collapsed log-likelihood at Σ = LLᵀ, σ², and with ``grad`` its
    gradient in Σ into ``gS``; ``beta0``, ``P`` and ``Ct`` are left at β̂₀, P and C̃_j."""
    status, ll, logdetP, dsig = _loglik_kernel(
        G, b, q, n, L, sigma2, P0, h0, True, grad, grad, beta0, Ct, P, r, gS
    )
    if status != 0:
        return status, -np.inf, 0.0
    d = h0.shape[0]
    pen = 0.0
    for i in range(d):
        t = 0.0
        for k in range(d):
            t += P0[i, k] * beta0[k]
        pen += beta0[i] * (0.5 * t - h0[i])
    f = ll - pen - 0.5 * logdetP + const
    if not np.isfinite(f):
        return 3, -np.inf, 0.0
    return 0, f, dsig


@njit(**_JIT)
def _fisher_vech(G, n, Ct, Phi, sigma2, out):
    """Expected information of the collapsed likelihood in the coordinates (vech Σ, σ²).

    ``out`` (m + 1, m + 1), m = d(d+1)/2; coordinate w = (p, q), p ≥ q, is the entry Σ_pq (both
    Σ_pq and Σ_qp for p ≠ q, direction E_w = e_pe_qᵀ + e_qe_pᵀ; E_pp = e_pe_pᵀ), the last one σ².
    With H_j = X_jᵀV_j⁻¹X_j, K2_j = X_jᵀV_j⁻²X_j, K3_j = X_jᵀV_j⁻³X_j and S_E = Σ_j H_jEH_j:

    I(E, F)   = ½[Σ_j tr(H_jEH_jF) − 2Σ_j tr(ΦH_jEH_jFH_j) + tr(ΦS_EΦS_F)]
    I(E, σ²)  = ½[tr(E Σ_jK2_j) − 2Σ_j tr(ΦH_jEK2_j) + tr(ΦS_EΦ Σ_jK2_j)]
    I(σ², σ²) = ½[Σ_j tr(V_j⁻²) − 2tr(Φ Σ_jK3_j) + tr(Φ(Σ_jK2_j)Φ(Σ_jK2_j))]

    (docs/maths/ebm.md §7.5), from C̃_j: with Q_j = I − G_jC̃_j, H_j = Q_jG_j/σ²,
    K2_j = Q_jH_j/σ², K3_j = Q_jK2_j/σ² and tr(V_j⁻²) = (n_j − 2tr(C̃_jG_j) + tr((C̃_jG_j)²))/σ⁴.
    """
    N, d = G.shape[0], G.shape[1]
    m = d * (d + 1) // 2
    A = np.zeros((m, m))  # Σ_j vech(H_j) vech(H_j)ᵀ
    B = np.zeros((m, m))  # Σ_j vech(H_jΦH_j) vech(H_j)ᵀ
    K2s = np.zeros((d, d))
    K3s = np.zeros((d, d))
    M = np.zeros((d, d))  # Σ_j K2_j Φ H_j
    t2 = 0.0
    GC = np.empty((d, d))
    Q = np.empty((d, d))
    H = np.empty((d, d))
    K2 = np.empty((d, d))
    T = np.empty((d, d))
    X = np.empty((d, d))
    hv = np.empty(m)
    xv = np.empty(m)
    for j in range(N):
        if n[j] == 0:
            continue
        _mm_into(G[j], Ct[j], GC)
        trCG = 0.0
        trCGCG = 0.0
        for i in range(d):
            trCG += GC[i, i]
            for k in range(d):
                trCGCG += GC[i, k] * GC[k, i]
                Q[i, k] = (1.0 if i == k else 0.0) - GC[i, k]
        t2 += (n[j] - 2.0 * trCG + trCGCG) / (sigma2 * sigma2)
        # H = Q G / σ² (symmetric), K2 = Q H / σ², K3 = Q K2 / σ²
        for i in range(d):
            for k in range(i + 1):
                t = 0.0
                for l in range(d):
                    t += Q[i, l] * G[j, l, k]
                H[i, k] = t / sigma2
        for i in range(d):
            for k in range(i):
                H[k, i] = H[i, k]
        for i in range(d):
            for k in range(d):
                t = 0.0
                for l in range(d):
                    t += Q[i, l] * H[l, k]
                K2[i, k] = t / sigma2
        for i in range(d):
            for k in range(d):
                t = 0.0
                for l in range(d):
                    t += Q[i, l] * K2[l, k]
                K3s[i, k] += t / sigma2
                K2s[i, k] += K2[i, k]
        # T = ΦH, X = HΦH, M += K2 Φ H
        _mm_into(Phi, H, T)
        for i in range(d):
            for k in range(d):
                t = 0.0
                u = 0.0
                for l in range(d):
                    t += H[i, l] * T[l, k]
                    u += K2[i, l] * T[l, k]
                X[i, k] = t
                M[i, k] += u
        for p in range(d):
            for qq in range(p + 1):
                w = p * (p + 1) // 2 + qq
                hv[w] = H[p, qq]
                xv[w] = 0.5 * (X[p, qq] + X[qq, p])
        for u in range(m):
            hu = hv[u]
            xu = xv[u]
            for w in range(m):
                A[u, w] += hu * hv[w]
                B[u, w] += xu * hv[w]
    # S_E for every unit direction, S_E[p, s] = Σ over the orderings (α, β) of E of
    # Σ_j H_pα H_βs; Y_E = Φ S_E Φ
    S = np.empty((m, d, d))
    Y = np.empty((m, d, d))
    ia = np.empty(m, dtype=np.int64)
    ib = np.empty(m, dtype=np.int64)
    for a in range(d):
        for bb in range(a + 1):
            w = a * (a + 1) // 2 + bb
            ia[w] = a
            ib[w] = bb
    for w in range(m):
        a, bb = ia[w], ib[w]
        for p in range(d):
            for s in range(d):
                v = A[_vech(p, a), _vech(bb, s)]
                if a != bb:
                    v += A[_vech(p, bb), _vech(a, s)]
                S[w, p, s] = v
        _mm_into(Phi, S[w], T)
        _mm_into(T, Phi, Y[w])
    # Φ (Σ K2) Φ
    PK = np.empty((d, d))
    Z = np.empty((d, d))
    _mm_into(Phi, K2s, PK)
    _mm_into(PK, Phi, Z)
    for u in range(m):
        a, bb = ia[u], ib[u]
        for w in range(u + 1):
            c, dd = ia[w], ib[w]
            # Σ_j tr(H E_u H E_w) = tr(S_u E_w)
            t1 = S[u, dd, c] + (S[u, c, dd] if c != dd else 0.0)
            # Σ_j tr(X E_u H E_w): orderings (α, β) of u and (γ, δ) of w, X_δα H_βγ
            t2x = 0.0
            for o1 in range(2 if a != bb else 1):
                al, be = (a, bb) if o1 == 0 else (bb, a)
                for o2 in range(2 if c != dd else 1):
                    ga, de = (c, dd) if o2 == 0 else (dd, c)
                    t2x += B[_vech(de, al), _vech(be, ga)]
            t3 = 0.0
            for p in range(d):
                for s in range(d):
                    t3 += Y[u, p, s] * S[w, s, p]
            v = 0.5 * (t1 - 2.0 * t2x + t3)
            out[u, w] = v
            out[w, u] = v
    for u in range(m):
        a, bb = ia[u], ib[u]
        e1 = K2s[bb, a] + (K2s[a, bb] if a != bb else 0.0)
        e2 = M[bb, a] + (M[a, bb] if a != bb else 0.0)
        e3 = 0.0
        for p in range(d):
            for s in range(d):
                e3 += Y[u, p, s] * K2s[s, p]
        out[u, m] = 0.5 * (e1 - 2.0 * e2 + e3)
        out[m, u] = out[u, m]
    trK3 = 0.0
    trZK = 0.0
    for i in range(d):
        for k in range(d):
            trK3 += Phi[i, k] * K3s[k, i]
            trZK += Z[i, k] * K2s[k, i]
    out[m, m] = 0.5 * (t2 - 2.0 * trK3 + trZK)


# ---------------------------------------------------------------------------- iteration


@njit(**_JIT)
def _theta_gradient_fisher(L, sigma2, gS, dsig, Iv, g, It):
    """∇F and the Fisher information in θ from those in (vech Σ, σ²): g = Jᵀ∇, I_θ = JᵀIJ with
    J the Jacobian of (vech(LLᵀ), σ²) in θ (dΣ = e_a l_bᵀ + l_b e_aᵀ for θ = L_ab, times L_aa
    for θ = log L_aa; dσ² = σ² dlog σ²)."""
    d = L.shape[0]
    m = d * (d + 1) // 2
    J = np.zeros((m, m))
    u = 0
    for a in range(d):
        for bb in range(a + 1):
            scale = L[a, a] if a == bb else 1.0
            for p in range(d):
                for q in range(p + 1):
                    v = 0.0
                    if p == a:
                        v += L[q, bb]
                    if q == a:
                        v += L[p, bb]
                    J[_vech(p, q), u] = v * scale
            u += 1
    gv = np.empty(m)
    for p in range(d):
        for q in range(p + 1):
            gv[_vech(p, q)] = gS[p, q] + (gS[q, p] if p != q else 0.0)
    for u in range(m):
        t = 0.0
        for w in range(m):
            t += J[w, u] * gv[w]
        g[u] = t
    g[m] = dsig * sigma2
    IJ = np.empty((m, m))
    _mm_into(Iv[:m, :m], J, IJ)
    for u in range(m):
        for x in range(u + 1):
            t = 0.0
            for w in range(m):
                t += J[w, u] * IJ[w, x]
            It[u, x] = t
            It[x, u] = t
        t = 0.0
        for w in range(m):
            t += J[w, u] * Iv[w, m]
        It[u, m] = t * sigma2
        It[m, u] = It[u, m]
    It[m, m] = Iv[m, m] * sigma2 * sigma2


@njit(**_JIT)
def _solve_free(It, g, free, delta):
    """Δ on the free coordinates from I_θΔ = g (Cholesky; Levenberg–Marquardt damping of the
    diagonal when I_θ is singular there; a scaled gradient step as the last resort)."""
    nt = g.shape[0]
    idx = np.empty(nt, dtype=np.int64)
    nf = 0
    for i in range(nt):
        delta[i] = 0.0
        if free[i]:
            idx[nf] = i
            nf += 1
    if nf == 0:
        return
    Af = np.empty((nf, nf))
    Lf = np.empty((nf, nf))
    gf = np.empty(nf)
    xf = np.empty(nf)
    dmax = 0.0
    for i in range(nf):
        gf[i] = g[idx[i]]
        dmax = max(dmax, It[idx[i], idx[i]])
    mu = 0.0
    for _ in range(8):
        for i in range(nf):
            for k in range(nf):
                Af[i, k] = It[idx[i], idx[k]]
            Af[i, i] += mu * (Af[i, i] if Af[i, i] > 0.0 else 0.0) + mu * 1e-12 * dmax
        if dmax > 0.0 and linalg.cholesky_lower(Af, Lf):
            linalg.cholesky_solve(Lf, gf, xf)
            ok = True
            for i in range(nf):
                if not np.isfinite(xf[i]):
                    ok = False
            if ok:
                for i in range(nf):
                    delta[idx[i]] = xf[i]
                return
        mu = 1e-8 if mu == 0.0 else mu * 100.0
    scale = dmax if dmax > 0.0 else 1.0
    for i in range(nf):
        delta[idx[i]] = gf[i] / scale


@njit(**_JIT)
def _sigma_within(L, bound):
    """Every entry of LLᵀ is finite and at most ``bound`` in magnitude."""
    d = L.shape[0]
    for i in range(d):
        for k in range(i + 1):
            t = 0.0
            for m in range(k + 1):
                t += L[i, m] * L[k, m]
            if not abs(t) <= bound:
                return False
    return True


@njit(**_JIT)
def ml_iterate(G, b, q, n, P0, h0, theta, free, lo, hi, steps, tol, Ct1, Ct2, trace):
    """Up to ``steps`` Fisher-scoring steps on the collapsed likelihood from θ (updated in place).

    ``free`` (bool, d(d+1)/2 + 1) marks the coordinates of θ that move; ``lo``/``hi`` bound θ
    (a coordinate at a bound with the gradient pointing out is held for that step). ``tol``:
    stop once the predicted gain ∇Fᵀ Δ is at most ``tol``. ``Ct1``, ``Ct2`` (N, d, d) are
    scratch. ``trace`` (steps + 1) receives F after each accepted step (F at θ first).

    Returns ``(status, F, accepted, converged)``: status 0, or the kernel's failure code when
    F is not finite at the start (then nothing moves). An accepted step never lowers F: it
    passes F(θ') ≥ F(θ) + 1e-4·∇F(θ)ᵀ(θ' − θ) ≥ F(θ), halving the step up to 40 times.
    ``converged`` is True when the predicted gain fell to ``tol`` or no step could be found.
    """
    d = b.shape[1]
    m = d * (d + 1) // 2
    nt = m + 1
    const = _prior_constant(P0, h0)
    L = np.empty((d, d))
    Lt = np.empty((d, d))
    P = np.empty((d, d))
    Pt = np.empty((d, d))
    r = np.empty(d)
    gS = np.empty((d, d))
    gSt = np.empty((d, d))
    beta0 = np.empty(d)
    LP = np.empty((d, d))
    Li = np.empty((d, d))
    Phi = np.empty((d, d))
    Iv = np.empty((nt, nt))
    It = np.empty((nt, nt))
    g = np.empty(nt)
    delta = np.empty(nt)
    trial = np.empty(nt)
    mfree = np.empty(nt, dtype=np.bool_)
    _theta_to_L(theta, L)
    sigma2 = np.exp(theta[m])
    status, F, dsig = _collapsed(G, b, q, n, L, sigma2, P0, h0, const, True, Ct1, P, r, gS, beta0)
    for i in range(trace.shape[0]):
        trace[i] = np.nan
    if status != 0:
        return status, F, 0, False
    trace[0] = F
    accepted = 0
    converged = False
    for _ in range(steps):
        linalg.cholesky_lower(P, LP)
        linalg.cholesky_inverse(LP, Phi, Li)
        _fisher_vech(G, n, Ct1, Phi, sigma2, Iv)
        _theta_gradient_fisher(L, sigma2, gS, dsig, Iv, g, It)
        any_free = False
        for i in range(nt):
            mfree[i] = free[i] and not (
                (theta[i] <= lo[i] and g[i] < 0.0) or (theta[i] >= hi[i] and g[i] > 0.0)
            )
            any_free |= mfree[i]
        if not any_free:
            converged = True
            break
        _solve_free(It, g, mfree, delta)
        big = 0.0
        for i in range(nt):
            big = max(big, abs(delta[i]))
        if big > _MAX_STEP:
            for i in range(nt):
                delta[i] *= _MAX_STEP / big
        gain = 0.0
        for i in range(nt):
            gain += g[i] * delta[i]
        if not gain > tol:
            converged = True
            break
        alpha = 1.0
        took = False
        s2t, Ft, dsig_t = sigma2, F, dsig
        for _h in range(_HALVINGS):
            pred = 0.0
            for i in range(nt):
                v = theta[i] + alpha * delta[i]
                trial[i] = min(max(v, lo[i]), hi[i])
                pred += g[i] * (trial[i] - theta[i])
            _theta_to_L(trial, Lt)
            if pred > 0.0 and _sigma_within(Lt, K.SIGMA_MAX):
                s2t = np.exp(trial[m])
                st, Ft, dsig_t = _collapsed(
                    G, b, q, n, Lt, s2t, P0, h0, const, True, Ct2, Pt, r, gSt, beta0
                )
                if st == 0 and Ft >= F + _ARMIJO * pred and Ft >= F:
                    took = True
                    break
            alpha *= 0.5
        if not took:
            converged = True
            break
        for i in range(nt):
            theta[i] = trial[i]
        L, Lt = Lt, L
        P, Pt = Pt, P
        gS, gSt = gSt, gS
        Ct1, Ct2 = Ct2, Ct1
        sigma2 = s2t
        F = Ft
        dsig = dsig_t
        accepted += 1
        trace[accepted] = F
    return 0, F, accepted, converged


@njit(**_JIT)
def _count_full_rank(G, n, rank_tol):
    """(instances with a numerically full-rank G_j (as the EB step's OLS test), total rows)."""
    N, d = G.shape[0], G.shape[1]
    L = np.empty((d, d))
    M = np.empty((d, d))
    n_eff = 0
    rows = 0
    for j in range(N):
        rows += n[j]
        if n[j] >= d and linalg.full_rank_cholesky_into(G[j], rank_tol, L, M):
            n_eff += 1
    return n_eff, rows


@njit(**_JIT)
def _start_theta(Sigma, sigma2, lo, hi, theta):
    """θ of the warm start (Σ, σ²) clipped into [lo, hi]; a Σ without a Cholesky factor is
    first lifted to eigenvalues ≥ max(the floor of L_ii², 1e-12 × its mean variance)."""
    d = Sigma.shape[0]
    m = d * (d + 1) // 2
    S = np.empty((d, d))
    L = np.empty((d, d))
    for i in range(d):
        for k in range(d):
            S[i, k] = 0.5 * (Sigma[i, k] + Sigma[k, i])
    if not linalg.cholesky_lower(S, L):
        tr = 0.0
        for i in range(d):
            tr += S[i, i]
        floor = max(np.exp(2.0 * lo[0]), 1e-12 * tr / d)
        S2 = np.empty((d, d))
        K.psd_floor(S, floor, S2)
        if not linalg.cholesky_lower(S2, L):
            for i in range(d):
                for k in range(d):
                    L[i, k] = np.sqrt(max(tr / d, 1.0)) if i == k else 0.0
    u = 0
    for i in range(d):
        for k in range(i + 1):
            v = np.log(L[i, i]) if i == k else L[i, k]
            theta[u] = min(max(v, lo[u]), hi[u])
            u += 1
    theta[m] = min(max(np.log(sigma2), lo[m]), hi[m])


@njit(**_JIT)
def ml_bounds(d, eig_floor, sigma2_floor, lo, hi):
    """Bounds of θ: log L_ii ≥ ½log(max(eig_floor, 1e-30)), log σ² in
    [log sigma2_floor, log SIGMA2_MAX]; the off-diagonal entries of L are free."""
    m = d * (d + 1) // 2
    u = 0
    for i in range(d):
        for k in range(i + 1):
            if i == k:
                lo[u] = 0.5 * np.log(max(eig_floor, _MIN_DIAG2))
            else:
                lo[u] = -np.inf
            hi[u] = np.inf
            u += 1
    lo[m] = np.log(sigma2_floor)
    hi[m] = np.log(K.SIGMA2_MAX)


@njit(**_JIT)
def reestimate_arm_ml(
    G,
    b,
    q,
    n_obs,
    P0,
    h0,
    sigma2_prev,
    Sigma_prev,
    eig_floor,
    sigma2_floor,
    min_instances,
    rank_tol,
    estimate_sigma,
    estimate_noise,
    steps,
    tol,
    Sigma_out,
    Ct,
    A,
    P,
    r,
    Phi,
    beta0,
    trace,
):
    """The online type-II ML step for one arm, then its posterior (docs/maths/ebm.md §7.5).

    From the previous (Σ, σ²): up to ``steps`` Fisher-scoring steps of :func:`ml_iterate` on
    the collapsed likelihood of the arm's rows under the shared-mean prior (P0, h0); then Σ̂ is
    projected onto eigenvalues ≥ ``eig_floor`` and the posterior under (Σ̂, σ̂²) is written to
    ``Ct``, ``A``, ``P``, ``r``, ``Phi``, ``beta0`` (:func:`kernels.arm_posterior`), which also
    serve as the iteration's scratch; ``trace`` (at least ``steps`` + 1) receives the collapsed
    log-likelihood at the start and after each accepted step (NaN elsewhere). Instances
    without rows may be included or left out: they contribute nothing to the likelihood.

    Identifiability (the EB step's gates): Σ moves once at least max(``min_instances``, 2)
    instances have a full-rank design (``estimate_sigma``); σ² moves with it
    (``estimate_noise``), or alone once the arm has d + 2 rows when Σ is not estimated. Before
    that both keep their previous values.

    Returns ``(σ̂², n_eff, ok, status, F, accepted)``: n_eff instances with a full-rank design,
    ``ok`` the flag of :func:`kernels.arm_posterior`, ``status`` one of ``ML_RAN``,
    ``ML_NOT_IDENTIFIABLE`` or ``ML_FAILED`` (previous values kept), F the collapsed
    log-likelihood at the returned values (NaN unless the step ran), and the accepted steps.
    """
    d = b.shape[1]
    m = d * (d + 1) // 2
    n_eff, rows = _count_full_rank(G, n_obs, rank_tol)
    free_sigma = estimate_sigma and n_eff >= max(min_instances, 2)
    free_noise = estimate_noise and (free_sigma or (not estimate_sigma and rows >= d + 2))
    Sigma_out[:, :] = Sigma_prev
    sigma2 = sigma2_prev
    status = ML_NOT_IDENTIFIABLE
    F = np.nan
    accepted = 0
    for i in range(trace.shape[0]):
        trace[i] = np.nan
    if free_sigma or free_noise:
        lo = np.empty(m + 1)
        hi = np.empty(m + 1)
        ml_bounds(d, eig_floor, sigma2_floor, lo, hi)
        theta = np.empty(m + 1)
        if free_sigma:
            _start_theta(Sigma_prev, sigma2_prev, lo, hi, theta)
        else:
            # Σ held: θ must reproduce it exactly, so Σ's own factor is used without clipping
            _start_theta(Sigma_prev, sigma2_prev, np.full(m + 1, -np.inf), hi, theta)
            theta[m] = min(max(np.log(sigma2_prev), lo[m]), hi[m])
        free = np.empty(m + 1, dtype=np.bool_)
        for u in range(m):
            free[u] = free_sigma
        free[m] = free_noise
        st, F, accepted, _conv = ml_iterate(
            G, b, q, n_obs, P0, h0, theta, free, lo, hi, steps, tol, Ct, A, trace
        )
        if st != 0:
            status = ML_FAILED
            F = np.nan
        else:
            status = ML_RAN
            if free_sigma:
                L = np.empty((d, d))
                _theta_to_L(theta, L)
                S = L @ L.T
                K.psd_floor(S, eig_floor, Sigma_out)
                if not K._within(Sigma_out, K.SIGMA_MAX):
                    Sigma_out[:, :] = Sigma_prev
            if free_noise:
                # exp(log floor) may round below the floor
                sigma2 = min(max(np.exp(theta[m]), sigma2_floor), K.SIGMA2_MAX)
    ok = K.arm_posterior(G, b, Sigma_out, sigma2, P0, h0, Ct, A, P, r, Phi, beta0)
    return sigma2, n_eff, ok, status, F, accepted


# ------------------------------------------------------------------------------ public


class OnlineMLResult(NamedTuple):
    """Outcome of :func:`online_ml_step`.

    Attributes
    ----------
    Sigma : array (d, d)
        Σ̂ after the steps (eigenvalues ≥ ``options.eig_floor``).
    sigma2 : float
        σ̂² after the steps.
    loglik : float
        Collapsed log-likelihood log p(y | Σ̂, σ̂²) with β₀ integrated out (before Σ̂'s
        eigenvalue floor; NaN when the step did not run).
    trace : array (steps + 1,)
        The collapsed log-likelihood at the start and after each accepted step (NaN after the
        last one); non-decreasing.
    n_steps : int
        Accepted steps.
    status : str
        ``"ran"``, ``"not identifiable"`` (too few instances with a full-rank design: the
        previous values are kept) or ``"failed"`` (the likelihood could not be evaluated at
        the starting point: previous values kept).
    n_eff : int
        Instances with a full-rank design.
    """

    Sigma: np.ndarray
    sigma2: float
    loglik: float
    trace: np.ndarray
    n_steps: int
    status: str
    n_eff: int


_STATUS = {ML_RAN: "ran", ML_NOT_IDENTIFIABLE: "not identifiable", ML_FAILED: "failed"}


def online_ml_step(
    G: Any,
    b: Any,
    q: Any,
    n: Any,
    Sigma: Any,
    sigma2: float,
    *,
    lam: float = 1e-3,
    shared_prior: tuple[Any, Any] | None = None,
    steps: int = 3,
    tol: float = 0.0,
    options: EBOptions | None = None,
) -> OnlineMLResult:
    """A few warm-started Fisher-scoring steps of type-II ML for one arm's (Σ, σ²).

    Maximises the collapsed likelihood log p(y | Σ, σ²), β₀ integrated out under its prior
    (module docstring; docs/maths/ebm.md §7.5), starting from (``Sigma``, ``sigma2``): the step
    EbmTS/EbmUCB run with ``hyper_method="ml"``. Iterated to convergence (large ``steps``) it
    reaches the optimum of :func:`hierbandit.stats.fit_type2_ml` with ``beta0="integrate"``.

    Parameters
    ----------
    G, b, q, n
        Per-instance sufficient statistics of the arm: XᵀX (N, d, d), Xᵀy (N, d), yᵀy (N,) and
        row counts (N,). Instances without rows contribute nothing.
    Sigma : array (d, d)
        Starting Σ (positive semi-definite).
    sigma2 : float
        Starting σ² (> 0).
    lam : float
        Precision λ of the N(0, λ⁻¹I) prior of the shared mean (ignored with ``shared_prior``).
    shared_prior : (mean, cov), optional
        A Gaussian prior N(mean, cov) of the shared mean instead.
    steps : int
        Largest number of steps.
    tol : float
        Stop once the predicted gain of a step ∇Fᵀ Δ is at most ``tol`` (0: run until no step
        improves the likelihood or ``steps`` are done).
    options : EBOptions, optional
        The fields the step uses: ``eig_floor`` (Σ̂'s eigenvalue floor; L_ii² ≥ it during the
        steps), ``sigma2_floor``, ``min_instances_for_sigma`` and ``rank_tol`` (when Σ is
        identifiable), ``estimate_Sigma`` and ``estimate_sigma2`` (which of the two move).

    Returns
    -------
    OnlineMLResult

    Raises
    ------
    ValueError, TypeError
        For statistics of inconsistent shapes or non-finite values, a Σ that is not positive
        semi-definite, a σ² or λ that is not positive, or a bad ``steps``/``tol``.
    """
    options = options or EBOptions()
    if not isinstance(options, EBOptions):
        raise TypeError("options must be an EBOptions instance")
    G, b = _stats_arrays(G, b)
    N, d = b.shape
    if d < 1:
        raise ValueError("b must have at least one feature column (shape (N, d) with d >= 1)")
    q, n = _check_counts(q, n, N)
    Sigma = check_covariance(Sigma, d, "Sigma")
    sigma2 = check_scalar(sigma2, "sigma2", low=0.0, low_inclusive=False)
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    steps = check_positive_int(steps, "steps")
    tol = check_scalar(tol, "tol", low=0.0)
    P0, h0 = shared_prior_arrays(lam, d, shared_prior)
    Sigma_out = np.empty((d, d))
    Ct, A = np.empty((N, d, d)), np.empty((N, d, d))
    P, Phi = np.empty((d, d)), np.empty((d, d))
    r, beta0 = np.empty(d), np.empty(d)
    trace = np.empty(steps + 1)
    s2, n_eff, _, status, F, accepted = reestimate_arm_ml(
        G,
        b,
        q,
        n,
        P0,
        h0,
        float(sigma2),
        np.ascontiguousarray(Sigma, dtype=float),
        float(options.eig_floor),
        float(options.sigma2_floor),
        int(options.min_instances_for_sigma),
        float(options.rank_tol),
        bool(options.estimate_Sigma),
        bool(options.estimate_sigma2),
        int(steps),
        float(tol),
        Sigma_out,
        Ct,
        A,
        P,
        r,
        Phi,
        beta0,
        trace,
    )
    return OnlineMLResult(
        Sigma_out, float(s2), float(F), trace, int(accepted), _STATUS[int(status)], int(n_eff)
    )
