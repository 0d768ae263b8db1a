"""Per-instance linear contextual bandits: LinUCB, LinTS and OLSBandit.

These are the single-task baselines of the ebm paper (§7; docs/decisions/ebm.md, "Baselines"):
each runs ``n_instances × n_arms`` independent linear models, one per (instance, arm), and never
shares information across instances.

* :class:`LinUCB` — Li, Chu, Langford & Schapire (2010), disjoint model, Algorithm 1.
* :class:`LinTS` — Agrawal & Goyal (2013), Thompson sampling with Gaussian priors, Algorithm 1.
* :class:`OLSBandit` — Goldenshluger & Zeevi (2013) in the K-arm form of Bastani & Bayati (2020,
  §2 and Algorithm 1 with OLS estimators), as docs/decisions/ebm.md ("Baselines") states.

:func:`forced_sampling_arm` and :func:`forced_sampling_schedule` give the forced-sampling sets
T_i of the last two papers; :class:`~hierbandit.ebm.rmbandit.RMBandit` uses them too.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import xarray as xr
from numba import njit

from hierbandit._labels import copy_labels as _copy_labels
from hierbandit._validation import (
    MAX_STATE_ENTRIES,
    check_bool,
    check_choice,
    check_features,
    check_index,
    check_positive_int,
    check_regularisation,
    check_scalar,
    check_scale,
)
from hierbandit.ebm._pairs import argmax_first
from hierbandit.ebm.base import Policy, hyperparameter_dataset, posterior_dataset
from hierbandit.stats.ridge import OLSStats, RidgeStats
from hierbandit.stats.threads import over_threads_now, serving_threads

__all__ = [
    "ForcedSamplingBandit",
    "LinTS",
    "LinUCB",
    "OLSBandit",
    "forced_sampling_arm",
    "forced_sampling_schedule",
]

_JIT = {"cache": True, "nogil": True}
#: Z and mask of :func:`_choose_requests` when there is none (LinUCB; all arms)
_NO_ROWS = np.zeros((0, 0))
_NO_MASK = np.zeros((0, 0), dtype=np.bool_)
#: fewest requests worth a thread of their own in a batch of decisions
_THREAD_CHUNK = 2048


# ---------------------------------------------------------------------- forced sampling


def _forced_arm(tau: int, n_arms: int, q: int, warmup_rounds: int) -> int:
    """Unchecked :func:`forced_sampling_arm` (0-based arm, −1 when ``tau`` is not forced)."""
    if tau <= warmup_rounds:
        return (tau - 1) % n_arms
    block = n_arms * q
    s = (tau - 1) // block
    if (s + 1) & s:  # forced blocks start at Kq·s + 1 with s + 1 a power of two
        return -1
    return ((tau - 1) - s * block) // q


def forced_sampling_arm(tau: int, n_arms: int, q: int, *, warmup_rounds: int = 0) -> int:
    """The arm forced at round ``tau`` of the forced-sampling schedule, or −1.

    The forced-sampling sets of Goldenshluger & Zeevi (2013) in the K-arm form of Bastani &
    Bayati (2020, §2.3), with arms numbered from 0 here,

        T_i = {(2ⁿ − 1)·K·q + m : n = 0, 1, 2, …,  m ∈ {q·i + 1, …, q·(i + 1)}},

    so block n covers rounds (2ⁿ − 1)Kq + 1 … 2ⁿKq and inside it the arms take q consecutive
    rounds each in order. With ``warmup_rounds = W > 0`` rounds 1 … W are a round-robin warm-up
    (arm (τ − 1) mod K) replacing the scheduled forced rounds there (the K·d warm-up of the
    reference implementation of OLS Bandit; docs/decisions/ebm.md, "Baselines").

    Parameters
    ----------
    tau : int
        Round (1-based) on the clock the schedule runs on.
    n_arms : int
        Number of arms K.
    q : int
        Forced rounds per arm and block.
    warmup_rounds : int, default 0
        Length of the round-robin warm-up.

    Returns
    -------
    int
        The forced arm in ``[0, n_arms)``, or −1 when ``tau`` is not a forced round.

    Examples
    --------
    >>> [forced_sampling_arm(t, 2, 1) for t in range(1, 9)]
    [0, 1, 0, 1, -1, -1, 0, 1]
    """
    tau = check_positive_int(tau, "tau")
    n_arms = check_positive_int(n_arms, "n_arms")
    q = check_positive_int(q, "q")
    warmup_rounds = check_positive_int(warmup_rounds, "warmup_rounds", minimum=0)
    return _forced_arm(tau, n_arms, q, warmup_rounds)


def forced_sampling_schedule(
    horizon: int, n_arms: int, q: int, *, warmup_rounds: int = 0
) -> np.ndarray:
    """:func:`forced_sampling_arm` for rounds 1 … ``horizon``, as an int array (−1 = free)."""
    horizon = check_positive_int(horizon, "horizon", minimum=0)
    n_arms = check_positive_int(n_arms, "n_arms")
    q = check_positive_int(q, "q")
    warmup_rounds = check_positive_int(warmup_rounds, "warmup_rounds", minimum=0)
    return np.array(
        [_forced_arm(t, n_arms, q, warmup_rounds) for t in range(1, horizon + 1)], dtype=np.int64
    )


# ---------------------------------------------------------------------- kernels


@njit(**_JIT)
def _index_scores(Ainv, theta, base, x, width, z, out):
    """out[k] = x·θ_u + width·z[k]·sqrt(xᵀA_u⁻¹x) for units u = base + k.

    LinUCB passes z = 1 (the index of Li et al. 2010, eq. 5 / Algorithm 1 line 9); LinTS passes
    standard normal draws (the scalar Thompson sample).
    """
    K = out.shape[0]
    d = x.shape[0]
    for k in range(K):
        u = base + k
        m = 0.0
        v = 0.0
        for i in range(d):
            m += x[i] * theta[u, i]
            t = 0.0
            for l in range(d):
                t += Ainv[u, i, l] * x[l]
            v += x[i] * t
        out[k] = m + width * z[k] * math.sqrt(v if v > 0.0 else 0.0)


@njit(**_JIT)
def _index_requests(Ainv, theta, K, J, X, width, Z, out):
    """:func:`_index_scores` of request i (instance ``J[i]``, context ``X[i]``, draws
    ``Z[i]``) into ``out[i]``, for every request."""
    for i in range(J.shape[0]):
        _index_scores(Ainv, theta, J[i] * K, X[i], width, Z[i], out[i])


@njit(**_JIT)
def _choose_requests(lo, hi, Ainv, theta, K, J, X, width, Z, ones, mask, out, tie, scores):
    """Decisions of requests ``lo`` ≤ i < ``hi``: :func:`_index_scores` (z = ``Z[i]``, or
    ``ones`` when ``Z`` has no rows) into ``scores[i]``, −inf outside ``mask[i]`` (when it has
    rows), the first maximum into ``out[i]`` and whether it is tied into ``tie[i]``. Writes
    only rows lo … hi − 1 (slices run on threads)."""
    is_ts = Z.shape[0] > 0
    has_mask = mask.shape[0] > 0
    for i in range(lo, hi):
        row = scores[i]
        _index_scores(Ainv, theta, J[i] * K, X[i], width, Z[i] if is_ts else ones, row)
        if has_mask:
            for k in range(K):
                if not mask[i, k]:
                    row[k] = -np.inf
        out[i], tie[i] = argmax_first(row)


@njit(**_JIT)
def _filtered_scores(coef_forced, coef_all, N, j, x, h, out):
    """OLSBandit's non-forced rule (Bastani & Bayati 2020, Algorithm 1): −inf outside K̂.

    K̂ = {k : x·β̂_F,k ≥ max_l x·β̂_F,l − h/2}; inside K̂ the score is x·β̂_A,k. Units are
    ``k * N + j``.
    """
    K = out.shape[0]
    d = x.shape[0]
    f = np.empty(K)
    best = -np.inf
    for k in range(K):
        u = k * N + j
        s = 0.0
        for i in range(d):
            s += x[i] * coef_forced[u, i]
        f[k] = s
        if s > best:
            best = s
    for k in range(K):
        if f[k] >= best - 0.5 * h:
            u = k * N + j
            s = 0.0
            for i in range(d):
                s += x[i] * coef_all[u, i]
            out[k] = s
        else:
            out[k] = -np.inf


# ---------------------------------------------------------------------- LinUCB


def _sizes(
    n_instances: Any, n_arms: Any, n_features: Any, instances: Any, arms: Any
) -> tuple[Any, Any, int]:
    """The sizes of a baseline's constructor: ``n_instances``/``n_arms`` may be left out when
    the labels are given (a baseline keeps a fixed set of instances, so one or the other)."""
    if n_features is None:
        raise TypeError("n_features is required")
    if n_instances is None and instances is None:
        raise ValueError(
            "a baseline keeps a fixed set of instances: give n_instances or instances (EbmTS "
            "and EbmUCB accept new instance ids)"
        )
    if n_arms is None and arms is None:
        raise TypeError("n_arms or arms is required")
    return n_instances, n_arms, n_features


def _labels(instances: Any, arms: Any, features: Any, tie_break: str, rng: Any) -> dict[str, Any]:
    """The keyword arguments of :class:`~hierbandit.ebm.base.Policy` every baseline passes on."""
    return {
        "instances": instances,
        "arms": arms,
        "features": features,
        "grow": False,
        "tie_break": tie_break,
        "rng": rng,
    }


class _RidgeBandit(Policy):
    """Shared machinery of LinUCB and LinTS: one ridge regression per (instance, arm).

    Unit ``j * n_arms + k`` of :attr:`stats` holds (instance j, arm k).
    """

    def _init_stats(self, ridge: float, recompute_every: int | None) -> None:
        self.stats = RidgeStats(
            self.n_instances * self.n_arms,
            self.n_features,
            reg=ridge,
            recompute_every=recompute_every,
        )
        self._ones = np.ones(self.n_arms)

    def _update(self, j: int, x: np.ndarray, k: int, y: float) -> None:
        self.stats._add(j * self.n_arms + k, x, y)
        self.t += 1

    def _update_batch(self, J: np.ndarray, X: np.ndarray, Karr: np.ndarray, Y: np.ndarray) -> None:
        """All rows in one compiled call, the same as the loop of :meth:`_update`."""
        self.stats._add_rows(J * self.n_arms + Karr, X, Y)
        self.t += int(J.shape[0])

    def _batch_scores(self, J: np.ndarray, X: np.ndarray, width: float, Z: np.ndarray):
        out = np.empty((J.shape[0], self.n_arms))
        _index_requests(self.stats.Ainv, self.stats.theta, self.n_arms, J, X, width, Z, out)
        return out

    def _choice_probabilities(
        self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None, arms: np.ndarray | None
    ) -> np.ndarray:
        """Scores x·θ̂ + w·Z·sqrt(xᵀA⁻¹x): Z = 1 for LinUCB (w = α), standard normal for LinTS
        (w = v_t)."""
        width, random = self._score_width()
        ones = np.broadcast_to(self._ones, (J.shape[0], self.n_arms))
        MU = self._batch_scores(J, X, 0.0, ones)
        S = np.maximum(self._batch_scores(J, X, 1.0, ones) - MU, 0.0) * width
        return self._index_probabilities(MU, S, mask, arms, random)

    def _score_width(self) -> tuple[float, bool]:
        """The width w of the score and whether Z is random (Thompson) or 1 (UCB)."""
        raise NotImplementedError

    def _draws(self, n: int) -> np.ndarray:
        """The Z of ``n`` requests (K per request): none for an index without draws."""
        return _NO_ROWS

    def _choose(
        self, J: np.ndarray, X: np.ndarray, width: float, mask: np.ndarray | None
    ) -> np.ndarray:
        """The loop's arms for every request in one compiled pass (on two threads for large
        batches): the index of :func:`_index_scores` (LinTS: K normals per request from its
        stream), arms outside ``mask`` excluded,
        the first maximum, and a tie draw from the tie-break stream per tied request, in
        order, as :meth:`Policy._argmax` would."""
        n, Kn = J.shape[0], self.n_arms
        X = np.ascontiguousarray(X)
        mask = _NO_MASK if mask is None else np.ascontiguousarray(mask)
        out = np.empty(n, dtype=np.int64)
        tie = np.empty(n, dtype=np.bool_)
        scores = np.empty((n, Kn))
        st = self.stats
        Z = self._draws(n)
        args = (st.Ainv, st.theta, Kn, J, X, width, Z, self._ones, mask, out, tie, scores)
        over_threads_now(
            lambda lo, hi: _choose_requests(lo, hi, *args),
            n,
            serving_threads(),
            min_chunk=_THREAD_CHUNK,
        )
        self._break_ties(out, tie, scores)
        return out

    def add_arms(self, arms: Any) -> None:
        """Add arms to the running policy: each new (instance, arm) model starts from the
        prior, A = ridge·I and θ = 0, as an arm that was there from the start and never pulled
        (tests/ebm/test_add_arms.py); :meth:`select` and :meth:`select_batch` consider them
        from the next call, and checkpoints keep them.

        The statistics are laid out again for the new number of arms, O(N K d²) once.

        Parameters
        ----------
        arms : sequence of int or str
            Ids of the new arms, of the kind the policy's arm ids are (``n_arms``,
            ``n_arms + 1``, … keep integer-coded arms integer-coded), none already used.

        Raises
        ------
        TypeError, ValueError
            For ids that are not new or not of the policy's kind, or a size beyond
            :data:`~hierbandit._validation.MAX_STATE_ENTRIES`, before anything changes.
        """
        if isinstance(arms, str | bytes) or not hasattr(arms, "__iter__"):
            raise TypeError(f"arms must be a sequence of arm ids, got {type(arms).__name__}")
        ids = list(arms)
        if not ids:
            raise ValueError("arms must name at least one new arm")
        with self._lock:
            labels = _copy_labels(self.arms)
            labels.extend(ids)  # refuses ids already used or of the other kind
            N, Kn, d = self.n_instances, self.n_arms, self.n_features
            Kw = Kn + len(ids)
            cells = self._state_entries(N, Kw, d)
            if cells > MAX_STATE_ENTRIES:
                raise ValueError(
                    f"{self._state_entries_text} = {cells:.3g} would exceed "
                    f"{MAX_STATE_ENTRIES:.0e} with the new arms"
                )
            old = self.stats
            st = RidgeStats(N * Kw, d, reg=old.reg, recompute_every=old.recompute_every)
            for name in ("G", "b", "q", "n", "Ainv", "theta"):
                a = getattr(old, name)
                getattr(st, name).reshape(N, Kw, *a.shape[1:])[:, :Kn] = a.reshape(
                    N, Kn, *a.shape[1:]
                )
            self.stats, self._ones = st, np.ones(Kw)
            self.arms, self.n_arms = labels, Kw

    def _mean_cov(self, scale: float) -> tuple[np.ndarray, np.ndarray]:
        N, K, d = self.n_instances, self.n_arms, self.n_features
        mean = self.stats.theta.reshape(N, K, d).transpose(1, 0, 2)
        cov = scale * self.stats.Ainv.reshape(N, K, d, d).transpose(1, 0, 2, 3)
        return mean, cov


class LinUCB(_RidgeBandit):
    """LinUCB with disjoint linear models (Li et al. 2010, Algorithm 1), one per (instance, arm).

    For instance j and context x the index of arm k is

        p_{j,k} = x·θ̂_{j,k} + α·sqrt(xᵀ A_{j,k}⁻¹ x),   A_{j,k} = ridge·I + Σ x xᵀ,
        θ̂_{j,k} = A_{j,k}⁻¹ Σ x y,

    and the arm with the largest index is played. Statistics are kept by
    :class:`~hierbandit.stats.ridge.RidgeStats` with O(d²) Sherman–Morrison updates.

    Parameters
    ----------
    n_instances, n_arms, n_features
        Number of instances, arms and context dimension.
    alpha : float, default 1.0
        Exploration width α (the ebm paper's experiments use α = 1; docs/decisions/ebm.md).
    ridge : float, default 1.0
        Ridge regularisation (the identity of A = I + Σ x xᵀ), in [1e-6, 1e6]
        (:data:`~hierbandit._validation.MIN_REG`, ``MAX_REG``).
    recompute_every : int or None, default 10_000
        Exact recomputation period of each (instance, arm)'s inverse.
    instances, arms, features
        Ids of the instances and arms (int or str) and names of the features, in place of (or
        beside) ``n_instances`` and ``n_arms``; ``select`` then returns arm ids and the
        read-outs carry them as coordinates (:class:`~hierbandit.ebm.base.Policy`). The set of
        instances is fixed.
    tie_break, rng
        See :class:`~hierbandit.ebm.base.Policy`.

    Notes
    -----
    :meth:`posterior` reports mean θ̂ and covariance A⁻¹: the Gaussian posterior under a
    N(0, I/ridge) prior and unit noise variance. The index is the posterior mean plus α
    posterior standard deviations of x·θ; no noise variance is estimated.
    """

    def __init__(
        self,
        n_instances: int | None = None,
        n_arms: int | None = None,
        n_features: int | None = None,
        alpha: float = 1.0,
        ridge: float = 1.0,
        *,
        recompute_every: int | None = 10_000,
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
        self.alpha = check_scalar(alpha, "alpha", low=0.0)
        self.ridge = check_regularisation(ridge, "ridge")
        self.recompute_every = recompute_every
        self._init_stats(self.ridge, recompute_every)

    def index(self, instance: int, context: Any) -> np.ndarray:
        """The LinUCB index of every arm for ``instance`` and ``context``, shape (n_arms,)."""
        j = check_index(instance, self.n_instances, "instance")
        x = check_features(context, self.n_features, "context")
        out = np.empty(self.n_arms)
        s = self.stats
        _index_scores(s.Ainv, s.theta, j * self.n_arms, x, self.alpha, self._ones, out)
        return out

    def _select(self, j: int, x: np.ndarray) -> int:
        out = np.empty(self.n_arms)
        s = self.stats
        _index_scores(s.Ainv, s.theta, j * self.n_arms, x, self.alpha, self._ones, out)
        return self._argmax(out)

    def _select_batch(self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Every request's index in one compiled call; the loop's arms."""
        return self._choose(J, X, self.alpha, mask)

    def _score_width(self) -> tuple[float, bool]:
        return self.alpha, False

    def posterior(self) -> xr.Dataset:
        """Mean θ̂ and covariance A⁻¹ (unit noise scale) of every (arm, instance)."""
        mean, cov = self._mean_cov(1.0)
        return posterior_dataset(mean, cov, coords=self.coords(), policy="LinUCB", noise_scale=1.0)

    def hyperparameters(self) -> xr.Dataset:
        """Prior covariance I/ridge per arm, unit noise variance, and α."""
        K, d = self.n_arms, self.n_features
        Sigma = np.broadcast_to(np.eye(d) / self.ridge, (K, d, d))
        return hyperparameter_dataset(
            Sigma,
            np.ones(K),
            extra={"alpha": ((), self.alpha), "ridge": ((), self.ridge)},
            coords=self.coords(instances=False),
            policy="LinUCB",
        )


# ---------------------------------------------------------------------- LinTS


class LinTS(_RidgeBandit):
    """Linear Thompson sampling (Agrawal & Goyal 2013, Algorithm 1), one model per (instance, arm).

    With B_{j,k} = ridge·I + Σ x xᵀ and θ̂_{j,k} = B⁻¹ Σ x y, Algorithm 1 draws
    θ̃_{j,k} ~ N(θ̂_{j,k}, v² B_{j,k}⁻¹) and plays argmax_k x·θ̃_{j,k}. Only the scalars x·θ̃_{j,k}
    enter the decision, and since the draws are independent across arms these are drawn
    directly,

        x·θ̃_{j,k} = x·θ̂_{j,k} + v_t · sqrt(xᵀ B_{j,k}⁻¹ x) · z_k,   z_k ~ N(0, 1) i.i.d.,

    which has exactly the same distribution of decisions as sampling the d-dimensional θ̃ and
    needs no Cholesky factor (O(K d²) per round).

    Parameters
    ----------
    n_instances, n_arms, n_features
        Number of instances, arms and context dimension.
    v : float, default 1.0
        Posterior scale (Agrawal & Goyal's v; docs/decisions/ebm.md takes v = σ = 1), in
        [0, 1e6].
    ridge : float, default 1.0
        Prior precision (B = ridge·I + Σ x xᵀ; Agrawal & Goyal use the identity), in
        [1e-6, 1e6].
    v_schedule : {"constant", "sqrt_log_t"}, default "constant"
        ``"constant"`` uses v_t = v. ``"sqrt_log_t"`` uses v_t = v·sqrt(log t) with the global
        round t = (updates so far) + 1, the a·sqrt(log t) inflation of the ebm paper's ebmTS;
        note that it is 0 (a greedy choice) in round 1.
    recompute_every : int or None, default 10_000
        Exact recomputation period of each (instance, arm)'s inverse.
    instances, arms, features
        Ids of the instances and arms (int or str) and names of the features, in place of (or
        beside) ``n_instances`` and ``n_arms``; ``select`` then returns arm ids and the
        read-outs carry them as coordinates (:class:`~hierbandit.ebm.base.Policy`). The set of
        instances is fixed.
    tie_break, rng
        See :class:`~hierbandit.ebm.base.Policy`. The Gaussian draws use their own child
        stream of ``rng``.

    Notes
    -----
    :meth:`posterior` reports the sampling distribution of the current round: mean θ̂ and
    covariance v_t² B⁻¹, with v_t for round t = (updates so far) + 1.
    """

    _n_streams = 2

    def __init__(
        self,
        n_instances: int | None = None,
        n_arms: int | None = None,
        n_features: int | None = None,
        v: float = 1.0,
        ridge: float = 1.0,
        *,
        v_schedule: str = "constant",
        recompute_every: int | None = 10_000,
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
        self.v = check_scale(v, "v")
        self.ridge = check_regularisation(ridge, "ridge")
        self.v_schedule = check_choice(v_schedule, ("constant", "sqrt_log_t"), "v_schedule")
        self.recompute_every = recompute_every
        self._init_stats(self.ridge, recompute_every)
        self._sample_rng = self._streams[1]
        self._log_t = self.v_schedule == "sqrt_log_t"

    def v_t(self) -> float:
        """The posterior scale of the round being decided (round t = updates + 1)."""
        if self._log_t:
            return self.v * math.sqrt(math.log(self.t + 1))
        return self.v

    def sample_scores(self, instance: int, context: Any) -> np.ndarray:
        """One Thompson draw of x·θ̃_{j,k} for every arm, shape (n_arms,).

        Uses (and advances) the same random stream as :meth:`select`, whose decision is the
        argmax of such a draw.
        """
        j = check_index(instance, self.n_instances, "instance")
        x = check_features(context, self.n_features, "context")
        return self._draw(j, x)

    def _draw(self, j: int, x: np.ndarray) -> np.ndarray:
        z = self._sample_rng.standard_normal(self.n_arms)
        out = np.empty(self.n_arms)
        s = self.stats
        v = self.v * math.sqrt(math.log(self.t + 1)) if self._log_t else self.v
        _index_scores(s.Ainv, s.theta, j * self.n_arms, x, v, z, out)
        return out

    def _select(self, j: int, x: np.ndarray) -> int:
        return self._argmax(self._draw(j, x))

    def _draws(self, n: int) -> np.ndarray:
        return self._sample_rng.standard_normal((n, self.n_arms))

    def _select_batch(self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Every request's Thompson draw in one compiled call, from the loop's stream (K
        normals per request, in order); the loop's arms."""
        return self._choose(J, X, self.v_t(), mask)

    def _score_width(self) -> tuple[float, bool]:
        return self.v_t(), True

    def posterior(self) -> xr.Dataset:
        """Mean θ̂ and covariance v_t² B⁻¹ of every (arm, instance)."""
        vt = self.v_t()
        mean, cov = self._mean_cov(vt * vt)
        return posterior_dataset(mean, cov, coords=self.coords(), policy="LinTS", v_t=vt)

    def hyperparameters(self) -> xr.Dataset:
        """Prior covariance (v_t²/ridge)·I per arm and noise variance v_t², plus v and ridge."""
        K, d = self.n_arms, self.n_features
        vt2 = self.v_t() ** 2
        Sigma = np.broadcast_to(np.eye(d) * (vt2 / self.ridge), (K, d, d))
        return hyperparameter_dataset(
            Sigma,
            np.full(K, vt2),
            extra={"v": ((), self.v), "v_t": ((), math.sqrt(vt2)), "ridge": ((), self.ridge)},
            coords=self.coords(instances=False),
            policy="LinTS",
        )


# ---------------------------------------------------------------------- OLSBandit


class ForcedSamplingBandit(Policy):
    """The forced-sampling + all-sample template (Goldenshluger & Zeevi 2013; Bastani & Bayati
    2020) shared by :class:`OLSBandit` and :class:`~hierbandit.ebm.rmbandit.RMBandit`.

    Per (arm, instance) cell it keeps forced-sample and all-sample OLS statistics
    (unit ``k * n_instances + j``) and each instance's round count. At round τ of an instance's
    clock a forced round pulls its scheduled arm (:func:`forced_sampling_arm`); otherwise the
    subclass scores the arms in :meth:`_exploit_scores`. A row counts as forced when the arm
    passed to :meth:`update` is the arm forced at that round's τ.
    """

    def _init_forced_sampling(
        self, q: Any, h: Any, ridge: Any, clock: Any, warmup_rounds: int
    ) -> None:
        self.q = check_positive_int(q, "q")
        self.h = check_scalar(h, "h", low=0.0)
        self.ridge = check_regularisation(ridge, "ridge")
        self.clock = check_choice(clock, ("local", "global"), "clock")
        self._warmup_rounds = warmup_rounds
        units = self.n_arms * self.n_instances
        #: forced-sample statistics, unit ``k * n_instances + j``
        self.forced_stats = OLSStats(units, self.n_features, self.ridge)
        #: all-sample statistics, unit ``k * n_instances + j``
        self.all_stats = OLSStats(units, self.n_features, self.ridge)
        #: rounds seen by each instance (its local clock is this + 1)
        self.n_rounds = np.zeros(self.n_instances, dtype=np.int64)

    def _tau(self, j: int) -> int:
        return int(self.n_rounds[j]) + 1 if self.clock == "local" else self.t + 1

    def _forced(self, j: int) -> int:
        return _forced_arm(self._tau(j), self.n_arms, self.q, self._warmup_rounds)

    def forced_arm(self, instance: int) -> int:
        """The arm forced in ``instance``'s next round, or −1 if that round is not forced."""
        return self._forced(check_index(instance, self.n_instances, "instance"))

    def _exploit_scores(self, j: int, x: np.ndarray, out: np.ndarray) -> None:
        """Scores of a non-forced round (−inf excludes an arm)."""
        raise NotImplementedError

    def _select(self, j: int, x: np.ndarray) -> int:
        f = self._forced(j)
        if f >= 0:
            return f
        out = np.empty(self.n_arms)
        self._exploit_scores(j, x, out)
        return self._argmax(out)

    def _update(self, j: int, x: np.ndarray, k: int, y: float) -> None:
        u = k * self.n_instances + j
        if self._forced(j) == k:
            self.forced_stats._add(u, x, y)
        self.all_stats._add(u, x, y)
        self.n_rounds[j] += 1
        self.t += 1

    def residual_variance(self) -> np.ndarray:
        """σ̂²_k: all-sample OLS residual variance of each arm pooled over instances, shape (K,)."""
        return _pooled_sigma2(self.all_stats, self.n_arms, self.n_instances)

    def _ols_cov(self) -> np.ndarray:
        """σ̂²_k (G + ridge·I)⁻¹ per (arm, instance), shape (K, N, d, d)."""
        K, N, d = self.n_arms, self.n_instances, self.n_features
        s2 = self.residual_variance()
        return self.all_stats.cov_unscaled().reshape(K, N, d, d) * s2[:, None, None, None]

    def _flat_prior_hyperparameters(self, extra: dict[str, Any]) -> xr.Dataset:
        """Flat prior (Σ = +inf on the diagonal, 0 elsewhere) and the pooled σ̂²."""
        K, d = self.n_arms, self.n_features
        Sigma = np.zeros((K, d, d))
        Sigma[:, np.arange(d), np.arange(d)] = np.inf
        return hyperparameter_dataset(
            Sigma,
            self.residual_variance(),
            extra=extra,
            coords=self.coords(instances=False),
            policy=type(self).__name__,
        )


class OLSBandit(ForcedSamplingBandit):
    """OLS Bandit (Goldenshluger & Zeevi 2013; K-arm form of Bastani & Bayati 2020), per instance.

    Each instance j runs its own copy (docs/decisions/ebm.md, "Baselines"). At round τ of
    instance j's clock, with context x:

    1. if τ is in a forced-sampling set T_i (:func:`forced_sampling_arm`), pull arm i;
    2. otherwise compute the forced-sample OLS estimates β̂_F,k (rows of arm k pulled in forced
       rounds) and keep K̂ = {k : x·β̂_F,k ≥ max_l x·β̂_F,l − h/2};
    3. pull argmax_{k∈K̂} x·β̂_A,k with the all-sample OLS estimates β̂_A,k (every row of arm k,
       forced rounds included); ties are broken at random.

    Estimates are exact OLS once an arm's design is numerically full rank and a ridge of
    ``ridge`` before (:func:`~hierbandit.stats.ridge.ols_solve`); with no data they are 0.

    Parameters
    ----------
    n_instances, n_arms, n_features
        Number of instances, arms and context dimension d.
    q : int, default 1
        Forced rounds per arm and block (ebm §7: q = 1 as in Xu & Bastani).
    h : float, default 15.0
        Filter width: arms within h/2 of the best forced-sample estimate stay eligible.
    ridge : float, default 1e-6
        Ridge used before a design is full rank, in [1e-6, 1e6].
    warmup : bool, default True
        Start with K·d round-robin rounds (arm (τ − 1) mod K at τ ≤ K·d), which count as forced
        rounds and replace the scheduled forced rounds there, as the reference implementation
        ``runOLSbandit.m`` does. With q = 1 the schedule alone gives each arm only about
        log₂(τ/K) + 1 forced rows, so the forced-sample fit stays rank-deficient for a long time
        when d is not tiny and its wild estimates can filter out the best arm
        (docs/decisions/ebm.md, "Baselines"); the warm-up avoids that. ``False`` gives the
        schedule of the papers alone.
    clock : {"local", "global"}, default "local"
        ``"local"``: τ is the instance's own round (its updates so far + 1), each instance
        running a full schedule. ``"global"``: τ is the global round (all updates + 1).
    instances, arms, features
        Ids of the instances and arms (int or str) and names of the features, in place of (or
        beside) ``n_instances`` and ``n_arms``; ``select`` then returns arm ids and the
        read-outs carry them as coordinates (:class:`~hierbandit.ebm.base.Policy`). The set of
        instances is fixed.
    tie_break, rng
        See :class:`~hierbandit.ebm.base.Policy`.

    Notes
    -----
    A row counts as forced when the arm passed to :meth:`update` is the arm forced at the
    round's τ (normally the arm :meth:`select` returned). :meth:`posterior` reports the
    all-sample OLS estimate with covariance σ̂²_k (G + ridge·I)⁻¹, σ̂²_k the residual variance of
    arm k pooled over instances, Σ_j RSS_{j,k} / Σ_j max(n_{j,k} − d, 0) (1 until that has a
    positive denominator).
    """

    def __init__(
        self,
        n_instances: int | None = None,
        n_arms: int | None = None,
        n_features: int | None = None,
        q: int = 1,
        h: float = 15.0,
        ridge: float = 1e-6,
        *,
        warmup: bool = True,
        clock: str = "local",
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
        self.warmup = check_bool(warmup, "warmup")
        warm = self.n_arms * self.n_features if self.warmup else 0
        self._init_forced_sampling(q, h, ridge, clock, warm)

    def _exploit_scores(self, j: int, x: np.ndarray, out: np.ndarray) -> None:
        _filtered_scores(
            self.forced_stats.coef, self.all_stats.coef, self.n_instances, j, x, self.h, out
        )

    def posterior(self) -> xr.Dataset:
        """All-sample OLS mean and covariance σ̂²_k (G + ridge·I)⁻¹; also ``forced_mean``."""
        K, N, d = self.n_arms, self.n_instances, self.n_features
        ds = posterior_dataset(
            self.all_stats.coef.reshape(K, N, d),
            self._ols_cov(),
            coords=self.coords(),
            policy="OLSBandit",
        )
        ds["forced_mean"] = (
            ("arm", "instance", "feature"),
            self.forced_stats.coef.reshape(K, N, d),
        )
        return ds

    def hyperparameters(self) -> xr.Dataset:
        """Flat prior (Σ = +inf on the diagonal, 0 elsewhere), pooled σ̂², and q, h, ridge."""
        return self._flat_prior_hyperparameters(
            {"q": ((), self.q), "h": ((), self.h), "ridge": ((), self.ridge)}
        )


def _pooled_sigma2(stats: OLSStats, n_arms: int, n_instances: int) -> np.ndarray:
    """Σ_j RSS_{j,k} / Σ_j max(n_{j,k} − d, 0) per arm (1 where the denominator is 0)."""
    d = stats.n_features
    rss = stats.rss().reshape(n_arms, n_instances).sum(axis=1)
    dof = np.maximum(stats.n.reshape(n_arms, n_instances) - d, 0).sum(axis=1)
    return np.where(dof > 0, rss / np.maximum(dof, 1), 1.0)
