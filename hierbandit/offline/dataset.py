"""Logged offline datasets D = {D_1, …, D_U}: one row per (user, action features, reward).

:class:`OfflineDataset` is what every offline algorithm fits on. It holds plain, read-only NumPy
arrays (user codes ``0..U−1``, the action features a ∈ ℝ^d of each logged interaction and its
reward), the number of users U — users may have no rows at all — and, for simulated data, the
truth (each user's preference vector θ_u and cluster label).

It converts to and from a tidy :class:`pandas.DataFrame` with a ``user`` column, a ``reward``
column and one column per feature (:meth:`OfflineDataset.to_frame`,
:meth:`OfflineDataset.from_frame`), and :func:`read_offline` reads a user's own table (a
DataFrame, a CSV/Parquet/netCDF file) through :func:`hierbandit.data.read_log`.

Every check happens when a dataset is built, and names the argument at fault: non-integer or
out-of-range user ids, a feature matrix of the wrong width, NaN or infinite features or rewards,
or values above ``hierbandit._validation.MAX_ABS`` = 1e100 in magnitude (the row is reported),
mismatched lengths, or truth of the wrong shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from hierbandit._validation import MAX_ABS, check_positive_int
from hierbandit.offline._core import user_suffstats
from hierbandit.stats.suffstats import SuffStats

__all__ = ["OfflineDataset", "as_offline_dataset", "read_offline"]


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


@dataclass(frozen=True, eq=False)
class OfflineDataset:
    """A validated logged dataset for offline clustering of bandits ([OFF] §3).

    Parameters
    ----------
    users : array_like of int, shape (n,)
        User code of each row, in ``[0, n_users)``.
    X : array_like, shape (n, d)
        Features a of the logged action of each row ([OFF] assumes ‖a‖₂ ≤ 1; not enforced).
    rewards : array_like, shape (n,)
        Observed reward of each row.
    n_users : int, optional
        Number of users U (default ``users.max() + 1``). Users without rows are allowed: the
        algorithms define their behaviour (infinite confidence radius, own-data-only decisions).
    features : sequence of str, optional
        Feature names (default ``x0, x1, …``).
    theta : array_like, shape (n_users, d), optional
        True preference vectors (simulated data).
    labels : array_like of int, shape (n_users,), optional
        True cluster of each user (simulated data).
    user_ids : array_like, shape (n_users,), optional
        Original user identifiers (e.g. MovieLens ``userId``); default ``0..U−1``.
    attrs : dict, optional
        Provenance (generator arguments, source).

    Examples
    --------
    >>> ds = OfflineDataset([0, 0, 2], [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], [0.5, -0.1, 0.2])
    >>> ds.n_users, ds.n_features, ds.counts.tolist()
    (3, 2, [2, 0, 1])
    """

    users: np.ndarray
    X: np.ndarray
    rewards: np.ndarray
    n_users: int | None = None
    features: tuple[str, ...] | None = None
    theta: np.ndarray | None = None
    labels: np.ndarray | None = None
    user_ids: np.ndarray | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        X = np.asarray(self.X)
        if X.dtype.kind not in "iuf":
            raise TypeError(f"X must be numeric, got dtype {X.dtype}")
        if X.ndim != 2:
            raise ValueError(f"X must have shape (n_rows, n_features), got {X.shape}")
        n, d = X.shape
        if d == 0:
            raise ValueError("X must have at least one feature column")
        X = X.astype(np.float64)
        bad = ~np.isfinite(X).all(axis=1)
        if bad.any():
            raise ValueError(f"X must be finite (no NaN or inf); row {_first_bad(bad)} is not")
        bad = (np.abs(X) > MAX_ABS).any(axis=1)
        if bad.any():
            raise ValueError(f"X must have magnitude <= {MAX_ABS:g}; row {_first_bad(bad)} has not")
        r = np.asarray(self.rewards)
        if r.dtype.kind not in "iuf":
            raise TypeError(f"rewards must be numeric, got dtype {r.dtype}")
        r = r.astype(np.float64)
        if r.shape != (n,):
            raise ValueError(f"rewards must have shape ({n},) to match X, got {r.shape}")
        bad = ~np.isfinite(r)
        if bad.any():
            raise ValueError(
                f"rewards must be finite (no NaN or inf); row {_first_bad(bad)} is not"
            )
        bad = np.abs(r) > MAX_ABS
        if bad.any():
            raise ValueError(
                f"rewards must have magnitude <= {MAX_ABS:g}; row {_first_bad(bad)} has not"
            )
        u = np.asarray(self.users)
        if u.shape != (n,):
            raise ValueError(f"users must have shape ({n},) to match X, got {u.shape}")
        if n and u.dtype.kind not in "iu":
            if u.dtype.kind == "f" and np.all(np.isfinite(u)) and np.all(u == np.round(u)):
                u = u.astype(np.int64)
            else:
                raise TypeError(f"users must hold integer ids, got dtype {u.dtype}")
        u = u.astype(np.int64)
        if n and u.min() < 0:
            raise ValueError(f"users must be non-negative, got {int(u.min())}")
        if self.n_users is None:
            if n == 0:
                raise ValueError("n_users is required for a dataset without rows")
            U = int(u.max()) + 1
        else:
            U = check_positive_int(self.n_users, "n_users")
            if n and u.max() >= U:
                raise ValueError(f"users must be in [0, {U}), got {int(u.max())}")
        if self.features is None:
            feats = tuple(f"x{k}" for k in range(d))
        else:
            feats = tuple(str(f) for f in self.features)
            if len(feats) != d:
                raise ValueError(f"features must name {d} columns, got {len(feats)}")
            if len(set(feats)) != d:
                raise ValueError(f"features must be distinct, got {list(feats)}")
            if {"user", "reward"} & set(feats):
                raise ValueError("features must not be named 'user' or 'reward'")
        theta = None
        if self.theta is not None:
            theta = np.asarray(self.theta, dtype=np.float64)
            if theta.shape != (U, d):
                raise ValueError(f"theta must have shape ({U}, {d}), got {theta.shape}")
            if not np.all(np.isfinite(theta)):
                raise ValueError("theta must be finite")
            theta = _readonly(theta)
        labels = None
        if self.labels is not None:
            labels = np.asarray(self.labels)
            if labels.shape != (U,) or (U and labels.dtype.kind not in "iu"):
                raise ValueError(
                    f"labels must be integer labels of shape ({U},), got {labels.shape} "
                    f"{labels.dtype}"
                )
            labels = _readonly(labels.astype(np.int64))
        ids = np.arange(U) if self.user_ids is None else np.asarray(self.user_ids)
        if ids.shape != (U,):
            raise ValueError(f"user_ids must have shape ({U},), got {ids.shape}")
        set_ = object.__setattr__
        set_(self, "X", _readonly(X))
        set_(self, "rewards", _readonly(r))
        set_(self, "users", _readonly(u))
        set_(self, "n_users", U)
        set_(self, "features", feats)
        set_(self, "theta", theta)
        set_(self, "labels", labels)
        set_(self, "user_ids", _readonly(ids.copy()))
        set_(self, "attrs", dict(self.attrs))

    # ------------------------------------------------------------------ sizes
    @property
    def n_rows(self) -> int:
        """Number of logged interactions ``|D|``."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Dimension d of the action features."""
        return int(self.X.shape[1])

    @property
    def counts(self) -> np.ndarray:
        """N_u, the number of rows of each user, shape (n_users,)."""
        return self.suffstats().n

    @property
    def gap(self) -> float | None:
        """The heterogeneity gap γ = min ‖θ_u − θ_v‖ over users in different clusters
        ([OFF] Definition 4.1), from the truth; ``None`` without ``theta`` and ``labels``."""
        if self.theta is None or self.labels is None:
            return None
        labs = np.unique(self.labels)
        if labs.size < 2:
            return None
        centres = np.stack([self.theta[self.labels == j][0] for j in labs])
        D = np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)
        return float(D[~np.eye(labs.size, dtype=bool)].min())

    def suffstats(self) -> SuffStats:
        """Per-user G = Σ a aᵀ, b = Σ r a, q = Σ r², N (computed once and cached; read-only)."""
        if "suff" not in self._cache:
            s = user_suffstats(self.users, self.X, self.rewards, self.n_users)
            for arr in s:
                arr.setflags(write=False)
            self._cache["suff"] = s
        return self._cache["suff"]

    # ------------------------------------------------------------------ conversions
    def to_frame(self) -> pd.DataFrame:
        """The tidy table: ``user`` (original id), ``reward`` and one column per feature."""
        df = pd.DataFrame(self.X, columns=list(self.features))
        df.insert(0, "reward", self.rewards)
        df.insert(0, "user", self.user_ids[self.users])
        df.attrs.update(self.attrs)
        return df

    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        *,
        user: str = "user",
        reward: str = "reward",
        features: Sequence[str] | None = None,
        n_users: int | None = None,
    ) -> OfflineDataset:
        """Build a dataset from a tidy table (see :func:`read_offline` for files and id coding).

        With ``n_users`` given, the ``user`` column must already hold codes in ``[0, n_users)``
        (so users without rows keep their code); otherwise ids are coded in sorted order.
        """
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
        if n_users is None:
            return read_offline(frame, user=user, reward=reward, features=features)
        for role, col in (("user", user), ("reward", reward)):
            if col not in frame.columns:
                raise ValueError(f"{role} column {col!r} not in the table {list(frame.columns)}")
        if features is None:
            features = [
                c
                for c in frame.columns
                if c not in (user, reward) and frame[c].dtype.kind in "biuf"
            ]
        missing = [f for f in features if f not in frame.columns]
        if missing:
            raise ValueError(f"features {missing} not in the table {list(frame.columns)}")
        return cls(
            frame[user].to_numpy(),
            frame[list(features)].to_numpy(dtype=np.float64),
            frame[reward].to_numpy(),
            n_users=n_users,
            features=tuple(str(f) for f in features),
            attrs=dict(frame.attrs),
        )

    def to_xarray(self) -> xr.Dataset:
        """Rows along ``row`` (``user``, ``reward``, ``X`` (row, feature)) plus the truth."""
        data: dict[str, Any] = {
            "user": ("row", self.users),
            "reward": ("row", self.rewards),
            "X": (("row", "feature"), self.X),
            "count": ("user_", self.counts),
        }
        if self.theta is not None:
            data["theta"] = (("user_", "feature"), self.theta)
        if self.labels is not None:
            data["cluster"] = ("user_", self.labels)
        return xr.Dataset(
            data,
            coords={"feature": list(self.features), "user_": np.arange(self.n_users)},
            attrs={k: v for k, v in self.attrs.items() if isinstance(v, str | int | float)},
        )

    def split(self, train_fraction: float = 0.5) -> tuple[OfflineDataset, OfflineDataset]:
        """The first ``train_fraction`` of the rows and the rest ([OFF] §6: first half trains)."""
        if not 0.0 < float(train_fraction) < 1.0:
            raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
        k = round(self.n_rows * float(train_fraction))
        return self.subset(slice(0, k)), self.subset(slice(k, self.n_rows))

    def subset(self, rows: Any) -> OfflineDataset:
        """The dataset restricted to ``rows`` (a slice, integer indices or a boolean mask)."""
        return OfflineDataset(
            self.users[rows],
            self.X[rows],
            self.rewards[rows],
            n_users=self.n_users,
            features=self.features,
            theta=self.theta,
            labels=self.labels,
            user_ids=self.user_ids,
            attrs=self.attrs,
        )

    def __repr__(self) -> str:
        truth = ", with truth" if self.theta is not None else ""
        return (
            f"OfflineDataset(n_rows={self.n_rows}, n_users={self.n_users}, "
            f"n_features={self.n_features}{truth})"
        )


def read_offline(
    data: Any,
    *,
    user: str = "user",
    reward: str = "reward",
    features: Sequence[str] | None = None,
) -> OfflineDataset:
    """Read a user's own logged table into an :class:`OfflineDataset`.

    Parameters
    ----------
    data : DataFrame, str, Path or xarray.Dataset
        One row per logged interaction: a user id column, a reward column and the features of
        the action taken. Files: ``.csv`` (optionally compressed), ``.parquet``/``.pq`` or
        ``.nc``. Read and validated by :func:`hierbandit.data.read_log` (as a single-arm log).
    user : str, default "user"
        Column of user ids (non-negative integers); they are coded ``0..U−1`` in sorted order and
        the originals kept in ``user_ids``.
    reward : str, default "reward"
        Column of rewards (finite numbers).
    features : sequence of str, optional
        Feature columns in order; default every other numeric column.

    Raises
    ------
    TypeError, ValueError
        Missing columns (with close matches suggested), non-numeric or non-finite values (NaN
        rewards included), non-integer ids, empty data.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"user": [10, 3, 10], "reward": [1.0, 0.0, 0.5],
    ...                    "a0": [1.0, 0.0, 0.6], "a1": [0.0, 1.0, 0.8]})
    >>> ds = read_offline(df)
    >>> ds.n_users, ds.user_ids.tolist(), ds.users.tolist()
    (2, [3, 10], [1, 0, 1])
    """
    from hierbandit.data.log import read_log

    if isinstance(data, OfflineDataset):
        return data
    log = read_log(data, instance=user, arm=None, reward=reward, features=features)
    return OfflineDataset(
        np.asarray(log.instance),
        np.asarray(log.X),
        np.asarray(log.y),
        n_users=log.n_instances,
        features=log.features,
        user_ids=np.asarray(log.instance_labels),
        attrs={"source": log.source, "data_hash": log.data_hash},
    )


def as_offline_dataset(data: Any, name: str = "data") -> OfflineDataset:
    """``data`` as an :class:`OfflineDataset` (a DataFrame or file is read by
    :func:`read_offline` with the default column names)."""
    if isinstance(data, OfflineDataset):
        return data
    if isinstance(data, pd.DataFrame | xr.Dataset | str) or hasattr(data, "__fspath__"):
        return read_offline(data)
    raise TypeError(
        f"{name} must be an OfflineDataset, a DataFrame or a path, got {type(data).__name__}"
    )
