"""Cluster-level ridge statistics that stay exact sums of per-user statistics.

The online clustering bandits (SCLUB and CLUB; Li, Chen, Li & Leung 2019; Gentile, Li & Zappella
2014) keep, for every user i, the sufficient statistics of a ridge regression,

    G_i = Σ x xᵀ,   b_i = Σ y x,   q_i = Σ y²,   T_i = number of rows,

and, for every running cluster C, the *pooled* statistics of its members with a single prior
("single prior, pooled likelihood", docs/maths/clustering.md §1):

    S^C = reg·I + Σ_{i∈C} G_i,   b^C = Σ_{i∈C} b_i,   T^C = Σ_{i∈C} T_i,   θ̂^C = (S^C)⁻¹ b^C.

SCLUB writes this as S^j = I + Σ_{i∈C^j}(S_i − I) with S_i = I + G_i (SCLUB §3). A split removes one
user's likelihood contribution (G_i, b_i) from a cluster and a merge adds two likelihoods and keeps
one prior, the "− I" of Algorithm 4. Both are exact operations on the sums.

:class:`ClusterStats` holds

* the per-user statistics in a :class:`~hierbandit.stats.ridge.RidgeStats` (``users``), updated
  by Sherman–Morrison in O(d²) per row;
* one *slot* per possible cluster (``n_users`` slots: clusters are never empty) with the pooled
  G, b, q, T, the inverse (S^C)⁻¹ kept current by Sherman–Morrison, θ̂^C, the member count, a
  creation order (a new cluster is newer than every live one, which orders clusters as the
  paper's indices do, a new cluster getting ``max J + 1``) and a doubly linked member list, so that iterating over a cluster costs O(|C|) and moving a user costs O(1);
* ``labels``: the slot of every user.

Set operations update the sums by exact addition/subtraction of the stored user statistics and
then recompute the affected inverses by a Cholesky factorisation (docs/sclub.md C-25). Every
cluster is also recomputed exactly from its members' statistics after each ``recompute_every`` of
its own rank-one updates, which bounds the drift of both the incremental sums and the
Sherman–Morrison inverses.

The compiled kernels (``cs_*``) trust their inputs; the policies of
:mod:`hierbandit.sclub.policies` call them from their own compiled loops. The methods of
:class:`ClusterStats` validate their arguments before anything changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr
from numba import njit

from hierbandit._validation import check_index, check_positive_int, check_scalar, check_vector
from hierbandit.stats.ridge import (
    SM_LIMIT,
    RidgeStats,
    ridge_add,
    sherman_morrison_step,
    solve_unit,
)

__all__ = ["ClusterStats", "confidence_F"]

_JIT = {"cache": True, "nogil": True}

# indices into the int64 ``meta`` array
_N_FREE = 0
_NEXT_ORDER = 1
_N_ALIVE = 2
_N_META = 3


def confidence_F(T: Any) -> Any:
    """SCLUB/CLUB confidence function F(T) = sqrt((1 + ln(1 + T)) / (1 + T)) (SCLUB Alg. 3).

    Works elementwise on arrays. ``F(0) = 1``, ``F(10) ≈ 0.556``, ``F(1000) ≈ 0.089``.
    """
    T = np.asarray(T, dtype=float)
    if np.any(T < 0):
        raise ValueError("T must be non-negative")
    out = np.sqrt((1.0 + np.log1p(T)) / (1.0 + T))
    return float(out) if out.ndim == 0 else out


# ---------------------------------------------------------------------- kernels


@njit(**_JIT)
def conf_F(T):
    """F(T) for a scalar count (compiled)."""
    return np.sqrt((1.0 + np.log(1.0 + T)) / (1.0 + T))


@njit(**_JIT)
def _link_append(c, u, head, tail, nxt, prv):
    prv[u] = tail[c]
    nxt[u] = -1
    if tail[c] >= 0:
        nxt[tail[c]] = u
    else:
        head[c] = u
    tail[c] = u


@njit(**_JIT)
def _unlink(c, u, head, tail, nxt, prv):
    p = prv[u]
    q = nxt[u]
    if p >= 0:
        nxt[p] = q
    else:
        head[c] = q
    if q >= 0:
        prv[q] = p
    else:
        tail[c] = p
    prv[u] = -1
    nxt[u] = -1


@njit(**_JIT)
def cs_recompute_cluster(U, C, L, reg, c):
    """Recompute slot ``c``'s sums exactly from its members, then its inverse and estimate."""
    uG, ub, uq, un = U[0], U[1], U[2], U[3]
    cG, cb, cq, cn, cAinv, ctheta, _size, head, _tail, _order, since = C[:11]
    nxt = L[1]
    d = cb.shape[1]
    for i in range(d):
        cb[c, i] = 0.0
        for k in range(d):
            cG[c, i, k] = 0.0
    cq[c] = 0.0
    cn[c] = 0
    u = head[c]
    while u >= 0:
        for i in range(d):
            cb[c, i] += ub[u, i]
            for k in range(d):
                cG[c, i, k] += uG[u, i, k]
        cq[c] += uq[u]
        cn[c] += un[u]
        u = nxt[u]
    solve_unit(cG, cb, reg, cAinv, ctheta, c)
    since[c] = 0


@njit(**_JIT)
def cs_recompute_all(U, C, L, reg):
    """Exact recomputation of every live cluster from its members."""
    size = C[6]
    for c in range(size.shape[0]):
        if size[c] > 0:
            cs_recompute_cluster(U, C, L, reg, c)


@njit(**_JIT)
def _alloc(C):
    """Take a free slot for a new (empty) cluster, newer than every live cluster."""
    _cG, _cb, _cq, _cn, _cAinv, _ctheta, size, head, tail, order, since, free, meta = C
    meta[_N_FREE] -= 1
    c = free[meta[_N_FREE]]
    order[c] = meta[_NEXT_ORDER]
    meta[_NEXT_ORDER] += 1
    meta[_N_ALIVE] += 1
    size[c] = 0
    head[c] = -1
    tail[c] = -1
    since[c] = 0
    return c


@njit(**_JIT)
def _release(C, c):
    _cG, _cb, _cq, _cn, _cAinv, _ctheta, size, head, tail, _order, _since, free, meta = C
    size[c] = 0
    head[c] = -1
    tail[c] = -1
    free[meta[_N_FREE]] = c
    meta[_N_FREE] += 1
    meta[_N_ALIVE] -= 1


@njit(**_JIT)
def cs_add(U, C, L, reg, user_every, cluster_every, u, x, y):
    """Add the row (x, y) to user ``u`` and to its cluster; O(d²) (Alg. 2 of SCLUB)."""
    uG, ub, uq, un, uAinv, utheta = U
    cG, cb, cq, cn, cAinv, ctheta, _size, _head, _tail, _order, since = C[:11]
    label = L[0]
    ridge_add(uG, ub, uq, un, uAinv, utheta, reg, u, x, y, user_every)
    c = label[u]
    d = x.shape[0]
    for i in range(d):
        cb[c, i] += x[i] * y
        for k in range(d):
            cG[c, i, k] += x[i] * x[k]
    cq[c] += y * y
    cn[c] += 1
    since[c] += 1
    if cluster_every > 0 and since[c] >= cluster_every:
        cs_recompute_cluster(U, C, L, reg, c)
        return
    if not sherman_morrison_step(cAinv, cb, ctheta, c, x, SM_LIMIT):
        solve_unit(cG, cb, reg, cAinv, ctheta, c)


@njit(**_JIT)
def cs_split_user(U, C, L, reg, u):
    """Move user ``u`` out of its cluster into a new singleton cluster (SCLUB Alg. 3).

    S^j ← S^j − S_u + I, b^j ← b^j − b_u, T^j ← T^j − T_u, C^j ← C^j \\ {u}, then the new cluster
    j' = max J + 1 gets S_u, b_u, T_u and C^{j'} = {u}. The caller guarantees |C^j| > 1. Returns
    the new slot.
    """
    uG, ub, uq, un, uAinv, utheta = U
    cG, cb, cq, cn, cAinv, ctheta, size, head, tail, _order, _since = C[:11]
    label, nxt, prv = L
    c = label[u]
    _unlink(c, u, head, tail, nxt, prv)
    size[c] -= 1
    d = ub.shape[1]
    for i in range(d):
        cb[c, i] -= ub[u, i]
        for k in range(d):
            cG[c, i, k] -= uG[u, i, k]
    cq[c] -= uq[u]
    cn[c] -= un[u]
    solve_unit(cG, cb, reg, cAinv, ctheta, c)
    c2 = _alloc(C)
    for i in range(d):
        cb[c2, i] = ub[u, i]
        ctheta[c2, i] = utheta[u, i]
        for k in range(d):
            cG[c2, i, k] = uG[u, i, k]
            cAinv[c2, i, k] = uAinv[u, i, k]
    cq[c2] = uq[u]
    cn[c2] = un[u]
    _link_append(c2, u, head, tail, nxt, prv)
    size[c2] = 1
    label[u] = c2
    return c2


@njit(**_JIT)
def cs_merge(U, C, L, reg, c1, c2):
    """Add cluster ``c2`` to ``c1`` and delete ``c2`` (SCLUB Alg. 4: S^{j1} ← S^{j1} + S^{j2} − I)."""
    cG, cb, cq, cn, cAinv, ctheta, size, head, tail, _order, since = C[:11]
    label, nxt, prv = L
    u = head[c2]
    while u >= 0:
        label[u] = c1
        u = nxt[u]
    if head[c2] >= 0:
        if tail[c1] >= 0:
            nxt[tail[c1]] = head[c2]
            prv[head[c2]] = tail[c1]
        else:
            head[c1] = head[c2]
        tail[c1] = tail[c2]
    d = cb.shape[1]
    for i in range(d):
        cb[c1, i] += cb[c2, i]
        for k in range(d):
            cG[c1, i, k] += cG[c2, i, k]
    cq[c1] += cq[c2]
    cn[c1] += cn[c2]
    size[c1] += size[c2]
    if since[c2] > since[c1]:
        since[c1] = since[c2]
    solve_unit(cG, cb, reg, cAinv, ctheta, c1)
    _release(C, c2)


@njit(**_JIT)
def cs_move_users(U, C, L, reg, users, count):
    """Move ``users[:count]`` (all in the same cluster, a proper subset of it) to a new cluster.

    The new cluster's sums are computed from its members; the source cluster's sums lose exactly
    those contributions. Both inverses are recomputed by Cholesky. Returns the new slot.
    """
    uG, ub, uq, un = U[0], U[1], U[2], U[3]
    cG, cb, cq, cn, cAinv, ctheta, size, head, tail, _order, _since = C[:11]
    label, nxt, prv = L
    src = label[users[0]]
    c2 = _alloc(C)
    d = cb.shape[1]
    for i in range(d):
        cb[c2, i] = 0.0
        for k in range(d):
            cG[c2, i, k] = 0.0
    cq[c2] = 0.0
    cn[c2] = 0
    for t in range(count):
        u = users[t]
        _unlink(src, u, head, tail, nxt, prv)
        _link_append(c2, u, head, tail, nxt, prv)
        label[u] = c2
        for i in range(d):
            cb[c2, i] += ub[u, i]
            for k in range(d):
                cG[c2, i, k] += uG[u, i, k]
        cq[c2] += uq[u]
        cn[c2] += un[u]
    size[src] -= count
    size[c2] = count
    for i in range(d):
        cb[src, i] -= cb[c2, i]
        for k in range(d):
            cG[src, i, k] -= cG[c2, i, k]
    cq[src] -= cq[c2]
    cn[src] -= cn[c2]
    solve_unit(cG, cb, reg, cAinv, ctheta, src)
    solve_unit(cG, cb, reg, cAinv, ctheta, c2)
    return c2


@njit(**_JIT)
def cs_assign(U, C, L, reg, labels_in):
    """Rebuild every cluster from a labelling ``labels_in`` (values 0..k-1, all used)."""
    _cG, _cb, _cq, _cn, _cAinv, _ctheta, size, head, tail, order, since, free, meta = C
    label, nxt, prv = L
    n_slots = size.shape[0]
    k = 0
    for u in range(labels_in.shape[0]):
        if labels_in[u] + 1 > k:
            k = labels_in[u] + 1
    for c in range(n_slots):
        size[c] = 0
        head[c] = -1
        tail[c] = -1
        since[c] = 0
        order[c] = 0
    # slots 0..k-1 are the clusters (order = label); the rest are free, lowest popped first
    meta[_N_FREE] = n_slots - k
    for j in range(n_slots - k):
        free[j] = n_slots - 1 - j
    meta[_NEXT_ORDER] = k
    meta[_N_ALIVE] = k
    for c in range(k):
        order[c] = c
    for u in range(labels_in.shape[0]):
        c = labels_in[u]
        label[u] = c
        _link_append(c, u, head, tail, nxt, prv)
        size[c] += 1
    for c in range(k):
        cs_recompute_cluster(U, C, L, reg, c)


# ---------------------------------------------------------------------- public class


def check_labels(labels: Any, n_users: int, name: str = "labels") -> np.ndarray:
    """Integer labels of length ``n_users``, returned renamed to 0..k-1 by first appearance."""
    from hierbandit.stats.partitions import canonical_labels

    arr = np.asarray(labels)
    if arr.shape != (n_users,):
        raise ValueError(f"{name} must have shape ({n_users},), got {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer labels, got dtype {arr.dtype}")
    return canonical_labels(arr).astype(np.int64)


class ClusterStats:
    """Per-user ridge statistics plus the pooled statistics of a partition of the users.

    Parameters
    ----------
    n_users : int
        Number of users.
    n_features : int
        Dimension d.
    reg : float, default 1.0
        Ridge regulariser of every user and of every cluster (one prior per cluster: S^C =
        reg·I + Σ G_i; SCLUB and CLUB use reg = 1).
    labels : array_like of int, optional
        Initial partition (default: one cluster holding every user, SCLUB Alg. 1 line 3).
    recompute_every : int or None, default 2000
        A cluster's sums, inverse and estimate are recomputed exactly from its members after this
        many rank-one updates of that cluster. ``None`` disables the periodic recompute (set
        operations still recompute the inverses they touch).
    user_recompute_every : int or None, default 10_000
        The same for the per-user inverses (passed to :class:`RidgeStats`).

    Attributes
    ----------
    users : RidgeStats
        Per-user G, b, q, n (= T_i), (reg·I + G)⁻¹ and θ̂_i.
    labels : ndarray of int64, shape (n_users,)
        Slot of each user's cluster (slot ids are arbitrary; see :meth:`partition`).
    G, b, q, n, Ainv, theta : ndarray
        Pooled statistics per slot (only slots with ``size > 0`` are live clusters).
    size : ndarray of int64, shape (n_users,)
        Number of members per slot.
    order : ndarray of int64, shape (n_users,)
        Creation order of each live cluster (smaller = older; orders clusters like the paper's
        indices).

    Examples
    --------
    >>> cs = ClusterStats(3, 2)
    >>> cs.add(0, [1.0, 0.0], 1.0); cs.add(2, [0.0, 1.0], 2.0)
    >>> c = cs.split(2)
    >>> cs.n_clusters, cs.n[cs.labels[0]], cs.n[c]
    (2, 1, 1)
    """

    def __init__(
        self,
        n_users: int,
        n_features: int,
        reg: float = 1.0,
        *,
        labels: Any = None,
        recompute_every: int | None = 2000,
        user_recompute_every: int | None = 10_000,
    ) -> None:
        self.n_users = check_positive_int(n_users, "n_users")
        self.n_features = check_positive_int(n_features, "n_features")
        self.reg = check_scalar(reg, "reg", low=0.0, low_inclusive=False)
        if recompute_every is not None:
            recompute_every = check_positive_int(recompute_every, "recompute_every")
        self.recompute_every = recompute_every
        self._every = 0 if recompute_every is None else recompute_every
        init = (
            np.zeros(self.n_users, dtype=np.int64)
            if labels is None
            else check_labels(labels, self.n_users)
        )
        self.users = RidgeStats(
            self.n_users, self.n_features, self.reg, recompute_every=user_recompute_every
        )
        U, d = self.n_users, self.n_features
        self.G = np.zeros((U, d, d))
        self.b = np.zeros((U, d))
        self.q = np.zeros(U)
        self.n = np.zeros(U, dtype=np.int64)
        self.Ainv = np.zeros((U, d, d))
        self.theta = np.zeros((U, d))
        self.size = np.zeros(U, dtype=np.int64)
        self.head = np.full(U, -1, dtype=np.int64)
        self.tail = np.full(U, -1, dtype=np.int64)
        self.order = np.zeros(U, dtype=np.int64)
        self.since = np.zeros(U, dtype=np.int64)
        self.free = np.zeros(U, dtype=np.int64)
        self.meta = np.zeros(_N_META, dtype=np.int64)
        self.labels = np.zeros(U, dtype=np.int64)
        self.next = np.full(U, -1, dtype=np.int64)
        self.prev = np.full(U, -1, dtype=np.int64)
        cs_assign(*self._state(), self.reg, init)

    # ------------------------------------------------------------------ kernel state
    def _state(self) -> tuple[tuple, tuple, tuple]:
        """(user arrays, cluster arrays, membership arrays) for the ``cs_*`` kernels."""
        us = self.users
        U = (us.G, us.b, us.q, us.n, us.Ainv, us.theta)
        C = (
            self.G,
            self.b,
            self.q,
            self.n,
            self.Ainv,
            self.theta,
            self.size,
            self.head,
            self.tail,
            self.order,
            self.since,
            self.free,
            self.meta,
        )
        L = (self.labels, self.next, self.prev)
        return U, C, L

    # ------------------------------------------------------------------ inspection
    @property
    def n_clusters(self) -> int:
        """Number of live clusters."""
        return int(self.meta[_N_ALIVE])

    def live(self) -> np.ndarray:
        """Slots of the live clusters, oldest first (by creation order)."""
        slots = np.flatnonzero(self.size > 0)
        return slots[np.argsort(self.order[slots], kind="stable")]

    def members(self, cluster: int) -> np.ndarray:
        """Users of the cluster in slot ``cluster`` (in membership-list order)."""
        c = self._check_cluster(cluster, "cluster")
        out = []
        u = int(self.head[c])
        while u >= 0:
            out.append(u)
            u = int(self.next[u])
        return np.asarray(out, dtype=np.int64)

    def partition(self) -> np.ndarray:
        """Canonical labels 0..k-1 (renamed by first appearance over users)."""
        from hierbandit.stats.partitions import canonical_labels

        return canonical_labels(self.labels)

    def discrepancy(self) -> float:
        """Largest absolute difference between a cluster's sums and the sums over its members.

        Zero up to rounding; exactly zero when all arithmetic is exact (e.g. dyadic data).
        """
        us = self.users
        worst = 0.0
        for c in np.flatnonzero(self.size > 0):
            m = self.labels == c
            worst = max(
                worst,
                float(np.max(np.abs(self.G[c] - us.G[m].sum(axis=0)))),
                float(np.max(np.abs(self.b[c] - us.b[m].sum(axis=0)))),
                abs(float(self.q[c] - us.q[m].sum())),
                abs(float(self.n[c] - us.n[m].sum())),
            )
        return worst

    def to_dataset(self) -> xr.Dataset:
        """Live clusters (dimension ``cluster``, oldest first) and the user labels.

        Variables: ``labels`` (user) as canonical cluster numbers in the order of ``cluster``;
        ``G`` ``(cluster, feature, feature_)``, ``b`` and ``theta`` (cluster, feature), ``count``
        (T^C) and ``size`` (cluster).
        """
        slots = self.live()
        rank = np.empty(self.n_users, dtype=np.int64)
        rank[slots] = np.arange(slots.size)
        d = self.n_features
        return xr.Dataset(
            {
                "labels": (("user",), rank[self.labels]),
                "G": (("cluster", "feature", "feature_"), self.G[slots].copy()),
                "b": (("cluster", "feature"), self.b[slots].copy()),
                "theta": (("cluster", "feature"), self.theta[slots].copy()),
                "count": (("cluster",), self.n[slots].copy()),
                "size": (("cluster",), self.size[slots].copy()),
            },
            coords={
                "user": np.arange(self.n_users),
                "cluster": np.arange(slots.size),
                "feature": np.arange(d),
                "feature_": np.arange(d),
            },
            attrs={"reg": self.reg},
        )

    # ------------------------------------------------------------------ validated operations
    def _check_cluster(self, cluster: Any, name: str) -> int:
        c = check_index(cluster, self.n_users, name)
        if self.size[c] == 0:
            raise ValueError(f"{name}={c} is not a live cluster")
        return c

    def add(self, user: int, x: Any, y: float) -> None:
        """Add the observation (x, y) of ``user`` to the user and its cluster."""
        u = check_index(user, self.n_users, "user")
        x = check_vector(x, self.n_features, "x")
        y = check_scalar(y, "y")
        U, C, L = self._state()
        cs_add(U, C, L, self.reg, self.users._every, self._every, u, x, y)

    def split(self, user: int) -> int:
        """Move ``user`` out of its cluster into a new singleton cluster; returns its slot."""
        u = check_index(user, self.n_users, "user")
        if self.size[self.labels[u]] < 2:
            raise ValueError(f"user {u} is alone in its cluster; a split would leave it empty")
        return int(cs_split_user(*self._state(), self.reg, u))

    def merge(self, cluster1: int, cluster2: int) -> int:
        """Add cluster ``cluster2`` to ``cluster1`` and delete ``cluster2``; returns ``cluster1``."""
        c1 = self._check_cluster(cluster1, "cluster1")
        c2 = self._check_cluster(cluster2, "cluster2")
        if c1 == c2:
            raise ValueError("cluster1 and cluster2 must differ")
        cs_merge(*self._state(), self.reg, c1, c2)
        return c1

    def move(self, users: Any) -> int:
        """Move ``users`` (distinct, from one cluster, not all of it) into a new cluster."""
        arr = np.atleast_1d(np.asarray(users))
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError("users must be a non-empty 1-d array of user ids")
        if arr.dtype.kind not in "iu":
            raise TypeError(f"users must hold integer ids, got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
        if arr.min() < 0 or arr.max() >= self.n_users:
            raise ValueError(f"users must be in [0, {self.n_users})")
        if np.unique(arr).size != arr.size:
            raise ValueError("users must be distinct")
        src = np.unique(self.labels[arr])
        if src.size != 1:
            raise ValueError("users must all belong to the same cluster")
        if arr.size >= self.size[src[0]]:
            raise ValueError("users must be a proper subset of their cluster")
        return int(cs_move_users(*self._state(), self.reg, arr, arr.size))

    def assign(self, labels: Any) -> None:
        """Replace the partition by ``labels`` (cluster sums recomputed from the users)."""
        lab = check_labels(labels, self.n_users)
        cs_assign(*self._state(), self.reg, lab)

    def recompute(self) -> None:
        """Recompute every cluster's sums, inverse and estimate exactly from its members."""
        cs_recompute_all(*self._state(), self.reg)

    def __repr__(self) -> str:
        return (
            f"ClusterStats(n_users={self.n_users}, n_features={self.n_features}, "
            f"reg={self.reg}, n_clusters={self.n_clusters})"
        )
