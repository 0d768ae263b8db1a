"""The real-data experiment runner at tiny scale (the command: ``tests/cli``)."""

import numpy as np
import pytest

from hierbandit.experiments.catalog import get_experiment
from hierbandit.experiments.ebm_real import REAL_EXPERIMENTS, run_real, write_real


def test_run_real_small_and_write(tmp_path):
    ds = run_real("linnerud", n_seeds=2, horizon=60, policies=("EbmTS", "LinUCB"))
    assert ds["regret"].sizes == {"policy": 2, "seed": 2, "step": 60}
    assert ds["beta"].sizes == {"seed": 2, "arm_": 3, "instance_": 30, "feature": 4}
    assert ds.attrs["setting"] == "linnerud"
    assert "SARCOS" in ds.attrs["setting_description"]
    assert ds.attrs["arm_names"] == ["weight", "waist", "pulse"]
    assert np.all(np.isfinite(ds["regret"].values)) and np.all(ds["regret"].values >= 0)
    paths = write_real(ds, tmp_path)
    for p in paths.values():
        assert p.exists() and p.stat().st_size > 0
    # the same seed reproduces the same results
    again = run_real("linnerud", n_seeds=2, horizon=60, policies=("EbmTS", "LinUCB"))
    for name in ds.data_vars:
        np.testing.assert_array_equal(ds[name].values, again[name].values)


def test_run_real_defaults_and_errors():
    assert set(REAL_EXPERIMENTS) == {"linnerud", "movielens", "digits"}
    assert get_experiment("ebm-real").defaults["paper"]["seeds"] == 100
    with pytest.raises(ValueError, match="name"):
        run_real("sarcos")
    with pytest.raises(ValueError, match="scale"):
        run_real("linnerud", scale="huge")
    with pytest.raises(ValueError, match="horizon"):
        run_real("linnerud", horizon=0)
