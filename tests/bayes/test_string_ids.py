"""Labels end to end on the fit side: a log with string users and arms → a prior whose arm
coordinate holds the arm names → saved and loaded as an untrusted file → ``EbmTS(prior=prior)``
deciding and learning in those names."""

from __future__ import annotations

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from hierbandit.bayes import fit_prior, load_prior
from hierbandit.bayes.fit import prior_from_arrays
from hierbandit.bayes.prior import KIND, HierarchicalPrior
from hierbandit.data import read_log, summarise
from hierbandit.ebm import EbmTS
from hierbandit.errors import InvalidFileError

FEATURES = ["one", "x"]
ARMS = np.array(["banner_b", "banner_a", "popup"], dtype=object)
VALUES = ("shared_mean", "shared_cov", "Sigma", "sigma2")


def string_log(T: int = 900, N: int = 20, seed: int = 0) -> pd.DataFrame:
    g = np.random.default_rng(seed)
    inst = g.integers(0, N, T)
    arm = g.integers(0, ARMS.size, T)
    X = np.column_stack([np.ones(T), g.normal(size=T)])
    beta = g.normal(size=(ARMS.size, 1, 2)) + 0.6 * g.normal(size=(ARMS.size, N, 2))
    y = np.einsum("rd,rd->r", X, beta[arm, inst]) + g.normal(size=T)
    names = np.array([f"u_{81723 + 31 * i}" for i in g.permutation(N)], dtype=object)
    return pd.DataFrame(
        {"user": names[inst], "arm": ARMS[arm], "reward": y, "one": X[:, 0], "x": X[:, 1]}
    )


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return string_log()


@pytest.fixture(scope="module")
def prior(df) -> HierarchicalPrior:
    return fit_prior(df, instance="user", features=FEATURES, method="ml")


def test_the_prior_carries_the_arm_names_and_says_the_ids_were_strings(df, prior):
    assert prior.arms.tolist() == ["banner_a", "banner_b", "popup"]
    data = prior.provenance["data"]
    assert data["ids"] == {"instance": "str", "arm": "str"}
    assert data["n_instances"] == df.user.nunique() and data["n_rows"] == len(df)
    assert "instance" not in prior.dataset.coords  # the prior describes the population


@pytest.mark.parametrize("method", ["eb", "ml"])
def test_string_ids_fit_as_their_integer_codes_in_memory_and_from_statistics(df, method):
    log = read_log(df, instance="user", features=FEATURES)
    coded = df.assign(user=log.instance, arm=log.arm)
    expected = fit_prior(coded, instance="user", features=FEATURES, method=method)
    for got in (
        fit_prior(df, instance="user", features=FEATURES, method=method),
        fit_prior(log, method=method),
        fit_prior(summarise(log), method=method),
    ):
        for name in VALUES:
            np.testing.assert_allclose(
                got.dataset[name].values, expected.dataset[name].values, rtol=1e-12, atol=1e-12
            )
        assert got.arms.tolist() == ["banner_a", "banner_b", "popup"]


def test_save_and_load_keep_the_arm_names(prior, tmp_path):
    loaded = load_prior(prior.save(tmp_path / "prior.nc"))
    assert loaded == prior
    assert loaded.arms.tolist() == ["banner_a", "banner_b", "popup"]
    assert all(type(a) is str for a in loaded.arms.tolist())
    assert loaded.provenance["data"]["ids"] == {"instance": "str", "arm": "str"}


def test_ebmts_decides_and_learns_in_the_logs_names(df, prior, tmp_path):
    policy = EbmTS(prior=load_prior(prior.save(tmp_path / "p.nc")), rng=0)
    assert policy.arms.values() == ["banner_a", "banner_b", "popup"]
    assert policy.features == ("one", "x")
    users = ["u_81723", "u_81754", "a new user"]
    X = np.array([[1.0, 0.2], [1.0, -1.5], [1.0, 0.0]])
    chosen = policy.select_batch(users, X)
    assert len(chosen) == 3 and set(chosen) <= {"banner_a", "banner_b", "popup"}
    assert all(isinstance(a, str) for a in chosen)
    allowed = policy.select_batch(
        users, X, allowed=[["popup"], ["banner_b", "popup"], ["banner_a", "banner_b", "popup"]]
    )
    assert allowed[0] == "popup" and allowed[1] in ("banner_b", "popup")
    feedback = pd.DataFrame(
        {
            "instance": users,
            "arm": list(chosen),
            "reward": [1.0, 0.0, 0.5],
            "one": X[:, 0],
            "x": X[:, 1],
        }
    )
    policy.update_batch(feedback)
    assert policy.instances.values() == users
    before = policy.instances.values()
    with pytest.raises((ValueError, KeyError), match="arm"):
        policy.update_batch(feedback.assign(arm=["banner_a", "banner_c", "popup"]))
    assert policy.instances.values() == before  # a refused batch changes nothing
    # the historical log's rows replay into the policy in the same names
    policy.update_batch(df.rename(columns={"user": "instance"}).iloc[:50])


def test_prior_from_arrays_checks_the_arm_ids():
    K, d = 2, 1
    args = (np.zeros((K, d)), np.ones((K, d, d)), np.ones((K, d, d)), np.ones(K))
    assert prior_from_arrays(*args, arms=["b", "a"]).arms.tolist() == ["b", "a"]
    for arms, match in [
        (["a", "a"], "must be unique"),
        (["a", ""], "is empty"),
        ([True, False], "dtype bool"),
        ([0.5, 1.5], "dtype float64"),
        (np.array(["a", 1], dtype=object), "not a string"),
    ]:
        with pytest.raises(ValueError, match=match):
            prior_from_arrays(*args, arms=arms)


# ---------------------------------------------------------------------- hostile prior files


def _write(ds: xr.Dataset, path) -> object:
    """A prior file as an attacker writes it: any content, validly sealed."""
    from hierbandit._io import write_sealed_netcdf
    from hierbandit.bayes._artifact import prior_tree

    return write_sealed_netcdf(prior_tree(ds, None), path, KIND)  # prior_tree checks no labels


def _with_arms(prior: HierarchicalPrior, arms) -> xr.Dataset:
    return prior.dataset.assign_coords(arm=arms)


@pytest.mark.parametrize(
    ("arms", "match"),
    [
        (["banner_a", "banner_a", "popup"], "arm coordinate must be unique"),
        (["banner_a", "", "popup"], r"arm coordinate: label 1 \(''\) is empty"),
        (["banner_a", "   ", "popup"], "blank"),
        (np.array([b"banner_a", b"banner_b", b"popup"]), "integer or string ids, got dtype"),
        ([0.5, 1.5, 2.5], "dtype float64"),
        ([True, False, True], "dtype bool"),
        ([1, 1, 2], "arm coordinate must be unique"),
    ],
)
def test_a_hostile_arm_coordinate_is_refused_on_load(prior, tmp_path, arms, match):
    path = _write(_with_arms(prior, arms), tmp_path / "bad.nc")
    with pytest.raises(InvalidFileError, match=match) as info:
        load_prior(path)
    assert "bad.nc" in str(info.value)


def test_invalid_utf8_in_an_arm_name_is_refused_on_load(prior, tmp_path):
    path = _write(prior.dataset, tmp_path / "utf8.nc")
    raw = bytearray(path.read_bytes())
    at = raw.find(b"banner_b")
    assert at > 0
    raw[at : at + 2] = b"\xff\xfe"  # the same length, no longer UTF-8
    payload = bytes(raw[512:])
    from hierbandit._container import seal

    path.write_bytes(seal(payload, KIND) + payload)  # re-sealed: the probe and parse see it
    with pytest.raises(InvalidFileError, match=r"utf8\.nc: .*UnicodeDecodeError"):
        load_prior(path)


def test_hostile_feature_coordinates_are_refused_on_load(prior, tmp_path):
    dup = prior.dataset.assign_coords(feature=["one", "one"], feature_=["one", "one"])
    with pytest.raises(InvalidFileError, match="feature coordinate must be unique"):
        load_prior(_write(dup, tmp_path / "dup.nc"))
    other = prior.dataset.assign_coords(feature_=["x", "one"])
    with pytest.raises(InvalidFileError, match="the same names"):
        load_prior(_write(other, tmp_path / "other.nc"))


def test_an_arm_coordinate_written_as_fixed_width_strings_loads(prior, tmp_path):
    """A file written by another tool may store the names as UTF-8 characters (netCDF ``char``
    with ``_Encoding``) rather than variable-length strings: the same ids."""
    from hierbandit._io import write_sealed_netcdf
    from hierbandit.bayes._artifact import prior_tree

    tree = prior_tree(prior.dataset, None)
    tree["arm"].encoding.update(dtype="S1")
    path = write_sealed_netcdf(tree, tmp_path / "fixed.nc", KIND)
    with h5py.File(path, "r") as f:
        assert f["arm"].dtype == np.dtype("S1") and f["arm"].ndim == 2  # characters
        assert f["arm"].attrs["_Encoding"] in ("utf-8", b"utf-8")
    loaded = load_prior(path)
    assert loaded == prior and all(type(a) is str for a in loaded.arms.tolist())


@pytest.mark.slow
def test_a_full_bayes_fit_keeps_string_instance_coordinates(df, tmp_path):
    small = df.iloc[:300]
    fit = fit_prior(
        small,
        instance="user",
        features=FEATURES,
        method="mcmc",
        draws=30,
        tune=30,
        chains=1,
        progressbar=False,
    )
    coords = fit.idata["posterior"]["beta"].coords["instance"].values.tolist()
    assert coords == sorted(set(small.user))
    loaded = load_prior(fit.save(tmp_path / "mcmc.nc"))
    assert loaded == fit
    assert loaded.arms.tolist() == ["banner_a", "banner_b", "popup"]
