"""Where the ebm policies' regret comes from on a real-data task: estimated against true hyperparameters.

The table of docs/ebm-real-data.md ("Where the early regret comes from"): on one task of
:mod:`hierbandit.ebm.real_tasks` (MovieLens by default), the same seeds, environments and random
numbers as ``hierbandit experiment run ebm-real`` (root seed 0), the final cumulative regret of

* EbmTS and EbmUCB with the paper's defaults (empirical-Bayes Σ̂_k, σ̂_k² re-estimated at every
  pull), LinTS and LinUCB — in the order of the ``ebm-real`` experiment, so that each gets the
  same random stream there and here (with ``--seeds 100`` these rows are the experiment's);
* EbmTS and EbmUCB with ``EBOptions(debias_ols_noise=True)`` (Σ̂_k less the average OLS
  sampling noise, docs/decisions/ebm.md §3);
* EbmTS given the task's true hyperparameters, ``prior_mode="fixed"``: the shared mean
  β_{k0} (with covariance 10⁻⁶ Σ_k, the mean known up to a millionth of the heterogeneity), Σ_k
  and σ_k² of the construction (``SemiSyntheticTasks.shared_mean``, ``Sigma``, ``noise_var``),
  never re-estimated.

It prints the mean ± standard error over seeds and the differences paired by seed against
LinUCB and against the default of the same policy (mean ± standard error, and the seeds where
the variant has the larger regret).

Run: ``.venv/bin/python benchmarks/ebm_real_pilot.py [--dataset movielens] [--seeds 100]
[--horizon 5000] [--threads 2]``. ``--threads`` is the number of seeds the compiled loop runs
at once (``numba`` threads).
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd

from hierbandit.ebm import EbmTS, EbmUCB
from hierbandit.ebm.real_tasks import REAL_TASKS, make_real_tasks
from hierbandit.experiments import simulate
from hierbandit.experiments.ebm import make_policies
from hierbandit.experiments.ebm_real import REAL_EXPERIMENTS
from hierbandit.stats.empirical_bayes import EBOptions

#: the first policies of the ``ebm-real`` experiment, in its order (the random streams follow
#: the position)
BASELINE_ORDER = ("EbmTS", "EbmUCB", "LinTS", "LinUCB")
#: covariance of the true shared mean, relative to Σ_k (it is known: a point mass in the limit)
SHARED_COV_SCALE = 1e-6


def true_prior(tasks) -> SimpleNamespace:
    """The construction's hyperparameters as a prior an ebm policy accepts."""
    return SimpleNamespace(
        shared_mean=np.asarray(tasks.shared_mean, dtype=float),
        shared_cov=SHARED_COV_SCALE * np.asarray(tasks.Sigma, dtype=float),
        Sigma=np.asarray(tasks.Sigma, dtype=float),
        sigma2=np.asarray(tasks.noise_var, dtype=float),
    )


def policies(tasks, hyper_update_every: int = 1) -> dict[str, object]:
    N, K, d = tasks.n_instances, tasks.n_arms, tasks.n_features
    pols = make_policies(N, K, d, BASELINE_ORDER, hyper_update_every=hyper_update_every)
    debias = EBOptions(debias_ols_noise=True)
    pols["EbmTS debias"] = EbmTS(N, K, d, hyper_update_every=hyper_update_every, eb_options=debias)
    pols["EbmUCB debias"] = EbmUCB(
        N, K, d, hyper_update_every=hyper_update_every, eb_options=debias
    )
    pols["EbmTS true hyperparameters"] = EbmTS(N, K, d, prior=true_prior(tasks), prior_mode="fixed")
    return pols


def _mean_se(x: np.ndarray) -> str:
    return f"{x.mean():,.1f} ± {x.std(ddof=1) / np.sqrt(x.size):,.1f}"


def _paired(a: np.ndarray, b: np.ndarray) -> str:
    diff = a - b
    se = diff.std(ddof=1) / np.sqrt(diff.size)
    return f"{diff.mean():+,.1f} ± {se:,.1f} ({int((diff > 0).sum())}/{diff.size})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="movielens", choices=sorted(REAL_TASKS))
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--horizon", type=int, default=None, help="default: the paper scale's")
    parser.add_argument("--seed", type=int, default=0, help="root seed (ebm-real's is 0)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    horizon = args.horizon or REAL_EXPERIMENTS[args.dataset][1]
    tasks = make_real_tasks(args.dataset)
    env = tasks.env(rng=args.seed)
    pols = policies(tasks)
    t0 = time.perf_counter()
    ds = simulate(pols, env, horizon, args.seeds, seed=args.seed)
    final = {name: ds["regret"].sum("step").sel(policy=name).values for name in pols}
    print(
        f"## {args.dataset}: {args.seeds} seeds, {horizon:,} rounds, root seed {args.seed} "
        f"({time.perf_counter() - t0:.0f} s)\n"
    )
    print(
        "Final cumulative regret, mean ± s.e. over seeds; differences paired by seed, mean ± "
        "s.e. (the seeds where the policy has the larger regret).\n"
    )
    default_of = {"EbmTS debias": "EbmTS", "EbmUCB debias": "EbmUCB"}
    default_of["EbmTS true hyperparameters"] = "EbmTS"
    rows = []
    for name, reg in final.items():
        rows.append(
            {
                "policy": name,
                "final regret": _mean_se(reg),
                "− LinUCB": "" if name == "LinUCB" else _paired(reg, final["LinUCB"]),
                "− default": _paired(reg, final[default_of[name]]) if name in default_of else "",
            }
        )
    print(pd.DataFrame(rows).to_markdown(index=False))
    print()


if __name__ == "__main__":
    main()
