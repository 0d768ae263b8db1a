"""Episode-level policies of the multi-user contextual cascading bandit (Park & Jia 2025).

* :class:`UCBBP` — Upper Confidence Bound with Backward Planning (Algorithm 1, Algorithm 2,
  eq. (1)).
* :class:`AUCBBP` — Active UCBBP (Algorithm 3): the UCB arm only for the ``M_t`` users with the
  largest predictive variance ``s_n = zᵀA⁻¹z``, greedy for the rest.
* :class:`CascadeEpsilonGreedy` — the paper's ε-greedy baseline (same estimator and planning),
  :class:`CascadeGreedy` (ε = 0) and :class:`CascadeRandom` (uniform arms).
* :class:`CascadeLinUCB` and :class:`CascadeLinTS` — the linear cascading bandits of Zong, Ni,
  Sung, Ke, Wen & Kveton (2016), "Cascading bandits for large-scale recommendation problems",
  on the same joint features ``z = [x; onehot(k)]``.

The interface
-------------
One episode serves ``N`` users for up to ``H`` steps::

    policy.start_episode(X)            # X: (N, d) user contexts; plans the episode
    for h in range(H):                 # step by step (or take policy.recommend(X) at once)
        arms_h = policy.select(h, active)   # (N,) arm for every user; shown to the active ones
        ...                            # the environment reveals the clicks
    policy.update(X, arms, clicks)     # arms (N, H) with -1 where nothing was shown,
                                       # clicks (N, H) 0/1; once per episode (Alg. 1 lines 23-28)

Serving (docs/cascading.md, "Serving"; A23): ``recommend_batch(X_b, allowed=...)`` gives B more
users of the current episode their slates, ``update_batch(X_b, arms_b, clicks_b)`` (or a
DataFrame of displayed positions) records their sessions, and ``end_episode()`` learns from all
the episode's sessions at once; a batch equals the loop of one-user calls bit for bit (A24).

``update`` accepts only data that follow the cascade rule (every displayed item up to and
including the click, nothing after; a session without a click shows all ``H`` items), and
contexts of magnitude at most ``MAX_FEATURE`` = 1e6 (:mod:`hierbandit._validation`).
Public methods validate everything first and leave the policy untouched on bad input; an
update computes the new estimator state in temporaries and commits it only when complete, so
it either completes or leaves the policy bit-identical. The information matrix is factorised
with the prior precision's smallest eigenvalue as a floor for pivots that rounding destroys
(contexts so large that λ is below their resolution), so its factorisation never fails. The
simulation runner calls the unchecked ``_start``/``_select``/``_update``. ``posterior()``
returns an :class:`xarray.Dataset`; ``get_params()``/``clone()`` follow
:class:`hierbandit.ebm.Policy`. Randomness (ε-draws, Thompson draws, random tie-breaks)
comes from child streams of ``rng``.

Decisions on the paper's ambiguities (rows A1–A25) are listed in ``docs/cascading.md``; the
main ones: the parameter update defaults to the corrected Newton step
(``update_rule="newton1"``; the printed rule is ``update_rule="paper_literal"``), β is a constant 0.5 by
default (``beta="theory"`` gives Theorem 5.2's radius), round-robin warm-up is
``k = (n + h + (t − 1)H) mod K``, ties go to the lowest arm index.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.stats
import xarray as xr
from scipy.special import expit

from hierbandit._params import ParamsMixin
from hierbandit._validation import (
    _as_float_array,
    as_generator,
    check_choice,
    check_covariance,
    check_feature_array,
    check_index,
    check_positive_int,
    check_regularisation,
    check_scalar,
    check_scale,
    check_vector,
)
from hierbandit.cascade._kernels import joint_logits, joint_quad, sampled_attractions
from hierbandit.cascade.env import (
    backward_plan,
    backward_plan_unchecked,
    check_rewards,
    slate_value,
)
from hierbandit.checkpoint import SharedStateMixin
from hierbandit.stats.logistic import UPDATES, OnlineLogistic, spd_factor

__all__ = [
    "AUCBBP",
    "UCBBP",
    "CascadeEpsilonGreedy",
    "CascadeGreedy",
    "CascadeLinTS",
    "CascadeLinUCB",
    "CascadePolicy",
    "CascadeRandom",
    "backward_plan",
    "beta_theory",
    "check_cascade_feedback",
    "default_cz",
    "exploration_budget",
    "round_robin",
    "slate_value",
]


# ---------------------------------------------------------------------- helpers
def round_robin(t: int, n_users: int, horizon: int, n_arms: int) -> np.ndarray:
    """Warm-up slates ``k = (n + h + (t − 1)H) mod K`` (0-based n, h; 1-based episode t).

    The paper does not define its round-robin (docs/cascading.md A5); this one cycles every user
    through the arms across steps, starts users at different arms and shifts every episode.

    Returns
    -------
    numpy.ndarray of int, shape (N, H)
    """
    n = np.arange(n_users)[:, None]
    h = np.arange(horizon)[None, :]
    return (n + h + (t - 1) * horizon) % n_arms


def exploration_budget(t: int, n_users: int, n_episodes: int) -> int:
    """AUCBBP's budget ``M_t = max{1, ⌊N e^{−t/ln T}⌋}`` (§6, Algorithm 3 line 12).

    ``t`` counts episodes from 1, warm-up included; ``T >= 2`` (``ln 1 = 0``; docs/cascading.md A8).
    Integers ``t >= 1``, ``n_users >= 1`` and ``n_episodes >= 2``, else ``TypeError`` /
    ``ValueError`` naming the argument.
    """
    t = check_positive_int(t, "t")
    n_users = check_positive_int(n_users, "n_users")
    n_episodes = check_positive_int(n_episodes, "n_episodes", minimum=2)
    return max(1, int(np.floor(n_users * np.exp(-t / np.log(n_episodes)))))


def default_cz(n_features: int) -> float:
    """``c_z = √(1 + χ²_{d, 0.999})``: a 99.9 % bound on ‖[x; e_k]‖ for ``x ~ N(0, I_d)``
    (docs/cascading.md A4; assumption A1 cannot hold exactly for Gaussian contexts)."""
    return float(np.sqrt(1.0 + scipy.stats.chi2.ppf(0.999, n_features)))


def beta_theory(
    n_obs: int,
    n_params: int,
    e_max: float,
    c_z: float,
    lam: float,
    delta: float,
    variant: str = "thm5.2",
) -> float:
    """Theorem 5.2's confidence radius (docs/maths/cascade.md §4)

    ``β = κ e_max c_z √(2 (d+K) max(1, log ñ) log((d+K)/δ))``,
    ``κ = √(3 + 2 log(1 + c_z²/(8λ)))``, with ``ñ`` the observations before the episode.
    ``variant="lemma13.16"`` drops the factor ``c_z`` (Lemma 13.16's form).

    Needs integers ``n_obs >= 0`` and ``n_params >= 1``, finite ``e_max > 0``, ``c_z > 0``,
    ``lam > 0`` and ``0 < delta < 1``, else ``TypeError`` / ``ValueError`` naming the argument.
    """
    n_obs = check_positive_int(n_obs, "n_obs", minimum=0)
    n_params = check_positive_int(n_params, "n_params")
    e_max = check_scalar(e_max, "e_max", low=0.0, low_inclusive=False)
    c_z = check_scalar(c_z, "c_z", low=0.0, low_inclusive=False)
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    delta = check_scalar(delta, "delta", low=0.0, low_inclusive=False)
    if delta >= 1.0:
        raise ValueError(f"delta must be < 1 (a confidence level), got {delta}")
    check_choice(variant, ("thm5.2", "lemma13.16"), "variant")
    kappa = np.sqrt(3.0 + 2.0 * np.log1p(c_z**2 / (8.0 * lam)))
    log_n = max(1.0, float(np.log(n_obs))) if n_obs > 0 else 1.0
    core = kappa * e_max * np.sqrt(2.0 * n_params * log_n * np.log(n_params / delta))
    return float(core * (c_z if variant == "thm5.2" else 1.0))


def check_cascade_feedback(
    contexts: Any, arms: Any, clicks: Any, n_features: int, n_arms: int, horizon: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate one episode's feedback and return ``(X, arms, clicks)`` as float/int64/int8.

    Checks: ``contexts`` is ``(N, d)`` and finite; ``arms`` is an integer ``(N, H)`` array with
    entries in ``[-1, K)`` (``-1`` = not displayed); ``clicks`` is ``(N, H)`` with entries in
    {0, 1}; and the cascade rule: displayed positions form a prefix of each row, clicks occur
    only at displayed positions, at most one per user and only at the last displayed position,
    and a session without a click displays all ``H`` positions.
    """
    X = _check_contexts(contexts, n_features)
    N = X.shape[0]
    A = np.asarray(arms)
    if A.dtype.kind not in "iu":
        raise TypeError(f"arms must be an integer array (-1 = not displayed), got {A.dtype}")
    if A.shape != (N, horizon):
        raise ValueError(f"arms must have shape ({N}, {horizon}) (users, steps), got {A.shape}")
    if A.size and (A.min() < -1 or A.max() >= n_arms):
        raise ValueError(f"arms holds unknown arms: ids must be in [0, {n_arms}) or -1")
    C = np.asarray(clicks)
    if C.dtype.kind not in "biuf":
        raise TypeError(f"clicks must be numeric or boolean, got dtype {C.dtype}")
    if C.shape != (N, horizon):
        raise ValueError(f"clicks must have shape ({N}, {horizon}), got {C.shape}")
    if C.dtype.kind == "f" and not np.all(np.isfinite(C)):
        raise ValueError("clicks must be finite (no NaN)")
    if not np.all((C == 0) | (C == 1)):
        raise ValueError("clicks must hold 0/1 click indicators")
    A = A.astype(np.int64)
    C = C.astype(np.int8)
    shown = A >= 0
    if np.any(~shown[:, :-1] & shown[:, 1:]):
        raise ValueError(
            "arms: displayed positions must form a prefix of each session (-1 only after)"
        )
    if np.any((C == 1) & ~shown):
        raise ValueError("clicks: a click at a position where nothing was displayed")
    n_click = C.sum(axis=1)
    if np.any(n_click > 1):
        raise ValueError("clicks: at most one click per session (the session stops at a click)")
    last = shown.sum(axis=1) - 1
    rows = np.arange(N)
    clicked = n_click == 1
    if np.any(clicked & (C[rows, np.maximum(last, 0)] != 1)):
        raise ValueError(
            "arms: items displayed after a click (cascade rule: record every displayed item up "
            "to and including the click, nothing after)"
        )
    if np.any(~clicked & (last != horizon - 1)):
        raise ValueError(
            f"arms: a session without a click must display all H = {horizon} positions"
        )
    return X, A, C


def _check_contexts(contexts: Any, n_features: int) -> np.ndarray:
    X = _as_float_array(contexts, "contexts")
    if X.ndim != 2 or X.shape[1] != n_features or X.shape[0] < 1:
        raise ValueError(
            f"contexts must have shape (N, {n_features}) with N >= 1 user contexts, got {X.shape}"
        )
    check_feature_array(X, "contexts")
    return X


def _rows(X: np.ndarray, arms: np.ndarray, clicks: np.ndarray, K: int) -> tuple:
    """Flatten the displayed pulls of an episode into ``Z (n, d + K)`` and ``y (n,)``."""
    n_idx, h_idx = np.nonzero(arms >= 0)
    d = X.shape[1]
    Z = np.zeros((n_idx.size, d + K))
    Z[:, :d] = X[n_idx]
    Z[np.arange(n_idx.size), d + arms[n_idx, h_idx]] = 1.0
    return Z, clicks[n_idx, h_idx].astype(float)


def check_prior_layout(prior: Any, n_features: int, n_arms: int, holder: str) -> None:
    """Refuse a prior that records another layout of θ = [θ_x; α] than ``n_features`` context
    coefficients then ``n_arms`` arm effects (a ``CascadePrior`` records both); ``holder``
    names what has the expected layout in the message."""
    want = {"n_features": n_features, "n_arms": n_arms}
    got = {k: getattr(prior, k) for k in want if getattr(prior, k, None) is not None}
    if any(
        isinstance(v, bool) or not isinstance(v, int | np.integer) or v != want[k]
        for k, v in got.items()
    ):
        raise ValueError(
            "prior was fitted for "
            + ", ".join(f"{k}={v!r}" for k, v in got.items())
            + f" but {holder} has "
            + ", ".join(f"{k}={want[k]}" for k in got)
            + " (θ = [θ_x; α] holds the n_features context coefficients, then the n_arms "
            "arm effects)"
        )


def _check_prior(
    prior: Any, n_features: int, n_arms: int
) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """A Gaussian prior on θ: an object with ``mean`` and ``cov`` (e.g. a fitted
    ``CascadePrior``) or a ``(mean, cov)`` tuple. Returns ``(mean, precision)``.

    θ = [θ_x; α] is laid out by ``n_features`` and ``n_arms``: an object that records them (a
    ``CascadePrior`` does) must record the policy's, since a prior of the same length
    ``d + K`` but another split would be read with its coefficients on the wrong parameters.
    A tuple carries no layout and is matched by length only."""
    if prior is None:
        return None, None
    n_params = n_features + n_arms
    if isinstance(prior, tuple) and len(prior) == 2:
        mean, cov = prior
    elif hasattr(prior, "mean") and hasattr(prior, "cov"):
        check_prior_layout(prior, n_features, n_arms, "the policy")
        mean, cov = prior.mean, prior.cov
    else:
        raise TypeError(
            "prior must be a fitted CascadePrior (attributes mean, cov) or a (mean, cov) tuple"
        )
    mean = check_vector(np.asarray(mean), n_params, "prior mean")
    cov = check_covariance(np.asarray(cov), n_params, "prior cov")
    try:
        chol = scipy.linalg.cho_factor(cov, lower=True)
    except np.linalg.LinAlgError:
        raise ValueError("prior cov must be positive definite") from None
    prec = scipy.linalg.cho_solve(chol, np.eye(n_params))
    return mean, 0.5 * (prec + prec.T)


def _param_labels(d: int, K: int) -> list[str]:
    return [f"x{i}" for i in range(d)] + [f"arm{k}" for k in range(K)]


def _logits(X: np.ndarray, theta: np.ndarray, K: int) -> np.ndarray:
    """``z_{n,k}ᵀθ`` per user and arm, row by row (:mod:`hierbandit.cascade._kernels`)."""
    out = np.empty((X.shape[0], K))
    joint_logits(X, theta, K, out)
    return out


def _widths2(X: np.ndarray, cov: np.ndarray, K: int) -> np.ndarray:
    """``z_{n,k}ᵀ cov z_{n,k}`` per user and arm, row by row."""
    out = np.empty((X.shape[0], K))
    joint_quad(X, cov, K, out)
    return out


def _allowed_index(mask: np.ndarray | None, N: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Each user's allowed arms in increasing order (first ``counts[n]`` entries of row ``n``
    of ``idx``, shape (N, K)) and their number; every arm without a mask."""
    if mask is None:
        return np.broadcast_to(np.arange(K), (N, K)), np.full(N, K)
    return np.argsort(~mask, axis=1, kind="stable"), mask.sum(axis=1)


def _round_robin(
    t: int, N: int, H: int, K: int, offset: int, mask: np.ndarray | None
) -> np.ndarray:
    """:func:`round_robin` for the users ``offset .. offset + N − 1`` of episode ``t``, each
    cycling through its allowed arms (all of them without a mask: then exactly
    :func:`round_robin`'s rows)."""
    j = (offset + np.arange(N))[:, None] + np.arange(H)[None, :] + (t - 1) * H
    if mask is None:
        return j % K
    idx, counts = _allowed_index(mask, N, K)
    return np.take_along_axis(idx, j % counts[:, None], axis=1)


def _check_allowed(allowed: Any, N: int, K: int) -> np.ndarray | None:
    """``allowed`` as an (N, K) boolean mask (or None): a boolean array, or one collection of
    arm ids per user; every user must be allowed at least one arm."""
    if allowed is None:
        return None
    arr = None if isinstance(allowed, list) else np.asarray(allowed)
    if arr is not None and arr.dtype == np.bool_:
        if arr.shape != (N, K):
            raise ValueError(f"allowed must be an ({N}, {K}) boolean mask, got {arr.shape}")
        mask = np.ascontiguousarray(arr).copy()
    else:
        rows = list(allowed)
        if len(rows) != N:
            raise ValueError(f"allowed must give the allowed arms of each of the {N} users")
        mask = np.zeros((N, K), dtype=bool)
        for i, row in enumerate(rows):
            if isinstance(row, str) or not hasattr(row, "__iter__"):
                raise TypeError(f"allowed[{i}] must be a collection of arm ids")
            for a in row:
                mask[i, check_index(a, K, f"allowed[{i}]")] = True
    empty = ~mask.any(axis=1)
    if empty.any():
        raise ValueError(f"allowed[{int(np.flatnonzero(empty)[0])}] allows no arm")
    return mask


def _frame_sessions(
    frame: Any, features: Any, n_features: int, n_arms: int, horizon: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row per displayed position (columns ``user``, ``position``, ``arm``, ``click`` and
    the context) → session arrays ``(X (S, d), arms (S, H), clicks (S, H))``, sessions in the
    order their user first appears; the cascade rule is checked by the caller."""
    if features is None:
        names = [f"x{i}" for i in range(n_features)]
    else:
        if isinstance(features, str) or not hasattr(features, "__iter__"):
            raise TypeError("features must be a sequence of column names (str)")
        names = list(features)
        if len(names) != n_features:
            raise ValueError(f"features must name the {n_features} context columns")
    missing = [c for c in ("user", "position", "arm", "click", *names) if c not in frame.columns]
    if missing:
        raise ValueError(f"the DataFrame lacks the columns {missing}")
    session, _ = pd.factorize(frame["user"], use_na_sentinel=True)
    if np.any(session < 0):
        raise ValueError("the user column has missing ids")
    cols = {}
    for name, hi in (("position", horizon), ("arm", n_arms)):
        v = np.asarray(frame[name].to_numpy())
        if v.dtype.kind not in "iu":
            raise TypeError(f"the {name} column must hold integers, got dtype {v.dtype}")
        if v.size and (v.min() < 0 or v.max() >= hi):
            raise ValueError(f"the {name} column must hold values in [0, {hi})")
        cols[name] = v.astype(np.int64)
    click = np.asarray(frame["click"].to_numpy())
    if click.dtype.kind not in "biuf":
        raise TypeError(f"the click column must be 0/1, got dtype {click.dtype}")
    if not np.all((click == 0) | (click == 1)):
        raise ValueError("the click column must hold 0/1 click indicators")
    rows = _as_float_array(frame[names].to_numpy(), "contexts")
    check_feature_array(rows, "contexts")
    S = int(session.max()) + 1 if session.size else 0
    if S == 0:
        raise ValueError("the DataFrame holds no displayed position")
    pos = cols["position"]
    seen = np.zeros((S, horizon), dtype=np.int64)
    np.add.at(seen, (session, pos), 1)
    if np.any(seen > 1):
        raise ValueError("a session (user) has the same position twice")
    first = np.full(S, len(session))
    np.minimum.at(first, session, np.arange(len(session)))
    X = rows[first]
    if np.any(X[session] != rows):
        raise ValueError("the context of a session (user) changes between its rows")
    arms = np.full((S, horizon), -1, dtype=np.int64)
    clicks = np.zeros((S, horizon), dtype=np.int8)
    arms[session, pos] = cols["arm"]
    clicks[session, pos] = click
    return X, arms, clicks


# ---------------------------------------------------------------------- base class
class CascadePolicy(SharedStateMixin, ParamsMixin, ABC):
    """Base class of the episode-level cascading policies.

    Serving: an episode is the set of users served between two learning steps. Requests come
    in any number of :meth:`recommend_batch` calls (B users each; a slate per user), feedback in
    any number of :meth:`update_batch` calls (B users' sessions, as arrays or a DataFrame of
    displayed positions), and :meth:`end_episode` learns from every session recorded in the
    episode at once, as Algorithms 1 and 3 do at the end of an episode. A batch gives the
    same slates, random draws and final state as the loop of one-user calls in the same order
    (AUCBBP excepted: it ranks the users of an episode against each other, so it takes all of
    them in one call). :meth:`update` is :meth:`update_batch` followed by :meth:`end_episode`.

    Thread safety and checkpoints: ``start_episode``, ``select``, ``recommend``,
    ``recommend_batch``, ``update``, ``update_batch``, ``end_episode``, ``posterior`` and
    ``save`` hold the policy's re-entrant lock, so concurrent calls are serialised and the
    state equals that of the same calls made one after another in the order they took the
    lock. The step-wise protocol (``start_episode``, then ``select`` per step) keeps one
    episode in progress per policy, so threads sharing a policy should use the serving calls
    or :meth:`recommend` (one call per episode) and :meth:`update`. ``save(path)`` /
    ``load(path)`` write and restore the full state, the sessions recorded in the current
    episode included (:mod:`hierbandit.checkpoint`).

    Parameters
    ----------
    n_arms, n_features
        ``K`` and ``d``.
    rewards : array_like, shape (K,)
        Known click rewards ``e_k > 0``.
    horizon : int
        Session length ``H >= 1``.
    tie_break : {"first", "random"}
        Ties in an argmax over arms go to the lowest index (default; docs/cascading.md A21) or to
        a uniformly random one of the tied arms.
    rng
        Seed or Generator; internal randomness uses independent child streams of it.
    """

    #: the episode's arms do not depend on who is still active (then regret is exact)
    open_loop: bool = True
    _n_streams = 2
    _locked_methods: ClassVar[tuple[str, ...]] = (
        "start_episode",
        "select",
        "recommend",
        "recommend_batch",
        "update",
        "update_batch",
        "end_episode",
        "posterior",
    )
    #: attributes added since checkpoints were first written, with the value an older
    #: checkpoint implies (:mod:`hierbandit._restore` fills them in before checking)
    _checkpoint_added: ClassVar[dict[str, Any]] = {
        "_served": lambda p: 0,
        "_pending": lambda p: [],
    }
    #: whether the users of an episode must be planned in one call (AUCBBP ranks them)
    _one_call_per_episode: ClassVar[bool] = False

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        self.n_arms = check_positive_int(n_arms, "n_arms")
        self.n_features = check_positive_int(n_features, "n_features")
        self.rewards = check_rewards(rewards, self.n_arms)
        self.rewards.flags.writeable = False
        self.horizon = check_positive_int(horizon, "horizon")
        self.tie_break = check_choice(tie_break, ("first", "random"), "tie_break")
        self.rng = rng
        streams = as_generator(rng).spawn(self._n_streams)
        self._tie_rng = streams[0]
        self._streams = streams
        #: episodes completed (updates applied); the episode being served is ``t + 1``
        self.t = 0
        self._X: np.ndarray | None = None
        self._slate: np.ndarray | None = None
        #: users given slates by recommend_batch in the current episode (their positions in
        #: the episode's round robin continue from here)
        self._served = 0
        #: sessions recorded in the current episode, learned from at its end
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    @property
    def n_params(self) -> int:
        """``d + K``, the length of θ."""
        return self.n_features + self.n_arms

    # ------------------------------------------------------------------ public API
    def start_episode(self, contexts: Any, *, allowed: Any = None) -> None:
        """Observe the episode's ``N`` user contexts ``(N, d)`` and plan the episode.

        ``allowed`` (optional): an ``(N, K)`` boolean mask, or for each user a collection of
        arm ids, restricting the arms each user may be shown (at least one); the plan is then
        the backward plan over those arms (docs/cascading.md, "Serving").
        """
        X = _check_contexts(contexts, self.n_features)
        mask = _check_allowed(allowed, X.shape[0], self.n_arms)
        self._start(X, mask)

    def select(self, step: int, active: Any = None) -> np.ndarray:
        """Arms of every user at ``step`` (0-based), shape ``(N,)``; only the users still
        ``active`` (not absorbed; default all) are shown theirs."""
        if self._X is None:
            raise RuntimeError("select() before start_episode(): no episode in progress")
        h = check_index(step, self.horizon, "step")
        N = self._X.shape[0]
        if active is None:
            act = np.ones(N, dtype=bool)
        else:
            act = np.asarray(active)
            if act.dtype != bool or act.shape != (N,):
                raise ValueError(f"active must be a boolean array of shape ({N},)")
        return self._select(h, act)

    def recommend(self, contexts: Any, *, allowed: Any = None) -> np.ndarray:
        """Start an episode for ``contexts`` and return the full slates ``(N, H)`` shown if no
        user clicks (for an open-loop policy, the episode's plan). ``allowed`` as in
        :meth:`start_episode`."""
        self.start_episode(contexts, allowed=allowed)
        N = self._X.shape[0]
        active = np.ones(N, dtype=bool)
        return np.stack([self._select(h, active) for h in range(self.horizon)], axis=1)

    def recommend_batch(self, contexts: Any, *, allowed: Any = None) -> np.ndarray:
        """Slates for B more users of the current episode, in one call.

        Parameters
        ----------
        contexts : array_like, shape (B, d)
            The users' contexts.
        allowed : array_like of bool, shape (B, K), or B collections of arm ids, optional
            The arms each user may be shown (at least one); a user allowed fewer than ``H``
            arms is shown them again in the same order (the slates of the paper repeat arms).

        Returns
        -------
        ndarray of int64, shape (B, H)
            The slate of every user: the arm shown at each step until a click. The same as B
            calls with one user each in order (nothing is learned before
            :meth:`end_episode`); the round-robin warm-up numbers the users of an episode in
            the order they are served. AUCBBP plans all the users of an episode in one call
            (it ranks them against each other); a second call in the same episode raises
            ``ValueError``.
        """
        X = _check_contexts(contexts, self.n_features)
        mask = _check_allowed(allowed, X.shape[0], self.n_arms)
        if self._one_call_per_episode and self._served:
            raise ValueError(
                f"{type(self).__name__} ranks the users of an episode against each other "
                "(Algorithm 3): give all of them in one recommend_batch call, or call "
                "end_episode() first"
            )
        slates = self._plan(X, mask, self._served)
        self._served += X.shape[0]
        return slates

    def update(self, contexts: Any, arms: Any, clicks: Any) -> None:
        """Learn from one episode (end-of-episode update of Algorithms 1 and 3).

        The sessions are added to those recorded by :meth:`update_batch` in the episode (if
        any), and the policy learns from all of them (:meth:`end_episode`).

        Parameters
        ----------
        contexts : array_like, shape (N, d)
        arms : array_like of int, shape (N, H)
            Displayed arm at each step, ``-1`` where nothing was displayed (after a click).
        clicks : array_like, shape (N, H)
            0/1 click indicators (at most one per user, at its last displayed position).
        """
        X, A, C = check_cascade_feedback(
            contexts, arms, clicks, self.n_features, self.n_arms, self.horizon
        )
        self._update(X, A, C)

    def update_batch(
        self, contexts: Any, arms: Any = None, clicks: Any = None, *, features: Any = None
    ) -> None:
        """Record B users' sessions in the current episode, in one call.

        Either three arrays as in :meth:`update` (``contexts`` (B, d), ``arms`` (B, H) with
        ``-1`` after a click, ``clicks`` (B, H)), or one pandas DataFrame with a row per
        displayed position and the columns ``user`` (one session per id, in the order the ids
        first appear), ``position`` (0-based step), ``arm``, ``click`` and the context (the
        columns named by ``features``; ``x0 .. x{d-1}`` by default). The sessions must follow
        the cascade rule (as in :meth:`update`); every one is checked before anything is
        recorded, so a refused batch leaves the policy bit-identical.

        Nothing is learned yet: :meth:`end_episode` learns from every session of the
        episode at once, so recording them in one call or in several gives the same result.
        """
        if arms is None and clicks is None and hasattr(contexts, "columns"):
            contexts, arms, clicks = _frame_sessions(
                contexts, features, self.n_features, self.n_arms, self.horizon
            )
        elif features is not None:
            raise ValueError("features names the context columns of a DataFrame only")
        X, A, C = check_cascade_feedback(
            contexts, arms, clicks, self.n_features, self.n_arms, self.horizon
        )
        self._pending.append((X, A, C))

    def end_episode(self) -> None:
        """Learn from the sessions recorded in the episode (Algorithm 1 lines 23–28, once for
        all of them) and start the next episode (``t`` grows by one)."""
        self._end([])

    @abstractmethod
    def posterior(self) -> xr.Dataset:
        """The current belief about θ: ``mean`` (param) and ``cov`` ``(param, param_)``."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_arms={self.n_arms}, n_features={self.n_features}, "
            f"horizon={self.horizon}, episodes={self.t})"
        )

    # ------------------------------------------------------------------ for subclasses
    def _start(self, X: np.ndarray, mask: np.ndarray | None = None) -> None:
        """Unchecked start: sets ``_X`` and (open-loop policies) the slate ``_slate (N, H)``."""
        slate = self._plan(X, mask, 0)
        self._X, self._slate = X, slate

    @abstractmethod
    def _plan(self, X: np.ndarray, mask: np.ndarray | None, offset: int) -> np.ndarray:
        """The slates ``(N, H)`` of users ``offset .. offset + N − 1`` of the episode, each
        restricted to its allowed arms (``mask`` (N, K), or None)."""

    def _select(self, h: int, active: np.ndarray) -> np.ndarray:
        return self._slate[:, h]

    def _update(self, X: np.ndarray, arms: np.ndarray, clicks: np.ndarray) -> None:
        """Unchecked end of episode with these sessions added to the recorded ones."""
        self._end([(X, arms, clicks)])

    def _end(self, more: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Learn from the recorded sessions and ``more`` in order; nothing changes if the
        learning step refuses (it computes in temporaries first)."""
        sessions = self._pending + more
        if len(sessions) == 1:
            X, arms, clicks = sessions[0]
        elif sessions:
            X, arms, clicks = (np.concatenate(parts) for parts in zip(*sessions, strict=True))
        else:
            X = np.zeros((0, self.n_features))
            arms = np.zeros((0, self.horizon), dtype=np.int64)
            clicks = np.zeros((0, self.horizon), dtype=np.int8)
        Z, y = _rows(X, arms, clicks, self.n_arms)
        self._learn(Z, y)
        self.t += 1
        self._X = None
        self._slate = None
        self._served = 0
        self._pending = []

    @abstractmethod
    def _learn(self, Z: np.ndarray, y: np.ndarray) -> None:
        """Add the episode's flattened pulls."""

    def _argmax(self, scores: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Argmax over the last axis with the configured tie-break, over the allowed arms
        (``mask`` (N, K) for scores of shape (N, ..., K))."""
        if mask is not None:
            shape = (mask.shape[0],) + (1,) * (scores.ndim - 2) + (mask.shape[1],)
            scores = np.where(mask.reshape(shape), scores, -np.inf)
        k = scores.argmax(axis=-1)
        if self.tie_break == "random":
            best = np.take_along_axis(scores, k[..., None], axis=-1)
            ties = scores == best
            multi = ties.sum(axis=-1) > 1
            if multi.any():
                t = ties[multi]
                keys = np.where(t, self._tie_rng.random(t.shape), -1.0)
                k[multi] = keys.argmax(axis=-1)
        return k


# ---------------------------------------------------------------------- logistic family
class _LogisticCascadePolicy(CascadePolicy):
    """Shared machinery: the logistic estimator, backward planning and warm-up."""

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        lam: float = 1.0,
        update_rule: str = "newton1",
        warmup: int = 2,
        prior: Any = None,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        super().__init__(n_arms, n_features, rewards, horizon, tie_break=tie_break, rng=rng)
        self.lam = check_regularisation(lam, "lam")
        self.update_rule = check_choice(update_rule, UPDATES, "update_rule")
        self.warmup = check_positive_int(warmup, "warmup", minimum=0)
        mean, prec = _check_prior(prior, self.n_features, self.n_arms)
        self.prior = prior
        self.estimator = OnlineLogistic(
            self.n_params, self.lam, self.update_rule, prior_mean=mean, prior_precision=prec
        )

    @property
    def theta(self) -> np.ndarray:
        """Current estimate θ̂ (a copy)."""
        return self.estimator.theta.copy()

    def estimated_click_probabilities(self, X: np.ndarray) -> np.ndarray:
        """``p̂ = σ(z_{x,k}ᵀθ̂)`` for contexts ``(N, d)``, shape ``(N, K)``."""
        X = np.ascontiguousarray(X, dtype=float)
        return expit(_logits(X, self.estimator.theta, self.n_arms))

    def _greedy_tables(self, X: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        return backward_plan_unchecked(
            self.estimated_click_probabilities(X), self.rewards, self.horizon, mask
        )[0]

    def _in_warmup(self) -> bool:
        return self.t + 1 <= self.warmup

    def _learn(self, Z: np.ndarray, y: np.ndarray) -> None:
        # a batch_map refit that stops short of the MAP warns from the estimator
        # (OnlineLogistic.update, RuntimeWarning; estimator.converged is then False)
        self.estimator.update(Z, y)

    def posterior(self) -> xr.Dataset:
        """θ̂ and ``A⁻¹`` (the online Laplace posterior ``N(θ̂, A⁻¹)`` for ``newton1``)."""
        labels = _param_labels(self.n_features, self.n_arms)
        est = self.estimator
        return xr.Dataset(
            {
                "mean": (("param",), est.theta.copy()),
                "cov": (("param", "param_"), est.cov.copy()),
                "precision": (("param", "param_"), est.A.copy()),
            },
            coords={"param": labels, "param_": labels},
            attrs={
                "policy": type(self).__name__,
                "update": self.update_rule,
                "lam": self.lam,
                "n_obs": est.n_obs,
                "episodes": self.t,
            },
        )


class UCBBP(_LogisticCascadePolicy):
    """Upper Confidence Bound with Backward Planning (Algorithm 1; eq. (1)).

    The index and its widths: docs/maths/cascade.md §4.

    Each episode: ``p̂ = σ(zᵀθ̂)``, the backward plan ``Q̂`` (Algorithm 2), the squared widths
    ``w2[n,k] = z_{n,k}ᵀA⁻¹z_{n,k}`` and the UCB index
    ``U[n,h,k] = Q̂[n,h,k] + β √w2[n,k]`` (eq. (1): the bonus does not depend on ``h`` and the
    continuation value is greedy). After ``warmup`` round-robin episodes every user is shown
    ``argmax_k U[n,h,k]``; θ̂ and ``A`` are updated once per episode.

    Parameters
    ----------
    n_arms, n_features, rewards, horizon
        ``K``, ``d``, ``e`` (``> 0``), ``H``.
    beta : float or "theory"
        Confidence radius β: a constant (default 0.5, the reproduction's value) or
        ``"theory"`` — Theorem 5.2's ``β_ñ`` (:func:`beta_theory`, about 10³ here).
    lam : float
        λ of ``A = λI + Σ w z zᵀ`` (default 1), in [1e-6, 1e6]
        (:data:`~hierbandit._validation.MIN_REG`, ``MAX_REG``).
    update_rule : {"newton1", "paper_literal", "batch_map"}
        Parameter update (docs/maths/cascade.md §2): the corrected one-step Newton (default),
        the rule as printed (``θ̂ = A⁻¹b`` with ``b = Σ z(y − p̂)``, converges to ≈θ*/2) or a
        full penalised-MLE refit on all data.
    warmup : int
        ``T₀``, round-robin episodes (default 2).
    delta, c_z, theory_variant
        For ``beta="theory"``: δ (``0 < δ < 1/e``; default 0.05), the feature-norm bound
        (default :func:`default_cz`) and ``"thm5.2"``/``"lemma13.16"``. With a constant β, δ
        is unused and only has to be a finite real number (its range is not checked).
    prior
        Gaussian prior on θ replacing ``N(0, λ⁻¹I)``: a fitted
        :class:`hierbandit.bayes.cascade.CascadePrior` or a ``(mean, cov)`` tuple.
    tie_break, rng
        See :class:`CascadePolicy`.
    """

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        beta: float | str = 0.5,
        lam: float = 1.0,
        update_rule: str = "newton1",
        warmup: int = 2,
        delta: float = 0.05,
        c_z: float | None = None,
        theory_variant: str = "thm5.2",
        prior: Any = None,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_arms,
            n_features,
            rewards,
            horizon,
            lam=lam,
            update_rule=update_rule,
            warmup=warmup,
            prior=prior,
            tie_break=tie_break,
            rng=rng,
        )
        if isinstance(beta, str):
            check_choice(beta, ("theory",), "beta")
            self.beta = beta
        else:
            self.beta = check_scalar(beta, "beta", low=0.0)
        if self.beta == "theory":
            self.delta = check_scalar(delta, "delta", low=0.0, low_inclusive=False, high=np.exp(-1))
        else:  # unused: kept as plain configuration (a checkpoint carries it), range unchecked
            self.delta = check_scalar(delta, "delta")
        self.c_z = None if c_z is None else check_scalar(c_z, "c_z", low=0.0, low_inclusive=False)
        self.theory_variant = check_choice(
            theory_variant, ("thm5.2", "lemma13.16"), "theory_variant"
        )
        self._cz = default_cz(self.n_features) if self.c_z is None else self.c_z

    def confidence_radius(self) -> float:
        """β for the next episode (uses the observations seen so far)."""
        if self.beta == "theory":
            return beta_theory(
                self.estimator.n_obs,
                self.n_params,
                float(self.rewards.max()),
                self._cz,
                self.lam,
                self.delta,
                self.theory_variant,
            )
        return float(self.beta)

    def _ucb_tables(
        self, X: np.ndarray, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``Q̂ (N, H, K)``, squared widths ``w2 (N, K)`` and ``U (N, H, K)``."""
        Q = self._greedy_tables(X, mask)
        w2 = _widths2(X, self.estimator.cov, self.n_arms)
        U = Q + self.confidence_radius() * np.sqrt(w2)[:, None, :]
        return Q, w2, U

    def _plan(self, X: np.ndarray, mask: np.ndarray | None, offset: int) -> np.ndarray:
        if self._in_warmup():
            return _round_robin(self.t + 1, X.shape[0], self.horizon, self.n_arms, offset, mask)
        return self._argmax(self._ucb_tables(X, mask)[2], mask)


class AUCBBP(UCBBP):
    """Active UCB with Backward Planning (Algorithm 3; docs/maths/cascade.md §4).

    As :class:`UCBBP`, except that after warm-up, at each step ``h``, only the
    ``M_t = max{1, ⌊N e^{−t/ln T}⌋}`` users with the largest
    ``s[n,h] = z_{n,k_ucb}ᵀ A⁻¹ z_{n,k_ucb}`` (the predictive variance of the logit at the UCB arm)
    are shown the UCB arm; all others get the greedy ``argmax_k Q̂[n,h,k]``.

    Parameters
    ----------
    n_episodes : int
        ``T >= 2``, the planned number of episodes (it sets the budget's decay ``ln T``).
    rank_pool : {"all", "active"}
        ``"all"`` (default, Algorithm 3 as written): rank every user, absorbed ones included,
        so the episode is planned up front (open loop). ``"active"``: rank only users still in
        their session at step ``h`` (closed loop; docs/cascading.md A7).
    **others
        As :class:`UCBBP`.
    """

    _one_call_per_episode = True

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        n_episodes: int,
        *,
        rank_pool: str = "all",
        beta: float | str = 0.5,
        lam: float = 1.0,
        update_rule: str = "newton1",
        warmup: int = 2,
        delta: float = 0.05,
        c_z: float | None = None,
        theory_variant: str = "thm5.2",
        prior: Any = None,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        n_episodes = check_positive_int(n_episodes, "n_episodes", minimum=2)
        rank_pool = check_choice(rank_pool, ("all", "active"), "rank_pool")
        super().__init__(
            n_arms,
            n_features,
            rewards,
            horizon,
            beta=beta,
            lam=lam,
            update_rule=update_rule,
            warmup=warmup,
            delta=delta,
            c_z=c_z,
            theory_variant=theory_variant,
            prior=prior,
            tie_break=tie_break,
            rng=rng,
        )
        self.n_episodes = n_episodes
        self.rank_pool = rank_pool
        self.open_loop = rank_pool == "all"
        self._k_ucb: np.ndarray | None = None
        self._k_greedy: np.ndarray | None = None
        self._score: np.ndarray | None = None
        self._budget = 0

    def budget(self, n_users: int) -> int:
        """``M_t`` of the next episode for ``n_users`` users."""
        return exploration_budget(self.t + 1, n_users, self.n_episodes)

    def _tables(
        self, X: np.ndarray, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The UCB and greedy arms (N, H), the scores ``s`` (N, H) and the budget ``M_t``."""
        Q, w2, U = self._ucb_tables(X, mask)
        k_ucb = self._argmax(U, mask)
        k_greedy = self._argmax(Q, mask)
        s = np.take_along_axis(w2, k_ucb, axis=1)  # (N, H): s[n, h] = w2[n, k_ucb[n, h]]
        return k_ucb, k_greedy, s, self.budget(X.shape[0])

    def _open_loop(
        self, k_ucb: np.ndarray, k_greedy: np.ndarray, s: np.ndarray, M: int
    ) -> np.ndarray:
        """The slates when every user is ranked at every step (the full slates)."""
        order = np.argsort(-s, axis=0, kind="stable")[:M]  # ties: lower n first
        top = np.zeros(s.shape, dtype=bool)
        np.put_along_axis(top, order, True, axis=0)
        return np.where(top, k_ucb, k_greedy)

    def _plan(self, X: np.ndarray, mask: np.ndarray | None, offset: int) -> np.ndarray:
        if self._in_warmup():
            return _round_robin(self.t + 1, X.shape[0], self.horizon, self.n_arms, offset, mask)
        return self._open_loop(*self._tables(X, mask))

    def _start(self, X: np.ndarray, mask: np.ndarray | None = None) -> None:
        if self._in_warmup():
            self._k_ucb = None
            slate = _round_robin(self.t + 1, X.shape[0], self.horizon, self.n_arms, 0, mask)
        else:
            k_ucb, k_greedy, s, M = self._tables(X, mask)
            self._k_ucb, self._k_greedy, self._score, self._budget = k_ucb, k_greedy, s, M
            if self.rank_pool == "active":
                slate = k_greedy.copy()  # provisional; _select ranks the active users
            else:
                slate = self._open_loop(k_ucb, k_greedy, s, M)
        self._X, self._slate = X, slate

    def _select(self, h: int, active: np.ndarray) -> np.ndarray:
        if self.rank_pool == "all" or self._k_ucb is None:
            return self._slate[:, h]
        s = np.where(active, self._score[:, h], -np.inf)
        top = np.argsort(-s, kind="stable")[: self._budget]
        top = top[active[top]]
        arms = self._k_greedy[:, h].copy()
        arms[top] = self._k_ucb[top, h]
        return arms


class CascadeEpsilonGreedy(_LogisticCascadePolicy):
    """The paper's ε-greedy baseline (§8; docs/cascading.md, "Baselines").

    The same estimator and backward planning as UCBBP; at each (user, step), with probability ε
    a uniformly random arm, otherwise ``argmax_k Q̂[n,h,k]``. The draws are made when the user's
    slate is planned (open loop), one uniform ``u`` per (user, step): explore when ``u < ε``, and
    then show arm ``⌊K u/ε⌋`` (of the allowed arms), since ``u/ε`` is then uniform on [0, 1)
    (docs/cascading.md A24). The first ``warmup`` episodes are round-robin as in UCBBP.

    Parameters
    ----------
    epsilon : float
        Exploration probability in [0, 1] (default 0.1; the paper gives no value).
    **others
        As :class:`UCBBP` (``lam``, ``update_rule``, ``warmup``, ``prior``, ``tie_break``, ``rng``).
    """

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        epsilon: float = 0.1,
        lam: float = 1.0,
        update_rule: str = "newton1",
        warmup: int = 2,
        prior: Any = None,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_arms,
            n_features,
            rewards,
            horizon,
            lam=lam,
            update_rule=update_rule,
            warmup=warmup,
            prior=prior,
            tie_break=tie_break,
            rng=rng,
        )
        self.epsilon = check_scalar(epsilon, "epsilon", low=0.0, high=1.0)

    def _plan(self, X: np.ndarray, mask: np.ndarray | None, offset: int) -> np.ndarray:
        N = X.shape[0]
        if self._in_warmup():
            return _round_robin(self.t + 1, N, self.horizon, self.n_arms, offset, mask)
        slate = self._argmax(self._greedy_tables(X, mask), mask)
        if self.epsilon > 0:
            # one uniform u per (user, step), drawn user by user: explore when u < ε, and
            # then u/ε is uniform on [0, 1) and picks one of the user's allowed arms
            u = self._streams[1].random((N, self.horizon))
            explore = u < self.epsilon
            v = np.divide(u, self.epsilon, out=np.zeros_like(u), where=explore)
            idx, counts = _allowed_index(mask, N, self.n_arms)
            c = counts[:, None]
            j = np.minimum((v * c).astype(np.int64), c - 1)
            slate = np.where(explore, np.take_along_axis(idx, j, axis=1), slate)
        return slate


class CascadeGreedy(CascadeEpsilonGreedy):
    """Pure greedy backward planning on θ̂ (ε = 0; not in the paper; docs/cascading.md)."""

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        lam: float = 1.0,
        update_rule: str = "newton1",
        warmup: int = 2,
        prior: Any = None,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_arms,
            n_features,
            rewards,
            horizon,
            epsilon=0.0,
            lam=lam,
            update_rule=update_rule,
            warmup=warmup,
            prior=prior,
            tie_break=tie_break,
            rng=rng,
        )


class CascadeRandom(_LogisticCascadePolicy):
    """Uniformly random arm at every (user, step); it still fits θ̂ (useful to log data)."""

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        lam: float = 1.0,
        update_rule: str = "newton1",
        prior: Any = None,
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_arms,
            n_features,
            rewards,
            horizon,
            lam=lam,
            update_rule=update_rule,
            warmup=0,
            prior=prior,
            rng=rng,
        )

    def _plan(self, X: np.ndarray, mask: np.ndarray | None, offset: int) -> np.ndarray:
        N, H = X.shape[0], self.horizon
        if mask is None:
            return self._streams[1].integers(self.n_arms, size=(N, H))
        idx, counts = _allowed_index(mask, N, self.n_arms)
        j = self._streams[1].integers(np.broadcast_to(counts[:, None], (N, H)))
        return np.take_along_axis(idx, j, axis=1)


# ---------------------------------------------------------------------- linear cascading bandits
class _LinearCascadePolicy(CascadePolicy):
    """Ridge regression of the click indicator on ``z = [x; onehot(k)]`` (Zong et al. 2016):
    ``M = λI + Σ z zᵀ``, ``B = Σ z y``, ``θ̄ = M⁻¹B`` (all examined items, clicked one included)."""

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        lam: float = 1.0,
        slate: str = "rank",
        prior: Any = None,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        super().__init__(n_arms, n_features, rewards, horizon, tie_break=tie_break, rng=rng)
        self.lam = check_regularisation(lam, "lam")
        self.slate = check_choice(slate, ("rank", "plan"), "slate")
        mean, prec = _check_prior(prior, self.n_features, self.n_arms)
        self.prior = prior
        p = self.n_params
        self.M = self.lam * np.eye(p) if prec is None else prec.copy()
        self._M0 = self.M.copy()  # the prior precision, M ⪰ M₀
        self.B = np.zeros(p) if mean is None else self.M @ mean
        self.n_obs = 0
        self._refresh()

    def _factorise(self, M: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, ...]:
        """Cholesky factor of ``M``, θ̄ = M⁻¹B and M⁻¹, computed without touching the state.

        ``M`` ⪰ λ_min(M₀)·I (the prior precision), the floor of :func:`spd_factor` when
        rounding hides the ridge (huge contexts), so the factorisation always succeeds.
        """
        try:
            chol = scipy.linalg.cho_factor(M, lower=True, check_finite=False)[0]
        except np.linalg.LinAlgError:
            chol = spd_factor(M, float(np.linalg.eigvalsh(self._M0)[0]))
        theta = scipy.linalg.cho_solve((chol, True), B, check_finite=False)
        inv = scipy.linalg.cho_solve((chol, True), np.eye(self.n_params), check_finite=False)
        cov = 0.5 * (inv + inv.T)
        if not (np.all(np.isfinite(chol)) and np.all(np.isfinite(theta))):
            raise ValueError(
                "contexts: the episode's rows overflow the ridge statistics in float64 "
                "(rescale the features); the policy is unchanged"
            )
        return chol, theta, cov

    def _refresh(self) -> None:
        self._chol, self.theta_bar, self._cov = self._factorise(self.M, self.B)
        self._cov_chol: np.ndarray | None = None

    def _learn(self, Z: np.ndarray, y: np.ndarray) -> None:
        if Z.shape[0] == 0:
            return
        M = self.M + Z.T @ Z
        M = 0.5 * (M + M.T)
        B = self.B + Z.T @ y
        chol, theta, cov = self._factorise(M, B)  # may refuse: nothing changed yet
        self.M, self.B, self.n_obs = M, B, self.n_obs + Z.shape[0]
        self._chol, self.theta_bar, self._cov = chol, theta, cov
        self._cov_chol = None

    def _slates_from_attraction(self, W: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Slates from attraction estimates ``W (N, K)`` (clipped to [0, 1]) over the allowed
        arms."""
        W = np.clip(W, 0.0, 1.0)
        if self.slate == "plan":
            Q = backward_plan_unchecked(W, self.rewards, self.horizon, mask)[0]
            return self._argmax(Q, mask)
        # the classic rule: the H most attractive distinct items by e_k·w_k, best first
        score = W * self.rewards
        if mask is not None:
            score = np.where(mask, score, -np.inf)
        if self.tie_break == "random":
            order = np.lexsort((self._tie_rng.random(score.shape), -score), axis=-1)
        else:
            order = np.argsort(-score, axis=1, kind="stable")
        # arms repeat cyclically when fewer than H are allowed
        counts = np.full(W.shape[0], self.n_arms) if mask is None else mask.sum(axis=1)
        h = np.arange(self.horizon)[None, :] % counts[:, None]
        return np.take_along_axis(order, h, axis=1)

    def posterior(self) -> xr.Dataset:
        """Ridge estimate θ̄ and ``M⁻¹``."""
        labels = _param_labels(self.n_features, self.n_arms)
        return xr.Dataset(
            {
                "mean": (("param",), self.theta_bar.copy()),
                "cov": (("param", "param_"), self._cov.copy()),
                "precision": (("param", "param_"), self.M.copy()),
            },
            coords={"param": labels, "param_": labels},
            attrs={
                "policy": type(self).__name__,
                "lam": self.lam,
                "n_obs": self.n_obs,
                "episodes": self.t,
            },
        )


class CascadeLinUCB(_LinearCascadePolicy):
    """CascadeLinUCB (Zong et al. 2016, Algorithm 2) on the joint features ``[x; onehot(k)]``.

    Attraction UCB ``w̄_k = min(zᵀθ̄ + α √(zᵀM⁻¹z), 1)``; ``slate="rank"`` (default, the
    original rule extended to rewards) shows the ``H`` distinct arms with the largest
    ``e_k w̄_k``, best first (arms repeat cyclically if ``H > K``); ``slate="plan"`` runs the
    backward plan on the optimistic ``w̄`` instead (slates with replacement, like UCBBP).

    Parameters
    ----------
    alpha : float
        Width multiplier (default 0.5, the same scale as UCBBP's β).
    lam : float
        Ridge λ (default 1), in [1e-6, 1e6].
    """

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        alpha: float = 0.5,
        lam: float = 1.0,
        slate: str = "rank",
        prior: Any = None,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_arms,
            n_features,
            rewards,
            horizon,
            lam=lam,
            slate=slate,
            prior=prior,
            tie_break=tie_break,
            rng=rng,
        )
        self.alpha = check_scalar(alpha, "alpha", low=0.0)

    def _plan(self, X: np.ndarray, mask: np.ndarray | None, offset: int) -> np.ndarray:
        mean = _logits(X, self.theta_bar, self.n_arms)
        width = np.sqrt(_widths2(X, self._cov, self.n_arms))
        return self._slates_from_attraction(mean + self.alpha * width, mask)


class CascadeLinTS(_LinearCascadePolicy):
    """CascadeLinTS (Zong et al. 2016, Algorithm 1) on the joint features ``[x; onehot(k)]``.

    Each user draws ``θ̃ ~ N(θ̄, σ² M⁻¹)`` at the start of the episode; attractions
    ``w̃_k = zᵀθ̃`` give the slate as in :class:`CascadeLinUCB`.

    Parameters
    ----------
    sigma : float
        Scale σ of the sampling covariance (default 0.5), in [0, 1e6].
    lam : float
        Ridge λ (default 1), in [1e-6, 1e6].
    """

    def __init__(
        self,
        n_arms: int,
        n_features: int,
        rewards: Any,
        horizon: int,
        *,
        sigma: float = 0.5,
        lam: float = 1.0,
        slate: str = "rank",
        prior: Any = None,
        tie_break: str = "first",
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_arms,
            n_features,
            rewards,
            horizon,
            lam=lam,
            slate=slate,
            prior=prior,
            tie_break=tie_break,
            rng=rng,
        )
        self.sigma = check_scale(sigma, "sigma")

    def _plan(self, X: np.ndarray, mask: np.ndarray | None, offset: int) -> np.ndarray:
        xi = self._streams[1].standard_normal((X.shape[0], self.n_params))  # user by user
        if self._cov_chol is None:
            try:
                self._cov_chol = np.linalg.cholesky(self._cov)
            except np.linalg.LinAlgError:
                # M⁻¹ too ill-conditioned to factorise again: M⁻¹ = L⁻ᵀL⁻¹ with M = LLᵀ,
                # so L⁻ᵀ is a square root of it as well
                Li = scipy.linalg.solve_triangular(
                    self._chol, np.eye(self.n_params), lower=True, check_finite=False
                )
                self._cov_chol = np.ascontiguousarray(Li.T)
        W = np.empty((X.shape[0], self.n_arms))
        sampled_attractions(X, self.theta_bar, self._cov_chol, xi, self.sigma, self.n_arms, W)
        return self._slates_from_attraction(W, mask)
