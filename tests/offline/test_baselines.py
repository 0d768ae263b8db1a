"""The adapted baselines against brute-force references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

from hierbandit.offline.baselines import (
    ARMUL,
    CLUBOffline,
    DBSCANImprove,
    LinUCBIndOffline,
    SCLUBOffline,
    XMeansImprove,
    xmeans,
)
from hierbandit.offline.generate import cluster_thetas, generate_offline
from hierbandit.stats.partitions import adjusted_rand_index, same_partition
from tests.conftest import snapshot


@pytest.fixture(scope="module")
def easy():
    """Plentiful data: every baseline that clusters should find the truth."""
    theta, labels = cluster_thetas(40, 4, 5, rng=11)
    return generate_offline(theta, 40_000, labels=labels, noise_sd=0.05, rng=12)


def test_linucb_ind_is_per_user_ucb(easy):
    m = LinUCBIndOffline(rng=0).fit(easy)
    U, d, lam = easy.n_users, easy.n_features, 0.5
    rng = np.random.default_rng(0)
    for u in (0, 7, 39):
        X, y = easy.X[easy.users == u], easy.rewards[easy.users == u]
        M = lam * np.eye(d) + X.T @ X
        th = np.linalg.solve(M, X.T @ y)
        beta = math.sqrt(d * math.log(1 + len(y) / (lam * d)) + 2 * math.log(2 * U / 0.01))
        beta += math.sqrt(lam)
        A = rng.normal(size=(6, d))
        want = A @ th + beta * np.sqrt(np.einsum("sd,de,se->s", A, np.linalg.inv(M), A))
        np.testing.assert_allclose(m.scores(u, A), want, rtol=1e-10)
    assert m.graph().n_edges == 0


def test_club_components_equal_loop(easy):
    sub = easy.subset(slice(0, 3000))  # scarce data: a nontrivial graph
    m = CLUBOffline(rng=0).fit(sub)
    th = m.theta_hat_
    n = sub.counts
    F = np.sqrt((1 + np.log1p(n)) / (1 + n))
    U = sub.n_users
    adj = np.zeros((U, U), dtype=bool)
    for u in range(U):
        for v in range(U):
            adj[u, v] = u != v and np.linalg.norm(th[u] - th[v]) <= F[u] + F[v]
    _, comp = connected_components(adj, directed=False)
    assert same_partition(m.labels_, comp)
    # the decision pools the whole component: theta_ equals the ridge fit of its rows
    u = 0
    rows = np.isin(sub.users, np.flatnonzero(comp == comp[u]))
    X, y = sub.X[rows], sub.rewards[rows]
    want = np.linalg.solve(0.5 * np.eye(5) + X.T @ X, X.T @ y)
    np.testing.assert_allclose(m.theta_[u], want, rtol=1e-8)


@pytest.mark.parametrize(
    "make", [CLUBOffline, SCLUBOffline, DBSCANImprove, XMeansImprove], ids=lambda c: c.__name__
)
def test_clustering_baselines_recover_easy_clusters(easy, make):
    m = make(rng=0).fit(easy)
    assert adjusted_rand_index(m.labels_, easy.labels) == pytest.approx(1.0)
    g = m.graph()
    assert g.n_edges == 4 * (10 * 9 // 2)


def test_users_without_data_are_singletons(easy):
    sub = easy.subset(easy.users != 3)
    for make in (CLUBOffline, SCLUBOffline, DBSCANImprove, XMeansImprove):
        m = make(rng=0).fit(sub)
        assert np.sum(m.labels_ == m.labels_[3]) == 1, make.__name__


def test_sclub_frequency_test_splits_different_frequencies():
    theta = np.tile(np.eye(3)[0], (20, 1))  # one true cluster
    probs = np.r_[np.full(10, 0.09), np.full(10, 0.01)]
    ds = generate_offline(theta, 200_000, user_probs=probs, rng=0)
    with_f = SCLUBOffline(rng=0).fit(ds)
    without = SCLUBOffline(use_frequency=False, rng=0).fit(ds)
    assert without.n_clusters_ == 1
    assert with_f.n_clusters_ >= 2
    assert len(set(with_f.labels_[:10]) & set(with_f.labels_[10:])) == 0


def test_xmeans_picks_k():
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=5, size=(5, 3))
    X = np.vstack([c + rng.normal(scale=0.3, size=(40, 3)) for c in centres])
    labels, c = xmeans(X, 2, 20, rng=1)
    assert c.shape[0] == 5
    assert adjusted_rand_index(labels, np.repeat(np.arange(5), 40)) == pytest.approx(1.0)


def test_armul(easy):
    literal = ARMUL(step="literal", rng=0).fit(easy)
    ind = LinUCBIndOffline(rng=0).fit(easy)
    np.testing.assert_allclose(literal.theta_, ind.theta_, atol=1e-3)  # N_u/N weights: no move
    m = ARMUL(rng=0).fit(easy)
    assert m.c_ in m.c_grid and m.cv_error_.shape == (len(m.c_grid),)
    # shrinkage towards the common centre: every user moves towards the mean estimate
    bar = ind.theta_.mean(axis=0)
    assert np.mean(np.linalg.norm(m.theta_ - bar, axis=1)) < np.mean(
        np.linalg.norm(ind.theta_ - bar, axis=1)
    )
    before = snapshot(m)
    with pytest.raises(ValueError, match="actions"):
        m.decide(0, np.ones((2, 4)))
    assert snapshot(m) == before
    with pytest.raises(ValueError, match="step"):
        ARMUL(step="adam")


# ---------------------------------------------------------------------- mode="stream"
@pytest.mark.parametrize("make", [CLUBOffline, SCLUBOffline], ids=lambda c: c.__name__)
def test_stream_mode_is_the_online_algorithm_replayed_in_random_order(easy, make):
    """The labels of mode="stream" are those of the online policy fed the rows in the order the
    model's generator draws, with users without data as singletons."""
    from hierbandit.sclub import CLUB, SCLUB
    from hierbandit.stats.partitions import canonical_labels

    sub = easy.subset(np.flatnonzero((easy.users != 5) & (np.arange(easy.n_rows) < 6000)))
    m = make(mode="stream", rng=3).fit(sub)
    rng = np.random.default_rng(3)
    order = rng.permutation(sub.n_rows)
    if make is CLUBOffline:
        online = CLUB(sub.n_users, 5, graph="complete", reg=0.5, rng=rng)
    else:
        online = SCLUB(sub.n_users, 5, reg=0.5, rng=rng)
    for r in order:
        online.update(int(sub.users[r]), sub.X[r], float(sub.rewards[r]))
    want = online.clusters().values.copy()
    want[5] = want.max() + 1  # user 5 has no data
    assert same_partition(m.labels_, canonical_labels(want))
    assert np.sum(m.labels_ == m.labels_[5]) == 1
    # decisions pool the partition's statistics exactly as in batch mode
    c = m.labels_[0]
    rows = np.isin(sub.users, np.flatnonzero(m.labels_ == c))
    X, y = sub.X[rows], sub.rewards[rows]
    want_theta = np.linalg.solve(0.5 * np.eye(5) + X.T @ X, X.T @ y)
    np.testing.assert_allclose(m.theta_[0], want_theta, rtol=1e-8)


@pytest.mark.parametrize("make", [CLUBOffline, SCLUBOffline], ids=lambda c: c.__name__)
def test_stream_mode_recovers_easy_clusters(easy, make):
    m = make(mode="stream", rng=0).fit(easy)
    assert adjusted_rand_index(m.labels_, easy.labels) == pytest.approx(1.0)


def test_mode_is_validated():
    for make in (CLUBOffline, SCLUBOffline):
        with pytest.raises(ValueError, match="mode"):
            make(mode="online")
