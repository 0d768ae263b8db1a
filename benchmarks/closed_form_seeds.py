"""Seed study of the quickstart's sampling-vs-closed-form step (docs/decisions/bayes.md, B11).

Fits the ML hyperparameters to the default MovieLens log as ``hierbandit quickstart`` does, then
runs :func:`hierbandit.bayes.compare_closed_form` on the centred conditional model with a
diagonal mass matrix (the quickstart's setting) for each route and seed, and prints one JSON line
per run: wall time, verdict, max |z|, the sd of the z-scores of the means and of the sds (about 1
for a healthy run), how many parameters exceed 3 and 4, max R-hat and min bulk ESS.

Routes: ``direct`` (the package's numpyro driver, the quickstart's), ``pm-numpyro``
(``pm.sample`` with numpyro), ``nutpie`` (``pm.sample`` with nutpie, the package default) and
``nutpie-lr`` (nutpie with its low-rank mass matrix adaptation).

Run: ``.venv/bin/python benchmarks/closed_form_seeds.py ROUTE SEEDS [DRAWS]``, e.g.
``benchmarks/closed_form_seeds.py direct 0,1,2 2000``.
"""

from __future__ import annotations

import json
import sys
import time

from hierbandit.bayes import compare_closed_form, fit_prior
from hierbandit.data import movielens_log, read_log
from hierbandit.experiments import quickstart as q

ROUTES = {
    "direct": {"nuts_sampler": "numpyro", "driver": "direct"},
    "pm-numpyro": {"nuts_sampler": "numpyro", "driver": "pymc"},
    "nutpie": {"nuts_sampler": "nutpie", "driver": "pymc"},
    "nutpie-lr": {"nuts_sampler": "nutpie", "driver": "pymc", "dense_mass": True},
}


def main() -> None:
    route, seeds = sys.argv[1], [int(s) for s in sys.argv[2].split(",")]
    draws = int(sys.argv[3]) if len(sys.argv) > 3 else q.DEFAULTS["compare_draws"]
    kw = {"dense_mass": False} | ROUTES[route]
    log = read_log(movielens_log(n_users=q.DEFAULTS["n_users"]))
    ml = fit_prior(log, method="ml", random_seed=0)
    for seed in seeds:
        t0 = time.perf_counter()
        cmp = compare_closed_form(
            log, ml.Sigma, ml.sigma2, q.COMPARE_LAM, draws=draws, tune=q.DEFAULTS["compare_tune"],
            chains=q.DEFAULTS["chains"], random_seed=seed, parameterization="centered",
            ess_min=q.COMPARE_ESS_MIN, progressbar=False, warn=False, **kw,
        )  # fmt: skip
        t = cmp.table
        worst = t[["z_mean", "z_sd"]].abs().max(axis=1)
        row = {
            "route": route,
            "seed": seed,
            "draws": draws,
            "wall_s": round(time.perf_counter() - t0, 1),
            "verdict": cmp.verdict,
            "max_abs_z": round(cmp.max_abs_z, 2),
            "sd_z_mean": round(float(t.z_mean.std()), 3),
            "sd_z_sd": round(float(t.z_sd.std()), 3),
            "n_over_3": int((worst > 3).sum()),
            "n_over_4": int((worst > 4).sum()),
            "max_rhat": round(cmp.diagnostics.max_rhat, 4),
            "min_ess_bulk": round(cmp.diagnostics.min_ess_bulk),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
