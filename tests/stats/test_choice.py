"""Choice probabilities of index policies (:mod:`hierbandit.stats.choice`): the compiled
Gauss–Kronrod quadrature against scipy's adaptive quadrature of the same integral, against the
frequencies of 10⁶ draws of the scores, and against closed forms for deterministic arms."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate
from scipy.special import ndtr

from hierbandit.stats.choice import choice_probabilities, chosen_probability

#: where the reference integrals stop: φ(12) ≈ 2e-32
_ZLIM = 12.0


def _reference_row(mu, s, mask=None):
    """P(arm k has the largest of mu + s·Z), Z iid standard normal, by scipy.integrate.quad:
    ∫ φ(z) Π_{l≠k} Φ((mu_k + s_k z − mu_l)/s_l) dz, split at every crossing point z_l and at
    z_l ± {1, 3, 10}·s_l/s_k. A scale of 0 is a step (Φ(·/0)); ties between deterministic
    top arms are split evenly. Disallowed arms get 0."""
    mu = np.asarray(mu, dtype=float)
    s = np.asarray(s, dtype=float)
    K = mu.size
    mask = np.ones(K, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    arms = np.flatnonzero(mask)
    det = [l for l in arms if s[l] == 0.0]
    det_top = max((mu[l] for l in det), default=-np.inf)
    n_top = sum(mu[l] == det_top for l in det)
    out = np.zeros(K)
    for k in arms:
        others = [l for l in arms if l != k]
        rnd = [l for l in others if s[l] > 0.0]
        if s[k] == 0.0:
            if mu[k] < det_top:
                continue
            out[k] = np.prod([ndtr((mu[k] - mu[l]) / s[l]) for l in rnd]) / n_top
            continue
        # below the largest deterministic competitor the integrand is 0
        lo = max([-_ZLIM] + [(mu[l] - mu[k]) / s[k] for l in others if s[l] == 0.0])
        if lo >= _ZLIM:
            continue
        mu_r = mu[rnd]
        s_r = s[rnd]

        def f(z, k=k, mu_r=mu_r, s_r=s_r):
            return (
                math.exp(-0.5 * z * z)
                / math.sqrt(2 * math.pi)
                * np.prod(ndtr((mu[k] + s[k] * z - mu_r) / s_r))
            )

        cuts = {lo, _ZLIM}
        for m, w in zip(mu_r, s_r, strict=True):
            z0 = (m - mu[k]) / s[k]
            for c in (0.0, -1.0, 1.0, -3.0, 3.0, -10.0, 10.0):
                z = z0 + c * w / s[k]
                if lo < z < _ZLIM:
                    cuts.add(z)
        edges = sorted(cuts)
        total = 0.0
        for a, b in itertools.pairwise(edges):
            val, _ = integrate.quad(f, a, b, epsabs=1e-24, epsrel=1e-12, limit=200)
            total += val
        out[k] = total
    return out


def _random_case(rng):
    """mu, scale, mask of one request: K in 2..7, scales spanning 1e-3..10 (relative), some
    requests masked, some arms far below the others."""
    K = int(rng.integers(2, 8))
    spread = 10.0 ** rng.uniform(-2, 1)
    mu = rng.normal(size=K) * spread
    s = 10.0 ** rng.uniform(-3, 1, size=K)
    if rng.random() < 0.2:  # one arm far out of reach
        mu[rng.integers(K)] -= 100.0 * s.max()
    mask = np.ones(K, dtype=bool)
    if rng.random() < 0.4:
        mask = rng.random(K) < 0.6
        mask[rng.integers(K)] = True
    return mu, s, mask


@pytest.fixture(scope="module")
def cases():
    rng = np.random.default_rng(7)
    return [_random_case(rng) for _ in range(100)]


def test_against_scipy_quadrature(cases):
    n_masked = n_zero = n_small = 0
    for mu, s, mask in cases:
        ref = _reference_row(mu, s, mask)
        got = choice_probabilities(mu[None], s[None], mask[None])[0]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-7, err_msg=f"{mu=} {s=} {mask=}")
        # small probabilities (the propensities whose inverse weighs most) to relative accuracy
        small = ref > 1e-12
        np.testing.assert_allclose(got[small], ref[small], rtol=1e-6, err_msg=f"{mu=} {s=}")
        n_small += np.count_nonzero(small & (ref < 1e-3))
        assert np.all(got[~mask] == 0.0)
        assert abs(ref.sum() - 1.0) < 1e-9  # the reference is a probability vector too
        n_masked += (~mask).any()
        n_zero += bool(np.any(got[mask] == 0.0))
    # the cases cover masks, arms that cannot win and arms that rarely do
    assert n_masked >= 20 and n_zero >= 5 and n_small >= 10


def test_batched_rows_equal_single_rows(cases):
    """Cases of one K stacked into one call give the rows of separate calls."""
    same_k = [c for c in cases if c[0].size == 4]
    assert len(same_k) >= 5
    MU = np.array([c[0] for c in same_k])
    S = np.array([c[1] for c in same_k])
    M = np.array([c[2] for c in same_k])
    P = choice_probabilities(MU, S, M)
    for i, (mu, s, mask) in enumerate(same_k):
        np.testing.assert_array_equal(P[i], choice_probabilities(mu[None], s[None], mask[None])[0])


def test_raw_probabilities_sum_to_one(cases):
    """The unnormalised probability of each arm (one quadrature per arm) sums to 1 to 1e-9:
    the normalisation of choice_probabilities hides no quadrature error."""
    for mu, s, mask in cases:
        K = mu.size
        raw = np.array(
            [chosen_probability(mu[None], s[None], [k], mask[None])[0] for k in range(K)]
        )
        assert abs(raw.sum() - 1.0) < 1e-9, (mu, s, mask, raw)
        np.testing.assert_allclose(raw, _reference_row(mu, s, mask), rtol=0, atol=1e-7)


def test_chosen_probability_is_the_column(cases):
    rng = np.random.default_rng(3)
    for K in range(2, 8):
        rows = [c for c in cases if c[0].size == K]
        if not rows:
            continue
        MU = np.array([c[0] for c in rows])
        S = np.array([c[1] for c in rows])
        M = np.array([c[2] for c in rows])
        P = choice_probabilities(MU, S, M)
        for _ in range(3):
            arms = rng.integers(K, size=len(rows))
            p = chosen_probability(MU, S, arms, M)
            np.testing.assert_allclose(p, P[np.arange(len(rows)), arms], rtol=0, atol=1e-9)
        # a deterministic index, and Thompson scores that are all deterministic
        for scale, random in ((S, False), (0.0 * S, True)):
            arms = rng.integers(K, size=len(rows))
            P = choice_probabilities(MU, scale, M, random=random)
            p = chosen_probability(MU, scale, arms, M, random=random)
            np.testing.assert_allclose(p, P[np.arange(len(rows)), arms], rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    ("mu", "s", "mask"),
    [
        ([0.0, 0.3, -0.2], [1.0, 0.5, 2.0], None),
        ([0.0, 0.05, 0.1, -0.3, 2.0], [0.1, 0.01, 1.0, 3.0, 0.5], [1, 1, 1, 1, 0]),
        ([1.0, 1.2, 0.0, 1.1], [0.0, 0.3, 1.0, 0.02], None),  # a deterministic arm
        ([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [1, 2, 3, 0.5, 0.1, 1e-3, 10.0], None),
    ],
)
def test_against_monte_carlo(mu, s, mask):
    """10⁶ draws of the scores: every frequency within 5 binomial standard errors."""
    mu, s = np.array(mu, dtype=float), np.array(s, dtype=float)
    K = mu.size
    mask = np.ones(K, dtype=bool) if mask is None else np.array(mask, dtype=bool)
    P = choice_probabilities(mu[None], s[None], mask[None])[0]
    n = 10**6
    rng = np.random.default_rng(11)
    counts = np.zeros(K)
    for _ in range(4):
        scores = mu + s * rng.standard_normal((n // 4, K))
        scores[:, ~mask] = -np.inf
        counts += np.bincount(scores.argmax(axis=1), minlength=K)
    freq = counts / n
    pc = np.clip(P, 1.0 / n, 1.0 - 1.0 / n)
    se = np.sqrt(pc * (1 - pc) / n)
    assert np.all(np.abs(freq - P) <= 5 * se), (P, freq, (freq - P) / se)
    assert np.all(P[~mask] == 0.0) and np.all(counts[~mask] == 0)


# ---------------------------------------------------------------------- deterministic arms


def _p(mu, s, mask=None, *, random=True):
    mu, s = np.array(mu, dtype=float)[None], np.array(s, dtype=float)[None]
    return choice_probabilities(
        mu, s, None if mask is None else np.array(mask)[None], random=random
    )[0]


def test_deterministic_arm_among_random_ones():
    mu, s = [0.0, 1.0, 0.5], [1.0, 0.0, 0.5]
    P = _p(mu, s)
    # arm 1 scores exactly 1: it wins when both random scores fall below 1
    assert P[1] == pytest.approx(ndtr(1.0) * ndtr(1.0), abs=1e-12)
    np.testing.assert_allclose(P, _reference_row(mu, s), rtol=0, atol=1e-9)
    assert abs(P.sum() - 1.0) < 1e-12


def test_deterministic_arms_below_the_top_get_zero():
    mu, s = [2.0, 1.0, 0.0, 1.5], [0.0, 0.0, 1.0, 0.0]
    P = _p(mu, s)
    assert P[1] == 0.0 and P[3] == 0.0
    assert P[0] == pytest.approx(ndtr(2.0), abs=1e-12)
    np.testing.assert_allclose(P, _reference_row(mu, s), rtol=0, atol=1e-9)


def test_ties_among_deterministic_top_arms_split_evenly():
    mu, s = [2.0, 2.0, 0.0, 1.0, 2.0], [0.0, 0.0, 1.0, 0.5, 0.0]
    P = _p(mu, s)
    share = ndtr(2.0) * ndtr(2.0) / 3
    np.testing.assert_allclose(P[[0, 1, 4]], share, rtol=0, atol=1e-12)
    assert P[0] == P[1] == P[4]
    np.testing.assert_allclose(P, _reference_row(mu, s), rtol=0, atol=1e-9)
    # without random arms: an even split, random or not
    np.testing.assert_array_equal(_p([3.0, 3.0, 1.0], [0.0, 0.0, 0.0]), [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(
        _p([3.0, 3.0, 1.0], [0.0, 0.0, 0.0], random=False), [0.5, 0.5, 0.0]
    )


def test_all_deterministic_index_with_ties():
    # scores mu + scale: [2, 2, 2, 1.9]
    mu, s = [1.0, 2.0, 1.5, 1.0], [1.0, 0.0, 0.5, 0.9]
    np.testing.assert_array_equal(_p(mu, s, random=False), [1 / 3, 1 / 3, 1 / 3, 0.0])
    np.testing.assert_array_equal(
        _p(mu, s, [True, False, True, True], random=False), [0.5, 0.0, 0.5, 0.0]
    )
    np.testing.assert_array_equal(
        _p(mu, s, [False, False, False, True], random=False), [0.0, 0.0, 0.0, 1.0]
    )
    np.testing.assert_array_equal(_p([0.0, 1.0, 0.5], [0.0, 0.0, 0.6], random=False), [0, 0, 1])


def test_masked_arms_get_zero_even_if_they_would_win():
    mu, s = [10.0, 0.0, 0.1, 0.2], [1.0, 1.0, 1.0, 0.0]
    for mask in ([False, True, True, True], [False, True, True, False]):
        P = _p(mu, s, mask)
        assert P[0] == 0.0 and np.all(P[~np.array(mask)] == 0.0)
        np.testing.assert_allclose(P, _reference_row(mu, s, mask), rtol=0, atol=1e-9)
        assert abs(P.sum() - 1.0) < 1e-12
    # deterministic: the masked argmax is passed over
    np.testing.assert_array_equal(_p(mu, s, [False, True, True, True], random=False), [0, 0, 1, 0])


def test_arms_out_of_reach_get_exactly_zero():
    P = _p([0.0, -100.0, 0.5], [1.0, 1.0, 0.2])
    assert P[1] == 0.0
    np.testing.assert_allclose(P, _reference_row([0.0, -100.0, 0.5], [1.0, 1.0, 0.2]), atol=1e-9)
    # a random arm far below a deterministic one, and the deterministic one wins surely
    P = _p([0.0, 50.0], [1.0, 0.0])
    np.testing.assert_array_equal(P, [0.0, 1.0])
    # a deterministic arm far below a random one
    P = _p([0.0, -50.0, 0.0], [1.0, 0.0, 2.0])
    assert P[1] == 0.0
    # a single allowed arm gets 1
    np.testing.assert_array_equal(
        _p([0.0, 5.0, 1.0], [1.0, 1.0, 1.0], [False, False, True]), [0, 0, 1]
    )


def test_extreme_scale_ratios():
    """A random arm whose scale is 10⁶ times another's: the narrow factor is a near-step
    that the panels must not hide."""
    for mu, s in [
        ([0.0, 0.3, 0.31], [1.0, 1e-6, 1e-5]),
        ([0.0, 0.3, -0.2], [1e-6, 1.0, 1e-3]),
        ([0.0, 1e-4, 2e-4, 3e-4], [1e-4, 1e-4, 1e-4, 1e2]),
    ]:
        P = _p(mu, s)
        np.testing.assert_allclose(P, _reference_row(mu, s), rtol=0, atol=1e-7)
        assert abs(P.sum() - 1.0) < 1e-12


def test_empty_batch():
    assert choice_probabilities(np.zeros((0, 3)), np.zeros((0, 3))).shape == (0, 3)
    assert chosen_probability(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0, int)).shape == (0,)


# ---------------------------------------------------------------------- refusals


@pytest.mark.parametrize("random", [True, False])
def test_input_validation(random):
    mu = np.zeros((2, 3))
    s = np.ones((2, 3))
    with pytest.raises(ValueError, match="mu and scale"):
        choice_probabilities(np.zeros(3), np.ones(3), random=random)
    with pytest.raises(ValueError, match="mu and scale"):
        choice_probabilities(mu, np.ones((2, 4)), random=random)
    with pytest.raises(ValueError, match="mu and scale"):
        choice_probabilities(np.zeros((2, 3, 1)), np.ones((2, 3, 1)), random=random)
    for bad in (np.nan, np.inf):
        m = mu.copy()
        m[1, 2] = bad
        with pytest.raises(ValueError, match="finite"):
            choice_probabilities(m, s, random=random)
        t = s.copy()
        t[0, 1] = bad
        with pytest.raises(ValueError, match="finite"):
            choice_probabilities(mu, t, random=random)
    t = s.copy()
    t[0, 0] = -1e-12
    with pytest.raises(ValueError, match="non-negative"):
        choice_probabilities(mu, t, random=random)
    with pytest.raises(ValueError, match="mask"):
        choice_probabilities(mu, s, np.ones((2, 2), dtype=bool), random=random)
    with pytest.raises(ValueError, match="mask"):
        choice_probabilities(mu, s, np.array([[True, False, False], [False] * 3]), random=random)
    with pytest.raises(ValueError, match="mask"):
        chosen_probability(mu, s, [0, 0], np.array([[True] * 3, [False] * 3]), random=random)
    for arms in ([0, 3], [-1, 0], [0], [[0, 1]]):
        with pytest.raises(ValueError, match="arms"):
            chosen_probability(mu, s, arms, random=random)
    with pytest.raises(ValueError, match="finite"):
        chosen_probability(np.full((2, 3), np.nan), s, [0, 1], random=random)
