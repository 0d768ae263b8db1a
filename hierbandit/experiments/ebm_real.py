"""The ebm paper's real-data experiments (§7.2, Figure 4) on data sets that ship with packages.

Each experiment builds semi-synthetic tasks from real data (:mod:`hierbandit.ebm.real_tasks`),
draws fresh instance coefficients for every seed (common random numbers: every policy faces the
same coefficients, arrivals, contexts and noise on a seed) and runs the ebm paper's policies with
their published defaults (EbmTS/EbmUCB λ = 0.001, a = 0.1; LinTS v = 1; LinUCB α = 1; OLSBandit
q = 1, h = 15; RMBandit q = 50, h = 15). The paper reports neither horizons nor seeds beyond
"100 random seeds"; the horizons at the paper scale are those of :data:`REAL_EXPERIMENTS`, and
each scale's seeds and horizon divisor are in ``configs/ebm-real.toml`` (see
``docs/ebm-real-data.md``).

:data:`EXPERIMENT` is the named experiment ``ebm-real`` (``hierbandit experiment run ebm-real``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import xarray as xr

from hierbandit._validation import check_choice, check_positive_int
from hierbandit.ebm.real_tasks import REAL_TASKS, make_real_tasks
from hierbandit.experiments.cells import Annotate, seed_cells
from hierbandit.experiments.ebm import (
    HYPER_UPDATE_EVERY,
    POLICY_NAMES,
    make_policies,
    write_regret_groups,
    write_results,
)
from hierbandit.experiments.registry import SCALES, SEED, Cell, Param, define_experiment
from hierbandit.experiments.simulate import simulate

__all__ = ["EXPERIMENT", "REAL_EXPERIMENTS", "run_real", "write_real"]

#: name → (paper panel it stands in for, horizon at paper scale)
REAL_EXPERIMENTS: dict[str, tuple[str, int]] = {
    "linnerud": ("Figure 4(a) SARCOS", 5000),
    "movielens": ("Figure 4(c) MovieLens 10M", 5000),
    "digits": ("Figure 4(d) Letter Recognition", 10000),
}


def run_real(
    name: str,
    *,
    scale: str = "small",
    n_seeds: int | None = None,
    horizon: int | None = None,
    seed: int = 0,
    policies: Sequence[str] | None = None,
    task_kwargs: dict[str, Any] | None = None,
    first_seed: int = 0,
    hyper_update_every: int | None = None,
) -> xr.Dataset:
    """Simulate the ebm paper's policies on one real-data experiment.

    Parameters
    ----------
    name : str
        ``"movielens"``, ``"digits"`` or ``"linnerud"``.
    scale : {"small", "paper"}
        Whose shipped values (``configs/ebm-real.toml``) fill the arguments left ``None``:
        the seeds, the policies, the re-estimation period, and the horizon, the paper's
        horizon of :data:`REAL_EXPERIMENTS` divided by the scale's ``horizon_divisor``.
    n_seeds, horizon : int, optional
        Override the scale's values.
    seed : int
        Base seed of the simulation (seeds of the runs are its children).
    policies : sequence of str, optional
        Names understood by :func:`hierbandit.experiments.ebm.make_policies`.
    task_kwargs : dict, optional
        Arguments of the task builder (e.g. ``heterogeneity_scale``).
    first_seed : int
        First replication of the window run (see :func:`~hierbandit.experiments.simulate`).
    hyper_update_every : int, optional
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
    check_choice(scale, SCALES, "scale")
    given = EXPERIMENT.fill(
        scale,
        seeds=n_seeds,
        horizon_divisor=None,
        policies=policies,
        hyper_update_every=hyper_update_every,
    )
    n_seeds = check_positive_int(given["seeds"], "n_seeds")
    if horizon is None:
        horizon = REAL_EXPERIMENTS[name][1] // given["horizon_divisor"]
    horizon = check_positive_int(horizon, "horizon")
    hyper_update_every = check_positive_int(given["hyper_update_every"], "hyper_update_every")
    tasks = make_real_tasks(name, **(task_kwargs or {}))
    env = tasks.env(rng=seed)
    ds = simulate(
        make_policies(
            env.n_instances,
            env.n_arms,
            env.n_features,
            given["policies"],
            hyper_update_every=hyper_update_every,
        ),
        env,
        horizon,
        n_seeds,
        seed=seed,
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


# ---------------------------------------------------------------------- the named experiment
def _cells(p: Mapping[str, Any]) -> list[Cell]:
    return seed_cells(p, [(d, {"dataset": d}) for d in p["datasets"]])


def _run_cell(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> xr.Dataset:
    name = spec["dataset"]
    return run_real(
        name,
        n_seeds=spec["n_seeds"],
        horizon=REAL_EXPERIMENTS[name][1] // p["horizon_divisor"],
        seed=p["seed"],
        policies=p["policies"],
        first_seed=spec["first_seed"],
        hyper_update_every=p["hyper_update_every"],
    )


def _write(
    p: Mapping[str, Any], results: Mapping[str, xr.Dataset], out: Path, annotate: Annotate
) -> tuple[dict[str, Path], list[str]]:
    def write_one(name: str, ds: xr.Dataset) -> dict[str, Path]:
        ds.attrs["scale"] = f"horizon / {p['horizon_divisor']}"
        return write_real(ds, out)

    return write_regret_groups(results, annotate, write_one)


#: ``ebm-real``: Figure 4 on shipped data, one cell per data set and window of seeds
EXPERIMENT = define_experiment(
    "ebm-real",
    params=(
        Param("datasets", "str", "Real-data tasks.", many=True, choices=tuple(REAL_EXPERIMENTS)),
        Param(
            "horizon_divisor",
            "int",
            "Horizon = the paper's horizon of each data set divided by this.",
            minimum=1,
        ),
        Param("policies", "str", "Policies compared.", many=True, choices=POLICY_NAMES),
        HYPER_UPDATE_EVERY,
        SEED,
    ),
    cells=_cells,
    run_cell=_run_cell,
    write=_write,
)
