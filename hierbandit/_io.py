"""Safe file writing shared by every artifact the package produces.

Every write goes to a temporary file in the destination folder, is flushed to disk, given the
usual permissions (``0o666 & ~umask``; ``mkstemp`` creates ``0600``) and atomically renamed, so an
interrupted write never leaves a half-written file where the previous one was. Files are netCDF
and JSON only — never pickle.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_write",
    "decode_attrs",
    "netcdf_attrs",
    "to_jsonable",
    "write_dataset",
    "write_json",
]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path``, then rename it onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def netcdf_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """netCDF attributes must be strings, numbers or numeric arrays: encode the rest as JSON
    (prefixed ``json:``, see :func:`decode_attrs`); booleans become 0/1."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, bool | np.bool_):
            out[key] = int(value)
        elif isinstance(value, str | int | float | np.integer | np.floating) or (
            isinstance(value, np.ndarray) and value.dtype.kind in "iuf"
        ):
            out[key] = value
        else:
            out[key] = "json:" + json.dumps(value, default=str)
    return out


def decode_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`netcdf_attrs` for the JSON-encoded values."""
    return {
        k: (json.loads(v[5:]) if isinstance(v, str) and v.startswith("json:") else v)
        for k, v in attrs.items()
    }


def write_dataset(ds: Any, path: str | os.PathLike[str]) -> Path:
    """Write an xarray Dataset to netCDF atomically, with netCDF-safe attributes."""
    clean = ds.copy()
    clean.attrs = netcdf_attrs(dict(ds.attrs))
    return atomic_write(path, lambda tmp: clean.to_netcdf(tmp, engine="h5netcdf"))


def to_jsonable(value: Any) -> Any:
    """Plain JSON types from nested dicts/lists of numpy values and paths; non-finite floats
    become the strings "inf", "-inf", "nan" (JSON has no such numbers)."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        v = float(value)
        return v if np.isfinite(v) else str(v)
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` (see :func:`to_jsonable`) as indented UTF-8 JSON, atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
