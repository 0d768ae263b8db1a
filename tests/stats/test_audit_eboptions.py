"""EBOptions(threshold=inf) is accepted and means what docs/maths/ebm.md §7.3 says of γ = ∞: every
thresholdable entry is zeroed, so Σ̂ is diagonal when the diagonal is kept (and the floor
eig_floor·I when it is thresholded too)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierbandit.stats.empirical_bayes import (
    EBOptions,
    estimate_Sigma,
    ols_estimates,
    psd_project,
    scatter_covariance,
)


def _stats(N=30, d=3, rows=12, seed=0):
    rng = np.random.default_rng(seed)
    C = np.array([[1.0, 0.6, 0.2], [0.6, 1.0, 0.4], [0.2, 0.4, 1.0]])
    beta = rng.multivariate_normal(np.zeros(d), C, size=N)
    G = np.empty((N, d, d))
    b = np.empty((N, d))
    for j in range(N):
        X = rng.normal(size=(rows, d))
        y = X @ beta[j] + 0.1 * rng.normal(size=rows)
        G[j], b[j] = X.T @ X, X.T @ y
    return G, b


@pytest.mark.parametrize("inf", [math.inf, np.inf, np.float32("inf")])
def test_an_infinite_threshold_is_accepted(inf):
    opts = EBOptions(threshold=inf)
    assert opts.threshold == math.inf
    assert opts._kernel[4] == math.inf


def test_an_infinite_threshold_keeps_only_the_diagonal():
    G, b = _stats()
    Sigma, gamma, n_eff = estimate_Sigma(G, b, options=EBOptions(threshold=math.inf))
    assert gamma == math.inf and n_eff == 30
    B, ok = ols_estimates(G, b)
    S = scatter_covariance(B[ok])
    np.testing.assert_allclose(Sigma, psd_project(np.diag(np.diag(S))), rtol=1e-12)
    assert np.count_nonzero(Sigma - np.diag(np.diag(Sigma))) == 0
    # a finite threshold above every off-diagonal entry gives the same Σ̂
    big = float(np.max(np.abs(S))) * 10
    same, _, _ = estimate_Sigma(G, b, options=EBOptions(threshold=big))
    np.testing.assert_array_equal(Sigma, same)


def test_an_infinite_threshold_on_the_diagonal_too_leaves_the_floor():
    G, b = _stats()
    opts = EBOptions(threshold=math.inf, threshold_diagonal=True, eig_floor=1e-3)
    Sigma, _, _ = estimate_Sigma(G, b, options=opts)
    np.testing.assert_allclose(Sigma, 1e-3 * np.eye(3), rtol=1e-12, atol=0)


@pytest.mark.parametrize("bad", [-math.inf, math.nan, -1.0])
def test_other_non_finite_or_negative_thresholds_are_refused(bad):
    with pytest.raises(ValueError, match=r"^threshold "):
        EBOptions(threshold=bad)
