"""Cascading bandits: UCBBP with the theory-sized β against uniformly random arms, and ε-greedy's
regret per user against N.

Reads ``results.nc`` of ``hierbandit experiment run cascade`` (dims n_users, policy, seed,
episode) and prints, for every number of users N, the cumulative regret R(T) per user of
UCBBP with the theory β (``UCBBP-theory``), of random arms (``random``), of ε-greedy and of UCBBP
with the constant β, as mean ± standard error over seeds; the paired difference UCBBP-theory −
random of R(T) (same seed: same users, contexts and click draws, by common random numbers) with
the number of seeds on which UCBBP-theory has more regret; and the ratio of every policy's
R(T)/N to its value at the smallest N.

Run (docs/cascading.md)::

    .venv/bin/hierbandit experiment run cascade --scale small --seeds 10 --out results/cascade
    .venv/bin/python benchmarks/cascade_beta.py results/cascade
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import xarray as xr

POLICIES = ("UCBBP-theory", "random", "eps-greedy", "UCBBP")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", type=Path, help="output folder of the cascade experiment")
    args = ap.parse_args()
    with xr.open_dataset(args.results / "results.nc") as ds:
        ds = ds.load()
    # R(T) per (n_users, policy, seed)
    final = ds["regret"].sum("episode").transpose("n_users", "policy", "seed")
    S = ds.sizes["seed"]
    Ns = [int(n) for n in ds["n_users"].values]
    T = ds.sizes["episode"]
    print(f"{S} seeds, T = {T} episodes; R(T) = cumulative regret over all users (mean ± s.e.)")
    print()
    head = ["N", *(f"{p} R(T)/N" for p in POLICIES), "UCBBP-theory − random, R(T)", "worse"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    per_user = {}
    for N in Ns:
        row = [str(N)]
        for p in POLICIES:
            v = final.sel(n_users=N, policy=p).values / N
            per_user[N, p] = v.mean()
            row.append(f"{v.mean():.2f} ± {v.std(ddof=1) / np.sqrt(S):.2f}")
        diff = final.sel(n_users=N, policy="UCBBP-theory") - final.sel(n_users=N, policy="random")
        d = diff.values
        row.append(f"{d.mean():+.0f} ± {d.std(ddof=1) / np.sqrt(S):.0f}")
        row.append(f"{int((d > 0).sum())}/{S}")
        print("| " + " | ".join(row) + " |")
    print()
    print("R(T) (all users), mean over seeds:")
    for N in Ns:
        vals = ", ".join(f"{p} {per_user[N, p] * N:,.0f}" for p in POLICIES)
        print(f"  N = {N}: {vals}")
    print()
    print(f"R(T)/N relative to N = {Ns[0]}:")
    for p in POLICIES:
        ratios = ", ".join(f"N = {N}: {per_user[N, p] / per_user[Ns[0], p]:.2f}" for N in Ns[1:])
        print(f"  {p}: {ratios}")


if __name__ == "__main__":
    main()
