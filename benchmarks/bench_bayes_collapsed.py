"""Wall time and minimum bulk ESS: collapsed full-Bayes fit against the naive uncollapsed model.

The ebm synthetic setting (N = 10 instances, K = 5 arms, d = 3, rows from a uniform-random
policy), 2 chains × 1,000 draws after 1,000 tuning steps, PyMC defaults otherwise
(target_accept 0.8). Prints, per configuration, the wall time from model building to
InferenceData, the minimum bulk ESS and maximum R-hat over Σ_k and σ_k, divergences, and
ESS per second; then the ratios the targets are stated in:

* naive / collapsed wall time at T = 2,000 rows (target ≥ 40×, with ESS ≥ 1,000);
* collapsed at T = 100,000 rows / collapsed at T = 2,000 (target ≤ 1.5).

The naive model samples every coefficient (non-centred) from the rows with PyMC's default NUTS;
PyMC counts one physical core on these machines and so runs the two chains one after the other,
the same condition as the reference figure of 425 s in the design brief (which used per-arm
``LKJCholeskyCov`` priors; our batched LKJ construction makes the naive model faster too).
``--naive numpyro`` runs it with numpyro instead and ``--naive skip`` uses the 425 s reference.

Each collapsed fit is timed twice: with an empty JAX compilation cache (the first fit on a
machine) and with the programs cached (every later fit of a log of the same shape, since the
data are arguments of the compiled programs; see docs/decisions/bayes.md B9).

JAX, numpyro and PyMC's JAX bridge are imported before the clock starts (PyMC, which the naive
model uses, is imported at the top); their import time is printed with the figure of a first fit
in a fresh process.

Measured (2 cores, quiet machine, three runs): collapsed 8.5–9.2 s cold (10.1–11.0 s with the
1.6–1.8 s of imports in a fresh process), 4.6–4.8 s cached (min ESS 1,178) at 2,000 rows,
5.0–5.3 s cached at 100,000 rows (ratio 1.05–1.13); against the 425 s reference 46–50× cold
(39–42× in a fresh process) and 89–92× cached.

Run: ``.venv/bin/python benchmarks/bench_bayes_collapsed.py [--naive pymc|numpyro|skip]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import arviz as az
import numpy as np
import pandas as pd

from hierbandit.bayes import configure_compilation_cache
from hierbandit.bayes.models import collapsed_model, uncollapsed_model
from hierbandit.bayes.sampling import sample
from hierbandit.data import read_log
from hierbandit.ebm import HierarchicalLinearEnv

REFERENCE_NAIVE_SECONDS = 425.0


def synthetic_log(rows: int, seed: int = 0):
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


def _import_sampler_backend() -> None:
    """Import JAX, numpyro and PyMC's JAX bridge (what the first fit of a process loads)."""
    import numpyro.infer  # noqa: F401
    import pymc.sampling.jax  # noqa: F401
    import pytensor.link.jax  # noqa: F401


def run(label: str, build, log, **kw) -> dict:
    t0 = time.perf_counter()
    model = build(log)
    idata = sample(model, draws=1000, tune=1000, chains=2, target_accept=0.8, random_seed=1, **kw)
    wall = time.perf_counter() - t0
    summ = az.summary(idata, var_names=["Sigma", "sigma"])
    ess = float(summ["ess_bulk"].min())
    row = {
        "config": label,
        "rows": log.n_rows,
        "wall_s": wall,
        "min_ess_bulk": ess,
        "max_rhat": float(summ["r_hat"].max()),
        "divergences": int(idata.sample_stats["diverging"].sum()),
        "ess_per_s": ess / wall,
    }
    print(
        f"{label:<34}{log.n_rows:>8}{wall:>9.1f}{ess:>9.0f}{row['max_rhat']:>8.3f}"
        f"{row['divergences']:>6}{row['ess_per_s']:>9.1f}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--naive", choices=["pymc", "numpyro", "skip"], default="pymc")
    args = parser.parse_args()
    small, large = synthetic_log(2_000), synthetic_log(100_000)
    # The sampler's libraries are loaded once per process, like PyMC's at ``import pymc`` for the
    # naive model: their import is timed apart and shown with the fresh-process figure below.
    t0 = time.perf_counter()
    _import_sampler_backend()
    import_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as cache:
        configure_compilation_cache(cache)  # empty: the first fit compiles everything
        print(
            f"{'configuration':<34}{'rows':>8}{'wall s':>9}{'min ESS':>9}{'R-hat':>8}{'div':>6}"
            f"{'ESS/s':>9}"
        )
        cold = run("collapsed, cold cache", collapsed_model, small)
        warm = run("collapsed, warm cache", collapsed_model, small)
        c_large = run("collapsed, warm cache", collapsed_model, large)
    if args.naive == "skip":
        naive_wall = REFERENCE_NAIVE_SECONDS
        print(f"{'naive uncollapsed (reference)':<34}{2000:>8}{naive_wall:>9.1f}")
    else:
        kw = {"nuts_sampler": "pymc"} if args.naive == "pymc" else {}
        naive_wall = run(f"naive uncollapsed ({args.naive})", uncollapsed_model, small, **kw)[
            "wall_s"
        ]
    print()
    for label, row in (("cold", cold), ("warm", warm)):
        print(
            f"naive / collapsed ({label} cache) wall time at 2,000 rows: "
            f"{naive_wall / row['wall_s']:.1f}× (target ≥ 40×); against the 425 s reference: "
            f"{REFERENCE_NAIVE_SECONDS / row['wall_s']:.1f}×; collapsed min ESS "
            f"{row['min_ess_bulk']:.0f} (target ≥ 1,000)"
        )
    fresh = import_s + cold["wall_s"]
    print(
        f"first fit in a fresh process (cold cache, plus {import_s:.1f} s importing JAX, numpyro "
        f"and PyMC's JAX bridge): {fresh:.1f} s, {REFERENCE_NAIVE_SECONDS / fresh:.1f}× "
        "against the 425 s reference"
    )
    print(
        f"collapsed 100,000 rows / 2,000 rows (warm cache): "
        f"{c_large['wall_s'] / warm['wall_s']:.2f} (target ≤ 1.5)"
    )


if __name__ == "__main__":
    main()
