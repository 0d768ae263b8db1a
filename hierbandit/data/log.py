"""Historical interaction logs: a tidy table of past (instance, arm, context, reward) rows.

A user who wants to fit a hierarchical prior brings a log of past interactions as a
:class:`pandas.DataFrame`, a CSV / Parquet / netCDF file, or an :class:`xarray.Dataset` whose
variables are the columns along one row dimension. :func:`read_log` validates it once and returns
a :class:`HistoricalLog`: plain NumPy arrays with the instance and arm ids coded to ``0..N-1`` and
``0..K-1``, the original ids kept as labels, and a content hash for provenance.

Conventions
-----------
* Instance and arm ids are non-negative integers (floats with integral values are accepted and
  converted; booleans and non-integral floats are rejected) or strings (a column of dtype object
  holding ``str``, a pandas or Arrow string dtype, or a categorical of strings: ``"u_81723"``,
  ``"banner_b"``). Codes follow the sorted order of the original ids (code-point order for
  strings, as Python sorts ``str``), and the ids are kept as labels: int64 arrays, or object
  arrays of ``str``. A string id is kept exactly as written: ``"007"`` stays ``"007"`` and is not
  the integer 7. Refused, naming the column and the first row at fault: a column that mixes
  strings and other values (integers, bytes, booleans...), missing ids (None, NaN, NA), ids that
  are empty, blank, hold a NUL character or are not valid Unicode, and values that are neither
  numbers nor strings (bytes, tuples). In a CSV file every cell is text and pandas reads a column
  of numbers as numbers, so a CSV id column in which some ids look like numbers and others do
  not is refused as a stray text cell (read such a file with pandas, ``dtype=str`` for that
  column, and pass the DataFrame to take the ids as strings).
* Rewards and features must be finite numbers. Boolean columns count as numeric (``0.0``/``1.0``).
* A column the reader cannot take as numbers is never dropped silently. Named columns (instance,
  arm, reward, listed features) must be numeric. When the features are inferred, a column of text
  only (or of another non-numeric dtype, such as datetimes) is left out and recorded in
  ``HistoricalLog.ignored_columns``; a column that mixes numbers and text (one bad cell in a CSV
  column of numbers) is refused, naming the column, the first offending row and its value.
* Nor does a numeric column become a feature silently: inferring the features (``features=None``)
  emits a ``UserWarning`` naming the columns taken, and flagging integer columns that look like
  ids (named ``..._id``, ``...code``, ``...index``, or with every value distinct). Listing the
  features explicitly is the way to choose them, and to silence the warning.
* Column names must be unique; for a CSV file this is checked on the header line itself (pandas
  would rename a second ``age`` to ``age.1``), so a column legitimately named ``age.1`` is fine.
* Rows in messages are positions counted from 0 in data order; the CSV header is not a row (row
  ``r`` is line ``r + 2`` of a file with a one-line header and no blank lines).
* Row order is kept: the log is a sequence, and the hash depends on the order of the rows.
* Every error is raised before anything is built, and names the argument or column at fault.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import operator
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from hierbandit._container import read_netcdf
from hierbandit._extras import require
from hierbandit._validation import check_index, check_positive_int
from hierbandit.stats.suffstats import SuffStats, suffstats

__all__ = ["HistoricalLog", "check_min_rows", "read_log"]

#: File extensions :func:`read_log` understands (case-insensitive).
CSV_SUFFIXES = (".csv",)
CSV_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zip", ".zst")
PARQUET_SUFFIXES = (".parquet", ".pq")
NETCDF_SUFFIXES = (".nc",)

_HASH_TAG = b"hierbandit.HistoricalLog/v1\x00"
# pandas < 3 parses CSV floats with a fast, not always exact parser unless asked; pandas 3 is
# exact by default and deprecates the option.
_CSV_OPTIONS: dict[str, Any] = (
    {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
)


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr


def _content_hash(
    X: np.ndarray,
    y: np.ndarray,
    instance_per_row: np.ndarray,
    arm_per_row: np.ndarray,
    features: tuple[str, ...],
    labels: dict[str, np.ndarray] | None = None,
) -> str:
    """SHA-256 over a canonical byte encoding of the log's content.

    The encoding is: a version tag; a JSON header with the number of rows and the feature names;
    then ``X`` (row-major), ``y``, the per-row instance ids and the per-row arm ids as
    little-endian float64 / int64 bytes. ``-0.0`` is encoded as ``0.0``.

    A column of string ids (``labels`` maps ``"instance"``/``"arm"`` to its label table; the
    per-row array then holds codes into it) is encoded instead as the labels that occur, sorted
    (their number, the UTF-8 length of each as int64, their UTF-8 bytes), then the per-row codes
    into them as int64; the header then also says which columns hold strings (``"ids"``). A log
    of integer ids hashes exactly as before string ids existed.
    """
    labels = labels or {}
    h = hashlib.sha256(_HASH_TAG)
    header: dict[str, Any] = {"n_rows": int(X.shape[0]), "features": list(features)}
    if labels:
        header["ids"] = {name: "str" if name in labels else "int" for name in ("instance", "arm")}
    h.update(json.dumps(header, sort_keys=True, ensure_ascii=True).encode("ascii"))
    h.update(b"\x00")
    for arr, dtype in ((X, "<f8"), (y, "<f8")):
        a = np.ascontiguousarray(arr, dtype=dtype) + 0.0  # canonical zero: -0.0 + 0.0 == +0.0
        h.update(a.tobytes(order="C"))
    for name, arr in (("instance", instance_per_row), ("arm", arm_per_row)):
        if name in labels:
            table, codes = _used_labels(labels[name], arr)
            _hash_str_labels(h, table)
            arr = codes
        h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes(order="C"))
    return h.hexdigest()


def _used_labels(labels: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The labels that ``codes`` use (in their order) and the codes into them."""
    used = np.bincount(codes, minlength=labels.size) > 0
    if used.all():
        return labels, codes
    new = np.cumsum(used) - 1
    return labels[used], new[codes]


def _hash_str_labels(h: Any, labels: np.ndarray) -> None:
    """Feed a table of string labels to ``h``: their number, their UTF-8 lengths, their bytes."""
    values = labels.tolist()
    raw = "".join(values).encode("utf-8")
    if len(raw) == sum(map(len, values)):  # ASCII: a character is a byte
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    else:
        lengths = np.fromiter(
            (len(v.encode("utf-8")) for v in values), dtype=np.int64, count=len(values)
        )
    h.update(np.int64(len(values)).astype("<i8").tobytes())
    h.update(lengths.astype("<i8").tobytes())
    h.update(raw)


# ---------------------------------------------------------------------- labels (ids)


def label_kind(labels: np.ndarray) -> str:
    """What a table of labels holds, as ``HistoricalLog.provenance()["ids"]`` says it: ``"str"``
    for string ids (an object or unicode array), else ``"int"``."""
    return "str" if np.asarray(labels).dtype.kind in "OU" else "int"


def _label_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a string id, or ``None`` when it can."""
    if not isinstance(value, str):
        return f"is not a string ({type(value).__name__})"
    if not value:
        return "is empty"
    if "\x00" in value:
        return "holds a NUL character"
    if not value.strip():
        return "is blank (whitespace only)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None


def _first_bad_label(values: list[Any]) -> int | None:
    """The position of the first value that cannot be a string id (:func:`_label_problem`), or
    ``None``. The common case (all good) is checked in bulk, at C speed: the types, the empty
    and whitespace-only strings, then one join for NUL characters and the UTF-8 encoding."""
    if set(map(type, values)) <= {str} and all(values) and not any(map(str.isspace, values)):
        joined = "".join(values)
        if "\x00" not in joined:
            try:
                joined.encode("utf-8")
                return None
            except UnicodeEncodeError:
                pass
    return next((i for i, v in enumerate(values) if _label_problem(v) is not None), None)


def _plain_str(values: list[Any]) -> list[Any]:
    """``values`` with numpy ``str_`` (and other ``str`` subclasses) as plain ``str``."""
    if set(map(type, values)) <= {str}:
        return values
    return [str(v) if isinstance(v, str) else v for v in values]


def _sorted_unique(values: list[str]) -> bool:
    """Whether ``values`` is strictly increasing."""
    return all(map(operator.lt, values[:-1], values[1:]))


def check_str_labels(values: Any, name: str, *, ordered: bool = True) -> np.ndarray:
    """A 1-D table of string labels as an object array of plain ``str``, unique (and sorted, when
    ``ordered``).

    Every label must be a non-empty ``str`` that is not blank (whitespace only), holds no NUL
    character and encodes as UTF-8 (no lone surrogates): the same rule as for the string ids of a
    log, so that every label can be written to netCDF and read back unchanged.

    Raises
    ------
    ValueError
        Naming ``name``: not 1-D, a label that breaks the rule (with its position and value),
        labels not unique, or (``ordered``) not sorted (code-point order, as Python compares
        ``str``).
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels, got shape {arr.shape}")
    plain = _plain_str(arr.tolist())
    i = _first_bad_label(plain)
    if i is not None:
        raise ValueError(f"{name}: label {i} ({_show(plain[i])}) {_label_problem(plain[i])}")
    if ordered:
        if not _sorted_unique(plain):
            raise ValueError(f"{name} must be sorted and unique")
    elif len(set(plain)) != len(plain):
        raise ValueError(f"{name} must be unique")
    out = np.empty(len(plain), dtype=object)
    out[:] = plain
    return out


def check_id_labels(values: Any, name: str) -> np.ndarray:
    """Ids as a coordinate holds them (a prior's ``arm``): integers (int64) or strings (an object
    array of ``str``, :func:`check_str_labels`), unique, in any order.

    Raises
    ------
    ValueError
        Naming ``name``: not 1-D, neither integers nor strings (booleans, floats, bytes...), a
        string id that is empty, blank, holds a NUL character or is not valid Unicode, or ids
        that are not unique.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind in "OU" and arr.size:
        return check_str_labels(arr, name, ordered=False)
    if arr.dtype.kind not in "iu" and arr.size:
        raise ValueError(f"{name} must hold integer or string ids, got dtype {arr.dtype}")
    out = arr.astype(np.int64)
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has ids too large for int64")
    if np.unique(out).size != out.size:
        raise ValueError(f"{name} must be unique")
    return out


def _check_labels(values: Any, name: str, *, non_empty: bool = True) -> np.ndarray:
    """A label table of a log or summary: int64 ids, or an object array of ``str``
    (:func:`check_str_labels`); sorted and unique either way."""
    lab = np.asarray(values)
    if lab.ndim == 1 and lab.dtype.kind in "OU" and lab.size:
        return check_str_labels(lab, name)
    if lab.ndim != 1 or lab.dtype.kind not in "iu" or (non_empty and lab.size == 0):
        what = "a non-empty 1-D" if non_empty else "a 1-D"
        raise ValueError(f"{name} must be {what} integer array or array of strings")
    lab = lab.astype(np.int64)
    if lab.size > 1 and np.any(np.diff(lab) <= 0):
        raise ValueError(f"{name} must be sorted and unique")
    return lab


@dataclass(frozen=True, eq=False)
class HistoricalLog:
    """A validated log of past interactions, coded for the statistics core.

    Build one with :func:`read_log`. Constructing it directly validates the arrays and computes
    ``data_hash`` when it is left empty.

    Parameters
    ----------
    X : ndarray, shape (T, d), float64
        Context features of each row.
    y : ndarray, shape (T,), float64
        Observed rewards.
    instance : ndarray, shape (T,), int64
        Instance codes in ``[0, N)``; ``instance_labels[instance[t]]`` is the original id.
    arm : ndarray, shape (T,), int64
        Arm codes in ``[0, K)``; ``arm_labels[arm[t]]`` is the original id.
    features : tuple of str
        Feature (column) names, one per column of ``X``.
    instance_labels : ndarray, shape (N,), int64 or object
        The original instance ids, sorted and unique: int64 for integer ids, an object array of
        ``str`` for string ids (sorted by code point, as Python sorts ``str``).
    arm_labels : ndarray, shape (K,), int64 or object
        The original arm ids, likewise (``[0]`` for a single-arm log).
    source : str
        Where the data came from: a file path, ``"DataFrame"`` or ``"xarray.Dataset"``.
    data_hash : str
        SHA-256 hex digest of the content (``X``, ``y``, the per-row instance and arm ids and the
        feature names, in row order); independent of ``source`` and of the column names. String
        ids hash by their UTF-8 bytes, so the ids ``"5"`` and ``5`` give different hashes.
    instance_column, arm_column, reward_column : str
        The column names read (``arm_column`` is ``None`` for a single-arm log).
    ignored_columns : tuple of (str, str)
        Columns left out when the features were inferred because they are not numeric, each with
        the reason (``"text"``, ``"no values"`` or ``"dtype ..."``); empty when the features were
        listed explicitly.

    Notes
    -----
    Two logs compare equal when they hold the same data (same hash and arrays), whatever their
    source. The arrays are read-only. String labels are kept as an object array of ``str``
    rather than a fixed-width unicode array, whose every entry would take four bytes per
    character of the longest id.
    """

    X: np.ndarray
    y: np.ndarray
    instance: np.ndarray
    arm: np.ndarray
    features: tuple[str, ...]
    instance_labels: np.ndarray
    arm_labels: np.ndarray
    source: str = "arrays"
    data_hash: str = ""
    instance_column: str = "instance"
    arm_column: str | None = "arm"
    reward_column: str = "reward"
    ignored_columns: tuple[tuple[str, str], ...] = ()
    _per_arm_index: tuple[np.ndarray, ...] = field(
        default=(), init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        X = np.asarray(self.X)
        if X.ndim != 2 or X.dtype.kind not in "biuf":
            raise ValueError(f"X must be a numeric 2-D array, got shape {X.shape}, dtype {X.dtype}")
        X = X.astype(np.float64)
        T, d = X.shape
        y = np.asarray(self.y)
        if y.dtype.kind not in "biuf":
            raise TypeError(f"y must be numeric, got dtype {y.dtype}")
        y = y.astype(np.float64)
        if y.shape != (T,):
            raise ValueError(f"y must have shape ({T},), got {y.shape}")
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
            raise ValueError("X and y must be finite (no NaN or inf)")
        features = tuple(str(f) for f in self.features)
        if len(features) != d:
            raise ValueError(f"features must name the {d} columns of X, got {len(features)} names")
        if len(set(features)) != d:
            raise ValueError(f"features must be unique, got {list(features)}")
        codes = {}
        labels = {}
        for name in ("instance", "arm"):
            lab = _check_labels(getattr(self, f"{name}_labels"), f"{name}_labels")
            code = np.asarray(getattr(self, name))
            if code.shape != (T,) or (T and code.dtype.kind not in "iu"):
                raise ValueError(f"{name} must be an integer array of shape ({T},)")
            code = code.astype(np.int64)
            if T and (code.min() < 0 or code.max() >= lab.size):
                raise ValueError(f"{name} codes must be in [0, {lab.size})")
            codes[name], labels[name] = code, lab
        strings = {name: lab for name, lab in labels.items() if lab.dtype.kind == "O"}
        digest = _content_hash(
            X,
            y,
            codes["instance"] if "instance" in strings else labels["instance"][codes["instance"]],
            codes["arm"] if "arm" in strings else labels["arm"][codes["arm"]],
            features,
            strings,
        )
        if self.data_hash and self.data_hash != digest:
            raise ValueError("data_hash does not match the data")
        order = np.argsort(codes["arm"], kind="stable")
        bounds = np.searchsorted(codes["arm"][order], np.arange(labels["arm"].size + 1))
        per_arm = tuple(_readonly(order[bounds[k] : bounds[k + 1]]) for k in range(bounds.size - 1))
        for attr, value in (
            ("X", _readonly(X)),
            ("y", _readonly(y)),
            ("instance", _readonly(codes["instance"])),
            ("arm", _readonly(codes["arm"])),
            ("instance_labels", _readonly(labels["instance"])),
            ("arm_labels", _readonly(labels["arm"])),
            ("features", features),
            ("ignored_columns", tuple((str(c), str(r)) for c, r in self.ignored_columns)),
            ("data_hash", digest),
            ("_per_arm_index", per_arm),
        ):
            object.__setattr__(self, attr, value)

    # ------------------------------------------------------------------ sizes
    @property
    def n_rows(self) -> int:
        """Number of rows ``T``."""
        return int(self.X.shape[0])

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
        return int(self.X.shape[1])

    # ------------------------------------------------------------------ comparisons
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HistoricalLog):
            return NotImplemented
        return (
            self.data_hash == other.data_hash
            and self.features == other.features
            and np.array_equal(self.instance_labels, other.instance_labels)
            and np.array_equal(self.arm_labels, other.arm_labels)
            and np.array_equal(self.instance, other.instance)
            and np.array_equal(self.arm, other.arm)
            and np.array_equal(self.X, other.X)
            and np.array_equal(self.y, other.y)
        )

    def __hash__(self) -> int:
        return hash(self.data_hash)

    def __repr__(self) -> str:
        return (
            f"HistoricalLog(n_rows={self.n_rows}, n_instances={self.n_instances}, "
            f"n_arms={self.n_arms}, features={list(self.features)}, source={self.source!r}, "
            f"data_hash={self.data_hash[:12]}…)"
        )

    # ------------------------------------------------------------------ views
    def suffstats(self) -> SuffStats:
        """Per-(arm, instance) sufficient statistics.

        Returns
        -------
        SuffStats
            ``(G, b, q, n)`` with ``G`` of shape ``(K, N, d, d)`` (``XᵀX``), ``b`` of shape
            ``(K, N, d)`` (``Xᵀy``), ``q`` of shape ``(K, N)`` (``yᵀy``) and ``n`` of shape
            ``(K, N)`` int64 (row counts), computed by :func:`hierbandit.stats.suffstats` on each
            arm's rows.
        """
        K, N, d = self.n_arms, self.n_instances, self.n_features
        G = np.empty((K, N, d, d))
        b = np.empty((K, N, d))
        q = np.empty((K, N))
        n = np.empty((K, N), dtype=np.int64)
        for k in range(K):
            Xk, yk, ik = self.arm_rows(k)
            s = suffstats(Xk, yk, ik, N)
            G[k], b[k], q[k], n[k] = s.G, s.b, s.q, s.n
        return SuffStats(G, b, q, n)

    def arm_rows(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows of arm code ``k`` (in log order).

        Parameters
        ----------
        k : int
            Arm code in ``[0, K)`` (not the original label; see ``arm_labels``).

        Returns
        -------
        X : ndarray, shape (T_k, d)
        y : ndarray, shape (T_k,)
        instance : ndarray, shape (T_k,)
            Instance codes in ``[0, N)``.
        """
        k = check_index(k, self.n_arms, "k")
        idx = self._per_arm_index[k]
        return self.X[idx], self.y[idx], self.instance[idx]

    def to_dataframe(self) -> pd.DataFrame:
        """The log as a tidy DataFrame with the original ids and column names.

        Columns: the instance column, the arm column (omitted for a single-arm log read without
        one), the reward column, then the features. ``read_log`` on the result with the same
        column names returns an equal log.
        """
        cols: dict[str, np.ndarray] = {
            self.instance_column: self.instance_labels[self.instance].copy()
        }
        if self.arm_column is not None:
            cols[self.arm_column] = self.arm_labels[self.arm].copy()
        cols[self.reward_column] = self.y.copy()
        for j, name in enumerate(self.features):
            cols[name] = self.X[:, j].copy()
        return pd.DataFrame(cols)

    def to_dataset(self, dim: str = "row") -> xr.Dataset:
        """The log as an :class:`xarray.Dataset`: one variable per column along ``dim``.

        Provenance (source, hash, column roles) is stored in the attributes.
        """
        df = self.to_dataframe()
        ds = xr.Dataset({name: (dim, df[name].to_numpy()) for name in df.columns})
        ds.attrs.update(
            source=self.source,
            data_hash=self.data_hash,
            instance_column=self.instance_column,
            arm_column=self.arm_column or "",
            reward_column=self.reward_column,
            features=json.dumps(list(self.features)),
        )
        return ds

    @property
    def id_kinds(self) -> dict[str, str]:
        """What the ids are, per column: ``{"instance": "int" or "str", "arm": ...}``."""
        return {"instance": label_kind(self.instance_labels), "arm": label_kind(self.arm_labels)}

    def provenance(self) -> dict[str, Any]:
        """A JSON-serialisable record of where the log came from and what it holds (``ids``:
        whether the instance and arm ids were integers or strings; the ids themselves are not
        recorded)."""
        return {
            "source": self.source,
            "data_hash": self.data_hash,
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


# ---------------------------------------------------------------------- reading


def _check_column_name(value: Any, name: str, *, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        want = "a column name (str) or None" if allow_none else "a column name (str)"
        raise TypeError(f"{name} must be {want}, got {type(value).__name__} {value!r}")
    return value


def _check_features_arg(features: Any) -> list[str] | None:
    if features is None:
        return None
    if isinstance(features, str):
        return [features]
    if not isinstance(features, Sequence | np.ndarray | pd.Index):
        raise TypeError(
            f"features must be None or a list of column names, got {type(features).__name__}"
        )
    out = list(features)
    for f in out:
        if not isinstance(f, str):
            raise TypeError(f"features must hold column names (str), got {type(f).__name__} {f!r}")
    return out


def _suffix(path: Path) -> tuple[str, str]:
    """Return (kind, matched suffix) for a path, or ("", suffix) if unknown."""
    suffixes = [s.lower() for s in path.suffixes]
    last = suffixes[-1] if suffixes else ""
    if last in CSV_SUFFIXES:
        return "csv", last
    if last in PARQUET_SUFFIXES:
        return "parquet", last
    if last in NETCDF_SUFFIXES:
        return "netcdf", last
    if last in CSV_COMPRESSION_SUFFIXES and len(suffixes) >= 2 and suffixes[-2] in CSV_SUFFIXES:
        return "csv", suffixes[-2] + last
    return "", last


def _dataset_to_frame(ds: xr.Dataset) -> pd.DataFrame:
    if len(ds.sizes) > 1:
        raise ValueError(
            "data: an xarray Dataset must have its columns along one row dimension, "
            f"got dimensions {dict(ds.sizes)}"
        )
    dims = tuple(ds.sizes)
    cols: dict[str, np.ndarray] = {}
    for name, var in ds.variables.items():
        if name in ds.indexes and var.dims == (name,):
            continue  # the row index coordinate, not a column
        if var.ndim == 0:
            continue  # scalar metadata
        if var.dims != dims:
            raise ValueError(
                f"data: variable {name!r} has dimensions {var.dims}, expected the row dimension "
                f"{dims}"
            )
        cols[str(name)] = np.asarray(var.values)
    n = ds.sizes[dims[0]] if dims else 0
    return pd.DataFrame(cols, index=pd.RangeIndex(n))


def _csv_header(path: Path) -> list[str]:
    """The names on a CSV file's header line as written (pandas renames duplicates on reading)."""
    first = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False)
    return [str(v) for v in first.iloc[0].tolist()] if first.shape[0] else []


def _check_csv_header(header: list[str], path: Path) -> None:
    """Refuse a CSV header that names a column more than once."""
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(header, start=1):
        if name.strip():  # unnamed columns are told apart by pandas ("Unnamed: 3")
            positions.setdefault(name, []).append(i)
    dups = {name: pos for name, pos in positions.items() if len(pos) > 1}
    if dups:
        where = "; ".join(
            f"{name!r} at columns {', '.join(map(str, pos))}" for name, pos in dups.items()
        )
        raise ValueError(
            f"data: the header of {str(path)!r} names {len(dups)} column"
            f"{'' if len(dups) == 1 else 's'} more than once ({where}; columns counted from 1); "
            "every column needs its own name"
        )


#: the sources of :func:`_load` that are not files
_IN_MEMORY = ("DataFrame", "xarray.Dataset")


def _load(data: Any) -> tuple[pd.DataFrame, str]:
    """Turn the supported inputs into a DataFrame (not copied) and a source description."""
    if isinstance(data, pd.DataFrame):
        return data, "DataFrame"
    if isinstance(data, xr.Dataset):
        return _dataset_to_frame(data), "xarray.Dataset"
    if isinstance(data, str | Path):
        path = Path(data).expanduser()
        kind, suffix = _suffix(path)
        if not kind:
            known = ", ".join(CSV_SUFFIXES + PARQUET_SUFFIXES + NETCDF_SUFFIXES)
            raise ValueError(
                f"data: unknown file extension {suffix or '(none)'!r} for {str(path)!r}; "
                f"expected one of {known} (CSV may also be compressed, e.g. .csv.gz)"
            )
        if not path.exists():
            raise ValueError(f"data: file {str(path)!r} does not exist")
        if path.is_dir() and kind != "parquet":
            raise ValueError(f"data: {str(path)!r} is a directory, not a {kind} file")
        if kind == "parquet":
            require("pyarrow", "data", "Reading a parquet log")
        header: list[str] | None = None
        try:
            if kind == "csv":
                frame = pd.read_csv(path, **_CSV_OPTIONS)
                header = _csv_header(path)
            elif kind == "parquet":
                frame = pd.read_parquet(path)
            else:
                # untrusted: walked with a deadline and size limits before it is parsed
                ds = read_netcdf(path, None).to_dataset()
                return _dataset_to_frame(ds), str(path)
        except ValueError as exc:
            if str(exc).startswith("data:"):
                raise
            raise ValueError(f"data: could not read {kind} file {str(path)!r}: {exc}") from exc
        except Exception as exc:
            raise ValueError(f"data: could not read {kind} file {str(path)!r}: {exc}") from exc
        if header is not None:
            _check_csv_header(header, path)
        return frame, str(path)
    raise TypeError(
        "data must be a pandas DataFrame, an xarray Dataset, a HistoricalLog or a path to a "
        f".csv/.parquet/.pq/.nc file, got {type(data).__name__}"
    )


def _no_features_error(ignored: list[tuple[str, str]], columns: list[str]) -> ValueError:
    """No numeric column is left to be a feature (the features were to be inferred)."""
    skipped = "".join(f"; {c!r} is {why}" for c, why in ignored)
    return ValueError(
        "features: no numeric feature columns besides the instance/arm/reward columns"
        f"{skipped}; available columns: {columns}"
    )


#: The package's folder: a warning of :func:`read_log` points at the first frame outside it.
_PACKAGE_DIR = str(Path(__file__).parent.parent) + os.sep

#: Endings (case-insensitive) of the names of integer columns that look like ids.
ID_NAME_ENDINGS = ("id", "code", "index")


def _id_like(series: pd.Series, name: str) -> str | None:
    """Why an inferred feature column looks like an id rather than a feature, or None.

    Only integer columns (not booleans) are looked at: one whose name ends in ``id``, ``code``
    or ``index`` (``item_id``, ``movieId``, ``user_code``), or one whose values are all distinct
    (a row number, a timestamp in seconds).
    """
    if getattr(series.dtype, "kind", "O") not in "iu":
        return None
    if name.lower().endswith(ID_NAME_ENDINGS):
        return "integers, named like an id"
    if len(series) > 1 and series.nunique(dropna=False) == len(series):
        return "integers, every value distinct"
    return None


def _inferred_features_message(
    frame: pd.DataFrame, by_name: dict[str, Any], chosen: list[str]
) -> str:
    """The warning of :func:`read_log` when it infers the features: the columns it took, those
    that look like ids, and how to choose."""
    flagged = [(c, why) for c in chosen if (why := _id_like(frame[by_name[c]], c)) is not None]
    text = (
        "features not given, so every numeric column besides the instance, arm and reward "
        f"columns is a feature: {chosen}."
    )
    if flagged:
        cols = ", ".join(f"{c!r} ({why})" for c, why in flagged)
        one = len(flagged) == 1
        text += (
            f" {cols} {'looks like an id' if one else 'look like ids'} rather than "
            f"{'a feature' if one else 'features'}."
        )
    return text + " Pass features=[...] to choose the feature columns."


def _check_listed_features(
    features: list[str], roles: dict[str, str], present: Any, columns: list[str]
) -> None:
    """The feature columns a user listed: at least one, no repeats, none of the instance, arm
    or reward columns (``roles``: column → role), each present (in ``present``)."""
    if not features:
        raise ValueError("features must name at least one column, got an empty list")
    dups = sorted({f for f in features if features.count(f) > 1})
    if dups:
        raise ValueError(f"features has duplicate names: {dups}")
    for f in features:
        if f in roles:
            raise ValueError(f"features must not include the {roles[f]} column {f!r}")
        if f not in present:
            raise _missing_column("features", f, columns)


def _missing_column(arg: str, column: str, available: list[str]) -> ValueError:
    close = difflib.get_close_matches(column, available, n=3, cutoff=0.5)
    if not close:
        close = [c for c in available if c.lower() == column.lower()]
    hint = ""
    if close:
        hint = " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
    return ValueError(
        f"{arg}: column {column!r} not found{hint}; available columns: "
        + ", ".join(repr(c) for c in available)
    )


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _non_numeric(series: pd.Series) -> tuple[str, str]:
    """Classify a column of non-numeric dtype: ``(kind, detail)``.

    ``kind`` is ``"mixed"`` (some cells are numbers, some are not: a stray text cell in a column
    of numbers), ``"text"`` (no cell is a number), ``"numbers"`` (every cell is a number, but
    the dtype is ``object``), ``"empty"`` (every cell is missing) or ``"dtype"`` (another
    non-numeric dtype: datetimes, categories, complex numbers…). ``detail`` is a phrase for the
    message: the first cell that is not a number, with its row (counted from 0) and value.
    """
    dtype = series.dtype
    if not (pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype)):
        return "dtype", f"dtype {dtype}"
    present = series.notna().to_numpy(dtype=bool)
    try:
        as_number = pd.to_numeric(series, errors="coerce").notna().to_numpy(dtype=bool)
    except (TypeError, ValueError):  # pragma: no cover - to_numeric coerces what it cannot parse
        as_number = np.zeros(len(series), dtype=bool)
    bad = present & ~as_number
    n_bad, n_present = int(bad.sum()), int(present.sum())
    if n_present == 0:
        return "empty", f"dtype {dtype} with no values (every cell is missing)"
    if n_bad == 0:
        return "numbers", (
            f"dtype {dtype} (numbers stored as Python objects; convert the column to a numeric "
            "dtype, e.g. with pandas.to_numeric)"
        )
    i = int(np.flatnonzero(bad)[0])
    value = _show(series.iloc[i])
    if n_bad == n_present:
        return "text", f"text (e.g. {value} at row {i})"
    return "mixed", (
        f"row {i} (0-based, header not counted) holds {value}, which is not a number "
        f"({n_bad} of {n_present} non-empty cells are not numbers)"
    )


def _not_numeric_error(series: pd.Series, what: str, must: str) -> TypeError:
    kind, detail = _non_numeric(series)
    if kind == "mixed":
        return TypeError(f"{what} {must}, but {detail}")
    return TypeError(f"{what} {must}, got {detail}")


def _ids(series: pd.Series, column: str, role: str) -> np.ndarray:
    """Validate an id column and return it as int64."""
    dtype = series.dtype
    kind = getattr(dtype, "kind", "O")
    what = f"{role} column {column!r}"
    if kind == "b":
        raise TypeError(f"{what} must hold non-negative integer ids, got dtype {dtype}")
    if kind not in "iuf":
        raise _not_numeric_error(series, what, "must hold non-negative integer ids")
    values = series.to_numpy(dtype=np.float64, na_value=np.nan) if kind == "f" else None
    if kind in "iu":
        if series.hasnans:
            raise ValueError(f"{what} has {int(series.isna().sum())} rows with missing ids")
        if kind == "u" and len(series) and series.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{what} has ids too large for int64")
        out = series.to_numpy(dtype=np.int64)
    else:
        assert values is not None
        bad = ~np.isfinite(values)
        if bad.any():
            raise ValueError(
                f"{what} has {int(bad.sum())} rows with missing (NaN) or infinite ids "
                f"(first at row {int(np.flatnonzero(bad)[0])})"
            )
        frac = values != np.round(values)
        if frac.any():
            i = int(np.flatnonzero(frac)[0])
            raise TypeError(
                f"{what} must hold integer ids, got {int(frac.sum())} non-integral values "
                f"(e.g. {values[i]!r} at row {i})"
            )
        if np.any(np.abs(values) >= 2.0**63):
            raise ValueError(f"{what} has ids too large for int64")
        out = values.astype(np.int64)
    neg = out < 0
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        raise ValueError(
            f"{what} must hold non-negative ids, got {int(neg.sum())} negative "
            f"(e.g. {int(out[i])} at row {i})"
        )
    return out


def _decategorise(series: pd.Series) -> pd.Series:
    """A categorical column (a hive partition key, say) as its categories' values."""
    if not isinstance(series.dtype, pd.CategoricalDtype):
        return series
    cats = series.cat.categories
    if series.isna().any() and cats.dtype.kind in "iub":
        return series.astype(np.float64)
    return series.astype(cats.dtype)


def _is_text_dtype(dtype: Any) -> bool:
    """Object, pandas string, Arrow string or categorical-of-text dtype: ids that may be str."""
    if isinstance(dtype, pd.CategoricalDtype):
        return getattr(dtype.categories.dtype, "kind", "O") not in "biufcmM"
    if pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype):
        return True
    return isinstance(dtype, pd.ArrowDtype) and dtype.kind in "OU"


def _first_row(codes: np.ndarray, which: np.ndarray) -> int:
    """The first row whose code is one of the uniques flagged in ``which``."""
    return int(np.flatnonzero(which[np.maximum(codes, 0)] & (codes >= 0))[0])


def _id_codes(
    series: pd.Series, column: str, role: str, *, sort: bool = True, csv: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate an id column of integers or strings.

    Returns ``(ids, None)`` for non-negative integer ids (int64, exactly :func:`_ids`; also for a
    categorical column of integers), or ``(codes, labels)`` for string ids: ``labels`` an object
    array of the distinct ids (plain ``str``; sorted by code point when ``sort``, else in order
    of first appearance) and ``codes`` (int64, per row) the position of each row's id in it.

    String ids come from a column of dtype object (every value a ``str``), a pandas string or
    Arrow string dtype, or a categorical column of strings. Refused, naming the column, the
    first row and its value: a column that mixes strings and other values (integers, floats,
    booleans, bytes); missing ids (None, NaN, NA); ids that are empty, blank, hold a NUL
    character or are not valid Unicode; values that are neither numbers nor strings (bytes,
    tuples...). ``csv``: the column was read from a CSV file, where every cell is text; a column
    in which some ids look like numbers and others do not is then refused as a stray text cell
    in a column of numbers (pandas reads a column of numbers as numbers).

    Cost: one hash-based factorisation of the column (about the cost of ``np.unique`` on integer
    ids), a Python-level check and sort of the distinct ids only (O(U log U) for U distinct ids,
    never quadratic), and no copy of the per-row strings.
    """
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype) and not _is_text_dtype(dtype):
        return _ids(_decategorise(series), column, role), None
    if not _is_text_dtype(dtype):
        return _ids(series, column, role), None
    what = f"{role} column {column!r}"
    try:
        codes, uniques = pd.factorize(series, sort=False, use_na_sentinel=True)
    except TypeError:  # unhashable values (lists, dicts...)
        i = next(i for i, v in enumerate(series) if not (_is_number(v) or isinstance(v, str)))
        value = series.iloc[i]
        raise TypeError(
            f"{what} must hold non-negative integer or string ids, got "
            f"{type(value).__name__} {_show(value)} at row {i}"
        ) from None
    codes = np.asarray(codes, dtype=np.int64)
    values = np.asarray(uniques, dtype=object)
    if set(map(type, values.tolist())) <= {str}:
        is_str = np.ones(values.size, dtype=bool)
    else:
        is_str = np.fromiter((isinstance(v, str) for v in values), dtype=bool, count=values.size)
    if not is_str.any():
        is_number = np.fromiter(map(_is_number, values), dtype=bool, count=values.size)
        if is_number.all():  # numbers stored as objects, or nothing at all: the integer rules
            return _ids(series, column, role), None
        i = _first_row(codes, ~is_number)
        value = series.iloc[i]
        hint = " (decode bytes to str first)" if isinstance(value, bytes) else ""
        raise TypeError(
            f"{what} must hold non-negative integer or string ids, got "
            f"{type(value).__name__} {_show(value)} at row {i}{hint}"
        )
    if not is_str.all():
        i, j = _first_row(codes, is_str), _first_row(codes, ~is_str)
        other = series.iloc[j]
        n_str = int(np.count_nonzero(is_str[codes[codes >= 0]]))
        n_other = int(np.count_nonzero(codes >= 0)) - n_str
        raise TypeError(
            f"{what} mixes string ids with other values: {n_str} rows hold strings (first "
            f"{_show(series.iloc[i])} at row {i}) and {n_other} hold other values (first "
            f"{type(other).__name__} {_show(other)} at row {j}); the ids of a column must be "
            "all non-negative integers or all strings"
        )
    missing = codes < 0
    if missing.any():
        raise ValueError(
            f"{what} has {int(missing.sum())} rows with missing ids (None, NaN or NA; first "
            f"at row {int(np.flatnonzero(missing)[0])})"
        )
    if csv:
        looks = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").notna()
        looks = looks.to_numpy(dtype=bool)
        if looks.any() and not looks.all():
            per_row = looks[codes]
            n_num = int(per_row.sum())
            minority = ~looks if n_num * 2 >= codes.size else looks
            i = _first_row(codes, minority)
            kind = "is not a number" if n_num * 2 >= codes.size else "is a number"
            raise TypeError(
                f"{what} mixes numbers and text: {n_num} of {codes.size} rows hold numbers; "
                f"row {i} (0-based, header not counted) holds {_show(series.iloc[i])}, which "
                f"{kind}. In a CSV file the ids of a column must be all integers or all text "
                "that is not a number (to take them all as strings, read the file with pandas, "
                f"dtype={{{column!r}: str}}, and pass the DataFrame)"
            )
    plain = _plain_str(values.tolist())
    k = _first_bad_label(plain)
    if k is not None:
        i = _first_row(codes, np.arange(values.size) == k)
        raise ValueError(
            f"{what} must hold non-empty string ids, but row {i} holds {_show(plain[k])}, "
            f"which {_label_problem(plain[k])}"
        )
    values = np.empty(len(plain), dtype=object)
    values[:] = plain
    if sort and values.size > 1:
        order = np.array(sorted(range(values.size), key=plain.__getitem__))
        rank = np.empty(values.size, dtype=np.int64)
        rank[order] = np.arange(values.size)
        values, codes = values[order], rank[codes]
    return codes, values


def _is_number(value: Any) -> bool:
    """A Python or NumPy number that is not a boolean."""
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _numeric(series: pd.Series, column: str, role: str) -> np.ndarray:
    """Validate a reward/feature column and return it as finite float64."""
    if getattr(series.dtype, "kind", "O") not in "biuf":
        raise _not_numeric_error(series, f"{role} column {column!r}", "must be numeric")
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        n_nan = int(np.isnan(values).sum())
        n_inf = int(bad.sum()) - n_nan
        raise ValueError(
            f"{role} column {column!r} has {int(bad.sum())} rows with NaN or inf "
            f"({n_nan} NaN, {n_inf} inf; first at row {int(np.flatnonzero(bad)[0])})"
        )
    return values


def read_log(
    data: Any,
    *,
    instance: str = "instance",
    arm: str | None = "arm",
    reward: str = "reward",
    features: Sequence[str] | None = None,
) -> HistoricalLog:
    """Read and validate a tidy log of past interactions.

    Parameters
    ----------
    data : DataFrame, str, Path, xarray.Dataset or HistoricalLog
        One row per interaction. A path must end in ``.csv`` (optionally compressed, e.g.
        ``.csv.gz``), ``.parquet``/``.pq`` or ``.nc`` (netCDF-4, read with xarray's
        ``h5netcdf`` engine after the file has been walked in a separate interpreter with a
        deadline and size limits, :func:`hierbandit._container.read_netcdf`). A Dataset must hold its columns as variables along one row dimension (the
        dimension's index coordinate is not a column). A HistoricalLog is returned as is.
    instance : str, default "instance"
        Column of instance (user) ids: non-negative integers, or strings (see the module's
        conventions).
    arm : str or None, default "arm"
        Column of arm ids: non-negative integers or strings. ``None`` means a single-arm log (every row is
        arm ``0``); so does the default ``"arm"`` when the data has no such column. A non-default
        arm column that is missing is an error.
    reward : str, default "reward"
        Column of rewards (finite numbers).
    features : sequence of str, optional
        Feature columns, in order. ``None`` takes every other numeric column (booleans
        included, as 0/1) in the data's order. Columns of text only or of another non-numeric
        dtype are left out and listed in ``ignored_columns`` of the result; a column that mixes
        numbers and text (say one ``"oops"`` cell in a CSV column of numbers) is refused rather
        than dropped. Inferring the features warns (below): list the columns explicitly to leave
        out numeric reference columns such as ids and timestamps.

    Returns
    -------
    HistoricalLog

    Warns
    -----
    UserWarning
        Whenever the features are inferred (``features=None``) and the log is read: the warning
        names the columns taken as features, and flags those that look like ids or reference
        columns rather than features: integer columns whose name ends in ``id``, ``code`` or
        ``index`` (``item_id``, ``movieId``, ``user_code``), or whose values are all distinct (a
        row number, a timestamp in seconds). Inference is kept; pass ``features=[...]`` to
        choose the columns (no warning then).

    Raises
    ------
    TypeError
        Unsupported ``data`` type, wrong argument types, a non-numeric reward, id or explicitly
        listed feature column, an inferred feature column that mixes numbers and text or holds
        numbers with dtype ``object`` (the message names the column and, for a text cell, its
        row and value), ids that are neither integers nor strings, or an id column that mixes
        strings and other values.
    ValueError
        Unreadable file or unknown extension, a CSV header or DataFrame naming a column twice,
        empty data, missing columns (with close matches suggested), no or duplicate features, a
        feature that is also the instance/arm/reward column, NaN or inf in the reward or
        features, missing/negative ids, or empty, blank, NUL-holding or invalid Unicode string
        ids.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"instance": [7, 3, 7], "arm": [1, 1, 4], "reward": [1.0, 0.0, 2.0],
    ...                    "x": [0.5, 1.0, -1.0]})
    >>> log = read_log(df, features=["x"])
    >>> log.instance.tolist(), log.instance_labels.tolist(), log.arm.tolist()
    ([1, 0, 1], [3, 7], [0, 0, 1])
    >>> named = read_log(df.assign(instance=["u_7", "u_3", "u_7"], arm=["b", "b", "a"]),
    ...                  features=["x"])
    >>> named.instance_labels.tolist(), named.arm_labels.tolist(), named.arm.tolist()
    (['u_3', 'u_7'], ['a', 'b'], [1, 1, 0])
    """
    if isinstance(data, HistoricalLog):
        return data
    instance_col = _check_column_name(instance, "instance")
    arm_col = _check_column_name(arm, "arm", allow_none=True)
    reward_col = _check_column_name(reward, "reward")
    feature_cols = _check_features_arg(features)
    assert instance_col is not None and reward_col is not None

    frame, source = _load(data)
    if frame.shape[0] == 0:
        raise ValueError(f"data is empty (0 rows; columns {[str(c) for c in frame.columns]})")
    columns = [str(c) for c in frame.columns]
    dup_cols = sorted({c for c in columns if columns.count(c) > 1})
    if dup_cols:
        raise ValueError(f"data has duplicate column names: {dup_cols}")
    by_name = dict(zip(columns, frame.columns, strict=True))

    # -- roles
    if instance_col not in by_name:
        raise _missing_column("instance", instance_col, columns)
    if reward_col not in by_name:
        raise _missing_column("reward", reward_col, columns)
    if arm_col is not None and arm_col not in by_name:
        if arm == "arm":
            arm_col = None  # default name absent: a single-arm log
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

    # -- features
    ignored: list[tuple[str, str]] = []
    if feature_cols is None:
        feature_cols = []
        for c in columns:
            if c in seen:
                continue
            series = frame[by_name[c]]
            if getattr(series.dtype, "kind", "O") in "biuf":
                feature_cols.append(c)
                continue
            kind, detail = _non_numeric(series)
            if kind == "mixed":
                raise TypeError(
                    f"features: column {c!r} mixes numbers and text: {detail}; fix the cell, or "
                    "name the feature columns explicitly to leave this column out"
                )
            if kind == "numbers":
                raise TypeError(
                    f"features: column {c!r} holds numbers with dtype {series.dtype}; convert "
                    "it to a numeric dtype (e.g. with pandas.to_numeric), or name the feature "
                    "columns explicitly to leave it out"
                )
            ignored.append((c, {"text": "text", "empty": "no values"}.get(kind, detail)))
        if not feature_cols:
            raise _no_features_error(ignored, columns)
    else:
        _check_listed_features(feature_cols, seen, by_name, columns)
        for f in feature_cols:
            series = frame[by_name[f]]
            if getattr(series.dtype, "kind", "O") not in "biuf":
                raise _not_numeric_error(series, f"features: column {f!r}", "must be numeric")

    # -- values (all checked before anything is built)
    csv = source not in _IN_MEMORY and _suffix(Path(source))[0] == "csv"
    inst_ids, inst_str = _id_codes(frame[by_name[instance_col]], instance_col, "instance", csv=csv)
    arm_str = None
    if arm_col is not None:
        arm_ids, arm_str = _id_codes(frame[by_name[arm_col]], arm_col, "arm", csv=csv)
    else:
        arm_ids = np.zeros(frame.shape[0], dtype=np.int64)
    y = _numeric(frame[by_name[reward_col]], reward_col, "reward")
    X = np.empty((frame.shape[0], len(feature_cols)))
    for j, f in enumerate(feature_cols):
        X[:, j] = _numeric(frame[by_name[f]], f, "feature")

    # string ids come coded already (sorted labels, only those that occur)
    if inst_str is None:
        inst_labels, inst_codes = np.unique(inst_ids, return_inverse=True)
    else:
        inst_labels, inst_codes = inst_str, inst_ids
    if arm_str is None:
        arm_labels, arm_codes = np.unique(arm_ids, return_inverse=True)
    else:
        arm_labels, arm_codes = arm_str, arm_ids
    if features is None:
        # after every check (a refused log warns of nothing), and attributed to the first caller
        # outside the package (fit_prior, compare_closed_form... read logs too)
        warnings.warn(
            _inferred_features_message(frame, by_name, feature_cols),
            UserWarning,
            skip_file_prefixes=(_PACKAGE_DIR,),
        )
    return HistoricalLog(
        X=X,
        y=y,
        instance=inst_codes.reshape(-1).astype(np.int64),
        arm=arm_codes.reshape(-1).astype(np.int64),
        features=tuple(feature_cols),
        instance_labels=inst_labels,
        arm_labels=arm_labels,
        source=source,
        instance_column=instance_col,
        arm_column=arm_col,
        reward_column=reward_col,
        ignored_columns=tuple(ignored),
    )


# ---------------------------------------------------------------------- sample-size checks


def check_min_rows(
    log: HistoricalLog,
    *,
    per_arm: int | None = None,
    instances_per_arm: int | None = None,
    min_rows_per_instance: int = 1,
    method: str = "this method",
) -> None:
    """Raise if some arm has too little data for ``method``.

    Parameters
    ----------
    log : HistoricalLog
        The log to check.
    per_arm : int, optional
        Minimum number of rows every arm needs.
    instances_per_arm : int, optional
        Minimum number of instances, per arm, that have at least ``min_rows_per_instance`` rows
        of that arm.
    min_rows_per_instance : int, default 1
        Rows an instance needs in an arm to count towards ``instances_per_arm``.
    method : str
        Name of the estimator asking, used in the message.

    Raises
    ------
    ValueError
        Listing every arm (by original label) that falls short, with what it needs and has.

    Examples
    --------
    >>> import pandas as pd
    >>> log = read_log(pd.DataFrame({"instance": [0, 0, 1], "reward": [1.0, 2.0, 3.0],
    ...                              "x": [1.0, 1.0, 1.0]}), features=["x"])
    >>> check_min_rows(log, per_arm=3, instances_per_arm=2, method="ols")
    >>> check_min_rows(log, instances_per_arm=2, min_rows_per_instance=2, method="ols")
    Traceback (most recent call last):
    ...
    ValueError: ols: not enough data in the log: arm 0 needs at least 2 instances with >= 2 rows each, has 1
    """
    if not isinstance(log, HistoricalLog):
        raise TypeError(f"log must be a HistoricalLog, got {type(log).__name__}")
    counts = np.zeros((log.n_arms, log.n_instances), dtype=np.int64)
    np.add.at(counts, (log.arm, log.instance), 1)
    _check_counts(counts, log.arm_labels, per_arm, instances_per_arm, min_rows_per_instance, method)


def _check_counts(
    counts: np.ndarray,
    arm_labels: np.ndarray,
    per_arm: int | None,
    instances_per_arm: int | None,
    min_rows_per_instance: int,
    method: str,
) -> None:
    """The rules of :func:`check_min_rows` on the rows per (arm, instance), ``counts`` (K, N)."""
    if per_arm is not None:
        per_arm = check_positive_int(per_arm, "per_arm", minimum=0)
    if instances_per_arm is not None:
        instances_per_arm = check_positive_int(instances_per_arm, "instances_per_arm", minimum=0)
    min_rows_per_instance = check_positive_int(
        min_rows_per_instance, "min_rows_per_instance", minimum=1
    )
    if not isinstance(method, str):
        raise TypeError(f"method must be a str, got {type(method).__name__}")
    problems = []
    for k, label in enumerate(arm_labels):
        rows = int(counts[k].sum())
        if per_arm is not None and rows < per_arm:
            problems.append(f"arm {label} needs at least {per_arm} rows, has {rows}")
        if instances_per_arm is not None:
            have = int(np.sum(counts[k] >= min_rows_per_instance))
            if have < instances_per_arm:
                problems.append(
                    f"arm {label} needs at least {instances_per_arm} instances with "
                    f">= {min_rows_per_instance} rows each, has {have}"
                )
    if problems:
        raise ValueError(f"{method}: not enough data in the log: " + "; ".join(problems))
