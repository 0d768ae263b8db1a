"""Wall time and ESS of the full-Bayes fit, route by route, and against the naive model.

The ebm synthetic setting (N = 10 instances, K = 5 arms, d = 3, rows from a uniform-random
policy), 2 chains × 1,000 draws after 1,000 tuning steps, target_accept 0.8, seed 1. Every route
of :func:`hierbandit.bayes.sample` is measured in processes of its own:

* ``direct-numpyro``: the package's numpyro driver (``driver="direct"``);
* ``pm-numpyro``: ``pm.sample(nuts_sampler="numpyro")``;
* ``pm-nutpie``: ``pm.sample(nuts_sampler="nutpie")`` with the model compiled by JAX (log
  density and gradient), the package's default;
* ``direct-nutpie``: the package's nutpie driver (JAX backend);
* ``pm-nutpie-numba`` (PyMC's own default backend for nutpie, minutes of compilation) and
  ``pm-pymc`` (PyMC's own NUTS): with ``--routes`` only.

Per route, three figures, each the wall time from building the model to the DataTree:

* **cold**: the first fit on a machine, in a fresh process, with an empty JAX compilation cache
  and an empty PyTensor compilation folder (both temporary);
* **refit**: then, in the same process, a fit of another log of the same shape (another seed of
  the environment): what a user pays when refitting, since the collapsed model's shapes are
  (K, N, d), not the number of rows;
* **fresh**: a fit of a third log of the same shape in a new process that finds both caches
  filled (the next session on the same machine).

The libraries a route loads (JAX, numpyro, nutpie, numba, PyMC's bridges) are imported before
the clock, and their import time is printed apart. Then the table gives each route's minimum bulk
ESS and maximum R-hat over Σ_k and σ_k, divergences, ESS per second, and its wall times as
ratios to the fastest ``pm.sample`` route measured in the same run (below 1: faster). The
package's rule (docs/decisions/bayes.md, B10): the default goes through ``pm.sample`` unless a
hand-written driver is at least 2× faster.

``--large`` adds a refit of a 100,000-row log to each route (target: at most 1.5× the 2,000-row
refit), ``--naive pymc|numpyro`` the naive uncollapsed model (PyMC's own NUTS, chains
one after the other on these machines; the design brief's reference is 425 s), ``--repeat R``
runs each route R times (the machines are shared: report ranges); ``--progress`` turns the
progress bars on (off otherwise).

Run: ``.venv/bin/python benchmarks/bench_bayes_collapsed.py [--routes a,b] [--repeat 3]
[--large] [--naive skip|pymc|numpyro]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REFERENCE_NAIVE_SECONDS = 425.0

#: route name -> keyword arguments of ``sample``
ROUTES: dict[str, dict[str, Any]] = {
    "direct-numpyro": {"driver": "direct", "nuts_sampler": "numpyro"},
    "pm-numpyro": {"driver": "pymc", "nuts_sampler": "numpyro"},
    "pm-nutpie": {"driver": "pymc", "nuts_sampler": "nutpie"},  # compiled by JAX: the default
    "pm-nutpie-numba": {"driver": "pymc", "nuts_sampler": "nutpie", "backend": "numba"},
    "direct-nutpie": {"driver": "direct", "nuts_sampler": "nutpie"},
    "pm-pymc": {"driver": "pymc", "nuts_sampler": "pymc"},
}
DEFAULT_ROUTES = ("direct-numpyro", "pm-numpyro", "pm-nutpie", "direct-nutpie")


def synthetic_log(rows: int, seed: int = 0):
    from hierbandit.data import read_log
    from hierbandit.ebm import HierarchicalLinearEnv

    env = HierarchicalLinearEnv(10, 5, 3, rng=seed)
    roll = env.rollout(rows, np.random.default_rng(seed + 1))
    arm = np.random.default_rng(seed + 2).integers(0, 5, rows)
    t = np.arange(rows)
    df = pd.DataFrame(
        {
            "instance": roll.instance,
            "arm": arm,
            "reward": roll.mean_reward[t, arm] + roll.noise[t, arm],
        }
    )
    for i in range(3):
        df[f"x{i}"] = roll.context[:, i]
    return read_log(df)


def _import_backend(route: str) -> None:
    """Import what the first fit of a process on ``route`` loads."""
    import pymc
    import pymc.sampling.jax  # noqa: F401
    import pytensor.link.jax

    if "numpyro" in route:
        import numpyro.infer  # noqa: F401
    if "nutpie" in route:
        import nutpie  # noqa: F401
    if route == "pm-nutpie-numba":
        import pytensor.link.numba  # noqa: F401


def fit(label: str, build, log, **kw) -> dict:
    import arviz as az

    from hierbandit.bayes.sampling import sample

    t0, c0 = time.perf_counter(), time.process_time()
    model = build(log)
    idata = sample(model, draws=1000, tune=1000, chains=2, target_accept=0.8, random_seed=1, **kw)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    summ = az.summary(idata, var_names=["Sigma", "sigma"])
    ess = float(summ["ess_bulk"].min())
    return {
        "config": label,
        "rows": log.n_rows,
        "wall_s": wall,
        "cpu_s": cpu,
        "min_ess_bulk": ess,
        "max_rhat": float(summ["r_hat"].max()),
        "divergences": int(idata.sample_stats["diverging"].sum()),
        "ess_per_s": ess / wall,
        "n_steps": float(idata.sample_stats["n_steps"].mean()),
    }


def worker(route: str, phase: str, large: bool, progress: bool) -> None:
    """One process: ``phase="cold"`` fits seed 0 then seed 10 (refit); ``"fresh"`` seed 20."""
    from hierbandit.bayes.models import collapsed_model

    t0 = time.perf_counter()
    _import_backend(route)
    rows = [{"config": "import", "wall_s": time.perf_counter() - t0}]
    kw = dict(ROUTES[route], progressbar=progress)
    seeds = {"cold": (0, 10), "fresh": (20,)}[phase]
    labels = {0: "cold", 10: "refit", 20: "fresh"}
    for seed in seeds:
        rows.append(fit(labels[seed], collapsed_model, synthetic_log(2_000, seed), **kw))
    if large:
        rows.append(fit("refit 100,000 rows", collapsed_model, synthetic_log(100_000, 30), **kw))
    print("ROWS " + json.dumps(rows), flush=True)


def run_route(route: str, large: bool, progress: bool) -> list[dict]:
    """``route`` cold and refit in one process, then fresh in another, with its own caches."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "HIERBANDIT_"))}
        env["HIERBANDIT_JAX_CACHE"] = str(Path(tmp) / "jax")
        env["PYTENSOR_FLAGS"] = f"base_compiledir={Path(tmp) / 'pytensor'}"
        for phase in ("cold", "fresh"):
            cmd = [sys.executable, __file__, "--worker", route, "--phase", phase]
            if large and phase == "cold":
                cmd.append("--large")
            if progress:
                cmd.append("--progress")
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith("ROWS ")]
            if res.returncode or not lines:
                sys.stderr.write(res.stderr[-3000:])
                raise SystemExit(f"{route} ({phase}) failed")
            out += [dict(r, route=route) for r in json.loads(lines[-1][5:])]
    return out


def naive(kind: str) -> float:
    """Wall time of the naive uncollapsed model (PyMC's NUTS or numpyro), 2,000 rows."""
    from hierbandit.bayes.models import uncollapsed_model

    kw = dict(ROUTES["pm-pymc" if kind == "pymc" else "direct-numpyro"], progressbar=False)
    row = fit(f"naive uncollapsed ({kind})", uncollapsed_model, synthetic_log(2_000), **kw)
    print(f"naive uncollapsed ({kind}): {row['wall_s']:.1f} s, min ESS {row['min_ess_bulk']:.0f}")
    return row["wall_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default=",".join(DEFAULT_ROUTES))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--naive", choices=["pymc", "numpyro", "skip"], default="skip")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--phase", default="cold", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.phase, args.large, args.progress)
        return
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    rows: list[dict] = []
    for rep in range(args.repeat):
        for route in routes:
            got = run_route(route, args.large, args.progress)
            rows += [dict(r, repeat=rep) for r in got]
            print(
                f"[{rep + 1}/{args.repeat}] {route:<15}"
                + "  ".join(
                    f"{r['config']} {r['wall_s']:.1f} s"
                    + (f" (CPU {r['cpu_s']:.1f} s)" if "cpu_s" in r else "")
                    for r in got
                ),
                flush=True,
            )
    df = pd.DataFrame(rows)
    fits = df[df["config"] != "import"]
    print()
    print("wall time (s), min–max over repeats; ESS and ESS/s of the refit; ratio to the fastest")
    print("pm.sample route of the same repeat, median over repeats (< 1: faster than pm.sample)")
    header = (
        f"{'route':<16}{'import':>8}{'cold':>13}{'refit':>13}{'fresh':>13}"
        f"{'ESS':>7}{'ESS/s':>7}{'steps':>7}{'R-hat':>7}{'div':>5}"
        f"{'×cold':>7}{'×refit':>7}{'×fresh':>7}"
    )
    print(header)
    best = {}
    for (rep, config), grp in fits.groupby(["repeat", "config"]):
        pm_rows = grp[grp["route"].str.startswith("pm-")]
        if len(pm_rows):
            best[(rep, config)] = pm_rows["wall_s"].min()
    for route in routes:
        mine = df[df["route"] == route]

        def span(config: str, mine=mine) -> str:
            w = mine.loc[mine["config"] == config, "wall_s"]
            return f"{w.min():5.1f}–{w.max():5.1f}" if len(w) else f"{'-':>11}"

        def ratio(config: str, mine=mine) -> str:
            r = [
                row.wall_s / best[(row.repeat, config)]
                for row in mine[mine["config"] == config].itertuples()
                if (row.repeat, config) in best
            ]
            return f"{np.median(r):7.2f}" if r else f"{'-':>7}"

        refit = mine[mine["config"] == "refit"]
        print(
            f"{route:<16}{mine.loc[mine['config'] == 'import', 'wall_s'].median():8.1f}"
            f"  {span('cold')}  {span('refit')}  {span('fresh')}"
            f"{refit['min_ess_bulk'].median():7.0f}{refit['ess_per_s'].median():7.0f}"
            f"{refit['n_steps'].median():7.1f}{refit['max_rhat'].max():7.3f}"
            f"{int(refit['divergences'].max()):5d}"
            f"{ratio('cold')}{ratio('refit')}{ratio('fresh')}"
        )
    for route in routes:
        mine = fits[fits["route"] == route]
        large = mine[mine["config"] == "refit 100,000 rows"].sort_values("repeat")
        if len(large):
            small = mine[mine["config"] == "refit"].sort_values("repeat")
            r = large["wall_s"].to_numpy() / small["wall_s"].to_numpy()
            print(
                f"{route}: refit of 100,000 rows / 2,000 rows: "
                f"{r.min():.2f}–{r.max():.2f} (target ≤ 1.5)"
            )
    naive_wall = naive(args.naive) if args.naive != "skip" else REFERENCE_NAIVE_SECONDS
    for route in routes:
        mine = fits[fits["route"] == route]
        for config in ("cold", "refit"):
            w = mine.loc[mine["config"] == config, "wall_s"]
            print(
                f"naive ({naive_wall:.0f} s) / {route} {config}: "
                f"{naive_wall / w.max():.0f}–{naive_wall / w.min():.0f}×"
            )


if __name__ == "__main__":
    main()
