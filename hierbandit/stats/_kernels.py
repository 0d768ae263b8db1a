"""Compiled d×d kernels of the statistics core (numba, no Python objects).

Every routine works on small dense matrices (d up to a few dozen) batched over instances, where
generic batched LAPACK calls are dominated by per-call overhead. The formulas are those of the
ebm paper written in the inverse-free form (see ``docs/maths/ebm.md``):

    M_j = Σ G_j + σ² I,  Minv_j = M_j⁻¹,  C̃_j = Minv_j Σ,  A_j = σ² Minv_j,
    P = λ I + Σ_j A_jᵀ G_j / σ²,  r = Σ_j A_jᵀ b_j / σ²,  Φ = P⁻¹,  β̂₀ = Φ r,
    β̂_j = A_j β̂₀ + C̃_j b_j,  C_j = σ² C̃_j + A_j Φ A_jᵀ.

These kernels trust their inputs; validation lives in the public wrappers.
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
                if s <= 0.0:
                    return False
                L[i, i] = np.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
        for j in range(i + 1, d):
            L[i, j] = 0.0
    return True


@njit(**_JIT)
def spd_inverse(P, out):
    """Inverse of a symmetric positive-definite matrix via Cholesky (exactly symmetric output).

    Falls back to Gauss–Jordan when the Cholesky factorisation fails numerically.
    """
    d = P.shape[0]
    return spd_inverse_into(P, out, np.empty((d, d)), np.empty((d, d)))


@njit(**_JIT)
def spd_inverse_into(P, out, L, Li):
    """:func:`spd_inverse` with the caller's (d, d) scratch ``L`` and ``Li``."""
    d = P.shape[0]
    if not cholesky_lower(P, L):
        ok = inv_general_into(P, out, Li)
        for i in range(d):
            for j in range(i):
                v = 0.5 * (out[i, j] + out[j, i])
                out[i, j] = v
                out[j, i] = v
        return ok
    # Linv (lower triangular)
    for i in range(d):
        for j in range(i + 1, d):
            Li[i, j] = 0.0
        Li[i, i] = 1.0 / L[i, i]
        for j in range(i):
            s = 0.0
            for k in range(j, i):
                s -= L[i, k] * Li[k, j]
            Li[i, j] = s / L[i, i]
    # out = Liᵀ Li
    for i in range(d):
        for j in range(i + 1):
            s = 0.0
            for k in range(i, d):
                s += Li[k, i] * Li[k, j]
            out[i, j] = s
            out[j, i] = s
    return True


@njit(**_JIT)
def arm_posterior(G, b, Sigma, sigma2, P0, h0, Ct, A, P, r, Phi, beta0):
    """Exact two-level posterior of one arm from per-instance sufficient statistics.

    The shared mean has the Gaussian prior N(P0⁻¹h0, P0⁻¹) — the paper's N(0, λ⁻¹I) is
    P0 = λI, h0 = 0 — so P = P0 + Σ_j A_jᵀG_j/σ² and r = h0 + Σ_j A_jᵀb_j/σ².

    Fills ``Ct`` (N,d,d) = C̃_j, ``A`` (N,d,d) = A_j, ``P`` = Φ⁻¹, ``r``, ``Phi`` = Φ and
    ``beta0`` = β̂₀ in place. Returns False if a linear system was singular.
    """
    N, d = b.shape
    M = np.empty((d, d))
    Minv = np.empty((d, d))
    W = np.empty((d, d))
    ok = True
    for i in range(d):
        r[i] = h0[i]
        for k in range(d):
            P[i, k] = P0[i, k]
    for j in range(N):
        # M = Σ G_j + σ² I
        for i in range(d):
            for k in range(d):
                s = 0.0
                for m in range(d):
                    s += Sigma[i, m] * G[j, m, k]
                M[i, k] = s + (sigma2 if i == k else 0.0)
        ok &= inv_general_into(M, Minv, W)
        for i in range(d):
            for k in range(d):
                s = 0.0
                for m in range(d):
                    s += Minv[i, m] * Sigma[m, k]
                Ct[j, i, k] = s
                A[j, i, k] = sigma2 * Minv[i, k]
        # P += Minvᵀ G_j ; r += Minvᵀ b_j   (A_jᵀ/σ² = Minvᵀ)
        for i in range(d):
            s = 0.0
            for m in range(d):
                s += Minv[m, i] * b[j, m]
            r[i] += s
            for k in range(d):
                s = 0.0
                for m in range(d):
                    s += Minv[m, i] * G[j, m, k]
                P[i, k] += s
    # symmetrise C̃ (exactly symmetric in exact arithmetic) and P
    for j in range(N):
        for i in range(d):
            for k in range(i):
                v = 0.5 * (Ct[j, i, k] + Ct[j, k, i])
                Ct[j, i, k] = v
                Ct[j, k, i] = v
    for i in range(d):
        for k in range(i):
            v = 0.5 * (P[i, k] + P[k, i])
            P[i, k] = v
            P[k, i] = v
    ok &= spd_inverse(P, Phi)
    for i in range(d):
        s = 0.0
        for k in range(d):
            s += Phi[i, k] * r[k]
        beta0[i] = s
    return ok


@njit(**_JIT)
def instance_moments(Ct, A, b, beta0, Phi, sigma2, mean, cov):
    """β̂_j = A β̂₀ + C̃ b and C_j = σ² C̃ + A Φ Aᵀ for one (arm, instance)."""
    d = b.shape[0]
    AP = np.empty((d, d))
    for i in range(d):
        s = 0.0
        for k in range(d):
            s += A[i, k] * beta0[k] + Ct[i, k] * b[k]
        mean[i] = s
        for k in range(d):
            s = 0.0
            for m in range(d):
                s += A[i, m] * Phi[m, k]
            AP[i, k] = s
    for i in range(d):
        for k in range(i + 1):
            s = 0.0
            for m in range(d):
                s += AP[i, m] * A[k, m]
            v = sigma2 * 0.5 * (Ct[i, k] + Ct[k, i]) + 0.5 * s
            cov[i, k] = v
            cov[k, i] = v
    # second half of the A Φ Aᵀ symmetrisation
    for i in range(d):
        for k in range(i + 1):
            s = 0.0
            for m in range(d):
                s += AP[k, m] * A[i, m]
            cov[i, k] += 0.5 * s
            if i != k:
                cov[k, i] = cov[i, k]


@njit(**_JIT)
def all_moments(Ct, A, b, beta0, Phi, sigma2, mean, cov):
    """``instance_moments`` for every (arm, instance): arrays with leading (K, N) axes."""
    K, N = b.shape[0], b.shape[1]
    for k in range(K):
        for j in range(N):
            instance_moments(
                Ct[k, j], A[k, j], b[k, j], beta0[k], Phi[k], sigma2[k], mean[k, j], cov[k, j]
            )


@njit(**_JIT)
def score_arms(x, j, Ct, A, b, beta0, Phi, sigma2, literal_44, mu, tau):
    """Predicted mean μ̂ (5.1) and posterior sd τ (5.2) of every arm for instance ``j``.

    τ² = σ² xᵀC̃x + (Aᵀx)ᵀ Φ (Aᵀx), which never forms C_j. With ``literal_44`` the mean is the
    paper's printed (4.4), xᵀ(A β̂₀ + C̃ b)/σ², kept only to document the typo.
    """
    K = b.shape[0]
    d = x.shape[0]
    u = np.empty(d)
    for k in range(K):
        C = Ct[k, j]
        Ak = A[k, j]
        m = 0.0
        q = 0.0
        for i in range(d):
            ci = 0.0
            ui = 0.0
            bi = 0.0
            for m_ in range(d):
                ci += C[i, m_] * x[m_]
                ui += Ak[m_, i] * x[m_]
                bi += Ak[i, m_] * beta0[k, m_] + C[i, m_] * b[k, j, m_]
            u[i] = ui
            m += x[i] * bi
            q += x[i] * ci
        v = sigma2[k] * q
        for i in range(d):
            s = 0.0
            for m_ in range(d):
                s += Phi[k, i, m_] * u[m_]
            v += u[i] * s
        mu[k] = m / sigma2[k] if literal_44 else m
        tau[k] = np.sqrt(v) if v > 0.0 else 0.0


@njit(**_JIT)
def rank_one_update(x, y, Gj, bj, Ctj, Aj, P, r, Phi, beta0, sigma2):
    """Add one observation to instance j of an arm with the hyperparameters held fixed.

    Sherman–Morrison on C̃_j and A_j, a rank-one increment of P = Φ⁻¹ (Lemma D.3 of the ebm
    paper, in the corrected form (I + vvᵀ)⁻¹ = I − vvᵀ/(1 + vᵀv)), Sherman–Morrison on Φ, and the
    change of instance j's term in r. Updates ``Gj``/``bj`` too. O(d²).
    """
    d = x.shape[0]
    cx = np.empty(d)
    ax = np.empty(d)
    s = 1.0
    for i in range(d):
        c = 0.0
        a = 0.0
        for m in range(d):
            c += Ctj[i, m] * x[m]
            a += Aj[m, i] * x[m]
        cx[i] = c
        ax[i] = a
    for i in range(d):
        s += x[i] * cx[i]
    # old contribution of instance j to r: A_jᵀ b_j / σ²
    old_r = np.empty(d)
    for i in range(d):
        t = 0.0
        for m in range(d):
            t += Aj[m, i] * bj[m]
        old_r[i] = t / sigma2
    # sufficient statistics
    for i in range(d):
        bj[i] += x[i] * y
        for m in range(d):
            Gj[i, m] += x[i] * x[m]
    # C̃ ← C̃ − c̃x c̃xᵀ / s ;  A ← A − c̃x (Aᵀx)ᵀ / s
    for i in range(d):
        for m in range(d):
            Ctj[i, m] -= cx[i] * cx[m] / s
            Aj[i, m] -= cx[i] * ax[m] / s
    # u = Aᵀx / σ² ; P += (σ²/s) u uᵀ ; Φ by Sherman–Morrison
    c = sigma2 / s
    u = np.empty(d)
    for i in range(d):
        u[i] = ax[i] / sigma2
    Pu = np.empty(d)
    uPu = 0.0
    for i in range(d):
        t = 0.0
        for m in range(d):
            t += Phi[i, m] * u[m]
            P[i, m] += c * u[i] * u[m]
        Pu[i] = t
        uPu += u[i] * t
    den = 1.0 + c * uPu
    for i in range(d):
        for m in range(d):
            Phi[i, m] -= c * Pu[i] * Pu[m] / den
    for i in range(d):
        t = 0.0
        for m in range(d):
            t += Aj[m, i] * bj[m]
        r[i] += t / sigma2 - old_r[i]
    for i in range(d):
        t = 0.0
        for m in range(d):
            t += Phi[i, m] * r[m]
        beta0[i] = t


# ---------------------------------------------------------------------- empirical Bayes


@njit(**_JIT)
def full_rank_cholesky(G, rank_tol, L):
    """Cholesky factor of the symmetrised G in ``L``; True when G is numerically full rank.

    Full rank means the factorisation succeeds and every squared pivot exceeds
    rank_tol · trace(G). A squared pivot is a Schur complement, bounded below by λ_min(G), so this
    is a scale-free test of near-singularity that costs no more than the factorisation the solve
    needs anyway. The one test every least-squares fit of the package uses.
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
    for i in range(d):  # noqa: SIM110 - numba compiles loops, not generator expressions
        if L[i, i] * L[i, i] <= rank_tol * tr:
            return False
    return True


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


@njit(**_JIT)
def ols_all(G, b, ridge, rank_tol, B, ok):
    """Per-instance OLS β̂ = (G + ridge I)⁻¹ b where G itself is numerically full rank.

    ``ok[j]`` is :func:`full_rank_cholesky` of G_j. The ridge (spec §3.2 ``ols_ridge``) only
    regularises the solve; it never makes a rank-deficient instance (T_j < d) count.
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

    All splits at once, without data-dependent branches (the splits change at every call, so
    branches would be mispredicted): the 0/1 validation masks W (R × n) come from rank counts;
    the validation sums and outer-product sums of every split are one product W Z, where row t of
    Z holds the centred vector β_t and the upper triangle of β_tβ_tᵀ; the training half's sums are
    the totals over all rows minus the validation half's. The risk over the grid is accumulated
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
    W = np.empty((R, n))
    for rr in range(R):
        u = uniforms[rr]
        for t in range(n):
            ut = u[t]
            rank = 0
            for s in range(t):  # an equal entry with a smaller index ranks first
                rank += u[s] <= ut
            for s in range(t + 1, n):
                rank += u[s] < ut
            W[rr, t] = 1.0 if rank < n2 else 0.0
    V = np.dot(W, Z)  # validation sums of every split
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
    uniforms,
    Sigma_prev,
    Sigma_out,
):
    """Thresholded covariance of the per-instance OLS estimates (ebm §4.3 with spec §3.2–3.3).

    ``threshold_mode``: 0 = cross-validated, 1 = fixed ``gamma_fixed``, 2 = none.
    Returns (gamma, n_eff); when fewer than ``min_instances`` instances have full-rank data,
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
    gamma = 0.0
    if threshold_mode == 1:
        gamma = gamma_fixed
    elif threshold_mode == 0:
        # the threshold is cross-validated on the plain covariance of the OLS vectors
        grid = threshold_grid(S, threshold_diagonal)
        risk = np.empty(grid.shape[0])
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
def estimate_sigma2(G, b, q, n_obs, mean, sigma2_prev, sigma2_floor):
    """Pooled residual variance of the ebm paper (§4.3) with the spec's guards.

    Σ_j RSS_j / max(Σ_j T_j − d − 1, 1); the previous value is kept until Σ_j T_j ≥ d + 2.
    """
    d = b.shape[1]
    total_n = 0
    for j in range(n_obs.shape[0]):
        total_n += n_obs[j]
    if total_n < d + 2:
        return sigma2_prev
    rss = residual_sum_of_squares(G, b, q, mean)
    val = rss / max(total_n - d - 1, 1)
    return max(val, sigma2_floor)


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
    uniforms,
    sigma2_floor,
    eb_iters,
    estimate_sigma,
    estimate_noise,
    Sigma_out,
    Ct,
    A,
    P,
    r,
    Phi,
    beta0,
):
    """One empirical-Bayes step for one arm (spec §3.5): Σ̂, then σ̂² from the posterior means
    under (Σ̂, previous σ̂²), then the posterior under (Σ̂, σ̂²). Returns (σ̂², γ, n_eff, ok)."""
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
            uniforms,
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
            sigma2 = estimate_sigma2(G, b, q, n_obs, mean, sigma2, sigma2_floor)
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
    P = np.empty((d, d))
    r = np.empty(d)
    Phi = np.empty((d, d))
    m0 = np.empty(d)
    L = np.empty((d, d))
    S = np.empty((d, d))
    for c in range(C_):
        for t in range(D_):
            for k in range(Kn):
                s2 = sig2[c, t, k]
                arm_posterior(G[k], b[k], Sigma[c, t, k], s2, P0, h0, Ct, A, P, r, Phi, m0)
                if have_beta0:
                    for i in range(d):
                        beta0_out[c, t, k, i] = beta0_in[c, t, k, i]
                else:
                    _jittered_cholesky(Phi, 1.0, S, L)
                    for i in range(d):
                        v = m0[i]
                        for m in range(i + 1):
                            v += L[i, m] * z0[c, t, k, m]
                        beta0_out[c, t, k, i] = v
                for j in range(N):
                    _jittered_cholesky(Ct[j], s2, S, L)
                    for i in range(d):
                        v = 0.0
                        for m in range(d):
                            v += A[j, i, m] * beta0_out[c, t, k, m] + Ct[j, i, m] * b[k, j, m]
                        for m in range(i + 1):
                            v += L[i, m] * Z[c, t, k, j, m]
                        beta_out[c, t, k, j, i] = v


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
