"""Bandit Online Clustering (BOC, Algorithm 1) and the baselines Uniform and Oracle.

All three share BOC's estimator (K-means Maximin, Algorithm 2), stopping rule and recommendation
rule; only the sampling rule differs (Section 6: "for the sake of fairness").

Algorithm 1, as implemented (docs/maths/boc.md §4–5)::

    pull every arm once (arms 0..M−1); t ← M
    repeat
        if min_m N_m(t) ≤ max(√t − M/2, 0):              # forced exploration (BOC, Oracle)
            A_{t+1} ← argmin_m N_m(t);  (c_t, U_t) ← (c_{t−1}, U_{t−1})
        else:
            (c_t, U_t) ← KMeansMaximin(µ̂(t), N(t))
            λ*(t) ← argmax_λ inf_{Alt(c_t)} Σ_m λ_m ‖µ_t(c^t_m) − µ'(c'_m)‖²   (eq. 4, Props. 7–8)
            A_{t+1} ← argmax_m (t λ*_m(t) − N_m(t))      # D-Tracking
        t ← t + 1; observe X_t from A_t
        Z₁ ← Σ_m N_m(t) ‖µ̂_m(t) − µ_{t−1}(c^{t−1}_m)‖²
        Z₂ ← min_{Alt(c_{t−1})} Σ_m N_m(t) ‖µ_{t−1}(c^{t−1}_m) − µ'(c'_m)‖²   (Prop. 5)
        Z ← ½ (max(√Z₂ − √Z₁, 0))²
    until Z ≥ β(δ, t);  output τ_δ = t and c_out = c_{t−1}

* :class:`BOC` — the algorithm; ``exploration="linear"`` is the linear-exploration variant of
  Appendix C (no forced exploration; λ*(t) projected on ``{λ ≥ r²/(2M)}``, eq. 22), also
  available as :class:`BOCLE`.
* :class:`Uniform` — round-robin sampling (``A_{t+1} = t mod M``); K-means runs every step.
* :class:`Oracle` — D-Tracking of the true λ* (forced exploration kept; K-means on every
  non-forced step, needed by the stopping rule).

The step-level API is ``next_arm()``, ``observe(arm, x)``, ``should_stop()``, ``recommend()``
and ``statistic()``; ``run(instance, max_pulls, rng)`` plays a whole run against a
:class:`~hierbandit.boc.instances.ClusterBandit`. Inputs are validated before any state changes.
Observations may also be chosen by the caller (``observe()`` without ``next_arm()``; the stopping
rule holds for any sampling rule, Remark 16): the estimate (c_{t−1}, U_{t−1}) of the data before
the last observation is then computed lazily, once per t, by the first of ``should_stop()``,
``statistic()``, ``recommend()``, ``state()`` or ``next_arm()`` that needs it.

δ enters only through ``log(1/δ)``: pass ``delta=`` or ``log_inv_delta=`` (δ = e^{-400} works).
The thresholds are ``"beta"`` (eq. 8, δ-PAC) and ``"beta_tilde"`` (the heuristic of §6.1).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import xarray as xr

from hierbandit._params import ParamsMixin
from hierbandit._validation import (
    as_generator,
    check_choice,
    check_index,
    check_positive_int,
    check_scalar,
    check_vector,
)
from hierbandit.boc import _kernels as kern
from hierbandit.boc._checks import check_alt_pairs
from hierbandit.boc.kmeans import FIRST_SEEDS, resolve_first
from hierbandit.boc.thresholds import THRESHOLDS, log_inv_delta_of, psi
from hierbandit.checkpoint import SharedStateMixin

__all__ = [
    "BOC",
    "BOCLE",
    "ClusteringExplorer",
    "ExplorationResult",
    "Oracle",
    "Uniform",
]

logger = logging.getLogger(__name__)

_SOLVER_TOL = 1e-10
_MAX_NEWTON = 100
_DEFAULT_DELTA = 0.01


@dataclass
class ExplorationResult:
    """The output of one run: recommended partition, number of pulls, whether it stopped.

    Attributes
    ----------
    algorithm : str
        Name of the algorithm.
    labels : numpy.ndarray, shape (M,)
        Recommended partition c_out = c_{τ−1} (canonical labels: first appearance order), or the
        current estimate if the run did not stop.
    centres : numpy.ndarray, shape (K, d)
        The matching estimated centres U_{τ−1} (rows in the order of ``labels``).
    n_pulls : int
        τ_δ if stopped, else the number of pulls made.
    stopped : bool
        Whether the stopping rule fired within the budget.
    correct : bool or None
        Whether ``labels`` is the true partition up to relabelling (None when unknown).
    counts : numpy.ndarray, shape (M,)
        Pulls of every arm.
    log_inv_delta : float
        log(1/δ).
    threshold : str
        ``"beta"`` or ``"beta_tilde"``.
    statistic, beta : float
        Z(τ) and β(δ, τ) at the last test.
    info : dict
        Counters (forced-exploration steps, K-means runs, plug-in fallbacks).
    """

    algorithm: str
    labels: np.ndarray
    centres: np.ndarray
    n_pulls: int
    stopped: bool
    correct: bool | None
    counts: np.ndarray
    log_inv_delta: float
    threshold: str
    statistic: float = 0.0
    beta: float = math.inf
    info: dict[str, Any] = field(default_factory=dict)

    def to_xarray(self) -> xr.Dataset:
        """``labels``/``counts`` (arm), ``centres`` (cluster, feature); scalars as attrs."""
        K, d = self.centres.shape
        attrs = {
            "algorithm": self.algorithm,
            "n_pulls": int(self.n_pulls),
            "stopped": int(self.stopped),
            "correct": -1 if self.correct is None else int(self.correct),
            "log_inv_delta": float(self.log_inv_delta),
            "threshold": self.threshold,
            "statistic": float(self.statistic),
            "beta": float(self.beta),
        }
        attrs.update({k: v for k, v in self.info.items() if isinstance(v, int | float | str)})
        return xr.Dataset(
            {
                "labels": (("arm",), self.labels),
                "counts": (("arm",), self.counts),
                "centres": (("cluster", "feature"), self.centres),
            },
            coords={
                "arm": np.arange(self.labels.size),
                "cluster": np.arange(K),
                "feature": np.arange(d),
            },
            attrs=attrs,
        )


def canonical_partition(labels: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Relabel by first appearance; reorder the centres to match (unused labels go last)."""
    K = centres.shape[0]
    order: list[int] = []
    seen = np.zeros(K, dtype=bool)
    for k in labels:
        if not seen[k]:
            seen[k] = True
            order.append(int(k))
    order += [k for k in range(K) if not seen[k]]
    rank = np.empty(K, dtype=np.int64)
    rank[order] = np.arange(K)
    return rank[labels], centres[order]


class ClusteringExplorer(SharedStateMixin, ParamsMixin):
    """Shared state, estimator, stopping and recommendation rules of BOC, Uniform and Oracle.

    The step-level methods (``next_arm``, ``observe``, ``statistic``, ``threshold_value``,
    ``should_stop``, ``recommend``, ``state``, ``reset``) and ``run`` hold the explorer's
    re-entrant lock. ``save(path)`` checkpoints the full state between steps (counts, sums,
    the current estimate and target, counters, the pending choice and the random generator);
    ``BOC.load(path)`` restores an explorer that continues exactly (:mod:`hierbandit.checkpoint`).

    Parameters
    ----------
    n_arms, n_clusters, n_features
        M, K (known, ``K < M``) and d.
    delta, log_inv_delta
        The confidence level: at most one of the two (default δ = 0.01). ``delta`` must be in
        (0, 1); ``log_inv_delta = log(1/δ) > 0`` allows δ far below the float range.
    threshold
        ``"beta"`` (eq. 8, default) or ``"beta_tilde"`` (Section 6.1 heuristic).
    alt_pairs
        Pair set of the inner problem in Z₂ and in λ*(t): ``"corrected"`` (default; exact
        infimum, docs/maths/boc.md §2) or ``"paper"`` (Prop. 5 as printed).
    first_seed
        First Maximin seed: ``"first"`` (arm 0, default), ``"heaviest"`` or ``"random"``.
    max_iter
        Cap on Lloyd iterations per K-means call.
    rng
        Seed or Generator for the algorithm's own randomness (only ``first_seed="random"``).
    """

    name = "explorer"
    #: whether the sampling rule contains forced exploration
    _forced = True
    #: state added after checkpoints of older versions were written: the estimate of such a
    #: file is the one its own rule made (no lazy refresh pending)
    _checkpoint_added: ClassVar[dict[str, Any]] = {
        "_stale_arm": lambda obj: -1,
        "_prev_mean": lambda obj: np.zeros(obj.n_features),
    }
    _locked_methods: ClassVar[tuple[str, ...]] = (
        "next_arm",
        "observe",
        "statistic",
        "threshold_value",
        "should_stop",
        "recommend",
        "state",
        "reset",
        "run",
    )

    def __init__(
        self,
        n_arms: int,
        n_clusters: int,
        n_features: int,
        *,
        delta: float | None = None,
        log_inv_delta: float | None = None,
        threshold: str = "beta",
        alt_pairs: str = "corrected",
        first_seed: str = "first",
        max_iter: int = 1000,
        rng: Any = None,
    ) -> None:
        M = check_positive_int(n_arms, "n_arms", minimum=2)
        K = check_positive_int(n_clusters, "n_clusters")
        if K >= M:
            raise ValueError(
                f"n_clusters K={K} must be smaller than n_arms M={M} (K < M; with K = M only "
                "one partition exists)"
            )
        d = check_positive_int(n_features, "n_features")
        if delta is None and log_inv_delta is None:
            L = -math.log(_DEFAULT_DELTA)
        else:
            L = log_inv_delta_of(delta, log_inv_delta)
        check_choice(threshold, THRESHOLDS, "threshold")
        check_alt_pairs(alt_pairs)
        check_choice(first_seed, FIRST_SEEDS, "first_seed")
        max_iter = check_positive_int(max_iter, "max_iter")
        self.n_arms, self.n_clusters, self.n_features = M, K, d
        self.delta = delta
        self.log_inv_delta = log_inv_delta
        self.threshold = threshold
        self.alt_pairs = alt_pairs
        self.first_seed = first_seed
        self.max_iter = max_iter
        self.rng = rng
        self._L = L
        self._corrected = alt_pairs == "corrected"
        self._psi_term = M * d * psi(L / (M * d))
        self._rng = as_generator(rng)
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget every observation (the configuration and the rng stream are kept)."""
        M, d = self.n_arms, self.n_features
        #: total number of pulls so far
        self.t = 0
        #: pull counts N_m(t) (float for the compiled kernels)
        self.counts = np.zeros(M)
        #: observation sums S_m
        self.sums = np.zeros((M, d))
        #: empirical means µ̂_m(t) (0 for unpulled arms)
        self.means = np.zeros((M, d))
        #: current estimate (c_{t−1}, U_{t−1}) used by the next stopping test; None before t = M
        self.labels: np.ndarray | None = None
        self.centres: np.ndarray | None = None
        #: current target proportions λ(t) (uniform until the first plug-in)
        self.target = np.full(M, 1.0 / M)
        self._logterm = np.zeros(M)  # log(4 + log N_m), N_m ≥ 1
        self._logsum = 0.0
        self._n_unpulled = M
        self._pending: tuple[int, int] | None = None
        #: arm of the last observation when the caller chose it (``observe()`` without
        #: ``next_arm()``): the estimate is then not yet (c_{t−1}, U_{t−1}) and is refreshed
        #: lazily from the data with that observation removed; −1 when up to date
        self._stale_arm = -1
        #: the empirical mean of ``_stale_arm`` before its last observation
        self._prev_mean = np.zeros(d)
        self.n_forced = 0
        self.n_kmeans = 0
        self.n_fallback = 0
        self.n_solver_retry = 0
        self.kmeans_capped = 0

    def with_confidence(
        self, *, delta: float | None = None, log_inv_delta: float | None = None
    ) -> ClusteringExplorer:
        """A fresh copy with another δ."""
        params = self.get_params()
        params.update(delta=delta, log_inv_delta=log_inv_delta)
        return type(self)(**params)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_arms={self.n_arms}, n_clusters={self.n_clusters}, "
            f"n_features={self.n_features}, log_inv_delta={self._L:.4g}, "
            f"threshold={self.threshold!r})"
        )

    # ------------------------------------------------------------------ public step API
    def next_arm(self) -> int:
        """The arm to pull next (A_{t+1}). Idempotent until the next :meth:`observe`.

        Before every arm has been pulled once it returns the first unpulled arm; afterwards it
        applies the sampling rule, which may update the estimate (c_t, U_t) used by the next
        stopping test.
        """
        if self._pending is not None and self._pending[0] == self.t:
            return self._pending[1]
        arm = self._decide()
        self._pending = (self.t, arm)
        return arm

    def observe(self, arm: int, x: Any) -> None:
        """Record an observation ``x`` (shape ``(d,)``, finite) of ``arm``.

        Any arm may be observed (the stopping rule is valid for any sampling rule, Remark 16);
        the sampling rule's choice is :meth:`next_arm`. When the observation does not follow a
        :meth:`next_arm` of the same step, the estimate (c_{t−1}, U_{t−1}) the next stopping
        test uses is computed lazily (one K-means Maximin on the data before this observation,
        run by the first call that needs it), so sampling driven by ``observe()`` alone stops
        and recommends as Algorithm 1's stopping and recommendation rules say.
        """
        a = check_index(arm, self.n_arms, "arm")
        v = check_vector(x, self.n_features, "x")
        if self._pending is not None and self._pending[0] == self.t:
            self._stale_arm = -1  # next_arm() made (c_t, U_t) for this step
        else:
            self._stale_arm = a
            self._prev_mean[:] = self.means[a]
        self._observe(a, v)

    def statistic(self) -> tuple[float, float, float]:
        """``(Z, Z₁, Z₂)`` at the current t with the estimate (c_{t−1}, U_{t−1}).

        ``(0, nan, nan)`` while no estimate exists (before the first test at t = M + 1).
        """
        self._refresh()
        if self.labels is None or self.t <= self.n_arms:
            return 0.0, math.nan, math.nan
        return self._statistic()

    def threshold_value(self) -> float:
        """β(δ, t) (or β̃(δ, t)) at the current t."""
        if self.t < 1 or np.any(self.counts < 1):
            return math.inf
        return self._beta(self.threshold, self._L, self._psi_term)

    def should_stop(self) -> bool:
        """Whether Z(t) ≥ β(δ, t) (Algorithm 1, line 13); never before t = M + 1."""
        self._refresh()
        if self.labels is None or self.t <= self.n_arms:
            return False
        return self._statistic()[0] >= self.threshold_value()

    def recommend(self) -> np.ndarray:
        """The recommended partition c_out = c_{t−1} (canonical labels, a new array)."""
        self._refresh()
        if self.labels is None or self.centres is None:
            raise ValueError(
                "no estimate yet: every arm must have been observed once before the last "
                "observation (or call next_arm() after the initial pass)"
            )
        return canonical_partition(self.labels, self.centres)[0]

    def state(self) -> xr.Dataset:
        """Counts, empirical means, current estimate and target proportions as xarray."""
        self._refresh()
        M, K, d = self.n_arms, self.n_clusters, self.n_features
        labels = self.labels if self.labels is not None else np.full(M, -1)
        centres = self.centres if self.centres is not None else np.full((K, d), np.nan)
        return xr.Dataset(
            {
                "counts": (("arm",), self.counts.copy()),
                "means": (("arm", "feature"), self.means.copy()),
                "labels": (("arm",), labels.copy()),
                "centres": (("cluster", "feature"), centres.copy()),
                "target": (("arm",), self.target.copy()),
            },
            coords={"arm": np.arange(M), "cluster": np.arange(K), "feature": np.arange(d)},
            attrs={"t": self.t, "algorithm": self.name, "log_inv_delta": self._L},
        )

    def run(
        self,
        instance: Any,
        max_pulls: int = 1_000_000,
        rng: Any = None,
        *,
        progress: bool = False,
    ) -> ExplorationResult:
        """Play one run against ``instance`` until the stopping rule fires or ``max_pulls``.

        Parameters
        ----------
        instance : ClusterBandit
            The environment (its ``sampler(rng)`` provides the observations).
        max_pulls
            Budget; if reached, the result has ``stopped=False``.
        rng
            Seed of the observation noise (common random numbers: the same seed gives every
            algorithm the same noise at the same (arm, pull index)).

        Returns
        -------
        ExplorationResult
        """
        self._check_instance(instance)
        max_pulls = check_positive_int(max_pulls, "max_pulls")
        sampler = instance.sampler(rng)
        self.reset()
        self._prepare(instance)
        stopped = False
        z = 0.0
        beta = math.inf
        while self.t < max_pulls:
            arm = self._decide()
            self._observe(arm, sampler.pull(arm))
            if self.labels is not None and self.t > self.n_arms:
                z = self._statistic()[0]
                beta = self._beta(self.threshold, self._L, self._psi_term)
                if z >= beta:
                    stopped = True
                    break
        return self._result(instance, stopped, z, beta)

    # ------------------------------------------------------------------ internals
    def _check_instance(self, instance: Any) -> None:
        for attr, want in (
            ("n_arms", self.n_arms),
            ("n_clusters", self.n_clusters),
            ("n_features", self.n_features),
        ):
            got = getattr(instance, attr, None)
            if got is None:
                raise TypeError(
                    f"instance must be a ClusterBandit-like object, got {type(instance).__name__}"
                )
            if got != want:
                raise ValueError(f"instance has {attr}={got} but the algorithm has {want}")

    def _prepare(self, instance: Any) -> None:
        """Hook run by :meth:`run` after :meth:`reset` (Oracle takes its target here)."""

    def _result(self, instance: Any, stopped: bool, z: float, beta: float) -> ExplorationResult:
        from hierbandit.stats.partitions import same_partition

        if self.labels is None or self.centres is None:
            labels = np.full(self.n_arms, -1)
            centres = np.full((self.n_clusters, self.n_features), np.nan)
            correct = None
        else:
            labels, centres = canonical_partition(self.labels, self.centres)
            true = getattr(instance, "labels", None)
            correct = None if true is None else same_partition(labels, true)
        return ExplorationResult(
            algorithm=self.name,
            labels=labels,
            centres=centres,
            n_pulls=self.t,
            stopped=stopped,
            correct=correct,
            counts=self.counts.astype(np.int64),
            log_inv_delta=self._L,
            threshold=self.threshold,
            statistic=float(z),
            beta=float(beta),
            info=self._counters(),
        )

    def _counters(self) -> dict[str, int]:
        return {
            "n_forced": self.n_forced,
            "n_kmeans": self.n_kmeans,
            "n_fallback": self.n_fallback,
            "n_solver_retry": self.n_solver_retry,
            "kmeans_capped": self.kmeans_capped,
        }

    def _observe(self, a: int, x: np.ndarray) -> None:
        n = self.counts[a] + 1.0
        if n == 1.0:
            self._n_unpulled -= 1
        self.counts[a] = n
        s = self.sums[a]
        s += x
        self.means[a] = s / n
        new = math.log(4.0 + math.log(n))
        self._logsum += new - self._logterm[a]
        self._logterm[a] = new
        self.t += 1
        self._pending = None

    def _beta(self, threshold: str, L: float, psi_term: float) -> float:
        if threshold == "beta":
            return 2.0 * self.n_features * self._logsum + psi_term
        return self.n_features * math.log1p(math.log(self.t)) + L

    def _statistic(self) -> tuple[float, float, float]:
        z1, z2 = kern.stopping_statistics(
            self.means, self.counts, self.labels, self.centres, self.n_clusters, self._corrected
        )
        gap = math.sqrt(z2) - math.sqrt(z1)
        z = 0.5 * gap * gap if gap > 0.0 else 0.0
        return z, z1, z2

    def _decide(self) -> int:
        if self._n_unpulled:
            return int(np.flatnonzero(self.counts == 0)[0])
        return self._sample()

    def _forced_exploration(self) -> bool:
        return bool(self.counts.min() <= max(math.sqrt(self.t) - self.n_arms / 2.0, 0.0))

    def _estimate(self, means: np.ndarray | None = None, counts: np.ndarray | None = None) -> None:
        """Run K-means Maximin on (µ̂(t), N(t)) (or the given ``means``, ``counts``) and store
        the estimate (c_t, U_t)."""
        means = self.means if means is None else means
        counts = self.counts if counts is None else counts
        m0 = resolve_first(self.first_seed, counts, self._rng)
        labels, centres, _, converged = kern.kmeans_maximin(
            means, counts, self.n_clusters, m0, self.max_iter
        )
        if not converged:
            self.kmeans_capped += 1
            logger.warning("K-means Maximin reached max_iter=%d at t=%d", self.max_iter, self.t)
        self.labels, self.centres = labels, centres
        self._stale_arm = -1
        self.n_kmeans += 1

    def _refresh(self) -> None:
        """Bring a stale estimate to (c_{t−1}, U_{t−1}): K-means on the data before the last
        observation, which the caller chose through :meth:`observe` (no-op when up to date)."""
        a = self._stale_arm
        if a < 0:
            return
        self._stale_arm = -1
        before = self.counts[a] - 1.0
        if before < 1.0:  # an arm was unpulled at t − 1: no estimate exists yet
            return
        counts = self.counts.copy()
        counts[a] = before
        means = self.means.copy()
        means[a] = self._prev_mean
        self._estimate(means, counts)

    def _plugin(self) -> np.ndarray:
        """λ*(t) at the current estimate (uniform fallback when degenerate)."""
        lam, status = kern.plugin_allocation(
            self.labels, self.centres, self.n_clusters, self._corrected, _SOLVER_TOL, _MAX_NEWTON
        )
        if status == 1:
            self.n_fallback += 1
            logger.debug("degenerate estimate at t=%d: uniform target", self.t)
        elif status == 2:  # pragma: no cover - the barrier method has not failed in testing
            from hierbandit.boc.lower_bound import _solve_slsqp

            self.n_solver_retry += 1
            nk = np.bincount(self.labels, minlength=self.n_clusters).astype(float)
            ks, kps = kern.pair_set(nk, self._corrected)
            rhs = ((self.centres[ks] - self.centres[kps]) ** 2).sum(-1)
            x = _solve_slsqp(nk, rhs, ks, kps)
            lam = (x / x.sum())[self.labels] / nk[self.labels]
        return lam

    def _track(self, lam: np.ndarray) -> int:
        """D-Tracking: argmax_m (t λ_m − N_m), smallest index on ties."""
        self.target = lam
        return int(np.argmax(self.t * lam - self.counts))

    def _sample(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


class BOC(ClusteringExplorer):
    """Bandit Online Clustering (Algorithm 1), asymptotically optimal (Theorem 19).

    Parameters
    ----------
    n_arms, n_clusters, n_features
        M, K (known, K < M) and d.
    delta, log_inv_delta
        Confidence level (one of them; default δ = 0.01).
    threshold
        ``"beta"`` (eq. 8, default) or ``"beta_tilde"`` (Section 6.1).
    exploration
        ``"forced"`` (Algorithm 1, lines 3–4: pull ``argmin N`` when
        ``min_m N_m(t) ≤ max(√t − M/2, 0)``) or ``"linear"`` (Appendix C, eq. 22: no forced
        exploration; the plug-in λ*(t) is projected on ``{λ ≥ r²/(2M), Σλ = 1}``).
    r
        Lower bound on the ratio of smallest to largest centre distance (Assumption 1), required
        by ``exploration="linear"``; with ``exploration="forced"`` it is unused and passing it
        raises ``ValueError``.
    alt_pairs, first_seed, max_iter, rng
        See :class:`ClusteringExplorer`.

    Examples
    --------
    >>> from hierbandit.boc.instances import synthetic_instance
    >>> inst = synthetic_instance("easy")
    >>> res = BOC(11, 4, 3, delta=0.01).run(inst, rng=0)
    >>> res.stopped, res.correct
    (True, True)
    """

    name = "BOC"

    def __init__(
        self,
        n_arms: int,
        n_clusters: int,
        n_features: int,
        *,
        delta: float | None = None,
        log_inv_delta: float | None = None,
        threshold: str = "beta",
        exploration: str = "forced",
        r: float | None = None,
        alt_pairs: str = "corrected",
        first_seed: str = "first",
        max_iter: int = 1000,
        rng: Any = None,
    ) -> None:
        check_choice(exploration, ("forced", "linear"), "exploration")
        if exploration == "linear":
            if r is None:
                raise ValueError("exploration='linear' needs r (Assumption 1), got None")
            r = check_scalar(r, "r", low=0.0, high=1.0, low_inclusive=False)
        elif r is not None:
            raise ValueError(
                "r is used only by exploration='linear' (the floor r²/(2M) of eq. 22); forced "
                f"exploration would ignore it: drop r or pass exploration='linear', got r={r!r}"
            )
        super().__init__(
            n_arms,
            n_clusters,
            n_features,
            delta=delta,
            log_inv_delta=log_inv_delta,
            threshold=threshold,
            alt_pairs=alt_pairs,
            first_seed=first_seed,
            max_iter=max_iter,
            rng=rng,
        )
        self.exploration = exploration
        self.r = r
        self._forced = exploration == "forced"
        self._floor = (r * r / (2.0 * n_arms)) if exploration == "linear" else 0.0
        if exploration == "linear":
            self.name = "BOC-LE"

    def _sample(self) -> int:
        if self._forced and self._forced_exploration():
            self.n_forced += 1
            self._refresh()  # (c_t, U_t) ← (c_{t−1}, U_{t−1})
            return int(np.argmin(self.counts))
        self._estimate()
        lam = self._plugin()
        if not self._forced:
            lam = kern.project_floor(lam, self._floor)
        return self._track(lam)


class BOCLE(BOC):
    """BOC with the linear-exploration sampling rule of Appendix C (eq. 22); needs ``r``."""

    def __init__(
        self,
        n_arms: int,
        n_clusters: int,
        n_features: int,
        *,
        r: float,
        delta: float | None = None,
        log_inv_delta: float | None = None,
        threshold: str = "beta",
        alt_pairs: str = "corrected",
        first_seed: str = "first",
        max_iter: int = 1000,
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_arms,
            n_clusters,
            n_features,
            delta=delta,
            log_inv_delta=log_inv_delta,
            threshold=threshold,
            exploration="linear",
            r=r,
            alt_pairs=alt_pairs,
            first_seed=first_seed,
            max_iter=max_iter,
            rng=rng,
        )


class Uniform(ClusteringExplorer):
    """Round-robin sampling with BOC's estimator and stopping rule (Section 6 baseline).

    After the initial pass over arms 0..M−1, ``A_{t+1} = t mod M``; K-means Maximin runs at
    every step to feed the stopping rule.
    """

    name = "Uniform"
    _forced = False

    def _sample(self) -> int:
        self._estimate()
        return self.t % self.n_arms


class Oracle(ClusteringExplorer):
    """D-Tracking of the true optimal proportions λ* (Section 6 baseline).

    Only line 8 of Algorithm 1 changes (λ*(t) → λ*); forced exploration and K-means on every
    non-forced step (for the stopping rule) are kept.

    Parameters
    ----------
    n_arms, n_clusters, n_features
        M, K and d.
    lam : array_like, shape (M,), optional
        The true λ* (positive, summing to 1). If omitted, :meth:`run` takes it from the
        instance (``instance.lower_bound(alt_pairs=...).lam``); the step-level API then needs
        :meth:`set_target` first.
    delta, log_inv_delta, threshold, alt_pairs, first_seed, max_iter, rng
        See :class:`ClusteringExplorer`.
    """

    name = "Oracle"

    def __init__(
        self,
        n_arms: int,
        n_clusters: int,
        n_features: int,
        *,
        lam: Any = None,
        delta: float | None = None,
        log_inv_delta: float | None = None,
        threshold: str = "beta",
        alt_pairs: str = "corrected",
        first_seed: str = "first",
        max_iter: int = 1000,
        rng: Any = None,
    ) -> None:
        lam_arr = None if lam is None else self._check_lam(lam, n_arms)
        super().__init__(
            n_arms,
            n_clusters,
            n_features,
            delta=delta,
            log_inv_delta=log_inv_delta,
            threshold=threshold,
            alt_pairs=alt_pairs,
            first_seed=first_seed,
            max_iter=max_iter,
            rng=rng,
        )
        self.lam = lam_arr

    @staticmethod
    def _check_lam(lam: Any, n_arms: Any) -> np.ndarray:
        M = check_positive_int(n_arms, "n_arms", minimum=2)
        v = check_vector(lam, M, "lam")
        if np.any(v <= 0) or not np.isclose(v.sum(), 1.0, rtol=0, atol=1e-8):
            raise ValueError("lam must be positive and sum to 1")
        return v / v.sum()

    def set_target(self, lam: Any) -> None:
        """Set the true λ* (validated)."""
        self.lam = self._check_lam(lam, self.n_arms)

    def _prepare(self, instance: Any) -> None:
        if self.lam is None:
            self._run_lam = np.asarray(instance.lower_bound(alt_pairs=self.alt_pairs).lam)
        else:
            self._run_lam = self.lam

    def _sample(self) -> int:
        lam = getattr(self, "_run_lam", None) if self.lam is None else self.lam
        if lam is None:
            raise ValueError("Oracle needs the true lam: pass lam= or call set_target()")
        if self._forced_exploration():
            self.n_forced += 1
            self._refresh()  # (c_t, U_t) ← (c_{t−1}, U_{t−1})
            return int(np.argmin(self.counts))
        self._estimate()
        return self._track(lam)
