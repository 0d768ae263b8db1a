"""Tests of the ebm synthetic hierarchical linear environment."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from hierbandit.ebm import HierarchicalLinearEnv, Rollout
from hierbandit.ebm.env import arrival_probabilities


def test_defaults_shapes_and_attributes():
    env = HierarchicalLinearEnv(rng=0)
    assert (env.n_instances, env.n_arms, env.n_features) == (10, 5, 3)
    assert env.beta.shape == (5, 10, 3)
    assert env.shared_mean.shape == (5, 3)
    assert env.Sigma.shape == (5, 3, 3)
    np.testing.assert_array_equal(env.noise_var, np.ones(5))
    np.testing.assert_allclose(env.arrival_probs, np.full(10, 0.1))
    assert not env.beta.flags.writeable


def test_data_poor_probabilities():
    env = HierarchicalLinearEnv(arrival="data-poor", rng=0)
    p = env.arrival_probs
    assert p[0] == pytest.approx(1 / 91, rel=1e-12)
    np.testing.assert_allclose(p[1:], 10 / 91, rtol=1e-12)
    assert p.sum() == pytest.approx(1.0)
    p2 = arrival_probabilities(10, "data-poor", poor_ratio=0.5, n_poor=3)
    np.testing.assert_allclose(p2[:3], 0.5 * p2[3])
    np.testing.assert_allclose(p2[3:], p2[3])
    assert p2.sum() == pytest.approx(1.0)


def test_explicit_arrival_vector():
    p = np.array([0.5, 0.25, 0.25])
    env = HierarchicalLinearEnv(3, 2, 2, arrival=p, rng=0)
    np.testing.assert_array_equal(env.arrival_probs, p)
    roll = env.rollout(40_000, rng=1)
    freq = np.bincount(roll.instance, minlength=3) / 40_000
    np.testing.assert_allclose(freq, p, atol=0.01)


def test_sigma_positive_definite_and_structure():
    env = HierarchicalLinearEnv(n_features=4, rng=3)
    eig = np.linalg.eigvalsh(env.Sigma)
    assert np.all(eig >= 1.0 - 1e-10)  # b bᵀ + I has eigenvalues >= 1
    np.testing.assert_allclose(env.Sigma, np.swapaxes(env.Sigma, 1, 2))
    # rank-one plus identity: exactly one eigenvalue above 1
    assert np.all(np.sum(eig > 1.0 + 1e-9, axis=1) == 1)


def test_gaussian_heterogeneity_covariance_matches_sigma():
    # many instances: the spread of beta around the shared mean has covariance Sigma
    env = HierarchicalLinearEnv(n_instances=20_000, n_arms=2, n_features=2, rng=5)
    dev = env.beta - env.shared_mean[:, None, :]
    emp = np.einsum("knd,kne->kde", dev, dev) / env.n_instances
    np.testing.assert_allclose(emp, env.Sigma, atol=0.1 * np.abs(env.Sigma).max())


@pytest.mark.parametrize("sparsity", [0, 1, 2, 4])
def test_sparse_deviation_has_exactly_s_nonzeros(sparsity):
    env = HierarchicalLinearEnv(
        n_instances=30, n_arms=4, n_features=4, heterogeneity="sparse", sparsity=sparsity, rng=1
    )
    delta = env.beta - env.shared_mean[:, None, :]
    np.testing.assert_array_equal(np.count_nonzero(delta, axis=-1), sparsity)
    np.testing.assert_allclose(env.Sigma, np.broadcast_to(sparsity / 4 * np.eye(4), (4, 4, 4)))


def test_sparse_positions_are_spread():
    env = HierarchicalLinearEnv(
        n_instances=200, n_arms=3, n_features=5, heterogeneity="sparse", sparsity=1, rng=2
    )
    delta = env.beta - env.shared_mean[:, None, :]
    counts = np.count_nonzero(delta, axis=(0, 1))
    assert np.all(counts > 60)  # 600 draws over 5 positions, ~120 each


def test_mixed_gaussian_context_moments():
    env = HierarchicalLinearEnv(n_features=3, rng=0)
    X = env.rollout(200_000, rng=1).context
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=0.02)
    np.testing.assert_allclose(X.var(axis=0), 2.0, atol=0.03)
    # bimodal: fourth moment of ±1 + N(0,1) is 1 + 6 + 3 = 10
    np.testing.assert_allclose((X**4).mean(axis=0), 10.0, rtol=0.03)
    # coordinates independent
    c = np.corrcoef(X.T)
    np.testing.assert_allclose(c[np.triu_indices(3, 1)], 0.0, atol=0.01)


def test_uniform_contexts():
    env = HierarchicalLinearEnv(contexts="uniform", rng=0)
    X = env.rollout(100_000, rng=1).context
    assert X.min() >= -1.0 and X.max() <= 1.0
    np.testing.assert_allclose(X.var(axis=0), 1 / 3, atol=0.01)


def test_empirical_contexts_resample_rows():
    rows = np.arange(12.0).reshape(4, 3)
    env = HierarchicalLinearEnv(4, 2, 3, contexts=rows, rng=0)
    X = env.rollout(500, rng=1).context
    assert all(any(np.array_equal(x, r) for r in rows) for x in X)
    assert len({tuple(x) for x in X}) == 4


def test_rollout_mean_reward_and_noise():
    env = HierarchicalLinearEnv(noise_sd=[1.0, 2.0, 0.5, 1.0, 3.0], rng=0)
    roll = env.rollout(50_000, rng=2)
    assert isinstance(roll, Rollout)
    assert roll.instance.shape == (50_000,)
    assert roll.context.shape == (50_000, 3)
    assert roll.noise.shape == roll.mean_reward.shape == (50_000, 5)
    expected = np.einsum("td,tkd->tk", roll.context, env.beta.transpose(1, 0, 2)[roll.instance])
    np.testing.assert_allclose(roll.mean_reward, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(roll.noise.std(axis=0), [1.0, 2.0, 0.5, 1.0, 3.0], rtol=0.03)
    np.testing.assert_array_equal(roll.optimal_arm, roll.mean_reward.argmax(axis=1))
    np.testing.assert_array_equal(roll.reward, roll.mean_reward + roll.noise)
    assert roll.horizon == 50_000
    # expected_reward agrees with the table
    t = 7
    np.testing.assert_allclose(
        env.expected_reward(int(roll.instance[t]), roll.context[t]), roll.mean_reward[t]
    )


def test_same_seed_same_rollout_and_prefix():
    env = HierarchicalLinearEnv(rng=0)
    a, b = env.rollout(300, rng=9), env.rollout(300, rng=9)
    for u, v in zip(a, b, strict=True):
        np.testing.assert_array_equal(u, v)
    longer = env.rollout(1000, rng=9)
    for u, v in zip(a, longer, strict=True):
        np.testing.assert_array_equal(u, v[:300])
    c = env.rollout(300, rng=10)
    assert not np.array_equal(a.context, c.context)


def test_same_seed_same_parameters_and_clone():
    e1 = HierarchicalLinearEnv(heterogeneity="sparse", rng=4)
    e2 = HierarchicalLinearEnv(heterogeneity="sparse", rng=4)
    np.testing.assert_array_equal(e1.beta, e2.beta)
    c1, c2 = e1.clone(rng=11), e1.clone(rng=11)
    np.testing.assert_array_equal(c1.beta, c2.beta)
    assert not np.array_equal(c1.beta, e1.beta)
    assert c1.get_params() | {"rng": None} == e1.get_params() | {"rng": None}
    assert c1.heterogeneity == "sparse"


def test_parameters_dataset():
    env = HierarchicalLinearEnv(4, 3, 2, rng=0)
    ds = env.parameters()
    assert isinstance(ds, xr.Dataset)
    assert ds["beta"].dims == ("arm", "instance", "feature")
    assert ds["shared_mean"].dims == ("arm", "feature")
    assert ds["Sigma"].dims == ("arm", "feature", "feature_")
    assert ds["noise_var"].dims == ("arm",)
    assert ds["arrival_probs"].dims == ("instance",)
    np.testing.assert_array_equal(ds["beta"].values, env.beta)
    assert ds.sizes == {"arm": 3, "instance": 4, "feature": 2, "feature_": 2}


def test_from_parameters_fixed():
    rng = np.random.default_rng(0)
    beta = rng.standard_normal((2, 3, 4))
    env = HierarchicalLinearEnv.from_parameters(beta, [0.5, 2.0], [0.2, 0.3, 0.5])
    np.testing.assert_array_equal(env.beta, beta)
    np.testing.assert_array_equal(env.noise_var, [0.5, 2.0])
    np.testing.assert_allclose(env.shared_mean, beta.mean(axis=1))
    assert env.Sigma.shape == (2, 4, 4)
    assert env.fixed_parameters and env.heterogeneity == "fixed"
    clone = env.clone(rng=3)
    np.testing.assert_array_equal(clone.beta, beta)
    roll = clone.rollout(10, rng=1)
    assert roll.context.shape == (10, 4)
    # noise_var 0 gives noiseless rewards; a scalar broadcasts over arms
    env0 = HierarchicalLinearEnv.from_parameters(beta, 0.0, [0.2, 0.3, 0.5], contexts="uniform")
    assert np.all(env0.rollout(20, rng=0).noise == 0.0)
    beta[0, 0, 0] = 99.0  # the environment holds a copy
    assert env.beta[0, 0, 0] != 99.0


def test_from_parameters_validation():
    beta = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match="beta"):
        HierarchicalLinearEnv.from_parameters(np.zeros((2, 3)), 1.0, np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="beta"):
        bad = beta.copy()
        bad[0, 0, 0] = np.nan
        HierarchicalLinearEnv.from_parameters(bad, 1.0, np.full(3, 1 / 3))
    with pytest.raises(TypeError, match="beta"):
        HierarchicalLinearEnv.from_parameters("beta", 1.0, np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="noise_var"):
        HierarchicalLinearEnv.from_parameters(beta, -1.0, np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="noise_var"):
        HierarchicalLinearEnv.from_parameters(beta, [1.0, 1.0, 1.0], np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="arrival_probs"):
        HierarchicalLinearEnv.from_parameters(beta, 1.0, [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="arrival_probs"):
        HierarchicalLinearEnv.from_parameters(beta, 1.0, [0.5, 0.5])
    with pytest.raises(ValueError, match="Sigma"):
        HierarchicalLinearEnv.from_parameters(
            beta, 1.0, np.full(3, 1 / 3), Sigma=-np.eye(4)[None].repeat(2, 0)
        )
    with pytest.raises(ValueError, match="contexts"):
        HierarchicalLinearEnv.from_parameters(
            beta, 1.0, np.full(3, 1 / 3), contexts=np.ones((5, 3))
        )


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"n_instances": 0}, ValueError, "n_instances"),
        ({"n_instances": 2.0}, TypeError, "n_instances"),
        ({"n_arms": -1}, ValueError, "n_arms"),
        ({"n_features": "3"}, TypeError, "n_features"),
        ({"arrival": "poor"}, ValueError, "arrival"),
        ({"arrival": [0.5, 0.5]}, ValueError, "arrival"),
        ({"arrival": [-0.1] + [1.1 / 9] * 9}, ValueError, "arrival"),
        ({"arrival": [np.nan] * 10}, ValueError, "arrival"),
        ({"heterogeneity": "laplace"}, ValueError, "heterogeneity"),
        ({"heterogeneity": "sparse", "sparsity": 4}, ValueError, "sparsity"),
        ({"sparsity": -1}, ValueError, "sparsity"),
        ({"sparsity": 1.5}, TypeError, "sparsity"),
        ({"contexts": "normal"}, ValueError, "contexts"),
        ({"contexts": None}, TypeError, "contexts"),
        ({"contexts": np.ones((4, 2))}, ValueError, "contexts"),
        ({"noise_sd": -1.0}, ValueError, "noise_sd"),
        ({"noise_sd": np.inf}, ValueError, "noise_sd"),
        ({"noise_sd": "1"}, TypeError, "noise_sd"),
        ({"noise_sd": [1.0, 2.0]}, ValueError, "noise_sd"),
        ({"poor_ratio": 0.0}, ValueError, "poor_ratio"),
        ({"poor_ratio": 2.0}, ValueError, "poor_ratio"),
        ({"n_poor": 0}, ValueError, "n_poor"),
        ({"arrival": "data-poor", "n_poor": 10}, ValueError, "n_poor"),
        ({"rng": "seed"}, TypeError, "rng"),
        ({"rng": -3}, ValueError, "rng"),
    ],
)
def test_invalid_arguments(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        HierarchicalLinearEnv(**kwargs)


def test_invalid_rollout_and_query_arguments():
    env = HierarchicalLinearEnv(rng=0)
    with pytest.raises(ValueError, match="horizon"):
        env.rollout(0, rng=1)
    with pytest.raises(TypeError, match="horizon"):
        env.rollout(10.0, rng=1)
    with pytest.raises(TypeError, match="rng"):
        env.rollout(10, rng="x")
    with pytest.raises(ValueError, match="instance"):
        env.expected_reward(10, np.zeros(3))
    with pytest.raises(ValueError, match="context"):
        env.expected_reward(0, np.zeros(2))
