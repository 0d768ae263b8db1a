"""Every reproduction runs through one door, ``hierbandit experiment run NAME``.

The per-paper reproduction commands are gone; each test here is one of theirs, ported to the
door at the same tiny scale and checking the same outputs.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import xarray as xr
from typer.testing import CliRunner

from hierbandit.cli.main import app


def _run(*args: str):
    return CliRunner().invoke(app, ["experiment", "run", *args, "--no-progress"])


@pytest.mark.parametrize(
    "args",
    [
        ["ebm", "figures"],
        ["ebm", "real"],
        ["sclub", "reproduce"],
        ["cascade", "figures"],
        ["offline", "reproduce"],
        ["boc", "reproduce"],
    ],
)
def test_the_per_paper_reproduction_commands_are_gone(args):
    res = CliRunner().invoke(app, [*args, "--help"])
    assert res.exit_code != 0 and "No such command" in res.output


def test_ebm_synthetic_and_the_demo(tmp_path):
    res = CliRunner().invoke(
        app, ["demo", "--seeds", "2", "--horizon", "50", "--out", str(tmp_path / "d")]
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "d" / "demo.png").exists()
    out = tmp_path / "f"
    res = _run("ebm-synthetic", "--seeds", "1", "--set", "horizon=40",
               "--set", 'settings=["fig2-sparse"]', "--out", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (out / "fig2-sparse.md").exists() and (out / "fig2-sparse.png").exists()
    assert "EbmUCB" in (out / "fig2-sparse.md").read_text()
    res = _run("ebm-synthetic", "--set", 'settings=["nope"]', "--out", str(tmp_path / "x"))
    assert res.exit_code == 2 and "params.settings[0]" in res.output


def test_ebm_real(tmp_path):
    # 40 rounds of Linnerud: the paper's 5,000 divided by 125
    res = _run("ebm-real", "--set", 'datasets=["linnerud"]', "--seeds", "2",
               "--set", "horizon_divisor=125", "--out", str(tmp_path))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (tmp_path / "real-linnerud.nc").exists()
    assert (tmp_path / "real-linnerud.png").exists()
    with xr.open_dataset(tmp_path / "real-linnerud.nc", engine="h5netcdf") as ds:
        assert ds.sizes["step"] == 40 and ds.sizes["seed"] == 2
    res = _run("ebm-real", "--set", 'datasets=["sarcos"]', "--out", str(tmp_path / "x"))
    assert res.exit_code == 2 and "params.datasets[0]" in res.output


def test_sclub(tmp_path):
    out = tmp_path / "repro"
    res = _run("sclub", "--set", "horizon=600", "--set", "n_users=20", "--seeds", "2",
               "--set", 'settings=["1b"]', "--out", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (out / "table1.md").exists() and (out / "sclub_1b.nc").exists()
    assert "Paper's claims (all hold:" in (out / "summary.md").read_text()
    assert "all_hold" in json.loads((out / "summary.json").read_text())["claims"]
    res = _run("sclub", "--set", 'settings=["9z"]', "--set", "horizon=10", "--out", str(out))
    assert res.exit_code == 2 and "settings" in res.output


def test_cascade(tmp_path):
    out = tmp_path / "fig"
    res = _run("cascade", "--seeds", "2", "--set", "n_episodes=30", "--set", "n_users=[4, 8]",
               "--out", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (out / "figure5.png").is_file() and (out / "report.md").is_file()
    assert "Acceptance" in (out / "report.md").read_text()
    assert {"all_ok", "criteria"} <= set(json.loads((out / "acceptance.json").read_text()))
    res = _run("cascade", "--scale", "huge")
    assert res.exit_code != 0


def test_offline(tmp_path):
    out = tmp_path / "res"
    tiny = {
        "n_users": 60, "n_features": 5, "n_clusters": 3, "n_candidates": 10, "seeds": 1,
        "n_test": 400, "sufficient_sizes": [12_000, 24_000], "insufficient_sizes": [1_200, 3_000],
        "sweep_sizes": [3_000], "grid_points": 7, "seed": 3,
    }  # fmt: skip
    sets = [a for k, v in tiny.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    res = _run("offline", *sets, "--out", str(out))
    assert res.exit_code == 0, res.output
    for name in ("table3.csv", "table3.md", "figure2.png", "figure2.csv", "gamma_sweep.png",
                 "sufficient_equal.nc", "sufficient_semi-random.nc", "insufficient_equal.nc",
                 "insufficient_semi-random.nc", "summary.json", "paired.md"):  # fmt: skip
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    runs = {"sufficient/equal", "sufficient/semi-random", "insufficient/equal",
            "insufficient/semi-random"}  # fmt: skip
    assert set(summary["proposed_beat_baselines"]) == runs
    assert set(summary["paired"]) == set(summary["verdicts"]) == runs
    table3 = pd.read_csv(out / "table3.csv", index_col=0)
    assert sorted(set(table3["distribution"])) == ["equal", "semi-random"]
    assert list(table3.columns[1:]) == ["12k", "24k"]
    report = (out / "summary.md").read_text()
    assert "### Sufficient data (semi-random): SubOpt by dataset size" in report
    assert "**sufficient/equal**" in (out / "paired.md").read_text()
    bad = _run("offline", "--set", "lambda_tilde_a=big", "--out", str(tmp_path / "bad"))
    assert bad.exit_code == 2 and "lambda_tilde_a" in bad.output


def test_boc(tmp_path):
    res = _run("boc", "--set", 'parts=["table2"]', "--set", "table2_trials=1",
               "--set", "seeds_per_cell=1", "--out", str(tmp_path))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (tmp_path / "table2.md").exists()
    assert (tmp_path / "table2_iris.nc").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["config"]["trials"]["table2"] == 1
    text = (tmp_path / "table2.md").read_text()
    assert "BOC-LE" in text and "Clopper" in text
    with xr.open_dataset(tmp_path / "table2_challenging-rescaled.nc", engine="h5netcdf") as ds:
        assert bool(ds.correct.all())
    res = _run("boc", "--scale", "huge")
    assert res.exit_code != 0
