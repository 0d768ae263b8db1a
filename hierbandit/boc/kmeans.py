"""Weighted K-means with Maximin initialisation (the paper's Algorithm 2, "K-means Maximin").

1. The first centre is the empirical mean of one arm (``first="first"``: arm 0, the choice that
   reproduces the paper's tables; ``"heaviest"``: the most pulled arm; ``"random"``; or an index).
2. Maximin (Gonzalez 1985): each further centre is the arm mean farthest from its nearest
   existing centre.
3. Weighted Lloyd iterations: assign every arm to its nearest centre, move every centre to the
   ``N_m``-weighted mean of its arms, until the assignment no longer changes.

Unspecified details (docs/maths/boc.md §3, row 6 of docs/boc.md): ties go to the smallest index
(arm or cluster); a cluster left empty keeps its previous centre; a safety cap of
``max_iter = 1000`` centre updates (``converged=False`` if reached). Prop. 10: if every arm mean
is within a quarter of the smallest centre separation of its true centre, the output partition is
correct and each centre is within the largest arm error of the truth.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from hierbandit._validation import (
    as_generator,
    check_index,
    check_matrix,
    check_positive_int,
    check_vector,
)
from hierbandit.boc import _kernels as kern

__all__ = ["FIRST_SEEDS", "KMeansResult", "kmeans_maximin"]

FIRST_SEEDS = ("first", "heaviest", "random")


class KMeansResult(NamedTuple):
    """Output of :func:`kmeans_maximin`.

    Attributes
    ----------
    labels : numpy.ndarray, shape (M,), int
        Cluster of every arm (``c_out``).
    centres : numpy.ndarray, shape (K, d)
        Cluster centres (``U_out``, rows).
    n_iter : int
        Number of centre updates.
    converged : bool
        Whether the assignment stabilised before ``max_iter``.
    """

    labels: np.ndarray
    centres: np.ndarray
    n_iter: int
    converged: bool


def resolve_first(first: Any, weights: np.ndarray, rng: np.random.Generator | None) -> int:
    """Index of the first Maximin seed for a ``first`` option."""
    M = weights.shape[0]
    if isinstance(first, str):
        if first == "first":
            return 0
        if first == "heaviest":
            return int(np.argmax(weights))
        if first == "random":
            if rng is None:
                raise ValueError("first='random' needs an rng")
            return int(rng.integers(M))
        raise ValueError(f"first must be one of {FIRST_SEEDS} or an arm index, got {first!r}")
    return check_index(first, M, "first")


def kmeans_maximin(
    means: Any,
    weights: Any,
    n_clusters: int,
    *,
    first: Any = "first",
    max_iter: int = 1000,
    rng: Any = None,
) -> KMeansResult:
    """Algorithm 2: weighted K-means with Maximin initialisation.

    Parameters
    ----------
    means : array_like, shape (M, d)
        Empirical arm means µ̂_m.
    weights : array_like, shape (M,)
        Non-negative weights N_m (pull counts).
    n_clusters
        K, at most M.
    first
        First seed: ``"first"`` (arm 0, default), ``"heaviest"``, ``"random"`` or an arm index.
    max_iter
        Cap on the number of Lloyd centre updates.
    rng
        Seed or Generator, only used by ``first="random"``.

    Returns
    -------
    KMeansResult

    Examples
    --------
    >>> res = kmeans_maximin([[0.0], [0.1], [5.0], [5.2]], [1, 1, 1, 1], 2)
    >>> res.labels.tolist(), res.centres.ravel().round(2).tolist()
    ([0, 0, 1, 1], [0.05, 5.1])
    """
    mu = check_matrix(means, (None, None), "means")
    M = mu.shape[0]
    if M == 0 or mu.shape[1] == 0:
        raise ValueError(f"means must have at least one arm and one feature, got {mu.shape}")
    w = check_vector(weights, M, "weights")
    if np.any(w < 0):
        raise ValueError("weights must be non-negative")
    K = check_positive_int(n_clusters, "n_clusters")
    if K > M:
        raise ValueError(f"n_clusters K={K} must not exceed the number of arms M={M}")
    max_iter = check_positive_int(max_iter, "max_iter")
    gen = as_generator(rng) if (isinstance(first, str) and first == "random") else None
    m0 = resolve_first(first, w, gen)
    labels, centres, n_iter, converged = kern.kmeans_maximin(mu, w, K, m0, max_iter)
    return KMeansResult(labels, centres, int(n_iter), bool(converged))
