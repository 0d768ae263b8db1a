"""Many confidence levels and both thresholds from one sample path (docs/maths/boc.md §6).

The sampling rules of BOC, BOC-LE, Oracle and Uniform never use δ or the threshold, so a single
sample path gives the exact stopping time of every (threshold, δ) pair: τ_δ is the first t at which
``Z(t) ≥ β(δ, t)`` and the recommendation is ``c_{τ_δ − 1}``, the estimate tested at that t. Since
β increases with log(1/δ), the stopping times are non-decreasing in log(1/δ) along a path; the path
ends when the smallest δ of every threshold has stopped (or at the budget). With a fixed noise seed
this is the same as running each (threshold, δ) separately — and every algorithm sees the same
noise (common random numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from hierbandit._validation import check_choice, check_positive_int
from hierbandit.boc.explorers import ClusteringExplorer, canonical_partition
from hierbandit.boc.thresholds import THRESHOLDS, log_inv_delta_of, psi

__all__ = ["stopping_times"]


def stopping_times(
    algorithm: ClusteringExplorer,
    instance: Any,
    log_inv_deltas: Sequence[float],
    *,
    thresholds: Sequence[str] = THRESHOLDS,
    max_pulls: int = 10_000_000,
    rng: Any = None,
) -> xr.Dataset:
    """Run ``algorithm`` once on ``instance`` and record τ_δ for every (threshold, log(1/δ)).

    Parameters
    ----------
    algorithm
        A :class:`~hierbandit.boc.explorers.ClusteringExplorer` (its own δ and threshold are
        ignored; it is reset first).
    instance : ClusterBandit
        The environment.
    log_inv_deltas
        Values of log(1/δ) (> 0), any order.
    thresholds
        Subset of ``("beta", "beta_tilde")``.
    max_pulls
        Budget; pairs that have not stopped by then get ``stopped=False``, ``tau=max_pulls``.
    rng
        Noise seed (common random numbers).

    Returns
    -------
    xarray.Dataset
        ``tau``, ``stopped``, ``correct`` with dims ``(threshold, log_inv_delta)`` and the
        recommended ``labels`` with dims ``(threshold, log_inv_delta, arm)``; attrs hold the
        algorithm's counters and the path length.
    """
    if not isinstance(algorithm, ClusteringExplorer):
        raise TypeError(f"algorithm must be a ClusteringExplorer, got {type(algorithm).__name__}")
    algorithm._check_instance(instance)
    Ls = np.array([log_inv_delta_of(log_inv_delta=v) for v in log_inv_deltas], dtype=float)
    if Ls.size == 0:
        raise ValueError("log_inv_deltas must not be empty")
    thresholds = list(thresholds)
    if not thresholds:
        raise ValueError("thresholds must not be empty")
    for thr in thresholds:
        check_choice(thr, THRESHOLDS, "thresholds")
    max_pulls = check_positive_int(max_pulls, "max_pulls")
    from hierbandit.stats.partitions import same_partition

    alg = algorithm
    M, d = alg.n_arms, alg.n_features
    order = np.argsort(Ls, kind="stable")
    L_sorted = Ls[order]
    psi_terms = np.array([M * d * psi(L / (M * d)) for L in L_sorted])
    n_thr, n_L = len(thresholds), Ls.size
    tau = np.full((n_thr, n_L), max_pulls, dtype=np.int64)
    stopped = np.zeros((n_thr, n_L), dtype=bool)
    correct = np.zeros((n_thr, n_L), dtype=bool)
    labels = np.full((n_thr, n_L, M), -1, dtype=np.int64)
    ptr = [0] * n_thr
    true = np.asarray(instance.labels)

    sampler = instance.sampler(rng)
    alg.reset()
    alg._prepare(instance)
    done = 0
    while alg.t < max_pulls and done < n_thr:
        arm = alg._decide()
        alg._observe(arm, sampler.pull(arm))
        if alg.labels is None or alg.t <= M:
            continue
        z = alg._statistic()[0]
        for i, thr in enumerate(thresholds):
            j = ptr[i]
            if j == n_L:
                continue
            hit = False
            while j < n_L and z >= alg._beta(thr, L_sorted[j], psi_terms[j]):
                if not hit:
                    lab = canonical_partition(alg.labels, alg.centres)[0]
                    ok = same_partition(lab, true)
                    hit = True
                col = order[j]
                tau[i, col] = alg.t
                stopped[i, col] = True
                correct[i, col] = ok
                labels[i, col] = lab
                j += 1
            ptr[i] = j
            if j == n_L:
                done += 1
    ds = xr.Dataset(
        {
            "tau": (("threshold", "log_inv_delta"), tau),
            "stopped": (("threshold", "log_inv_delta"), stopped),
            "correct": (("threshold", "log_inv_delta"), correct),
            "labels": (("threshold", "log_inv_delta", "arm"), labels),
        },
        coords={"threshold": thresholds, "log_inv_delta": Ls, "arm": np.arange(M)},
        attrs={
            "algorithm": alg.name,
            "instance": getattr(instance, "name", "instance"),
            "path_length": int(alg.t),
            **alg._counters(),
        },
    )
    return ds
