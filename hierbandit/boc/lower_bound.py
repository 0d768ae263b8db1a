"""The instance-dependent lower bound of clustering with bandit feedback (Section 4).

Theorem 3: every δ-PAC algorithm has ``E[τ_δ] ≥ d_KL(δ, 1−δ) D*(c, U)`` with

    D*(c, U)⁻¹ = ½ sup_{λ ∈ 𝒫_M} inf_{(c', U') ∈ Alt(c)} Σ_m λ_m ‖µ(c_m) − µ'(c'_m)‖²     (1)

* :func:`inner_value` — the inner infimum in closed form (Prop. 5, eqs. 15–18);
* :func:`optimal_allocation` — D*, the optimal cluster weights w* and arm proportions λ* through
  the finite convex min–max of Props. 7–8:
  ``D* = 2 min_{w ∈ 𝒫_K⁺} max_{(k,k') ∈ ℰ} (n(k)/w(k) + 1/w(k')) / ‖µ(k) − µ(k')‖²`` and
  ``λ*_m = w*(c_m)/n(c_m)``;
* :func:`brute_force_inner` and :func:`brute_force_hardness` — the definition itself, by
  enumerating every labelling ``c' ∈ [K]^M`` (intractable beyond tiny instances; the reference
  the closed forms are tested against).

**Pair set.** The paper's Lemma 4 / Prop. 5 take the admissible pairs ``{(k, k'): n(k) > 1,
k' ≠ k}``. That misses the alternatives that merge two singleton clusters and use the freed label
to split a larger cluster (docs/maths/boc.md §2): with two or more singleton clusters the paper's
value can be far too large (``c = [1,1,2,3]``, µ = (0, 10, 10.5): D* = 0.153 instead of 32.04).
``alt_pairs="corrected"`` (default) adds the pairs ``n(k) = n(k') = 1``; ``alt_pairs="paper"``
restores the literal reading. They coincide when c has at most one singleton cluster.

**Solver.** Writing ``u_k = 1/x_k`` with ``x = T w`` (T the optimal max value), the w-problem is
``min Σ_k 1/u_k  s.t.  n(k) u_k + u_k' ≤ ‖µ(k) − µ(k')‖²  ((k,k') ∈ ℰ)``: a strictly convex
objective over a polyhedron, so the optimum is unique (Prop. 8) and an interior-point method
finds it in about 30 µs for K = 4 (``solver="barrier"``, compiled). ``solver="slsqp"`` solves the
log-variable geometric program of docs/maths/boc.md §2 with SciPy's SLSQP (about 1 ms) and is the
fallback should the barrier method ever fail to converge. Then ``D* = 2 Σ x*``,
``w* = x*/Σ x*``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from hierbandit._validation import check_choice, check_vector
from hierbandit.boc import _kernels as kern
from hierbandit.boc._checks import check_alt_pairs, check_centres, check_labels
from hierbandit.boc.thresholds import kl_bernoulli_delta

__all__ = [
    "LowerBound",
    "admissible_pairs",
    "brute_force_hardness",
    "brute_force_inner",
    "hardness",
    "inner_value",
    "lower_bound",
    "optimal_allocation",
]

SOLVERS = ("barrier", "slsqp")
_TOL = 1e-11
_MAX_NEWTON = 100


def admissible_pairs(labels: Any, *, alt_pairs: str = "corrected") -> np.ndarray:
    """Ordered cluster pairs ``(k, k')`` of the inner problem, shape ``(P, 2)``.

    ``"paper"``: ``n(k) > 1, k' ≠ k`` (Prop. 5). ``"corrected"``: those and ``n(k) = n(k') = 1``.
    """
    c = check_labels(labels)
    check_alt_pairs(alt_pairs)
    nk = np.bincount(c).astype(float)
    ks, kps = kern.pair_set(nk, alt_pairs == "corrected")
    return np.stack([ks, kps], axis=1)


def _f1(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    s = x + y
    out = np.zeros(np.broadcast(x, y).shape)
    np.divide(x * y, s, out=out, where=s != 0)
    return out


def inner_value(labels: Any, centres: Any, lam: Any, *, alt_pairs: str = "corrected") -> float:
    """``inf_{(c',U') ∈ Alt(c)} Σ_m λ_m ‖µ(c_m) − µ'(c'_m)‖²`` in closed form (Prop. 5, eq. 18).

    ``min_{(k,k') ∈ ℰ} w̲(k) w(k') / (w̲(k) + w(k')) ‖µ(k) − µ(k')‖²`` with ``w(k) = Σ_{c_m=k} λ_m``
    and ``w̲(k) = min_{c_m=k} λ_m``; λ may have zero entries (then ``xy/(x+y) := 0`` at ``x+y=0``,
    eq. 18). ``λ`` need not be normalised: the value is 1-homogeneous in λ.
    """
    c = check_labels(labels)
    K = int(c.max()) + 1
    U = check_centres(centres, K, distinct=False)
    lam = check_vector(lam, c.size, "lam")
    if np.any(lam < 0):
        raise ValueError("lam must be non-negative")
    check_alt_pairs(alt_pairs)
    if K == 1:
        return math.inf  # one cluster: Alt(c) is empty
    w = np.bincount(c, weights=lam, minlength=K)
    wmin = np.full(K, np.inf)
    np.minimum.at(wmin, c, lam)
    pairs = admissible_pairs(c, alt_pairs=alt_pairs)
    k, kp = pairs[:, 0], pairs[:, 1]
    dist = ((U[k] - U[kp]) ** 2).sum(-1)
    return float((_f1(wmin[k], w[kp]) * dist).min())


@dataclass(frozen=True)
class LowerBound:
    """The solution of the lower-bound problem (1) for one instance.

    Attributes
    ----------
    hardness : float
        D*(c, U), the slope of the lower bound in log(1/δ).
    w : numpy.ndarray, shape (K,)
        The optimal cluster masses w* (Prop. 8).
    lam : numpy.ndarray, shape (M,)
        The optimal arm proportions λ*_m = w*(c_m)/n(c_m).
    labels, centres
        The instance.
    alt_pairs, solver : str
        How it was computed.
    """

    hardness: float
    w: np.ndarray
    lam: np.ndarray
    labels: np.ndarray
    centres: np.ndarray
    alt_pairs: str = "corrected"
    solver: str = "barrier"
    info: dict[str, Any] = field(default_factory=dict)

    def lower_bound(self, *, delta: Any = None, log_inv_delta: Any = None) -> float:
        """``d_KL(δ, 1−δ) · D*``, the bound of Theorem 3 on E[τ_δ]."""
        return kl_bernoulli_delta(delta=delta, log_inv_delta=log_inv_delta) * self.hardness

    def max_value(self) -> float:
        """``2 max_ℰ (n(k)/w(k) + 1/w(k')) / ‖µ(k) − µ(k')‖²`` at w*; equals D* (certificate)."""
        nk = np.bincount(self.labels).astype(float)
        pairs = admissible_pairs(self.labels, alt_pairs=self.alt_pairs)
        k, kp = pairs[:, 0], pairs[:, 1]
        dist = ((self.centres[k] - self.centres[kp]) ** 2).sum(-1)
        return float(2 * ((nk[k] / self.w[k] + 1 / self.w[kp]) / dist).max())

    def to_xarray(self) -> xr.Dataset:
        """``lam`` (arm), ``w`` (cluster), ``centres`` (cluster, feature), ``labels`` (arm)."""
        K, d = self.centres.shape
        return xr.Dataset(
            {
                "lam": (("arm",), self.lam),
                "w": (("cluster",), self.w),
                "labels": (("arm",), self.labels),
                "centres": (("cluster", "feature"), self.centres),
            },
            coords={
                "arm": np.arange(self.labels.size),
                "cluster": np.arange(K),
                "feature": np.arange(d),
            },
            attrs={"hardness": self.hardness, "alt_pairs": self.alt_pairs, "solver": self.solver},
        )


def _solve_slsqp(nk: np.ndarray, rhs: np.ndarray, ks: np.ndarray, kps: np.ndarray) -> np.ndarray:
    """The log-variable geometric program of docs/maths/boc.md §2 with SciPy SLSQP; returns x."""
    from scipy.optimize import minimize

    K = nk.size
    scale = rhs.min()
    r = rhs / scale
    logr = np.log(r)
    y0 = np.full(K, np.log(1.01 * (nk.max() + 1.0)))

    def cons(y: np.ndarray) -> np.ndarray:
        a = nk[ks] * np.exp(-y[ks])
        b = np.exp(-y[kps])
        return logr - np.log(a + b)

    def cons_jac(y: np.ndarray) -> np.ndarray:
        a = nk[ks] * np.exp(-y[ks])
        b = np.exp(-y[kps])
        s = a + b
        J = np.zeros((ks.size, K))
        rows = np.arange(ks.size)
        J[rows, ks] += a / s
        J[rows, kps] += b / s
        return J

    res = minimize(
        lambda y: np.exp(y).sum(),
        y0,
        jac=lambda y: np.exp(y),
        constraints=[{"type": "ineq", "fun": cons, "jac": cons_jac}],
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    x = np.exp(res.x)
    # restore feasibility exactly (scale x up by the largest violation)
    viol = (nk[ks] / x[ks] + 1.0 / x[kps]) / r
    x = x * max(1.0, float(viol.max()))
    return x / scale


def optimal_allocation(
    labels: Any, centres: Any, *, alt_pairs: str = "corrected", solver: str = "barrier"
) -> LowerBound:
    """D*(c, U), w* and λ* by the finite convex min–max of Props. 7–8 (module docstring).

    Parameters
    ----------
    labels : array_like of int, shape (M,)
        The partition c, labels in ``[0, K)``, every cluster non-empty, ``K < M``.
    centres : array_like, shape (K, d)
        The cluster centres µ(k) (rows), pairwise distinct.
    alt_pairs
        ``"corrected"`` (default) or ``"paper"`` (see the module docstring).
    solver
        ``"barrier"`` (compiled interior point, default) or ``"slsqp"`` (SciPy).

    Returns
    -------
    LowerBound

    Examples
    --------
    >>> from hierbandit.boc.instances import synthetic_instance
    >>> inst = synthetic_instance("easy")
    >>> round(optimal_allocation(inst.labels, inst.centres).hardness, 6)
    0.632727
    """
    c = check_labels(labels)
    K = int(c.max()) + 1
    U = check_centres(centres, K)
    check_alt_pairs(alt_pairs)
    check_choice(solver, SOLVERS, "solver")
    if K == 1:
        # one cluster: no alternative partition, so the infimum over Alt(c) is +∞ and
        # D* = 0 (any run may stop at once); every allocation is optimal, λ* is uniform
        M = c.size
        return LowerBound(
            hardness=0.0,
            w=np.ones(1),
            lam=np.full(M, 1.0 / M),
            labels=c,
            centres=U,
            alt_pairs=alt_pairs,
            solver=solver,
            info={"single_cluster": True},
        )
    nk = np.bincount(c, minlength=K).astype(float)
    ks, kps = kern.pair_set(nk, alt_pairs == "corrected")
    rhs = ((U[ks] - U[kps]) ** 2).sum(-1)
    info: dict[str, Any] = {}
    if solver == "barrier":
        u, ok, steps = kern.solve_reciprocal(nk, rhs, ks, kps, _TOL, _MAX_NEWTON)
        info["newton_steps"] = int(steps)
        if ok:
            x = 1.0 / u
        else:  # pragma: no cover - never observed; keep a safe path
            info["fallback"] = "slsqp"
            x = _solve_slsqp(nk, rhs, ks, kps)
    else:
        x = _solve_slsqp(nk, rhs, ks, kps)
    w = x / x.sum()
    lam = w[c] / nk[c]
    return LowerBound(
        hardness=float(2.0 * x.sum()),
        w=w,
        lam=lam,
        labels=c,
        centres=U,
        alt_pairs=alt_pairs,
        solver=solver,
        info=info,
    )


def hardness(labels: Any, centres: Any, *, alt_pairs: str = "corrected") -> float:
    """D*(c, U) (see :func:`optimal_allocation`)."""
    return optimal_allocation(labels, centres, alt_pairs=alt_pairs).hardness


def lower_bound(
    labels: Any,
    centres: Any,
    *,
    delta: Any = None,
    log_inv_delta: Any = None,
    alt_pairs: str = "corrected",
) -> float:
    """Theorem 3: ``d_KL(δ, 1−δ) · D*(c, U)`` (give ``delta`` or ``log_inv_delta``)."""
    lb = optimal_allocation(labels, centres, alt_pairs=alt_pairs)
    return lb.lower_bound(delta=delta, log_inv_delta=log_inv_delta)


# ---------------------------------------------------------------------- brute force (tests)
def _all_labellings(M: int, K: int) -> np.ndarray:
    return np.array(list(itertools.product(range(K), repeat=M)), dtype=np.int64).reshape(-1, M)


def _alternative_labellings(c: np.ndarray, K: int) -> np.ndarray:
    """Every c' ∈ [K]^M that splits some cluster of c by label (the closure of Alt(c))."""
    L = _all_labellings(c.size, K)
    split = np.zeros(L.shape[0], dtype=bool)
    for k in range(K):
        members = np.flatnonzero(c == k)
        if members.size > 1:
            sub = L[:, members]
            split |= np.any(sub != sub[:, :1], axis=1)
    return L[split]


def brute_force_inner(labels: Any, centres: Any, lam: Any) -> tuple[float, np.ndarray]:
    """The inner infimum of (1) by enumerating all ``K^M`` labellings (tiny instances only).

    For each ``c'`` that splits a cluster of ``c`` by label, the optimal centres are the
    λ-weighted means of eq. (12); where they make the split parts coincide the infimum is
    approached by perturbing one centre (the paper, Sec. 4; see docs/maths/boc.md §2). Returns
    ``(value, argmin c')``.
    """
    c = check_labels(labels)
    K = int(c.max()) + 1
    U = check_centres(centres, K, distinct=False)
    lam = check_vector(lam, c.size, "lam")
    if c.size > 10 or K**c.size > 2_000_000:
        raise ValueError("brute force is limited to K^M <= 2e6 and M <= 10")
    if K == 1:
        raise ValueError("labels: with one cluster there is no alternative partition")
    alts = _alternative_labellings(c, K)
    cost = _cost_and_grad(alts, U[c], lam, K)[0]
    i = int(np.argmin(cost))
    return float(cost[i]), alts[i]


def _canonical_rows(alts: np.ndarray) -> np.ndarray:
    """Rename the labels of every row by order of first appearance and drop duplicate rows."""
    out = np.empty_like(alts)
    for i, row in enumerate(alts):
        _, first, inverse = np.unique(row, return_index=True, return_inverse=True)
        rank = np.empty(first.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)
        out[i] = rank[inverse]
    return np.unique(out, axis=0)


def _cost_and_grad(
    alts: np.ndarray, arm_means: np.ndarray, lam: np.ndarray, K: int
) -> tuple[np.ndarray, np.ndarray]:
    """h_{c'}(λ) = min_{U'} Σ_m λ_m ‖µ(c_m) − µ'(c'_m)‖² and its gradient in λ (envelope theorem:
    ∂h/∂λ_m = ‖µ(c_m) − µ'*(c'_m)‖²), for every row c' of ``alts``."""
    n = alts.shape[0]
    val = np.zeros(n)
    grad = np.zeros((n, alts.shape[1]))
    for k in range(K):
        mask = alts == k
        wl = mask * lam
        W = wl.sum(1)
        S = wl @ arm_means
        centre = np.divide(S, W[:, None], out=np.zeros_like(S), where=W[:, None] > 0)
        diff = ((arm_means[None, :, :] - centre[:, None, :]) ** 2).sum(-1)
        grad += np.where(mask, diff, 0.0)
        val += (wl * diff).sum(1)
    return val, grad


def brute_force_hardness(labels: Any, centres: Any, *, tol: float = 1e-12) -> LowerBound:
    """D*(c, U) from the definition (1) by enumeration (tiny instances only).

    ``g(λ) = min_{c'} h_{c'}(λ)`` over every labelling ``c' ∈ [K]^M`` that splits a cluster of
    ``c`` by label (up to relabelling), ``h_{c'}(λ) = min_{U'} Σ_m λ_m ‖µ(c_m) − µ'(c'_m)‖²`` with
    the weighted-mean centres of eq. (12) — a smooth concave function of λ. The sup over the
    simplex is the smooth convex program ``max z s.t. z ≤ h_{c'}(λ) for all c', λ ∈ 𝒫_M``,
    solved by SciPy SLSQP with exact gradients. Uses neither Lemma 4 nor Props. 5–8: it is the
    reference those are tested against. ``info["gap"]`` is the relative difference between the
    epigraph value and ``g`` re-evaluated at the returned λ.
    """
    from scipy.optimize import minimize

    c = check_labels(labels)
    K = int(c.max()) + 1
    U = check_centres(centres, K)
    M = c.size
    if M > 8 or K**M > 100_000:
        raise ValueError("brute_force_hardness is limited to M <= 8 and K^M <= 1e5")
    if K == 1:  # no alternative partition: D* = 0, as in optimal_allocation
        return optimal_allocation(c, U)
    alts = _canonical_rows(_alternative_labellings(c, K))
    arm_means = U[c]
    lam0 = np.full(M, 1.0 / M)
    g0 = _cost_and_grad(alts, arm_means, lam0, K)[0].min()
    scale = 1.0 / g0

    def cons(v: np.ndarray) -> np.ndarray:
        val, _ = _cost_and_grad(alts, arm_means, np.clip(v[:M], 0, None), K)
        return val * scale - v[M]

    def cons_jac(v: np.ndarray) -> np.ndarray:
        _, grad = _cost_and_grad(alts, arm_means, np.clip(v[:M], 0, None), K)
        return np.hstack([grad * scale, -np.ones((alts.shape[0], 1))])

    res = minimize(
        lambda v: -v[M],
        np.r_[lam0, 0.5],
        jac=lambda v: np.r_[np.zeros(M), -1.0],
        constraints=[
            {"type": "ineq", "fun": cons, "jac": cons_jac},
            {
                "type": "eq",
                "fun": lambda v: v[:M].sum() - 1.0,
                "jac": lambda v: np.r_[np.ones(M), 0.0],
            },
        ],
        bounds=[(0.0, 1.0)] * M + [(None, None)],
        method="SLSQP",
        options={"ftol": tol, "maxiter": 2000},
    )
    lam = np.clip(res.x[:M], 0, None)
    lam /= lam.sum()
    g = float(_cost_and_grad(alts, arm_means, lam, K)[0].min())
    nk = np.bincount(c).astype(float)
    w = np.bincount(c, weights=lam, minlength=K)
    return LowerBound(
        hardness=2.0 / g,
        w=w,
        lam=lam,
        labels=c,
        centres=U,
        alt_pairs="brute-force",
        solver="enumeration+slsqp",
        info={
            "gap": float(abs(res.x[M] / scale - g) / g),
            "n_alternatives": int(alts.shape[0]),
            "success": bool(res.success),
            "n": nk,
        },
    )
