"""Offline datasets, generators, the test stream and the SubOpt metric."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierbandit.offline.dataset import OfflineDataset, read_offline
from hierbandit.offline.generate import (
    OfflineTestSet,
    cluster_thetas,
    generate_offline,
    make_problem,
    movielens_thetas,
    suboptimality,
    user_probabilities,
)


def test_dataset_validation_names_the_argument():
    X = np.eye(3)
    with pytest.raises(ValueError, match=r"rewards must be finite.*row 1"):
        OfflineDataset([0, 1, 2], X, [0.0, np.nan, 1.0])
    with pytest.raises(ValueError, match=r"X must be finite.*row 2"):
        OfflineDataset([0, 1, 2], np.r_[X[:2], [[np.inf, 0, 0]]], [0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="users must be in"):
        OfflineDataset([0, 1, 5], X, [0.0, 1.0, 1.0], n_users=3)
    with pytest.raises(TypeError, match="users"):
        OfflineDataset([0, 1.5, 2], X, [0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="rewards must have shape"):
        OfflineDataset([0, 1, 2], X, [0.0, 1.0])
    with pytest.raises(ValueError, match="features must name"):
        OfflineDataset([0, 1, 2], X, [0.0, 1.0, 1.0], features=["a", "b"])
    with pytest.raises(ValueError, match="theta must have shape"):
        OfflineDataset([0, 1, 2], X, [0.0, 1.0, 1.0], theta=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="X must have shape"):
        OfflineDataset([0, 1, 2], np.ones(3), [0.0, 1.0, 1.0])


@pytest.mark.filterwarnings("ignore:features not given:UserWarning")  # not what is tested
def test_dataset_suffstats_and_frame_roundtrip(tmp_path):
    rng = np.random.default_rng(0)
    users = rng.integers(0, 6, size=50)
    users[users == 4] = 5  # user 4 has no data
    X = rng.normal(size=(50, 3))
    y = rng.normal(size=50)
    ds = OfflineDataset(users, X, y, n_users=7)
    G, b, _q, n = ds.suffstats()
    for u in range(7):
        rows = users == u
        np.testing.assert_allclose(G[u], X[rows].T @ X[rows], atol=1e-12)
        np.testing.assert_allclose(b[u], X[rows].T @ y[rows], atol=1e-12)
        assert n[u] == rows.sum()
    assert ds.counts[4] == 0 and ds.counts[6] == 0
    df = ds.to_frame()
    assert list(df.columns) == ["user", "reward", "x0", "x1", "x2"]
    back = OfflineDataset.from_frame(df, n_users=7)
    np.testing.assert_array_equal(back.users, ds.users)
    np.testing.assert_array_equal(back.X, ds.X)
    # a user's own CSV with arbitrary ids: coded in sorted order, originals kept
    df2 = df.assign(user=df["user"] * 10 + 3)
    path = tmp_path / "log.csv"
    df2.to_csv(path, index=False)
    read = read_offline(path)
    assert read.n_users == len(np.unique(users))
    np.testing.assert_array_equal(read.user_ids[read.users], df2["user"].to_numpy())
    np.testing.assert_allclose(read.X, X)
    bad = df2.copy()
    bad.loc[3, "reward"] = np.nan
    with pytest.raises(ValueError, match="reward"):
        read_offline(bad)
    with pytest.raises(ValueError, match="user"):
        read_offline(df2, user="customer")
    tr, te = ds.split(0.5)
    assert tr.n_rows == 25 and te.n_rows == 25 and tr.n_users == 7
    assert ds.to_xarray().sizes["row"] == 50


def test_cluster_thetas_and_gap():
    theta, labels = cluster_thetas(100, 10, 20, rng=1)
    np.testing.assert_allclose(np.linalg.norm(theta, axis=1), 1.0)
    assert np.bincount(labels).tolist() == [10] * 10
    assert np.unique(theta, axis=0).shape[0] == 10
    ds = generate_offline(theta, 500, labels=labels, rng=2)
    c = np.unique(theta, axis=0)
    D = np.linalg.norm(c[:, None] - c[None], axis=-1)
    assert ds.gap == pytest.approx(D[D > 0].min())


def test_user_probabilities():
    labels = np.repeat(np.arange(4), [5, 10, 5, 20])
    eq = user_probabilities(labels, "equal")
    np.testing.assert_allclose(eq, 1 / 40)
    semi = user_probabilities(labels, "semi-random", rng=0)
    assert semi.sum() == pytest.approx(1.0)
    for j in range(4):  # uniform within a cluster
        assert np.ptp(semi[labels == j]) == pytest.approx(0.0)
    rnd = user_probabilities(labels, "random", rng=0)
    assert rnd.sum() == pytest.approx(1.0) and np.ptp(rnd) > 0
    with pytest.raises(ValueError, match="distribution"):
        user_probabilities(labels, "zipf")


def test_random_logging_rewards_and_shapes():
    theta, labels = cluster_thetas(30, 3, 6, rng=0)
    ds = generate_offline(theta, 20_000, labels=labels, noise_sd=0.05, rng=1)
    np.testing.assert_allclose(np.linalg.norm(ds.X, axis=1), 1.0)
    resid = ds.rewards - np.einsum("nd,nd->n", ds.X, theta[ds.users])
    assert resid.std() == pytest.approx(0.05, rel=0.05)
    # the logged action is one draw from rho: isotropic second moment 1/d
    np.testing.assert_allclose(ds.X.T @ ds.X / ds.n_rows, np.eye(6) / 6, atol=0.01)


def test_linucb_logging_true_theta_picks_the_argmax_with_zero_alpha():
    theta, labels = cluster_thetas(5, 1, 4, rng=0)
    ds = generate_offline(
        theta, 300, labels=labels, logging="linucb", logging_alpha=0.0,
        logging_uses_true_theta=True, noise_sd=0.0, n_candidates=20, rng=1,
    )  # fmt: skip
    # with alpha = 0 and the true theta, each logged action is the best of 20 candidates:
    # its reward is far above that of a random unit action (mean 0, sd 1/2)
    assert ds.rewards.mean() > 0.8
    est = generate_offline(theta, 3000, labels=labels, logging="linucb", rng=1)
    rnd = generate_offline(theta, 3000, labels=labels, logging="random", rng=1)
    assert est.rewards.mean() > rnd.rewards.mean() + 0.3  # LinUCB learns to pick good items


def test_test_set_is_repeatable_and_suboptimality():
    theta, labels = cluster_thetas(20, 2, 3, rng=0)
    train, test = make_problem(theta, labels, 4000, n_test=1500, rng=5)
    assert train.n_rows == 2000 and test.n_test == 1500
    a = [(u.copy(), A.copy()) for u, A in test.chunks()]
    b = list(test.chunks())
    for (u1, A1), (u2, A2) in zip(a, b, strict=True):
        np.testing.assert_array_equal(u1, u2)
        np.testing.assert_array_equal(A1, A2)
    small = OfflineTestSet(theta, np.full(20, 0.05), 1500, 20, seed=test.seed, chunk_size=400)
    assert sum(u.size for u, _ in small.chunks()) == 1500
    u, A = a[0]
    chosen = np.zeros(u.size, dtype=np.int64)
    so = suboptimality(theta[u], A, chosen)
    brute = [max(theta[u[i]] @ A[i, s] for s in range(20)) - theta[u[i]] @ A[i, 0]
             for i in range(20)]  # fmt: skip
    np.testing.assert_allclose(so[:20], brute)
    assert np.all(so >= 0)
    with pytest.raises(ValueError, match="chosen"):
        suboptimality(theta[u], A, chosen + 20)


def test_movielens_thetas():
    theta, labels, ids = movielens_thetas(80, 8, n_movies=200, n_clusters=4, rng=0)
    assert theta.shape == (80, 8) and labels.shape == (80,) and ids.shape == (80,)
    np.testing.assert_allclose(np.linalg.norm(theta, axis=1), 1.0)
    assert set(np.unique(labels)) == {0, 1, 2, 3}
    sc, _, _ = movielens_thetas(80, 8, n_movies=200, theta_transform="sclub", rng=0)
    np.testing.assert_allclose(sc[:, -1], 2**-0.5)
    snap, _lab2, _ = movielens_thetas(80, 8, n_movies=200, n_clusters=4, snap_to_centroids=True,
                                     rng=0)  # fmt: skip
    assert np.unique(snap, axis=0).shape[0] == 4
    df = pd.DataFrame({"x": [1]})
    assert len(df) == 1
