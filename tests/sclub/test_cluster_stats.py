"""Cluster statistics stay exact sums of user statistics (specs/clustering.md D1, C-25)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierbandit.sclub.cluster_stats import ClusterStats, confidence_F
from tests.conftest import snapshot


def _members_consistent(cs: ClusterStats) -> None:
    """Linked lists, labels, sizes and the free-slot stack describe the same partition."""
    live = np.flatnonzero(cs.size > 0)
    assert cs.n_clusters == live.size
    seen = np.zeros(cs.n_users, dtype=int)
    for c in live:
        members = cs.members(int(c))
        assert members.size == cs.size[c]
        assert np.all(cs.labels[members] == c)
        seen[members] += 1
    assert np.all(seen == 1)
    free = cs.free[: cs.meta[0]]
    assert set(free.tolist()).isdisjoint(live.tolist())
    assert free.size + live.size == cs.n_users


def _sums_exact(cs: ClusterStats) -> None:
    """Cluster sums equal member sums bit for bit (the data below are exact in binary)."""
    us = cs.users
    for c in np.flatnonzero(cs.size > 0):
        m = cs.labels == c
        np.testing.assert_array_equal(cs.G[c], us.G[m].sum(axis=0))
        np.testing.assert_array_equal(cs.b[c], us.b[m].sum(axis=0))
        assert cs.q[c] == us.q[m].sum()
        assert cs.n[c] == us.n[m].sum()


def _inverses_close(cs: ClusterStats) -> None:
    d = cs.n_features
    for c in np.flatnonzero(cs.size > 0):
        A = cs.reg * np.eye(d) + cs.G[c]
        np.testing.assert_allclose(cs.Ainv[c] @ A, np.eye(d), atol=1e-8)
        np.testing.assert_allclose(cs.theta[c], np.linalg.solve(A, cs.b[c]), atol=1e-8)


def test_confidence_F_reference_values():
    # specs/clustering.md §0.3
    ref = {0: 1.0, 10: 0.556, 100: 0.236, 1000: 0.089, 10_000: 0.032, 1_000_000: 0.0038}
    for T, v in ref.items():
        assert confidence_F(T) == pytest.approx(v, abs=6e-4)
    np.testing.assert_allclose(confidence_F(np.array([0, 10])), [1.0, confidence_F(10)])
    with pytest.raises(ValueError, match="non-negative"):
        confidence_F(-1)


# one random operation: (kind, user or cluster pick, a second pick, dyadic x, dyadic y)
_small = st.integers(-4, 4).map(lambda v: v / 2.0)
_op = st.tuples(
    st.sampled_from(["add", "add", "add", "split", "merge", "move", "recompute", "assign"]),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.lists(_small, min_size=3, max_size=3),
    _small,
)


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=40), n_users=st.integers(1, 7))
def test_sums_stay_exact_under_any_sequence(ops, n_users):
    cs = ClusterStats(n_users, 3, recompute_every=7)
    for kind, a, b, x, y in ops:
        live = cs.live()
        if kind == "add":
            cs.add(a % n_users, x, y)
        elif kind == "split":
            u = a % n_users
            if cs.size[cs.labels[u]] > 1:
                new = cs.split(u)
                assert cs.labels[u] == new and cs.size[new] == 1
                assert (
                    cs.order[new] > cs.order[live].max()
                )  # newer than every cluster (j' = max J + 1)
        elif kind == "merge" and live.size > 1:
            c1, c2 = live[a % live.size], live[b % live.size]
            if c1 != c2:
                size = cs.size[c1] + cs.size[c2]
                assert cs.merge(int(c1), int(c2)) == c1
                assert cs.size[c1] == size and cs.size[c2] == 0
        elif kind == "move":
            c = live[a % live.size]
            members = cs.members(int(c))
            if members.size > 1:
                k = 1 + b % (members.size - 1)
                new = cs.move(members[:k])
                assert np.all(cs.labels[members[:k]] == new)
        elif kind == "recompute":
            cs.recompute()
        elif kind == "assign":
            rng = np.random.default_rng(a)
            cs.assign(rng.integers(0, 1 + b % n_users, size=n_users))
        _members_consistent(cs)
        _sums_exact(cs)
    _inverses_close(cs)
    assert cs.discrepancy() == 0.0


def test_incremental_equals_batch(rng):
    """Sherman–Morrison cluster inverses match the exact inverse of the pooled Gram matrix."""
    U, d, T = 6, 4, 3000
    cs = ClusterStats(U, d, labels=[0, 0, 1, 1, 1, 2], recompute_every=None)
    users = rng.integers(U, size=T)
    X = rng.standard_normal((T, d))
    y = rng.standard_normal(T)
    for t in range(T):
        cs.add(int(users[t]), X[t], float(y[t]))
    for lab in range(3):
        c = cs.labels[np.flatnonzero(cs.partition() == lab)[0]]
        m = np.isin(users, np.flatnonzero(cs.labels == c))
        G = X[m].T @ X[m]
        np.testing.assert_allclose(cs.G[c], G, rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(cs.b[c], X[m].T @ y[m], rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(cs.Ainv[c], np.linalg.inv(np.eye(d) + G), atol=1e-10)
        assert cs.n[c] == m.sum()
    assert cs.discrepancy() < 1e-9


def test_periodic_recompute_resets_counter(rng):
    cs = ClusterStats(2, 2, recompute_every=5)
    for _ in range(4):
        cs.add(0, rng.standard_normal(2), 1.0)
    assert cs.since[0] == 4
    cs.add(1, rng.standard_normal(2), 1.0)
    assert cs.since[0] == 0  # the 5th update triggered the exact recompute


def test_split_merge_move_semantics():
    cs = ClusterStats(4, 2)
    cs.add(0, [1.0, 0.0], 1.0)
    cs.add(1, [0.0, 1.0], 2.0)
    cs.add(1, [1.0, 1.0], 0.5)
    c1 = cs.split(1)
    assert cs.n_clusters == 2 and cs.n[c1] == 2 and cs.n[cs.labels[0]] == 1
    np.testing.assert_array_equal(cs.G[c1], cs.users.G[1])
    c2 = cs.move([2, 3])
    assert sorted(cs.members(c2).tolist()) == [2, 3]
    assert cs.size[cs.labels[0]] == 1
    cs.merge(c2, c1)
    assert cs.n_clusters == 2 and cs.size[c2] == 3
    ds = cs.to_dataset()
    assert ds.sizes == {"user": 4, "cluster": 2, "feature": 2, "feature_": 2}
    assert ds["size"].values.sum() == 4 and ds["count"].values.sum() == 3
    assert ds["labels"].values.tolist() == [0, 1, 1, 1]


def test_initial_labels_and_assign():
    cs = ClusterStats(5, 2, labels=[7, 7, 3, 9, 3])
    assert cs.n_clusters == 3
    assert cs.partition().tolist() == [0, 0, 1, 2, 1]
    cs.assign(np.zeros(5, dtype=int))
    assert cs.n_clusters == 1 and cs.size[cs.labels[0]] == 5


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda cs: cs.add(5, [1.0, 0.0], 1.0), ValueError, "user must be in"),
        (lambda cs: cs.add(True, [1.0, 0.0], 1.0), TypeError, "user must be an integer"),
        (lambda cs: cs.add(0, [1.0, np.nan], 1.0), ValueError, "x must be finite"),
        (lambda cs: cs.add(0, [1.0, 0.0, 2.0], 1.0), ValueError, "x must have shape"),
        (lambda cs: cs.add(0, [1.0, 0.0], np.inf), ValueError, "y must be finite"),
        (lambda cs: cs.add(0, [1.0, 0.0], "1"), TypeError, "y must be a real"),
        (lambda cs: cs.split(4), ValueError, "alone in its cluster"),
        (lambda cs: cs.merge(0, 0), ValueError, "must differ"),
        (lambda cs: cs.merge(0, 3), ValueError, "not a live cluster"),
        (lambda cs: cs.merge(0, 9), ValueError, "cluster2 must be in"),
        (lambda cs: cs.move([0, 4]), ValueError, "same cluster"),
        (lambda cs: cs.move([0, 0]), ValueError, "distinct"),
        (lambda cs: cs.move([0, 1, 2, 3]), ValueError, "proper subset"),
        (lambda cs: cs.move([0.0]), TypeError, "integer ids"),
        (lambda cs: cs.move([]), ValueError, "non-empty"),
        (lambda cs: cs.move([7]), ValueError, r"users must be in"),
        (lambda cs: cs.assign([0, 1]), ValueError, "labels must have shape"),
        (lambda cs: cs.assign([0.5] * 5), TypeError, "integer labels"),
    ],
)
def test_bad_input_raises_and_changes_nothing(call, exc, match, rng):
    cs = ClusterStats(5, 2, labels=[0, 0, 0, 0, 1])
    for _ in range(10):
        cs.add(int(rng.integers(5)), rng.standard_normal(2), float(rng.standard_normal()))
    before = snapshot(cs)
    with pytest.raises(exc, match=match):
        call(cs)
    assert snapshot(cs) == before


def test_constructor_validation():
    with pytest.raises(ValueError, match="n_users"):
        ClusterStats(0, 2)
    with pytest.raises(ValueError, match="reg"):
        ClusterStats(2, 2, reg=0.0)
    with pytest.raises(ValueError, match="recompute_every"):
        ClusterStats(2, 2, recompute_every=0)
    with pytest.raises(ValueError, match="labels must have shape"):
        ClusterStats(2, 2, labels=[0, 0, 0])
