"""Tests of the online type-II ML step (hierbandit.stats.online_ml).

References (none calls a helper of the package except ``suffstats``):

* the collapsed likelihood as ``scipy.stats.multivariate_normal.logpdf`` of the stacked rewards
  under N(Xm₀, blockdiag(X_jΣX_jᵀ + σ²I) + XS₀Xᵀ), built from the raw rows;
* central finite differences of that density for the gradient;
* the Fisher information ½tr(W⁻¹∂W W⁻¹∂W) with the explicit T×T matrices;
* the offline optimiser ``fit_type2_ml(beta0="integrate")`` (L-BFGS-B + Newton polish on the same
  objective, its own gradient checked here against finite differences too), and statsmodels'
  REML fit (``MixedLM(..., exog_re=X).fit(reml=True)``), which the collapsed likelihood becomes as
  the shared mean's prior gets flat.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from hierbandit.stats import EBOptions, collapsed_loglik, fit_type2_ml, suffstats
from hierbandit.stats import online_ml as O
from hierbandit.stats.marginal import _check_stats, _pack, _profiled

SIZES = [0, 1, 2, 3, 5, 8, 12, 4, 6, 9, 0, 7]  # empty instances and n_j < d = 3


def _rows(rng, sizes, d, Sigma=None, sigma2=0.6, mean=None):
    """Rows of a hierarchical linear model: instance labels, X (intercept first), y."""
    N = len(sizes)
    inst = np.repeat(np.arange(N), sizes)
    T = inst.size
    X = np.column_stack([np.ones(T), rng.normal(size=(T, d - 1))]) if d > 1 else np.ones((T, 1))
    if Sigma is None:
        A = rng.normal(size=(d, d))
        Sigma = A @ A.T / d + 0.4 * np.eye(d)
    mean = rng.normal(size=d) if mean is None else mean
    beta = rng.multivariate_normal(mean, Sigma, size=N)
    y = np.einsum("td,td->t", X, beta[inst]) + np.sqrt(sigma2) * rng.normal(size=T)
    return inst, X, y


def _stats(inst, X, y, N):
    return suffstats(X, y, inst, N)


def _brute_collapsed(inst, X, y, N, Sigma, sigma2, m0, S0):
    """log N(y; Xm₀, blockdiag(X_jΣX_jᵀ + σ²I) + XS₀Xᵀ) with explicit T×T matrices."""
    W = _W(inst, X, N, Sigma, sigma2, S0)
    return multivariate_normal(X @ m0, W, allow_singular=False).logpdf(y)


def _W(inst, X, N, Sigma, sigma2, S0):
    T = len(y_index := np.arange(len(inst)))
    W = sigma2 * np.eye(T) + X @ S0 @ X.T
    for j in range(N):
        idx = y_index[inst == j]
        W[np.ix_(idx, idx)] += X[idx] @ Sigma @ X[idx].T
    return W


def _units(d):
    """The unit directions E_w of vech Σ, row by row over the lower triangle."""
    out = []
    for p in range(d):
        for q in range(p + 1):
            E = np.zeros((d, d))
            E[p, q] = E[q, p] = 1.0
            out.append(E)
    return out


def _prior(d, lam=None, rng=None):
    """(P0, h0, m0, S0): the paper's N(0, λ⁻¹I), or a general N(m0, S0)."""
    if lam is not None:
        return lam * np.eye(d), np.zeros(d), np.zeros(d), np.eye(d) / lam
    A = rng.normal(size=(d, d))
    S0 = A @ A.T + 0.5 * np.eye(d)
    m0 = rng.normal(size=d)
    P0 = np.linalg.inv(S0)
    return P0, P0 @ m0, m0, S0


def _kernel(st, Sigma, sigma2, P0, h0):
    """(status, F, gS, dF/dσ², Ct, P) from the compiled collapsed-likelihood kernel."""
    N, d = st.b.shape
    L = np.linalg.cholesky(Sigma)
    Ct, P, r, gS, beta0 = (
        np.empty((N, d, d)),
        np.empty((d, d)),
        np.empty(d),
        np.empty((d, d)),
        np.empty(d),
    )
    const = O._prior_constant(P0, h0)
    status, F, dsig = O._collapsed(
        st.G, st.b, st.q, st.n, L, sigma2, P0, h0, const, True, Ct, P, r, gS, beta0
    )
    return status, F, gS, dsig, Ct, P


# ------------------------------------------------------------------ value, gradient, Fisher


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("general_prior", [False, True])
def test_collapsed_value_and_gradient_against_explicit_density(seed, general_prior):
    rng = np.random.default_rng(seed)
    d = 3
    inst, X, y = _rows(rng, SIZES, d)
    N = len(SIZES)
    st = _stats(inst, X, y, N)
    P0, h0, m0, S0 = _prior(d, None if general_prior else 0.05, rng)
    A = rng.normal(size=(d, d))
    Sigma = A @ A.T / d + 0.2 * np.eye(d)
    sigma2 = 0.8
    status, F, gS, dsig, _, _ = _kernel(st, Sigma, sigma2, P0, h0)
    assert status == 0
    ref = _brute_collapsed(inst, X, y, N, Sigma, sigma2, m0, S0)
    assert abs(F - ref) <= 1e-11 * abs(ref) + 1e-9
    if not general_prior:
        ref_c = collapsed_loglik(st.G, st.b, st.q, st.n, Sigma, sigma2, 0.05)
        assert abs(F - ref_c) <= 1e-10 * abs(ref_c)
    h = 1e-5
    for E in _units(d):
        fd = (
            _brute_collapsed(inst, X, y, N, Sigma + h * E, sigma2, m0, S0)
            - _brute_collapsed(inst, X, y, N, Sigma - h * E, sigma2, m0, S0)
        ) / (2 * h)
        assert np.sum(gS * E) == pytest.approx(fd, rel=1e-6, abs=1e-6)
    fd = (
        _brute_collapsed(inst, X, y, N, Sigma, sigma2 + h, m0, S0)
        - _brute_collapsed(inst, X, y, N, Sigma, sigma2 - h, m0, S0)
    ) / (2 * h)
    assert dsig == pytest.approx(fd, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("general_prior", [False, True])
def test_fisher_information_against_explicit_matrices(seed, d, general_prior):
    rng = np.random.default_rng(seed)
    inst, X, y = _rows(rng, SIZES, d)
    N = len(SIZES)
    st = _stats(inst, X, y, N)
    P0, h0, _, S0 = _prior(d, None if general_prior else 0.1, rng)
    A = rng.normal(size=(d, d))
    Sigma = A @ A.T / d + 0.3 * np.eye(d)
    sigma2 = 0.7
    status, _, _, _, Ct, P = _kernel(st, Sigma, sigma2, P0, h0)
    assert status == 0
    m = d * (d + 1) // 2
    Iv = np.empty((m + 1, m + 1))
    O._fisher_vech(st.G, st.n, Ct, np.linalg.inv(P), sigma2, Iv)
    W = _W(inst, X, N, Sigma, sigma2, S0)
    Wi = np.linalg.inv(W)
    dW = []
    for E in _units(d):
        D = np.zeros_like(W)
        for j in range(N):
            idx = np.flatnonzero(inst == j)
            D[np.ix_(idx, idx)] = X[idx] @ E @ X[idx].T
        dW.append(D)
    dW.append(np.eye(W.shape[0]))
    ref = np.array([[0.5 * np.trace(Wi @ a @ Wi @ b) for b in dW] for a in dW])
    np.testing.assert_allclose(Iv, ref, rtol=1e-9, atol=1e-10 * np.abs(ref).max())


@pytest.mark.parametrize("seed", [0, 1])
def test_theta_gradient_and_fisher_are_the_chain_rule(seed):
    """g_θ = Jᵀ∇ against finite differences of F in θ; I_θ = JᵀIJ against the explicit
    Jacobian of (vech(LLᵀ), σ²) by finite differences."""
    rng = np.random.default_rng(seed)
    d = 3
    inst, X, y = _rows(rng, SIZES, d)
    st = _stats(inst, X, y, len(SIZES))
    P0, h0 = 0.1 * np.eye(d), np.zeros(d)
    A = rng.normal(size=(d, d))
    L = np.linalg.cholesky(A @ A.T / d + 0.3 * np.eye(d))
    sigma2 = 0.9
    theta = _pack(L, sigma2)  # the offline layout, shared with the online step
    status, _, gS, dsig, Ct, P = _kernel(st, L @ L.T, sigma2, P0, h0)
    assert status == 0
    m = d * (d + 1) // 2
    Iv = np.empty((m + 1, m + 1))
    O._fisher_vech(st.G, st.n, Ct, np.linalg.inv(P), sigma2, Iv)
    g, It = np.empty(m + 1), np.empty((m + 1, m + 1))
    O._theta_gradient_fisher(L, sigma2, gS, dsig, Iv, g, It)

    def unpack(t):
        Lt = np.empty((d, d))
        O._theta_to_L(t, Lt)
        return Lt, np.exp(t[m])

    def value(t):
        Lt, s2 = unpack(t)
        return _kernel(st, Lt @ Lt.T, s2, P0, h0)[1]

    def vech_s2(t):
        Lt, s2 = unpack(t)
        S = Lt @ Lt.T
        return np.array([S[p, q] for p in range(d) for q in range(p + 1)] + [s2])

    h = 1e-6
    J = np.empty((m + 1, m + 1))
    for i in range(m + 1):
        e = np.zeros(m + 1)
        e[i] = h
        assert g[i] == pytest.approx(
            (value(theta + e) - value(theta - e)) / (2 * h), rel=1e-6, abs=1e-6
        )
        J[:, i] = (vech_s2(theta + e) - vech_s2(theta - e)) / (2 * h)
    np.testing.assert_allclose(It, J.T @ Iv @ J, rtol=1e-6, atol=1e-8 * np.abs(It).max())


def test_offline_integrate_gradient_against_finite_differences():
    rng = np.random.default_rng(5)
    inst, X, y = _rows(rng, SIZES, 3)
    st = _check_stats(*_stats(inst, X, y, len(SIZES))[:4])
    A = rng.normal(size=(3, 3))
    theta = _pack(np.linalg.cholesky(A @ A.T / 3 + 0.3 * np.eye(3)), 0.8)
    f, g, _, _ = _profiled(theta, st, 0.1, collapse=True)
    assert f + 0.5 * 3 * np.log(0.1) == pytest.approx(
        collapsed_loglik(st.G, st.b, st.q, st.n, *_sigma_of(theta, 3), 0.1)
    )
    h = 1e-6
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        fd = (_profiled(theta + e, st, 0.1, True)[0] - _profiled(theta - e, st, 0.1, True)[0]) / (
            2 * h
        )
        assert g[i] == pytest.approx(fd, rel=1e-6, abs=1e-6)
    with pytest.raises(ValueError, match="beta0"):
        fit_type2_ml(st.G, st.b, st.q, st.n, beta0="mode")


def _sigma_of(theta, d):
    L = np.empty((d, d))
    O._theta_to_L(theta, L)
    return L @ L.T, float(np.exp(theta[-1]))


# --------------------------------------------------------------------- the iterated step


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("d", [1, 3])
def test_iterated_to_convergence_reaches_the_offline_optimum(seed, d):
    """From a cold start (Σ = I, σ² = 1) the step iterated to convergence gives the optimum
    of fit_type2_ml(beta0="integrate") with the same λ, to 1e-6 relative; every recorded
    likelihood is at least the one before (no accepted step lowers it)."""
    rng = np.random.default_rng(100 + seed)
    sizes = list(rng.integers(0, 9, size=30))  # empty, rank-deficient and full-rank instances
    inst, X, y = _rows(rng, sizes, d)
    st = _stats(inst, X, y, len(sizes))
    lam = 1e-3
    res = O.online_ml_step(st.G, st.b, st.q, st.n, np.eye(d), 1.0, lam=lam, steps=300)
    assert res.status == "ran"
    ref = fit_type2_ml(st.G, st.b, st.q, st.n, lam=lam, beta0="integrate")
    assert ref.converged
    assert np.linalg.eigvalsh(ref.Sigma).min() > 1e-2  # an interior optimum
    scale = np.abs(ref.Sigma).max()
    assert np.abs(res.Sigma - ref.Sigma).max() <= 1e-6 * scale
    assert res.sigma2 == pytest.approx(ref.sigma2, rel=1e-6)
    tr = res.trace[: res.n_steps + 1]
    assert np.all(np.isfinite(tr)) and np.all(np.isnan(res.trace[res.n_steps + 1 :]))
    assert np.all(np.diff(tr) >= 0.0)
    assert res.loglik == tr[-1]
    assert res.loglik == pytest.approx(
        collapsed_loglik(st.G, st.b, st.q, st.n, ref.Sigma, ref.sigma2, lam), abs=1e-8
    )


def test_warm_started_few_steps_close_the_gap():
    """Three steps from the optimum of the data less its last 5 % of rows recover most of the
    remaining gain, and never lose likelihood."""
    rng = np.random.default_rng(11)
    sizes = list(rng.integers(2, 12, size=40))
    inst, X, y = _rows(rng, sizes, 3)
    N = len(sizes)
    cut = int(0.95 * len(y))
    early = _stats(inst[:cut], X[:cut], y[:cut], N)
    full = _stats(inst, X, y, N)
    warm = fit_type2_ml(early.G, early.b, early.q, early.n, lam=1e-3, beta0="integrate")
    best = O.online_ml_step(full.G, full.b, full.q, full.n, warm.Sigma, warm.sigma2, steps=300)
    step = O.online_ml_step(full.G, full.b, full.q, full.n, warm.Sigma, warm.sigma2, steps=3)
    gap0 = best.loglik - step.trace[0]
    assert gap0 > 0
    assert best.loglik - step.loglik <= 1e-3 * gap0
    assert np.all(np.diff(step.trace[: step.n_steps + 1]) >= 0)


def test_reml_limit_matches_statsmodels():
    """With a nearly flat prior on the shared mean the collapsed likelihood is REML: the
    online step and the offline optimiser agree with statsmodels' REML fit."""
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(7)
    d, N = 3, 30
    sizes = rng.integers(5, 25, size=N)
    Sigma = np.array([[1.0, 0.3, -0.2], [0.3, 0.5, 0.1], [-0.2, 0.1, 0.3]])
    inst, X, y = _rows(rng, sizes, d, Sigma=Sigma, mean=np.array([1.0, -0.5, 2.0]))
    st = _stats(inst, X, y, N)
    fits = []
    for method in ("lbfgs", "bfgs", "powell"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = sm.MixedLM(y, X, groups=inst, exog_re=X).fit(reml=True, method=method)
        if f.converged and np.isfinite(f.llf):
            fits.append(f)
    best = max(fits, key=lambda f: f.llf)
    ref_Sigma, ref_s2 = np.asarray(best.cov_re, float), float(best.scale)
    off = fit_type2_ml(st.G, st.b, st.q, st.n, lam=0.0, beta0="integrate")
    on = O.online_ml_step(st.G, st.b, st.q, st.n, np.eye(d), 1.0, lam=1e-9, steps=300)
    for S, s2 in ((off.Sigma, off.sigma2), (on.Sigma, on.sigma2)):
        np.testing.assert_allclose(S, ref_Sigma, atol=1e-4 * np.abs(ref_Sigma).max())
        assert s2 == pytest.approx(ref_s2, rel=1e-4)


# ------------------------------------------------------------------------ degenerate data


def test_no_instance_with_data_keeps_the_values():
    d = 3
    G, b, q, n = np.zeros((4, d, d)), np.zeros((4, d)), np.zeros(4), np.zeros(4, dtype=int)
    S0 = np.diag([2.0, 1.0, 0.5])
    res = O.online_ml_step(G, b, q, n, S0, 0.3)
    assert res.status == "not identifiable" and res.n_eff == 0 and res.n_steps == 0
    assert np.array_equal(res.Sigma, S0) and res.sigma2 == 0.3
    assert np.isnan(res.loglik) and np.all(np.isnan(res.trace))


def test_instances_with_one_row_each():
    """d = 3: no instance has a full-rank design, so nothing is estimated (the values are
    kept); d = 1: every instance is full rank, but Σ and σ² enter only through Σ + σ² (a flat
    ridge, singular Fisher information): the step runs without NaN and never loses likelihood."""
    rng = np.random.default_rng(3)
    inst, X, y = _rows(rng, [1] * 20, 3)
    st = _stats(inst, X, y, 20)
    res = O.online_ml_step(st.G, st.b, st.q, st.n, np.eye(3), 1.0, steps=20)
    assert res.status == "not identifiable" and res.n_eff == 0
    assert np.array_equal(res.Sigma, np.eye(3)) and res.sigma2 == 1.0
    inst, X, y = _rows(rng, [1] * 20, 1)
    st = _stats(inst, X, y, 20)
    res = O.online_ml_step(st.G, st.b, st.q, st.n, np.eye(1), 1.0, steps=50)
    assert res.status == "ran" and res.n_eff == 20
    assert np.all(np.isfinite(res.Sigma)) and np.isfinite(res.sigma2) and res.sigma2 > 0
    tr = res.trace[: res.n_steps + 1]
    assert np.all(np.diff(tr) >= 0)
    # the ridge: the total Σ + σ² is what the data fix
    total = res.Sigma[0, 0] + res.sigma2
    best = O.online_ml_step(st.G, st.b, st.q, st.n, np.eye(1) * 0.2, 0.2, steps=200)
    assert best.Sigma[0, 0] + best.sigma2 == pytest.approx(total, rel=1e-4)


def test_noise_free_rewards_stop_at_the_floor():
    """Rewards fitted exactly by each instance's coefficients: the likelihood grows as σ² → 0;
    σ̂² stops at sigma2_floor, everything stays finite."""
    rng = np.random.default_rng(4)
    inst, X, y = _rows(rng, [6] * 12, 3, sigma2=0.0)
    st = _stats(inst, X, y, 12)
    opts = EBOptions(sigma2_floor=1e-8)
    res = O.online_ml_step(st.G, st.b, st.q, st.n, np.eye(3), 1.0, steps=200, options=opts)
    assert res.status == "ran"
    assert res.sigma2 == pytest.approx(1e-8, rel=1e-12)
    assert np.all(np.isfinite(res.Sigma)) and np.isfinite(res.loglik)
    assert np.all(np.linalg.eigvalsh(res.Sigma) >= opts.eig_floor * (1 - 1e-9))
    assert np.all(np.diff(res.trace[: res.n_steps + 1]) >= 0)


def test_fixed_Sigma_or_sigma2_are_kept_exactly():
    rng = np.random.default_rng(8)
    inst, X, y = _rows(rng, [5] * 15, 3)
    st = _stats(inst, X, y, 15)
    S0 = np.array([[1.0, 0.2, 0.0], [0.2, 0.5, 0.1], [0.0, 0.1, 0.3]])
    a = O.online_ml_step(
        st.G, st.b, st.q, st.n, S0, 1.0, options=EBOptions(estimate_Sigma=False), steps=100
    )
    assert np.array_equal(a.Sigma, S0) and a.sigma2 != 1.0 and a.status == "ran"
    # σ̂² alone is the one-dimensional optimum: the derivative in σ² vanishes there
    _, _, _, dsig, _, _ = _kernel(st, S0, a.sigma2, 1e-3 * np.eye(3), np.zeros(3))
    assert abs(dsig) * a.sigma2 < 1e-6
    b = O.online_ml_step(
        st.G, st.b, st.q, st.n, S0, 0.7, options=EBOptions(estimate_sigma2=False), steps=5
    )
    assert b.sigma2 == 0.7 and not np.array_equal(b.Sigma, S0)


def test_bad_input_is_refused():
    rng = np.random.default_rng(0)
    inst, X, y = _rows(rng, [4] * 5, 2)
    st = _stats(inst, X, y, 5)
    G, b, q, n = st.G, st.b, st.q, st.n
    with pytest.raises(ValueError, match="Sigma"):
        O.online_ml_step(G, b, q, n, -np.eye(2), 1.0)
    with pytest.raises(ValueError, match="sigma2"):
        O.online_ml_step(G, b, q, n, np.eye(2), 0.0)
    with pytest.raises(ValueError, match="steps"):
        O.online_ml_step(G, b, q, n, np.eye(2), 1.0, steps=0)
    with pytest.raises(ValueError, match="lam"):
        O.online_ml_step(G, b, q, n, np.eye(2), 1.0, lam=0.0)
    with pytest.raises(ValueError, match="q"):
        O.online_ml_step(G, b, q[:3], n, np.eye(2), 1.0)
    with pytest.raises(TypeError, match="options"):
        O.online_ml_step(G, b, q, n, np.eye(2), 1.0, options={"eig_floor": 0})
    bad = G.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        O.online_ml_step(bad, b, q, n, np.eye(2), 1.0)
