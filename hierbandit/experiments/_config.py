"""Configuration records and policy factories shared by every experiment runner.

Each runner (the ebm simulation, the cascade and clustering reproductions) accepts its policies
as a mapping ``name -> policy prototype`` or ``name -> callable(rng)`` and records every
configuration as JSON in the attributes of the Dataset it returns.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "check_seed",
    "config_json",
    "jsonable",
    "resolve_factories",
    "seed_children",
]


def jsonable(obj: Any, _depth: int = 0) -> Any:
    """A JSON-serialisable rendering of a configuration value (arrays become lists)."""
    if _depth > 8:
        return repr(obj)
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        v = float(obj)
        return v if math.isfinite(v) else repr(v)
    if isinstance(obj, np.ndarray):
        if obj.size > 1000:
            return f"<array shape={obj.shape} dtype={obj.dtype}>"
        return jsonable(obj.tolist(), _depth + 1)
    if isinstance(obj, np.random.Generator | np.random.SeedSequence):
        return "<per-seed stream>"
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v, _depth + 1) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name), _depth + 1) for f in dataclasses.fields(obj)}
    return repr(obj)


def config_json(obj: Any, *, per_seed_rng: bool = False) -> str:
    """``{"class": ..., "params": get_params()}`` as JSON (``rng`` marked per seed if asked)."""
    params = dict(obj.get_params()) if hasattr(obj, "get_params") else {}
    if per_seed_rng and "rng" in params:
        params["rng"] = "<per-seed stream>"
    return json.dumps({"class": type(obj).__qualname__, "params": jsonable(params)})


def resolve_factories(
    policies: Any, base: type, kind: str | None = None
) -> list[tuple[str, Callable[[np.random.Generator], Any]]]:
    """Validate ``policies`` (name → prototype of ``base`` or callable(rng)) into factories.

    A prototype is cloned with each run's generator; a callable is called with it.
    """
    kind = kind or base.__name__
    if not isinstance(policies, Mapping):
        raise TypeError(
            f"policies must be a mapping name -> {kind} (or name -> callable(rng) returning a "
            f"{kind}), got {type(policies).__name__}"
        )
    if len(policies) == 0:
        raise ValueError("policies must contain at least one policy")
    out: list[tuple[str, Callable[[np.random.Generator], Any]]] = []
    for name, value in policies.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"policies keys must be non-empty strings, got {name!r}")
        if isinstance(value, base):
            out.append((name, lambda rng, proto=value: proto.clone(rng=rng)))
        elif callable(value):
            out.append((name, value))
        else:
            raise TypeError(
                f"policies[{name!r}] must be a {kind} or a callable(rng) returning a {kind}, "
                f"got {type(value).__name__}"
            )
    return out


def check_seed(value: Any, name: str = "seed") -> int:
    """Validate a non-negative int seed: a root seed, or the start of a window of seeds/trials."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a non-negative int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value}")
    return int(value)


def seed_children(seed: int, first_seed: int, n_seeds: int) -> list[np.random.SeedSequence]:
    """Children ``first_seed … first_seed + n_seeds − 1`` of ``SeedSequence(seed)``.

    Child ``s`` equals ``SeedSequence(seed).spawn(S)[s]`` for any ``S > s``, so a window of seeds
    run on its own reproduces exactly the same replications as one run over all seeds: the
    experiment interface uses this to split sweeps into independent cells.
    """
    return [
        np.random.SeedSequence(seed, spawn_key=(s,))
        for s in range(first_seed, first_seed + n_seeds)
    ]
