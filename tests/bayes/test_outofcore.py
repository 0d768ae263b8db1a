"""Fitting a prior out of core: the statistics by Dask, the fit from them (docs/outofcore.md).

The Dask fit of a log that fits in memory equals the in-memory fit to 1e-10. One local cluster
(threads, in this process) serves the module; one test starts the default cluster
(``scheduler=None``: worker processes) and sees it closed.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

from hierbandit._progress import PROGRESS_LOGGER  # noqa: E402
from hierbandit.bayes import fit_prior  # noqa: E402
from hierbandit.bayes.outofcore import PROGRESS_LABEL, summarise_dask  # noqa: E402
from hierbandit.data import read_log, summarise  # noqa: E402

COLS = {"instance": "user", "arm": "arm", "reward": "r", "features": ["one", "x1", "x2"]}
VALUES = ("shared_mean", "shared_cov", "Sigma", "sigma2")


def hierarchical_frame(n: int = 30, K: int = 3, rows: int = 3000, seed: int = 0) -> pd.DataFrame:
    g = np.random.default_rng(seed)
    beta0 = g.normal(size=(K, 3))
    beta = beta0[:, None, :] + 0.7 * g.normal(size=(K, n, 3))
    inst = g.integers(0, n, rows)
    arm = g.integers(0, K, rows)
    X = np.column_stack([np.ones(rows), g.normal(size=(rows, 2))])
    y = np.einsum("rd,rd->r", X, beta[arm, inst]) + g.normal(size=rows)
    return pd.DataFrame(
        {
            "user": inst * 3 + 100,  # the user's own ids
            "arm": arm + 1,
            "r": y,
            "one": X[:, 0],
            "x1": X[:, 1],
            "x2": X[:, 2],
            "date": pd.Timestamp("2024-01-01").normalize()
            + pd.to_timedelta(g.integers(0, 4, rows), unit="D"),
        }
    )


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def df():
    return hierarchical_frame()


@pytest.fixture(scope="module")
def sources(df, tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    by_arm, by_date = root / "by_arm", root / "by_date"
    df.to_parquet(by_arm, partition_cols=["arm"])
    dated = df.assign(date=df.date.dt.strftime("%Y-%m-%d"))
    dated.to_parquet(by_date, partition_cols=["date"])
    return {
        "hive by arm": by_arm,
        "hive by date": by_date,
        "dask DataFrame": dd.from_pandas(df, npartitions=5),
    }


def assert_same_fit(a, b, tol=1e-10):
    for name in VALUES:
        np.testing.assert_allclose(
            a.dataset[name].values, b.dataset[name].values, rtol=tol, atol=tol, err_msg=name
        )
    np.testing.assert_array_equal(a.dataset.arm.values, b.dataset.arm.values)
    assert list(a.dataset.feature.values) == list(b.dataset.feature.values)


#: Type-II ML ends with Newton steps from the quasi-Newton optimum, so it is determined to about
#: 1e-12 whatever the order of the sums (test below): both methods are held to 1e-10.
TOL = {"eb": 1e-10, "ml": 1e-10}


@pytest.mark.parametrize("method", ["eb", "ml"])
@pytest.mark.parametrize("source", ["hive by arm", "hive by date", "dask DataFrame"])
def test_the_dask_fit_equals_the_in_memory_fit(df, sources, client, method, source):
    expected = fit_prior(df, method=method, **COLS)
    got = fit_prior(sources[source], method=method, scheduler=client, **COLS)
    assert_same_fit(got, expected, tol=TOL[method])
    attrs = got.dataset.attrs
    assert attrs["n_rows"] == len(df)
    assert attrs["data_hash"] == summarise(read_log(df, **COLS)).data_hash
    want_source = "dask.DataFrame" if source == "dask DataFrame" else str(sources[source])
    assert attrs["data_source"] == want_source


# ---------------------------------------------------------------------- string ids

STRING_ARMS = {1: "banner_b", 2: "banner_a", 3: "popup"}


@pytest.fixture(scope="module")
def str_df(df):
    """The same log with string users ("u_…", sorted in another order than the integers) and
    string arms."""
    return df.assign(
        user=df.user.map(lambda u: f"u_{(u * 7919) % 1000:03d}_{u}"),
        arm=df.arm.map(STRING_ARMS),
    )


@pytest.fixture(scope="module")
def str_sources(str_df, tmp_path_factory):
    root = tmp_path_factory.mktemp("string_logs")
    by_arm, by_date = root / "by_arm", root / "by_date"
    str_df.to_parquet(by_arm, partition_cols=["arm"])  # arm=banner_a/...: categorical strings
    str_df.assign(date=str_df.date.dt.strftime("%Y-%m-%d")).to_parquet(
        by_date, partition_cols=["date"]
    )
    with dask.config.set({"dataframe.convert-string": False}):
        object_ddf = dd.from_pandas(str_df.astype({"user": object, "arm": object}), npartitions=3)
    assert object_ddf.dtypes["user"].kind == "O"
    return {
        "hive by arm": by_arm,
        "hive by date": by_date,
        "dask DataFrame": dd.from_pandas(str_df, npartitions=5),
        "dask DataFrame, object dtype": object_ddf,
    }


@pytest.mark.parametrize("method", ["eb", "ml"])
@pytest.mark.parametrize(
    "source", ["hive by arm", "hive by date", "dask DataFrame", "dask DataFrame, object dtype"]
)
def test_the_dask_fit_of_string_ids_equals_the_in_memory_fit(
    str_df, str_sources, client, method, source
):
    expected = fit_prior(str_df, method=method, **COLS)
    got = fit_prior(str_sources[source], method=method, scheduler=client, **COLS)
    assert_same_fit(got, expected, tol=TOL[method])
    assert got.dataset.arm.values.tolist() == ["banner_a", "banner_b", "popup"]
    attrs = got.dataset.attrs
    assert attrs["n_rows"] == len(str_df)
    assert attrs["data_hash"] == summarise(read_log(str_df, **COLS)).data_hash
    assert got.provenance["data"]["ids"] == {"instance": "str", "arm": "str"}
    assert got.provenance["data"]["n_instances"] == str_df.user.nunique()


@pytest.mark.parametrize("method", ["eb", "ml"])
def test_string_ids_fit_as_their_integer_codes(str_df, str_sources, client, method):
    """The same log with its ids replaced by their integer codes gives the same Σ, σ², β₀ (to
    1e-12) in memory and through Dask; only the arm labels differ."""
    log = read_log(str_df, **COLS)
    coded = str_df.assign(user=log.instance, arm=log.arm)
    by_codes = fit_prior(coded, method=method, **COLS)
    fits = {
        "in memory": fit_prior(str_df, method=method, **COLS),
        "dask, strings": fit_prior(
            str_sources["dask DataFrame"], method=method, scheduler=client, **COLS
        ),
        "dask, codes": fit_prior(
            dd.from_pandas(coded, npartitions=5), method=method, scheduler=client, **COLS
        ),
    }
    for name, fit in fits.items():
        for var in VALUES:
            np.testing.assert_allclose(
                fit.dataset[var].values,
                by_codes.dataset[var].values,
                rtol=1e-12,
                atol=1e-12,
                err_msg=f"{name}: {var}",
            )
    assert by_codes.dataset.arm.values.tolist() == [0, 1, 2]
    assert fits["in memory"].dataset.arm.values.tolist() == ["banner_a", "banner_b", "popup"]


def test_the_statistics_equal_those_in_memory(df, sources, client):
    log = read_log(df, **COLS)
    st = log.suffstats()
    for source in sources.values():
        s = summarise_dask(source, scheduler=client, **COLS)
        for a, b in zip(s.suffstats(), st, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(s.instance_labels, log.instance_labels)
        np.testing.assert_array_equal(s.arm_labels, log.arm_labels)
    # a hive key is a column like any other; a date key is left out of the inferred features
    inferred = summarise_dask(
        sources["hive by date"], scheduler=client, instance="user", reward="r"
    )
    assert inferred.features == ("one", "x1", "x2")
    assert inferred.ignored_columns == (("date", "dtype category"),)


def test_ml_does_not_depend_on_the_order_of_the_sums(df):
    """The ML estimate is the same, to 1e-10, from the rows in another order and from the
    statistics (its final Newton steps reach the optimum to about 1e-12; L-BFGS-B alone stopped
    3e-8 away, at a point that depended on the rounding of the sums)."""
    a = fit_prior(df, method="ml", **COLS)
    b = fit_prior(df.sample(frac=1.0, random_state=3), method="ml", **COLS)
    c = fit_prior(summarise(read_log(df, **COLS)), method="ml")
    assert_same_fit(a, b)
    assert_same_fit(a, c)


def test_the_default_local_cluster_is_started_and_closed(df, sources, caplog):
    before = set(distributed.client._global_clients)
    caplog.set_level(logging.DEBUG, logger=PROGRESS_LOGGER)
    got = fit_prior(sources["hive by date"], method="eb", **COLS)
    assert_same_fit(got, fit_prior(df, method="eb", **COLS))
    assert set(distributed.client._global_clients) == before  # its client is closed
    progress = [r.progress for r in caplog.records if getattr(r, "progress", None)]
    assert progress[0] == (0, 4, PROGRESS_LABEL) and progress[-1] == (4, 4, PROGRESS_LABEL)


def test_the_model_checks_and_conditional_draws_from_statistics(df):
    """What a collapsed MCMC fit adds after sampling is the same from a summary as from rows."""
    import xarray as xr

    from hierbandit.bayes.models import add_conditional_draws, add_model_checks, observed_cells

    log = read_log(df.iloc[:600], **COLS)
    summary = summarise(log)
    a, b = observed_cells(summary), observed_cells(log)
    for name in ("mean_reward", "sum_xx", "sum_xr", "sum_rr", "mean_x", "n_rows", "cell_arm"):
        np.testing.assert_allclose(a[name].values, b[name].values, rtol=1e-12, atol=1e-12)
    g = np.random.default_rng(0)
    K, d = log.n_arms, log.n_features
    A = g.normal(size=(1, 4, K, d, d))
    post = xr.Dataset(
        {
            "Sigma": (("chain", "draw", "arm", "feature", "feature_"), A @ A.swapaxes(-1, -2)),
            "sigma": (("chain", "draw", "arm"), 1.0 + g.uniform(size=(1, 4, K))),
        },
        coords={
            "arm": log.arm_labels,
            "feature": list(log.features),
            "feature_": list(log.features),
        },
    )
    trees = []
    for source in (summary, log):
        tree = xr.DataTree.from_dict({"posterior": post.copy()})
        add_conditional_draws(tree, source, rng=1)
        add_model_checks(tree, source, posterior_predictive=True, rng=2)
        trees.append(tree)
    for group, name in [
        ("posterior", "beta"),
        ("posterior", "beta0"),
        ("log_likelihood", "reward"),
        ("posterior_predictive", "mean_reward"),
    ]:
        np.testing.assert_allclose(
            trees[0][group][name].values, trees[1][group][name].values, rtol=1e-9, atol=1e-9
        )


@pytest.mark.slow
def test_a_summary_fits_with_the_collapsed_model(df):
    log = read_log(df.iloc[:600], **COLS)
    summary = summarise(log)
    kw = {"method": "mcmc", "draws": 30, "tune": 30, "chains": 1, "progressbar": False}
    got = fit_prior(summary, **kw)
    expected = fit_prior(log, **kw)
    obs_a, obs_b = got.idata["observed_data"].dataset, expected.idata["observed_data"].dataset
    for name in ("mean_reward", "sum_xx", "sum_xr", "sum_rr", "mean_x", "n_rows"):
        np.testing.assert_allclose(obs_a[name].values, obs_b[name].values, rtol=1e-12)
    np.testing.assert_allclose(
        got.idata["posterior"]["Sigma"].values,
        expected.idata["posterior"]["Sigma"].values,
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match=r"collapsed=False .* sufficient statistics only"):
        fit_prior(summary, method="mcmc", collapsed=False, draws=10, tune=10, chains=1)


def test_the_refusals_from_statistics(df):
    base = df.iloc[:900].copy()
    cases = {
        "constant": base.assign(r=np.where(base.arm == 2, 0.5, base.r)),
        "copy": base.assign(x2=base.r),
        "within": base.assign(r=base.one * (base.user % 7) + 2.0 * base.x1 * (base.user % 3)),
    }
    for name, frame in cases.items():
        log = read_log(frame, **COLS)
        with pytest.raises(ValueError) as rows:
            fit_prior(log, method="ml")
        with pytest.raises(ValueError) as stats:
            fit_prior(summarise(log), method="ml")
        assert str(stats.value) == str(rows.value), name
    fit_prior(summarise(read_log(base, **COLS)), method="eb")  # a log that varies fits


def test_hostile_input(df, client, tmp_path):
    bad = tmp_path / "bad"

    def dask_fit(frame, **kw):
        # object columns stay objects (Dask would make them strings: "dataframe.convert-string")
        with dask.config.set({"dataframe.convert-string": False}):
            ddf = dd.from_pandas(frame, npartitions=2)
        return fit_prior(ddf, method="ml", scheduler=client, **{**COLS, **kw})

    with pytest.raises(ValueError, match=r"reward: column 'reward' not found.*available"):
        dask_fit(df, reward="reward")
    with pytest.raises(ValueError, match=r"reward column 'r' has 1 rows with NaN"):
        dask_fit(df.assign(r=df.r.where(df.index != 2000)))
    named = df.assign(user="u_" + df.user.astype(str)).astype({"user": object})
    with pytest.raises(TypeError, match=r"instance column 'user' mixes string ids.*partition 1"):
        dask_fit(named.assign(user=named.user.where(named.index != 2000, 5)))
    # strings in one partition, integers in the other: refused when the two are added up
    halves = [named.iloc[:1500], df.iloc[1500:]]
    split = dd.from_map(halves.__getitem__, [0, 1], meta=named.iloc[:0], enforce_metadata=False)
    with pytest.raises(TypeError, match=r"instance column 'user' holds string ids in some parts"):
        fit_prior(split, method="ml", scheduler=client, **COLS)
    with pytest.raises(ValueError, match=r"arm column 'arm' must hold non-negative ids"):
        dask_fit(df.assign(arm=df.arm - 2))
    bad.mkdir()
    with pytest.raises(ValueError, match=r"data: directory .* holds no Parquet files"):
        fit_prior(bad, method="ml", scheduler=client, **COLS)
    file = tmp_path / "log.parquet"
    df.drop(columns="date").to_parquet(file)
    with pytest.raises(ValueError, match=r"data: .* is a file, not a directory"):
        summarise_dask(file, scheduler=client, **COLS)
    with pytest.raises(ValueError, match=r"does not exist"):
        summarise_dask(tmp_path / "nowhere", scheduler=client, **COLS)
    with pytest.raises(TypeError, match=r"data must be a Dask DataFrame"):
        summarise_dask(df, scheduler=client, **COLS)
    with pytest.raises(TypeError, match=r"scheduler must be None"):
        summarise_dask(dd.from_pandas(df, npartitions=1), scheduler=3, **COLS)
    # a file path still reads in memory, and scheduler is ignored there
    assert_same_fit(
        fit_prior(file, method="ml", scheduler="tcp://nowhere:1", **COLS),
        fit_prior(df, method="ml", **COLS),
    )


def test_the_command_fits_a_directory_on_a_running_cluster(df, sources, client, tmp_path):
    """``hierbandit fit-prior DIR --scheduler ADDRESS``: the same prior as in memory."""
    from typer.testing import CliRunner

    from hierbandit.bayes import load_prior
    from hierbandit.cli.main import app

    out = tmp_path / "p.nc"
    args = ["--instance", "user", "--reward", "r", "--feature", "one", "--feature", "x1",
            "--feature", "x2", "--method", "ml"]  # fmt: skip
    res = CliRunner().invoke(
        app,
        ["fit-prior", str(sources["hive by arm"]), *args, "--scheduler",
         client.scheduler.address, "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    prior = load_prior(out)
    assert prior.dataset.attrs["n_rows"] == len(df)
    assert_same_fit(prior, fit_prior(df, method="ml", **COLS))
    res = CliRunner().invoke(app, ["fit-prior", str(tmp_path), *args, "--out", str(out)])
    assert res.exit_code == 2 and "Error:" in res.output  # a directory with no Parquet files
