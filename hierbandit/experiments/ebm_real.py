"""The ebm paper's real-data experiments (§7.2, Figure 4) on data sets that ship with packages.

Each experiment builds semi-synthetic tasks from real data (:mod:`hierbandit.ebm.real_tasks`),
draws fresh instance coefficients for every seed (common random numbers: every policy faces the
same coefficients, arrivals, contexts and noise on a seed) and runs the ebm paper's policies with
their published defaults (EbmTS/EbmUCB λ = 0.001, a = 0.1; LinTS v = 1; LinUCB α = 1; OLSBandit
q = 1, h = 15; RMBandit q = 50, h = 15). The paper reports neither horizons nor seeds beyond
"100 random seeds"; the paper scale runs 100 seeds over the horizons below, the small scale
10 seeds over a fifth of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xarray as xr

from hierbandit._validation import check_choice, check_positive_int
from hierbandit.ebm.real_tasks import REAL_TASKS, make_real_tasks
from hierbandit.experiments.ebm import POLICY_NAMES, make_policies, write_results
from hierbandit.experiments.simulate import simulate

__all__ = ["REAL_EXPERIMENTS", "SCALES", "run_real", "write_real"]

#: name → (paper panel it stands in for, horizon at paper scale)
REAL_EXPERIMENTS: dict[str, tuple[str, int]] = {
    "linnerud": ("Figure 4(a) SARCOS", 5000),
    "movielens": ("Figure 4(c) MovieLens 10M", 5000),
    "digits": ("Figure 4(d) Letter Recognition", 10000),
}
#: scale → (seeds, horizon divisor)
SCALES = {"small": (10, 5), "paper": (100, 1)}


def run_real(
    name: str,
    *,
    scale: str = "small",
    n_seeds: int | None = None,
    horizon: int | None = None,
    seed: int = 0,
    policies: Sequence[str] = POLICY_NAMES,
    progress: bool = False,
    task_kwargs: dict[str, Any] | None = None,
    first_seed: int = 0,
    hyper_update_every: int = 1,
) -> xr.Dataset:
    """Simulate the ebm paper's policies on one real-data experiment.

    Parameters
    ----------
    name : str
        ``"movielens"``, ``"digits"`` or ``"linnerud"``.
    scale : {"small", "paper"}
        Default seeds and horizon: ``"paper"`` is 100 seeds over the horizon of
        :data:`REAL_EXPERIMENTS`, ``"small"`` 10 seeds over a fifth of it.
    n_seeds, horizon : int, optional
        Override the scale's defaults.
    seed : int
        Base seed of the simulation (seeds of the runs are its children).
    policies : sequence of str
        Names understood by :func:`hierbandit.experiments.ebm.make_policies`.
    progress : bool
        Show a progress bar.
    task_kwargs : dict, optional
        Arguments of the task builder (e.g. ``heterogeneity_scale``).
    first_seed : int
        First replication of the window run (see :func:`~hierbandit.experiments.simulate`).
    hyper_update_every : int
        EbmTS/EbmUCB re-estimate (Σ̂, σ̂²) every this many pulls of an arm (1: every pull, as in
        the paper).

    Returns
    -------
    xarray.Dataset
        The (policy, seed, step) results of :func:`~hierbandit.experiments.simulate`, with the
        task's description and provenance in ``attrs``.
    """
    if name not in REAL_TASKS:
        raise ValueError(f"name must be one of {sorted(REAL_TASKS)}, got {name!r}")
    check_choice(scale, tuple(SCALES), "scale")
    default_seeds, divisor = SCALES[scale]
    n_seeds = default_seeds if n_seeds is None else check_positive_int(n_seeds, "n_seeds")
    if horizon is None:
        horizon = REAL_EXPERIMENTS[name][1] // divisor
    horizon = check_positive_int(horizon, "horizon")
    hyper_update_every = check_positive_int(hyper_update_every, "hyper_update_every")
    tasks = make_real_tasks(name, **(task_kwargs or {}))
    env = tasks.env(rng=seed)
    ds = simulate(
        make_policies(
            env.n_instances,
            env.n_arms,
            env.n_features,
            policies,
            hyper_update_every=hyper_update_every,
        ),
        env,
        horizon,
        n_seeds,
        seed=seed,
        progress=progress,
        first_seed=first_seed,
    )
    ds.attrs["setting"] = name
    ds.attrs["hyper_update_every"] = hyper_update_every
    ds.attrs["setting_description"] = f"{REAL_EXPERIMENTS[name][0]} stand-in: {tasks.description}"
    ds.attrs["task_provenance"] = repr(tasks.provenance)
    ds.attrs["arm_names"] = list(tasks.arm_names)
    ds.attrs["feature_names"] = list(tasks.feature_names)
    ds.attrs["scale"] = scale
    return ds


def write_real(ds: xr.Dataset, out_dir: str | Path) -> dict[str, Path]:
    """Write the netCDF results, the regret plot and the table of one real-data experiment."""
    return write_results(ds, out_dir, f"real-{ds.attrs['setting']}")
