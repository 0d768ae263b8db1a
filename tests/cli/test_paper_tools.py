"""The per-paper commands that are tools, not reproductions: ``sclub audit``, the cascade
priors and comparison, and the BOC diagnostics."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hierbandit.cli.main import app


def test_sclub_audit(tmp_path):
    aud = tmp_path / "audit"
    res = CliRunner().invoke(
        app,
        ["sclub", "audit", "--setting", "1a", "--horizon", "800", "--users", "20",
         "--components", "3", "--out", str(aud)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (aud / "audit_1a.png").exists() and "ari_mixture_truth" in res.output
    assert (aud / "audit_1a.nc").exists() and (aud / "audit_1a.json").exists()


def test_cascade_log_and_prior_commands(tmp_path):
    runner = CliRunner()
    log = tmp_path / "log.csv"
    res = runner.invoke(app, ["cascade", "simulate-log", "--out", str(log), "--episodes", "20"])
    assert res.exit_code == 0, res.output
    prior_path = tmp_path / "prior.nc"
    res = runner.invoke(app, ["cascade", "fit-prior", str(log), "--out", str(prior_path)])
    assert res.exit_code == 0, res.output
    from hierbandit.bayes.cascade import load_cascade_prior

    assert load_cascade_prior(prior_path).method == "laplace"
    res = runner.invoke(app, ["cascade", "fit-prior", str(log), "--out", str(tmp_path / "p.json")])
    assert res.exit_code == 2 and ".nc" in res.output


@pytest.mark.slow
def test_cascade_compare(tmp_path):
    res = CliRunner().invoke(
        app,
        ["cascade", "compare", "--episodes", "40", "--draws", "300", "--tune", "300",
         "--chains", "2", "--out", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (tmp_path / "report.md").is_file() and (tmp_path / "comparison.png").is_file()


def test_boc_hardness_and_errors():
    runner = CliRunner()
    result = runner.invoke(app, ["boc", "hardness", "--instance", "easy", "--instance", "iris"])
    assert result.exit_code == 0, result.output
    assert "D*=0.632727" in result.output and "D*=87.449" in result.output
    result = runner.invoke(app, ["boc", "hardness", "--instance", "nope"])
    assert result.exit_code == 2
