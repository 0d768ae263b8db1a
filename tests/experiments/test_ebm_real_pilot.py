"""benchmarks/ebm_real_pilot.py: its baseline rows are those of the ebm-real experiment (same
seeds, environments and random streams), and its oracle variant runs on the task's true
hyperparameters, never re-estimated (docs/ebm-real-data.md, "Where the early regret comes
from")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from hierbandit.ebm.real_tasks import make_real_tasks
from hierbandit.experiments import simulate
from hierbandit.experiments.ebm_real import run_real

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "ebm_real_pilot.py"


@pytest.fixture(scope="module")
def pilot():
    spec = importlib.util.spec_from_file_location("ebm_real_pilot", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_baseline_rows_are_the_experiment_rows(pilot):
    tasks = make_real_tasks("linnerud")
    ds = simulate(pilot.policies(tasks), tasks.env(rng=0), 80, 2, seed=0)
    ref = run_real("linnerud", scale="paper", n_seeds=2, horizon=80)
    for name in pilot.BASELINE_ORDER:
        np.testing.assert_array_equal(
            ds["regret"].sel(policy=name).values, ref["regret"].sel(policy=name).values
        )
    names = [str(p) for p in ds["policy"].values]
    assert names[: len(pilot.BASELINE_ORDER)] == list(pilot.BASELINE_ORDER)
    assert {"EbmTS debias", "EbmUCB debias", "EbmTS true hyperparameters"} <= set(names)


def test_the_variants_are_configured_as_documented(pilot):
    tasks = make_real_tasks("linnerud")
    pols = pilot.policies(tasks)
    assert pols["EbmTS debias"].eb_options.debias_ols_noise
    assert pols["EbmUCB debias"].eb_options.debias_ols_noise
    assert not pols["EbmTS"].eb_options.debias_ols_noise
    oracle = pols["EbmTS true hyperparameters"]
    assert oracle.prior_mode == "fixed"
    np.testing.assert_array_equal(oracle.Sigma, tasks.Sigma)
    np.testing.assert_array_equal(oracle.sigma2, tasks.noise_var)
    # a run leaves the true hyperparameters in place
    ds = simulate({"oracle": oracle}, tasks.env(rng=0), 60, 1, seed=0, vectorize=False)
    assert np.all(np.isfinite(ds["regret"].values))
    run = oracle.clone(rng=0)
    env = tasks.env(rng=0)
    roll = env.rollout(60, rng=1)
    for t in range(60):
        j, x = int(roll.instance[t]), roll.context[t]
        k = run.select(j, x)
        run.update(j, x, k, float(roll.reward[t, k]))
    np.testing.assert_array_equal(run.Sigma, tasks.Sigma)
    np.testing.assert_array_equal(run.sigma2, tasks.noise_var)
