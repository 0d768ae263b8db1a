"""Rules for restored EbmTS/EbmUCB, LinUCB/LinTS, OLSBandit and RMBandit state (see :mod:`hierbandit._restore_rules`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hierbandit._restore import RULES, Rule
from hierbandit._restore_rules import check_suffstats, count, fail, in_range, nonneg, positive, psd

__all__: list[str] = []

_EBM = "hierbandit.ebm.policy:"
_LIN = "hierbandit.ebm.linear:"
_RM = "hierbandit.ebm.rmbandit:"

# ---------------------------------------------------------------------- per-instance policies


def _check_ebm(p: Any) -> None:
    t = count(p.t, "t")
    K, N = p.n_arms, p.n_instances
    for name in ("pulls", "arrivals", "n_obs", "n_eff", "_rank_one_count"):
        nonneg(getattr(p, name), name)
    if int(p.pulls.sum()) != t:
        fail(f"pulls sum to {int(p.pulls.sum())}, not t = {t}")
    if int(p.arrivals.sum()) != t:
        fail(f"arrivals sum to {int(p.arrivals.sum())}, not t = {t}")
    if np.any(p.n_obs.sum(axis=1) != p.pulls):
        fail("n_obs does not sum to pulls over instances")
    if np.any(p.n_obs.sum(axis=0) != p.arrivals):
        fail("n_obs does not sum to arrivals over arms")
    in_range(p.n_eff, 0, N + 1, "n_eff")
    # an arm is recomputed once its count reaches recompute_every and N / budget (recompute_due)
    bound = max(int(p.recompute_every), math.ceil(N / float(p.hyper_update_budget)), 1)
    in_range(p._rank_one_count, 0, bound, "_rank_one_count")
    check_suffstats(p.G, p.q, p.n_obs)
    psd(p.Sigma, "Sigma")
    positive(p.sigma2, "sigma2")
    if p.G.shape[:2] != (K, N):  # pragma: no cover - the template fixes the shapes
        fail("G has the wrong shape")


for _name in ("EbmTS", "EbmUCB"):
    RULES[_EBM + _name] = Rule(
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
