"""The mixture over arm means (docs/boc.md, Bayesian diagnostic): likelihood, exact reference,
NUTS diagnostic."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import gammaln
from scipy.stats import multivariate_normal

from hierbandit.bayes.boc import (
    diagnose_boc,
    diagnose_partition,
    exact_coclustering,
    gmm_model,
    responsibilities,
)

MEANS = np.array([[0.0, 0.1], [0.2, -0.1], [-0.1, 0.0], [4.0, 4.1], [4.1, 3.9], [2.0, 2.1]])
COUNTS = np.array([20, 20, 20, 20, 20, 1.0])
PRIOR = {"prior_mean": [2.0, 2.0], "prior_sd": 5.0}


def test_potential_is_the_marginalised_mixture_likelihood():
    model = gmm_model(MEANS, COUNTS, 2, **PRIOR)
    pot = model.compile_logp(vars=model.potentials, jacobian=False)
    rng = np.random.default_rng(0)
    for _ in range(3):
        pi = rng.dirichlet([1, 1])
        zeta = rng.normal(size=(2, 2))
        ip = model.initial_point()
        point = dict(ip)
        tr = model.rvs_to_transforms[model["pi"]]
        point["pi_simplex__"] = tr.forward(pi).eval()
        point["zeta"] = zeta
        mu = np.tile([2.0, 2.0], (2, 1)) + 5.0 * zeta
        want = 0.0
        for m in range(6):
            cov = np.eye(2) / COUNTS[m]
            dens = [pi[k] * multivariate_normal(mu[k], cov).pdf(MEANS[m]) for k in range(2)]
            want += np.log(sum(dens))
        assert float(pot(point)) == pytest.approx(want, rel=1e-8)


def test_responsibilities_direct():
    pi = np.array([0.3, 0.7])
    mu = np.array([[0.0, 0.0], [4.0, 4.0]])
    R = responsibilities(MEANS, COUNTS, pi, mu)
    for m in range(6):
        cov = np.eye(2) / COUNTS[m]
        w = np.array([pi[k] * multivariate_normal(mu[k], cov).pdf(MEANS[m]) for k in range(2)])
        np.testing.assert_allclose(R[m], w / w.sum(), rtol=1e-9)


def test_exact_coclustering_against_direct_enumeration():
    means, counts = MEANS[[0, 3, 5]], np.array([4.0, 3.0, 1.0])
    m0, s0, alpha = np.array([2.0, 2.0]), 3.0, 0.7
    C, parts = exact_coclustering(means, counts, 2, alpha=alpha, prior_mean=m0, prior_sd=s0)
    # direct: Dirichlet–multinomial prior × per-block joint Gaussian density (no algebra tricks)
    post = {}
    for z in itertools.product(range(2), repeat=3):
        z = np.array(z)
        nk = np.bincount(z, minlength=2)
        lp = gammaln(2 * alpha) - gammaln(3 + 2 * alpha)
        lp += sum(gammaln(n + alpha) - gammaln(alpha) for n in nk)
        for k in range(2):
            idx = np.flatnonzero(z == k)
            if idx.size == 0:
                continue
            cov = np.diag(1.0 / counts[idx]) + s0**2 * np.ones((idx.size, idx.size))
            for j in range(2):
                lp += multivariate_normal(np.full(idx.size, m0[j]), cov).logpdf(means[idx, j])
        post[tuple(z)] = lp
    lps = np.array(list(post.values()))
    p = np.exp(lps - lps.max())
    p /= p.sum()
    want = np.zeros((3, 3))
    for (z, _), w in zip(post.items(), p, strict=True):
        z = np.array(z)
        want += w * (z[:, None] == z[None, :])
    np.testing.assert_allclose(C, want, atol=1e-12)
    assert sum(parts.values()) == pytest.approx(1.0)


def test_nuts_posterior_matches_exact_enumeration():
    C, parts = exact_coclustering(MEANS, COUNTS, 2, **PRIOR)
    assert 0.3 < C[0, 5] < 0.7  # the ambiguous arm makes the test informative
    diag = diagnose_partition(
        MEANS, COUNTS, [0, 0, 0, 1, 1, 1], draws=1000, tune=500, chains=2, **PRIOR
    )
    np.testing.assert_allclose(diag.coclustering, C, atol=0.05)
    np.testing.assert_allclose(diag.coclustering_sampled, C, atol=0.07)
    assert diag.p_exact == pytest.approx(parts[(0, 0, 0, 1, 1, 1)], abs=0.05)
    assert diag.min_within == pytest.approx(C[0, 5], abs=0.05)
    assert np.argmin(diag.arm_agreement) == 5  # the borderline arm is flagged
    assert not diag.agrees()
    ds = diag.to_xarray()
    assert ds.coclustering.dims == ("arm", "arm_")


@pytest.mark.parametrize(
    ("means", "counts", "match"),
    [
        ([[0.0], [np.nan]], [1, 1], "finite"),
        ([[0.0], [1.0]], [1, 0], "positive"),
        ([[0.0], [1.0]], [1], "shape"),
        ([[0.0]], [1], "at least 2"),
    ],
)
def test_bad_input(means, counts, match):
    with pytest.raises(ValueError, match=match):
        gmm_model(means, counts, 1)
    with pytest.raises(ValueError, match="exceed"):
        gmm_model(MEANS, COUNTS, 7)


@pytest.mark.slow
def test_boc_output_is_confirmed_by_the_posterior():
    from hierbandit.boc.explorers import BOC
    from hierbandit.boc.instances import synthetic_instance

    inst = synthetic_instance("moderate")
    alg = BOC(11, 4, 3, delta=0.01, threshold="beta_tilde")
    res = alg.run(inst, rng=0)
    assert res.stopped and res.correct
    diag = diagnose_boc(alg, draws=500, tune=500, random_seed=1)
    assert diag.agrees(eps=0.01)
    assert diag.p_exact > 0.99
