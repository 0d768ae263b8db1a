"""Rules for restored EbmTS/EbmUCB, LinUCB/LinTS, OLSBandit and RMBandit state (see :mod:`hierbandit._restore_rules`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hierbandit._restore import RULES, Rule
from hierbandit._restore_rules import check_suffstats, count, fail, in_range, nonneg, positive, psd
from hierbandit.ebm._pairs import record_width, views
from hierbandit.ebm._rows import REBUILD_BUDGET

__all__: list[str] = []

_EBM = "hierbandit.ebm.policy:"
_LIN = "hierbandit.ebm.linear:"
_RM = "hierbandit.ebm.rmbandit:"

# ---------------------------------------------------------------------- per-instance policies


def _check_ebm(p: Any) -> None:
    t = count(p.t, "t")
    K, N, d = p.n_arms, p.n_instances, p.n_features
    for name in ("pulls", "arrivals", "n_eff", "_rank_one_count"):
        nonneg(getattr(p, name), name)
    if int(p.pulls.sum()) != t:
        fail(f"pulls sum to {int(p.pulls.sum())}, not t = {t}")
    if int(p.arrivals.sum()) != t:
        fail(f"arrivals sum to {int(p.arrivals.sum())}, not t = {t}")
    in_range(p.n_eff, 0, N + 1, "n_eff")
    # an arm is rebuilt once its count reaches recompute_every and N / budget (recompute_due;
    # REBUILD_BUDGET under recompute="local"), which resets it
    budget = REBUILD_BUDGET if p.recompute == "local" else float(p.hyper_update_budget)
    bound = max(int(p.recompute_every), math.ceil(N / budget), 1)
    in_range(p._rank_one_count, 0, bound, "_rank_one_count")
    psd(p.Sigma, "Sigma")
    positive(p.sigma2, "sigma2")
    if p._pair_slot.shape != (N, K):  # pragma: no cover - the template fixes the shapes
        fail("_pair_slot has the wrong shape")
    _, rec, slot = _check_pairs(p, K, d)
    # every pair's rows: per arm they sum to its pulls, per instance to its arrivals
    n = rec["n"]
    if n.size and not (np.all(n >= 1) and np.all(n <= 2.0**53) and np.all(n == np.floor(n))):
        fail("a pair's row count n must be a whole number >= 1 (a slot is taken at the first row)")
    jj, kk = np.nonzero(slot >= 0)
    counts = n[slot[jj, kk]].astype(np.int64)
    if np.any(np.bincount(kk, weights=counts, minlength=K).astype(np.int64) != p.pulls):
        fail("the pairs' row counts do not sum to pulls over instances")
    if np.any(np.bincount(jj, weights=counts, minlength=N).astype(np.int64) != p.arrivals):
        fail("the pairs' row counts do not sum to arrivals over arms")
    check_suffstats(rec["G"], rec["q"], n, prefix="pairs ")
    e = views(p._empty, d)
    for name in ("G", "b", "q", "n"):
        if np.any(e[name] != 0.0):
            fail(f"_empty: the empty records hold a nonzero {name}")


def _check_pairs(p: Any, K: int, d: int) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
    """The slot index and the records (hierbandit.ebm._pairs): the kernels follow
    ``_pair_slot`` into ``_pairs`` without bounds checks, so every slot must be in range and
    name one record, each record taken by exactly one pair."""
    pairs = p._pairs
    width = int(record_width(d))
    if not (
        isinstance(pairs, np.ndarray)
        and pairs.dtype == np.float64
        and pairs.ndim == 2
        and pairs.shape[1] == width
        and pairs.flags.writeable
        and pairs.flags.c_contiguous
    ):
        fail(f"_pairs must be a writable float64 array of rows of {width}")
    n_pairs = pairs.shape[0]
    slot = p._pair_slot
    in_range(slot, -1, n_pairs, "_pair_slot")
    taken = slot[slot >= 0]
    if taken.size != n_pairs:
        fail(f"_pair_slot names {taken.size} slots, but _pairs holds {n_pairs} records")
    if np.unique(taken).size != taken.size:
        fail("_pair_slot names a slot twice")
    return n_pairs, views(pairs, d), slot


for _name in ("EbmTS", "EbmUCB"):
    RULES[_EBM + _name] = Rule(
        dynamic=frozenset({"_pairs"}),
        nonfinite=frozenset({"gamma"}),
        fixed=frozenset({"_literal_44", "_need_uniforms", "_estimates_any"}),
        check=_check_ebm,
    )


def _check_ridge_policy(p: Any) -> None:
    t = count(p.t, "t")
    if int(p.stats.n.sum()) != t:
        fail(f"t = {t} is not the number of rows of the statistics")


RULES[_LIN + "LinUCB"] = Rule(fixed=frozenset({"_ones"}), check=_check_ridge_policy)
RULES[_LIN + "LinTS"] = Rule(fixed=frozenset({"_ones", "_log_t"}), check=_check_ridge_policy)


def _check_forced(p: Any) -> None:
    t = count(p.t, "t")
    nonneg(p.n_rounds, "n_rounds")
    if int(p.n_rounds.sum()) != t:
        fail(f"n_rounds sum to {int(p.n_rounds.sum())}, not t = {t}")
    K, N = p.n_arms, p.n_instances
    n_all = p.all_stats.n.reshape(K, N)
    if np.any(n_all.sum(axis=0) != p.n_rounds):
        fail("n_rounds does not match the all-sample counts")
    if np.any(p.forced_stats.n > p.all_stats.n):
        fail("forced_stats.n exceeds all_stats.n")
    if not np.isfinite(p.h) or p.h < 0:
        fail("h must be non-negative")
    count(p._warmup_rounds, "_warmup_rounds")


RULES[_LIN + "OLSBandit"] = Rule(fixed=frozenset({"_warmup_rounds"}), check=_check_forced)
RULES[_RM + "RMBandit"] = Rule(
    fixed=frozenset({"_warmup_rounds", "_agg", "_schedule"}), check=_check_forced
)
