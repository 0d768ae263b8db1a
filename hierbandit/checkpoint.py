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
``cls.__new__`` and its attributes are set from the file, once the file and the state have
passed every check of :func:`load_checkpoint`. Only the classes of an explicit allow-list
(:mod:`hierbandit._restore`) and NumPy's bit generators can be named by a checkpoint, and
nothing in the file is executed or unpickled — no pickle is used anywhere.

Writes are atomic (:func:`hierbandit._io.atomic_write`): a crash during a write leaves the
previous checkpoint intact. The file is sealed (:mod:`hierbandit._container`): a header in the
HDF5 user block holds the payload's size and SHA-256, verified before the file is parsed.

Attributes that cannot be meaningfully saved (locks) are recreated on restore: a class lists
them in ``_checkpoint_transient`` as ``{name: factory}``.

:class:`SharedStateMixin` gives a class a per-object re-entrant lock held by its public
methods, lock-free copies and pickles, and ``save``/``load`` methods built on this module; the
online policies, the clustering and cascade policies and the pure-exploration algorithms use it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import xarray as xr

from hierbandit._container import read_netcdf
from hierbandit._io import write_sealed_netcdf
from hierbandit._restore import allow_class, restore
from hierbandit._version import __version__
from hierbandit.errors import InvalidFileError

__all__ = [
    "FORMAT_VERSION",
    "InvalidFileError",
    "SharedStateMixin",
    "allow_class",
    "load_checkpoint",
    "save_checkpoint",
    "upgrade_checkpoint",
]

#: version of the checkpoint layout; bumped on incompatible changes (2: sealed file, arrays
#: declare their shape and dtype, classes from an explicit allow-list)
FORMAT_VERSION = 2
_ATTR = "hierbandit_checkpoint"
#: the sealed-file kind of a checkpoint (:mod:`hierbandit._container`)
KIND = "checkpoint"


def _class_path(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


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
        return {
            "__array__": key,
            "shape": list(arr.shape),
            "dtype": arr.dtype.str,
            "writeable": bool(arr.flags.writeable),
        }

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


def save_checkpoint(obj: Any, path: str | os.PathLike[str]) -> Path:
    """Write the full state of ``obj`` (a policy, statistics object, ...) to ``path``.

    Parameters
    ----------
    obj
        An object of a class defined in ``hierbandit`` whose state consists of NumPy arrays,
        plain Python values, NumPy random generators, dataclasses, DataTree-serialisable
        objects and other such hierbandit objects.
    path : str or path-like
        Destination ``.nc`` file; written atomically (a crash keeps any previous file intact)
        and sealed with its size and SHA-256 (:mod:`hierbandit._container`).

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
    return write_sealed_netcdf(tree, path, KIND)


def load_checkpoint(path: str | os.PathLike[str], *, expected: type | None = None) -> Any:
    """Restore an object written by :func:`save_checkpoint`.

    ``expected``: if given, the file must hold an instance of this class (or a subclass);
    this is checked from the class name before anything is built.

    The file is untrusted input: its seal (size and SHA-256) is verified and its container
    walked in a separate interpreter with a deadline before it is parsed
    (:func:`hierbandit._container.read_netcdf`); only classes of the allow-list can be named
    (:mod:`hierbandit._restore`); every array must be declared with its shape and dtype and
    every variable of the file referenced; and the restored object is checked against a
    fresh object built from its own configuration (every attribute present with the same
    type, shape and dtype, the same sharing of arrays, finite values, indices in range,
    consistent statistics) before it is returned. Nothing is executed.

    Raises
    ------
    FileNotFoundError
        If there is no file at ``path``.
    hierbandit.errors.InvalidFileError
        (a ``ValueError``) if the file is not a valid checkpoint of this format version, for
        any of the reasons above; the message names the file and the reason.
    TypeError
        If the file holds a valid checkpoint of a class other than ``expected``.
    """
    path = Path(path)
    tree = read_netcdf(path, KIND)
    attrs = tree.attrs
    text = attrs.get(_ATTR)
    if not isinstance(text, str):
        raise InvalidFileError(path, "not a hierbandit checkpoint (no object description)")
    version = attrs.get("format_version")
    if not isinstance(version, int | np.integer) or int(version) != FORMAT_VERSION:
        raise InvalidFileError(
            path,
            f"checkpoint format {version!r}; this version reads format {FORMAT_VERSION}",
        )
    try:
        state = json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidFileError(path, "corrupt object description (not JSON)") from None
    return restore(state, tree, path, expected)


def upgrade_checkpoint(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> Path:
    """Rewrite a checkpoint of format 1 (before sealed files) in the current format.

    Only for a file you trust, since a format-1 file carries no checksum. Everything else is
    checked as :func:`load_checkpoint` does (the container is walked with a deadline, only
    allow-listed classes, the state against a fresh object of its configuration); the array
    declarations that format 1 lacked are taken from the file's variables. Returns
    ``destination``, written atomically and sealed.

    Raises
    ------
    hierbandit.errors.InvalidFileError
        If ``source`` is not a valid format-1 checkpoint.
    """
    source = Path(source)
    tree = read_netcdf(source, None)
    if tree.attrs.get("format_version") != 1 or not isinstance(tree.attrs.get(_ATTR), str):
        raise InvalidFileError(source, "not a hierbandit checkpoint of format 1")
    try:
        state = json.loads(tree.attrs[_ATTR])
    except (ValueError, RecursionError):
        raise InvalidFileError(source, "corrupt object description (not JSON)") from None
    arrays = tree.to_dataset(inherit=False)

    def declare(value: Any, depth: int = 0) -> None:
        if depth > 64:
            raise InvalidFileError(source, "object description nested too deeply")
        if isinstance(value, list):
            for v in value:
                declare(v, depth + 1)
        elif isinstance(value, dict):
            key = value.get("__array__")
            if isinstance(key, str) and key in arrays.data_vars and "shape" not in value:
                value["shape"] = list(arrays[key].shape)
                value["dtype"] = arrays[key].dtype.str
            for v in value.values():
                declare(v, depth + 1)

    declare(state)
    return save_checkpoint(restore(state, tree, source), destination)


# ---------------------------------------------------------------------- shared objects


def _holding_lock(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    wrapper._holds_lock = True  # type: ignore[attr-defined]
    return wrapper


def _constructor_signature(cls: type) -> inspect.Signature:
    """The signature of ``cls(...)``: that of ``cls.__init__`` without its ``self``."""
    sig = inspect.signature(cls.__init__)
    return sig.replace(parameters=list(sig.parameters.values())[1:])


class SharedStateMixin:
    """A re-entrant lock per object, locked public methods, copies and checkpoints.

    Every instance gets its own :class:`threading.RLock` as ``_lock`` (created in ``__new__``,
    so also for objects rebuilt by :mod:`copy`, :mod:`pickle` and checkpoints). The methods a
    class names in ``_locked_methods`` (and their overrides in subclasses) hold the lock for
    the whole call, so calls on one shared object are serialised. Copies and pickles get a
    fresh lock (a lock cannot be copied). ``save(path)`` writes a checkpoint holding the lock;
    ``cls.load(path)`` restores one and checks its class.

    ``__new__`` receives the constructor's arguments too and ignores them, so it takes
    ``(*args, **kwargs)``; to keep that generic form out of :func:`inspect.signature`,
    :func:`help` and the API reference, every subclass gets ``__signature__``, the signature of
    its ``__init__`` without ``self``. (The lock is made in ``__new__`` rather than on first
    use so that every object holds it from construction on, like its copies and restored
    checkpoints.)
    """

    #: attributes recreated (not stored) by copies and checkpoints: ``{name: factory}``
    _checkpoint_transient: ClassVar[dict[str, Any]] = {"_lock": threading.RLock}
    #: public methods that hold the lock (wrapped in every subclass that defines them)
    _locked_methods: ClassVar[tuple[str, ...]] = ()
    #: what ``cls(...)`` takes: nothing for the mixin alone, ``__init__``'s arguments for a
    #: subclass (set by ``__init_subclass__``)
    __signature__: ClassVar[inspect.Signature] = inspect.Signature()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__signature__ = _constructor_signature(cls)
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
        """Restore an object saved with :meth:`save`; it must be an instance of ``cls``.

        The file is untrusted input (:func:`load_checkpoint`): any defect raises
        :class:`~hierbandit.errors.InvalidFileError` (a ``ValueError``) naming the file and the
        reason; a valid checkpoint of another class raises ``TypeError``.
        """
        return load_checkpoint(path, expected=cls)
