"""Rules for restored cascade policy state (see :mod:`hierbandit._restore_rules`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hierbandit._restore import RULES, Rule
from hierbandit._restore_rules import count, fail, in_range, psd

__all__: list[str] = []

_CAS = "hierbandit.cascade.policies:"

# ---------------------------------------------------------------------- cascade policies


def _int_matrix(v: Any, shape: tuple, hi: int, name: str) -> None:
    if not isinstance(v, np.ndarray) or v.dtype.kind not in "iu":
        fail(f"{name} must be an integer array")
    if v.ndim != len(shape) or any(
        s is not None and a != s for a, s in zip(v.shape, shape, strict=True)
    ):
        fail(f"{name} has shape {v.shape}")
    in_range(v, 0, hi, name)


def _check_cascade(p: Any) -> None:
    count(p.t, "t")
    X, slate = p._X, p._slate
    H, K = p.horizon, p.n_arms
    if X is None:
        if slate is not None:
            fail("_slate is set without an episode in progress (_X)")
    else:
        if not isinstance(X, np.ndarray) or X.dtype != np.float64 or X.ndim != 2:
            fail("_X must be a 2-d float array")
        if X.shape[0] < 1 or X.shape[1] != p.n_features:
            fail(f"_X has shape {X.shape}")
        if slate is None:
            fail("_slate is missing for the episode in progress")
        _int_matrix(slate, (X.shape[0], H), K, "_slate")
    count(p._served, "_served")
    pending = p._pending
    if not isinstance(pending, list):
        fail("_pending must be a list of recorded sessions")
    for i, item in enumerate(pending):
        if not isinstance(item, tuple) or len(item) != 3:
            fail(f"_pending[{i}] must be a (contexts, arms, clicks) tuple")
        Xs, A, C = item
        if not (
            isinstance(Xs, np.ndarray)
            and Xs.dtype == np.float64
            and isinstance(A, np.ndarray)
            and A.dtype == np.int64
            and isinstance(C, np.ndarray)
            and C.dtype == np.int8
        ):
            fail(f"_pending[{i}] must hold float64 contexts, int64 arms and int8 clicks")
        from hierbandit.cascade.policies import check_cascade_feedback

        try:  # the recorded sessions follow the cascade rule (what update_batch accepts)
            check_cascade_feedback(Xs, A, C, p.n_features, K, H)
        except (TypeError, ValueError) as exc:
            fail(f"_pending[{i}]: {exc}")
    cc = getattr(p, "_cov_chol", None)
    if cc is not None:
        q = p.n_params
        if not isinstance(cc, np.ndarray) or cc.dtype != np.float64 or cc.shape != (q, q):
            fail(f"_cov_chol must be None or a float64 array of shape ({q}, {q})")
    for name in ("n_obs",):
        if hasattr(p, name):
            count(getattr(p, name), name)
    for name in ("M", "_cov"):
        if isinstance(getattr(p, name, None), np.ndarray):
            psd(getattr(p, name), name)
    chol = getattr(p, "_chol", None)
    if isinstance(chol, np.ndarray) and not np.all(np.diagonal(chol) > 0):
        fail("_chol diagonal must be positive")


def _check_aucbbp(p: Any) -> None:
    _check_cascade(p)
    count(p._budget, "_budget")
    ku, kg, sc = p._k_ucb, p._k_greedy, p._score
    if ku is None:
        return
    N = None if p._X is None else p._X.shape[0]
    _int_matrix(ku, (N, p.horizon), p.n_arms, "_k_ucb")
    _int_matrix(kg, ku.shape, p.n_arms, "_k_greedy")
    if not isinstance(sc, np.ndarray) or sc.dtype != np.float64 or sc.shape != ku.shape:
        fail("_score must be a float array of the shape of _k_ucb")
    if np.any(np.isnan(sc)):
        fail("_score holds NaN")
    if p._budget < 1 or p._budget > ku.shape[0]:
        fail(f"_budget = {p._budget} is not in [1, {ku.shape[0]}]")


#: the episode in progress (step-wise protocol; users served and sessions recorded by the
#: serving calls), and CascadeLinTS's square root of the covariance (cached per episode plan)
_CASCADE_DYN = frozenset({"_X", "_slate", "_cov_chol", "_served", "_pending"})
for _name in (
    "UCBBP",
    "CascadeEpsilonGreedy",
    "CascadeGreedy",
    "CascadeRandom",
    "CascadeLinUCB",
    "CascadeLinTS",
):
    RULES[_CAS + _name] = Rule(dynamic=_CASCADE_DYN, check=_check_cascade)
RULES[_CAS + "UCBBP"] = Rule(dynamic=_CASCADE_DYN, fixed=frozenset({"_cz"}), check=_check_cascade)
RULES[_CAS + "AUCBBP"] = Rule(
    dynamic=_CASCADE_DYN | {"_k_ucb", "_k_greedy", "_score"},
    fixed=frozenset({"_cz"}),
    nonfinite=frozenset({"_score"}),
    check=_check_aucbbp,
)
