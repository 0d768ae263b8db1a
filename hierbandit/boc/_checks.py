"""Argument checks shared by the exploration algorithms, the lower bound and the BOC instances."""

from __future__ import annotations

from typing import Any

import numpy as np

from hierbandit._validation import check_matrix

ALT_PAIRS = ("corrected", "paper")


def check_labels(value: Any, name: str = "labels", *, n_clusters: int | None = None) -> np.ndarray:
    """A 1-d int64 array of cluster labels in ``[0, K)`` that uses every label (no empty cluster).

    ``K`` is ``n_clusters`` when given, else ``max(labels) + 1``. Requires ``K < M``.
    """
    if isinstance(value, str | bytes):
        raise TypeError(f"{name} must be an array of integer labels, got {type(value).__name__}")
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d array of labels, got shape {arr.shape}")
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold integer labels, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and (not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr))):
        raise ValueError(f"{name} must hold integer labels")
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative cluster indices")
    K = int(arr.max()) + 1 if n_clusters is None else int(n_clusters)
    if np.any(arr >= K):
        raise ValueError(f"{name} must be in [0, {K}), got max {int(arr.max())}")
    counts = np.bincount(arr, minlength=K)
    if np.any(counts == 0):
        empty = np.flatnonzero(counts == 0).tolist()
        raise ValueError(f"{name}: every cluster must be non-empty; clusters {empty} are empty")
    if arr.size <= K:
        raise ValueError(
            f"{name}: the number of clusters K={K} must be smaller than the number of arms "
            f"M={arr.size} (K < M)"
        )
    return arr


def check_centres(
    value: Any, n_clusters: int, name: str = "centres", *, distinct: bool = True
) -> np.ndarray:
    """A finite ``(K, d)`` float array; with ``distinct``, no two rows may coincide (U ∈ 𝒰)."""
    U = check_matrix(value, (n_clusters, None), name)
    if U.shape[1] == 0:
        raise ValueError(f"{name} must have at least one feature column")
    if distinct:
        diff = ((U[:, None, :] - U[None, :, :]) ** 2).sum(-1)
        iu = np.triu_indices(n_clusters, 1)
        if np.any(diff[iu] == 0.0):
            raise ValueError(f"{name}: cluster centres must be pairwise distinct")
    return U


def check_alt_pairs(value: Any) -> str:
    if value not in ALT_PAIRS:
        raise ValueError(f"alt_pairs must be one of {ALT_PAIRS}, got {value!r}")
    return str(value)
