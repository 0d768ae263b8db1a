"""The stopping rule: thresholds, Ψ, and Z(t) against a direct computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import zeta

from hierbandit.boc import _kernels as kern
from hierbandit.boc.explorers import BOC, Uniform
from hierbandit.boc.lower_bound import brute_force_inner, inner_value
from hierbandit.boc.thresholds import (
    beta_heuristic,
    beta_theory,
    kl_bernoulli_delta,
    log_inv_delta_of,
    psi,
)


@pytest.mark.parametrize(
    ("x", "want"),
    [(0.01, 1.4279), (0.1, 1.5267), (1, 2.5071), (10, 11.9546), (100, 102.9073),
     (1000, 1004.0295)],
)  # fmt: skip
def test_psi_reference_values(x, want):
    assert psi(x) == pytest.approx(want, abs=1e-4)


def test_psi_is_the_minimum_over_a_grid_and_at_least_x():
    h = np.linspace(0.5 + 1e-6, 1 - 1e-6, 200_001)
    g = 2 * h - 2 * h * np.log(4 * h) + np.log(zeta(2 * h)) - 0.5 * np.log1p(-h)
    for x in (0.05, 1.0, 7.3, 50.0):
        assert psi(x) == pytest.approx(((g + x) / h).min(), rel=1e-7)
        assert psi(x) >= x


def test_thresholds_direct():
    N = np.array([1, 3, 7, 2], dtype=float)
    L = 12.0
    want = 2 * 3 * np.log(4 + np.log(N)).sum() + 4 * 3 * psi(L / 12)
    assert beta_theory(N, 3, log_inv_delta=L) == pytest.approx(want)
    assert beta_theory(N, 3, delta=math.exp(-L)) == pytest.approx(want)
    assert beta_heuristic(100, 4, delta=0.01) == pytest.approx(
        math.log((1 + math.log(100)) ** 4 / 0.01)
    )
    assert kl_bernoulli_delta(delta=0.25) == pytest.approx(
        0.25 * math.log(0.25 / 0.75) + 0.75 * math.log(0.75 / 0.25)
    )


@pytest.mark.parametrize(
    "kwargs",
    [{"delta": 0.0}, {"delta": 1.0}, {"delta": -0.5}, {"delta": 2.0}, {"log_inv_delta": 0.0},
     {"log_inv_delta": -3.0}, {}, {"delta": 0.1, "log_inv_delta": 2.0}, {"delta": math.nan}],
)  # fmt: skip
def test_confidence_outside_the_unit_interval_raises(kwargs):
    with pytest.raises(ValueError, match="delta"):
        log_inv_delta_of(**kwargs)


def _direct_statistics(mu, N, labels, centres, corrected):
    """Z₁ by its definition; Z₂ by Prop. 5's formula written over (m, k) pairs (eq. 18)."""
    z1 = sum(N[m] * ((mu[m] - centres[labels[m]]) ** 2).sum() for m in range(len(N)))
    K = centres.shape[0]
    nk = np.bincount(labels, minlength=K)
    z2 = math.inf
    for k in range(K):
        members = np.flatnonzero(labels == k)
        if members.size == 0:
            continue
        lightest = N[members].min()
        for kp in range(K):
            if kp == k:
                continue
            if not (nk[k] > 1 or (corrected and nk[k] == 1 and nk[kp] == 1)):
                continue
            wk = N[labels == kp].sum()
            v = 0.0 if lightest + wk == 0 else lightest * wk / (lightest + wk)
            z2 = min(z2, v * ((centres[k] - centres[kp]) ** 2).sum())
    return z1, z2


def test_stopping_statistics_against_direct_and_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(40):
        M, K, d = int(rng.integers(3, 7)), int(rng.integers(2, 4)), int(rng.integers(1, 4))
        K = min(K, M - 1)
        labels = rng.integers(0, K, M)
        centres = rng.normal(size=(K, d)) * 3
        mu = rng.normal(size=(M, d)) * 3
        N = rng.integers(1, 30, M).astype(float)
        for corrected in (True, False):
            z1, z2 = kern.stopping_statistics(mu, N, labels, centres, K, corrected)
            w1, w2 = _direct_statistics(mu, N, labels, centres, corrected)
            assert z1 == pytest.approx(w1, rel=1e-12)
            assert z2 == pytest.approx(w2, rel=1e-12, abs=1e-300)
        if np.unique(labels).size == K:  # Z₂ is the exact infimum over Alt(c_{t−1})
            z2 = kern.stopping_statistics(mu, N, labels, centres, K, True)[1]
            assert z2 == pytest.approx(inner_value(labels, centres, N), rel=1e-12)
            assert z2 == pytest.approx(brute_force_inner(labels, centres, N)[0], rel=1e-9)


def test_empty_estimated_cluster_gives_zero_z2():
    mu = np.array([[0.0], [1.0], [5.0]])
    N = np.ones(3)
    _, z2 = kern.stopping_statistics(mu, N, np.array([0, 0, 1]), np.zeros((3, 1)), 3, True)
    assert z2 == 0.0


def test_lemma23_form_of_z():
    # (max(√y − √x, 0))² = max_{α≥0} (−αx + α/(α+1) y)
    alpha = np.linspace(0, 200, 400_001)
    for x, y in [(1.0, 9.0), (4.0, 1.0), (0.5, 30.0)]:
        want = np.max(-alpha * x + alpha / (alpha + 1) * y)
        assert max(math.sqrt(y) - math.sqrt(x), 0) ** 2 == pytest.approx(want, abs=1e-6)


def test_algorithm_statistic_and_threshold_match_a_direct_computation():
    from hierbandit.boc.instances import synthetic_instance

    inst = synthetic_instance("moderate")
    sampler = inst.sampler(5)
    for thr in ("beta", "beta_tilde"):
        alg = BOC(11, 4, 3, log_inv_delta=50.0, threshold=thr)
        for _ in range(400):
            a = alg.next_arm()
            alg.observe(a, sampler.pull(a))
        z, z1, z2 = alg.statistic()
        w1, w2 = _direct_statistics(alg.means, alg.counts, alg.labels, alg.centres, True)
        assert z1 == pytest.approx(w1, rel=1e-10)
        assert z2 == pytest.approx(w2, rel=1e-10)
        assert z == pytest.approx(0.5 * max(math.sqrt(w2) - math.sqrt(w1), 0) ** 2, rel=1e-10)
        # the incrementally maintained β equals the direct formula
        if thr == "beta":
            want = beta_theory(alg.counts, 3, log_inv_delta=50.0)
        else:
            want = beta_heuristic(alg.t, 3, log_inv_delta=50.0)
        assert alg.threshold_value() == pytest.approx(want, rel=1e-12)
        assert alg.should_stop() == (z >= want)
        # means are the running averages of the observations
        np.testing.assert_allclose(alg.means * alg.counts[:, None], alg.sums)


def test_stopping_is_monotone_in_delta_on_a_common_path():
    from hierbandit.boc.instances import synthetic_instance

    inst = synthetic_instance("easy")
    taus = [
        Uniform(11, 4, 3, log_inv_delta=L, threshold="beta_tilde").run(inst, rng=3).n_pulls
        for L in (1.0, 5.0, 20.0, 80.0)
    ]
    assert taus == sorted(taus)
