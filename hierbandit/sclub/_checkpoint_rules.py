"""Rules for restored SCLUB, CLUB, LinUCB-One/Ind and ClusterStats state (see :mod:`hierbandit._restore_rules`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hierbandit._restore import RULES, Rule
from hierbandit._restore_rules import (
    check_suffstats,
    close,
    count,
    fail,
    fro,
    in_range,
    nonneg,
    symmetric,
)

__all__: list[str] = []

_CL = "hierbandit.sclub.policies:"
_CS = "hierbandit.sclub.cluster_stats:"

# ---------------------------------------------------------------------- ClusterStats

_N_FREE, _NEXT_ORDER, _N_ALIVE = 0, 1, 2


def _check_cluster_stats(cs: Any) -> None:
    U = cs.n_users
    for name in ("labels", "head", "tail", "next", "prev", "free", "size", "order", "since", "n"):
        a = getattr(cs, name)
        if a.shape[:1] != (U,):  # pragma: no cover - the template fixes the shapes
            fail(f"{name} has shape {a.shape}")
    in_range(cs.labels, 0, U, "labels")
    for name in ("head", "tail", "next", "prev"):
        in_range(getattr(cs, name), -1, U, name)
    in_range(cs.size, 0, U + 1, "size")
    nonneg(cs.since, "since")
    if cs._every > 0:
        in_range(cs.since, 0, cs._every, "since")
    nonneg(cs.order, "order")
    nonneg(cs.n, "n")
    meta = cs.meta
    n_free, next_order, n_alive = int(meta[_N_FREE]), int(meta[_NEXT_ORDER]), int(meta[_N_ALIVE])
    live = cs.size > 0
    n_live = int(np.count_nonzero(live))
    if n_alive != n_live:
        fail(f"meta[_N_ALIVE] = {n_alive} but {n_live} slots have members")
    if n_free != U - n_live:
        fail(f"meta[_N_FREE] = {n_free} but {U - n_live} slots are free")
    if n_live == 0:
        fail("size: no live cluster")
    if int(cs.size.sum()) != U:
        fail(f"size sums to {int(cs.size.sum())}, not n_users = {U}")
    # the free stack holds exactly the dead slots
    free = cs.free[:n_free]
    in_range(free, 0, U, "free")
    if np.unique(free).size != n_free or np.any(live[free]):
        fail("free does not hold exactly the dead slots")
    dead = ~live
    if np.any(cs.head[dead] != -1) or np.any(cs.tail[dead] != -1):
        fail("head/tail of a free slot is not -1")
    orders = cs.order[live]
    if np.unique(orders).size != n_live:
        fail("order of live clusters is not distinct")
    if next_order <= int(orders.max()):
        fail(f"meta[_NEXT_ORDER] = {next_order} is not above every live order")
    # labels point at live slots with the right member counts
    if not np.all(live[cs.labels]):
        fail("labels names a slot without members")
    if np.any(np.bincount(cs.labels, minlength=U) != cs.size):
        fail("size does not match the number of users labelled with each slot")
    # member lists: from head through next, within size steps, the users of the slot, ending
    # at tail, with prev mirroring next (every user is then in exactly one list)
    labels, nxt, prv = cs.labels.tolist(), cs.next.tolist(), cs.prev.tolist()
    head, tail, size = cs.head.tolist(), cs.tail.tolist(), cs.size.tolist()
    seen = bytearray(U)
    for c in np.flatnonzero(live).tolist():
        u, p, k = head[c], -1, 0
        while u >= 0:
            if k >= size[c] or seen[u]:
                fail(f"next: the member list of slot {c} does not end after size = {size[c]}")
            if labels[u] != c:
                fail(f"next: user {u} in the list of slot {c} has labels = {labels[u]}")
            if prv[u] != p:
                fail(f"prev[{u}] = {prv[u]} does not mirror next ({p})")
            seen[u] = 1
            p, u, k = u, nxt[u], k + 1
        if k != size[c]:
            fail(f"head: the member list of slot {c} has {k} users, size = {size[c]}")
        if tail[c] != p:
            fail(f"tail[{c}] = {tail[c]} is not the last member ({p})")
    # pooled statistics equal the sums of their members' statistics
    us = cs.users
    slots = np.flatnonzero(live)
    n_sum = np.zeros(U, dtype=np.int64)
    np.add.at(n_sum, cs.labels, us.n)
    if np.any(n_sum[slots] != cs.n[slots]):
        c = slots[np.flatnonzero(n_sum[slots] != cs.n[slots])[0]]
        fail(f"n[{c}] = {cs.n[c]} is not the sum of its members' counts ({n_sum[c]})")
    d = cs.n_features
    G_sum = np.zeros((U, d, d))
    np.add.at(G_sum, cs.labels, us.G)
    b_sum = np.zeros((U, d))
    np.add.at(b_sum, cs.labels, us.b)
    q_sum = np.zeros(U)
    np.add.at(q_sum, cs.labels, us.q)
    G_abs = np.zeros(U)
    np.add.at(G_abs, cs.labels, fro(us.G))
    tr = np.zeros(U)
    np.add.at(tr, cs.labels, np.trace(us.G, axis1=1, axis2=2))
    q_abs = np.zeros(U)
    np.add.at(q_abs, cs.labels, np.abs(us.q))
    close(cs.G[slots], G_sum[slots], G_abs[slots], "G")
    # |b| ≤ sqrt(Σy² · tr Σxxᵀ) bounds the magnitude of the summands of b
    close(cs.b[slots], b_sum[slots], np.sqrt(q_abs[slots] * tr[slots]), "b")
    close(cs.q[slots, None], q_sum[slots, None], q_abs[slots], "q")
    check_suffstats(cs.G[slots], cs.q[slots], cs.n[slots])
    symmetric(cs.Ainv[slots], "Ainv")
    if not np.all(np.diagonal(cs.Ainv[slots], axis1=-2, axis2=-1) > 0):
        fail("Ainv diagonal must be positive")


RULES[_CS + "ClusterStats"] = Rule(fixed=frozenset({"_every"}), check=_check_cluster_stats)


# ---------------------------------------------------------------------- clustering policies


def _check_clustering_common(p: Any) -> None:
    # the statistics' sizes and settings are checked against the policy's configuration by
    # the template comparison (scalar constructor arguments of nested objects)
    t = count(p.t, "t")
    rows = p.stats.users.n if hasattr(p.stats, "users") else p.stats.n
    if int(rows.sum()) != t:
        fail(f"t = {t} is not the number of rows of the statistics")


def _check_sclub(p: Any) -> None:
    _check_clustering_common(p)
    cs = p.stats
    U = p.n_users
    live = cs.size > 0
    slots = np.flatnonzero(live)
    sm = p._sm
    epoch = int(sm[0])
    if epoch < 0:
        fail(f"_sm[0] (epoch) = {epoch} is negative")
    ustamp = sm[1:]
    if np.any((ustamp != -1) & ((ustamp < 0) | (ustamp > epoch))):
        fail("_sm holds a user stamp outside [-1, epoch]")
    in_range(p._cstamp, 0, epoch + 1, "_cstamp")
    nonneg(p.pivot_count, "pivot_count")
    # checked counts of the slots stamped in this epoch
    checked = ustamp == epoch
    if np.any(checked & (p._cstamp[cs.labels] != epoch)):
        fail("_cstamp: a checked user's cluster is not stamped in the current epoch")
    nchk = np.bincount(cs.labels[checked], minlength=U)
    cur = live & (p._cstamp == epoch)
    if np.any(p._nchk[cur] != nchk[cur]):
        fail("_nchk does not count the checked members of a cluster")
    in_range(p._nchk, 0, U + 1, "_nchk")
    # member count extremes of the live clusters
    un = cs.users.n
    lo = np.full(U, np.iinfo(np.int64).max)
    hi = np.full(U, -1)
    np.minimum.at(lo, cs.labels, un)
    np.maximum.at(hi, cs.labels, un)
    if np.any(p._tmin[slots] != lo[slots]):
        fail("_tmin is not the smallest member count of a cluster")
    if np.any(p._tmax[slots] != hi[slots]):
        fail("_tmax is not the largest member count of a cluster")
    nmin = np.bincount(cs.labels[un == lo[cs.labels]], minlength=U)
    if np.any(p._nmin[slots] != nmin[slots]):
        fail("_nmin does not count the members at the smallest count")
    in_range(p._nmin, 0, U + 1, "_nmin")
    # reference-code aliasing: only when configured, only for a user alone in its cluster
    alias = p._alias
    if alias.any():
        if not p.double_count_split:
            fail("_alias is set without double_count_split")
        if np.any(cs.size[cs.labels[alias]] != 1):
            fail("_alias is set for a user that is not alone in its cluster")
    cF, k0 = p._XF
    from hierbandit.sclub.cluster_stats import confidence_F

    if not np.allclose(cF[slots], confidence_F(cs.n[slots]), rtol=1e-9, atol=0):
        fail("_XF: F(T) of a cluster does not match its count")
    if np.any(k0[slots] != cs.theta[slots, : k0.shape[1]]):
        fail("_XF: the leading coordinates do not match theta")


def _check_club(p: Any) -> None:
    _check_clustering_common(p)
    from hierbandit.sclub.cluster_stats import confidence_F
    from hierbandit.sclub.policies import _components
    from hierbandit.stats.partitions import canonical_labels

    cs = p.stats
    U = p.n_users
    adj = p.adjacency
    bits = np.unpackbits(adj.view(np.uint8), axis=1, bitorder="little")
    if np.any(bits[:, U:]):
        fail("adjacency has bits beyond n_users")
    E = bits[:, :U].astype(bool)
    if np.any(np.diagonal(E)):
        fail("adjacency has a self-loop")
    if np.any(E != E.T):
        fail("adjacency is not symmetric")
    comp = _components(adj)
    if np.any(comp != canonical_labels(cs.labels)):
        fail("adjacency: the clusters are not the connected components of the graph")
    (uF,) = p._UF
    if not np.allclose(uF, confidence_F(cs.users.n), rtol=1e-9, atol=0):
        fail("_UF: F(T_i) of a user does not match its count")


def _check_linucb(p: Any) -> None:
    _check_clustering_common(p)
    s = p.stats
    G, _b, q, n = p._pu
    check_suffstats(G, q, n, "_pu ")
    if p._one:
        if int(n.sum()) != int(s.n[0]):
            fail("_pu: the per-user counts do not sum to the pooled count")
        close(s.G, G.sum(axis=0)[None], np.array([fro(G).sum()]), "G")


# settings the constructor derives from the configuration (the kernels' integer and float
# parameter vectors, periods, the bonus constant)
_CL_FIXED = frozenset({"_every", "_beta_const"})
RULES[_CL + "SCLUB"] = Rule(fixed=_CL_FIXED | {"_ip", "_fp"}, check=_check_sclub)
RULES[_CL + "CLUB"] = Rule(fixed=_CL_FIXED | {"_uevery"}, check=_check_club)
RULES[_CL + "LinUCBOne"] = Rule(fixed=_CL_FIXED, check=_check_linucb)
RULES[_CL + "LinUCBInd"] = Rule(fixed=_CL_FIXED, check=_check_linucb)
