"""The multi-user contextual cascading bandit environment (Park & Jia 2025, §3; docs/cascading.md).

Each episode ``t`` brings ``N`` user contexts ``x_{t,n}``. Every user is shown up to ``H`` arms,
one per step; at step ``h`` an active user clicks arm ``k`` with probability
``σ(z_{x,k}ᵀθ)``, ``z_{x,k} = [x; onehot(k)]`` (one ``θ ∈ ℝ^{d+K}`` shared by all users, arms
and positions), which pays the known reward ``e_k > 0`` and ends that user's session; a session
also ends after ``H`` displays without a click.

Planning
--------
The only non-absorbed state at step ``h`` is ``h`` itself, so the optimal policy is an
open-loop slate computed by backward planning (Algorithm 2; docs/maths/cascade.md §3)::

    V_{H+1} = 0,  Q_h(k) = f_k e_k + (1 − f_k) V_{h+1},  V_h = max_k Q_h(k)

(:func:`backward_plan`). :func:`slate_value` is the exact expected reward of any slate, and
:func:`performance_difference` the per-step regret terms ``V*_h − Q*_h(k_h)`` whose sum over the
displayed steps is an unbiased estimate of ``V*_1 − V^π_1`` for closed-loop policies
(docs/maths/cascade.md §3).

Common random numbers
---------------------
:meth:`CascadeEnv.rollout` pre-draws the contexts ``(T, N, d)`` and one uniform ``U_{t,n,h}``
per (episode, user, step) from two child streams: a displayed arm is clicked iff
``U < σ(zᵀθ)``. Every policy run on the same rollout sees the same users and the same noise;
the optimal values ``V*_1(x_{t,n})`` are part of the rollout, so regret is exact.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import expit

from hierbandit._validation import (
    MAX_ABS,
    _as_float_array,
    as_generator,
    check_choice,
    check_positive_int,
    check_vector,
)

__all__ = [
    "PRESETS",
    "CascadeEnv",
    "CascadeRollout",
    "backward_plan",
    "check_rewards",
    "performance_difference",
    "simulate_episode",
    "slate_value",
]

#: the reproduction configuration (docs/cascading.md, "The environment"): d = K = 5, H = 3,
#: e = linspace(1, 3, K), arm intercepts α = linspace(0.5, −2.5, K), θ_x = u/‖u‖ with
#: u ~ N(0, I_d) drawn per seed
PRESETS: dict[str, dict[str, Any]] = {
    "mccb-repro": {
        "horizon": 3,
        "n_arms": 5,
        "n_features": 5,
        "rewards": "linspace",
        "intercepts": "linspace",
    },
    # Laplace vs NUTS (docs/cascading.md, "The Bayesian side"): d = K = H = 3, N = 10,
    # θ* = [u/√d; linspace(0.5, −1.5, K)]
    "mccb-bayes": {
        "horizon": 3,
        "n_arms": 3,
        "n_features": 3,
        "rewards": "linspace",
        "intercepts": (0.5, -1.5),
        "theta_x_scale": "sqrt_d",
    },
}


# ---------------------------------------------------------------------- checks
def check_rewards(value: Any, n_arms: int, name: str = "rewards") -> np.ndarray:
    """A length-``K`` vector of finite, strictly positive click rewards ``e_k``."""
    e = check_vector(value, n_arms, name)
    if np.any(e <= 0):
        raise ValueError(f"{name} must be > 0 for every arm (e_k > 0), got {e.tolist()}")
    return e


def _check_probs(P: Any, name: str = "P") -> np.ndarray:
    P = _as_float_array(P, name)
    if P.ndim < 1 or P.shape[-1] < 1:
        raise ValueError(f"{name} must have a trailing arm axis, got shape {P.shape}")
    if not np.all(np.isfinite(P)) or np.any(P < 0) or np.any(P > 1):
        raise ValueError(f"{name} must hold probabilities in [0, 1] (no NaN)")
    return P


def _check_slates(slates: Any, n_arms: int, name: str = "slates") -> np.ndarray:
    arr = np.asarray(slates)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer arm ids, got dtype {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{name} must have a trailing step axis, got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= n_arms):
        raise ValueError(f"{name} holds unknown arms: ids must be in [0, {n_arms})")
    return arr.astype(np.int64)


# ---------------------------------------------------------------------- planning
def backward_plan(P: Any, rewards: Any, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Backward planning (Algorithm 2), vectorised over every leading axis.

    See docs/maths/cascade.md §3.

    Parameters
    ----------
    P : array_like, shape (..., K)
        Click probabilities ``f_k(x)`` of each context (true or estimated).
    rewards : array_like, shape (K,)
        Click rewards ``e_k > 0``.
    horizon : int
        Session length ``H >= 1``.

    Returns
    -------
    Q : numpy.ndarray, shape (..., H, K)
        ``Q_h(x, k) = f_k e_k + (1 − f_k) V_{h+1}(x)`` for ``h = 1..H`` (index ``h − 1``).
    V : numpy.ndarray, shape (..., H + 1)
        ``V_h = max_k Q_h``, with ``V[..., H] = V_{H+1} = 0``.

    Notes
    -----
    The table is computed once per context (docs/cascading.md A9): θ is fixed within an episode,
    so the paper's recomputation at every step gives identical values. The greedy slate is
    ``Q.argmax(-1)`` (lowest index on ties). Proposition 4.1 (unimodality in ``k``) is false in
    general (docs/cascading.md A12), so the maximum is always taken over every arm.
    """
    P = _check_probs(P)
    K = P.shape[-1]
    e = check_rewards(rewards, K)
    H = check_positive_int(horizon, "horizon")
    return backward_plan_unchecked(P, e, H)


def backward_plan_unchecked(
    P: np.ndarray, e: np.ndarray, H: int, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Unchecked :func:`backward_plan`; with ``allowed`` (a boolean mask of the shape of ``P``,
    at least one arm per context) the plan of a user who may only be shown the allowed arms:
    ``V_h`` is the maximum of ``Q_h`` over them (``Q`` is still computed for every arm)."""
    lead = P.shape[:-1]
    K = P.shape[-1]
    Q = np.empty((*lead, H, K))
    V = np.zeros((*lead, H + 1))
    r = P * e
    one_minus = 1.0 - P
    for h in range(H - 1, -1, -1):
        q = Q[..., h, :]
        np.multiply(one_minus, V[..., h + 1, None], out=q)
        q += r
        if allowed is None:
            V[..., h] = q.max(axis=-1)
        else:
            V[..., h] = np.where(allowed, q, -np.inf).max(axis=-1)
    return Q, V


def slate_value(P: Any, rewards: Any, slates: Any) -> np.ndarray:
    """Exact expected reward of a slate (docs/maths/cascade.md §3):
    ``V(slate; x) = Σ_h e_{k_h} f_{k_h}(x) Π_{j<h} (1 − f_{k_j}(x))``.

    Parameters
    ----------
    P : array_like, shape (..., K)
        True click probabilities of each context.
    rewards : array_like, shape (K,)
    slates : array_like of int, shape (..., H)
        Arm shown at each step if the user has not clicked before.

    Returns
    -------
    numpy.ndarray, shape (...)
    """
    P = _check_probs(P)
    K = P.shape[-1]
    e = check_rewards(rewards, K)
    s = _check_slates(slates, K)
    if s.shape[:-1] != P.shape[:-1]:
        raise ValueError(
            f"slates must have shape {(*P.shape[:-1], 'H')} (one slate per context), got {s.shape}"
        )
    return slate_value_unchecked(P, e, s)


def slate_value_unchecked(P: np.ndarray, e: np.ndarray, slates: np.ndarray) -> np.ndarray:
    f = np.take_along_axis(P, slates, axis=-1)
    survive = np.cumprod(1.0 - f, axis=-1)
    reach = np.concatenate([np.ones_like(f[..., :1]), survive[..., :-1]], axis=-1)
    return np.sum(e[slates] * f * reach, axis=-1)


def performance_difference(Q_star: np.ndarray, V_star: np.ndarray, arms: np.ndarray) -> np.ndarray:
    """Per-step regret terms ``V*_h − Q*_h(k_h)`` of the displayed steps.

    See docs/maths/cascade.md §3.

    Parameters
    ----------
    Q_star : numpy.ndarray, shape (..., H, K)
        True ``Q*`` of each context (from :func:`backward_plan` on the true probabilities).
    V_star : numpy.ndarray, shape (..., H + 1)
    arms : numpy.ndarray of int, shape (..., H)
        Displayed arms, ``-1`` where nothing was displayed.

    Returns
    -------
    numpy.ndarray, shape (...)
        ``Σ_{h displayed} (V*_h − Q*_h(k_h))``: its expectation is ``V*_1 − V^π_1``, and for a
        fixed slate its exact expectation equals ``V*_1 − V(slate)``.
    """
    shown = arms >= 0
    q = np.take_along_axis(Q_star, np.where(shown, arms, 0)[..., None], axis=-1)[..., 0]
    gap = V_star[..., :-1] - q
    return np.sum(np.where(shown, gap, 0.0), axis=-1)


def simulate_episode(
    probs: np.ndarray, uniforms: np.ndarray, select: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Run one episode of the cascade for ``N`` users in parallel (step by step).

    Parameters
    ----------
    probs : numpy.ndarray, shape (N, K)
        True click probabilities.
    uniforms : numpy.ndarray, shape (N, H)
        Pre-drawn uniforms: a displayed arm ``k`` at step ``h`` is clicked iff
        ``uniforms[n, h] < probs[n, k]``.
    select : callable ``(h, active) -> arms (N,)``
        The policy's choice at step ``h`` (0-based) for every user; only active users' arms are
        displayed.

    Returns
    -------
    arms : numpy.ndarray of int, shape (N, H)
        Displayed arms, ``-1`` after a user's click (the cascade rule: every displayed item up
        to and including the click, nothing after).
    clicks : numpy.ndarray of int8, shape (N, H)
        1 at the clicked position.
    """
    N, H = uniforms.shape
    arms = np.full((N, H), -1, dtype=np.int64)
    clicks = np.zeros((N, H), dtype=np.int8)
    active = np.ones(N, dtype=bool)
    rows = np.arange(N)
    for h in range(H):
        if not active.any():
            break
        k = select(h, active)
        arms[active, h] = k[active]
        click = active & (uniforms[:, h] < probs[rows, k])
        clicks[click, h] = 1
        active &= ~click
    return arms, clicks


# ---------------------------------------------------------------------- rollout
class CascadeRollout(NamedTuple):
    """Everything random about one run of :class:`CascadeEnv`, drawn in advance.

    Attributes
    ----------
    contexts : numpy.ndarray, shape (T, N, d)
    uniforms : numpy.ndarray, shape (T, N, H)
        Click uniforms: arm ``k`` displayed to user ``n`` at step ``h`` of episode ``t`` is
        clicked iff ``uniforms[t, n, h] < click_prob[t, n, k]``.
    click_prob : numpy.ndarray, shape (T, N, K)
        True ``σ(z_{x,k}ᵀθ)``.
    optimal_value : numpy.ndarray, shape (T, N)
        ``V*_1(x_{t,n})`` by exact backward planning.
    optimal_slate : numpy.ndarray of int, shape (T, N, H)
        The optimal open-loop slate (lowest index on ties).
    """

    contexts: np.ndarray
    uniforms: np.ndarray
    click_prob: np.ndarray
    optimal_value: np.ndarray
    optimal_slate: np.ndarray

    @property
    def n_episodes(self) -> int:
        """Number of episodes ``T``."""
        return int(self.contexts.shape[0])


# ---------------------------------------------------------------------- environment
def _linspace_or_vector(value: Any, n: int, name: str, default: tuple[float, float]) -> np.ndarray:
    if isinstance(value, str):
        check_choice(value, ("linspace",), name)
        return np.linspace(default[0], default[1], n)
    if isinstance(value, tuple) and len(value) == 2:
        a, b = (float(v) for v in value)
        return np.linspace(a, b, n)
    return check_vector(value, n, name)


class CascadeEnv:
    """Multi-user contextual cascading bandit with a logistic click model (Park & Jia 2025, §3).

    Parameters
    ----------
    n_users : int
        ``N``, user contexts per episode.
    horizon : int
        ``H >= 1``, maximum displays per session.
    n_arms : int
        ``K``.
    n_features : int
        ``d``.
    rewards : "linspace" or array_like, shape (K,)
        Click rewards ``e_k > 0``; ``"linspace"`` (default) is ``linspace(1, 3, K)``
        (docs/cascading.md).
    intercepts : "linspace", (first, last) or array_like, shape (K,)
        Arm intercepts ``α`` (the one-hot block of θ); ``"linspace"`` (default) is
        ``linspace(0.5, −2.5, K)`` (every arm is optimal for some contexts; docs/cascading.md).
    theta_x : array_like, shape (d,), optional
        Context coefficients. Default: ``u/‖u‖·scale`` with ``u ~ N(0, I_d)`` drawn from ``rng``
        (so ``xᵀθ_x ~ N(0, scale²)`` for Gaussian contexts); :meth:`clone` redraws it.
    theta : array_like, shape (d + K,), optional
        The whole ``θ = [θ_x; α]``; overrides ``theta_x`` and ``intercepts``.
    theta_x_scale : float or "sqrt_d"
        ``scale`` above (default 1; ``"sqrt_d"`` gives ``u/√d``, the ``"mccb-bayes"`` setting).
    contexts : {"gaussian"}
        ``x ~ N(0, I_d)`` i.i.d. (assumption A2 and the paper's experiments).
    rng
        Seed or Generator for the parameter draw and the default rollout stream.

    Attributes
    ----------
    theta : numpy.ndarray, shape (d + K,)
        ``[θ_x; α]`` (read-only).
    rewards : numpy.ndarray, shape (K,)

    Examples
    --------
    >>> env = CascadeEnv.preset("mccb-repro", n_users=10, rng=0)
    >>> roll = env.rollout(5, rng=1)
    >>> roll.contexts.shape, roll.optimal_value.shape
    ((5, 10, 5), (5, 10))
    """

    def __init__(
        self,
        n_users: int = 10,
        horizon: int = 3,
        n_arms: int = 5,
        n_features: int = 5,
        *,
        rewards: Any = "linspace",
        intercepts: Any = "linspace",
        theta_x: Any = None,
        theta: Any = None,
        theta_x_scale: Any = 1.0,
        contexts: str = "gaussian",
        rng: Any = None,
    ) -> None:
        N = check_positive_int(n_users, "n_users")
        H = check_positive_int(horizon, "horizon")
        K = check_positive_int(n_arms, "n_arms")
        d = check_positive_int(n_features, "n_features")
        if isinstance(rewards, str):
            check_choice(rewards, ("linspace",), "rewards")
            e = np.linspace(1.0, 3.0, K)
        else:
            e = check_rewards(rewards, K)
        check_choice(contexts, ("gaussian",), "contexts")
        if isinstance(theta_x_scale, str):
            check_choice(theta_x_scale, ("sqrt_d",), "theta_x_scale")
            scale = 1.0 / np.sqrt(d)
        else:
            if isinstance(theta_x_scale, bool) or not isinstance(theta_x_scale, numbers.Real):
                raise TypeError("theta_x_scale must be a real number or 'sqrt_d'")
            scale = float(theta_x_scale)
            if not np.isfinite(scale) or scale < 0:
                raise ValueError(f"theta_x_scale must be finite and >= 0, got {scale}")
        gen = as_generator(rng)
        if theta is not None:
            th = check_vector(theta, d + K, "theta")
            fixed = True
        else:
            alpha = _linspace_or_vector(intercepts, K, "intercepts", (0.5, -2.5))
            if theta_x is not None:
                tx = check_vector(theta_x, d, "theta_x")
                fixed = True
            else:
                u = gen.standard_normal(d)
                tx = u / np.linalg.norm(u) * scale
                fixed = False
            th = np.concatenate([tx, alpha])
        self.n_users, self.horizon, self.n_arms, self.n_features = N, H, K, d
        self.rewards = e
        self.theta = th
        self.fixed_parameters = fixed
        self.contexts = contexts
        self.theta_x_scale = theta_x_scale
        self._theta_x_given = theta_x
        self._theta_given = theta
        self.rng = rng
        self._rng = gen
        self.rewards.flags.writeable = False
        self.theta.flags.writeable = False

    # ------------------------------------------------------------------ construction
    @classmethod
    def preset(cls, name: str = "mccb-repro", **overrides: Any) -> CascadeEnv:
        """An environment from :data:`PRESETS` (``"mccb-repro"``: the reproduction;
        ``"mccb-bayes"``: the Laplace-vs-NUTS check; docs/cascading.md), with any constructor
        argument overridden (e.g. ``n_users``, ``rng``)."""
        check_choice(name, tuple(PRESETS), "name")
        kwargs = dict(PRESETS[name])
        kwargs.update(overrides)
        return cls(**kwargs)

    def get_params(self) -> dict[str, Any]:
        """Constructor arguments (scikit-learn style)."""
        return {
            "n_users": self.n_users,
            "horizon": self.horizon,
            "n_arms": self.n_arms,
            "n_features": self.n_features,
            "rewards": self.rewards.copy(),
            "intercepts": self.theta[self.n_features :].copy(),
            "theta_x": None if self._theta_x_given is None else self.theta[: self.n_features],
            "theta": None if self._theta_given is None else self.theta.copy(),
            "theta_x_scale": self.theta_x_scale,
            "contexts": self.contexts,
            "rng": self.rng,
        }

    def clone(self, rng: Any = None, **overrides: Any) -> CascadeEnv:
        """The same configuration with ``θ_x`` redrawn from ``rng`` (kept if it was given)."""
        params = self.get_params()
        params["rng"] = rng
        params.update(overrides)
        return type(self)(**params)

    # ------------------------------------------------------------------ model
    def click_probabilities(self, contexts: Any) -> np.ndarray:
        """True ``σ([x; onehot(k)]ᵀθ)`` for contexts ``(..., d)``; returns ``(..., K)``."""
        X = self._check_contexts(contexts)
        return self._click_prob(X)

    def _click_prob(self, X: np.ndarray) -> np.ndarray:
        d = self.n_features
        return expit((X @ self.theta[:d])[..., None] + self.theta[d:])

    def plan(self, contexts: Any) -> tuple[np.ndarray, np.ndarray]:
        """Exact ``Q*`` ``(..., H, K)`` and ``V*`` ``(..., H + 1)`` of contexts ``(..., d)``."""
        X = self._check_contexts(contexts)
        return backward_plan_unchecked(self._click_prob(X), self.rewards, self.horizon)

    def optimal_value(self, contexts: Any) -> np.ndarray:
        """``V*_1(x)`` for contexts ``(..., d)``."""
        return self.plan(contexts)[1][..., 0]

    def value(self, contexts: Any, slates: Any) -> np.ndarray:
        """Exact expected reward of ``slates (..., H)`` for contexts ``(..., d)``."""
        X = self._check_contexts(contexts)
        s = _check_slates(slates, self.n_arms)
        if s.shape != (*X.shape[:-1], self.horizon):
            raise ValueError(
                f"slates must have shape {(*X.shape[:-1], self.horizon)}, got {s.shape}"
            )
        return slate_value_unchecked(self._click_prob(X), self.rewards, s)

    def regret(self, contexts: Any, slates: Any) -> np.ndarray:
        """Exact pseudo-regret ``V*_1(x) − V(slate; x)`` of open-loop slates."""
        return self.optimal_value(contexts) - self.value(contexts, slates)

    def _check_contexts(self, contexts: Any) -> np.ndarray:
        X = _as_float_array(contexts, "contexts")
        if X.ndim < 1 or X.shape[-1] != self.n_features:
            raise ValueError(
                f"contexts must have shape (..., {self.n_features}) (d = {self.n_features}), "
                f"got {X.shape}"
            )
        if not np.all(np.isfinite(X)):
            raise ValueError("contexts must be finite (no NaN or inf)")
        if X.size and np.max(np.abs(X)) > MAX_ABS:
            raise ValueError(f"contexts must have magnitude <= {MAX_ABS:g}")
        return X

    # ------------------------------------------------------------------ randomness
    def rollout(self, n_episodes: int, rng: Any = None, *, n_users: int | None = None) -> Any:
        """Pre-draw the contexts and click uniforms of ``n_episodes`` episodes (common random
        numbers), with the optimal values.

        Parameters
        ----------
        n_episodes
            ``T``.
        rng
            Seed or Generator; contexts and uniforms come from two child streams, so a shorter
            rollout from the same seed is a prefix of a longer one. ``None`` uses the
            environment's own stream.
        n_users
            Users per episode (default :attr:`n_users`).

        Returns
        -------
        CascadeRollout
        """
        T = check_positive_int(n_episodes, "n_episodes")
        N = self.n_users if n_users is None else check_positive_int(n_users, "n_users")
        gen = self._rng if rng is None else as_generator(rng)
        g_ctx, g_u = gen.spawn(2)
        X = g_ctx.standard_normal((T, N, self.n_features))
        U = g_u.random((T, N, self.horizon))
        P = self._click_prob(X)
        Q, V = backward_plan_unchecked(P, self.rewards, self.horizon)
        return CascadeRollout(
            contexts=X,
            uniforms=U,
            click_prob=P,
            optimal_value=V[..., 0],
            optimal_slate=Q.argmax(axis=-1),
        )

    def simulate_log(
        self,
        n_episodes: int,
        rng: Any = None,
        *,
        policy: Any = "uniform",
        feature_prefix: str = "x",
    ) -> pd.DataFrame:
        """A historical cascade log: one row per displayed position.

        The data of docs/cascading.md, "The Bayesian side".

        Parameters
        ----------
        n_episodes
            Episodes to simulate.
        rng
            Seed or Generator (contexts, click uniforms and the logging policy's draws).
        policy
            ``"uniform"`` (a uniformly random arm at each step, for identifiability) or a
            cascade policy (``start_episode``/``select``/``update``) that is run and trained.
        feature_prefix
            Context columns are ``f"{feature_prefix}{i}"``.

        Returns
        -------
        pandas.DataFrame
            Columns ``episode``, ``user``, ``position`` (0-based), ``arm``, ``click`` (0/1) and
            the context columns, in (episode, user, position) order; only displayed positions
            (every one up to and including the click) appear.
        """
        T = check_positive_int(n_episodes, "n_episodes")
        gen = self._rng if rng is None else as_generator(rng)
        g_roll, g_pol = gen.spawn(2)
        roll = self.rollout(T, g_roll)
        N, H, K = self.n_users, self.horizon, self.n_arms
        frames = []
        for t in range(T):
            X = roll.contexts[t]
            if isinstance(policy, str):
                check_choice(policy, ("uniform",), "policy")
                draws = g_pol.integers(K, size=(N, H))
                arms, clicks = simulate_episode(
                    roll.click_prob[t], roll.uniforms[t], lambda h, a, dr=draws: dr[:, h]
                )
            else:
                policy.start_episode(X)
                arms, clicks = simulate_episode(
                    roll.click_prob[t], roll.uniforms[t], policy._select
                )
                policy.update(X, arms, clicks)
            n_idx, h_idx = np.nonzero(arms >= 0)
            frame = {
                "episode": np.full(n_idx.size, t, dtype=np.int64),
                "user": n_idx.astype(np.int64),
                "position": h_idx.astype(np.int64),
                "arm": arms[n_idx, h_idx],
                "click": clicks[n_idx, h_idx].astype(np.int64),
            }
            for j in range(self.n_features):
                frame[f"{feature_prefix}{j}"] = X[n_idx, j]
            frames.append(pd.DataFrame(frame))
        return pd.concat(frames, ignore_index=True)

    def parameters(self) -> xr.Dataset:
        """``theta`` (param) with labels ``x0..``, ``arm0..`` and ``rewards`` (arm)."""
        d, K = self.n_features, self.n_arms
        labels = [f"x{i}" for i in range(d)] + [f"arm{k}" for k in range(K)]
        return xr.Dataset(
            {
                "theta": (("param",), np.array(self.theta)),
                "rewards": (("arm",), np.array(self.rewards)),
            },
            coords={"param": labels, "arm": np.arange(K)},
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_users={self.n_users}, horizon={self.horizon}, "
            f"n_arms={self.n_arms}, n_features={self.n_features})"
        )
