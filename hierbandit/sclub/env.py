"""Environments of the online clustering-of-bandits experiments (SCLUB §5).

At every round a user ``i_t ~ p`` arrives, ``L`` items are drawn i.i.d. to form the candidate set
``D_t``, and recommending item ``x`` pays a reward with mean ``θ_{i_t}ᵀx`` (SCLUB §2).

Items and weight vectors follow the paper's construction (SCLUB Eq. 3): draw ``d − 1``
i.i.d. N(0, 1) entries, normalise, append 1 and divide by √2,

    x ↦ (x / (√2 ‖x‖), 1/√2),

so ‖x‖ = ‖θ‖ = 1 and every mean θᵀx = (1 + cos)/2 lies in [0, 1]. For these items the minimum
eigenvalue of E[xxᵀ] is λ_x = 1/(2(d − 1)).

* :class:`ClusteredLinearEnv` — the synthetic setting: ``n_users`` users in ``n_clusters`` equal
  contiguous blocks sharing one θ per block, with the user-frequency settings (1a) uniform,
  (1b) ``"half"`` (p⁰ ~ Dir(1_m) over clusters, p_i = p⁰_j / n_j) and (1c) ``"arbitrary"``
  (p ~ Dir(1_{n_u}) over users), as in the authors' reference code.
* :class:`MovieLensEnv` — the real-data setting: user vectors from the shipped MovieLens ratings
  by the paper's preprocessing (:func:`movielens_user_vectors`), synthetic items.

Rewards are Bernoulli(θᵀx) (the reference code's model, R = 1/2) or Gaussian θᵀx + N(0, σ²).

Common random numbers: :meth:`rollout` pre-draws everything random about a run from three
independent child streams of the rollout generator — arrivals (one uniform per round mapped
through the cumulative frequencies), items (standard normals) and per-round reward noise (a
uniform for Bernoulli rewards, reward = 1 iff ``noise < mean``; a normal for Gaussian rewards) —
so every policy run on the same rollout sees the same users, items and noise, and the same
recommendation at the same round pays the same reward. :meth:`rollout_chunks` yields the same
rounds in blocks (bit for bit, whatever the block size), which keeps memory bounded at the
paper's horizon of 2²⁰ − 1 rounds.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import xarray as xr

from hierbandit._extras import require
from hierbandit._validation import (
    as_generator,
    check_choice,
    check_positive_int,
    check_scalar,
    check_vector,
)

__all__ = [
    "ClusteredLinearEnv",
    "ClusteredRollout",
    "MovieLensEnv",
    "frequency_vector",
    "movielens_user_vectors",
    "paper_vectors",
    "transform_eq3",
]

_FREQUENCIES = ("uniform", "half", "arbitrary")
_REWARDS = ("bernoulli", "gaussian")


class ClusteredRollout(NamedTuple):
    """Everything random about (a block of) one run, drawn in advance.

    Attributes
    ----------
    users : ndarray of int64, shape (T,)
        Arriving user per round.
    items : ndarray, shape (T, L, d)
        Candidate items per round.
    noise : ndarray, shape (T,)
        Reward noise per round (uniform for Bernoulli rewards, additive for Gaussian ones).
    means : ndarray, shape (T, L)
        Expected reward θ_{i_t}ᵀx of every candidate.
    """

    users: np.ndarray
    items: np.ndarray
    noise: np.ndarray
    means: np.ndarray

    @property
    def horizon(self) -> int:
        """Number of rounds in the block."""
        return int(self.users.shape[0])

    @property
    def optimal_item(self) -> np.ndarray:
        """Index of the best candidate per round (lowest index on ties)."""
        return self.means.argmax(axis=1)

    @property
    def best_mean(self) -> np.ndarray:
        """Expected reward of the best candidate per round."""
        return self.means.max(axis=1)


def transform_eq3(v: Any) -> np.ndarray:
    """SCLUB Eq. (3): each row v ↦ (v / (√2‖v‖), 1/√2), giving unit vectors of dimension
    ``v.shape[-1] + 1``."""
    v = np.asarray(v, dtype=float)
    if v.ndim < 1 or v.shape[-1] < 1:
        raise ValueError("v must have at least one coordinate per row")
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    if np.any(norm == 0) or not np.all(np.isfinite(v)):
        raise ValueError("v must have finite, nonzero rows")
    head = v / (np.sqrt(2.0) * norm)
    tail = np.full((*v.shape[:-1], 1), 1.0 / np.sqrt(2.0))
    return np.concatenate([head, tail], axis=-1)


def paper_vectors(n: int, n_features: int, rng: Any = None) -> np.ndarray:
    """``n`` vectors of the paper's construction: N(0, I_{d−1}) draws through Eq. (3)."""
    n = check_positive_int(n, "n")
    d = check_positive_int(n_features, "n_features", minimum=2)
    g = as_generator(rng)
    return transform_eq3(g.standard_normal((n, d - 1)))


def frequency_vector(
    frequency: Any, n_users: int, labels: np.ndarray | None = None, rng: Any = None
) -> np.ndarray:
    """User-frequency distribution ``p`` of SCLUB §5.

    Parameters
    ----------
    frequency : {"uniform", "half", "arbitrary"} or array_like
        (1a) ``"uniform"``: p_i = 1/n_u. (1b) ``"half"``: p⁰ ~ Dir(1_m) over the clusters of
        ``labels`` and p_i = p⁰_{j(i)} / n_{j(i)} (users of a cluster equally frequent). (1c)
        ``"arbitrary"``: p ~ Dir(1_{n_u}). Or an explicit probability vector.
    n_users : int
        Number of users.
    labels : ndarray of int, optional
        Cluster of each user (needed for ``"half"``).
    rng : seed or Generator
        Source of the Dirichlet draws.
    """
    n_users = check_positive_int(n_users, "n_users")
    if isinstance(frequency, str):
        check_choice(frequency, _FREQUENCIES, "frequency")
        if frequency == "uniform":
            return np.full(n_users, 1.0 / n_users)
        g = as_generator(rng)
        if frequency == "arbitrary":
            return g.dirichlet(np.ones(n_users))
        if labels is None:
            raise ValueError('frequency="half" needs cluster labels (no true clusters here)')
        labels = np.asarray(labels)
        k = int(labels.max()) + 1
        p0 = g.dirichlet(np.ones(k))
        sizes = np.bincount(labels, minlength=k)
        return p0[labels] / sizes[labels]
    p = check_vector(frequency, n_users, "frequency")
    if np.any(p < 0):
        raise ValueError("frequency must be non-negative")
    if not np.isclose(p.sum(), 1.0, rtol=0.0, atol=1e-8):
        raise ValueError(f"frequency must sum to 1, got {p.sum():.10g}")
    return p / p.sum()


def movielens_user_vectors(
    n_users: int = 500, n_movies: int = 1000, n_features: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """User weight vectors from the shipped MovieLens ratings by SCLUB's preprocessing.

    The paper's recipe (SCLUB §5.2 and the reference code; docs/sclub.md, "The model"), on
    :func:`hierbandit.data.movielens.rating_matrix` (671 users, 9,066 movies):

    1. the binary user × movie matrix (1 if the user rated the movie, whatever the stars);
    2. the ``min(3·n_users, 671)`` users with most ratings, then the ``n_movies`` movies most
       rated by them, then the ``n_users`` users with most ratings of those movies (ties by
       smaller id);
    3. the SVD A = UΣVᵀ of that ``n_users × n_movies`` matrix; the rows of U[:, :d − 1] (left
       singular vectors, unscaled by Σ) are the users' raw features;
    4. Eq. (3): row-normalise, append 1 and divide by √2.

    The shipped data are smaller than MovieLens-20M: ``n_users`` can be at most 671 (the paper
    used 1,000 users of 138,000).

    Returns
    -------
    theta : ndarray, shape (n_users, n_features)
        Unit-norm user vectors.
    user_ids : ndarray of int64
        MovieLens ``userId`` of each row.
    """
    n_users = check_positive_int(n_users, "n_users")
    n_movies = check_positive_int(n_movies, "n_movies")
    d = check_positive_int(n_features, "n_features", minimum=2)
    theta, ids = _movielens_vectors(n_users, n_movies, d)
    return theta.copy(), ids.copy()


@functools.lru_cache(maxsize=8)
def _movielens_vectors(n_users: int, n_movies: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    from hierbandit.data.movielens import rating_matrix

    R, user_ids, movie_ids = rating_matrix(binary=True)
    if n_users > R.shape[0]:
        raise ValueError(f"n_users must be <= {R.shape[0]} (users in the shipped data)")
    if n_movies > R.shape[1]:
        raise ValueError(f"n_movies must be <= {R.shape[1]} (movies in the shipped data)")
    if d - 1 > min(n_users, n_movies):
        raise ValueError("n_features - 1 must not exceed min(n_users, n_movies)")

    def top(counts: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
        order = np.lexsort((ids, -counts))  # most first, ties by smaller id
        return order[:k]

    pool = top(R.sum(axis=1), user_ids, min(3 * n_users, R.shape[0]))
    sub = R[pool]
    movies = top(sub.sum(axis=0), movie_ids, n_movies)
    sub = sub[:, movies]
    keep = top(sub.sum(axis=1), user_ids[pool], n_users)
    A = sub[keep]
    if np.any(A.sum(axis=1) == 0):
        raise ValueError("a selected user has no rating among the selected movies")
    U, _, _ = np.linalg.svd(A, full_matrices=False)
    raw = U[:, : d - 1]
    if np.any(np.linalg.norm(raw, axis=1) == 0):  # pragma: no cover - guards degenerate data
        raise ValueError("a user has a zero feature vector after the SVD")
    return transform_eq3(raw), user_ids[pool][keep].astype(np.int64)


class _ItemEnv:
    """Shared machinery: frequencies, rewards, pre-drawn rollouts (see the module docstring)."""

    n_users: int
    n_features: int
    n_items: int
    theta: np.ndarray
    p: np.ndarray
    labels: np.ndarray | None

    def _init_common(self, n_items: int, reward: str, noise_sd: float) -> None:
        self.n_items = check_positive_int(n_items, "n_items")
        self.reward = check_choice(reward, _REWARDS, "reward")
        self.noise_sd = check_scalar(noise_sd, "noise_sd", low=0.0)
        self._cdf = None

    @property
    def n_arms(self) -> int:
        """Candidate items per round ``L`` (alias)."""
        return self.n_items

    @property
    def bernoulli(self) -> bool:
        return self.reward == "bernoulli"

    @property
    def noise_scale(self) -> float:
        """Sub-Gaussian scale R of the reward noise (1/2 for Bernoulli rewards)."""
        return 0.5 if self.bernoulli else self.noise_sd

    def _set_p(self, p: np.ndarray) -> None:
        self.p = p
        cdf = np.cumsum(p)
        cdf[-1] = 1.0
        self._cdf = cdf

    def mean_rewards(self, users: Any, items: Any) -> np.ndarray:
        """θ_{users}ᵀx for items of shape (T, L, d) and users of shape (T,)."""
        users = np.asarray(users)
        items = np.asarray(items, dtype=float)
        return np.einsum("tld,td->tl", items, self.theta[users])

    def rollout_chunks(
        self, horizon: int, rng: Any = None, *, chunk_size: int = 8192
    ) -> Iterator[ClusteredRollout]:
        """Yield the rounds 1..``horizon`` of one run in blocks of ``chunk_size`` rounds.

        The concatenation of the blocks does not depend on ``chunk_size``.
        """
        T = check_positive_int(horizon, "horizon")
        chunk = check_positive_int(chunk_size, "chunk_size")
        g_user, g_item, g_noise = as_generator(rng).spawn(3)
        d, L = self.n_features, self.n_items
        done = 0
        while done < T:
            c = min(chunk, T - done)
            users = np.searchsorted(self._cdf, g_user.random(c), side="right").astype(np.int64)
            np.minimum(users, self.n_users - 1, out=users)
            items = transform_eq3(g_item.standard_normal((c, L, d - 1)))
            if self.bernoulli:
                noise = g_noise.random(c)
            else:
                noise = self.noise_sd * g_noise.standard_normal(c)
            means = self.mean_rewards(users, items)
            yield ClusteredRollout(users, items, noise, means)
            done += c

    def rollout(self, horizon: int, rng: Any = None) -> ClusteredRollout:
        """All ``horizon`` rounds at once (memory T·L·d floats; use :meth:`rollout_chunks` for
        long runs)."""
        T = check_positive_int(horizon, "horizon")
        (block,) = list(self.rollout_chunks(T, rng, chunk_size=T))
        return block

    def realised_reward(self, mean: Any, noise: Any) -> np.ndarray:
        """Reward of a recommendation with expected reward ``mean`` under the given noise."""
        mean = np.asarray(mean, dtype=float)
        noise = np.asarray(noise, dtype=float)
        if self.bernoulli:
            return (noise < mean).astype(float)
        return mean + noise

    def parameters(self) -> xr.Dataset:
        """θ per user, the frequencies and (when known) the true cluster labels."""
        data: dict[str, Any] = {
            "theta": (("user", "feature"), self.theta.copy()),
            "p": (("user",), self.p.copy()),
        }
        if self.labels is not None:
            data["labels"] = (("user",), self.labels.copy())
        return xr.Dataset(
            data,
            coords={"user": np.arange(self.n_users), "feature": np.arange(self.n_features)},
        )


class ClusteredLinearEnv(_ItemEnv):
    """SCLUB §5.1's synthetic clustered linear bandit.

    Parameters
    ----------
    n_users : int, default 1000
        Number of users ``n_u`` (the paper's text: 10³; its reference code: 10⁴).
    n_clusters : int, default 10
        Number of clusters ``m``; users are split into ``m`` contiguous blocks of (nearly) equal
        size, one θ per block (the reference code's layout).
    n_features : int, default 20
        Dimension ``d`` (≥ 2).
    n_items : int, default 20
        Candidates per round ``L``.
    frequency : {"uniform", "half", "arbitrary"} or array_like, default "uniform"
        User frequencies, see :func:`frequency_vector`: settings (1a), (1b), (1c).
    reward : {"bernoulli", "gaussian"}, default "bernoulli"
        Bernoulli(θᵀx) rewards (the reference code) or θᵀx + N(0, ``noise_sd ** 2``).
    noise_sd : float, default 0.1
        Standard deviation of the Gaussian rewards.
    rng : seed or Generator
        Source of the cluster vectors and of the Dirichlet frequencies.

    Attributes
    ----------
    cluster_theta : ndarray, shape (n_clusters, d)
        One unit vector per cluster (Eq. 3).
    labels : ndarray of int64, shape (n_users,)
        True cluster of each user.
    theta : ndarray, shape (n_users, d)
        θ_i = cluster_theta[labels[i]].
    p : ndarray, shape (n_users,)
        User frequencies.
    gap : float
        Smallest distance between two cluster vectors (the γ of SCLUB §2).
    """

    def __init__(
        self,
        n_users: int = 1000,
        n_clusters: int = 10,
        n_features: int = 20,
        n_items: int = 20,
        *,
        frequency: Any = "uniform",
        reward: str = "bernoulli",
        noise_sd: float = 0.1,
        rng: Any = None,
    ) -> None:
        self.n_users = check_positive_int(n_users, "n_users")
        self.n_clusters = check_positive_int(n_clusters, "n_clusters")
        if self.n_clusters > self.n_users:
            raise ValueError("n_clusters must be <= n_users")
        self.n_features = check_positive_int(n_features, "n_features", minimum=2)
        self._init_common(n_items, reward, noise_sd)
        if not isinstance(frequency, str):
            frequency = check_vector(frequency, self.n_users, "frequency")
        else:
            check_choice(frequency, _FREQUENCIES, "frequency")
        self.frequency = frequency
        self.rng = rng
        g = as_generator(rng)
        self.cluster_theta = paper_vectors(self.n_clusters, self.n_features, g)
        self.labels = (np.arange(self.n_users) * self.n_clusters // self.n_users).astype(np.int64)
        self.theta = self.cluster_theta[self.labels]
        self._set_p(frequency_vector(frequency, self.n_users, self.labels, g))

    @property
    def gap(self) -> float:
        if self.n_clusters < 2:
            return float("inf")
        diff = self.cluster_theta[:, None, :] - self.cluster_theta[None, :, :]
        dist = np.linalg.norm(diff, axis=-1)
        return float(dist[np.triu_indices(self.n_clusters, 1)].min())

    @property
    def lambda_x(self) -> float:
        """Minimum eigenvalue of E[xxᵀ] for the paper's items, 1/(2(d − 1))."""
        return 1.0 / (2.0 * (self.n_features - 1))

    def get_params(self) -> dict[str, Any]:
        return {
            "n_users": self.n_users,
            "n_clusters": self.n_clusters,
            "n_features": self.n_features,
            "n_items": self.n_items,
            "frequency": self.frequency,
            "reward": self.reward,
            "noise_sd": self.noise_sd,
            "rng": self.rng,
        }

    def clone(self, rng: Any = "same") -> ClusteredLinearEnv:
        """Same configuration with parameters redrawn from ``rng`` (``"same"`` reuses it)."""
        params = self.get_params()
        if not (isinstance(rng, str) and rng == "same"):
            params["rng"] = rng
        n_users = params.pop("n_users")
        n_clusters = params.pop("n_clusters")
        n_features = params.pop("n_features")
        n_items = params.pop("n_items")
        return ClusteredLinearEnv(n_users, n_clusters, n_features, n_items, **params)

    def __repr__(self) -> str:
        return (
            f"ClusteredLinearEnv(n_users={self.n_users}, n_clusters={self.n_clusters}, "
            f"n_features={self.n_features}, n_items={self.n_items}, "
            f"frequency={self.frequency!r}, reward={self.reward!r})"
        )


class MovieLensEnv(_ItemEnv):
    """SCLUB §5.2's real-data setting on the shipped MovieLens ratings.

    User vectors come from :func:`movielens_user_vectors` (binary matrix → SVD → Eq. 3); items
    are drawn as in the synthetic setting. There are no true clusters; ``n_clusters`` optionally
    snaps each user vector to its k-means centre (renormalised to unit length), which imposes
    exact clusters (the reference code's unused ``kmeans_thetas``).

    Parameters
    ----------
    n_users : int, default 500
        Users kept (at most 671).
    n_movies : int, default 1000
        Movies kept for the SVD.
    n_features : int, default 20
        Dimension ``d``.
    n_items : int, default 20
        Candidates per round ``L``.
    frequency : {"uniform", "arbitrary"} or array_like, default "uniform"
        Settings (2a) uniform and (2b) arbitrary (p ~ Dir(1_{n_u})).
    reward, noise_sd
        As in :class:`ClusteredLinearEnv`.
    n_clusters : int, optional
        Snap users to this many k-means centres.
    rng : seed or Generator
        Source of the Dirichlet frequencies and of the k-means initialisation.
    """

    def __init__(
        self,
        n_users: int = 500,
        n_movies: int = 1000,
        n_features: int = 20,
        n_items: int = 20,
        *,
        frequency: Any = "uniform",
        reward: str = "bernoulli",
        noise_sd: float = 0.1,
        n_clusters: int | None = None,
        rng: Any = None,
    ) -> None:
        self.n_users = check_positive_int(n_users, "n_users")
        self.n_movies = check_positive_int(n_movies, "n_movies")
        self.n_features = check_positive_int(n_features, "n_features", minimum=2)
        self._init_common(n_items, reward, noise_sd)
        if isinstance(frequency, str):
            check_choice(frequency, ("uniform", "arbitrary"), "frequency")
        else:
            frequency = check_vector(frequency, self.n_users, "frequency")
        self.frequency = frequency
        if n_clusters is not None:
            n_clusters = check_positive_int(n_clusters, "n_clusters")
            if n_clusters > self.n_users:
                raise ValueError("n_clusters must be <= n_users")
        self.n_clusters = n_clusters
        self.rng = rng
        g = as_generator(rng)
        theta, self.user_ids = movielens_user_vectors(self.n_users, self.n_movies, self.n_features)
        self.labels: np.ndarray | None = None
        if n_clusters is not None:
            KMeans = require("sklearn.cluster", "data", "Clustering the MovieLens users").KMeans

            km = KMeans(n_clusters=n_clusters, n_init=10, random_state=int(g.integers(2**31)))
            self.labels = km.fit_predict(theta).astype(np.int64)
            centres = km.cluster_centers_
            theta = centres[self.labels] / np.linalg.norm(centres[self.labels], axis=1)[:, None]
        self.theta = theta
        self._set_p(frequency_vector(frequency, self.n_users, self.labels, g))

    def get_params(self) -> dict[str, Any]:
        return {
            "n_users": self.n_users,
            "n_movies": self.n_movies,
            "n_features": self.n_features,
            "n_items": self.n_items,
            "frequency": self.frequency,
            "reward": self.reward,
            "noise_sd": self.noise_sd,
            "n_clusters": self.n_clusters,
            "rng": self.rng,
        }

    def clone(self, rng: Any = "same") -> MovieLensEnv:
        """Same configuration; frequencies (and k-means) redrawn from ``rng``."""
        params = self.get_params()
        if not (isinstance(rng, str) and rng == "same"):
            params["rng"] = rng
        return MovieLensEnv(**params)

    def __repr__(self) -> str:
        return (
            f"MovieLensEnv(n_users={self.n_users}, n_movies={self.n_movies}, "
            f"n_features={self.n_features}, n_items={self.n_items}, "
            f"frequency={self.frequency!r}, reward={self.reward!r})"
        )
