"""The command, not the import, points numba at the cache folder keyed by the kernels' sources
(``hierbandit/_numba_cache.py``; the folder as in ``tests/test_numba_cache.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

from hierbandit import _numba_cache as nc

# One interpreter: import the command (nothing may change), run ``experiment list`` (which loads
# every paper's module, the offline cached kernels included), then call one cached kernel of
# the loaded module so that it compiles.
_CODE = """
import sys
import numba
import numpy as np
before = numba.config.CACHE_DIR
from hierbandit.cli.main import app
assert numba.config.CACHE_DIR == before, "importing the command changed numba's cache folder"
app(sys.argv[1:], standalone_mode=False)
from hierbandit.offline import _core
print(numba.config.CACHE_DIR)
print(_core._suff_rows._cache._cache_path)
stats = _core.user_suffstats(np.array([0, 1]), np.ones((2, 2)), np.ones(2), 2)
assert stats.n.tolist() == [1, 1]
"""


def test_a_command_points_numba_at_the_keyed_folder_and_compiles_into_it(tmp_path):
    folder = tmp_path / "cache" / nc.sources_digest()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "HIERBANDIT_NUMBA"))}
    env["HIERBANDIT_NUMBA_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-c", _CODE, "experiment", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cache_dir, kernel_cache = proc.stdout.split()[-2:]
    assert cache_dir == str(folder)
    assert kernel_cache.startswith(str(folder))
    assert any(folder.rglob("*.nbi")), sorted(p.name for p in folder.rglob("*"))[:20]
