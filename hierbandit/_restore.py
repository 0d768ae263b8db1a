"""Rebuild a checkpoint's object from its untrusted description, and check it before use.

A checkpoint (:mod:`hierbandit.checkpoint`) describes an object graph in JSON whose arrays are
variables of the file. Everything in it is untrusted. This module is the one place that turns
it into objects, so the allow-list and the rules of every class are reviewed together:

1. **Allow-list.** Only the classes listed here can be named: the online state classes
   (policies, clustering and cascade policies, pure-exploration algorithms), the statistics
   objects they hold, one options dataclass, the fitted prior (rebuilt through its own
   validating ``from_datatree``) and NumPy's bit generators. A name is looked up in these
   tables, never resolved by walking attributes, and each role (object, dataclass, tree,
   bit generator) has its own table. :func:`allow_class` adds a class of the caller's.
2. **Declared arrays.** Every array entry declares its shape and dtype (numeric only); the
   file's variable must match before it is read, each variable is used once, and every
   variable and child group of the file must be referenced.
3. **Template.** The restored object is compared with a fresh object built by its class's
   constructor from the restored configuration (so the configuration passes the
   constructor's own validation, including its size limits): the same attributes, recursively
   the same types, shapes, dtypes and writeable flags, the same sharing of arrays and
   generators, and finite floats except where the class's state may hold ±inf. Attributes
   whose shape depends on the run are listed per class and checked by its rule instead.
4. **Class rules.** Indices that compiled kernels follow without bounds checks (member lists,
   labels, slots, pending arms) are checked to be in range and acyclic, counters to be
   non-negative, pooled statistics to equal the sums of their members.

Any failure raises :class:`_Refused`, turned into :class:`~hierbandit.errors.InvalidFileError`
by :func:`restore`; the object is never returned to the caller.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from hierbandit.errors import InvalidFileError

__all__ = ["allow_class", "restore"]


class _Refused(Exception):
    """The description or the restored state is invalid (the message says why)."""


# ---------------------------------------------------------------------- allow-lists

#: state objects (rebuilt with ``cls.__new__`` and their attributes)
_OBJECTS = {
    "hierbandit.ebm.policy:EbmTS",
    "hierbandit.ebm.policy:EbmUCB",
    "hierbandit.ebm.linear:LinUCB",
    "hierbandit.ebm.linear:LinTS",
    "hierbandit.ebm.linear:OLSBandit",
    "hierbandit.ebm.rmbandit:RMBandit",
    "hierbandit.cascade.policies:UCBBP",
    "hierbandit.cascade.policies:AUCBBP",
    "hierbandit.cascade.policies:CascadeEpsilonGreedy",
    "hierbandit.cascade.policies:CascadeGreedy",
    "hierbandit.cascade.policies:CascadeRandom",
    "hierbandit.cascade.policies:CascadeLinUCB",
    "hierbandit.cascade.policies:CascadeLinTS",
    "hierbandit.sclub.policies:SCLUB",
    "hierbandit.sclub.policies:CLUB",
    "hierbandit.sclub.policies:LinUCBOne",
    "hierbandit.sclub.policies:LinUCBInd",
    "hierbandit.boc.explorers:BOC",
    "hierbandit.boc.explorers:BOCLE",
    "hierbandit.boc.explorers:Uniform",
    "hierbandit.boc.explorers:Oracle",
    "hierbandit.stats.ridge:RidgeStats",
    "hierbandit.stats.ridge:OLSStats",
    "hierbandit.sclub.cluster_stats:ClusterStats",
    "hierbandit.stats.logistic:OnlineLogistic",
    "hierbandit._labels:Labels",
}
#: frozen option dataclasses (rebuilt with their constructor, which validates them)
_DATACLASSES = {"hierbandit.stats.empirical_bayes:EBOptions"}
#: objects stored as a child group (rebuilt with their validating ``from_datatree``)
_TREES = {"hierbandit.bayes.prior:HierarchicalPrior"}
_BIT_GENERATORS = {
    f"{c.__module__}:{c.__qualname__}": c
    for c in (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)
} | {f"{np.random.MT19937.__module__}:{np.random.MT19937.__qualname__}": np.random.MT19937}
_EXTRA: dict[str, type] = {}

#: where each allowed class lived before the package took one folder per paper; checkpoints
#: written then name these, and load as the class's current home
_MOVED_MODULES = {
    "hierbandit.policies.ebm": "hierbandit.ebm.policy",
    "hierbandit.policies.linear": "hierbandit.ebm.linear",
    "hierbandit.policies.rmbandit": "hierbandit.ebm.rmbandit",
    "hierbandit.policies.cascade": "hierbandit.cascade.policies",
    "hierbandit.policies.clustering": "hierbandit.sclub.policies",
    "hierbandit.exploration.boc": "hierbandit.boc.explorers",
    "hierbandit.stats.cluster_stats": "hierbandit.sclub.cluster_stats",
}


def _current_name(name: Any) -> Any:
    """The allow-list name of a class named by a checkpoint of an earlier layout."""
    if isinstance(name, str):
        module, sep, qualname = name.partition(":")
        if module in _MOVED_MODULES:
            return f"{_MOVED_MODULES[module]}{sep}{qualname}"
    return name


def allow_class(cls: type) -> type:
    """Allow checkpoints to name ``cls`` (a subclass of a hierbandit state class that the
    caller defined). Its instances are checked like those of its base class: against a fresh
    object of ``cls`` built from their configuration. Usable as a class decorator."""
    if not isinstance(cls, type) or not hasattr(cls, "__dict__"):
        raise TypeError("cls must be a class")
    _EXTRA[f"{cls.__module__}:{cls.__qualname__}"] = cls
    return cls


def _resolve(name: Any, table: set[str], role: str) -> type:
    name = _current_name(name)
    if isinstance(name, str) and name in _EXTRA and table is _OBJECTS:
        return _EXTRA[name]
    if not isinstance(name, str) or name not in table:
        raise _Refused(f"names {role} {name!r}, which is not on the allow-list")
    module, _, qualname = name.partition(":")
    cls = getattr(importlib.import_module(module), qualname)
    if f"{cls.__module__}:{cls.__qualname__}" != name:  # pragma: no cover - a renamed class
        raise _Refused(f"allow-list entry {name!r} does not name its class")
    return cls


# ---------------------------------------------------------------------- decoding

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DTYPE = re.compile(r"^(\|b1|[<>|][iuf][1248]|\|[iu]1)$")
_MAX_DEPTH = 64
_TAGS: dict[str, set[str]] = {
    "__ref__": {"__ref__"},
    "__array__": {"__array__", "shape", "dtype", "writeable"},
    "__tuple__": {"__tuple__"},
    "__dict__": {"__dict__"},
    "__float__": {"__float__"},
    "__np_scalar__": {"__np_scalar__", "value"},
    "__range__": {"__range__"},
    "__generator__": {"__generator__", "state"},
    "__tree__": {"__tree__", "class"},
    "__dataclass__": {"__dataclass__", "fields"},
    "__object__": {"__object__", "attrs"},
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Decoder:
    def __init__(self, arrays: xr.Dataset, tree: xr.DataTree) -> None:
        self.arrays = arrays
        self.tree = tree
        self.memo: dict[str, Any] = {}
        self.used_arrays: set[str] = set()
        self.used_trees: set[str] = set()

    def decode(self, value: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise _Refused("object description nested too deeply")
        if value is None or isinstance(value, bool | str):
            return value
        if _is_int(value):
            return value
        if isinstance(value, float):
            return value
        if isinstance(value, list):
            return [self.decode(v, depth + 1) for v in value]
        if not isinstance(value, dict):
            raise _Refused(f"unexpected JSON value {type(value).__name__}")
        tags = [k for k in _TAGS if k in value]
        if len(tags) != 1 or set(value) - {"__id__"} != _TAGS[tags[0]]:
            raise _Refused(f"unknown entry with keys {sorted(value)[:8]}")
        tag = tags[0]
        if tag == "__ref__":
            ref = value["__ref__"]
            if not isinstance(ref, str) or ref not in self.memo:
                raise _Refused("reference to an object not defined before")
            return self.memo[ref]
        if "__id__" in value and tag not in (
            "__array__",
            "__generator__",
            "__tree__",
            "__object__",
        ):
            raise _Refused(f"a {tag} entry cannot be shared")
        out = getattr(self, "_" + tag.strip("_"))(value, depth)
        if "__id__" in value:
            ref = value["__id__"]
            if not isinstance(ref, str) or ref in self.memo:
                raise _Refused("duplicate or invalid object id")
            self.memo[ref] = out
        return out

    def _array(self, value: dict[str, Any], depth: int) -> np.ndarray:
        key, shape, dtype = value["__array__"], value["shape"], value["dtype"]
        if not isinstance(key, str) or key not in self.arrays.data_vars:
            raise _Refused(f"array {key!r} is not a variable of the file")
        if key in self.used_arrays:
            raise _Refused(f"variable {key!r} is used twice")
        if not isinstance(dtype, str) or not _DTYPE.match(dtype):
            raise _Refused(f"array {key!r} declares dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_int(n) and n >= 0 for n in shape):
            raise _Refused(f"array {key!r} declares shape {shape!r}")
        if not isinstance(value["writeable"], bool):
            raise _Refused(f"array {key!r}: writeable must be a boolean")
        var = self.arrays[key].variable
        if var.dtype != np.dtype(dtype) or list(var.shape) != shape:
            raise _Refused(
                f"variable {key!r} is {var.dtype.str}{list(var.shape)}, declared {dtype}{shape}"
            )
        self.used_arrays.add(key)
        arr = np.array(var.values, dtype=np.dtype(dtype))
        arr.flags.writeable = value["writeable"]
        return arr

    def _tuple(self, value: dict[str, Any], depth: int) -> tuple:
        items = value["__tuple__"]
        if not isinstance(items, list):
            raise _Refused("a tuple entry must hold a list")
        return tuple(self.decode(v, depth + 1) for v in items)

    def _dict(self, value: dict[str, Any], depth: int) -> dict:
        items = value["__dict__"]
        if not isinstance(items, dict):
            raise _Refused("a dict entry must hold an object")
        return {k: self.decode(v, depth + 1) for k, v in items.items()}

    def _float(self, value: dict[str, Any], depth: int) -> float:
        text = value["__float__"]
        if text not in ("inf", "-inf", "nan"):
            raise _Refused(f"special float {text!r}")
        return float(text)

    def _np_scalar(self, value: dict[str, Any], depth: int) -> Any:
        kind, v = value["__np_scalar__"], value["value"]
        if kind == "bool":
            if not isinstance(v, bool):
                raise _Refused("a NumPy boolean must hold a boolean")
            return np.bool_(v)
        if not isinstance(kind, str) or not _DTYPE.match(kind) or kind == "|b1":
            raise _Refused(f"NumPy scalar of dtype {kind!r}")
        if isinstance(v, str):
            v = self._float({"__float__": v}, depth)
        if not (_is_int(v) or isinstance(v, float)):
            raise _Refused("a NumPy scalar must hold a number")
        dt = np.dtype(kind)
        if dt.kind in "iu" and (not _is_int(v) or not np.iinfo(dt).min <= v <= np.iinfo(dt).max):
            raise _Refused(f"{v!r} is not a {dt} value")
        return dt.type(v)

    def _range(self, value: dict[str, Any], depth: int) -> range:
        args = value["__range__"]
        if not isinstance(args, list) or len(args) != 3 or not all(map(_is_int, args)):
            raise _Refused("a range must hold three integers")
        if args[2] == 0:
            raise _Refused("a range step cannot be zero")
        return range(*args)

    def _generator(self, value: dict[str, Any], depth: int) -> np.random.Generator:
        name = value["__generator__"]
        if not isinstance(name, str) or name not in _BIT_GENERATORS:
            raise _Refused(f"names bit generator {name!r}, which is not on the allow-list")
        bg = _BIT_GENERATORS[name]()
        if not isinstance(value["state"], dict):
            raise _Refused("a generator state must be an object")
        try:
            bg.state = value["state"]
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            raise _Refused(f"invalid {name} state ({exc})") from None
        return np.random.Generator(bg)

    def _tree(self, value: dict[str, Any], depth: int) -> Any:
        key = value["__tree__"]
        cls = _resolve(value["class"], _TREES, "stored object")
        if not isinstance(key, str) or key not in self.tree.children or key in self.used_trees:
            raise _Refused(f"stored object {key!r} is missing or used twice")
        self.used_trees.add(key)
        try:
            return cls.from_datatree(self.tree[key])
        except (TypeError, ValueError, KeyError) as exc:
            raise _Refused(f"invalid {cls.__name__} ({exc})") from None

    def _dataclass(self, value: dict[str, Any], depth: int) -> Any:
        cls = _resolve(value["__dataclass__"], _DATACLASSES, "dataclass")
        fields = value["fields"]
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        # fields the class gained after the file was written take the value the older
        # options imply (the behaviour the file was saved with)
        added = getattr(cls, "_checkpoint_added", {})
        if not isinstance(fields, dict) or not (
            set(fields) <= names and names - set(fields) <= set(added)
        ):
            raise _Refused(f"{cls.__name__} fields do not match")
        try:
            decoded = {k: self.decode(v, depth + 1) for k, v in fields.items()}
            for name in names - set(fields):
                decoded[name] = added[name](decoded)
            return cls(**decoded)
        except (TypeError, ValueError) as exc:
            raise _Refused(f"invalid {cls.__name__} ({exc})") from None

    def _object(self, value: dict[str, Any], depth: int) -> Any:
        cls = _resolve(value["__object__"], _OBJECTS, "class")
        attrs = value["attrs"]
        if not isinstance(attrs, dict):
            raise _Refused(f"{cls.__name__} attributes must be an object")
        for name in attrs:
            if not _NAME.match(name) or name.startswith("__"):
                raise _Refused(f"{cls.__name__} attribute name {name[:40]!r}")
        # attributes older files carry that the class now derives or stores differently:
        # readable by the functions of ``_checkpoint_added`` (in the instance's ``__dict__``,
        # beside any property of that name), then removed
        dropped = getattr(cls, "_checkpoint_dropped", frozenset())
        decoded = {name: self.decode(v, depth + 1) for name, v in attrs.items()}
        obj = cls.__new__(cls)
        for name, v in decoded.items():
            if name in dropped:
                vars(obj)[name] = v
            else:
                object.__setattr__(obj, name, v)
        # attributes the class gained after the file was written: the value the older state
        # implies (then checked like the rest)
        for name, implied in getattr(cls, "_checkpoint_added", {}).items():
            if name not in decoded:
                try:
                    object.__setattr__(obj, name, implied(obj))
                except (AttributeError, TypeError, ValueError, IndexError) as exc:
                    raise _Refused(
                        f"{cls.__name__} lacks what {name!r} follows from ({exc})"
                    ) from exc
        for name in dropped:
            vars(obj).pop(name, None)
        for name, factory in getattr(cls, "_checkpoint_transient", {}).items():
            object.__setattr__(obj, name, factory())
        return obj

    def finish(self) -> None:
        extra = sorted(set(self.arrays.data_vars) - self.used_arrays)
        if extra:
            raise _Refused(f"variables {extra[:5]} are not part of the described state")
        extra = sorted(set(self.tree.children) - self.used_trees)
        if extra:
            raise _Refused(f"groups {extra[:5]} are not part of the described state")
        if any(v.ndim for v in self.arrays.coords.values()):
            raise _Refused("the file has coordinate variables a checkpoint never holds")


# ---------------------------------------------------------------------- validation


@dataclasses.dataclass(frozen=True)
class Rule:
    """How a class's restored state is checked beyond the template comparison.

    ``dynamic``: attributes whose type or shape depends on the run (checked by ``check``);
    ``nonfinite``: float attributes that may hold ±inf or NaN; ``fixed``: attributes the
    constructor derives from the configuration and nothing changes, which must equal the
    template's values; ``check(obj)`` raises ``ValueError`` for an inconsistent state.
    """

    dynamic: frozenset[str] = frozenset()
    nonfinite: frozenset[str] = frozenset()
    fixed: frozenset[str] = frozenset()
    check: Callable[[Any], None] | None = None


#: rules by class; a class without an entry gets ``Rule()`` (template comparison only)
RULES: dict[str, Rule] = {}


def _rule(obj: Any) -> Rule:
    for klass in type(obj).__mro__:
        rule = RULES.get(f"{klass.__module__}:{klass.__qualname__}")
        if rule is not None:
            return rule
    return Rule()


def _is_state(value: Any) -> bool:
    return (
        not isinstance(value, type)
        and type(value).__module__.startswith("hierbandit")
        and hasattr(value, "__dict__")
        and not dataclasses.is_dataclass(value)
        and not hasattr(type(value), "from_datatree")
    )


def _same_value(a: Any, b: Any) -> bool:
    """Equal values (arrays element-wise with NaN equal to NaN; sequences item by item)."""
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_same_value, a, b))
    return bool(a == b) or (a != a and b != b)  # NaN scalars


def _scalar_config(t: Any) -> set[str]:
    """The attributes of ``t`` that hold a scalar constructor argument (sizes, settings).

    In a template they are what the configuration implies, also for nested objects (a
    policy's statistics object gets its sizes from the policy), so a restored object must
    hold the same values: a nested size that disagrees with its arrays would send a compiled
    kernel out of bounds."""
    state = vars(t)
    names = set()
    for name in inspect.signature(type(t).__init__).parameters:
        value = state.get(name, _MISSING)
        if value is None or isinstance(value, bool | int | float | str | np.generic):
            names.add(name)
    return names


_MISSING = object()


def _template(obj: Any) -> Any:
    """A fresh object of ``type(obj)`` built from the configuration ``obj`` holds."""
    cls = type(obj)
    state = vars(obj)
    kwargs = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name in state:
            kwargs[name] = state[name]
        elif p.default is p.empty:
            raise _Refused(f"{cls.__name__} is missing its configuration {name!r}")
    try:
        return cls(**copy.deepcopy(kwargs))
    except (TypeError, ValueError, OverflowError) as exc:
        raise _Refused(f"invalid {cls.__name__} configuration ({exc})") from None


class _Checker:
    def __init__(self) -> None:
        self.r2t: dict[int, Any] = {}
        self.t2r: dict[int, Any] = {}
        self._keep: list[Any] = []

    def _pair(self, r: Any, t: Any, where: str) -> bool:
        """Record that ``r`` plays the part of ``t``; False if already compared."""
        seen_t, seen_r = self.t2r.get(id(t)), self.r2t.get(id(r))
        if seen_t is None and seen_r is None:
            self.t2r[id(t)], self.r2t[id(r)] = r, t
            self._keep += [r, t]
            return True
        if seen_t is r and seen_r is t:
            return False
        raise _Refused(f"{where} is shared with other parts of the state differently than saved")

    def compare(self, r: Any, t: Any, where: str, nonfinite: bool = False) -> None:
        if type(r) is not type(t):
            raise _Refused(f"{where} is a {type(r).__name__}, expected a {type(t).__name__}")
        shared = isinstance(t, np.ndarray | np.random.Generator) or _is_state(t)
        if shared and not self._pair(r, t, where):
            return
        if isinstance(t, np.ndarray):
            if r.shape != t.shape or r.dtype != t.dtype:
                raise _Refused(
                    f"{where} has shape {r.shape} and dtype {r.dtype}, expected {t.shape} {t.dtype}"
                )
            if r.flags.writeable != t.flags.writeable:
                raise _Refused(f"{where} has the wrong writeable flag")
            if r.dtype.kind == "f" and not nonfinite and not np.all(np.isfinite(r)):
                raise _Refused(f"{where} holds NaN or inf")
        elif isinstance(t, np.random.Generator):
            if type(r.bit_generator) is not type(t.bit_generator):
                raise _Refused(f"{where} has the wrong bit generator")
        elif isinstance(t, float | np.floating):
            if not nonfinite and not np.isfinite(r):
                raise _Refused(f"{where} is not finite")
        elif isinstance(t, list | tuple):
            if len(r) != len(t):
                raise _Refused(f"{where} has {len(r)} items, expected {len(t)}")
            for i, (a, b) in enumerate(zip(r, t, strict=True)):
                self.compare(a, b, f"{where}[{i}]", nonfinite)
        elif isinstance(t, dict):
            if set(r) != set(t):
                raise _Refused(f"{where} has keys {sorted(r)}, expected {sorted(t)}")
            for k in t:
                self.compare(r[k], t[k], f"{where}[{k!r}]", nonfinite)
        elif dataclasses.is_dataclass(t):
            for f in dataclasses.fields(t):
                self.compare(getattr(r, f.name), getattr(t, f.name), f"{where}.{f.name}")
        elif _is_state(t):
            self.state(r, t, where)

    def state(self, r: Any, t: Any, where: str) -> None:
        rule = _rule(t)
        transient = set(getattr(type(t), "_checkpoint_transient", {}))
        names_r, names_t = set(vars(r)) - transient, set(vars(t)) - transient
        if names_r != names_t:
            missing, extra = sorted(names_t - names_r), sorted(names_r - names_t)
            raise _Refused(f"{where} attributes differ (missing {missing}, unexpected {extra})")
        config = _scalar_config(t)
        for name in sorted(names_t):
            value = vars(r)[name]
            if name in config and not _same_value(value, vars(t)[name]):
                raise _Refused(
                    f"{where}.{name} = {value!r} does not match its owner's configuration "
                    f"({vars(t)[name]!r})"
                )
            if name in rule.dynamic:
                self.plain(value, f"{where}.{name}", name in rule.nonfinite)
            else:
                self.compare(value, vars(t)[name], f"{where}.{name}", name in rule.nonfinite)
            if name in rule.fixed and not _same_value(value, vars(t)[name]):
                raise _Refused(f"{where}.{name} does not follow from the configuration")
        if rule.check is not None:
            try:
                rule.check(r)
            except (ValueError, TypeError, IndexError) as exc:
                raise _Refused(f"{where}: {exc}") from None

    def plain(self, value: Any, where: str, nonfinite: bool) -> None:
        """A run-dependent value: plain data only (arrays, numbers, strings), finite."""
        if isinstance(value, np.ndarray):
            if value.dtype.kind == "f" and not nonfinite and not np.all(np.isfinite(value)):
                raise _Refused(f"{where} holds NaN or inf")
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                self.plain(v, f"{where}[{i}]", nonfinite)
        elif isinstance(value, dict):
            for k, v in value.items():
                self.plain(v, f"{where}[{k!r}]", nonfinite)
        elif isinstance(value, float | np.floating):
            if not nonfinite and not np.isfinite(value):
                raise _Refused(f"{where} is not finite")
        elif not (value is None or isinstance(value, bool | int | str | np.integer | np.bool_)):
            raise _Refused(f"{where} holds a {type(value).__name__}")


def restore(state: Any, tree: xr.DataTree, path: str | Path, expected: type | None = None) -> Any:
    """The object a checkpoint describes, checked (see the module's docstring).

    Raises :class:`~hierbandit.errors.InvalidFileError` naming ``path`` and the reason, or
    ``TypeError`` if the file holds a valid class that is not ``expected`` (checked before
    anything is built).
    """
    try:
        if not isinstance(state, dict) or "__object__" not in state:
            raise _Refused("the described object is not a state object")
        cls = _resolve(state["__object__"], _OBJECTS, "class")
        if expected is not None and not issubclass(cls, expected):
            raise TypeError(f"{path} holds a {cls.__name__}, not a {expected.__name__}")
        dec = _Decoder(tree.to_dataset(inherit=False), tree)
        obj = dec.decode(state)
        dec.finish()
        _Checker().state(obj, _template(obj), type(obj).__name__)
    except _Refused as exc:
        raise InvalidFileError(path, f"invalid checkpoint: {exc}") from None
    except TypeError as exc:
        if str(exc).startswith(f"{path} holds a "):
            raise
        raise InvalidFileError(path, f"invalid checkpoint (TypeError: {exc})") from None
    except (ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        raise InvalidFileError(path, f"invalid checkpoint ({type(exc).__name__}: {exc})") from None
    except RecursionError:
        raise InvalidFileError(path, "invalid checkpoint: nested too deeply") from None
    return obj


from hierbandit import _restore_rules  # noqa: E402,F401  (fills RULES)
