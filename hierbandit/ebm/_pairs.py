"""Pair-sparse state of EbmTS/EbmUCB: one packed record per (instance, arm) pair with data.

An instance that has never had feedback in arm k holds no d×d state for that arm: in the
posterior of docs/maths/ebm.md its blocks are those of an instance without data, C̃ and A of
:func:`~hierbandit.stats.kernels.empty_blocks` (the same for every such instance of the arm,
given Σ̂_k and σ̂²_k), with b = 0, and it adds nothing to P_k or r_k. The state is therefore

* ``slot`` (N, K) int32: the slot of pair (j, k), or −1 while the pair has no data;
* ``pairs`` (S, W) float64: one record per slot, allocated at the pair's first feedback;
* ``empty`` (K, W) float64: the record every pair without data of arm k reads (G = b = q = n
  = 0, and the empty blocks of the arm's current hyperparameters); a new slot starts as a
  copy of it.

A record of W = 3d² + d + 2 values holds, in this order (the first 2d² + d are what a decision
reads, so they come first and share as few cache lines as possible):

* values 0 … d² − 1: C̃_j, row-major;
* d² … 2d² − 1: A_j;
* 2d² … 2d² + d − 1: b_j;
* 2d² + d … 3d² + d − 1: G_j;
* 3d² + d: q_j; 3d² + d + 1: n_j, the number of rows (exact in float64).

The rank-one step reads and writes a record in place with the arithmetic of its dense
counterpart in :mod:`hierbandit.stats.kernels` (``sherman_morrison_at``; each sum in the same
order), so the pair layout gives the dense layout's state bit for bit; an arm's re-estimation
and periodic recomputation gather its slots in instance order (:func:`gather_arm`), run the
dense kernels on those arrays and scatter C̃ and A back (:func:`scatter_blocks`). Decisions
(:func:`request_moments`, :func:`for_dimension`) score a pair without data from its arm's
cached mean and covariance of an empty instance (:func:`refresh_empty_scores`).
"""

from __future__ import annotations

import functools
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from hierbandit.stats import kernels as K

__all__ = [
    "argmax_first",
    "arm_slots",
    "cache_width",
    "empty_record",
    "far_records",
    "for_dimension",
    "gather_arm",
    "pair_moments",
    "prefetch_request",
    "prefetch_row",
    "record_views",
    "record_width",
    "refresh_empty_scores",
    "refresh_pair",
    "request_moments",
    "rows_without_slot",
    "scatter_blocks",
    "sherman_morrison_pair",
]

_JIT = {"cache": True, "nogil": True}
#: the hot kernels: IEEE division without numba's zero-divisor check, whose branch kept the
#: loops from vectorising (every divisor there is a variance or a Sherman–Morrison denominator,
#: checked positive before it divides; the results are the same)
_HOT = {**_JIT, "error_model": "numpy"}

#: the name of LLVM's prefetch intrinsic (its pointer type in the name since pointers are opaque)
_PREFETCH = "llvm.prefetch.p0" if llvm.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"


@intrinsic
def _prefetch(typingctx, arr, row, col):
    """Ask the processor to bring the cache line of ``arr[row, col]`` (a 2-D array) near: a
    hint, which changes no value (LLVM's ``llvm.prefetch``, read, high locality)."""
    sig = types.void(arr, row, col)

    def codegen(context, builder, signature, args):
        arrty = signature.args[0]
        ary = context.make_array(arrty)(context, builder, args[0])
        idx = [context.cast(builder, args[i], signature.args[i], types.intp) for i in (1, 2)]
        ptr = cgutils.get_item_pointer(context, builder, arrty, ary, idx, wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH)
        builder.call(
            fn,
            [
                builder.bitcast(ptr, i8p),
                ir.Constant(i32, 0),
                ir.Constant(i32, 3),
                ir.Constant(i32, 1),
            ],
        )
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always", **_JIT)
def prefetch_row(arr, row, stop):
    """:func:`_prefetch` every cache line (8 float64) of ``arr[row, :stop]``."""
    for col in range(0, stop, 8):
        _prefetch(arr, row, col)


@njit(**_JIT)
def record_width(d):
    """Values per record: C̃, A, G (d² each), b (d), q and n."""
    return 3 * d * d + d + 2


def offsets(d: int) -> dict[str, int]:
    """Start of each field of a record (Python side)."""
    dd = d * d
    return {"Ct": 0, "A": dd, "b": 2 * dd, "G": 2 * dd + d, "q": 3 * dd + d, "n": 3 * dd + d + 1}


def views(rec: np.ndarray, d: int) -> dict[str, np.ndarray]:
    """Named views of records ``rec`` (..., W): ``Ct``, ``A``, ``G`` (..., d, d), ``b`` (..., d),
    ``q`` and ``n`` (...)."""
    o = offsets(d)
    lead = rec.shape[:-1]
    dd = d * d
    return {
        "Ct": rec[..., o["Ct"] : o["Ct"] + dd].reshape((*lead, d, d)),
        "A": rec[..., o["A"] : o["A"] + dd].reshape((*lead, d, d)),
        "b": rec[..., o["b"] : o["b"] + d],
        "G": rec[..., o["G"] : o["G"] + dd].reshape((*lead, d, d)),
        "q": rec[..., o["q"]],
        "n": rec[..., o["n"]],
    }


def record_views(row: np.ndarray, d: int) -> dict[str, np.ndarray]:
    """Views ``Ct``, ``A``, ``G`` (d, d) and ``b`` (d,) of one record ``row`` (W,)."""
    dd = d * d
    return {
        "Ct": row[:dd].reshape(d, d),
        "A": row[dd : 2 * dd].reshape(d, d),
        "b": row[2 * dd : 2 * dd + d],
        "G": row[2 * dd + d : 3 * dd + d].reshape(d, d),
    }


@njit(**_JIT)
def empty_record(Sigma, sigma2, rec):
    """The record of a pair without data under (Σ, σ²) into ``rec`` (W,): G = b = q = n = 0,
    C̃ and A of :func:`~hierbandit.stats.kernels.empty_blocks`."""
    d = Sigma.shape[0]
    dd = d * d
    rec[:] = 0.0
    Ct = rec[0:dd].reshape((d, d))
    A = rec[dd : 2 * dd].reshape((d, d))
    K.empty_blocks(Sigma, sigma2, Ct, A)


@njit(**_JIT)
def arm_slots(slot, n, k):
    """The slots of arm k in instance order (instances 0 … n − 1 with data in the arm)."""
    c = 0
    for j in range(n):
        if slot[j, k] >= 0:
            c += 1
    out = np.empty(c, dtype=np.int64)
    c = 0
    for j in range(n):
        s = slot[j, k]
        if s >= 0:
            out[c] = s
            c += 1
    return out


@njit(**_JIT)
def rows_without_slot(slot, J, arms):
    """How many of the rows (instance ``J[i]``, arm ``arms[i]``) name a pair without a slot."""
    c = 0
    for i in range(J.shape[0]):
        if slot[J[i], arms[i]] < 0:
            c += 1
    return c


@njit(**_JIT)
def gather_arm(pairs, idx, d):
    """The statistics and blocks of slots ``idx`` as dense arrays, in that order: G (m, d, d),
    b (m, d), q (m,), n (m,) int64, C̃ and A (m, d, d)."""
    m = idx.shape[0]
    dd = d * d
    oA, ob, oG, oq = dd, 2 * dd, 2 * dd + d, 3 * dd + d
    G = np.empty((m, d, d))
    b = np.empty((m, d))
    q = np.empty(m)
    n = np.empty(m, dtype=np.int64)
    Ct = np.empty((m, d, d))
    A = np.empty((m, d, d))
    for c in range(m):
        s = idx[c]
        for i in range(d):
            b[c, i] = pairs[s, ob + i]
            for l in range(d):
                Ct[c, i, l] = pairs[s, i * d + l]
                A[c, i, l] = pairs[s, oA + i * d + l]
                G[c, i, l] = pairs[s, oG + i * d + l]
        q[c] = pairs[s, oq]
        n[c] = np.int64(pairs[s, oq + 1])
    return G, b, q, n, Ct, A


@njit(**_JIT)
def scatter_blocks(pairs, idx, Ct, A):
    """Write C̃ and A (m, d, d) back to the records of slots ``idx``."""
    d = Ct.shape[1]
    dd = d * d
    for c in range(idx.shape[0]):
        s = idx[c]
        for i in range(d):
            for l in range(d):
                pairs[s, i * d + l] = Ct[c, i, l]
                pairs[s, dd + i * d + l] = A[c, i, l]


@njit(**_JIT)
def refresh_empty_scores(empty, beta0, Phi, sigma2, cache, dirty):
    """The score terms of an instance without data, for the arms marked in ``dirty`` (then
    unmarked), in column k of ``cache`` (:func:`cache_width`, K): rows 0 … d − 1 hold
    m₀ = A₀β̂₀ and the next d(d + 1)/2 the upper triangle of C₀ = σ²C̃₀ + A₀ΦA₀ᵀ, row by row,
    its off-diagonal entries doubled (so that xᵀC₀x = Σ_{l≤a} x_l x_a·entry (l, a),
    :func:`request_moments`): the posterior mean and covariance of such an instance (maths §5),
    from the arm's empty record. Arms are the columns so that a request's terms for every arm
    are computed in one pass over contiguous rows. A pure function of the arm's state, so
    when it is computed does not change it; the callers mark an arm whenever its β̂₀, Φ, σ̂²
    or empty record change."""
    Kn = empty.shape[0]
    d = beta0.shape[1]
    dd = d * d
    AP = np.empty((d, d))
    for k in range(Kn):
        if not dirty[k]:
            continue
        rec = empty[k]
        s2 = sigma2[k]
        for i in range(d):
            t = 0.0
            for l in range(d):
                t += rec[dd + i * d + l] * beta0[k, l]
            cache[i, k] = t
            for l in range(d):
                t = 0.0
                for m in range(d):
                    t += rec[dd + i * d + m] * Phi[k, m, l]
                AP[i, l] = t
        at = d
        for l in range(d):
            for a in range(l, d):
                t = 0.0
                for m in range(d):
                    t += AP[l, m] * rec[dd + a * d + m]
                v = s2 * 0.5 * (rec[l * d + a] + rec[a * d + l]) + t
                cache[at, k] = v if a == l else 2.0 * v
                at += 1
        dirty[k] = False


@njit(**_JIT)
def cache_width(d):
    """Values per arm of the empty-instance score terms (:func:`refresh_empty_scores`)."""
    return d + d * (d + 1) // 2


@njit(inline="always", **_HOT)
def request_moments(d, x, j, slot, pairs, cache, beta0, Phi, sigma2, literal_44, mu, tau, u, c, w):
    """μ̂ (5.1) and τ (5.2) of every arm for instance ``j`` (−1: an instance without state)
    and context ``x`` into ``mu``, ``tau``; ``u``, ``c`` (d,) and ``w`` (d(d + 1)/2,) scratch.

    From the record of a pair with data, with c = C̃x and u = Aᵀx: xᵀβ̂ = u·β̂₀ + c·b and
    τ² = uᵀΦu + σ² x·c (maths §5; C̃ and Φ symmetric, so every inner loop runs along a row,
    vectorised over independent sums).
    For a pair without data, xᵀm₀ and xᵀC₀x = w·(packed C₀) with w the products x_l x_a,
    l ≤ a, formed once per request, from the arm's empty-instance terms ``cache``, which must
    be current (:func:`refresh_empty_scores`). ``d`` = ``x.shape[0]``, a compile-time
    constant in the kernels of :func:`for_dimension`."""
    Kn = slot.shape[1]
    dd = d * d
    at = 0
    for l in range(d):
        for a in range(l, d):
            w[at] = x[l] * x[a]
            at += 1
    nw = at
    empty = 0
    for k in range(Kn):
        if j < 0 or slot[j, k] < 0:
            empty += 1
    wide = 2 * empty > Kn
    if wide:
        # most arms without data: their sums for every arm in one pass along the rows of the
        # cache (arms are its columns, so the inner loops vectorise), into mu and tau
        for k in range(Kn):
            mu[k] = 0.0
            tau[k] = 0.0
        for l in range(d):
            xl = x[l]
            for k in range(Kn):
                mu[k] += xl * cache[l, k]
        for a in range(nw):
            wa = w[a]
            for k in range(Kn):
                tau[k] += wa * cache[d + a, k]
    for k in range(Kn):
        s = slot[j, k] if j >= 0 else -1
        m = 0.0
        v = 0.0
        if s >= 0:
            rec = pairs[s]
            for a in range(d):
                u[a] = 0.0
                c[a] = 0.0
            for l in range(d):
                xl = x[l]
                for a in range(d):
                    c[a] += rec[l * d + a] * xl
                    u[a] += rec[dd + l * d + a] * xl
            q = 0.0
            for a in range(d):
                m += u[a] * beta0[k, a] + c[a] * rec[2 * dd + a]
                q += x[a] * c[a]
            for l in range(d):
                t = 0.0
                for a in range(d):
                    t += Phi[k, l, a] * u[a]
                v += u[l] * t
            v += sigma2[k] * q
        elif wide:
            m = mu[k]
            v = tau[k]
        else:  # the same sums, in the same order, for this arm alone
            for l in range(d):
                m += x[l] * cache[l, k]
            for a in range(nw):
                v += w[a] * cache[d + a, k]
        mu[k] = m
        tau[k] = np.sqrt(v) if v > 0.0 else 0.0
    if literal_44:  # outside the loop: a branch inside it cost 40 % of the kernel's time
        for k in range(Kn):
            mu[k] = mu[k] / sigma2[k]


@njit(inline="always", **_HOT)
def prefetch_request(slot, pairs, J, i, hi, stop):
    """Hints for the requests ahead of request ``i`` (of those before ``hi``): the index row of
    request i + 8, and the first ``stop`` values of the records of request i + 4's pairs."""
    if i + 8 < hi and J[i + 8] >= 0:
        _prefetch(slot, J[i + 8], 0)
    if i + 4 < hi and J[i + 4] >= 0:
        j = J[i + 4]
        for k in range(slot.shape[1]):
            s = slot[j, k]
            if s >= 0:
                prefetch_row(pairs, s, stop)


@njit(**_JIT)
def argmax_first(s):
    """NumPy's argmax of ``s`` (the first maximum; the first NaN if there is one) and whether
    another entry equals that maximum (a tie, which the caller breaks)."""
    n = s.shape[0]
    k = 0
    best = s[0]
    if not np.isnan(best):
        for i in range(1, n):
            v = s[i]
            if np.isnan(v):
                k = i
                best = v
                break
            if v > best:
                best = v
                k = i
    ties = 0
    for i in range(n):
        if s[i] == best:
            ties += 1
    return k, ties > 1


#: records beyond this many bytes are prefetched ahead of use (a few times a core's cache)
FAR_BYTES = 16 * 2**20


def far_records(pairs: np.ndarray) -> bool:
    """Whether the records are too many to stay in the cache, so that prefetching the next
    requests' records pays (:data:`FAR_BYTES`)."""
    return pairs.nbytes > FAR_BYTES


@functools.cache
def for_dimension(d: int) -> tuple[Any, Any, Any, Any]:
    """``(score_pairs, choose, combine, choose_one)`` compiled for contexts of dimension
    ``d``.

    ``d`` is a constant of the compiled code, so that the d×d loops of
    :func:`request_moments` have constant bounds and are unrolled: 2.3 times faster at d = 3
    than with ``d`` read from the arrays (0.55 against 1.28 ms for 10⁴ requests of 5 arms).
    Each d compiles once and is cached on disk like every kernel. The arithmetic is the same
    whatever d is known as, so the results are too (the compiled loop of
    :mod:`hierbandit.ebm.compiled` reads d from the arrays and makes the same decisions).

    ``score_pairs(X, J, slot, pairs, cache, beta0, Phi, sigma2, literal_44, MU, TAU, far)``:
    :func:`request_moments` of B requests (instance ``J[i]``, context ``X[i]``) into
    ``MU[i]``, ``TAU[i]``; with ``far`` (the records do not fit in the cache,
    :func:`far_records`), the records of the requests ahead are prefetched
    (:func:`prefetch_request`, hints that change no value: where the records are in the cache
    they cost more than the scoring at d = 3).

    ``choose(lo, hi, X, J, slot, pairs, cache, beta0, Phi, sigma2, literal_44, alpha, Z, mask,
    out, tie, scores, far)``: the decisions of requests ``lo`` ≤ i < ``hi``: score
    s_k = μ̂_k + (α_i τ_k)·Z[i, k] (Thompson sampling; UCB when ``Z`` has no rows:
    s_k = μ̂_k + α_i τ_k), −inf outside ``mask[i]`` (when ``mask`` has rows), into
    ``scores[i]``; the first maximum into ``out[i]`` and whether it is tied into ``tie[i]``
    (:func:`argmax_first`). Writes only rows lo … hi − 1 (slices run on threads).

    ``combine(lo, hi, MU, TAU, alpha, Z, mask, out, tie, scores)``: the second half of
    ``choose`` from moments ``MU``, ``TAU`` computed before (by ``score_pairs``), the same
    operations.

    ``choose_one(x, j, slot, pairs, cache, beta0, Phi, sigma2, literal_44, a, z, row) ->
    (k, tied)``: ``choose`` for one request without a mask (``z``: its K normals, or none),
    the scores into ``row``: a single decision without a batch's arrays.
    """

    @njit(**_HOT)
    def score_pairs(X, J, slot, pairs, cache, beta0, Phi, sigma2, literal_44, MU, TAU, far):
        u = np.empty(d)
        c = np.empty(d)
        w = np.empty(d * (d + 1) // 2)
        for i in range(X.shape[0]):
            if far:
                prefetch_request(slot, pairs, J, i, X.shape[0], 2 * d * d + d)
            request_moments(
                d, X[i], J[i], slot, pairs, cache, beta0, Phi, sigma2, literal_44, MU[i], TAU[i],
                u, c, w,
            )  # fmt: skip

    @njit(**_HOT)
    def choose(
        lo, hi, X, J, slot, pairs, cache, beta0, Phi, sigma2, literal_44, alpha, Z, mask, out,
        tie, scores, far,
    ):  # fmt: skip
        Kn = slot.shape[1]
        u = np.empty(d)
        c = np.empty(d)
        w = np.empty(d * (d + 1) // 2)
        mu = np.empty(Kn)
        tau = np.empty(Kn)
        is_ts = Z.shape[0] > 0
        has_mask = mask.shape[0] > 0
        for i in range(lo, hi):
            if far:
                prefetch_request(slot, pairs, J, i, hi, 2 * d * d + d)
            request_moments(
                d, X[i], J[i], slot, pairs, cache, beta0, Phi, sigma2, literal_44, mu, tau, u, c, w
            )
            a = alpha[i]
            row = scores[i]
            for k in range(Kn):
                if is_ts:
                    row[k] = mu[k] + a * tau[k] * Z[i, k]
                else:
                    row[k] = mu[k] + a * tau[k]
                if has_mask and not mask[i, k]:
                    row[k] = -np.inf
            out[i], tie[i] = argmax_first(row)

    @njit(**_HOT)
    def combine(lo, hi, MU, TAU, alpha, Z, mask, out, tie, scores):
        Kn = MU.shape[1]
        is_ts = Z.shape[0] > 0
        has_mask = mask.shape[0] > 0
        for i in range(lo, hi):
            a = alpha[i]
            row = scores[i]
            for k in range(Kn):
                if is_ts:
                    row[k] = MU[i, k] + a * TAU[i, k] * Z[i, k]
                else:
                    row[k] = MU[i, k] + a * TAU[i, k]
                if has_mask and not mask[i, k]:
                    row[k] = -np.inf
            out[i], tie[i] = argmax_first(row)

    @njit(**_HOT)
    def choose_one(x, j, slot, pairs, cache, beta0, Phi, sigma2, literal_44, a, z, row):
        Kn = slot.shape[1]
        u = np.empty(d)
        c = np.empty(d)
        w = np.empty(d * (d + 1) // 2)
        mu = np.empty(Kn)
        tau = np.empty(Kn)
        request_moments(
            d, x, j, slot, pairs, cache, beta0, Phi, sigma2, literal_44, mu, tau, u, c, w
        )
        is_ts = z.shape[0] > 0
        for k in range(Kn):
            if is_ts:
                row[k] = mu[k] + a * tau[k] * z[k]
            else:
                row[k] = mu[k] + a * tau[k]
        return argmax_first(row)

    return score_pairs, choose, combine, choose_one


@njit(inline="always", **_HOT)
def _record_atb(d, pairs, s, out):
    """``out`` = Aᵀb of the record of slot ``s`` (each entry summed over m = 0 … d − 1 in
    order)."""
    oA = d * d
    ob = 2 * d * d
    for i in range(d):
        out[i] = 0.0
    for m in range(d):
        bm = pairs[s, ob + m]
        for i in range(d):
            out[i] += pairs[s, oA + m * d + i] * bm


@njit(inline="always", **_HOT)
def sherman_morrison_pair(d, x, y, pairs, s, P, r, Phi, beta0, sigma2, k, buf):
    """:func:`~hierbandit.stats.kernels.sherman_morrison_at` on the record of slot ``s`` (arm
    k): the O(d²) rank-one step in place, same arithmetic; False (nothing changed) where a
    denominator is out of range. ``d`` = ``x.shape[0]`` (a constant where the caller is
    compiled for one d, :func:`hierbandit.ebm._rows.rows_for_dimension`)."""
    oA = d * d
    ob = 2 * d * d
    oG = ob + d
    cx, ax, u, Pu, old_r = buf[0], buf[1], buf[2], buf[3], buf[4]
    # every matrix-vector product accumulates each entry in the order of sherman_morrison_at
    # (m = 0 … d − 1), with the loops interchanged so that the d sums run side by side
    # (independent, so vectorised) instead of one after another: the same bits, faster
    for i in range(d):
        cx[i] = 0.0
        ax[i] = 0.0
    for m in range(d):
        xm = x[m]
        for i in range(d):
            cx[i] += pairs[s, i * d + m] * xm
            ax[i] += pairs[s, oA + m * d + i] * xm
    s_ = 1.0
    for i in range(d):
        s_ += x[i] * cx[i]
    for i in range(d):
        u[i] = ax[i] / sigma2
        Pu[i] = 0.0
    for m in range(d):
        um = u[m]
        for i in range(d):
            Pu[i] += Phi[k, i, m] * um
    uPu = 0.0
    for i in range(d):
        uPu += u[i] * Pu[i]
    good = 0.5 <= s_ <= K.EBM_SM_LIMIT
    c = 0.0
    den = 0.0
    if good:
        c = sigma2 / s_
        den = 1.0 + c * uPu
        good = 0.5 <= den <= K.EBM_SM_LIMIT
    if not good:
        return False
    _record_atb(d, pairs, s, old_r)
    for i in range(d):
        old_r[i] = old_r[i] / sigma2
    for i in range(d):
        pairs[s, ob + i] += x[i] * y
        for m in range(d):
            pairs[s, oG + i * d + m] += x[i] * x[m]
    # C̃ and Φ: the upper triangle, then mirrored (the values of sherman_morrison_at, in
    # loops without a branch or a strided write, which vectorise)
    for i in range(d):
        ci = cx[i]
        for m in range(i, d):
            pairs[s, i * d + m] = pairs[s, i * d + m] - ci * cx[m] / s_
    for i in range(d):
        for m in range(i):
            pairs[s, i * d + m] = pairs[s, m * d + i]
    for i in range(d):
        ci = cx[i]
        for m in range(d):
            pairs[s, oA + i * d + m] -= ci * ax[m] / s_
    for i in range(d):
        for m in range(d):
            P[k, i, m] += c * u[i] * u[m]
    for i in range(d):
        pi = Pu[i]
        for m in range(i, d):
            Phi[k, i, m] = Phi[k, i, m] - c * pi * Pu[m] / den
    for i in range(d):
        for m in range(i):
            Phi[k, i, m] = Phi[k, m, i]
    # r += (new A)ᵀb/σ² − old term: the new sums into cx (free now), then as before
    _record_atb(d, pairs, s, cx)
    for i in range(d):
        r[k, i] += cx[i] / sigma2 - old_r[i]
    for i in range(d):
        beta0[k, i] = 0.0
    for m in range(d):
        rm = r[k, m]
        for i in range(d):
            beta0[k, i] += Phi[k, i, m] * rm
    return True


@njit(**_JIT)
def refresh_pair(x, y, pairs, s, P, r, Phi, beta0, Sigma, sigma2, P0, k):
    """:func:`~hierbandit.stats.kernels.refresh_instance` on the record of slot ``s`` (arm k):
    the row enters G and b, the pair's blocks are recomputed and Φ re-solved, O(d³)."""
    d = x.shape[0]
    dd = d * d
    rec = pairs[s]
    K.refresh_instance(
        x,
        y,
        rec[2 * dd + d : 3 * dd + d].reshape((d, d)),
        rec[2 * dd : 2 * dd + d],
        rec[0:dd].reshape((d, d)),
        rec[dd : 2 * dd].reshape((d, d)),
        P[k],
        r[k],
        Phi[k],
        beta0[k],
        Sigma[k],
        sigma2[k],
        P0[k],
    )


@njit(**_JIT)
def pair_moments(slot, pairs, empty, n, beta0, Phi, sigma2, mean, cov):
    """β̂_{k,j} and C_{k,j} (:func:`~hierbandit.stats.kernels.instance_moments_root`) of every
    (arm, instance j < n) into ``mean`` (K, n, d) and ``cov`` (K, n, d, d)."""
    Kn = empty.shape[0]
    d = beta0.shape[1]
    dd = d * d
    F = np.empty((d, d))
    for k in range(Kn):
        K.psd_root(Phi[k], F)
        for j in range(n):
            s = slot[j, k]
            rec = pairs[s] if s >= 0 else empty[k]
            K.instance_moments_root(
                rec[0:dd].reshape((d, d)),
                rec[dd : 2 * dd].reshape((d, d)),
                rec[2 * dd : 2 * dd + d],
                beta0[k],
                F,
                sigma2[k],
                mean[k, j],
                cov[k, j],
            )
