"""Compiled kernels of SCLUB, CLUB and the LinUCB baselines (numba; see :mod:`hierbandit.sclub.policies`).

The policies' state lives in flat arrays (users ``U``, clusters ``C``, labels and member lists
``L``, SCLUB's integer parameters ``ip`` and scratch ``sm``, CLUB's bitset graph); a kernel takes
them and the round's input and changes them in place. ``select``/``update`` of the classes and
their compiled block loops ``_run`` call these same step functions, so both paths make the same
decisions. The kernels trust their inputs: the classes validate them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from hierbandit.sclub.cluster_stats import conf_F, cs_add, cs_merge, cs_move_users, cs_split_user
from hierbandit.stats.ridge import ridge_add, suff_add

_JIT = {"cache": True, "nogil": True}

# ---------------------------------------------------------------------- shared kernels


@njit(**_JIT)
def _beta(const, n, tau, d):
    """β(N, τ): the anytime bound when ``const < 0``, else the constant."""
    if const >= 0.0:
        return const
    t = tau if tau >= 1 else 1
    return math.sqrt(d * math.log(1.0 + n / d) + 4.0 * math.log(t) + math.log(2.0)) + 1.0


@njit(**_JIT)
def _ucb_choose(Ainv, theta, slot, n, items, tau, beta_const, sqrt_bonus, tie_u):
    """argmax_k θ̂ᵀx_k + β‖x_k‖_{A⁻¹} (or β x_kᵀA⁻¹x_k without the square root).

    Exact ties are broken by ``tie_u`` ∈ [0, 1) (uniformly among the tied items), or towards
    the first item when ``tie_u < 0``.
    """
    scores = np.empty(items.shape[0])
    _ucb_scores(Ainv, theta, slot, n, items, _ALL, tau, beta_const, sqrt_bonus, scores)
    return _pick(scores, _ALL, tie_u)


#: the mask of :func:`_ucb_scores` and :func:`_pick` that allows every item
_ALL = np.zeros(0, dtype=np.bool_)


@njit(**_JIT)
def _ucb_scores(Ainv, theta, slot, n, items, allow, tau, beta_const, sqrt_bonus, scores):
    """The index θ̂ᵀx_k + β‖x_k‖_{A⁻¹} of the model in ``slot`` (count ``n``) for the items
    with ``allow[k]`` (every item when ``allow`` is empty), written to ``scores[k]``."""
    L = items.shape[0]
    d = items.shape[1]
    masked = allow.shape[0] > 0
    beta = _beta(beta_const, n, tau, d)
    for k in range(L):
        if masked and not allow[k]:
            continue
        m = 0.0
        v = 0.0
        for i in range(d):
            xi = items[k, i]
            m += xi * theta[slot, i]
            t = 0.0
            for l in range(d):
                t += Ainv[slot, i, l] * items[k, l]
            v += xi * t
        if v < 0.0:
            v = 0.0
        scores[k] = m + beta * (math.sqrt(v) if sqrt_bonus else v)


@njit(**_JIT)
def _pick(scores, allow, tie_u):
    """The first of the largest ``scores`` over the allowed items (every item when ``allow``
    is empty; at least one is allowed), or with ``tie_u`` ∈ [0, 1) one of the tied ones,
    uniformly. The index of an item does not depend on the others, so restricting the argmax
    and its ties to the allowed items is the same as choosing among those items alone."""
    L = scores.shape[0]
    masked = allow.shape[0] > 0
    best = -np.inf
    first = -1
    for k in range(L):
        if masked and not allow[k]:
            continue
        if first < 0 or scores[k] > best:
            best = scores[k]
            first = k
    count = 0
    for k in range(first, L):
        if (not masked or allow[k]) and scores[k] == best:
            count += 1
    if count <= 1 or tie_u < 0.0:
        return first
    pick = int(tie_u * count)
    if pick >= count:
        pick = count - 1
    for k in range(first, L):
        if (not masked or allow[k]) and scores[k] == best:
            if pick == 0:
                return k
            pick -= 1
    return first  # pragma: no cover


@njit(**_JIT)
def _ucb_rows(Ainv, theta, counts, slots, items, allow, tau, beta_const, sqrt_bonus, ties, out):
    """The choices of B requests against one state: request ``r`` is scored with the model in
    slot ``slots[r]`` (count ``counts[slot]``) on ``items[r]`` restricted to ``allow[r]``
    (``allow`` of shape ``(0, L)``: no mask) and takes the tie draw ``ties[r]``; the choices go
    to ``out``. When one item set is shared (``items`` of shape ``(1, L, d)``) the scores of a
    slot are computed once, at its first request, and reused (the same numbers)."""
    B = slots.shape[0]
    L = items.shape[1]
    shared = items.shape[0] == 1
    masked = allow.shape[0] > 0
    none = np.zeros(0, dtype=np.bool_)
    if shared:
        cache = np.empty((Ainv.shape[0], L))
        done = np.zeros(Ainv.shape[0], dtype=np.bool_)
        for r in range(B):
            c = slots[r]
            if not done[c]:
                _ucb_scores(
                    Ainv, theta, c, counts[c], items[0], none, tau, beta_const, sqrt_bonus, cache[c]
                )
                done[c] = True
            out[r] = _pick(cache[c], allow[r] if masked else none, ties[r])
        return
    scores = np.empty(L)
    for r in range(B):
        c = slots[r]
        a = allow[r] if masked else none
        _ucb_scores(Ainv, theta, c, counts[c], items[r], a, tau, beta_const, sqrt_bonus, scores)
        out[r] = _pick(scores, a, ties[r])


@njit(**_JIT)
def _within(flat, bound):
    """Whether every entry of ``flat`` is finite with magnitude at most ``bound`` (one pass,
    no temporaries: the check of a batch's items before anything is scored)."""
    for i in range(flat.shape[0]):  # noqa: SIM110 (a compiled loop, not a generator)
        if not abs(flat[i]) <= bound:  # NaN fails too
            return False
    return True


@njit(**_JIT)
def _reward(mean, noise, bernoulli):
    if bernoulli:
        return 1.0 if noise < mean else 0.0
    return mean + noise


# ---------------------------------------------------------------------- LinUCB kernels


@njit(**_JIT)
def _ridge_select(R, beta_const, sqrt_bonus, slot, items, tau, tie_u):
    _G, _b, _q, n, Ainv, theta = R
    return _ucb_choose(Ainv, theta, slot, n[slot], items, tau, beta_const, sqrt_bonus, tie_u)


@njit(**_JIT)
def _ridge_run(
    R,
    P,
    reg,
    every,
    beta_const,
    sqrt_bonus,
    one,
    users,
    items,
    means,
    noise,
    bern,
    ties,
    t0,
    choices,
    ncl,
):
    G, b, q, n, Ainv, theta = R
    n_models = 1 if one else n.shape[0]
    for t in range(users.shape[0]):
        u = users[t]
        slot = 0 if one else u
        tau = t0 + t + 1
        k = _ucb_choose(Ainv, theta, slot, n[slot], items[t], tau, beta_const, sqrt_bonus, ties[t])
        choices[t] = k
        y = _reward(means[t, k], noise[t], bern)
        ridge_add(G, b, q, n, Ainv, theta, reg, slot, items[t, k], y, every)
        if one:
            suff_add(P[0], P[1], P[2], P[3], u, items[t, k], y)
        ncl[t] = n_models


@njit(**_JIT)
def _ridge_update_rows(R, P, reg, every, one, users, items, ys):
    """The LinUCB update of the rows ``(users[r], items[r], ys[r])`` in order: the ridge
    statistics of the user's model (the shared one when ``one``) and, for LinUCB-One, the
    per-user statistics of the audit."""
    G, b, q, n, Ainv, theta = R
    for r in range(users.shape[0]):
        u = users[r]
        slot = 0 if one else u
        ridge_add(G, b, q, n, Ainv, theta, reg, slot, items[r], ys[r], every)
        if one:
            suff_add(P[0], P[1], P[2], P[3], u, items[r], ys[r])


# ---------------------------------------------------------------------- SCLUB kernels

# integer parameters of SCLUB (``ip``)
_FREQ, _PIVOT, _UNCHECK, _MERGE, _UEVERY, _CEVERY, _SQRT, _ALIAS = range(8)
# SCLUB scratch state (``sm``): epoch
_EPOCH = 0


@njit(**_JIT)
def _rescan_freq(C, L, un, tmin, tmax, nmin, c):
    """Recompute the smallest/largest member count T_i of cluster ``c`` (and ties at the min)."""
    head = C[7]
    nxt = L[1]
    lo = np.int64(-1)
    hi = np.int64(-1)
    cnt = 0
    u = head[c]
    while u >= 0:
        v = un[u]
        if lo < 0 or v < lo:
            lo = v
            cnt = 1
        elif v == lo:
            cnt += 1
        if v > hi:
            hi = v
        u = nxt[u]
    tmin[c] = lo
    tmax[c] = hi
    nmin[c] = cnt


# Small helpers used inside the per-candidate loops are inlined at the Numba IR level and take
# plain arrays: an ordinary call with a tuple of arrays costs a reference-count round trip per
# array, which dominated the merge scan before.
_INLINE = {"cache": True, "nogil": True, "inline": "always"}


@njit(**_INLINE)
def _fresh(cstamp, nchk, epoch, c):
    """Lazy unchecking before ``nchk[c]`` is modified: a cluster last touched in an earlier
    epoch has no checked member."""
    if cstamp[c] != epoch:
        cstamp[c] = epoch
        nchk[c] = 0


@njit(**_INLINE)
def _consistent(cn, ctheta, size, cF, alpha_theta, alpha_p, freq, tau, Ftau, c1, c2):
    """SCLUB Alg. 4 merge test: ‖θ̂^{j1} − θ̂^{j2}‖ < α_θ/2 (F(T^{j1}) + F(T^{j2})) and
    |p̂^{j1} − p̂^{j2}| < α_p F(τ), with p̂^j = T^j / (|C^j| τ) and ``cF[j] = F(T^j)``."""
    if freq != 0:
        p1 = cn[c1] / (size[c1] * tau)
        p2 = cn[c2] / (size[c2] * tau)
        if not abs(p1 - p2) < alpha_p * Ftau:
            return False
    thr = 0.5 * alpha_theta * (cF[c1] + cF[c2])
    dist = 0.0
    for i in range(ctheta.shape[1]):
        diff = ctheta[c1, i] - ctheta[c2, i]
        dist += diff * diff
    return math.sqrt(dist) < thr


@njit(**_INLINE)
def _lead(k0, ctheta, c):
    """Copy the leading coordinates of θ̂^c into the compact array ``k0``."""
    for i in range(k0.shape[1]):
        k0[c, i] = ctheta[c, i]


@njit(**_JIT)
def _merge_partner(
    cn, ctheta, size, order, cstamp, nchk, cF, k0, alpha_theta, alpha_p, freq, tau, Ftau, epoch, c
):
    """The lowest-index checked cluster consistent with ``c`` (−1 if none): App. E's scan.

    The test of :func:`_consistent` is written out here so the loop makes no calls. Cheap
    necessary conditions come first: the distance over the leading coordinates of the
    estimates (``k0``, a compact copy that stays in cache, so most candidates are rejected
    without touching their rows), then the frequencies; the full distance stops accumulating
    past the threshold.
    """
    best = -1
    best_order = np.iinfo(np.int64).max
    d = ctheta.shape[1]
    pc = cn[c] / (size[c] * tau)
    lim_p = alpha_p * Ftau
    half = 0.5 * alpha_theta
    Fc = cF[c]
    nk = k0.shape[1]
    for c2 in range(size.shape[0]):
        if size[c2] == 0 or c2 == c:
            continue
        thr = half * (Fc + cF[c2])
        thr2 = thr * thr
        part = 0.0  # partial distance over the leading coordinates (contiguous copy)
        for i in range(nk):
            diff = k0[c, i] - k0[c2, i]
            part += diff * diff
        if part >= thr2:
            continue
        if order[c2] >= best_order:
            continue
        if cstamp[c2] != epoch or nchk[c2] != size[c2]:
            continue
        if freq != 0 and not abs(pc - cn[c2] / (size[c2] * tau)) < lim_p:
            continue
        dist = 0.0
        for i in range(d):
            diff = ctheta[c, i] - ctheta[c2, i]
            dist += diff * diff
            if dist >= thr2:
                break
        if dist < thr2:
            best = c2
            best_order = order[c2]
    return best


@njit(**_JIT)
def _do_merge(U, C, L, X, reg, epoch, c1, c2):
    """Merge c2 into c1 with the SCLUB bookkeeping (checked counts, member count extremes)."""
    _ptheta, _pT, cstamp, nchk, tmin, tmax, nmin, alias = X
    head, size = C[7], C[6]
    for c in (c1, c2):  # a merged cluster gets new statistics arrays in the reference code
        if size[c] == 1:
            alias[head[c]] = False
    _fresh(cstamp, nchk, epoch, c1)
    _fresh(cstamp, nchk, epoch, c2)
    nchk[c1] += nchk[c2]
    lo = tmin[c1] if tmin[c1] < tmin[c2] else tmin[c2]
    cnt = 0
    if tmin[c1] == lo:
        cnt += nmin[c1]
    if tmin[c2] == lo:
        cnt += nmin[c2]
    tmin[c1] = lo
    nmin[c1] = cnt
    if tmax[c2] > tmax[c1]:
        tmax[c1] = tmax[c2]
    cs_merge(U, C, L, reg, c1, c2)


@njit(**_JIT)
def _sclub_select(U, C, L, fp, ip, u, items, tau, tie_u):
    cn, cAinv, ctheta = C[3], C[4], C[5]
    label = L[0]
    c = label[u]
    return _ucb_choose(cAinv, ctheta, c, cn[c], items, tau, fp[2], ip[_SQRT] == 1, tie_u)


@njit(**_JIT)
def _sclub_update(U, C, L, X, XF, sm, fp, ip, reg, u, x, y, tau):
    """Algorithm 1 lines 5–6 (at a phase start) and 12–15 for one round."""
    _uG, _ub, _uq, un, _uAinv, utheta = U
    _cG, _cb, _cq, cn, _cAinv, ctheta, size, _head, _tail, order, _since, _free, _meta = C
    label = L[0]
    ptheta, pT, cstamp, nchk, tmin, tmax, nmin, alias = X
    ustamp = sm[1:]
    d = x.shape[0]
    alpha_theta, alpha_p = fp[0], fp[1]
    phase_start = ((tau + 1) & tau) == 0  # τ = 2^s − 1 opens phase s
    if phase_start and ip[_PIVOT] == 0:
        for c in range(size.shape[0]):  # line 6: pivots frozen for the phase
            if size[c] > 0:
                pT[c] = cn[c]
                for i in range(d):
                    ptheta[c, i] = ctheta[c, i]
    if ip[_UNCHECK] == 1 or phase_start:  # line 5 (or every round, as the reference code)
        sm[_EPOCH] += 1
    epoch = sm[_EPOCH]
    Ftau = conf_F(tau)

    # ---- Update (Alg. 2)
    c = label[u]
    before = un[u]
    if alias[u]:
        # reference-code aliasing (``double_count_split``): the user and its split-off
        # cluster share one S and b, so the row is added twice: (√2 x, √2 y), T counted once
        r2 = math.sqrt(2.0)
        x = r2 * x
        y = r2 * y
    cs_add(U, C, L, reg, ip[_UEVERY], ip[_CEVERY], u, x, y)
    cF, k0 = XF  # F(T^j) and the leading coordinates of θ̂^j per slot, kept current
    cF[c] = conf_F(cn[c])
    _lead(k0, ctheta, c)
    after = un[u]
    if after > tmax[c]:
        tmax[c] = after
    if before == tmin[c]:
        nmin[c] -= 1
        if nmin[c] == 0:
            _rescan_freq(C, L, un, tmin, tmax, nmin, c)

    # ---- Split (Alg. 3); a singleton cluster is never split (C-20)
    if size[c] > 1:
        if ip[_PIVOT] == 0:
            piv_T = pT[c]
            dist = 0.0
            for i in range(d):
                diff = utheta[u, i] - ptheta[c, i]
                dist += diff * diff
        else:
            piv_T = cn[c]
            dist = 0.0
            for i in range(d):
                diff = utheta[u, i] - ctheta[c, i]
                dist += diff * diff
        split = math.sqrt(dist) > alpha_theta * (conf_F(after) + conf_F(piv_T))
        if not split and ip[_FREQ] != 0:
            thr = 2.0 * alpha_p * Ftau
            if ip[_FREQ] == 1:  # paper: against every other member i'
                gap = after - tmin[c]
                if tmax[c] - after > gap:
                    gap = tmax[c] - after
                split = gap / tau > thr
            else:  # reference code: against the cluster average
                split = abs(after / tau - cn[c] / (size[c] * tau)) > thr
        if split:
            _fresh(cstamp, nchk, epoch, c)
            if ustamp[u] == epoch:
                nchk[c] -= 1
                ustamp[u] = -1  # counted again below, in its new cluster
            c2 = cs_split_user(U, C, L, reg, u)
            cF[c] = conf_F(cn[c])
            cF[c2] = conf_F(cn[c2])
            _lead(k0, ctheta, c)
            _lead(k0, ctheta, c2)
            if after == tmin[c] or after == tmax[c]:
                _rescan_freq(C, L, un, tmin, tmax, nmin, c)
            tmin[c2] = after
            tmax[c2] = after
            nmin[c2] = 1
            pT[c2] = cn[c2]  # a cluster created mid-phase gets its pivot at creation (C-19)
            for i in range(d):
                ptheta[c2, i] = ctheta[c2, i]
            cstamp[c2] = epoch
            nchk[c2] = 0
            if ip[_ALIAS] == 1:
                alias[u] = True
            c = c2

    # ---- mark the user checked (line 14)
    _fresh(cstamp, nchk, epoch, c)
    if ustamp[u] != epoch:
        ustamp[u] = epoch
        nchk[c] += 1

    # ---- Merge (Alg. 4)
    freq = ip[_FREQ]
    if ip[_MERGE] == 0:
        # App. E: only the current user's cluster; merge it with the lowest-index consistent
        # checked cluster, repeatedly
        # a cluster is checked iff it was touched in this epoch and all its users are checked
        # (read-only test: writing the lazy reset inside this loop made it ten times slower)
        while cstamp[c] == epoch and nchk[c] == size[c]:
            best = _merge_partner(
                cn,
                ctheta,
                size,
                order,
                cstamp,
                nchk,
                cF,
                k0,
                alpha_theta,
                alpha_p,
                freq,
                tau,
                Ftau,
                epoch,
                c,
            )
            if best < 0:
                break
            if order[best] < order[c]:
                _do_merge(U, C, L, X, reg, epoch, best, c)
                c = best
            else:
                _do_merge(U, C, L, X, reg, epoch, c, best)
            cF[c] = conf_F(cn[c])
            _lead(k0, ctheta, c)
    else:
        # full pairwise scan over checked clusters j1 < j2 (reference code); only checked
        # clusters can take part, and merging two checked clusters keeps the result checked
        n_slots = size.shape[0]
        cnt = 0
        for c1 in range(n_slots):
            if size[c1] > 0 and cstamp[c1] == epoch and nchk[c1] == size[c1]:
                cnt += 1
        if cnt >= 2:
            slots = np.empty(cnt, dtype=np.int64)
            keys = np.empty(cnt, dtype=np.int64)
            k = 0
            for c1 in range(n_slots):
                if size[c1] > 0 and cstamp[c1] == epoch and nchk[c1] == size[c1]:
                    slots[k] = c1
                    keys[k] = order[c1]
                    k += 1
            slots = slots[np.argsort(keys)]
            for a in range(cnt):
                c1 = slots[a]
                if size[c1] == 0:
                    continue
                for bb in range(a + 1, cnt):
                    c2 = slots[bb]
                    if size[c2] == 0:
                        continue
                    if _consistent(
                        cn, ctheta, size, cF, alpha_theta, alpha_p, freq, tau, Ftau, c1, c2
                    ):
                        _do_merge(U, C, L, X, reg, epoch, c1, c2)
                        cF[c1] = conf_F(cn[c1])
                        _lead(k0, ctheta, c1)


@njit(**_JIT)
def _sclub_run(
    U, C, L, X, XF, sm, fp, ip, reg, users, items, means, noise, bern, ties, t0, choices, ncl
):
    meta = C[12]
    for t in range(users.shape[0]):
        u = users[t]
        tau = t0 + t + 1
        k = _sclub_select(U, C, L, fp, ip, u, items[t], tau, ties[t])
        choices[t] = k
        y = _reward(means[t, k], noise[t], bern)
        _sclub_update(U, C, L, X, XF, sm, fp, ip, reg, u, items[t, k], y, tau)
        ncl[t] = meta[2]


@njit(**_JIT)
def _sclub_update_rows(U, C, L, X, XF, sm, fp, ip, reg, users, items, ys, t0):
    """:func:`_sclub_update` of the rows ``(users[r], items[r], ys[r])`` in order, at rounds
    τ = t0 + 1, t0 + 2, … (what a loop of ``update`` calls does)."""
    for r in range(users.shape[0]):
        _sclub_update(U, C, L, X, XF, sm, fp, ip, reg, users[r], items[r], ys[r], t0 + r + 1)


# ---------------------------------------------------------------------- CLUB kernels


@njit(**_JIT)
def _bit_clear(adj, u, v):
    adj[u, v >> 6] &= ~(np.uint64(1) << np.uint64(v & 63))


@njit(**_JIT)
def _component(adj, start, visited, queue):
    """Breadth-first search from ``start`` over the bitset graph; marks ``visited`` and returns
    the number of nodes found (they are ``queue[:count]``)."""
    W = adj.shape[1]
    n = adj.shape[0]
    visited[start >> 6] |= np.uint64(1) << np.uint64(start & 63)
    queue[0] = start
    head = 0
    count = 1
    while head < count:
        v = queue[head]
        head += 1
        for w in range(W):
            new = adj[v, w] & ~visited[w]
            if new == 0:
                continue
            visited[w] |= new
            base = w << 6
            for bit in range(64):
                if (new >> np.uint64(bit)) & np.uint64(1):
                    node = base + bit
                    if node < n:
                        queue[count] = node
                        count += 1
    return count


@njit(**_JIT)
def _reaches_all(adj, start, tbits, n_targets, visited, queue):
    """Breadth-first search from ``start`` that stops as soon as every node marked in the bitset
    ``tbits`` (``n_targets`` of them) is reached. Returns ``(all_reached, count)``; when not all
    are reached the search has exhausted the component, which is ``queue[:count]``."""
    W = adj.shape[1]
    n = adj.shape[0]
    one = np.uint64(1)
    visited[start >> 6] |= one << np.uint64(start & 63)
    queue[0] = start
    head = 0
    count = 1
    remaining = n_targets
    while head < count:
        v = queue[head]
        head += 1
        for w in range(W):
            new = adj[v, w] & ~visited[w]
            if new == 0:
                continue
            visited[w] |= new
            hit = new & tbits[w]
            base = w << 6
            for bit in range(64):
                if (new >> np.uint64(bit)) & one:
                    node = base + bit
                    if node < n:
                        queue[count] = node
                        count += 1
                        if (hit >> np.uint64(bit)) & one:
                            remaining -= 1
            if remaining == 0:
                return True, count
    return False, count


@njit(**_JIT)
def _club_select(U, C, L, beta_const, sqrt_bonus, u, items, tau, tie_u):
    cn, cAinv, ctheta = C[3], C[4], C[5]
    c = L[0][u]
    return _ucb_choose(cAinv, ctheta, c, cn[c], items, tau, beta_const, sqrt_bonus, tie_u)


@njit(**_JIT)
def _club_update(U, C, L, adj, UF, alpha2, reg, uevery, cevery, u, x, y):
    """Update, delete the edges (u, ℓ) with ‖θ̂_u − θ̂_ℓ‖ > α₂(F(T_u) + F(T_ℓ)), and split the
    component of u into the connected components that remain.

    The component can only have split if some ℓ whose edge was deleted is no longer reachable
    from u, so the search from u stops as soon as all of them are reached (usually within a
    few hops); only a real split explores the whole component.
    """
    _uG, _ub, _uq, un, _uAinv, utheta = U
    size, head = C[6], C[7]
    label, nxt = L[0], L[1]
    cs_add(U, C, L, reg, uevery, cevery, u, x, y)
    n = adj.shape[0]
    W = adj.shape[1]
    d = x.shape[0]
    uF = UF[0]  # F(T_i) per user, kept current
    uF[u] = conf_F(un[u])
    Fu = uF[u]
    deleted = 0
    tbits = np.zeros(W, dtype=np.uint64)
    for w in range(W):
        word = adj[u, w]
        if word == 0:
            continue
        base = w << 6
        for bit in range(64):
            if (word >> np.uint64(bit)) & np.uint64(1):
                v = base + bit
                if v >= n:
                    break
                thr = alpha2 * (Fu + uF[v])
                thr2 = thr * thr
                dist = 0.0
                for i in range(d):
                    diff = utheta[u, i] - utheta[v, i]
                    dist += diff * diff
                    if dist > thr2:
                        break
                if dist > thr2:
                    _bit_clear(adj, u, v)
                    _bit_clear(adj, v, u)
                    tbits[v >> 6] |= np.uint64(1) << np.uint64(v & 63)
                    deleted += 1
    if deleted == 0:
        return
    c = label[u]
    visited = np.zeros(W, dtype=np.uint64)
    queue = np.empty(n, dtype=np.int64)
    reached, count = _reaches_all(adj, u, tbits, deleted, visited, queue)
    if reached or count == size[c]:
        return
    # The component of u, queue[:count], is complete and smaller than the cluster. Every other
    # former member is connected to some unreached ℓ (its old path to u ended with a deleted
    # edge), so the rest is one component iff the unreached ℓ reach each other.
    one = np.uint64(1)
    rest = size[c] - count
    left = np.zeros(W, dtype=np.uint64)
    k2 = 0
    t0 = -1
    for w in range(W):
        left[w] = tbits[w] & ~visited[w]
        for bit in range(64):
            if (left[w] >> np.uint64(bit)) & one:
                if t0 < 0:
                    t0 = (w << 6) + bit
                else:
                    k2 += 1
    left[t0 >> 6] &= ~(one << np.uint64(t0 & 63))
    single = True
    if k2 > 0:
        vis2 = visited.copy()
        queue2 = np.empty(n, dtype=np.int64)
        single, _ = _reaches_all(adj, t0, left, k2, vis2, queue2)
    members = np.empty(size[c], dtype=np.int64)
    m = 0
    v = head[c]
    while v >= 0:
        members[m] = v
        m += 1
        v = nxt[v]
    if single:  # two components: move the smaller one, keep the larger in place
        if count <= rest:
            cs_move_users(U, C, L, reg, queue, count)
        else:
            others = np.empty(rest, dtype=np.int64)
            r = 0
            for k in range(m):
                v = members[k]
                if not (visited[v >> 6] >> np.uint64(v & 63)) & one:
                    others[r] = v
                    r += 1
            cs_move_users(U, C, L, reg, others, rest)
        return
    # several components: find them all, keep the largest in place, move the others
    grouped = np.empty(m, dtype=np.int64)
    starts = np.empty(m + 1, dtype=np.int64)
    grouped[:count] = queue[:count]
    starts[0] = 0
    starts[1] = count
    n_comp = 1
    for k in range(m):
        v = members[k]
        if (visited[v >> 6] >> np.uint64(v & 63)) & one:
            continue
        cnt = _component(adj, v, visited, queue)
        s0 = starts[n_comp]
        grouped[s0 : s0 + cnt] = queue[:cnt]
        n_comp += 1
        starts[n_comp] = s0 + cnt
    largest = 0
    for k in range(1, n_comp):
        if starts[k + 1] - starts[k] > starts[largest + 1] - starts[largest]:
            largest = k
    for k in range(n_comp):
        if k != largest:
            cs_move_users(
                U, C, L, reg, grouped[starts[k] : starts[k + 1]], starts[k + 1] - starts[k]
            )


@njit(**_JIT)
def _club_update_rows(U, C, L, adj, UF, alpha2, reg, uevery, cevery, users, items, ys):
    """:func:`_club_update` of the rows ``(users[r], items[r], ys[r])`` in order."""
    for r in range(users.shape[0]):
        _club_update(U, C, L, adj, UF, alpha2, reg, uevery, cevery, users[r], items[r], ys[r])


@njit(**_JIT)
def _club_run(
    U,
    C,
    L,
    adj,
    UF,
    alpha2,
    reg,
    uevery,
    cevery,
    beta_const,
    sqrt_bonus,
    users,
    items,
    means,
    noise,
    bern,
    ties,
    t0,
    choices,
    ncl,
):
    meta = C[12]
    for t in range(users.shape[0]):
        u = users[t]
        tau = t0 + t + 1
        k = _club_select(U, C, L, beta_const, sqrt_bonus, u, items[t], tau, ties[t])
        choices[t] = k
        y = _reward(means[t, k], noise[t], bern)
        _club_update(U, C, L, adj, UF, alpha2, reg, uevery, cevery, u, items[t, k], y)
        ncl[t] = meta[2]
