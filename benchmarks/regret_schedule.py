"""Regret of the default hyperparameter schedule against the paper's every-pull schedule.

EbmTS and EbmUCB re-estimate an arm's (Σ̂, σ̂²) once its pulls since the last re-estimation
reach N / ``hyper_update_budget`` (docs/decisions/ebm.md A7); the paper does so at every pull
(``hyper_update_every=1``). This runs both on the same environments and random numbers
(``hierbandit.experiments.simulate``: the same per-seed environment, arrivals, contexts and
noise) and prints the final cumulative regret of each, their paired difference (default −
every pull) with a 95 % interval over seeds, and the wall time of each run.

Settings: the paper's Figure 1 (N = 10, balanced and data-poor arrivals), where the default is
the paper's schedule bit for bit, and the same environment with N = 30 (the size of the
paper's SARCOS task), 100 and 1,000 instances.

``--budgets 1,0.1`` adds a row per value of ``hyper_update_budget`` besides the default 10
(a smaller budget re-estimates less often: every N / budget pulls of an arm), each paired
against every pull on the same seeds: the regret a service gives up for a cheaper update.

Run: ``.venv/bin/python benchmarks/regret_schedule.py [--seeds 30] [--horizon 5000]
[--n 10,30,100,1000] [--budgets 0.1]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hierbandit.ebm import EbmTS, EbmUCB, HierarchicalLinearEnv
from hierbandit.experiments import simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--horizon", type=int, default=5000)
    parser.add_argument("--n", default="10,30,100,1000")
    parser.add_argument("--arrival", default="balanced,data-poor")
    parser.add_argument(
        "--budgets", default="", help="more hyper_update_budget values, comma-separated"
    )
    args = parser.parse_args()
    budgets = [float(v) for v in args.budgets.split(",") if v]
    K, d = 5, 3
    print(f"K={K} d={d} horizon={args.horizon} seeds={args.seeds}; final cumulative regret")
    print(
        f"{'setting':<24} {'policy':<7} {'every pull':>11} {'schedule':>11} "
        f"{'schedule - every (95% CI)':>28} {'time every/schedule':>19}"
    )
    for arrival in args.arrival.split(","):
        for N in (int(v) for v in args.n.split(",")):
            env = HierarchicalLinearEnv(N, K, d, arrival=arrival, rng=0)
            for cls in (EbmTS, EbmUCB):
                finals, times = {}, {}
                runs = [("every", {"hyper_update_every": 1}), ("default", {})]
                runs += [(f"budget={b:g}", {"hyper_update_budget": b}) for b in budgets]
                for label, kw in runs:
                    t0 = time.perf_counter()
                    ds = simulate({label: cls(N, K, d, rng=0, **kw)}, env, args.horizon, args.seeds)
                    times[label] = time.perf_counter() - t0
                    finals[label] = ds["regret"].sum("step").sel(policy=label).values
                for label, _ in runs[1:]:
                    diff = finals[label] - finals["every"]
                    half = 1.96 * diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else np.nan
                    name = cls.__name__ + ("" if label == "default" else " " + label)
                    print(
                        f"{arrival + ' N=' + str(N):<24} {name:<7} "
                        f"{finals['every'].mean():>11.1f} {finals[label].mean():>11.1f} "
                        f"{diff.mean():>+12.2f} [{diff.mean() - half:+7.2f}, "
                        f"{diff.mean() + half:+7.2f}] "
                        f"{times['every']:>8.1f}s/{times[label]:.1f}s",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
