"""The offline clustering reproduction: the runner at tiny scale, the acceptance logic, and
(slow) the acceptance criteria at the default small scale (the command: ``tests/cli``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hierbandit.experiments.offline as off
from hierbandit.experiments.runner import run_experiment

#: a tiny environment (the keyword overrides of run_offline)
TINY_ENV = {
    "n_users": 60,
    "n_features": 5,
    "n_clusters": 3,
    "n_candidates": 10,
    "n_test": 400,
    "grid_points": 7,
}


def test_run_offline_structure_and_oracle():
    ds = off.run_offline([1_200, 3_000], n_seeds=2, seed=1, **TINY_ENV)
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
    assert ds.attrs["scale"] == "custom" and ds.attrs["lambda_tilde_a"] == 1.0
    # common random numbers: the same seed gives the same numbers
    again = off.run_offline(
        [1_200], n_seeds=1, seed=1, algorithms=["LinUCB_IND", "Off-CLUB"], **TINY_ENV
    )
    np.testing.assert_allclose(
        again["subopt"].sel(size=1_200, seed=0),
        ds["subopt"].sel(size=1_200, seed=0, algorithm=["LinUCB_IND", "Off-CLUB"]),
    )
    with pytest.raises(ValueError, match="algorithms"):
        off.run_offline([1_200], algorithms=["Nope"])
    with pytest.raises(TypeError, match="n_user"):
        off.run_offline([1_200], n_user=10)


def test_the_shipped_lambda_tilde_and_its_parsing():
    assert off.REPRODUCE_LAMBDA_TILDE_A == 1.0  # configs/offline.toml: lambda_tilde_a = "1.0"
    assert off.parse_lambda_tilde("lambda_a") == "lambda_a"
    assert off.parse_lambda_tilde("0.25") == 0.25
    for bad in ("-2", "big", "inf", "0"):
        with pytest.raises(ValueError, match="lambda_tilde_a"):
            off.parse_lambda_tilde(bad)


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
    # one seed: no standard error, the verdict is the sign
    one = acc["paired"]["insufficient/equal"]["Off-CLUB - CLUB"]
    assert one[20]["verdict"] == "lower" and np.isnan(one[20]["se"])
    np.testing.assert_allclose(one[20]["mean"], 0.1 - 0.2)
    # a bare sufficient Dataset is the equal distribution
    assert set(off.acceptance(ds, None)["paired"]) == {"sufficient/equal"}


def test_paired_difference_against_a_hand_computation():
    import xarray as xr

    # seeds are pairs: Off-CLUB - CLUB per seed is (-3, -1, -2) at size 10 (mean -2, s.e.
    # 1/sqrt(3): lower), (+1, -1, +0.5) at size 20 (mean 1/6, s.e. 0.6: a tie) and (5, 4, 6) at
    # size 30 (higher)
    club = np.array([[10.0, 10.0, 10.0], [5.0, 5.0, 5.0], [1.0, 2.0, 3.0]])
    offclub = club + np.array([[-3.0, -1.0, -2.0], [1.0, -1.0, 0.5], [5.0, 4.0, 6.0]])
    ds = xr.Dataset(
        {"subopt": (("algorithm", "size", "seed"), np.stack([offclub, club]))},
        coords={"algorithm": ["Off-CLUB", "CLUB"], "size": [10, 20, 30], "seed": [0, 1, 2]},
    )
    res = off.paired_difference(ds, "Off-CLUB", "CLUB")
    for size, diff, verdict in ((10, [-3, -1, -2], "lower"), (20, [1, -1, 0.5], "tie"),
                                (30, [5, 4, 6], "higher")):  # fmt: skip
        np.testing.assert_allclose(res[size]["mean"], np.mean(diff))
        np.testing.assert_allclose(res[size]["se"], np.std(diff, ddof=1) / np.sqrt(3))
        assert res[size]["verdict"] == verdict
        assert res[size]["seeds_lower"] == sum(x < 0 for x in diff)
        assert res[size]["n_seeds"] == 3
    acc = off.acceptance({"semi-random": ds}, None)
    assert acc["verdicts"] == {"sufficient/semi-random": {"lower": 1, "tie": 1, "higher": 1}}
    # the seed-mean check agrees with the signs of the means
    assert acc["proposed_beat_baselines"]["sufficient/semi-random"] == {
        10: True,
        20: False,
        30: False,
    }
    md = off.paired_markdown(acc)
    assert "sufficient/semi-random" in md and "(tie; 1/3 seeds lower)" in md
    assert "(higher; 0/3 seeds lower)" in md


@pytest.mark.slow
def test_small_scale_insufficient_acceptance(tmp_path):
    """Issue criteria on the insufficient-data runs of the default small scale: Off-C2LUB and
    Off-CLUB below LinUCB_IND and CLUB at every size, SubOpt falls with size, U-shaped sweep."""
    run_experiment("offline", out=tmp_path, scale="small", params={"parts": ["insufficient"]})
    s = json.loads((tmp_path / "summary.json").read_text())
    for run in ("insufficient/equal", "insufficient/semi-random"):
        assert all(s["proposed_beat_baselines"][run].values()), s["proposed_beat_baselines"]
        for alg in ("Off-C2LUB", "Off-CLUB", "LinUCB_IND"):
            assert s["falls_with_size"][run][alg]["last_below_first"]
    assert s["all_u_shaped"]
