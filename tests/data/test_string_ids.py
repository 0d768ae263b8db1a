"""String instance and arm ids: read, coded, hashed and summarised exactly (hierbandit.data).

A practitioner's log names users and arms with strings ("u_81723", "banner_b"). They are coded
to 0..N-1 in the sorted order of the strings, kept as labels (object arrays of ``str``), and give
the same statistics as the same log with the ids replaced by their integer codes. Every way a
column of ids can be wrong is refused, naming the column (and the row).
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from hierbandit.data import (
    HistoricalLog,
    LogSummary,
    check_min_rows,
    combine_partials,
    partial_stats,
    read_log,
    summarise,
    summary_from_partial,
)
from hierbandit.data.log import check_id_labels
from hierbandit.data.summary import partial_from_arrays, resolve_columns

COLS = {"instance": "user", "arm": "arm", "reward": "r", "features": ["one", "x1"]}
ARMS = np.array(["banner_b", "banner_a", "popup"], dtype=object)


def int_frame(T: int = 1500, N: int = 25, seed: int = 0) -> pd.DataFrame:
    g = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "user": g.integers(0, N, T),
            "arm": g.integers(0, 3, T),
            "r": g.normal(size=T) * 2 + 1,
            "one": np.ones(T),
            "x1": g.normal(size=T),
        }
    )


def users(N: int, seed: int = 1) -> np.ndarray:
    """N user ids whose sorted order is not the order of the integers they replace."""
    g = np.random.default_rng(seed)
    return np.array([f"u_{81723 + 17 * i}" for i in g.permutation(N)], dtype=object)


def str_frame(T: int = 1500, N: int = 25, seed: int = 0) -> pd.DataFrame:
    df = int_frame(T, N, seed)
    return df.assign(user=users(N)[df.user], arm=ARMS[df.arm])


def as_codes(log: HistoricalLog, df: pd.DataFrame) -> pd.DataFrame:
    """The same rows with the string ids replaced by their integer codes."""
    return df.assign(user=log.instance, arm=log.arm)


# ---------------------------------------------------------------------- reading


@pytest.mark.parametrize("dtype", ["object", "str", "string", "category"])
def test_string_ids_are_coded_in_sorted_order_and_kept_as_labels(dtype):
    df = str_frame()
    typed = df.assign(user=df.user.astype(dtype), arm=df.arm.astype(dtype))
    log = read_log(typed, **COLS)
    assert log.instance_labels.dtype == object and log.arm_labels.dtype == object
    assert all(type(v) is str for v in log.instance_labels)
    assert log.arm_labels.tolist() == ["banner_a", "banner_b", "popup"]
    assert log.instance_labels.tolist() == sorted(set(df.user))
    np.testing.assert_array_equal(log.instance_labels[log.instance], df.user.to_numpy())
    np.testing.assert_array_equal(log.arm_labels[log.arm], df.arm.to_numpy())
    assert log.provenance()["ids"] == {"instance": "str", "arm": "str"}
    assert log == read_log(df, **COLS)  # the dtype holding the strings does not matter
    with pytest.raises(ValueError):
        log.instance_labels[0] = "x"  # read-only


def test_string_ids_give_the_statistics_of_their_integer_codes():
    df = str_frame()
    log = read_log(df, **COLS)
    coded = read_log(as_codes(log, df), **COLS)
    for a, b in zip(log.suffstats(), coded.suffstats(), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(log.instance, coded.instance)
    np.testing.assert_array_equal(log.arm, coded.arm)
    assert coded.provenance()["ids"] == {"instance": "int", "arm": "int"}
    # the ids are part of the content: strings and their codes hash differently
    assert log.data_hash != coded.data_hash
    assert summarise(log).data_hash != summarise(coded).data_hash


def test_one_string_column_and_one_integer_column():
    df = str_frame()
    mixed = df.assign(arm=df.arm.map({"banner_a": 4, "banner_b": 9, "popup": 2}))
    log = read_log(mixed, **COLS)
    assert log.id_kinds == {"instance": "str", "arm": "int"}
    assert log.arm_labels.tolist() == [2, 4, 9] and log.arm_labels.dtype == np.int64
    assert summarise(log).provenance()["ids"] == {"instance": "str", "arm": "int"}


def test_digit_strings_stay_strings():
    df = int_frame(200, 5)
    log = read_log(df.assign(user=df.user.map(lambda u: f"{u:03d}")), **COLS)
    assert log.instance_labels.tolist() == ["000", "001", "002", "003", "004"]
    assert log.id_kinds["instance"] == "str"


def test_the_hash_follows_the_content_and_the_row_order():
    df = str_frame(300, 6)
    log = read_log(df, **COLS)
    assert read_log(df.copy(), **COLS).data_hash == log.data_hash
    renamed = df.assign(user=df.user.str.replace("u_", "v_"))
    assert read_log(renamed, **COLS).data_hash != log.data_hash
    assert read_log(df.iloc[::-1], **COLS).data_hash != log.data_hash  # a log is a sequence
    # unused labels of a log built directly do not change its hash
    extra = np.array([*log.instance_labels, "zz_unused"], dtype=object)
    built = HistoricalLog(
        log.X, log.y, log.instance, log.arm, log.features, extra, log.arm_labels,
        instance_column="user", reward_column="r",
    )  # fmt: skip
    assert built.data_hash == log.data_hash


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet", "nc", "dataset"])
def test_every_input_format_reads_string_ids(tmp_path, fmt):
    df = str_frame(400, 8)
    expected = read_log(df, **COLS)
    if fmt == "dataset":
        source = expected.to_dataset()
    elif fmt == "nc":
        source = tmp_path / "log.nc"
        expected.to_dataset().to_netcdf(source, engine="h5netcdf")
    elif fmt == "parquet":
        pytest.importorskip("pyarrow")
        source = tmp_path / "log.parquet"
        df.to_parquet(source)
    else:
        source = tmp_path / f"log.{fmt}"
        df.to_csv(source, index=False)
    got = read_log(source, **COLS)
    assert got == expected
    assert got.instance_labels.dtype == object and got.arm_labels.tolist() == sorted(ARMS)


def test_to_dataframe_round_trips_string_ids():
    log = read_log(str_frame(200, 5), **COLS)
    back = read_log(log.to_dataframe(), **COLS)
    assert back == log and back.data_hash == log.data_hash


def test_check_min_rows_names_string_arms():
    df = str_frame(200, 5)
    log = read_log(df[df.arm != "popup"].iloc[:40], **COLS)
    with pytest.raises(ValueError, match=r"arm banner_a needs at least 1000 rows"):
        check_min_rows(log, per_arm=1000, method="ml")


def test_long_ids_are_fine():
    df = str_frame(200, 5)
    long = df.assign(user=df.user.map(lambda u: u * 2000))  # ~14,000 characters each
    log = read_log(long, **COLS)
    assert len(log.instance_labels[0]) > 10_000
    np.testing.assert_array_equal(log.instance, read_log(df, **COLS).instance)


def test_a_million_distinct_string_ids_are_not_quadratic():
    T = 1_000_000
    g = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "user": np.array([f"user-{i:07d}" for i in g.permutation(T)], dtype=object),
            "arm": ARMS[g.integers(0, 3, T)],
            "r": g.normal(size=T),
            "one": 1.0,
            "x1": g.normal(size=T),
        }
    )
    start = time.perf_counter()
    log = read_log(df, **COLS)
    summary = summary_from_partial(
        combine_partials([partial_stats(df.iloc[i::4], **COLS) for i in range(4)]),
        features=COLS["features"],
        instance_column="user",
    )
    elapsed = time.perf_counter() - start
    assert log.n_instances == T and summary.n_instances == T
    np.testing.assert_array_equal(summary.instance_labels, log.instance_labels)
    # about 10 s on a loaded 2-core machine; a quadratic step would take hours
    assert elapsed < 120, elapsed


# ---------------------------------------------------------------------- refusals


def _cell(df: pd.DataFrame, column: str, row: int, value) -> pd.DataFrame:
    out = df.copy()
    out[column] = out[column].astype(object)
    out.at[row, column] = value
    return out


HOSTILE = {
    "integer among strings": (
        lambda d: _cell(d, "user", 5, 17), TypeError,
        ["instance column 'user'", "mixes string ids", "int 17 at row 5"],
    ),
    "numpy integer among strings": (
        lambda d: _cell(d, "arm", 3, np.int64(2)), TypeError,
        ["arm column 'arm'", "mixes string ids", "at row 3"],
    ),
    "string among integers": (
        lambda d: _cell(int_frame(), "user", 4, "u_4"), TypeError,
        ["instance column 'user'", "mixes string ids", "'u_4' at row 4"],
    ),
    "float among strings": (
        lambda d: _cell(d, "user", 6, 2.5), TypeError, ["'user'", "float 2.5 at row 6"],
    ),
    "boolean among strings": (
        lambda d: _cell(d, "arm", 2, True), TypeError, ["'arm'", "bool True at row 2"],
    ),
    "None": (
        lambda d: _cell(d, "user", 7, None), ValueError,
        ["instance column 'user'", "1 rows with missing ids", "row 7"],
    ),
    "NaN": (
        lambda d: _cell(d, "arm", 8, np.nan), ValueError,
        ["arm column 'arm'", "missing ids", "row 8"],
    ),
    "pandas NA in a string column": (
        lambda d: d.assign(user=d.user.astype("string").where(d.index != 9, pd.NA)), ValueError,
        ["instance column 'user'", "missing ids", "row 9"],
    ),
    "missing category": (
        lambda d: d.assign(arm=d.arm.astype("category").where(d.index != 1)), ValueError,
        ["arm column 'arm'", "missing ids", "row 1"],
    ),
    "bytes": (
        lambda d: d.assign(user=d.user.map(str.encode)), TypeError,
        ["instance column 'user'", "bytes b'u_", "at row 0", "decode"],
    ),
    "bytes among strings": (
        lambda d: _cell(d, "user", 3, b"u_1"), TypeError, ["mixes string ids", "bytes"],
    ),
    "empty string": (
        lambda d: _cell(d, "user", 4, ""), ValueError,
        ["instance column 'user'", "row 4 holds ''", "is empty"],
    ),
    "blank string": (
        lambda d: _cell(d, "arm", 5, "  \t"), ValueError, ["arm column 'arm'", "row 5", "blank"],
    ),
    "NUL character": (
        lambda d: _cell(d, "user", 6, "u_\x00"), ValueError, ["'user'", "row 6", "NUL"],
    ),
    "lone surrogate": (
        lambda d: _cell(d, "user", 2, "u_\ud800"), ValueError, ["'user'", "row 2", "Unicode"],
    ),
    "tuple": (
        lambda d: d.assign(user=[("u", i) for i in range(len(d))]), TypeError,
        ["instance column 'user'", "tuple", "row 0"],
    ),
    "list among strings": (
        lambda d: _cell(d, "user", 3, ["u"]), TypeError, ["instance column 'user'", "list"],
    ),
    "datetime ids": (
        lambda d: d.assign(user=pd.Timestamp("2024-01-01")), TypeError,
        ["instance column 'user'", "integer ids"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_id_columns_are_refused_naming_the_column(case):
    change, error, fragments = HOSTILE[case]
    df = change(str_frame(60, 6))
    for read in (
        lambda: read_log(df, **COLS),
        lambda: partial_stats(df, partition=3, **COLS),
    ):
        with pytest.raises(error) as info:
            read()
        for fragment in fragments:
            assert fragment in str(info.value), (fragment, str(info.value))


def test_booleans_and_fractions_stay_refused():
    df = int_frame(60, 6)
    with pytest.raises(TypeError, match=r"arm column 'arm' must hold non-negative integer ids"):
        read_log(df.assign(arm=df.arm > 0), **COLS)
    with pytest.raises(TypeError, match=r"column 'user' must hold integer ids, got 1 non-integ"):
        read_log(df.assign(user=df.user + 0.5 * (df.index == 3)), **COLS)


def test_a_csv_column_of_numbers_with_a_stray_text_cell_is_still_refused(tmp_path):
    df = int_frame(60, 6)
    path = tmp_path / "log.csv"
    _cell(df, "user", 7, "n/a?").to_csv(path, index=False)
    with pytest.raises(TypeError) as info:
        read_log(path, **COLS)
    for fragment in ("instance column 'user'", "row 7", "'n/a?'", "not a number", "dtype="):
        assert fragment in str(info.value)
    # the other way round: a number among text ids of a CSV file
    path2 = tmp_path / "log2.csv"
    _cell(str_frame(60, 6), "arm", 11, "5").to_csv(path2, index=False)
    with pytest.raises(TypeError, match=r"arm column 'arm' mixes numbers and text.*row 11"):
        read_log(path2, **COLS)
    # the same mixture in a DataFrame of strings is a column of string ids
    log = read_log(_cell(str_frame(60, 6), "arm", 11, "5"), **COLS)
    assert "5" in log.arm_labels.tolist()


def test_a_log_built_directly_checks_its_string_labels():
    log = read_log(str_frame(100, 4), **COLS)
    kw = {"instance_column": "user", "reward_column": "r"}
    args = (log.X, log.y, log.instance, log.arm, log.features)
    bad = {
        "unsorted": np.array(log.instance_labels[::-1]),
        "duplicated": np.array([log.instance_labels[0]] * 4, dtype=object),
        "mixed": np.array([1, "a", "b", "c"], dtype=object),
        "empty": np.array(["", "a", "b", "c"], dtype=object),
    }
    for name, labels in bad.items():
        with pytest.raises(ValueError, match="instance_labels"):
            HistoricalLog(*args, labels, log.arm_labels, **kw)
        assert name
    # a unicode array is kept as an object array of str
    built = HistoricalLog(*args, log.instance_labels.astype(str), log.arm_labels, **kw)
    assert built.instance_labels.dtype == object and built == log


def test_check_id_labels():
    assert check_id_labels(np.array(["b", "a"]), "arms").tolist() == ["b", "a"]
    assert check_id_labels([3, 1], "arms").dtype == np.int64
    for bad, match in [
        (["a", "a"], "must be unique"),
        ([1, 1], "must be unique"),
        ([True, False], "integer or string ids, got dtype bool"),
        ([0.5, 1.5], "dtype float64"),
        (np.array([b"a", b"b"]), r"dtype \|S1"),
        (["a", ""], "label 1 .* is empty"),
        (np.array(["a", 1], dtype=object), "label 1 .* is not a string"),
        ([["a"]], "1-D"),
    ]:
        with pytest.raises(ValueError, match=match):
            check_id_labels(bad, "arms")


# ---------------------------------------------------------------------- the summary


def test_the_parts_of_a_string_log_add_up_exactly_and_hash_as_one():
    df = str_frame()
    log = read_log(df, **COLS)
    whole = summarise(log)
    assert whole.instance_labels.dtype == object
    np.testing.assert_array_equal(whole.instance_labels, log.instance_labels)
    np.testing.assert_array_equal(whole.arm_labels, log.arm_labels)
    shuffled = df.sample(frac=1.0, random_state=4)
    for frame, bounds in [
        (df, [0, 1500]),
        (df, [0, 1, 200, 201, 900, 1500]),
        (shuffled, list(range(0, 1501, 100))),
    ]:
        parts = [
            partial_stats(frame.iloc[a:b], partition=i, **COLS)
            for i, (a, b) in enumerate(itertools.pairwise(bounds))
        ]
        odd, even = parts[1::2], parts[::2][::-1]
        total = combine_partials([combine_partials(odd), *even] if odd else even)
        s = summary_from_partial(total, features=COLS["features"], instance_column="user")
        for a, b in zip(s.suffstats(), log.suffstats(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(s.instance_labels, log.instance_labels)
        np.testing.assert_array_equal(s.arm_labels, log.arm_labels)
        assert s.data_hash == whole.data_hash  # neither order nor partitioning matters
        assert s.provenance()["ids"] == {"instance": "str", "arm": "str"}


def test_a_part_keeps_only_its_own_strings():
    df = str_frame()
    part = partial_stats(df.iloc[:10], **COLS)
    assert set(part.instance_labels) == set(df.user.iloc[:10])
    assert part.nbytes < 10_000
    # an empty part of a text column holds no ids and combines with any other part
    empty = partial_stats(df.iloc[:0], **COLS)
    assert empty.n_rows == 0 and empty.instance_labels.size == 0
    total = combine_partials([empty, partial_stats(df, **COLS), empty])
    assert summary_from_partial(total, features=COLS["features"]) == summarise(read_log(df, **COLS))


def test_parts_with_string_and_integer_ids_are_refused_naming_the_column():
    df = str_frame()
    ints = int_frame()
    a = partial_stats(df.iloc[:100], **COLS)
    b = partial_stats(ints.iloc[:100], **COLS)
    with pytest.raises(TypeError, match=r"instance column 'user' holds string ids in some parts"):
        combine_partials([a, b])
    c = partial_stats(df.iloc[:100].assign(user=ints.user.iloc[:100]), **COLS)
    with pytest.raises(TypeError, match=r"instance column 'user' holds string ids"):
        combine_partials([c, a])
    d = partial_stats(df.iloc[:100].assign(arm=ints.arm.iloc[:100]), **COLS)
    with pytest.raises(TypeError, match=r"arm column 'arm' holds string ids"):
        combine_partials([a, d])


def test_a_summary_built_from_arrays_with_string_labels():
    s = summarise(read_log(str_frame(), **COLS))
    fields = {
        name: getattr(s, name)
        for name in ("G", "b", "q", "n", "sum_y", "sum_x", "y_min", "y_max", "features")
    }
    built = LogSummary(**fields, instance_labels=s.instance_labels, arm_labels=s.arm_labels)
    assert built.provenance()["data_hash_of"] == "statistics"
    again = LogSummary(
        **fields, instance_labels=list(s.instance_labels), arm_labels=s.arm_labels.astype(str)
    )
    assert again.data_hash == built.data_hash
    renamed = np.array([a + "_" for a in s.arm_labels], dtype=object)
    assert LogSummary(**fields, instance_labels=s.instance_labels, arm_labels=renamed) != built
    for labels, match in [
        (s.arm_labels[::-1], "sorted and unique"),
        (np.array(["a", "a", "b"], dtype=object), "sorted and unique"),
        (np.array(["", "a", "b"], dtype=object), "is empty"),
        (np.array([b"a", b"b", b"c"]), "integer array or array of strings"),
    ]:
        with pytest.raises(ValueError, match=match):
            LogSummary(**fields, instance_labels=s.instance_labels, arm_labels=labels)


def test_partial_from_arrays_checks_its_tables():
    y, X = np.ones(3), np.ones((3, 1))
    with pytest.raises(ValueError, match=r"codes of instance_labels must be in \[0, 2\)"):
        partial_from_arrays([0, 1, 2], [0, 0, 0], y, X, instance_labels=["a", "b"])
    with pytest.raises(TypeError, match="instance_labels must hold str"):
        partial_from_arrays(
            [0, 1, 0], [0, 0, 0], y, X, instance_labels=np.array(["a", 3], dtype=object)
        )


def test_resolve_columns_takes_text_id_columns():
    df = str_frame(10, 3)
    cols = resolve_columns(df.dtypes, **COLS)
    assert cols.instance == "user" and cols.arm == "arm"
    typed = df.astype({"user": "string", "arm": "category"}).dtypes
    assert resolve_columns(typed, **COLS).used == ["user", "arm", "r", "one", "x1"]
    with pytest.raises(TypeError, match=r"instance column 'user' must hold non-negative integer"):
        resolve_columns(df.assign(user=pd.Timestamp("2024-01-01")).dtypes, **COLS)
    with pytest.raises(TypeError, match=r"reward column 'r' must be numeric"):
        resolve_columns(df.assign(r="x").dtypes, **COLS)


def test_an_xarray_dataset_with_string_ids():
    df = str_frame(100, 4)
    ds = xr.Dataset({c: ("row", df[c].to_numpy()) for c in df.columns})
    assert read_log(ds, **COLS) == read_log(df, **COLS)
