"""Labels: the ids a user speaks in (user ids, item names) and the integer codes the kernels use.

:class:`Labels` is an ordered map between labels and the codes ``0 .. n-1``, in order of first
appearance, that can grow. A label is an integer or a string (NumPy integers and strings count
as such; booleans do not, because ``True == 1`` would make two ids one). ``Labels.range(n)`` is
the identity on ``0 .. n-1``, the labels of a policy built with integer sizes, and keeps no
table.

Labels are written to checkpoints as numeric arrays only (the checkpoint format stores nothing
else): integers as an ``int64`` array; strings as their UTF-8 bytes end to end (``uint8``)
and the offset where each one ends (``int64``). :meth:`Labels.check` rejects a restored table
whose offsets do not cut the bytes into valid UTF-8, or whose labels are not unique.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Iterable
from typing import Any, ClassVar

import numpy as np

__all__ = ["Labels", "as_label", "check_feature_names", "copy_labels", "labels_arg"]

_KINDS = ("range", "int", "str")


def as_label(value: Any, name: str) -> int | str:
    """``value`` as a plain ``int`` or ``str`` label, or ``TypeError`` naming ``name``."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        if isinstance(value, np.ndarray) and value.ndim == 0:
            return as_label(value.item(), name)
        raise TypeError(
            f"{name} must be an integer or string id, got {type(value).__name__} {value!r:.80}"
        )
    return int(value)


class Labels:
    """Ordered, growable map between labels (int or str) and codes ``0 .. n-1``.

    Parameters
    ----------
    values : iterable of int or str, optional
        Labels in code order; all integers or all strings, unique.
    name : str
        What the labels are (``"instance"``, ``"arm"``), used in error messages.
    """

    #: recreated on restore: the dict from label to code and the decoded list, rebuilt lazily
    _checkpoint_transient: ClassVar[dict[str, Any]] = {"_index": dict, "_list": list}

    def __init__(self, values: Iterable[Hashable] | None = None, *, name: str = "label") -> None:
        self.name = str(name)
        self.kind = "int"
        self.n = 0
        self._ints = np.zeros(0, dtype=np.int64)
        self._utf8 = np.zeros(0, dtype=np.uint8)
        self._ends = np.zeros(0, dtype=np.int64)
        self._index: dict[int | str, int] = {}
        self._list: list[int | str] = []
        if values is not None:
            if isinstance(values, Labels):
                values = values.values()
            self.extend(values)

    @classmethod
    def range(cls, n: int, *, name: str = "label") -> Labels:
        """The identity labels ``0 .. n-1`` (no table is kept)."""
        out = cls(name=name)
        out.kind = "range"
        out.n = int(n)
        return out

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self.n

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Labels):
            return NotImplemented
        if self.kind == "range" or other.kind == "range":
            return self.kind == other.kind and self.n == other.n
        return self.values() == other.values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(map(repr, self.values()[:3]))
        more = ", ..." if self.n > 3 else ""
        return f"Labels([{head}{more}], name={self.name!r}, n={self.n})"

    def values(self) -> list[int | str]:
        """The labels in code order (a new list)."""
        if self.kind == "range":
            return list(range(self.n))
        self._sync()
        return list(self._list)

    def to_numpy(self) -> np.ndarray:
        """The labels as an array (``int64``, or ``object`` holding ``str``) for coordinates."""
        if self.kind == "range":
            return np.arange(self.n)
        if self.kind == "int":
            return self._ints[: self.n].copy()
        out = np.empty(self.n, dtype=object)
        out[:] = self.values()
        return out

    def label(self, code: int) -> int | str:
        """The label of ``code``."""
        if self.kind == "range":
            return int(code)
        self._sync()
        return self._list[code]

    def labels(self, codes: np.ndarray) -> np.ndarray:
        """The labels of an array of codes (``int64`` array, or ``object`` array of str)."""
        codes = np.asarray(codes, dtype=np.int64)
        if self.kind == "range":
            return codes.copy()
        if self.kind == "int":
            return self._ints[codes]
        self._sync()
        out = np.empty(codes.shape, dtype=object)
        lst = self._list
        out.ravel()[:] = [lst[c] for c in codes.ravel()]
        return out

    def get(self, label: Any) -> int:
        """The code of ``label``, or −1 if it is not in the table (``label`` already plain)."""
        if self.kind == "range":
            if isinstance(label, int) and 0 <= label < self.n:
                return label
            return -1
        self._sync()
        return self._index.get(label, -1)

    def codes(self, values: Any, name: str) -> np.ndarray:
        """The codes (``int64``) of a 1-D sequence of labels; every one must be in the table.

        Raises ``TypeError`` for an id that is not an integer or a string (or a mix of the two
        that NumPy turned into strings) and ``ValueError`` for an unknown id, naming ``name``
        and the position.
        """
        arr = np.asarray(values)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be a 1-D sequence of ids, got shape {arr.shape}")
        if arr.dtype.kind == "U" and not all(isinstance(v, str | np.str_) for v in values):
            raise TypeError(f"{name}: ids must be all integers or all strings, not a mix")
        if arr.dtype.kind in "iu" and not isinstance(values, np.ndarray):
            # NumPy turns [0, True] into [0, 1]: a boolean is not an id
            flags = [isinstance(v, bool | np.bool_) for v in values]
            if any(flags):
                i = flags.index(True)
                raise TypeError(f"{name}[{i}] must be an integer or string id, got a bool")
        if self.kind == "range" and arr.dtype.kind in "iu":
            codes = arr.astype(np.int64)
            bad = (codes < 0) | (codes >= self.n)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"{name}[{i}] must be in [0, {self.n}), got {arr[i]}")
            return codes
        if arr.size and arr.dtype.kind not in "iuUO":
            raise TypeError(f"{name} must hold integer or string ids, got dtype {arr.dtype}")
        out = np.empty(arr.shape[0], dtype=np.int64)
        for i, v in enumerate(arr.tolist()):
            c = self.get(as_label(v, f"{name}[{i}]"))
            if c < 0:
                raise ValueError(
                    f"{name}[{i}] = {v!r:.80} is not one of the {self.n} {self.name} ids"
                )
            out[i] = c
        return out

    # ------------------------------------------------------------------ growing
    def add(self, label: int | str) -> int:
        """Append a new plain label (not already present); return its code."""
        if self.kind == "range":
            if isinstance(label, int) and label == self.n:
                self.n += 1
                return label
            self._materialise()
        if isinstance(label, str) != (self.kind == "str"):
            if self.n == 0:
                self.kind = "str" if isinstance(label, str) else "int"
                self._ints = np.zeros(0, dtype=np.int64)
            else:
                have = "strings" if self.kind == "str" else "integers"
                raise TypeError(
                    f"{self.name} ids are {have}; got {type(label).__name__} {label!r:.80}"
                )
        self._sync()
        code = self.n
        if self.kind == "int":
            if not -(2**63) <= label < 2**63:
                raise ValueError(f"{self.name} id {label} does not fit in 64 bits")
            self._ints = _append(self._ints, code, np.int64(label))
        else:
            raw = np.frombuffer(label.encode("utf-8"), dtype=np.uint8)
            start = int(self._ends[code - 1]) if code else 0
            self._utf8 = _append_many(self._utf8, start, raw)
            self._ends = _append(self._ends, code, np.int64(start + raw.size))
        self._index[label] = code
        self._list.append(label)
        self.n = code + 1
        return code

    def extend(self, values: Iterable[Hashable]) -> None:
        """Append labels; refuses duplicates (within ``values`` or with the table)."""
        for v in values:
            label = as_label(v, self.name)
            if self.get(label) >= 0:
                raise ValueError(f"{self.name} id {label!r:.80} is given twice")
            self.add(label)

    def trim(self) -> None:
        """Drop the spare capacity of the arrays (before a checkpoint is written)."""
        if self.kind == "int":
            self._ints = self._ints[: self.n].copy()
        elif self.kind == "str":
            self._ends = self._ends[: self.n].copy()
            self._utf8 = self._utf8[: int(self._ends[-1]) if self.n else 0].copy()

    # ------------------------------------------------------------------ checking
    def check(self) -> None:
        """Raise ``ValueError`` if the stored table is inconsistent (restored files)."""
        if self.kind not in _KINDS:
            raise ValueError(f"{self.name} labels have an unknown kind {self.kind!r}")
        if not isinstance(self.n, int) or self.n < 0:
            raise ValueError(f"{self.name} labels: bad count")
        if self.kind == "range":
            if self._ints.size or self._utf8.size or self._ends.size:
                raise ValueError(f"{self.name} labels: a range keeps no table")
            return
        if self.kind == "int":
            if self._ints.ndim != 1 or self._ints.size < self.n or self._utf8.size:
                raise ValueError(f"{self.name} labels: the table does not hold {self.n} ids")
            if np.unique(self._ints[: self.n]).size != self.n:
                raise ValueError(f"{self.name} labels are not unique")
        else:
            ends = self._ends
            if ends.ndim != 1 or ends.size < self.n or self._ints.size:
                raise ValueError(f"{self.name} labels: the table does not hold {self.n} ids")
            used = ends[: self.n]
            if self.n and (np.any(np.diff(used) < 0) or used[0] < 0 or used[-1] > self._utf8.size):
                raise ValueError(f"{self.name} labels: offsets out of order or out of range")
            try:
                self._decode()
            except UnicodeDecodeError:
                raise ValueError(f"{self.name} labels are not valid UTF-8") from None
            if len(set(self._list)) != self.n:
                raise ValueError(f"{self.name} labels are not unique")

    # ------------------------------------------------------------------ internals
    def _materialise(self) -> None:
        """Turn a range into an integer table (an id outside 0..n-1 arrived)."""
        n = self.n
        self.kind = "int"
        self._ints = np.arange(max(n, 1) * 2, dtype=np.int64)
        self._list = list(range(n))
        self._index = {i: i for i in range(n)}

    def _sync(self) -> None:
        if len(self._list) != self.n:
            self._decode()

    def _decode(self) -> None:
        if self.kind == "int":
            self._list = self._ints[: self.n].tolist()
        else:
            data = self._utf8.tobytes()
            ends = self._ends[: self.n].tolist()
            starts = [0, *ends[:-1]]
            self._list = [data[s:e].decode("utf-8") for s, e in zip(starts, ends, strict=True)]
        self._index = {v: i for i, v in enumerate(self._list)}


def _append(arr: np.ndarray, at: int, value: Any) -> np.ndarray:
    if at >= arr.size:
        grown = np.zeros(max(2 * arr.size, 16), dtype=arr.dtype)
        grown[: arr.size] = arr
        arr = grown
    arr[at] = value
    return arr


def _append_many(arr: np.ndarray, at: int, values: np.ndarray) -> np.ndarray:
    need = at + values.size
    if need > arr.size:
        grown = np.zeros(max(2 * arr.size, need, 64), dtype=arr.dtype)
        grown[:at] = arr[:at]
        arr = grown
    arr[at:need] = values
    return arr


def _positive_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {int(value)}")
    return int(value)


def check_feature_names(features: Any, d: int | None) -> tuple[str, ...] | None:
    """``features`` as a tuple of ``d`` unique names (str), or None."""
    if features is None:
        return None
    if isinstance(features, str) or not hasattr(features, "__iter__"):
        raise TypeError("features must be a sequence of feature names (str)")
    names = tuple(features)
    for f in names:
        if not isinstance(f, str):
            raise TypeError(f"features must hold names (str), got {type(f).__name__} {f!r:.80}")
    if d is not None and len(names) != d:
        raise ValueError(f"features must name the {d} features, got {len(names)} names")
    if len(set(names)) != len(names):
        raise ValueError("features must be unique names")
    return names


def labels_arg(n: Any, values: Any, n_name: str, name: str, *, minimum: int) -> Labels:
    """The labels of a model's units (instances, arms, users) from their number ``n`` (argument
    ``n_name``) and/or their ids ``values``: a range when only ``n`` is given or the ids are
    ``0 .. n-1``; a restored :class:`Labels` is checked, then copied."""
    if values is None:
        return Labels.range(_positive_int(n, n_name, minimum), name=name)
    if isinstance(values, Labels):
        labels = copy_labels(values)  # e.g. a restored table: checked, then taken as is
        labels.name = name
        labels.check()
    else:
        if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
            raise TypeError(f"{name}s must be a sequence of ids, got {type(values).__name__}")
        values = list(values)
        if values == list(range(len(values))):
            labels = Labels.range(len(values), name=name)
        else:
            labels = Labels(values, name=name)
    if n is not None and _positive_int(n, n_name, minimum) != len(labels):
        raise ValueError(f"{n_name} = {n} but {len(labels)} {name} ids are given")
    if len(labels) < minimum:
        raise ValueError(f"{name}s must hold at least {minimum} id(s)")
    return labels


def copy_labels(labels: Labels) -> Labels:
    """An independent copy of ``labels`` (its tables copied, the lookups rebuilt lazily)."""
    out = Labels(name=labels.name)
    out.kind, out.n = labels.kind, labels.n
    out._ints, out._utf8, out._ends = labels._ints.copy(), labels._utf8.copy(), labels._ends.copy()
    return out
