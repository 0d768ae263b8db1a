"""RMBandit and its robust multitask estimator (Xu & Bastani, *Multitask Learning and Bandits via
Robust Statistics*, Management Science 71(9), 2025; arXiv 2112.14233).

.. warning::
   **This is a reconstruction.** The primary text of Xu & Bastani (algorithm boxes, penalty
   schedule, experiments) and the authors' code were unavailable; only the abstracts, third-party
   descriptions and the ebm paper's account (§3, §7, Appendix F) could be read. What is verified:
   the two-stage structure (robust statistics across instances, then LASSO debiasing), the
   forced-sampling + all-sample template of Goldenshluger & Zeevi (2013) / Bastani & Bayati
   (2020), and the defaults q = 50, h = 15, η₀ = η₁,₀ = 0.2 (ebm §7). Every other formula below
   is this package's reading, summarised in docs/decisions/ebm.md ("Baselines"), and each
   unverified choice is an option:
   ``aggregator``, ``trim``, ``lambda_schedule``, ``clock`` and the penalty scaling.

RMEstimator, for one arm with data (X⁽ʲ⁾, Y⁽ʲ⁾) of instances j = 1 … N (:func:`rm_estimate`):

1. per-instance OLS β̂_ind⁽ʲ⁾ (tiny ridge before full rank); instances with fewer than d rows are
   excluded from step 2 (if none qualifies the pooled OLS over all instances is used);
2. coordinate-wise robust aggregate β̂† of the qualifying β̂_ind⁽ʲ⁾: the median (default) or the
   α-trimmed mean (drop the ⌊αm⌋ smallest and largest of the m values);
3. LASSO debiasing toward β̂† for the target instance,

       β̂⁽ʲ⁾ = argmin_β (1/n_j)‖Y⁽ʲ⁾ − X⁽ʲ⁾β‖² + λ⁽ʲ⁾‖β − β̂†‖₁,

   solved by coordinate descent on the Gram form (S = XᵀX/n_j, c = Xᵀ(Y − Xβ̂†)/n_j) from
   sufficient statistics. With this (1/n) scaling the objective equals twice the scikit-learn
   ``Lasso`` objective of the residual problem with ``alpha = λ/2``; the factor of two is a
   choice the unavailable text would settle. n_j = 0 returns β̂†.

RMBandit (docs/decisions/ebm.md, "Baselines") runs the forced-sampling template with RMEstimator in
place of OLS: at a forced round (sets T_i of :func:`~hierbandit.ebm.linear.forced_sampling_arm`
with q) the forced arm is pulled; otherwise, for the arriving instance j only, the forced-sample
estimator (penalty λ_F = η₀) filters K̂ = {k : x·β̂_F,k ≥ max_l x·β̂_F,l − h/2} and the all-sample
estimator (penalty λ_A from ``lambda_schedule``) picks argmax_{k∈K̂} x·β̂_A,k. Sufficient
statistics (G, b, n) are kept per (instance, arm) for forced and for all samples, and the step-1
OLS of a cell is refreshed whenever the cell receives data.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import xarray as xr
from numba import njit

from hierbandit._validation import (
    check_choice,
    check_index,
    check_positive_int,
    check_scalar,
    check_vector,
)
from hierbandit.ebm.base import posterior_dataset
from hierbandit.ebm.linear import ForcedSamplingBandit, _labels, _sizes
from hierbandit.stats.ridge import OLSStats, ols_solve, ols_solve_unit

__all__ = ["RMBandit", "RMEstimate", "lasso_toward", "rm_estimate", "robust_aggregate"]

_JIT = {"cache": True, "nogil": True}
_AGGREGATORS = ("median", "trimmed")
_SCHEDULES = ("time", "samples", "bias_floor")


# ---------------------------------------------------------------------- kernels


@njit(**_JIT)
def _aggregate(B, m, agg, trim, out):
    """Coordinate-wise median (agg = 0) or ⌊trim·m⌋-trimmed mean (agg = 1) of rows B[:m]."""
    d = B.shape[1]
    col = np.empty(m)
    g = math.floor(trim * m) if agg == 1 else 0
    for i in range(d):
        for r in range(m):
            col[r] = B[r, i]
        col.sort()
        if agg == 0:
            h = m // 2
            out[i] = col[h] if m % 2 == 1 else 0.5 * (col[h - 1] + col[h])
        else:
            s = 0.0
            for r in range(g, m - g):
                s += col[r]
            out[i] = s / (m - 2 * g)


@njit(**_JIT)
def lasso_gram(S, c, lam, tol, max_iter, gamma):
    """Coordinate descent for min_γ γᵀSγ − 2cᵀγ + λ‖γ‖₁ (S symmetric PSD), from ``gamma``.

    Each coordinate step is γ_i ← soft(c_i − Σ_{l≠i} S_il γ_l, λ/2) / S_ii (γ_i = 0 when
    S_ii = 0). Stops when a full sweep moves no coordinate by more than
    ``tol · max(1, max|γ|)`` or after ``max_iter`` sweeps; returns the number of sweeps.
    """
    d = c.shape[0]
    half = 0.5 * lam
    for it in range(max_iter):
        delta = 0.0
        scale = 1.0
        for i in range(d):
            sii = S[i, i]
            if sii <= 0.0:
                new = 0.0
            else:
                z = c[i]
                for l in range(d):
                    if l != i:
                        z -= S[i, l] * gamma[l]
                if z > half:
                    new = (z - half) / sii
                elif z < -half:
                    new = (z + half) / sii
                else:
                    new = 0.0
            ch = abs(new - gamma[i])
            if ch > delta:
                delta = ch
            gamma[i] = new
            if abs(new) > scale:
                scale = abs(new)
        if delta <= tol * scale:
            return it + 1
    return max_iter


@njit(**_JIT)
def _lasso_toward(G, b, n, center, lam, tol, max_iter, out):
    """β = center + argmin_γ (1/n)‖y − X(center + γ)‖² + λ‖γ‖₁ from (G, b, n) of one unit."""
    d = b.shape[0]
    if n <= 0:
        for i in range(d):
            out[i] = center[i]
        return 0
    S = np.empty((d, d))
    c = np.empty(d)
    inv_n = 1.0 / n
    for i in range(d):
        t = b[i]
        for l in range(d):
            S[i, l] = 0.5 * (G[i, l] + G[l, i]) * inv_n
            t -= G[i, l] * center[l]
        c[i] = t * inv_n
    gamma = np.zeros(d)
    it = lasso_gram(S, c, lam, tol, max_iter, gamma)
    for i in range(d):
        out[i] = center[i] + gamma[i]
    return it


@njit(**_JIT)
def _global_estimate(G, b, n, coef, base, N, agg, trim, ridge, dagger):
    """Steps 1–2 for the units base … base + N − 1; returns the number of qualifying units."""
    d = b.shape[1]
    B = np.empty((N, d))
    m = 0
    for l in range(N):
        u = base + l
        if n[u] >= d:
            for i in range(d):
                B[m, i] = coef[u, i]
            m += 1
    if m > 0:
        _aggregate(B, m, agg, trim, dagger)
        return m
    Gs = np.zeros((d, d))
    bs = np.zeros(d)
    ns = 0
    for l in range(N):
        u = base + l
        ns += n[u]
        for i in range(d):
            bs[i] += b[u, i]
            for k in range(d):
                Gs[i, k] += G[u, i, k]
    ols_solve_unit(Gs, bs, ns, ridge, dagger)
    return 0


@njit(**_JIT)
def _lambda_all(schedule, eta, tau, d, n_j, n_arm, N):
    """All-sample penalty λ_τ of the three ``lambda_schedule`` options (docs/decisions/ebm.md)."""
    if schedule == 0:
        return eta * math.sqrt((math.log(tau) + math.log(d)) / tau)
    if schedule == 1:
        return eta * math.sqrt((math.log(tau) + math.log(d)) / max(n_j, 1))
    a = math.sqrt(math.log(d * tau) / max(n_j, 1))
    c = math.sqrt(d * math.log(d * N * tau) / max(n_arm, 1))
    return eta * max(a, c)


@njit(**_JIT)
def _rm_scores(
    GF,
    bF,
    nF,
    cF,
    GA,
    bA,
    nA,
    cA,
    N,
    j,
    x,
    tau,
    lam_f,
    eta1,
    schedule,
    agg,
    trim,
    ridge,
    tol,
    max_iter,
    h,
    out,
):
    """RMBandit's non-forced rule for instance j; −inf outside K̂, x·β̂_A,k inside."""
    K = out.shape[0]
    d = x.shape[0]
    dag = np.empty(d)
    beta = np.empty(d)
    f = np.empty(K)
    best = -np.inf
    for k in range(K):
        base = k * N
        _global_estimate(GF, bF, nF, cF, base, N, agg, trim, ridge, dag)
        u = base + j
        _lasso_toward(GF[u], bF[u], nF[u], dag, lam_f, tol, max_iter, beta)
        s = 0.0
        for i in range(d):
            s += x[i] * beta[i]
        f[k] = s
        if s > best:
            best = s
    for k in range(K):
        if f[k] < best - 0.5 * h:
            out[k] = -np.inf
            continue
        base = k * N
        u = base + j
        _global_estimate(GA, bA, nA, cA, base, N, agg, trim, ridge, dag)
        n_arm = 0
        for l in range(N):
            n_arm += nA[base + l]
        lam = _lambda_all(schedule, eta1, tau, d, nA[u], n_arm, N)
        _lasso_toward(GA[u], bA[u], nA[u], dag, lam, tol, max_iter, beta)
        s = 0.0
        for i in range(d):
            s += x[i] * beta[i]
        out[k] = s


@njit(**_JIT)
def _rm_all(G, b, n, coef, K, N, lam, agg, trim, ridge, tol, max_iter, mean, dagger):
    """RMEstimator for every (arm, instance): ``lam`` (K, N), ``mean`` (K, N, d), ``dagger``."""
    for k in range(K):
        base = k * N
        _global_estimate(G, b, n, coef, base, N, agg, trim, ridge, dagger[k])
        for j in range(N):
            u = base + j
            _lasso_toward(G[u], b[u], n[u], dagger[k], lam[k, j], tol, max_iter, mean[k, j])


# ---------------------------------------------------------------------- public estimator


class RMEstimate(NamedTuple):
    """Result of :func:`rm_estimate`."""

    coef: np.ndarray  # (N, d), or (d,) for a single target: debiased per-instance estimates
    global_coef: np.ndarray  # (d,): the robust aggregate β̂†
    ols: np.ndarray  # (N, d): step-1 per-instance OLS estimates
    n_used: int  # instances in the aggregate (0: pooled OLS fallback)


def _check_stats(G: Any, b: Any, n: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = np.asarray(b)
    if b.dtype.kind not in "iuf":
        raise TypeError(f"b must be numeric, got dtype {b.dtype}")
    b = b.astype(float)
    if b.ndim != 2 or b.shape[1] == 0:
        raise ValueError(f"b must have shape (n_instances, d), got {b.shape}")
    N, d = b.shape
    G = np.asarray(G)
    if G.dtype.kind not in "iuf":
        raise TypeError(f"G must be numeric, got dtype {G.dtype}")
    G = G.astype(float)
    if G.shape != (N, d, d):
        raise ValueError(f"G must have shape {(N, d, d)}, got {G.shape}")
    n = np.asarray(n)
    if n.shape != (N,):
        raise ValueError(f"n must have shape ({N},), got {n.shape}")
    if N and n.dtype.kind not in "iu":
        raise TypeError(f"n must hold integer counts, got dtype {n.dtype}")
    n = n.astype(np.int64)
    if N and n.min() < 0:
        raise ValueError("n must be non-negative")
    if not (np.all(np.isfinite(G)) and np.all(np.isfinite(b))):
        raise ValueError("G and b must be finite (no NaN or inf)")
    return G, b, n


def robust_aggregate(B: Any, *, aggregator: str = "median", trim: float = 0.2) -> np.ndarray:
    """Coordinate-wise robust aggregate of the rows of ``B`` (RMEstimator step 2).

    Parameters
    ----------
    B : array_like, shape (m, d)
        Per-instance estimates, m ≥ 1.
    aggregator : {"median", "trimmed"}, default "median"
        Coordinate-wise median, or mean after dropping the ⌊trim·m⌋ smallest and largest values.
    trim : float, default 0.2
        Trimming fraction in [0, 0.5) for ``"trimmed"``.

    Returns
    -------
    ndarray, shape (d,)
    """
    B = np.asarray(B)
    if B.dtype.kind not in "iuf":
        raise TypeError(f"B must be numeric, got dtype {B.dtype}")
    B = np.ascontiguousarray(B, dtype=float)
    if B.ndim != 2 or B.shape[0] == 0:
        raise ValueError(f"B must have shape (m, d) with m >= 1, got {B.shape}")
    if not np.all(np.isfinite(B)):
        raise ValueError("B must be finite (no NaN or inf)")
    agg = _AGGREGATORS.index(check_choice(aggregator, _AGGREGATORS, "aggregator"))
    trim = check_scalar(trim, "trim", low=0.0, high=0.5)
    if trim >= 0.5:
        raise ValueError(f"trim must be < 0.5, got {trim}")
    out = np.empty(B.shape[1])
    _aggregate(B, B.shape[0], agg, trim, out)
    return out


def lasso_toward(
    G: Any,
    b: Any,
    n: int,
    center: Any,
    lam: float,
    *,
    tol: float = 1e-10,
    max_iter: int = 1000,
) -> np.ndarray:
    """LASSO toward ``center`` from sufficient statistics (RMEstimator step 3).

    Minimises (1/n)‖y − Xβ‖² + λ‖β − center‖₁ given G = XᵀX, b = Xᵀy and n rows, by coordinate
    descent on the Gram form (:func:`lasso_gram`). Equivalent to scikit-learn's ``Lasso`` with
    ``alpha = λ/2``, ``fit_intercept=False`` on the residual y − X·center, plus ``center``.

    Parameters
    ----------
    G : array_like, shape (d, d)
    b : array_like, shape (d,)
    n : int
        Number of rows (0 returns ``center``).
    center : array_like, shape (d,)
    lam : float
        Penalty λ ≥ 0.
    tol, max_iter
        Stopping rule of the coordinate descent (relative sweep change, number of sweeps).

    Returns
    -------
    ndarray, shape (d,)
    """
    Gs, bs, ns = _check_stats(np.asarray(G)[None], np.asarray(b)[None], np.array([n]))
    d = bs.shape[1]
    center = check_vector(center, d, "center")
    lam = check_scalar(lam, "lam", low=0.0)
    tol = check_scalar(tol, "tol", low=0.0, low_inclusive=False)
    max_iter = check_positive_int(max_iter, "max_iter")
    out = np.empty(d)
    _lasso_toward(Gs[0], bs[0], int(ns[0]), center, lam, tol, max_iter, out)
    return out


def rm_estimate(
    G: Any,
    b: Any,
    n: Any,
    lam: Any,
    *,
    target: int | None = None,
    aggregator: str = "median",
    trim: float = 0.2,
    ridge: float = 1e-6,
    tol: float = 1e-10,
    max_iter: int = 1000,
) -> RMEstimate:
    """The robust multitask estimator (reconstruction; see the module docstring), one arm.

    Parameters
    ----------
    G : array_like, shape (N, d, d)
        Per-instance Gram matrices XᵀX.
    b : array_like, shape (N, d)
        Per-instance Xᵀy.
    n : array_like of int, shape (N,)
        Per-instance row counts.
    lam : float or array_like, shape (N,)
        LASSO penalty λ⁽ʲ⁾ ≥ 0 (one for all instances, or one per instance).
    target : int, optional
        Return only this instance's estimate.
    aggregator : {"median", "trimmed"}, default "median"
        Step-2 aggregate (:func:`robust_aggregate`).
    trim : float, default 0.2
        Trimming fraction of ``"trimmed"``.
    ridge : float, default 1e-6
        Ridge of the step-1 OLS before a design is full rank.
    tol, max_iter
        Coordinate-descent stopping rule.

    Returns
    -------
    RMEstimate
        ``coef`` (N, d) or (d,) for ``target``; ``global_coef`` β̂†; ``ols`` the step-1
        estimates; ``n_used`` the number of instances with n ≥ d in the aggregate.

    Notes
    -----
    λ → ∞ returns β̂† for every instance (full pooling) and λ = 0 the per-instance OLS
    (no pooling), whenever the instance's design is full rank.
    """
    G, b, n = _check_stats(G, b, n)
    N, d = b.shape
    lam_arr = np.asarray(lam)
    if lam_arr.dtype.kind not in "iuf":
        raise TypeError(f"lam must be numeric, got dtype {lam_arr.dtype}")
    lam_arr = np.broadcast_to(lam_arr.astype(float), (N,)) if lam_arr.ndim == 0 else lam_arr
    if lam_arr.shape != (N,):
        raise ValueError(f"lam must be a scalar or have shape ({N},), got {lam_arr.shape}")
    if not np.all(np.isfinite(lam_arr)) or np.any(lam_arr < 0):
        raise ValueError("lam must be finite and non-negative")
    if target is not None:
        target = check_index(target, N, "target")
    agg = _AGGREGATORS.index(check_choice(aggregator, _AGGREGATORS, "aggregator"))
    trim = check_scalar(trim, "trim", low=0.0, high=0.5)
    if trim >= 0.5:
        raise ValueError(f"trim must be < 0.5, got {trim}")
    ridge = check_scalar(ridge, "ridge", low=0.0, low_inclusive=False)
    tol = check_scalar(tol, "tol", low=0.0, low_inclusive=False)
    max_iter = check_positive_int(max_iter, "max_iter")
    ols, _ = ols_solve(G, b, n, ridge)
    mean = np.empty((1, N, d))
    dagger = np.empty((1, d))
    _rm_all(
        G,
        b,
        n,
        ols,
        1,
        N,
        np.ascontiguousarray(lam_arr, dtype=float)[None],
        agg,
        trim,
        ridge,
        tol,
        max_iter,
        mean,
        dagger,
    )
    n_used = int(np.sum(n >= d))
    coef = mean[0] if target is None else mean[0, target]
    return RMEstimate(coef, dagger[0], ols, n_used)


# ---------------------------------------------------------------------- the bandit


class RMBandit(ForcedSamplingBandit):
    """RMBandit: forced-sampling bandit with the robust multitask estimator (reconstruction).

    See the module docstring for the algorithm and what is and is not verified
    (docs/decisions/ebm.md, "Baselines").

    Parameters
    ----------
    n_instances, n_arms, n_features
        Number of instances N, arms K and context dimension d.
    q : int, default 50
        Forced rounds per arm and block of the forced-sampling schedule (ebm §7).
    h : float, default 15.0
        Filter width of the forced-sample estimates (ebm §7).
    eta0 : float, default 0.2
        Penalty λ_F = η₀ of the forced-sample estimator (constant, like LASSO Bandit's λ₁).
    eta1_0 : float, default 0.2
        Scale η₁,₀ of the all-sample penalty, see ``lambda_schedule``.
    aggregator : {"median", "trimmed"}, default "median"
        Step-2 robust aggregate.
    trim : float, default 0.2
        Trimming fraction of ``aggregator="trimmed"`` (not from the paper).
    lambda_schedule : {"time", "samples", "bias_floor"}, default "time"
        All-sample penalty at clock τ for instance j with n_j all-sample rows of the arm
        (Σn the arm's rows over all instances):
        ``"time"`` λ_A = η₁,₀ sqrt((log τ + log d)/τ) (the LASSO Bandit λ₂,ₜ form);
        ``"samples"`` λ_A = η₁,₀ sqrt((log τ + log d)/max(n_j, 1));
        ``"bias_floor"`` λ_A = η₁,₀ max{sqrt(log(dτ)/max(n_j, 1)), sqrt(d log(dNτ)/max(Σn, 1))}.
    clock : {"local", "global"}, default "local"
        τ is the instance's own round (``"local"``, each instance running the full schedule) or
        the global round (``"global"``). The choice changes the amount of forced exploration a
        lot (docs/decisions/ebm.md, "Baselines").
    ridge : float, default 1e-6
        Ridge of the step-1 OLS before a design is full rank, in [1e-6, 1e6].
    lasso_tol, lasso_max_iter
        Coordinate-descent stopping rule of step 3.
    instances, arms, features
        Ids of the instances and arms (int or str) and names of the features, in place of (or
        beside) ``n_instances`` and ``n_arms``; ``select`` then returns arm ids and the
        read-outs carry them as coordinates (:class:`~hierbandit.ebm.base.Policy`). The set of
        instances is fixed.
    tie_break, rng
        See :class:`~hierbandit.ebm.base.Policy`.

    Notes
    -----
    The forced-sample penalty stays λ_F = η₀ under every schedule; ``lambda_schedule`` only
    sets the all-sample penalty. A row counts as forced when the arm passed to :meth:`update`
    is the arm forced at that round's τ.

    :meth:`posterior` is not a Bayesian posterior: ``mean`` is the all-sample RMEstimator
    estimate of each instance at its current τ, and ``cov`` the per-instance OLS covariance
    σ̂²_k (G + ridge·I)⁻¹, a reference scale only. :meth:`hyperparameters` reports a flat prior
    (Σ = +inf on the diagonal) since the method has no Gaussian prior.
    """

    def __init__(
        self,
        n_instances: int | None = None,
        n_arms: int | None = None,
        n_features: int | None = None,
        q: int = 50,
        h: float = 15.0,
        eta0: float = 0.2,
        eta1_0: float = 0.2,
        *,
        aggregator: str = "median",
        trim: float = 0.2,
        lambda_schedule: str = "time",
        clock: str = "local",
        ridge: float = 1e-6,
        lasso_tol: float = 1e-10,
        lasso_max_iter: int = 1000,
        instances: Any = None,
        arms: Any = None,
        features: Any = None,
        tie_break: str = "random",
        rng: Any = None,
    ) -> None:
        super().__init__(
            *_sizes(n_instances, n_arms, n_features, instances, arms),
            **_labels(instances, arms, features, tie_break, rng),
        )
        self._init_forced_sampling(q, h, ridge, clock, 0)
        self.eta0 = check_scalar(eta0, "eta0", low=0.0)
        self.eta1_0 = check_scalar(eta1_0, "eta1_0", low=0.0)
        self.aggregator = check_choice(aggregator, _AGGREGATORS, "aggregator")
        self.trim = check_scalar(trim, "trim", low=0.0, high=0.5)
        if self.trim >= 0.5:
            raise ValueError(f"trim must be < 0.5, got {self.trim}")
        self.lambda_schedule = check_choice(lambda_schedule, _SCHEDULES, "lambda_schedule")
        self.lasso_tol = check_scalar(lasso_tol, "lasso_tol", low=0.0, low_inclusive=False)
        self.lasso_max_iter = check_positive_int(lasso_max_iter, "lasso_max_iter")
        self._agg = _AGGREGATORS.index(self.aggregator)
        self._schedule = _SCHEDULES.index(self.lambda_schedule)

    # ------------------------------------------------------------------ helpers
    def penalties(self, instance: int) -> tuple[float, np.ndarray]:
        """(λ_F, λ_A per arm) that ``instance``'s next round would use."""
        j = check_index(instance, self.n_instances, "instance")
        return self.eta0, self._lambda_all_arms(j)

    def _lambda_all_arms(self, j: int) -> np.ndarray:
        K, N, d = self.n_arms, self.n_instances, self.n_features
        n = self.all_stats.n.reshape(K, N)
        tau = self._tau(j)
        return np.array(
            [
                _lambda_all(self._schedule, self.eta1_0, tau, d, n[k, j], n[k].sum(), N)
                for k in range(K)
            ]
        )

    # ------------------------------------------------------------------ policy
    def _exploit_scores(self, j: int, x: np.ndarray, out: np.ndarray) -> None:
        F, A = self.forced_stats, self.all_stats
        _rm_scores(
            F.G,
            F.b,
            F.n,
            F.coef,
            A.G,
            A.b,
            A.n,
            A.coef,
            self.n_instances,
            j,
            x,
            self._tau(j),
            self.eta0,
            self.eta1_0,
            self._schedule,
            self._agg,
            self.trim,
            self.ridge,
            self.lasso_tol,
            self.lasso_max_iter,
            self.h,
            out,
        )

    def _estimates(self, stats: OLSStats, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        K, N, d = self.n_arms, self.n_instances, self.n_features
        mean = np.empty((K, N, d))
        dagger = np.empty((K, d))
        _rm_all(
            stats.G,
            stats.b,
            stats.n,
            stats.coef,
            K,
            N,
            np.ascontiguousarray(lam),
            self._agg,
            self.trim,
            self.ridge,
            self.lasso_tol,
            self.lasso_max_iter,
            mean,
            dagger,
        )
        return mean, dagger

    def estimates(self) -> xr.Dataset:
        """RMEstimator outputs of every (arm, instance) at each instance's current τ.

        ``all_mean``/``forced_mean`` (arm, instance, feature), the aggregates
        ``all_global``/``forced_global`` (arm, feature) and the penalties ``lambda_all``
        (arm, instance) and ``lambda_forced``.
        """
        K, N = self.n_arms, self.n_instances
        lam_a = np.stack([self._lambda_all_arms(j) for j in range(N)], axis=1)
        mean_a, dag_a = self._estimates(self.all_stats, lam_a)
        mean_f, dag_f = self._estimates(self.forced_stats, np.full((K, N), self.eta0))
        return xr.Dataset(
            {
                "all_mean": (("arm", "instance", "feature"), mean_a),
                "forced_mean": (("arm", "instance", "feature"), mean_f),
                "all_global": (("arm", "feature"), dag_a),
                "forced_global": (("arm", "feature"), dag_f),
                "lambda_all": (("arm", "instance"), lam_a),
                "lambda_forced": ((), self.eta0),
            },
            coords={k: v for k, v in self.coords().items() if k != "feature_"},
        )

    def posterior(self) -> xr.Dataset:
        """All-sample RMEstimator ``mean``, OLS reference ``cov``; also forced/global estimates."""
        est = self.estimates()
        ds = posterior_dataset(
            est["all_mean"].values, self._ols_cov(), coords=self.coords(), policy="RMBandit"
        )
        ds["forced_mean"] = est["forced_mean"]
        ds["global_mean"] = est["all_global"]
        ds["forced_global_mean"] = est["forced_global"]
        return ds

    def hyperparameters(self) -> xr.Dataset:
        """Flat prior, pooled σ̂², the aggregate β̂† (``global_mean``) and q, h, η₀, η₁,₀."""
        est = self.estimates()
        return self._flat_prior_hyperparameters(
            {
                "global_mean": est["all_global"].values,
                "q": ((), self.q),
                "h": ((), self.h),
                "eta0": ((), self.eta0),
                "eta1_0": ((), self.eta1_0),
                "trim": ((), self.trim),
            }
        )
