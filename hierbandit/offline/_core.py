"""Numerical core shared by the offline clustering algorithms (plain arrays, no validation).

Everything an offline algorithm needs is a function of the per-user sufficient statistics
G_u = Σ a aᵀ, b_u = Σ r a and N_u ([OFF] Eq. 1), computed once per dataset:

* :func:`user_suffstats` — one pass over the rows (numba), reusing the unit kernel of
  :mod:`hierbandit.stats.ridge`;
* :func:`ridge_solve` — ridge estimates and inverses (reg·I + G)⁻¹ of many units at once, by
  :class:`hierbandit.stats.ridge.RidgeStats` (exact Cholesky recomputation);
* :func:`row_blocks` / :func:`distance_block` — the pairwise stage, vectorised over blocks of
  user pairs: ‖θ̂_u − θ̂_v‖ for a block of rows against every user costs one matrix product,
  O(U²·d) in total and O(block·U) memory;
* :func:`aggregate_block` — the neighbour sums Σ_{v∈V(u)} (G_v, b_v, N_v) of a block of users,
  by a dense matrix product, a sparse one, or the complement of a nearly complete neighbourhood
  (whichever is cheaper), so a sparse graph costs O(|E|·d²);
* :func:`lcb_ucb_scores` and :func:`argmax_random_ties` — the decision phase.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from numba import njit

from hierbandit.stats.ridge import RidgeStats, suff_add
from hierbandit.stats.suffstats import SuffStats

__all__ = [
    "aggregate_block",
    "argmax_random_ties",
    "beta_radius",
    "ci_eigen",
    "ci_paper",
    "confidence_F",
    "distance_block",
    "empirical_lambda_a",
    "lcb_ucb_scores",
    "n_min_theory",
    "ridge_solve",
    "row_blocks",
    "smoothed_regularity",
    "user_suffstats",
]

#: entries of one (rows × users) block of the pairwise stage (~32 MB of float64)
BLOCK_ENTRIES = 4_000_000
#: below this fraction of nonzeros (or of zeros) a neighbour block is aggregated sparsely
SPARSE_DENSITY = 0.05


@njit(cache=True, nogil=True)
def _suff_rows(users, X, y, G, b, q, n):
    for t in range(users.shape[0]):
        suff_add(G, b, q, n, users[t], X[t], y[t])


def user_suffstats(users: np.ndarray, X: np.ndarray, y: np.ndarray, n_users: int) -> SuffStats:
    """Per-user G = Σ a aᵀ, b = Σ r a, q = Σ r², N (one pass over the rows, O(n·d²))."""
    d = X.shape[1]
    G = np.zeros((n_users, d, d))
    b = np.zeros((n_users, d))
    q = np.zeros(n_users)
    n = np.zeros(n_users, dtype=np.int64)
    if users.size:
        _suff_rows(
            np.ascontiguousarray(users, dtype=np.int64),
            np.ascontiguousarray(X, dtype=np.float64),
            np.ascontiguousarray(y, dtype=np.float64),
            G,
            b,
            q,
            n,
        )
    return SuffStats(G, b, q, n)


def ridge_solve(
    G: np.ndarray, b: np.ndarray, reg: float, extra_diag: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """θ_u = A_u⁻¹ b_u and A_u⁻¹ for A_u = (reg + extra_diag_u)·I + G_u, every unit at once.

    Uses :class:`~hierbandit.stats.ridge.RidgeStats` (exact Cholesky inverse per unit).
    """
    U, d = b.shape
    rs = RidgeStats(U, d, reg=reg, recompute_every=None)
    Gs = np.array(G, dtype=np.float64, copy=True)
    if extra_diag is not None:
        idx = np.arange(d)
        Gs[:, idx, idx] += np.asarray(extra_diag, dtype=np.float64)[:, None]
    rs.G = Gs
    rs.b = np.ascontiguousarray(b, dtype=np.float64)
    rs.recompute()
    return rs.theta, rs.Ainv


def confidence_F(T: np.ndarray) -> np.ndarray:
    """F(T) = √((1 + ln(1 + T)) / (1 + T)), the CLUB/SCLUB confidence function."""
    T = np.asarray(T, dtype=np.float64)
    return np.sqrt((1.0 + np.log1p(T)) / (1.0 + T))


def beta_radius(
    n_samples: np.ndarray,
    reg_total: np.ndarray,
    d: int,
    lam: float,
    delta: float,
    n_users: int,
    bias: np.ndarray | float | None = None,
) -> np.ndarray:
    """√(d·log(1 + N / (reg_total·d)) + 2·log(2U/δ)) + bias, the radius of [OFF] Eq. (1)/Alg. 1–2.

    ``reg_total`` is λ (Off-CLUB, Eq. 1) or λ·ñ_u (Off-C²LUB line 12); ``bias`` defaults to √λ.
    """
    n_samples = np.asarray(n_samples, dtype=np.float64)
    reg_total = np.asarray(reg_total, dtype=np.float64)
    core = d * np.log1p(n_samples / (reg_total * d)) + 2.0 * math.log(2.0 * n_users / delta)
    if bias is None:
        bias = math.sqrt(lam)
    return np.sqrt(core) + bias


def ci_paper(
    n: np.ndarray, d: int, lam: float, delta: float, n_users: int, lambda_tilde_a: float
) -> np.ndarray:
    """CI_u of [OFF] Eq. (1); +inf for users without data (docs/offline.md, decision 6)."""
    n = np.asarray(n, dtype=np.float64)
    num = beta_radius(n, np.full(n.shape, lam), d, lam, delta, n_users)
    den = np.sqrt(lambda_tilde_a * n / 2.0)
    out = np.full(n.shape, np.inf)
    ok = n > 0
    out[ok] = num[ok] / den[ok]
    return out


def ci_eigen(
    G: np.ndarray, n: np.ndarray, d: int, lam: float, delta: float, n_users: int
) -> np.ndarray:
    """CI_u with the denominator √λ_min(G_u) instead of √(λ̃_a N_u / 2) ([OFF] Remark A.2).

    +inf where G_u is singular (fewer than d linearly independent actions).
    """
    n = np.asarray(n, dtype=np.float64)
    num = beta_radius(n, np.full(n.shape, lam), d, lam, delta, n_users)
    lmin = np.linalg.eigvalsh(G)[:, 0] if G.shape[0] else np.zeros(0)
    scale = np.maximum(np.trace(G, axis1=1, axis2=2), 1.0)
    out = np.full(n.shape, np.inf)
    ok = lmin > 1e-10 * scale
    out[ok] = num[ok] / np.sqrt(lmin[ok])
    return out


def empirical_lambda_a(G_total: np.ndarray, n_total: int) -> float:
    """Smallest eigenvalue of the pooled second moment (1/N) Σ a aᵀ.

    See docs/offline.md, decision 1.
    """
    if n_total <= 0:
        raise ValueError("the dataset has no rows: lambda_tilde_a='lambda_a' needs data")
    return float(np.linalg.eigvalsh(G_total / n_total)[0])


def smoothed_regularity(lambda_a: float, sigma2: float, n_candidates: int) -> float:
    """λ̃_a = ∫₀^{λ_a} (1 − exp(−(λ_a − x)² / (2σ²)))^S dx ([OFF] Assumption 3.1)."""
    from scipy.integrate import quad

    if lambda_a <= 0:
        return 0.0
    s2 = max(float(sigma2), 1e-300)

    def f(x: float) -> float:
        return float((-np.expm1(-((lambda_a - x) ** 2) / (2.0 * s2))) ** n_candidates)

    val, _ = quad(f, 0.0, lambda_a, limit=200, epsabs=0.0, epsrel=1e-10)
    return float(val)


def n_min_theory(lambda_tilde_a: float, n_users: int, d: int, delta: float) -> float:
    """N_min = 16/λ̃_a² · log(8·U·d / (λ̃_a²·δ)) (Algorithm 1, line 2)."""
    lt2 = lambda_tilde_a**2
    return 16.0 / lt2 * math.log(8.0 * n_users * d / (lt2 * delta))


def row_blocks(n_rows: int, n_cols: int, max_entries: int | None = None) -> list[tuple[int, int]]:
    """Contiguous row ranges whose (rows × n_cols) blocks hold at most ``max_entries``
    (default :data:`BLOCK_ENTRIES`)."""
    cap = BLOCK_ENTRIES if max_entries is None else max_entries
    step = max(1, cap // max(n_cols, 1))
    return [(r, min(r + step, n_rows)) for r in range(0, n_rows, step)]


def distance_block(theta: np.ndarray, sq: np.ndarray, r0: int, r1: int) -> np.ndarray:
    """‖θ_u − θ_v‖₂ for u in [r0, r1) and every v, by ‖θ_u‖² + ‖θ_v‖² − 2 θ_uᵀθ_v (one GEMM)."""
    D2 = sq[r0:r1, None] + sq[None, :] - 2.0 * (theta[r0:r1] @ theta.T)
    np.maximum(D2, 0.0, out=D2)
    idx = np.arange(r0, r1)
    D2[idx - r0, idx] = 0.0
    return np.sqrt(D2, out=D2)


def aggregate_block(
    mask: np.ndarray, Gflat: np.ndarray, b: np.ndarray, n: np.ndarray, totals: tuple
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Σ over the neighbours in each row of ``mask`` (rows × U, bool) of G, b and N.

    ``totals`` = (ΣG, Σb, ΣN) over all users, used when the rows are nearly complete.
    """
    density = float(mask.mean()) if mask.size else 0.0
    nf = n.astype(np.float64)
    if density <= SPARSE_DENSITY:
        S = sp.csr_array(mask.astype(np.float64))
        return S @ Gflat, S @ b, S @ nf
    if density >= 1.0 - SPARSE_DENSITY:
        S = sp.csr_array((~mask).astype(np.float64))
        Gt, bt, nt = totals
        return Gt[None, :] - S @ Gflat, bt[None, :] - S @ b, nt - S @ nf
    M = mask.astype(np.float64)
    return M @ Gflat, M @ b, M @ nf


def lcb_ucb_scores(
    theta: np.ndarray,
    Ainv: np.ndarray,
    beta: np.ndarray,
    actions: np.ndarray,
    sign: float,
) -> np.ndarray:
    """θ_uᵀa + sign·β_u·‖a‖_{A_u⁻¹} for rows (θ_u, A_u⁻¹, β_u) and actions (n, S, d).

    ``sign = −1`` is the pessimistic (LCB) rule of the offline algorithms, ``+1`` the optimistic
    (UCB) rule of the adapted online baselines.
    """
    mean = np.einsum("nsd,nd->ns", actions, theta)
    Aa = np.matmul(actions, Ainv)  # (n, S, d): a_sᵀ A⁻¹ (A⁻¹ symmetric)
    quad = np.einsum("nsd,nsd->ns", Aa, actions)
    np.maximum(quad, 0.0, out=quad)
    return mean + sign * beta[:, None] * np.sqrt(quad)


def argmax_random_ties(
    scores: np.ndarray, rng: np.random.Generator, rtol: float = 1e-12
) -> np.ndarray:
    """Row-wise argmax; rows whose maximum is tied (within ``rtol``) pick uniformly among the
    tied entries. Random numbers are drawn only for tied rows."""
    best = scores.max(axis=1, keepdims=True)
    tied = scores >= best - rtol * (1.0 + np.abs(best))
    choice = scores.argmax(axis=1)
    multi = np.flatnonzero(tied.sum(axis=1) > 1)
    if multi.size:
        keys = rng.random((multi.size, scores.shape[1]))
        keys[~tied[multi]] = -1.0
        choice[multi] = keys.argmax(axis=1)
    return choice
