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
from hierbandit._validation import (
    MAX_VARIANCE,
    check_choice,
    check_covariance,
    check_features,
    check_positive_int,
    check_regularisation,
    check_scalar,
    check_variance,
)
from hierbandit.ebm import _rows
from hierbandit.ebm.base import Policy, _labels_arg, hyperparameter_dataset, posterior_dataset
from hierbandit.stats import kernels as K
from hierbandit.stats.empirical_bayes import EBOptions
from hierbandit.stats.hierarchical import shared_prior_arrays

__all__ = ["EbmPolicy", "EbmTS", "EbmUCB"]


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
        paper; docs/decisions/ebm.md S1). When ``eb_options`` freezes both hyperparameters
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
        Recompute an arm from its sufficient statistics after this many consecutive
        incremental updates (and at least N / ``hyper_update_budget`` of them, so that the
        O(N) recomputation keeps the amortised cost of a step flat in N), discarding
        accumulated rounding drift.
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
    tie_break : {"random", "first"}
    rng : seed or numpy Generator
        Streams: tie-breaks, Thompson draws, cross-validation splits.
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
    }
    #: derived from ``eb_options`` since, ignored in older files
    _checkpoint_dropped: ClassVar[frozenset[str]] = frozenset({"_eb_args"})

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
        prior: Any = None,
        prior_mode: str = "init",
        instances: Any = None,
        arms: Any = None,
        features: Any = None,
        grow: bool | None = None,
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
        if eb_options is None:
            eb_options = EBOptions()
        elif not isinstance(eb_options, EBOptions):
            raise TypeError("eb_options must be an EBOptions instance")
        self.eb_options = eb_options
        self.hyper_method = check_choice(hyper_method, ("eb", "ml"), "hyper_method")
        self.ml_steps = check_positive_int(ml_steps, "ml_steps")
        self.Sigma_init = Sigma_init
        self.sigma2_init = sigma2_init
        Sigma0 = (
            np.broadcast_to(np.eye(d), (Kn, d, d)).copy()
            if Sigma_init is None
            else _bounded_cov(check_covariance(Sigma_init, d, "Sigma_init", batch=Kn), "Sigma_init")
        )
        try:
            s2 = np.asarray(sigma2_init, dtype=float) if not isinstance(sigma2_init, str) else None
        except (TypeError, ValueError, OverflowError):
            s2 = None
        if s2 is None or s2.ndim > 1 or (s2.ndim == 1 and s2.shape != (Kn,)):
            raise ValueError(f"sigma2_init must be a positive number or an array of shape ({Kn},)")
        s2 = np.broadcast_to(s2, (Kn,)).copy()
        if not (np.all(np.isfinite(s2)) and np.all(s2 > 0)):
            raise ValueError("sigma2_init must be finite and > 0")
        for v in s2:
            check_variance(float(v), "sigma2_init")
        self.prior = prior
        self.prior_mode = check_choice(prior_mode, ("init", "fixed"), "prior_mode")
        self._P0 = np.broadcast_to(self.lam * np.eye(d), (Kn, d, d)).copy()
        self._h0 = np.zeros((Kn, d))
        if prior is not None:
            if Sigma_init is not None or not (np.isscalar(sigma2_init) and sigma2_init == 1.0):
                raise ValueError("prior: pass either a prior or Sigma_init/sigma2_init, not both")
            Sigma0, s2 = self._read_prior(prior)
        self._ts_rng, self._cv_rng = self._streams[1], self._streams[2]
        self._literal_44 = self.mean_formula == "4.4-literal"
        self._need_uniforms = eb_options.threshold == "cv" and eb_options.estimate_Sigma
        # with both hyperparameters frozen every update takes the O(d²) rank-one path
        self._estimates_any = (eb_options.estimate_Sigma or eb_options.estimate_sigma2) and not (
            prior is not None and self.prior_mode == "fixed"
        )
        # sufficient statistics per (arm, instance)
        self.G = np.zeros((Kn, N, d, d))
        self.b = np.zeros((Kn, N, d))
        self.q = np.zeros((Kn, N))
        self.n_obs = np.zeros((Kn, N), dtype=np.int64)
        # hyperparameters
        self.Sigma = Sigma0
        self.sigma2 = s2
        self.gamma = np.full(Kn, np.nan)
        self.n_eff = np.zeros(Kn, dtype=np.int64)
        # posterior state per arm
        self._Ct = np.empty((Kn, N, d, d))
        self._A = np.empty((Kn, N, d, d))
        self._P = np.empty((Kn, d, d))
        self._r = np.empty((Kn, d))
        self._Phi = np.empty((Kn, d, d))
        self._beta0 = np.empty((Kn, d))
        self.pulls = np.zeros(Kn, dtype=np.int64)
        self.arrivals = np.zeros(N, dtype=np.int64)
        self._rank_one_count = np.zeros(Kn, dtype=np.int64)
        #: pulls of each arm since its last re-estimation (the default schedule)
        self._since_estimate = np.zeros(Kn, dtype=np.int64)
        self._mu = np.zeros(Kn)  # scratch buffers of _select
        self._tau = np.zeros(Kn)
        for k in range(Kn):
            self._recompute_arm(k)

    # ------------------------------------------------------------------ internals
    def _read_prior(self, prior: Any) -> tuple[np.ndarray, np.ndarray]:
        """Validate a fitted prior and set the shared-mean prior of every arm from it."""
        Kn, d = self.n_arms, self.n_features
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
            self._P0[k], self._h0[k] = shared_prior_arrays(self.lam, d, (m[k], S[k]))
        return Sig, s2.copy()

    def _recompute_arm(self, k: int) -> None:
        """Posterior of arm k from its sufficient statistics with the current hyperparameters."""
        n = self.n_instances
        K.arm_posterior(
            self.G[k, :n],
            self.b[k, :n],
            self.Sigma[k],
            self.sigma2[k],
            self._P0[k],
            self._h0[k],
            self._Ct[k, :n],
            self._A[k, :n],
            self._P[k],
            self._r[k],
            self._Phi[k],
            self._beta0[k],
        )
        self._rank_one_count[k] = 0

    def _reestimate_arm(self, k: int) -> None:
        """Empirical-Bayes step of docs/maths/ebm.md §7.4 (or §7.5) for arm k: Σ̂, σ̂², posterior."""
        n = self.n_instances
        if self.hyper_method == "ml":
            _rows.reestimate_ml(k, n, self._row_state(), self._ml_args)
            self._rank_one_count[k] = 0
            self._since_estimate[k] = 0
            return
        sigma2, gamma, n_eff, _ = K.reestimate_arm(
            self.G[k, :n],
            self.b[k, :n],
            self.q[k, :n],
            self.n_obs[k, :n],
            self._P0[k],
            self._h0[k],
            self.sigma2[k],
            self.Sigma[k].copy(),
            *self._eb_args[:9],
            self._cv_rng,
            int(self.eb_options.cv_splits) if self._need_uniforms else 0,
            *self._eb_args[9:],
            self.Sigma[k],
            self._Ct[k, :n],
            self._A[k, :n],
            self._P[k],
            self._r[k],
            self._Phi[k],
            self._beta0[k],
        )
        self.sigma2[k] = sigma2
        self.gamma[k] = gamma
        self.n_eff[k] = n_eff
        self._rank_one_count[k] = 0
        self._since_estimate[k] = 0

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
        if j < 0:
            self._score_requests(x[None, :], np.array([-1]), mu[None, :], tau[None, :])
            return
        K.score_arms(
            x,
            j,
            self._Ct,
            self._A,
            self.b,
            self._beta0,
            self._Phi,
            self.sigma2,
            self._literal_44,
            mu,
            tau,
        )

    def _scores(self, j: int, x: np.ndarray) -> np.ndarray:
        self._moments(j, x, self._mu, self._tau)
        alpha = self._alpha(j)
        if self.exploration == "ucb":
            return self._mu + alpha * self._tau
        return self._mu + alpha * self._tau * self._ts_rng.standard_normal(self.n_arms)

    def _select(self, j: int, x: np.ndarray) -> int:
        forced = self._forced_arm(j)
        if forced >= 0:
            return forced
        return self._argmax(self._scores(j, x))

    def _update(self, j: int, x: np.ndarray, k: int, y: float) -> None:
        if j == self.n_instances:  # a new instance (the caller made room)
            _rows.register_instance(j, self.Sigma, self.sigma2, self._Ct, self._A)
            self.n_instances += 1
        self.t += 1
        self.arrivals[j] += 1
        self.pulls[k] += 1
        self._since_estimate[k] += 1
        self.q[k, j] += y * y
        self.n_obs[k, j] += 1
        if self._estimates_any and _rows.reestimate_due(
            self.pulls[k],
            self._since_estimate[k],
            self._every,
            self.hyper_update_budget,
            self.n_instances,
        ):
            G, b = self.G[k, j], self.b[k, j]
            G += np.multiply.outer(x, x)
            b += x * y
            self._reestimate_arm(k)
        else:
            # rank-one, or instance j's blocks refreshed where that is ill-conditioned (a row
            # large against what the arm knows): O(d³) at most, whatever the number of users
            K.observe_row(
                x,
                y,
                self.G[k, j],
                self.b[k, j],
                self._Ct[k, j],
                self._A[k, j],
                self._P[k],
                self._r[k],
                self._Phi[k],
                self._beta0[k],
                self.Sigma[k],
                self.sigma2[k],
                self._P0[k],
            )
            self._rank_one_count[k] += 1
            if _rows.recompute_due(
                self._rank_one_count[k],
                self.recompute_every,
                self.hyper_update_budget,
                self.n_instances,
            ):
                self._recompute_arm(k)

    @property
    def _eb_args(self) -> tuple:
        """The options of :func:`kernels.reestimate_arm` (the CV generator and splits go after
        the ninth)."""
        return self.eb_options.reestimate_args

    @property
    def _ml_args(self) -> tuple:
        """The settings of :func:`_rows.reestimate_ml` (whether ``hyper_method`` is "ml", then
        the step's options), as Python scalars."""
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
        """μ̂ and τ of every arm for requests (``J``, ``X``) into ``MU``, ``TAU`` (B, K); the
        empty-instance blocks are computed only when some request is a new instance."""
        Ct0, A0 = self._empty_blocks() if np.any(J < 0) else (self._Ct[:, 0], self._A[:, 0])
        K.score_requests(
            X,
            J,
            self._Ct,
            self._A,
            self.b,
            self._beta0,
            self._Phi,
            self.sigma2,
            Ct0,
            A0,
            self._literal_44,
            MU,
            TAU,
        )

    def _empty_blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """C̃ and A of an instance without data, per arm (:func:`~hierbandit.stats.kernels.empty_blocks`)."""
        Kn, d = self.n_arms, self.n_features
        Ct0, A0 = np.empty((Kn, d, d)), np.empty((Kn, d, d))
        for k in range(Kn):
            K.empty_blocks(self.Sigma[k], self.sigma2[k], Ct0[k], A0[k])
        return Ct0, A0

    # ------------------------------------------------------------------ batches
    def _select_batch(self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Every request scored in one kernel call; the random draws are those of the loop of
        :meth:`_select` (K Thompson normals per request that is not forced, a tie draw only on
        a tie), so the arms are the loop's."""
        B, Kn = X.shape[0], self.n_arms
        out = np.empty(B, dtype=np.int64)
        forced = self._forced_arms(J)
        if mask is not None:
            # a forced arm the request may not receive: the request is scored instead
            rows = np.flatnonzero(forced >= 0)
            forced[rows[~mask[rows, forced[rows]]]] = -1
        free = np.flatnonzero(forced < 0)
        out[forced >= 0] = forced[forced >= 0]
        if free.size == 0:
            return out
        MU, S = self._score_moments(J[free], X[free])
        if self.exploration == "ucb":
            scores = MU + S
        else:
            scores = MU + S * self._ts_rng.standard_normal((free.size, Kn))
        if mask is not None:
            scores[~mask[free]] = -np.inf
        out[free] = self._argmax_rows(scores)
        return out

    def _score_moments(self, J: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Centres μ̂ and scales α·τ of every arm's score for requests (``J``, ``X``): the score
        is μ̂ + α·τ (UCB) or μ̂ + α·τ·Z with Z standard normal (Thompson sampling)."""
        B, Kn = X.shape[0], self.n_arms
        MU = np.empty((B, Kn))
        TAU = np.empty((B, Kn))
        self._score_requests(X, J, MU, TAU)
        if self.alpha_clock == "global":
            alpha = np.full(B, self._alpha(0))
        else:
            alpha = np.array([self._alpha(int(j)) for j in J])
        return MU, alpha[:, None] * TAU

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
        self.n_instances = _rows.apply_rows(
            J, X, Karr, Y, self.n_instances, self._row_state(), self._row_options(), self._cv_rng
        )
        self.t += int(J.shape[0])

    def _row_state(self) -> tuple:
        """The arrays a row of feedback changes or reads, for :func:`_rows.update_row`."""
        return (
            self.G,
            self.b,
            self.q,
            self.n_obs,
            self.Sigma,
            self.sigma2,
            self.gamma,
            self.n_eff,
            self._Ct,
            self._A,
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

    def _row_options(self) -> tuple:
        """The settings of :func:`_rows.update_row`, as Python scalars (one compiled
        signature)."""
        return (
            bool(self._estimates_any),
            bool(self._need_uniforms),
            self._every,
            float(self.hyper_update_budget),
            int(self.recompute_every),
            int(self.eb_options.cv_splits),
            tuple(self._eb_args),
            self._ml_args,
        )

    def _grow(self, n: int) -> None:
        """Room for ``n`` instances: the per-instance arrays grow by doubling, new rows zero."""
        cap = self.arrivals.shape[0]
        if n <= cap:
            return
        new_cap = max(n, 2 * cap, 16)
        for name, axis in _INSTANCE_AXIS.items():
            old = getattr(self, name)
            shape = list(old.shape)
            shape[axis] = new_cap
            arr = np.zeros(shape, dtype=old.dtype)
            arr[(slice(None),) * axis + (slice(0, cap),)] = old
            setattr(self, name, arr)

    def _trim(self) -> None:
        super()._trim()
        n = self.n_instances
        for name, axis in _INSTANCE_AXIS.items():
            arr = getattr(self, name)
            if arr.shape[axis] != n:
                setattr(self, name, arr[(slice(None),) * axis + (slice(0, n),)].copy())

    # ------------------------------------------------------------------ public
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
        K.all_moments(
            self._Ct[:, :N],
            self._A[:, :N],
            self.b[:, :N],
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


#: the arrays with an instance axis (the axis), which grow as instances arrive
_INSTANCE_AXIS = {"G": 1, "b": 1, "q": 1, "n_obs": 1, "_Ct": 1, "_A": 1, "arrivals": 0}


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
