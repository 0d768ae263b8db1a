"""Per-class rules for restored checkpoint state (see :mod:`hierbandit._restore`).

The template comparison fixes every attribute's type, shape and dtype to what the class's
constructor builds from the restored configuration; these rules name the attributes whose
shape depends on the run or that may hold ±inf, and check the *values* that compiled kernels
and index operations rely on: indices in range, member lists that terminate, counters that are
non-negative and agree with each other, pooled statistics equal to the sums of their members,
symmetric (positive semi-definite) matrices, and derived configuration equal to what the
constructor derives from the configuration. Each check raises ``ValueError`` naming the
attribute.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._restore import RULES, Rule

__all__: list[str] = []

_EBM = "hierbandit.policies.ebm:"
_LIN = "hierbandit.policies.linear:"
_RM = "hierbandit.policies.rmbandit:"
_CAS = "hierbandit.policies.cascade:"
_CL = "hierbandit.policies.clustering:"
_BOC = "hierbandit.exploration.boc:"
_STATS = "hierbandit.stats."

#: relative tolerance of pooled sums against the sums of their members (drift in a long run
#: is ~1e-9)
SUM_RTOL = 1e-6
#: relative tolerance of symmetry and positive semi-definiteness
SYM_RTOL = 1e-8


# ---------------------------------------------------------------------- helpers


def _fail(msg: str) -> None:
    raise ValueError(msg)


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _count(v: Any, name: str) -> int:
    """A non-negative integer scalar."""
    if not _is_int(v) or v < 0:
        _fail(f"{name} = {v!r} must be a non-negative integer")
    return int(v)


def _range(arr: np.ndarray, lo: int, hi: int, name: str) -> None:
    """Every entry of ``arr`` in [lo, hi)."""
    a = np.asarray(arr)
    if a.size == 0:
        return
    bad = np.flatnonzero(((a < lo) | (a >= hi)).ravel())
    if bad.size:
        i = np.unravel_index(bad[0], a.shape)
        idx = ", ".join(map(str, i))
        _fail(f"{name}[{idx}] = {a[i]} is out of range [{lo}, {hi})")


def _nonneg(arr: np.ndarray, name: str) -> None:
    a = np.asarray(arr)
    if a.size and not np.all(a >= 0):
        _fail(f"{name} holds negative values")


def _positive(arr: Any, name: str) -> None:
    a = np.asarray(arr)
    if a.size and not np.all(a > 0):
        _fail(f"{name} must be positive")


def _fro(a: np.ndarray) -> np.ndarray:
    """Frobenius norms over the last two axes."""
    return np.sqrt(np.sum(a * a, axis=(-2, -1)))


def _symmetric(M: np.ndarray, name: str, rtol: float = SYM_RTOL) -> None:
    """Every matrix of the stack ``M (..., p, p)`` symmetric within ``rtol`` (relative)."""
    M = np.asarray(M, dtype=float)
    if M.size == 0:
        return
    diff = _fro(M - np.swapaxes(M, -1, -2))
    if not np.all(diff <= rtol * np.maximum(_fro(M), 1e-300)):
        _fail(f"{name} is not symmetric")


def _psd(M: np.ndarray, name: str, rtol: float = SYM_RTOL) -> None:
    """Symmetric positive semi-definite within ``rtol`` of the largest eigenvalue."""
    _symmetric(M, name, rtol)
    M = np.asarray(M, dtype=float)
    if M.size == 0:
        return
    ev = np.linalg.eigvalsh(0.5 * (M + np.swapaxes(M, -1, -2)))
    top = np.max(np.abs(ev), axis=-1, keepdims=True)
    if not np.all(ev >= -rtol * np.maximum(top, 1e-300)):
        _fail(f"{name} is not positive semi-definite")


def _pd(M: np.ndarray, name: str) -> None:
    """Symmetric positive definite (Cholesky succeeds)."""
    _symmetric(M, name)
    try:
        np.linalg.cholesky(0.5 * (M + np.swapaxes(M, -1, -2)))
    except np.linalg.LinAlgError:
        _fail(f"{name} is not positive definite")


def _close(a: np.ndarray, b: np.ndarray, scale: np.ndarray, name: str) -> None:
    """|a − b| (Frobenius over trailing axes beyond the first) ≤ SUM_RTOL · scale."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    diff = np.sqrt(np.sum((a - b).reshape(a.shape[0], -1) ** 2, axis=1))
    bad = np.flatnonzero(~(diff <= SUM_RTOL * np.maximum(scale, 1e-12)))
    if bad.size:
        _fail(f"{name}[{bad[0]}] differs from the sum over its members")


# ---------------------------------------------------------------------- statistics


def _check_suffstats(G: np.ndarray, q: np.ndarray, n: np.ndarray, prefix: str = "") -> None:
    _nonneg(n, prefix + "n")
    _nonneg(q, prefix + "q")
    _symmetric(G, prefix + "G")
    diag = np.diagonal(G, axis1=-2, axis2=-1)
    _nonneg(diag, prefix + "G diagonal")


def _check_ridge(s: Any) -> None:
    _check_suffstats(s.G, s.q, s.n)
    _symmetric(s.Ainv, "Ainv")
    _nonneg(np.diagonal(s.Ainv, axis1=-2, axis2=-1), "Ainv diagonal")
    # the inverse of reg·I + G has eigenvalues in (0, 1/reg]
    if s.Ainv.size and not np.all(np.diagonal(s.Ainv, axis1=-2, axis2=-1) <= (1 + 1e-6) / s.reg):
        _fail("Ainv diagonal exceeds 1/reg")


def _check_ols(s: Any) -> None:
    _check_suffstats(s.G, s.q, s.n)


RULES[_STATS + "ridge:RidgeStats"] = Rule(fixed=frozenset({"_every"}), check=_check_ridge)
RULES[_STATS + "ridge:OLSStats"] = Rule(check=_check_ols)


# ---------------------------------------------------------------------- ClusterStats

_N_FREE, _NEXT_ORDER, _N_ALIVE = 0, 1, 2


def _check_cluster_stats(cs: Any) -> None:
    U = cs.n_users
    for name in ("labels", "head", "tail", "next", "prev", "free", "size", "order", "since", "n"):
        a = getattr(cs, name)
        if a.shape[:1] != (U,):  # pragma: no cover - the template fixes the shapes
            _fail(f"{name} has shape {a.shape}")
    _range(cs.labels, 0, U, "labels")
    for name in ("head", "tail", "next", "prev"):
        _range(getattr(cs, name), -1, U, name)
    _range(cs.size, 0, U + 1, "size")
    _nonneg(cs.since, "since")
    if cs._every > 0:
        _range(cs.since, 0, cs._every, "since")
    _nonneg(cs.order, "order")
    _nonneg(cs.n, "n")
    meta = cs.meta
    n_free, next_order, n_alive = int(meta[_N_FREE]), int(meta[_NEXT_ORDER]), int(meta[_N_ALIVE])
    live = cs.size > 0
    n_live = int(np.count_nonzero(live))
    if n_alive != n_live:
        _fail(f"meta[_N_ALIVE] = {n_alive} but {n_live} slots have members")
    if n_free != U - n_live:
        _fail(f"meta[_N_FREE] = {n_free} but {U - n_live} slots are free")
    if n_live == 0:
        _fail("size: no live cluster")
    if int(cs.size.sum()) != U:
        _fail(f"size sums to {int(cs.size.sum())}, not n_users = {U}")
    # the free stack holds exactly the dead slots
    free = cs.free[:n_free]
    _range(free, 0, U, "free")
    if np.unique(free).size != n_free or np.any(live[free]):
        _fail("free does not hold exactly the dead slots")
    dead = ~live
    if np.any(cs.head[dead] != -1) or np.any(cs.tail[dead] != -1):
        _fail("head/tail of a free slot is not -1")
    orders = cs.order[live]
    if np.unique(orders).size != n_live:
        _fail("order of live clusters is not distinct")
    if next_order <= int(orders.max()):
        _fail(f"meta[_NEXT_ORDER] = {next_order} is not above every live order")
    # labels point at live slots with the right member counts
    if not np.all(live[cs.labels]):
        _fail("labels names a slot without members")
    if np.any(np.bincount(cs.labels, minlength=U) != cs.size):
        _fail("size does not match the number of users labelled with each slot")
    # member lists: from head through next, within size steps, the users of the slot, ending
    # at tail, with prev mirroring next (every user is then in exactly one list)
    labels, nxt, prv = cs.labels.tolist(), cs.next.tolist(), cs.prev.tolist()
    head, tail, size = cs.head.tolist(), cs.tail.tolist(), cs.size.tolist()
    seen = bytearray(U)
    for c in np.flatnonzero(live).tolist():
        u, p, k = head[c], -1, 0
        while u >= 0:
            if k >= size[c] or seen[u]:
                _fail(f"next: the member list of slot {c} does not end after size = {size[c]}")
            if labels[u] != c:
                _fail(f"next: user {u} in the list of slot {c} has labels = {labels[u]}")
            if prv[u] != p:
                _fail(f"prev[{u}] = {prv[u]} does not mirror next ({p})")
            seen[u] = 1
            p, u, k = u, nxt[u], k + 1
        if k != size[c]:
            _fail(f"head: the member list of slot {c} has {k} users, size = {size[c]}")
        if tail[c] != p:
            _fail(f"tail[{c}] = {tail[c]} is not the last member ({p})")
    # pooled statistics equal the sums of their members' statistics
    us = cs.users
    slots = np.flatnonzero(live)
    n_sum = np.zeros(U, dtype=np.int64)
    np.add.at(n_sum, cs.labels, us.n)
    if np.any(n_sum[slots] != cs.n[slots]):
        c = slots[np.flatnonzero(n_sum[slots] != cs.n[slots])[0]]
        _fail(f"n[{c}] = {cs.n[c]} is not the sum of its members' counts ({n_sum[c]})")
    d = cs.n_features
    G_sum = np.zeros((U, d, d))
    np.add.at(G_sum, cs.labels, us.G)
    b_sum = np.zeros((U, d))
    np.add.at(b_sum, cs.labels, us.b)
    q_sum = np.zeros(U)
    np.add.at(q_sum, cs.labels, us.q)
    G_abs = np.zeros(U)
    np.add.at(G_abs, cs.labels, _fro(us.G))
    tr = np.zeros(U)
    np.add.at(tr, cs.labels, np.trace(us.G, axis1=1, axis2=2))
    q_abs = np.zeros(U)
    np.add.at(q_abs, cs.labels, np.abs(us.q))
    _close(cs.G[slots], G_sum[slots], G_abs[slots], "G")
    # |b| ≤ sqrt(Σy² · tr Σxxᵀ) bounds the magnitude of the summands of b
    _close(cs.b[slots], b_sum[slots], np.sqrt(q_abs[slots] * tr[slots]), "b")
    _close(cs.q[slots, None], q_sum[slots, None], q_abs[slots], "q")
    _check_suffstats(cs.G[slots], cs.q[slots], cs.n[slots])
    _symmetric(cs.Ainv[slots], "Ainv")
    if not np.all(np.diagonal(cs.Ainv[slots], axis1=-2, axis2=-1) > 0):
        _fail("Ainv diagonal must be positive")


RULES[_STATS + "cluster_stats:ClusterStats"] = Rule(
    fixed=frozenset({"_every"}), check=_check_cluster_stats
)


# ---------------------------------------------------------------------- clustering policies


def _check_clustering_common(p: Any) -> None:
    # the statistics' sizes and settings are checked against the policy's configuration by
    # the template comparison (scalar constructor arguments of nested objects)
    t = _count(p.t, "t")
    rows = p.stats.users.n if hasattr(p.stats, "users") else p.stats.n
    if int(rows.sum()) != t:
        _fail(f"t = {t} is not the number of rows of the statistics")


def _check_sclub(p: Any) -> None:
    _check_clustering_common(p)
    cs = p.stats
    U = p.n_users
    live = cs.size > 0
    slots = np.flatnonzero(live)
    sm = p._sm
    epoch = int(sm[0])
    if epoch < 0:
        _fail(f"_sm[0] (epoch) = {epoch} is negative")
    ustamp = sm[1:]
    if np.any((ustamp != -1) & ((ustamp < 0) | (ustamp > epoch))):
        _fail("_sm holds a user stamp outside [-1, epoch]")
    _range(p._cstamp, 0, epoch + 1, "_cstamp")
    _nonneg(p.pivot_count, "pivot_count")
    # checked counts of the slots stamped in this epoch
    checked = ustamp == epoch
    if np.any(checked & (p._cstamp[cs.labels] != epoch)):
        _fail("_cstamp: a checked user's cluster is not stamped in the current epoch")
    nchk = np.bincount(cs.labels[checked], minlength=U)
    cur = live & (p._cstamp == epoch)
    if np.any(p._nchk[cur] != nchk[cur]):
        _fail("_nchk does not count the checked members of a cluster")
    _range(p._nchk, 0, U + 1, "_nchk")
    # member count extremes of the live clusters
    un = cs.users.n
    lo = np.full(U, np.iinfo(np.int64).max)
    hi = np.full(U, -1)
    np.minimum.at(lo, cs.labels, un)
    np.maximum.at(hi, cs.labels, un)
    if np.any(p._tmin[slots] != lo[slots]):
        _fail("_tmin is not the smallest member count of a cluster")
    if np.any(p._tmax[slots] != hi[slots]):
        _fail("_tmax is not the largest member count of a cluster")
    nmin = np.bincount(cs.labels[un == lo[cs.labels]], minlength=U)
    if np.any(p._nmin[slots] != nmin[slots]):
        _fail("_nmin does not count the members at the smallest count")
    _range(p._nmin, 0, U + 1, "_nmin")
    # reference-code aliasing: only when configured, only for a user alone in its cluster
    alias = p._alias
    if alias.any():
        if not p.double_count_split:
            _fail("_alias is set without double_count_split")
        if np.any(cs.size[cs.labels[alias]] != 1):
            _fail("_alias is set for a user that is not alone in its cluster")
    cF, k0 = p._XF
    from .stats.cluster_stats import confidence_F

    if not np.allclose(cF[slots], confidence_F(cs.n[slots]), rtol=1e-9, atol=0):
        _fail("_XF: F(T) of a cluster does not match its count")
    if np.any(k0[slots] != cs.theta[slots, : k0.shape[1]]):
        _fail("_XF: the leading coordinates do not match theta")


def _check_club(p: Any) -> None:
    _check_clustering_common(p)
    from .policies.clustering import _components
    from .stats.cluster_stats import confidence_F
    from .stats.partitions import canonical_labels

    cs = p.stats
    U = p.n_users
    adj = p.adjacency
    bits = np.unpackbits(adj.view(np.uint8), axis=1, bitorder="little")
    if np.any(bits[:, U:]):
        _fail("adjacency has bits beyond n_users")
    E = bits[:, :U].astype(bool)
    if np.any(np.diagonal(E)):
        _fail("adjacency has a self-loop")
    if np.any(E != E.T):
        _fail("adjacency is not symmetric")
    comp = _components(adj)
    if np.any(comp != canonical_labels(cs.labels)):
        _fail("adjacency: the clusters are not the connected components of the graph")
    (uF,) = p._UF
    if not np.allclose(uF, confidence_F(cs.users.n), rtol=1e-9, atol=0):
        _fail("_UF: F(T_i) of a user does not match its count")


def _check_linucb(p: Any) -> None:
    _check_clustering_common(p)
    s = p.stats
    G, _b, q, n = p._pu
    _check_suffstats(G, q, n, "_pu ")
    if p._one:
        if int(n.sum()) != int(s.n[0]):
            _fail("_pu: the per-user counts do not sum to the pooled count")
        _close(s.G, G.sum(axis=0)[None], np.array([_fro(G).sum()]), "G")


# settings the constructor derives from the configuration (the kernels' integer and float
# parameter vectors, periods, the bonus constant)
_CL_FIXED = frozenset({"_every", "_beta_const"})
RULES[_CL + "SCLUB"] = Rule(fixed=_CL_FIXED | {"_ip", "_fp"}, check=_check_sclub)
RULES[_CL + "CLUB"] = Rule(fixed=_CL_FIXED | {"_uevery"}, check=_check_club)
RULES[_CL + "LinUCBOne"] = Rule(fixed=_CL_FIXED, check=_check_linucb)
RULES[_CL + "LinUCBInd"] = Rule(fixed=_CL_FIXED, check=_check_linucb)


# ---------------------------------------------------------------------- per-instance policies


def _check_ebm(p: Any) -> None:
    t = _count(p.t, "t")
    K, N = p.n_arms, p.n_instances
    for name in ("pulls", "arrivals", "n_obs", "n_eff", "_rank_one_count"):
        _nonneg(getattr(p, name), name)
    if int(p.pulls.sum()) != t:
        _fail(f"pulls sum to {int(p.pulls.sum())}, not t = {t}")
    if int(p.arrivals.sum()) != t:
        _fail(f"arrivals sum to {int(p.arrivals.sum())}, not t = {t}")
    if np.any(p.n_obs.sum(axis=1) != p.pulls):
        _fail("n_obs does not sum to pulls over instances")
    if np.any(p.n_obs.sum(axis=0) != p.arrivals):
        _fail("n_obs does not sum to arrivals over arms")
    _range(p.n_eff, 0, N + 1, "n_eff")
    _range(p._rank_one_count, 0, max(int(p.recompute_every), 1), "_rank_one_count")
    _check_suffstats(p.G, p.q, p.n_obs)
    _psd(p.Sigma, "Sigma")
    _positive(p.sigma2, "sigma2")
    if p.G.shape[:2] != (K, N):  # pragma: no cover - the template fixes the shapes
        _fail("G has the wrong shape")


for _name in ("EbmTS", "EbmUCB"):
    RULES[_EBM + _name] = Rule(
        nonfinite=frozenset({"gamma"}),
        fixed=frozenset({"_literal_44", "_need_uniforms", "_estimates_any"}),
        check=_check_ebm,
    )


def _check_ridge_policy(p: Any) -> None:
    t = _count(p.t, "t")
    if int(p.stats.n.sum()) != t:
        _fail(f"t = {t} is not the number of rows of the statistics")


RULES[_LIN + "LinUCB"] = Rule(fixed=frozenset({"_ones"}), check=_check_ridge_policy)
RULES[_LIN + "LinTS"] = Rule(fixed=frozenset({"_ones", "_log_t"}), check=_check_ridge_policy)


def _check_forced(p: Any) -> None:
    t = _count(p.t, "t")
    _nonneg(p.n_rounds, "n_rounds")
    if int(p.n_rounds.sum()) != t:
        _fail(f"n_rounds sum to {int(p.n_rounds.sum())}, not t = {t}")
    K, N = p.n_arms, p.n_instances
    n_all = p.all_stats.n.reshape(K, N)
    if np.any(n_all.sum(axis=0) != p.n_rounds):
        _fail("n_rounds does not match the all-sample counts")
    if np.any(p.forced_stats.n > p.all_stats.n):
        _fail("forced_stats.n exceeds all_stats.n")
    if not np.isfinite(p.h) or p.h < 0:
        _fail("h must be non-negative")
    _count(p._warmup_rounds, "_warmup_rounds")


RULES[_LIN + "OLSBandit"] = Rule(fixed=frozenset({"_warmup_rounds"}), check=_check_forced)
RULES[_RM + "RMBandit"] = Rule(
    fixed=frozenset({"_warmup_rounds", "_agg", "_schedule"}), check=_check_forced
)


# ---------------------------------------------------------------------- cascade policies


def _check_logistic(s: Any) -> None:
    p = s.n_params
    _count(s.n_obs, "n_obs")
    _symmetric(s.A, "A")
    _pd(s.prior_precision, "prior_precision")
    L = np.tril(s._chol)
    if not np.all(np.diagonal(L) > 0):
        _fail("_chol diagonal must be positive")
    scale = max(float(np.linalg.norm(s.A)), 1e-300)
    if not np.linalg.norm(L @ L.T - s.A) <= 1e-6 * scale:
        _fail("_chol is not the Cholesky factor of A")
    if s._cov is not None:
        if not isinstance(s._cov, np.ndarray) or s._cov.shape != (p, p):
            _fail("_cov has the wrong shape")
        if s._cov.dtype != np.float64 or not np.all(np.isfinite(s._cov)):
            _fail("_cov must hold finite floats")
        _symmetric(s._cov, "_cov")
    Z, y = s._Z, s._y
    if not (isinstance(Z, np.ndarray) and isinstance(y, np.ndarray)):
        _fail("_Z and _y must be arrays")
    if Z.dtype != np.float64 or y.dtype != np.float64 or Z.ndim != 2 or y.ndim != 1:
        _fail("_Z/_y have the wrong dtype or rank")
    if Z.shape[1] != p or Z.shape[0] != y.shape[0]:
        _fail("_Z/_y have the wrong shape")
    if s.update_rule == "batch_map":
        if Z.shape[0] < s.n_obs:
            _fail("_Z holds fewer rows than n_obs")
        if not (np.all(np.isfinite(Z[: s.n_obs])) and np.all(np.isin(y[: s.n_obs], (0.0, 1.0)))):
            _fail("_Z/_y: stored rows must be finite with 0/1 responses")
    elif Z.shape[0]:
        _fail("_Z holds rows although the update rule stores none")
    if s.max_iter < 1 or not (s.tol > 0):
        _fail("max_iter/tol invalid")


RULES[_STATS + "logistic:OnlineLogistic"] = Rule(
    dynamic=frozenset({"_cov", "_Z", "_y"}),
    nonfinite=frozenset({"_Z", "_y"}),
    check=_check_logistic,
)


def _int_matrix(v: Any, shape: tuple, hi: int, name: str) -> None:
    if not isinstance(v, np.ndarray) or v.dtype.kind not in "iu":
        _fail(f"{name} must be an integer array")
    if v.ndim != len(shape) or any(
        s is not None and a != s for a, s in zip(v.shape, shape, strict=True)
    ):
        _fail(f"{name} has shape {v.shape}")
    _range(v, 0, hi, name)


def _check_cascade(p: Any) -> None:
    _count(p.t, "t")
    X, slate = p._X, p._slate
    H, K = p.horizon, p.n_arms
    if X is None:
        if slate is not None:
            _fail("_slate is set without an episode in progress (_X)")
    else:
        if not isinstance(X, np.ndarray) or X.dtype != np.float64 or X.ndim != 2:
            _fail("_X must be a 2-d float array")
        if X.shape[0] < 1 or X.shape[1] != p.n_features:
            _fail(f"_X has shape {X.shape}")
        if slate is None:
            _fail("_slate is missing for the episode in progress")
        _int_matrix(slate, (X.shape[0], H), K, "_slate")
    cc = getattr(p, "_cov_chol", None)
    if cc is not None:
        q = p.n_params
        if not isinstance(cc, np.ndarray) or cc.dtype != np.float64 or cc.shape != (q, q):
            _fail(f"_cov_chol must be None or a float64 array of shape ({q}, {q})")
    for name in ("n_obs",):
        if hasattr(p, name):
            _count(getattr(p, name), name)
    for name in ("M", "_cov"):
        if isinstance(getattr(p, name, None), np.ndarray):
            _psd(getattr(p, name), name)
    chol = getattr(p, "_chol", None)
    if isinstance(chol, np.ndarray) and not np.all(np.diagonal(chol) > 0):
        _fail("_chol diagonal must be positive")


def _check_aucbbp(p: Any) -> None:
    _check_cascade(p)
    _count(p._budget, "_budget")
    ku, kg, sc = p._k_ucb, p._k_greedy, p._score
    if ku is None:
        return
    N = None if p._X is None else p._X.shape[0]
    _int_matrix(ku, (N, p.horizon), p.n_arms, "_k_ucb")
    _int_matrix(kg, ku.shape, p.n_arms, "_k_greedy")
    if not isinstance(sc, np.ndarray) or sc.dtype != np.float64 or sc.shape != ku.shape:
        _fail("_score must be a float array of the shape of _k_ucb")
    if np.any(np.isnan(sc)):
        _fail("_score holds NaN")
    if p._budget < 1 or p._budget > ku.shape[0]:
        _fail(f"_budget = {p._budget} is not in [1, {ku.shape[0]}]")


#: the episode in progress, and CascadeLinTS's square root of the covariance (cached per
#: episode plan)
_CASCADE_DYN = frozenset({"_X", "_slate", "_cov_chol"})
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


# ---------------------------------------------------------------------- pure exploration


def _check_explorer(a: Any) -> None:
    M, K, d = a.n_arms, a.n_clusters, a.n_features
    t = _count(a.t, "t")
    c = a.counts
    if not np.all(c >= 0) or not np.all(c == np.floor(c)):
        _fail("counts must hold non-negative integers")
    if float(c.sum()) != t:
        _fail(f"counts sum to {float(c.sum())}, not t = {t}")
    n_unpulled = int(np.count_nonzero(c == 0))
    if a._n_unpulled != n_unpulled:
        _fail(f"_n_unpulled = {a._n_unpulled!r} but {n_unpulled} arms are unpulled")
    pulled = c > 0
    # caches the explorer derives exactly from the counts: recomputed the same way, bit for bit
    want = np.array([math.log(4.0 + math.log(n)) if n > 0 else 0.0 for n in c.tolist()])
    if not np.array_equal(a._logterm, want):
        _fail("_logterm does not match counts")
    if not math.isclose(float(a._logsum), float(want.sum()), rel_tol=1e-6, abs_tol=1e-9):
        _fail("_logsum is not the sum of _logterm")
    if np.any(a.sums[~pulled] != 0) or not np.array_equal(
        a.means[pulled], a.sums[pulled] / c[pulled, None]
    ):
        _fail("means do not match sums and counts")
    if np.any(a.means[~pulled] != 0):
        _fail("means of an unpulled arm must be 0")
    # the current estimate (c, U): both None, or labels (M,) in [0, K) and centres (K, d)
    labels, centres = a.labels, a.centres
    if (labels is None) != (centres is None):
        _fail("labels and centres must both be set or both be None")
    if labels is not None:
        if not isinstance(labels, np.ndarray) or labels.dtype != np.int64 or labels.shape != (M,):
            _fail(f"labels must be an int64 array of shape ({M},)")
        _range(labels, 0, K, "labels")
        if (
            not isinstance(centres, np.ndarray)
            or centres.dtype != np.float64
            or centres.shape != (K, d)
        ):
            _fail(f"centres must be a float64 array of shape ({K}, {d})")
        if not np.all(np.isfinite(centres)):
            _fail("centres must be finite")
    # a pending decision: (round, arm) with the arm in range
    pend = a._pending
    if pend is not None:
        if not isinstance(pend, tuple) or len(pend) != 2 or not all(_is_int(v) for v in pend):
            _fail("_pending must be None or a pair of integers")
        if pend[0] < 0 or pend[0] > t:
            _fail(f"_pending round {pend[0]} is not in [0, t]")
        if not 0 <= pend[1] < M:
            _fail(f"_pending arm {pend[1]} is out of range [0, {M})")
    tg = a.target
    if not isinstance(tg, np.ndarray) or tg.dtype != np.float64 or tg.shape != (M,):
        _fail(f"target must be a float64 array of shape ({M},)")
    if not np.all(np.isfinite(tg)) or np.any(tg < 0):
        _fail("target must be finite and non-negative")
    for name in ("n_forced", "n_kmeans", "n_fallback", "n_solver_retry", "kmeans_capped"):
        _count(getattr(a, name), name)


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
