"""The numba cache folder keyed by the kernels' sources (hierbandit/_numba_cache.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from hierbandit import _numba_cache as nc

# a package whose cached caller (a.py) calls a cached kernel of another module (b.py)
_A = """
from numba import njit
from .b import kernel

@njit(cache=True)
def caller(x):
    return kernel(x) + 1.0
"""
_B = """
from numba import njit

@njit(cache=True)
def kernel(x):
    return {body}
"""
_RUN = """
import sys
from pathlib import Path
sys.path.insert(0, {parent!r})
import numba
mode = sys.argv[1]
if mode == "keyed":
    from hierbandit._numba_cache import sources_digest
    root = Path({root!r})
    numba.config.CACHE_DIR = str(Path({cache!r}) / sources_digest(root))
else:
    numba.config.CACHE_DIR = {cache!r}
from toykernels.a import caller
print(caller(1.0))
"""


def _write_pkg(root: Path, body: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text(_A)
    (root / "b.py").write_text(_B.format(body=body))


def _run(tmp_path: Path, mode: str) -> float:
    root = tmp_path / "src" / "toykernels"
    code = _RUN.format(
        parent=str(root.parent), root=str(root), cache=str(tmp_path / f"cache-{mode}")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip())


def test_a_changed_callee_is_recompiled_with_the_keyed_folder(tmp_path):
    """The hazard and its fix: with one fixed cache folder numba reuses the caller's machine code,
    callee included, after the callee's module changed; with the folder keyed by the sources it
    recompiles."""
    root = tmp_path / "src" / "toykernels"
    _write_pkg(root, "2.0 * x")
    assert _run(tmp_path, "fixed") == 3.0
    assert _run(tmp_path, "keyed") == 3.0
    (root / "b.py").write_text(_B.format(body="10.0 * x"))
    # numba alone: a.py did not change, so its cached code (with the old kernel) is reused
    assert _run(tmp_path, "fixed") == 3.0
    # keyed by the sources: the new kernel
    assert _run(tmp_path, "keyed") == 11.0


def test_digest_follows_the_numba_modules_only(tmp_path):
    root = tmp_path / "pkg"
    _write_pkg(root, "2.0 * x")
    (root / "plain.py").write_text("X = 1\n")
    first = nc.sources_digest(root)
    assert nc.kernel_sources(root) == [root / "a.py", root / "b.py"]
    (root / "plain.py").write_text("X = 2\n")
    assert nc.sources_digest(root) == first
    (root / "b.py").write_text(_B.format(body="3.0 * x"))
    assert nc.sources_digest(root) != first


def test_cache_location_and_switches(tmp_path, monkeypatch):
    for key in ("NUMBA_CACHE_DIR", "HIERBANDIT_NUMBA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    digest = nc.sources_digest()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert nc.numba_cache_dir() == tmp_path / "x" / "hierbandit" / "numba" / digest
    monkeypatch.setenv("HIERBANDIT_NUMBA_CACHE", str(tmp_path / "mine"))
    assert nc.numba_cache_dir() == tmp_path / "mine" / digest
    monkeypatch.setenv("HIERBANDIT_NUMBA_CACHE", "off")
    assert nc.numba_cache_dir() is None
    # the user's own numba setting wins
    monkeypatch.delenv("HIERBANDIT_NUMBA_CACHE")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "theirs"))
    assert nc.numba_cache_dir() is None


def test_folders_of_other_versions_are_pruned_after_a_week(tmp_path):
    current = tmp_path / "current"
    old, recent = tmp_path / "old", tmp_path / "recent"
    for d in (current, old, recent):
        d.mkdir()
    week = 8 * 24 * 3600
    os.utime(old, (time.time() - week, time.time() - week))
    nc._prune(current)
    assert current.is_dir() and recent.is_dir() and not old.exists()


def test_no_home_directory_keeps_the_defaults(monkeypatch):
    """Without a home directory to be found, importing must not fail: both caches fall back."""
    from pathlib import Path as _Path

    from hierbandit.bayes._devices import configure_compilation_cache

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    for key in ("NUMBA_CACHE_DIR", "HIERBANDIT_NUMBA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key in ("JAX_COMPILATION_CACHE_DIR", "HIERBANDIT_JAX_CACHE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(_Path, "home", staticmethod(no_home))
    assert nc.numba_cache_dir() is None
    assert configure_compilation_cache() is None
