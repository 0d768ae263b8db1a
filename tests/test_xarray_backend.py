"""xarray and ArviZ open the package's sealed files with no engine named, verified as the
package verifies them (hierbandit/_xarray_backend.py)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from hierbandit._xarray_backend import SealedNetCDFBackend
from hierbandit.checkpoint import load_checkpoint, save_checkpoint
from hierbandit.ebm import EbmTS
from hierbandit.errors import InvalidFileError


@pytest.fixture
def checkpoint(tmp_path):
    policy = EbmTS(n_instances=3, n_arms=2, n_features=2, rng=0)
    x = np.array([0.5, -1.0])
    for t in range(20):
        policy.update(t % 3, x, policy.select(t % 3, x), 0.1 * t)
    path = tmp_path / "policy.nc"
    save_checkpoint(policy, path)
    return path


def test_a_sealed_file_opens_with_no_engine_named(checkpoint):
    want = xr.open_datatree(checkpoint, engine="h5netcdf").load()
    got = xr.open_datatree(checkpoint)
    assert got.identical(want)
    assert xr.open_dataset(checkpoint).identical(want.to_dataset())
    groups = xr.open_groups(checkpoint)
    assert set(groups) == {node.path for node in want.subtree}
    assert load_checkpoint(checkpoint) is not None  # reading it changed nothing


def test_a_damaged_sealed_file_is_refused_through_xarray(checkpoint):
    data = bytearray(checkpoint.read_bytes())
    data[-100] ^= 0xFF
    checkpoint.write_bytes(bytes(data))
    with pytest.raises(InvalidFileError, match=r"policy\.nc"):
        xr.open_datatree(checkpoint)


def test_the_backend_claims_sealed_files_only(checkpoint, tmp_path):
    backend = SealedNetCDFBackend()
    assert backend.guess_can_open(checkpoint)
    plain = tmp_path / "plain.nc"
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(plain, engine="h5netcdf")
    assert not backend.guess_can_open(plain)
    assert not backend.guess_can_open(tmp_path / "missing.nc")
    assert not backend.guess_can_open(b"bytes")
    assert xr.open_dataset(plain)["a"].values.tolist() == [0.0, 1.0, 2.0]
