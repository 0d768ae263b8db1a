"""netCDF logs are untrusted: walked with a deadline and size limits before they are parsed."""

import shutil
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from hierbandit import _container
from hierbandit.data import read_log

REPRO = Path(__file__).resolve().parents[3] / "shared" / "repro" / "reliability"


def _log(n=200, seed=0):
    g = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "instance": g.integers(0, 5, n),
            "arm": g.integers(0, 2, n),
            "reward": g.normal(size=n),
            "x0": 1.0,
            "x1": g.normal(size=n),
        }
    )


def test_compressed_netcdf_log_reads_like_the_frame(tmp_path):
    df = _log()
    ds = xr.Dataset.from_dataframe(df.rename_axis("row"))
    path = tmp_path / "log.nc"
    ds.to_netcdf(path, engine="h5netcdf", encoding={v: {"zlib": True} for v in ds.data_vars})
    with pytest.warns(UserWarning, match=r"is a feature: \['x0', 'x1'\]"):
        a = read_log(path)  # inferred: the row coordinate is not a column
    b = read_log(df, features=["x0", "x1"])
    for name in ("X", "y", "instance", "arm"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.features == b.features == ("x0", "x1")


def test_a_netcdf_log_that_decompresses_past_the_limit_is_refused(tmp_path):
    path = tmp_path / "bomb.nc"
    xr.Dataset.from_dataframe(_log().rename_axis("row")).to_netcdf(path, engine="h5netcdf")
    with h5py.File(path, "r+") as f:
        f.create_dataset(
            "big", shape=(4_000_000_000,), dtype="f8", chunks=(1_000_000,),
            compression="gzip", fillvalue=0.0,
        )  # fmt: skip
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"bomb\.nc.*past"):
        read_log(path)
    assert time.monotonic() - t0 < 30


def test_a_netcdf_log_that_hangs_the_hdf5_library_is_refused_at_the_deadline(tmp_path, monkeypatch):
    src = REPRO / "hang_checkpoint_case.nc"
    if not src.is_file():
        pytest.skip("the shared reproducers are not beside the repository")
    path = tmp_path / "log.nc"
    shutil.copy(src, path)
    monkeypatch.setattr(_container, "PROBE_SECONDS", 3.0)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"log\.nc.*did not finish"):
        read_log(path)
    assert time.monotonic() - t0 < 20
