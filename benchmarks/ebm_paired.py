"""Paired per-seed comparison of EbmTS/EbmUCB with a baseline on the ebm synthetic experiment.

Reads the per-seed output of ``hierbandit experiment run ebm-synthetic`` (the ``<setting>.nc``
files of its output folder, dims (policy, seed, step)) and prints, for every setting, ebm policy
and window of rounds, the regret each policy accumulated in the window, their paired difference
ebm − baseline (same seed: same instances, contexts, arrivals and noise, by common random
numbers) as mean ± standard error over seeds, the mean difference relative to the baseline, and
the number of seeds where the ebm policy has the larger regret ("ebm loses").

Run (docs/ebm.md, "Paired by seed")::

    .venv/bin/hierbandit experiment run ebm-synthetic --scale paper --seeds 60 \\
        --set horizon=10000 --out results/ebm-60x10000
    .venv/bin/python benchmarks/ebm_paired.py results/ebm-60x10000

Options: ``--baseline LinUCB`` (the policy compared with), ``--windows 2000,5000`` (the window
boundaries; the last window ends at the horizon, and the whole run is added as a last row),
``--instance 0`` (the regret of one instance only, e.g. the data-poor instance 0).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import xarray as xr

from hierbandit.experiments.ebm import SETTINGS
from hierbandit.experiments.simulate import cumulative_regret

EBM = ("EbmTS", "EbmUCB")


def window_regret(ds: xr.Dataset, bounds: list[int], instance: int | None) -> dict[str, np.ndarray]:
    """``{window label: (policy, seed) regret accumulated in the window}``, whole run last."""
    cum = cumulative_regret(ds, instance).transpose("policy", "seed", "step").values
    horizon = cum.shape[2]
    edges = [0, *[b for b in bounds if 0 < b < horizon], horizon]
    out = {}
    for lo, hi in itertools.pairwise(edges):
        start = cum[:, :, lo - 1] if lo > 0 else 0.0
        out[f"{lo + 1:,}–{hi:,}"] = cum[:, :, hi - 1] - start
    out[f"1–{horizon:,} (all)"] = cum[:, :, -1]
    return out


def paired_rows(
    ds: xr.Dataset, baseline: str, bounds: list[int], instance: int | None
) -> list[list[str]]:
    names = [str(p) for p in ds["policy"].values]
    if baseline not in names:
        raise SystemExit(f"baseline {baseline!r} not in the results ({names})")
    b = names.index(baseline)
    S = ds.sizes["seed"]
    rows = []
    for window, reg in window_regret(ds, bounds, instance).items():
        for pol in (p for p in EBM if p in names):
            e = names.index(pol)
            diff = reg[e] - reg[b]
            se = diff.std(ddof=1) / np.sqrt(S)
            rel = 100.0 * diff.mean() / reg[b].mean()
            rows.append(
                [
                    window,
                    pol,
                    f"{reg[e].mean():.1f}",
                    f"{reg[b].mean():.1f}",
                    f"{diff.mean():+.1f} ± {se:.1f}",
                    f"{rel:+.1f} %",
                    f"{int((diff > 0).sum())}/{S}",
                ]
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", type=Path, help="output folder of the ebm-synthetic experiment")
    ap.add_argument("--baseline", default="LinUCB")
    ap.add_argument("--windows", default="2000,5000", help="window boundaries (rounds)")
    ap.add_argument("--instance", type=int, default=None, help="one instance's regret only")
    args = ap.parse_args()
    bounds = [int(b) for b in args.windows.split(",") if b.strip()]
    found = False
    for setting, (description, _) in SETTINGS.items():
        path = args.results / f"{setting}.nc"
        if not path.exists():
            continue
        found = True
        with xr.open_dataset(path) as ds:
            ds = ds.load()
        what = "all instances" if args.instance is None else f"instance {args.instance}"
        print(f"### {setting}: {description}")
        print()
        print(
            f"{ds.sizes['seed']} seeds (root seed {ds.attrs.get('seed', '?')}), horizon "
            f"{ds.sizes['step']:,}, regret of {what} in each window; difference = policy − "
            f"{args.baseline}, paired by seed (mean ± s.e.)."
        )
        print()
        head = ["rounds", "policy", "policy", args.baseline, "difference", "relative", "ebm loses"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in paired_rows(ds, args.baseline, bounds, args.instance):
            print("| " + " | ".join(row) + " |")
        print()
    if not found:
        raise SystemExit(f"no <setting>.nc file in {args.results} ({', '.join(SETTINGS)})")


if __name__ == "__main__":
    main()
