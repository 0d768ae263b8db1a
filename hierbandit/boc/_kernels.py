"""Compiled kernels of BOC's inner loop (numba, no Python objects).

* :func:`kmeans_maximin` — weighted K-means with Maximin (farthest-point) seeding, Algorithm 2;
* :func:`solve_reciprocal` — the finite convex min–max of Props. 7–8 written as
  ``min Σ_k 1/u_k  s.t.  n(k) u_k + u_k' ≤ ‖µ(k) − µ(k')‖²  for (k, k') ∈ ℰ`` (``u = 1/x``), solved
  by a log-barrier interior-point method with damped Newton steps;
* :func:`stopping_statistics` — Z₁(t) and Z₂(t) of Algorithm 1, lines 11–12;
* :func:`plugin_allocation` — λ*(t) of eq. (4) from an estimated (c_t, U_t), with the uniform
  fallback for degenerate estimates;
* :func:`project_floor` — Euclidean projection onto ``{λ ≥ a, Σλ = 1}`` (Appendix C, eq. 22).

These kernels trust their inputs; validation lives in the public wrappers. Every argmin/argmax
returns the smallest index on ties (docs/maths/boc.md §7).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hierbandit.stats.linalg import cholesky_lower, cholesky_solve

_JIT = {"cache": True, "nogil": True}


@njit(**_JIT)
def _sqdist(a, b):
    s = 0.0
    for j in range(a.shape[0]):
        v = a[j] - b[j]
        s += v * v
    return s


@njit(**_JIT)
def kmeans_maximin(mu, weights, K, first, max_iter):
    """Algorithm 2: Maximin seeding from arm ``first``, then weighted Lloyd iterations.

    Returns ``(labels, centres, n_iter, converged)``. ``n_iter`` counts centre updates; a cluster
    left empty keeps its previous centre; the loop stops when the assignment no longer changes
    (``converged``) or after ``max_iter`` updates.
    """
    M, d = mu.shape
    centres = np.empty((K, d))
    for j in range(d):
        centres[0, j] = mu[first, j]
    mind = np.empty(M)
    for m in range(M):
        mind[m] = _sqdist(mu[m], centres[0])
    for k in range(1, K):
        best = 0
        bv = mind[0]
        for m in range(1, M):
            if mind[m] > bv:
                bv = mind[m]
                best = m
        for j in range(d):
            centres[k, j] = mu[best, j]
        for m in range(M):
            v = _sqdist(mu[m], centres[k])
            if v < mind[m]:
                mind[m] = v
    labels = np.full(M, -1, dtype=np.int64)
    sums = np.empty((K, d))
    W = np.empty(K)
    n_iter = 0
    converged = False
    while True:
        changed = False
        for m in range(M):
            bk = 0
            bv = _sqdist(mu[m], centres[0])
            for k in range(1, K):
                v = _sqdist(mu[m], centres[k])
                if v < bv:
                    bv = v
                    bk = k
            if labels[m] != bk:
                labels[m] = bk
                changed = True
        if not changed:
            converged = True
            break
        if n_iter >= max_iter:
            break
        n_iter += 1
        sums[:, :] = 0.0
        W[:] = 0.0
        for m in range(M):
            k = labels[m]
            W[k] += weights[m]
            for j in range(d):
                sums[k, j] += weights[m] * mu[m, j]
        for k in range(K):
            if W[k] > 0.0:
                for j in range(d):
                    centres[k, j] = sums[k, j] / W[k]
    return labels, centres, n_iter, converged


@njit(**_JIT)
def pair_set(nk, corrected):
    """Admissible ordered pairs (k, k') of the inner problem.

    Paper (Prop. 5): ``n(k) > 1, k' ≠ k``. Corrected (docs/maths/boc.md §2, row 1 of
    docs/boc.md): add ``n(k) = n(k') = 1``.
    """
    K = nk.shape[0]
    ks = np.empty(K * K, dtype=np.int64)
    kps = np.empty(K * K, dtype=np.int64)
    p = 0
    for k in range(K):
        for kp in range(K):
            if kp == k:
                continue
            if nk[k] > 1 or (corrected and nk[k] == 1 and nk[kp] == 1):
                ks[p] = k
                kps[p] = kp
                p += 1
    return ks[:p], kps[:p]


@njit(**_JIT)
def _chol_solve(H, g, out):
    """Solve ``H out = g`` for symmetric positive-definite ``H``; False if not PD."""
    L = np.empty_like(H)
    if not cholesky_lower(H, L):
        return False
    cholesky_solve(L, g, out)
    return True


@njit(**_JIT)
def _barrier(u, nk, rhs, ks, kps, t):
    """``t Σ 1/u − Σ log s``; +inf outside the domain."""
    val = 0.0
    for k in range(u.shape[0]):
        if u[k] <= 0.0:
            return np.inf
        val += t / u[k]
    for p in range(ks.shape[0]):
        s = rhs[p] - nk[ks[p]] * u[ks[p]] - u[kps[p]]
        if s <= 0.0:
            return np.inf
        val -= np.log(s)
    return val


@njit(**_JIT)
def solve_reciprocal(nk, rhs, ks, kps, tol, max_newton):
    """Minimise ``Σ_k 1/u_k`` subject to ``n(k) u_k + u_k' ≤ rhs_p`` for every pair p = (k, k').

    Log-barrier method: for ``t = t₀, 20 t₀, …`` minimise ``t Σ 1/u − Σ_p log s_p`` (``s`` the
    slacks) by damped Newton steps with a backtracking line search that keeps ``u > 0``, ``s > 0``;
    stop when the duality gap ``P / t`` is below ``tol · Σ 1/u``. Each centring stops at a
    Newton decrement ``λ² ≤ 1e-8`` or when a step no longer decreases the barrier
    objective beyond rounding. The right-hand sides are
    normalised by their minimum so that the iterates are of order one.

    Returns ``(u, converged, newton_steps)``; ``u`` is in the caller's units.
    """
    K = nk.shape[0]
    P = ks.shape[0]
    scale = np.inf
    for p in range(P):
        if rhs[p] < scale:
            scale = rhs[p]
    r = rhs / scale
    nmax = 0.0
    for k in range(K):
        if nk[k] > nmax:
            nmax = nk[k]
    u = np.full(K, 0.5 / (nmax + 1.0))
    f = 0.0
    for k in range(K):
        f += 1.0 / u[k]
    t = P / f
    grad = np.empty(K)
    H = np.empty((K, K))
    step = np.empty(K)
    trial = np.empty(K)
    s = np.empty(P)
    total = 0
    converged = False
    centre_tol = 1e-8
    for _outer in range(200):
        for _it in range(max_newton):
            for k in range(K):
                grad[k] = -t / (u[k] * u[k])
                for j in range(K):
                    H[k, j] = 0.0
                H[k, k] = 2.0 * t / (u[k] * u[k] * u[k])
            for p in range(P):
                k = ks[p]
                kp = kps[p]
                a = nk[k]
                s[p] = r[p] - a * u[k] - u[kp]
                inv = 1.0 / s[p]
                inv2 = inv * inv
                grad[k] += a * inv
                grad[kp] += inv
                H[k, k] += a * a * inv2
                H[kp, kp] += inv2
                H[k, kp] += a * inv2
                H[kp, k] += a * inv2
            for k in range(K):
                trial[k] = -grad[k]
            if not _chol_solve(H, trial, step):
                return u * scale, False, total
            dec2 = 0.0
            for k in range(K):
                dec2 -= grad[k] * step[k]
            total += 1
            if dec2 <= centre_tol:
                break
            # largest step keeping the iterate in the domain
            amax = np.inf
            for k in range(K):
                if step[k] < 0.0:
                    a_ = -u[k] / step[k]
                    if a_ < amax:
                        amax = a_
            for p in range(P):
                ds = -nk[ks[p]] * step[ks[p]] - step[kps[p]]
                if ds < 0.0:
                    a_ = -s[p] / ds
                    if a_ < amax:
                        amax = a_
            alpha = min(1.0, 0.99 * amax)
            phi0 = _barrier(u, nk, r, ks, kps, t)
            while True:
                for k in range(K):
                    trial[k] = u[k] + alpha * step[k]
                phi = _barrier(trial, nk, r, ks, kps, t)
                if phi <= phi0 - 0.25 * alpha * dec2 or alpha < 1e-12:
                    break
                alpha *= 0.5
            if alpha < 1e-12:  # no progress possible at this precision
                break
            for k in range(K):
                u[k] = trial[k]
            if phi0 - phi <= 1e-14 * abs(phi0):  # converged to rounding level
                break
        f = 0.0
        for k in range(K):
            f += 1.0 / u[k]
        if P / t < tol * f:
            converged = True
            break
        t *= 20.0
    return u * scale, converged, total


@njit(**_JIT)
def plugin_allocation(labels, centres, K, corrected, tol, max_newton):
    """λ*(t) of eq. (4) at (c_t, U_t) through Prop. 8, or the uniform fallback.

    Returns ``(lam, status)``: status 0 = solved, 1 = degenerate estimate (an empty cluster or
    coincident centres on an admissible pair; uniform λ), 2 = the solver did not converge
    (uniform λ; the Python wrappers then retry with SciPy).
    """
    M = labels.shape[0]
    nk = np.zeros(K)
    for m in range(M):
        nk[labels[m]] += 1.0
    lam = np.full(M, 1.0 / M)
    for k in range(K):
        if nk[k] == 0.0:
            return lam, 1
    ks, kps = pair_set(nk, corrected)
    P = ks.shape[0]
    if P == 0:
        return lam, 1
    rhs = np.empty(P)
    for p in range(P):
        rhs[p] = _sqdist(centres[ks[p]], centres[kps[p]])
        if rhs[p] <= 0.0:
            return lam, 1
    u, ok, _ = solve_reciprocal(nk, rhs, ks, kps, tol, max_newton)
    if not ok:
        return lam, 2
    tot = 0.0
    for k in range(K):
        tot += 1.0 / u[k]
    for m in range(M):
        k = labels[m]
        lam[m] = (1.0 / u[k]) / tot / nk[k]
    return lam, 0


@njit(**_JIT)
def stopping_statistics(mu, N, labels, centres, K, corrected):
    """Z₁(t) and Z₂(t) of Algorithm 1 (lines 11–12), Z₂ by Prop. 5 with λ := N(t).

    ``Z₂ = min_{(k,k') ∈ ℰ} N̲(k) N(k') / (N̲(k) + N(k')) ‖µ(k) − µ(k')‖²`` with ``N(k)`` the total
    and ``N̲(k)`` the smallest count of the arms labelled ``k``; an empty ``k'`` gives 0.
    """
    M = mu.shape[0]
    z1 = 0.0
    Nk = np.zeros(K)
    Nmin = np.full(K, np.inf)
    nk = np.zeros(K, dtype=np.int64)
    for m in range(M):
        k = labels[m]
        z1 += N[m] * _sqdist(mu[m], centres[k])
        Nk[k] += N[m]
        if N[m] < Nmin[k]:
            Nmin[k] = N[m]
        nk[k] += 1
    z2 = np.inf
    for k in range(K):
        if nk[k] == 0:
            continue
        for kp in range(K):
            if kp == k:
                continue
            if not (nk[k] > 1 or (corrected and nk[k] == 1 and nk[kp] == 1)):
                continue
            a = Nmin[k]
            b = Nk[kp]
            v = 0.0
            if a + b > 0.0:
                v = a * b / (a + b) * _sqdist(centres[k], centres[kp])
            if v < z2:
                z2 = v
    return z1, z2


@njit(**_JIT)
def project_floor(lam, floor):
    """Euclidean projection of ``lam`` onto ``{x : x_m ≥ floor, Σ x = 1}`` (sort-based).

    ``x = floor + Proj_{simplex of mass 1 − M·floor}(lam − floor)``.
    """
    M = lam.shape[0]
    mass = 1.0 - M * floor
    v = lam - floor
    srt = np.sort(v)[::-1]
    css = 0.0
    theta = 0.0
    for i in range(M):
        css += srt[i]
        th = (css - mass) / (i + 1)
        if srt[i] - th > 0.0:
            theta = th
    out = np.empty(M)
    for m in range(M):
        x = v[m] - theta
        out[m] = floor + (x if x > 0.0 else 0.0)
    return out
