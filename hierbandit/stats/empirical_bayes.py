"""Empirical-Bayes estimators of the hyperparameters (Σ_k, σ²_k) of the ebm paper (§4.3).

* σ̂² — pooled residuals of the EB posterior means, Σ_j‖y_j − X_jβ̂_j‖² divided by the rows
  less the degrees of freedom the fit used: by default the trace of its hat matrix
  (``sigma2_df="effective"``), or d + 1 as the paper prints (``sigma2_df="paper"``), which
  collapses σ̂² when instances have few rows (docs/decisions/ebm.md A9).
* Σ̂ — the sample covariance of the per-instance OLS estimates, hard-thresholded following
  Bickel & Levina (2008) with the threshold chosen by their random-split cross-validation,
  diagonal kept and projected onto the positive semi-definite cone.

Each paper-literal reading the defaults depart from is available through :class:`EBOptions`;
see ``docs/decisions/ebm.md`` for the list of decisions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np

from hierbandit._validation import as_generator, check_covariance, check_scalar, check_variance
from hierbandit.stats import kernels as K
from hierbandit.stats.hierarchical import (
    HierarchicalPosterior,
    _posterior_from_stats,
    shared_prior_arrays,
)

__all__ = [
    "EBOptions",
    "EBResult",
    "bickel_levina_threshold",
    "empirical_bayes",
    "estimate_Sigma",
    "estimate_sigma2",
    "ols_estimates",
    "psd_project",
    "scatter_covariance",
    "threshold_covariance",
]

_NORMALIZATIONS = {"n-1": 0, "n": 1, "none": 2}
_SIGMA2_DF = {"effective": 0, "paper": 1}


@dataclass(frozen=True)
class EBOptions:
    """Options of the empirical-Bayes step, with the defaults of docs/decisions/ebm.md (A1–A7).

    Attributes
    ----------
    threshold : {"cv", "none"} or float
        Bickel–Levina threshold γ: chosen by random-split cross-validation, none (plain sample
        covariance), or a fixed value.
    cv_splits : int
        Number of random splits of the cross-validation (default 50).
    threshold_diagonal : bool
        Threshold the diagonal too (the paper's literal formula). Default False.
    scatter_normalization : {"n-1", "n", "none"}
        Divide the OLS scatter matrix by N_eff − 1 (default), N_eff, or not at all (the paper as
        printed, which calls the scatter matrix a sample covariance).
    eig_floor : float
        Eigenvalue floor of the positive semi-definite projection of Σ̂.
    sigma2_floor : float
        Floor of σ̂², in [1e-100, 1e100] (``hierbandit._validation.MIN_VARIANCE``,
        ``MAX_VARIANCE``).
    min_instances_for_sigma : int
        Minimum number of instances with full-rank data before Σ̂ is estimated.
    eb_iters : int
        Sweeps of posterior → σ̂² → posterior per re-estimation (default 1).
    ols_ridge : float
        Ridge added to G_j in the per-instance OLS (default 0, plain OLS).
    rank_tol : float
        An instance counts as full rank when its Cholesky factorisation succeeds and
        1/tr(G_j⁻¹) > rank_tol · tr(G_j) (within a factor d of λ_min(G_j)/tr(G_j)).
    debias_ols_noise : bool
        Subtract σ̂² · mean_j G_j⁻¹ (the OLS sampling noise) from the scatter before thresholding.
        Not safe with few rows per instance: early on the difference is indefinite, the
        eigenvalue floor then leaves Σ̂ nearly singular and the policy stops exploring those
        directions. On the ebm data-poor setting (60 seeds paired, horizon 10,000, the default
        σ̂² divisor) it raised the regret of EbmTS from 663 to 1,825 (+1,162 ± 128, worse on
        every seed), from 42 ± 24 below LinUCB to 1,120 ± 128 above it
        (``.venv/bin/python benchmarks/sigma2_df.py --sections debias``, docs/decisions/ebm.md
        §3). Where every instance has many rows it helps: on the MovieLens real-data task it
        lowered the regret of EbmTS by 24 %, to 11 % below LinUCB
        (``.venv/bin/python benchmarks/ebm_real_pilot.py``, docs/ebm-real-data.md). Off by
        default.
    estimate_Sigma, estimate_sigma2 : bool
        Re-estimate each hyperparameter (False keeps the initial/previous value fixed).
    sigma2_df : {"effective", "paper"}
        Degrees of freedom the residuals of σ̂² are divided by, Σ_j T_j less: the trace of the
        posterior mean's hat matrix, Σ_j tr(C̃_j G_j) + tr(Φ Σ_j A_jᵀG_jA_j)/σ²
        (``"effective"``, default; σ̂² keeps its previous value while fewer than one degree of
        freedom is left), or d + 1 (``"paper"``, §4.3 as printed). The paper's divisor counts
        none of the freedom the per-instance means take, and with few rows per instance σ̂²
        falls far below the noise (docs/decisions/ebm.md A9).
    """

    #: options a checkpoint written before the field existed was running with
    _checkpoint_added: ClassVar[dict[str, Any]] = {"sigma2_df": lambda fields: "paper"}

    threshold: str | float = "cv"
    cv_splits: int = 50
    threshold_diagonal: bool = False
    scatter_normalization: str = "n-1"
    eig_floor: float = 1e-6
    sigma2_floor: float = 1e-6
    min_instances_for_sigma: int = 2
    eb_iters: int = 1
    ols_ridge: float = 0.0
    rank_tol: float = 1e-10
    debias_ols_noise: bool = False
    estimate_Sigma: bool = True
    estimate_sigma2: bool = True
    sigma2_df: str = "effective"
    _kernel: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.threshold, str):
            if self.threshold not in ("cv", "none"):
                raise ValueError(
                    f"threshold must be 'cv', 'none' or a float, got {self.threshold!r}"
                )
            mode, gamma = (0 if self.threshold == "cv" else 2), 0.0
        elif isinstance(self.threshold, float | np.floating) and np.isposinf(self.threshold):
            # γ = ∞ zeroes every thresholdable entry (docs/maths/ebm.md §7.3): a diagonal Σ̂
            gamma, mode = np.inf, 1
        else:
            gamma = check_scalar(self.threshold, "threshold", low=0.0)
            mode = 1
        if self.scatter_normalization not in _NORMALIZATIONS:
            raise ValueError(
                f"scatter_normalization must be one of {tuple(_NORMALIZATIONS)}, "
                f"got {self.scatter_normalization!r}"
            )
        for name in ("cv_splits", "eb_iters", "min_instances_for_sigma"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        check_scalar(self.eig_floor, "eig_floor", low=0.0)
        check_variance(self.sigma2_floor, "sigma2_floor")
        check_scalar(self.ols_ridge, "ols_ridge", low=0.0)
        check_scalar(self.rank_tol, "rank_tol", low=0.0)
        if self.sigma2_df not in _SIGMA2_DF:
            raise ValueError(
                f"sigma2_df must be one of {tuple(_SIGMA2_DF)}, got {self.sigma2_df!r}"
            )
        object.__setattr__(
            self,
            "_kernel",
            (
                float(self.ols_ridge),
                float(self.rank_tol),
                _NORMALIZATIONS[self.scatter_normalization],
                mode,
                float(gamma),
                bool(self.threshold_diagonal),
                float(self.eig_floor),
                int(self.min_instances_for_sigma),
                bool(self.debias_ols_noise),
            ),
        )

    @property
    def reestimate_args(self) -> tuple:
        """The options of :func:`kernels.reestimate_arm` in its order, as Python scalars (the
        CV generator and :attr:`splits_drawn` go between the ninth and the tenth)."""
        return (
            *self._kernel,
            float(self.sigma2_floor),
            int(self.eb_iters),
            bool(self.estimate_Sigma),
            bool(self.estimate_sigma2),
            _SIGMA2_DF[self.sigma2_df],
        )

    @property
    def instances_for_sigma(self) -> int:
        """Instances with a full-rank design an arm needs before Σ̂ is estimated: the larger of
        ``min_instances_for_sigma`` and 2 (a covariance needs two points). With fewer, Σ̂ keeps
        its previous value (``Sigma_init``, the identity by default)."""
        return max(int(self.min_instances_for_sigma), 2)

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary of the options (for provenance records)."""
        out = asdict(self)
        out.pop("_kernel", None)
        return out

    @property
    def splits_drawn(self) -> int:
        """Random splits the cross-validation draws (0 when it does not run)."""
        return int(self.cv_splits) if self.threshold == "cv" and self.estimate_Sigma else 0


class EBResult(NamedTuple):
    """Outcome of one empirical-Bayes step for one arm."""

    Sigma: np.ndarray
    sigma2: float
    gamma: float  # chosen threshold (NaN when Σ̂ was not estimable)
    n_eff: int  # instances with full-rank data
    posterior: HierarchicalPosterior


def _stats_arrays(G: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    G = np.ascontiguousarray(G, dtype=float)
    b = np.ascontiguousarray(b, dtype=float)
    if b.ndim != 2 or G.shape != (b.shape[0], b.shape[1], b.shape[1]):
        raise ValueError(
            f"G must have shape (N, d, d) and b shape (N, d); got {G.shape} and {b.shape}"
        )
    if not (np.all(np.isfinite(G)) and np.all(np.isfinite(b))):
        raise ValueError("G and b must be finite")
    return G, b


def _check_counts(q: Any, n: Any, N: int) -> tuple[np.ndarray, np.ndarray]:
    q = np.ascontiguousarray(q, dtype=float)
    n_arr = np.asarray(n)
    if q.shape != (N,):
        raise ValueError(f"q must have shape ({N},), got {q.shape}")
    if n_arr.shape != (N,):
        raise ValueError(f"n must have shape ({N},), got {n_arr.shape}")
    if not np.all(np.isfinite(q)) or np.any(q < 0):
        raise ValueError("q must be finite and non-negative")
    if n_arr.dtype.kind not in "iu" or np.any(n_arr < 0):
        raise ValueError("n must hold non-negative integer counts")
    return q, np.ascontiguousarray(n_arr, dtype=np.int64)


def ols_estimates(
    G: Any, b: Any, *, ridge: float = 0.0, rank_tol: float = 1e-10
) -> tuple[np.ndarray, np.ndarray]:
    """Per-instance OLS estimates and a mask of instances whose design is numerically full rank.

    Rows of the estimate where the mask is False are undefined (NaN).
    """
    G, b = _stats_arrays(G, b)
    B = np.full(b.shape, np.nan)
    ok = np.zeros(b.shape[0], dtype=bool)
    K.ols_all(G, b, float(ridge), float(rank_tol), B, ok)
    return B, ok


def _check_rows(B: Any) -> np.ndarray:
    B = np.ascontiguousarray(B, dtype=float)
    if B.ndim != 2 or B.shape[0] < 1 or B.shape[1] < 1:
        raise ValueError(f"B must be a non-empty (n, d) array, got shape {B.shape}")
    if not np.all(np.isfinite(B)):
        raise ValueError("B must be finite (no NaN or inf)")
    return B


def _check_square(S: Any, name: str = "S") -> np.ndarray:
    S = np.ascontiguousarray(S, dtype=float)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] < 1:
        raise ValueError(f"{name} must be a square (d, d) matrix, got shape {S.shape}")
    if not np.all(np.isfinite(S)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return S


def scatter_covariance(B: Any, normalization: str = "n-1") -> np.ndarray:
    """Scatter matrix Σ_j β_jβ_jᵀ − (1/n)(Σ_j β_j)(Σ_j β_j)ᵀ of the rows of ``B``, normalised."""
    if normalization not in _NORMALIZATIONS:
        raise ValueError(
            f"normalization must be one of {tuple(_NORMALIZATIONS)}, got {normalization!r}"
        )
    B = _check_rows(B)
    S = np.empty((B.shape[1], B.shape[1]))
    K.scatter_cov(B, np.arange(B.shape[0]), _NORMALIZATIONS[normalization], S)
    return S


def threshold_covariance(S: Any, gamma: float, *, threshold_diagonal: bool = False) -> np.ndarray:
    """Hard thresholding ``s_il · 1(|s_il| ≥ γ)`` (Bickel & Levina), diagonal kept by default.

    ``gamma`` may be ``inf`` (keep only the unthresholded entries).
    """
    S = _check_square(S)
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.floating | np.integer):
        raise TypeError(f"gamma must be a number, got {type(gamma).__name__}")
    if not gamma >= 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    out = np.empty_like(S)
    K.apply_threshold(S, float(gamma), bool(threshold_diagonal), out)
    return out


def bickel_levina_threshold(
    B: Any,
    *,
    n_splits: int = 50,
    normalization: str = "n-1",
    threshold_diagonal: bool = False,
    rng: Any = None,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Cross-validated hard threshold for the covariance of the rows of ``B``.

    Bickel & Levina's resampling rule: split the n rows at random into n₁ = n − ⌊n/log n⌋ and
    n₂ = ⌊n/log n⌋, and choose γ in ``{0} ∪ {|s_il|} ∪ {∞}`` minimising the mean over
    ``n_splits`` splits of ‖T_γ(Ŝ₁) − Ŝ₂‖²_F (ties to the smallest γ). With n₁ < 2 or n₂ < 2 the
    rule cannot run and γ = 0.

    Returns
    -------
    gamma, grid, risk
        The chosen threshold, the candidate grid and the cross-validated risk of each candidate.
    """
    if normalization not in _NORMALIZATIONS:
        raise ValueError(
            f"normalization must be one of {tuple(_NORMALIZATIONS)}, got {normalization!r}"
        )
    B = _check_rows(B)
    if isinstance(n_splits, bool) or not isinstance(n_splits, int | np.integer) or n_splits < 1:
        raise ValueError(f"n_splits must be a positive integer, got {n_splits!r}")
    norm = _NORMALIZATIONS[normalization]
    S = np.empty((B.shape[1], B.shape[1]))
    K.scatter_cov(B, np.arange(B.shape[0]), norm, S)
    grid = K.threshold_grid(S, bool(threshold_diagonal))
    risk = np.empty(grid.shape[0])
    U = as_generator(rng).random((int(n_splits), B.shape[0]))
    best = K.bickel_levina_cv(B, norm, bool(threshold_diagonal), U, grid, risk)
    return float(grid[best]), grid, risk


def psd_project(S: Any, eig_floor: float = 1e-6) -> np.ndarray:
    """Symmetrise ``S`` and clip its eigenvalues at ``eig_floor``."""
    S = _check_square(S)
    eig_floor = check_scalar(eig_floor, "eig_floor", low=0.0)
    out = np.empty_like(S)
    K.psd_floor(S, float(eig_floor), out)
    return out


def estimate_Sigma(
    G: Any,
    b: Any,
    *,
    options: EBOptions | None = None,
    sigma2: float = 1.0,
    Sigma_init: Any = None,
    rng: Any = None,
) -> tuple[np.ndarray, float, int]:
    """Thresholded covariance Σ̂ of the per-instance OLS estimates of one arm.

    Returns ``(Sigma, gamma, n_eff)``; ``Sigma_init`` (default identity) is returned unchanged
    while fewer than ``options.instances_for_sigma`` instances have full-rank data (then
    ``gamma`` is NaN). ``sigma2`` is used only by ``debias_ols_noise``.
    """
    options = options or EBOptions()
    G, b = _stats_arrays(G, b)
    d = b.shape[1]
    Sigma_prev = np.eye(d) if Sigma_init is None else check_covariance(Sigma_init, d, "Sigma_init")
    out = np.empty((d, d))
    gamma, n_eff = K.estimate_Sigma(
        G,
        b,
        float(sigma2),
        *options._kernel,
        as_generator(rng),
        options.splits_drawn,
        Sigma_prev,
        out,
    )
    return out, float(gamma), int(n_eff)


def estimate_sigma2(
    G: Any,
    b: Any,
    q: Any,
    n: Any,
    mean: Any,
    *,
    sigma2_prev: float = 1.0,
    sigma2_floor: float = 1e-6,
    used_df: float | None = None,
) -> float:
    """Pooled residual variance of the rows given posterior means ``mean`` (N, d).

    The residual sum of squares is divided by the rows less ``used_df``, the degrees of
    freedom the means took (the trace of their hat matrix, ``kernels.hat_trace``); ``None``
    is the paper's d + 1 (``EBOptions.sigma2_df``).
    """
    G, b = _stats_arrays(G, b)
    q, n = _check_counts(q, n, b.shape[0])
    mean = np.ascontiguousarray(mean, dtype=float)
    if mean.shape != b.shape:
        raise ValueError(f"mean must have shape {b.shape}, got {mean.shape}")
    if not np.all(np.isfinite(mean)):
        raise ValueError("mean must be finite")
    sigma2_prev = check_scalar(sigma2_prev, "sigma2_prev", low=0.0, low_inclusive=False)
    sigma2_floor = check_scalar(sigma2_floor, "sigma2_floor", low=0.0, low_inclusive=False)
    used = -1.0 if used_df is None else check_scalar(used_df, "used_df", low=0.0)
    return float(K.estimate_sigma2(G, b, q, n, mean, float(sigma2_prev), float(sigma2_floor), used))


def empirical_bayes(
    G: Any,
    b: Any,
    q: Any,
    n: Any,
    lam: float,
    *,
    options: EBOptions | None = None,
    Sigma_init: Any = None,
    sigma2_init: float = 1.0,
    shared_prior: tuple[Any, Any] | None = None,
    rng: Any = None,
) -> EBResult:
    """One empirical-Bayes step for one arm: Σ̂, then σ̂², then the posterior.

    The order and its cost: docs/maths/ebm.md §7.4.

    Σ̂ is estimated first; σ̂² from the posterior means under (Σ̂, ``sigma2_init``) (``eb_iters``
    sweeps); the returned posterior uses the final (Σ̂, σ̂²).

    Σ̂ is not always estimable, and then it silently keeps ``Sigma_init`` (the identity by
    default) and the result has ``gamma`` NaN: when fewer than ``options.instances_for_sigma``
    instances have a full-rank design (``n_eff`` of the result; an instance needs at least d
    rows whose features span ℝ^d for its OLS estimate), or when the scatter of the OLS estimates
    is beyond what float64 can carry. The online policies rely on this (a new arm starts from
    its initial Σ); an offline fit should not, and ``fit_prior(method="eb")`` warns.
    """
    options = options or EBOptions()
    G, b = _stats_arrays(G, b)
    N, d = b.shape
    q, n = _check_counts(q, n, N)
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    sigma2_init = check_scalar(sigma2_init, "sigma2_init", low=0.0, low_inclusive=False)
    Sigma_prev = np.eye(d) if Sigma_init is None else check_covariance(Sigma_init, d, "Sigma_init")
    Sigma = np.empty((d, d))
    Ct = np.empty((N, d, d))
    A = np.empty((N, d, d))
    P = np.empty((d, d))
    r = np.empty(d)
    Phi = np.empty((d, d))
    beta0 = np.empty(d)
    P0, h0 = shared_prior_arrays(lam, d, shared_prior)
    sigma2, gamma, n_eff, _ = K.reestimate_arm(
        G,
        b,
        q,
        n,
        P0,
        h0,
        sigma2_init,
        Sigma_prev,
        *options.reestimate_args[:9],
        as_generator(rng),
        options.splits_drawn,
        *options.reestimate_args[9:],
        Sigma,
        Ct,
        A,
        P,
        r,
        Phi,
        beta0,
    )
    post = _posterior_from_stats(G, b, Sigma, float(sigma2), lam, shared_prior)
    return EBResult(Sigma, float(sigma2), float(gamma), int(n_eff), post)
