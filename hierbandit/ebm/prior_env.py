"""A hierarchical linear environment whose coefficients are drawn from a fitted prior.

The environments of the real-data experiments (the ebm paper's §7.2) and of the main job are
*semi-synthetic*: per-arm prior parameters (a shared mean β_{k0}, a covariance Σ_k and a noise
variance σ_k²) are estimated from real data, every seed draws fresh instance coefficients
β_{k,j} ~ N(β_{k0}, Σ_k), and the contexts are real rows resampled uniformly with replacement.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierbandit._validation import as_generator, check_matrix, check_positive_int
from hierbandit.ebm.env import HierarchicalLinearEnv

__all__ = ["PriorDrawnEnv", "env_from_prior"]


def _draw_coefficients(
    shared_mean: np.ndarray, Sigma: np.ndarray, n_instances: int, gen: np.random.Generator
) -> np.ndarray:
    """β_{k,j} ~ N(m_k, Σ_k), shape (K, N, d), through the eigen square root (PSD-safe)."""
    w, U = np.linalg.eigh(Sigma)
    root = U * np.sqrt(np.clip(w, 0.0, None))[:, None, :]  # (K, d, d): root @ rootᵀ = Σ
    z = gen.standard_normal((shared_mean.shape[0], n_instances, shared_mean.shape[1]))
    return shared_mean[:, None, :] + np.matmul(z, np.swapaxes(root, -1, -2))


class PriorDrawnEnv(HierarchicalLinearEnv):
    """A hierarchical linear environment whose coefficients are drawn from a fitted prior.

    Build one with :func:`env_from_prior`. Every :meth:`clone` (one per seed in
    :func:`~hierbandit.experiments.simulate`) draws fresh coefficients
    β_{k,j} ~ N(shared_mean_k, Σ_k) from the same prior, keeping the noise variances, the arrival
    probabilities and the context rows. ``shared_mean`` and ``Sigma`` are the prior's (not the
    sample moments of the drawn ``beta``); ``heterogeneity`` is ``"prior"``.
    """

    @classmethod
    def _draw(
        cls,
        shared_mean: np.ndarray,
        Sigma: np.ndarray,
        noise_var: np.ndarray,
        arrival_probs: np.ndarray,
        contexts: Any,
        rng: Any,
    ) -> PriorDrawnEnv:
        gen = as_generator(rng)
        beta = _draw_coefficients(shared_mean, Sigma, int(np.size(arrival_probs)), gen)
        env = cls.from_parameters(
            beta,
            noise_var,
            arrival_probs,
            contexts=contexts,
            shared_mean=shared_mean,
            Sigma=Sigma,
            rng=gen,
        )
        env.heterogeneity = "prior"
        return env

    def clone(self, rng: Any = None) -> PriorDrawnEnv:
        """A new environment with coefficients drawn afresh from the same prior."""
        return type(self)._draw(
            np.asarray(self.shared_mean),
            np.asarray(self.Sigma),
            np.asarray(self.noise_var),
            np.asarray(self.arrival_probs),
            self.contexts,
            rng,
        )


def env_from_prior(
    prior: Any,
    n_instances: int,
    contexts: Any,
    rng: Any = None,
    *,
    arrival_probs: Any = None,
) -> PriorDrawnEnv:
    """An environment generated from a fitted hierarchical prior.

    Parameters
    ----------
    prior : HierarchicalPrior
        Anything with ``shared_mean`` (K, d), ``Sigma`` (K, d, d) and ``sigma2`` (K,).
    n_instances : int
        Number of instances N.
    contexts : array_like, shape (M, d) or str
        Context rows resampled uniformly with replacement (e.g. the log's real rows), or a
        context-distribution name of :class:`~hierbandit.ebm.HierarchicalLinearEnv`.
    rng : seed or numpy.random.Generator, optional
        Stream of the coefficient draw (and the environment's default rollout stream).
    arrival_probs : array_like, shape (N,), optional
        Arrival probabilities; default uniform.

    Returns
    -------
    PriorDrawnEnv
        N instances, K arms, d features; β_{k,j} ~ N(shared_mean_k, Σ_k) independently, noise
        variances ``prior.sigma2``; each ``clone(rng)`` redraws the coefficients.

    Raises
    ------
    ValueError, TypeError
        On inconsistent prior shapes, a non-PSD Σ_k, a bad ``n_instances``, ``contexts`` or
        ``arrival_probs``.
    """
    n_instances = check_positive_int(n_instances, "n_instances")
    try:
        m = np.asarray(prior.shared_mean, dtype=float)
        Sigma = np.asarray(prior.Sigma, dtype=float)
        s2 = np.asarray(prior.sigma2, dtype=float)
    except AttributeError as exc:
        raise TypeError("prior must provide shared_mean, Sigma and sigma2 arrays") from exc
    m = check_matrix(m, (None, None), "prior.shared_mean")
    K, d = m.shape
    if Sigma.shape != (K, d, d) or s2.shape != (K,):
        raise ValueError(
            f"prior arrays disagree: shared_mean {m.shape}, Sigma {Sigma.shape} (want "
            f"{(K, d, d)}), sigma2 {s2.shape} (want {(K,)})"
        )
    probs = np.full(n_instances, 1.0 / n_instances) if arrival_probs is None else arrival_probs
    return PriorDrawnEnv._draw(m, Sigma, s2, probs, contexts, rng)
