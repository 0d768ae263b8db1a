"""A historical log reduced to its sufficient statistics: everything a prior fit needs after the rows.

A log too large for memory is never held as rows. Its rows are read a part at a time (by Dask,
:func:`hierbandit.bayes.outofcore.summarise_dask`, or by any loop over chunks), each part is
reduced to a small :class:`PartialStats` by :func:`partial_stats`, the parts are added up by
:func:`combine_partials` (in any grouping and order), and :func:`summary_from_partial` turns the
total into a :class:`LogSummary`: per-(arm, instance) Gaussian sufficient statistics and the few
other sums the fits and their checks use. :func:`summarise` builds the same summary from a
:class:`~hierbandit.data.HistoricalLog` in memory.

This module is plain NumPy and pandas: the numerics of the out-of-core path are tested without
Dask, and nothing here imports it.

What a part holds
-----------------
Only the cells (arm, instance pairs, by their original ids) that occur in the part, each with its
row count and the sums Σy, Σy², Σx, Σxxᵀ (upper triangle) and Σxy; per arm the smallest and
largest reward; the number of rows; and an order-independent fingerprint of the rows. Its size is
the number of distinct cells of the part, never a dense (K, N, d, d) array. String ids are held
as the table of the distinct strings of the part and integer codes into it; adding parts merges
the tables by the strings themselves (exactly: no string is ever replaced by a hash of it).

The hash
--------
``LogSummary.data_hash`` identifies the **rows** the summary was computed from, as a multiset:
each row (instance id, arm id, reward, features, as int64 / float64, ``-0.0`` as ``0.0``; a
string id as the 64-bit hash of its UTF-8 bytes, :func:`pandas.util.hash_array`) is hashed to 64
bits with :func:`pandas.util.hash_pandas_object`, and the sums of the hashes and of their squares
(modulo 2⁶⁴) are the fingerprint; the digest is a SHA-256 over a version tag, the number of rows,
the feature names, which id columns hold strings (only when some do, so that a summary of integer
ids hashes as it did before string ids existed) and that fingerprint. It therefore does not depend on how the
rows are partitioned, in which order the parts are added up, nor on the rounding of the
floating-point sums, so the same data give the same hash on every run, from Dask or in memory.
It differs from :attr:`HistoricalLog.data_hash <hierbandit.data.HistoricalLog>`, which hashes the
rows in order. A summary built directly from arrays (no rows seen, ``rows_fingerprint`` empty)
hashes its statistics instead (their bytes, with the labels and feature names);
``provenance()["data_hash_of"]`` says which of the two a hash is.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hierbandit.data.log import (
    HistoricalLog,
    _check_column_name,
    _check_counts,
    _check_features_arg,
    _check_labels,
    _check_listed_features,
    _decategorise,
    _hash_str_labels,
    _id_codes,
    _is_text_dtype,
    _missing_column,
    _no_features_error,
    _numeric,
    label_kind,
)
from hierbandit.stats.suffstats import SuffStats

__all__ = [
    "LogColumns",
    "LogSummary",
    "PartialStats",
    "check_summary_rows",
    "combine_partials",
    "partial_from_arrays",
    "partial_stats",
    "resolve_columns",
    "summarise",
    "summary_from_partial",
]

_TAG_ROWS = b"hierbandit.LogSummary/rows/v1\x00"
_TAG_STATS = b"hierbandit.LogSummary/statistics/v1\x00"
_MOD = 1 << 64


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr


def _upper(d: int) -> list[tuple[int, int]]:
    """The (i, j), i <= j, entries of a symmetric d×d matrix, row by row."""
    return [(i, j) for i in range(d) for j in range(i, d)]


# ---------------------------------------------------------------------- the summary


@dataclass(frozen=True, eq=False)
class LogSummary:
    """A historical log as the sufficient statistics every prior fit needs.

    Built by :func:`summary_from_partial` (from the rows, a part at a time; what
    :func:`hierbandit.bayes.outofcore.summarise_dask` returns), by :func:`summarise` (from a
    :class:`~hierbandit.data.HistoricalLog`), or directly from arrays. ``fit_prior`` accepts it
    in place of a log.

    Parameters
    ----------
    G : ndarray, shape (K, N, d, d)
        Σxxᵀ over the rows of each (arm, instance) cell.
    b : ndarray, shape (K, N, d)
        Σxy per cell.
    q : ndarray, shape (K, N)
        Σy² per cell (non-negative).
    n : ndarray, shape (K, N), int64
        Rows per cell (non-negative); a cell without rows has all its sums zero.
    sum_y : ndarray, shape (K, N)
        Σy per cell (the observed mean reward of a cell is ``sum_y / n``).
    sum_x : ndarray, shape (K, N, d)
        Σx per cell.
    y_min, y_max : ndarray, shape (K,)
        The smallest and largest reward of each arm (so that a constant arm is recognised
        exactly).
    instance_labels : ndarray, shape (N,), int64
        The original instance ids, sorted and unique; every instance has rows in some arm.
    arm_labels : ndarray, shape (K,), int64
        The original arm ids, sorted and unique; every arm has rows.
    features : tuple of str
        The feature names, one per column of ``x``.
    instance_column, arm_column, reward_column : str
        The column names read (``arm_column`` is ``None`` for a single-arm log).
    source : str
        Where the rows came from (a directory, ``"dask.DataFrame"``, a file…).
    ignored_columns : tuple of (str, str)
        Columns left out when the features were inferred, each with the reason.
    rows_fingerprint : str
        The order-independent fingerprint of the rows (32 hex digits), or ``""`` when the
        summary was built from statistics alone.
    data_hash : str
        SHA-256 hex digest: of the rows (through ``rows_fingerprint``) when it is known, else of
        the statistics (see the module's notes). Computed when left empty; a given value must
        match.

    Notes
    -----
    ``n_rows``, ``n_instances``, ``n_arms`` and ``n_features`` follow from the arrays. The arrays
    are read-only. Two summaries compare equal when they have the same hash and the same
    arrays.
    """

    G: np.ndarray
    b: np.ndarray
    q: np.ndarray
    n: np.ndarray
    sum_y: np.ndarray
    sum_x: np.ndarray
    y_min: np.ndarray
    y_max: np.ndarray
    instance_labels: np.ndarray
    arm_labels: np.ndarray
    features: tuple[str, ...]
    instance_column: str = "instance"
    arm_column: str | None = "arm"
    reward_column: str = "reward"
    source: str = "statistics"
    ignored_columns: tuple[tuple[str, str], ...] = ()
    rows_fingerprint: str = ""
    data_hash: str = ""

    def __post_init__(self) -> None:
        n = np.asarray(self.n)
        if n.ndim != 2 or n.dtype.kind not in "iu":
            raise ValueError(
                f"n must be a 2-D integer array (arms, instances), got shape {n.shape}, "
                f"dtype {n.dtype}"
            )
        n = n.astype(np.int64)
        K, N = n.shape
        if K == 0 or N == 0:
            raise ValueError(f"n must have at least one arm and one instance, got shape {n.shape}")
        if np.any(n < 0):
            raise ValueError("n must hold non-negative row counts")
        features = tuple(str(f) for f in self.features)
        d = len(features)
        if d == 0:
            raise ValueError("features must name at least one feature")
        if len(set(features)) != d:
            raise ValueError(f"features must be unique, got {list(features)}")
        arrays: dict[str, np.ndarray] = {}
        for name, shape in (
            ("G", (K, N, d, d)),
            ("b", (K, N, d)),
            ("q", (K, N)),
            ("sum_y", (K, N)),
            ("sum_x", (K, N, d)),
            ("y_min", (K,)),
            ("y_max", (K,)),
        ):
            a = np.asarray(getattr(self, name))
            if a.dtype.kind not in "biuf":
                raise TypeError(f"{name} must be numeric, got dtype {a.dtype}")
            if a.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
            a = a.astype(np.float64)
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{name} must be finite (no NaN or inf)")
            arrays[name] = a
        G = arrays["G"]
        if not np.allclose(G, np.swapaxes(G, -1, -2), rtol=1e-12, atol=0.0):
            raise ValueError("G must be symmetric in its last two axes")
        if np.any(arrays["q"] < 0):
            raise ValueError("q (the sums of squared rewards) must be non-negative")
        empty = n == 0
        for name in ("G", "b", "q", "sum_y", "sum_x"):
            if np.any(arrays[name][empty]):
                raise ValueError(f"{name} must be zero in the cells without rows (n == 0)")
        if np.any(arrays["y_min"] > arrays["y_max"]):
            raise ValueError("y_min must not exceed y_max")
        labels = {}
        for name, size in (("instance_labels", N), ("arm_labels", K)):
            lab = np.asarray(getattr(self, name))
            if lab.ndim != 1 or lab.dtype.kind not in "iuOU":
                raise ValueError(f"{name} must be a 1-D integer array or array of strings")
            if lab.size != size:
                raise ValueError(
                    f"{name} must have {size} entries (the shape of n), got {lab.size}"
                )
            lab = _check_labels(lab, name)
            if lab.dtype.kind != "O" and np.any(lab < 0):
                raise ValueError(f"{name} must be non-negative ids")
            labels[name] = lab
        if np.any(n.sum(axis=1) == 0):
            raise ValueError("every arm must have rows (n.sum(axis=1) > 0)")
        if np.any(n.sum(axis=0) == 0):
            raise ValueError("every instance must have rows in some arm (n.sum(axis=0) > 0)")
        fp = str(self.rows_fingerprint)
        if fp and not re.fullmatch(r"[0-9a-f]{32}", fp):
            raise ValueError(f"rows_fingerprint must be empty or 32 hex digits, got {fp!r}")
        for name in ("instance_column", "reward_column", "source"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a str")
        if self.arm_column is not None and not isinstance(self.arm_column, str):
            raise TypeError("arm_column must be a str or None")
        values = {
            "n": n,
            **arrays,
            **labels,
            "features": features,
            "rows_fingerprint": fp,
            "ignored_columns": tuple((str(c), str(r)) for c, r in self.ignored_columns),
        }
        digest = _summary_hash(values, int(n.sum()))
        if self.data_hash and self.data_hash != digest:
            raise ValueError("data_hash does not match the summary")
        for name, value in values.items():
            if isinstance(value, np.ndarray):
                value = _readonly(value)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "data_hash", digest)

    # ------------------------------------------------------------------ sizes
    @property
    def n_rows(self) -> int:
        """Number of rows the statistics sum over."""
        return int(self.n.sum())

    @property
    def n_instances(self) -> int:
        """Number of distinct instances ``N``."""
        return int(self.instance_labels.size)

    @property
    def n_arms(self) -> int:
        """Number of distinct arms ``K``."""
        return int(self.arm_labels.size)

    @property
    def n_features(self) -> int:
        """Number of features ``d``."""
        return len(self.features)

    # ------------------------------------------------------------------ views
    def suffstats(self) -> SuffStats:
        """Per-(arm, instance) sufficient statistics, as :meth:`HistoricalLog.suffstats
        <hierbandit.data.HistoricalLog.suffstats>` returns them (writable copies)."""
        return SuffStats(self.G.copy(), self.b.copy(), self.q.copy(), self.n.copy())

    @property
    def id_kinds(self) -> dict[str, str]:
        """What the ids are, per column: ``{"instance": "int" or "str", "arm": ...}``."""
        return {"instance": label_kind(self.instance_labels), "arm": label_kind(self.arm_labels)}

    def provenance(self) -> dict[str, Any]:
        """A JSON-serialisable record of where the log came from and what it holds, with the
        keys of :meth:`HistoricalLog.provenance <hierbandit.data.HistoricalLog.provenance>` and
        ``data_hash_of`` (``"rows"`` or ``"statistics"``)."""
        return {
            "source": self.source,
            "data_hash": self.data_hash,
            "data_hash_of": "rows" if self.rows_fingerprint else "statistics",
            "n_rows": self.n_rows,
            "n_instances": self.n_instances,
            "n_arms": self.n_arms,
            "n_features": self.n_features,
            "ids": self.id_kinds,
            "features": list(self.features),
            "ignored_columns": dict(self.ignored_columns),
            "columns": {
                "instance": self.instance_column,
                "arm": self.arm_column,
                "reward": self.reward_column,
                "features": list(self.features),
            },
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LogSummary):
            return NotImplemented
        return (
            self.data_hash == other.data_hash
            and self.features == other.features
            and all(
                np.array_equal(getattr(self, a), getattr(other, a))
                for a in (
                    "n",
                    "G",
                    "b",
                    "q",
                    "sum_y",
                    "sum_x",
                    "y_min",
                    "y_max",
                    "instance_labels",
                    "arm_labels",
                )
            )
        )

    def __hash__(self) -> int:
        return hash(self.data_hash)

    def __repr__(self) -> str:
        return (
            f"LogSummary(n_rows={self.n_rows}, n_instances={self.n_instances}, "
            f"n_arms={self.n_arms}, features={list(self.features)}, source={self.source!r}, "
            f"data_hash={self.data_hash[:12]}…)"
        )


def _summary_hash(values: dict[str, Any], n_rows: int) -> str:
    """The digest of the module's notes: of the rows' fingerprint when known, else of the
    statistics (version tag, a JSON header, then every array as little-endian bytes)."""
    features = list(values["features"])
    kinds = {
        "instance": label_kind(values["instance_labels"]),
        "arm": label_kind(values["arm_labels"]),
    }
    # the header names the kinds of ids only when some are strings: a summary of integer ids
    # hashes exactly as before string ids existed
    ids = {"ids": kinds} if "str" in kinds.values() else {}
    if values["rows_fingerprint"]:
        h = hashlib.sha256(_TAG_ROWS)
        header = {
            "n_rows": n_rows,
            "features": features,
            "rows": values["rows_fingerprint"],
            **ids,
        }
        h.update(json.dumps(header, sort_keys=True, ensure_ascii=True).encode("ascii"))
        return h.hexdigest()
    h = hashlib.sha256(_TAG_STATS)
    header = {"n_rows": n_rows, "features": features, "shape": list(values["n"].shape), **ids}
    h.update(json.dumps(header, sort_keys=True, ensure_ascii=True).encode("ascii"))
    h.update(b"\x00")
    for name in ("instance_labels", "arm_labels", "n"):
        if values[name].dtype.kind == "O":
            _hash_str_labels(h, values[name])
        else:
            h.update(np.ascontiguousarray(values[name], dtype="<i8").tobytes())
    for name in ("G", "b", "q", "sum_y", "sum_x", "y_min", "y_max"):
        h.update((np.ascontiguousarray(values[name], dtype="<f8") + 0.0).tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------- partial statistics


@dataclass(eq=False)
class PartialStats:
    """The statistics of some of a log's rows, by original ids, for the cells that occur.

    ``sums`` (C, m) holds per cell, in this order: Σy, Σy², Σx (d), Σxxᵀ (the d(d+1)/2 entries
    i <= j, row by row), Σxy (d). ``n`` (C,) the rows per cell; ``arm_ids`` (A,) the arms of
    the part with their smallest and largest reward ``y_min``, ``y_max``; ``fingerprint`` the
    two sums (mod 2⁶⁴) of the rows' hashes and of their squares. The cells (``arm``,
    ``instance``) are unique; so are ``arm_ids``.

    Integer ids are held as themselves (int64). String ids are held as a table of the distinct
    strings of the part (``instance_labels`` / ``arm_labels``: object arrays of ``str``, in no
    particular order, each id once) and int64 codes into it in ``instance``, ``arm`` and
    ``arm_ids``; the table is ``None`` for integer ids. :func:`combine_partials` merges the
    tables exactly (by the strings themselves, never by a hash of them), and
    :func:`summary_from_partial` sorts them once. ``id_columns`` names the instance and arm
    columns, for messages.
    """

    arm: np.ndarray
    instance: np.ndarray
    n: np.ndarray
    sums: np.ndarray
    arm_ids: np.ndarray
    y_min: np.ndarray
    y_max: np.ndarray
    n_rows: int
    n_features: int
    fingerprint: tuple[int, int]
    instance_labels: np.ndarray | None = None
    arm_labels: np.ndarray | None = None
    id_columns: tuple[str, str | None] = ("instance", "arm")

    @property
    def n_cells(self) -> int:
        """Number of distinct (arm, instance) cells."""
        return int(self.n.size)

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (a string id counts its characters and a pointer)."""
        strings = sum(
            8 * t.size + sum(map(len, t))
            for t in (self.instance_labels, self.arm_labels)
            if t is not None
        )
        return (
            sum(a.nbytes for a in (self.arm, self.instance, self.n, self.sums, self.arm_ids))
            + 2 * self.y_min.nbytes
            + strings
        )


def _group(arm: np.ndarray, inst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cell code per row, and each cell's (arm id, instance id); ids are non-negative int64."""
    if arm.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    amax, imax = int(arm.max()), int(inst.max())
    if (amax + 1) * (imax + 1) < 2**62:
        key = arm * np.int64(imax + 1) + inst
        codes, uniq = pd.factorize(key, sort=False)
        uniq = np.asarray(uniq, dtype=np.int64)
        return codes.astype(np.int64), uniq // (imax + 1), uniq % (imax + 1)
    codes, uniq = pd.MultiIndex.from_arrays([arm, inst]).factorize(sort=False)
    return (
        codes.astype(np.int64),
        np.asarray(uniq.get_level_values(0), dtype=np.int64),
        np.asarray(uniq.get_level_values(1), dtype=np.int64),
    )


def _label_hashes(labels: np.ndarray | None) -> np.ndarray | None:
    """64-bit hashes of string ids (:func:`pandas.util.hash_array` of the strings' UTF-8 bytes,
    with pandas' fixed key: the same in every process and run)."""
    if labels is None:
        return None
    if labels.size == 0:
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_array(np.asarray(labels, dtype=object), categorize=False)


def _fingerprint(
    inst: np.ndarray,
    arm: np.ndarray,
    y: np.ndarray,
    X: np.ndarray,
    inst_hash: np.ndarray | None = None,
    arm_hash: np.ndarray | None = None,
) -> tuple[int, int]:
    """The two sums of the rows' 64-bit hashes. A row's ids enter as themselves (int64), or, for
    string ids, as the 64-bit hash of the string (``*_hash[code]``, uint64)."""
    cols: dict[str, np.ndarray] = {
        "i": inst if inst_hash is None else inst_hash[inst],
        "a": arm if arm_hash is None else arm_hash[arm],
        "y": y + 0.0,
    }
    for j in range(X.shape[1]):
        cols[f"x{j}"] = X[:, j] + 0.0
    h = pd.util.hash_pandas_object(pd.DataFrame(cols, copy=False), index=False).to_numpy()
    h = h.astype(np.uint64, copy=False)
    return int(h.sum(dtype=np.uint64)), int((h * h).sum(dtype=np.uint64))


def _label_table(labels: Any, codes: np.ndarray, name: str) -> np.ndarray | None:
    """Check a table of string ids given to :func:`partial_from_arrays` with its codes."""
    if labels is None:
        return None
    table = np.asarray(labels)
    if table.ndim != 1 or table.dtype.kind not in "OU":
        raise ValueError(f"{name} must be a 1-D array of strings or None")
    values = table.tolist()
    if not set(map(type, values)) <= {str}:
        values = [str(v) if isinstance(v, str) else v for v in values]
        if not all(type(v) is str for v in values):
            raise TypeError(f"{name} must hold str")
    out = np.empty(len(values), dtype=object)
    out[:] = values
    if codes.size and (codes.min() < 0 or codes.max() >= out.size):
        raise ValueError(f"the codes of {name} must be in [0, {out.size})")
    return out


def partial_from_arrays(
    instance_ids: np.ndarray,
    arm_ids: np.ndarray,
    y: np.ndarray,
    X: np.ndarray,
    *,
    instance_labels: Any = None,
    arm_labels: Any = None,
    id_columns: tuple[str, str | None] = ("instance", "arm"),
) -> PartialStats:
    """The :class:`PartialStats` of validated rows: non-negative int64 ids (T,), finite float64
    rewards (T,) and features (T, d).

    For string ids, pass the table of distinct strings as ``instance_labels`` / ``arm_labels``
    (each id once, any order) and the rows' codes into it as ``instance_ids`` / ``arm_ids``.
    """
    inst = np.ascontiguousarray(instance_ids, dtype=np.int64)
    arm = np.ascontiguousarray(arm_ids, dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    inst_table = _label_table(instance_labels, inst, "instance_labels")
    arm_table = _label_table(arm_labels, arm, "arm_labels")
    T, d = X.shape
    codes, cell_arm, cell_inst = _group(arm, inst)
    C = cell_arm.size
    cols = [y, y * y]
    cols += [X[:, i] for i in range(d)]
    cols += [X[:, i] * X[:, j] for i, j in _upper(d)]
    cols += [X[:, i] * y for i in range(d)]
    sums = np.empty((C, len(cols)))
    for c, w in enumerate(cols):
        sums[:, c] = np.bincount(codes, weights=w, minlength=C)
    n = np.bincount(codes, minlength=C).astype(np.int64)
    if T:
        by_arm = pd.Series(y, copy=False).groupby(arm, sort=True)
        lo, hi = by_arm.min(), by_arm.max()
        arm_set = lo.index.to_numpy(dtype=np.int64)
        y_min, y_max = lo.to_numpy(dtype=np.float64), hi.to_numpy(dtype=np.float64)
    else:
        arm_set = np.zeros(0, dtype=np.int64)
        y_min = y_max = np.zeros(0)
    fingerprint = (0, 0)
    if T:
        fingerprint = _fingerprint(
            inst, arm, y, X, _label_hashes(inst_table), _label_hashes(arm_table)
        )
    return PartialStats(
        arm=cell_arm,
        instance=cell_inst,
        n=n,
        sums=sums,
        arm_ids=arm_set,
        y_min=y_min,
        y_max=y_max,
        n_rows=int(T),
        n_features=int(d),
        fingerprint=fingerprint,
        instance_labels=inst_table,
        arm_labels=arm_table,
        id_columns=id_columns,
    )


def partial_stats(
    frame: pd.DataFrame,
    *,
    instance: str,
    arm: str | None,
    reward: str,
    features: Sequence[str],
    partition: int | None = None,
) -> PartialStats:
    """Validate one part of a log and reduce it to its :class:`PartialStats`.

    Parameters
    ----------
    frame : DataFrame
        Some rows of the log; a categorical column (how a hive partition key is read back) is
        taken as its categories' values.
    instance, arm, reward, features
        The column names, as resolved by :func:`resolve_columns` (``arm=None``: one arm, id 0).
    partition : int, optional
        The part's number, added to error messages (rows are then counted within the part).

    Raises
    ------
    ValueError, TypeError
        As :func:`~hierbandit.data.read_log` does, naming the column: ids that are neither
        non-negative integers nor strings (or a column that mixes them), rewards or features
        that are not finite numbers.
    """
    try:
        inst_ids, inst_labels = _part_ids(frame[instance], instance, "instance")
        arm_labels = None
        if arm is not None:
            arm_ids, arm_labels = _part_ids(frame[arm], arm, "arm")
        else:
            arm_ids = np.zeros(len(frame), dtype=np.int64)
        y = _numeric(_decategorise(frame[reward]), reward, "reward")
        X = np.empty((len(frame), len(features)))
        for j, f in enumerate(features):
            X[:, j] = _numeric(_decategorise(frame[f]), f, "feature")
    except (TypeError, ValueError) as exc:
        if partition is None:
            raise
        raise type(exc)(f"{exc} (in partition {partition}; rows counted within it)") from None
    return partial_from_arrays(
        inst_ids,
        arm_ids,
        y,
        X,
        instance_labels=inst_labels,
        arm_labels=arm_labels,
        id_columns=(instance, arm),
    )


def _part_ids(series: pd.Series, column: str, role: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The ids of one part: :func:`~hierbandit.data.log._id_codes` (string ids unsorted: they are
    sorted once, in :func:`summary_from_partial`); an empty part of a text column holds string
    ids, none of them."""
    if len(series) == 0 and _is_text_dtype(series.dtype):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
    return _id_codes(series, column, role, sort=False)


def _merge_tables(
    parts: list[PartialStats], attr: str, role: str
) -> tuple[list[np.ndarray] | None, np.ndarray | None]:
    """Merge the string-id tables ``attr`` of ``parts``: for each part the map from its codes to
    the merged table's, and the merged table (each string once, in order of first appearance);
    ``(None, None)`` for integer ids. Exact: the strings are matched by value (a hash table
    resolves collisions by comparing them), not by a hash of them.

    Raises
    ------
    TypeError
        Naming the column: some parts (with rows) hold string ids and others integer ids.
    """
    live = [i for i, p in enumerate(parts) if p.n_cells]
    strings = [i for i in live if getattr(parts[i], attr) is not None]
    if not strings:
        return None, None
    if len(strings) != len(live):
        ints = next(i for i in live if getattr(parts[i], attr) is None)
        column = parts[strings[0]].id_columns[0 if role == "instance" else 1]
        raise TypeError(
            f"{role} column {column!r} holds string ids in some parts of the log and integer "
            f"ids in others (parts {strings[0]} and {ints} of this combination); the ids of a "
            "column must be all non-negative integers or all strings"
        )
    empty = np.zeros(0, dtype=object)
    tables = [getattr(p, attr) if getattr(p, attr) is not None else empty for p in parts]
    codes, uniques = pd.factorize(np.concatenate(tables), sort=False)
    bounds = np.cumsum([0] + [t.size for t in tables])
    maps = [np.asarray(codes[bounds[i] : bounds[i + 1]], dtype=np.int64) for i in range(len(parts))]
    return maps, np.asarray(uniques, dtype=object)


def combine_partials(parts: Sequence[PartialStats]) -> PartialStats:
    """Add up the statistics of disjoint sets of rows (any grouping, any order).

    The cells of the result are unique; the sums of a cell are added in the order of ``parts``.
    String ids are matched by value across the parts (their tables merged exactly); a column
    whose ids are strings in some parts and integers in others is refused (``TypeError``).
    """
    parts = list(parts)
    if not parts:
        raise ValueError("parts must hold at least one PartialStats")
    d = parts[0].n_features
    for p in parts:
        if not isinstance(p, PartialStats):
            raise TypeError(f"parts must hold PartialStats, got {type(p).__name__}")
        if p.n_features != d:
            raise ValueError(f"parts disagree on the number of features ({p.n_features} vs {d})")
    if len(parts) == 1:
        return parts[0]
    inst_maps, inst_table = _merge_tables(parts, "instance_labels", "instance")
    arm_maps, arm_table = _merge_tables(parts, "arm_labels", "arm")

    def ids(attr: str, maps: list[np.ndarray] | None) -> np.ndarray:
        if maps is None:
            return np.concatenate([getattr(p, attr) for p in parts])
        return np.concatenate([m[getattr(p, attr)] for p, m in zip(parts, maps, strict=True)])

    arm = ids("arm", arm_maps)
    inst = ids("instance", inst_maps)
    codes, cell_arm, cell_inst = _group(arm, inst)
    C = cell_arm.size
    stacked = np.concatenate([p.sums for p in parts])
    sums = np.empty((C, stacked.shape[1]))
    for c in range(stacked.shape[1]):
        sums[:, c] = np.bincount(codes, weights=stacked[:, c], minlength=C)
    # counts below 2**53 are exact in float64
    counts = np.concatenate([p.n for p in parts]).astype(np.float64)
    n = np.rint(np.bincount(codes, weights=counts, minlength=C)).astype(np.int64)
    arm_set, where = np.unique(ids("arm_ids", arm_maps), return_inverse=True)
    y_min = np.full(arm_set.size, np.inf)
    y_max = np.full(arm_set.size, -np.inf)
    np.minimum.at(y_min, where, np.concatenate([p.y_min for p in parts]))
    np.maximum.at(y_max, where, np.concatenate([p.y_max for p in parts]))
    return PartialStats(
        arm=cell_arm,
        instance=cell_inst,
        n=n,
        sums=sums,
        arm_ids=arm_set.astype(np.int64),
        y_min=y_min,
        y_max=y_max,
        n_rows=sum(p.n_rows for p in parts),
        n_features=d,
        fingerprint=(
            sum(p.fingerprint[0] for p in parts) % _MOD,
            sum(p.fingerprint[1] for p in parts) % _MOD,
        ),
        instance_labels=inst_table,
        arm_labels=arm_table,
        id_columns=parts[0].id_columns,
    )


def _final_labels(
    table: np.ndarray | None, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The sorted labels of the ids that occur in ``ids`` (the cells' ids or codes), the
    cells' codes into them, and for string ids the map from table codes to them."""
    if table is None:
        labels, codes = np.unique(ids, return_inverse=True)
        return labels.astype(np.int64), codes.reshape(-1), None
    used = np.flatnonzero(np.bincount(ids, minlength=table.size) > 0)
    present = table[used].tolist()
    order = np.array(sorted(range(len(present)), key=present.__getitem__), dtype=np.int64)
    remap = np.full(table.size, -1, dtype=np.int64)
    remap[used[order]] = np.arange(order.size)
    labels = np.empty(order.size, dtype=object)
    labels[:] = [present[i] for i in order]
    return labels, remap[ids], remap


def summary_from_partial(
    part: PartialStats,
    *,
    features: Sequence[str],
    instance_column: str = "instance",
    arm_column: str | None = "arm",
    reward_column: str = "reward",
    source: str = "statistics",
    ignored_columns: Sequence[tuple[str, str]] = (),
) -> LogSummary:
    """The :class:`LogSummary` of the statistics of a whole log (dense over its arms and
    instances, labels sorted as :func:`~hierbandit.data.read_log` codes them).

    Raises
    ------
    ValueError
        ``part`` holds no rows (the log is empty), or ``features`` does not match it.
    """
    if not isinstance(part, PartialStats):
        raise TypeError(f"part must be a PartialStats, got {type(part).__name__}")
    if part.n_rows == 0:
        raise ValueError("data is empty (0 rows)")
    features = tuple(features)
    d = part.n_features
    if len(features) != d:
        raise ValueError(f"features must name the {d} features of the statistics, got {features}")
    inst_labels, ic, _ = _final_labels(part.instance_labels, part.instance)
    arm_labels, ac, arm_remap = _final_labels(part.arm_labels, part.arm)
    K, N = arm_labels.size, inst_labels.size
    n = np.zeros((K, N), dtype=np.int64)
    n[ac, ic] = part.n
    s = part.sums
    sum_y = np.zeros((K, N))
    sum_y[ac, ic] = s[:, 0]
    q = np.zeros((K, N))
    q[ac, ic] = s[:, 1]
    sum_x = np.zeros((K, N, d))
    sum_x[ac, ic] = s[:, 2 : 2 + d]
    G = np.zeros((K, N, d, d))
    for c, (i, j) in enumerate(_upper(d)):
        G[ac, ic, i, j] = s[:, 2 + d + c]
        G[ac, ic, j, i] = s[:, 2 + d + c]
    b = np.zeros((K, N, d))
    b[ac, ic] = s[:, 2 + d + d * (d + 1) // 2 :]
    pos = (
        np.searchsorted(arm_labels, part.arm_ids) if arm_remap is None else arm_remap[part.arm_ids]
    )
    y_min = np.zeros(K)
    y_max = np.zeros(K)
    y_min[pos], y_max[pos] = part.y_min, part.y_max
    fp = f"{part.fingerprint[0] % _MOD:016x}{part.fingerprint[1] % _MOD:016x}"
    return LogSummary(
        G=G,
        b=b,
        q=q,
        n=n,
        sum_y=sum_y,
        sum_x=sum_x,
        y_min=y_min,
        y_max=y_max,
        instance_labels=inst_labels,
        arm_labels=arm_labels,
        features=features,
        instance_column=instance_column,
        arm_column=arm_column,
        reward_column=reward_column,
        source=source,
        ignored_columns=tuple(ignored_columns),
        rows_fingerprint=fp,
    )


def summarise(log: HistoricalLog) -> LogSummary:
    """The :class:`LogSummary` of an in-memory log (the same statistics, hash and labels that the
    out-of-core path computes from the same rows, up to the order of the floating-point sums).
    """
    if not isinstance(log, HistoricalLog):
        raise TypeError(f"log must be a HistoricalLog, got {type(log).__name__}")
    ids, tables = {}, {}
    for name in ("instance", "arm"):
        labels, codes = getattr(log, f"{name}_labels"), getattr(log, name)
        if labels.dtype.kind == "O":  # string ids: the codes and the table, no per-row strings
            ids[name], tables[name] = codes, labels
        else:
            ids[name], tables[name] = labels[codes], None
    part = partial_from_arrays(
        ids["instance"],
        ids["arm"],
        log.y,
        log.X,
        instance_labels=tables["instance"],
        arm_labels=tables["arm"],
        id_columns=(log.instance_column, log.arm_column),
    )
    return summary_from_partial(
        part,
        features=log.features,
        instance_column=log.instance_column,
        arm_column=log.arm_column,
        reward_column=log.reward_column,
        source=log.source,
        ignored_columns=log.ignored_columns,
    )


# ---------------------------------------------------------------------- columns and checks


@dataclass(frozen=True)
class LogColumns:
    """The columns of a log, as :func:`resolve_columns` resolved them."""

    instance: str
    arm: str | None
    reward: str
    features: tuple[str, ...]
    ignored: tuple[tuple[str, str], ...] = ()

    @property
    def used(self) -> list[str]:
        """The columns the statistics read, in a fixed order."""
        cols = [self.instance] + ([self.arm] if self.arm is not None else [])
        return [*cols, self.reward, *self.features]


def _dtype_kind(dtype: Any) -> str:
    if isinstance(dtype, pd.CategoricalDtype):
        return "category"
    return getattr(dtype, "kind", "O")


def resolve_columns(
    dtypes: pd.Series | dict[str, Any],
    *,
    instance: str = "instance",
    arm: str | None = "arm",
    reward: str = "reward",
    features: Sequence[str] | None = None,
) -> LogColumns:
    """Resolve the column roles of a log known by its columns' dtypes only (a Dask DataFrame's
    schema), as :func:`~hierbandit.data.read_log` resolves them on the rows.

    Categorical columns (hive partition keys) are accepted for the ids, the reward and listed
    features (their values are checked per part), and so are object and string columns for the
    ids (string ids); when the features are inferred, only columns of numeric dtype are taken
    and the others are listed in ``ignored``.

    Raises
    ------
    ValueError
        A missing column (naming the available ones, with close matches), duplicate or empty
        features, a feature that is also a role column, two roles on one column.
    TypeError
        Bad argument types, or a role or listed feature column whose dtype cannot hold numbers.
    """
    instance_col = _check_column_name(instance, "instance")
    arm_col = _check_column_name(arm, "arm", allow_none=True)
    reward_col = _check_column_name(reward, "reward")
    feature_cols = _check_features_arg(features)
    assert instance_col is not None and reward_col is not None
    kinds = {str(c): _dtype_kind(t) for c, t in dict(dtypes).items()}
    shown = {str(c): t for c, t in dict(dtypes).items()}
    columns = list(kinds)
    if instance_col not in kinds:
        raise _missing_column("instance", instance_col, columns)
    if reward_col not in kinds:
        raise _missing_column("reward", reward_col, columns)
    if arm_col is not None and arm_col not in kinds:
        if arm == "arm":
            arm_col = None
        else:
            raise _missing_column("arm", arm_col, columns)
    roles = {"instance": instance_col, "reward": reward_col}
    if arm_col is not None:
        roles["arm"] = arm_col
    seen: dict[str, str] = {}
    for role, col in roles.items():
        if col in seen:
            raise ValueError(f"{role} and {seen[col]} must be different columns, both are {col!r}")
        seen[col] = role
    for role, col in roles.items():
        kind = kinds[col]
        if kind == "category" or kind in "iuf" or (kind == "b" and role == "reward"):
            continue
        if role != "reward" and _is_text_dtype(shown[col]):
            continue  # string ids (checked per part: str values only)
        must = (
            "must hold non-negative integer or string ids"
            if role != "reward"
            else "must be numeric"
        )
        raise TypeError(f"{role} column {col!r} {must}, got dtype {shown[col]}")
    ignored: list[tuple[str, str]] = []
    if feature_cols is None:
        feature_cols = []
        for c in columns:
            if c in seen:
                continue
            if kinds[c] in ("b", "i", "u", "f"):
                feature_cols.append(c)
            else:
                ignored.append((c, f"dtype {shown[c]}"))
        if not feature_cols:
            raise _no_features_error(ignored, columns)
    else:
        _check_listed_features(feature_cols, seen, kinds, columns)
        for f in feature_cols:
            if kinds[f] not in ("b", "i", "u", "f", "category"):
                raise TypeError(f"features: column {f!r} must be numeric, got dtype {shown[f]}")
    return LogColumns(instance_col, arm_col, reward_col, tuple(feature_cols), tuple(ignored))


def check_summary_rows(
    summary: LogSummary,
    *,
    per_arm: int | None = None,
    instances_per_arm: int | None = None,
    min_rows_per_instance: int = 1,
    method: str = "this method",
) -> None:
    """:func:`~hierbandit.data.check_min_rows` for a :class:`LogSummary` (from its counts ``n``;
    the same rules and messages)."""
    if not isinstance(summary, LogSummary):
        raise TypeError(f"summary must be a LogSummary, got {type(summary).__name__}")
    _check_counts(
        summary.n, summary.arm_labels, per_arm, instances_per_arm, min_rows_per_instance, method
    )
