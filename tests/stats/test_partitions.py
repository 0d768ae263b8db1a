import numpy as np
import pytest

from hierbandit.stats.partitions import (
    adjusted_rand_index,
    canonical_labels,
    coclustering_matrix,
    n_clusters,
    same_partition,
)


def test_canonical_labels_first_appearance():
    assert canonical_labels([5, 5, 2, 7, 2]).tolist() == [0, 0, 1, 2, 1]
    assert canonical_labels(np.array([], dtype=int)).tolist() == []


def test_same_partition_is_label_invariant():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=30)
    perm = rng.permutation(4) + 10
    assert same_partition(labels, perm[labels])
    other = labels.copy()
    other[0] = (other[0] + 1) % 4
    assert not same_partition(labels, other) or np.sum(labels == labels[0]) == 1
    assert n_clusters(perm[labels]) == np.unique(labels).size


def test_coclustering_matches_pairwise_loop():
    rng = np.random.default_rng(1)
    draws = rng.integers(0, 3, size=(20, 6))
    P = coclustering_matrix(draws)
    brute = np.zeros((6, 6))
    for d in draws:
        for i in range(6):
            for j in range(6):
                brute[i, j] += d[i] == d[j]
    np.testing.assert_allclose(P, brute / 20)
    # relabelling one draw changes nothing
    draws2 = draws.copy()
    draws2[0] = (draws2[0] + 1) % 3
    np.testing.assert_allclose(coclustering_matrix(draws2), P)


def test_ari_identical_and_errors():
    assert adjusted_rand_index([0, 0, 1, 1], [1, 1, 0, 0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same length"):
        adjusted_rand_index([0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="labels"):
        canonical_labels([[0, 1]])
    with pytest.raises(ValueError, match="integer"):
        canonical_labels([0.5, 1.0])
    with pytest.raises(TypeError, match="labels"):
        canonical_labels(["a", "b"])
