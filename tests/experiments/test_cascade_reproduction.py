"""Simulation of the cascading policies and the Figure 5 reproduction (the acceptance criteria
of ``docs/cascading.md``; the command: ``tests/cli``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from hierbandit.cascade.env import CascadeEnv, simulate_episode, slate_value
from hierbandit.cascade.policies import AUCBBP, UCBBP, CascadeEpsilonGreedy
from hierbandit.experiments.cascade import (
    _cascade_from_slate,
    acceptance,
    make_policies,
    run_reproduction,
    simulate_cascade,
    summary_table,
    write_reproduction,
)
from hierbandit.experiments.runner import run_experiment

K, D, H = 5, 5, 3
E = np.linspace(1, 3, K)


def test_vectorised_cascade_equals_step_by_step(rng):
    N = 300
    P = rng.uniform(0.05, 0.7, (N, K))
    U = rng.random((N, H))
    slate = rng.integers(K, size=(N, H))
    a1, c1 = _cascade_from_slate(P, U, slate)
    a2, c2 = simulate_episode(P, U, lambda h, a: slate[:, h])
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(c1, c2)


def test_simulate_cascade_structure_crn_and_exact_regret():
    env = CascadeEnv.preset("mccb-repro", n_users=6)
    pols = {
        "UCBBP": UCBBP(K, D, E, H),
        "eps": CascadeEpsilonGreedy(K, D, E, H),
        "AUCBBP-active": lambda rng: AUCBBP(K, D, E, H, 12, rank_pool="active", rng=rng),
    }
    ds = simulate_cascade(pols, env, 12, 2, seed=3)
    assert dict(ds["regret"].sizes) == {"policy": 3, "seed": 2, "episode": 12}
    assert list(ds["episode"].values) == list(range(1, 13))
    assert json.loads(ds["regret"].attrs["exact"]) == {
        "UCBBP": True,
        "eps": True,
        "AUCBBP-active": False,
    }
    assert np.all(ds["regret"].sel(policy=["UCBBP", "eps"]) >= -1e-12)
    assert np.all(ds["clicks"] <= ds["displays"])
    # reproducible; appending a policy leaves the earlier ones unchanged
    again = simulate_cascade(dict(list(pols.items())[:2]), env, 12, 2, seed=3)
    np.testing.assert_array_equal(
        again["regret"].values, ds["regret"].sel(policy=["UCBBP", "eps"]).values
    )
    # the exact regret equals V*(x) − V(slate; x) replayed by hand for seed 0
    seq = np.random.SeedSequence(3).spawn(2)[0]
    env_ss, roll_ss, pol_root = seq.spawn(3)
    env0 = env.clone(rng=np.random.default_rng(env_ss))
    np.testing.assert_array_equal(env0.theta, ds["theta"].isel(seed=0).values)
    roll = env0.rollout(12, rng=np.random.default_rng(roll_ss))
    pol = UCBBP(K, D, E, H, rng=np.random.default_rng(pol_root.spawn(3)[0]))
    for t in range(12):
        X = roll.contexts[t]
        slate = pol.recommend(X)
        want = np.sum(roll.optimal_value[t] - slate_value(roll.click_prob[t], E, slate))
        assert abs(ds["regret"].sel(policy="UCBBP").values[0, t] - want) < 1e-10
        arms, clicks = simulate_episode(roll.click_prob[t], roll.uniforms[t], pol.select)
        pol.update(X, arms, clicks)
    np.testing.assert_allclose(
        ds["optimal_value"].values[0], roll.optimal_value.sum(axis=1), rtol=1e-12
    )


def test_simulate_cascade_rejects_bad_arguments():
    env = CascadeEnv(n_users=3)
    with pytest.raises(TypeError, match="mapping"):
        simulate_cascade([UCBBP(K, D, E, H)], env, 3, 1)
    with pytest.raises(ValueError, match="at least one"):
        simulate_cascade({}, env, 3, 1)
    with pytest.raises(ValueError, match="horizon"):
        simulate_cascade({"u": UCBBP(K, D, E, 2)}, env, 3, 1)
    with pytest.raises(ValueError, match="rewards"):
        simulate_cascade({"u": UCBBP(K, D, np.ones(K), H)}, env, 3, 1)
    with pytest.raises(ValueError, match="n_episodes"):
        simulate_cascade({"u": UCBBP(K, D, E, H)}, env, 0, 1)
    with pytest.raises(TypeError, match="CascadeEnv"):
        simulate_cascade({"u": UCBBP(K, D, E, H)}, object(), 3, 1)


def test_relaxed_acceptance_end_to_end(tmp_path):
    """Criteria 1–5 of spec §6.5 in a relaxed form at a small scale (N ∈ {10, 40}, T = 150)."""
    names = ["UCBBP", "AUCBBP", "UCBBP-theory", "AUCBBP-theory", "eps-greedy", "UCBBP-literal"]
    ds = run_reproduction(n_users=(10, 40), n_episodes=150, n_seeds=3, policies=names)
    assert dict(ds["regret"].sizes) == {"n_users": 2, "policy": 6, "seed": 3, "episode": 150}
    tab = summary_table(ds)
    for N in (10, 40):
        for pol in ("UCBBP", "AUCBBP"):
            assert tab.loc[(N, pol), "R_T"] < tab.loc[(N, "eps-greedy"), "R_T"]
            assert tab.loc[(N, pol), "R_T_over_T"] < tab.loc[(N, pol), "R_50_over_50"]
        assert tab.loc[(N, "AUCBBP-theory"), "R_T"] < tab.loc[(N, "UCBBP-theory"), "R_T"]
        assert tab.loc[(N, "UCBBP-literal"), "tail_per_user"] > 0.3
    for pol in ("UCBBP", "AUCBBP"):
        assert tab.loc[(40, pol), "R_T_over_N"] < tab.loc[(10, pol), "R_T_over_N"]
    ratio_eps = (
        tab.loc[(40, "eps-greedy"), "R_T_over_N"] / tab.loc[(10, "eps-greedy"), "R_T_over_N"]
    )
    ratio_ucb = tab.loc[(40, "UCBBP"), "R_T_over_N"] / tab.loc[(10, "UCBBP"), "R_T_over_N"]
    assert ratio_ucb < ratio_eps
    acc = acceptance(ds)
    assert {"value", "threshold", "ok"} <= set(acc.columns)
    paths = write_reproduction(ds, tmp_path)
    for key in ("data", "summary", "acceptance", "figure", "report"):
        assert paths[key].is_file()
    back = xr.open_dataset(paths["data"], engine="h5netcdf")
    np.testing.assert_allclose(back["regret"].values, ds["regret"].values)
    back.close()


def test_make_policies_names():
    env = CascadeEnv.preset("mccb-repro", n_users=5)
    pols = make_policies(env, 10, ["UCBBP-MAP", "AUCBBP-active", "CascadeLinTS"])
    assert pols["UCBBP-MAP"].update_rule == "batch_map"
    assert not pols["AUCBBP-active"].open_loop
    with pytest.raises(ValueError, match="unknown policy"):
        make_policies(env, 10, ["LinUCB"])
    with pytest.raises(ValueError, match="scale"):
        run_reproduction("huge")


def test_run_reproduction_takes_its_defaults_from_the_shipped_configuration():
    ds = run_reproduction(n_users=(4,), n_episodes=5, policies=["random"])
    assert ds.sizes["seed"] == 10 and ds.attrs["seed"] == 0  # configs/cascade.toml


@pytest.mark.slow
def test_acceptance_small_scale_ten_seeds(tmp_path):
    """The documented reproduction: `hierbandit experiment run cascade` (small scale, 10
    seeds)."""
    run = run_experiment("cascade", out=tmp_path, scale="small")
    assert run.params["seeds"] == 10
    acc = json.loads((tmp_path / "acceptance.json").read_text())
    assert acc["all_ok"], acc["criteria"]
