"""Generic compiled d×d linear algebra (numba): Cholesky factors, inverses and solves of small
dense matrices, with floors that keep them defined on near-singular input.

Every routine works on one small matrix (d up to a few dozen), where LAPACK's per-call overhead
dominates; callers batch them over instances and arms inside their own compiled loops. The
routines trust their inputs (validation lives in the public wrappers) and cannot raise on finite
input: every division is by a positive pivot.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = {"cache": True, "nogil": True}


@njit(**_JIT)
def inv_general(M, out):
    """Inverse of a square matrix by Gauss–Jordan elimination with partial pivoting.

    Returns False (leaving ``out`` undefined) if a pivot is exactly zero.
    """
    return inv_general_into(M, out, np.empty_like(M))


@njit(**_JIT)
def inv_general_into(M, out, W):
    """:func:`inv_general` with the caller's (d, d) scratch ``W`` (hot loops avoid allocating)."""
    d = M.shape[0]
    W[:, :] = M
    for i in range(d):
        for k in range(d):
            out[i, k] = 1.0 if i == k else 0.0
    for c in range(d):
        p = c
        best = abs(W[c, c])
        for i in range(c + 1, d):
            v = abs(W[i, c])
            if v > best:
                best = v
                p = i
        if best == 0.0:
            return False
        if p != c:
            for k in range(d):
                tmp = W[c, k]
                W[c, k] = W[p, k]
                W[p, k] = tmp
                tmp = out[c, k]
                out[c, k] = out[p, k]
                out[p, k] = tmp
        piv = 1.0 / W[c, c]
        for k in range(d):
            W[c, k] *= piv
            out[c, k] *= piv
        for i in range(d):
            if i != c:
                f = W[i, c]
                if f != 0.0:
                    for k in range(d):
                        W[i, k] -= f * W[c, k]
                        out[i, k] -= f * out[c, k]
    return True


@njit(**_JIT)
def cholesky_lower(P, L):
    """Cholesky factor of a symmetric positive-definite matrix; False if not PD."""
    d = P.shape[0]
    for i in range(d):
        for j in range(i + 1):
            s = P[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if not s > 0.0:  # also refuses NaN
                    return False
                L[i, i] = np.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
        for j in range(i + 1, d):
            L[i, j] = 0.0
    return True


@njit(**_JIT)
def cholesky_floored(P, floor, L):
    """Cholesky factor of a symmetric matrix known to satisfy P ⪰ floor·I (floor > 0), with
    every pivot floored at ``floor``.

    Every pivot of the exact factorisation is a Schur complement of P and so at least
    λ_min(P) ≥ floor; a smaller computed pivot is rounding (a regulariser below the resolution
    of the matrix), and flooring it gives a factor that always exists. Returns the number of
    floored pivots (0: the plain Cholesky factor).
    """
    d = P.shape[0]
    floored = 0
    for i in range(d):
        for j in range(i + 1):
            s = P[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if not s >= floor:
                    s = floor
                    floored += 1
                L[i, i] = np.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
        for j in range(i + 1, d):
            L[i, j] = 0.0
    return floored


@njit(**_JIT)
def spd_inverse(P, out):
    """Inverse of a symmetric positive-definite matrix via Cholesky (exactly symmetric output).

    When the Cholesky factorisation fails numerically (the matrix is positive definite but
    below the resolution of float64), falls back to :func:`psd_inverse_floor` with a relative
    floor, so the output is always symmetric positive definite. Returns False in that case.
    """
    d = P.shape[0]
    return spd_inverse_into(P, out, np.empty((d, d)), np.empty((d, d)))


@njit(**_JIT)
def spd_inverse_into(P, out, L, Li):
    """:func:`spd_inverse` with the caller's (d, d) scratch ``L`` and ``Li``."""
    return spd_inverse_floor_into(P, 0.0, out, L, Li)


@njit(**_JIT)
def spd_inverse_floor(P, floor, out):
    """:func:`spd_inverse` of a matrix known to satisfy P ⪰ floor·I (floor > 0), which the
    fallback uses as the eigenvalue floor (see :func:`psd_inverse_floor`)."""
    d = P.shape[0]
    return spd_inverse_floor_into(P, floor, out, np.empty((d, d)), np.empty((d, d)))


@njit(**_JIT)
def psd_inverse_floor(P, floor, out):
    """Inverse of a symmetric matrix that is positive definite in exact arithmetic, computed
    from the eigendecomposition of its diagonally scaled form; always symmetric positive
    definite. Used when the Cholesky factorisation fails: rounding has then made P singular or
    indefinite in some directions.

    With D = diag(P)^{-1/2}, B = D P D (unit diagonal) = V diag(w) Vᵀ and P⁻¹ = D B⁻¹ D. An
    eigenvalue within float64's resolution of B (|w| ≤ 4dε·max|w|) is rounding noise. With
    ``floor > 0`` (P ⪰ floor·I, e.g. P = reg·I + G with G positive semi-definite) the
    eigenvalue along v is at least floor·vᵀD²v (as B ⪰ floor·D²): a noise eigenvalue is
    replaced by that bound and every other one is kept above it, so the variance along a
    direction float64 cannot resolve is the one the regulariser alone gives (exact when the
    data carry no information there, larger than exact otherwise). Without it, noise
    eigenvalues are set to the resolution 4dε·max|w|. O(d³).
    """
    d = P.shape[0]
    D = np.empty(d)
    for i in range(d):
        p = P[i, i]
        D[i] = 1.0 / np.sqrt(p) if p > 0.0 else 1.0
    B = np.empty((d, d))
    for i in range(d):
        for k in range(d):
            B[i, k] = 0.5 * (P[i, k] + P[k, i]) * D[i] * D[k]
    w, V = np.linalg.eigh(B)
    top = 0.0
    for i in range(d):
        if abs(w[i]) > top:
            top = abs(w[i])
    noise = 4.0 * d * 2.220446049250313e-16 * top
    if not noise > 0.0:
        noise = 1e-300
    for i in range(d):
        if floor > 0.0:
            lo = 0.0
            for k in range(d):
                lo += V[k, i] * V[k, i] * D[k] * D[k]
            lo *= floor
            if not lo > 0.0:
                lo = 1e-300
            wi = lo if w[i] <= noise else max(w[i], lo)
        else:
            wi = max(w[i], noise)
        w[i] = 1.0 / wi
    for i in range(d):
        for k in range(i + 1):
            s = 0.0
            for m in range(d):
                s += V[i, m] * w[m] * V[k, m]
            s *= D[i] * D[k]
            out[i, k] = s
            out[k, i] = s


@njit(**_JIT)
def spd_inverse_floor_into(P, floor, out, L, Li):
    """:func:`spd_inverse_floor` with the caller's (d, d) scratch ``L`` and ``Li``; returns
    True when the Cholesky factorisation succeeded (the exact path)."""
    if not cholesky_lower(P, L):
        psd_inverse_floor(P, floor, out)
        return False
    cholesky_inverse(L, out, Li)
    return True


@njit(**_JIT)
def cholesky_inverse(L, out, Li):
    """(L Lᵀ)⁻¹ = L⁻ᵀL⁻¹ from a Cholesky factor, exactly symmetric (``Li``: (d, d) scratch)."""
    d = L.shape[0]
    cholesky_inverse_lower(L, Li)
    # out = Liᵀ Li
    for i in range(d):
        for j in range(i + 1):
            s = 0.0
            for k in range(i, d):
                s += Li[k, i] * Li[k, j]
            out[i, j] = s
            out[j, i] = s


@njit(**_JIT)
def cholesky_inverse_lower(L, Li):
    """L⁻¹ of a lower-triangular L with a positive diagonal (lower triangular)."""
    d = L.shape[0]
    for i in range(d):
        for j in range(i + 1, d):
            Li[i, j] = 0.0
        Li[i, i] = 1.0 / L[i, i]
        for j in range(i):
            s = 0.0
            for k in range(j, i):
                s -= L[i, k] * Li[k, j]
            Li[i, j] = s / L[i, i]


@njit(**_JIT)
def psd_root(Phi, F):
    """F with F Fᵀ = Φ for a symmetric positive semi-definite Φ (eigendecomposition, negative
    rounding-level eigenvalues set to 0)."""
    d = Phi.shape[0]
    S = np.empty((d, d))
    for i in range(d):
        for k in range(d):
            S[i, k] = 0.5 * (Phi[i, k] + Phi[k, i])
    w, V = np.linalg.eigh(S)
    for k in range(d):
        c = np.sqrt(w[k]) if w[k] > 0.0 else 0.0
        for i in range(d):
            F[i, k] = V[i, k] * c


@njit(**_JIT)
def full_rank_cholesky(G, rank_tol, L):
    """Cholesky factor of the symmetrised G in ``L``; True when G is numerically full rank.

    Full rank means the factorisation succeeds and 1/tr(G⁻¹) > rank_tol · tr(G). Since
    λ_min/d ≤ 1/tr(G⁻¹) ≤ λ_min, this bounds the condition number by about d/rank_tol whatever
    the scale; tr(G⁻¹) is the squared Frobenius norm of L⁻¹, O(d³) after the factorisation.
    (A squared pivot is only bounded *below* by λ_min: a pivot test admitted condition numbers
    of 1e13 under rank_tol = 1e-10.) The one test every least-squares fit of the package uses.
    """
    d = G.shape[0]
    return full_rank_cholesky_into(G, rank_tol, L, np.empty((d, d)))


@njit(**_JIT)
def full_rank_cholesky_into(G, rank_tol, L, M):
    """:func:`full_rank_cholesky` with the caller's (d, d) scratch ``M``."""
    d = G.shape[0]
    tr = 0.0
    for i in range(d):
        tr += G[i, i]
    if not tr > 0.0:
        return False
    for i in range(d):
        for k in range(d):
            M[i, k] = 0.5 * (G[i, k] + G[k, i])
    if not cholesky_lower(M, L):
        return False
    bound = rank_tol * tr
    for i in range(d):
        # a squared pivot is ≥ λ_min ≥ 1/tr(G⁻¹): a small pivot fails the trace test too
        if L[i, i] * L[i, i] <= bound:
            return False
    # tr(G⁻¹) = ‖L⁻¹‖²_F, L⁻¹ column by column (forward substitution) into M
    inv_tr = 0.0
    for k in range(d):
        for i in range(d):
            if i < k:
                M[i, k] = 0.0
                continue
            t = 1.0 if i == k else 0.0
            for m in range(k, i):
                t -= L[i, m] * M[m, k]
            M[i, k] = t / L[i, i]
            inv_tr += M[i, k] * M[i, k]
    return inv_tr * bound < 1.0


@njit(**_JIT)
def cholesky_solve(L, rhs, out):
    """Solve (L Lᵀ) out = rhs by forward and back substitution."""
    cholesky_solve_into(L, rhs, out, np.empty(L.shape[0]))


@njit(**_JIT)
def cholesky_solve_into(L, rhs, out, z):
    """:func:`cholesky_solve` with the caller's (d,) scratch ``z``."""
    d = L.shape[0]
    for i in range(d):
        s = rhs[i]
        for k in range(i):
            s -= L[i, k] * z[k]
        z[i] = s / L[i, i]
    for i in range(d - 1, -1, -1):
        s = z[i]
        for k in range(i + 1, d):
            s -= L[k, i] * out[k]
        out[i] = s / L[i, i]
