"""Both fitted priors share one base: the same file layout, loader, provenance and equality."""

from __future__ import annotations

import json
from pathlib import Path

import arviz as az
import numpy as np
import pytest
import xarray as xr

from hierbandit._container import read_netcdf, unseal
from hierbandit.bayes._artifact import PriorArtifact, read_prior_tree
from hierbandit.bayes.cascade import CascadePrior, load_cascade_prior
from hierbandit.bayes.fit import prior_from_arrays
from hierbandit.bayes.prior import HierarchicalPrior, load_prior
from hierbandit.errors import InvalidFileError

ROOT = Path(__file__).resolve().parents[2]


def _idata(seed: int, dims: dict, shapes: dict, coords: dict) -> xr.DataTree:
    rng = np.random.default_rng(seed)
    idata = az.from_dict(
        {
            "posterior": {name: rng.normal(size=(2, 20, *shape)) for name, shape in shapes.items()},
            "sample_stats": {"diverging": np.zeros((2, 20), dtype=bool)},
        },
        dims=dims,
        coords=coords,
    )
    for node in idata.children.values():  # no creation time: one seed gives one content
        node.attrs = {"seed": seed, "sample_dims": ["chain", "draw"]}
    return idata


def _hierarchical(idata_seed: int | None = None) -> HierarchicalPrior:
    rng = np.random.default_rng(0)
    W = rng.normal(size=(2, 2, 2))
    cov = W @ np.swapaxes(W, -1, -2) + np.eye(2)
    idata = None
    if idata_seed is not None:
        idata = _idata(
            idata_seed,
            {"sigma": ["arm"]},
            {"sigma": (2,)},
            {"arm": [0, 1]},
        )
    return prior_from_arrays(
        rng.normal(size=(2, 2)), cov, cov, np.ones(2), idata=idata, method="test", n_rows=3
    )


def _cascade(idata_seed: int | None = None) -> CascadePrior:
    idata = None
    if idata_seed is not None:
        idata = _idata(
            idata_seed,
            {"theta": ["param"]},
            {"theta": (4,)},
            {"param": ["x0", "x1", "arm0", "arm1"]},
        )
    return CascadePrior.from_arrays(
        np.linspace(-1, 1, 4), np.diag([1.0, 2.0, 3.0, 4.0]), n_arms=2, idata=idata, method="test"
    )


MAKERS = {"hierarchical": (_hierarchical, load_prior), "cascade": (_cascade, load_cascade_prior)}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_equality_is_content_including_the_draws(name, tmp_path):
    make, load = MAKERS[name]
    a = make()
    assert isinstance(a, PriorArtifact)
    assert a == make() and a != make(1)  # the draws are part of the content
    assert make(1) == make(1) and make(1) != make(2)  # same groups, other draws
    b = make()
    b.dataset.attrs["method"] = "other"
    assert a != b and b.method == "other"  # the provenance too
    assert a != _cascade() if name == "hierarchical" else a != _hierarchical()
    assert a.__eq__(object()) is NotImplemented
    with pytest.raises(TypeError, match="unhashable"):
        hash(a)
    # a round trip through the file is exact, with and without draws
    for seed in (None, 3):
        p = make(seed)
        assert load(p.save(tmp_path / f"{name}-{seed}.nc")) == p


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_the_file_layout_and_its_kind(name, tmp_path):
    """A sealed file of the class's kind; the variables at the root, the ArviZ groups at the
    top level, so that xarray and ArviZ open the file as it is."""
    make, load = MAKERS[name]
    p = make(4)
    path = p.save(tmp_path / "p.nc")
    kind = {"hierarchical": "prior", "cascade": "cascade-prior"}[name]
    assert type(p).kind == kind
    unseal(path, kind)  # the seal names the kind
    tree = read_netcdf(path, kind)
    assert set(tree.children) == {"posterior", "sample_stats"}
    root, idata = read_prior_tree(tree)
    assert root.identical(p.dataset)
    assert isinstance(idata, xr.DataTree) and set(idata.children) == set(p.idata.children)
    np.testing.assert_array_equal(
        idata.posterior.to_dataset().to_array(), p.idata.posterior.to_dataset().to_array()
    )
    # the sealed file is a netCDF file behind an HDF5 user block: xarray and ArviZ open it with
    # no engine named (the package's xarray backend claims the seal), and so does h5netcdf
    for opened in (
        xr.open_datatree(path),
        az.from_netcdf(path),
        xr.open_datatree(path, engine="h5netcdf"),
    ):
        with opened:
            assert set(opened.children) == {"posterior", "sample_stats"}
            assert opened.posterior.attrs["sample_dims"] == ["chain", "draw"]
            got = az.summary(opened, kind="stats")["mean"]
            np.testing.assert_array_equal(got, az.summary(p.idata, kind="stats")["mean"])
    other = _cascade if name == "hierarchical" else _hierarchical
    wrong = other().save(tmp_path / "other.nc")
    with pytest.raises(InvalidFileError, match="holds a hierbandit"):
        load(wrong)
    with pytest.raises(ValueError, match=r"\.nc"):
        p.save(tmp_path / "p.json")


def _legacy_tree(p: PriorArtifact) -> xr.DataTree:
    """The layout written before ArviZ 1: the ArviZ groups under /idata."""
    from hierbandit._io import netcdf_attrs

    root = p.dataset.copy()
    root.attrs = netcdf_attrs(dict(root.attrs))
    groups = {"/": root}
    for name, node in p.idata.children.items():
        ds = node.to_dataset()
        ds.attrs = netcdf_attrs(dict(ds.attrs))
        groups[f"/idata/{name}"] = ds
    return xr.DataTree.from_dict(groups)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_files_of_the_earlier_layout_load_and_upgrade(name, tmp_path):
    """A sealed file with the ArviZ groups under /idata loads as the same prior, with its draws
    as a DataTree; saving it again (or upgrade_prior) writes the current layout."""
    from hierbandit._io import write_sealed_netcdf
    from hierbandit.bayes.prior import upgrade_prior

    make, load = MAKERS[name]
    p = make(5)
    old = write_sealed_netcdf(_legacy_tree(p), tmp_path / "old.nc", type(p).kind)
    assert set(read_netcdf(old, type(p).kind).children) == {"idata"}
    back = load(old)
    assert back == p and isinstance(back.idata, xr.DataTree)
    new = back.save(tmp_path / "new.nc")
    assert set(read_netcdf(new, type(p).kind).children) == {"posterior", "sample_stats"}
    if name == "hierarchical":
        up = upgrade_prior(old, tmp_path / "up.nc")
        assert set(read_netcdf(up, "prior").children) == {"posterior", "sample_stats"}
        assert load(up) == p


def _parts(tree: xr.DataTree) -> dict[str, xr.Dataset]:
    """Every node of ``tree`` by its absolute path, with its own variables only."""
    return {node.path: node.to_dataset(inherit=False) for node in tree.subtree}


def _bad_trees(p: HierarchicalPrior) -> dict[str, tuple[dict[str, xr.Dataset], str]]:
    """Trees a hostile or foreign file might hold, and the loader's reason for refusing each."""
    current, legacy = _parts(p.to_datatree()), _parts(_legacy_tree(p))
    junk = xr.Dataset({"x": ("i", np.zeros(2))})
    return {
        "unknown group": ({**current, "/extra": junk}, r"unexpected groups \['/extra'\]"),
        "unknown legacy group": (
            {**legacy, "/idata/extra": junk},
            r"unexpected groups \['/idata/extra'\]",
        ),
        "nested group": ({**current, "/posterior/inner": junk}, "unexpected groups under"),
        "mixed layouts": ({**legacy, "/posterior": current["/posterior"]}, "beside /idata"),
        "variables in /idata": ({**legacy, "/idata": junk}, "variables in the prior's /idata"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "unknown group",
        "unknown legacy group",
        "nested group",
        "mixed layouts",
        "variables in /idata",
    ],
)
def test_groups_that_are_not_arviz_groups_are_refused(case, tmp_path):
    """The loader reads untrusted files: a group that is not an ArviZ group, a group below one,
    the two layouts mixed, or variables where the old layout had none are refused by name."""
    from hierbandit._io import write_sealed_netcdf

    parts, message = _bad_trees(_hierarchical(6))[case]
    bad = write_sealed_netcdf(xr.DataTree.from_dict(parts), tmp_path / "bad.nc", "prior")
    with pytest.raises(InvalidFileError, match=r"invalid prior \(.*" + message):
        load_prior(bad)


def test_the_draws_are_checked_when_the_prior_is_built():
    """idata is a DataTree of ArviZ groups whose coordinates agree with the prior's."""
    p = _hierarchical()
    draws = _hierarchical(7).idata
    with pytest.raises(TypeError, match="DataTree"):
        HierarchicalPrior(p.dataset, draws["posterior"].to_dataset())
    bad = draws.copy()
    bad["extra"] = xr.DataTree()
    with pytest.raises(ValueError, match="not ArviZ groups"):
        HierarchicalPrior(p.dataset, bad)
    other = draws.copy()
    other["posterior"] = xr.DataTree(other["posterior"].to_dataset().assign_coords(arm=[5, 6]))
    with pytest.raises(ValueError, match=r"labels 'arm' \[5, 6\], the prior \[0, 1\]"):
        HierarchicalPrior(p.dataset, other)
    other["posterior"] = xr.DataTree(draws["posterior"].to_dataset().isel(arm=[0]))
    with pytest.raises(ValueError, match="has 1 'arm' entries, the prior 2"):
        HierarchicalPrior(p.dataset, other)


def test_an_invalid_cascade_prior_file_is_named(tmp_path):
    """A file of the right kind with content the class refuses: InvalidFileError with the
    class's own label, as before the two classes shared their loader."""
    from hierbandit._io import write_sealed_netcdf
    from hierbandit.bayes._artifact import prior_tree

    bad = _cascade().dataset.copy()
    bad["cov"] = -bad["cov"]
    path = write_sealed_netcdf(prior_tree(bad, None), tmp_path / "bad.nc", "cascade-prior")
    with pytest.raises(InvalidFileError, match=r"invalid cascade prior \(.*positive"):
        load_cascade_prior(path)
    bad = _hierarchical().dataset.copy()
    bad["sigma2"] = -bad["sigma2"]
    path = write_sealed_netcdf(prior_tree(bad, None), tmp_path / "bad2.nc", "prior")
    with pytest.raises(InvalidFileError, match=r"invalid prior \(sigma2 must be positive"):
        load_prior(path)


def test_features_stored_as_a_list_load_as_before(tmp_path):
    """A cascade prior whose features attribute was written as a list loads with features as
    the JSON text the class keeps."""
    p = _cascade()
    ds = p.dataset.copy()
    ds.attrs["features"] = json.loads(ds.attrs["features"])
    q = CascadePrior(ds)
    back = load_cascade_prior(q.save(tmp_path / "f.nc"))
    assert back.features == ["x0", "x1"] and isinstance(back.dataset.attrs["features"], str)


def test_provenance_is_decoded_attributes():
    p = _hierarchical()
    p.dataset.attrs["config"] = "json:" + json.dumps({"lam": 0.5})
    assert p.provenance["config"] == {"lam": 0.5} and p.method == "test"
    p.dataset.attrs.pop("method")
    assert p.method == "unknown"


@pytest.mark.parametrize(
    "path", sorted(ROOT.glob("models/*/prior.nc")), ids=lambda p: p.parent.name
)
def test_committed_priors_load_and_round_trip(path, tmp_path):
    prior = load_prior(path)
    assert prior.method in ("eb", "ml", "mcmc")
    again = load_prior(prior.save(tmp_path / "again.nc"))
    assert again == prior
    assert isinstance(again.dataset, xr.Dataset)
