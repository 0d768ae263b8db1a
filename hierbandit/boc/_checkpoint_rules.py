"""Rules for restored pure-exploration state (BOC, BOCLE, Uniform, Oracle) (see :mod:`hierbandit._restore_rules`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hierbandit._restore import RULES, Rule
from hierbandit._restore_rules import count, fail, in_range, is_int

__all__: list[str] = []

_BOC = "hierbandit.boc.explorers:"

# ---------------------------------------------------------------------- pure exploration


def _check_explorer(a: Any) -> None:
    M, K, d = a.n_arms, a.n_clusters, a.n_features
    t = count(a.t, "t")
    c = a.counts
    if not np.all(c >= 0) or not np.all(c == np.floor(c)):
        fail("counts must hold non-negative integers")
    if float(c.sum()) != t:
        fail(f"counts sum to {float(c.sum())}, not t = {t}")
    n_unpulled = int(np.count_nonzero(c == 0))
    if a._n_unpulled != n_unpulled:
        fail(f"_n_unpulled = {a._n_unpulled!r} but {n_unpulled} arms are unpulled")
    pulled = c > 0
    # caches the explorer derives exactly from the counts: recomputed the same way, bit for bit
    want = np.array([math.log(4.0 + math.log(n)) if n > 0 else 0.0 for n in c.tolist()])
    if not np.array_equal(a._logterm, want):
        fail("_logterm does not match counts")
    if not math.isclose(float(a._logsum), float(want.sum()), rel_tol=1e-6, abs_tol=1e-9):
        fail("_logsum is not the sum of _logterm")
    if np.any(a.sums[~pulled] != 0) or not np.array_equal(
        a.means[pulled], a.sums[pulled] / c[pulled, None]
    ):
        fail("means do not match sums and counts")
    if np.any(a.means[~pulled] != 0):
        fail("means of an unpulled arm must be 0")
    # the current estimate (c, U): both None, or labels (M,) in [0, K) and centres (K, d)
    labels, centres = a.labels, a.centres
    if (labels is None) != (centres is None):
        fail("labels and centres must both be set or both be None")
    if labels is not None:
        if not isinstance(labels, np.ndarray) or labels.dtype != np.int64 or labels.shape != (M,):
            fail(f"labels must be an int64 array of shape ({M},)")
        in_range(labels, 0, K, "labels")
        if (
            not isinstance(centres, np.ndarray)
            or centres.dtype != np.float64
            or centres.shape != (K, d)
        ):
            fail(f"centres must be a float64 array of shape ({K}, {d})")
        if not np.all(np.isfinite(centres)):
            fail("centres must be finite")
    # a pending decision: (round, arm) with the arm in range
    pend = a._pending
    if pend is not None:
        if not isinstance(pend, tuple) or len(pend) != 2 or not all(is_int(v) for v in pend):
            fail("_pending must be None or a pair of integers")
        if pend[0] < 0 or pend[0] > t:
            fail(f"_pending round {pend[0]} is not in [0, t]")
        if not 0 <= pend[1] < M:
            fail(f"_pending arm {pend[1]} is out of range [0, {M})")
    # a lazy refresh pending: the arm of the last observation, pulled at least once
    stale = a._stale_arm
    if not is_int(stale) or not -1 <= stale < M:
        fail(f"_stale_arm must be an integer in [-1, {M})")
    if stale >= 0 and c[stale] < 1:
        fail(f"_stale_arm {stale} has never been pulled")
    tg = a.target
    if not isinstance(tg, np.ndarray) or tg.dtype != np.float64 or tg.shape != (M,):
        fail(f"target must be a float64 array of shape ({M},)")
    if not np.all(np.isfinite(tg)) or np.any(tg < 0):
        fail("target must be finite and non-negative")
    for name in ("n_forced", "n_kmeans", "n_fallback", "n_solver_retry", "kmeans_capped"):
        count(getattr(a, name), name)


_EXPLORER_FIXED = frozenset({"_L", "_psi_term", "_corrected"})
for _name in ("BOC", "BOCLE", "Uniform"):
    RULES[_BOC + _name] = Rule(
        dynamic=frozenset({"_pending", "centres", "labels"}),
        fixed=_EXPLORER_FIXED | ({"_floor", "_forced"} if _name != "Uniform" else set()),
        check=_check_explorer,
    )
# Oracle's target is its allocation λ, shared with ``lam`` or not depending on the argument
RULES[_BOC + "Oracle"] = Rule(
    dynamic=frozenset({"_pending", "centres", "labels", "target"}),
    fixed=_EXPLORER_FIXED,
    check=_check_explorer,
)
