"""The exact two-level hierarchical posterior of the ebm paper, from sufficient statistics.

For one arm with per-instance statistics (G_j, b_j), a covariance Σ, a noise variance σ² and a
hyperprior precision λ on the shared mean,

* β₀ | data ~ N(β̂₀, Φ) with Φ = (λI + Σ_j X_jᵀV_j⁻¹X_j)⁻¹ and β̂₀ = Φ Σ_j X_jᵀV_j⁻¹y_j (§4.1 step 2);
* β_j | data ~ N(β̂_j, C_j) with β̂_j = σ²C̃_jΣ⁻¹β̂₀ + C̃_j X_jᵀy_j and
  C_j = σ²C̃_j + σ⁴C̃_jΣ⁻¹ΦΣ⁻¹C̃_j, C̃_j = (G_j + σ²Σ⁻¹)⁻¹ (eq. 4.1–4.2),

all computed in the inverse-free form, valid for a singular positive semi-definite Σ
(docs/maths/ebm.md §4), with C̃_j a Gram matrix L S_j⁻¹ Lᵀ (Σ = L Lᵀ, S_j = σ²I + LᵀG_jL), so
every posterior covariance is positive semi-definite by construction.
The T×T matrices V_j are never formed: X_jᵀV_j⁻¹X_j = A_jᵀG_j/σ² and X_jᵀV_j⁻¹y_j = A_jᵀb_j/σ² with
A_j = σ²C̃_jΣ⁻¹ = σ²(ΣG_j + σ²I)⁻¹, the Woodbury identity (4.3) in d×d form.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import xarray as xr

from hierbandit._validation import (
    check_covariance,
    check_index,
    check_positive_int,
    check_scalar,
    check_vector,
)
from hierbandit.stats import kernels as K
from hierbandit.stats.arm_draws import UNROLLED_MAX, conditional_draws_unrolled
from hierbandit.stats.arm_likelihood import arm_stats
from hierbandit.stats.suffstats import suffstats
from hierbandit.stats.threads import over_threads

__all__ = [
    "HierarchicalPosterior",
    "IncrementalHierarchicalPosterior",
    "conditional_draws",
    "hierarchical_posterior",
    "posterior_cross_covariances",
    "posterior_given_hyper",
    "shared_prior_arrays",
]


class HierarchicalPosterior(NamedTuple):
    """Closed-form posterior of one arm's two-level model (arrays; see module docstring)."""

    shared_mean: np.ndarray  # β̂₀ (d,)
    shared_cov: np.ndarray  # Φ (d, d)
    mean: np.ndarray  # β̂_j (N, d)
    cov: np.ndarray  # C_j (N, d, d)
    Ctilde: np.ndarray  # C̃_j (N, d, d)
    A: np.ndarray  # A_j = σ² C̃_j Σ⁻¹ (N, d, d)
    precision: np.ndarray  # Φ⁻¹ (d, d)
    r: np.ndarray  # Σ_j X_jᵀ V_j⁻¹ y_j (d,)

    def to_dataset(self, **attrs: Any) -> xr.Dataset:
        """The posterior as an :class:`xarray.Dataset`, dims ``(instance, feature, feature_)``."""
        N, d = self.mean.shape
        return xr.Dataset(
            {
                "mean": (("instance", "feature"), self.mean),
                "cov": (("instance", "feature", "feature_"), self.cov),
                "shared_mean": (("feature",), self.shared_mean),
                "shared_cov": (("feature", "feature_"), self.shared_cov),
            },
            coords={
                "instance": np.arange(N),
                "feature": np.arange(d),
                "feature_": np.arange(d),
            },
            attrs=attrs,
        )


def _check_hyper(Sigma: Any, sigma2: Any, lam: Any, d: int) -> tuple[np.ndarray, float, float]:
    Sigma = check_covariance(Sigma, d, "Sigma")
    sigma2 = check_scalar(sigma2, "sigma2", low=0.0, low_inclusive=False)
    lam = check_scalar(lam, "lam", low=0.0)
    return Sigma, sigma2, lam


def shared_prior_arrays(
    lam: float, d: int, shared_prior: tuple[Any, Any] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Precision P0 and precision-weighted mean h0 of the shared mean's Gaussian prior.

    ``shared_prior=(mean, cov)`` (cov positive definite) replaces the paper's N(0, λ⁻¹I).
    """
    if shared_prior is None:
        return lam * np.eye(d), np.zeros(d)
    if not isinstance(shared_prior, tuple | list) or len(shared_prior) != 2:
        raise TypeError("shared_prior must be a (mean, cov) pair")
    m0 = check_vector(shared_prior[0], d, "shared_prior mean")
    S0 = check_covariance(shared_prior[1], d, "shared_prior cov")
    try:
        L = np.linalg.cholesky(S0)
    except np.linalg.LinAlgError:
        raise ValueError("shared_prior cov must be positive definite") from None
    Linv = np.linalg.inv(L)
    P0 = Linv.T @ Linv
    P0 = 0.5 * (P0 + P0.T)
    return P0, P0 @ m0


def _posterior_from_stats(
    G: np.ndarray,
    b: np.ndarray,
    Sigma: np.ndarray,
    sigma2: float,
    lam: float,
    shared_prior: tuple[Any, Any] | None = None,
) -> HierarchicalPosterior:
    N, d = b.shape
    P0, h0 = shared_prior_arrays(lam, d, shared_prior)
    Ct = np.empty((N, d, d))
    A = np.empty((N, d, d))
    P = np.empty((d, d))
    r = np.empty(d)
    Phi = np.empty((d, d))
    beta0 = np.empty(d)
    ok = K.arm_posterior(G, b, Sigma, sigma2, P0, h0, Ct, A, P, r, Phi, beta0)
    w = np.linalg.eigvalsh(P) if np.all(np.isfinite(P)) else np.array([np.nan])
    identified = bool(np.all(np.isfinite(w)) and w[0] > 1e-12 * max(float(np.abs(w).max()), 1e-300))
    # the fallback inverse of P (ok False) only matters when the prior itself may be improper
    flat = shared_prior is None and lam <= 0
    if not np.all(np.isfinite(Phi)) or (flat and (not ok or not identified)):
        raise ValueError(
            "the shared-mean posterior is improper: with lam=0 the data must identify the shared "
            "mean (pooled information matrix singular); use lam > 0"
        )
    mean = np.empty((N, d))
    cov = np.empty((N, d, d))
    for j in range(N):
        K.instance_moments(Ct[j], A[j], b[j], beta0, Phi, sigma2, mean[j], cov[j])
    return HierarchicalPosterior(beta0, Phi, mean, cov, Ct, A, P, r)


def posterior_given_hyper(
    G: Any,
    b: Any,
    Sigma: Any,
    sigma2: float,
    lam: float,
    *,
    shared_prior: tuple[Any, Any] | None = None,
) -> HierarchicalPosterior:
    """Exact posterior of one arm from sufficient statistics ``G`` (N, d, d) and ``b`` (N, d).

    Parameters
    ----------
    G, b
        Per-instance XᵀX and Xᵀy. An instance without data has G = 0, b = 0 and gets the
        predictive distribution N(β̂₀, Σ + Φ).
    Sigma
        Prior covariance of the instance coefficients around the shared mean; positive
        semi-definite, may be singular.
    sigma2
        Noise variance (> 0).
    lam
        Precision of the N(0, λ⁻¹I) hyperprior on the shared mean (λ ≥ 0; λ = 0 is a flat prior and
        needs data that identify the shared mean).
    shared_prior : (mean, cov), optional
        An informative Gaussian prior N(mean, cov) on the shared mean in place of N(0, λ⁻¹I),
        e.g. the shared-mean posterior of a prior fitted to historical data; ``lam`` is then
        unused.
    """
    G = np.array(G, dtype=float)
    b = np.array(b, dtype=float)
    if b.ndim != 2 or G.shape != (b.shape[0], b.shape[1], b.shape[1]):
        raise ValueError(
            f"G must have shape (N, d, d) and b shape (N, d); got {G.shape} and {b.shape}"
        )
    if not (np.all(np.isfinite(G)) and np.all(np.isfinite(b))):
        raise ValueError("G and b must be finite")
    Sigma, sigma2, lam = _check_hyper(Sigma, sigma2, lam, b.shape[1])
    return _posterior_from_stats(G, b, Sigma, sigma2, lam, shared_prior)


def hierarchical_posterior(
    X: Any,
    y: Any,
    instance: Any,
    n_instances: int,
    Sigma: Any,
    sigma2: float,
    lam: float,
) -> xr.Dataset:
    """Closed-form posterior of one arm's hierarchical linear model from raw rows.

    Parameters
    ----------
    X : array (T, d)
        Contexts of the rows where this arm was pulled.
    y : array (T,)
        Rewards.
    instance : int array (T,)
        Instance id of every row, in ``[0, n_instances)``.
    n_instances : int
        Number of instances N (instances without rows get the predictive distribution).
    Sigma, sigma2, lam
        Hyperparameters; see :func:`posterior_given_hyper`.

    Returns
    -------
    xarray.Dataset
        ``mean`` (instance, feature), ``cov`` ``(instance, feature, feature_)``, ``shared_mean``
        (feature) and ``shared_cov`` ``(feature, feature_)``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(20, 2)); y = X @ [1.0, -1.0] + rng.normal(size=20)
    >>> post = hierarchical_posterior(X, y, rng.integers(0, 3, 20), 3, np.eye(2), 1.0, 1e-3)
    >>> post["mean"].dims
    ('instance', 'feature')
    """
    stats = suffstats(X, y, instance, n_instances)
    Sigma, sigma2, lam = _check_hyper(Sigma, sigma2, lam, stats.b.shape[1])
    post = _posterior_from_stats(stats.G, stats.b, Sigma, sigma2, lam)
    return post.to_dataset(sigma2=sigma2, lam=lam)


def conditional_draws(
    G: np.ndarray,
    b: np.ndarray,
    Sigma: np.ndarray,
    sigma2: np.ndarray,
    lam: float,
    z0: np.ndarray | None = None,
    Z: np.ndarray | None = None,
    beta0: np.ndarray | None = None,
    *,
    seed: int | None = None,
    threads: int | None = None,
    progress: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact draws of every arm's shared and instance coefficients, one per hyperparameter draw.

    For draw s and arm k, given Σ = ``Sigma[s, k]`` and σ² = ``sigma2[s, k]``: β₀ ~ N(β̂₀, Φ)
    (§4.1 step 2; or ``beta0[s, k]`` when given, e.g. sampled by NUTS) and then
    β_j | β₀ ~ N(A_jβ₀ + C̃_jb_j, σ²C̃_j) (eq. 4.1) for every instance j, with the standard normal
    variates ``z0[s, k]`` and ``Z[s, k, j]`` (:func:`hierbandit.stats.kernels.conditional_draws`).

    The kernel (:func:`hierbandit.stats.kernels.conditional_draws_soa`) runs the operations of
    the instance-by-instance kernel entry by entry over arrays of instances, so that its inner
    loops vectorise, with the same result; for d ≤ 4 the same formulas run unrolled, every
    matrix entry a local scalar (:mod:`hierbandit.stats.arm_draws`), with the same result to
    rounding. The draws are independent, so they are split over
    ``threads`` threads (default: the cores this process may use); the result does not depend
    on the number of threads.

    Parameters
    ----------
    G, b
        Sufficient statistics (K, N, d, d) and (K, N, d).
    Sigma, sigma2
        Hyperparameter draws (S, K, d, d) and (S, K).
    lam
        Precision of the shared mean's N(0, λ⁻¹I) prior.
    z0, Z
        Standard normal variates (S, K, d) and (S, K, N, d); or none, and ``seed``.
    seed
        Instead of ``z0`` and ``Z``: draw s takes its variates from
        ``numpy.random.default_rng([seed, s])`` (``z0[s]``, then ``Z[s]``), generated slice by
        slice in the threads, so that no (S, K, N, d) array of variates is ever held (2.4 GB
        for 2,000 draws of 5 arms × 10,000 instances, d = 3) and the draws still do not depend
        on the number of threads.
    beta0
        Draws (S, K, d) of the shared mean to condition on instead of drawing it.
    threads
        Number of threads.
    progress
        Label under which to report progress (``hierbandit.progress`` records, in draws, with
        the time left); none by default.

    Returns
    -------
    beta0, beta
        Arrays (S, K, d) and (S, K, N, d).
    """
    G = np.ascontiguousarray(G, dtype=float)
    b = np.ascontiguousarray(b, dtype=float)
    Kn, N, d = b.shape
    S = int(np.shape(sigma2)[0])
    given_variates = [v is not None for v in (z0, Z)]
    if (seed is None and not all(given_variates)) or (seed is not None and any(given_variates)):
        raise TypeError("give the variates z0 and Z, or a seed (not both)")
    shapes = {"Sigma": (S, Kn, d, d), "sigma2": (S, Kn)}
    if seed is None:
        shapes.update(z0=(S, Kn, d), Z=(S, Kn, N, d))
    else:
        seed = check_positive_int(seed, "seed", minimum=0)
    if beta0 is not None:
        shapes["beta0"] = (S, Kn, d)
    given = {"Sigma": Sigma, "sigma2": sigma2, "z0": z0, "Z": Z, "beta0": beta0}
    arr = {}
    for name, shape in shapes.items():
        a = np.ascontiguousarray(given[name], dtype=float)
        if a.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
        arr[name] = a[None]  # the kernel's (chain, draw) axes, as one chain
    have_beta0 = beta0 is not None
    b0_in = arr["beta0"] if have_beta0 else np.zeros((1, S, Kn, d))
    P0, h0 = shared_prior_arrays(check_scalar(lam, "lam", low=0.0), d)
    beta0_out = np.empty((1, S, Kn, d))
    beta_out = np.empty((1, S, Kn, N, d))

    if d <= UNROLLED_MAX:  # the per-instance algebra unrolled (stats.arm_draws)
        Ds = np.stack([arm_stats(G[k], b[k], np.zeros(N)) for k in range(Kn)])
        first: tuple[np.ndarray, ...] = (Ds,)
        kernel = conditional_draws_unrolled
    else:
        Gs = np.ascontiguousarray(np.moveaxis(G, 1, -1))  # (K, d, d, N): instances last
        bs = np.ascontiguousarray(np.moveaxis(b, 1, -1))  # (K, d, N)
        first = (Gs, bs)
        kernel = K.conditional_draws_soa

    def draw(lo: int, hi: int, z0s: np.ndarray, Zs: np.ndarray) -> None:
        kernel(
            *first,
            G,
            b,
            arr["Sigma"][:, lo:hi],
            arr["sigma2"][:, lo:hi],
            P0,
            h0,
            b0_in[:, lo:hi],
            have_beta0,
            z0s,
            Zs,
            beta0_out[:, lo:hi],
            beta_out[:, lo:hi],
        )

    def work(lo: int, hi: int) -> None:
        if seed is None:
            draw(lo, hi, arr["z0"][:, lo:hi], arr["Z"][:, lo:hi])
            return
        # one draw's variates at a time, in buffers the slice reuses: no (draws, K, N, d)
        # block of fresh memory per slice (2.4 GB in all at 2,000 draws × 5 × 10,000 × 3)
        z0s, Zs = np.empty((1, 1, Kn, d)), np.empty((1, 1, Kn, N, d))
        for s in range(lo, hi):
            g = np.random.default_rng([seed, s])
            g.standard_normal(out=z0s[0, 0])
            g.standard_normal(out=Zs[0, 0])
            draw(s, s + 1, z0s, Zs)

    over_threads(work, S, threads, label=progress)
    return beta0_out[0], beta_out[0]


def posterior_cross_covariances(post: HierarchicalPosterior) -> tuple[np.ndarray, np.ndarray]:
    """Posterior cross-covariances the marginals do not show (docs/maths/ebm.md §4.5).

    Returns ``(with_shared, between)``: ``with_shared[j] = Cov(β_j, β₀ | data) = A_j Φ`` of shape
    (N, d, d), and ``between[j, l] = Cov(β_j, β_l | data) = A_j Φ A_lᵀ`` for j ≠ l (the diagonal
    blocks hold the marginal covariances C_j), shape (N, N, d, d).
    """
    with_shared = post.A @ post.shared_cov
    between = np.einsum("jab,lcb->jlac", with_shared, post.A)
    idx = np.arange(post.mean.shape[0])
    between[idx, idx] = post.cov
    return with_shared, between


class IncrementalHierarchicalPosterior:
    """Exact hierarchical posterior maintained by rank-one updates with fixed hyperparameters.

    Each :meth:`add` costs O(d²) regardless of how much data came before (docs/maths/ebm.md §6).
    Every ``recompute_every`` additions the state is recomputed from the sufficient statistics to
    discard rounding drift (``None`` never recomputes).
    """

    def __init__(
        self,
        n_instances: int,
        n_features: int,
        Sigma: Any,
        sigma2: float,
        lam: float,
        *,
        recompute_every: int | None = 10_000,
    ) -> None:
        self.n_instances = int(n_instances)
        self.n_features = int(n_features)
        self.Sigma, self.sigma2, self.lam = _check_hyper(Sigma, sigma2, lam, n_features)
        if self.lam <= 0:
            raise ValueError(
                "lam must be > 0 for incremental updates (the empty posterior must be proper)"
            )
        self.recompute_every = recompute_every
        N, d = self.n_instances, self.n_features
        self.G = np.zeros((N, d, d))
        self.b = np.zeros((N, d))
        self.n_added = 0
        self._since_recompute = 0
        self._P0 = shared_prior_arrays(self.lam, d)[0]
        self.recompute()

    def recompute(self) -> None:
        """Recompute every derived quantity from the sufficient statistics."""
        post = _posterior_from_stats(self.G, self.b, self.Sigma, self.sigma2, self.lam)
        self._Ct, self._A = post.Ctilde.copy(), post.A.copy()
        self._P, self._r = post.precision.copy(), post.r.copy()
        self._Phi, self._beta0 = post.shared_cov.copy(), post.shared_mean.copy()
        self._since_recompute = 0

    def add(self, instance: int, x: Any, y: float) -> None:
        """Add one observation ``(x, y)`` of instance ``instance``."""
        j = check_index(instance, self.n_instances, "instance")
        x = check_vector(x, self.n_features, "x")
        y = check_scalar(y, "y")
        # rank-one, or instance j refreshed in O(d³) where that is ill-conditioned
        K.observe_row(
            x,
            y,
            self.G[j],
            self.b[j],
            self._Ct[j],
            self._A[j],
            self._P,
            self._r,
            self._Phi,
            self._beta0,
            self.Sigma,
            self.sigma2,
            self._P0,
        )
        self.n_added += 1
        self._since_recompute += 1
        if self.recompute_every and self._since_recompute >= self.recompute_every:
            self.recompute()

    def posterior(self) -> HierarchicalPosterior:
        """The current posterior (copies)."""
        N, d = self.b.shape
        mean = np.empty((N, d))
        cov = np.empty((N, d, d))
        for j in range(N):
            K.instance_moments(
                self._Ct[j],
                self._A[j],
                self.b[j],
                self._beta0,
                self._Phi,
                self.sigma2,
                mean[j],
                cov[j],
            )
        return HierarchicalPosterior(
            self._beta0.copy(),
            self._Phi.copy(),
            mean,
            cov,
            self._Ct.copy(),
            self._A.copy(),
            self._P.copy(),
            self._r.copy(),
        )
