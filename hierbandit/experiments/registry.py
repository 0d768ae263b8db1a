"""The experiment framework: parameters, cells, and experiments defined from a shipped file.

An :class:`Experiment` is one reproduction of a paper, split into independent **cells** (for
example one setting × one seed). Its parameters are declared twice, each in the place where it is
easiest to read:

* the **schema** (:class:`Param`: type, choices, bounds, help) lives with the code that uses the
  parameter, in the paper's module (``hierbandit.experiments.sclub`` for ``"sclub"``, …), which
  builds its experiment with :func:`define_experiment`;
* the **values** (defaults shared by every scale, then per-scale values for ``small`` and
  ``paper``) live in a TOML file shipped with the package,
  ``hierbandit/experiments/configs/<name>.toml``: the one home of every default.

This module knows no paper; :mod:`hierbandit.experiments.catalog` lists the experiments.

A user configuration file (TOML or YAML) can override any parameter::

    experiment = "sclub"      # optional; must match the experiment being run
    scale = "small"           # optional
    [params]
    settings = ["1a", "1b"]
    seeds = 2

Parameters resolve in this order, later wins: the file's ``[defaults]``, its ``[scale.<scale>]``
table, the user file's ``[params]``, then explicit overrides (``--set key=value``, ``--seeds``).
Every value is checked against the schema; unknown keys and bad values raise a ``ValueError``
that names the key and what it accepts.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import xarray as xr

from hierbandit._extras import require

__all__ = [
    "SCALES",
    "SEED",
    "Cell",
    "Experiment",
    "Param",
    "config_path",
    "define_experiment",
    "load_user_config",
    "parse_assignment",
    "toml_value",
]

SCALES = ("small", "paper")

#: parameters every experiment has; they change which cells exist, never a cell's result
SWEEP_PARAMS = ("seeds", "seeds_per_cell")

_KINDS = {"int": int, "float": float, "str": str, "bool": bool}


def _type_name(value: Any) -> str:
    return type(value).__name__


@dataclasses.dataclass(frozen=True)
class Param:
    """Schema of one experiment parameter.

    Parameters
    ----------
    name
        Key in configuration files.
    kind
        ``"int"``, ``"float"``, ``"str"`` or ``"bool"``.
    help
        One line shown by ``hierbandit experiment show``.
    many
        The value is a non-empty list of ``kind`` (without duplicates).
    choices
        Allowed values (of the items, for lists).
    minimum
        Smallest allowed number (ints and floats, and their lists).
    optional
        ``None`` (``"none"`` in files, whose formats have no null in TOML) is allowed.
    """

    name: str
    kind: str
    help: str
    many: bool = False
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"Param.kind must be one of {list(_KINDS)}, got {self.kind!r}")

    def _describe_item(self) -> str:
        base = {"int": "an integer", "float": "a number", "str": "a string", "bool": "a boolean"}[
            self.kind
        ]
        if self.choices is not None:
            base = "one of " + ", ".join(repr(c) for c in self.choices)
        if self.minimum is not None:
            base += f" ≥ {self.minimum:g}"
        return base

    def describe(self) -> str:
        """What the parameter accepts, in words."""
        base = self._describe_item()
        if self.many:
            base = f"a non-empty list of {base} without repeats"
        if self.optional:
            base += ' or "none"'
        return base

    def _item(self, value: Any, where: str) -> Any:
        kind = self.kind
        if kind == "bool":
            ok = isinstance(value, bool)
        elif kind == "int":
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        elif kind == "float":
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise ValueError(
                f"{where} must be {self.describe()}, got {_type_name(value)} {value!r}"
            )
        value = _KINDS[kind](value)
        if kind == "float" and not (value == value and abs(value) != float("inf")):
            raise ValueError(f"{where} must be a finite number, got {value!r}")
        if (self.choices is not None and value not in self.choices) or (
            self.minimum is not None and value < self.minimum
        ):
            raise ValueError(f"{where} must be {self._describe_item()}, got {value!r}")
        return value

    def check(self, value: Any, where: str | None = None) -> Any:
        """The validated (normalised) value, or a ``ValueError`` naming ``where``."""
        where = where or f"params.{self.name}"
        if self.optional and (value is None or value == "none"):
            return None
        if not self.many:
            return self._item(value, where)
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise ValueError(
                f"{where} must be {self.describe()}, got {_type_name(value)} {value!r}"
            )
        items = [self._item(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if not items:
            raise ValueError(f"{where} must be {self.describe()}, got an empty list")
        if len(set(map(repr, items))) != len(items):
            raise ValueError(f"{where} must not repeat values, got {items!r}")
        return items


@dataclasses.dataclass(frozen=True)
class Cell:
    """One independent unit of work of an experiment.

    ``key`` is unique within the experiment and safe as a file name; ``spec`` holds the
    JSON-able arguments of :attr:`Experiment.run_cell`; ``depends`` lists the keys of the cells
    whose results the cell needs (they run first and are passed to it).
    """

    key: str
    spec: Mapping[str, Any]
    depends: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.=+")
        if not self.key or not set(self.key) <= allowed or self.key.startswith("."):
            raise ValueError(
                f"Cell.key must be a non-empty file-name-safe string, got {self.key!r}"
            )


#: ``run_cell(params, spec, deps)`` → the cell's Dataset
RunCell = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, xr.Dataset]], xr.Dataset]
#: ``write(params, results, out, annotate)`` → (paths written, Markdown lines for the summary)
Write = Callable[..., tuple[dict[str, Path], list[str]]]


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A named, resumable, distributable reproduction of a paper's experiment.

    Attributes
    ----------
    name, title, paper, description
        Identity; the last three come from the configuration file.
    params
        The schema (:class:`Param`), in display order. Every experiment has ``seeds`` and
        ``seeds_per_cell``.
    defaults
        ``{"small": {...}, "paper": {...}}``: the resolved default values of every parameter at
        each scale (from the configuration file).
    cells
        ``cells(params)`` → list of :class:`Cell`.
    run_cell
        ``run_cell(params, spec, deps)`` → ``xarray.Dataset``; a pure function of its arguments
        (all randomness is seeded from them), so any executor gives the same result.
    write
        ``write(params, results, out, annotate)`` combines the cells' Datasets (``results``:
        key → Dataset), writes data, tables and the paper's plots into ``out`` (calling
        ``annotate(ds)`` on every Dataset it saves, which records the configuration and the
        package version), and returns the written paths and the Markdown lines of the summary.
    timing_vars
        Variables that measure wall time: the only ones that may differ between two runs.
    """

    name: str
    title: str
    paper: str
    description: str
    params: tuple[Param, ...]
    defaults: Mapping[str, Mapping[str, Any]]
    cells: Callable[[Mapping[str, Any]], list[Cell]]
    run_cell: RunCell
    write: Write
    timing_vars: tuple[str, ...] = ()

    @property
    def schema(self) -> dict[str, Param]:
        return {p.name: p for p in self.params}

    def resolve(
        self,
        scale: str = "small",
        overrides: Mapping[str, Any] | None = None,
        *,
        where: str = "params",
    ) -> dict[str, Any]:
        """The validated parameters at ``scale`` with ``overrides`` applied."""
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {list(SCALES)}, got {scale!r}")
        params = dict(self.defaults[scale])
        schema = self.schema
        for key, value in (overrides or {}).items():
            if key not in schema:
                raise ValueError(
                    f"{where}.{key}: unknown parameter of experiment {self.name!r}; "
                    f"choose from {sorted(schema)}"
                )
            params[key] = schema[key].check(value, f"{where}.{key}")
        return params

    def fingerprint(self, params: Mapping[str, Any]) -> str:
        """JSON of the parameters that decide every cell's result (all but the sweep size)."""
        kept = {k: v for k, v in params.items() if k not in SWEEP_PARAMS}
        return json.dumps({"experiment": self.name, "params": kept}, sort_keys=True)

    def fill(self, scale: str, **given: Any) -> dict[str, Any]:
        """``given`` with every ``None`` replaced by the shipped default of that parameter at
        ``scale`` (how the paper's functions take their defaults from the one home, the TOML
        file)."""
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {list(SCALES)}, got {scale!r}")
        defaults = self.defaults[scale]
        unknown = set(given) - set(defaults)
        if unknown:
            raise KeyError(f"experiment {self.name!r} has no parameters {sorted(unknown)}")
        return {k: defaults[k] if v is None else v for k, v in given.items()}


def config_path(name: str) -> Path:
    """The configuration file shipped for experiment ``name``."""
    return Path(str(resources.files("hierbandit.experiments") / "configs" / f"{name}.toml"))


def _read_shipped(name: str, params: tuple[Param, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    path = config_path(name)
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    allowed = {"experiment", "defaults", "scale"}
    unknown = set(raw) - allowed
    if unknown:
        raise ValueError(f"{path}: unknown tables {sorted(unknown)}; allowed {sorted(allowed)}")
    meta = raw.get("experiment", {})
    for key in ("title", "paper", "description"):
        if not isinstance(meta.get(key), str):
            raise ValueError(f"{path}: experiment.{key} must be a string")
    if meta.get("name") != name:
        raise ValueError(f"{path}: experiment.name must be {name!r}, got {meta.get('name')!r}")
    schema = {p.name: p for p in params}
    defaults: dict[str, Any] = {}
    for scale in SCALES:
        table = {**raw.get("defaults", {}), **raw.get("scale", {}).get(scale, {})}
        missing = set(schema) - set(table)
        if missing:
            raise ValueError(f"{path}: scale {scale!r} sets no value for {sorted(missing)}")
        resolved = {}
        for key, value in table.items():
            if key not in schema:
                raise ValueError(f"{path}: unknown parameter {key!r}; choose from {sorted(schema)}")
            resolved[key] = schema[key].check(value, f"{path.name}: {scale}.{key}")
        defaults[scale] = {p.name: resolved[p.name] for p in params}
    return meta, defaults


#: parameters every experiment has, in this order (``seed`` comes last, after its own ones)
COMMON = (
    Param("seeds", "int", "Independent replications (seeds or trials).", minimum=1),
    Param("seeds_per_cell", "int", "Replications per cell (the unit of work).", minimum=1),
)
#: the root seed of every random stream (each experiment lists it last)
SEED = Param("seed", "int", "Root seed of every random stream.", minimum=0)


def define_experiment(
    name: str,
    *,
    params: Iterable[Param],
    cells: Callable[[Mapping[str, Any]], list[Cell]],
    run_cell: RunCell,
    write: Write,
    timing_vars: tuple[str, ...] = (),
) -> Experiment:
    """Experiment ``name`` with its titles and values read from its shipped TOML file.

    ``params`` is the schema of the experiment's own parameters; ``seeds`` and
    ``seeds_per_cell`` (:data:`COMMON`) are added in front unless it declares them.
    """
    params = tuple(params)
    names = [p.name for p in params]
    params = tuple(p for p in COMMON if p.name not in names) + params
    meta, defaults = _read_shipped(name, params)
    return Experiment(
        name=name,
        title=meta["title"],
        paper=meta["paper"],
        description=meta["description"].strip(),
        params=params,
        defaults=defaults,
        cells=cells,
        run_cell=run_cell,
        write=write,
        timing_vars=tuple(timing_vars),
    )


def load_user_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a user configuration file (``.toml``, ``.yaml`` or ``.yml``).

    Returns ``{"experiment": str | None, "scale": str | None, "params": dict}``. The structure
    is checked here; parameter values are checked against the experiment's schema by
    :meth:`Experiment.resolve`.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config: no such file {str(path)!r}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
        elif suffix in (".yaml", ".yml"):
            yaml = require("yaml", "experiments", "A YAML configuration")

            with open(path, encoding="utf-8") as fh:
                raw = yaml.safe_load(fh)
        else:
            raise ValueError(
                f"config: {str(path)!r} must end in .toml, .yaml or .yml, got {suffix!r}"
            )
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"config: {str(path)!r} is not valid TOML: {exc}") from None
    except ImportError:  # MissingExtraError without pyyaml
        raise
    except Exception as exc:
        if type(exc).__module__.startswith("yaml"):
            raise ValueError(f"config: {str(path)!r} is not valid YAML: {exc}") from None
        raise
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"config: {str(path)!r} must hold a table/mapping at the top level")
    allowed = {"experiment", "scale", "params"}
    unknown = set(raw) - allowed
    if unknown:
        raise ValueError(
            f"config: {str(path)!r} has unknown keys {sorted(unknown)}; allowed {sorted(allowed)}"
        )
    exp = raw.get("experiment")
    if exp is not None and not isinstance(exp, str):
        raise ValueError(f"config: experiment must be a string, got {exp!r}")
    scale = raw.get("scale")
    if scale is not None and scale not in SCALES:
        raise ValueError(f"config: scale must be one of {list(SCALES)}, got {scale!r}")
    params = raw.get("params", {})
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise ValueError("config: params must be a table/mapping of parameter names to values")
    return {"experiment": exp, "scale": scale, "params": dict(params)}


def parse_assignment(text: str) -> tuple[str, Any]:
    """``"key=value"`` → ``(key, value)``, the value read as a TOML value when it is one
    (``3``, ``0.5``, ``true``, ``["1a", "1b"]``) and as a bare string otherwise."""
    if not isinstance(text, str) or "=" not in text:
        raise ValueError(f"--set expects key=value, got {text!r}")
    key, _, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not key:
        raise ValueError(f"--set expects key=value, got {text!r}")
    try:
        return key, tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value


def toml_value(value: Any) -> str:
    """A resolved parameter value in TOML syntax (``None`` as ``"none"``), the inverse of
    :func:`parse_assignment` for the values a schema accepts."""
    if value is None:
        return '"none"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)  # ints, finite floats, bools and strings are valid TOML too
