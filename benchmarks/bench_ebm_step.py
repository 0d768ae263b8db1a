"""Microseconds per decision+update of EbmTS and EbmUCB (N = 10, K = 5, d = 3).

Prints, for each policy and hyperparameter re-estimation period (every pull as in the paper, and
every 100 pulls), the median cost of one ``select`` + ``update`` through the public, validating
API, the median at steps 1,000–2,000 and at steps 99,000–100,000 of the same run with their ratio
(late/early; the per-step cost must not grow with the history), and the same figures for the flat
per-instance LinTS baseline measured in the same run.

Targets: ≤ 100 µs per step paper-faithful, ≤ 30 µs with re-estimation every 100 pulls, late/early
ratio ≤ 1.3.

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_ebm_step.py [--steps 100000]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hierbandit.ebm import EbmTS, EbmUCB, HierarchicalLinearEnv, LinTS


def run(policy, env, steps: int, rng: np.random.Generator) -> np.ndarray:
    """Per-step wall times (ns) of select + update over ``steps`` rounds."""
    roll = env.rollout(steps, rng)
    inst, ctx = roll.instance, roll.context
    rewards = roll.mean_reward + roll.noise
    times = np.empty(steps, dtype=np.int64)
    clock = time.perf_counter_ns
    for t in range(steps):
        j = int(inst[t])
        x = ctx[t]
        t0 = clock()
        k = policy.select(j, x)
        policy.update(j, x, k, float(rewards[t, k]))
        times[t] = clock() - t0
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    N, K, d = 10, 5, 3
    env = HierarchicalLinearEnv(N, K, d, arrival="data-poor", rng=1)
    configs = [
        ("EbmTS", EbmTS, {"hyper_update_every": 1}),
        ("EbmUCB", EbmUCB, {"hyper_update_every": 1}),
        ("EbmTS", EbmTS, {"hyper_update_every": 100}),
        ("EbmUCB", EbmUCB, {"hyper_update_every": 100}),
        ("LinTS (baseline)", LinTS, {}),
    ]
    # compile every kernel before timing
    for _, cls, kw in configs:
        run(cls(N, K, d, rng=0, **kw), env, 200, np.random.default_rng(0))
    early = slice(1_000, 2_000)
    late = slice(args.steps - 1_000, args.steps)
    print(f"N={N} K={K} d={d}, {args.steps} steps, public select+update, median µs per step")
    print(
        f"{'policy':<18}{'re-estimate':>12}{'overall':>10}{'early':>10}{'late':>10}{'late/early':>12}"
    )
    baseline = None
    rows = []
    for name, cls, kw in configs:
        times = run(cls(N, K, d, rng=0, **kw), env, args.steps, np.random.default_rng(2)) / 1e3
        med, e, lt = np.median(times), np.median(times[early]), np.median(times[late])
        every = kw.get("hyper_update_every", "-")
        every = "every pull" if every == 1 else (f"every {every}" if every != "-" else "-")
        rows.append((name, every, med))
        if cls is LinTS:
            baseline = med
        print(f"{name:<18}{every:>12}{med:>10.1f}{e:>10.1f}{lt:>10.1f}{lt / e:>12.2f}")
    print("\nratio to the flat per-instance LinTS baseline measured in this run:")
    for name, every, med in rows[:-1]:
        print(f"  {name:<8} {every:<12} {med / baseline:5.2f}×")


if __name__ == "__main__":
    main()
