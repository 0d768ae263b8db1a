"""Decisions per second of the compiled multi-seed loop against the per-seed Python loop.

For EbmTS (empirical-Bayes re-estimation every pull, as in the paper, and every m pulls,
``--every 1,10,100`` by default) and
LinUCB at N = 10, K = 5, d = 3, with 1 seed and with 100 seeds, prints the aggregate decisions
per second (select + update, summed over seeds) of

* ``loop``: the per-seed Python loop of ``simulate(..., vectorize=False)`` (``_run_policy``);
* ``batched 1 thr``: :func:`hierbandit.ebm.run_batched` on one thread;
* ``batched N thr``: the same on ``numba.get_num_threads()`` threads (``NUMBA_NUM_THREADS``),
  the default of ``simulate(..., vectorize="auto")``;

the ratio of the faster batched figure to the loop, and whether the target of 10⁶ decisions/s
with 100 seeds is met. Only the policy run is timed: rollouts and fresh policies are made before
the clock starts, as ``simulate`` makes them. Numba compilation is excluded (every kernel is
warmed up on a short run first). Each figure is the best of ``--repeats`` runs. A second table
shows where the time of EbmTS with EB every pull goes, and the load average of the machine is
printed last: on a busy machine the wall-clock figures drop when other processes take the
cores, so the last column also gives the one-thread figure per second of CPU time of this
process, which such preemption does not affect.

``--prange`` adds a comparison with the other design: the same compiled per-seed loop called
from one ``parallel=True`` function with ``prange`` over seeds, the policy states stacked on a
leading seed axis and the Generators passed in typed lists (EbmTS, EB every 100 pulls, 100
seeds). It checks that both give the same arms and states, and prints its compilation time and
speed next to the thread pool's.

Run: ``.venv/bin/python benchmarks/bench_vectorized.py [--quick] [--horizon 2000] [--every 1,10,100]
[--prange]``.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numba
import numpy as np
from numba import njit, prange, typed
from numba.core.errors import NumbaTypeSafetyWarning

from hierbandit.ebm import EbmTS, HierarchicalLinearEnv, LinUCB, run_batched
from hierbandit.ebm import compiled as V
from hierbandit.ebm.compiled import default_threads
from hierbandit.experiments.simulate import _run_policy
from hierbandit.stats.empirical_bayes import EBOptions

N, K, D = 10, 5, 3
TARGET = 1e6


def rollouts(S: int, T: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    env = HierarchicalLinearEnv(N, K, D, arrival="data-poor", rng=1)
    rolls = [env.rollout(T, rng=np.random.default_rng([2, s])) for s in range(S)]
    inst = np.stack([r.instance for r in rolls]).astype(np.int64)
    X = np.stack([r.context for r in rolls])
    R = np.stack([r.mean_reward + r.noise for r in rolls])
    return inst, X, R


def time_loop(make, inst, X, R) -> float:
    """Seconds of the per-seed Python loop over every seed (inputs prepared untimed)."""
    S = inst.shape[0]
    pols = [make(s) for s in range(S)]
    args = [(inst[s].tolist(), list(X[s].copy()), R[s].tolist()) for s in range(S)]
    t0 = time.perf_counter()
    for p, a in zip(pols, args, strict=True):
        _run_policy(p, *a)
    return time.perf_counter() - t0


def time_batched(make, inst, X, R, n_threads: int, cpu: bool = False) -> float:
    """Seconds (wall clock, or process CPU time with ``cpu``) of one ``run_batched`` call."""
    S = inst.shape[0]
    pols = [make(s) for s in range(S)]
    clock = time.process_time if cpu else time.perf_counter
    t0 = clock()
    run_batched(pols, inst, X, R, n_threads=n_threads)
    return clock() - t0


# ---------------------------------------------------------------------- EB profile
def eb_profile(T: int, repeats: int) -> list[tuple[str, float]]:
    """Microseconds per decision of the batched loop (one seed, one thread) for EbmTS with EB
    every pull while parts of the EB step are switched off; the differences between rows are
    what each part costs."""
    inst, X, R = rollouts(1, T)
    variants = [
        ("EB every pull (paper: CV threshold, Σ̂ and σ̂²)", EBOptions()),
        ("  Σ̂ without CV threshold (threshold='none')", EBOptions(threshold="none")),
        ("  σ̂² only (estimate_Sigma=False)", EBOptions(estimate_Sigma=False)),
        ("  no EB: rank-one updates only", EBOptions(estimate_Sigma=False, estimate_sigma2=False)),
    ]
    out = []
    for name, opts in variants:

        def make(s: int, opts: EBOptions = opts) -> EbmTS:
            return EbmTS(N, K, D, rng=s, eb_options=opts)

        time_batched(make, inst[:, :50], X[:, :50], R[:, :50], 1)  # warm-up
        best = min(time_batched(make, inst, X, R, 1) for _ in range(repeats))
        out.append((name, best / T * 1e6))
    return out


# ---------------------------------------------------------------------- prange alternative
_STATE = ("G", "b", "q", "n_obs", "Sigma", "sigma2", "gamma", "n_eff", "_Ct", "_A", "_P", "_r")
_STATE += ("_Phi", "_beta0", "_P0", "_h0", "pulls", "arrivals", "_rank_one_count", "_mu", "_tau")


@njit(parallel=True, cache=True)
def _ebm_prange(inst, X, R, arms, st, t0, alpha_tab, flags, every, rec, cv_splits, eb, gens, t_out):
    for s in prange(inst.shape[0]):
        t_out[s] = V._ebm_run(
            inst[s], X[s], R[s], arms[s], st[0][s], st[1][s], st[2][s], st[3][s], st[4][s],
            st[5][s], st[6][s], st[7][s], st[8][s], st[9][s], st[10][s], st[11][s], st[12][s],
            st[13][s], st[14][s], st[15][s], st[16][s], st[17][s], st[18][s], st[19][s],
            st[20][s], t0[s], alpha_tab, flags, every, rec, cv_splits, eb, gens[0][s],
            gens[1][s], gens[2][s],
        )  # fmt: skip


def run_prange(pols: list[EbmTS], inst, X, R) -> np.ndarray:
    """Fresh EbmTS policies of one configuration (global clock and forced init) run with prange
    over seeds; their states are stacked, run, and copied back."""
    S, T = inst.shape
    p = pols[0]
    st = tuple(np.stack([getattr(q, n) for q in pols]) for n in _STATE)
    flags = (True, p.tie_break == "random", True, True, False, p._estimates_any, p._need_uniforms)
    e = p._eb_args
    eb = (float(e[0]), float(e[1]), int(e[2]), int(e[3]), float(e[4]), bool(e[5]), float(e[6]),
          int(e[7]), bool(e[8]), float(e[9]), int(e[10]), bool(e[11]), bool(e[12]))  # fmt: skip
    gens = tuple(
        typed.List([getattr(q, g) for q in pols]) for g in ("_tie_rng", "_ts_rng", "_cv_rng")
    )
    arms = np.empty((S, T), dtype=np.int64)
    t_out = np.empty(S, dtype=np.int64)
    t0 = np.array([q.t for q in pols], dtype=np.int64)
    alpha_tab = V._sqrt_log_table(float(p.a), int(t0.max()) + T + 1)
    every, rec, cv = p.hyper_update_every, p.recompute_every, p.eb_options.cv_splits
    _ebm_prange(inst, X, R, arms, st, t0, alpha_tab, flags, every, rec, cv, eb, gens, t_out)
    for s, q in enumerate(pols):
        for name, a in zip(_STATE, st, strict=True):
            getattr(q, name)[...] = a[s]
        q.t = int(t_out[s])
    return arms


def compare_prange(T: int, repeats: int, threads: int) -> None:
    # the prange index is unsigned; indexing the typed lists with it is safe here
    warnings.filterwarnings("ignore", category=NumbaTypeSafetyWarning)

    def make(s: int) -> EbmTS:
        return EbmTS(N, K, D, rng=s, hyper_update_every=100)

    inst, X, R = rollouts(100, T)
    t0 = time.perf_counter()
    run_prange([make(0), make(1)], inst[:2, :5], X[:2, :5], R[:2, :5])
    compile_s = time.perf_counter() - t0
    a, b = [make(s) for s in range(100)], [make(s) for s in range(100)]
    same = np.array_equal(run_prange(a, inst, X, R), run_batched(b, inst, X, R))
    pairs = zip(a, b, strict=True)
    same &= all(
        np.array_equal(getattr(x, n), getattr(y, n), equal_nan=True)
        for x, y in pairs
        for n in _STATE
    )
    print(
        f"\nprange over seeds vs thread pool (EbmTS, EB every 100, 100 seeds, horizon {T}); "
        f"prange compile (or cache load) {compile_s:.1f} s; same arms and states: {same}"
    )
    print(f"{'threads':>8}{'prange':>12}{'thread pool':>14}   (decisions/s, wall clock)")
    for n in sorted({1, threads}):
        numba.set_num_threads(n)
        tp, tt = [], []
        for _ in range(repeats):
            pols = [make(s) for s in range(100)]
            t0 = time.perf_counter()
            run_prange(pols, inst, X, R)
            tp.append(time.perf_counter() - t0)
            tt.append(time_batched(make, inst, X, R, n))
        print(f"{n:>8}{100 * T / min(tp):>12.3g}{100 * T / min(tt):>14.3g}")
    numba.set_num_threads(threads)
    pc, tc = [], []
    for _ in range(repeats):
        pols = [make(s) for s in range(100)]
        t0 = time.process_time()
        run_prange(pols, inst, X, R)
        pc.append(time.process_time() - t0)
        tc.append(time_batched(make, inst, X, R, 1, cpu=True))
    print(f"{'1, CPU s':>8}{100 * T / min(pc):>12.3g}{100 * T / min(tc):>14.3g}   (per CPU second)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (horizon 200)")
    parser.add_argument("--horizon", type=int, default=2000, help="rounds per seed")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument("--prange", action="store_true", help="compare with prange over seeds")
    parser.add_argument(
        "--every",
        default="1,10,100",
        help="comma-separated EbmTS re-estimation periods m (hyper_update_every; 1 = the paper)",
    )
    args = parser.parse_args()
    periods = sorted({int(v) for v in args.every.split(",")})
    if not periods or min(periods) < 1:
        parser.error("--every: positive integers, e.g. 1,10,100")
    T = 200 if args.quick else args.horizon
    repeats = 1 if args.quick else args.repeats
    threads = default_threads()
    configs = [
        (
            "EbmTS",
            "every pull" if m == 1 else f"every {m}",
            lambda s, m=m: EbmTS(N, K, D, rng=s, hyper_update_every=m),
        )
        for m in periods
    ]
    configs.append(("LinUCB", "-", lambda s: LinUCB(N, K, D, rng=s)))
    # warm-up: compile (or load from the cache) every kernel before any clock starts
    wi, wx, wr = rollouts(2, 50)
    for _, _, make in configs:
        time_batched(make, wi, wx, wr, threads)
        time_loop(make, wi, wx, wr)
    print(
        f"N={N} K={K} d={D}, horizon {T}, aggregate decisions/s over seeds (select + update), "
        f"best of {repeats}; numba threads = {threads}; compilation excluded (warm-up run first)"
    )
    head = (
        f"{'policy':<8}{'EB every':>11}{'seeds':>6}{'loop':>12}{'batched 1 thr':>15}"
        f"{f'batched {threads} thr':>15}{'ratio':>8}  ≥1e6?{'1 thr per CPU s':>17}"
    )
    print(head)
    for name, every, make in configs:
        for S in (1, 100):
            inst, X, R = rollouts(S, T)
            dec = S * T
            loop = dec / min(time_loop(make, inst, X, R) for _ in range(repeats))
            one = dec / min(time_batched(make, inst, X, R, 1) for _ in range(repeats))
            many = dec / min(time_batched(make, inst, X, R, threads) for _ in range(repeats))
            cpu = dec / min(time_batched(make, inst, X, R, 1, cpu=True) for _ in range(repeats))
            best = max(one, many)
            met = "yes" if best >= TARGET else "no"
            if S == 1:
                met = "-"
            print(
                f"{name:<8}{every:>11}{S:>6}{loop:>12.3g}{one:>15.3g}{many:>15.3g}"
                f"{best / loop:>7.1f}×  {met:<5}{cpu:>17.3g}"
            )
    print(
        f"\nwhere the time of EbmTS with EB every pull goes (horizon {T}, 1 seed, 1 thread, "
        "µs per decision; each row switches off one more part of the EB step):"
    )
    for name, us in eb_profile(T, repeats):
        print(f"  {name:<50}{us:>8.2f}")
    inst, X, R = rollouts(100, 1)
    ebm = min(time_batched(configs[-2][2], inst, X, R, 1) for _ in range(max(repeats, 3)))
    lin = min(time_batched(configs[-1][2], inst, X, R, 1) for _ in range(max(repeats, 3)))
    print(
        "\nPython work per seed (run_batched on 100 seeds of one round, 1 thread): "
        f"EbmTS {ebm / 100 * 1e6:.0f} µs, LinUCB {lin / 100 * 1e6:.0f} µs"
    )
    if args.prange:
        compare_prange(T, repeats, threads)
    print(f"\nload average (1, 5, 15 min) during the run: {os.getloadavg()}")


if __name__ == "__main__":
    main()
