"""K-means Maximin (Algorithm 2) on hand cases and against a plain-Python reference."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.boc.kmeans import kmeans_maximin


def reference_kmeans(mu, w, K, first=0, max_iter=1000):
    """Algorithm 2 written out literally (slow, obviously correct)."""
    mu = np.asarray(mu, float)
    centres = [mu[first].copy()]
    for _ in range(1, K):
        dist = [min(float(((m - c) ** 2).sum()) for c in centres) for m in mu]
        best = max(range(len(mu)), key=lambda i: (dist[i], -i))  # largest, smallest index
        centres.append(mu[best].copy())
    centres = np.array(centres)
    labels = None
    for _ in range(max_iter + 1):
        new = np.array(
            [min(range(K), key=lambda k: (float(((m - centres[k]) ** 2).sum()), k)) for m in mu]
        )
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        for k in range(K):
            sel = labels == k
            if w[sel].sum() > 0:
                centres[k] = (w[sel, None] * mu[sel]).sum(0) / w[sel].sum()
    return labels, centres


def test_two_obvious_clusters():
    res = kmeans_maximin([[0.0], [0.1], [5.0], [5.2]], [1, 1, 1, 1], 2)
    assert res.labels.tolist() == [0, 0, 1, 1]
    np.testing.assert_allclose(res.centres.ravel(), [0.05, 5.1])
    assert res.converged


def test_maximin_seeds_are_farthest_points():
    # seeds: arm 0 (x=0), then farthest = arm 3 (x=10), then farthest from both = arm 1 (x=4)
    mu = [[0.0], [4.0], [6.5], [10.0]]
    res = kmeans_maximin(mu, [1, 1, 1, 1], 3, max_iter=1)
    assert res.labels.tolist() == [0, 2, 2, 1]


def test_weights_move_the_centres():
    res = kmeans_maximin([[0.0], [1.0], [10.0]], [3, 1, 1], 2)
    assert res.labels.tolist() == [0, 0, 1]
    np.testing.assert_allclose(res.centres[0], [0.25])


def test_ties_go_to_the_smallest_index():
    # arm 1 is equidistant from the seeds 0 and 2: it joins cluster 0
    res = kmeans_maximin([[0.0], [1.0], [2.0]], [1, 1, 1], 2, max_iter=1)
    assert res.labels.tolist() == [0, 0, 1]
    # farthest-point tie between arms 1 and 2 (both at distance 1 of arm 0): arm 1 is the seed
    res = kmeans_maximin([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [1, 1, 1], 2, max_iter=1)
    assert res.labels.tolist()[1] == 1


def test_empty_cluster_keeps_its_centre():
    # three identical points and K = 2: the second seed duplicates the first; its cluster is empty
    res = kmeans_maximin([[1.0], [1.0], [1.0]], [1, 2, 3], 2)
    assert res.labels.tolist() == [0, 0, 0]
    np.testing.assert_allclose(res.centres, [[1.0], [1.0]])


def test_first_seed_options():
    mu = np.array([[0.0], [0.2], [5.0], [5.1], [9.0]])
    w = np.array([1.0, 1.0, 1.0, 5.0, 1.0])
    a = kmeans_maximin(mu, w, 2, first="first")
    b = kmeans_maximin(mu, w, 2, first="heaviest")
    c = kmeans_maximin(mu, w, 2, first=3)
    np.testing.assert_array_equal(b.labels, c.labels)
    assert a.labels.shape == (5,)
    r1 = kmeans_maximin(mu, w, 2, first="random", rng=1)
    r2 = kmeans_maximin(mu, w, 2, first="random", rng=1)
    np.testing.assert_array_equal(r1.labels, r2.labels)


def test_matches_the_reference_on_random_inputs():
    rng = np.random.default_rng(0)
    for _ in range(60):
        M, K, d = int(rng.integers(3, 30)), int(rng.integers(2, 6)), int(rng.integers(1, 5))
        K = min(K, M)
        mu = rng.normal(size=(M, d)) * rng.uniform(0.5, 3)
        w = rng.integers(1, 20, size=M).astype(float)
        first = int(rng.integers(M))
        res = kmeans_maximin(mu, w, K, first=first)
        lab, cen = reference_kmeans(mu, w, K, first=first)
        np.testing.assert_array_equal(res.labels, lab)
        np.testing.assert_allclose(res.centres, cen, rtol=1e-12, atol=1e-12)


def test_prop10_recovery_when_noise_is_below_a_quarter_of_the_separation():
    rng = np.random.default_rng(4)
    c = np.array([0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3])
    U = np.array([[0, 0, 0], [0, 10, 0], [0, 0, 10], [5, 0, 0]], dtype=float)
    sep = 5.0
    for _ in range(200):
        noise = rng.normal(size=(11, 3))
        noise *= (rng.uniform(0, 0.999) * sep / 4) / np.linalg.norm(noise, axis=1).max()
        mu = U[c] + noise
        res = kmeans_maximin(mu, rng.integers(1, 50, 11).astype(float), 4)
        from hierbandit.stats.partitions import same_partition

        assert same_partition(res.labels, c)
        # centre error <= max arm error (eq. 24)
        order = [res.labels[np.flatnonzero(c == k)[0]] for k in range(4)]
        err = np.linalg.norm(res.centres[order] - U, axis=1).max()
        assert err <= np.linalg.norm(noise, axis=1).max() + 1e-12
        assert res.n_iter <= 1


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"means": [[0.0], [np.nan]], "weights": [1, 1], "n_clusters": 1}, ValueError, "finite"),
        ({"means": [[0.0], [1.0]], "weights": [1, 1], "n_clusters": 3}, ValueError, "exceed"),
        ({"means": [[0.0], [1.0]], "weights": [1, -1], "n_clusters": 1}, ValueError, "negative"),
        ({"means": [[0.0], [1.0]], "weights": [1], "n_clusters": 1}, ValueError, "shape"),
        ({"means": [[0.0], [1.0]], "weights": [1, 1], "n_clusters": 0}, ValueError, ">= 1"),
        ({"means": [0.0, 1.0], "weights": [1, 1], "n_clusters": 1}, ValueError, "shape"),
    ],
)
def test_bad_input(kwargs, err, match):
    with pytest.raises(err, match=match):
        kmeans_maximin(**kwargs)
    with pytest.raises(ValueError, match="first"):
        kmeans_maximin([[0.0], [1.0]], [1, 1], 1, first="middle")
