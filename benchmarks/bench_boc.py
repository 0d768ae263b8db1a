"""Time per BOC step against the number of arms M (10 to 1,000) and the dimension d (3 to 400).

A step is ``next_arm()`` (forced-exploration check, K-means Maximin, plug-in λ*(t) by the
compiled barrier solver, D-Tracking) + ``observe()`` + ``should_stop()`` (Z₁, Z₂, β). Instances:
K clusters with random centres, arms assigned round-robin, rescaled to D* = 2 (the real-data
regime). Each configuration is warmed up (initial pass and 200 steps), then timed over at least
``--min-steps`` steps and ``--min-seconds``. Also timed in the same run, as baselines:

* Uniform's step at the same (M, d): the same estimator and stopping rule without the solver;
* the parts of a BOC step separately (K-means, plug-in solver, stopping statistic);
* the barrier solver against SciPy SLSQP on the same λ* problem (K = 4 and K = 10).

Usage::

    .venv/bin/python benchmarks/bench_boc.py [--clusters 4] [--min-steps 300] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hierbandit.boc import BOC, Uniform
from hierbandit.boc import _kernels as kern
from hierbandit.boc.instances import ClusterBandit
from hierbandit.boc.lower_bound import _solve_slsqp


def make_instance(M: int, K: int, d: int, seed: int = 0) -> ClusterBandit:
    rng = np.random.default_rng(seed)
    labels = np.arange(M) % K
    centres = rng.normal(size=(K, d))
    return ClusterBandit(labels, centres, name=f"M{M}-d{d}").rescaled(2.0)


def time_steps(alg, inst, min_steps: int, min_seconds: float) -> float:
    sampler = inst.sampler(1)
    while alg.t < inst.n_arms + 200:
        a = alg.next_arm()
        alg.observe(a, sampler.pull(a))
        alg.should_stop()
    n = 0
    start = time.perf_counter()
    while n < min_steps or time.perf_counter() - start < min_seconds:
        a = alg.next_arm()
        alg.observe(a, sampler.pull(a))
        alg.should_stop()
        n += 1
    return (time.perf_counter() - start) / n


def time_call(fn, min_seconds: float = 0.2) -> float:
    fn()
    n = 0
    start = time.perf_counter()
    while n < 5 or time.perf_counter() - start < min_seconds:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def parts(alg) -> tuple[float, float, float]:
    """Seconds per call of K-means, the plug-in solver and the stopping statistic."""
    km = time_call(
        lambda: kern.kmeans_maximin(alg.means, alg.counts, alg.n_clusters, 0, alg.max_iter)
    )
    labels, centres, _, _ = kern.kmeans_maximin(alg.means, alg.counts, alg.n_clusters, 0, 1000)
    sol = time_call(
        lambda: kern.plugin_allocation(labels, centres, alg.n_clusters, True, 1e-10, 100)
    )
    stat = time_call(
        lambda: kern.stopping_statistics(
            alg.means, alg.counts, labels, centres, alg.n_clusters, True
        )
    )
    return km, sol, stat


def bench_grid(K: int, min_steps: int, min_seconds: float, Ms, ds) -> None:
    configs = [(M, 3) for M in Ms] + [(100, d) for d in ds if d != 3] + [(max(Ms), max(ds))]
    print(f"\nTime per step, K = {K} (µs; ratio = BOC / Uniform at the same M, d)")
    print(f"{'M':>6} {'d':>5} {'BOC':>10} {'Uniform':>10} {'ratio':>7} "
          f"{'k-means':>9} {'solver':>8} {'Z stat':>8}  BOC vs first row")  # fmt: skip
    base = None
    for M, d in configs:
        if K >= M:
            continue
        inst = make_instance(M, K, d)
        boc = BOC(M, K, d, log_inv_delta=1e6)  # never stops: steady-state steps
        uni = Uniform(M, K, d, log_inv_delta=1e6)
        t_boc = time_steps(boc, inst, min_steps, min_seconds)
        t_uni = time_steps(uni, inst, min_steps, min_seconds)
        km, sol, stat = parts(boc)
        base = base or t_boc
        print(
            f"{M:>6} {d:>5} {t_boc * 1e6:>10.1f} {t_uni * 1e6:>10.1f} {t_boc / t_uni:>7.2f} "
            f"{km * 1e6:>9.1f} {sol * 1e6:>8.1f} {stat * 1e6:>8.1f}  {t_boc / base:>6.1f}x"
        )


def bench_solver() -> None:
    print("\nλ* solver per call: compiled barrier vs SciPy SLSQP (same problem)")
    print(
        f"{'K':>4} {'pairs':>6} {'barrier µs':>11} {'SLSQP µs':>10} {'speed-up':>9} {'rel. diff D*':>13}"
    )
    rng = np.random.default_rng(0)
    for K in (4, 10):
        labels = np.arange(10 * K) % K
        centres = rng.normal(size=(K, 5))
        nk = np.bincount(labels).astype(float)
        ks, kps = kern.pair_set(nk, True)
        rhs = ((centres[ks] - centres[kps]) ** 2).sum(-1)
        args = (nk, rhs, ks, kps)
        t_b = time_call(lambda a=args: kern.solve_reciprocal(*a, 1e-10, 100))
        t_s = time_call(lambda a=args: _solve_slsqp(*a))
        u, _, _ = kern.solve_reciprocal(nk, rhs, ks, kps, 1e-10, 100)
        x = _solve_slsqp(nk, rhs, ks, kps)
        diff = abs((1 / u).sum() - x.sum()) / x.sum()
        print(
            f"{K:>4} {ks.size:>6} {t_b * 1e6:>11.1f} {t_s * 1e6:>10.1f} {t_s / t_b:>9.1f} {diff:>13.2e}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, nargs="+", default=[4, 10])
    ap.add_argument("--min-steps", type=int, default=300)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    ap.add_argument("--quick", action="store_true", help="fewer configurations")
    args = ap.parse_args()
    Ms = (10, 100, 1000) if args.quick else (10, 30, 100, 300, 1000)
    ds = (3, 50, 400) if args.quick else (3, 10, 50, 100, 400)
    # compile the kernels outside the timings
    BOC(11, 4, 3, delta=0.1).run(make_instance(11, 4, 3), rng=0)
    bench_solver()
    for K in args.clusters:
        bench_grid(K, args.min_steps, args.min_seconds, Ms, ds)


if __name__ == "__main__":
    main()
