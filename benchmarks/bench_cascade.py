"""Milliseconds per episode of UCBBP and AUCBBP (N = 100 users, H = 3, K = 5, d = 5).

One episode is everything the policy does for ``N`` users: ``start_episode`` (estimated click
probabilities, backward planning, UCB widths, the AUCBBP top-M_t ranking), the ``H`` step-wise
``select`` calls while the cascade is simulated, and the end-of-episode ``update``. The clock
covers only the policy's calls, through the public, validating API.

Prints, for each policy: the median per-episode time over the first and the last blocks of
episodes and their ratio (late/early; the cost must be flat in t), and the same figures for the
greedy baseline (same estimator and planning, no widths) and for UCBBP with the full MLE refit
(``update_rule="batch_map"``, whose cost grows with the history) measured in the same run.

Target: ≤ 2 ms per episode for UCBBP and AUCBBP, late/early ratio ≤ 1.3.

Run: ``.venv/bin/python benchmarks/bench_cascade.py [--episodes 2000] [--users 100]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hierbandit.cascade.env import CascadeEnv, simulate_episode
from hierbandit.cascade.policies import AUCBBP, UCBBP, CascadeGreedy


def run(policy, roll, steps: int) -> np.ndarray:
    """Per-episode wall times (ns) of the policy's calls over ``steps`` episodes."""
    clock = time.perf_counter_ns
    times = np.empty(steps, dtype=np.int64)
    spent = [0]

    def select(h: int, active: np.ndarray) -> np.ndarray:
        t0 = clock()
        k = policy.select(h, active)
        spent[0] += clock() - t0
        return k

    for t in range(steps):
        X, P, U = roll.contexts[t], roll.click_prob[t], roll.uniforms[t]
        spent[0] = 0
        t0 = clock()
        policy.start_episode(X)
        spent[0] += clock() - t0
        arms, clicks = simulate_episode(P, U, select)
        t0 = clock()
        policy.update(X, arms, clicks)
        times[t] = spent[0] + clock() - t0
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--map-episodes", type=int, default=300)
    args = parser.parse_args()
    N, H, K, d, T = args.users, 3, 5, 5, args.episodes
    env = CascadeEnv.preset("mccb-repro", n_users=N, rng=1)
    roll = env.rollout(T, rng=2)
    e = env.rewards
    configs = [
        ("UCBBP (beta=0.5)", lambda: UCBBP(K, d, e, H, rng=0), T),
        ("AUCBBP (beta=0.5)", lambda: AUCBBP(K, d, e, H, T, rng=0), T),
        ("UCBBP (theory beta)", lambda: UCBBP(K, d, e, H, beta="theory", rng=0), T),
        ("AUCBBP (theory beta)", lambda: AUCBBP(K, d, e, H, T, beta="theory", rng=0), T),
        ("greedy (baseline)", lambda: CascadeGreedy(K, d, e, H, rng=0), T),
        (
            "UCBBP batch_map (full refit)",
            lambda: UCBBP(K, d, e, H, update_rule="batch_map", rng=0),
            min(T, args.map_episodes),
        ),
    ]
    run(UCBBP(K, d, e, H, rng=0), roll, 50)  # warm caches
    b = args.block
    print(f"per-episode time of the policy's calls; N={N}, H={H}, K={K}, d={d}, {T} episodes")
    print(
        f"{'policy':32s} {'median ms':>10s} {'first ' + str(b):>12s} {'last ' + str(b):>12s} "
        f"{'late/early':>11s} {'vs greedy':>10s}"
    )
    results = {}
    for name, make, steps in configs:
        times = run(make(), roll, steps) / 1e6
        bb = min(b, steps // 2)
        results[name] = (
            float(np.median(times)),
            float(np.median(times[:bb])),
            float(np.median(times[-bb:])),
        )
    base = results["greedy (baseline)"][0]
    for name, (med, early, late) in results.items():
        print(
            f"{name:32s} {med:10.3f} {early:12.3f} {late:12.3f} {late / early:11.2f} "
            f"{med / base:10.2f}"
        )
    ok = all(results[n][0] <= 2.0 for n in results if n.startswith(("UCBBP (", "AUCBBP (")))
    flat = all(
        results[n][2] / results[n][1] <= 1.3
        for n in results
        if n.startswith(("UCBBP (", "AUCBBP ("))
    )
    print(
        f"target <= 2 ms per episode: {'met' if ok else 'NOT met'}; flat in t: {'yes' if flat else 'NO'}"
    )
    # growth with t, in blocks
    print("\nmedian ms per block of episodes (UCBBP, AUCBBP):")
    for name in ("UCBBP (beta=0.5)", "AUCBBP (beta=0.5)"):
        make = dict((n, m) for n, m, _ in configs)[name]
        times = run(make(), roll, T) / 1e6
        blocks = [float(np.median(times[i : i + b])) for i in range(0, T, b)]
        print(f"  {name:22s} " + " ".join(f"{v:.3f}" for v in blocks))


if __name__ == "__main__":
    main()
