"""Files of the format before sealed files are refused, and rewritten on request."""

import json

import numpy as np
import pytest
import xarray as xr

from hierbandit.bayes.prior import load_prior, upgrade_prior
from hierbandit.checkpoint import load_checkpoint, upgrade_checkpoint
from hierbandit.ebm import EbmTS
from hierbandit.errors import InvalidFileError
from tests.conftest import snapshot


def _format_1(path, out):
    """The checkpoint at ``path`` as the previous version wrote it: no seal, arrays without
    shape and dtype declarations, format_version 1."""
    tree = xr.open_datatree(path, engine="h5netcdf").load()
    state = json.loads(tree.attrs["hierbandit_checkpoint"])

    def strip(v):
        if isinstance(v, list):
            for x in v:
                strip(x)
        elif isinstance(v, dict):
            if "__array__" in v:
                v.pop("shape")
                v.pop("dtype")
            for x in v.values():
                strip(x)

    strip(state)
    tree.attrs["hierbandit_checkpoint"] = json.dumps(state)
    tree.attrs["format_version"] = 1
    tree.to_netcdf(out, engine="h5netcdf")
    return out


def test_format_1_checkpoint_is_refused_then_upgraded(tmp_path):
    p = EbmTS(4, 3, 2, rng=0)
    g = np.random.default_rng(0)
    for _ in range(40):
        x = g.normal(size=2)
        p.update(int(g.integers(4)), x, p.select(0, x), float(g.normal()))
    old = _format_1(p.save(tmp_path / "new.nc"), tmp_path / "old.nc")
    with pytest.raises(InvalidFileError, match=r"old\.nc.*upgrade_checkpoint"):
        load_checkpoint(old)
    out = upgrade_checkpoint(old, tmp_path / "upgraded.nc")
    assert snapshot(EbmTS.load(out)) == snapshot(p)
    # the upgrade checks the state like a load: a class outside the allow-list is refused
    tree = xr.open_datatree(old, engine="h5netcdf").load()
    tree.attrs["hierbandit_checkpoint"] = tree.attrs["hierbandit_checkpoint"].replace(
        "hierbandit.ebm.policy:EbmTS", "subprocess:Popen"
    )
    tree.to_netcdf(tmp_path / "evil.nc", engine="h5netcdf")
    with pytest.raises(InvalidFileError, match="allow-list"):
        upgrade_checkpoint(tmp_path / "evil.nc", tmp_path / "x.nc")
    assert not (tmp_path / "x.nc").exists()
    with pytest.raises(InvalidFileError, match="format 1"):
        upgrade_checkpoint(out, tmp_path / "x.nc")  # already sealed: nothing to upgrade


def test_plain_prior_is_refused_then_upgraded(tmp_path):
    from hierbandit.bayes import prior_from_arrays

    prior = prior_from_arrays(
        np.zeros((2, 2)), np.broadcast_to(np.eye(2), (2, 2, 2)).copy(),
        np.broadcast_to(0.5 * np.eye(2), (2, 2, 2)).copy(), np.ones(2),
    )  # fmt: skip
    prior.to_datatree().to_netcdf(tmp_path / "old.nc", engine="h5netcdf")
    with pytest.raises(InvalidFileError, match="upgrade_prior"):
        load_prior(tmp_path / "old.nc")
    assert load_prior(upgrade_prior(tmp_path / "old.nc", tmp_path / "new.nc")) == prior
