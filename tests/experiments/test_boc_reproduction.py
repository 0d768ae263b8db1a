"""The BOC reproduction: datasets, summaries and acceptance checks (the command: ``tests/cli``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from hierbandit.boc.instances import synthetic_instance
from hierbandit.experiments.boc import (
    PART_INSTANCES,
    acceptance,
    clopper_pearson,
    make_instance,
    part_instances,
    run_instance,
    slopes,
    summary_table,
)
from hierbandit.experiments.runner import run_experiment


@pytest.fixture(scope="module")
def easy_ds():
    return run_instance(
        synthetic_instance("easy"),
        n_trials=3,
        log_inv_deltas=(10.0, 200.0, 400.0),
        seed=5,
    )


def test_run_instance_shapes_and_common_random_numbers(easy_ds):
    ds = easy_ds
    assert ds.tau.dims == ("algorithm", "trial", "threshold", "log_inv_delta")
    assert ds.sizes == {"algorithm": 3, "trial": 3, "threshold": 2, "log_inv_delta": 3}
    assert bool(ds.stopped.all()) and bool(ds.correct.all())
    # τ is non-decreasing in log(1/δ) along every path
    assert bool((ds.tau.diff("log_inv_delta") >= 0).all())
    np.testing.assert_allclose(
        ds.lower_bound, ds.attrs["hardness"] * np.array([10, 200, 400]), rtol=1e-3
    )
    # the same seed reproduces the same numbers; BOC and Oracle face the same noise
    again = run_instance(
        synthetic_instance("easy"), n_trials=1, log_inv_deltas=(10.0, 200.0, 400.0), seed=5
    )
    np.testing.assert_array_equal(again.tau.isel(trial=0), ds.tau.isel(trial=0))


def test_slopes_and_summaries(easy_ds):
    sl = slopes(easy_ds)
    tau = easy_ds.tau.astype(float)
    want = (tau.sel(log_inv_delta=400.0) - tau.sel(log_inv_delta=200.0)).mean("trial") / 200
    xr.testing.assert_allclose(sl.slope, want)
    np.testing.assert_allclose(sl.ratio, sl.slope / easy_ds.attrs["hardness"])
    # least squares over two points is the same slope
    xr.testing.assert_allclose(sl.ls_slope, sl.slope)
    rows = summary_table(easy_ds)
    assert len(rows) == 3 * 2 * 3 and all(r["errors"] == 0 for r in rows)
    acc = acceptance({"easy": easy_ds})
    assert acc["errors"]["easy"] == {"wrong": 0, "not_stopped": 0, "runs": 54}
    assert acc["slopes"]["easy/beta"]["uniform_steeper"]
    with pytest.raises(ValueError, match="grid"):
        slopes(easy_ds, lo=100.0)


def test_clopper_pearson_against_scipy():
    from scipy.stats import binomtest

    for k, n in [(0, 16), (3, 20), (20, 20), (5, 256)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-10)


def test_instances_of_each_part():
    assert list(part_instances("synthetic")) == ["easy", "moderate", "challenging"]
    table2 = part_instances("table2")
    assert list(table2) == list(PART_INSTANCES["table2"])
    assert table2["challenging-rescaled"].hardness == pytest.approx(2.0)
    assert make_instance("synthetic", "easy").hardness == synthetic_instance("easy").hardness
    with pytest.raises(ValueError, match="instance"):
        make_instance("real", "yeast")
    with pytest.raises(ValueError, match="part"):
        make_instance("table3", "iris")


@pytest.mark.slow
def test_default_scale_meets_the_acceptance_criteria(tmp_path):
    run_experiment("boc", out=tmp_path, scale="small", params={"parts": ["synthetic"]}, workers=2)
    ok = json.loads((tmp_path / "summary.json").read_text())["acceptance"]["pass"]
    assert ok["boc_slope_within_25pct_easy_moderate_beta"]
    assert ok["uniform_slope_larger"]
    assert ok["boc_at_most_0.6_uniform_synthetic"]
    assert ok["no_wrong_partitions"]


@pytest.mark.slow
def test_statistical_regression_against_the_paper_tables():
    """Table 1 (Iris BOC, δ = 0.1) and Table 2 (rescaled challenging, original vs LE)."""
    from hierbandit.boc.instances import iris_instance
    from hierbandit.experiments.boc import REAL_LOG_INV_DELTAS

    iris = run_instance(
        iris_instance(),
        algorithms=("BOC",),
        n_trials=64,
        log_inv_deltas=REAL_LOG_INV_DELTAS[:1],
        thresholds=("beta_tilde",),
        seed=11,
    )
    assert float(iris.tau.mean()) == pytest.approx(886.1, abs=35)
    chall = run_instance(
        synthetic_instance("challenging", target_hardness=2.0),
        algorithms=("BOC", "BOC-LE"),
        n_trials=128,
        log_inv_deltas=REAL_LOG_INV_DELTAS[:1],
        thresholds=("beta_tilde",),
        seed=11,
    )
    mean = chall.tau.astype(float).mean(("trial", "threshold", "log_inv_delta"))
    assert float(mean.sel(algorithm="BOC")) == pytest.approx(102.9, abs=10)
    assert float(mean.sel(algorithm="BOC-LE")) == pytest.approx(78.9, abs=8)
    assert bool(iris.correct.all()) and bool(chall.correct.all())
