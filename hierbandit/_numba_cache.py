"""Where numba keeps the package's compiled kernels: one folder per version of their sources.

numba's on-disk cache (``cache=True``) checks a cached function against its own source file only.
A compiled function that calls kernels of another module keeps the callee's old machine code
after that module changes: the compiled simulation loop of :mod:`hierbandit.ebm.compiled`
would go on running the previous :mod:`hierbandit.stats.kernels` after an edit or a ``git pull``,
silently. Keying the cache folder by a digest of every module of the package that uses numba
makes any change to any kernel start from an empty cache.

Importing the package changes no setting: the command (``hierbandit``) and the test run call
:func:`configure_numba_cache` before any kernel is compiled, and so can a user who edits the
kernels (``hierbandit.configure_numba_cache()``). An installed copy needs it less: installing
rewrites every source file, so numba's own per-file check discards every cached kernel.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

#: ``HIERBANDIT_NUMBA_CACHE`` values that leave numba's own cache location alone
_OFF = ("0", "off", "false", "no", "none")

#: folders of other source versions unused for this long are removed
_STALE_SECONDS = 7 * 24 * 3600


def _kernel_texts(root: Path) -> list[tuple[Path, bytes]]:
    """(path, contents) of the modules under ``root`` that use numba, each file read once."""
    texts = ((p, p.read_bytes()) for p in sorted(root.rglob("*.py")))
    return [(p, text) for p, text in texts if b"numba" in text]


def kernel_sources(root: Path | None = None) -> list[Path]:
    """The package's modules that use numba (their text mentions it), in a fixed order."""
    root = Path(__file__).parent if root is None else Path(root)
    return [p for p, _ in _kernel_texts(root)]


def sources_digest(root: Path | None = None) -> str:
    """A digest of the numba modules' paths and contents, numba's version and Python's."""
    import numba

    root = Path(__file__).parent if root is None else Path(root)
    h = hashlib.sha256()
    h.update(f"numba {numba.__version__} python {sys.version_info[:3]}".encode())
    for path, text in _kernel_texts(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(text + b"\0")
    return h.hexdigest()[:16]


def numba_cache_dir(root: Path | None = None) -> Path | None:
    """The folder for this version of the kernels, or ``None`` to leave numba's default.

    ``NUMBA_CACHE_DIR``, set by the user, wins. ``HIERBANDIT_NUMBA_CACHE=0`` (or ``off``) keeps
    numba's default (``__pycache__`` beside the sources); another value is the parent folder,
    else ``$XDG_CACHE_HOME/hierbandit/numba`` (by default ``~/.cache/hierbandit/numba``).
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    setting = os.environ.get("HIERBANDIT_NUMBA_CACHE", "").strip()
    if setting.lower() in _OFF:
        return None
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        parent = Path(setting or Path(base) / "hierbandit" / "numba").expanduser()
    except RuntimeError:  # no home directory to be found: keep numba's default
        return None
    return parent / sources_digest(root)


def _prune(folder: Path) -> None:
    """Remove sibling folders (other source versions) unused for a week."""
    now = time.time()
    for other in folder.parent.iterdir():
        if other == folder or not other.is_dir():
            continue
        try:
            if now - other.stat().st_mtime > _STALE_SECONDS:
                shutil.rmtree(other, ignore_errors=True)
        except OSError:
            continue


def configure_numba_cache() -> Path | None:
    """Point numba's cache at :func:`numba_cache_dir`; returns the folder, or ``None`` when
    numba's own setting is kept (also when the folder cannot be created)."""
    folder = numba_cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.utime(folder)  # marks this version as in use, for the pruning of old ones
    except OSError:  # read-only home: keep numba's default
        return None
    import numba

    numba.config.CACHE_DIR = str(folder)
    _prune(folder)
    return folder
