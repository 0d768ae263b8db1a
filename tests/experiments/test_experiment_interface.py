"""The experiment interface: the catalog and configurations, cells = monolithic runs,
executors, and resumption after a crash (the command is tested in ``tests/cli``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from hierbandit.experiments.catalog import get_experiment, list_experiments
from hierbandit.experiments.registry import (
    SCALES,
    Param,
    load_user_config,
    parse_assignment,
    toml_value,
)
from hierbandit.experiments.runner import run_experiment

NAMES = ("ebm-synthetic", "ebm-real", "cascade", "sclub", "offline", "boc")

#: a few-second ebm-synthetic configuration
TINY_EBM = {
    "settings": ["fig1-data-poor"],
    "policies": ["EbmTS", "LinUCB"],
    "horizon": 60,
    "seeds": 3,
    "seeds_per_cell": 1,
}


def _open(path: Path) -> xr.Dataset:
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()


def _same_data(a: xr.Dataset, b: xr.Dataset, skip: tuple[str, ...] = ()) -> None:
    """Every data variable (except ``skip``) and coordinate identical."""
    assert sorted(set(a.data_vars) - set(skip)) == sorted(set(b.data_vars) - set(skip))
    for name in set(a.data_vars) - set(skip):
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
        assert a[name].dims == b[name].dims, name
    for name in a.coords:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


# ---------------------------------------------------------------------- registry and configs
def test_every_paper_reproduction_is_listed_with_valid_configs_at_both_scales():
    exps = {e.name: e for e in list_experiments()}
    assert set(NAMES) <= set(exps)
    for exp in exps.values():
        for scale in SCALES:
            params = exp.resolve(scale)
            assert set(params) == {p.name for p in exp.params}
            cells = exp.cells(params)
            assert cells and len({c.key for c in cells}) == len(cells)
        assert exp.title and exp.paper and exp.description


def test_param_validation_names_the_key():
    p = Param("settings", "str", "x", many=True, choices=("a", "b"))
    assert p.check(["b", "a"]) == ["b", "a"]
    for bad, match in (
        ("a", "params.settings must be a non-empty list"),
        ([], "empty list"),
        (["a", "a"], "must not repeat"),
        (["c"], r"params.settings\[0\] must be .*'a', 'b'"),
        ([1], r"params.settings\[0\]"),
    ):
        with pytest.raises(ValueError, match=match):
            p.check(bad)
    q = Param("horizon", "int", "x", minimum=10)
    assert q.check(10) == 10
    for bad in (9, 10.5, True, "10", None):
        with pytest.raises(ValueError, match=r"params\.horizon"):
            q.check(bad)
    f = Param("noise", "float", "x", minimum=0.0, optional=True)
    assert f.check(1) == 1.0 and f.check("none") is None
    for bad in (float("nan"), float("inf"), -1.0, "x"):
        with pytest.raises(ValueError, match=r"params\.noise"):
            f.check(bad)


def test_resolve_rejects_unknown_keys_and_bad_values():
    exp = get_experiment("sclub")
    with pytest.raises(ValueError, match=r"params.horizn: unknown parameter .*'horizon'"):
        exp.resolve("small", {"horizn": 10})
    with pytest.raises(ValueError, match=r"params.settings\[0\] must be one of"):
        exp.resolve("small", {"settings": ["3z"]})
    with pytest.raises(ValueError, match="scale must be one of"):
        exp.resolve("huge")
    with pytest.raises(ValueError, match="experiment must be one of"):
        get_experiment("nope")
    with pytest.raises(ValueError, match="lambda_tilde_a"):
        offline = get_experiment("offline")
        offline.cells(offline.resolve("small", {"lambda_tilde_a": "-2"}))


def test_user_config_files(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('experiment = "sclub"\nscale = "paper"\n[params]\nseeds = 2\n')
    assert load_user_config(toml) == {
        "experiment": "sclub",
        "scale": "paper",
        "params": {"seeds": 2},
    }
    yml = tmp_path / "c.yaml"
    yml.write_text("params:\n  settings: [1a, 1b]\n  horizon: 100\n")
    assert load_user_config(yml)["params"] == {"settings": ["1a", "1b"], "horizon": 100}
    cases = {
        "bad.toml": ("[params\n", "not valid TOML"),
        "bad.yaml": ("params: [1, 2\n", "not valid YAML"),
        "keys.toml": ("seeds = 2\n", r"unknown keys \['seeds'\]"),
        "scale.toml": ('scale = "big"\n', "scale must be one of"),
        "params.yaml": ("params: 3\n", "params must be a table"),
        "c.json": ("{}", "must end in .toml, .yaml or .yml"),
    }
    for name, (text, match) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError, match=match):
            load_user_config(path)
    with pytest.raises(ValueError, match="no such file"):
        load_user_config(tmp_path / "missing.toml")


def test_parse_assignment():
    assert parse_assignment("horizon=100") == ("horizon", 100)
    for value in (3, 0.5, True, "reference", ["1a", "1b"], [10, 20]):
        assert parse_assignment(f"k={toml_value(value)}") == ("k", value)
    assert toml_value(None) == '"none"'
    assert parse_assignment('settings=["1a", "1b"]') == ("settings", ["1a", "1b"])
    assert parse_assignment("audit=false") == ("audit", False)
    assert parse_assignment("preset=reference") == ("preset", "reference")
    for bad in ("horizon", "=3"):
        with pytest.raises(ValueError, match="key=value"):
            parse_assignment(bad)


# ---------------------------------------------------------------------- cells = monolithic runs
def test_ebm_cells_equal_one_monolithic_run(tmp_path):
    from hierbandit.experiments.ebm import make_env, make_policies
    from hierbandit.experiments.simulate import simulate

    run = run_experiment("ebm-synthetic", out=tmp_path, params=TINY_EBM)
    assert len(run.computed) == 3 and not run.reused
    combined = _open(tmp_path / "fig1-data-poor.nc")
    env = make_env("fig1-data-poor")
    mono = simulate(make_policies(10, 5, 3, TINY_EBM["policies"]), env, 60, 3, seed=0)
    _same_data(combined, mono)
    assert json.loads(combined.attrs["experiment_config"])["params"]["horizon"] == 60
    assert combined.attrs["hierbandit_version"]
    for name in ("summary.md", "config.toml", "experiment.json", "fig1-data-poor.png"):
        assert (tmp_path / name).is_file()
    assert "EbmTS" in (tmp_path / "summary.md").read_text()


def test_ebm_reestimation_period_reaches_the_policies(tmp_path):
    """``hyper_update_every`` is passed to EbmTS (the cells equal a run of EbmTS with it) and
    changes the result at a horizon where re-estimations happen."""
    from hierbandit.experiments.ebm import make_env, make_policies
    from hierbandit.experiments.simulate import simulate

    params = {**TINY_EBM, "policies": ["EbmTS"], "horizon": 200, "hyper_update_every": 20}
    run_experiment("ebm-synthetic", out=tmp_path / "m20", params=params)
    got = _open(tmp_path / "m20" / "fig1-data-poor.nc")
    env = make_env("fig1-data-poor")
    mono = simulate(make_policies(10, 5, 3, ["EbmTS"], hyper_update_every=20), env, 200, 3, seed=0)
    _same_data(got, mono)
    assert got.attrs["hyper_update_every"] == 20
    every = simulate(make_policies(10, 5, 3, ["EbmTS"]), env, 200, 3, seed=0)
    assert not np.array_equal(got["arm"].values, every["arm"].values)


def test_sclub_cells_equal_one_monolithic_run(tmp_path):
    from hierbandit.experiments.sclub import run_setting

    params = {"settings": ["1b"], "horizon": 1500, "n_users": 24, "seeds": 2, "audit": True}
    run_experiment("sclub", out=tmp_path, params=params)
    combined = _open(tmp_path / "sclub_1b.nc")
    mono = run_setting("1b", n_seeds=2, horizon=1500, n_users=24, audit=True)
    _same_data(combined, mono, skip=("elapsed",))
    audit = [k for k in mono.attrs if k.startswith("audit_")]
    assert "audit_ari_policy_truth" in audit and "audit_coclustering" in combined
    assert {k: combined.attrs[k] for k in audit} == {k: mono.attrs[k] for k in audit}


def test_cascade_cells_equal_one_monolithic_run(tmp_path):
    from hierbandit.experiments.cascade import run_reproduction

    pols = ["UCBBP", "random"]
    params = {"n_users": [4, 6], "n_episodes": 12, "policies": pols, "seeds": 2}
    params["seeds_per_cell"] = 1
    run_experiment("cascade", out=tmp_path, params=params)
    combined = _open(tmp_path / "results.nc")
    mono = run_reproduction(n_seeds=2, n_users=[4, 6], n_episodes=12, policies=pols)
    _same_data(combined, mono)


def test_offline_cells_equal_one_monolithic_run(tmp_path):
    from hierbandit.experiments.offline import run_offline

    algos = ["Off-CLUB", "LinUCB_IND", "Off-C2LUB"]
    cfg = {"n_users": 30, "n_test": 200, "grid_points": 4}
    params = {
        "parts": ["sufficient", "insufficient"],
        "sufficient_sizes": [2400],
        "insufficient_sizes": [1200],
        "sweep_sizes": [1600],
        "algorithms": algos,
        "seeds": 2,
        **cfg,
    }
    run = run_experiment("offline", out=tmp_path, params=params)
    assert sorted(run.computed) == sorted(
        f"{dist}_size-{size}_seeds-2"
        for dist in ("equal", "semi-random")
        for size in (1200, 1600, 2400)
    )
    common = {"n_seeds": 2, "algorithms": algos, "lambda_tilde_a": 1.0, **cfg}
    for part, sizes in (("insufficient", [1200, 1600]), ("sufficient", [2400])):
        eq = run_offline(sizes, distribution="equal", **common)
        grids = {int(s): eq["gamma"].sel(size=s).to_numpy() for s in eq.size.values}
        idx = {int(s): int(eq["oracle_index"].sel(size=s)) for s in eq.size.values}
        semi = run_offline(
            sizes, distribution="semi-random", grids=grids, oracle_index=idx, **common
        )
        _same_data(_open(tmp_path / f"{part}_equal.nc"), eq, skip=("fit_seconds",))
        _same_data(_open(tmp_path / f"{part}_semi-random.nc"), semi, skip=("fit_seconds",))
    summary = (tmp_path / "summary.md").read_text()
    assert "Paired differences" in summary and "Off-CLUB - LinUCB_IND" in summary


def test_boc_trial_windows_equal_one_monolithic_run(tmp_path):
    from hierbandit.boc.instances import synthetic_instance
    from hierbandit.experiments.boc import run_part

    params = {"parts": ["synthetic"], "kinds": ["easy"], "seeds": 3, "seeds_per_cell": 2}
    params["max_pulls"] = 3000
    run = run_experiment("boc", out=tmp_path, params=params)
    assert sorted(run.computed) == ["synthetic-easy_trials-0-1", "synthetic-easy_trials-2-2"]
    mono = run_part("synthetic", {"easy": synthetic_instance("easy")}, n_trials=3, max_pulls=3000)
    _same_data(_open(tmp_path / "figure3_easy.nc"), mono["easy"], skip=("seconds",))


# ---------------------------------------------------------------------- resumption
def test_resume_reuses_finished_cells_and_refuses_another_configuration(tmp_path):
    first = run_experiment("ebm-synthetic", out=tmp_path, params=TINY_EBM, max_cells=1)
    assert len(first.computed) == 1 and not first.files
    assert not (tmp_path / "summary.md").exists()
    cell = tmp_path / "cells" / f"{first.computed[0]}.nc"
    before = (cell.stat().st_mtime_ns, cell.read_bytes())
    second = run_experiment("ebm-synthetic", out=tmp_path, params=TINY_EBM)
    assert second.reused == first.computed and len(second.computed) == 2
    assert (cell.stat().st_mtime_ns, cell.read_bytes()) == before
    # more seeds reuse every finished seed
    third = run_experiment("ebm-synthetic", out=tmp_path, params={**TINY_EBM, "seeds": 4})
    assert len(third.reused) == 3 and len(third.computed) == 1
    with pytest.raises(ValueError, match=r"different configuration \(parameters \['horizon'\]"):
        run_experiment("ebm-synthetic", out=tmp_path, params={**TINY_EBM, "horizon": 61})
    fresh = run_experiment("ebm-synthetic", out=tmp_path, params=TINY_EBM, restart=True)
    assert len(fresh.computed) == 3 and not fresh.reused


def test_bad_arguments_leave_the_output_folder_untouched(tmp_path):
    run_experiment("ebm-synthetic", out=tmp_path, params=TINY_EBM)
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    for kwargs, match in (
        ({"workers": 0}, "workers"),
        ({"workers": 2, "scheduler": "tcp://127.0.0.1:1"}, "not both"),
        ({"params": {**TINY_EBM, "horizon": "x"}}, r"params\.horizon"),
        ({"max_cells": -1}, "max_cells"),
    ):
        with pytest.raises(ValueError, match=match):
            run_experiment(
                "ebm-synthetic", out=tmp_path, restart=True, **{"params": TINY_EBM, **kwargs}
            )
    after = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    assert after == before
    file = tmp_path / "summary.md"
    with pytest.raises(ValueError, match="is not a folder"):
        run_experiment("ebm-synthetic", out=file, params=TINY_EBM)


def test_a_corrupt_or_foreign_cell_file_is_recomputed(tmp_path):
    run_experiment("ebm-synthetic", out=tmp_path, params=TINY_EBM)
    cells = sorted((tmp_path / "cells").glob("*.nc"))
    cells[0].write_bytes(b"not netcdf")
    again = run_experiment("ebm-synthetic", out=tmp_path, params=TINY_EBM)
    assert again.computed == [cells[0].stem] and len(again.reused) == 2


def test_killed_sweep_resumes_without_recomputing_finished_cells(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "hierbandit.cli", "experiment", "run", "ebm-synthetic",
        "--out", str(out), "--no-progress", "--seeds", "4",
        "--set", 'settings=["fig1-data-poor"]', "--set", 'policies=["EbmTS", "LinUCB"]',
        "--set", "horizon=1500", "--set", "seeds_per_cell=1",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cells = out / "cells"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not list(cells.glob("*.nc")):
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.stderr.read().decode()}")
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    finished = {p.name: p.read_bytes() for p in cells.glob("*.nc")}
    assert finished and len(finished) < 4
    params = {**TINY_EBM, "horizon": 1500, "seeds": 4}
    resumed = run_experiment("ebm-synthetic", out=out, params=params)
    assert sorted(f"{k}.nc" for k in resumed.reused) == sorted(finished)
    assert {n: (cells / n).read_bytes() for n in finished} == finished
    whole = run_experiment("ebm-synthetic", out=tmp_path / "whole", params=params)
    _same_data(_open(out / "fig1-data-poor.nc"), _open(whole.files["fig1-data-poor_data"]))


# ---------------------------------------------------------------------- executors
def test_process_pool_and_dask_give_identical_results(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    ref = run_experiment("ebm-synthetic", out=tmp_path / "inproc", params=TINY_EBM)
    pool = run_experiment("ebm-synthetic", out=tmp_path / "pool", params=TINY_EBM, workers=2)
    assert pool.executor.startswith("process pool")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        dask = run_experiment(
            "ebm-synthetic",
            out=tmp_path / "dask",
            params=TINY_EBM,
            scheduler=cluster.scheduler_address,
        )
    assert dask.executor.startswith("Dask")
    base = _open(ref.files["fig1-data-poor_data"])
    for other in (pool, dask):
        assert len(other.computed) == 3
        _same_data(_open(other.files["fig1-data-poor_data"]), base)
        for key, ds in ref.results.items():
            _same_data(other.results[key], ds)


def test_executor_arguments_are_validated():
    from hierbandit.experiments.executors import make_executor

    with pytest.raises(ValueError, match="workers"):
        make_executor(0)
    with pytest.raises(ValueError, match="not both"):
        make_executor(2, "tcp://127.0.0.1:1")
    with pytest.raises(ValueError, match="scheduler"):
        make_executor(1, "")


# ---------------------------------------------------------------------- every experiment, small
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_runs_at_small_scale(name, tmp_path):
    """The documented small scale of every experiment: data, plots and a summary (minutes)."""
    run = run_experiment(name, out=tmp_path, scale="small")
    summary = (tmp_path / "summary.md").read_text()
    assert run.files and not run.reused and summary.startswith("# ")
    assert list(tmp_path.glob("*.png")) and list(tmp_path.glob("*.nc"))
    for path in tmp_path.glob("*.nc"):
        ds = _open(path)
        assert ds.attrs["experiment"] == name and ds.attrs["hierbandit_version"]
        assert json.loads(ds.attrs["experiment_config"])["scale"] == "small"
    print(f"{name}: {run.seconds:.0f} s for {len(run.computed)} cells")


# ----------------------------------------------------------------------------- scheduling
class _ScriptedExecutor:
    """Runs a call only when the runner asks for a finished one, finishing the most recently
    submitted first, and logs submissions and completions."""

    description = "scripted"

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self._calls: dict[int, tuple] = {}

    def submit(self, fn, *args):
        handle = len(self._calls)
        self._calls[handle] = (fn, args)
        self.log.append(("submit", args[2]["name"]))
        return handle

    def next_done(self, handles):
        handle = max(handles)
        fn, args = self._calls[handle]
        self.log.append(("done", args[2]["name"]))
        return handle, fn(*args)

    def cancel(self, handles):
        pass

    def close(self):
        pass


def _toy_experiment(run):
    from hierbandit.experiments.registry import Cell, Experiment

    def cells(p):
        return [
            Cell("A", {"name": "A"}),
            Cell("B", {"name": "B"}),
            Cell("C", {"name": "C"}, depends=("B",)),
        ]

    def write(p, results, out, annotate):
        return {}, [f"C = {float(results['C']['x'])}"]

    common = {"seeds": 1, "seeds_per_cell": 1}
    return Experiment(
        name="toy-graph",
        title="toy",
        paper="none",
        description="toy",
        params=(
            Param("seeds", "int", "replications", minimum=1),
            Param("seeds_per_cell", "int", "per cell", minimum=1),
        ),
        defaults={s: dict(common) for s in SCALES},
        cells=cells,
        run_cell=run,
        write=write,
    )


def _toy_run(p, spec, deps):
    got = {k: float(v["x"]) for k, v in deps.items()}
    value = {"A": 1.0, "B": 2.0, "C": 10.0 + sum(got.values())}[spec["name"]]
    return xr.Dataset({"x": ((), value)})


def test_in_process_saves_each_cell_before_starting_the_next(tmp_path, monkeypatch):
    """A kill between two cells loses nothing finished: in this process, every cell's file is
    written before the next cell starts."""
    from hierbandit.experiments import catalog

    out = tmp_path / "run"
    seen = {}

    def run(p, spec, deps):
        seen[spec["name"]] = sorted(f.stem for f in (out / "cells").glob("*.nc"))
        return _toy_run(p, spec, deps)

    monkeypatch.setitem(catalog.EXPERIMENTS, "toy-graph", _toy_experiment(run))
    run_experiment("toy-graph", out=out)
    assert seen == {"A": [], "B": ["A"], "C": ["A", "B"]}


def test_a_cell_starts_as_soon_as_its_own_dependencies_are_done(tmp_path, monkeypatch):
    """No stage barrier: C (which needs B) starts while A, which C does not need, still runs;
    C receives B's result."""
    from hierbandit.experiments import catalog, runner

    exp = _toy_experiment(_toy_run)
    monkeypatch.setitem(catalog.EXPERIMENTS, "toy-graph", exp)
    scripted = _ScriptedExecutor()
    monkeypatch.setattr(runner, "make_executor", lambda workers, scheduler: scripted)
    res = run_experiment("toy-graph", out=tmp_path / "run")
    assert scripted.log == [
        ("submit", "A"),
        ("submit", "B"),
        ("done", "B"),
        ("submit", "C"),  # before A is done: a stage-by-stage runner would wait for A here
        ("done", "C"),
        ("done", "A"),
    ]
    assert sorted(res.computed) == ["A", "B", "C"]
    with xr.open_dataset(tmp_path / "run" / "cells" / "C.nc", engine="h5netcdf") as ds:
        assert float(ds["x"]) == 12.0
