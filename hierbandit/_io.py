"""Safe file writing shared by every artifact the package produces.

Every write goes to a temporary file in the destination folder, is flushed to disk, given the
usual permissions (``0o666 & ~umask``; ``mkstemp`` creates ``0600``) and atomically renamed, so an
interrupted write never leaves a half-written file where the previous one was; the temporary
files of writers killed mid-write are removed by the next write of the same file. Files are
netCDF and JSON only — never pickle. netCDF files that the package reads back (checkpoints,
priors, sweep cells, results) are sealed: :mod:`hierbandit._container`.
"""

from __future__ import annotations

import glob
import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_write",
    "decode_attrs",
    "netcdf_attrs",
    "remove_orphans",
    "to_jsonable",
    "write_dataset",
    "write_json",
    "write_sealed_netcdf",
]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"
#: a temporary file of a writer on another host is removed once it is this old (seconds)
ORPHAN_AGE = 24 * 3600.0


def _temp_prefix(path: Path) -> str:
    return f".{path.name}.{_HOST}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user
        return True
    return True


def remove_orphans(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files that writers of ``path`` killed mid-write left behind.

    A temporary file is named ``.NAME.HOST-PID.RANDOM.tmp``. It is an orphan when its writer
    ran on this host and that process no longer exists, or when it is older than
    :data:`ORPHAN_AGE` (a writer on another host sharing the folder). Temporary files of live
    writers are left alone. Returns the files removed.
    """
    path = Path(path)
    removed = []
    now = time.time()
    try:
        candidates = list(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))
    except OSError:
        return removed
    for tmp in candidates:
        rest = tmp.name[len(path.name) + 2 : -len(".tmp")]
        owner, _, _ = rest.rpartition(".")
        host, _, pid = owner.rpartition("-")
        try:
            dead = host == _HOST and pid.isdigit() and not _alive(int(pid))
            if dead or now - tmp.lstat().st_mtime > ORPHAN_AGE:
                tmp.unlink()
                removed.append(tmp)
        except OSError:  # removed meanwhile, or not ours to remove
            continue
    return removed


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path``, then rename it onto ``path``.

    Orphaned temporary files of earlier writers of ``path`` that were killed mid-write are
    removed first (:func:`remove_orphans`); an exception during the write removes this one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path)
    fd, name = tempfile.mkstemp(
        prefix=f"{_temp_prefix(path)}{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
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


def write_sealed_netcdf(obj: Any, path: str | os.PathLike[str], kind: str) -> Path:
    """Write a Dataset or DataTree as a sealed netCDF file (see :mod:`hierbandit._container`),
    atomically: the netCDF payload behind a header holding its kind, size and SHA-256."""
    from hierbandit._container import seal

    def write(tmp: Path) -> None:
        obj.to_netcdf(tmp, engine="h5netcdf")
        payload = tmp.read_bytes()
        with open(tmp, "wb") as fh:
            fh.write(seal(payload, kind))
            fh.write(payload)

    return atomic_write(path, write)


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


def write_dataset(ds: Any, path: str | os.PathLike[str], kind: str | None = None) -> Path:
    """Write an xarray Dataset to netCDF atomically, with netCDF-safe attributes.

    With ``kind`` the file is sealed (:func:`write_sealed_netcdf`; for files the package reads
    back, such as sweep cells); without, it is a plain netCDF file (results for people and
    other programs: a sealed file opens in xarray only with ``engine="h5netcdf"`` named).
    """
    clean = ds.copy()
    clean.attrs = netcdf_attrs(dict(ds.attrs))
    if kind is None:
        return atomic_write(path, lambda tmp: clean.to_netcdf(tmp, engine="h5netcdf"))
    return write_sealed_netcdf(clean, path, kind)


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
