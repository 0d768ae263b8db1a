"""The real-data task builders of the ebm paper's §7.2 (tested on the shipped data, no network)."""

import numpy as np
import pytest

from hierbandit.ebm.real_tasks import digits_tasks, linnerud_tasks, make_real_tasks, movielens_tasks


def _check_common(t, K, d, M):
    assert t.shared_mean.shape == (K, d)
    assert t.Sigma.shape == (K, d, d)
    assert t.noise_var.shape == (K,)
    assert t.contexts.shape == (M, d)
    for a in (t.shared_mean, t.Sigma, t.noise_var, t.contexts):
        assert np.all(np.isfinite(a))
    np.testing.assert_allclose(t.Sigma, np.swapaxes(t.Sigma, -1, -2), atol=1e-14)
    assert np.linalg.eigvalsh(t.Sigma).min() > -1e-12
    assert np.all(t.noise_var > 0)
    assert len(t.arm_names) == K and len(t.feature_names) == d


def _ols_reference(A, y):
    """Textbook OLS with its coefficient covariance through statsmodels."""
    sm = pytest.importorskip("statsmodels.api")
    fit = sm.OLS(y, A).fit()
    return fit.params, fit.scale, fit.cov_params()


def test_linnerud_is_per_output_ols():
    from sklearn.datasets import load_linnerud

    t = linnerud_tasks()
    _check_common(t, 3, 4, 20)
    assert t.n_instances == 30
    raw = load_linnerud()
    X = (raw.data - raw.data.mean(0)) / raw.data.std(0)
    Y = (raw.target - raw.target.mean(0)) / raw.target.std(0)
    A = np.column_stack([np.ones(20), X])
    np.testing.assert_allclose(t.contexts, A)
    for k in range(3):
        coef, s2, cov = _ols_reference(A, Y[:, k])
        np.testing.assert_allclose(t.shared_mean[k], coef, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(t.noise_var[k], s2, rtol=1e-10)
        np.testing.assert_allclose(t.Sigma[k], cov, rtol=1e-8, atol=1e-14)
    half = linnerud_tasks(heterogeneity_scale=0.5)
    np.testing.assert_allclose(half.Sigma, 0.5 * t.Sigma)


def test_digits_construction():
    t = digits_tasks(seed=3)
    n_test = t.provenance["n_test"]
    _check_common(t, 10, 17, n_test)
    assert t.provenance["n_train"] + n_test == 1797
    assert abs(t.provenance["n_train"] - 0.3 * 1797) <= 1
    np.testing.assert_array_equal(t.contexts[:, 0], 1.0)
    # deterministic for a seed, different split for another
    again = digits_tasks(seed=3)
    np.testing.assert_array_equal(again.shared_mean, t.shared_mean)
    other = digits_tasks(seed=4)
    assert not np.allclose(other.shared_mean, t.shared_mean)
    # the classes are balanced one-vs-rest indicators: intercepts near 1/10
    np.testing.assert_allclose(t.shared_mean[:, 0], 0.1, atol=0.01)


def test_digits_coefficients_match_statsmodels():
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.model_selection import train_test_split

    t = digits_tasks(n_components=5, seed=1)
    data = load_digits()
    X_tr, _, y_tr, _ = train_test_split(
        data.data, data.target, train_size=0.3, stratify=data.target, random_state=1
    )
    sd = X_tr.std(0)
    Z = (X_tr - X_tr.mean(0)) / np.where(sd > 0, sd, 1.0)
    A = np.column_stack([np.ones(len(Z)), PCA(5, svd_solver="full").fit_transform(Z)])
    for k in (0, 7):
        coef, s2, cov = _ols_reference(A, (y_tr == k).astype(float))
        np.testing.assert_allclose(t.shared_mean[k], coef, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(t.noise_var[k], s2, rtol=1e-8)
        np.testing.assert_allclose(t.Sigma[k], cov, rtol=1e-6, atol=1e-14)


def test_movielens_construction():
    from hierbandit.data import rating_matrix

    t = movielens_tasks(n_instances=10)
    _check_common(t, 10, 10, 671)
    assert t.provenance["n_ratings"] == 100_004
    weights = np.array(t.provenance["mixture_weights"])
    assert np.all(np.diff(weights) <= 0) and weights.sum() == pytest.approx(1.0)
    # the user factors are U_s S^{1/2}: their Gram matrix is diag(s)
    s = np.array(t.provenance["singular_values"])
    np.testing.assert_allclose(t.contexts.T @ t.contexts, np.diag(s), atol=1e-8 * s[0])
    # U_s S^{1/2} is the best rank-10 fit's left factor: projecting the zero-filled matrix on
    # it reproduces the movie factors' span, so U (UᵀU)⁻¹ Uᵀ R has the rank-10 SVD error
    R, _, _ = rating_matrix()
    F = np.nan_to_num(R)
    U = t.contexts
    proj = U @ np.linalg.solve(U.T @ U, U.T @ F)
    err = np.linalg.norm(F - proj)
    eig = np.linalg.eigvalsh(F @ F.T)[::-1]  # squared singular values, descending
    np.testing.assert_allclose(np.sqrt(eig[:10]), s, rtol=1e-8)
    np.testing.assert_allclose(err, np.sqrt(eig[10:].clip(0).sum()), rtol=1e-6)


def test_env_redraws_coefficients_from_the_prior():
    t = linnerud_tasks(n_instances=4000)
    env = t.env(rng=0)
    assert env.beta.shape == (3, 4000, 4)
    np.testing.assert_allclose(env.beta.mean(axis=1), t.shared_mean, atol=0.05)
    dev = env.beta - t.shared_mean[:, None, :]
    emp = np.einsum("knd,kne->kde", dev, dev) / 4000
    np.testing.assert_allclose(emp, t.Sigma, atol=0.1 * np.abs(t.Sigma).max())
    other = env.clone(rng=1)
    assert not np.allclose(other.beta, env.beta)


def test_bad_arguments():
    with pytest.raises(ValueError, match="name"):
        make_real_tasks("sarcos")
    with pytest.raises(ValueError, match="heterogeneity_scale"):
        linnerud_tasks(heterogeneity_scale=-1.0)
    with pytest.raises(ValueError, match="train_fraction"):
        digits_tasks(train_fraction=1.0)
    with pytest.raises(ValueError, match="n_components"):
        digits_tasks(n_components=65)
    with pytest.raises(ValueError, match="n_instances"):
        movielens_tasks(n_instances=0)
