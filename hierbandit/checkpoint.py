"""Checkpoints: write the full state of an online model to netCDF and restore it exactly.

A checkpoint holds *everything* an object has learned or will draw: its sufficient statistics
and posterior caches, hyperparameters, step counters, configuration, and the exact state of
every random generator. A restored object therefore continues exactly as the original would
have: the same decisions for the same inputs, bit for bit.

Format
------
One netCDF file (h5netcdf, written through an xarray DataTree):

* the root node's attribute ``hierbandit_checkpoint`` holds a JSON description of the object:
  plain values (numbers, strings, booleans, ``None``, lists, dicts) inline, and references to
  the pieces stored beside it;
* every NumPy array of the state is a variable of the root node (its dtype kept exactly);
* objects that know how to write themselves as a DataTree (``to_datatree`` /
  ``from_datatree``, e.g. :class:`~hierbandit.bayes.HierarchicalPrior`) are child nodes.

Objects are rebuilt without calling their constructor: the instance is created with
``cls.__new__`` and its attributes are set from the file. Only classes defined inside
``hierbandit`` and NumPy's random generators can be named by a checkpoint, and nothing in the
file is executed or unpickled — no pickle is used anywhere.

Writes are atomic (:func:`hierbandit._io.atomic_write`): a crash during a write leaves the
previous checkpoint intact.

Attributes that cannot be meaningfully saved (locks) are recreated on restore: a class lists
them in ``_checkpoint_transient`` as ``{name: factory}``.

:class:`SharedStateMixin` gives a class a per-object re-entrant lock held by its public
methods, lock-free copies and pickles, and ``save``/``load`` methods built on this module; the
online policies, the clustering and cascade policies and the pure-exploration algorithms use it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import os
import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import xarray as xr

from . import __version__
from ._io import atomic_write

__all__ = ["FORMAT_VERSION", "SharedStateMixin", "load_checkpoint", "save_checkpoint"]

#: version of the checkpoint layout; bumped on incompatible changes
FORMAT_VERSION = 1
_ATTR = "hierbandit_checkpoint"


def _class_path(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve_class(path: str) -> type:
    module, _, qualname = path.partition(":")
    allowed = module == "hierbandit" or module.startswith("hierbandit.")
    allowed = allowed or module in ("numpy.random", "numpy.random._generator")
    allowed = allowed or module.startswith("numpy.random.")
    if not allowed or not qualname:
        raise ValueError(f"checkpoint names a class outside hierbandit: {path!r}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise ValueError(f"checkpoint names {path!r}, which is not a class")
    return obj


class _Encoder:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.trees: dict[str, xr.DataTree] = {}
        self._seen: dict[int, str] = {}
        # shared references stay shared: an object met twice is stored once
        self._refs: dict[int, str] = {}
        self._keep: list[Any] = []  # keeps ids stable while encoding

    def _shared(self, value: Any) -> dict[str, Any] | None:
        ref = self._refs.get(id(value))
        return None if ref is None else {"__ref__": ref}

    def _remember(self, value: Any, entry: dict[str, Any]) -> dict[str, Any]:
        ref = f"r{len(self._refs)}"
        self._refs[id(value)] = ref
        self._keep.append(value)
        entry["__id__"] = ref
        return entry

    def encode(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, np.bool_):
            return {"__np_scalar__": "bool", "value": bool(value)}
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return value if np.isfinite(value) else {"__float__": repr(value)}
        if isinstance(value, np.integer | np.floating):
            return {
                "__np_scalar__": value.dtype.str,
                "value": value.item() if np.isfinite(value) else repr(value.item()),
            }
        if isinstance(value, np.ndarray | np.random.Generator) or (
            type(value).__module__.startswith("hierbandit") and not isinstance(value, type)
        ):
            shared = self._shared(value)
            if shared is not None:
                return shared
        if isinstance(value, np.ndarray):
            return self._remember(value, self._array(value))
        if isinstance(value, list | tuple):
            items = [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return {"__tuple__": items} if isinstance(value, tuple) else items
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise TypeError(f"cannot checkpoint {where}: dict keys must be strings")
            return {"__dict__": {k: self.encode(v, f"{where}.{k}") for k, v in value.items()}}
        if isinstance(value, np.random.Generator):
            bg = value.bit_generator
            return self._remember(value, {"__generator__": _class_path(bg), "state": bg.state})
        if isinstance(value, range):
            return {"__range__": [value.start, value.stop, value.step]}
        if hasattr(value, "to_datatree") and hasattr(type(value), "from_datatree"):
            key = f"o{len(self.trees)}"
            self.trees[key] = value.to_datatree()
            return self._remember(value, {"__tree__": key, "class": _class_path(value)})
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {
                f.name: self.encode(getattr(value, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(value)
                if f.init
            }
            return {"__dataclass__": _class_path(value), "fields": fields}
        if type(value).__module__.startswith("hierbandit") and hasattr(value, "__dict__"):
            return self._remember(value, self._object(value, where))
        raise TypeError(
            f"cannot checkpoint {where}: unsupported value of type {type(value).__name__}"
        )

    def _array(self, arr: np.ndarray) -> dict[str, Any]:
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"cannot checkpoint arrays of dtype {arr.dtype}")
        key = f"a{len(self.arrays)}"
        self.arrays[key] = np.array(arr)  # a contiguous copy
        return {"__array__": key, "writeable": bool(arr.flags.writeable)}

    def _object(self, obj: Any, where: str) -> dict[str, Any]:
        if id(obj) in self._seen:
            raise TypeError(f"cannot checkpoint {where}: the object graph has a cycle")
        self._seen[id(obj)] = where
        transient = getattr(type(obj), "_checkpoint_transient", {})
        attrs = {
            name: self.encode(val, f"{where}.{name}")
            for name, val in vars(obj).items()
            if name not in transient
        }
        del self._seen[id(obj)]
        return {"__object__": _class_path(obj), "attrs": attrs}


class _Decoder:
    def __init__(self, arrays: xr.Dataset, tree: xr.DataTree) -> None:
        self.arrays = arrays
        self.tree = tree
        self.memo: dict[str, Any] = {}

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "__ref__" in value:
            try:
                return self.memo[value["__ref__"]]
            except KeyError:
                raise ValueError("corrupt checkpoint: reference before definition") from None
        out = self._decode(value)
        if "__id__" in value:
            self.memo[value["__id__"]] = out
        return out

    def _decode(self, value: dict[str, Any]) -> Any:
        if "__array__" in value:
            arr = np.array(self.arrays[value["__array__"]].values)
            arr.flags.writeable = bool(value.get("writeable", True))
            return arr
        if "__tuple__" in value:
            return tuple(self.decode(v) for v in value["__tuple__"])
        if "__dict__" in value:
            return {k: self.decode(v) for k, v in value["__dict__"].items()}
        if "__float__" in value:
            return float(value["__float__"])
        if "__np_scalar__" in value:
            kind, v = value["__np_scalar__"], value["value"]
            return (
                np.bool_(v)
                if kind == "bool"
                else np.dtype(kind).type(float(v) if isinstance(v, str) else v)
            )
        if "__range__" in value:
            return range(*value["__range__"])
        if "__generator__" in value:
            bg = _resolve_class(value["__generator__"])()
            bg.state = value["state"]
            return np.random.Generator(bg)
        if "__tree__" in value:
            cls = _resolve_class(value["class"])
            return cls.from_datatree(self.tree[value["__tree__"]])
        if "__dataclass__" in value:
            cls = _resolve_class(value["__dataclass__"])
            return cls(**{k: self.decode(v) for k, v in value["fields"].items()})
        if "__object__" in value:
            cls = _resolve_class(value["__object__"])
            obj = cls.__new__(cls)
            for name, v in value["attrs"].items():
                object.__setattr__(obj, name, self.decode(v))
            for name, factory in getattr(cls, "_checkpoint_transient", {}).items():
                object.__setattr__(obj, name, factory())
            return obj
        raise ValueError(f"corrupt checkpoint: unknown entry {sorted(value)}")


def save_checkpoint(obj: Any, path: str | os.PathLike[str]) -> Path:
    """Write the full state of ``obj`` (a policy, statistics object, ...) to ``path``.

    Parameters
    ----------
    obj
        An object of a class defined in ``hierbandit`` whose state consists of NumPy arrays,
        plain Python values, NumPy random generators, dataclasses, DataTree-serialisable
        objects and other such hierbandit objects.
    path : str or path-like
        Destination ``.nc`` file; written atomically (a crash keeps any previous file intact).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        If the state holds a value of a type that cannot be checkpointed (nothing is written).
    ValueError
        If ``path`` does not end in ``.nc``.
    """
    path = Path(path)
    if path.suffix != ".nc":
        raise ValueError(f"path must end in .nc, got {path.name!r}")
    lock = getattr(obj, "_lock", None)
    enc = _Encoder()
    if lock is not None:
        with lock:
            state = enc.encode(obj, type(obj).__name__)
    else:
        state = enc.encode(obj, type(obj).__name__)
    root = xr.Dataset(
        {
            key: xr.Variable(tuple(f"{key}_{i}" for i in range(arr.ndim)), arr)
            for key, arr in enc.arrays.items()
        }
    )
    root.attrs = {
        _ATTR: json.dumps(state, allow_nan=False),
        "format_version": FORMAT_VERSION,
        "hierbandit_version": __version__,
        "class": _class_path(obj),
    }
    nodes: dict[str, xr.Dataset | xr.DataTree] = {"/": root}
    tree = xr.DataTree.from_dict(nodes)
    for key, sub in enc.trees.items():
        tree[key] = sub
    return atomic_write(path, lambda tmp: tree.to_netcdf(tmp, engine="h5netcdf"))


def load_checkpoint(path: str | os.PathLike[str]) -> Any:
    """Restore an object written by :func:`save_checkpoint`.

    Raises
    ------
    FileNotFoundError
        If there is no file at ``path``.
    ValueError
        If the file is not a hierbandit checkpoint, has an unknown format version, or names a
        class outside hierbandit.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    with xr.open_datatree(path, engine="h5netcdf") as tree:
        tree = tree.load()
    attrs = tree.attrs
    if _ATTR not in attrs:
        raise ValueError(f"{path} is not a hierbandit checkpoint")
    version = int(attrs.get("format_version", -1))
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{path} has checkpoint format {version}; this version reads format {FORMAT_VERSION}"
        )
    state = json.loads(attrs[_ATTR])
    return _Decoder(tree.to_dataset(inherit=False), tree).decode(state)


# ---------------------------------------------------------------------- shared objects


def _holding_lock(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    wrapper._holds_lock = True  # type: ignore[attr-defined]
    return wrapper


class SharedStateMixin:
    """A re-entrant lock per object, locked public methods, copies and checkpoints.

    Every instance gets its own :class:`threading.RLock` as ``_lock`` (created in ``__new__``,
    so also for objects rebuilt by :mod:`copy`, :mod:`pickle` and checkpoints). The methods a
    class names in ``_locked_methods`` (and their overrides in subclasses) hold the lock for
    the whole call, so calls on one shared object are serialised. Copies and pickles get a
    fresh lock (a lock cannot be copied). ``save(path)`` writes a checkpoint holding the lock;
    ``cls.load(path)`` restores one and checks its class.
    """

    #: attributes recreated (not stored) by copies and checkpoints: ``{name: factory}``
    _checkpoint_transient: ClassVar[dict[str, Any]] = {"_lock": threading.RLock}
    #: public methods that hold the lock (wrapped in every subclass that defines them)
    _locked_methods: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls._locked_methods:
            method = cls.__dict__.get(name)
            if (
                callable(method)
                and not getattr(method, "_holds_lock", False)
                and not getattr(method, "__isabstractmethod__", False)
            ):
                setattr(cls, name, _holding_lock(method))

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__new__(cls)
        obj._lock = threading.RLock()
        return obj

    def __getstate__(self) -> dict[str, Any]:
        # copies and process pools get a fresh lock (a lock cannot be copied or pickled)
        state = self.__dict__.copy()
        for name in self._checkpoint_transient:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name, factory in self._checkpoint_transient.items():
            setattr(self, name, factory())

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a checkpoint of the full state to ``path`` (``.nc``), atomically.

        The state (statistics, hyperparameters, counters, configuration and random-generator
        states) is read while holding the object's lock (:mod:`hierbandit.checkpoint`).
        """
        return save_checkpoint(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Any:
        """Restore an object saved with :meth:`save`; it must be an instance of ``cls``."""
        obj = load_checkpoint(path)
        if not isinstance(obj, cls):
            raise TypeError(f"{path} holds a {type(obj).__name__}, not a {cls.__name__}")
        return obj
