"""Sampling vs closed form at real size (issue "Fit priors on real logs at real size").

A synthetic hierarchical log shaped like a MovieLens one: K = 5 arms, d = 3 features (an
intercept ``x0`` and two standard normal features), N instances. In the *sparse* log every
instance has rows in only 2 or 3 of the 5 arms (so 40–60 % of the (arm, instance) cells are
empty) and the number of rows of a non-empty cell is 1 + a negative binomial with mean 9 (from
one row to several dozen: data-poor and data-rich cells side by side); in the *dense* log every
cell has rows. β_{k0} ~ N(0, I), β_{k,j} ~ N(β_{k0}, Σ_k) with Σ_k = 0.5 I + 0.1, noise sd 1.

The *movielens* layout is the real thing: the package's MovieLens log
(:func:`hierbandit.data.movielens_log` with ``n_users=N``, the quickstart's log at N = 30),
where every (user, genre) cell has dozens to hundreds of ratings and the contexts (intercept,
an uncentred time, weekend) make every coefficient vector's posterior strongly correlated.

For each N it fits the type-II ML prior (``fit_prior(method="ml")``) and runs
``compare_closed_form(log, prior)`` with its defaults, and prints the wall time of each phase
(closed form, model, sampling with compilation, diagnostics, the comparison tables; from
``settings["timings"]``), the total, the number of parameters and of z-scores compared, the
tolerance, the verdict, max |z|, the failures and max |z| of each check (marginal,
cross-covariance, predictive mean and variance), the NUTS step size and mean number of leapfrog
steps, min bulk ESS and max R-hat, as one JSON line per run, and the machine's load average.

Run: ``.venv/bin/python benchmarks/bench_closed_form.py [--n 30,150,500]
[--layout sparse,dense,movielens] [--seed 0] [--option key=value ...]`` (``--option`` passes
further arguments to ``compare_closed_form``, e.g. ``--option parameterization=centered
--option likelihood=rows`` for the defaults before the whitened model).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import pandas as pd

K, D = 5, 3


def sparse_frame(n: int, *, layout: str = "sparse", seed: int = 0) -> pd.DataFrame:
    """The synthetic log of the module docstring: ``layout`` ``"sparse"`` (rows in 2–3 arms of
    5 per instance) or ``"dense"`` (rows in every arm)."""
    g = np.random.default_rng(seed)
    beta0 = g.normal(size=(K, D))
    Sigma = 0.5 * np.eye(D) + 0.1
    beta = beta0[:, None, :] + g.normal(size=(K, n, D)) @ np.linalg.cholesky(Sigma).T
    cells = []
    for j in range(n):
        arms = np.arange(K) if layout == "dense" else g.choice(K, g.integers(2, 4), replace=False)
        cells.extend((j, int(k)) for k in arms)
    sizes = 1 + g.negative_binomial(1, 0.1, size=len(cells))  # mean 10, from 1 to dozens
    inst = np.repeat([c[0] for c in cells], sizes)
    arm = np.repeat([c[1] for c in cells], sizes)
    rows = inst.size
    X = np.column_stack([np.ones(rows), g.normal(size=(rows, D - 1))])
    y = np.einsum("rd,rd->r", X, beta[arm, inst]) + g.normal(size=rows)
    df = pd.DataFrame({"instance": inst, "arm": arm, "reward": y})
    for i in range(D):
        df[f"x{i}"] = X[:, i]
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def run(n: int, layout: str, seed: int, options: dict) -> dict:
    """One comparison at ``n`` instances with the defaults (and ``options``); its figures."""
    from hierbandit.bayes import compare_closed_form, fit_prior
    from hierbandit.data import read_log

    if layout == "movielens":
        from hierbandit.data import movielens_log

        log = read_log(movielens_log(n_users=n), features=["intercept", "time", "weekend"])
    else:
        log = read_log(sparse_frame(n, layout=layout, seed=seed), features=["x0", "x1", "x2"])
    prior = fit_prior(log, method="ml")
    t0 = time.perf_counter()
    cmp = compare_closed_form(log, prior, progressbar=False, warn=False, **options)
    total = time.perf_counter() - t0
    counts = cmp.closed_form["n_rows"].to_numpy()
    checks = cmp.checks()
    stats = cmp.idata["sample_stats"]
    return {
        "n": n,
        "layout": layout,
        "seed": seed,
        "rows": int(log.n_rows),
        "empty_cells": round(float((counts == 0).mean()), 2),
        "options": options,
        "route": cmp.settings["route"],
        **{f"{k}_s": round(v, 1) for k, v in cmp.settings["timings"].items()},
        "total_s": round(total, 1),
        "n_params": cmp.n_params,
        "n_z_scores": int(checks["z_scores"].sum()),
        "tolerance": round(cmp.tolerance, 3),
        "verdict": cmp.verdict,
        "max_abs_z": round(cmp.max_abs_z, 2),
        "checks": {
            name: {"failed": int(row["failed"]), "max_abs_z": round(float(row["max_abs_z"]), 2)}
            for name, row in checks.iterrows()
        },
        "step_size": round(float(stats["step_size"].mean()), 3) if "step_size" in stats else None,
        "mean_leapfrog_steps": round(float(stats["n_steps"].mean()), 1)
        if "n_steps" in stats
        else None,
        "min_ess_bulk": round(cmp.diagnostics.min_ess_bulk),
        "max_rhat": round(cmp.diagnostics.max_rhat, 4),
        "divergences": cmp.diagnostics.divergences,
        "load_average": [round(v, 1) for v in os.getloadavg()],
    }


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="30,150,500")
    p.add_argument("--layout", default="sparse,dense")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    options = {k: _value(v) for k, v in (o.split("=", 1) for o in args.option)}
    for layout in args.layout.split(","):
        for n in (int(v) for v in args.n.split(",")):
            print(json.dumps(run(n, layout, args.seed, options)), flush=True)


if __name__ == "__main__":
    main()
