"""The logistic core: Newton/IRLS steps, the penalised MLE, the Laplace approximation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.optimize
from scipy.special import expit

from hierbandit.stats.logistic import (
    OnlineLogistic,
    bernoulli_loglik,
    cascade_loglik,
    joint_features,
    joint_quadform,
    laplace_approximation,
    literal_update,
    logistic_loglik,
    newton_update,
    penalized_map,
    predictive_click_probability,
)


def _data(rng, n=400, p=6, scale=1.0):
    Z = rng.standard_normal((n, p))
    theta = rng.standard_normal(p) * scale / np.sqrt(p)
    y = (rng.random(n) < expit(Z @ theta)).astype(float)
    return Z, y, theta


def _neg_objective(th, Z, y, m, P):
    dev = th - m
    return -(np.sum(y * (Z @ th) - np.logaddexp(0, Z @ th)) - 0.5 * dev @ P @ dev)


# ---------------------------------------------------------------------- likelihoods
def test_bernoulli_loglik_matches_direct_and_is_stable(rng):
    eta = rng.normal(size=50) * 3
    y = (rng.random(50) < 0.5).astype(float)
    p = expit(eta)
    direct = y * np.log(p) + (1 - y) * np.log1p(-p)
    np.testing.assert_allclose(bernoulli_loglik(eta, y), direct, rtol=1e-12, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        big = bernoulli_loglik(np.array([-800.0, 800.0]), np.array([0.0, 1.0]))
    np.testing.assert_allclose(big, [0.0, 0.0], atol=1e-300)


def test_cascade_loglik_equals_flattened_bernoulli(rng):
    d, K, H, S = 3, 4, 3, 60
    theta = rng.standard_normal(d + K)
    X = rng.standard_normal((S, d))
    arms = np.full((S, H), -1)
    clicks = np.zeros((S, H), dtype=int)
    rows_Z, rows_y = [], []
    for s in range(S):
        h_star = rng.integers(1, H + 1)
        click = rng.random() < 0.6 or h_star < H
        arms[s, :h_star] = rng.integers(K, size=h_star)
        if click:
            clicks[s, h_star - 1] = 1
        for h in range(h_star):
            rows_Z.append(joint_features(X[s], arms[s, h], K))
            rows_y.append(clicks[s, h])
    flat = logistic_loglik(theta, np.array(rows_Z), np.array(rows_y))
    assert abs(cascade_loglik(theta, X, arms, clicks) - flat) < 1e-10


def test_joint_features_and_quadform_match_dense(rng):
    N, d, K = 7, 4, 5
    X = rng.standard_normal((N, d))
    B = rng.standard_normal((d + K, d + K))
    S = B @ B.T + np.eye(d + K)
    Z = joint_features(X[:, None, :].repeat(K, axis=1), np.arange(K)[None, :].repeat(N, 0), K)
    dense = np.einsum("nkp,pq,nkq->nk", Z, S, Z)
    np.testing.assert_allclose(joint_quadform(X, S, K), dense, rtol=1e-12)
    assert np.all(Z[..., d:].sum(-1) == 1.0)


# ---------------------------------------------------------------------- one-step updates
def test_newton_update_matches_direct_and_working_response_form(rng):
    Z, y, _ = _data(rng, n=50)
    p = Z.shape[1]
    theta = rng.standard_normal(p) * 0.3
    A = 2.0 * np.eye(p) + 0.1 * np.ones((p, p))
    th_new, A_new = newton_update(theta, A, Z, y)
    # direct: loop over rows
    A_dir = A.copy()
    g = np.zeros(p)
    for z, yy in zip(Z, y, strict=True):
        ph = expit(z @ theta)
        A_dir += ph * (1 - ph) * np.outer(z, z)
        g += z * (yy - ph)
    np.testing.assert_allclose(A_new, A_dir, rtol=1e-12)
    np.testing.assert_allclose(th_new, theta + np.linalg.solve(A_dir, g), rtol=1e-10)
    # working-response IRLS: b = A θ, b += w z (zᵀθ + (y − p)/w), θ = A_new⁻¹ b
    ph = expit(Z @ theta)
    w = ph * (1 - ph)
    b = A @ theta + Z.T @ (w * (Z @ theta + (y - ph) / w))
    np.testing.assert_allclose(th_new, np.linalg.solve(A_new, b), atol=1e-10)


def test_literal_update_matches_paper_loop(rng):
    Z, y, _ = _data(rng, n=40)
    p = Z.shape[1]
    theta, A, b = rng.standard_normal(p) * 0.2, 1.5 * np.eye(p), rng.standard_normal(p)
    th_new, A_new, b_new = literal_update(theta, A, b, Z, y)
    A_l, b_l = A.copy(), b.copy()
    for z, yy in zip(Z, y, strict=True):  # Algorithm 1 lines 23-27 with θ̂ fixed in the loop
        ph = expit(z @ theta)
        A_l += ph * (1 - ph) * np.outer(z, z)
        b_l += z * (yy - ph)
    np.testing.assert_allclose(A_new, A_l, rtol=1e-12)
    np.testing.assert_allclose(b_new, b_l, rtol=1e-12)
    np.testing.assert_allclose(th_new, np.linalg.solve(A_l, b_l), rtol=1e-10)


def test_updates_batch_over_leading_dims(rng):
    B, n, p = 3, 20, 5
    Z = rng.standard_normal((B, n, p))
    y = (rng.random((B, n)) < 0.4).astype(float)
    theta = rng.standard_normal((B, p)) * 0.2
    A = np.stack([np.eye(p) * (i + 1) for i in range(B)])
    th, An = newton_update(theta, A, Z, y)
    for i in range(B):
        t1, A1 = newton_update(theta[i], A[i], Z[i], y[i])
        np.testing.assert_allclose(th[i], t1, rtol=1e-10)
        np.testing.assert_allclose(An[i], A1, rtol=1e-12)
    res = penalized_map(Z, y, lam=1.0)
    for i in range(B):
        np.testing.assert_allclose(res.theta[i], penalized_map(Z[i], y[i]).theta, atol=1e-8)


# ---------------------------------------------------------------------- MAP and Laplace
@pytest.mark.parametrize("general_prior", [False, True])
def test_penalized_map_matches_scipy(rng, general_prior):
    Z, y, _ = _data(rng, n=300)
    p = Z.shape[1]
    if general_prior:
        m = rng.standard_normal(p) * 0.5
        B = rng.standard_normal((p, p))
        P = B @ B.T / p + 0.5 * np.eye(p)
        res = penalized_map(Z, y, prior_mean=m, prior_precision=P)
    else:
        m, P = np.zeros(p), 0.7 * np.eye(p)
        res = penalized_map(Z, y, lam=0.7)
    assert res.converged and res.grad_norm < 1e-8
    ref = scipy.optimize.minimize(
        _neg_objective, np.zeros(p), args=(Z, y, m, P), method="BFGS", options={"gtol": 1e-10}
    )
    np.testing.assert_allclose(res.theta, ref.x, atol=1e-5)
    # the Hessian is P + Zᵀ W Z at the MAP, and equals a finite-difference Hessian
    ph = expit(Z @ res.theta)
    H = P + (Z * (ph * (1 - ph))[:, None]).T @ Z
    np.testing.assert_allclose(res.hessian, H, rtol=1e-12)
    grad = scipy.optimize.approx_fprime
    fd = np.array(
        [
            grad(
                res.theta,
                lambda t, i=i: scipy.optimize.approx_fprime(t, _neg_objective, 1e-6, Z, y, m, P)[i],
                1e-4,
            )
            for i in range(p)
        ]
    )
    np.testing.assert_allclose(0.5 * (fd + fd.T), H, rtol=2e-2, atol=2e-2)


def test_penalized_map_handles_far_start_and_separable_data(rng):
    Z = rng.standard_normal((60, 3))
    y = (Z[:, 0] > 0).astype(float)  # separable: only the prior keeps the MAP finite
    res = penalized_map(Z, y, lam=0.5, theta0=np.array([50.0, -50.0, 50.0]))
    assert res.converged and res.grad_norm < 1e-8
    ref = scipy.optimize.minimize(
        _neg_objective,
        np.zeros(3),
        args=(Z, y, np.zeros(3), 0.5 * np.eye(3)),
        method="BFGS",
        options={"gtol": 1e-10},
    )
    np.testing.assert_allclose(res.theta, ref.x, atol=1e-4)


def test_laplace_approximation_and_predictive(rng):
    Z, y, _ = _data(rng, n=500)
    lap = laplace_approximation(Z, y, lam=1.0)
    np.testing.assert_allclose(lap.cov @ lap.precision, np.eye(Z.shape[1]), atol=1e-10)
    np.testing.assert_allclose(lap.sd, np.sqrt(np.diag(np.linalg.inv(lap.precision))), rtol=1e-10)
    Zh = rng.standard_normal((5, Z.shape[1]))
    mu, s2 = lap.logit_moments(Zh)
    np.testing.assert_allclose(mu, Zh @ lap.mean)
    np.testing.assert_allclose(s2, np.einsum("np,pq,nq->n", Zh, lap.cov, Zh), rtol=1e-10)
    # probit approximation vs a Monte-Carlo E[σ(η)], η ~ N(μ, s²)
    mu_t, s_t = np.array([-1.0, 0.3, 2.0]), np.array([0.5, 1.5, 1.0])
    mc = expit(mu_t + s_t * rng.standard_normal((200_000, 3))).mean(axis=0)
    np.testing.assert_allclose(predictive_click_probability(mu_t, s_t**2, "probit"), mc, atol=0.02)
    np.testing.assert_allclose(predictive_click_probability(mu_t, s_t**2), expit(mu_t))
    with pytest.raises(ValueError, match="method"):
        predictive_click_probability(mu_t, s_t, "exact")


# ---------------------------------------------------------------------- the online estimator
def test_online_newton1_incremental_equals_direct_replay(rng):
    p, lam = 5, 1.3
    est = OnlineLogistic(p, lam, "newton1")
    theta, A = np.zeros(p), lam * np.eye(p)
    for _ in range(20):
        Z, y, _ = _data(rng, n=int(rng.integers(1, 30)), p=p)
        est.update(Z, y)
        ph = expit(Z @ theta)
        A = A + (Z * (ph * (1 - ph))[:, None]).T @ Z
        theta = theta + np.linalg.solve(A, Z.T @ (y - ph))
    np.testing.assert_allclose(est.theta, theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(est.A, A, rtol=1e-12)
    np.testing.assert_allclose(est.b, A @ theta, rtol=1e-9)  # the invariant b = Aθ
    np.testing.assert_allclose(est.cov, np.linalg.inv(A), rtol=1e-9, atol=1e-14)
    Zq = rng.standard_normal((4, p))
    np.testing.assert_allclose(est.quadform(Zq), np.einsum("np,pq,nq->n", Zq, est.cov, Zq))
    assert np.all(np.linalg.eigvalsh(est.A) >= lam - 1e-12)


def test_online_batch_map_equals_batch_fit(rng):
    p = 4
    est = OnlineLogistic(p, 1.0, "batch_map", tol=1e-10)
    Zs, ys = [], []
    for _ in range(6):
        Z, y, _ = _data(rng, n=25, p=p)
        est.update(Z, y)
        Zs.append(Z)
        ys.append(y)
    ref = penalized_map(np.vstack(Zs), np.concatenate(ys), lam=1.0, tol=1e-12)
    np.testing.assert_allclose(est.theta, ref.theta, atol=1e-8)
    np.testing.assert_allclose(est.A, ref.hessian, rtol=1e-6)
    Zall, yall = est.stored_data()
    np.testing.assert_array_equal(Zall, np.vstack(Zs))
    np.testing.assert_array_equal(yall, np.concatenate(ys))


def test_online_with_prior_starts_at_prior():
    m = np.array([0.5, -1.0, 0.2])
    P = np.diag([2.0, 3.0, 4.0])
    for rule in ("newton1", "paper_literal", "batch_map"):
        est = OnlineLogistic(3, 1.0, rule, prior_mean=m, prior_precision=P)
        np.testing.assert_array_equal(est.theta, m)
        np.testing.assert_array_equal(est.A, P)
        np.testing.assert_allclose(np.linalg.solve(est.A, est.b), m)


def test_literal_update_shrinks_to_half_newton_does_not():
    """Spec §3.6: the printed update's projection ratio settles near 1/2 on a long stream."""
    rng = np.random.default_rng(7)
    p = 6
    theta_star = rng.standard_normal(p)
    theta_star /= np.linalg.norm(theta_star) / 1.5
    lit = OnlineLogistic(p, 1.0, "paper_literal")
    new = OnlineLogistic(p, 1.0, "newton1")
    for _ in range(1500):
        Z = rng.standard_normal((50, p))
        y = (rng.random(50) < expit(Z @ theta_star)).astype(float)
        lit.update(Z, y)
        new.update(Z, y)
    ratio_lit = lit.theta @ theta_star / (theta_star @ theta_star)
    ratio_new = new.theta @ theta_star / (theta_star @ theta_star)
    assert 0.35 <= ratio_lit <= 0.65
    assert 0.9 <= ratio_new <= 1.1


def test_online_logistic_rejects_bad_configuration():
    with pytest.raises(ValueError, match="lam"):
        OnlineLogistic(3, 0.0)
    with pytest.raises(ValueError, match="update"):
        OnlineLogistic(3, 1.0, "newton2")
