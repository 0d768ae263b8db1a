"""Compiled row updates of EbmTS/EbmUCB, shared by the batched update and the compiled loop.

:func:`update_row` is ``EbmPolicy._update`` for one row written out in numba;
:func:`apply_rows` runs it over B rows in order, registering instances that appear for the
first time (:func:`register_instance`). ``EbmPolicy.update_batch`` and the whole-horizon loop of
:mod:`hierbandit.ebm.compiled` both call it, so a batch of feedback, the compiled loop and the
Python ``_update`` (the reference the tests compare against) change the state identically.

When the hyperparameters are due (:func:`reestimate_due`) the row runs the empirical-Bayes step
inside the kernel, which draws the cross-validation uniforms from the policy's own generator
(numba's ``Generator`` methods share its state and reproduce NumPy's draws).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hierbandit.stats import kernels as K
from hierbandit.stats import online_ml

__all__ = [
    "apply_rows",
    "recompute_due",
    "reestimate_due",
    "reestimate_ml",
    "register_instance",
    "update_row",
]

_JIT = {"cache": True, "nogil": True}


@njit(**_JIT)
def reestimate_due(pulls_k, since_k, every, budget, n):
    """Whether arm k re-estimates its hyperparameters at this pull.

    ``every > 0``: at every ``every``-th pull of the arm (1: the paper's every pull).
    ``every == 0`` (the default schedule): once the pulls since the arm's last re-estimation,
    ``since_k`` (this one included), times ``budget`` reach the number of instances ``n``. A
    re-estimation costs O(n d³), so the amortised cost of a pull is O(budget · d³) whatever n;
    with n ≤ budget it is every pull, as in the paper.
    """
    if every > 0:
        return pulls_k % every == 0
    return since_k * budget >= n


@njit(**_JIT)
def recompute_due(count_k, recompute_every, budget, n):
    """Whether arm k is recomputed from its statistics after ``count_k`` incremental steps:
    at least ``recompute_every`` of them, and at least n / ``budget``, so that the O(n)
    recomputation costs O(budget · d³) per step amortised, as a re-estimation does."""
    return count_k >= recompute_every and count_k * budget >= n


@njit(**_JIT)
def register_instance(j, Sigma, sigma2, Ct, A):
    """Give a new instance j the blocks of an instance without data, for every arm."""
    for k in range(Sigma.shape[0]):
        K.empty_blocks(Sigma[k], sigma2[k], Ct[k, j], A[k, j])


@njit(**_JIT)
def reestimate_ml(k, n, state, ml):
    """The online type-II ML step of arm k (``hyper_method="ml"``,
    :func:`hierbandit.stats.online_ml.reestimate_arm_ml`) on the first ``n`` instances of the
    dense state, then its posterior. ``ml``: :attr:`EbmPolicy._ml_args`. Instances without
    rows add nothing to the likelihood: a layout that keeps only the instances with data may
    pass just those (and still compute the posterior of the others' shared blocks)."""
    G, b, q, n_obs, Sigma, sigma2, gamma, n_eff, Ct, A, P, r, Phi, beta0 = state[:14]
    P0, h0 = state[14], state[15]
    _, steps, eig_floor, sigma2_floor, min_instances, rank_tol, est_sigma, est_noise = ml
    trace = np.empty(steps + 1)
    s2, ne, _ok, _status, _F, _acc = online_ml.reestimate_arm_ml(
        G[k, :n],
        b[k, :n],
        q[k, :n],
        n_obs[k, :n],
        P0[k],
        h0[k],
        sigma2[k],
        Sigma[k].copy(),
        eig_floor,
        sigma2_floor,
        min_instances,
        rank_tol,
        est_sigma,
        est_noise,
        steps,
        online_ml.ML_TOL,
        Sigma[k],
        Ct[k, :n],
        A[k, :n],
        P[k],
        r[k],
        Phi[k],
        beta0[k],
        trace,
    )
    sigma2[k] = s2
    gamma[k] = np.nan
    n_eff[k] = ne


@njit(**_JIT)
def update_row(j, x, k, y, n, state, options, cv_rng, scratch):
    """One row of ``EbmPolicy._update`` (the caller increments t). ``n``: instances in state
    (the arrays may hold more rows, unused); ``state``: the arrays of
    :meth:`~hierbandit.ebm.policy.EbmPolicy._row_state`, in its order;
    ``options``: those of :meth:`~hierbandit.ebm.policy.EbmPolicy._row_options`; ``scratch``: (5, d) work space of the
    rank-one step, allocated once by the caller."""
    G, b, q, n_obs, Sigma, sigma2, gamma, n_eff, Ct, A, P, r, Phi, beta0 = state[:14]
    P0, h0, pulls, arrivals, rank_one_count, since = state[14:]
    estimates_any, need_u, every, budget, recompute_every, cv_splits, eb, ml = options
    d = x.shape[0]
    arrivals[j] += 1
    pulls[k] += 1
    since[k] += 1
    q[k, j] += y * y
    n_obs[k, j] += 1
    if estimates_any and reestimate_due(pulls[k], since[k], every, budget, n):
        for i in range(d):
            for m in range(d):
                G[k, j, i, m] += x[i] * x[m]
        for i in range(d):
            b[k, j, i] += x[i] * y
        if ml[0]:
            reestimate_ml(k, n, state, ml)
            rank_one_count[k] = 0
            since[k] = 0
            return
        splits = cv_splits if need_u else 0
        Sprev = Sigma[k].copy()
        s2, g, ne, _ok = K.reestimate_arm(
            G[k, :n],
            b[k, :n],
            q[k, :n],
            n_obs[k, :n],
            P0[k],
            h0[k],
            sigma2[k],
            Sprev,
            eb[0],
            eb[1],
            eb[2],
            eb[3],
            eb[4],
            eb[5],
            eb[6],
            eb[7],
            eb[8],
            cv_rng,
            splits,
            eb[9],
            eb[10],
            eb[11],
            eb[12],
            eb[13],
            Sigma[k],
            Ct[k, :n],
            A[k, :n],
            P[k],
            r[k],
            Phi[k],
            beta0[k],
        )
        sigma2[k] = s2
        gamma[k] = g
        n_eff[k] = ne
        rank_one_count[k] = 0
        since[k] = 0
    else:
        # K.observe_row written out: the O(d²) step in place, or, where it is ill-conditioned,
        # the O(d³) refresh of the instance; never O(n)
        if not K.sherman_morrison_at(x, y, G, b, Ct, A, P, r, Phi, beta0, sigma2[k], k, j, scratch):
            K.refresh_instance(
                x,
                y,
                G[k, j],
                b[k, j],
                Ct[k, j],
                A[k, j],
                P[k],
                r[k],
                Phi[k],
                beta0[k],
                Sigma[k],
                sigma2[k],
                P0[k],
            )
        rank_one_count[k] += 1
        # the periodic recomputation bounds the rounding the incremental steps accumulate
        if recompute_due(rank_one_count[k], recompute_every, budget, n):
            K.arm_posterior(
                G[k, :n],
                b[k, :n],
                Sigma[k],
                sigma2[k],
                P0[k],
                h0[k],
                Ct[k, :n],
                A[k, :n],
                P[k],
                r[k],
                Phi[k],
                beta0[k],
            )
            rank_one_count[k] = 0


@njit(**_JIT)
def apply_rows(J, X, arms, Y, n0, state, options, cv_rng):
    """:func:`update_row` over rows ``(J[i], X[i], arms[i], Y[i])`` in order; ``J[i] == n``
    (the current number of instances) registers a new instance first. Returns the final n.

    The arrays must have room for every instance the rows name (the caller grows them).
    """
    n = n0
    scratch = np.empty((5, X.shape[1]))
    for i in range(J.shape[0]):
        j = J[i]
        if j == n:
            register_instance(j, state[4], state[5], state[8], state[9])  # Sigma, σ², C̃, A
            n += 1
        update_row(j, X[i], arms[i], Y[i], n, state, options, cv_rng, scratch)
    return n
