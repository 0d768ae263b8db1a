"""Tests of the historical-log reader: formats, coding, sufficient statistics, validation, hash."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import json
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from hierbandit.data import HistoricalLog, check_min_rows, read_log

# Most tests here read logs with inferred features on purpose (formats, coding, hash): the
# warning that inference issues is tested on its own below (inferred features).
pytestmark = pytest.mark.filterwarnings("ignore:features not given:UserWarning")

INSTANCES = np.array([42, 3, 17, 8])
ARMS = np.array([9, 2, 5])


@pytest.fixture
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    T = 60
    return pd.DataFrame(
        {
            "instance": rng.choice(INSTANCES, size=T),
            "note": rng.choice(["a", "bb", "ccc"], size=T),  # non-numeric: ignored
            "arm": rng.choice(ARMS, size=T),
            "x1": rng.normal(size=T),
            "reward": rng.normal(size=T),
            "x2": rng.normal(size=T) * 1e-7 + 1 / 3,  # values that a lossy float parser would alter
        }
    )


def _write(frame: pd.DataFrame, path, kind: str) -> None:
    if kind == "csv":
        frame.to_csv(path, index=False)
    elif kind == "parquet":
        frame.to_parquet(path, index=False)
    else:
        xr.Dataset.from_dataframe(frame).to_netcdf(path, engine="h5netcdf")


# ---------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("kind", "suffix"),
    [
        ("csv", ".csv"),
        ("csv", ".csv.gz"),
        ("parquet", ".parquet"),
        ("parquet", ".pq"),
        ("nc", ".nc"),
    ],
)
@pytest.mark.parametrize("as_str", [False, True])
def test_file_round_trips_give_identical_log(frame, tmp_path, kind, suffix, as_str):
    ref = read_log(frame)
    path = tmp_path / f"log{suffix}"
    _write(frame, path, kind)
    log = read_log(str(path) if as_str else path)
    assert log == ref
    assert log.data_hash == ref.data_hash
    assert log.features == ("x1", "x2")
    np.testing.assert_array_equal(log.X, ref.X)  # exact, no float round-off
    np.testing.assert_array_equal(log.y, ref.y)
    assert log.source == str(path)
    assert ref.source == "DataFrame"


def test_xarray_dataset_round_trip(frame):
    ref = read_log(frame)
    ds = xr.Dataset.from_dataframe(frame)  # dimension "index" with an index coordinate
    log = read_log(ds)
    assert log == ref
    assert log.data_hash == ref.data_hash
    assert log.source == "xarray.Dataset"
    # plain variables along a dimension without a coordinate
    ds2 = xr.Dataset({c: ("row", frame[c].to_numpy()) for c in frame.columns if c != "note"})
    assert read_log(ds2) == ref


def test_to_dataframe_and_to_dataset_round_trip(frame, tmp_path):
    log = read_log(frame)
    back = log.to_dataframe()
    assert list(back.columns) == ["instance", "arm", "reward", "x1", "x2"]
    assert read_log(back) == log
    ds = log.to_dataset()
    assert ds.attrs["data_hash"] == log.data_hash
    assert read_log(ds) == log
    path = tmp_path / "log.nc"
    ds.to_netcdf(path, engine="h5netcdf")
    assert read_log(path).data_hash == log.data_hash


def test_custom_column_names_round_trip(frame):
    renamed = frame.rename(columns={"instance": "user", "arm": "genre", "reward": "rating"})
    log = read_log(renamed, instance="user", arm="genre", reward="rating")
    assert log == read_log(frame)
    out = log.to_dataframe()
    assert list(out.columns[:3]) == ["user", "genre", "rating"]
    assert read_log(out, instance="user", arm="genre", reward="rating") == log
    prov = log.provenance()
    assert prov["columns"] == {
        "instance": "user",
        "arm": "genre",
        "reward": "rating",
        "features": ["x1", "x2"],
    }


def test_historical_log_is_returned_as_is(frame):
    log = read_log(frame)
    assert read_log(log) is log


def test_read_log_does_not_modify_input(frame):
    before = frame.copy()
    read_log(frame)
    with pytest.raises(ValueError):
        read_log(frame, reward="rewrad")
    pd.testing.assert_frame_equal(frame, before)


# ---------------------------------------------------------------------- coding


def test_label_coding(frame):
    log = read_log(frame)
    np.testing.assert_array_equal(log.instance_labels, np.sort(INSTANCES))
    np.testing.assert_array_equal(log.arm_labels, np.sort(ARMS))
    np.testing.assert_array_equal(log.instance_labels[log.instance], frame["instance"])
    np.testing.assert_array_equal(log.arm_labels[log.arm], frame["arm"])
    assert log.instance.dtype == np.int64
    assert log.arm.dtype == np.int64
    assert log.instance_labels.dtype == np.int64
    assert log.X.dtype == np.float64
    assert log.X.shape == (60, 2)
    assert log.y.shape == (60,)
    assert (log.n_rows, log.n_instances, log.n_arms, log.n_features) == (60, 4, 3, 2)
    np.testing.assert_array_equal(log.X, frame[["x1", "x2"]].to_numpy())
    np.testing.assert_array_equal(log.y, frame["reward"].to_numpy())


def test_integral_float_ids_and_nullable_dtypes_accepted(frame):
    ref = read_log(frame)
    f = frame.assign(
        instance=frame["instance"].astype(float),
        arm=frame["arm"].astype("Int64"),
        x1=frame["x1"].astype("Float64"),
    )
    assert read_log(f) == ref


def test_explicit_features_order_and_bool_features(frame):
    f = frame.assign(flag=frame["x1"] > 0)
    log = read_log(f, features=["x2", "flag"])
    assert log.features == ("x2", "flag")
    np.testing.assert_array_equal(log.X[:, 1], (frame["x1"] > 0).astype(float))
    assert read_log(f).features == ("x1", "x2", "flag")


def test_single_arm_logs(frame):
    no_arm = frame.drop(columns="arm")
    log = read_log(no_arm)
    assert log.n_arms == 1
    np.testing.assert_array_equal(log.arm_labels, [0])
    np.testing.assert_array_equal(log.arm, 0)
    assert log.arm_column is None
    assert "arm" not in log.to_dataframe().columns
    assert read_log(log.to_dataframe()) == log
    # arm=None ignores an existing arm column as an arm (here it is left out of the features)
    log2 = read_log(frame, arm=None, features=["x1", "x2"])
    assert log2 == log
    assert log2.suffstats().G.shape == (1, 4, 2, 2)


def test_arm_rows(frame):
    log = read_log(frame)
    for k, label in enumerate(log.arm_labels):
        X, y, inst = log.arm_rows(k)
        mask = frame["arm"].to_numpy() == label
        np.testing.assert_array_equal(X, frame.loc[mask, ["x1", "x2"]].to_numpy())
        np.testing.assert_array_equal(y, frame.loc[mask, "reward"].to_numpy())
        np.testing.assert_array_equal(log.instance_labels[inst], frame.loc[mask, "instance"])
    with pytest.raises(ValueError, match="k must be in"):
        log.arm_rows(3)
    with pytest.raises(TypeError, match="k must be an integer"):
        log.arm_rows(1.0)


def test_suffstats_equal_direct_sums(frame):
    log = read_log(frame)
    G, b, q, n = log.suffstats()
    K, N, d = 3, 4, 2
    assert G.shape == (K, N, d, d)
    assert b.shape == (K, N, d)
    assert q.shape == (K, N)
    assert n.shape == (K, N)
    assert n.dtype == np.int64
    assert n.sum() == 60
    for k, a in enumerate(log.arm_labels):
        for j, i in enumerate(log.instance_labels):
            rows = frame[(frame["arm"] == a) & (frame["instance"] == i)]
            Xr = rows[["x1", "x2"]].to_numpy()
            yr = rows["reward"].to_numpy()
            assert n[k, j] == len(rows)
            np.testing.assert_allclose(G[k, j], Xr.T @ Xr, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(b[k, j], Xr.T @ yr, rtol=1e-12, atol=1e-14)
            assert q[k, j] == pytest.approx(yr @ yr, rel=1e-12, abs=1e-14)


def test_provenance_is_json_serialisable(frame, tmp_path):
    path = tmp_path / "log.parquet"
    frame.to_parquet(path)
    prov = read_log(path).provenance()
    assert json.loads(json.dumps(prov)) == prov
    assert prov["source"] == str(path)
    assert prov["data_hash"] == read_log(frame).data_hash
    assert (prov["n_rows"], prov["n_instances"], prov["n_arms"]) == (60, 4, 3)
    assert prov["features"] == ["x1", "x2"]
    assert prov["columns"]["reward"] == "reward"


def test_log_is_immutable(frame):
    log = read_log(frame)
    with pytest.raises(dataclasses.FrozenInstanceError):
        log.source = "x"
    with pytest.raises(ValueError, match="read-only"):
        log.X[0, 0] = 1.0
    assert hash(log) == hash(read_log(frame))


def test_direct_construction_checks_and_hashes(frame):
    log = read_log(frame)
    same = HistoricalLog(
        X=log.X,
        y=log.y,
        instance=log.instance,
        arm=log.arm,
        features=log.features,
        instance_labels=log.instance_labels,
        arm_labels=log.arm_labels,
    )
    assert same == log
    assert same.data_hash == log.data_hash
    kwargs = {f.name: getattr(log, f.name) for f in dataclasses.fields(log) if f.init}
    with pytest.raises(ValueError, match="data_hash"):
        HistoricalLog(**{**kwargs, "data_hash": "0" * 64})
    with pytest.raises(ValueError, match="instance codes"):
        HistoricalLog(**{**kwargs, "data_hash": "", "instance_labels": log.instance_labels[:2]})
    with pytest.raises(ValueError, match="features"):
        HistoricalLog(**{**kwargs, "data_hash": "", "features": ("a",)})


# ---------------------------------------------------------------------- inferred features


def test_inferred_features_warn_naming_the_columns(frame):
    with pytest.warns(UserWarning) as record:
        log = read_log(frame)
    assert len(record) == 1
    msg = str(record[0].message)
    assert msg.startswith("features not given")
    assert "['x1', 'x2']" in msg and "features=[...]" in msg
    assert "looks like" not in msg  # float columns are never flagged
    assert record[0].filename == __file__  # attributed to the caller of read_log
    assert log.features == ("x1", "x2")


def test_inferred_features_warn_every_time(frame):
    for _ in range(2):
        with pytest.warns(UserWarning, match="features not given"):
            read_log(frame)


def test_explicit_features_do_not_warn(frame, tmp_path):
    path = tmp_path / "log.csv"
    frame.assign(item_id=7).to_csv(path, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_log(frame, features=["x1", "x2"]).features == ("x1", "x2")
        assert read_log(path, features=["x2"]).features == ("x2",)
        log = read_log(frame, features=["x1", "x2"])
        assert read_log(log) is log  # a HistoricalLog is returned as is, nothing inferred


def test_a_refused_log_does_not_warn(frame):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="NaN"):
            read_log(_set("x1", np.nan)(frame))


def test_id_like_columns_are_flagged_in_the_warning(frame):
    T = len(frame)
    df = frame.assign(
        item_id=np.arange(T) % 5,  # integer, named like an id
        movieId=np.arange(T) % 7,
        user_code=np.arange(T) % 3,
        row_index=np.arange(T) % 4,
        timestamp=1_700_000_000 + 17 * np.arange(T),  # integer, every value distinct
        count=np.arange(T) % 2,  # integer, repeated, an ordinary name: a feature
        flag=frame["x1"] > 0,  # boolean: never flagged
        paid_amount=np.arange(T) * 0.5,  # float: never flagged
    )
    with pytest.warns(UserWarning) as record:
        log = read_log(df)
    msg = str(record[0].message)
    assert log.features == (
        "x1", "x2", "item_id", "movieId", "user_code", "row_index", "timestamp", "count", "flag",
        "paid_amount",
    )  # fmt: skip
    assert f"is a feature: {list(log.features)}." in msg
    for col in ("item_id", "movieId", "user_code", "row_index"):
        assert f"{col!r} (integers, named like an id)" in msg, (col, msg)
    assert "'timestamp' (integers, every value distinct)" in msg
    assert "look like ids rather than features" in msg
    for col in ("x1", "x2", "count", "flag", "paid_amount"):
        assert f"{col!r} (" not in msg, (col, msg)
    with pytest.warns(
        UserWarning, match=r"'item_id' \(integers, named like an id\) looks like an id"
    ):
        read_log(frame.assign(item_id=np.arange(T) % 5))


# ---------------------------------------------------------------------- hash


def _mutations():
    def set_value(col, row, value):
        def f(df):
            df = df.copy()
            df.loc[row, col] = value
            return df

        return f

    return {
        "feature": set_value("x1", 5, 0.123),
        "feature_ulp": lambda df: df.assign(
            x2=np.where(df.index == 0, np.nextafter(df["x2"], 2), df["x2"])
        ),
        "reward": set_value("reward", 0, 99.0),
        "instance": lambda df: df.assign(instance=np.where(df.index == 3, 1000, df["instance"])),
        "arm": lambda df: df.assign(arm=np.where(df.index == 3, 1000, df["arm"])),
        "feature_name": lambda df: df.rename(columns={"x2": "x3"}),
        "row_order": lambda df: df.iloc[[1, 0, *range(2, len(df))]].reset_index(drop=True),
        "drop_row": lambda df: df.iloc[1:],
    }


@pytest.mark.parametrize("name", list(_mutations()))
def test_hash_changes_when_data_change(frame, name):
    before = read_log(frame).data_hash
    after = read_log(_mutations()[name](frame)).data_hash
    assert len(after) == 64
    assert after != before


def test_hash_ignores_source_column_names_and_signed_zero(frame):
    ref = read_log(frame)
    assert read_log(frame.copy()).data_hash == ref.data_hash
    renamed = frame.rename(columns={"reward": "r"})
    assert read_log(renamed, reward="r").data_hash == ref.data_hash
    z = frame.assign(x1=0.0)
    assert read_log(z).data_hash == read_log(z.assign(x1=-0.0)).data_hash


# ---------------------------------------------------------------------- validation


def _set(col, value, rows=(0,)):
    def f(df):
        df = df.copy()
        if col in df and df[col].dtype.kind in "iu" and isinstance(value, float):
            df[col] = df[col].astype(float)
        for r in rows:
            df.loc[r, col] = value
        return df

    return f


INVALID = {
    # (transform of the frame, read_log kwargs, exception, message fragments)
    "misnamed_reward": (
        None,
        {"reward": "rewrad"},
        ValueError,
        ["reward", "'rewrad'", "did you mean 'reward'", "available columns"],
    ),
    "missing_instance": (
        None,
        {"instance": "user"},
        ValueError,
        ["instance", "'user' not found", "available columns"],
    ),
    "missing_nondefault_arm": (
        None,
        {"arm": "arms"},
        ValueError,
        ["arm", "'arms'", "did you mean 'arm'"],
    ),
    "missing_feature": (
        None,
        {"features": ["x1", "x3"]},
        ValueError,
        ["features", "'x3'", "did you mean"],
    ),
    "empty": (lambda df: df.iloc[:0], {}, ValueError, ["data is empty"]),
    "no_features": (
        lambda df: df[["instance", "arm", "reward", "note"]],
        {},
        ValueError,
        ["features", "no numeric feature"],
    ),
    "empty_features": (None, {"features": []}, ValueError, ["features"]),
    "duplicate_features": (
        None,
        {"features": ["x1", "x2", "x1"]},
        ValueError,
        ["features", "duplicate", "x1"],
    ),
    "feature_is_reward": (None, {"features": ["x1", "reward"]}, ValueError, ["features", "reward"]),
    "feature_non_numeric": (
        None,
        {"features": ["x1", "note"]},
        TypeError,
        ["features", "'note'", "numeric"],
    ),
    "nan_reward": (
        _set("reward", np.nan, rows=(2, 4)),
        {},
        ValueError,
        ["reward column 'reward'", "2 rows", "NaN"],
    ),
    "inf_feature": (
        _set("x2", np.inf, rows=(7,)),
        {},
        ValueError,
        ["feature column 'x2'", "1 rows", "inf", "row 7"],
    ),
    "neg_inf_feature": (_set("x1", -np.inf), {}, ValueError, ["feature column 'x1'"]),
    "reward_non_numeric": (
        lambda df: df.assign(reward=df["note"]),
        {},
        TypeError,
        ["reward column 'reward'", "numeric"],
    ),
    "mixed_string_and_integer_instance": (
        lambda df: df.assign(instance=df["instance"].astype(object).where(df.index != 3, "u3")),
        {},
        TypeError,
        ["instance column 'instance'", "mixes string ids", "'u3' at row 3", "integers"],
    ),
    "bool_arm": (
        lambda df: df.assign(arm=df["arm"] > 4),
        {},
        TypeError,
        ["arm column 'arm'", "integer"],
    ),
    "fractional_instance": (
        _set("instance", 2.5, rows=(3,)),
        {},
        TypeError,
        ["instance column 'instance'", "non-integral", "2.5"],
    ),
    "nan_instance": (
        _set("instance", np.nan, rows=(3,)),
        {},
        ValueError,
        ["instance column 'instance'", "NaN"],
    ),
    "negative_arm": (_set("arm", -1), {}, ValueError, ["arm column 'arm'", "negative", "-1"]),
    "negative_float_instance": (
        _set("instance", -2.0),
        {},
        ValueError,
        ["instance column", "negative"],
    ),
    "same_column_twice": (
        None,
        {"instance": "arm"},
        ValueError,
        ["arm", "instance", "different columns"],
    ),
    "instance_not_str": (None, {"instance": 3}, TypeError, ["instance must be a column name"]),
    "arm_not_str": (None, {"arm": 1}, TypeError, ["arm must be a column name"]),
    "features_not_list": (None, {"features": 3}, TypeError, ["features"]),
    "features_items_not_str": (None, {"features": ["x1", 2]}, TypeError, ["features"]),
    "duplicate_data_columns": (
        lambda df: pd.concat([df, df[["x1"]]], axis=1),
        {},
        ValueError,
        ["data has duplicate column names", "x1"],
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_validation_errors_name_the_argument(frame, case):
    transform, kwargs, exc, fragments = INVALID[case]
    data = frame if transform is None else transform(frame)
    with pytest.raises(exc) as info:
        read_log(data, **kwargs)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_unsupported_data_type():
    with pytest.raises(TypeError, match="data must be a pandas DataFrame"):
        read_log(np.zeros((3, 3)))
    with pytest.raises(TypeError, match="data must be"):
        read_log({"instance": [0], "reward": [1.0], "x": [1.0]})


def test_file_errors(tmp_path, frame):
    txt = tmp_path / "log.txt"
    txt.write_text("instance,reward,x\n0,1,1\n")
    with pytest.raises(ValueError, match=r"data: unknown file extension '\.txt'"):
        read_log(txt)
    with pytest.raises(ValueError, match="unknown file extension '\\(none\\)'"):
        read_log(tmp_path / "log")
    with pytest.raises(ValueError, match=r"data: file .* does not exist"):
        read_log(tmp_path / "missing.csv")
    for name in ("bad.parquet", "bad.nc"):
        (tmp_path / name).write_bytes(b"\x00\x01 not a real file \xff" * 10)
        with pytest.raises(ValueError, match="data: could not read"):
            read_log(tmp_path / name)
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        read_log(tmp_path / "dir.csv")
    upper = tmp_path / "LOG.CSV"
    frame.to_csv(upper, index=False)
    assert read_log(upper) == read_log(frame)


def test_multidimensional_dataset_rejected():
    ds = xr.Dataset(
        {"reward": (("row", "other"), np.zeros((3, 2))), "instance": ("row", [0, 1, 2])}
    )
    with pytest.raises(ValueError, match="data: an xarray Dataset must have its columns along one"):
        read_log(ds)


# ---------------------------------------------------------------------- check_min_rows


def test_check_min_rows(frame):
    log = read_log(frame)
    _, _, _, n = log.suffstats()
    per_arm = n.sum(axis=1)
    check_min_rows(log, per_arm=int(per_arm.min()), method="ols")
    with pytest.raises(ValueError) as info:
        check_min_rows(log, per_arm=int(per_arm.min()) + 1, method="ols")
    k = int(np.argmin(per_arm))
    msg = str(info.value)
    assert msg.startswith("ols:")
    assert (
        f"arm {log.arm_labels[k]} needs at least {per_arm.min() + 1} rows, has {per_arm.min()}"
        in msg
    )

    m = 4
    have = (n >= m).sum(axis=1)
    check_min_rows(log, instances_per_arm=int(have.min()), min_rows_per_instance=m)
    with pytest.raises(ValueError) as info:
        check_min_rows(
            log, instances_per_arm=int(have.min()) + 1, min_rows_per_instance=m, method="EB"
        )
    k = int(np.argmin(have))
    assert (
        f"arm {log.arm_labels[k]} needs at least {have.min() + 1} instances with >= {m} rows "
        f"each, has {have.min()}"
    ) in str(info.value)
    assert "EB" in str(info.value)
    check_min_rows(log)  # nothing asked, nothing to check


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"per_arm": -1}, ValueError, "per_arm"),
        ({"per_arm": 2.5}, TypeError, "per_arm"),
        ({"instances_per_arm": "3"}, TypeError, "instances_per_arm"),
        ({"min_rows_per_instance": 0}, ValueError, "min_rows_per_instance"),
        ({"method": 3}, TypeError, "method"),
    ],
)
def test_check_min_rows_validates_arguments(frame, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        check_min_rows(read_log(frame), **kwargs)


def test_check_min_rows_needs_a_log(frame):
    with pytest.raises(TypeError, match="log must be a HistoricalLog"):
        check_min_rows(frame, per_arm=1)


def test_doctests():
    mod = importlib.import_module("hierbandit.data.log")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
