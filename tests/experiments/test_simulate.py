"""Tests of the simulation runner, the regret summaries and the plots."""

from __future__ import annotations

import copy
import json
import logging

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import hierbandit
from hierbandit.ebm import HierarchicalLinearEnv, Policy
from hierbandit.experiments import (
    cumulative_regret,
    plot_cumulative_regret,
    plot_regret_panels,
    regret_table,
    simulate,
)

N, K, D = 4, 3, 2


class _Stub(Policy):
    """Minimal concrete policy: records what it saw."""

    def __init__(self, n_instances, n_arms, n_features, *, tie_break="random", rng=None):
        super().__init__(n_instances, n_arms, n_features, tie_break=tie_break, rng=rng)
        self.seen: list[tuple[int, np.ndarray, int, float]] = []

    def _update(self, j, x, k, y):
        self.seen.append((j, x.copy(), k, y))
        self.t += 1

    def posterior(self):  # pragma: no cover - not needed here
        raise NotImplementedError

    def hyperparameters(self):  # pragma: no cover - not needed here
        raise NotImplementedError


class Arm0(_Stub):
    """Always pulls arm 0."""

    _select_is_pure = True

    def _select(self, j, x):
        return 0


class RandomArm(_Stub):
    """Pulls a uniformly random arm from its own stream (so ``_select`` has side effects)."""

    def _select(self, j, x):
        return int(self._tie_rng.integers(self.n_arms))


class Oracle(_Stub):
    """Knows the true coefficients."""

    _select_is_pure = True

    def __init__(self, n_instances, n_arms, n_features, *, beta=None, tie_break="first", rng=None):
        super().__init__(n_instances, n_arms, n_features, tie_break=tie_break, rng=rng)
        self.beta = beta

    def _select(self, j, x):
        return self._argmax((self.beta[:, j, :] * x).sum(axis=-1))


@pytest.fixture
def env():
    return HierarchicalLinearEnv(N, K, D, arrival="data-poor", rng=0)


def test_output_structure(env):
    ds = simulate({"a0": Arm0(N, K, D), "rand": RandomArm(N, K, D)}, env, 50, 3, seed=1)
    assert isinstance(ds, xr.Dataset)
    for name in ("regret", "arm", "reward"):
        assert ds[name].dims == ("policy", "seed", "step")
        assert ds[name].shape == (2, 3, 50)
    for name in ("instance", "optimal_arm"):
        assert ds[name].dims == ("seed", "step")
    assert ds["beta"].dims == ("seed", "arm_", "instance_", "feature")
    assert list(ds["policy"].values) == ["a0", "rand"]
    np.testing.assert_array_equal(ds["seed"], [0, 1, 2])
    np.testing.assert_array_equal(ds["step"], np.arange(1, 51))
    assert "oracle_regret" not in ds
    assert ds.attrs["horizon"] == 50 and ds.attrs["n_seeds"] == 3 and ds.attrs["seed"] == 1
    assert ds.attrs["hierbandit_version"] == hierbandit.__version__
    env_cfg = json.loads(ds.attrs["env"])
    assert env_cfg["class"] == "HierarchicalLinearEnv"
    assert env_cfg["params"]["arrival"] == "data-poor"
    pol_cfg = json.loads(ds.attrs["policies"])
    assert pol_cfg["rand"]["class"] == "RandomArm"
    np.testing.assert_array_equal(ds["arm"].sel(policy="a0"), 0)
    assert ds["arm"].min() >= 0 and ds["arm"].max() < K


def test_regret_nonnegative_and_consistent(env):
    ds = simulate({"a0": Arm0(N, K, D), "rand": RandomArm(N, K, D)}, env, 200, 2)
    assert float(ds["regret"].min()) >= 0.0
    # regret is zero exactly when the optimal arm was pulled (continuous means: no ties)
    opt = (ds["arm"] == ds["optimal_arm"]).values
    regret = ds["regret"].values
    assert opt.any() and (~opt).any()
    assert np.all(regret[opt] == 0.0)
    assert np.all(regret[~opt] > 0.0)


def test_oracle_policy_has_zero_regret():
    env = HierarchicalLinearEnv(N, K, D, rng=3)
    ds = simulate(
        {"oracle": Oracle(N, K, D, beta=env.beta), "a0": Arm0(N, K, D)},
        env,
        300,
        2,
        redraw_env=False,
    )
    np.testing.assert_array_equal(ds["regret"].sel(policy="oracle"), 0.0)
    np.testing.assert_array_equal(ds["arm"].sel(policy="oracle"), ds["optimal_arm"])
    assert float(ds["regret"].sel(policy="a0").sum()) > 0
    np.testing.assert_array_equal(ds["beta"].isel(seed=1), env.beta)


def test_common_random_numbers_across_policies(env):
    made: dict[str, list[_Stub]] = {"a0": [], "rand": []}

    def factory(cls, key):
        def make(rng):
            made[key].append(cls(N, K, D, rng=rng))
            return made[key][-1]

        return make

    ds = simulate({"a0": factory(Arm0, "a0"), "rand": factory(RandomArm, "rand")}, env, 80, 2)
    for s in range(2):
        a, r = made["a0"][s], made["rand"][s]
        assert len(a.seen) == len(r.seen) == 80
        for (ja, xa, _, _), (jr, xr_, _, _) in zip(a.seen, r.seen, strict=True):
            assert ja == jr
            np.testing.assert_array_equal(xa, xr_)
        np.testing.assert_array_equal([j for j, *_ in a.seen], ds["instance"].isel(seed=s))
        # rewards observed are the ones recorded
        np.testing.assert_array_equal(
            [y for *_, y in r.seen], ds["reward"].sel(policy="rand").isel(seed=s)
        )
    # different seeds face different streams
    assert not np.array_equal(ds["instance"].isel(seed=0), ds["instance"].isel(seed=1))


def test_same_action_same_reward(env):
    ds = simulate({"x": Arm0(N, K, D), "y": Arm0(N, K, D)}, env, 60, 2, seed=5)
    np.testing.assert_array_equal(ds["reward"].sel(policy="x"), ds["reward"].sel(policy="y"))


def test_reproducible_and_seed_dependent(env):
    pols = {"rand": RandomArm(N, K, D), "a0": Arm0(N, K, D)}
    a = simulate(pols, env, 40, 2, seed=7)
    b = simulate(pols, env, 40, 2, seed=7)
    xr.testing.assert_identical(a, b)
    c = simulate(pols, env, 40, 2, seed=8)
    assert not np.array_equal(a["instance"], c["instance"])
    # a policy's stream depends on its position only: appending a policy changes nothing before it
    d = simulate({**pols, "extra": RandomArm(N, K, D)}, env, 40, 2, seed=7)
    xr.testing.assert_identical(a["arm"], d["arm"].sel(policy=["rand", "a0"]))


def test_redraw_env(env):
    ds = simulate({"a0": Arm0(N, K, D)}, env, 10, 2, redraw_env=True)
    assert not np.array_equal(ds["beta"].isel(seed=0), ds["beta"].isel(seed=1))
    assert not np.array_equal(ds["beta"].isel(seed=0), env.beta)
    ds2 = simulate({"a0": Arm0(N, K, D)}, env, 10, 2, redraw_env=False)
    np.testing.assert_array_equal(ds2["beta"].isel(seed=0), env.beta)
    # the rollout streams do not depend on redraw_env
    np.testing.assert_array_equal(ds["instance"], ds2["instance"])


def test_prototype_policy_is_not_trained(env):
    proto = RandomArm(N, K, D, rng=0)
    simulate({"rand": proto}, env, 30, 2)
    assert proto.t == 0 and proto.seen == []


def _oracle_by_hand(env, policy_cls, horizon, seed):
    """Recompute the oracle-policy regret of seed 0 directly from the rollout.

    Counterfactual actions always come from a deep copy made before the round's selection.
    """
    seed_seq = np.random.SeedSequence(seed).spawn(1)[0]
    env_ss, roll_ss, pol_root = seed_seq.spawn(3)
    e = env.clone(rng=np.random.default_rng(env_ss))
    roll = e.rollout(horizon, rng=np.random.default_rng(roll_ss))
    pol = policy_cls(N, K, D, rng=np.random.default_rng(pol_root.spawn(1)[0]))
    out = np.zeros((horizon, N))
    for t in range(horizon):
        j, x = int(roll.instance[t]), roll.context[t]
        mu = e.beta[:, :, :] @ x  # (K, N)
        probe = copy.deepcopy(pol)
        k = pol._select(j, x)
        for i in range(N):
            ki = k if i == j else probe._select(i, x)
            out[t, i] = e.arrival_probs[i] * (mu[:, i].max() - mu[ki, i])
        pol._update(j, x, k, roll.mean_reward[t, k] + roll.noise[t, k])
    return out


@pytest.mark.parametrize("cls", [Arm0, RandomArm])
def test_oracle_regret_tiny_case(env, cls):
    T = 25
    ds = simulate({"p": cls(N, K, D)}, env, T, 1, seed=3, oracle_regret=True)
    assert ds["oracle_regret"].dims == ("policy", "seed", "step", "instance_")
    want = _oracle_by_hand(env, cls, T, 3)
    np.testing.assert_allclose(ds["oracle_regret"].isel(policy=0, seed=0), want, atol=1e-12)
    # the realised instance's term equals p_j times the realised pseudo-regret
    inst = ds["instance"].isel(seed=0).values
    probs = env.arrival_probs
    realised = ds["oracle_regret"].isel(policy=0, seed=0).values[np.arange(T), inst]
    np.testing.assert_allclose(realised, probs[inst] * ds["regret"].isel(policy=0, seed=0))
    # the main trajectory is unchanged by the counterfactual evaluation
    plain = simulate({"p": cls(N, K, D)}, env, T, 1, seed=3)
    np.testing.assert_array_equal(plain["arm"], ds["arm"])


def test_oracle_regret_zero_for_oracle_policy():
    env = HierarchicalLinearEnv(N, K, D, rng=3)
    ds = simulate(
        {"oracle": Oracle(N, K, D, beta=env.beta)}, env, 30, 1, redraw_env=False, oracle_regret=True
    )
    np.testing.assert_allclose(ds["oracle_regret"], 0.0, atol=1e-12)
    assert float(cumulative_regret(ds, kind="oracle").isel(step=-1).max()) == pytest.approx(0.0)


def test_progress_is_reported_as_log_records(env, caplog):
    """One record per (seed × policy) on the progress logger, then the finished mark; the
    Dataset is the same whether anyone listens."""
    quiet = simulate({"a0": Arm0(N, K, D)}, env, 5, 2)
    with caplog.at_level(logging.DEBUG, logger="hierbandit.progress"):
        ds = simulate({"a0": Arm0(N, K, D)}, env, 5, 2)
    steps = [r.progress for r in caplog.records if hasattr(r, "progress")]
    assert steps == [(0, 2, "simulate"), (1, 2, "simulate"), (2, 2, "simulate"), (2, 2, "simulate")]
    xr.testing.assert_identical(ds, quiet)


# ---------------------------------------------------------------------- summaries
@pytest.fixture
def hand_ds():
    """2 policies × 3 seeds × 4 steps with known values."""
    regret = np.array(
        [
            [[1.0, 0.0, 2.0, 1.0], [0.0, 0.0, 1.0, 1.0], [3.0, 1.0, 0.0, 0.0]],
            [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5]],
        ]
    )
    instance = np.array([[0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 0, 1]])
    return xr.Dataset(
        {
            "regret": (("policy", "seed", "step"), regret),
            "instance": (("seed", "step"), instance),
        },
        coords={"policy": ["A", "B"], "seed": [0, 1, 2], "step": [1, 2, 3, 4]},
        attrs={"n_instances": 2},
    )


def test_cumulative_regret_values(hand_ds):
    cum = cumulative_regret(hand_ds)
    assert cum.dims == ("policy", "seed", "step")
    np.testing.assert_array_equal(cum.sel(policy="A", seed=0), [1.0, 1.0, 3.0, 4.0])
    np.testing.assert_array_equal(cum.sel(policy="B", seed=1), [1.0, 2.0, 3.0, 4.0])
    c0 = cumulative_regret(hand_ds, instance=0)
    np.testing.assert_array_equal(c0.sel(policy="A", seed=0), [1.0, 1.0, 3.0, 3.0])
    np.testing.assert_array_equal(c0.sel(policy="A", seed=1), [0.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(c0.sel(policy="B", seed=2), [0.5, 1.0, 1.5, 1.5])
    c1 = cumulative_regret(hand_ds, instance=1)
    xr.testing.assert_allclose(c0 + c1, cum)


def test_regret_table_values(hand_ds):
    tab = regret_table(hand_ds)
    assert isinstance(tab, pd.DataFrame)
    assert list(tab.index) == ["A", "B"] and tab.index.name == "policy"
    assert list(tab.columns) == ["mean", "se", "median"]
    finals_a = np.array([4.0, 2.0, 4.0])
    finals_b = np.array([0.0, 4.0, 2.0])
    for name, f in (("A", finals_a), ("B", finals_b)):
        assert tab.loc[name, "mean"] == pytest.approx(f.mean())
        assert tab.loc[name, "se"] == pytest.approx(f.std(ddof=1) / np.sqrt(3))
        assert tab.loc[name, "median"] == pytest.approx(np.median(f))
    tab0 = regret_table(hand_ds, instance=0)
    assert tab0.loc["A", "mean"] == pytest.approx(np.mean([3.0, 2.0, 4.0]))


def test_regret_table_single_seed(hand_ds):
    tab = regret_table(hand_ds.isel(seed=[0]))
    assert np.isnan(tab.loc["A", "se"])
    assert tab.loc["A", "mean"] == 4.0


def test_summary_validation(hand_ds):
    with pytest.raises(TypeError, match="ds"):
        cumulative_regret(hand_ds["regret"])
    with pytest.raises(ValueError, match="instance"):
        cumulative_regret(hand_ds, instance=2)
    with pytest.raises(TypeError, match="instance"):
        regret_table(hand_ds, instance=0.0)
    with pytest.raises(ValueError, match="kind"):
        cumulative_regret(hand_ds, kind="expected")
    with pytest.raises(ValueError, match="oracle"):
        regret_table(hand_ds, kind="oracle")


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"horizon": 0}, ValueError, "horizon"),
        ({"horizon": 10.0}, TypeError, "horizon"),
        ({"n_seeds": 0}, ValueError, "n_seeds"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": "0"}, TypeError, "seed"),
        ({"redraw_env": 1}, TypeError, "redraw_env"),
        ({"oracle_regret": "yes"}, TypeError, "oracle_regret"),
    ],
)
def test_simulate_invalid_arguments(env, kwargs, exc, name):
    args = {"horizon": 5, "n_seeds": 1} | kwargs
    horizon, n_seeds = args.pop("horizon"), args.pop("n_seeds")
    with pytest.raises(exc, match=name):
        simulate({"a0": Arm0(N, K, D)}, env, horizon, n_seeds, **args)


def test_simulate_invalid_policies(env):
    with pytest.raises(TypeError, match="policies"):
        simulate([Arm0(N, K, D)], env, 5, 1)
    with pytest.raises(ValueError, match="policies"):
        simulate({}, env, 5, 1)
    with pytest.raises(TypeError, match="policies"):
        simulate({"a": 3}, env, 5, 1)
    with pytest.raises(TypeError, match="policies"):
        simulate({1: Arm0(N, K, D)}, env, 5, 1)
    with pytest.raises(TypeError, match="policies"):
        simulate({"a": lambda rng: "not a policy"}, env, 5, 1)
    with pytest.raises(ValueError, match="n_arms"):
        simulate({"a": Arm0(N, K + 1, D)}, env, 5, 1)
    with pytest.raises(TypeError, match="env"):
        simulate({"a": Arm0(N, K, D)}, object(), 5, 1)

    class BadArm(Arm0):
        def _select(self, j, x):
            return -1

    with pytest.raises(ValueError, match="arm"):
        simulate({"bad": BadArm(N, K, D)}, env, 5, 1)


# ---------------------------------------------------------------------- plotting
def test_plots_write_png(env, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = simulate({"a0": Arm0(N, K, D), "rand": RandomArm(N, K, D)}, env, 40, 3, oracle_regret=True)
    fig = plot_regret_panels(ds, instance=0)
    assert len(fig.axes) == 2
    assert "instance 0" in fig.axes[1].get_title()
    path = tmp_path / "panels.png"
    fig.savefig(path)
    assert path.stat().st_size > 1000
    plt.close(fig)

    fig, ax = plt.subplots()
    out = plot_cumulative_regret(ds, ax=ax, band="iqr", kind="oracle")
    assert out is ax
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a0", "rand"]
    assert ax.get_xlabel() and ax.get_ylabel()
    fig.savefig(tmp_path / "single.png")
    plt.close(fig)

    ax = plot_cumulative_regret(ds, band=None, instance=1)
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="band"):
        plot_cumulative_regret(ds, band="sd")
    with pytest.raises(ValueError, match="instance"):
        plot_regret_panels(ds, instance=N)
