"""Rounds per second of SCLUB, CLUB, LinUCB-One and LinUCB-Ind (n_u = 1,000, d = 20, L = 20).

All four policies play the same pre-drawn rounds of setting (1a) (uniform user frequencies,
m = 10 clusters) in one run, through the compiled loop the simulator uses (``policy._run``);
the time spent drawing items is reported separately. Printed per policy: rounds per second,
microseconds per round, the time ratio to LinUCB-One measured in the same run, and the final
number of clusters. SCLUB's cost depends on how many clusters it keeps (the merge scan is
O(#checked clusters) per round), so both reward models are measured by default: Gaussian noise
(SCLUB finds the m clusters) and Bernoulli rewards (SCLUB keeps about one cluster per user).

In SCLUB's Table 2, SCLUB took 5.6× the time of LinUCB-One; target here: ≤ 2× side by side.

``--full`` also times the full horizon of setting (1a) at the reference code's scale
(n_u = 10,000, 2²⁰ rounds; target under 15 minutes on 2 cores), one run of each policy; use
``--full-rounds`` to time a prefix and extrapolate.

Run: ``.venv/bin/python benchmarks/bench_clustering.py [--rounds 65536] [--full]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hierbandit.sclub.env import ClusteredLinearEnv
from hierbandit.sclub.policies import CLUB, SCLUB, LinUCBInd, LinUCBOne

CLASSES = {"SCLUB": SCLUB, "CLUB": CLUB, "LinUCB-One": LinUCBOne, "LinUCB-Ind": LinUCBInd}


def make(cls, env: ClusteredLinearEnv, seed: int, preset: str):
    if preset == "reference":
        return cls.reference(env.n_users, env.n_features, rng=seed)
    return cls(env.n_users, env.n_features, rng=seed)


def warm_up(env: ClusteredLinearEnv, preset: str) -> None:
    """Load (or compile) every compiled loop once."""
    block = env.rollout(64, rng=0)
    for cls in CLASSES.values():
        pol = make(cls, env, 0, preset)
        pol._run(block.users, block.items, block.means, block.noise, env.bernoulli)


def measure(
    env: ClusteredLinearEnv, rounds: int, seed: int, preset: str = "paper", chunk: int = 8192
) -> dict:
    """Seconds in each policy's loop and in data generation over ``rounds`` shared rounds."""
    pols = {name: make(cls, env, seed, preset) for name, cls in CLASSES.items()}
    spent = dict.fromkeys(pols, 0.0)
    gen = 0.0
    regret = dict.fromkeys(pols, 0.0)
    t0 = time.perf_counter()
    for block in env.rollout_chunks(rounds, rng=seed + 1, chunk_size=chunk):
        gen += time.perf_counter() - t0
        best = block.means.max(axis=1)
        rows = np.arange(block.horizon)
        for name, pol in pols.items():
            t1 = time.perf_counter()
            choice, _ = pol._run(block.users, block.items, block.means, block.noise, env.bernoulli)
            spent[name] += time.perf_counter() - t1
            regret[name] += float((best - block.means[rows, choice]).sum())
        t0 = time.perf_counter()
    return {
        "spent": spent,
        "gen": gen,
        "regret": regret,
        "clusters": {n: p.n_clusters for n, p in pols.items()},
    }


def report(title: str, rounds: int, res: dict) -> None:
    base = res["spent"]["LinUCB-One"]
    print(f"\n{title}: {rounds:,} rounds; item generation {res['gen']:.2f} s")
    print(
        f"{'policy':12s} {'rounds/s':>12s} {'µs/round':>10s} {'× One':>7s} {'clusters':>9s} "
        f"{'regret':>10s}"
    )
    for name, s in res["spent"].items():
        print(
            f"{name:12s} {rounds / s:12,.0f} {1e6 * s / rounds:10.2f} {s / base:7.2f} "
            f"{res['clusters'][name]:9d} {res['regret'][name]:10,.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=65536)
    parser.add_argument("--reward", choices=["both", "gaussian", "bernoulli"], default="both")
    parser.add_argument("--noise-sd", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--preset", choices=["paper", "reference"], default="paper", help="policy configuration"
    )
    parser.add_argument("--full", action="store_true", help="also time setting (1a) in full")
    parser.add_argument("--full-users", type=int, default=10_000)
    parser.add_argument("--full-rounds", type=int, default=2**20)
    args = parser.parse_args()

    rewards = ["gaussian", "bernoulli"] if args.reward == "both" else [args.reward]
    for reward in rewards:
        env = ClusteredLinearEnv(
            args.users,
            10,
            args.features,
            args.items,
            reward=reward,
            noise_sd=args.noise_sd,
            rng=args.seed,
        )
        warm_up(env, args.preset)
        res = measure(env, args.rounds, args.seed, args.preset)
        report(
            f"n_u={args.users}, d={args.features}, L={args.items}, {reward} rewards, "
            f"{args.preset} preset",
            args.rounds,
            res,
        )
    if args.full:
        for reward in rewards:
            env = ClusteredLinearEnv(
                args.full_users,
                10,
                args.features,
                args.items,
                reward=reward,
                noise_sd=args.noise_sd,
                rng=args.seed,
            )
            t = time.perf_counter()
            res = measure(env, args.full_rounds, args.seed, args.preset)
            wall = time.perf_counter() - t
            report(
                f"setting (1a) full: n_u={args.full_users}, {reward} rewards, {args.preset} preset",
                args.full_rounds,
                res,
            )
            total = sum(res["spent"].values()) + res["gen"]
            scale = 2**20 / args.full_rounds
            print(
                f"wall {wall:.1f} s for all four policies and the items "
                f"(policies {sum(res['spent'].values()):.1f} s, items {res['gen']:.1f} s); "
                + (
                    f"extrapolated to 2^20 rounds: {total * scale / 60:.1f} min"
                    if scale != 1
                    else f"= {wall / 60:.1f} min"
                )
            )


if __name__ == "__main__":
    main()
