"""Exactness tests of the closed-form hierarchical posterior (spec ebm.md §2 and §9 items 1–6).

Every fast path of ``hierbandit.stats.hierarchical`` is compared with a slow, obviously correct
computation written here from the spec's formulas with plain numpy/scipy:

* the joint Gaussian in precision form (spec §2.9), inverted brute force;
* the joint Gaussian in covariance ("data-space") form, conditioning the stacked prior of
  (β₀, β₁, …, β_N) on all the rewards; it needs no Σ⁻¹, so it also covers a singular Σ;
* the textbook formulas (4.1)/(4.2) with an explicit Σ⁻¹ and explicit T×T matrices V_j.

No reference below calls a helper of the package.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
import xarray as xr

from hierbandit.stats import (
    HierarchicalPosterior,
    IncrementalHierarchicalPosterior,
    hierarchical_posterior,
    posterior_cross_covariances,
    posterior_given_hyper,
)

# ----------------------------------------------------------------------------- problem makers


def _random_spd(rng: np.random.Generator, d: int, ridge: float = 0.5) -> np.ndarray:
    L = rng.normal(size=(d, d))
    return L @ L.T / d + ridge * np.eye(d)


def _random_rows(
    rng: np.random.Generator, sizes: list[int], d: int, sigma2: float, beta_scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw rows (X, y, instance) with ``sizes[j]`` rows for instance j, instances interleaved."""
    inst = np.repeat(np.arange(len(sizes)), sizes)
    rng.shuffle(inst)
    T = inst.size
    X = rng.normal(size=(T, d)) + 0.3
    beta = beta_scale * rng.normal(size=(len(sizes), d)) + 0.5
    y = np.einsum("td,td->t", X, beta[inst]) + np.sqrt(sigma2) * rng.normal(size=T)
    return X, y, inst


def _stats_by_hand(X: np.ndarray, y: np.ndarray, inst: np.ndarray, N: int):
    """G_j = X_jᵀX_j and b_j = X_jᵀy_j by an explicit loop over instances."""
    d = X.shape[1]
    G = np.zeros((N, d, d))
    b = np.zeros((N, d))
    for j in range(N):
        Xj, yj = X[inst == j], y[inst == j]
        G[j] = Xj.T @ Xj
        b[j] = Xj.T @ yj
    return G, b


# ----------------------------------------------------------------------------- references


def _joint_precision_reference(G, b, Sigma, sigma2, lam):
    """Spec §2.9: N((Q⁻¹h), Q⁻¹) with the arrow-structured precision Q.

    Returns the stacked mean (N+1, d) and covariance blocks (N+1, N+1, d, d); block 0 is β₀.
    """
    N, d = b.shape
    Si = np.linalg.inv(Sigma)
    n = (N + 1) * d
    Q = np.zeros((n, n))
    h = np.zeros(n)
    Q[:d, :d] = lam * np.eye(d) + N * Si
    for j in range(1, N + 1):
        s = slice(j * d, (j + 1) * d)
        Q[:d, s] = -Si
        Q[s, :d] = -Si
        Q[s, s] = Si + G[j - 1] / sigma2
        h[s] = b[j - 1] / sigma2
    cov = np.linalg.inv(Q)
    mean = cov @ h
    blocks = cov.reshape(N + 1, d, N + 1, d).transpose(0, 2, 1, 3)
    return mean.reshape(N + 1, d), blocks


def _joint_dataspace_reference(X, y, inst, N, Sigma, sigma2, lam):
    """Gaussian conditioning of θ = (β₀, β₁..β_N) on y, in covariance form (no Σ⁻¹ needed).

    Prior: Cov(β₀) = λ⁻¹I, Cov(β_a, β_b) = λ⁻¹I + 1[a = b ≥ 1]Σ; y = Hθ + ε, ε ~ N(0, σ²I).
    """
    T, d = X.shape
    n = (N + 1) * d
    Ct = np.kron(np.ones((N + 1, N + 1)), np.eye(d) / lam)
    for j in range(1, N + 1):
        Ct[j * d : (j + 1) * d, j * d : (j + 1) * d] += Sigma
    H = np.zeros((T, n))
    for t in range(T):
        j = inst[t] + 1
        H[t, j * d : (j + 1) * d] = X[t]
    Cty = Ct @ H.T
    Cyy = H @ Cty + sigma2 * np.eye(T)
    if T:
        cf = sla.cho_factor(Cyy)
        mean = Cty @ sla.cho_solve(cf, y)
        cov = Ct - Cty @ sla.cho_solve(cf, Cty.T)
    else:
        mean, cov = np.zeros(n), Ct
    blocks = cov.reshape(N + 1, d, N + 1, d).transpose(0, 2, 1, 3)
    return mean.reshape(N + 1, d), blocks


def _textbook(G, b, Sigma, sigma2, lam):
    """(4.1), Step 2 with Lemma A.2 and (4.2), using Σ⁻¹ explicitly."""
    N, d = b.shape
    Si = np.linalg.inv(Sigma)
    Ct = np.array([np.linalg.inv(G[j] + sigma2 * Si) for j in range(N)])
    XVX = sum(Si - sigma2 * Si @ Ct[j] @ Si for j in range(N))
    XVy = sum(Si @ Ct[j] @ b[j] for j in range(N))
    Phi = np.linalg.inv(XVX + lam * np.eye(d))
    beta0 = Phi @ XVy
    mean = np.array([sigma2 * Ct[j] @ Si @ beta0 + Ct[j] @ b[j] for j in range(N)])
    cov = np.array([sigma2 * Ct[j] + sigma2**2 * Ct[j] @ Si @ Phi @ Si @ Ct[j] for j in range(N)])
    return beta0, Phi, mean, cov, Ct


def _close(actual, desired, rtol):
    """Relative comparison scaled by the size of the reference (entries near zero included)."""
    actual = np.asarray(actual)
    desired = np.asarray(desired)
    scale = max(1.0, float(np.max(np.abs(desired)))) if desired.size else 1.0
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * scale)


def _assert_matches_joint(post: HierarchicalPosterior, mean, blocks, rtol):
    N = post.mean.shape[0]
    _close(post.shared_mean, mean[0], rtol)
    _close(post.shared_cov, blocks[0, 0], rtol)
    _close(post.mean, mean[1:], rtol)
    for j in range(N):
        _close(post.cov[j], blocks[j + 1, j + 1], rtol)
    with_shared, between = posterior_cross_covariances(post)
    for j in range(N):
        _close(with_shared[j], blocks[j + 1, 0], rtol)
        for l in range(N):
            _close(between[j, l], blocks[j + 1, l + 1], rtol)


# (d, instance sizes, sigma2, lam): sizes cover 0, 1, < d and ≫ d
CASES = [
    (1, [0, 1, 4, 40], 0.7, 1.0),
    (1, [3, 0, 1], 2.5, 1e-3),
    (2, [0, 1, 1, 30, 5, 2], 0.7, 1e-3),
    (2, [60, 0], 1.9, 1.0),
    (3, [0, 1, 2, 10, 50], 0.7, 1.0),
    (3, [0, 1, 2, 10, 50], 0.7, 1e-3),
    (3, [2, 2, 1, 0, 0, 1], 3.0, 1e-3),
    (5, [0, 1, 4, 5, 80, 3], 0.4, 1.0),
    (5, [0, 1, 4, 5, 80, 3], 1.6, 1e-3),
]


@pytest.mark.parametrize(("d", "sizes", "sigma2", "lam"), CASES)
def test_matches_brute_force_joint_precision(d, sizes, sigma2, lam):
    rng = np.random.default_rng(1000 + 10 * d + len(sizes))
    N = len(sizes)
    X, y, inst = _random_rows(rng, sizes, d, sigma2)
    G, b = _stats_by_hand(X, y, inst, N)
    Sigma = _random_spd(rng, d)
    post = posterior_given_hyper(G, b, Sigma, sigma2, lam)
    mean, blocks = _joint_precision_reference(G, b, Sigma, sigma2, lam)
    _assert_matches_joint(post, mean, blocks, rtol=1e-8)


@pytest.mark.parametrize(("d", "sizes", "sigma2", "lam"), CASES)
def test_matches_dataspace_conditioning(d, sizes, sigma2, lam):
    """Same check against the covariance-form reference, raw rows through hierarchical_posterior."""
    rng = np.random.default_rng(2000 + 10 * d + len(sizes))
    N = len(sizes)
    X, y, inst = _random_rows(rng, sizes, d, sigma2)
    Sigma = _random_spd(rng, d)
    ds = hierarchical_posterior(X, y, inst, N, Sigma, sigma2, lam)
    mean, blocks = _joint_dataspace_reference(X, y, inst, N, Sigma, sigma2, lam)
    # λ = 1e-3 puts 1e3-sized prior entries into a covariance-form subtraction: looser tolerance
    rtol = 1e-8 if lam == 1.0 else 1e-6
    _close(ds["shared_mean"].values, mean[0], rtol)
    _close(ds["shared_cov"].values, blocks[0, 0], rtol)
    _close(ds["mean"].values, mean[1:], rtol)
    for j in range(N):
        _close(ds["cov"].values[j], blocks[j + 1, j + 1], rtol)


def test_cross_covariances_are_nonzero_and_shapes():
    rng = np.random.default_rng(7)
    d, sizes = 3, [0, 1, 3, 10, 30]
    X, y, inst = _random_rows(rng, sizes, d, 0.7)
    G, b = _stats_by_hand(X, y, inst, len(sizes))
    post = posterior_given_hyper(G, b, _random_spd(rng, d), 0.7, 1e-3)
    with_shared, between = posterior_cross_covariances(post)
    assert with_shared.shape == (5, d, d)
    assert between.shape == (5, 5, d, d)
    # instances are not a-posteriori independent (spec §2.5)
    assert np.max(np.abs(between[0, 1])) > 1e-3
    np.testing.assert_array_equal(between[2, 2], post.cov[2])
    np.testing.assert_allclose(between[1, 3], between[3, 1].T, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- Lemma A.2, (4.3)


@pytest.mark.parametrize(("d", "sizes", "sigma2", "lam"), CASES)
def test_lemma_A2_r_identity_and_woodbury(d, sizes, sigma2, lam):
    rng = np.random.default_rng(3000 + 10 * d + len(sizes))
    N = len(sizes)
    X, y, inst = _random_rows(rng, sizes, d, sigma2)
    G, b = _stats_by_hand(X, y, inst, N)
    Sigma = _random_spd(rng, d)
    post = posterior_given_hyper(G, b, Sigma, sigma2, lam)
    Si = np.linalg.inv(Sigma)
    XVX_sum = np.zeros((d, d))
    XVy_sum = np.zeros(d)
    for j in range(N):
        Xj, yj = X[inst == j], y[inst == j]
        T = Xj.shape[0]
        V = Xj @ Sigma @ Xj.T + sigma2 * np.eye(T)
        Vinv = np.linalg.inv(V)
        XVX = Xj.T @ Vinv @ Xj
        XVy = Xj.T @ Vinv @ yj
        # Lemma A.2 and the r-identity with the package's C̃_j
        Ct = post.Ctilde[j]
        _close(XVX, Si - sigma2 * Si @ Ct @ Si, 1e-8)
        _close(XVy, Si @ Ct @ b[j], 1e-8)
        # (4.3) Woodbury with the package's C̃_j
        _close(Vinv, np.eye(T) / sigma2 - Xj @ Ct @ Xj.T / sigma2, 1e-8)
        # C̃_j and A_j against their definitions
        _close(Ct, np.linalg.inv(G[j] + sigma2 * Si), 1e-8)
        _close(post.A[j], sigma2 * Ct @ Si, 1e-8)
        XVX_sum += XVX
        XVy_sum += XVy
    _close(post.precision - lam * np.eye(d), XVX_sum, 1e-8)
    _close(post.r, XVy_sum, 1e-8)


# ----------------------------------------------------------------------------- textbook vs package


@pytest.mark.parametrize(("d", "sizes", "sigma2", "lam"), CASES)
def test_textbook_formulas_agree_for_well_conditioned_sigma(d, sizes, sigma2, lam):
    rng = np.random.default_rng(4000 + 10 * d + len(sizes))
    N = len(sizes)
    X, y, inst = _random_rows(rng, sizes, d, sigma2)
    G, b = _stats_by_hand(X, y, inst, N)
    Sigma = _random_spd(rng, d, ridge=1.0)
    assert np.linalg.cond(Sigma) < 100
    post = posterior_given_hyper(G, b, Sigma, sigma2, lam)
    beta0, Phi, mean, cov, Ct = _textbook(G, b, Sigma, sigma2, lam)
    _close(post.shared_mean, beta0, 1e-8)
    _close(post.shared_cov, Phi, 1e-8)
    _close(post.mean, mean, 1e-8)
    _close(post.cov, cov, 1e-8)
    _close(post.Ctilde, Ct, 1e-8)


def _singular_problem():
    rng = np.random.default_rng(55)
    d, sizes, sigma2, lam = 3, [0, 1, 2, 6, 25], 0.7, 1.0
    X, y, inst = _random_rows(rng, sizes, d, sigma2)
    v = rng.normal(size=d)
    return X, y, inst, len(sizes), np.outer(v, v), sigma2, lam


def _flatten_dataset(ds: xr.Dataset) -> np.ndarray:
    return np.concatenate(
        [ds[k].values.ravel() for k in ("shared_mean", "shared_cov", "mean", "cov")]
    )


def _flatten_reference(mean, blocks) -> np.ndarray:
    N = mean.shape[0] - 1
    covs = np.array([blocks[j, j] for j in range(1, N + 1)])
    return np.concatenate([mean[0], blocks[0, 0].ravel(), mean[1:].ravel(), covs.ravel()])


def test_singular_sigma_is_exact_and_the_limit_of_sigma_plus_eps():
    X, y, inst, N, Sigma0, sigma2, lam = _singular_problem()
    assert np.linalg.matrix_rank(Sigma0) == 1
    pkg0 = _flatten_dataset(hierarchical_posterior(X, y, inst, N, Sigma0, sigma2, lam))
    assert np.all(np.isfinite(pkg0))
    # exact at ε = 0 (covariance-form reference handles a singular Σ directly)
    ref0 = _flatten_reference(*_joint_dataspace_reference(X, y, inst, N, Sigma0, sigma2, lam))
    _close(pkg0, ref0, 1e-9)
    # limit of Σ + εI: error decreasing roughly linearly over ε = 1e-2 … 1e-8
    eps = 10.0 ** -np.arange(2, 9)
    errs = []
    for e in eps:
        Se = Sigma0 + e * np.eye(3)
        ref = _flatten_reference(*_joint_dataspace_reference(X, y, inst, N, Se, sigma2, lam))
        errs.append(np.max(np.abs(pkg0 - ref)))
        # the package at Σ + εI agrees with the reference there too
        pkg_e = _flatten_dataset(hierarchical_posterior(X, y, inst, N, Se, sigma2, lam))
        _close(pkg_e, ref, 1e-7)
    errs = np.array(errs)
    assert np.all(np.diff(errs) < 0), errs
    slopes = np.diff(np.log10(errs)) / np.diff(np.log10(eps))
    assert np.all((slopes > 0.8) & (slopes < 1.2)), slopes
    assert errs[-1] < 1e-6


def test_singular_sigma_textbook_form_breaks_down_but_package_does_not():
    """Documents why the inverse-free form is used: Σ⁻¹ of bbᵀ + 1e-8 I is hopeless."""
    X, y, inst, N, Sigma0, sigma2, lam = _singular_problem()
    Se = Sigma0 + 1e-8 * np.eye(3)
    G, b = _stats_by_hand(X, y, inst, N)
    ref = _joint_dataspace_reference(X, y, inst, N, Se, sigma2, lam)
    post = posterior_given_hyper(G, b, Se, sigma2, lam)
    pkg_err = np.max(np.abs(post.mean - ref[0][1:]))
    textbook_err = np.max(np.abs(_textbook(G, b, Se, sigma2, lam)[2] - ref[0][1:]))
    assert pkg_err < 1e-10
    assert textbook_err > 100 * max(pkg_err, 1e-12)


# ----------------------------------------------------------------------------- special cases


@pytest.mark.parametrize("lam", [1.0, 1e-3])
def test_empty_instance_gets_predictive(lam):
    rng = np.random.default_rng(11)
    d, sizes = 3, [5, 0, 20, 0, 1]
    X, y, inst = _random_rows(rng, sizes, d, 1.3)
    G, b = _stats_by_hand(X, y, inst, len(sizes))
    Sigma = _random_spd(rng, d)
    post = posterior_given_hyper(G, b, Sigma, 1.3, lam)
    for j in (1, 3):
        _close(post.mean[j], post.shared_mean, 1e-12)
        _close(post.cov[j], Sigma + post.shared_cov, 1e-12)
        _close(post.A[j], np.eye(d), 1e-12)
        _close(post.Ctilde[j], Sigma / 1.3, 1e-12)


def test_no_data_at_all_gives_the_prior():
    d, N, lam = 2, 3, 0.5
    Sigma = np.array([[1.0, 0.3], [0.3, 2.0]])
    post = posterior_given_hyper(np.zeros((N, d, d)), np.zeros((N, d)), Sigma, 0.9, lam)
    np.testing.assert_allclose(post.shared_mean, 0.0, atol=1e-15)
    np.testing.assert_allclose(post.shared_cov, np.eye(d) / lam, rtol=1e-14)
    np.testing.assert_allclose(
        post.cov, np.broadcast_to(Sigma + np.eye(d) / lam, (N, d, d)), rtol=1e-14
    )


def test_eq_4_4_typo_guard():
    """With σ² ≠ 1 the literal (4.4) prediction differs from (5.1)+(4.2); the package uses (4.2)."""
    rng = np.random.default_rng(12)
    d, sizes, sigma2, lam = 3, [0, 1, 3, 10, 30], 0.7, 1e-3
    X, y, inst = _random_rows(rng, sizes, d, sigma2)
    G, b = _stats_by_hand(X, y, inst, len(sizes))
    Sigma = _random_spd(rng, d)
    post = posterior_given_hyper(G, b, Sigma, sigma2, lam)
    beta0, _, mean_42, _, Ct = _textbook(G, b, Sigma, sigma2, lam)
    Si = np.linalg.inv(Sigma)
    for _ in range(10):
        x = rng.normal(size=d)
        for j in range(len(sizes)):
            mu_42 = x @ mean_42[j]
            mu_44 = x @ Ct[j] @ Si @ beta0 + x @ Ct[j] @ b[j] / sigma2
            assert abs(mu_42 - mu_44) > 1e-3 * max(1.0, abs(mu_42))
            assert x @ post.mean[j] == pytest.approx(mu_42, rel=1e-9, abs=1e-9)


# ----------------------------------------------------------------------------- incremental


def _compare_posteriors(a: HierarchicalPosterior, b: HierarchicalPosterior, rtol: float):
    for name in HierarchicalPosterior._fields:
        _close(getattr(a, name), getattr(b, name), rtol)


@pytest.mark.parametrize(("d", "lam", "sigma2"), [(3, 1.0, 0.7), (2, 1e-3, 2.0), (5, 0.1, 1.0)])
def test_incremental_equals_batch(d, lam, sigma2):
    rng = np.random.default_rng(40 + d)
    N, n_obs = 5, 300
    Sigma = _random_spd(rng, d)
    beta = rng.normal(size=(N, d))
    # instance 4 never gets data; instance 0 gets few rows
    p = np.array([0.02, 0.3, 0.3, 0.38, 0.0])
    inst = rng.choice(N, size=n_obs, p=p)
    X = rng.normal(size=(n_obs, d))
    y = np.einsum("td,td->t", X, beta[inst]) + np.sqrt(sigma2) * rng.normal(size=n_obs)

    inc = IncrementalHierarchicalPosterior(N, d, Sigma, sigma2, lam, recompute_every=None)
    for t in range(n_obs):
        inc.add(int(inst[t]), X[t], float(y[t]))
    assert inc.n_added == n_obs
    G, b = _stats_by_hand(X, y, inst, N)
    np.testing.assert_allclose(inc.G, G, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(inc.b, b, rtol=1e-12, atol=1e-10)
    batch = posterior_given_hyper(G, b, Sigma, sigma2, lam)
    _compare_posteriors(inc.posterior(), batch, 1e-10)

    # a different order of the same observations
    inc2 = IncrementalHierarchicalPosterior(N, d, Sigma, sigma2, lam, recompute_every=None)
    for t in rng.permutation(n_obs):
        inc2.add(int(inst[t]), X[t], float(y[t]))
    _compare_posteriors(inc2.posterior(), batch, 1e-10)


def test_incremental_intermediate_states_and_recompute():
    rng = np.random.default_rng(77)
    d, N, sigma2, lam = 2, 3, 0.5, 1.0
    Sigma = _random_spd(rng, d)
    inc = IncrementalHierarchicalPosterior(N, d, Sigma, sigma2, lam, recompute_every=None)
    inc_r = IncrementalHierarchicalPosterior(N, d, Sigma, sigma2, lam, recompute_every=7)
    X = rng.normal(size=(40, d))
    y = rng.normal(size=40)
    inst = rng.integers(0, N, size=40)
    for t in range(40):
        inc.add(int(inst[t]), X[t], float(y[t]))
        inc_r.add(int(inst[t]), X[t], float(y[t]))
        G, b = _stats_by_hand(X[: t + 1], y[: t + 1], inst[: t + 1], N)
        mean, blocks = _joint_precision_reference(G, b, Sigma, sigma2, lam)
        for post in (inc.posterior(), inc_r.posterior()):
            _close(post.shared_mean, mean[0], 1e-10)
            _close(post.shared_cov, blocks[0, 0], 1e-10)
            _close(post.mean, mean[1:], 1e-10)


def test_incremental_rejects_bad_input_without_changing_state():
    inc = IncrementalHierarchicalPosterior(2, 2, np.eye(2), 1.0, 1.0)
    before = inc.posterior()
    with pytest.raises(ValueError, match="instance"):
        inc.add(2, [1.0, 0.0], 1.0)
    with pytest.raises(TypeError, match="instance"):
        inc.add(1.0, [1.0, 0.0], 1.0)
    with pytest.raises(ValueError, match="x"):
        inc.add(0, [1.0, np.nan], 1.0)
    with pytest.raises(ValueError, match="x"):
        inc.add(0, [1.0, 0.0, 0.0], 1.0)
    with pytest.raises(ValueError, match="y"):
        inc.add(0, [1.0, 0.0], np.inf)
    with pytest.raises(ValueError, match="lam"):
        IncrementalHierarchicalPosterior(2, 2, np.eye(2), 1.0, 0.0)
    _compare_posteriors(inc.posterior(), before, 0.0)
    assert inc.n_added == 0


# ----------------------------------------------------------------------------- dataset API


def test_hierarchical_posterior_dataset_layout():
    rng = np.random.default_rng(5)
    d, sizes = 3, [0, 2, 9, 40]
    X, y, inst = _random_rows(rng, sizes, d, 0.8)
    ds = hierarchical_posterior(X, y, inst, len(sizes), _random_spd(rng, d), 0.8, 1e-3)
    assert isinstance(ds, xr.Dataset)
    assert set(ds.data_vars) == {"mean", "cov", "shared_mean", "shared_cov"}
    assert ds["mean"].dims == ("instance", "feature")
    assert ds["cov"].dims == ("instance", "feature", "feature_")
    assert ds["shared_mean"].dims == ("feature",)
    assert ds["shared_cov"].dims == ("feature", "feature_")
    assert ds.sizes == {"instance": 4, "feature": 3, "feature_": 3}
    covs = np.concatenate([ds["cov"].values, ds["shared_cov"].values[None]])
    for C in covs:
        np.testing.assert_array_equal(C, C.T)
        assert np.linalg.eigvalsh(C).min() > 0
    for v in ds.data_vars.values():
        assert v.dtype == np.float64
        assert np.all(np.isfinite(v.values))


# ----------------------------------------------------------------------------- adaptive data


def test_adaptively_collected_data_posterior_is_order_free():
    """Rows chosen greedily from the running posterior: only the rows matter, not their order."""
    rng = np.random.default_rng(99)
    d, N, sigma2, lam = 2, 4, 0.6, 1e-3
    Sigma = _random_spd(rng, d)
    beta = rng.normal(size=(N, d))
    inc = IncrementalHierarchicalPosterior(N, d, Sigma, sigma2, lam, recompute_every=None)
    rows_X, rows_y, rows_i = [], [], []
    for _ in range(80):
        j = int(rng.integers(N))
        cands = rng.normal(size=(5, d))
        post = inc.posterior()
        score = cands @ post.mean[j] + np.sqrt(np.einsum("cd,de,ce->c", cands, post.cov[j], cands))
        x = cands[np.argmax(score)]
        yv = float(x @ beta[j] + np.sqrt(sigma2) * rng.normal())
        inc.add(j, x, yv)
        rows_X.append(x)
        rows_y.append(yv)
        rows_i.append(j)
    X, y, inst = np.array(rows_X), np.array(rows_y), np.array(rows_i)
    ds = hierarchical_posterior(X, y, inst, N, Sigma, sigma2, lam)
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(len(y))
        ds_p = hierarchical_posterior(X[perm], y[perm], inst[perm], N, Sigma, sigma2, lam)
        for k in ds.data_vars:
            _close(ds_p[k].values, ds[k].values, 1e-11)
    G, b = _stats_by_hand(X, y, inst, N)
    mean, blocks = _joint_precision_reference(G, b, Sigma, sigma2, lam)
    _close(ds["mean"].values, mean[1:], 1e-8)
    _close(ds["shared_cov"].values, blocks[0, 0], 1e-8)


# ----------------------------------------------------------------------------- validation


def _valid_args():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 2))
    y = rng.normal(size=6)
    inst = np.array([0, 1, 2, 0, 1, 2])
    return {
        "X": X,
        "y": y,
        "instance": inst,
        "n_instances": 3,
        "Sigma": np.eye(2),
        "sigma2": 1.0,
        "lam": 1e-3,
    }


def _with(**kw):
    args = _valid_args()
    args.update(kw)
    return args


def _nan_X():
    X = _valid_args()["X"]
    X[2, 1] = np.nan
    return X


def _inf_X():
    X = _valid_args()["X"]
    X[0, 0] = -np.inf
    return X


def _nan_y():
    y = _valid_args()["y"]
    y[3] = np.nan
    return y


def _inf_y():
    y = _valid_args()["y"]
    y[1] = np.inf
    return y


INVALID = [
    ("X 1-D", _with(X=np.ones(6)), ValueError, "X"),
    ("X 3-D", _with(X=np.ones((6, 2, 1))), ValueError, "X"),
    ("X strings", _with(X=np.full((6, 2), "a")), TypeError, "X"),
    ("X NaN", _with(X=_nan_X()), ValueError, "X"),
    ("X inf", _with(X=_inf_X()), ValueError, "X"),
    ("y length", _with(y=np.ones(5)), ValueError, "y"),
    ("y 2-D", _with(y=np.ones((6, 1))), ValueError, "y"),
    ("y NaN", _with(y=_nan_y()), ValueError, "y"),
    ("y inf", _with(y=_inf_y()), ValueError, "y"),
    ("instance length", _with(instance=np.array([0, 1, 2])), ValueError, "instance"),
    ("instance too large", _with(instance=np.array([0, 1, 3, 0, 1, 2])), ValueError, "instance"),
    ("instance negative", _with(instance=np.array([0, -1, 2, 0, 1, 2])), ValueError, "instance"),
    ("instance float", _with(instance=np.array([0, 0.5, 2, 0, 1, 2])), TypeError, "instance"),
    ("instance NaN", _with(instance=np.array([0, np.nan, 2, 0, 1, 2])), TypeError, "instance"),
    ("instance strings", _with(instance=np.array(list("abcabc"))), TypeError, "instance"),
    ("n_instances 0", _with(n_instances=0), ValueError, "n_instances"),
    ("n_instances float", _with(n_instances=3.5), TypeError, "n_instances"),
    ("Sigma shape", _with(Sigma=np.eye(3)), ValueError, "Sigma"),
    ("Sigma asymmetric", _with(Sigma=np.array([[1.0, 0.5], [0.0, 1.0]])), ValueError, "Sigma"),
    ("Sigma not PSD", _with(Sigma=np.array([[1.0, 2.0], [2.0, 1.0]])), ValueError, "Sigma"),
    ("Sigma negative", _with(Sigma=-np.eye(2)), ValueError, "Sigma"),
    ("Sigma NaN", _with(Sigma=np.array([[1.0, np.nan], [np.nan, 1.0]])), ValueError, "Sigma"),
    ("sigma2 zero", _with(sigma2=0.0), ValueError, "sigma2"),
    ("sigma2 negative", _with(sigma2=-1.0), ValueError, "sigma2"),
    ("sigma2 NaN", _with(sigma2=np.nan), ValueError, "sigma2"),
    ("sigma2 string", _with(sigma2="1"), TypeError, "sigma2"),
    ("lam negative", _with(lam=-1e-3), ValueError, "lam"),
    ("lam inf", _with(lam=np.inf), ValueError, "lam"),
]


@pytest.mark.parametrize(
    ("args", "exc", "name"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_inputs_raise_naming_the_argument(args, exc, name):
    with pytest.raises(exc, match=rf"\b{name}\b"):
        hierarchical_posterior(**args)


def test_valid_reference_call_and_integral_float_ids_work():
    args = _valid_args()
    ds = hierarchical_posterior(**args)
    ds_f = hierarchical_posterior(**_with(instance=args["instance"].astype(float)))
    for k in ds.data_vars:
        np.testing.assert_array_equal(ds[k].values, ds_f[k].values)


def test_posterior_given_hyper_validation():
    G = np.zeros((3, 2, 2))
    b = np.zeros((3, 2))
    with pytest.raises(ValueError, match="G"):
        posterior_given_hyper(np.zeros((3, 2, 3)), b, np.eye(2), 1.0, 1.0)
    with pytest.raises(ValueError, match="b"):
        posterior_given_hyper(G, np.zeros(3), np.eye(2), 1.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        posterior_given_hyper(G, np.full((3, 2), np.nan), np.eye(2), 1.0, 1.0)
    with pytest.raises(ValueError, match="Sigma"):
        posterior_given_hyper(G, b, np.eye(3), 1.0, 1.0)
    with pytest.raises(ValueError, match="sigma2"):
        posterior_given_hyper(G, b, np.eye(2), 0.0, 1.0)
    with pytest.raises(ValueError, match="lam"):
        posterior_given_hyper(G, b, np.eye(2), 1.0, -1.0)
    # λ = 0 (flat hyperprior) without data identifying β₀ is improper
    with pytest.raises(ValueError, match="lam"):
        posterior_given_hyper(G, b, np.eye(2), 1.0, 0.0)


def test_flat_hyperprior_with_identifying_data_matches_reference():
    rng = np.random.default_rng(8)
    d, sizes, sigma2 = 2, [10, 20, 0], 0.9
    X, y, inst = _random_rows(rng, sizes, d, sigma2)
    G, b = _stats_by_hand(X, y, inst, 3)
    Sigma = _random_spd(rng, d)
    post = posterior_given_hyper(G, b, Sigma, sigma2, 0.0)
    mean, blocks = _joint_precision_reference(G, b, Sigma, sigma2, 0.0)
    _assert_matches_joint(post, mean, blocks, rtol=1e-8)
