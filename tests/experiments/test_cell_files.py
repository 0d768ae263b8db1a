"""Sweep resume treats cell files as untrusted: a corrupted, truncated, swapped or foreign cell
is computed again, never reused, and never makes the run raise or hang."""

import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from hierbandit._container import seal
from hierbandit.experiments import catalog
from hierbandit.experiments.runner import run_experiment
from tests.experiments.test_experiment_interface import _toy_experiment, _toy_run

REPRO = Path(__file__).resolve().parents[3] / "shared" / "repro" / "reliability"
EXPECTED = {"A": 1.0, "B": 2.0, "C": 12.0}


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(catalog.EXPERIMENTS, "toy-graph", _toy_experiment(_toy_run))


def _values(res):
    return {k: float(v["x"]) for k, v in res.results.items()}


def _resume(out):
    t0 = time.monotonic()
    res = run_experiment("toy-graph", out=out)
    assert time.monotonic() - t0 < 60
    assert _values(res) == EXPECTED
    return res


def test_swapped_cells_are_recomputed(tmp_path, toy):
    out = tmp_path / "run"
    _resume(out)
    cells = out / "cells"
    a, b = (cells / "A.nc").read_bytes(), (cells / "B.nc").read_bytes()
    (cells / "A.nc").write_bytes(b)
    (cells / "B.nc").write_bytes(a)
    res = _resume(out)
    # A and B are computed again; C depends on B, whose recomputed value is the same
    assert sorted(res.computed) == ["A", "B"] and res.reused == ["C"]


def test_edited_cell_with_a_valid_seal_is_recomputed_unless_it_is_this_cell(tmp_path, toy):
    """An edit that keeps the seal valid (recomputed) but changes the recorded identity is not
    reused; the seal alone does not make a cell trusted."""
    import xarray as xr

    out = tmp_path / "run"
    _resume(out)
    path = out / "cells" / "A.nc"
    ds = xr.open_dataset(path, engine="h5netcdf").load()
    ds.attrs["experiment_cell"] = "B"
    plain = tmp_path / "plain.nc"
    ds.to_netcdf(plain, engine="h5netcdf")
    payload = plain.read_bytes()
    path.write_bytes(seal(payload, "experiment-cell") + payload)
    assert _resume(out).computed == ["A"]


@pytest.mark.parametrize("damage", ["flip", "zero", "truncate"])
def test_damaged_cells_are_recomputed(tmp_path, toy, damage):
    out = tmp_path / "run"
    _resume(out)
    path = out / "cells" / "B.nc"
    good = path.read_bytes()
    g = np.random.default_rng({"flip": 0, "zero": 1, "truncate": 2}[damage])
    for offset in [*sorted(g.integers(0, len(good), 4).tolist()), 0, 520, len(good) - 64]:
        raw = bytearray(good)
        if damage == "flip":
            raw[offset] ^= 0x10
        elif damage == "zero":
            raw[offset : offset + 64] = bytes(len(raw[offset : offset + 64]))
        else:
            raw = raw[:offset]
        if bytes(raw) == good:  # zeroed bytes that were zero already: the same file
            continue
        path.write_bytes(bytes(raw))
        res = _resume(out)
        assert "B" in res.computed, offset
        assert path.read_bytes() != bytes(raw)


def test_reported_bad_cells_are_recomputed(tmp_path, toy):
    """The cells of the reliability report (one hung the reader inside HDF5, one made every
    rerun fail) are old-format files: refused by the seal, recomputed, in bounded time."""
    out = tmp_path / "run"
    _resume(out)
    for name in ("cell_hang_case.nc", "cell_runtimeerror_case.nc"):
        if not (REPRO / name).is_file():
            pytest.skip("the shared reproducers are not beside the repository")
        shutil.copy(REPRO / name, out / "cells" / "A.nc")
        assert _resume(out).computed == ["A"]


def test_orphaned_temporary_cell_files_are_removed(tmp_path, toy):
    """A writer killed mid-write leaves its temporary file; the next write of that cell
    removes it (its writer's process is gone), and a live writer's file is left alone."""
    import os
    import subprocess
    import sys

    from hierbandit._io import _HOST

    out = tmp_path / "run"
    _resume(out)
    cells = out / "cells"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    dead_pid = int(dead.stdout)
    orphan = cells / f".A.nc.{_HOST}-{dead_pid}.abcd1234.tmp"
    live = cells / f".A.nc.{_HOST}-{os.getpid()}.efgh5678.tmp"
    old_format = cells / ".A.nc.ijkl9012.tmp"
    for p in (orphan, live, old_format):
        p.write_bytes(b"partial")
    (cells / "A.nc").unlink()
    assert _resume(out).computed == ["A"]
    assert not orphan.exists()
    assert live.exists()  # this process is alive: its temporary file is not an orphan
    assert old_format.exists()  # no writer recorded: removed only once a day old
    stale = time.time() - 2 * 24 * 3600
    os.utime(old_format, (stale, stale))
    (cells / "A.nc").unlink()
    _resume(out)
    assert not old_format.exists() and live.exists()
