"""HierarchicalPrior: exact, atomic netCDF persistence; no pickle."""

from __future__ import annotations

import arviz as az
import h5py
import numpy as np
import pytest
import xarray as xr

from hierbandit.bayes.fit import prior_from_arrays
from hierbandit.bayes.prior import HierarchicalPrior, load_prior


def _prior(with_idata: bool = False, seed: int = 0) -> HierarchicalPrior:
    rng = np.random.default_rng(seed)
    K, d = 3, 2
    W = rng.normal(size=(K, d, d))
    cov = W @ np.swapaxes(W, -1, -2) + np.eye(d)
    idata = None
    if with_idata:
        idata = az.from_dict(
            {
                "posterior": {
                    "Sigma": rng.normal(size=(2, 50, K, d, d)),
                    "sigma": rng.random((2, 50, K)),
                },
                "sample_stats": {"diverging": np.zeros((2, 50), dtype=bool)},
            },
            dims={"Sigma": ["arm", "feature", "feature_"], "sigma": ["arm"]},
            coords={"arm": [10, 20, 30], "feature": ["a", "b"], "feature_": ["a", "b"]},
        )
    return prior_from_arrays(
        rng.normal(size=(K, d)),
        cov,
        cov + np.eye(d),
        rng.random(K) + 0.5,
        arms=[10, 20, 30],
        features=["a", "b"],
        idata=idata,
        method="test",
        config={"lam": 0.001, "nested": {"x": [1, 2]}},
        flag=True,
        n_rows=7,
    )


@pytest.mark.parametrize("with_idata", [False, True])
def test_save_load_round_trip_is_exact(tmp_path, with_idata):
    p = _prior(with_idata)
    path = p.save(tmp_path / "prior.nc")
    q = load_prior(path)
    assert q == p
    np.testing.assert_array_equal(q.Sigma, p.Sigma)
    assert q.provenance["config"] == {"lam": 0.001, "nested": {"x": [1, 2]}}
    assert q.features == ["a", "b"] and list(q.arms) == [10, 20, 30]
    # saving the loaded prior again gives the same content
    r = load_prior(q.save(tmp_path / "again.nc"))
    assert r == p


def test_interrupted_save_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "prior.nc"
    old = _prior(seed=1)
    old.save(path)
    before = path.read_bytes()

    def boom(self, filepath, *args, **kwargs):
        with open(filepath, "wb") as fh:
            fh.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(xr.DataTree, "to_netcdf", boom)
    with pytest.raises(KeyboardInterrupt):
        _prior(seed=2).save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prior.nc"]
    monkeypatch.undo()
    assert load_prior(path) == old


def test_file_contains_no_pickle(tmp_path):
    path = _prior(True).save(tmp_path / "p.nc")
    raw = path.read_bytes()
    assert raw.startswith(b"\x89HBF")  # the seal, in the HDF5 user block
    assert raw[512:520] == b"\x89HDF\r\n\x1a\n"  # then a netCDF4/HDF5 container
    with h5py.File(path, "r") as f:  # which any HDF5 reader opens as it is
        assert f.userblock_size == 512 and "Sigma" in f


def test_validation(tmp_path):
    p = _prior()
    with pytest.raises(ValueError, match="path"):
        p.save(tmp_path / "prior.pkl")
    with pytest.raises(FileNotFoundError):
        load_prior(tmp_path / "missing.nc")
    bad = p.dataset.copy()
    bad["sigma2"] = -bad["sigma2"]
    with pytest.raises(ValueError, match="sigma2"):
        HierarchicalPrior(bad)
    with pytest.raises(ValueError, match="Sigma"):
        HierarchicalPrior(p.dataset.drop_vars("Sigma"))
    with pytest.raises(TypeError, match="dataset"):
        HierarchicalPrior({"Sigma": 1})


def test_saved_file_has_the_usual_permissions(tmp_path):
    import os

    path = _prior().save(tmp_path / "p.nc")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
