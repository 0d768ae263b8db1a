"""EM for the user-level mixture of linear regressions (docs/sclub.md, "The Bayesian audit").

The generative model behind the clustering bandits: every user u belongs to one of K components,
z_u ~ Cat(w), and *all* of the user's rewards follow the component's regression,

    r_u^i ~ N(x_u^iᵀ μ_{z_u}, σ²).

The assignment is shared by all of a user's rows, so the likelihood of user u under component k
depends on the data only through the user's sufficient statistics G_u = Σxxᵀ, b_u = Σrx,
rr_u = Σr² and N_u (the statistics the bandits keep anyway):

    ℓ_uk = −N_u/2 · log(2πσ²) − (rr_u − 2μ_kᵀb_u + μ_kᵀG_uμ_k) / (2σ²).

EM alternates the responsibilities r_uk ∝ w_k e^{ℓ_uk} with the closed-form M-step

    μ_k = (Σ_u r_uk G_u + εI)⁻¹ Σ_u r_uk b_u,
    σ² = Σ_{u,k} r_uk (rr_u − 2μ_kᵀb_u + μ_kᵀG_uμ_k) / Σ_u N_u,
    w_k ∝ max(Σ_u r_uk + α₀ − 1, 0)        (MAP under a Dir(α₀) prior; α₀ = 1 is the MLE).

With α₀ < 1 components that lose all their users are emptied (a sparse "overfitted mixture"), so
the number of occupied components estimates the number of clusters. Label-invariant summaries:
the co-clustering matrix P_uv = Σ_k r_uk r_vk and the MAP labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr
from scipy.special import logsumexp

from hierbandit._validation import as_generator, check_positive_int, check_scalar

__all__ = ["MixtureEMResult", "check_user_stats", "fit_mixture_em", "user_loglik"]


def check_user_stats(
    G: Any, b: Any, rr: Any, N: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate per-user statistics: G (U, d, d) symmetric, b (U, d), rr (U,) ≥ 0, N (U,) ≥ 0."""
    b = np.asarray(b, dtype=float)
    if b.ndim != 2 or b.shape[0] == 0 or b.shape[1] == 0:
        raise ValueError(f"b must have shape (n_users, d), got {b.shape}")
    U, d = b.shape
    G = np.asarray(G, dtype=float)
    if G.shape != (U, d, d):
        raise ValueError(f"G must have shape {(U, d, d)}, got {G.shape}")
    rr = np.asarray(rr, dtype=float)
    if rr.shape != (U,):
        raise ValueError(f"rr must have shape ({U},), got {rr.shape}")
    N = np.asarray(N)
    if N.shape != (U,):
        raise ValueError(f"N must have shape ({U},), got {N.shape}")
    if N.dtype.kind not in "iuf" or N.dtype.kind == "b":
        raise TypeError(f"N must be numeric counts, got dtype {N.dtype}")
    N = N.astype(float)
    for name, arr in (("G", G), ("b", b), ("rr", rr), ("N", N)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite (no NaN or inf)")
    if np.any(N < 0) or np.any(rr < 0):
        raise ValueError("N and rr must be non-negative")
    if N.sum() <= 0:
        raise ValueError("N must contain at least one observation")
    if not np.allclose(G, np.swapaxes(G, 1, 2), rtol=1e-8, atol=1e-10 * max(1.0, np.abs(G).max())):
        raise ValueError("G must be symmetric")
    return G, b, rr, N


def _quad(G: np.ndarray, b: np.ndarray, rr: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Q_uk = rr_u − 2μ_kᵀb_u + μ_kᵀG_uμ_k, shape (U, K) (clipped at 0)."""
    Gmu = np.einsum("uij,kj->uki", G, mu)
    quad = np.einsum("uki,ki->uk", Gmu, mu)
    Q = rr[:, None] - 2.0 * b @ mu.T + quad
    return np.maximum(Q, 0.0)


def user_loglik(G: Any, b: Any, rr: Any, N: Any, means: Any, sigma2: float) -> np.ndarray:
    """ℓ_uk, the log-likelihood of all of user u's rows under component k, shape (U, K)."""
    G, b, rr, N = check_user_stats(G, b, rr, N)
    mu = np.asarray(means, dtype=float)
    if mu.ndim != 2 or mu.shape[1] != b.shape[1]:
        raise ValueError(f"means must have shape (K, {b.shape[1]}), got {mu.shape}")
    s2 = check_scalar(sigma2, "sigma2", low=0.0, low_inclusive=False)
    return _loglik(G, b, rr, N, mu, s2)


def _loglik(G, b, rr, N, mu, s2):
    return -0.5 * N[:, None] * np.log(2.0 * np.pi * s2) - _quad(G, b, rr, mu) / (2.0 * s2)


@dataclass
class MixtureEMResult:
    """Fitted user-level mixture (one EM run, or the best of several restarts).

    Attributes
    ----------
    weights : ndarray, shape (K,)
    means : ndarray, shape (K, d)
    sigma2 : float
    responsibilities : ndarray, shape (U, K)
    loglik : float
        Log-likelihood (plus the log Dirichlet prior density of the weights when α₀ ≠ 1).
    n_iter : int
    converged : bool
    history : list of float
        Objective after every iteration (non-decreasing up to rounding).
    """

    weights: np.ndarray
    means: np.ndarray
    sigma2: float
    responsibilities: np.ndarray
    loglik: float
    n_iter: int
    converged: bool
    history: list[float] = field(default_factory=list)

    @property
    def labels(self) -> np.ndarray:
        """MAP component of every user."""
        return self.responsibilities.argmax(axis=1)

    @property
    def n_occupied(self) -> int:
        """Components that are the MAP component of at least one user."""
        return int(np.unique(self.labels).size)

    def coclustering(self) -> np.ndarray:
        """P_uv = Σ_k r_uk r_vk: probability that users u and v share a component."""
        R = self.responsibilities
        P = R @ R.T
        np.fill_diagonal(P, 1.0)
        return np.clip(P, 0.0, 1.0)

    def bic(self, N_total: float) -> float:
        """Bayesian information criterion −2ℓ + p log n with p = (K − 1) + Kd + 1 and n the
        number of observations."""
        K, d = self.means.shape
        p = (K - 1) + K * d + 1
        return float(-2.0 * self.loglik + p * np.log(N_total))

    def to_dataset(self) -> xr.Dataset:
        """The fit as an xarray Dataset (component, feature, user)."""
        K, d = self.means.shape
        U = self.responsibilities.shape[0]
        return xr.Dataset(
            {
                "weights": (("component",), self.weights),
                "means": (("component", "feature"), self.means),
                "responsibilities": (("user", "component"), self.responsibilities),
                "labels": (("user",), self.labels),
            },
            coords={"component": np.arange(K), "feature": np.arange(d), "user": np.arange(U)},
            attrs={
                "sigma2": self.sigma2,
                "loglik": self.loglik,
                "n_iter": self.n_iter,
                "converged": int(self.converged),
            },
        )


def _ridge_estimates(G: np.ndarray, b: np.ndarray, reg: float) -> np.ndarray:
    d = b.shape[1]
    return np.linalg.solve(G + reg * np.eye(d), b[:, :, None])[:, :, 0]


def _kmeanspp(points: np.ndarray, weights: np.ndarray, K: int, g: np.random.Generator):
    """k-means++ seeding followed by a few Lloyd iterations; returns hard labels."""
    U = points.shape[0]
    w = weights / weights.sum()
    centres = [points[g.choice(U, p=w)]]
    for _ in range(1, K):
        d2 = np.min([((points - c) ** 2).sum(axis=1) for c in centres], axis=0) * weights
        tot = d2.sum()
        idx = g.choice(U, p=d2 / tot) if tot > 0 else g.integers(U)
        centres.append(points[idx])
    C = np.array(centres)
    for _ in range(20):
        lab = ((points[:, None, :] - C[None]) ** 2).sum(axis=2).argmin(axis=1)
        for k in range(K):
            m = lab == k
            if np.any(m & (weights > 0)):
                C[k] = np.average(points[m], axis=0, weights=weights[m] + 1e-12)
    return lab


def _m_step(G, b, rr, N, R, alpha0, ridge):
    d = b.shape[1]
    nk = R.sum(axis=0)
    A = np.einsum("uk,uij->kij", R, G) + ridge * np.eye(d)
    rhs = R.T @ b
    mu = np.linalg.solve(A, rhs[:, :, None])[:, :, 0]
    Q = _quad(G, b, rr, mu)
    s2 = float((R * Q).sum() / N.sum())
    s2 = max(s2, 1e-12)
    w = np.maximum(nk + alpha0 - 1.0, 0.0)
    if w.sum() <= 0:
        w = np.ones_like(w)
    w = w / w.sum()
    return w, mu, s2


def _objective(G, b, rr, N, w, mu, s2, alpha0):
    with np.errstate(divide="ignore"):
        logw = np.log(w)
    ll = _loglik(G, b, rr, N, mu, s2)
    total = float(logsumexp(logw[None, :] + ll, axis=1).sum())
    if alpha0 != 1.0:
        occupied = w > 0
        total += float((alpha0 - 1.0) * logw[occupied].sum())
    return total, ll, logw


def fit_mixture_em(
    G: Any,
    b: Any,
    rr: Any,
    N: Any,
    n_components: int,
    *,
    alpha0: float = 1.0,
    ridge: float = 1e-6,
    max_iter: int = 500,
    tol: float = 1e-8,
    n_init: int = 5,
    init_reg: float = 1.0,
    rng: Any = None,
) -> MixtureEMResult:
    """Fit the user-level mixture of linear regressions by EM from per-user statistics.

    Parameters
    ----------
    G, b, rr, N : array_like
        Per-user Σxxᵀ (U, d, d), Σrx (U, d), Σr² (U,) and row counts (U,).
    n_components : int
        Number of components K (an upper bound when ``alpha0 < 1``).
    alpha0 : float, default 1.0
        Dirichlet(α₀) prior on the weights; the M-step is the MAP update. 1 gives maximum
        likelihood; values below 1 empty superfluous components.
    ridge : float, default 1e-6
        ε of the component M-step (defines μ_k for components whose users span < d directions).
    max_iter, tol
        Stop after ``max_iter`` iterations or when the objective improves by less than
        ``tol·(1 + |objective|)``.
    n_init : int, default 5
        Restarts (k-means++ on the users' ridge estimates, weighted by their counts); the fit
        with the largest objective is returned.
    init_reg : float, default 1.0
        Ridge of the per-user estimates used to initialise.
    rng : seed or Generator
        Randomness of the initialisations.

    Returns
    -------
    MixtureEMResult
    """
    G, b, rr, N = check_user_stats(G, b, rr, N)
    K = check_positive_int(n_components, "n_components")
    U = b.shape[0]
    if K > U:
        raise ValueError(f"n_components must be <= n_users ({U}), got {K}")
    alpha0 = check_scalar(alpha0, "alpha0", low=0.0, low_inclusive=False)
    ridge = check_scalar(ridge, "ridge", low=0.0, low_inclusive=False)
    max_iter = check_positive_int(max_iter, "max_iter")
    tol = check_scalar(tol, "tol", low=0.0)
    n_init = check_positive_int(n_init, "n_init")
    init_reg = check_scalar(init_reg, "init_reg", low=0.0, low_inclusive=False)
    g = as_generator(rng)

    theta0 = _ridge_estimates(G, b, init_reg)
    weights_u = np.maximum(N, 0.0) + 1e-9
    best: MixtureEMResult | None = None
    for _ in range(n_init):
        lab = _kmeanspp(theta0, weights_u, K, g)
        R = np.zeros((U, K))
        R[np.arange(U), lab] = 1.0
        R = 0.98 * R + 0.02 / K
        w, mu, s2 = _m_step(G, b, rr, N, R, alpha0, ridge)
        history: list[float] = []
        converged = False
        obj, ll, logw = _objective(G, b, rr, N, w, mu, s2, alpha0)
        it = 0
        for _ in range(max_iter):
            it += 1
            logits = logw[None, :] + ll
            R = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
            w, mu, s2 = _m_step(G, b, rr, N, R, alpha0, ridge)
            new, ll, logw = _objective(G, b, rr, N, w, mu, s2, alpha0)
            history.append(new)
            if abs(new - obj) <= tol * (1.0 + abs(new)):
                obj = new
                converged = True
                break
            obj = new
        logits = logw[None, :] + ll
        R = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
        res = MixtureEMResult(w, mu, s2, R, obj, it, converged, history)
        if best is None or res.loglik > best.loglik:
            best = res
    assert best is not None
    return best
