"""The ebm paper's synthetic hierarchical linear multi-bandit environment.

``N`` bandit instances share ``K`` arms. At every round an instance ``Z_t ~ Categorical(p)``
arrives with a context ``x_t`` shared by all arms; pulling arm ``k`` pays
``x_tᵀ β_{k,Z_t} + ε``, ``ε ~ N(0, σ_k²)`` (docs/ebm.md, "The model"; the paper's §7.1).

Common random numbers (docs/decisions/ebm.md §4): :meth:`HierarchicalLinearEnv.rollout` pre-draws
everything random about a run — arrivals, contexts and a noise table ``ε[t, k]`` — so every policy
run on the same :class:`Rollout` faces the same instances and contexts, and the same action at
the same round pays the same reward.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import numpy as np
import xarray as xr

from hierbandit._validation import (
    _as_float_array,
    as_generator,
    check_choice,
    check_covariance,
    check_index,
    check_matrix,
    check_positive_int,
    check_scalar,
    check_vector,
)

__all__ = ["HierarchicalLinearEnv", "Rollout"]

_ARRIVALS = ("balanced", "data-poor")
_HETEROGENEITY = ("gaussian", "sparse")
_CONTEXTS = ("mixed-gaussian", "uniform")


class Rollout(NamedTuple):
    """Everything random about one run of an environment, drawn in advance.

    Attributes
    ----------
    instance : numpy.ndarray, shape (T,), int
        Arriving instance ``Z_t`` at each round.
    context : numpy.ndarray, shape (T, d)
        Context ``x_t`` (shared by all arms).
    noise : numpy.ndarray, shape (T, K)
        Noise table: the reward of arm ``k`` at round ``t`` is ``mean_reward[t, k] + noise[t, k]``.
    mean_reward : numpy.ndarray, shape (T, K)
        ``x_tᵀ β_{k, Z_t}``, the expected reward of every arm, so regret is exact.
    """

    instance: np.ndarray
    context: np.ndarray
    noise: np.ndarray
    mean_reward: np.ndarray

    @property
    def horizon(self) -> int:
        """Number of rounds ``T``."""
        return int(self.instance.shape[0])

    @property
    def reward(self) -> np.ndarray:
        """Realised reward of every arm at every round, shape ``(T, K)``."""
        return self.mean_reward + self.noise

    @property
    def optimal_arm(self) -> np.ndarray:
        """Oracle arm ``argmax_k x_tᵀ β_{k, Z_t}`` at each round (lowest index on ties)."""
        return self.mean_reward.argmax(axis=1)


def _check_probabilities(value: Any, n: int, name: str) -> np.ndarray:
    """A length-``n`` probability vector: finite, non-negative, summing to 1 (to 1e-8)."""
    p = check_vector(value, n, name)
    if np.any(p < 0):
        raise ValueError(f"{name} must be non-negative")
    if not np.isclose(p.sum(), 1.0, rtol=0.0, atol=1e-8):
        raise ValueError(f"{name} must sum to 1, got {p.sum():.10g}")
    return p / p.sum()


def _check_noise(value: Any, n_arms: int, name: str) -> np.ndarray:
    """A non-negative scalar (broadcast to every arm) or a length-``n_arms`` vector."""
    if isinstance(value, numbers.Real) or (isinstance(value, np.ndarray) and value.ndim == 0):
        v = check_scalar(value, name, low=0.0)
        return np.full(n_arms, v)
    v = check_vector(value, n_arms, name)
    if np.any(v < 0):
        raise ValueError(f"{name} must be non-negative")
    return v


def _check_contexts(value: Any, n_features: int | None, name: str = "contexts") -> Any:
    """A context-distribution name, or a 2-D array of context rows resampled uniformly."""
    if isinstance(value, str):
        return check_choice(value, _CONTEXTS, name)
    if value is None:
        raise TypeError(f"{name} must be one of {_CONTEXTS} or a 2-D array of context rows")
    rows = check_matrix(value, (None, n_features), name)
    if rows.shape[0] == 0:
        raise ValueError(f"{name} must contain at least one row")
    rows.flags.writeable = False
    return rows


def arrival_probabilities(
    n_instances: int, arrival: Any = "balanced", *, poor_ratio: float = 0.1, n_poor: int = 1
) -> np.ndarray:
    """Arrival probabilities ``p`` of the ebm paper's settings (docs/decisions/ebm.md §4).

    Parameters
    ----------
    n_instances
        Number of instances ``N``.
    arrival
        ``"balanced"`` (``p_j = 1/N``), ``"data-poor"`` (the first ``n_poor`` instances arrive
        ``poor_ratio`` times as often as each of the others, which share equal probability), or
        an explicit probability vector of length ``N``.
    poor_ratio, n_poor
        Data-poor settings; with the defaults and ``N = 10``, ``p_0 = 1/91`` and ``p_j = 10/91``.

    Returns
    -------
    numpy.ndarray
        Probability vector of shape ``(N,)``.
    """
    n_instances = check_positive_int(n_instances, "n_instances")
    poor_ratio = check_scalar(poor_ratio, "poor_ratio", low=0.0, high=1.0, low_inclusive=False)
    n_poor = check_positive_int(n_poor, "n_poor")
    if isinstance(arrival, str):
        check_choice(arrival, _ARRIVALS, "arrival")
        if arrival == "balanced":
            return np.full(n_instances, 1.0 / n_instances)
        if n_poor >= n_instances:
            raise ValueError(
                f"n_poor must be < n_instances ({n_instances}) in the data-poor setting, "
                f"got {n_poor}"
            )
        w = np.ones(n_instances)
        w[:n_poor] = poor_ratio
        return w / w.sum()
    return _check_probabilities(arrival, n_instances, "arrival")


class HierarchicalLinearEnv:
    """Synthetic hierarchical linear multi-bandit of the ebm paper (§7.1).

    The settings' fill-ins are in docs/decisions/ebm.md §4.

    Parameters
    ----------
    n_instances, n_arms, n_features
        ``N`` instances, ``K`` arms shared by every instance, context dimension ``d``.
        The ebm paper's Figure 1 uses ``N = 10, K = 5, d = 3``.
    arrival
        ``"balanced"``, ``"data-poor"`` or an explicit probability vector of length ``N``; see
        :func:`arrival_probabilities`.
    heterogeneity
        How instance coefficients deviate from the arm's shared mean ``β_{k0} ~ N(0, I)``:

        * ``"gaussian"`` (ebm Fig. 1): per arm ``b_k ~ N(0, I)``, ``Σ_k = b_k b_kᵀ + I`` and
          ``β_{k,j} ~ N(β_{k0}, Σ_k)``;
        * ``"sparse"`` (ebm Fig. 2, docs/decisions/ebm.md §4): ``β_{k,j} = β_{k0} + δ_{k,j}``
          where ``δ_{k,j}`` has ``sparsity`` nonzero coordinates at uniformly random distinct
          positions, each ``N(0, 1)``. Then :attr:`Sigma` is the population covariance of ``δ``,
          ``(sparsity / d) I``.
    sparsity
        Number of nonzero coordinates of each ``δ_{k,j}`` (``0 <= sparsity <= d``); used only
        when ``heterogeneity="sparse"``.
    contexts
        ``"mixed-gaussian"`` (each coordinate independently ``N(-1, 1)`` or ``N(+1, 1)`` with
        probability 1/2: mean 0, variance 2), ``"uniform"`` (``U[-1, 1]`` per coordinate), or a
        2-D array of context rows ``(M, d)`` resampled uniformly with replacement.
    noise_sd
        Noise standard deviation ``σ_k``: a non-negative scalar for every arm (the paper uses 1)
        or a length-``K`` vector.
    poor_ratio, n_poor
        Data-poor arrival settings (ignored otherwise): the first ``n_poor`` instances arrive
        ``poor_ratio`` times as often as each other instance.
    rng
        Seed or :class:`numpy.random.Generator` the parameters are drawn from at construction.

    Attributes
    ----------
    beta : numpy.ndarray, shape (K, N, d)
        Instance coefficients ``β_{k,j}``.
    shared_mean : numpy.ndarray, shape (K, d)
        Arm-level shared means ``β_{k0}``.
    Sigma : numpy.ndarray, shape (K, d, d)
        Arm-level covariance of ``β_{k,j}`` around ``β_{k0}``.
    noise_var : numpy.ndarray, shape (K,)
        Noise variances ``σ_k²``.
    arrival_probs : numpy.ndarray, shape (N,)
        Arrival probabilities ``p_j``.

    Notes
    -----
    One environment object holds one draw of the parameters; :meth:`clone` draws a fresh one
    with the same configuration (one per seed in :func:`hierbandit.experiments.simulate`).
    Environments made by :meth:`from_parameters` hold fixed parameters, which :meth:`clone`
    keeps.
    """

    def __init__(
        self,
        n_instances: int = 10,
        n_arms: int = 5,
        n_features: int = 3,
        *,
        arrival: str | Any = "balanced",
        heterogeneity: str = "gaussian",
        sparsity: int = 1,
        contexts: str | Any = "mixed-gaussian",
        noise_sd: float | Any = 1.0,
        poor_ratio: float = 0.1,
        n_poor: int = 1,
        rng: Any = None,
    ) -> None:
        n_instances = check_positive_int(n_instances, "n_instances")
        n_arms = check_positive_int(n_arms, "n_arms")
        n_features = check_positive_int(n_features, "n_features")
        probs = arrival_probabilities(n_instances, arrival, poor_ratio=poor_ratio, n_poor=n_poor)
        heterogeneity = check_choice(heterogeneity, _HETEROGENEITY, "heterogeneity")
        sparsity = check_positive_int(sparsity, "sparsity", minimum=0)
        if sparsity > n_features:
            raise ValueError(f"sparsity must be <= n_features ({n_features}), got {sparsity}")
        context_spec = _check_contexts(contexts, n_features)
        noise_sd_arr = _check_noise(noise_sd, n_arms, "noise_sd")
        gen = as_generator(rng)

        self.n_instances = n_instances
        self.n_arms = n_arms
        self.n_features = n_features
        self.arrival = arrival if isinstance(arrival, str) else probs.copy()
        self.heterogeneity = heterogeneity
        self.sparsity = sparsity
        self.contexts = context_spec
        self.noise_sd = noise_sd if np.ndim(noise_sd) == 0 else noise_sd_arr.copy()
        self.poor_ratio = float(poor_ratio)
        self.n_poor = int(n_poor)
        self.rng = rng
        self.fixed_parameters = False
        self.arrival_probs = probs
        self.noise_var = noise_sd_arr**2
        self._rng = gen
        self.shared_mean, self.Sigma, self.beta = self._draw_parameters(gen)
        self._freeze()

    # ------------------------------------------------------------------ construction helpers
    def _draw_parameters(self, gen: np.random.Generator) -> tuple[np.ndarray, ...]:
        K, N, d = self.n_arms, self.n_instances, self.n_features
        shared_mean = gen.standard_normal((K, d))
        if self.heterogeneity == "gaussian":
            b = gen.standard_normal((K, d))
            Sigma = b[:, :, None] * b[:, None, :] + np.eye(d)
            L = np.linalg.cholesky(Sigma)
            z = gen.standard_normal((K, N, d))
            beta = shared_mean[:, None, :] + np.einsum("kde,kne->knd", L, z)
        else:
            s = self.sparsity
            positions = np.argsort(gen.random((K, N, d)), axis=-1)[..., :s]
            values = gen.standard_normal((K, N, s))
            delta = np.zeros((K, N, d))
            np.put_along_axis(delta, positions, values, axis=-1)
            beta = shared_mean[:, None, :] + delta
            Sigma = np.broadcast_to((s / d) * np.eye(d), (K, d, d)).copy()
        return shared_mean, Sigma, beta

    def _freeze(self) -> None:
        for arr in (self.beta, self.shared_mean, self.Sigma, self.noise_var, self.arrival_probs):
            arr.flags.writeable = False

    @classmethod
    def from_parameters(
        cls,
        beta: Any,
        noise_var: Any,
        arrival_probs: Any,
        *,
        contexts: str | Any = "mixed-gaussian",
        shared_mean: Any = None,
        Sigma: Any = None,
        rng: Any = None,
    ) -> HierarchicalLinearEnv:
        """An environment with fixed, given parameters.

        Parameters
        ----------
        beta : array_like, shape (K, N, d)
            Instance coefficients ``β_{k,j}``.
        noise_var : float or array_like, shape (K,)
            Noise variances ``σ_k²`` (non-negative).
        arrival_probs : array_like, shape (N,)
            Arrival probabilities (non-negative, summing to 1).
        contexts
            ``"mixed-gaussian"``, ``"uniform"`` or a ``(M, d)`` array of context rows resampled
            uniformly with replacement.
        shared_mean : array_like, shape (K, d), optional
            Arm-level means, for the record (:meth:`parameters`); default the mean of ``beta``
            over instances.
        Sigma : array_like, shape (K, d, d), optional
            Arm-level covariances, for the record; default the covariance of ``beta`` over
            instances (divisor ``N``).
        rng
            Default random stream of :meth:`rollout` when it is given none.

        Returns
        -------
        HierarchicalLinearEnv
            ``heterogeneity == "fixed"``; :meth:`clone` keeps these parameters.
        """
        beta_arr = _as_float_array(beta, "beta")
        if beta_arr.ndim != 3 or min(beta_arr.shape) < 1:
            raise ValueError(
                f"beta must be a non-empty 3-D array (arm, instance, feature), got shape "
                f"{beta_arr.shape}"
            )
        if not np.all(np.isfinite(beta_arr)):
            raise ValueError("beta must be finite (no NaN or inf)")
        K, N, d = beta_arr.shape
        nv = _check_noise(noise_var, K, "noise_var")
        probs = _check_probabilities(arrival_probs, N, "arrival_probs")
        context_spec = _check_contexts(contexts, d)
        if shared_mean is None:
            mean = beta_arr.mean(axis=1)
        else:
            mean = check_matrix(shared_mean, (K, d), "shared_mean")
        if Sigma is None:
            dev = beta_arr - beta_arr.mean(axis=1, keepdims=True)
            cov = np.einsum("knd,kne->kde", dev, dev) / N
        else:
            cov = check_covariance(Sigma, d, "Sigma", batch=K)

        self = cls.__new__(cls)
        self.n_instances, self.n_arms, self.n_features = N, K, d
        self.arrival = probs.copy()
        self.heterogeneity = "fixed"
        self.sparsity = None
        self.contexts = context_spec
        self.noise_sd = np.sqrt(nv)
        self.poor_ratio = None
        self.n_poor = None
        self.rng = rng
        self.fixed_parameters = True
        self.arrival_probs = probs
        self.noise_var = nv
        self._rng = as_generator(rng)
        self.shared_mean, self.Sigma, self.beta = mean, cov, beta_arr
        self._freeze()
        return self

    # ------------------------------------------------------------------ public API
    def get_params(self) -> dict[str, Any]:
        """The configuration of this environment (constructor arguments, scikit-learn style).

        For a fixed-parameter environment the configuration records ``heterogeneity="fixed"``
        and the arrival probabilities; the coefficients themselves are in :meth:`parameters`.
        """
        return {
            "n_instances": self.n_instances,
            "n_arms": self.n_arms,
            "n_features": self.n_features,
            "arrival": self.arrival,
            "heterogeneity": self.heterogeneity,
            "sparsity": self.sparsity,
            "contexts": self.contexts,
            "noise_sd": self.noise_sd,
            "poor_ratio": self.poor_ratio,
            "n_poor": self.n_poor,
            "rng": self.rng,
        }

    def clone(self, rng: Any = None) -> HierarchicalLinearEnv:
        """A new environment with the same configuration and parameters drawn from ``rng``.

        An environment made by :meth:`from_parameters` keeps its fixed parameters (only the
        default rollout stream changes).
        """
        if self.fixed_parameters:
            return type(self).from_parameters(
                self.beta,
                self.noise_var,
                self.arrival_probs,
                contexts=self.contexts,
                shared_mean=self.shared_mean,
                Sigma=self.Sigma,
                rng=rng,
            )
        params = self.get_params()
        params["rng"] = rng
        return type(self)(**params)

    def parameters(self) -> xr.Dataset:
        """The drawn parameters with named dimensions.

        Returns
        -------
        xarray.Dataset
            ``beta`` (arm, instance, feature), ``shared_mean`` (arm, feature), ``Sigma``
            ``(arm, feature, feature_)``, ``noise_var`` (arm) and ``arrival_probs`` (instance).
        """
        K, N, d = self.beta.shape
        contexts = self.contexts if isinstance(self.contexts, str) else "empirical"
        return xr.Dataset(
            {
                "beta": (("arm", "instance", "feature"), np.array(self.beta)),
                "shared_mean": (("arm", "feature"), np.array(self.shared_mean)),
                "Sigma": (("arm", "feature", "feature_"), np.array(self.Sigma)),
                "noise_var": (("arm",), np.array(self.noise_var)),
                "arrival_probs": (("instance",), np.array(self.arrival_probs)),
            },
            coords={
                "arm": np.arange(K),
                "instance": np.arange(N),
                "feature": np.arange(d),
                "feature_": np.arange(d),
            },
            attrs={
                "heterogeneity": self.heterogeneity,
                "contexts": contexts,
                "arrival": self.arrival if isinstance(self.arrival, str) else "explicit",
            },
        )

    def expected_reward(self, instance: int, context: Any) -> np.ndarray:
        """``x ᵀ β_{k, instance}`` for every arm ``k``, shape ``(K,)``."""
        j = check_index(instance, self.n_instances, "instance")
        x = check_vector(context, self.n_features, "context")
        return self.beta[:, j, :] @ x

    def sample_contexts(self, size: int, rng: Any = None) -> np.ndarray:
        """Draw ``size`` i.i.d. contexts, shape ``(size, d)``."""
        size = check_positive_int(size, "size", minimum=0)
        gen = self._rng if rng is None else as_generator(rng)
        a, b = gen.spawn(2)
        return self._draw_contexts(a, b, size)

    def _draw_contexts(
        self, gen_a: np.random.Generator, gen_b: np.random.Generator, size: int
    ) -> np.ndarray:
        d = self.n_features
        if isinstance(self.contexts, np.ndarray):
            return self.contexts[gen_a.integers(self.contexts.shape[0], size=size)].copy()
        if self.contexts == "uniform":
            return gen_b.uniform(-1.0, 1.0, size=(size, d))
        # mixed Gaussian: component sign from stream a, standard normal from stream b
        signs = np.where(gen_a.random((size, d)) < 0.5, -1.0, 1.0)
        return signs + gen_b.standard_normal((size, d))

    def rollout(self, horizon: int, rng: Any = None) -> Rollout:
        """Pre-draw the arrivals, contexts and noise table of a run (common random numbers).

        Parameters
        ----------
        horizon
            Number of rounds ``T``.
        rng
            Seed or Generator. Arrivals, the two context components and the noise each come
            from their own child stream, so a shorter rollout from the same seed is a prefix of
            a longer one. ``None`` uses the environment's own stream (each call differs).

        Returns
        -------
        Rollout
            ``instance`` (T,), ``context`` (T, d), ``noise`` (T, K) and ``mean_reward`` (T, K).
        """
        T = check_positive_int(horizon, "horizon")
        gen = self._rng if rng is None else as_generator(rng)
        g_arrival, g_ctx_a, g_ctx_b, g_noise = gen.spawn(4)
        cdf = np.cumsum(self.arrival_probs)
        cdf[-1] = 1.0
        inst = np.searchsorted(cdf, g_arrival.random(T), side="right").astype(np.int64)
        np.minimum(inst, self.n_instances - 1, out=inst)
        X = self._draw_contexts(g_ctx_a, g_ctx_b, T)
        noise = g_noise.standard_normal((T, self.n_arms)) * np.sqrt(self.noise_var)
        mean = np.empty((T, self.n_arms))
        for j in range(self.n_instances):
            rows = inst == j
            if rows.any():
                # elementwise product + reduction (not BLAS): each row's value does not depend
                # on the batch size, so a shorter rollout is an exact prefix of a longer one
                mean[rows] = (X[rows][:, None, :] * self.beta[None, :, j, :]).sum(axis=-1)
        return Rollout(instance=inst, context=X, noise=noise, mean_reward=mean)

    def __repr__(self) -> str:
        contexts = self.contexts if isinstance(self.contexts, str) else "empirical"
        arrival = self.arrival if isinstance(self.arrival, str) else "explicit"
        return (
            f"{type(self).__name__}(n_instances={self.n_instances}, n_arms={self.n_arms}, "
            f"n_features={self.n_features}, arrival={arrival!r}, "
            f"heterogeneity={self.heterogeneity!r}, contexts={contexts!r})"
        )
