"""Marginal likelihood and type-II maximum likelihood of one arm's hierarchical linear model.

Model (one arm of the ebm paper, §4): instances j = 1..N with rows (X_j, y_j),

    y_j = X_j β_j + ε_j,   β_j ~ N(β₀, Σ),   ε_j ~ N(0, σ²I),

so that, with the β_j integrated out, y_j ~ N(X_jβ₀, V_j) with V_j = X_jΣX_jᵀ + σ²I (§4.1, the
display before Step 2). Everything below works from the per-instance sufficient statistics
G_j = X_jᵀX_j, b_j = X_jᵀy_j, q_j = y_jᵀy_j and n_j (docs/maths/ebm.md §2) with d×d algebra per
instance; no T×T matrix is ever formed.

Write Σ = FFᵀ for any factor F (a Cholesky factor, or the symmetric square root of a singular PSD
Σ) and K_j = FᵀG_jF + σ²I, which is symmetric with eigenvalues ≥ σ² > 0. Then

* C̃_j = (ΣG_j + σ²I)⁻¹Σ = F K_j⁻¹ Fᵀ (push-through identity; C̃_j = (G_j + σ²Σ⁻¹)⁻¹ of eq. 4.1
  when Σ is invertible, and the inverse-free form of docs/maths/ebm.md §4 otherwise);
* V_j⁻¹ = σ⁻²(I − X_jC̃_jX_jᵀ) (Woodbury, eq. 4.3);
* log|V_j| = n_j log σ² + log|I_d + ΣG_j/σ²| = (n_j − d) log σ² + log|K_j| (matrix determinant
  lemma, |I_T + X_jΣX_jᵀ/σ²| = |I_d + ΣG_j/σ²| = |I_d + FᵀG_jF/σ²|);
* with u_j = y_j − X_jβ₀, c_j = X_jᵀu_j = b_j − G_jβ₀ and e_j = u_jᵀu_j = q_j − 2β₀ᵀb_j + β₀ᵀG_jβ₀,
  u_jᵀV_j⁻¹u_j = (e_j − c_jᵀC̃_jc_j)/σ²;
* X_jᵀV_j⁻¹X_j = (G_j − G_jC̃_jG_j)/σ² and X_jᵀV_j⁻¹y_j = (b_j − G_jC̃_jb_j)/σ² (Lemma A.2 in the
  d×d form of docs/maths/ebm.md §4.3), so P = λI + Σ_j X_jᵀV_j⁻¹X_j = Φ⁻¹ and
  r = Σ_j X_jᵀV_j⁻¹y_j are those of the closed-form posterior (§4.1 Step 2).

Profiling the shared mean. For fixed (Σ, σ²) the objective Σ_j log N(y_j; X_jβ₀, V_j) − (λ/2)‖β₀‖²
equals const + β₀ᵀr − ½β₀ᵀPβ₀, a concave quadratic in β₀ whose unique maximiser (P positive
definite) is the GLS / closed-form posterior mean β̂₀ = P⁻¹r = Φr; its maximum is
ℓ(β₀ = 0) + ½rᵀP⁻¹r. Integrating β₀ ~ N(0, λ⁻¹I) out instead of maximising gives the collapsed
marginal likelihood ℓ(0) + ½rᵀP⁻¹r − ½log|P| + (d/2)log λ, the density of the stacked y under
N(0, blockdiag(V_j) + λ⁻¹XXᵀ) (docs/bayes.md §3.1).

Gradients. For one instance, ∂ℓ_j/∂V_j = ½(V_j⁻¹u_ju_jᵀV_j⁻¹ − V_j⁻¹), hence

    ∂ℓ_j/∂Σ  = ½(w_jw_jᵀ − H_j),     w_j = X_jᵀV_j⁻¹u_j = (c_j − G_jC̃_jc_j)/σ²,
                                     H_j = X_jᵀV_j⁻¹X_j,
    ∂ℓ_j/∂σ² = ½[(e_j − 2c_jᵀs_j + s_jᵀG_js_j)/σ⁴ − (n_j − tr(C̃_jG_j))/σ²],   s_j = C̃_jc_j,

using ‖V_j⁻¹u_j‖² and tr V_j⁻¹ in sufficient-statistic form. Because β̂₀ maximises the objective,
the gradient of the profiled objective is the partial gradient at β₀ = β̂₀ (envelope theorem).
With Σ = LLᵀ, ∂ℓ/∂L = 2(∂ℓ/∂Σ)L.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit
from scipy import linalg as sla
from scipy import optimize

from hierbandit._validation import check_covariance, check_positive_int, check_scalar, check_vector
from hierbandit.stats import kernels as K
from hierbandit.stats import linalg
from hierbandit.stats.arm_likelihood import INTEGRATED, PROFILED, arm_loglik, arm_stats
from hierbandit.stats.empirical_bayes import _check_counts, _stats_arrays

__all__ = ["MLResult", "collapsed_loglik", "fit_type2_ml", "marginal_loglik"]

_JIT = {"cache": True, "nogil": True}
_LOG_2PI = float(np.log(2.0 * np.pi))

#: cells per block of the vectorised likelihood (:mod:`hierbandit.stats.arm_likelihood`)
_BLOCK = 128

# kernel status codes
_OK, _K_FAILED, _P_FAILED = 0, 1, 2


# --------------------------------------------------------------------------------- kernel


@njit(**_JIT)
def _loglik_kernel(G, b, q, n, F, sigma2, P0, h0, profile, grad, collapse, beta0, Ct, P, r, gSigma):
    """Σ_j log N(y_j; X_jβ₀, V_j) of one arm from sufficient statistics (see module docstring).

    ``F`` is any factor with Σ = FFᵀ. Fills ``Ct`` (N, d, d) with C̃_j = F K_j⁻¹ Fᵀ (rows of
    instances without data, n_j = 0, are left untouched: they contribute nothing), ``P`` with
    P0 + Σ_j X_jᵀV_j⁻¹X_j and ``r`` with h0 + Σ_j X_jᵀV_j⁻¹y_j, where N(P0⁻¹h0, P0⁻¹) is the prior
    of the shared mean (the ebm paper's N(0, λ⁻¹I): P0 = λI, h0 = 0). With ``profile`` the
    shared mean is first replaced in place by its posterior mode β̂₀ = P⁻¹r. With ``grad``
    ``gSigma`` receives ∂ℓ/∂Σ (symmetric). With ``collapse`` (needs ``profile`` and ``grad``)
    the gradients are those of ℓ(β̂₀) − ½log|P|, the β₀-dependent part of the collapsed
    likelihood (docs/maths/ebm.md §7.5): ∂(−½log|P|)/∂Σ = ½Σ_j H_jΦH_j and
    ∂(−½log|P|)/∂σ² = ½σ⁻²Σ_j tr(ΦH_j(I − C̃_jG_j)), H_j = X_jᵀV_j⁻¹X_j, Φ = P⁻¹.

    Returns ``(status, loglik, logdetP, dsigma2)``: status 0 on success, 1 if some K_j was not
    numerically positive definite, 2 if P was not (shared mean unidentified); ``logdetP`` is
    computed only with ``profile`` (NaN otherwise); ``dsigma2`` = ∂ℓ/∂σ² (0 without ``grad``).
    """
    N, d = b.shape
    Km = np.empty((d, d))
    R = np.empty((d, d))
    GF = np.empty((d, d))
    Z = np.empty((d, d))
    GC = np.empty((d, d))
    Hm = np.empty((d, d))
    HP = np.empty((d, d))
    Phi = np.empty((d, d))
    c = np.empty(d)
    s = np.empty(d)
    Gs = np.empty(d)
    logdetV = np.empty(N)
    log_s2 = np.log(sigma2)
    for i in range(d):
        r[i] = 0.0
        for k in range(d):
            P[i, k] = 0.0
            gSigma[i, k] = 0.0
    # ---- pass 1: C̃_j, log|V_j|, P and r
    for j in range(N):
        if n[j] == 0:
            continue  # no rows: V_j is empty, the instance adds nothing
        for i in range(d):
            for k in range(d):
                t = 0.0
                for m in range(d):
                    t += G[j, i, m] * F[m, k]
                GF[i, k] = t
        for i in range(d):
            for k in range(i + 1):
                t = 0.0
                for m in range(d):
                    t += F[m, i] * GF[m, k]
                if i == k:
                    t += sigma2
                Km[i, k] = t
                Km[k, i] = t
        if not linalg.cholesky_lower(Km, R):
            return _K_FAILED, np.nan, np.nan, 0.0
        ld = 0.0
        for i in range(d):
            ld += 2.0 * np.log(R[i, i])
        logdetV[j] = (n[j] - d) * log_s2 + ld
        # Z = R⁻¹ Fᵀ (forward substitution, column by column); C̃ = ZᵀZ
        for col in range(d):
            for i in range(d):
                t = F[col, i]
                for m in range(i):
                    t -= R[i, m] * Z[m, col]
                Z[i, col] = t / R[i, i]
        for i in range(d):
            for k in range(i + 1):
                t = 0.0
                for m in range(d):
                    t += Z[m, i] * Z[m, k]
                Ct[j, i, k] = t
                Ct[j, k, i] = t
        # GC = G C̃ ; P += (G − G C̃ G)/σ² ; r += (b − G C̃ b)/σ²
        for i in range(d):
            for k in range(d):
                t = 0.0
                for m in range(d):
                    t += G[j, i, m] * Ct[j, m, k]
                GC[i, k] = t
        for i in range(d):
            t = b[j, i]
            for m in range(d):
                t -= GC[i, m] * b[j, m]
            r[i] += t / sigma2
            for k in range(d):
                t = G[j, i, k]
                for m in range(d):
                    t -= GC[i, m] * G[j, m, k]
                P[i, k] += t / sigma2
    for i in range(d):
        r[i] += h0[i]
        for k in range(d):
            P[i, k] += P0[i, k]
    for i in range(d):
        for k in range(i):
            v = 0.5 * (P[i, k] + P[k, i])
            P[i, k] = v
            P[k, i] = v
    logdetP = np.nan
    if profile:
        LP = np.empty((d, d))
        if not linalg.cholesky_lower(P, LP):
            return _P_FAILED, np.nan, np.nan, 0.0
        logdetP = 0.0
        for i in range(d):
            logdetP += 2.0 * np.log(LP[i, i])
        linalg.cholesky_solve(LP, r, beta0)
        if collapse:
            linalg.cholesky_inverse(LP, Phi, Z)
    # ---- pass 2: log-likelihood (and gradient) at beta0
    ll = 0.0
    dsig = 0.0
    dsig_c = 0.0
    for j in range(N):
        if n[j] == 0:
            continue
        e = q[j]
        for i in range(d):
            t = b[j, i]
            for m in range(d):
                t -= G[j, i, m] * beta0[m]
            c[i] = t
            e -= beta0[i] * (b[j, i] + t)  # q − 2β₀ᵀb + β₀ᵀGβ₀ = q − β₀ᵀ(b + c)
        cs = 0.0
        for i in range(d):
            t = 0.0
            for m in range(d):
                t += Ct[j, i, m] * c[m]
            s[i] = t
            cs += c[i] * t
        ll -= 0.5 * (n[j] * _LOG_2PI + logdetV[j] + (e - cs) / sigma2)
        if grad:
            sGs = 0.0
            trCG = 0.0
            for i in range(d):
                t = 0.0
                for m in range(d):
                    t += G[j, i, m] * s[m]
                    trCG += Ct[j, i, m] * G[j, m, i]
                Gs[i] = t
                sGs += s[i] * t
            dsig += 0.5 * ((e - 2.0 * cs + sGs) / (sigma2 * sigma2) - (n[j] - trCG) / sigma2)
            # w = (c − G s)/σ² reuses c ; H = (G − G C̃ G)/σ²
            for i in range(d):
                c[i] = (c[i] - Gs[i]) / sigma2
            for i in range(d):
                for k in range(d):
                    t = 0.0
                    for m in range(d):
                        t += G[j, i, m] * Ct[j, m, k]
                    GC[i, k] = t
            for i in range(d):
                for k in range(i + 1):
                    h = G[j, i, k]
                    for m in range(d):
                        h -= GC[i, m] * G[j, m, k]
                    Hm[i, k] = h / sigma2
                    Hm[k, i] = Hm[i, k]
                    v = 0.5 * (c[i] * c[k] - Hm[i, k])
                    gSigma[i, k] += v
                    if k != i:
                        gSigma[k, i] += v
            if collapse:
                # ½ H Φ H into gSigma; ½σ⁻² tr(ΦH(I − C̃G)) = ½σ⁻²[tr(ΦH) − tr(ΦH C̃G)]
                for i in range(d):
                    for k in range(d):
                        t = 0.0
                        for m in range(d):
                            t += Phi[i, m] * Hm[m, k]
                        HP[i, k] = t  # ΦH
                for i in range(d):
                    for k in range(d):
                        t = 0.0
                        for m in range(d):
                            t += Hm[i, m] * HP[m, k]
                        gSigma[i, k] += 0.5 * t
                tr = 0.0
                for i in range(d):
                    tr += HP[i, i]
                    for m in range(d):
                        tr -= HP[i, m] * GC[i, m]  # (C̃G)[m, i] = (GC̃)[i, m]
                dsig_c += 0.5 * tr / sigma2
    if grad:
        for i in range(d):
            for k in range(i):
                v = 0.5 * (gSigma[i, k] + gSigma[k, i])
                gSigma[i, k] = v
                gSigma[k, i] = v
    return _OK, ll, logdetP, dsig + dsig_c


# ----------------------------------------------------------------------------- validation


class _Stats(NamedTuple):
    G: np.ndarray
    b: np.ndarray
    q: np.ndarray
    n: np.ndarray


def _check_stats(G: Any, b: Any, q: Any, n: Any) -> _Stats:
    G, b = _stats_arrays(G, b)
    if b.shape[1] < 1:
        raise ValueError("b must have at least one feature column (shape (N, d) with d >= 1)")
    q, n = _check_counts(q, n, b.shape[0])
    return _Stats(G, b, q, n)


def _psd_factor(Sigma: np.ndarray) -> np.ndarray:
    """A factor F with FFᵀ = Σ for a PSD Σ (symmetric square root; negative rounding clipped)."""
    w, U = np.linalg.eigh(Sigma)
    return np.ascontiguousarray(U * np.sqrt(np.clip(w, 0.0, None)))


def _work(N: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return np.empty((N, d, d)), np.empty((d, d)), np.empty(d), np.empty((d, d))


def _run(
    st: _Stats,
    F: np.ndarray,
    sigma2: float,
    lam: float,
    profile: bool,
    grad: bool,
    beta0: np.ndarray,
    collapse: bool = False,
) -> tuple[int, float, float, float, np.ndarray, np.ndarray, np.ndarray]:
    N, d = st.b.shape
    Ct, P, r, gS = _work(N, d)
    P0, h0 = lam * np.eye(d), np.zeros(d)
    status, ll, logdetP, dsig = _loglik_kernel(
        st.G, st.b, st.q, st.n, F, sigma2, P0, h0, profile, grad, collapse, beta0, Ct, P, r, gS
    )
    return int(status), float(ll), float(logdetP), float(dsig), P, r, gS


# ------------------------------------------------------------------------- public: values


def marginal_loglik(G: Any, b: Any, q: Any, n: Any, beta0: Any, Sigma: Any, sigma2: float) -> float:
    """Exact log marginal likelihood of one arm's rows given (β₀, Σ, σ²).

    log p(y | β₀, Σ, σ²) = Σ_j log N(y_j; X_jβ₀, V_j) with V_j = X_jΣX_jᵀ + σ²I (ebm paper §4.1,
    β_j integrated out), computed from sufficient statistics with the determinant lemma and the
    Woodbury identity (4.3): per instance

        −½ n_j log 2π − ½[(n_j − d) log σ² + log|FᵀG_jF + σ²I|] − ½(e_j − c_jᵀC̃_jc_j)/σ²,

    where Σ = FFᵀ, c_j = b_j − G_jβ₀, e_j = q_j − 2β₀ᵀb_j + β₀ᵀG_jβ₀ and C̃_j = (ΣG_j + σ²I)⁻¹Σ.

    Parameters
    ----------
    G, b, q, n
        Per-instance XᵀX (N, d, d), Xᵀy (N, d), yᵀy (N,) and row counts (N,) (integer). An
        instance without rows contributes 0.
    beta0 : array (d,)
        Shared mean β₀.
    Sigma : array (d, d)
        Covariance of the instance coefficients; positive semi-definite, may be singular.
    sigma2 : float
        Noise variance (> 0).

    Returns
    -------
    float
        The log-likelihood, including the −½ n_j log 2π terms.

    Examples
    --------
    >>> import numpy as np
    >>> from hierbandit.stats.suffstats import suffstats
    >>> s = suffstats(np.ones((3, 1)), [1.0, 2.0, 0.5], [0, 0, 1], 2)
    >>> round(marginal_loglik(s.G, s.b, s.q, s.n, [1.0], [[0.5]], 1.0), 6)
    -3.764455
    """
    st = _check_stats(G, b, q, n)
    d = st.b.shape[1]
    beta0 = check_vector(beta0, d, "beta0")
    Sigma = check_covariance(Sigma, d, "Sigma")
    sigma2 = check_scalar(sigma2, "sigma2", low=0.0, low_inclusive=False)
    status, ll, *_ = _run(st, _psd_factor(Sigma), sigma2, 0.0, False, False, beta0)
    if status != _OK:  # pragma: no cover - K_j ≥ σ²I is always positive definite
        raise FloatingPointError("marginal_loglik: a d×d system was numerically singular")
    return ll


def collapsed_loglik(
    G: Any, b: Any, q: Any, n: Any, Sigma: Any, sigma2: float, lam: float
) -> float:
    """Log marginal likelihood with the shared mean β₀ ~ N(0, λ⁻¹I) integrated out as well.

    log p(y | Σ, σ², λ) = ℓ(0) + ½rᵀP⁻¹r − ½log|P| + (d/2) log λ, where ℓ(0) is
    :func:`marginal_loglik` at β₀ = 0, P = λI + Σ_j X_jᵀV_j⁻¹X_j = Φ⁻¹ and r = Σ_j X_jᵀV_j⁻¹y_j
    are the precision and information vector of the shared-mean posterior (ebm paper §4.1 Step 2,
    Lemma A.2). Equivalently, the density of the stacked y under N(0, blockdiag(V_j) + λ⁻¹XXᵀ)
    (docs/bayes.md §3.1). It is evaluated as ℓ(β̂₀) − (λ/2)‖β̂₀‖² − ½log|P| + (d/2)log λ,
    β̂₀ = P⁻¹r, which is the same quantity with less cancellation.

    Parameters
    ----------
    G, b, q, n
        Sufficient statistics, as in :func:`marginal_loglik`.
    Sigma, sigma2
        Hyperparameters, as in :func:`marginal_loglik`.
    lam : float
        Precision λ > 0 of the hyperprior on β₀.

    Returns
    -------
    float
    """
    st = _check_stats(G, b, q, n)
    d = st.b.shape[1]
    Sigma = check_covariance(Sigma, d, "Sigma")
    sigma2 = check_scalar(sigma2, "sigma2", low=0.0, low_inclusive=False)
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    beta0 = np.zeros(d)
    status, ll, logdetP, *_ = _run(st, _psd_factor(Sigma), sigma2, lam, True, False, beta0)
    if status != _OK:  # pragma: no cover - P ≥ λI is positive definite
        raise FloatingPointError("collapsed_loglik: a d×d system was numerically singular")
    return ll - 0.5 * lam * float(beta0 @ beta0) - 0.5 * logdetP + 0.5 * d * np.log(lam)


# --------------------------------------------------------------------------- type-II ML


class MLResult(NamedTuple):
    """Outcome of :func:`fit_type2_ml`.

    Attributes
    ----------
    shared_mean : array (d,)
        β̂₀ = P⁻¹r at the optimum (GLS estimate for λ = 0, posterior mode for λ > 0).
    Sigma : array (d, d)
        Σ̂ = L̂L̂ᵀ.
    sigma2 : float
        σ̂².
    loglik : float
        Marginal log-likelihood log p(y | β̂₀, Σ̂, σ̂²) (the maximised objective is this minus
        (λ/2)‖β̂₀‖²); comparable with a mixed-model ML log-likelihood.
    converged : bool
    n_iter : int
        Quasi-Newton iterations.
    message : str
    """

    shared_mean: np.ndarray
    Sigma: np.ndarray
    sigma2: float
    loglik: float
    converged: bool
    n_iter: int
    message: str


def _unpack(theta: np.ndarray, d: int) -> tuple[np.ndarray, float]:
    """θ = (lower triangle of L row by row with log-diagonal, log σ²) → (L, σ²)."""
    L = np.zeros((d, d))
    rows, cols = np.tril_indices(d)
    L[rows, cols] = theta[:-1]
    idx = np.arange(d)
    L[idx, idx] = np.exp(L[idx, idx])
    return L, float(np.exp(theta[-1]))


def _pack(L: np.ndarray, sigma2: float) -> np.ndarray:
    d = L.shape[0]
    Lc = L.copy()
    idx = np.arange(d)
    Lc[idx, idx] = np.log(Lc[idx, idx])
    return np.concatenate([Lc[np.tril_indices(d)], [np.log(sigma2)]])


def _profiled(
    theta: np.ndarray,
    st: _Stats,
    lam: float,
    collapse: bool = False,
    *,
    D: np.ndarray | None = None,
) -> tuple[float, np.ndarray, np.ndarray, float]:
    """Profiled objective ℓ(β̂₀) − (λ/2)‖β̂₀‖², its gradient in θ, β̂₀ and ℓ(β̂₀).

    With ``collapse`` the objective is ℓ(β̂₀) − (λ/2)‖β̂₀‖² − ½log|P|, the collapsed likelihood
    with β₀ ~ N(0, λ⁻¹I) integrated out less its constant (d/2) log λ (:func:`collapsed_loglik`;
    with λ = 0 the restricted likelihood), with the same β̂₀ = P⁻¹r and ℓ(β̂₀).

    The objective and its gradient come from one vectorised pass over the instances
    (:func:`hierbandit.stats.arm_likelihood.arm_loglik`; β₀ profiled, the envelope theorem gives
    the gradient, module docstring; or integrated out). ``D``: the statistics in the layout of
    :func:`~hierbandit.stats.arm_likelihood.arm_stats`, made from ``st`` when not given.
    Returns ``(-inf, nan-gradient, nan, nan)`` when a d×d system is numerically singular or σ⁴
    underflows to 0 (the likelihood of rewards fitted exactly grows without bound as σ² → 0).
    """
    d = st.b.shape[1]
    if D is None:
        D = arm_stats(st.G, st.b, st.q)
    with np.errstate(over="ignore"):  # a line search's far trial point: refused below
        L, sigma2 = _unpack(theta, d)
    beta0 = np.zeros(d)
    # σ⁴ underflowed (the kernel divides by σ² and σ⁴), or θ overflowed
    if not (sigma2 * sigma2 > 0.0 and np.isfinite(sigma2) and np.all(np.isfinite(L))):
        return -np.inf, np.full(theta.shape, np.nan), beta0 * np.nan, np.nan
    gS = np.empty((d, d))
    mode = INTEGRATED if collapse else PROFILED
    T = float(st.n.sum())
    ll, s2_dsig, logdetP = arm_loglik(D, T, L, sigma2, lam, mode, beta0, _BLOCK, gS, np.empty(d))
    if not (np.isfinite(ll) and np.isfinite(s2_dsig) and np.all(np.isfinite(gS))):
        return -np.inf, np.full(theta.shape, np.nan), beta0 * np.nan, np.nan
    gL = 2.0 * gS @ L
    idx = np.arange(d)
    gL[idx, idx] *= L[idx, idx]  # ∂/∂log L_ii
    g = np.concatenate([gL[np.tril_indices(d)], [s2_dsig]])
    penalty = 0.5 * lam * float(beta0 @ beta0)
    if collapse:  # ll = ℓ(β̂₀) − penalty − ½log|P| [+ (d/2) log λ]
        f = ll - (0.5 * d * np.log(lam) if lam > 0.0 else 0.0)
        return f, g, beta0, f + penalty + 0.5 * logdetP
    return ll - penalty, g, beta0, ll


def _moment_start(st: _Stats) -> tuple[np.ndarray, float]:
    """Starting values: OLS-scatter Σ and pooled within-instance residual variance σ².

    σ² = Σ_j RSS_j / Σ_j (n_j − d) over instances with full-rank G_j (else the pooled OLS residual
    variance, else 1); Σ = scatter of the per-instance OLS estimates / (N_eff − 1) with eigenvalues
    floored at 1e-3 × its mean variance (else I).
    """
    G, b, q, n = st
    N, d = b.shape
    B = np.full((N, d), np.nan)
    ok = np.zeros(N, dtype=bool)
    K.ols_all(G, b, 0.0, 1e-10, B, ok)
    sigma2 = 1.0
    df = int(np.sum(n[ok] - d))
    rss = float(np.sum(q[ok] - np.einsum("jd,jd->j", B[ok], b[ok])))
    if df > 0 and rss > 0:
        sigma2 = rss / df
    else:
        Gs, bs, n_rows = G.sum(0), b.sum(0), int(n.sum())
        if n_rows > d and np.linalg.matrix_rank(Gs) == d:
            rss = float(q.sum() - bs @ np.linalg.solve(Gs, bs))
            if rss > 0:
                sigma2 = rss / (n_rows - d)
    Sigma = np.eye(d)
    if ok.sum() >= 2:
        S = np.cov(B[ok], rowvar=False).reshape(d, d)
        scale = float(np.trace(S)) / d
        if np.isfinite(scale) and scale > 0:
            w, U = np.linalg.eigh(0.5 * (S + S.T))
            Sigma = (U * np.maximum(w, 1e-3 * scale)) @ U.T
    return 0.5 * (Sigma + Sigma.T), sigma2


def _newton_polish(
    fun: Any, theta: np.ndarray, steps: int = 2, gtol: float = 1e-15, reach: float = 1e-3
) -> np.ndarray:
    """Newton steps from the quasi-Newton optimum, with a forward-difference Hessian of the
    analytic gradient, each kept only if it lowers the objective or its gradient.

    L-BFGS-B stops when its line search runs out of floating-point progress, a few 1e-8 from
    the optimum in relative terms, so two sums of the same rows in a different order (in memory
    and out of core) gave maxima that differed by that much. From there Newton's method
    converges quadratically: after one or two steps the estimate is the optimum to about 1e-12
    and no longer depends on the order of the sums. Near a singular Σ̂ (some log L_ii → −∞) the
    Hessian is nearly singular and the step is refused, and so is a step longer than
    ``reach`` in any coordinate of θ (a polish, not a search).
    """
    f0, g = fun(theta)
    for _ in range(steps):
        if not (np.isfinite(f0) and np.all(np.isfinite(g))) or np.max(np.abs(g)) <= gtol:
            break
        h = 1e-6 * np.maximum(1.0, np.abs(theta))
        H = np.empty((theta.size, theta.size))
        for i in range(theta.size):
            e = np.zeros_like(theta)
            e[i] = h[i]
            H[:, i] = (fun(theta + e)[1] - g) / h[i]
        try:
            step = -sla.cho_solve(sla.cho_factor(0.5 * (H + H.T)), g)
        except sla.LinAlgError:
            break
        if not np.max(np.abs(step)) <= reach:
            break
        f1, g1 = fun(theta + step)
        if not (f1 <= f0 or np.max(np.abs(g1)) < np.max(np.abs(g))) or not np.isfinite(f1):
            break
        theta, f0, g = theta + step, f1, g1
    return theta


def fit_type2_ml(
    G: Any,
    b: Any,
    q: Any,
    n: Any,
    *,
    lam: float = 0.0,
    Sigma_init: Any = None,
    sigma2_init: float | None = None,
    tol: float = 1e-10,
    max_iter: int = 5000,
    beta0: str = "profile",
) -> MLResult:
    """Type-II maximum likelihood of (β₀, Σ, σ²) for one arm from sufficient statistics.

    Maximises log p(y | β₀, Σ, σ²) − (λ/2)‖β₀‖² (:func:`marginal_loglik`; the β_j integrated
    out). With λ = 0 this is the maximum-likelihood fit of the linear mixed model with random
    effects on every feature and an unstructured Σ (``statsmodels`` ``MixedLM(..., exog_re=X)``
    with ``reml=False``); with λ > 0 it is the mode in β₀ under the N(0, λ⁻¹I) hyperprior of the
    ebm paper (§4), jointly with ML for (Σ, σ²).

    β₀ is profiled out analytically: for fixed (Σ, σ²) the objective is a concave quadratic in β₀
    maximised by the closed-form β̂₀ = P⁻¹r = Φr (§4.1 Step 2; the GLS estimator for λ = 0). The
    profiled objective is maximised over θ = (Cholesky factor L of Σ with log-diagonal, log σ²) by
    L-BFGS-B with analytic gradients (module docstring). A singular Σ̂ is approached as a limit
    (some log L_ii → −∞).

    Parameters
    ----------
    G, b, q, n
        Per-instance sufficient statistics (see :func:`marginal_loglik`).
    lam : float
        Precision λ ≥ 0 of the Gaussian penalty / hyperprior on β₀.
    Sigma_init : array (d, d), optional
        Starting Σ (PSD; eigenvalues are floored to make it positive definite). Default: the
        sample covariance of the per-instance OLS estimates (instances with full-rank G_j), or I
        when fewer than two instances have one.
    sigma2_init : float, optional
        Starting σ² (> 0). Default: the pooled within-instance OLS residual variance, else the
        pooled OLS residual variance, else 1.
    tol : float
        Convergence tolerance on the largest component of the gradient of the per-row objective
        (objective / Σ_j n_j) with respect to θ (L-BFGS-B ``gtol``). The relative-reduction test
        ``ftol`` is set to 1e-15 so that the gradient test governs; a run that stops on a failed
        line search at the limit of floating-point progress still counts as converged when that
        gradient is below 1e-6.
    max_iter : int
        Maximum number of quasi-Newton iterations.
    beta0 : {"profile", "integrate"}
        How the shared mean enters: maximised jointly with (Σ, σ²) (``"profile"``, the default
        described above), or integrated out under its N(0, λ⁻¹I) hyperprior, so that (Σ, σ²)
        maximise the collapsed likelihood :func:`collapsed_loglik` (``"integrate"``; with λ = 0
        this is REML). The second is the objective of the online step of EbmTS/EbmUCB
        (``hyper_method="ml"``, :func:`hierbandit.stats.online_ml.online_ml_step`,
        docs/maths/ebm.md §7.5). ``shared_mean`` is β̂₀ = P⁻¹r either way, and ``loglik`` is
        ℓ(β̂₀), not the collapsed value.

    Returns
    -------
    MLResult

    Raises
    ------
    ValueError
        If there are no rows, or if λ = 0 and the pooled design Σ_j G_j is singular: the shared
        mean is then not identified (at least d rows in total whose features span R^d are
        needed; use lam > 0 otherwise).
    """
    st = _check_stats(G, b, q, n)
    d = st.b.shape[1]
    lam = check_scalar(lam, "lam", low=0.0)
    tol = check_scalar(tol, "tol", low=0.0, low_inclusive=False)
    max_iter = check_positive_int(max_iter, "max_iter")
    if beta0 not in ("profile", "integrate"):
        raise ValueError(f"beta0 must be 'profile' or 'integrate', got {beta0!r}")
    collapse = beta0 == "integrate"
    T = int(st.n.sum())
    if T == 0:
        raise ValueError("n: the arm has no rows; the marginal likelihood is flat in (Σ, σ²)")
    if lam == 0.0:
        rank = int(np.linalg.matrix_rank(st.G.sum(axis=0)))
        if rank < d:
            raise ValueError(
                f"the shared mean is not identified with lam=0: the pooled information "
                f"Σ_j X_jᵀV_j⁻¹X_j is singular because the pooled design Σ_j G_j has rank {rank} "
                f"< d={d} ({T} rows over {int(np.count_nonzero(st.n))} non-empty instances); "
                f"at least d={d} rows in total whose features span R^{d} are needed (and, for "
                f"Σ to be estimable in practice, several instances with >= d={d} rows each); "
                f"or use lam > 0"
            )
    S0, s20 = _moment_start(st)
    starts: list[tuple[np.ndarray, float]] = []
    if sigma2_init is not None:
        s20 = check_scalar(sigma2_init, "sigma2_init", low=0.0, low_inclusive=False)
    if Sigma_init is not None:
        S0 = check_covariance(Sigma_init, d, "Sigma_init")
        scale = max(float(np.trace(S0)) / d, 1e-300)
        w, U = np.linalg.eigh(S0)
        S0 = (U * np.maximum(w, 1e-6 * scale)) @ U.T
        starts.append((0.5 * (S0 + S0.T), s20))
    else:
        # The moment start (scatter of per-instance OLS estimates) is inflated by OLS noise when
        # some instances' designs are nearly singular, and L-BFGS-B can stop on a plateau far from
        # the maximum there; two scale-aware isotropic starts guard against that, and the best
        # penalised likelihood wins.
        feat_var = float(np.sum(np.trace(st.G, axis1=1, axis2=2)) / (d * T))
        iso = s20 / max(feat_var, 1e-300)
        starts += [(S0, s20), (iso * np.eye(d), s20), (0.1 * iso * np.eye(d), s20)]

    scale = 1.0 / T  # optimise the per-row objective so that gtol is scale-free
    D = arm_stats(st.G, st.b, st.q)  # once for every evaluation

    def fun(theta: np.ndarray) -> tuple[float, np.ndarray]:
        f, g, _, _ = _profiled(theta, st, lam, collapse, D=D)
        if not np.isfinite(f):
            return np.inf, np.zeros_like(theta)
        return -f * scale, -g * scale

    res = None
    for S_start, s2_start in starts:
        theta0 = _pack(np.linalg.cholesky(S_start), s2_start)
        f0, _ = fun(theta0)
        if not np.isfinite(f0):  # pragma: no cover - guarded by the rank check above
            continue
        cand = optimize.minimize(
            fun,
            theta0,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": max_iter, "ftol": 1e-15, "gtol": tol, "maxcor": 30},
        )
        if res is None or cand.fun < res.fun:
            res = cand
    if res is None:  # pragma: no cover
        raise ValueError("the objective is not finite at any starting value")
    theta = _newton_polish(fun, res.x)
    _, g, mean0, ll = _profiled(theta, st, lam, collapse, D=D)
    Lh, sigma2 = _unpack(theta, d)
    gnorm = float(np.max(np.abs(g))) * scale if np.all(np.isfinite(g)) else np.inf
    # L-BFGS-B can stop at the limit of floating-point progress with an "abnormal" line search;
    # accept the point when the per-row gradient is negligible.
    converged = bool(res.success) or gnorm <= 1e-6
    message = f"{res.message} (max |gradient| per row {gnorm:.2e})"
    return MLResult(
        shared_mean=mean0,
        Sigma=0.5 * (Lh @ Lh.T + (Lh @ Lh.T).T),
        sigma2=sigma2,
        loglik=float(ll),
        converged=converged,
        n_iter=int(res.nit),
        message=str(message),
    )
