"""The lower-bound solver (Props. 5, 7, 8) against the definition by brute-force enumeration."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierbandit.boc.lower_bound import (
    admissible_pairs,
    brute_force_hardness,
    brute_force_inner,
    hardness,
    inner_value,
    lower_bound,
    optimal_allocation,
)
from hierbandit.boc.thresholds import kl_bernoulli_delta

SYN_LABELS = np.array([0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3])


def _syn(x: float) -> np.ndarray:
    return np.array([[0, 0, 0], [0, 10, 0], [0, 0, 10], [x, 0, 0]], dtype=float)


def _random_instance(rng, max_m=5, max_k=3):
    M = int(rng.integers(3, max_m + 1))
    K = int(rng.integers(2, min(max_k, M - 1) + 1))
    while True:
        c = rng.integers(0, K, M)
        if np.unique(c).size == K:
            break
    d = int(rng.integers(1, 3))
    U = rng.normal(size=(K, d)) * rng.uniform(0.5, 5)
    return c, U


@pytest.mark.parametrize(
    ("x", "D", "w"),
    [
        (5.0, 0.632727, (11 / 29, 4 / 29, 3 / 29, 11 / 29)),
        (1.0, 12.140468, (0.49421, 0.00661, 0.00496, 0.49421)),
        (0.5, 48.140117, (0.49854, 0.00166, 0.00125, 0.49854)),
    ],
)
def test_reference_values_of_the_synthetic_instances(x, D, w):
    lb = optimal_allocation(SYN_LABELS, _syn(x))
    assert lb.hardness == pytest.approx(D, abs=1e-6)
    np.testing.assert_allclose(lb.w, w, atol=1e-5)
    np.testing.assert_allclose(lb.lam, lb.w[SYN_LABELS] / np.bincount(SYN_LABELS)[SYN_LABELS])
    assert lb.lam.sum() == pytest.approx(1.0)


def test_iris_raw_hardness():
    from sklearn.datasets import load_iris

    data = load_iris()
    U = np.stack([data.data[data.target == k].mean(0) for k in range(3)])
    lb = optimal_allocation(data.target, U)
    assert lb.hardness == pytest.approx(87.4493, abs=1e-3)
    np.testing.assert_allclose(lb.w, (0.1117, 0.4442, 0.4442), atol=1e-4)


def test_solver_matches_brute_force_on_tiny_instances():
    rng = np.random.default_rng(11)
    n_singleton_cases = 0
    for _ in range(25):
        c, U = _random_instance(rng)
        bf = brute_force_hardness(c, U)
        assert bf.info["gap"] < 1e-8
        for solver in ("barrier", "slsqp"):
            lb = optimal_allocation(c, U, solver=solver)
            assert lb.hardness == pytest.approx(bf.hardness, rel=1e-7)
            np.testing.assert_allclose(lb.lam, bf.lam, atol=1e-6)
        n_singleton_cases += int((np.bincount(c) == 1).sum() >= 2)
    assert n_singleton_cases >= 3  # the correction was exercised


def test_paper_pair_set_is_exact_with_at_most_one_singleton_and_wrong_otherwise():
    rng = np.random.default_rng(5)
    seen_wrong = 0
    for _ in range(40):
        c, U = _random_instance(rng, max_m=5, max_k=3)
        lam = rng.dirichlet(np.ones(c.size))
        truth = brute_force_inner(c, U, lam)[0]
        paper = inner_value(c, U, lam, alt_pairs="paper")
        corrected = inner_value(c, U, lam)
        assert corrected == pytest.approx(truth, rel=1e-9, abs=1e-12)
        assert corrected <= paper + 1e-12
        if (np.bincount(c) == 1).sum() <= 1:
            assert paper == pytest.approx(truth, rel=1e-9, abs=1e-12)
        elif paper > truth * (1 + 1e-6):
            seen_wrong += 1
    assert seen_wrong >= 1


def test_inner_value_on_larger_instances_against_enumeration():
    rng = np.random.default_rng(9)
    for _ in range(6):
        c, U = _random_instance(rng, max_m=7, max_k=4)
        lam = rng.dirichlet(np.ones(c.size))
        assert inner_value(c, U, lam) == pytest.approx(brute_force_inner(c, U, lam)[0], rel=1e-9)


def test_singleton_counterexample():
    c = np.array([0, 0, 1, 2])
    U = np.array([[0.0], [10.0], [10.5]])
    lam = np.full(4, 0.25)
    assert inner_value(c, U, lam, alt_pairs="paper") == pytest.approx(12.5)
    assert inner_value(c, U, lam) == pytest.approx(0.03125)
    val, alt = brute_force_inner(c, U, lam)
    assert val == pytest.approx(0.03125)
    assert alt[2] == alt[3] and alt[0] != alt[1]  # arms 3, 4 merged, arms 1, 2 split
    assert hardness(c, U, alt_pairs="paper") == pytest.approx(0.153, abs=1e-3)
    lb = optimal_allocation(c, U)
    assert lb.hardness == pytest.approx(32.04, abs=1e-2)
    np.testing.assert_allclose(lb.lam, (0.000625, 0.000625, 0.4994, 0.4994), atol=2e-4)
    assert brute_force_hardness(c, U).hardness == pytest.approx(lb.hardness, rel=1e-8)


def test_certificates_of_the_optimum():
    rng = np.random.default_rng(3)
    for x in (5.0, 1.0, 0.5):
        lb = optimal_allocation(SYN_LABELS, _syn(x))
        assert lb.max_value() == pytest.approx(lb.hardness, rel=1e-9)
        g = inner_value(SYN_LABELS, _syn(x), lb.lam)
        assert g == pytest.approx(2.0 / lb.hardness, rel=1e-8)
        for _ in range(300):
            pert = np.clip(lb.lam + rng.normal(scale=1e-3, size=lb.lam.size), 1e-9, None)
            pert /= pert.sum()
            assert inner_value(SYN_LABELS, _syn(x), pert) <= g * (1 + 1e-9)


def test_invariances():
    rng = np.random.default_rng(2)
    c, U = SYN_LABELS, _syn(1.0)
    base = optimal_allocation(c, U)
    perm = np.array([2, 0, 3, 1])  # relabel cluster k as perm[k]
    U_perm = np.empty_like(U)
    U_perm[perm] = U
    lb = optimal_allocation(perm[c], U_perm)
    assert lb.hardness == pytest.approx(base.hardness, rel=1e-9)
    np.testing.assert_allclose(lb.lam, base.lam, atol=1e-9)
    lb = optimal_allocation(c, U + rng.normal(size=3))
    assert lb.hardness == pytest.approx(base.hardness, rel=1e-9)
    lb = optimal_allocation(c, 3.0 * U)
    assert lb.hardness == pytest.approx(base.hardness / 9.0, rel=1e-9)
    np.testing.assert_allclose(lb.lam, base.lam, atol=1e-9)


def test_lower_bound_uses_log_inv_delta_without_underflow():
    c, U = SYN_LABELS, _syn(5.0)
    D = hardness(c, U)
    assert lower_bound(c, U, log_inv_delta=400.0) == pytest.approx(400.0 * D, rel=1e-12)
    want = (1 - 2 * 0.1) * math.log(0.9 / 0.1) * D
    assert lower_bound(c, U, delta=0.1) == pytest.approx(want)
    assert kl_bernoulli_delta(log_inv_delta=1000.0) == pytest.approx(1000.0)


def test_admissible_pairs():
    pairs = admissible_pairs([0, 0, 1, 2])
    assert {tuple(p) for p in pairs} == {(0, 1), (0, 2), (1, 2), (2, 1)}
    pairs = admissible_pairs([0, 0, 1, 2], alt_pairs="paper")
    assert {tuple(p) for p in pairs} == {(0, 1), (0, 2)}


@pytest.mark.parametrize(
    ("labels", "centres", "err", "match"),
    [
        ([0, 1, 2], [[0.0], [1.0], [2.0]], ValueError, "K < M"),
        ([0, 0, 2, 2], [[0.0], [1.0], [2.0]], ValueError, "non-empty"),
        ([0, 0, 1], [[0.0], [0.0]], ValueError, "distinct"),
        ([0, 0, 1], [[0.0], [np.nan]], ValueError, "finite"),
        ([0, 0, 1], [[0.0], [1.0], [2.0]], ValueError, "shape"),
        ([0, -1, 1], [[0.0], [1.0]], ValueError, "non-negative"),
        ([0.5, 0, 1], [[0.0], [1.0]], ValueError, "integer"),
        ("abc", [[0.0], [1.0]], TypeError, "labels"),
    ],
)
def test_bad_instances_raise(labels, centres, err, match):
    with pytest.raises(err, match=match):
        optimal_allocation(labels, centres)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="alt_pairs"):
        optimal_allocation(SYN_LABELS, _syn(1.0), alt_pairs="other")
    with pytest.raises(ValueError, match="solver"):
        optimal_allocation(SYN_LABELS, _syn(1.0), solver="cvx")
    with pytest.raises(ValueError, match="lam"):
        inner_value(SYN_LABELS, _syn(1.0), -np.ones(11))
    with pytest.raises(ValueError, match="delta"):
        lower_bound(SYN_LABELS, _syn(1.0), delta=1.5)
    with pytest.raises(ValueError, match="brute force"):
        brute_force_inner(np.arange(12) % 3, np.eye(3), np.ones(12))


def test_to_xarray():
    ds = optimal_allocation(SYN_LABELS, _syn(5.0)).to_xarray()
    assert ds.lam.dims == ("arm",) and ds.w.dims == ("cluster",)
    assert ds.attrs["hardness"] == pytest.approx(0.632727, abs=1e-6)
