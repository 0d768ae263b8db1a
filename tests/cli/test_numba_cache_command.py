"""The command, not the import, points numba at the cache folder keyed by the kernels' sources
(``hierbandit/_numba_cache.py``; the folder as in ``tests/test_numba_cache.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

from hierbandit import _numba_cache as nc

_CODE = """
import numba
before = numba.config.CACHE_DIR
from hierbandit.cli.main import app
assert numba.config.CACHE_DIR == before, "importing the command changed numba's cache folder"
app(sys.argv[1:], standalone_mode=False)
from hierbandit.offline import _core
print(numba.config.CACHE_DIR)
print(_core._suff_rows._cache._cache_path)
"""


def _command(tmp_path, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "HIERBANDIT_NUMBA"))}
    env["HIERBANDIT_NUMBA_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-c", "import sys\n" + _CODE, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_running_a_command_points_numba_at_the_keyed_folder(tmp_path):
    """``experiment list`` loads every paper's module, the cached offline kernels included:
    they are set to compile into the keyed folder, which the command created."""
    folder = tmp_path / "cache" / nc.sources_digest()
    cache_dir, kernel_cache = _command(tmp_path, "experiment", "list")[-2:]
    assert cache_dir == str(folder)
    assert folder.is_dir()
    assert kernel_cache.startswith(str(folder))


def test_a_compiled_kernel_lands_in_the_keyed_folder(tmp_path):
    """A command that compiles a cached kernel writes it under the keyed folder."""
    folder = tmp_path / "cache" / nc.sources_digest()
    out = tmp_path / "out"
    _command(
        tmp_path, "experiment", "run", "offline", "--no-progress", "--out", str(out),
        "--set", "seeds=1", "--set", 'parts=["insufficient"]', "--set", "insufficient_sizes=[400]",
        "--set", "sweep_sizes=[400]", "--set", "n_users=20", "--set", "n_test=50",
        "--set", "grid_points=3", "--set", 'algorithms=["Off-CLUB", "LinUCB_IND"]',
    )  # fmt: skip
    assert (out / "summary.md").is_file()
    assert any(folder.rglob("*.nbi")), sorted(p.name for p in folder.rglob("*"))[:20]
