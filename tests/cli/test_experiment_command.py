"""``hierbandit experiment list | show | run``: listing, showing values, configuration files,
rerunning from the written config.toml, and clean errors."""

from __future__ import annotations

from typer.testing import CliRunner

from hierbandit.cli.main import app

NAMES = ("ebm-synthetic", "ebm-real", "cascade", "sclub", "offline", "boc")


def test_list_show_run_and_errors(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["experiment", "list"])
    assert res.exit_code == 0
    for name in NAMES:
        assert name in res.output
    res = runner.invoke(app, ["experiment", "show", "boc"])
    assert res.exit_code == 0 and "table2_trials" in res.output
    res = runner.invoke(app, ["experiment", "show", "sclub"])
    assert "noise_sd: Gaussian noise standard deviation. [a number ≥ 0] = 0.05" in res.output
    assert "horizon: Rounds T. [an integer ≥ 2] = small 131071, paper 1048575" in res.output
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(
        "experiment: ebm-synthetic\nparams:\n  settings: [fig2-sparse]\n  policies: [EbmUCB]\n"
        "  horizon: 40\n  seeds: 2\n"
    )
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["experiment", "run", "ebm-synthetic", "--config", str(cfg), "--out", str(out),
              "--no-progress", "--set", "seeds_per_cell=2"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "1 cells computed" in res.output and (out / "fig2-sparse.nc").is_file()
    rerun = runner.invoke(
        app,
        ["experiment", "run", "ebm-synthetic", "--config", str(out / "config.toml"), "--out",
         str(out), "--no-progress"],
    )  # fmt: skip
    assert rerun.exit_code == 0 and "0 cells computed, 1 reused" in rerun.output
    for args, match in (
        (["experiment", "run", "nope"], "experiment must be one of"),
        (["experiment", "run", "sclub", "--set", "horizon=abc"], "params.horizon"),
        (["experiment", "run", "sclub", "--config", str(cfg)], "is for experiment"),
        (["experiment", "show", "nope"], "experiment must be one of"),
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and match in res.output, res.output
