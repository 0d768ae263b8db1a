"""Partitions of a finite set (users into clusters, arms into groups) and label-invariant summaries.

Every clustering algorithm of the package (SCLUB, CLUB, Off-CLUB, Off-C2LUB, BOC) and every
mixture model of the Bayesian layer reports a partition as an integer label per item. Labels are
arbitrary names: two labellings that differ by a permutation of the labels describe the same
partition. The helpers here compare and summarise partitions without depending on the labels:

* :func:`canonical_labels` renames the labels in order of first appearance (0, 1, 2, ...), so
  that equal partitions have equal label vectors;
* :func:`same_partition` tests equality of two partitions;
* :func:`coclustering_matrix` gives P[i, j] = the fraction of labellings (e.g. MCMC draws) in which
  items i and j share a cluster — the label-invariant posterior summary of a mixture model;
* :func:`adjusted_rand_index` is the chance-corrected agreement of two partitions (Hubert &
  Arabie 1985), computed by :func:`sklearn.metrics.adjusted_rand_score`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierbandit._extras import require

__all__ = [
    "adjusted_rand_index",
    "canonical_labels",
    "coclustering_matrix",
    "n_clusters",
    "same_partition",
]


def _labels(value: Any, name: str, *, ndim: int = 1) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != ndim:
        raise ValueError(
            f"{name} must be a {ndim}-d array of integer labels, got shape {arr.shape}"
        )
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.isfinite(arr)):
            raise TypeError(f"{name} must hold integer labels, got dtype {arr.dtype}")
        if np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must hold integer labels, got non-integer values")
    return arr.astype(np.int64)


def canonical_labels(labels: Any) -> np.ndarray:
    """Rename labels by order of first appearance: ``[5, 5, 2, 7, 2] -> [0, 0, 1, 2, 1]``.

    Examples
    --------
    >>> canonical_labels([5, 5, 2, 7, 2]).tolist()
    [0, 0, 1, 2, 1]
    """
    arr = _labels(labels, "labels")
    _, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse]


def n_clusters(labels: Any) -> int:
    """Number of distinct clusters in a labelling."""
    return int(np.unique(_labels(labels, "labels")).size)


def same_partition(a: Any, b: Any) -> bool:
    """Whether two labellings describe the same partition (labels may be permuted).

    Examples
    --------
    >>> same_partition([0, 0, 1], [3, 3, 1]), same_partition([0, 0, 1], [0, 1, 1])
    (True, False)
    """
    la, lb = _labels(a, "a"), _labels(b, "b")
    if la.shape != lb.shape:
        raise ValueError(f"a and b must have the same length, got {la.size} and {lb.size}")
    return bool(np.array_equal(canonical_labels(la), canonical_labels(lb)))


def coclustering_matrix(draws: Any) -> np.ndarray:
    """Fraction of labellings in which each pair of items shares a cluster.

    Parameters
    ----------
    draws : array_like of int, shape (n_draws, n_items) or (n_items,)
        One labelling per row (for instance posterior draws of cluster assignments).

    Returns
    -------
    ndarray, shape (n_items, n_items)
        Symmetric, ones on the diagonal, invariant to relabelling within any draw.
    """
    arr = np.asarray(draws)
    if arr.ndim == 1:
        arr = arr[None, :]
    arr = _labels(arr, "draws", ndim=2)
    if arr.shape[0] == 0:
        raise ValueError("draws must contain at least one labelling")
    same = arr[:, :, None] == arr[:, None, :]
    return same.mean(axis=0)


def adjusted_rand_index(a: Any, b: Any) -> float:
    """Adjusted Rand index of two partitions (1 = identical, about 0 = chance agreement)."""
    metrics = require("sklearn.metrics", "data", "The adjusted Rand index")

    la, lb = _labels(a, "a"), _labels(b, "b")
    if la.shape != lb.shape:
        raise ValueError(f"a and b must have the same length, got {la.size} and {lb.size}")
    return float(metrics.adjusted_rand_score(la, lb))
