"""Environments of the online clustering experiments (SCLUB §5)."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.sclub.env import (
    ClusteredLinearEnv,
    MovieLensEnv,
    frequency_vector,
    movielens_user_vectors,
    paper_vectors,
    transform_eq3,
)


def test_transform_eq3_gives_unit_vectors_and_means_in_unit_interval(rng):
    v = rng.standard_normal((500, 19))
    x = transform_eq3(v)
    assert x.shape == (500, 20)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0)
    np.testing.assert_allclose(x[:, -1], 1 / np.sqrt(2))
    np.testing.assert_allclose(x[:, :-1] * np.sqrt(2) * np.linalg.norm(v, axis=1)[:, None], v)
    th = paper_vectors(50, 20, rng)
    means = x @ th.T
    assert means.min() >= -1e-12 and means.max() <= 1 + 1e-12
    with pytest.raises(ValueError, match="nonzero"):
        transform_eq3(np.zeros((2, 3)))


def test_item_covariance_min_eigenvalue_is_lambda_x(rng):
    x = paper_vectors(200_000, 6, rng)
    lam = np.linalg.eigvalsh(x.T @ x / x.shape[0]).min()
    env = ClusteredLinearEnv(10, 2, 6, rng=0)
    assert lam == pytest.approx(env.lambda_x, rel=0.05)  # 1 / (2 (d − 1))


def test_synthetic_env_structure():
    env = ClusteredLinearEnv(103, 10, 20, 20, frequency="uniform", rng=0)
    assert np.all(np.diff(env.labels) >= 0)  # contiguous blocks
    sizes = np.bincount(env.labels)
    assert sizes.size == 10 and sizes.max() - sizes.min() <= 1
    np.testing.assert_array_equal(env.theta, env.cluster_theta[env.labels])
    np.testing.assert_allclose(env.p, 1 / 103)
    assert 0 < env.gap < 2
    again = ClusteredLinearEnv(103, 10, 20, 20, rng=0)
    np.testing.assert_array_equal(again.theta, env.theta)
    other = env.clone(rng=1)
    assert not np.allclose(other.theta, env.theta)
    assert other.get_params()["n_users"] == 103


def test_frequency_settings(rng):
    labels = np.repeat(np.arange(4), 5)
    half = frequency_vector("half", 20, labels, rng)
    assert half.sum() == pytest.approx(1.0)
    for k in range(4):  # (1b): users of a cluster are equally frequent
        assert np.ptp(half[labels == k]) == 0
    arb = frequency_vector("arbitrary", 20, labels, rng)
    assert arb.sum() == pytest.approx(1.0) and np.unique(arb).size == 20
    np.testing.assert_allclose(frequency_vector("uniform", 4), 0.25)
    np.testing.assert_allclose(frequency_vector([0.5, 0.5], 2), [0.5, 0.5])
    with pytest.raises(ValueError, match="sum to 1"):
        frequency_vector([0.5, 0.6], 2)
    with pytest.raises(ValueError, match="non-negative"):
        frequency_vector([1.5, -0.5], 2)
    with pytest.raises(ValueError, match="frequency must be one of"):
        frequency_vector("zipf", 2)
    with pytest.raises(ValueError, match="labels"):
        frequency_vector("half", 2)


def test_rollout_is_chunk_invariant_and_seeded():
    env = ClusteredLinearEnv(30, 3, 5, 7, frequency="arbitrary", reward="gaussian", rng=0)
    whole = env.rollout(1000, rng=4)
    parts = list(env.rollout_chunks(1000, rng=4, chunk_size=137))
    for f in whole._fields:
        np.testing.assert_array_equal(
            getattr(whole, f), np.concatenate([getattr(p, f) for p in parts])
        )
    np.testing.assert_array_equal(env.rollout(1000, rng=4).items, whole.items)
    assert not np.array_equal(env.rollout(1000, rng=5).users, whole.users)
    np.testing.assert_allclose(
        whole.means, np.einsum("tld,td->tl", whole.items, env.theta[whole.users])
    )
    assert whole.optimal_item.shape == (1000,)
    np.testing.assert_array_equal(whole.best_mean, whole.means.max(axis=1))


def test_arrivals_follow_the_frequencies():
    env = ClusteredLinearEnv(5, 5, 3, 2, frequency=[0.5, 0.2, 0.2, 0.05, 0.05], rng=0)
    users = env.rollout(40_000, rng=1).users
    freq = np.bincount(users, minlength=5) / users.size
    np.testing.assert_allclose(freq, env.p, atol=0.01)


def test_reward_models():
    env = ClusteredLinearEnv(10, 2, 4, 3, rng=0)
    roll = env.rollout(20_000, rng=1)
    assert np.all((roll.noise >= 0) & (roll.noise < 1))
    y = env.realised_reward(roll.means[:, 0], roll.noise)
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert y.mean() == pytest.approx(roll.means[:, 0].mean(), abs=0.01)
    g = ClusteredLinearEnv(10, 2, 4, 3, reward="gaussian", noise_sd=0.2, rng=0)
    r = g.rollout(20_000, rng=1)
    assert r.noise.std() == pytest.approx(0.2, rel=0.05)
    np.testing.assert_array_equal(
        g.realised_reward(r.means[:, 1], r.noise), r.means[:, 1] + r.noise
    )
    assert env.noise_scale == 0.5 and g.noise_scale == 0.2


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n_users": 0}, ValueError, "n_users"),
        ({"n_clusters": 20, "n_users": 10}, ValueError, "n_clusters must be <="),
        ({"n_features": 1}, ValueError, "n_features"),
        ({"n_items": 0}, ValueError, "n_items"),
        ({"frequency": "zipf"}, ValueError, "frequency"),
        ({"frequency": [1.0]}, ValueError, "frequency must have shape"),
        ({"reward": "poisson"}, ValueError, "reward"),
        ({"noise_sd": -1.0}, ValueError, "noise_sd"),
    ],
)
def test_env_validation(kwargs, exc, match):
    params = {"n_users": 10, "n_clusters": 2, "n_features": 3, "n_items": 4, **kwargs}
    with pytest.raises(exc, match=match):
        ClusteredLinearEnv(**params)


def test_rollout_validation():
    env = ClusteredLinearEnv(10, 2, 3, 4, rng=0)
    with pytest.raises(ValueError, match="horizon"):
        env.rollout(0)
    with pytest.raises(ValueError, match="chunk_size"):
        next(env.rollout_chunks(10, chunk_size=0))


def test_movielens_user_vectors_follow_the_preprocessing():
    from hierbandit.data.movielens import rating_matrix

    theta, ids = movielens_user_vectors(60, 200, 8)
    assert theta.shape == (60, 8) and ids.size == 60 and np.unique(ids).size == 60
    np.testing.assert_allclose(np.linalg.norm(theta, axis=1), 1.0)
    np.testing.assert_allclose(theta[:, -1], 1 / np.sqrt(2))
    # independent recomputation of the recipe
    R, users, movies = rating_matrix(binary=True)
    pool = np.lexsort((users, -R.sum(1)))[:180]
    sub = R[pool]
    cols = np.lexsort((movies, -sub.sum(0)))[:200]
    sub = sub[:, cols]
    keep = np.lexsort((users[pool], -sub.sum(1)))[:60]
    np.testing.assert_array_equal(ids, users[pool][keep])
    U, _, _ = np.linalg.svd(sub[keep], full_matrices=False)
    raw = U[:, :7] / np.linalg.norm(U[:, :7], axis=1, keepdims=True)
    np.testing.assert_allclose(np.abs(theta[:, :-1] * np.sqrt(2)), np.abs(raw), atol=1e-10)
    with pytest.raises(ValueError, match="n_users must be <="):
        movielens_user_vectors(10_000)


def test_movielens_env():
    env = MovieLensEnv(40, 100, 6, 5, frequency="arbitrary", rng=0)
    assert env.labels is None and env.p.sum() == pytest.approx(1.0)
    roll = env.rollout(50, rng=0)
    assert roll.items.shape == (50, 5, 6)
    snapped = MovieLensEnv(40, 100, 6, 5, n_clusters=4, rng=0)
    assert np.unique(snapped.labels).size == 4
    assert np.unique(snapped.theta.round(12), axis=0).shape[0] == 4
    np.testing.assert_allclose(np.linalg.norm(snapped.theta, axis=1), 1.0)
    assert snapped.clone(rng=3).n_clusters == 4
    with pytest.raises(ValueError, match="frequency"):
        MovieLensEnv(40, 100, 6, 5, frequency="half")
