"""Offline data of the paper's experiments ([OFF] §6 and App. E.1–E.3).

* Users in J clusters: :func:`cluster_thetas` (synthetic: unit-normalised N(0, I) vectors, one
  per cluster, users partitioned uniformly into contiguous blocks) and :func:`movielens_thetas`
  (real users: SVD of the MovieLens rated/not-rated matrix, clusters by k-means).
* How the |D| samples fall on users (App. E.1, "user probability distribution"):
  :func:`user_probabilities` — ``"equal"`` (uniform), ``"semi-random"`` (uniform within a
  cluster, cluster masses p ~ Dirichlet(1_J)) and ``"random"`` (p ~ Dirichlet(1_U) over users).
* Logging (App. E.3): each sample draws a user from those probabilities and a fresh candidate
  set of S unit-normalised Gaussian items; ``"random"`` logs a uniformly chosen candidate,
  ``"linucb"`` the per-user LinUCB choice. Reward r = ⟨θ_u, a⟩ + N(0, σ²), σ = 0.05.
* The train/test protocol (§6, App. E.1; docs/offline.md, decision 8): the first half of |D| is
  the offline dataset (:func:`generate_offline`), the second half only supplies (u, 𝒜_test) pairs
  (:class:`OfflineTestSet`) on which SubOpt = max_a ⟨θ_u, a⟩ − ⟨θ_u, a_π⟩ is averaged
  (:func:`suboptimality`).

Under uniform random logging the logged action is one uniformly chosen element of S i.i.d.
candidates, which is distributed exactly as one draw from ρ: the generator draws only that one
item (the other S − 1 candidates influence nothing), a factor S less work and memory.

Random streams: the preference vectors, the user probabilities, the training rows and the test
rows each come from their own child stream of the ``rng`` argument, so the test set of a seed is
the same whatever the training size or logging policy (common random numbers).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from hierbandit._extras import require
from hierbandit._validation import (
    MAX_ABS,
    _as_float_array,
    as_generator,
    check_choice,
    check_positive_int,
    check_scalar,
)
from hierbandit.offline.dataset import OfflineDataset
from hierbandit.stats.ridge import sherman_morrison_add

__all__ = [
    "OfflineTestSet",
    "cluster_thetas",
    "generate_offline",
    "make_problem",
    "movielens_thetas",
    "suboptimality",
    "unit_vectors",
    "user_probabilities",
]

USER_DISTRIBUTIONS = ("equal", "semi-random", "random")
LOGGING_POLICIES = ("random", "linucb")
#: largest θ array (entries) the generators build
_MAX_ENTRIES = 10**8
_CHUNK = 50_000


def unit_vectors(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard Gaussian vectors normalised to unit ℓ₂ norm along the last axis."""
    v = rng.standard_normal(shape)
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    norm[norm == 0.0] = 1.0
    return v / norm


def cluster_thetas(
    n_users: int = 1000, n_clusters: int = 10, n_features: int = 20, rng: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic users of [OFF] App. E.1: J unit preference vectors, users split uniformly.

    Returns
    -------
    theta : ndarray, shape (n_users, n_features)
        θ_u = θ^{j_u}, the unit-normalised N(0, I) vector of the user's cluster.
    labels : ndarray of int64, shape (n_users,)
        j_u: contiguous blocks of (almost) equal size, ``labels[u] = u·J // U``.
    """
    U = check_positive_int(n_users, "n_users")
    J = check_positive_int(n_clusters, "n_clusters")
    d = check_positive_int(n_features, "n_features")
    if J > U:
        raise ValueError(f"n_clusters must be <= n_users, got {J} > {U}")
    if U * d > _MAX_ENTRIES:
        raise ValueError(
            f"n_users × n_features = {U * d:.3g} exceeds {_MAX_ENTRIES:.0e} (θ would not fit in "
            "memory)"
        )
    centres = unit_vectors(as_generator(rng), (J, d))
    labels = (np.arange(U) * J) // U
    return centres[labels], labels.astype(np.int64)


def user_probabilities(labels: Any, distribution: str = "equal", rng: Any = None) -> np.ndarray:
    """Probability that a sample belongs to each user ([OFF] App. E.1).

    See docs/offline.md, decision 10.

    ``"equal"``: 1/U. ``"semi-random"``: ``p_{j_u} / |V(j_u)|`` with cluster masses
    p ~ Dirichlet(1_J) (the paper leaves the law of p open; this is our choice, as in the
    SCLUB reference code). ``"random"``: p ~ Dirichlet(1_U) over users.
    """
    check_choice(distribution, USER_DISTRIBUTIONS, "distribution")
    if isinstance(labels, str | bytes) or labels is None:
        raise TypeError(f"labels must be an array of integer cluster labels, got {labels!r}")
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"labels must be a 1-d array, got shape {arr.shape}")
    U = arr.size
    if U == 0:
        raise ValueError("labels must not be empty")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"labels must hold integer cluster labels, got dtype {arr.dtype}")
    labels = arr.astype(np.int64)
    if distribution == "equal":
        return np.full(U, 1.0 / U)
    gen = as_generator(rng)
    if distribution == "random":
        return gen.dirichlet(np.ones(U))
    uniq, inv, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    mass = gen.dirichlet(np.ones(uniq.size))
    return mass[inv] / sizes[inv]


@njit(cache=True, nogil=True)
def _linucb_log(users, cand, theta, Ainv, bvec, theta_hat, alpha, noise, use_true, X_out, idx_out):
    """Per-user LinUCB choice among each row's candidates, then the user's ridge update
    (``theta_hat`` = A⁻¹b is kept up to date by the shared Sherman–Morrison step)."""
    n, S, d = cand.shape
    for t in range(n):
        u = users[t]
        est = theta[u] if use_true else theta_hat[u]
        best = -np.inf
        arg = 0
        for s_ in range(S):
            m = 0.0
            q = 0.0
            for i in range(d):
                m += est[i] * cand[t, s_, i]
                w = 0.0
                for k in range(d):
                    w += Ainv[u, i, k] * cand[t, s_, k]
                q += cand[t, s_, i] * w
            val = m + alpha * np.sqrt(max(q, 0.0))
            if val > best:
                best = val
                arg = s_
        idx_out[t] = arg
        x = cand[t, arg]
        r = noise[t]
        for i in range(d):
            r += theta[u, i] * x[i]
            X_out[t, i] = x[i]
        for i in range(d):
            bvec[u, i] += r * x[i]
        sherman_morrison_add(Ainv, bvec, theta_hat, u, x)
        noise[t] = r  # the reward, returned in place


def generate_offline(
    theta: Any,
    n_samples: int,
    *,
    user_probs: Any = None,
    labels: Any = None,
    logging: str = "random",
    n_candidates: int = 20,
    noise_sd: float = 0.05,
    logging_alpha: float = 0.1,
    logging_lambda: float = 0.5,
    logging_uses_true_theta: bool = False,
    rng: Any = None,
) -> OfflineDataset:
    """Log ``n_samples`` offline interactions of users with preference vectors ``theta``.

    Each sample draws its user u from ``user_probs`` (default uniform), a candidate set of
    ``n_candidates`` unit-normalised Gaussian items, the logged action a by the logging policy
    and the reward r = ⟨θ_u, a⟩ + ε, ε ~ N(0, ``noise_sd ** 2``) ([OFF] App. E.1, E.3).

    Parameters
    ----------
    theta : array_like, shape (U, d)
        True preference vectors.
    n_samples : int
        Number of logged rows (the training half of ``|D|``).
    user_probs : array_like, shape (U,), optional
        Probability of each user (see :func:`user_probabilities`); default uniform.
    labels : array_like of int, shape (U,), optional
        True clusters, stored as truth.
    logging : {"random", "linucb"}
        ``"random"``: a uniformly chosen candidate (Figure 2). ``"linucb"``: per user,
        argmax_a ⟨θ̂_u, a⟩ + α‖a‖_{A_u⁻¹} with A_u = λI + Σ past a aᵀ over the user's own past
        logged samples (Figure 7; docs/offline.md, decision 7 — the paper prints the true θ_u,
        kept behind ``logging_uses_true_theta=True``).
    n_candidates : int, default 20
        Candidate set size S.
    noise_sd : float, default 0.05
        Reward noise standard deviation ("variance parameter σ = 0.05", docs/offline.md,
        decision 12).
    logging_alpha, logging_lambda : float
        LinUCB exploration coefficient α = 0.1 and ridge λ = 0.5 of the logging policy.
    logging_uses_true_theta : bool, default False
        Score candidates with the true θ_u instead of the running estimate (as printed).
    rng : seed or Generator

    Returns
    -------
    OfflineDataset
        With ``theta``, ``labels`` (if given) and the generator settings in ``attrs``.
    """
    theta = _as_float_array(theta, "theta")
    if theta.ndim != 2 or not np.all(np.isfinite(theta)):
        raise ValueError(f"theta must be a finite (n_users, d) array, got shape {theta.shape}")
    if theta.size and np.max(np.abs(theta)) > MAX_ABS:
        raise ValueError(f"theta must have magnitude <= {MAX_ABS:g}")
    U, d = theta.shape
    n = check_positive_int(n_samples, "n_samples")
    logging = check_choice(logging, LOGGING_POLICIES, "logging")
    S = check_positive_int(n_candidates, "n_candidates")
    noise_sd = check_scalar(noise_sd, "noise_sd", low=0.0)
    alpha = check_scalar(logging_alpha, "logging_alpha", low=0.0)
    lam = check_scalar(logging_lambda, "logging_lambda", low=0.0, low_inclusive=False)
    if not isinstance(logging_uses_true_theta, bool):
        raise TypeError("logging_uses_true_theta must be a bool")
    probs = np.full(U, 1.0 / U) if user_probs is None else _check_probs(user_probs, U)
    gen = as_generator(rng)
    users = gen.choice(U, size=n, p=probs).astype(np.int64)
    if logging == "random":
        X = unit_vectors(gen, (n, d))
        y = np.einsum("nd,nd->n", X, theta[users]) + noise_sd * gen.standard_normal(n)
    else:
        X = np.empty((n, d))
        y = np.empty(n)
        Ainv = np.broadcast_to(np.eye(d) / lam, (U, d, d)).copy()
        bvec = np.zeros((U, d))
        theta_hat = np.zeros((U, d))
        for c0 in range(0, n, _CHUNK):
            c1 = min(c0 + _CHUNK, n)
            cand = unit_vectors(gen, (c1 - c0, S, d))
            noise = noise_sd * gen.standard_normal(c1 - c0)
            idx = np.empty(c1 - c0, dtype=np.int64)
            _linucb_log(
                users[c0:c1], cand, theta, Ainv, bvec, theta_hat, alpha, noise,
                logging_uses_true_theta, X[c0:c1], idx,
            )  # fmt: skip
            y[c0:c1] = noise
    attrs = {
        "generator": "hierbandit.offline.generate_offline",
        "logging": logging,
        "n_candidates": S,
        "noise_sd": noise_sd,
        "logging_alpha": alpha,
        "logging_lambda": lam,
        "logging_uses_true_theta": logging_uses_true_theta,
    }
    return OfflineDataset(users, X, y, n_users=U, theta=theta, labels=labels, attrs=attrs)


def _check_probs(p: Any, U: int) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.shape != (U,) or not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"user_probs must be {U} non-negative finite numbers with positive sum")
    return p / p.sum()


def suboptimality(theta_users: Any, actions: Any, chosen: Any) -> np.ndarray:
    """SubOpt = max_a ⟨θ_u, a⟩ − ⟨θ_u, a_chosen⟩ per decision ([OFF] §3).

    Parameters
    ----------
    theta_users : array_like, shape (n, d)
        True preference vector of the user of each decision.
    actions : array_like, shape (n, S, d)
        Action sets.
    chosen : array_like of int, shape (n,)
        Index of the chosen action in each set.
    """
    theta_users = np.asarray(theta_users, dtype=np.float64)
    actions = np.asarray(actions, dtype=np.float64)
    chosen = np.asarray(chosen, dtype=np.int64)
    if actions.ndim != 3 or theta_users.shape != (actions.shape[0], actions.shape[2]):
        raise ValueError(
            f"theta_users {theta_users.shape} and actions {actions.shape} do not match (n, d)"
        )
    if (
        chosen.shape != (actions.shape[0],)
        or np.any(chosen < 0)
        or np.any(chosen >= actions.shape[1])
    ):
        raise ValueError("chosen must hold one action index in [0, S) per decision")
    rewards = np.einsum("nsd,nd->ns", actions, theta_users)
    return rewards.max(axis=1) - rewards[np.arange(chosen.size), chosen]


@dataclass(frozen=True)
class OfflineTestSet:
    """The evaluation half: test users and fresh action sets, generated chunk by chunk.

    The same chunks are regenerated on every pass (from ``seed``), so any number of algorithms
    can be scored on identical (u, 𝒜_test) pairs without holding n × S × d numbers in memory.

    Parameters
    ----------
    theta : ndarray, shape (U, d)
        True preference vectors (needed for SubOpt).
    user_probs : ndarray, shape (U,)
        Probability of each user.
    n_test : int
        Number of test decisions.
    n_candidates : int
        Size S of each action set.
    seed : int or SeedSequence entropy
        Seed of the test stream.
    chunk_size : int
        Decisions per chunk.
    """

    theta: np.ndarray
    user_probs: np.ndarray
    n_test: int
    n_candidates: int = 20
    seed: Any = 0
    chunk_size: int = 20_000

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(users (m,), actions (m, S, d))`` chunks, identically on every call."""
        U, d = self.theta.shape
        n_chunks = -(-self.n_test // self.chunk_size)
        seqs = _fresh_sequence(self.seed).spawn(n_chunks)
        for c, seq in enumerate(seqs):
            m = min(self.chunk_size, self.n_test - c * self.chunk_size)
            gen = np.random.default_rng(seq)
            users = gen.choice(U, size=m, p=self.user_probs).astype(np.int64)
            actions = unit_vectors(gen, (m, self.n_candidates, d))
            yield users, actions


#: the keywords :func:`make_problem` passes on to :func:`generate_offline`
_LOGGING_KWARGS = ("logging_alpha", "logging_lambda", "logging_uses_true_theta")


def make_problem(
    theta: np.ndarray,
    labels: np.ndarray | None,
    dataset_size: int,
    *,
    user_probs: np.ndarray | None = None,
    n_test: int | None = None,
    logging: str = "random",
    n_candidates: int = 20,
    noise_sd: float = 0.05,
    rng: Any = None,
    **logging_kwargs: Any,
) -> tuple[OfflineDataset, OfflineTestSet]:
    """One experiment instance: the first half of ``|D|`` = ``dataset_size`` logged as the
    offline dataset, the second half as the test set (capped at ``n_test`` decisions if given).

    The training rows and the test stream come from separate child streams of ``rng``.
    ``logging_kwargs`` are the logging-policy arguments of :func:`generate_offline`
    (``logging_alpha``, ``logging_lambda``, ``logging_uses_true_theta``); another keyword raises
    ``TypeError`` naming it.
    """
    unknown = sorted(set(logging_kwargs) - set(_LOGGING_KWARGS))
    if unknown:
        raise TypeError(
            f"make_problem() got an unexpected keyword argument {unknown[0]!r} (besides its own "
            f"arguments it takes the logging-policy arguments {', '.join(_LOGGING_KWARGS)})"
        )
    theta = _as_float_array(theta, "theta")
    if theta.ndim != 2:
        raise ValueError(f"theta must be an (n_users, d) array, got shape {theta.shape}")
    size = check_positive_int(dataset_size, "dataset_size", minimum=2)
    U = theta.shape[0]
    probs = np.full(U, 1.0 / U) if user_probs is None else _check_probs(user_probs, U)
    n_train = size // 2
    n_eval = size - n_train
    if n_test is not None:
        n_eval = min(n_eval, check_positive_int(n_test, "n_test"))
    train_seq, test_seq = np.random.SeedSequence(_entropy(rng)).spawn(2)
    train = generate_offline(
        theta,
        n_train,
        user_probs=probs,
        labels=labels,
        logging=logging,
        n_candidates=n_candidates,
        noise_sd=noise_sd,
        rng=np.random.default_rng(train_seq),
        **logging_kwargs,
    )
    test = OfflineTestSet(
        theta=theta,
        user_probs=probs,
        n_test=n_eval,
        n_candidates=n_candidates,
        seed=test_seq,
    )
    return train, test


def _fresh_sequence(seed: Any) -> np.random.SeedSequence:
    """A new SeedSequence equal to ``seed`` (so spawning from it is repeatable)."""
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key)
    return np.random.SeedSequence(seed)


def _entropy(rng: Any) -> Any:
    """A SeedSequence-compatible seed from an int seed, a SeedSequence or a Generator."""
    if isinstance(rng, np.random.SeedSequence):
        return rng.entropy if rng.spawn_key == () else rng.generate_state(4)
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, 2**63, size=4)
    return rng


def movielens_thetas(
    n_users: int | None = None,
    n_features: int = 20,
    *,
    n_movies: int = 1000,
    theta_transform: str = "unit",
    n_clusters: int = 10,
    snap_to_centroids: bool = False,
    rng: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Real users' preference vectors from the shipped MovieLens ratings ([OFF] App. E.1 (2)).

    Preprocessing (docs/offline.md, decisions 10–11):

    1. :func:`hierbandit.data.movielens.rating_matrix` with ``binary=True``: the rated/not-rated
       matrix of the ``n_users`` most active users (default all 671 users the package ships —
       the paper keeps 1,000 users of a larger MovieLens release) and the ``n_movies`` most rated
       movies (default 1,000).
    2. SVD R = Θ S Xᵀ; the first d columns of the left singular vectors Θ (unscaled by S).
    3. ``theta_transform="unit"`` (default): each row normalised to unit ℓ₂ norm.
       ``"sclub"``: the first d − 1 columns, normalised, a 1 appended, divided by √2 ([SCLUB]
       Eq. 3).
    4. Clusters for the semi-random user distribution: k-means with ``n_clusters`` on the θ's
       (real users have no exact clusters). ``snap_to_centroids=True`` replaces each θ_u by its
       cluster centre (renormalised), imposing exact clusters.

    Returns
    -------
    theta : ndarray, shape (U, d)
    labels : ndarray of int64, shape (U,)
    user_ids : ndarray of int64, shape (U,)
        MovieLens ``userId`` of each row.
    """
    KMeans = require("sklearn.cluster", "data", "Clustering the MovieLens users").KMeans

    from hierbandit.data.movielens import rating_matrix

    d = check_positive_int(n_features, "n_features")
    check_choice(theta_transform, ("unit", "sclub"), "theta_transform")
    J = check_positive_int(n_clusters, "n_clusters")
    R, user_ids, _ = rating_matrix(n_users, n_movies, binary=True)
    if d > min(R.shape):
        raise ValueError(f"n_features must be <= {min(R.shape)} for this matrix, got {d}")
    left, _, _ = np.linalg.svd(R, full_matrices=False)
    k = d if theta_transform == "unit" else d - 1
    if k < 1:
        raise ValueError("theta_transform='sclub' needs n_features >= 2")
    Th = left[:, :k]
    norms = np.linalg.norm(Th, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("a user has an all-zero SVD row (no rated movie among those kept)")
    Th = Th / norms
    if theta_transform == "sclub":
        Th = np.hstack([Th, np.ones((Th.shape[0], 1))]) / np.sqrt(2.0)
    seed = int(as_generator(rng).integers(0, 2**31 - 1))
    km = KMeans(n_clusters=J, n_init=10, random_state=seed).fit(Th)
    labels = km.labels_.astype(np.int64)
    if snap_to_centroids:
        C = km.cluster_centers_
        C = C / np.linalg.norm(C, axis=1, keepdims=True)
        Th = C[labels]
    return Th, labels, user_ids.astype(np.int64)
