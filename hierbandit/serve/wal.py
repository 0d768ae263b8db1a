"""The decision service's write-ahead log: every change to the state, in order, on disk first.

The log is a directory of segments ``wal-<first>.log``, where ``<first>`` (20 digits) is the
index of the segment's first record; indices count records from the service's creation and
never restart. A segment is the 8 bytes ``HBWAL001`` followed by records, each

    length (uint32, little-endian) | CRC-32 of the payload (uint32) | payload (length bytes)

where the payload is one UTF-8 JSON object (:mod:`hierbandit.serve.service` says which).
:meth:`WriteAheadLog.append` writes a record with one ``write`` and flushes it to the
operating system, so that it survives the death of the process (SIGKILL included);
:meth:`WriteAheadLog.sync` also forces it to the disk (``fsync``), so that it survives the
machine's. The service acknowledges nothing before the record of it is written (and synced,
unless the service was started without ``fsync``).

Reading (:meth:`WriteAheadLog.records`) treats the directory as untrusted input:

* a record cut short at the very end of the last segment, or whose checksum fails there, is
  a write the process did not finish (it was never acknowledged): it is cut off the file;
* anything else that is wrong — a bad header, a checksum failing before the end, a record
  longer than :data:`MAX_RECORD`, a gap or overlap between segments, a file name that is not
  a segment's — raises :class:`~hierbandit.errors.InvalidFileError` naming the file and the
  reason, before any record is returned to be applied.
"""

from __future__ import annotations

import itertools
import os
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from hierbandit.errors import InvalidFileError

__all__ = ["MAX_RECORD", "WriteAheadLog"]

MAGIC = b"HBWAL001"
_HEAD = struct.Struct("<II")
#: longest payload accepted (bytes): a batch of 10⁴ requests with 100 features is ~20 MB
MAX_RECORD = 256 * 1024 * 1024
_NAME = re.compile(r"wal-(\d{20})\.log")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class WriteAheadLog:
    """Append-only record log in ``directory`` (created if missing).

    Parameters
    ----------
    directory : path
        The folder of the segments.
    fsync : bool
        Whether :meth:`sync` forces records to the disk (default True); without, records
        survive the death of the process but not a crash of the machine.
    """

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fsync = bool(fsync)
        self._fh: BinaryIO | None = None
        self.next_index: int | None = None
        self.bytes_written = 0

    # ------------------------------------------------------------------ reading
    def segments(self) -> list[tuple[int, Path]]:
        """``(first index, path)`` of every segment, in order; a stray file is an error."""
        out = []
        for path in self.directory.iterdir():
            if path.name.endswith(".tmp"):
                continue
            m = _NAME.fullmatch(path.name)
            if m is None or not path.is_file():
                raise InvalidFileError(path, "is not a segment of the write-ahead log")
            out.append((int(m.group(1)), path))
        return sorted(out)

    def records(self, start: int) -> Iterator[tuple[int, bytes]]:
        """Every record with index >= ``start``, as ``(index, payload)``, in order.

        The whole log is read and checked before the first record is yielded (a defect late in
        the log must not leave a half-replayed state); a torn last record is cut off.
        """
        segs = self.segments()
        found: list[tuple[int, bytes]] = []
        expected: int | None = None
        for n, (first, path) in enumerate(segs):
            last_segment = n == len(segs) - 1
            if expected is not None and first != expected:
                raise InvalidFileError(
                    path, f"starts at record {first}, but the previous segment ends at {expected}"
                )
            payloads, good_length = self._read_segment(path, last_segment)
            if good_length is not None:  # a torn tail: cut it off (it was never acknowledged)
                with open(path, "r+b") as fh:
                    fh.truncate(good_length)
                    os.fsync(fh.fileno())
            for i, payload in enumerate(payloads):
                if first + i >= start:
                    found.append((first + i, payload))
            expected = first + len(payloads)
        if segs and segs[0][0] > start:
            raise InvalidFileError(
                segs[0][1], f"the log starts at record {segs[0][0]}, after record {start}"
            )
        if expected is not None and expected < start:
            raise InvalidFileError(
                self.directory, f"the log ends at record {expected}, before record {start}"
            )
        return iter(found)

    def end(self) -> int | None:
        """Index after the last complete record (None for an empty log)."""
        segs = self.segments()
        if not segs:
            return None
        first, path = segs[-1]
        payloads, _ = self._read_segment(path, True)
        return first + len(payloads)

    @staticmethod
    def _read_segment(path: Path, last: bool) -> tuple[list[bytes], int | None]:
        """The payloads of a segment, and the length to cut it to if its tail is torn."""
        data = path.read_bytes()
        if len(data) < len(MAGIC):
            if last and MAGIC.startswith(data):
                return [], len(data)
            raise InvalidFileError(path, "is too short to be a segment of the write-ahead log")
        if data[: len(MAGIC)] != MAGIC:
            raise InvalidFileError(path, "does not start with the write-ahead log's magic")
        out = []
        pos = len(MAGIC)
        while pos < len(data):
            if pos + _HEAD.size > len(data):
                if last:
                    return out, pos
                raise InvalidFileError(path, f"ends inside a record header at byte {pos}")
            length, crc = _HEAD.unpack_from(data, pos)
            if length > MAX_RECORD:
                raise InvalidFileError(path, f"declares a record of {length} bytes at byte {pos}")
            end = pos + _HEAD.size + length
            if end > len(data):
                if last:
                    return out, pos
                raise InvalidFileError(path, f"ends inside the record at byte {pos}")
            payload = data[pos + _HEAD.size : end]
            if zlib.crc32(payload) != crc:
                if last and end == len(data):
                    return out, pos
                raise InvalidFileError(path, f"the record at byte {pos} fails its checksum")
            out.append(payload)
            pos = end
        return out, None

    # ------------------------------------------------------------------ writing
    def start_segment(self, first: int) -> None:
        """Close the current segment and append from now on to a new one starting at record
        ``first`` (an empty segment already named so is reused)."""
        self.close()
        path = self.directory / f"wal-{first:020d}.log"
        if path.exists() and path.stat().st_size > len(MAGIC):
            raise InvalidFileError(path, "already holds records; refusing to overwrite it")
        with open(path, "wb") as fh:
            fh.write(MAGIC)
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(self.directory)
        self._fh = open(path, "ab")  # noqa: SIM115 - held open while the service runs
        self.next_index = first

    def append(self, payload: bytes) -> int:
        """Write one record (flushed to the operating system, not synced); its index."""
        if self._fh is None or self.next_index is None:
            raise RuntimeError("the write-ahead log has no open segment")
        if len(payload) > MAX_RECORD:
            raise ValueError(f"a record may hold at most {MAX_RECORD} bytes, got {len(payload)}")
        self._fh.write(_HEAD.pack(len(payload), zlib.crc32(payload)) + payload)
        self._fh.flush()
        self.bytes_written += _HEAD.size + len(payload)
        index = self.next_index
        self.next_index += 1
        return index

    def sync(self) -> None:
        """Force every appended record to the disk (no-op without ``fsync``)."""
        if self.fsync and self._fh is not None:
            os.fsync(self._fh.fileno())

    def drop_before(self, index: int) -> None:
        """Delete the segments whose records all precede ``index`` (covered by a checkpoint)."""
        segs = self.segments()
        for (_first, path), (nxt, _) in itertools.pairwise(segs):
            if nxt <= index:
                path.unlink()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
