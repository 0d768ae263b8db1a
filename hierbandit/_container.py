"""Sealed netCDF files, and reading any netCDF file that may come from someone else.

A *sealed* file is an ordinary netCDF-4 (HDF5) file behind a 512-byte HDF5 user block that
holds a header::

    b"\\x89HBF\\r\\n\\x1a\\n"  {"format": 1, "kind": "...", "size": N, "sha256": "..."}  (padding)

``size`` and ``sha256`` describe the netCDF payload that follows the user block. HDF5 skips a
user block, so h5py, xarray and the netCDF tools read a sealed file as they read any other;
:func:`read_netcdf` verifies it before any HDF5 code sees a byte of it: magic, header, kind,
exact size and checksum. A truncated, bit-flipped or zeroed file is refused there.

A file that passes the checksum may still have been crafted by someone who recomputed it, and
user logs in netCDF carry no seal. The HDF5 library is not hardened against hostile files
(a corrupt dimension-scale list makes it spin forever), so before the package opens a payload
it is walked by a separate interpreter with a deadline (:func:`probe`): every group, attribute,
dimension scale and dataset is read there, under size limits checked before any data is read.
Only a payload that the same library walked completely, in time and without crashing, is
opened in this process; the parse is deterministic, so it cannot hang or crash here.

Every defect raises :class:`hierbandit.errors.InvalidFileError` naming the file and the reason.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import xarray as xr

from hierbandit.errors import InvalidFileError

__all__ = ["HEADER_SIZE", "MAGIC", "probe", "read_netcdf", "seal", "unseal"]

MAGIC = b"\x89HBF\r\n\x1a\n"
#: the user block: a power of two of at least 512 bytes, as HDF5 requires
HEADER_SIZE = 512
CONTAINER_FORMAT = 1
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: at most this many HDF5 objects (groups and datasets) in a file the package reads
MAX_OBJECTS = 100_000
#: a netCDF file without a seal (a user's log) may decompress to at most this many times its
#: size, and at least :data:`MIN_EXPANSION_BYTES`; sealed files are never compressed
MAX_EXPANSION = 1000
MIN_EXPANSION_BYTES = 64 * 2**20
#: the walk's deadline: this many seconds, plus one per 20 MB of payload (per 1 MB unsealed)
PROBE_SECONDS = 20.0


def seal(payload: bytes, kind: str) -> bytes:
    """The user block that seals ``payload`` (a netCDF file's bytes) as a file of ``kind``."""
    if not payload.startswith(_HDF5_SIGNATURE):
        raise ValueError("payload is not an HDF5 file")
    header = {
        "format": CONTAINER_FORMAT,
        "kind": kind,
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    text = MAGIC + json.dumps(header, sort_keys=True).encode("ascii") + b"\n"
    if len(text) > HEADER_SIZE:
        raise ValueError("container header too long")
    return text.ljust(HEADER_SIZE, b"\0")


def unseal(path: str | os.PathLike[str], kind: str | None) -> bytes:
    """The verified netCDF payload of the sealed file ``path`` of ``kind`` (any if ``None``).

    Raises
    ------
    FileNotFoundError
        If there is no file at ``path``.
    InvalidFileError
        If it is not a sealed hierbandit file of ``kind`` or its size or checksum fail.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no file at {path}")
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEADER_SIZE)
            if not head.startswith(MAGIC):
                if head.startswith(_HDF5_SIGNATURE):
                    raise InvalidFileError(
                        path,
                        "not a sealed hierbandit file (a plain netCDF/HDF5 file: written by "
                        "another program or by a hierbandit version before sealed files; "
                        "rewrite a file you trust with hierbandit.checkpoint.upgrade_checkpoint "
                        "or hierbandit.bayes.prior.upgrade_prior)",
                    )
                raise InvalidFileError(path, f"not a hierbandit {kind or 'netCDF'} file")
            if len(head) < HEADER_SIZE:
                raise InvalidFileError(path, "truncated header")
            header = _parse_header(path, head)
            if kind is not None and header["kind"] != kind:
                raise InvalidFileError(
                    path, f"holds a hierbandit {header['kind']!r}, not a {kind!r}"
                )
            size = os.fstat(fh.fileno()).st_size - HEADER_SIZE
            if size != header["size"]:
                raise InvalidFileError(
                    path,
                    f"size does not match its header ({size} bytes after the header, "
                    f"{header['size']} declared): truncated or appended to",
                )
            payload = fh.read(header["size"] + 1)
    except OSError as exc:
        raise InvalidFileError(path, f"cannot be read ({exc})") from None
    if len(payload) != header["size"] or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise InvalidFileError(path, "checksum mismatch: the file was altered or corrupted")
    return payload


def _parse_header(path: Path, head: bytes) -> dict[str, Any]:
    body = head[len(MAGIC) :].split(b"\n", 1)
    if len(body) != 2 or body[1].strip(b"\0"):
        raise InvalidFileError(path, "corrupt header")
    try:
        header = json.loads(body[0].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise InvalidFileError(path, "corrupt header") from None
    if not isinstance(header, dict) or set(header) != {"format", "kind", "size", "sha256"}:
        raise InvalidFileError(path, "corrupt header")
    if header["format"] != CONTAINER_FORMAT:
        raise InvalidFileError(
            path,
            f"container format {header['format']!r}; this version reads {CONTAINER_FORMAT}",
        )
    ok = (
        isinstance(header["kind"], str)
        and isinstance(header["size"], int)
        and not isinstance(header["size"], bool)
        and header["size"] > 0
        and isinstance(header["sha256"], str)
        and len(header["sha256"]) == 64
    )
    if not ok:
        raise InvalidFileError(path, "corrupt header")
    return header


# ---------------------------------------------------------------------- structure probe

# Runs in a fresh, isolated interpreter (no hierbandit import): reads the payload from standard
# input and walks all of it. Exit 0: walked; exit 3: refused, the reason on standard output.
_PROBE = r"""
import io, sys
import h5py
strict, max_bytes, max_objects = sys.argv[1] == "strict", int(sys.argv[2]), int(sys.argv[3])
data = sys.stdin.buffer.read()

def fail(msg):
    sys.stdout.write(msg)
    sys.exit(3)

with h5py.File(io.BytesIO(data), "r") as f:
    objects = [("/", f)]

    def add(name, obj):
        objects.append((name, obj))
        if len(objects) > max_objects:
            fail(f"more than {max_objects} HDF5 objects")

    f.visititems(add)
    total = 0
    datasets = []
    for name, obj in objects:
        for key in obj.attrs:
            obj.attrs[key]
        if isinstance(obj, h5py.Dataset):
            if h5py.h5ds.is_scale(obj.id) and obj.id.get_storage_size() == 0:
                continue  # a netCDF dimension without a coordinate: a length, no data
            nbytes = obj.size * obj.dtype.itemsize
            total += nbytes
            if total > max_bytes:
                fail(f"variable {name!r} takes the declared data past {max_bytes} bytes")
            plist = obj.id.get_create_plist()
            layout = plist.get_layout()
            if strict:
                if plist.get_nfilters():
                    fail(f"variable {name!r} is compressed or filtered (never written so)")
                if layout != h5py.h5d.COMPACT and obj.id.get_storage_size() < nbytes:
                    fail(f"variable {name!r} declares more data than the file stores")
            for dim in obj.dims:
                for scale in dim.values():
                    scale.shape
            datasets.append(obj)
    for obj in datasets:
        obj[()]
sys.stdout.write("ok")
"""


def probe(payload: bytes, path: str | os.PathLike[str], *, strict: bool = True) -> None:
    """Walk a netCDF payload in a separate interpreter with a deadline, or raise.

    ``strict`` (sealed files written by the package) refuses compressed or filtered variables
    and variables whose storage the file does not hold, and bounds the declared data by the
    payload's size; otherwise the declared data may be :data:`MAX_EXPANSION` times the size.
    """
    if not payload.startswith(_HDF5_SIGNATURE):
        raise InvalidFileError(path, "not a netCDF-4/HDF5 file")
    limit = len(payload) if strict else max(MAX_EXPANSION * len(payload), MIN_EXPANSION_BYTES)
    deadline = PROBE_SECONDS + len(payload) / 20e6 * (1 if strict else 20)
    cmd = [sys.executable, "-I", "-c", _PROBE, "strict" if strict else "loose"]
    cmd += [str(limit), str(MAX_OBJECTS)]
    try:
        proc = subprocess.run(cmd, input=payload, capture_output=True, timeout=deadline)
    except subprocess.TimeoutExpired:
        raise InvalidFileError(
            path, f"the HDF5 library did not finish walking the file in {deadline:.0f} s"
        ) from None
    if proc.returncode == 0 and proc.stdout == b"ok":
        return
    if proc.returncode == 3:
        raise InvalidFileError(path, proc.stdout.decode("utf-8", "replace"))
    if proc.returncode < 0:
        raise InvalidFileError(
            path, f"the HDF5 library crashed reading it (signal {-proc.returncode})"
        )
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    raise InvalidFileError(path, f"unreadable netCDF/HDF5 ({lines[-1] if lines else 'no detail'})")


def read_netcdf(path: str | os.PathLike[str], kind: str | None) -> xr.DataTree:
    """Read a netCDF file into memory as a DataTree, safely.

    ``kind`` names the sealed kind the file must be (``"checkpoint"``, ``"prior"``, ...): the
    seal is verified (:func:`unseal`). ``kind=None`` also reads a netCDF file from elsewhere
    (a user's log); a sealed file of any kind is still verified. Either way the payload is
    walked by :func:`probe` first, then parsed from the verified bytes in memory (the file is
    not opened again, so it cannot change in between).

    Raises
    ------
    FileNotFoundError
        If there is no file at ``path``.
    InvalidFileError
        For any defect of the file.
    """
    path = Path(path)
    sealed = kind is not None
    if not sealed:
        if not path.is_file():
            raise FileNotFoundError(f"no file at {path}")
        try:
            with open(path, "rb") as fh:
                sealed = fh.read(len(MAGIC)) == MAGIC
        except OSError as exc:
            raise InvalidFileError(path, f"cannot be read ({exc})") from None
    if sealed:
        payload = unseal(path, kind)
    else:
        try:
            payload = path.read_bytes()
        except OSError as exc:
            raise InvalidFileError(path, f"cannot be read ({exc})") from None
    probe(payload, path, strict=sealed)
    try:
        with xr.open_datatree(io.BytesIO(payload), engine="h5netcdf") as tree:
            return tree.load()
    except MemoryError:
        raise
    except Exception as exc:  # any decoding failure is a defect of the file
        raise InvalidFileError(
            path, f"not a readable netCDF file ({type(exc).__name__}: {exc})"
        ) from None
