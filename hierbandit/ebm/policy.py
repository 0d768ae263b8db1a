"""ebmTS and ebmUCB: empirical-Bayes hierarchical multi-bandit policies (ebm paper, Algorithm 1).

Every arm k has its own two-level Gaussian model over the N instances,
β_{k0} ~ N(0, λ⁻¹I), β_{k,j} | β_{k0} ~ N(β_{k0}, Σ_k), y = xᵀβ_{k,j} + N(0, σ²_k), with
(Σ_k, σ²_k) re-estimated by empirical Bayes (§4.3) from the arm's data and the posterior of every
β_{k,j} computed exactly from sufficient statistics (§4.1, eq. 4.1–4.3). For an arrival at
instance j with context x:

* ebmUCB pulls argmax_k μ̂_k + α_t τ_k, with μ̂ = xᵀβ̂_{k,j} (5.1) and τ² = xᵀC_{k,j}x (5.2);
* ebmTS pulls argmax_k xᵀβ̆_k with β̆_k ~ N(β̂_{k,j}, α_t² C_{k,j}), sampled as the scalar
  U_k ~ N(μ̂_k, α_t² τ_k²) — the same distribution of the decision at O(1) cost per arm;

with α_t = a·√(log t). The first K rounds pull arms 1..K in turn (Algorithm 1, line 9). After each
pull only the pulled arm changes: its statistics, then (every ``hyper_update_every`` pulls of that
arm) Σ̂, σ̂² and the arm's posterior from its sufficient statistics, otherwise an exact rank-one
update with the hyperparameters held fixed (docs/maths/ebm.md §6). Nothing depends on the history
length.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import xarray as xr

from hierbandit._labels import Labels
from hierbandit._labels import copy_labels as _copy_labels
from hierbandit._labels import labels_arg as _labels_arg
from hierbandit._validation import (
    MAX_VARIANCE,
    _as_float_array,
    check_choice,
    check_covariance,
    check_features,
    check_positive_int,
    check_regularisation,
    check_scalar,
    check_variance,
)
from hierbandit.ebm import _pairs as PR
from hierbandit.ebm import _rows
from hierbandit.ebm.base import Policy, hyperparameter_dataset, posterior_dataset
from hierbandit.stats import kernels as K
from hierbandit.stats.empirical_bayes import EBOptions
from hierbandit.stats.hierarchical import shared_prior_arrays
from hierbandit.stats.threads import beside, over_threads_now, serving_threads

__all__ = ["EbmPolicy", "EbmTS", "EbmUCB"]

#: the per-(arm, instance) arrays of the dense layout, read from older checkpoints
_DENSE = ("G", "b", "q", "n_obs", "_Ct", "_A")
#: Z and mask of :func:`~hierbandit.ebm._pairs.choose` when there is none (UCB; all arms)
_NO_ROWS = np.zeros((0, 0))
_NO_MASK = np.zeros((0, 0), dtype=np.bool_)
_NO_Z = np.zeros(0)
#: fewest requests worth a thread of their own in a batch of decisions
_THREAD_CHUNK = 2048
#: the arrays of :attr:`EbmPolicy.added_arms`
_ADDED = ("Sigma", "sigma2", "shared_mean", "shared_cov", "prior")


class EbmPolicy(Policy):
    """Shared machinery of :class:`EbmTS` and :class:`EbmUCB` (the class attribute
    ``exploration`` selects the index rule).

    Parameters
    ----------
    n_instances, n_arms, n_features
        N instances, K arms shared by every instance, context dimension d.
    lam : float, default 0.001
        Precision λ of the N(0, λ⁻¹I) hyperprior on each arm's shared mean (paper §7), in
        [1e-6, 1e6] (:data:`~hierbandit._validation.MIN_REG`, ``MAX_REG``).
    a : float, default 0.1
        Exploration scale, α_t = a·√(log t) (paper §5, §7).
    hyper_update_every : int, optional
        Re-estimate (Σ̂_k, σ̂²_k) every m-th pull of arm k; 1 is the paper (Algorithm 1, line
        11). In between, exact rank-one updates with the hyperparameters held fixed. By default
        (None) the schedule keeps the cost of a step flat in the number of instances N: arm k
        is re-estimated once the pulls since its last re-estimation reach
        N / ``hyper_update_budget`` (every pull while N ≤ ``hyper_update_budget``, as in the
        paper; docs/decisions/ebm.md A7). When ``eb_options`` freezes both hyperparameters
        every update is a rank-one update.
    hyper_update_budget : float, default 10
        Of the default schedule: a re-estimation costs O(N d³), one every N / budget pulls
        costs O(budget · d³) per pull, amortised.
    forced_init : {"global", "per_instance", "none"}, optional
        "global" is Algorithm 1 line 9 as printed (rounds t ≤ K pull arm t, whichever instance
        arrives); "per_instance" cycles through the arms on each instance's first K arrivals;
        "none" forces nothing. Default: "global", or "none" when a ``prior`` is given (the
        prior already says what each arm is worth).
    alpha_clock : {"global", "instance"}, default "global"
        t in α_t is the global round (the paper) or the arriving instance's own arrival count.
    Sigma_init : array (d, d) or (K, d, d), optional
        Σ̂ used until it can be estimated (default identity, docs/decisions/ebm.md A6); entries
        at most 1e100 in magnitude.
    sigma2_init : float or array (K,), default 1.0
        σ̂² used until it can be estimated, in [1e-100, 1e100].
    eb_options : EBOptions, optional
        Options of the empirical-Bayes estimators (threshold rule, normalisation, floors…).
    hyper_method : {"eb", "ml"}, default "eb"
        How (Σ̂_k, σ̂²_k) are re-estimated: the paper's empirical Bayes by moments
        (thresholded OLS scatter, pooled residual variance; §4.3), or ``"ml"``: ``ml_steps``
        warm-started Fisher-scoring steps of type-II maximum likelihood on the arm's collapsed
        likelihood, every coefficient integrated out (:mod:`hierbandit.stats.online_ml`,
        docs/maths/ebm.md §7.5, docs/decisions/ebm.md A13). ``"ml"`` uses the ``eb_options``
        fields ``eig_floor``, ``sigma2_floor``, ``min_instances_for_sigma``, ``rank_tol``,
        ``estimate_Sigma`` and ``estimate_sigma2``; γ is then NaN. Same schedule either way.
    ml_steps : int, default 3
        Largest number of Fisher-scoring steps per re-estimation with ``hyper_method="ml"``
        (fewer once the predicted gain is below 1e-8).
    mean_formula : {"4.2", "4.4-literal"}, default "4.2"
        Predicted mean xᵀβ̂ with β̂ from (4.2) (correct), or the paper's printed (4.4), which
        divides by σ² once too often (docs/decisions/ebm.md T3). The literal form exists only for
        comparison.
    recompute_every : int, default 10000
        The period R of the drift control that bounds the rounding incremental
        (Sherman–Morrison) updates accumulate; see ``recompute``.
    recompute : {"local", "arm"}, default "local"
        How accumulated rounding is discarded (docs/decisions/ebm.md §3). ``"local"``: every
        R-th row of a pair recomputes that pair's blocks from its statistics (O(d³)), every
        R-th incremental update of an arm re-solves Φ and β̂₀ from the arm's sums (O(d³)),
        and after at least max(R, 64 N) of them the arm is rebuilt from all its pairs, so
        that drift control costs at most a small constant per row whatever N and however
        many users an arm has. ``"arm"`` (the rule before): the whole arm is rebuilt after
        max(R, N / ``hyper_update_budget``) incremental updates, O(n_k d³) each time,
        amortised up to ``hyper_update_budget`` pair recomputations per row once most users
        have data in the arm.
    prior : HierarchicalPrior, optional
        A prior fitted to historical data (:func:`hierbandit.bayes.fit_prior`), or any object
        with arrays ``shared_mean`` (K, d), ``shared_cov`` (K, d, d), ``Sigma`` (K, d, d) and
        ``sigma2`` (K,). Each arm's shared mean then has the prior N(shared_mean_k,
        shared_cov_k) instead of N(0, λ⁻¹I) (``lam`` is unused), and (Σ_k, σ²_k) start at the
        prior's values. Mutually exclusive with ``Sigma_init``/``sigma2_init``.
    prior_mode : {"init", "fixed"}, default "init"
        With a prior: "init" lets empirical Bayes re-estimate (Σ_k, σ²_k) from the online data
        as soon as it can (the prior's values are initial values); "fixed" keeps the prior's
        hyperparameters for good, so every update is an exact rank-one update.
    instances, arms, features, grow
        Ids of instances and arms, feature names, and whether new instance ids are accepted
        (:class:`~hierbandit.ebm.base.Policy`). With a ``prior``, ``n_arms``, ``n_features``,
        ``arms`` and ``features`` default to the prior's.
    added_arms : dict, optional
        Arms added after construction (:meth:`add_arms` records them here, so that the
        configuration rebuilds the policy's arms): arrays ``Sigma`` (m, d, d) and ``sigma2``
        (m,), the initial values of the last m arms of ``arms``, and ``shared_mean`` (m, d),
        ``shared_cov`` (m, d, d) and ``prior`` (m,) bool, their shared-mean prior where
        ``prior`` is True (N(0, λ⁻¹I) elsewhere, with zeros in the other two). ``prior``,
        ``Sigma_init`` and ``sigma2_init`` then describe the first K − m arms.
    tie_break : {"random", "first"}
    rng : seed or numpy Generator
        Streams: tie-breaks, Thompson draws, cross-validation splits.

    Notes
    -----
    State grows with the (instance, arm) pairs that have data, not with N × K
    (:mod:`hierbandit.ebm._pairs`, docs/decisions/ebm.md S2): an int32 index of N × K slots,
    and one record of 3d² + d + 2 values per pair at its first feedback; a pair without data
    reads its arm's shared empty-instance record. :attr:`G`, :attr:`b`, :attr:`q` and
    :attr:`n_obs` give the statistics as dense (K, N, ...) copies for inspection.
    """

    _n_streams = 3
    exploration = "ucb"

    _can_grow = True
    _checkpoint_added: ClassVar[dict[str, Any]] = {
        **Policy._checkpoint_added,
        "arms": lambda p: _implied_labels(p)[0],
        "features": lambda p: _implied_labels(p)[1],
        "_since_estimate": lambda p: np.zeros(int(p.n_arms), dtype=np.int64),
        "hyper_update_budget": lambda p: 10.0,
        "hyper_method": lambda p: "eb",
        "ml_steps": lambda p: 3,
        "added_arms": lambda p: None,
        # files written before the local drift control ran the whole-arm rule: they keep it
        "recompute": lambda p: "arm",
        # the dense layout of older checkpoints, converted (docs/decisions/ebm.md S2)
        "_pair_slot": lambda p: _from_dense(p)["_pair_slot"],
        "_pairs": lambda p: _from_dense(p)["_pairs"],
        "_empty": lambda p: _from_dense(p)["_empty"],
    }
    #: the empty-instance score terms (:func:`~hierbandit.ebm._pairs.refresh_empty_scores`):
    #: a cache, rebuilt when needed, kept out of checkpoints and copies
    _checkpoint_transient: ClassVar[dict[str, Any]] = {
        **Policy._checkpoint_transient,
        "_empty_scores": lambda: np.zeros((0, 0)),
        "_empty_dirty": lambda: np.zeros(0, dtype=bool),
        "_empty_stale": lambda: True,
        "_pair_spare": lambda: None,
    }
    #: derived from ``eb_options`` since (``_eb_args``), the dense layout (converted), and
    #: the scratch buffers of single decisions older versions kept (``_mu``, ``_tau``)
    _checkpoint_dropped: ClassVar[frozenset[str]] = frozenset(
        {"_eb_args", *_DENSE, "_dense_conversion", "_mu", "_tau"}
    )

    def __init__(
        self,
        n_instances: int | None = None,
        n_arms: int | None = None,
        n_features: int | None = None,
        lam: float = 1e-3,
        a: float = 0.1,
        *,
        hyper_update_every: int | None = None,
        hyper_update_budget: float = 10.0,
        forced_init: str | None = None,
        alpha_clock: str = "global",
        Sigma_init: Any = None,
        sigma2_init: Any = 1.0,
        eb_options: EBOptions | None = None,
        hyper_method: str = "eb",
        ml_steps: int = 3,
        mean_formula: str = "4.2",
        recompute_every: int = 10_000,
        recompute: str = "local",
        prior: Any = None,
        prior_mode: str = "init",
        instances: Any = None,
        arms: Any = None,
        features: Any = None,
        grow: bool | None = None,
        added_arms: dict[str, Any] | None = None,
        tie_break: str = "random",
        rng: Any = None,
    ) -> None:
        if prior is not None:
            n_arms, n_features, arms, features = _prior_labels(
                prior, n_arms, n_features, arms, features
            )
        if n_features is None:
            raise TypeError("n_features is required (or a prior to take it from)")
        if n_arms is None and arms is None:
            raise TypeError("n_arms or arms is required (or a prior to take them from)")
        super().__init__(
            n_instances,
            n_arms,
            n_features,
            instances=instances,
            arms=arms,
            features=features,
            grow=grow,
            tie_break=tie_break,
            rng=rng,
        )
        N, Kn, d = self.n_instances, self.n_arms, self.n_features
        self.lam = check_regularisation(lam, "lam")
        self.a = check_scalar(a, "a", low=0.0)
        self.hyper_update_every = (
            None
            if hyper_update_every is None
            else check_positive_int(hyper_update_every, "hyper_update_every")
        )
        self.hyper_update_budget = check_scalar(hyper_update_budget, "hyper_update_budget", low=0.0)
        if not self.hyper_update_budget > 0:
            raise ValueError("hyper_update_budget must be > 0")
        if forced_init is None:
            forced_init = "global" if prior is None else "none"
        self.forced_init = check_choice(
            forced_init, ("global", "per_instance", "none"), "forced_init"
        )
        self.alpha_clock = check_choice(alpha_clock, ("global", "instance"), "alpha_clock")
        self.mean_formula = check_choice(mean_formula, ("4.2", "4.4-literal"), "mean_formula")
        self.recompute_every = check_positive_int(recompute_every, "recompute_every")
        self.recompute = check_choice(recompute, ("local", "arm"), "recompute")
        if eb_options is None:
            eb_options = EBOptions()
        elif not isinstance(eb_options, EBOptions):
            raise TypeError("eb_options must be an EBOptions instance")
        self.eb_options = eb_options
        self.hyper_method = check_choice(hyper_method, ("eb", "ml"), "hyper_method")
        self.ml_steps = check_positive_int(ml_steps, "ml_steps")
        self.Sigma_init = Sigma_init
        self.sigma2_init = sigma2_init
        added = _check_added_arms(added_arms, Kn, d)
        K0 = Kn - (0 if added is None else added["sigma2"].shape[0])  # arms of the configuration
        Sigma0 = (
            np.broadcast_to(np.eye(d), (K0, d, d)).copy()
            if Sigma_init is None
            else _bounded_cov(check_covariance(Sigma_init, d, "Sigma_init", batch=K0), "Sigma_init")
        )
        try:
            s2 = np.asarray(sigma2_init, dtype=float) if not isinstance(sigma2_init, str) else None
        except (TypeError, ValueError, OverflowError):
            s2 = None
        if s2 is None or s2.ndim > 1 or (s2.ndim == 1 and s2.shape != (K0,)):
            raise ValueError(f"sigma2_init must be a positive number or an array of shape ({K0},)")
        s2 = np.broadcast_to(s2, (K0,)).copy()
        if not (np.all(np.isfinite(s2)) and np.all(s2 > 0)):
            raise ValueError("sigma2_init must be finite and > 0")
        for v in s2:
            check_variance(float(v), "sigma2_init")
        self.prior = prior
        self.prior_mode = check_choice(prior_mode, ("init", "fixed"), "prior_mode")
        P0 = np.broadcast_to(self.lam * np.eye(d), (K0, d, d)).copy()
        h0 = np.zeros((K0, d))
        if prior is not None:
            if Sigma_init is not None or not (np.isscalar(sigma2_init) and sigma2_init == 1.0):
                raise ValueError("prior: pass either a prior or Sigma_init/sigma2_init, not both")
            Sigma0, s2 = self._read_prior(prior, K0, P0, h0)
        self.added_arms = added
        if added is not None:
            P0a, h0a = _added_shared_priors(added, self.lam, d)
            Sigma0 = np.concatenate([Sigma0, added["Sigma"]])
            s2 = np.concatenate([s2, added["sigma2"]])
            P0, h0 = np.concatenate([P0, P0a]), np.concatenate([h0, h0a])
        self._P0, self._h0 = P0, h0
        self._ts_rng, self._cv_rng = self._streams[1], self._streams[2]
        self._literal_44 = self.mean_formula == "4.4-literal"
        self._need_uniforms = eb_options.threshold == "cv" and eb_options.estimate_Sigma
        # with both hyperparameters frozen every update takes the O(d²) rank-one path
        self._estimates_any = (eb_options.estimate_Sigma or eb_options.estimate_sigma2) and not (
            prior is not None and self.prior_mode == "fixed"
        )
        # pair-sparse statistics and blocks (hierbandit.ebm._pairs): the slot of each
        # (instance, arm) pair with data, the records of the slots (the leading rows of a
        # buffer that grows as pairs take data, _pair_buffer) and each arm's empty record
        width = int(PR.record_width(d))
        self._pair_slot = np.full((N, Kn), -1, dtype=np.int32)
        self._pairs = np.zeros((0, width))
        self._empty = np.zeros((Kn, width))
        # hyperparameters
        self.Sigma = Sigma0
        self.sigma2 = s2
        self.gamma = np.full(Kn, np.nan)
        self.n_eff = np.zeros(Kn, dtype=np.int64)
        # posterior state per arm
        self._P = np.empty((Kn, d, d))
        self._r = np.empty((Kn, d))
        self._Phi = np.empty((Kn, d, d))
        self._beta0 = np.empty((Kn, d))
        self.pulls = np.zeros(Kn, dtype=np.int64)
        self.arrivals = np.zeros(N, dtype=np.int64)
        self._rank_one_count = np.zeros(Kn, dtype=np.int64)
        #: pulls of each arm since its last re-estimation (the default schedule)
        self._since_estimate = np.zeros(Kn, dtype=np.int64)
        self._empty_scores = np.zeros((0, 0))
        self._empty_dirty = np.zeros(0, dtype=bool)
        self._empty_stale = True  # some arm of _empty_dirty may be marked
        self._pair_spare = None  # the buffer behind _pairs (_pair_buffer)
        for k in range(Kn):
            PR.empty_record(self.Sigma[k], self.sigma2[k], self._empty[k])
            self._recompute_arm(k)

    _state_entries_text = "n_instances × n_arms (the slot index)"

    @classmethod
    def _state_entries(cls, n_instances: int, n_arms: int, n_features: int) -> int:
        """Entries allocated up front: the N × K slot index (records come with the data)."""
        return n_instances * n_arms

    # ------------------------------------------------------------------ internals
    def _read_prior(
        self, prior: Any, Kn: int, P0: np.ndarray, h0: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Validate a fitted prior of ``Kn`` arms and set the shared-mean prior of every arm
        from it (into ``P0``, ``h0``)."""
        d = self.n_features
        try:
            m = np.asarray(prior.shared_mean, dtype=float)
            S = np.asarray(prior.shared_cov, dtype=float)
            Sig = np.asarray(prior.Sigma, dtype=float)
            s2 = np.asarray(prior.sigma2, dtype=float)
        except AttributeError as exc:
            raise TypeError(
                "prior must provide shared_mean, shared_cov, Sigma and sigma2 arrays"
            ) from exc
        want = {"shared_mean": (Kn, d), "shared_cov": (Kn, d, d), "Sigma": (Kn, d, d)}
        for name, arr in (("shared_mean", m), ("shared_cov", S), ("Sigma", Sig)):
            if arr.shape != want[name]:
                raise ValueError(
                    f"prior.{name} has shape {arr.shape}, but this policy needs {want[name]} "
                    f"(n_arms={Kn}, n_features={d})"
                )
        if s2.shape != (Kn,) or not (np.all(np.isfinite(s2)) and np.all(s2 > 0)):
            raise ValueError(f"prior.sigma2 must be {Kn} finite positive values")
        for v in s2:
            check_variance(float(v), "prior.sigma2")
        Sig = _bounded_cov(check_covariance(Sig, d, "prior.Sigma", batch=Kn), "prior.Sigma")
        _bounded_cov(S, "prior.shared_cov")
        for k in range(Kn):
            P0[k], h0[k] = shared_prior_arrays(self.lam, d, (m[k], S[k]))
        return Sig, s2.copy()

    @property
    def n_pairs(self) -> int:
        """The (instance, arm) pairs with data, each holding one record of state."""
        return int(self._pairs.shape[0])

    def _pair_buffer(self) -> np.ndarray:
        """The buffer whose leading rows ``_pairs`` is (``_pair_spare``): spare rows for new
        pairs' records, kept out of the state (a checkpoint, a copy or a comparison sees the
        records in use); ``_pairs`` itself when it is not a view of it (restored, copied)."""
        buf = self._pair_spare
        if buf is not None and self._pairs.base is buf:
            return buf
        return self._pairs

    def _recompute_arm(self, k: int) -> None:
        """Posterior of arm k from its sufficient statistics with the current hyperparameters
        (:func:`_rows.recompute_pairs`, as a row of ``update_batch`` does it)."""
        _rows.recompute_pairs(k, self.n_instances, self._row_state())

    def _reestimate_arm(self, k: int) -> None:
        """Empirical-Bayes step of docs/maths/ebm.md §7.4 (or the type-II ML step of §7.5 with
        ``hyper_method="ml"``) for arm k: Σ̂, σ̂², posterior (:func:`_rows.reestimate_pairs`,
        as a row of ``update_batch`` does it)."""
        _rows.reestimate_pairs(
            k, self.n_instances, self._row_state(), self._row_options(), self._cv_rng
        )

    def _alpha(self, j: int) -> float:
        if self.alpha_clock == "global":
            t = self.t + 1
        else:
            t = (int(self.arrivals[j]) if j >= 0 else 0) + 1
        return self.a * math.sqrt(math.log(t))

    def _forced_arms(self, J: np.ndarray) -> np.ndarray:
        """:meth:`_forced_arm` of every code in ``J`` (−1: not forced), vectorised."""
        if self.forced_init == "none" or (self.forced_init == "global" and self.t >= self.n_arms):
            return np.full(J.shape[0], -1, dtype=np.int64)
        if self.forced_init == "global":
            return np.full(J.shape[0], self.t, dtype=np.int64)
        c = np.where(J >= 0, self.arrivals[np.maximum(J, 0)], 0).astype(np.int64)
        return np.where(c < self.n_arms, c, -1)

    def _forced_arm(self, j: int) -> int:
        if self.forced_init == "global":
            return self.t if self.t < self.n_arms else -1
        if self.forced_init == "none":
            return -1
        c = int(self.arrivals[j]) if j >= 0 else 0
        return c if c < self.n_arms else -1

    def _moments(self, j: int, x: np.ndarray, mu: np.ndarray, tau: np.ndarray) -> None:
        """μ̂ (5.1) and τ (5.2) of every arm for instance j into ``mu``, ``tau`` (j = −1: an
        instance without state, which the shared posterior describes)."""
        self._score_requests(x[None, :], np.array([j], dtype=np.int64), mu[None, :], tau[None, :])

    def _empty_terms(self) -> np.ndarray:
        """The empty-instance score terms of every arm, current
        (:func:`~hierbandit.ebm._pairs.refresh_empty_scores` on the arms marked since)."""
        if not self._empty_stale:
            return self._empty_scores
        Kn, width = self.n_arms, int(PR.cache_width(self.n_features))
        if self._empty_scores.shape != (width, Kn) or self._empty_dirty.shape != (Kn,):
            self._empty_scores = np.zeros((width, Kn))
            self._empty_dirty = np.ones(Kn, dtype=bool)
        PR.refresh_empty_scores(
            self._empty, self._beta0, self._Phi, self.sigma2, self._empty_scores, self._empty_dirty
        )
        self._empty_stale = False
        return self._empty_scores

    def _changed(self, k: int | None = None) -> None:
        """Arm k's shared posterior or hyperparameters changed (None: any arm may have)."""
        if self._empty_dirty.shape == (self.n_arms,):
            self._empty_dirty[slice(None) if k is None else k] = True
        self._empty_stale = True

    def _select(self, j: int, x: np.ndarray) -> int:
        forced = self._forced_arm(j)
        if forced >= 0:
            return forced
        # one request: the kernel of a batch's request (the same operations), called directly
        Kn = self.n_arms
        z = self._ts_rng.standard_normal(Kn) if self.exploration == "ts" else _NO_Z
        scores = np.empty(Kn)
        k, tied = PR.for_dimension(self.n_features)[3](
            x,
            j,
            self._pair_slot,
            self._pairs,
            self._empty_terms(),
            self._beta0,
            self._Phi,
            self.sigma2,
            self._literal_44,
            self._alpha(j),
            z,
            scores,
        )
        if tied and self.tie_break == "random":
            idx = np.flatnonzero(scores == scores[k])
            k = int(idx[self._tie_rng.integers(idx.size)])
        return int(k)

    def _alphas(self, J: np.ndarray) -> np.ndarray:
        """α_t of every request (:meth:`_alpha`, the same floating-point operations)."""
        if self.alpha_clock == "global":
            return np.full(J.shape[0], self._alpha(0))
        t = np.where(J >= 0, self.arrivals[np.maximum(J, 0)], 0) + 1
        values, where = np.unique(t, return_inverse=True)
        return np.array([self.a * math.sqrt(math.log(int(v))) for v in values])[where]

    def _scores(self, j: int, x: np.ndarray) -> np.ndarray:
        """The index of every arm for one request (Thompson sampling draws its K normals)."""
        return self._index(np.array([j], dtype=np.int64), x[None, :], None)[2][0]

    def _choose(self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """The index rule's arm for every request (instance ``J[i]``, context ``X[i]``, arms
        allowed ``mask[i]``), none forced (:meth:`_index`), and a tie draw from the tie-break
        stream for each tied request, in order, as :meth:`Policy._argmax` would."""
        out, tie, scores = self._index(J, X, mask)
        self._break_ties(out, tie, scores)
        return out

    def _index(
        self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first maximum of every request's index, whether it is tied, and the indexes
        (B, K): one compiled pass (on two threads for large batches); K Thompson normals per
        request from the Thompson stream (drawn beside the scoring on a helper thread)."""
        n, Kn = J.shape[0], self.n_arms
        cache = self._empty_terms()
        alpha = self._alphas(J)
        X = np.ascontiguousarray(X)
        mask = _NO_MASK if mask is None else np.ascontiguousarray(mask)
        out = np.empty(n, dtype=np.int64)
        tie = np.empty(n, dtype=np.bool_)
        scores = np.empty((n, Kn))
        state = (self._pair_slot, self._pairs, cache, self._beta0, self._Phi, self.sigma2)
        score_pairs, choose, combine, _ = PR.for_dimension(self.n_features)
        if self.exploration == "ts" and n >= _THREAD_CHUNK and serving_threads() > 1:
            # the Thompson normals are drawn on a helper thread while this one scores
            Z = np.empty((n, Kn))
            drawn = beside(self._ts_rng.standard_normal, out=Z)
            MU, TAU = np.empty((n, Kn)), np.empty((n, Kn))
            try:
                score_pairs(X, J, *state, self._literal_44, MU, TAU, PR.far_records(self._pairs))
            finally:
                drawn.result()
            combine(0, n, MU, TAU, alpha, Z, mask, out, tie, scores)
        else:
            Z = self._ts_rng.standard_normal((n, Kn)) if self.exploration == "ts" else _NO_ROWS
            far = PR.far_records(self._pairs)
            args = (X, J, *state, self._literal_44, alpha, Z, mask, out, tie, scores, far)
            if n < 2 * _THREAD_CHUNK:  # one slice: no thread machinery (single decisions)
                choose(0, n, *args)
            else:
                over_threads_now(
                    lambda lo, hi: choose(lo, hi, *args),
                    n,
                    serving_threads(),
                    min_chunk=_THREAD_CHUNK,
                )
        return out, tie, scores

    def _update(self, j: int, x: np.ndarray, k: int, y: float) -> None:
        if j == self.n_instances:  # a new instance (the caller made room)
            self.n_instances += 1
        s = int(self._pair_slot[j, k])
        if s < 0:  # the pair's first row: a slot, starting as the arm's empty record
            s = self.n_pairs
            self._reserve_pairs(s + 1)
            buf = self._pair_buffer()
            buf[s] = self._empty[k]
            self._pairs = buf[: s + 1]
            self._pair_slot[j, k] = s
        self.t += 1
        self.arrivals[j] += 1
        self.pulls[k] += 1
        self._since_estimate[k] += 1
        self._changed(k)
        d = self.n_features
        row = self._pairs[s]
        oq = 3 * d * d + d
        row[oq] += y * y
        row[oq + 1] += 1.0
        rec = PR.record_views(row, d)
        if self._estimates_any and _rows.reestimate_due(
            self.pulls[k],
            self._since_estimate[k],
            self._every,
            self.hyper_update_budget,
            self.n_instances,
        ):
            G, b = rec["G"], rec["b"]
            G += np.multiply.outer(x, x)
            b += x * y
            self._reestimate_arm(k)
        else:
            # rank-one, or the pair's blocks refreshed where that is ill-conditioned (a row
            # large against what the arm knows) or the pair is due: O(d³) at most, whatever
            # the number of users (the order of _rows.row_step)
            local = self.recompute == "local"
            args = (
                x,
                y,
                rec["G"],
                rec["b"],
                rec["Ct"],
                rec["A"],
                self._P[k],
                self._r[k],
                self._Phi[k],
                self._beta0[k],
                self.Sigma[k],
                self.sigma2[k],
                self._P0[k],
            )
            if _rows.pair_refresh_due(local, int(row[oq + 1]), self.recompute_every):
                K.refresh_instance(*args)
            else:
                K.observe_row(*args)
            self._rank_one_count[k] += 1
            act = _rows.drift_action(
                local,
                self._rank_one_count[k],
                self.recompute_every,
                self.hyper_update_budget,
                self.n_instances,
            )
            if act == _rows.REBUILD:
                self._recompute_arm(k)
            elif act == _rows.RESOLVE:
                K.shared_resolve(self._P[k], self._P0[k], self._r[k], self._Phi[k], self._beta0[k])

    @property
    def _eb_args(self) -> tuple:
        """The options of :func:`kernels.reestimate_arm` (the CV generator and splits go after
        the ninth)."""
        return self.eb_options.reestimate_args

    @property
    def _ml_args(self) -> tuple:
        """The settings of :func:`_rows.reestimate_ml_slots` (whether ``hyper_method`` is "ml", then
        the step's options), as Python scalars; the last entry of :meth:`_row_options` under
        "ml" (None under "eb")."""
        o = self.eb_options
        return (
            self.hyper_method == "ml",
            int(self.ml_steps),
            float(o.eig_floor),
            float(o.sigma2_floor),
            int(o.min_instances_for_sigma),
            float(o.rank_tol),
            bool(o.estimate_Sigma),
            bool(o.estimate_sigma2),
        )

    @property
    def _every(self) -> int:
        """``hyper_update_every`` for the kernels (0: the default schedule)."""
        return 0 if self.hyper_update_every is None else int(self.hyper_update_every)

    def _score_requests(
        self, X: np.ndarray, J: np.ndarray, MU: np.ndarray, TAU: np.ndarray
    ) -> None:
        """μ̂ and τ of every arm for requests (``J``, ``X``) into ``MU``, ``TAU`` (B, K); a pair
        without data (and every arm of ``J[i] = -1``, an instance without state) reads its
        arm's empty record."""
        score_pairs = PR.for_dimension(self.n_features)[0]
        score_pairs(
            np.ascontiguousarray(X),
            J,
            self._pair_slot,
            self._pairs,
            self._empty_terms(),
            self._beta0,
            self._Phi,
            self.sigma2,
            self._literal_44,
            MU,
            TAU,
            False,
        )

    # ------------------------------------------------------------------ batches
    def _select_batch(self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Every request scored in one kernel call; the random draws are those of the loop of
        :meth:`_select` (K Thompson normals per request that is not forced, a tie draw only on
        a tie), so the arms are the loop's."""
        B = X.shape[0]
        out = np.empty(B, dtype=np.int64)
        forced = self._forced_arms(J)
        if mask is not None:
            # a forced arm the request may not receive: the request is scored instead
            rows = np.flatnonzero(forced >= 0)
            forced[rows[~mask[rows, forced[rows]]]] = -1
        free = np.flatnonzero(forced < 0)
        if free.size == B:
            return self._choose(J, X, mask)
        out[forced >= 0] = forced[forced >= 0]
        if free.size:
            out[free] = self._choose(J[free], X[free], None if mask is None else mask[free])
        return out

    def _score_moments(self, J: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Centres μ̂ and scales α·τ of every arm's score for requests (``J``, ``X``): the score
        is μ̂ + α·τ (UCB) or μ̂ + α·τ·Z with Z standard normal (Thompson sampling)."""
        B, Kn = X.shape[0], self.n_arms
        MU = np.empty((B, Kn))
        TAU = np.empty((B, Kn))
        self._score_requests(X, J, MU, TAU)
        return MU, self._alphas(J)[:, None] * TAU

    def _choice_probabilities(
        self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None, arms: np.ndarray | None
    ) -> np.ndarray:
        """Probabilities of :meth:`_select_batch`'s choices without drawing anything: a forced
        arm (the initial round robin) is chosen for sure, every other request by its scores."""
        forced = self._forced_arms(J)
        if mask is not None:
            rows = np.flatnonzero(forced >= 0)
            forced[rows[~mask[rows, forced[rows]]]] = -1
        MU, S = self._score_moments(J, X)
        return self._index_probabilities(MU, S, mask, arms, self.exploration != "ucb", forced)

    def _update_batch(self, J: np.ndarray, X: np.ndarray, Karr: np.ndarray, Y: np.ndarray) -> None:
        """All rows in one kernel call (:func:`hierbandit.ebm._rows.apply_rows`), identical to
        the loop of :meth:`_update`."""
        self._reserve_rows(J, Karr)
        state = self._row_state()
        X = np.ascontiguousarray(X)
        apply_rows, prepare_rows, arm_rows = _rows.rows_for_dimension(self.n_features)
        far = PR.far_records(self._pairs)
        B, Kn = J.shape[0], self.n_arms
        if (
            B >= 2 * _THREAD_CHUNK
            and Kn > 1
            and serving_threads() > 1
            and not self._reestimates_within(Karr)
        ):
            # no re-estimation (no draw, nothing shared between arms but the bookkeeping done
            # first, in order): the arms split over two threads, rows in order within an arm
            n_at = np.empty(B, dtype=np.int64)
            fresh = np.empty(B, dtype=np.bool_)
            n = prepare_rows(J, Karr, self.n_instances, state, n_at, fresh)
            counts = np.cumsum(np.bincount(Karr, minlength=Kn))
            cut = int(np.clip(np.searchsorted(counts, counts[-1] / 2), 1, Kn - 1))
            args = (J, X, Karr, Y, n_at, fresh, state, self._row_options(), self._cv_rng, far)
            other = beside(arm_rows, cut, Kn, *args)
            try:
                arm_rows(0, cut, *args)
            finally:
                other.result()
            self.n_instances = n
        else:
            self.n_instances = apply_rows(
                J, X, Karr, Y, self.n_instances, state, self._row_options(), self._cv_rng, far
            )
        self._rows_applied(state)
        self._changed()
        self.t += int(J.shape[0])

    def _reestimates_within(self, Karr: np.ndarray) -> bool:
        """Whether a batch whose rows pull the arms ``Karr`` may re-estimate an arm's
        hyperparameters (:func:`_rows.reestimate_due` at some row), erring towards yes: with
        ``c_k`` rows of arm k, at the "every" schedule a multiple of the period falls in
        (pulls_k, pulls_k + c_k]; at the default one (since_k + c_k) · budget reaches the
        instances before the batch (n only grows within it)."""
        if not self._estimates_any:
            return False
        c = np.bincount(Karr, minlength=self.n_arms)
        if self._every > 0:
            return bool(np.any((self.pulls + c) // self._every > self.pulls // self._every))
        since = (self._since_estimate + c).astype(np.float64)
        return bool(np.any((c > 0) & (since * float(self.hyper_update_budget) >= self.n_instances)))

    def _reserve_rows(self, J: np.ndarray, Karr: np.ndarray) -> None:
        """Room for the slots the rows (``J``, ``Karr``) give to pairs without data (the index
        has rows for every instance they name): one per row of such a pair, a bound (a pair's
        second row in the batch takes none) that is cheaper than counting distinct pairs."""
        miss = PR.rows_without_slot(self._pair_slot, J, Karr)
        if miss:
            self._reserve_pairs(self.n_pairs + miss)

    def _reserve_pairs(self, n: int, exact: bool = False) -> None:
        """Room for ``n`` records in :meth:`_pair_buffer`: it doubles (and grows to at least
        16 rows), or grows to ``n`` exactly (``exact``, :meth:`reserve`). The spare rows are
        left uninitialised: a pair's record is written whole (a copy of the arm's empty
        record) when it takes its slot, before anything reads it."""
        cap = self._pair_buffer().shape[0]
        if n <= cap:
            return
        used = self.n_pairs
        buf = np.empty((n if exact else max(n, 2 * cap, 16), self._pairs.shape[1]))
        buf[:used] = self._pairs
        self._pairs, self._pair_spare = buf[:used], buf

    def _row_state(self) -> tuple:
        """The arrays a row of feedback changes or reads, for :func:`_rows.row_step` (the
        records' buffer and a counter of the records in use: :meth:`_rows_applied` takes the
        new ones into ``_pairs`` after the kernel)."""
        return (
            self._pair_slot,
            self._pair_buffer(),
            np.array([self.n_pairs], dtype=np.int64),
            self._empty,
            self.Sigma,
            self.sigma2,
            self.gamma,
            self.n_eff,
            self._P,
            self._r,
            self._Phi,
            self._beta0,
            self._P0,
            self._h0,
            self.pulls,
            self.arrivals,
            self._rank_one_count,
            self._since_estimate,
        )

    def _rows_applied(self, state: tuple) -> None:
        """``_pairs`` after the kernel ran on ``state`` (:meth:`_row_state`): the records in
        use, new pairs' included."""
        self._pairs = state[1][: int(state[2][0])]

    def _row_options(self) -> tuple:
        """The settings of :func:`_rows.row_step`, as Python scalars (one compiled
        signature per ``hyper_method``)."""
        return (
            bool(self._estimates_any),
            bool(self._need_uniforms),
            self._every,
            float(self.hyper_update_budget),
            int(self.recompute_every),
            int(self.eb_options.cv_splits),
            tuple(self._eb_args),
            self._ml_args if self.hyper_method == "ml" else None,
            self.recompute == "local",
        )

    def _grow(self, n: int) -> None:
        """Room for ``n`` instances: the slot index and the arrival counts grow by doubling
        (new instances hold no slot)."""
        cap = self.arrivals.shape[0]
        if n <= cap:
            return
        new_cap = max(n, 2 * cap, 16)
        slot = np.full((new_cap, self.n_arms), -1, dtype=np.int32)
        slot[:cap] = self._pair_slot
        arrivals = np.zeros(new_cap, dtype=np.int64)
        arrivals[:cap] = self.arrivals
        self._pair_slot, self.arrivals = slot, arrivals

    def _trim(self) -> None:
        """Drop the spare capacity of the index (before a checkpoint; the records' spare rows
        are outside ``_pairs`` already)."""
        super()._trim()
        n = self.n_instances
        if self._pair_slot.shape[0] != n:
            self._pair_slot = self._pair_slot[:n].copy()
            self.arrivals = self.arrivals[:n].copy()

    # ------------------------------------------------------------------ public
    def reserve(self, pairs: int) -> None:
        """Make room for ``pairs`` (instance, arm) records now, and commit its memory.

        A pair's record (3d² + d + 2 values) is allocated at its first row of feedback, in a
        buffer that doubles when full: a batch that fills it copies every record and touches
        fresh memory, a pause on the serving path that grows with the state (about 0.5 s at
        3·10⁵ pairs of d = 10 on the benchmark machine, docs/decisions/ebm.md S3). A service
        that expects about ``pairs`` pairs can pay that once, at start-up: the buffer then
        holds at least that many records (``pairs`` × (3d² + d + 2) × 8 bytes), written once
        so that the operating system backs them, and new pairs up to that many take no
        allocation. It changes no value of the state, and checkpoints do not keep the spare
        room (call it again after :meth:`load`).

        Parameters
        ----------
        pairs : int
            Records to hold, those in use included (``n_pairs``); at most 2³¹ − 1 (the slot
            index is 32-bit). Fewer than the buffer holds already commits what it holds.
        """
        n = check_positive_int(pairs, "pairs", minimum=0)
        if n > np.iinfo(np.int32).max:
            raise ValueError(f"pairs must be at most {np.iinfo(np.int32).max} (got {n})")
        with self._lock:
            self._reserve_pairs(n, exact=True)
            buf = self._pair_buffer()
            buf[self.n_pairs :] = 0.0  # the spare rows, written whole before any is read

    def add_arms(self, arms: Any, prior: Any = None) -> None:
        """Add arms to the running policy; :meth:`select` and :meth:`select_batch` consider
        them from the next call, and checkpoints keep them.

        A new arm has no data. Its shared mean has the prior N(0, λ⁻¹I), and Σ̂ and σ̂² start at
        the policy's ``Sigma_init`` and ``sigma2_init`` when they are one value for every arm
        (the identity and 1 by default, and with a ``prior``), else at the identity and 1; or,
        with ``prior``, at the given entries. Each is re-estimated from the arm's own pulls,
        as the other arms are. The result is the state of a policy that had the arm from the
        start and never pulled it (tests/ebm/test_add_arms.py).

        Parameters
        ----------
        arms : sequence of int or str
            Ids of the new arms, of the kind the policy's arm ids are (the next integers
            ``n_arms, n_arms + 1, …`` keep integer-coded arms integer-coded), none already
            used.
        prior : object or mapping, optional
            Per-arm entries for the new arms, in the order of ``arms``: ``shared_mean`` (m, d),
            ``shared_cov`` (m, d, d) positive definite, ``Sigma`` (m, d, d) and ``sigma2``
            (m,), as attributes (a :class:`~hierbandit.bayes.HierarchicalPrior` fitted to the
            new arms' history) or keys; their shared means then have the prior
            N(shared_mean, shared_cov) and (Σ̂, σ̂²) start at (Sigma, sigma2).

        Raises
        ------
        TypeError, ValueError
            For ids that are not new, not of the policy's kind, or entries of the wrong shape
            or value, before anything changes.
        """
        if isinstance(arms, str | bytes) or not hasattr(arms, "__iter__"):
            raise TypeError(f"arms must be a sequence of arm ids, got {type(arms).__name__}")
        ids = list(arms)
        if not ids:
            raise ValueError("arms must name at least one new arm")
        d = self.n_features
        with self._lock:
            labels = _copy_labels(self.arms)
            labels.extend(ids)  # refuses ids already used or of the other kind
            m = len(ids)
            new = _new_arm_entries(prior, m, d, self._default_arm_init())
            P0a, h0a = _added_shared_priors(new, self.lam, d)
            # validated: from here on nothing can fail
            if self.added_arms is None:
                added = new
            else:
                added = {n: np.concatenate([self.added_arms[n], new[n]]) for n in _ADDED}
            Kn = self.n_arms
            self._P0 = np.concatenate([self._P0, P0a])
            self._h0 = np.concatenate([self._h0, h0a])
            self.Sigma = np.concatenate([self.Sigma, new["Sigma"]])
            self.sigma2 = np.concatenate([self.sigma2, new["sigma2"]])
            self.gamma = np.concatenate([self.gamma, np.full(m, np.nan)])
            for name in ("n_eff", "pulls", "_rank_one_count", "_since_estimate"):
                setattr(self, name, np.concatenate([getattr(self, name), np.zeros(m, np.int64)]))
            for name, shape in (("_P", (d, d)), ("_r", (d,)), ("_Phi", (d, d)), ("_beta0", (d,))):
                setattr(self, name, np.concatenate([getattr(self, name), np.empty((m, *shape))]))
            slot = np.full((self._pair_slot.shape[0], Kn + m), -1, dtype=np.int32)
            slot[:, :Kn] = self._pair_slot
            self._pair_slot = slot
            self._empty = np.concatenate([self._empty, np.zeros((m, self._empty.shape[1]))])
            self.arms, self.n_arms, self.added_arms = labels, Kn + m, added
            self._empty_dirty = np.zeros(0, dtype=bool)  # the cache is rebuilt for K + m arms
            self._empty_stale = True
            for k in range(Kn, Kn + m):
                PR.empty_record(self.Sigma[k], self.sigma2[k], self._empty[k])
                self._recompute_arm(k)

    def _default_arm_init(self) -> tuple[np.ndarray, float]:
        """Σ̂ and σ̂² a new arm starts from without a prior entry (see :meth:`add_arms`)."""
        d = self.n_features
        Sig = np.eye(d)
        if self.prior is None and self.Sigma_init is not None:
            S = np.asarray(self.Sigma_init, dtype=float)
            if S.shape == (d, d):
                Sig = check_covariance(S, d, "Sigma_init")
        s2 = 1.0
        if self.prior is None and np.ndim(self.sigma2_init) == 0:
            s2 = float(self.sigma2_init)
        return Sig, s2

    def predict(self, instance: Any, context: Any) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean μ̂ (5.1) and standard deviation τ (5.2) of every arm's mean reward
        (in the order of ``arms``; a new instance id gets the shared posterior's)."""
        j = self._instance_code(instance)
        x = check_features(context, self.n_features, "context")
        mu = np.empty(self.n_arms)
        tau = np.empty(self.n_arms)
        with self._lock:
            self._moments(j, x, mu, tau)
        return mu, tau

    def posterior(self) -> xr.Dataset:
        """Exact posterior (4.2) of every β_{k,j} given the current (Σ̂_k, σ̂²_k, λ).

        Returns ``mean`` (arm, instance, feature), ``cov`` ``(arm, instance, feature, feature_)``,
        ``shared_mean`` (arm, feature) = β̂_{k0} and ``shared_cov`` ``(arm, feature, feature_)``
        = Φ_k.
        """
        Kn, N, d = self.n_arms, self.n_instances, self.n_features
        mean = np.empty((Kn, N, d))
        cov = np.empty((Kn, N, d, d))
        PR.pair_moments(
            self._pair_slot,
            self._pairs,
            self._empty,
            N,
            self._beta0,
            self._Phi,
            self.sigma2,
            mean,
            cov,
        )
        ds = posterior_dataset(
            mean, cov, coords=self.coords(), policy=type(self).__name__, t=self.t
        )
        ds["shared_mean"] = (("arm", "feature"), self._beta0.copy())
        ds["shared_cov"] = (("arm", "feature", "feature_"), self._Phi.copy())
        return ds

    def hyperparameters(self) -> xr.Dataset:
        """Current Σ̂_k, σ̂²_k, the chosen threshold γ_k and N_eff,k per arm."""
        return hyperparameter_dataset(
            self.Sigma,
            self.sigma2,
            extra={
                "gamma": self.gamma.copy(),
                "n_eff": self.n_eff.copy(),
                "pulls": self.pulls.copy(),
            },
            coords=self.coords(instances=False),
            lam=self.lam,
            a=self.a,
        )

    # ------------------------------------------------------------------ dense read-outs
    def _dense(self, name: str) -> np.ndarray:
        """Field ``name`` of every (arm, instance) as a dense array (K, N, ...); pairs without
        data read their arm's empty record."""
        N, Kn, used = self.n_instances, self.n_arms, self.n_pairs
        src = np.concatenate([self._pairs, self._empty])
        slot = self._pair_slot[:N].T.astype(np.int64)  # (K, N)
        idx = np.where(slot >= 0, slot, used + np.arange(Kn)[:, None])
        return np.ascontiguousarray(PR.views(src[idx], self.n_features)[name])

    @property
    def G(self) -> np.ndarray:
        """Σ x xᵀ of every (arm, instance), (K, N, d, d): a dense copy built from the pairs."""
        return self._dense("G")

    @property
    def b(self) -> np.ndarray:
        """Σ x y of every (arm, instance), (K, N, d): a dense copy."""
        return self._dense("b")

    @property
    def q(self) -> np.ndarray:
        """Σ y² of every (arm, instance), (K, N): a dense copy."""
        return self._dense("q")

    @property
    def n_obs(self) -> np.ndarray:
        """Rows of every (arm, instance), (K, N) int64: a dense copy."""
        return self._dense("n").astype(np.int64)


def _implied_labels(p: Any) -> tuple[Any, Any]:
    """Arm labels and feature names a policy saved before they existed would have now."""
    if p.prior is None:
        return Labels.range(int(p.n_arms), name="arm"), None
    _, _, arms, features = _prior_labels(p.prior, None, int(p.n_features), None, None)
    arms = Labels.range(int(p.n_arms), name="arm") if arms is None else arms
    return _labels_arg(None, arms, "n_arms", "arm", minimum=1), (
        None if features is None else tuple(features)
    )


def _prior_labels(
    prior: Any, n_arms: Any, n_features: Any, arms: Any, features: Any
) -> tuple[Any, Any, Any, Any]:
    """Sizes and labels a policy takes from a fitted prior when they are not given: the arm
    coordinate as the arm ids, the feature coordinate as the feature names (when they are
    strings)."""
    try:
        shape = np.shape(prior.Sigma)
    except AttributeError as exc:
        raise TypeError("prior must provide shared_mean, shared_cov, Sigma and sigma2") from exc
    if len(shape) != 3:
        raise ValueError(f"prior.Sigma must have shape (K, d, d), got {shape}")
    ds = getattr(prior, "dataset", None)
    if arms is None and n_arms is None:
        if ds is not None and "arm" in ds.coords:
            arms = ds["arm"].values.tolist()
        else:
            n_arms = shape[0]
    if features is None and ds is not None and "feature" in ds.coords:
        names = ds["feature"].values.tolist()
        if all(isinstance(f, str) for f in names) and (n_features in (None, len(names))):
            features = names
    if n_features is None:
        n_features = shape[1]
    return n_arms, n_features, arms, features


def _entry(prior: Any, name: str) -> Any:
    """Field ``name`` of per-arm prior entries given as attributes or as a mapping."""
    if isinstance(prior, dict):
        if name not in prior:
            raise TypeError(f"prior must provide {name}")
        return prior[name]
    try:
        return getattr(prior, name)
    except AttributeError:
        raise TypeError(
            "prior must provide shared_mean, shared_cov, Sigma and sigma2 (attributes or keys)"
        ) from None


def _new_arm_entries(
    prior: Any, m: int, d: int, default: tuple[np.ndarray, float]
) -> dict[str, np.ndarray]:
    """The :attr:`EbmPolicy.added_arms` entries of ``m`` new arms, validated: from ``prior``
    (per-arm entries) or, without one, the lam prior and ``default`` (Σ, σ²)."""
    if prior is None:
        Sig, s2 = default
        return {
            "Sigma": np.broadcast_to(Sig, (m, d, d)).copy(),
            "sigma2": np.full(m, s2),
            "shared_mean": np.zeros((m, d)),
            "shared_cov": np.zeros((m, d, d)),
            "prior": np.zeros(m, dtype=bool),
        }
    entries = {
        "Sigma": _entry(prior, "Sigma"),
        "sigma2": _entry(prior, "sigma2"),
        "shared_mean": _entry(prior, "shared_mean"),
        "shared_cov": _entry(prior, "shared_cov"),
        "prior": np.ones(m, dtype=bool),
    }
    return _check_entries(entries, m, d, "prior")


def _check_entries(entries: dict[str, Any], m: int, d: int, name: str) -> dict[str, np.ndarray]:
    """Validated copies of per-arm entries of ``m`` arms (see :attr:`EbmPolicy.added_arms`)."""
    mean = _as_float_array(entries["shared_mean"], f"{name}.shared_mean")
    cov = _as_float_array(entries["shared_cov"], f"{name}.shared_cov")
    s2 = _as_float_array(entries["sigma2"], f"{name}.sigma2")
    has = np.asarray(entries["prior"])
    if has.shape != (m,) or has.dtype != bool:
        raise ValueError(f"{name}.prior must be a boolean array of shape ({m},)")
    if mean.shape != (m, d) or cov.shape != (m, d, d):
        raise ValueError(
            f"{name}.shared_mean and shared_cov must have shapes {(m, d)} and {(m, d, d)}, "
            f"got {mean.shape} and {cov.shape}"
        )
    if not np.all(np.isfinite(mean)):
        raise ValueError(f"{name}.shared_mean must be finite")
    if s2.shape != (m,) or not (np.all(np.isfinite(s2)) and np.all(s2 > 0)):
        raise ValueError(f"{name}.sigma2 must be {m} finite positive values")
    for v in s2:
        check_variance(float(v), f"{name}.sigma2")
    Sig = _bounded_cov(check_covariance(entries["Sigma"], d, f"{name}.Sigma", batch=m), name)
    for i in range(m):
        if has[i]:
            _bounded_cov(cov[i], f"{name}.shared_cov")
            shared_prior_arrays(1.0, d, (mean[i], cov[i]))  # positive definite, or ValueError
        elif np.any(mean[i]) or np.any(cov[i]):
            raise ValueError(f"{name}: an arm without a prior entry holds a shared mean or cov")
    return {
        "Sigma": Sig,
        "sigma2": s2.copy(),
        "shared_mean": mean.copy(),
        "shared_cov": cov.copy(),
        "prior": has.copy(),
    }


def _check_added_arms(added: Any, Kn: int, d: int) -> dict[str, np.ndarray] | None:
    """The constructor's ``added_arms``, validated (None: no arm was added)."""
    if added is None:
        return None
    if not isinstance(added, dict) or set(added) != set(_ADDED):
        raise TypeError(f"added_arms must be a dict with the keys {list(_ADDED)}")
    m = int(np.shape(added["prior"])[0]) if np.ndim(added["prior"]) == 1 else -1
    if not 1 <= m < Kn:
        raise ValueError(f"added_arms must describe between 1 and n_arms − 1 = {Kn - 1} arms")
    return _check_entries(added, m, d, "added_arms")


def _added_shared_priors(added: dict[str, np.ndarray], lam: float, d: int):
    """P0 and h0 of the shared means of added arms (the lam prior where ``prior`` is False)."""
    m = added["sigma2"].shape[0]
    P0, h0 = np.empty((m, d, d)), np.empty((m, d))
    for i in range(m):
        pair = (added["shared_mean"][i], added["shared_cov"][i]) if added["prior"][i] else None
        P0[i], h0[i] = shared_prior_arrays(lam, d, pair)
    return P0, h0


def _from_dense(p: Any) -> dict[str, Any]:
    """The pair-sparse state of a policy saved in the dense layout (checkpoints written before
    it), computed once per restored object: a slot for every (instance, arm) pair with rows
    (instance-major), and each arm's empty record from the saved blocks of one of its
    instances without data (computed from Σ̂ and σ̂² when every instance has data)."""
    state = vars(p)
    if "_dense_conversion" in state:
        return state["_dense_conversion"]
    Kn, N, d = int(p.n_arms), int(p.n_instances), int(p.n_features)
    want = {
        "G": (Kn, N, d, d),
        "b": (Kn, N, d),
        "q": (Kn, N),
        "n_obs": (Kn, N),
        "_Ct": (Kn, N, d, d),
        "_A": (Kn, N, d, d),
    }
    arrays = {}
    for name, shape in want.items():
        a = state.get(name)
        if not isinstance(a, np.ndarray) or a.shape != shape:
            raise ValueError(f"{name}: a dense-layout array of shape {shape} is missing")
        if a.dtype != (np.int64 if name == "n_obs" else np.float64):
            raise ValueError(f"{name} has dtype {a.dtype}")
        arrays[name] = a
    if not (np.all(arrays["n_obs"] >= 0) and np.all(arrays["n_obs"] < 2**53)):
        raise ValueError("n_obs must hold counts")
    Sigma, sigma2 = np.asarray(p.Sigma, dtype=float), np.asarray(p.sigma2, dtype=float)
    if Sigma.shape != (Kn, d, d) or sigma2.shape != (Kn,):
        raise ValueError("Sigma and sigma2 do not match the arms")
    has = arrays["n_obs"].T > 0  # (N, K)
    jj, kk = np.nonzero(has)  # instance-major
    width = int(PR.record_width(d))
    pairs = np.zeros((jj.size, width))
    rec = PR.views(pairs, d)
    for name, field in (("_Ct", "Ct"), ("_A", "A"), ("b", "b"), ("G", "G")):
        rec[field][...] = arrays[name][kk, jj]
    pairs[:, PR.offsets(d)["q"]] = arrays["q"][kk, jj]
    pairs[:, PR.offsets(d)["n"]] = arrays["n_obs"][kk, jj]
    slot = np.full((N, Kn), -1, dtype=np.int32)
    slot[jj, kk] = np.arange(jj.size, dtype=np.int32)
    empty = np.zeros((Kn, width))
    erec = PR.views(empty, d)
    for k in range(Kn):
        free = np.flatnonzero(~has[:, k])
        if free.size:
            erec["Ct"][k] = arrays["_Ct"][k, free[0]]
            erec["A"][k] = arrays["_A"][k, free[0]]
        elif np.all(np.isfinite(Sigma[k])) and sigma2[k] > 0:
            PR.empty_record(Sigma[k], sigma2[k], empty[k])
    out = {
        "_pair_slot": slot,
        "_pairs": pairs,
        "_empty": empty,
    }
    state["_dense_conversion"] = out
    return out


def _bounded_cov(S: np.ndarray, name: str) -> np.ndarray:
    """Refuse a covariance with an entry beyond ``MAX_VARIANCE`` (products with the Gram
    matrices of accepted contexts would overflow)."""
    if S.size and not np.max(np.abs(S)) <= MAX_VARIANCE:
        raise ValueError(f"{name} must have entries of magnitude <= {MAX_VARIANCE:g}")
    return S


class EbmUCB(EbmPolicy):
    """ebmUCB (Algorithm 1): index μ̂_{k,j} + α_t τ_{k,j}. See :class:`EbmPolicy` for parameters."""

    exploration = "ucb"


class EbmTS(EbmPolicy):
    """ebmTS (Algorithm 1): Thompson sampling from N(β̂_{k,j}, α_t² C_{k,j}).

    See :class:`EbmPolicy` for parameters. The draw is made on the scalar xᵀβ̆, which has the
    same distribution as projecting a full draw of β̆ (docs/decisions/ebm.md A10): K standard
    normals per decision from the policy's Thompson stream.
    """

    exploration = "ts"
