"""LogSummary and the partial statistics of a log, without Dask (hierbandit.data.summary)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from hierbandit.data import (
    LogSummary,
    check_min_rows,
    check_summary_rows,
    combine_partials,
    partial_stats,
    read_log,
    summarise,
    summary_from_partial,
)
from hierbandit.data.summary import resolve_columns

COLS = {"instance": "user", "arm": "arm", "reward": "r", "features": ["one", "x1", "x2"]}


def frame(T: int = 3000, seed: int = 0) -> pd.DataFrame:
    g = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "user": g.choice(np.arange(30) * 11 + 5, T),
            "arm": g.integers(0, 3, T) * 2 + 1,
            "r": g.normal(size=T) * 3 + 1,
            "one": np.ones(T),
            "x1": g.normal(size=T),
            "x2": g.uniform(-2, 2, T),
        }
    )


def parts_of(df: pd.DataFrame, bounds) -> list:
    return [
        partial_stats(df.iloc[a:b], partition=i, **COLS)
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    ]


def test_the_partials_add_up_to_the_logs_statistics():
    df = frame()
    log = read_log(df, **COLS)
    whole = summarise(log)
    st = log.suffstats()
    for bounds in ([0, 3000], [0, 1, 700, 701, 2000, 3000], list(range(0, 3001, 250))):
        parts = parts_of(df, bounds)
        # a grouping out of order: the odd parts first, then the even ones in reverse
        odd, even = parts[1::2], parts[::2][::-1]
        total = combine_partials([combine_partials(odd), *even] if odd else even)
        s = summary_from_partial(total, features=COLS["features"], source="DataFrame")
        for a, b in zip(s.suffstats(), st, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        assert np.array_equal(s.n, st.n) and s.n.dtype == np.int64
        assert s.data_hash == whole.data_hash  # a hash of the rows: partitioning does not matter
        np.testing.assert_array_equal(s.instance_labels, log.instance_labels)
        np.testing.assert_array_equal(s.arm_labels, log.arm_labels)
    # the per-cell sums and the per-arm extremes
    for k, a in enumerate(log.arm_labels):
        rows = df[df.arm == a]
        assert whole.y_min[k] == rows.r.min() and whole.y_max[k] == rows.r.max()
        for j, u in enumerate(log.instance_labels):
            cell = rows[rows.user == u]
            np.testing.assert_allclose(whole.sum_y[k, j], cell.r.sum(), atol=1e-12)
            np.testing.assert_allclose(
                whole.sum_x[k, j], cell[COLS["features"]].sum().to_numpy(), atol=1e-12
            )
    assert whole.n_rows == 3000 and whole.n_features == 3 and whole.n_arms == 3
    assert whole.n_instances == 30


def test_the_hash_is_of_the_rows_as_a_multiset():
    df = frame(500)
    a = summarise(read_log(df, **COLS))
    b = summarise(read_log(df.sample(frac=1.0, random_state=1), **COLS))
    assert a.data_hash == b.data_hash  # row order does not matter
    assert a.data_hash != read_log(df, **COLS).data_hash  # not HistoricalLog's hash
    changed = df.copy()
    changed.loc[3, "x1"] += 1e-9
    assert summarise(read_log(changed, **COLS)).data_hash != a.data_hash
    assert a.provenance()["data_hash_of"] == "rows"
    # built from arrays, a summary hashes its statistics
    c = LogSummary(**{f: getattr(a, f) for f in _ARRAY_FIELDS}, features=a.features)
    assert c.provenance()["data_hash_of"] == "statistics" and c.data_hash != a.data_hash
    assert LogSummary(**{f: getattr(a, f) for f in _ARRAY_FIELDS}, features=a.features) == c


_ARRAY_FIELDS = (
    "G",
    "b",
    "q",
    "n",
    "sum_y",
    "sum_x",
    "y_min",
    "y_max",
    "instance_labels",
    "arm_labels",
)


def test_hive_style_categorical_ids_and_a_single_arm_log():
    df = frame(400)
    cat = df.assign(arm=df.arm.astype("category"))
    p = partial_stats(cat, **COLS)
    q = partial_stats(df, **COLS)
    assert np.array_equal(p.n, q.n) and p.fingerprint == q.fingerprint
    single = df.drop(columns="arm")
    s = summary_from_partial(
        partial_stats(single, **{**COLS, "arm": None}), features=COLS["features"], arm_column=None
    )
    log = read_log(single, **{**COLS, "arm": None})
    assert s.data_hash == summarise(log).data_hash
    np.testing.assert_allclose(s.G, log.suffstats().G, atol=1e-12)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda d: d.assign(r=d.r.where(d.index != 7)), ValueError, r"reward column 'r'.*NaN"),
        (
            lambda d: d.assign(user=d.user.astype(object).where(d.index != 5, "u5")),
            TypeError,
            r"instance column 'user' mixes string ids",
        ),
        (lambda d: d.assign(arm=d.arm - 2), ValueError, r"arm column 'arm'.*negative"),
        (lambda d: d.assign(x1=d.x1.where(d.index != 2, np.inf)), ValueError, r"'x1'.*inf"),
        (lambda d: d.assign(user=d.user + 0.5), TypeError, r"instance column 'user'.*integer"),
    ],
)
def test_a_part_is_validated_naming_the_column_and_the_partition(change, error, match):
    with pytest.raises(error, match=match) as info:
        partial_stats(change(frame(50)), partition=4, **COLS)
    assert "partition 4" in str(info.value)


def test_resolve_columns():
    dtypes = frame(5).assign(day=pd.Categorical(["a"] * 5)).dtypes
    cols = resolve_columns(dtypes, instance="user", reward="r")
    assert cols.arm == "arm" and cols.features == ("one", "x1", "x2")
    assert cols.ignored == (("day", "dtype category"),)
    assert cols.used == ["user", "arm", "r", "one", "x1", "x2"]
    with pytest.raises(ValueError, match=r"reward: column 'reward' not found.*'r'"):
        resolve_columns(dtypes, instance="user")
    with pytest.raises(ValueError, match=r"arm: column 'arms' not found"):
        resolve_columns(dtypes, instance="user", reward="r", arm="arms")
    with pytest.raises(TypeError, match=r"features: column 'day' must be numeric"):
        resolve_columns(
            frame(5).assign(day=["a"] * 5).dtypes, instance="user", reward="r", features=["day"]
        )
    with pytest.raises(ValueError, match="must not include the instance column"):
        resolve_columns(dtypes, instance="user", reward="r", features=["user"])
    single = resolve_columns(dtypes.drop("arm"), instance="user", reward="r")
    assert single.arm is None


def test_check_summary_rows_says_what_check_min_rows_says():
    df = frame(60)
    log = read_log(df, **COLS)
    s = summarise(log)
    kw = {"per_arm": 30, "instances_per_arm": 12, "min_rows_per_instance": 2, "method": "eb"}
    with pytest.raises(ValueError) as a:
        check_min_rows(log, **kw)
    with pytest.raises(ValueError) as b:
        check_summary_rows(s, **kw)
    assert str(a.value) == str(b.value)
    check_summary_rows(s, per_arm=1)
    with pytest.raises(TypeError, match="summary must be a LogSummary"):
        check_summary_rows(log, per_arm=1)


def test_an_empty_part_and_an_empty_log():
    df = frame(20)
    empty = partial_stats(df.iloc[:0], **COLS)
    assert empty.n_rows == 0 and empty.n_cells == 0
    total = combine_partials([empty, partial_stats(df, **COLS)])
    assert total.n_rows == 20
    with pytest.raises(ValueError, match="data is empty"):
        summary_from_partial(empty, features=COLS["features"])
    with pytest.raises(ValueError, match="at least one"):
        combine_partials([])


def _fields(s: LogSummary) -> dict:
    return {f: np.array(getattr(s, f)) for f in _ARRAY_FIELDS} | {"features": s.features}


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (lambda f: f.update(G=f["G"][:, :, :2]), ValueError, r"G must have shape"),
        (lambda f: f["n"].__setitem__((0, 0), -1), ValueError, "non-negative row counts"),
        (lambda f: f["b"].__setitem__((0, 0, 0), np.nan), ValueError, "b must be finite"),
        (lambda f: f.update(instance_labels=f["instance_labels"][::-1]), ValueError, "sorted"),
        (lambda f: f.update(arm_labels=f["arm_labels"][:2]), ValueError, "arm_labels must have 3"),
        (lambda f: f.update(features=("a", "a", "b")), ValueError, "features must be unique"),
        (lambda f: f.update(y_min=f["y_max"] + 1), ValueError, "y_min must not exceed"),
        (lambda f: f["q"].__setitem__((0, 0), -1.0), ValueError, "q .* non-negative"),
        (lambda f: f.update(n=f["n"].astype(float)), ValueError, "n must be a 2-D integer"),
        (lambda f: f.update(sum_y=f["sum_y"].astype(str)), TypeError, "sum_y must be numeric"),
        (lambda f: f.update(data_hash="0" * 64), ValueError, "data_hash does not match"),
        (lambda f: f["G"].__setitem__((0, 0, 0, 1), 5.0), ValueError, "symmetric"),
    ],
)
def test_a_summary_validates_its_arrays(edit, error, match):
    f = _fields(summarise(read_log(frame(300), **COLS)))
    LogSummary(**f)
    edit(f)
    with pytest.raises(error, match=match):
        LogSummary(**f)


def test_empty_cells_must_hold_no_sums():
    f = _fields(summarise(read_log(frame(40), **COLS)))
    k, j = np.argwhere(f["n"] == 0)[0]
    f["sum_y"][k, j] = 1.0
    with pytest.raises(ValueError, match="sum_y must be zero in the cells without rows"):
        LogSummary(**f)
    s = summarise(read_log(frame(40), **COLS))
    with pytest.raises(ValueError):
        s.G[0, 0, 0, 0] = 1.0  # read-only
    st = s.suffstats()
    st.G[0, 0, 0, 0] = 1.0  # a copy
    assert s.G[0, 0, 0, 0] != 1.0 or st.G is not s.G
