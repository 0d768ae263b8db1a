"""Tests of the empirical-Bayes estimators of (Σ, σ²) (spec ebm.md §3, §7 A1–A5, §9 items 7–8).

Deterministic parts are compared with reference implementations written here from the spec's
formulas (numpy only); statistical parts use fixed seeds and generous margins.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hierbandit.stats import (
    EBOptions,
    EBResult,
    bickel_levina_threshold,
    empirical_bayes,
    estimate_Sigma,
    estimate_sigma2,
    ols_estimates,
    posterior_given_hyper,
    psd_project,
    scatter_covariance,
    threshold_covariance,
)
from hierbandit.stats import kernels as K

# ----------------------------------------------------------------------------- helpers


def _rows(rng, sizes, d, beta, sigma2, loc=0.0):
    """Raw rows (X, y, instance) with sizes[j] rows of instance j, y = Xβ_j + N(0, σ²)."""
    inst = np.repeat(np.arange(len(sizes)), sizes)
    X = rng.normal(loc=loc, size=(inst.size, d))
    y = np.einsum("td,td->t", X, beta[inst]) + np.sqrt(sigma2) * rng.normal(size=inst.size)
    return X, y, inst


def _stats(X, y, inst, N):
    d = X.shape[1]
    G = np.zeros((N, d, d))
    b = np.zeros((N, d))
    q = np.zeros(N)
    n = np.zeros(N, dtype=np.int64)
    for j in range(N):
        Xj, yj = X[inst == j], y[inst == j]
        G[j], b[j], q[j], n[j] = Xj.T @ Xj, Xj.T @ yj, yj @ yj, len(yj)
    return G, b, q, n


def _fast_stats(rng, N, T, d, Sigma, sigma2, beta0=None):
    """Sufficient statistics of N instances with T rows each, β_j ~ N(β₀, Σ) (vectorised)."""
    beta0 = np.zeros(d) if beta0 is None else beta0
    beta = rng.multivariate_normal(beta0, Sigma, size=N)
    X = rng.normal(size=(N, T, d))
    y = np.einsum("ntd,nd->nt", X, beta) + np.sqrt(sigma2) * rng.normal(size=(N, T))
    G = np.einsum("ntd,nte->nde", X, X)
    b = np.einsum("ntd,nt->nd", X, y)
    return G, b, np.einsum("nt,nt->n", y, y), np.full(N, T, dtype=np.int64), beta


def _scatter(B, normalization):
    """The paper's scatter Σββᵀ − (1/n)(Σβ)(Σβ)ᵀ, then the chosen normalisation."""
    n = B.shape[0]
    s = B.sum(axis=0)
    S = B.T @ B - np.outer(s, s) / n
    return {"n-1": S / (n - 1), "n": S / n, "none": S}[normalization]


def _threshold(S, gamma, diag):
    keep = np.abs(S) >= gamma
    if not diag:
        keep |= np.eye(S.shape[0], dtype=bool)
    return np.where(keep, S, 0.0)


def _psd(S, floor):
    w, V = np.linalg.eigh((S + S.T) / 2)
    return (V * np.maximum(w, floor)) @ V.T


def _bl_reference(B, uniforms, normalization, diag):
    """Bickel–Levina random-split CV, one explicit loop per split and per candidate."""
    n, d = B.shape
    S = _scatter(B, normalization)
    iu = np.triu_indices(d, 0 if diag else 1)
    grid = np.unique(np.concatenate([[0.0], np.abs(S[iu]), [np.inf]]))
    risk = np.zeros(grid.size)
    n2 = int(np.floor(n / np.log(n))) if n >= 2 else 0
    n1 = n - n2
    if n < 2 or n1 < 2 or n2 < 2:
        return 0.0, grid, risk
    for u in uniforms:
        order = np.argsort(u)
        valid, train = order[:n2], order[n2:]
        S1 = _scatter(B[train], normalization)
        S2 = _scatter(B[valid], normalization)
        for g, gamma in enumerate(grid):
            risk[g] += np.sum((_threshold(S1, gamma, diag) - S2) ** 2)
    risk /= len(uniforms)
    return float(grid[np.argmin(risk)]), grid, risk


def _rss_raw(X, y, inst, mean):
    return float(np.sum((y - np.einsum("td,td->t", X, mean[inst])) ** 2))


# ----------------------------------------------------------------------------- OLS


def test_ols_estimates_equal_lstsq_and_mask():
    rng = np.random.default_rng(1)
    d = 3
    sizes = [0, 1, 2, 3, 4, 25, 6]
    beta = rng.normal(size=(len(sizes), d))
    X, y, inst = _rows(rng, sizes, d, beta, 0.5)
    # instance 6: six exactly collinear rows (third column = first + second)
    rows6 = inst == 6
    X[rows6, 2] = X[rows6, 0] + X[rows6, 1]
    G, b, _, _ = _stats(X, y, inst, len(sizes))
    B, ok = ols_estimates(G, b)
    assert B.shape == (7, d)
    assert ok.dtype == bool
    np.testing.assert_array_equal(ok, [False, False, False, True, True, True, False])
    for j in np.flatnonzero(ok):
        ref = np.linalg.lstsq(X[inst == j], y[inst == j], rcond=None)[0]
        np.testing.assert_allclose(B[j], ref, rtol=1e-9, atol=1e-10)
    assert np.all(np.isnan(B[~ok]))


def test_ols_estimates_with_ridge_solve():
    rng = np.random.default_rng(2)
    d = 2
    sizes = [5, 12]
    X, y, inst = _rows(rng, sizes, d, rng.normal(size=(2, d)), 1.0)
    G, b, _, _ = _stats(X, y, inst, 2)
    B, ok = ols_estimates(G, b, ridge=0.3)
    assert ok.all()
    for j in range(2):
        np.testing.assert_allclose(B[j], np.linalg.solve(G[j] + 0.3 * np.eye(d), b[j]), rtol=1e-12)


def test_ols_ridge_does_not_admit_instances_with_too_few_rows():
    rng = np.random.default_rng(3)
    d = 3
    sizes = [0, 1, 2, 10]
    X, y, inst = _rows(rng, sizes, d, rng.normal(size=(4, d)), 1.0)
    G, b, _, _ = _stats(X, y, inst, 4)
    _, ok = ols_estimates(G, b, ridge=0.1)
    np.testing.assert_array_equal(ok, [False, False, False, True])


def test_ols_estimates_validation():
    with pytest.raises(ValueError, match="shape"):
        ols_estimates(np.zeros((2, 3, 3)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="finite"):
        ols_estimates(np.full((1, 2, 2), np.nan), np.zeros((1, 2)))


# ----------------------------------------------------------------------------- scatter


@pytest.mark.parametrize("shape", [(2, 1), (7, 3), (40, 5)])
def test_scatter_covariance_normalisations(shape):
    rng = np.random.default_rng(shape[0])
    B = rng.normal(size=shape) @ rng.normal(size=(shape[1], shape[1])) + 3.0
    n = shape[0]
    np.testing.assert_allclose(
        scatter_covariance(B, "n-1"), np.atleast_2d(np.cov(B.T, ddof=1)), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(
        scatter_covariance(B), np.atleast_2d(np.cov(B.T, ddof=1)), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(
        scatter_covariance(B, "n"), np.atleast_2d(np.cov(B.T, ddof=0)), rtol=1e-12, atol=1e-12
    )
    s = B.sum(axis=0)
    paper = sum(np.outer(v, v) for v in B) - np.outer(s, s) / n
    np.testing.assert_allclose(scatter_covariance(B, "none"), paper, rtol=1e-10, atol=1e-10)
    S = scatter_covariance(B, "none")
    np.testing.assert_array_equal(S, S.T)


def test_scatter_covariance_validation():
    with pytest.raises(ValueError, match="normalization"):
        scatter_covariance(np.ones((3, 2)), "N-1")
    with pytest.raises(ValueError, match="B"):
        scatter_covariance(np.ones(3))
    with pytest.raises(ValueError, match="B"):
        scatter_covariance(np.ones((0, 2)))


# ----------------------------------------------------------------------------- threshold, PSD


def test_threshold_covariance_rules():
    S = np.array(
        [
            [0.05, 0.30, -0.10, 0.0],
            [0.30, 2.00, 0.20, -0.25],
            [-0.10, 0.20, 0.01, 0.50],
            [0.0, -0.25, 0.50, 1.0],
        ]
    )
    gamma = 0.2
    out = threshold_covariance(S, gamma)
    # diagonal kept by default, even the entries below γ
    np.testing.assert_array_equal(np.diag(out), np.diag(S))
    # off-diagonal: |s| < γ zeroed, |s| >= γ kept (boundary 0.2 kept)
    np.testing.assert_array_equal(out, _threshold(S, gamma, diag=False))
    assert out[1, 2] == 0.2
    assert out[0, 2] == 0.0
    assert out[1, 3] == -0.25
    out_d = threshold_covariance(S, gamma, threshold_diagonal=True)
    np.testing.assert_array_equal(out_d, _threshold(S, gamma, diag=True))
    assert out_d[0, 0] == 0.0
    assert out_d[2, 2] == 0.0
    assert out_d[1, 1] == 2.0
    np.testing.assert_array_equal(threshold_covariance(S, 0.0), S)
    np.testing.assert_array_equal(threshold_covariance(S, 10.0), np.diag(np.diag(S)))


def test_psd_project_floor_and_identity_above_floor():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(5, 5))
    S = (A + A.T) / 2  # indefinite
    assert np.linalg.eigvalsh(S).min() < 0
    for floor in (0.0, 1e-6, 0.3):
        P = psd_project(S, floor)
        np.testing.assert_array_equal(P, P.T)
        assert np.linalg.eigvalsh(P).min() >= floor - 1e-12
        np.testing.assert_allclose(P, _psd(S, floor), rtol=1e-10, atol=1e-12)
    L = rng.normal(size=(5, 5))
    S_ok = L @ L.T + 0.5 * np.eye(5)
    np.testing.assert_allclose(psd_project(S_ok, 1e-6), S_ok, rtol=0, atol=1e-12 * 10)
    np.testing.assert_allclose(psd_project(S_ok), S_ok, rtol=1e-12, atol=1e-12)
    # a slightly asymmetric input is symmetrised
    S_as = S_ok.copy()
    S_as[0, 1] += 1e-3
    np.testing.assert_allclose(psd_project(S_as), (S_as + S_as.T) / 2, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- Bickel–Levina


@pytest.mark.parametrize("n", [4, 5, 10, 37, 120, 2500])
@pytest.mark.parametrize(("normalization", "diag"), [("n-1", False), ("n", True), ("none", False)])
def test_bickel_levina_matches_reference(n, normalization, diag):
    rng = np.random.default_rng(100 + n)
    d = 4
    Sigma = np.diag([1.0, 2.0, 0.5, 1.5])
    Sigma[0, 1] = Sigma[1, 0] = 0.9
    B = rng.multivariate_normal(np.ones(d), Sigma, size=n)
    seed, n_splits = 1234 + n, 17
    gamma, grid, risk = bickel_levina_threshold(
        B, n_splits=n_splits, normalization=normalization, threshold_diagonal=diag, rng=seed
    )
    U = np.random.default_rng(seed).random((n_splits, n))
    g_ref, grid_ref, risk_ref = _bl_reference(B, U, normalization, diag)
    np.testing.assert_allclose(grid, grid_ref, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(risk, risk_ref, rtol=1e-12, atol=1e-15)
    assert gamma == pytest.approx(g_ref, rel=1e-12, abs=1e-15)
    assert np.all(np.diff(grid) > 0)
    assert grid[0] == 0.0
    # ties go to the smallest γ
    assert gamma == grid[np.flatnonzero(risk == risk.min())[0]]


def _bl_kernel(B, U, normalization, diag):
    from hierbandit.stats import kernels as K

    norm = {"n-1": 0, "n": 1, "none": 2}[normalization]
    S = _scatter(B, normalization)
    grid = K.threshold_grid(S, diag)
    risk = np.empty(grid.shape[0])
    best = K.bickel_levina_cv(B, norm, diag, U, grid, risk)
    return float(grid[best]), grid, risk


@pytest.mark.parametrize("extra", [0, 1, 7])
def test_bickel_levina_kernel_uses_the_first_n_uniforms_and_breaks_ties_by_index(extra):
    """The online step passes one uniform per instance of the arm while only the n usable OLS
    vectors take part: the split must be the reference's on ``U[:, :n]``. With ties among the
    uniforms the smaller index goes to the validation half (a stable sort)."""
    rng = np.random.default_rng(31 + extra)
    n, d = 12, 3
    B = rng.normal(size=(n, d)) @ np.array([[1.0, 0.7, 0.0], [0.0, 1.0, 0.2], [0.0, 0.0, 1.0]])
    # uniforms on a coarse lattice: many ties within a split
    U = np.floor(rng.random((40, n + extra)) * 5) / 5
    g, grid, risk = _bl_kernel(B, U, "n-1", False)

    n2 = int(np.floor(n / np.log(n)))
    ref = np.zeros(grid.size)
    for u in U[:, :n]:
        order = np.argsort(u, kind="stable")
        valid, train = order[:n2], order[n2:]
        S1, S2 = _scatter(B[train], "n-1"), _scatter(B[valid], "n-1")
        for k, gamma in enumerate(grid):
            ref[k] += np.sum((_threshold(S1, gamma, False) - S2) ** 2)
    ref /= len(U)
    np.testing.assert_allclose(risk, ref, rtol=1e-12, atol=1e-15)
    assert g == grid[np.flatnonzero(risk == risk.min())[0]]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_bickel_levina_too_few_vectors_gives_zero(n):
    rng = np.random.default_rng(n)
    B = rng.normal(size=(n, 3))
    gamma, grid, risk = bickel_levina_threshold(B, rng=0)
    assert gamma == 0.0
    assert grid[0] == 0.0
    np.testing.assert_array_equal(risk, 0.0)


def test_bickel_levina_generator_and_seed_agree():
    B = np.random.default_rng(5).normal(size=(30, 3))
    a = bickel_levina_threshold(B, rng=42)
    b = bickel_levina_threshold(B, rng=np.random.default_rng(42))
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[2], b[2])


def test_bickel_levina_dense_sigma_keeps_large_entries():
    rng = np.random.default_rng(2024)
    d = 4
    sd = np.array([1.0, 1.5, 0.8, 1.2])
    corr = np.full((d, d), 0.8) + 0.2 * np.eye(d)
    Sigma = corr * np.outer(sd, sd)
    B = rng.multivariate_normal(np.zeros(d), Sigma, size=200)
    B += 0.05 * rng.normal(size=B.shape)  # OLS-like estimation noise
    gamma, _, _ = bickel_levina_threshold(B, rng=7)
    S = scatter_covariance(B)
    kept = threshold_covariance(S, gamma)
    assert gamma < np.min(np.abs(Sigma[np.triu_indices(d, 1)])) / 2
    assert np.all(kept != 0.0)


def _diagonal_truth_sample(d=4, n=500, seed=2025):
    rng = np.random.default_rng(seed)
    Sigma = np.diag([1.0, 2.0, 0.5, 1.5, 0.8][:d])
    return rng.multivariate_normal(np.zeros(d), Sigma, size=n)


def test_bickel_levina_grid_ends_with_infinity():
    """The last candidate γ = ∞ zeroes every off-diagonal entry (a reachable diagonal Σ̂)."""
    B = _diagonal_truth_sample(4)
    _, grid, _ = bickel_levina_threshold(B, rng=7)
    assert np.isinf(grid[-1])
    S = scatter_covariance(B)
    kept = threshold_covariance(S, grid[-1])
    np.testing.assert_array_equal(kept, np.diag(np.diag(S)))


def test_bickel_levina_diagonal_sigma_zeroes_off_diagonal():
    d = 4
    B = _diagonal_truth_sample(d)
    gamma, _, _ = bickel_levina_threshold(B, rng=7)
    kept = threshold_covariance(scatter_covariance(B), gamma)
    np.testing.assert_array_equal(kept[~np.eye(d, dtype=bool)], 0.0)


def test_bickel_levina_can_zero_the_off_diagonal_for_d2():
    B = np.random.default_rng(0).normal(size=(500, 2))  # independent coordinates
    _, grid, _ = bickel_levina_threshold(B, n_splits=200, rng=0)
    S = scatter_covariance(B)
    # some candidate must express "drop s_12"; with grid = {0, |s_12|} none does
    assert any(threshold_covariance(S, g)[0, 1] == 0.0 for g in grid)


# ----------------------------------------------------------------------------- estimate_Sigma


def _sigma_problem(seed=6, d=3):
    rng = np.random.default_rng(seed)
    sizes = [0, 1, 2, 3, 8, 15, 30, 6, 4, 20, 2]
    beta = rng.multivariate_normal(
        np.ones(d), np.array([[2.0, 0.8, 0.1], [0.8, 1.0, 0.0], [0.1, 0.0, 0.7]]), size=len(sizes)
    )
    X, y, inst = _rows(rng, sizes, d, beta, 0.6)
    return X, y, inst, len(sizes), sizes


def _sigma_reference(X, y, inst, N, normalization, gamma, diag, floor, debias_sigma2=None):
    d = X.shape[1]
    Bs, Ginvs = [], []
    for j in range(N):
        Xj = X[inst == j]
        if Xj.shape[0] >= d and np.linalg.matrix_rank(Xj) == d:
            Bs.append(np.linalg.lstsq(Xj, y[inst == j], rcond=None)[0])
            Ginvs.append(np.linalg.inv(Xj.T @ Xj))
    B = np.array(Bs)
    S = _scatter(B, normalization)
    if debias_sigma2 is not None:
        S = S - debias_sigma2 * np.mean(Ginvs, axis=0)
    return _psd(_threshold(S, gamma, diag), floor), B


@pytest.mark.parametrize(
    ("normalization", "threshold", "diag", "debias"),
    [
        ("n-1", "none", False, False),
        ("n", 0.3, False, False),
        ("none", 0.5, True, False),
        ("n-1", 0.2, False, True),
        ("n-1", "none", False, True),
    ],
)
def test_estimate_Sigma_matches_reference(normalization, threshold, diag, debias):
    X, y, inst, N, sizes = _sigma_problem()
    G, b, _, _ = _stats(X, y, inst, N)
    opts = EBOptions(
        threshold=threshold,
        scatter_normalization=normalization,
        threshold_diagonal=diag,
        debias_ols_noise=debias,
        eig_floor=1e-4,
    )
    Sigma, gamma, n_eff = estimate_Sigma(G, b, options=opts, sigma2=0.6)
    g = 0.0 if threshold == "none" else threshold
    ref, B = _sigma_reference(X, y, inst, N, normalization, g, diag, 1e-4, 0.6 if debias else None)
    assert n_eff == sum(s >= 3 for s in sizes) == B.shape[0]
    assert gamma == g
    np.testing.assert_allclose(Sigma, ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_array_equal(Sigma, Sigma.T)
    assert np.linalg.eigvalsh(Sigma).min() >= 1e-4 - 1e-12


def test_estimate_Sigma_cv_is_threshold_of_sample_covariance():
    X, y, inst, N, _ = _sigma_problem()
    G, b, _, _ = _stats(X, y, inst, N)
    Sigma, gamma, _ = estimate_Sigma(G, b, rng=3)
    _, B = _sigma_reference(X, y, inst, N, "n-1", 0.0, False, 1e-6)
    S = _scatter(B, "n-1")
    grid = np.unique(np.concatenate([[0.0], np.abs(S[np.triu_indices(3, 1)]), [np.inf]]))
    assert gamma in grid or np.min(np.abs(grid - gamma)) <= 1e-12 * max(1.0, gamma)
    np.testing.assert_allclose(
        Sigma, _psd(_threshold(S, gamma, False), 1e-6), rtol=1e-9, atol=1e-10
    )
    # reproducible from the seed
    Sigma2, gamma2, _ = estimate_Sigma(G, b, rng=3)
    np.testing.assert_array_equal(Sigma, Sigma2)
    assert gamma == gamma2


def test_estimate_Sigma_cv_with_all_instances_usable_equals_bickel_levina():
    rng = np.random.default_rng(8)
    Sigma_true = np.array([[1.0, 0.6, 0.0], [0.6, 1.0, 0.05], [0.0, 0.05, 1.0]])
    G, b, _, _, _ = _fast_stats(rng, 40, 10, 3, Sigma_true, 0.5)
    opts = EBOptions(cv_splits=13)
    Sigma, gamma, n_eff = estimate_Sigma(G, b, options=opts, rng=99)
    assert n_eff == 40
    B, ok = ols_estimates(G, b)
    assert ok.all()
    g_ref, _, _ = bickel_levina_threshold(B, n_splits=13, rng=99)
    assert gamma == g_ref
    np.testing.assert_allclose(
        Sigma,
        psd_project(threshold_covariance(scatter_covariance(B), gamma)),
        rtol=1e-12,
        atol=1e-13,
    )


def test_estimate_Sigma_too_few_instances_returns_init():
    rng = np.random.default_rng(9)
    d = 3
    sizes = [0, 1, 2, 5]  # only one instance with T >= d
    X, y, inst = _rows(rng, sizes, d, rng.normal(size=(4, d)), 1.0)
    G, b, _, _ = _stats(X, y, inst, 4)
    init = np.array([[2.0, 0.1, 0.0], [0.1, 1.0, 0.0], [0.0, 0.0, 3.0]])
    Sigma, gamma, n_eff = estimate_Sigma(G, b, Sigma_init=init, rng=0)
    assert n_eff == 1
    assert np.isnan(gamma)
    np.testing.assert_array_equal(Sigma, init)
    Sigma, gamma, n_eff = estimate_Sigma(G, b)
    np.testing.assert_array_equal(Sigma, np.eye(d))
    assert np.isnan(gamma)
    # min_instances_for_sigma raises the bar
    G2, b2, _, _, _ = _fast_stats(rng, 4, 6, d, np.eye(d), 1.0)
    Sigma, gamma, n_eff = estimate_Sigma(
        G2, b2, options=EBOptions(min_instances_for_sigma=5), Sigma_init=init
    )
    assert n_eff == 4
    assert np.isnan(gamma)
    np.testing.assert_array_equal(Sigma, init)
    with pytest.raises(ValueError, match="Sigma_init"):
        estimate_Sigma(G, b, Sigma_init=np.eye(2))


@pytest.mark.parametrize(("minimum", "needed"), [(1, 2), (2, 2), (5, 5)])
def test_instances_for_sigma_is_the_kernels_threshold(minimum, needed):
    """``EBOptions.instances_for_sigma`` is the number of full-rank instances below which Σ̂
    keeps its starting value (a covariance needs two points, whatever the option says)."""
    options = EBOptions(min_instances_for_sigma=minimum)
    assert options.instances_for_sigma == needed
    assert "instances_for_sigma" not in options.to_dict()
    rng = np.random.default_rng(4)
    d = 2
    for n_full in (needed - 1, needed):
        G, b, q, n, _ = _fast_stats(rng, n_full, 6, d, np.eye(d), 1.0)
        res = empirical_bayes(G, b, q, n, 1e-3, options=options, rng=0)
        assert res.n_eff == n_full
        assert np.isnan(res.gamma) == (n_full < needed)
        if n_full < needed:
            np.testing.assert_array_equal(res.Sigma, np.eye(d))


def test_estimate_Sigma_consistent_with_lots_of_data():
    rng = np.random.default_rng(10)
    d = 3
    v = np.array([1.0, -0.7, 0.4])
    Sigma_true = np.outer(v, v) + np.eye(d)
    G, b, _, _, _ = _fast_stats(rng, 2000, 200, d, Sigma_true, 1.0, beta0=np.array([1.0, 0, -1]))
    Sigma, _, n_eff = estimate_Sigma(G, b, rng=1)
    assert n_eff == 2000
    err = np.linalg.norm(Sigma - Sigma_true) / np.linalg.norm(Sigma_true)
    assert err < 0.2, err


def test_estimate_Sigma_debias_shrinks_ols_noise_bias():
    rng = np.random.default_rng(11)
    d, sigma2 = 3, 4.0
    v = np.array([1.0, -0.7, 0.4])
    Sigma_true = np.outer(v, v) + np.eye(d)
    # few rows per instance: E[S] ≈ Σ + σ² E[G⁻¹] = Σ + σ²/(T − d − 1) I = Σ + 0.67 I
    G, b, _, _, _ = _fast_stats(rng, 2000, 10, d, Sigma_true, sigma2)
    plain, _, _ = estimate_Sigma(G, b, options=EBOptions(threshold="none"))
    deb, _, _ = estimate_Sigma(
        G, b, options=EBOptions(threshold="none", debias_ols_noise=True), sigma2=sigma2
    )
    rel = lambda S: np.linalg.norm(S - Sigma_true) / np.linalg.norm(Sigma_true)  # noqa: E731
    assert rel(plain) > 0.25
    assert rel(deb) < 0.1
    assert rel(deb) < rel(plain) / 3
    # with many rows per instance the bias is small and debiasing changes little
    G, b, _, _, _ = _fast_stats(rng, 2000, 200, d, Sigma_true, sigma2)
    plain, _, _ = estimate_Sigma(G, b, options=EBOptions(threshold="none"))
    deb, _, _ = estimate_Sigma(
        G, b, options=EBOptions(threshold="none", debias_ols_noise=True), sigma2=sigma2
    )
    assert np.linalg.norm(plain - deb) / np.linalg.norm(Sigma_true) < 0.02


# ----------------------------------------------------------------------------- estimate_sigma2


def test_estimate_sigma2_equals_raw_residual_formula():
    rng = np.random.default_rng(12)
    d = 3
    sizes = [0, 1, 4, 9, 30]
    beta = rng.normal(size=(5, d))
    X, y, inst = _rows(rng, sizes, d, beta, 1.7)
    G, b, q, n = _stats(X, y, inst, 5)
    for mean in (beta, rng.normal(size=(5, d)), np.zeros((5, d))):
        ref = _rss_raw(X, y, inst, mean) / max(sum(sizes) - d - 1, 1)
        got = estimate_sigma2(G, b, q, n, mean)
        assert got == pytest.approx(ref, rel=1e-10)
    # with posterior means, as used by the EB step
    post = posterior_given_hyper(G, b, np.eye(d), 1.0, 1e-3)
    got = estimate_sigma2(G, b, q, n, post.mean)
    assert got == pytest.approx(_rss_raw(X, y, inst, post.mean) / (sum(sizes) - d - 1), rel=1e-9)


def test_estimate_sigma2_guards():
    rng = np.random.default_rng(13)
    d = 3
    beta = rng.normal(size=(2, d))
    # ΣT = d + 1 < d + 2: the previous value is kept
    X, y, inst = _rows(rng, [2, 2], d, beta, 1.0)
    G, b, q, n = _stats(X, y, inst, 2)
    assert estimate_sigma2(G, b, q, n, beta, sigma2_prev=0.37) == 0.37
    # ΣT = d + 2: estimated with denominator 1
    X, y, inst = _rows(rng, [3, 2], d, beta, 1.0)
    G, b, q, n = _stats(X, y, inst, 2)
    got = estimate_sigma2(G, b, q, n, beta, sigma2_prev=0.37)
    assert got == pytest.approx(_rss_raw(X, y, inst, beta), rel=1e-10)
    # a perfect fit hits the floor
    y_exact = np.einsum("td,td->t", X, beta[inst])
    G, b, q, n = _stats(X, y_exact, inst, 2)
    assert estimate_sigma2(G, b, q, n, beta, sigma2_floor=0.05) == 0.05
    assert estimate_sigma2(G, b, q, n, beta) == pytest.approx(1e-6, rel=1e-12, abs=0)


def test_estimate_sigma2_consistent_with_fixed_Sigma():
    rng = np.random.default_rng(14)
    d, N, T, sigma2 = 3, 20, 500, 2.0
    Sigma = np.array([[1.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 1.0]])
    G, b, q, n, _ = _fast_stats(rng, N, T, d, Sigma, sigma2)
    assert n.sum() == 10_000
    post = posterior_given_hyper(G, b, Sigma, 1.0, 1e-3)
    est = estimate_sigma2(G, b, q, n, post.mean)
    assert abs(est / sigma2 - 1) < 0.05, est


# ----------------------------------------------------------------------------- empirical_bayes


def _eb_problem(seed=15, N=12, T=15):
    rng = np.random.default_rng(seed)
    d = 3
    v = np.array([1.0, 0.5, -0.5])
    Sigma_true = np.outer(v, v) + 0.5 * np.eye(d)
    G, b, q, n, _ = _fast_stats(rng, N, T, d, Sigma_true, 0.8, beta0=np.ones(d))
    # one starved instance with too few rows for OLS, one empty
    G[0] = np.outer([1.0, 0.2, 0.3], [1.0, 0.2, 0.3])
    b[0] = np.array([1.0, 0.2, 0.3]) * 0.7
    q[0], n[0] = 0.49, 1
    G[1], b[1], q[1], n[1] = 0.0, 0.0, 0.0, 0
    return G, b, q, n


def test_empirical_bayes_posterior_is_posterior_given_hyper():
    G, b, q, n = _eb_problem()
    res = empirical_bayes(G, b, q, n, 1e-3, rng=5)
    assert isinstance(res, EBResult)
    assert res.n_eff == 10
    post = posterior_given_hyper(G, b, res.Sigma, res.sigma2, 1e-3)
    for name in post._fields:
        np.testing.assert_allclose(
            getattr(res.posterior, name), getattr(post, name), rtol=1e-12, atol=1e-12
        )


def test_empirical_bayes_is_the_spec_sweep():
    """§3.5: Σ̂ first; σ̂² from the posterior means under (Σ̂, σ²_init); posterior under both
    (the paper's divisor; the default's is tested in test_sigma2_df.py)."""
    G, b, q, n = _eb_problem()
    lam, s2_init = 0.5, 1.3
    opts = EBOptions(sigma2_df="paper")
    res = empirical_bayes(G, b, q, n, lam, options=opts, sigma2_init=s2_init, rng=21)
    Sigma, gamma, n_eff = estimate_Sigma(G, b, sigma2=s2_init, rng=21)
    np.testing.assert_array_equal(res.Sigma, Sigma)
    assert res.gamma == gamma
    assert res.n_eff == n_eff
    mean = posterior_given_hyper(G, b, Sigma, s2_init, lam).mean
    rss = sum(q[j] - 2 * mean[j] @ b[j] + mean[j] @ G[j] @ mean[j] for j in range(len(q)))
    assert res.sigma2 == pytest.approx(rss / (n.sum() - 3 - 1), rel=1e-10)


def test_empirical_bayes_eb_iters_converge():
    G, b, q, n = _eb_problem(N=10, T=8)
    lam, s2 = 1e-3, 5.0
    vals = [s2] + [
        empirical_bayes(
            G, b, q, n, lam, sigma2_init=s2, options=EBOptions(eb_iters=k), rng=4
        ).sigma2
        for k in range(1, 9)
    ]
    # a manual fixed-point iteration gives the same sequence
    Sigma = empirical_bayes(G, b, q, n, lam, sigma2_init=s2, rng=4).Sigma
    s = s2
    for k in range(1, 9):
        post = posterior_given_hyper(G, b, Sigma, s, lam)
        used = K.hat_trace(G, post.Ctilde, post.A, post.shared_cov, s)
        s = estimate_sigma2(G, b, q, n, post.mean, sigma2_prev=s, used_df=used)
        assert vals[k] == pytest.approx(s, rel=1e-10)
    steps = np.abs(np.diff(vals))
    assert np.all(steps[1:] < steps[:-1]), steps
    assert steps[-1] < 0.05 * steps[0]


def test_empirical_bayes_frozen_hyperparameters():
    G, b, q, n = _eb_problem()
    init = np.diag([1.0, 2.0, 3.0])
    res = empirical_bayes(
        G,
        b,
        q,
        n,
        1.0,
        Sigma_init=init,
        sigma2_init=0.9,
        options=EBOptions(estimate_Sigma=False, estimate_sigma2=False),
    )
    np.testing.assert_array_equal(res.Sigma, init)
    assert res.sigma2 == 0.9
    post = posterior_given_hyper(G, b, init, 0.9, 1.0)
    np.testing.assert_allclose(res.posterior.mean, post.mean, rtol=1e-12, atol=1e-12)


def test_empirical_bayes_argument_validation():
    G, b, q, n = _eb_problem()
    with pytest.raises(ValueError, match="q must"):
        empirical_bayes(G, b, q[:-1], n, 1.0)
    with pytest.raises(ValueError, match="n must"):
        empirical_bayes(G, b, q, n[:-1], 1.0)
    with pytest.raises(ValueError, match="lam"):
        empirical_bayes(G, b, q, n, 0.0)
    with pytest.raises(ValueError, match="sigma2_init"):
        empirical_bayes(G, b, q, n, 1.0, sigma2_init=0.0)
    with pytest.raises(ValueError, match="Sigma_init"):
        empirical_bayes(G, b, q, n, 1.0, Sigma_init=np.eye(2))
    with pytest.raises(ValueError, match="shape"):
        empirical_bayes(G[:, :2], b, q, n, 1.0)


BAD_OPTIONS = [
    ({"threshold": "auto"}, ValueError, "threshold"),
    ({"threshold": -0.1}, ValueError, "threshold"),
    ({"threshold": np.nan}, ValueError, "threshold"),
    ({"threshold": True}, TypeError, "threshold"),
    ({"cv_splits": 0}, ValueError, "cv_splits"),
    ({"cv_splits": 2.5}, ValueError, "cv_splits"),
    ({"eb_iters": 0}, ValueError, "eb_iters"),
    ({"eb_iters": True}, ValueError, "eb_iters"),
    ({"min_instances_for_sigma": 0}, ValueError, "min_instances_for_sigma"),
    ({"scatter_normalization": "N"}, ValueError, "scatter_normalization"),
    ({"eig_floor": -1e-6}, ValueError, "eig_floor"),
    ({"sigma2_floor": 0.0}, ValueError, "sigma2_floor"),
    ({"ols_ridge": -1.0}, ValueError, "ols_ridge"),
    ({"rank_tol": -1.0}, ValueError, "rank_tol"),
]


@pytest.mark.parametrize(("kw", "exc", "name"), BAD_OPTIONS, ids=[str(o[0]) for o in BAD_OPTIONS])
def test_eb_options_validation_names_the_option(kw, exc, name):
    with pytest.raises(exc, match=name):
        EBOptions(**kw)


def test_eb_options_defaults_and_dict():
    o = EBOptions()
    assert o.threshold == "cv"
    assert o.cv_splits == 50
    assert o.threshold_diagonal is False
    assert o.scatter_normalization == "n-1"
    assert o.eig_floor == 1e-6
    assert o.sigma2_floor == 1e-6
    assert o.min_instances_for_sigma == 2
    assert o.eb_iters == 1
    assert o.debias_ols_noise is False
    d = o.to_dict()
    assert "_kernel" not in d
    assert d["threshold"] == "cv"
    assert EBOptions(threshold=0.25).threshold == 0.25
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.eb_iters = 2  # type: ignore[misc]


# ----------------------------------------------------------------------------- helper validation


@pytest.mark.parametrize("which", ["q", "n", "mean"])
def test_estimate_sigma2_rejects_mismatched_shapes(which):
    rng = np.random.default_rng(16)
    G = np.stack([10.0 * np.eye(2)] * 3)
    b = rng.normal(size=(3, 2))
    args = {"q": np.array([5.0, 6.0, 7.0]), "n": np.array([10, 10, 10]), "mean": np.zeros((3, 2))}
    # too-short views of longer buffers, so that an unchecked kernel reads owned memory only
    short = {
        "q": np.array([5.0, 6.0, 7.0])[:1],
        "n": np.array([10, 10, 10])[:2],
        "mean": np.zeros((3, 2))[:1],
    }
    args[which] = short[which]
    with pytest.raises(ValueError, match=which):
        estimate_sigma2(G, b, args["q"], args["n"], args["mean"])


def test_bickel_levina_threshold_validation():
    B = np.random.default_rng(17).normal(size=(30, 3))
    with pytest.raises(ValueError, match="n_splits"):
        bickel_levina_threshold(B, n_splits=0)
    B[3, 1] = np.nan
    with pytest.raises(ValueError, match="B"):
        bickel_levina_threshold(B)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: threshold_covariance(np.ones((2, 3)), 0.1), "S"),
        (lambda: threshold_covariance(np.eye(2), -0.1), "gamma"),
        (lambda: threshold_covariance(np.eye(2), "x"), "gamma"),
        (lambda: psd_project(np.ones((3, 2))), "S"),
        (lambda: psd_project(np.eye(2), -1.0), "eig_floor"),
        (lambda: scatter_covariance(np.array([[1.0, np.nan], [0.0, 1.0]])), "B"),
        (lambda: scatter_covariance(np.ones(3)), "B"),
    ],
)
def test_low_level_helpers_validate(call, name):
    with pytest.raises((ValueError, TypeError), match=name):
        call()
