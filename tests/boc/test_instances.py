"""Cluster bandit instances: presets, real-data construction, common random numbers, validation."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.boc.instances import (
    ClusterBandit,
    class_mean_instance,
    digits_instance,
    iris_instance,
    synthetic_instance,
)


@pytest.mark.parametrize(
    ("kind", "D", "x"), [("easy", 0.632727, 5.0), ("moderate", 12.140468, 1.0),
                         ("challenging", 48.140117, 0.5)]
)  # fmt: skip
def test_synthetic_presets(kind, D, x):
    inst = synthetic_instance(kind)
    assert (inst.n_arms, inst.n_clusters, inst.n_features) == (11, 4, 3)
    assert inst.cluster_sizes.tolist() == [2, 4, 3, 2]
    np.testing.assert_array_equal(inst.centres[3], [x, 0, 0])
    assert inst.hardness == pytest.approx(D, abs=1e-6)
    np.testing.assert_array_equal(inst.arm_means, inst.centres[inst.labels])


def test_rescaled_challenging_instance():
    inst = synthetic_instance("challenging", target_hardness=2.0)
    assert inst.hardness == pytest.approx(2.0, rel=1e-9)
    assert inst.separation_ratio == pytest.approx(0.5 / np.sqrt(200), rel=1e-12)
    base = synthetic_instance("challenging")
    np.testing.assert_allclose(inst.centres, base.centres * np.sqrt(base.hardness / 2.0))


def test_iris_is_built_as_in_section_6_2():
    from sklearn.datasets import load_iris

    raw = iris_instance(target_hardness=None)
    assert raw.hardness == pytest.approx(87.4493, abs=1e-3)
    inst = iris_instance()
    assert (inst.n_arms, inst.n_clusters, inst.n_features) == (150, 3, 4)
    assert inst.hardness == pytest.approx(2.0, rel=1e-9)
    np.testing.assert_allclose(inst.centres / raw.centres, 6.6125, rtol=1e-4)
    data = load_iris()
    np.testing.assert_allclose(raw.centres[0], data.data[data.target == 0].mean(0))
    assert inst.separation_ratio == pytest.approx(0.3408, abs=1e-4)


def test_digits_stand_in():
    inst = digits_instance(n_features=5, n_arms=300, seed=1)
    assert (inst.n_arms, inst.n_clusters, inst.n_features) == (300, 10, 5)
    assert inst.hardness == pytest.approx(2.0, rel=1e-9)
    again = digits_instance(n_features=5, n_arms=300, seed=1)
    np.testing.assert_array_equal(inst.centres, again.centres)
    with pytest.raises(ValueError, match="n_features"):
        digits_instance(n_features=65)
    with pytest.raises(ValueError, match="n_arms"):
        digits_instance(n_arms=5000)


def test_class_mean_instance():
    X = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [12.0, 10.0], [4.0, 4.0]])
    y = np.array(["a", "a", "b", "b", "a"])
    inst = class_mean_instance(X, y, target_hardness=None)
    np.testing.assert_allclose(inst.centres, [[2.0, 4 / 3], [11.0, 10.0]])
    assert inst.labels.tolist() == [0, 0, 1, 1, 0]
    assert class_mean_instance(X, y, target_hardness=3.0).hardness == pytest.approx(3.0)
    with pytest.raises(ValueError, match="classes"):
        class_mean_instance(X, y[:3])


def test_common_random_numbers():
    inst = synthetic_instance("easy")
    s1, s2 = inst.sampler(42), inst.sampler(42)
    order1 = [0, 0, 0, 5, 5, 0, 3] + [1] * 600
    order2 = [1] * 600 + [5, 3, 0, 0, 5, 0, 0]
    got1: dict = {}
    got2: dict = {}
    for order, s, got in ((order1, s1, got1), (order2, s2, got2)):
        for a in order:
            got.setdefault(a, []).append(s.pull(a))
    for a in got1:
        np.testing.assert_array_equal(np.array(got1[a]), np.array(got2[a]))
    # the j-th pull of arm m is mean + noise(m, j)
    np.testing.assert_array_equal(got1[1][599], inst.arm_means[1] + s1.noise(1, 599))
    np.testing.assert_array_equal(got1[0][2], inst.arm_means[0] + s1.noise(0, 2))
    assert s1.counts[1] == 600
    other = inst.sampler(43)
    assert not np.array_equal(other.pull(0), inst.sampler(42).pull(0))
    # SeedSequence and Generator seeds are accepted and reproducible
    ss = np.random.SeedSequence(7, spawn_key=(3,))
    np.testing.assert_array_equal(inst.sampler(ss).pull(2), inst.sampler(ss).pull(2))
    np.testing.assert_array_equal(
        inst.sampler(np.random.default_rng(1)).pull(2),
        inst.sampler(np.random.default_rng(1)).pull(2),
    )


def test_noise_is_standard_normal():
    inst = synthetic_instance("easy")
    s = inst.sampler(0)
    x = np.array([s.pull(4) for _ in range(4000)]) - inst.arm_means[4]
    assert np.abs(x.mean(0)).max() < 0.06
    np.testing.assert_allclose(np.cov(x.T), np.eye(3), atol=0.08)


@pytest.mark.parametrize(
    ("labels", "centres", "err", "match"),
    [
        ([0, 1, 2], [[0.0], [1.0], [2.0]], ValueError, "K < M"),
        ([0, 1, 1, 3], [[0.0], [1.0], [2.0], [3.0]], ValueError, "non-empty"),
        ([0, 0, 1], [[1.0], [1.0]], ValueError, "distinct"),
        ([0, 0, 1], [[0.0], [np.inf]], ValueError, "finite"),
        ([[0, 0, 1]], [[0.0], [1.0]], ValueError, "1-d"),
        ([0, 0, 1], [0.0, 1.0], ValueError, "shape"),
    ],
)
def test_bad_instances_raise(labels, centres, err, match):
    with pytest.raises(err, match=match):
        ClusterBandit(labels, centres)


def test_instance_is_immutable_and_exports_xarray():
    inst = synthetic_instance("moderate")
    with pytest.raises(ValueError):
        inst.centres[0, 0] = 3.0
    ds = inst.to_xarray()
    assert ds.lam_star.dims == ("arm",)
    assert ds.attrs["hardness"] == pytest.approx(12.140468, abs=1e-6)
    with pytest.raises(ValueError, match="kind"):
        synthetic_instance("hard")
    with pytest.raises(ValueError, match="target_hardness"):
        inst.rescaled(0.0)
