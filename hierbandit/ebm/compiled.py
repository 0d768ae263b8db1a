"""Compiled multi-seed simulation of EbmTS, EbmUCB, LinUCB and LinTS.

:func:`simulate` (with ``vectorize="auto"`` or ``True``) and :func:`run_batched` run the whole
horizon of a policy inside one compiled function instead of calling ``policy._select`` and
``policy._update`` from Python once per round, and they run many seeds at once on
``numba.get_num_threads()`` threads (set by ``NUMBA_NUM_THREADS``).

The compiled loop is the per-seed Python loop written out: it works in place on the policy's
own arrays, calls the same numba kernels (``request_moments`` and ``row_step`` of
:mod:`hierbandit.ebm._pairs` and :mod:`hierbandit.ebm._rows`, which call ``reestimate_arm`` and
``arm_posterior`` of :mod:`hierbandit.stats.kernels`; ``_index_scores`` and ``ridge_add`` for
the ridge bandits) with the same arguments, draws from the policy's own
``numpy.random.Generator`` objects (numba's Generator methods share the generator's state and
reproduce NumPy's draws), and reads α_t from a table computed with :mod:`math` exactly as the
policy computes it. The arms pulled, and the policy's final state, are therefore bit-for-bit
those of the Python loop. ``docs/maths/simulation.md`` describes the design and the measured
speed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba
import numpy as np
from numba import njit

from hierbandit.ebm._pairs import argmax_first, refresh_empty_scores, request_moments
from hierbandit.ebm._rows import DONE, finish_row, row_arrays, row_settings, row_step
from hierbandit.ebm.base import Policy
from hierbandit.ebm.linear import LinTS, LinUCB, _index_scores
from hierbandit.ebm.policy import EbmTS, EbmUCB
from hierbandit.stats.ridge import ridge_add

__all__ = ["batched_unsupported", "default_threads", "run_batched"]

_JIT = {"cache": True, "nogil": True}

#: classes the compiled loop reproduces (exact classes: a subclass may override the hot path)
SUPPORTED = (EbmTS, EbmUCB, LinUCB, LinTS)


# ---------------------------------------------------------------------- shared helpers
@njit(**_JIT)
def _argmax_tie(s, random_tie, tie_rng):
    """``Policy._argmax``: NumPy's argmax (first maximum, NaN wins;
    :func:`~hierbandit.ebm._pairs.argmax_first`), then a uniform tie-break.

    The tie draw is ``tie_rng.integers(0, n_ties)``, made only when there is a tie, as in
    :meth:`~hierbandit.ebm.base.Policy._argmax`.
    """
    k, tied = argmax_first(s)
    if random_tie and tied:
        best = s[k]
        n_ties = 0
        for i in range(s.shape[0]):
            if s[i] == best:
                n_ties += 1
        pick = tie_rng.integers(0, n_ties)
        c = 0
        for i in range(s.shape[0]):
            if s[i] == best:
                if c == pick:
                    return i
                c += 1
    return k


@functools.lru_cache(maxsize=4)
def _sqrt_log_table(scale: float, size: int) -> np.ndarray:
    """``scale * math.sqrt(math.log(c))`` for c = 0 … size − 1 (NaN at c = 0).

    Computed with :mod:`math`, as the policies compute α_t and v_t, so the compiled loop reads
    bit-identical values. Cached: every seed of a configuration shares one table.
    """
    out = np.empty(size)
    out[0] = np.nan
    out[1:] = [scale * math.sqrt(math.log(c)) for c in range(1, size)]
    out.flags.writeable = False
    return out


_NO_TABLE = np.empty(0)
_NO_TABLE.flags.writeable = False


# ---------------------------------------------------------------------- ebm
@njit(**_JIT)
def _ebm_run(
    inst,
    X,
    R,
    arms,
    state,
    cache,
    dirty,
    t0,
    alpha_tab,
    flags,
    options,
    tie_rng,
    ts_rng,
    cv_rng,
):
    """The loop of ``EbmPolicy._select``/``_update`` over one seed's rollout; returns the final t.

    ``flags`` = (Thompson?, random tie-break?, global forced init?, global α clock?, literal
    (4.4)?, no forced init?). ``state`` and ``options`` are the policy's ``_row_state()`` and
    ``_row_options()`` (:func:`~hierbandit.ebm._rows.row_step`), with room in the records for
    every pair the rollout can give its first row; ``cache`` and ``dirty`` its empty-instance
    score terms (:func:`~hierbandit.ebm._pairs.refresh_empty_scores`).
    """
    is_ts, random_tie, forced_global, clock_global, literal_44, forced_none = flags
    slot, pairs, empty = state[0], state[1], state[3]
    sigma2, Phi, beta0, arrivals = state[5], state[10], state[11], state[15]
    T = inst.shape[0]
    Kn, N = slot.shape[1], slot.shape[0]
    s = np.empty(Kn)
    mu = np.empty(Kn)
    tau = np.empty(Kn)
    u = np.empty(X.shape[1])
    c = np.empty(X.shape[1])
    w = np.empty(X.shape[1] * (X.shape[1] + 1) // 2)
    scratch = np.empty((5, X.shape[1]))
    arrays, settings = row_arrays(state), row_settings(options)  # unpacked once
    t = t0
    for step in range(T):
        j = inst[step]
        x = X[step]
        # ---- _select
        if forced_none:
            k = -1
        elif forced_global:
            k = t if t < Kn else -1
        else:
            cnt = arrivals[j]
            k = cnt if cnt < Kn else -1
        if k < 0:
            refresh_empty_scores(empty, beta0, Phi, sigma2, cache, dirty)
            request_moments(
                x.shape[0], x, j, slot, pairs, cache, beta0, Phi, sigma2, literal_44, mu, tau, u,
                c, w,
            )  # fmt: skip
            alpha = alpha_tab[t + 1] if clock_global else alpha_tab[arrivals[j] + 1]
            if is_ts:
                z = ts_rng.standard_normal(Kn)
                for i in range(Kn):
                    s[i] = mu[i] + alpha * tau[i] * z[i]
            else:
                for i in range(Kn):
                    s[i] = mu[i] + alpha * tau[i]
            k = _argmax_tie(s, random_tie, tie_rng)
        arms[step] = k
        y = R[step, k]
        # ---- _update
        t += 1
        code = row_step(x.shape[0], j, x, k, y, N, arrays, settings, scratch, False)
        if code != DONE:
            finish_row(code, k, N, state, options, cv_rng)
        dirty[k] = True
    return t


def _ebm_run_policy(policy: Any, inst: np.ndarray, X: np.ndarray, R: np.ndarray, arms: np.ndarray):
    """Run an EbmPolicy over one rollout in place (its state is read when the run starts)."""
    p = policy
    T = inst.shape[0]
    clock = int(p.t) if p.alpha_clock == "global" else int(p.arrivals.max())
    size = clock + T + 1
    alpha_tab = _sqrt_log_table(float(p.a), size)
    # every pair the rollout names may take its first row
    p._reserve_pairs(min(p.n_pairs + T, p.n_instances * p.n_arms))
    flags = (
        p.exploration == "ts",
        p.tie_break == "random",
        p.forced_init == "global",
        p.alpha_clock == "global",
        bool(p._literal_44),
        p.forced_init == "none",
    )
    state = p._row_state()
    cache = p._empty_terms()
    p.t = _ebm_run(
        inst,
        X,
        R,
        arms,
        state,
        cache,
        p._empty_dirty,
        int(p.t),
        alpha_tab,
        flags,
        p._row_options(),
        p._tie_rng,
        p._ts_rng,
        p._cv_rng,
    )
    p._rows_applied(state)
    p._empty_stale = True


# ---------------------------------------------------------------------- LinUCB / LinTS
@njit(**_JIT)
def _ridge_run(
    inst,
    X,
    R,
    arms,
    n_arms,
    G,
    b,
    q,
    n,
    Ainv,
    theta,
    reg,
    recompute_every,
    t0,
    width,
    width_tab,
    is_ts,
    random_tie,
    tie_rng,
    sample_rng,
):
    """The loop of LinUCB/LinTS ``_select``/``_update`` over one seed's rollout; returns t.

    Unit ``j * n_arms + k`` holds (instance j, arm k). LinUCB scores with ``z = 1`` and width α;
    LinTS draws ``z`` from ``sample_rng`` and uses width v, or ``width_tab[t + 1]`` =
    v·sqrt(log(t + 1)) when ``width_tab`` is not empty.
    """
    T = inst.shape[0]
    ones = np.ones(n_arms)
    s = np.empty(n_arms)
    use_tab = width_tab.shape[0] > 0
    t = t0
    for step in range(T):
        j = inst[step]
        x = X[step]
        base = j * n_arms
        if is_ts:
            z = sample_rng.standard_normal(n_arms)
            w = width_tab[t + 1] if use_tab else width
            _index_scores(Ainv, theta, base, x, w, z, s)
        else:
            _index_scores(Ainv, theta, base, x, width, ones, s)
        k = _argmax_tie(s, random_tie, tie_rng)
        arms[step] = k
        ridge_add(G, b, q, n, Ainv, theta, reg, base + k, x, R[step, k], recompute_every)
        t += 1
    return t


def _ridge_run_policy(
    policy: Any, inst: np.ndarray, X: np.ndarray, R: np.ndarray, arms: np.ndarray
):
    """Run LinUCB or LinTS over one rollout in place (its state is read when the run starts)."""
    p = policy
    st = p.stats
    is_ts = isinstance(p, LinTS)
    if is_ts:
        width = float(p.v)
        tab = _sqrt_log_table(width, int(p.t) + inst.shape[0] + 1) if p._log_t else _NO_TABLE
        sample_rng = p._sample_rng
    else:
        width = float(p.alpha)
        tab = _NO_TABLE
        sample_rng = p._tie_rng  # never drawn from

    p.t = _ridge_run(
        inst,
        X,
        R,
        arms,
        int(p.n_arms),
        st.G,
        st.b,
        st.q,
        st.n,
        st.Ainv,
        st.theta,
        float(st.reg),
        int(st._every),
        int(p.t),
        width,
        tab,
        is_ts,
        p.tie_break == "random",
        p._tie_rng,
        sample_rng,
    )


# ---------------------------------------------------------------------- public API
_EBM_FLOAT = ("_pairs", "_empty", "Sigma", "sigma2", "gamma", "_P", "_r", "_Phi")
_EBM_FLOAT += ("_beta0", "_P0", "_h0")
_EBM_INT = ("n_eff", "pulls", "arrivals", "_rank_one_count", "_since_estimate")
_EBM_INT32 = ("_pair_slot",)
_RIDGE_FLOAT = ("G", "b", "q", "Ainv", "theta")
_HOT_METHODS = (
    "_select",
    "_update",
    "_argmax",
    "_scores",
    "_moments",
    "_alpha",
    "_forced_arm",
    "_reestimate_arm",
    "_recompute_arm",
    "_draw",
)


def _bad_arrays(obj: Any, names: Sequence[str], kind: str) -> list[str]:
    bad = []
    for name in names:
        a = getattr(obj, name, None)
        if not (
            isinstance(a, np.ndarray)
            and a.dtype == {"f": np.float64, "i": np.int64, "i4": np.int32}[kind]
            and a.flags.writeable
            and a.flags.c_contiguous
        ):
            bad.append(name)
    return bad


def batched_unsupported(policy: Any) -> str | None:
    """Why the compiled multi-seed loop cannot run ``policy``, or None when it can.

    Supported are instances of exactly :class:`~hierbandit.ebm.EbmTS`,
    :class:`~hierbandit.ebm.EbmUCB`, :class:`~hierbandit.ebm.LinUCB` and
    :class:`~hierbandit.ebm.LinTS` (with every constructor option), whose state arrays are
    writable C-contiguous float64/int64 arrays (as the constructors make them) and whose random
    streams are NumPy Generators. Subclasses and instances with a replaced method are not
    supported, since they may change what a round does.

    Parameters
    ----------
    policy
        Any object.

    Returns
    -------
    str or None
        A sentence naming the reason, or None.
    """
    cls = type(policy)
    if cls not in SUPPORTED:
        names = ", ".join(c.__name__ for c in SUPPORTED)
        return f"{cls.__name__} has no compiled loop (supported: exactly {names})"
    replaced = sorted(set(vars(policy)) & set(_HOT_METHODS))
    if replaced:
        return f"{cls.__name__} instance replaces the method(s) {replaced}"
    if cls in (EbmTS, EbmUCB) and policy.grow:
        return (
            f"{cls.__name__} accepts new instances (grow=True); the compiled loop runs a fixed set"
        )
    if cls in (EbmTS, EbmUCB):
        bad = _bad_arrays(policy, _EBM_FLOAT, "f") + _bad_arrays(policy, _EBM_INT, "i")
        bad += _bad_arrays(policy, _EBM_INT32, "i4")
        gens = ("_tie_rng", "_ts_rng", "_cv_rng")
    else:
        bad = _bad_arrays(policy.stats, _RIDGE_FLOAT, "f") + _bad_arrays(policy.stats, ["n"], "i")
        gens = ("_tie_rng", "_sample_rng") if cls is LinTS else ("_tie_rng",)
    if bad:
        return (
            f"{cls.__name__} state arrays {bad} are not writable C-contiguous float64/int64 arrays"
        )
    for g in gens:
        if not isinstance(getattr(policy, g, None), np.random.Generator):
            return f"{cls.__name__}.{g} is not a numpy Generator"
    return None


def as_input(a: Any, dtype: Any) -> np.ndarray:
    """A C-contiguous writable array (one compiled specialisation serves every input)."""
    return np.require(a, dtype=dtype, requirements=["C", "W"])


def make_job(policy: Policy, inst: np.ndarray, X: np.ndarray, R: np.ndarray, arms: np.ndarray):
    """A no-argument callable that runs ``policy`` over one rollout in place, filling ``arms``."""
    if isinstance(policy, EbmTS | EbmUCB):
        return functools.partial(_ebm_run_policy, policy, inst, X, R, arms)
    return functools.partial(_ridge_run_policy, policy, inst, X, R, arms)


def default_threads() -> int:
    """Threads used for seeds run at once: ``numba.get_num_threads()`` (``NUMBA_NUM_THREADS``)."""
    return int(numba.get_num_threads())


def _state_of(policy: Policy) -> list[Any]:
    """The mutable objects a run of ``policy`` writes: its state arrays and Generators."""
    if isinstance(policy, EbmTS | EbmUCB):
        arrays = [getattr(policy, n) for n in _EBM_FLOAT + _EBM_INT + _EBM_INT32]
        gens = [policy._tie_rng, policy._ts_rng, policy._cv_rng]
    else:
        arrays = [getattr(policy.stats, n) for n in (*_RIDGE_FLOAT, "n")]
        gens = [policy._tie_rng] + ([policy._sample_rng] if isinstance(policy, LinTS) else [])
    return arrays + gens


def _independent(policies: Sequence[Policy]) -> bool:
    """True when no two policies share an object a run writes (then seeds may run at once)."""
    seen: set[int] = set()
    for p in policies:
        mine = set()
        for obj in _state_of(p):
            if isinstance(obj, np.ndarray):
                base = obj
                while isinstance(base.base, np.ndarray):
                    base = base.base
                mine.add(("buffer", base.__array_interface__["data"][0]))
            else:
                mine.add(id(obj))
        if mine & seen:
            return False
        seen |= mine
    return True


def run_jobs(jobs: list[Any], n_threads: int, policies: Sequence[Policy] = ()) -> None:
    """Run the jobs, each on one seed, on ``n_threads`` threads (the kernels release the GIL).

    Jobs run one after another, in order, when ``policies`` (one per job) share any state
    array or Generator, so that the result is that of the sequential loop.
    """
    if n_threads <= 1 or len(jobs) <= 1 or not _independent(policies):
        for job in jobs:
            job()
        return
    pool = ThreadPoolExecutor(max_workers=min(n_threads, len(jobs)))
    try:
        for fut in [pool.submit(job) for job in jobs]:
            fut.result()
    finally:
        # on an error or an interrupt, seeds not yet started are dropped
        pool.shutdown(wait=True, cancel_futures=True)


def _check_threads(n_threads: Any) -> int:
    if n_threads is None:
        return default_threads()
    if isinstance(n_threads, bool) or not isinstance(n_threads, int | np.integer):
        raise TypeError(f"n_threads must be a positive int or None, got {n_threads!r}")
    if n_threads < 1:
        raise ValueError(f"n_threads must be a positive int or None, got {n_threads}")
    return int(n_threads)


def run_batched(
    policies: Sequence[Policy],
    instances: Any,
    contexts: Any,
    rewards: Any,
    *,
    n_threads: int | None = None,
) -> np.ndarray:
    """Run S policies, one per seed, over their rollouts at once with the compiled loop.

    Equivalent to, for every seed ``s`` and round ``t`` in turn,
    ``k = policies[s]._select(j, x)`` then ``policies[s]._update(j, x, k, rewards[s, t, k])``
    with ``j = instances[s, t]`` and ``x = contexts[s, t]``: the arms returned and the final state
    of every policy (statistics, hyperparameters, counters, random-generator states) are
    bit-for-bit those of that loop. The policies are trained in place.

    Parameters
    ----------
    policies
        S distinct policies accepted by :func:`batched_unsupported` (their classes may differ).
    instances : array_like of int, shape (S, T)
        Arriving instance of each round.
    contexts : array_like, shape (S, T, d)
        Contexts.
    rewards : array_like, shape (S, T, K)
        Reward every arm would pay in each round.
    n_threads : int, optional
        Seeds run at once; default ``numba.get_num_threads()`` (``NUMBA_NUM_THREADS``).

    Returns
    -------
    numpy.ndarray of int64, shape (S, T)
        The arms pulled.

    Raises
    ------
    TypeError, ValueError
        Before any policy changes, for an unsupported policy (the message names it and the
        reason), a policy passed twice, or arrays of the wrong shape or values.
    """
    n_threads = _check_threads(n_threads)
    policies = list(policies)
    S = len(policies)
    if S == 0:
        raise ValueError("policies must hold at least one policy")
    for i, p in enumerate(policies):
        why = batched_unsupported(p)
        if why is not None:
            raise TypeError(f"policies[{i}]: {why}")
    if len({id(p) for p in policies}) != S:
        raise ValueError("policies must be distinct objects (one per seed)")
    first = policies[0]
    N, Kn, d = first.n_instances, first.n_arms, first.n_features
    for i, p in enumerate(policies):
        if (p.n_instances, p.n_arms, p.n_features) != (N, Kn, d):
            raise ValueError(
                f"policies[{i}] has (n_instances, n_arms, n_features) = "
                f"{(p.n_instances, p.n_arms, p.n_features)}, policies[0] has {(N, Kn, d)}"
            )
    inst = np.asarray(instances)
    if inst.ndim != 2 or inst.shape[0] != S:
        raise ValueError(f"instances must have shape ({S}, T), got {inst.shape}")
    if inst.size and inst.dtype.kind not in "iu":
        raise TypeError(f"instances must hold integers, got dtype {inst.dtype}")
    T = inst.shape[1]
    if T == 0:
        raise ValueError("instances must hold at least one round (T ≥ 1)")
    if inst.min() < 0 or inst.max() >= N:
        raise ValueError(f"instances must be in [0, {N})")
    X = as_input(contexts, np.float64)
    if X.shape != (S, T, d):
        raise ValueError(f"contexts must have shape {(S, T, d)}, got {X.shape}")
    Rw = as_input(rewards, np.float64)
    if Rw.shape != (S, T, Kn):
        raise ValueError(f"rewards must have shape {(S, T, Kn)}, got {Rw.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Rw))):
        raise ValueError("contexts and rewards must be finite")
    inst = as_input(inst, np.int64)
    arms = np.empty((S, T), dtype=np.int64)
    jobs = [make_job(p, inst[s], X[s], Rw[s], arms[s]) for s, p in enumerate(policies)]
    run_jobs(jobs, n_threads, policies)
    return arms
