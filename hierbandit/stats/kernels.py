"""Compiled d×d kernels of the statistics core (numba, no Python objects).

Every routine works on small dense matrices (d up to a few dozen) batched over instances, where
generic batched LAPACK calls are dominated by per-call overhead. The formulas are those of the
ebm paper written in the inverse-free form (see ``docs/maths/ebm.md``):

    M_j = Σ G_j + σ² I,  Minv_j = M_j⁻¹,  C̃_j = Minv_j Σ,  A_j = σ² Minv_j,
    P = λ I + Σ_j A_jᵀ G_j / σ²,  r = Σ_j A_jᵀ b_j / σ²,  Φ = P⁻¹,  β̂₀ = Φ r,
    β̂_j = A_j β̂₀ + C̃_j b_j,  C_j = σ² C̃_j + A_j Φ A_jᵀ,

evaluated through Σ = L Lᵀ and S_j = σ²I + LᵀG_jL: C̃_j = L S_j⁻¹ Lᵀ (a Gram matrix) and
Minv_j = L S_j⁻¹ L⁻¹, so that C̃_j, Φ and every C_j are positive semi-definite by construction.

Numerical range: a Sherman–Morrison step whose denominator exceeds ``SM_LIMIT`` is replaced by
an exact refactorisation, and a Cholesky factorisation that rounding defeats (a regulariser
below the resolution of huge data) falls back to :func:`psd_inverse_floor` or
:func:`cholesky_floored`, whose floors are bounds the exact matrices satisfy. The kernels cannot
raise on finite input: every division is by a positive pivot or a checked denominator.

These kernels trust their inputs; validation lives in the public wrappers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hierbandit.stats.linalg import (
    cholesky_inverse,
    cholesky_inverse_lower,
    cholesky_lower,
    cholesky_solve_into,
    full_rank_cholesky_into,
    inv_general_into,
    psd_inverse_floor,
    psd_root,
    spd_inverse_into,
)

_JIT = {"cache": True, "nogil": True}

#: a Sherman–Morrison step of the ridge and cluster statistics with 1 + xᵀA⁻¹x above this is
#: replaced by an exact refactorisation: its relative rounding error along the update is
#: about ε times that number, here at most 2e-12
SM_LIMIT = 1e4

#: the same limit for the two Sherman–Morrison steps of the hierarchical rank-one update
#: (:func:`rank_one_update`), whose denominators reach 1e3–1e4 in ordinary runs (the
#: shared-mean step under the weak hyperprior λ = 1e-3, first rows under a large Σ̂): a
#: declined step refreshes the instance's blocks and Φ in O(d³) (:func:`observe_row`), so the
#: limit can be as strict as the ridge statistics' (at most 2e-12 of relative error per step)
EBM_SM_LIMIT = 1e4

#: largest entry of an estimated Σ̂ (the scatter of per-instance OLS estimates) and largest
#: σ̂² that are used; beyond them (or on overflow) the previous value is kept, so that every
#: product of the posterior (Σ̂ G, σ̂² C̃, C̃ b) stays far from overflow
SIGMA_MAX = 1e100
SIGMA2_MAX = 1e100

#: up to this dimension the d×d products are written as dot products, above it as row updates
#: whose contiguous inner loops vectorise (both measured on d = 3, 10 and 20)
_SMALL_D = 6


@njit(**_JIT)
def sigma_root(Sigma, L):
    """A square root L Lᵀ = Σ of a symmetric positive semi-definite Σ into ``L``: the Cholesky
    factor (returns True), or V·diag(√max(w, 0)) from the eigendecomposition when Σ is
    singular (returns False)."""
    d = Sigma.shape[0]
    return sigma_root_into(Sigma, L, np.empty((d, d)))


@njit(**_JIT)
def sigma_root_into(Sigma, L, S):
    """:func:`sigma_root` with the caller's (d, d) scratch ``S``."""
    d = Sigma.shape[0]
    for i in range(d):
        for k in range(d):
            S[i, k] = 0.5 * (Sigma[i, k] + Sigma[k, i])
    if cholesky_lower(S, L):
        return True
    w, V = np.linalg.eigh(S)
    for k in range(d):
        c = np.sqrt(w[k]) if w[k] > 0.0 else 0.0
        for i in range(d):
            L[i, k] = V[i, k] * c
    return False


@njit(**_JIT)
def _gram_factor(K, R, Lr, W, Ctj, sigma2):
    """S = K + σ²I from the lower triangle of ``K`` (made symmetric in place); if S = R Rᵀ
    factorises: W = Lr R⁻ᵀ and C̃_j = W Wᵀ (exactly symmetric), and True; else False with
    ``K`` holding S."""
    d = K.shape[0]
    for i in range(d):
        for k in range(i):
            K[k, i] = K[i, k]
        K[i, i] += sigma2
    if not cholesky_lower(K, R):
        return False
    # W = Lr R⁻ᵀ: solve W Rᵀ = Lr by forward substitution, row by row of W
    for i in range(d):
        for k in range(d):
            t = Lr[i, k]
            for m in range(k):
                t -= R[k, m] * W[i, m]
            W[i, k] = t / R[k, k]
    for i in range(d):
        for k in range(i + 1):
            t = 0.0
            for m in range(d):
                t += W[i, m] * W[k, m]
            Ctj[i, k] = t
            Ctj[k, i] = t
    return True


@njit(**_JIT)
def gram_ctilde(Gj, Lr, sigma2, Ctj, K, R, W, tri=False):
    """C̃_j = (ΣG_j + σ²I)⁻¹Σ from Σ = Lr Lrᵀ, positive semi-definite by construction
    (``K``, ``R``, ``W``: (d, d) scratch; ``tri``: ``Lr`` is lower triangular).

    With S = σ²I + Lrᵀ G_j Lr (⪰ σ²I), C̃_j = Lr S⁻¹ Lrᵀ = W Wᵀ with W = Lr R⁻ᵀ (S = R Rᵀ).
    When rounding hides σ² in S (huge G_j), S⁻¹ comes from :func:`psd_inverse_floor` with
    the floor σ² and is left in ``R``; returns False in that case (True: ``R`` holds the
    Cholesky factor of S).
    """
    d = Gj.shape[0]
    # K = Lrᵀ G Lr (lower triangle; ``tri``: Lr is lower triangular); S = σ² I + K
    for i in range(d):
        for k in range(d):
            t = 0.0
            for m in range(k if tri else 0, d):
                t += 0.5 * (Gj[i, m] + Gj[m, i]) * Lr[m, k]
            W[i, k] = t  # G Lr
    for i in range(d):
        for k in range(i + 1):
            t = 0.0
            for m in range(i if tri else 0, d):
                t += Lr[m, i] * W[m, k]
            K[i, k] = t
    if _gram_factor(K, R, Lr, W, Ctj, sigma2):
        return True
    psd_inverse_floor(K, sigma2, R)  # R = S⁻¹
    for i in range(d):
        for k in range(d):
            t = 0.0
            for m in range(d):
                t += Lr[i, m] * R[m, k]
            W[i, k] = t  # Lr S⁻¹
    for i in range(d):
        for k in range(i + 1):
            t = 0.0
            for m in range(d):
                t += W[i, m] * Lr[k, m]
            Ctj[i, k] = t
            Ctj[k, i] = t
    return False


@njit(**_JIT)
def instance_blocks(Gj, Lr, Linv, sigma2, Ctj, Minv, K, R, W):
    """C̃_j (a Gram matrix) and M_j⁻¹ = (ΣG_j + σ²I)⁻¹ of one instance, Σ = Lr Lrᵀ with Lr
    lower triangular and invertible (``Linv`` = Lr⁻¹; ``K``, ``R``, ``W``: (d, d) scratch).

    With S = σ²I + Lrᵀ G_j Lr = R Rᵀ and W = Lr R⁻ᵀ: C̃_j = W Wᵀ and
    M_j⁻¹ = Lr S⁻¹ Lr⁻¹ = W (R⁻¹ Lr⁻¹). When rounding hides σ² in S, S⁻¹ is the floored
    inverse of :func:`psd_inverse_floor` instead (see :func:`gram_ctilde`). ``G_j`` is
    symmetric (sums of outer products).
    """
    d = Gj.shape[0]
    # W = G Lr and K = Lrᵀ W + σ²I (Lr lower triangular); dot products for small d, row
    # updates (contiguous inner loops) otherwise
    if d <= _SMALL_D:
        for i in range(d):
            for k in range(d):
                t = 0.0
                for m in range(k, d):
                    t += Gj[i, m] * Lr[m, k]
                W[i, k] = t
        for i in range(d):
            for k in range(i + 1):
                t = 0.0
                for m in range(i, d):
                    t += Lr[m, i] * W[m, k]
                K[i, k] = t
    else:
        for i in range(d):
            for k in range(d):
                W[i, k] = 0.0
                K[i, k] = 0.0
            for m in range(d):
                g = Gj[i, m]
                for k in range(m + 1):
                    W[i, k] += g * Lr[m, k]
        for m in range(d):
            for i in range(m + 1):
                c = Lr[m, i]
                for k in range(i + 1):
                    K[i, k] += c * W[m, k]
    if _gram_factor(K, R, Lr, W, Ctj, sigma2):
        # K = R⁻¹ Lr⁻¹ (lower triangular; forward substitution on R K = Lr⁻¹), M⁻¹ = W K
        if d <= _SMALL_D:
            for i in range(d):
                inv = 1.0 / R[i, i]
                for k in range(i + 1):
                    t = Linv[i, k]
                    for m in range(k, i):
                        t -= R[i, m] * K[m, k]
                    K[i, k] = t * inv
            for i in range(d):
                for k in range(d):
                    t = 0.0
                    for m in range(k, d):
                        t += W[i, m] * K[m, k]
                    Minv[i, k] = t
        else:
            for i in range(d):
                for k in range(d):
                    K[i, k] = Linv[i, k] if k <= i else 0.0
                for m in range(i):
                    c = R[i, m]
                    for k in range(m + 1):
                        K[i, k] -= c * K[m, k]
                inv = 1.0 / R[i, i]
                for k in range(i + 1):
                    K[i, k] *= inv
            for i in range(d):
                for k in range(d):
                    Minv[i, k] = 0.0
                for m in range(d):
                    c = W[i, m]
                    for k in range(m + 1):
                        Minv[i, k] += c * K[m, k]
        return True
    gram_ctilde(Gj, Lr, sigma2, Ctj, K, R, W, True)  # floored S⁻¹ left in R
    for i in range(d):
        for k in range(d):
            t = 0.0
            for m in range(i + 1):
                t += Lr[i, m] * R[m, k]
            W[i, k] = t
    for i in range(d):
        for k in range(d):
            t = 0.0
            for m in range(k, d):
                t += W[i, m] * Linv[m, k]
            Minv[i, k] = t
    return False


@njit(**_JIT)
def shared_inverse(P, P0, Phi):
    """Φ = P⁻¹ (Cholesky). P = P0 + Σ_j X_jᵀV_j⁻¹X_j ⪰ P0, so when rounding makes P
    numerically singular the fallback floors the eigenvalues at λ_min(P0). Returns False then."""
    d = P.shape[0]
    return shared_inverse_into(P, P0, Phi, np.empty((d, d)), np.empty((d, d)))


@njit(**_JIT)
def shared_inverse_into(P, P0, Phi, L, Li):
    """:func:`shared_inverse` with the caller's (d, d) scratch ``L`` and ``Li``."""
    if cholesky_lower(P, L):
        cholesky_inverse(L, Phi, Li)
        return True
    w = np.linalg.eigvalsh(0.5 * (P0 + P0.T))
    psd_inverse_floor(P, w[0] if w[0] > 0.0 else 0.0, Phi)
    return False


@njit(**_JIT)
def _ct_a(Gj, Sigma, sigma2, triangular, Lr, Linv, Ctj, Aj, Minv, M, K, R, W):
    """C̃_j and A_j = σ²M_j⁻¹ of one instance into ``Ctj``, ``Aj`` (``Minv`` holds M_j⁻¹).

    Σ = Lr Lrᵀ; ``triangular`` says whether Lr is an invertible Cholesky factor (``Linv`` =
    Lr⁻¹), else Σ is singular and M_j = ΣG_j + σ²I is inverted by Gauss–Jordan.
    """
    d = Gj.shape[0]
    if triangular:
        instance_blocks(Gj, Lr, Linv, sigma2, Ctj, Minv, K, R, W)
    else:
        # singular Σ: C̃_j by gram_ctilde, M = ΣG_j + σ²I by Gauss–Jordan
        gram_ctilde(Gj, Lr, sigma2, Ctj, K, R, W, False)
        for i in range(d):
            for k in range(d):
                s = 0.0
                for m in range(d):
                    s += Sigma[i, m] * Gj[m, k]
                M[i, k] = s + (sigma2 if i == k else 0.0)
        if not inv_general_into(M, Minv, W):
            # an exactly singular pivot (σ² lost to rounding): σ²M⁻¹ = I − C̃_j G_j
            for i in range(d):
                for k in range(d):
                    s = 0.0
                    for m in range(d):
                        s += Ctj[i, m] * Gj[m, k]
                    Minv[i, k] = ((1.0 if i == k else 0.0) - s) / sigma2
    for i in range(d):
        for k in range(d):
            Aj[i, k] = sigma2 * Minv[i, k]


@njit(**_JIT)
def empty_blocks(Sigma, sigma2, Ct, A):
    """C̃ and A of an instance without data (G = 0) of one arm, exactly as
    :func:`arm_posterior` computes them, into ``Ct`` and ``A`` (d, d).

    They are Σ/σ² and I up to rounding; a newly registered instance starts from them.
    """
    d = Sigma.shape[0]
    buf = np.zeros((8, d, d))
    M, Minv, Lr, K, R, W, Linv, G0 = buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7]
    triangular = sigma_root_into(Sigma, Lr, M)
    if triangular:
        cholesky_inverse_lower(Lr, Linv)
    _ct_a(G0, Sigma, sigma2, triangular, Lr, Linv, Ct, A, Minv, M, K, R, W)


@njit(**_JIT)
def arm_posterior(G, b, Sigma, sigma2, P0, h0, Ct, A, P, r, Phi, beta0):
    """Exact two-level posterior of one arm from per-instance sufficient statistics.

    The shared mean has the Gaussian prior N(P0⁻¹h0, P0⁻¹) — the paper's N(0, λ⁻¹I) is
    P0 = λI, h0 = 0 — so P = P0 + Σ_j A_jᵀG_j/σ² and r = h0 + Σ_j A_jᵀb_j/σ².

    Fills ``Ct`` (N,d,d) = C̃_j, ``A`` (N,d,d) = A_j, ``P`` = Φ⁻¹, ``r``, ``Phi`` = Φ and
    ``beta0`` = β̂₀ in place. With Σ = Lr Lrᵀ (Cholesky) and S_j = σ²I + Lrᵀ G_j Lr ⪰ σ²I,
    C̃_j = Lr S_j⁻¹ Lrᵀ (a Gram matrix, :func:`gram_ctilde`) and A_j = σ²M_j⁻¹ with
    M_j⁻¹ = (ΣG_j + σ²I)⁻¹ = Lr S_j⁻¹ Lr⁻¹; for a singular Σ, M_j⁻¹ comes from Gauss–Jordan.
    C̃_j and Φ (:func:`shared_inverse`) are symmetric positive semi-definite by construction,
    so every posterior covariance C_j = σ²C̃_j + A_jΦA_jᵀ is too, whatever rounding does. Returns False when P
    could not be factorised (singular with an improper prior P0 = 0, or P0 below the
    resolution of the data's information) and Φ comes from the floored eigendecomposition.
    """
    N, d = b.shape
    buf = np.empty((7, d, d))  # scratch
    M, Minv, Lr, K, R, W, Linv = buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6]
    triangular = sigma_root_into(Sigma, Lr, M)
    if triangular:
        cholesky_inverse_lower(Lr, Linv)
    for i in range(d):
        r[i] = h0[i]
        for k in range(d):
            P[i, k] = P0[i, k]
    # instances without data (G_j = 0, hence b_j = 0) share one pair of blocks and add nothing
    # to P and r: computed once, copied (bit for bit what computing each would give)
    empty = np.zeros((3, d, d))
    have_empty = False
    for j in range(N):
        if _is_zero(G[j]):
            if not have_empty:
                _ct_a(
                    empty[0],
                    Sigma,
                    sigma2,
                    triangular,
                    Lr,
                    Linv,
                    empty[1],
                    empty[2],
                    Minv,
                    M,
                    K,
                    R,
                    W,
                )
                have_empty = True
            Ct[j] = empty[1]
            A[j] = empty[2]
            continue
        _ct_a(G[j], Sigma, sigma2, triangular, Lr, Linv, Ct[j], A[j], Minv, M, K, R, W)
        _add_terms(Minv, G[j], b[j], P, r)
    return _shared_solve(P, P0, Phi, r, beta0, R, W)


@njit(**_JIT)
def _is_zero(Gj):
    """Every entry of a (d, d) block is 0."""
    for i in range(Gj.shape[0]):
        for k in range(Gj.shape[1]):
            if Gj[i, k] != 0.0:
                return False
    return True


@njit(**_JIT)
def _add_terms(Minv, Gj, bj, P, r):
    """P += M_j⁻ᵀ G_j, r += M_j⁻ᵀ b_j (instance j's terms; A_jᵀ/σ² = M_j⁻ᵀ)."""
    d = bj.shape[0]
    for i in range(d):
        s = 0.0
        for m in range(d):
            s += Minv[m, i] * bj[m]
        r[i] += s
    if d <= _SMALL_D:
        for i in range(d):
            for k in range(d):
                s = 0.0
                for m in range(d):
                    s += Minv[m, i] * Gj[m, k]
                P[i, k] += s
    else:
        for m in range(d):
            for i in range(d):
                c = Minv[m, i]
                for k in range(d):
                    P[i, k] += c * Gj[m, k]


@njit(**_JIT)
def _shared_solve(P, P0, Phi, r, beta0, L, Li):
    """Symmetrise P, Φ = P⁻¹ (:func:`shared_inverse_into`, scratch ``L``, ``Li``) and
    β̂₀ = Φr. Returns the inverse's flag."""
    d = r.shape[0]
    for i in range(d):
        for k in range(i):
            v = 0.5 * (P[i, k] + P[k, i])
            P[i, k] = v
            P[k, i] = v
    ok = shared_inverse_into(P, P0, Phi, L, Li)
    for i in range(d):
        s = 0.0
        for k in range(d):
            s += Phi[i, k] * r[k]
        beta0[i] = s
    return ok


@njit(**_JIT)
def shared_resolve(P, P0, r, Phi, beta0):
    """Φ = P⁻¹ and β̂₀ = Φr re-solved from the arm's sums P and r (:func:`_shared_solve`,
    O(d³)): what an arm's incremental Sherman–Morrison updates of Φ approximate, without
    their accumulated rounding. Returns the inverse's flag."""
    d = r.shape[0]
    buf = np.empty((2, d, d))
    return _shared_solve(P, P0, Phi, r, beta0, buf[0], buf[1])


@njit(**_JIT)
def instance_moments_root(Ct, A, b, beta0, PhiRoot, sigma2, mean, cov):
    """β̂_j = A β̂₀ + C̃ b and C_j = σ² C̃ + (AF)(AF)ᵀ for one (arm, instance), F Fᵀ = Φ.

    Both terms are positive semi-definite by construction (C̃ is kept so, and the second is a
    Gram matrix), so C_j is whatever the conditioning of A and Φ.
    """
    d = b.shape[0]
    AF = np.empty((d, d))
    for i in range(d):
        s = 0.0
        for k in range(d):
            s += A[i, k] * beta0[k] + Ct[i, k] * b[k]
        mean[i] = s
        for k in range(d):
            s = 0.0
            for m in range(d):
                s += A[i, m] * PhiRoot[m, k]
            AF[i, k] = s
    for i in range(d):
        for k in range(i + 1):
            s = 0.0
            for m in range(d):
                s += AF[i, m] * AF[k, m]
            v = sigma2 * 0.5 * (Ct[i, k] + Ct[k, i]) + s
            cov[i, k] = v
            cov[k, i] = v


@njit(**_JIT)
def instance_moments(Ct, A, b, beta0, Phi, sigma2, mean, cov):
    """β̂_j = A β̂₀ + C̃ b and C_j = σ² C̃ + A Φ Aᵀ for one (arm, instance)
    (:func:`instance_moments_root` with a square root of Φ)."""
    d = b.shape[0]
    F = np.empty((d, d))
    psd_root(Phi, F)
    instance_moments_root(Ct, A, b, beta0, F, sigma2, mean, cov)


@njit(**_JIT)
def all_moments(Ct, A, b, beta0, Phi, sigma2, mean, cov):
    """``instance_moments`` for every (arm, instance): arrays with leading (K, N) axes."""
    K, N = b.shape[0], b.shape[1]
    d = b.shape[2]
    F = np.empty((d, d))
    for k in range(K):
        psd_root(Phi[k], F)
        for j in range(N):
            instance_moments_root(
                Ct[k, j], A[k, j], b[k, j], beta0[k], F, sigma2[k], mean[k, j], cov[k, j]
            )


@njit(**_JIT)
def score_arms(x, j, Ct, A, b, beta0, Phi, sigma2, literal_44, mu, tau):
    """Predicted mean μ̂ (5.1) and posterior sd τ (5.2) of every arm for instance ``j``
    (:func:`score_at` for each arm)."""
    K = b.shape[0]
    u = np.empty(x.shape[0])
    for k in range(K):
        mu[k], tau[k] = score_at(x, Ct, A, b, beta0, Phi, sigma2, k, j, literal_44, u)


@njit(**_JIT)
def score_requests(X, J, Ct, A, b, beta0, Phi, sigma2, Ct0, A0, literal_44, MU, TAU):
    """:func:`score_arms` for B requests: row i scores instance ``J[i]`` with context ``X[i]``
    into ``MU[i]``, ``TAU[i]``; ``J[i] = -1`` is an instance without state, scored from the
    empty-instance blocks ``Ct0[k]``, ``A0[k]`` (:func:`empty_blocks`) and b = 0."""
    B = X.shape[0]
    Kn = Ct.shape[0]
    d = X.shape[1]
    u = np.empty(d)
    # the empty-instance blocks as a one-instance state (b = 0)
    Ct0v = np.ascontiguousarray(Ct0).reshape((Kn, 1, d, d))
    A0v = np.ascontiguousarray(A0).reshape((Kn, 1, d, d))
    b0 = np.zeros((Kn, 1, d))
    for i in range(B):
        j = J[i]
        x = X[i]
        for k in range(Kn):
            if j >= 0:
                MU[i, k], TAU[i, k] = score_at(x, Ct, A, b, beta0, Phi, sigma2, k, j, literal_44, u)
            else:
                MU[i, k], TAU[i, k] = score_at(
                    x, Ct0v, A0v, b0, beta0, Phi, sigma2, k, 0, literal_44, u
                )


@njit(**_JIT)
def score_at(x, Ct, A, b, beta0, Phi, sigma2, k, j, literal_44, u):
    """μ̂ (5.1) and τ (5.2) of (arm k, instance j) from C̃, A and b (``u``: scratch (d,)).

    τ² = σ² xᵀC̃x + (Aᵀx)ᵀ Φ (Aᵀx), which never forms C_j. With ``literal_44`` the mean is the
    paper's printed (4.4), xᵀ(A β̂₀ + C̃ b)/σ², kept only to document the typo. The blocks are
    read in place from the (K, N, ...) arrays: slicing a view per (request, arm) cost more than
    the algebra (1.0·10⁶ against 2.4·10⁶ decisions per second at K = 5, d = 3)."""
    d = x.shape[0]
    m = 0.0
    q = 0.0
    for i in range(d):
        ci = 0.0
        ui = 0.0
        bi = 0.0
        for m_ in range(d):
            ci += Ct[k, j, i, m_] * x[m_]
            ui += A[k, j, m_, i] * x[m_]
            bi += A[k, j, i, m_] * beta0[k, m_] + Ct[k, j, i, m_] * b[k, j, m_]
        u[i] = ui
        m += x[i] * bi
        q += x[i] * ci
    v = sigma2[k] * q
    for i in range(d):
        s = 0.0
        for m_ in range(d):
            s += Phi[k, i, m_] * u[m_]
        v += u[i] * s
    mu = m / sigma2[k] if literal_44 else m
    tau = np.sqrt(v) if v > 0.0 else 0.0
    return mu, tau


@njit(**_JIT)
def rank_one_update(x, y, Gj, bj, Ctj, Aj, P, r, Phi, beta0, sigma2):
    """Add one observation to instance j of an arm with the hyperparameters held fixed.

    :func:`_sherman_morrison`; when it declines, only ``Gj`` and ``bj`` are updated and False
    is returned: the caller must then recompute the arm from its sufficient statistics
    (:func:`observe_row` refreshes instance j alone instead).
    """
    if _sherman_morrison(x, y, Gj, bj, Ctj, Aj, P, r, Phi, beta0, sigma2):
        return True
    _add_row(x, y, Gj, bj)
    return False


@njit(**_JIT)
def _add_row(x, y, Gj, bj):
    """G_j += xxᵀ, b_j += xy."""
    d = x.shape[0]
    for i in range(d):
        bj[i] += x[i] * y
        for m in range(d):
            Gj[i, m] += x[i] * x[m]


@njit(**_JIT)
def sherman_morrison_at(x, y, G, b, Ct, A, P, r, Phi, beta0, sigma2, k, j, buf):
    """Rank-one update of (arm k, instance j), hyperparameters held fixed, read and written in
    place in the (K, N, ...) statistics and blocks and the (K, ...) shared arrays (slicing views
    per row cost more than the algebra); ``sigma2`` is arm k's σ², ``buf`` a (5, d) scratch
    (an allocation per row cost as much as the step).

    Sherman–Morrison on C̃_j and A_j, a rank-one increment of P = Φ⁻¹ (Lemma D.3 of the ebm
    paper, in the corrected form (I + vvᵀ)⁻¹ = I − vvᵀ/(1 + vᵀv)), Sherman–Morrison on Φ, and the
    change of instance j's term in r. Updates G and b too. O(d²).

    Both Sherman–Morrison steps subtract a rank-one term that cancels all but a fraction 1/s of
    the matrix along the update (s = 1 + xᵀC̃_jx, resp. the denominator of the Φ step). When
    either s is above ``EBM_SM_LIMIT`` (or not ≥ 1/2) nothing is changed and False is returned.
    """
    d = x.shape[0]
    cx, ax, u, Pu, old_r = buf[0], buf[1], buf[2], buf[3], buf[4]
    s = 1.0
    for i in range(d):
        c = 0.0
        a = 0.0
        for m in range(d):
            c += Ct[k, j, i, m] * x[m]
            a += A[k, j, m, i] * x[m]
        cx[i] = c
        ax[i] = a
    for i in range(d):
        s += x[i] * cx[i]
    # u = Aᵀx / σ² (with the pre-update A), the Φ step's vector and denominator
    for i in range(d):
        u[i] = ax[i] / sigma2
    uPu = 0.0
    for i in range(d):
        t = 0.0
        for m in range(d):
            t += Phi[k, i, m] * u[m]
        Pu[i] = t
        uPu += u[i] * t
    good = 0.5 <= s <= EBM_SM_LIMIT
    if good:
        c = sigma2 / s
        den = 1.0 + c * uPu
        good = 0.5 <= den <= EBM_SM_LIMIT
    if not good:
        return False
    # old contribution of instance j to r: A_jᵀ b_j / σ²
    for i in range(d):
        t = 0.0
        for m in range(d):
            t += A[k, j, m, i] * b[k, j, m]
        old_r[i] = t / sigma2
    # sufficient statistics
    for i in range(d):
        b[k, j, i] += x[i] * y
        for m in range(d):
            G[k, j, i, m] += x[i] * x[m]
    # C̃ ← C̃ − c̃x c̃xᵀ / s (one triangle, mirrored) ;  A ← A − c̃x (Aᵀx)ᵀ / s
    for i in range(d):
        for m in range(d):
            if m >= i:
                v = Ct[k, j, i, m] - cx[i] * cx[m] / s
                Ct[k, j, i, m] = v
                Ct[k, j, m, i] = v
            A[k, j, i, m] -= cx[i] * ax[m] / s
    # P += (σ²/s) u uᵀ ; Φ by Sherman–Morrison (one triangle, mirrored)
    for i in range(d):
        for m in range(d):
            P[k, i, m] += c * u[i] * u[m]
    for i in range(d):
        for m in range(i, d):
            v = Phi[k, i, m] - c * Pu[i] * Pu[m] / den
            Phi[k, i, m] = v
            Phi[k, m, i] = v
    for i in range(d):
        t = 0.0
        for m in range(d):
            t += A[k, j, m, i] * b[k, j, m]
        r[k, i] += t / sigma2 - old_r[i]
    for i in range(d):
        t = 0.0
        for m in range(d):
            t += Phi[k, i, m] * r[k, m]
        beta0[k, i] = t
    return True


@njit(**_JIT)
def _sherman_morrison(x, y, Gj, bj, Ctj, Aj, P, r, Phi, beta0, sigma2):
    """:func:`sherman_morrison_at` on one instance's blocks and one arm's shared arrays
    (contiguous arrays, viewed as a one-arm, one-instance state)."""
    d = x.shape[0]
    return sherman_morrison_at(
        x,
        y,
        Gj.reshape((1, 1, d, d)),
        bj.reshape((1, 1, d)),
        Ctj.reshape((1, 1, d, d)),
        Aj.reshape((1, 1, d, d)),
        P.reshape((1, d, d)),
        r.reshape((1, d)),
        Phi.reshape((1, d, d)),
        beta0.reshape((1, d)),
        sigma2,
        0,
        0,
        np.empty((5, d)),
    )


@njit(**_JIT)
def refresh_instance(x, y, Gj, bj, Ctj, Aj, P, r, Phi, beta0, Sigma, sigma2, P0):
    """Add one observation to instance j of an arm by recomputing its blocks, O(d³).

    Instance j's terms A_jᵀG_j/σ² and A_jᵀb_j/σ² leave P and r, the row enters ``Gj``/``bj``,
    C̃_j and A_j are recomputed from G_j as :func:`arm_posterior` does (:func:`_ct_a`), their
    terms enter P and r, and Φ = P⁻¹, β̂₀ = Φr. In exact arithmetic this is the arm's posterior
    recomputed from its statistics, without visiting the other instances: the step that
    replaces a declined Sherman–Morrison update, so that no single row costs O(N). Every
    term of P lies between 0 and Σ⁻¹ and grows with the data, so removing the old one loses
    no more than rounding of its own size. Returns False when P had to be floored
    (:func:`shared_inverse`).
    """
    d = x.shape[0]
    buf = np.empty((7, d, d))
    M, Minv, Lr, Kb, R, W, Linv = buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6]
    for i in range(d):
        s = 0.0
        for m in range(d):
            s += Aj[m, i] * bj[m]
        r[i] -= s / sigma2
        for k in range(d):
            s = 0.0
            for m in range(d):
                s += Aj[m, i] * Gj[m, k]
            P[i, k] -= s / sigma2
    _add_row(x, y, Gj, bj)
    triangular = sigma_root_into(Sigma, Lr, M)
    if triangular:
        cholesky_inverse_lower(Lr, Linv)
    _ct_a(Gj, Sigma, sigma2, triangular, Lr, Linv, Ctj, Aj, Minv, M, Kb, R, W)
    _add_terms(Minv, Gj, bj, P, r)
    return _shared_solve(P, P0, Phi, r, beta0, R, W)


@njit(**_JIT)
def observe_row(x, y, Gj, bj, Ctj, Aj, P, r, Phi, beta0, Sigma, sigma2, P0):
    """One observation of instance j of an arm, hyperparameters held fixed: the O(d²)
    Sherman–Morrison step, or :func:`refresh_instance` (O(d³)) where it is ill-conditioned.
    Returns True for the rank-one step."""
    if _sherman_morrison(x, y, Gj, bj, Ctj, Aj, P, r, Phi, beta0, sigma2):
        return True
    refresh_instance(x, y, Gj, bj, Ctj, Aj, P, r, Phi, beta0, Sigma, sigma2, P0)
    return False


# ---------------------------------------------------------------------- empirical Bayes


@njit(**_JIT)
def ols_all(G, b, ridge, rank_tol, B, ok):
    """Per-instance OLS β̂ = (G + ridge I)⁻¹ b where G itself is numerically full rank.

    ``ok[j]`` is :func:`full_rank_cholesky` of G_j. The ridge (``ols_ridge``, docs/decisions/ebm.md
    A2) only regularises the solve; it never makes a rank-deficient instance (T_j < d) count.
    """
    N, d = b.shape
    Gr = np.empty((d, d))
    L = np.empty((d, d))
    z = np.empty(d)
    for j in range(N):
        ok[j] = full_rank_cholesky_into(G[j], rank_tol, L, Gr)
        if not ok[j]:
            continue
        if ridge > 0.0:
            for i in range(d):
                for k in range(d):
                    Gr[i, k] = 0.5 * (G[j, i, k] + G[j, k, i]) + (ridge if i == k else 0.0)
            cholesky_lower(Gr, L)
        cholesky_solve_into(L, b[j], B[j], z)


@njit(**_JIT)
def _norm_factor(n, normalization):
    # 0 = "n-1", 1 = "n", 2 = "none"
    if normalization == 0:
        return 1.0 / (n - 1) if n > 1 else 1.0
    if normalization == 1:
        return 1.0 / n
    return 1.0


@njit(**_JIT)
def scatter_cov(B, idx, normalization, S):
    """Normalised scatter Σ_j β_jβ_jᵀ − (1/n)(Σβ)(Σβ)ᵀ over the rows ``idx`` of B (paper §4.3)."""
    n = idx.shape[0]
    d = B.shape[1]
    mean = np.zeros(d)
    for t in range(n):
        for i in range(d):
            mean[i] += B[idx[t], i]
    for i in range(d):
        mean[i] /= n
    f = _norm_factor(n, normalization)
    for i in range(d):
        for k in range(i + 1):
            s = 0.0
            for t in range(n):
                s += (B[idx[t], i] - mean[i]) * (B[idx[t], k] - mean[k])
            S[i, k] = s * f
            S[k, i] = s * f


@njit(**_JIT)
def threshold_loss(S1, S2, gamma, threshold_diagonal):
    """‖T_γ(S1) − S2‖²_F with hard thresholding (the diagonal kept unless asked otherwise)."""
    d = S1.shape[0]
    loss = 0.0
    for i in range(d):
        for k in range(d):
            v = S1[i, k]
            if (i != k or threshold_diagonal) and abs(v) < gamma:
                v = 0.0
            e = v - S2[i, k]
            loss += e * e
    return loss


@njit(**_JIT)
def threshold_grid(S, threshold_diagonal):
    """Candidate thresholds {0} ∪ {|s_il|} ∪ {∞} in increasing order (i < l; diagonal too if
    thresholded).

    Entries with |s| ≥ γ are kept, so γ = |s_il| keeps s_il; the final candidate ∞ zeroes every
    thresholdable entry (a diagonal Σ̂ when the diagonal is kept), which the paper's rule must be
    able to choose.
    """
    d = S.shape[0]
    m = d * (d - 1) // 2 + (d if threshold_diagonal else 0)
    vals = np.empty(m + 2)
    vals[0] = 0.0
    vals[m + 1] = np.inf
    c = 1
    for i in range(d):
        for k in range(i + 1 if not threshold_diagonal else i, d):
            vals[c] = abs(S[i, k])
            c += 1
    return np.unique(vals)


@njit(**_JIT)
def bickel_levina_cv(B, normalization, threshold_diagonal, uniforms, grid, risk):
    """Random-split cross-validation of the hard threshold (Bickel & Levina 2008, §4).

    ``B`` holds the n usable OLS vectors; split r puts the n₂ = ⌊n / log n⌋ rows with the smallest
    ``uniforms[r, :n]`` in the validation half (``uniforms`` may have more columns, one per instance
    of the arm, of which the first n are used; ties go to the smaller index, as in a stable
    ``argsort(uniforms[r, :n])``). ``risk[g]`` receives the mean Frobenius loss
    ‖T_γ(Ŝ₁) − Ŝ₂‖²_F of threshold ``grid[g]``. Returns the index of the smallest threshold
    attaining the minimum, or 0 (no thresholding) when either half would hold fewer than two
    vectors.

    All splits from one table: row t of Z holds the centred vector β_t and the upper triangle of
    β_tβ_tᵀ; a split's validation sums add the rows of Z its stable sort of the uniforms puts
    first (O(n log n + n₂ m) per split, so thousands of instances cost milliseconds); the training
    half's sums are the totals over all rows minus the validation half's. The risk over the grid is accumulated
    per matrix entry as a step function of γ: the entry's "keep" loss below its first grid point
    above |a₁|, its "drop" loss from there on.
    """
    n, d = B.shape
    G = grid.shape[0]
    for g in range(G):
        risk[g] = 0.0
    if n < 2:
        return 0
    n2 = int(np.floor(n / np.log(n)))
    n1 = n - n2
    if n1 < 2 or n2 < 2:
        return 0
    m = d + d * (d + 1) // 2
    # centre the rows (covariances are shift invariant; this avoids cancellation below)
    Z = np.empty((n, m))
    for i in range(d):
        mu = 0.0
        for t in range(n):
            mu += B[t, i]
        mu /= n
        for t in range(n):
            Z[t, i] = B[t, i] - mu
    for t in range(n):
        c = d
        for i in range(d):
            for k in range(i, d):
                Z[t, c] = Z[t, i] * Z[t, k]
                c += 1
    tot = np.zeros(m)
    for t in range(n):
        for j in range(m):
            tot[j] += Z[t, j]
    R = uniforms.shape[0]
    V = np.zeros((R, m))  # validation sums of every split
    for rr in range(R):
        # a stable sort: an equal entry with a smaller index ranks first
        order = np.argsort(uniforms[rr, :n], kind="mergesort")
        for s in range(n2):
            t = order[s]
            for j in range(m):
                V[rr, j] += Z[t, j]
    f1 = _norm_factor(n1, normalization)
    f2 = _norm_factor(n2, normalization)
    # step[g]: change of the risk at grid point g (the drop-minus-keep losses of the entries
    # whose first grid point above |a₁| is g); base: the sum of the keep losses
    step = np.zeros(G + 1)
    base = 0.0
    for rr in range(R):
        c = d
        for i in range(d):
            s2i = V[rr, i]
            s1i = tot[i] - s2i
            for k in range(i, d):
                s2k = V[rr, k]
                s1k = tot[k] - s2k
                a1 = (tot[c] - V[rr, c] - s1i * s1k / n1) * f1
                a2 = (V[rr, c] - s2i * s2k / n2) * f2
                c += 1
                w = 1.0 if i == k else 2.0
                e_keep = (a1 - a2) * (a1 - a2) * w
                base += e_keep
                if i != k or threshold_diagonal:
                    # the entry is zeroed at every grid point γ > |a₁|
                    aa = abs(a1)
                    g = 0
                    for gg in range(G):
                        g += not aa < grid[gg]
                    step[g] += a2 * a2 * w - e_keep
    acc = base
    best = 0
    for g in range(G):
        acc += step[g]
        risk[g] = acc / R
        if risk[g] < risk[best]:
            best = g
    return best


@njit(**_JIT)
def apply_threshold(S, gamma, threshold_diagonal, out):
    d = S.shape[0]
    for i in range(d):
        for k in range(d):
            v = S[i, k]
            if (i != k or threshold_diagonal) and abs(v) < gamma:
                v = 0.0
            out[i, k] = v


@njit(**_JIT)
def psd_floor(S, eig_floor, out):
    """Project a symmetric matrix onto {eigenvalues ≥ eig_floor} (spectral clipping)."""
    d = S.shape[0]
    Ss = 0.5 * (S + S.T)
    w, V = np.linalg.eigh(Ss)
    for i in range(d):
        if w[i] < eig_floor:
            w[i] = eig_floor
    for i in range(d):
        for k in range(i + 1):
            s = 0.0
            for m in range(d):
                s += V[i, m] * w[m] * V[k, m]
            out[i, k] = s
            out[k, i] = s


@njit(**_JIT)
def _within(S, bound):
    """Every entry of ``S`` is finite and at most ``bound`` in magnitude."""
    for i in range(S.shape[0]):
        for k in range(S.shape[1]):
            if not abs(S[i, k]) <= bound:
                return False
    return True


@njit(**_JIT)
def estimate_Sigma(
    G,
    b,
    sigma2,
    ridge,
    rank_tol,
    normalization,
    threshold_mode,
    gamma_fixed,
    threshold_diagonal,
    eig_floor,
    min_instances,
    debias,
    cv_rng,
    cv_splits,
    Sigma_prev,
    Sigma_out,
):
    """Thresholded covariance of the per-instance OLS estimates (ebm §4.3).

    See docs/maths/ebm.md §7.2–7.3.

    ``threshold_mode``: 0 = cross-validated, 1 = fixed ``gamma_fixed``, 2 = none. The
    cross-validation draws its ``cv_splits`` × n_eff uniforms from ``cv_rng`` (one per split
    and instance used), and only when it runs.
    Returns (gamma, n_eff); when fewer than ``min_instances`` instances have full-rank data,
    or when the scatter has an entry beyond ``SIGMA_MAX`` in magnitude (or not finite),
    ``Sigma_prev`` is copied to ``Sigma_out`` and gamma is NaN.
    """
    N, d = b.shape
    B = np.empty((N, d))
    ok = np.empty(N, dtype=np.bool_)
    ols_all(G, b, ridge, rank_tol, B, ok)
    n_eff = 0
    for j in range(N):
        if ok[j]:
            n_eff += 1
    if n_eff < max(min_instances, 2):
        Sigma_out[:, :] = Sigma_prev
        return np.nan, n_eff
    Be = np.empty((n_eff, d))
    c = 0
    idx_eff = np.empty(n_eff, dtype=np.int64)
    for j in range(N):
        if ok[j]:
            Be[c] = B[j]
            idx_eff[c] = j
            c += 1
    S = np.empty((d, d))
    scatter_cov(Be, np.arange(n_eff), normalization, S)
    if not _within(S, SIGMA_MAX):
        # the OLS estimates' scatter is beyond what the posterior can carry (or overflowed):
        # Σ̂ is not estimable in float64, keep the previous value
        Sigma_out[:, :] = Sigma_prev
        return np.nan, n_eff
    gamma = 0.0
    if threshold_mode == 1:
        gamma = gamma_fixed
    elif threshold_mode == 0:
        # the threshold is cross-validated on the plain covariance of the OLS vectors
        grid = threshold_grid(S, threshold_diagonal)
        risk = np.empty(grid.shape[0])
        uniforms = cv_rng.random((cv_splits, n_eff))
        gamma = grid[bickel_levina_cv(Be, normalization, threshold_diagonal, uniforms, grid, risk)]
    if debias:
        # subtract σ̂² · mean_j G_j⁻¹ (method-of-moments correction of the OLS sampling noise)
        Gr = np.empty((d, d))
        Gi = np.empty((d, d))
        L = np.empty((d, d))
        Li = np.empty((d, d))
        for t in range(n_eff):
            j = idx_eff[t]
            for i in range(d):
                for k in range(d):
                    Gr[i, k] = G[j, i, k] + (ridge if i == k else 0.0)
            spd_inverse_into(Gr, Gi, L, Li)
            for i in range(d):
                for k in range(d):
                    S[i, k] -= sigma2 * Gi[i, k] / n_eff
    if not _within(S, SIGMA_MAX):
        Sigma_out[:, :] = Sigma_prev
        return np.nan, n_eff
    T = np.empty((d, d))
    apply_threshold(S, gamma, threshold_diagonal, T)
    psd_floor(T, eig_floor, Sigma_out)
    return gamma, n_eff


@njit(**_JIT)
def residual_sum_of_squares(G, b, q, mean):
    """Σ_j ‖y_j − X_j β̂_j‖² = Σ_j q_j − 2 β̂_jᵀ b_j + β̂_jᵀ G_j β̂_j (each term clipped at 0)."""
    N, d = b.shape
    total = 0.0
    for j in range(N):
        s = q[j]
        for i in range(d):
            s -= 2.0 * mean[j, i] * b[j, i]
            t = 0.0
            for k in range(d):
                t += G[j, i, k] * mean[j, k]
            s += mean[j, i] * t
        if s > 0.0:
            total += s
    return total


@njit(**_JIT)
def posterior_means(Ct, A, b, beta0, mean):
    """β̂_j = A_j β̂₀ + C̃_j b_j for every instance of one arm."""
    N, d = b.shape
    for j in range(N):
        for i in range(d):
            s = 0.0
            for k in range(d):
                s += A[j, i, k] * beta0[k] + Ct[j, i, k] * b[j, k]
            mean[j, i] = s


@njit(**_JIT)
def estimate_sigma2(G, b, q, n_obs, mean, sigma2_prev, sigma2_floor, used_df=-1.0):
    """Pooled residual variance of the ebm paper (§4.3) with the guards of docs/maths/ebm.md §7.1.

    ``used_df < 0`` (the paper): Σ_j RSS_j / max(Σ_j T_j − d − 1, 1), the previous value kept
    until Σ_j T_j ≥ d + 2. ``used_df ≥ 0``: Σ_j RSS_j / (Σ_j T_j − used_df), the previous value
    kept while that leaves less than one degree of freedom (``used_df`` is the trace of the
    fit's hat matrix, :func:`hat_trace`). The previous value is also kept when the value is
    beyond ``SIGMA2_MAX`` (or overflowed).
    """
    d = b.shape[1]
    total_n = 0
    for j in range(n_obs.shape[0]):
        total_n += n_obs[j]
    if used_df < 0.0:
        if total_n < d + 2:
            return sigma2_prev
        dof = float(max(total_n - d - 1, 1))
    else:
        dof = total_n - used_df
        if not dof >= 1.0:
            return sigma2_prev
    rss = residual_sum_of_squares(G, b, q, mean)
    val = rss / dof
    if not val <= SIGMA2_MAX:  # overflow (huge rewards against tiny contexts): not estimable
        return sigma2_prev
    return max(val, sigma2_floor)


@njit(**_JIT)
def hat_trace(G, Ct, A, Phi, sigma2):
    """Trace of the hat matrix of one arm's posterior means (their degrees of freedom).

    The fitted rows of instance j are X_jβ̂_j with β̂_j = C̃_j b_j + A_jβ̂₀ and
    β̂₀ = Φ(h₀ + Σ_l A_lᵀb_l/σ²), so ∂ŷ_j/∂y_j = X_jC̃_jX_jᵀ + X_jA_jΦA_jᵀX_jᵀ/σ² and the trace
    is Σ_j tr(C̃_jG_j) + tr(Φ Σ_j A_jᵀG_jA_j)/σ² (docs/decisions/ebm.md A9). Between 0 and
    the number of rows; with σ² → 0 it tends to Σ_j rank(G_j) plus the shared mean's share.
    """
    N, d = G.shape[0], G.shape[2]
    tr = 0.0
    Q = np.zeros((d, d))
    GA = np.empty((d, d))
    for j in range(N):
        for i in range(d):
            for k in range(d):
                tr += Ct[j, i, k] * G[j, k, i]
        for i in range(d):
            for k in range(d):
                t = 0.0
                for m in range(d):
                    t += G[j, i, m] * A[j, m, k]
                GA[i, k] = t
        for i in range(d):
            for k in range(d):
                t = 0.0
                for m in range(d):
                    t += A[j, m, i] * GA[m, k]
                Q[i, k] += t
    s = 0.0
    for i in range(d):
        for k in range(d):
            s += Phi[i, k] * Q[k, i]
    return tr + s / sigma2


@njit(**_JIT)
def reestimate_arm(
    G,
    b,
    q,
    n_obs,
    P0,
    h0,
    sigma2_prev,
    Sigma_prev,
    ridge,
    rank_tol,
    normalization,
    threshold_mode,
    gamma_fixed,
    threshold_diagonal,
    eig_floor,
    min_instances,
    debias,
    cv_rng,
    cv_splits,
    sigma2_floor,
    eb_iters,
    estimate_sigma,
    estimate_noise,
    sigma2_df,
    Sigma_out,
    Ct,
    A,
    P,
    r,
    Phi,
    beta0,
):
    """One empirical-Bayes step for one arm (docs/maths/ebm.md §7.4).

    Σ̂, then σ̂² from the posterior means under (Σ̂, previous σ̂²), then the posterior under
    (Σ̂, σ̂²). ``sigma2_df``: 0 divides the residuals by the rows less the fit's degrees of
    freedom (:func:`hat_trace`), 1 by the rows less d + 1 (the paper). Returns
    (σ̂², γ, n_eff, ok).
    """
    N, d = b.shape
    gamma = np.nan
    n_eff = 0
    if estimate_sigma:
        gamma, n_eff = estimate_Sigma(
            G,
            b,
            sigma2_prev,
            ridge,
            rank_tol,
            normalization,
            threshold_mode,
            gamma_fixed,
            threshold_diagonal,
            eig_floor,
            min_instances,
            debias,
            cv_rng,
            cv_splits,
            Sigma_prev,
            Sigma_out,
        )
    else:
        Sigma_out[:, :] = Sigma_prev
    sigma2 = sigma2_prev
    ok = True
    if estimate_noise:
        mean = np.empty((N, d))
        for _ in range(eb_iters):
            ok &= arm_posterior(G, b, Sigma_out, sigma2, P0, h0, Ct, A, P, r, Phi, beta0)
            posterior_means(Ct, A, b, beta0, mean)
            used = hat_trace(G, Ct, A, Phi, sigma2) if sigma2_df == 0 else -1.0
            sigma2 = estimate_sigma2(G, b, q, n_obs, mean, sigma2, sigma2_floor, used)
    ok &= arm_posterior(G, b, Sigma_out, sigma2, P0, h0, Ct, A, P, r, Phi, beta0)
    return sigma2, gamma, n_eff, ok


@njit(**_JIT)
def conditional_draws(G, b, Sigma, sig2, P0, h0, beta0_in, have_beta0, z0, Z, beta0_out, beta_out):
    """Exact draws of the shared and instance coefficients given hyperparameter draws.

    ``Sigma`` (C, D, K, d, d) and ``sig2`` (C, D, K) are posterior draws; for each draw and arm the
    closed form gives β₀ | Σ, σ², y ~ N(β̂₀, Φ) (used unless ``have_beta0``, when ``beta0_in`` holds
    sampled values) and β_j | β₀, Σ, σ², y ~ N(A_jβ₀ + C̃_jb_j, σ²C̃_j). ``z0`` (C, D, K, d) and
    ``Z`` (C, D, K, N, d) are standard normal variates.
    """
    C_, D_, Kn = sig2.shape
    N, d = b.shape[1], b.shape[2]
    Ct = np.empty((N, d, d))
    A = np.empty((N, d, d))
    for c in range(C_):
        for t in range(D_):
            for k in range(Kn):
                _draw_arm_scalar(
                    G[k], b[k], Sigma[c, t, k], sig2[c, t, k], P0, h0, beta0_in[c, t, k],
                    have_beta0, z0[c, t, k], Z[c, t, k], beta0_out[c, t, k], beta_out[c, t, k],
                    Ct, A,
                )  # fmt: skip


@njit(**_JIT)
def _jittered_cholesky(C, scale, S, L):
    """Cholesky factor of scale·C (symmetrised), with a growing jitter if it is not numerically PD."""
    d = C.shape[0]
    tr = 0.0
    for i in range(d):
        tr += C[i, i]
    jitter = 0.0
    for _ in range(8):
        for i in range(d):
            for m in range(d):
                S[i, m] = scale * 0.5 * (C[i, m] + C[m, i]) + (jitter if i == m else 0.0)
        if cholesky_lower(S, L):
            return
        jitter = max(jitter * 100.0, 1e-12 * scale * max(tr, 1e-300))
    for i in range(d):
        for m in range(d):
            L[i, m] = 0.0


@njit(**_JIT)
def _draw_shared(Phi, m0, have_beta0, b0_given, z0, b0_out, S, L):
    """β₀ = β̂₀ + chol(Φ) z₀ into ``b0_out``, or the given draw (``S``, ``L``: scratch)."""
    d = m0.shape[0]
    if have_beta0:
        for i in range(d):
            b0_out[i] = b0_given[i]
        return
    _jittered_cholesky(Phi, 1.0, S, L)
    for i in range(d):
        v = m0[i]
        for m in range(i + 1):
            v += L[i, m] * z0[m]
        b0_out[i] = v


@njit(**_JIT)
def _draw_arm_scalar(
    Gk, bk, Sigma, s2, P0, h0, b0_given, have_beta0, z0, Z, b0_out, beta_out, Ct, A
):
    """One (draw, arm) of :func:`conditional_draws`, instance by instance (any Σ)."""
    N, d = bk.shape
    P = np.empty((d, d))
    r = np.empty(d)
    Phi = np.empty((d, d))
    m0 = np.empty(d)
    L = np.empty((d, d))
    S = np.empty((d, d))
    arm_posterior(Gk, bk, Sigma, s2, P0, h0, Ct, A, P, r, Phi, m0)
    _draw_shared(Phi, m0, have_beta0, b0_given, z0, b0_out, S, L)
    for j in range(N):
        _jittered_cholesky(Ct[j], s2, S, L)
        for i in range(d):
            v = 0.0
            for m in range(d):
                v += A[j, i, m] * b0_out[m] + Ct[j, i, m] * bk[j, m]
            for m in range(i + 1):
                v += L[i, m] * Z[j, m]
            beta_out[j, i] = v


@njit(**_JIT)
def _arm_blocks_soa(Gs, bs, Lr, Linv, s2, P, r, W, Kv, R, Ct, Minv, tmp):
    """The per-instance blocks of :func:`arm_posterior` for a Cholesky factor ``Lr`` of Σ, with
    every d×d entry an array over the instances (``Gs`` (d, d, N), ``bs`` (d, N)), so the inner
    loops run over instances and vectorise. The same operations in the same order as
    :func:`instance_blocks` (small-d branch) and :func:`arm_posterior`, entry by entry, so the
    results are those of the scalar kernel. Fills ``Ct`` = C̃_j and ``Minv`` = M_j⁻¹ (d, d, N)
    and adds the instances to ``P`` and ``r`` (in instance order); returns False (and leaves
    ``P`` and ``r`` unfinished) when some S_j does not factorise."""
    d, _, N = Gs.shape
    # W = G Lr, K = Lrᵀ W (lower triangle)
    for i in range(d):
        for k in range(d):
            for j in range(N):
                W[i, k, j] = 0.0
            for m in range(k, d):
                c = Lr[m, k]
                for j in range(N):
                    W[i, k, j] += Gs[i, m, j] * c
    for i in range(d):
        for k in range(i + 1):
            for j in range(N):
                Kv[i, k, j] = 0.0
            for m in range(i, d):
                c = Lr[m, i]
                for j in range(N):
                    Kv[i, k, j] += c * W[m, k, j]
        for j in range(N):
            Kv[i, i, j] += s2
    # R = chol(S), S = K + σ²I (lower triangle)
    for i in range(d):
        for k in range(i + 1):
            for j in range(N):
                tmp[j] = Kv[i, k, j]
            for m in range(k):
                for j in range(N):
                    tmp[j] -= R[i, m, j] * R[k, m, j]
            if i == k:
                for j in range(N):
                    if not tmp[j] > 0.0:
                        return False
                for j in range(N):
                    R[i, i, j] = np.sqrt(tmp[j])
            else:
                for j in range(N):
                    R[i, k, j] = tmp[j] / R[k, k, j]
    # W = Lr R⁻ᵀ (in place, column by column), C̃ = W Wᵀ
    for i in range(d):
        for k in range(d):
            for j in range(N):
                tmp[j] = Lr[i, k]
            for m in range(k):
                for j in range(N):
                    tmp[j] -= R[k, m, j] * W[i, m, j]
            for j in range(N):
                W[i, k, j] = tmp[j] / R[k, k, j]
    for i in range(d):
        for k in range(i + 1):
            for j in range(N):
                tmp[j] = 0.0
            for m in range(d):
                for j in range(N):
                    tmp[j] += W[i, m, j] * W[k, m, j]
            for j in range(N):
                Ct[i, k, j] = tmp[j]
                Ct[k, i, j] = tmp[j]
    # K = R⁻¹ Lr⁻¹ (lower), M⁻¹ = W K
    for i in range(d):
        for k in range(i + 1):
            for j in range(N):
                tmp[j] = Linv[i, k]
            for m in range(k, i):
                for j in range(N):
                    tmp[j] -= R[i, m, j] * Kv[m, k, j]
            for j in range(N):
                Kv[i, k, j] = tmp[j] * (1.0 / R[i, i, j])
    for i in range(d):
        for k in range(d):
            for j in range(N):
                Minv[i, k, j] = 0.0
            for m in range(k, d):
                for j in range(N):
                    Minv[i, k, j] += W[i, m, j] * Kv[m, k, j]
    # r += M⁻ᵀ b_j, P += M⁻ᵀ G_j, instance by instance (the scalar kernel's order)
    for i in range(d):
        for j in range(N):
            tmp[j] = 0.0
        for m in range(d):
            for j in range(N):
                tmp[j] += Minv[m, i, j] * bs[m, j]
        for j in range(N):
            r[i] += tmp[j]
    for i in range(d):
        for k in range(d):
            for j in range(N):
                tmp[j] = 0.0
            for m in range(d):
                for j in range(N):
                    tmp[j] += Minv[m, i, j] * Gs[m, k, j]
            for j in range(N):
                P[i, k] += tmp[j]
    return True


@njit(**_JIT)
def conditional_draws_soa(
    Gs, bs, G, b, Sigma, sig2, P0, h0, beta0_in, have_beta0, z0, Z, beta0_out, beta_out
):
    """:func:`conditional_draws` with the instance loops vectorised: ``Gs`` (K, d, d, N) and
    ``bs`` (K, d, N) are the statistics ``G``, ``b`` with the instance axis last.

    The arithmetic is that of the scalar kernel, operation by operation (the instance sums in
    instance order); a (draw, arm) whose Σ is not positive definite or whose S_j = σ²I + LᵀG_jL
    does not factorise runs the scalar kernel, and so does an instance whose σ²C̃_j needs a
    jitter to factorise. The result equals :func:`conditional_draws`' to rounding.
    """
    C_, D_, Kn = sig2.shape
    N, d = b.shape[1], b.shape[2]
    W = np.empty((d, d, N))
    Kv = np.empty((d, d, N))
    R = np.empty((d, d, N))
    Ctv = np.empty((d, d, N))
    Minv = np.empty((d, d, N))
    tmp = np.empty(N)
    Ct = np.empty((N, d, d))
    A = np.empty((N, d, d))
    Lr = np.empty((d, d))
    Linv = np.empty((d, d))
    M = np.empty((d, d))
    P = np.empty((d, d))
    r = np.empty(d)
    Phi = np.empty((d, d))
    m0 = np.empty(d)
    L = np.empty((d, d))
    S = np.empty((d, d))
    Sc = np.empty((d, d))
    Lc = np.empty((d, d))
    for c in range(C_):
        for t in range(D_):
            for k in range(Kn):
                s2 = sig2[c, t, k]
                ok = sigma_root_into(Sigma[c, t, k], Lr, M)
                if ok:
                    cholesky_inverse_lower(Lr, Linv)
                    for i in range(d):
                        r[i] = h0[i]
                        for m in range(d):
                            P[i, m] = P0[i, m]
                    ok = _arm_blocks_soa(Gs[k], bs[k], Lr, Linv, s2, P, r, W, Kv, R, Ctv, Minv, tmp)
                if not ok:
                    _draw_arm_scalar(
                        G[k], b[k], Sigma[c, t, k], s2, P0, h0, beta0_in[c, t, k], have_beta0,
                        z0[c, t, k], Z[c, t, k], beta0_out[c, t, k], beta_out[c, t, k], Ct, A,
                    )  # fmt: skip
                    continue
                for i in range(d):
                    for m in range(i):
                        v = 0.5 * (P[i, m] + P[m, i])
                        P[i, m] = v
                        P[m, i] = v
                shared_inverse_into(P, P0, Phi, Sc, Lc)
                for i in range(d):
                    s = 0.0
                    for m in range(d):
                        s += Phi[i, m] * r[m]
                    m0[i] = s
                _draw_shared(
                    Phi, m0, have_beta0, beta0_in[c, t, k], z0[c, t, k], beta0_out[c, t, k], S, L
                )
                _draw_instances_soa(
                    Ctv, Minv, bs[k], s2, beta0_out[c, t, k], Z[c, t, k], beta_out[c, t, k],
                    W, Kv, tmp, S, L,
                )  # fmt: skip


@njit(**_JIT)
def _draw_instances_soa(Ctv, Minv, bs, s2, b0, Zk, out, Lc, mean, tmp, S, L):
    """β_j = A_jβ₀ + C̃_jb_j + chol(σ²C̃_j) z_j for every instance, A_j = σ²M_j⁻¹, entry arrays
    over instances (``Lc``, ``mean``: (d, d, N) scratch; ``mean[0]`` holds the means)."""
    d, _, N = Ctv.shape
    # chol(σ² C̃) per instance (lower triangle of Lc); failures done one by one below
    ok = np.ones(N, dtype=np.bool_)
    for i in range(d):
        for k in range(i + 1):
            for j in range(N):
                tmp[j] = s2 * Ctv[i, k, j]
            for m in range(k):
                for j in range(N):
                    tmp[j] -= Lc[i, m, j] * Lc[k, m, j]
            if i == k:
                for j in range(N):
                    ok[j] &= tmp[j] > 0.0
                    Lc[i, i, j] = np.sqrt(tmp[j]) if tmp[j] > 0.0 else 1.0
            else:
                for j in range(N):
                    Lc[i, k, j] = tmp[j] / Lc[k, k, j]
    for i in range(d):
        for j in range(N):
            tmp[j] = 0.0
        for m in range(d):
            a = b0[m]
            for j in range(N):
                tmp[j] += s2 * Minv[i, m, j] * a + Ctv[i, m, j] * bs[m, j]
        for j in range(N):
            mean[0, i, j] = tmp[j]
    for j in range(N):
        if not ok[j]:
            for i in range(d):
                for m in range(d):
                    S[i, m] = Ctv[i, m, j]
            _jittered_cholesky(S.copy(), s2, S, L)
            for i in range(d):
                for m in range(i + 1):
                    Lc[i, m, j] = L[i, m]
    for i in range(d):
        for j in range(N):
            tmp[j] = mean[0, i, j]
        for m in range(i + 1):
            for j in range(N):
                tmp[j] += Lc[i, m, j] * Zk[j, m]
        for j in range(N):
            out[j, i] = tmp[j]
