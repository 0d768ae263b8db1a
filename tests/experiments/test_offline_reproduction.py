"""The offline clustering reproduction: the command at tiny scale, and (slow) the acceptance
criteria at the default small scale."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import hierbandit.experiments.offline as off
from hierbandit.experiments.offline_cli import app

TINY = {
    "n_users": 60,
    "n_features": 5,
    "n_clusters": 3,
    "n_candidates": 10,
    "n_seeds": 1,
    "n_test": 400,
    "sufficient_sizes": (12_000, 24_000),
    "insufficient_sizes": (1_200, 3_000),
    "sweep_sizes": (3_000,),
    "grid_points": 7,
}


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(off.SCALES, "small", TINY)
    return TINY


def test_cli_reproduce_tiny(tiny, tmp_path):
    main = typer.Typer()
    main.add_typer(app, name="offline")
    out = tmp_path / "res"
    result = CliRunner().invoke(main, ["offline", "reproduce", "--out", str(out), "--seed", "3"])
    assert result.exit_code == 0, result.output
    for name in ("table3.csv", "table3.md", "figure2.png", "figure2.csv", "gamma_sweep.png",
                 "sufficient.nc", "insufficient_equal.nc", "insufficient_semi-random.nc",
                 "summary.json"):  # fmt: skip
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["proposed_beat_baselines"]) == {
        "sufficient",
        "insufficient/equal",
        "insufficient/semi-random",
    }
    assert "average SubOpt" in result.output
    bad = CliRunner().invoke(main, ["offline", "reproduce", "--out", str(out),
                                    "--lambda-tilde-a", "big"])  # fmt: skip
    assert bad.exit_code != 0


def test_run_offline_structure_and_oracle(tiny):
    ds = off.run_offline([1_200, 3_000], n_seeds=2, seed=1)
    assert ds["subopt"].dims == ("algorithm", "size", "seed")
    assert list(ds.algorithm.values) == list(off.ALGORITHMS)
    assert np.isfinite(ds["subopt"]).all()
    # the oracle Off-C2LUB is the sweep at the grid point of least seed-averaged SubOpt
    for size in ds.size.values:
        curve = ds["sweep"].sel(size=size)
        j = int(np.argmin(curve.mean("seed").to_numpy()))
        np.testing.assert_allclose(
            ds["subopt"].sel(algorithm="Off-C2LUB", size=size), curve.isel(gamma_index=j)
        )
        assert float(ds["oracle_gamma"].sel(size=size)) == float(
            ds["gamma"].sel(size=size).isel(gamma_index=j)
        )
    # common random numbers: the same seed gives the same numbers
    again = off.run_offline([1_200], n_seeds=1, seed=1, algorithms=["LinUCB_IND", "Off-CLUB"])
    np.testing.assert_allclose(
        again["subopt"].sel(size=1_200, seed=0),
        ds["subopt"].sel(size=1_200, seed=0, algorithm=["LinUCB_IND", "Off-CLUB"]),
    )
    with pytest.raises(ValueError, match="algorithms"):
        off.run_offline([1_200], algorithms=["Nope"])


def test_acceptance_logic():
    import xarray as xr

    algs = ["Off-C2LUB", "Off-CLUB", "LinUCB_IND", "CLUB"]
    sub = np.array([[0.1, 0.05], [0.2, 0.1], [0.3, 0.2], [0.25, 0.2]])[:, :, None]
    sweep = np.array([[0.3, 0.1, 0.2], [0.3, 0.2, 0.1]])[:, :, None]
    ds = xr.Dataset(
        {"subopt": (("algorithm", "size", "seed"), sub),
         "sweep": (("size", "gamma_index", "seed"), sweep)},
        coords={"algorithm": algs, "size": [10, 20], "seed": [0]},
    )  # fmt: skip
    acc = off.acceptance(None, {"equal": ds}, sweep_sizes=(10, 20))
    assert acc["all_proposed_beat_baselines"]
    assert acc["u_shaped"] == {"insufficient/equal/10": True, "insufficient/equal/20": False}
    assert acc["falls_with_size"]["insufficient/equal"]["CLUB"]["last_below_first"]


@pytest.mark.slow
def test_small_scale_insufficient_acceptance(tmp_path):
    """Issue criteria on the insufficient-data runs of the default small scale: Off-C2LUB and
    Off-CLUB below LinUCB_IND and CLUB at every size, SubOpt falls with size, U-shaped sweep."""
    res = off.run_reproduction(tmp_path, parts=("insufficient",))
    s = res["summary"]
    for run in ("insufficient/equal", "insufficient/semi-random"):
        assert all(s["proposed_beat_baselines"][run].values()), s["proposed_beat_baselines"]
        for alg in ("Off-C2LUB", "Off-CLUB", "LinUCB_IND"):
            assert s["falls_with_size"][run][alg]["last_below_first"]
    assert s["all_u_shaped"]
