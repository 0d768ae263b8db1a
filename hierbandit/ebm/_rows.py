"""Compiled row updates of EbmTS/EbmUCB, shared by the batched update and the compiled loop.

:func:`row_step` (then, when it returns one, the step over an arm's pairs,
:func:`finish_row`) is ``EbmPolicy._update`` for one row written out in numba; :func:`apply_rows`
runs it over B rows in order. ``EbmPolicy.update_batch`` and the whole-horizon loop of
:mod:`hierbandit.ebm.compiled` both call it, so a batch of feedback, the compiled loop and the
Python ``_update`` (the reference the tests compare against) change the state identically.

The state is pair-sparse (:mod:`hierbandit.ebm._pairs`): a row of a pair without data first
gives the pair a slot (a copy of the arm's empty record). When the hyperparameters are due
(:func:`reestimate_due`) the row runs the empirical-Bayes step inside the kernel
(:func:`reestimate_pairs`: the arm's slots gathered in instance order, :func:`reestimate_slots`
on them, C̃ and A scattered back), which draws the cross-validation uniforms from the policy's
own generator (numba's ``Generator`` methods share its state and reproduce NumPy's draws).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import njit

from hierbandit.ebm import _pairs as PR
from hierbandit.stats import kernels as K
from hierbandit.stats import online_ml

__all__ = [
    "DONE",
    "REBUILD",
    "REBUILD_BUDGET",
    "REESTIMATE",
    "RESOLVE",
    "apply_rows",
    "drift_action",
    "finish_row",
    "pair_refresh_due",
    "recompute_due",
    "recompute_pairs",
    "reestimate_due",
    "reestimate_ml_slots",
    "reestimate_pairs",
    "reestimate_slots",
    "row_arrays",
    "row_settings",
    "row_step",
    "rows_for_dimension",
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


#: with ``recompute="local"``, an arm is rebuilt from all its pairs' statistics after at least
#: n / REBUILD_BUDGET of its incremental steps: the O(n d³) rebuild then costs at most
#: 1/64 of a pair's recomputation per row amortised, whatever n and however many pairs the
#: arm has (docs/decisions/ebm.md §3, ``recompute``)
REBUILD_BUDGET = 1.0 / 64.0


@njit(**_JIT)
def recompute_due(count_k, recompute_every, budget, n):
    """Whether arm k is recomputed from its statistics after ``count_k`` incremental steps:
    at least ``recompute_every`` of them, and at least n / ``budget``, so that the O(n)
    recomputation costs O(budget · d³) per step amortised, as a re-estimation does."""
    return count_k >= recompute_every and count_k * budget >= n


@njit(**_JIT)
def pair_refresh_due(local, n_rows, recompute_every):
    """Whether a pair's row, its ``n_rows``-th (this one included), refreshes the pair's blocks
    from its statistics (O(d³), :func:`~hierbandit.ebm._pairs.refresh_pair`) instead of the
    rank-one step: with ``recompute="local"`` (``local``), at every ``recompute_every``-th row
    of the pair, so that no pair's C̃ and A carry more than that many rank-one steps of
    rounding."""
    return local and n_rows % recompute_every == 0


#: the steps a row can leave over an arm: nothing; the arm's re-estimation
#: (:func:`reestimate_pairs`); its rebuild from its pairs' statistics (:func:`recompute_pairs`,
#: O(n d³)); the re-solve of Φ and β̂₀ from its sums
#: (:func:`~hierbandit.stats.kernels.shared_resolve`, O(d³))
DONE, REESTIMATE, REBUILD, RESOLVE = 0, 1, 2, 3


@njit(**_JIT)
def drift_action(local, count_k, recompute_every, budget, n):
    """What arm k does after its ``count_k``-th incremental step: REBUILD, RESOLVE or DONE.

    ``recompute="arm"`` (``local`` False): REBUILD by :func:`recompute_due` with the policy's
    ``budget``, else DONE. ``recompute="local"``: REBUILD by :func:`recompute_due` with
    :data:`REBUILD_BUDGET`, else RESOLVE at every ``recompute_every``-th step, else DONE."""
    if not local:
        return REBUILD if recompute_due(count_k, recompute_every, budget, n) else DONE
    if recompute_due(count_k, recompute_every, REBUILD_BUDGET, n):
        return REBUILD
    return RESOLVE if count_k % recompute_every == 0 else DONE


@njit(**_JIT)
def reestimate_slots(k, G, b, q, n_obs, Ct, A, state, options, cv_rng):
    """The empirical-Bayes step of arm k (docs/maths/ebm.md §7.4) from the arm's slot arrays.

    ``G`` (m, d, d), ``b`` (m, d), ``q`` (m,), ``n_obs`` (m,) are the statistics of the m
    instances with data in the arm, in instance order (:func:`~hierbandit.ebm._pairs.gather_arm`);
    instances without data add nothing to any estimate. Sets Σ̂_k, σ̂²_k, γ_k and N_eff,k in
    ``state`` (:meth:`~hierbandit.ebm.policy.EbmPolicy._row_state`) and the arm's posterior
    under them: C̃ and A of the m instances into ``Ct``, ``A`` (m, d, d), and P_k, r_k, Φ_k,
    β̂_k0 in ``state``. ``options``: :meth:`~hierbandit.ebm.policy.EbmPolicy._row_options`.
    """
    _reestimate_either(options[7], k, G, b, q, n_obs, Ct, A, state, options, cv_rng)


@njit(**_JIT)
def _reestimate_either(ml, k, G, b, q, n_obs, Ct, A, state, options, cv_rng):
    """:func:`reestimate_slots` with ``ml`` = ``options[7]`` as an argument, so that the
    compiler drops the branch the policy cannot take: ``ml`` is None under
    ``hyper_method="eb"`` (the ML step is not compiled) and the ML settings under "ml" (the EB
    step is not). Either step alone is most of the compile time of a rollout."""
    if ml is not None:  # hyper_method="ml": the online type-II ML step (docs/maths/ebm.md §7.5)
        reestimate_ml_slots(k, G, b, q, n_obs, Ct, A, state, ml)
        return
    Sigma, sigma2, gamma, n_eff, P, r, Phi, beta0, P0, h0 = state[4:14]
    need_u, cv_splits, eb = options[1], options[5], options[6]
    splits = cv_splits if need_u else 0
    Sprev = Sigma[k].copy()
    s2, g, ne, _ok = K.reestimate_arm(
        G,
        b,
        q,
        n_obs,
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
        Ct,
        A,
        P[k],
        r[k],
        Phi[k],
        beta0[k],
    )
    sigma2[k] = s2
    gamma[k] = g
    n_eff[k] = ne


@njit(**_JIT)
def reestimate_ml_slots(k, G, b, q, n_obs, Ct, A, state, ml):
    """The online type-II ML step of arm k (``hyper_method="ml"``,
    :func:`hierbandit.stats.online_ml.reestimate_arm_ml`) from the arm's slot arrays, as
    :func:`reestimate_slots` takes them; instances without rows add nothing to the likelihood.
    ``ml``: :attr:`~hierbandit.ebm.policy.EbmPolicy._ml_args`. γ_k is NaN."""
    Sigma, sigma2, gamma, n_eff, P, r, Phi, beta0, P0, h0 = state[4:14]
    _, steps, eig_floor, sigma2_floor, min_instances, rank_tol, est_sigma, est_noise = ml
    trace = np.empty(steps + 1)
    s2, ne, _ok, _status, _F, _acc = online_ml.reestimate_arm_ml(
        G,
        b,
        q,
        n_obs,
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
        Ct,
        A,
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
def reestimate_pairs(k, n, state, options, cv_rng):
    """Re-estimate arm k from its slots (instances < ``n``): gather them in instance order,
    :func:`reestimate_slots`, scatter C̃ and A back, and give the arm's empty record the
    blocks of the new hyperparameters. Resets the arm's step counters."""
    slot, pairs, empty, Sigma, sigma2 = state[0], state[1], state[3], state[4], state[5]
    rank_one_count, since = state[16], state[17]
    d = Sigma.shape[1]
    idx = PR.arm_slots(slot, n, k)
    G, b, q, n_obs, Ct, A = PR.gather_arm(pairs, idx, d)
    reestimate_slots(k, G, b, q, n_obs, Ct, A, state, options, cv_rng)
    PR.scatter_blocks(pairs, idx, Ct, A)
    PR.empty_record(Sigma[k], sigma2[k], empty[k])
    rank_one_count[k] = 0
    since[k] = 0


@njit(**_JIT)
def recompute_pairs(k, n, state):
    """Recompute arm k's posterior from its slots' statistics with the current hyperparameters
    (:func:`~hierbandit.stats.kernels.arm_posterior` on the gathered slots). Resets the arm's
    count of incremental steps."""
    slot, pairs, Sigma, sigma2 = state[0], state[1], state[4], state[5]
    P, r, Phi, beta0, P0, h0 = state[8:14]
    d = Sigma.shape[1]
    idx = PR.arm_slots(slot, n, k)
    G, b, _q, _n, Ct, A = PR.gather_arm(pairs, idx, d)
    K.arm_posterior(G, b, Sigma[k], sigma2[k], P0[k], h0[k], Ct, A, P[k], r[k], Phi[k], beta0[k])
    PR.scatter_blocks(pairs, idx, Ct, A)
    state[16][k] = 0


@njit(inline="always", **PR._HOT)
def row_step(d, j, x, k, y, n, arrays, settings, scratch, prepared):
    """One row of ``EbmPolicy._update`` (the caller increments t), except the steps over all
    of an arm's pairs, which it returns for the caller to run with the state tuple
    (:func:`finish_row`): REESTIMATE (the row's statistics are in; :func:`reestimate_pairs`)
    or REBUILD (:func:`recompute_pairs`), else DONE.

    ``n``: instances in state (the arrays may hold more rows, unused); ``arrays``: those of
    :func:`row_arrays` (``pairs`` must have a free slot when the pair (j, k) has none yet);
    ``settings``: those of :func:`row_settings`; ``scratch``: (5, d) work space of the
    rank-one step, allocated once by the caller; ``d`` = ``x.shape[0]`` (a constant in the
    kernels of :func:`rows_for_dimension`); ``prepared``: the row's slot and arrival were done
    before (:func:`rows_for_dimension`'s ``prepare_rows``).

    The loops unpack the tuples once per call of the kernel, and call :func:`finish_row` only
    when the code asks for it: a tuple of arrays unpacked or passed on at every row costs a
    reference count per array and row (0.3 µs a row at d = 10, a third of the row; more when
    two threads share the arrays).
    """
    slot, pairs, n_pairs, empty, Sigma, sigma2, P, r, Phi, beta0, P0 = arrays[:11]
    pulls, arrivals, rank_one_count, since = arrays[11:]
    estimates_any, every, budget, recompute_every, local = settings
    dd = d * d
    oG, oq = 2 * dd + d, 3 * dd + d
    s = slot[j, k]
    if not prepared:
        if s < 0:  # the pair's first row: a slot, starting as the arm's empty record
            s = n_pairs[0]
            n_pairs[0] = s + 1
            pairs[s, :] = empty[k, :]
            slot[j, k] = s
        arrivals[j] += 1
    pulls[k] += 1
    since[k] += 1
    pairs[s, oq] += y * y
    pairs[s, oq + 1] += 1.0
    if estimates_any and reestimate_due(pulls[k], since[k], every, budget, n):
        for i in range(d):
            for m in range(d):
                pairs[s, oG + i * d + m] += x[i] * x[m]
        for i in range(d):
            pairs[s, 2 * dd + i] += x[i] * y
        return REESTIMATE
    # the O(d²) step in place, or the O(d³) refresh of the pair's blocks where it is
    # ill-conditioned (kernels.observe_row) or the pair is due (pair_refresh_due); never O(n)
    if pair_refresh_due(local, np.int64(pairs[s, oq + 1]), recompute_every) or not (
        PR.sherman_morrison_pair(d, x, y, pairs, s, P, r, Phi, beta0, sigma2[k], k, scratch)
    ):
        PR.refresh_pair(x, y, pairs, s, P, r, Phi, beta0, Sigma, sigma2, P0, k)
    rank_one_count[k] += 1
    # the periodic re-solve and rebuild bound the rounding the incremental steps accumulate
    act = drift_action(local, rank_one_count[k], recompute_every, budget, n)
    if act == RESOLVE:
        K.shared_resolve(P[k], P0[k], r[k], Phi[k], beta0[k])
        return DONE
    return act


@njit(inline="always", **_JIT)
def row_arrays(state):
    """The arrays :func:`row_step` reads from the state tuple
    (:meth:`~hierbandit.ebm.policy.EbmPolicy._row_state`): the slot index, records, their
    count, the empty records, Σ̂, σ̂², P, r, Φ, β̂₀, P₀, pulls, arrivals, the incremental
    steps and pulls since the last re-estimation of each arm."""
    return state[:6] + state[8:13] + state[14:]


@njit(inline="always", **_JIT)
def row_settings(options):
    """The scalars :func:`row_step` reads from the options tuple
    (:meth:`~hierbandit.ebm.policy.EbmPolicy._row_options`)."""
    return options[0], options[2], options[3], options[4], options[8]


@njit(inline="always", **_JIT)
def finish_row(code, k, n, state, options, cv_rng):
    """The step over all of arm k's pairs that :func:`row_step` returned, if any."""
    if code == REESTIMATE:
        reestimate_pairs(k, n, state, options, cv_rng)
    elif code == REBUILD:
        recompute_pairs(k, n, state)


@njit(**_JIT)
def apply_rows(J, X, arms, Y, n0, state, options, cv_rng):
    """:func:`row_step` and :func:`finish_row` over rows ``(J[i], X[i], arms[i], Y[i])`` in
    order; ``J[i] == n`` (the current number of instances) is a new instance. Returns the
    final n.

    The index must have rows for every instance the rows name, and ``pairs`` room for every
    pair they give its first row (the caller grows them).
    """
    n = n0
    d = X.shape[1]
    scratch = np.empty((5, d))
    arrays, settings = row_arrays(state), row_settings(options)
    for i in range(J.shape[0]):
        j = J[i]
        if j == n:
            n += 1
        k = arms[i]
        code = row_step(d, j, X[i], k, Y[i], n, arrays, settings, scratch, False)
        if code != DONE:  # (outside finish_row: passing the tuples costs, even unused)
            finish_row(code, k, n, state, options, cv_rng)
    return n


@functools.cache
def rows_for_dimension(d: int) -> tuple[Any, Any, Any]:
    """``(apply_rows, prepare_rows, arm_rows)`` compiled for contexts of dimension ``d``, a
    constant of the code (the d×d loops of the rank-one step unrolled); the same arithmetic,
    so the same state.

    ``apply_rows(J, X, arms, Y, n0, state, options, cv_rng, far)`` is :func:`apply_rows`; its
    last argument (:func:`~hierbandit.ebm._pairs.far_records`) prefetches the records of the
    rows ahead. ``prepare_rows`` then ``arm_rows`` on disjoint sets of arms give the same
    state while no hyperparameter is re-estimated (EbmPolicy splits a batch over two threads
    so)."""

    width = 3 * d * d + d + 2
    #: arm_rows asks for the record of its row AHEAD on and the index entry of the row
    #: 2 AHEAD on (1 to 4 measured: 2 was fastest, 1.58·10⁶ against 1.50·10⁶ rows/s for 1,
    #: on a stream of pairs with data at N = 10⁵, K = 20, d = 10)
    AHEAD = 2

    @njit(**PR._HOT)
    def apply_rows_d(J, X, arms, Y, n0, state, options, cv_rng, far):
        slot, pairs = state[0], state[1]
        arrays, settings = row_arrays(state), row_settings(options)
        n = n0
        B = J.shape[0]
        scratch = np.empty((5, d))
        for i in range(B):
            # the index entries of the rows 8 ahead and the records of the rows 4 ahead
            # fetched while this row is computed (random accesses, hints only), when the
            # records do not fit in the cache (far)
            if far and i + 8 < B and J[i + 8] < slot.shape[0]:
                PR._prefetch(slot, J[i + 8], arms[i + 8])
            if far and i + 4 < B and J[i + 4] < slot.shape[0]:
                s = slot[J[i + 4], arms[i + 4]]
                if s >= 0:
                    PR.prefetch_row(pairs, s, width)
            j = J[i]
            if j == n:
                n += 1
            k = arms[i]
            code = row_step(d, j, X[i], k, Y[i], n, arrays, settings, scratch, False)
            if code != DONE:
                finish_row(code, k, n, state, options, cv_rng)
        return n

    @njit(**PR._HOT)
    def prepare_rows(J, arms, n0, state, n_at, fresh):
        """The rows' bookkeeping that crosses arms, in order: new instances (``n_at[i]``, the
        instances after row i), arrivals, and a slot for each pair at its first row
        (``fresh[i]``: row i took it; :func:`arm_rows` writes the record, on the arm's
        thread)."""
        slot, n_pairs, arrivals = state[0], state[2], state[15]
        n = n0
        for i in range(J.shape[0]):
            j = J[i]
            k = arms[i]
            if j == n:
                n += 1
            n_at[i] = n
            arrivals[j] += 1
            fresh[i] = slot[j, k] < 0
            if fresh[i]:
                s = n_pairs[0]
                n_pairs[0] = s + 1
                slot[j, k] = s
        return n

    @njit(**PR._HOT)
    def arm_rows(lo, hi, J, X, arms, Y, n_at, fresh, state, options, cv_rng, far):
        """The rows of arms ``lo`` ≤ k < ``hi``, in order, after :func:`prepare_rows` (a
        pair's record starts as the arm's empty record at the row that took its slot): arms
        share nothing else while no hyperparameter is re-estimated (no draw from ``cv_rng``),
        so two calls on disjoint arms can run on two threads."""
        slot, pairs, empty = state[0], state[1], state[3]
        arrays, settings = row_arrays(state), row_settings(options)
        scratch = np.empty((5, d))
        mine = np.empty(J.shape[0], dtype=np.int64)  # the rows of these arms, in order
        m = 0
        for i in range(J.shape[0]):
            if lo <= arms[i] < hi:
                mine[m] = i
                m += 1
        for t in range(m):
            i = mine[t]
            k = arms[i]
            if far:  # hints: the index entry of the row 2 AHEAD on, the record AHEAD on
                if t + 2 * AHEAD < m:
                    a = mine[t + 2 * AHEAD]
                    PR._prefetch(slot, J[a], arms[a])
                if t + AHEAD < m:
                    a = mine[t + AHEAD]
                    PR.prefetch_row(pairs, slot[J[a], arms[a]], width)
            if fresh[i]:
                pairs[slot[J[i], k], :] = empty[k, :]
            code = row_step(d, J[i], X[i], k, Y[i], n_at[i], arrays, settings, scratch, True)
            if code != DONE:
                if code == REBUILD:
                    # the rebuild reads every slot of the arm, and prepare_rows gave slots to
                    # the pairs whose first row comes later in the batch: their records are
                    # written now (a pair without rows adds nothing to the arm's sums, and the
                    # rebuild gives it the empty blocks, as the loop does at its first row)
                    for u in range(t + 1, m):
                        a = mine[u]
                        if fresh[a] and arms[a] == k:
                            pairs[slot[J[a], k], :] = empty[k, :]
                            fresh[a] = False
                finish_row(code, k, n_at[i], state, options, cv_rng)

    return apply_rows_d, prepare_rows, arm_rows
