"""EbmTS / EbmUCB: the online state equals the batch closed form, and the API contract holds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierbandit.ebm.policy import EbmTS, EbmUCB
from hierbandit.stats import EBOptions, empirical_bayes, posterior_given_hyper, suffstats
from tests.conftest import snapshot

N, K, D = 4, 3, 2


def _feed(policy, rng, steps, *, beta=None):
    """Run ``steps`` rounds of a random linear problem; return the rows (instance, x, arm, y)."""
    n, k_arms, d = policy.n_instances, policy.n_arms, policy.n_features
    if beta is None:
        beta = rng.normal(size=(k_arms, n, d))
    rows = []
    for _ in range(steps):
        j = int(rng.integers(n))
        x = rng.normal(size=d) + rng.choice([-1.0, 1.0], size=d)
        k = policy.select(j, x)
        y = float(x @ beta[k, j] + rng.normal())
        policy.update(j, x, k, y)
        rows.append((j, x, k, y))
    return rows


def _arm_rows(rows, k):
    sel = [(j, x, y) for j, x, kk, y in rows if kk == k]
    if not sel:
        return np.zeros((0, D)), np.zeros(0), np.zeros(0, dtype=int)
    j, x, y = zip(*sel, strict=True)
    return np.array(x), np.array(y), np.array(j)


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
def test_posterior_equals_batch_closed_form(cls, rng):
    policy = cls(N, K, D, rng=1)
    rows = _feed(policy, rng, 300)
    post = policy.posterior()
    hyper = policy.hyperparameters()
    for k in range(K):
        X, y, inst = _arm_rows(rows, k)
        st = suffstats(X, y, inst, N)
        ref = posterior_given_hyper(
            st.G, st.b, hyper.Sigma.values[k], float(hyper.sigma2.values[k]), policy.lam
        )
        np.testing.assert_allclose(post["mean"].values[k], ref.mean, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(post["cov"].values[k], ref.cov, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(
            post["shared_mean"].values[k], ref.shared_mean, rtol=1e-9, atol=1e-10
        )


def test_rank_one_path_equals_batch_with_frozen_hyperparameters(rng):
    opts = EBOptions(estimate_Sigma=False, estimate_sigma2=False)
    Sigma = np.array([[1.5, 0.4], [0.4, 0.8]])
    policy = EbmUCB(
        N,
        K,
        D,
        hyper_update_every=10**9,
        Sigma_init=Sigma,
        sigma2_init=0.7,
        eb_options=opts,
        recompute_every=10**9,
        rng=3,
    )
    rows = _feed(policy, rng, 500)
    post = policy.posterior()
    for k in range(K):
        X, y, inst = _arm_rows(rows, k)
        st = suffstats(X, y, inst, N)
        ref = posterior_given_hyper(st.G, st.b, Sigma, 0.7, policy.lam)
        np.testing.assert_allclose(post["mean"].values[k], ref.mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(post["cov"].values[k], ref.cov, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(policy.G[k], st.G, rtol=1e-12, atol=1e-12)


def test_rank_one_between_reestimates_matches_batch(rng):
    """hyper_update_every > 1: between re-estimates the state is the exact batch posterior."""
    policy = EbmTS(N, K, D, hyper_update_every=7, rng=5)
    rows = _feed(policy, rng, 250)
    post = policy.posterior()
    for k in range(K):
        X, y, inst = _arm_rows(rows, k)
        st = suffstats(X, y, inst, N)
        ref = posterior_given_hyper(st.G, st.b, policy.Sigma[k], policy.sigma2[k], policy.lam)
        np.testing.assert_allclose(post["mean"].values[k], ref.mean, rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(post["cov"].values[k], ref.cov, rtol=1e-8, atol=1e-11)


def test_reestimation_equals_public_empirical_bayes(rng):
    """One policy EB step equals ``empirical_bayes`` on the same statistics (no CV randomness)."""
    opts = EBOptions(threshold="none")
    policy = EbmUCB(N, K, D, eb_options=opts, rng=2)
    _feed(policy, rng, 200)
    j, x = 1, np.array([0.3, -1.2])
    k = policy.select(j, x)
    before = (policy.Sigma[k].copy(), float(policy.sigma2[k]))
    policy.update(j, x, k, 0.5)
    res = empirical_bayes(
        policy.G[k],
        policy.b[k],
        policy.q[k],
        policy.n_obs[k],
        policy.lam,
        options=opts,
        Sigma_init=before[0],
        sigma2_init=before[1],
    )
    np.testing.assert_allclose(policy.Sigma[k], res.Sigma, rtol=1e-12, atol=1e-14)
    assert policy.sigma2[k] == pytest.approx(res.sigma2, rel=1e-12)
    np.testing.assert_allclose(policy.posterior()["mean"].values[k], res.posterior.mean, rtol=1e-10)


def test_forced_initialisation_global_and_per_instance():
    x = np.ones(D)
    p = EbmUCB(N, K, D, rng=0)
    chosen = []
    for t in range(K):
        k = p.select(t % N, x)
        chosen.append(k)
        p.update(t % N, x, k, 0.0)
    assert chosen == list(range(K))
    q = EbmUCB(N, K, D, forced_init="per_instance", rng=0)
    for t in range(K):
        assert q.select(2, x) == t
        q.update(2, x, t, 0.0)
    assert q.select(3, x) == 0  # a new instance starts its own cycle


def test_ucb_index_is_mean_plus_alpha_tau(rng):
    p = EbmUCB(N, K, D, a=0.7, rng=4)
    _feed(p, rng, 120)
    j, x = 2, rng.normal(size=D)
    post = p.posterior()
    mean = post["mean"].values[:, j] @ x
    sd = np.sqrt(np.einsum("i,kij,j->k", x, post["cov"].values[:, j], x))
    mu, tau = p.predict(j, x)
    np.testing.assert_allclose(mu, mean, rtol=1e-10)
    np.testing.assert_allclose(tau, sd, rtol=1e-10)
    alpha = 0.7 * math.sqrt(math.log(p.t + 1))
    np.testing.assert_allclose(p._scores(j, x), mean + alpha * sd, rtol=1e-10)
    assert p.select(j, x) == int(np.argmax(mean + alpha * sd))


def test_ts_draws_have_the_posterior_moments(rng):
    p = EbmTS(N, K, D, a=1.0, rng=6)
    _feed(p, rng, 80)
    j, x = 0, rng.normal(size=D)
    mu, tau = p.predict(j, x)
    alpha = math.sqrt(math.log(p.t + 1))
    draws = np.array([p._scores(j, x) for _ in range(20000)])
    np.testing.assert_allclose(draws.mean(0), mu, atol=5 * alpha * tau.max() / math.sqrt(20000))
    np.testing.assert_allclose(draws.std(0), alpha * tau, rtol=0.03)


def test_zero_exploration_makes_ts_and_ucb_greedy(rng):
    ts, ucb = EbmTS(N, K, D, a=0.0, rng=7), EbmUCB(N, K, D, a=0.0, rng=7)
    beta = rng.normal(size=(K, N, D))
    for _ in range(200):
        j = int(rng.integers(N))
        x = rng.normal(size=D)
        k1, k2 = ts.select(j, x), ucb.select(j, x)
        assert k1 == k2
        mu, _ = ucb.predict(j, x)
        if ucb.t >= K:
            assert k2 == int(np.argmax(mu))
        y = float(x @ beta[k1, j] + rng.normal())
        ts.update(j, x, k1, y)
        ucb.update(j, x, k2, y)


def test_literal_eq_4_4_differs_when_sigma2_is_not_one(rng):
    opts = EBOptions(estimate_Sigma=False, estimate_sigma2=False)
    a = EbmUCB(N, K, D, sigma2_init=0.5, eb_options=opts, rng=8)
    b = EbmUCB(N, K, D, sigma2_init=0.5, eb_options=opts, mean_formula="4.4-literal", rng=8)
    rows = _feed(a, rng, 60)
    for j, x, k, y in rows:
        b.update(j, x, k, y)
    x = np.array([1.0, -0.5])
    mu_a, tau_a = a.predict(1, x)
    mu_b, tau_b = b.predict(1, x)
    np.testing.assert_allclose(mu_b, mu_a / 0.5, rtol=1e-12)  # (4.4) divides by σ² once more
    np.testing.assert_allclose(tau_a, tau_b)
    post = a.posterior()
    np.testing.assert_allclose(mu_a, post["mean"].values[:, 1] @ x, rtol=1e-12)


def test_same_seed_same_trajectory(rng):
    seq = np.random.default_rng(11)
    ctx = [(int(seq.integers(N)), seq.normal(size=D), seq.normal()) for _ in range(150)]

    def trajectory(policy):
        out = []
        for j, x, y in ctx:
            k = policy.select(j, x)
            policy.update(j, x, k, y + k)
            out.append(k)
        return out

    assert trajectory(EbmTS(N, K, D, rng=42)) == trajectory(EbmTS(N, K, D, rng=42))
    assert trajectory(EbmTS(N, K, D, rng=42)) != trajectory(EbmTS(N, K, D, rng=43))


def test_clone_is_untrained_with_same_config(rng):
    p = EbmTS(N, K, D, lam=0.01, a=0.3, hyper_update_every=5, rng=1)
    _feed(p, rng, 30)
    c = p.clone(rng=9)
    assert c.t == 0 and c.lam == 0.01 and c.a == 0.3 and c.hyper_update_every == 5
    assert np.all(c.G == 0)


@pytest.mark.parametrize(
    ("method", "args", "exc", "name"),
    [
        ("select", (0, [1.0]), ValueError, "context"),
        ("select", (0, [1.0, np.nan]), ValueError, "context"),
        ("select", (0, [1.0, np.inf]), ValueError, "context"),
        ("select", (N, [1.0, 0.0]), ValueError, "instance"),
        ("select", (-1, [1.0, 0.0]), ValueError, "instance"),
        ("select", (1.0, [1.0, 0.0]), TypeError, "instance"),
        ("select", ("a", [1.0, 0.0]), TypeError, "instance"),
        ("select", (0, ["a", "b"]), TypeError, "context"),
        ("update", (0, [1.0, 0.0], K, 1.0), ValueError, "arm"),
        ("update", (0, [1.0, 0.0], True, 1.0), TypeError, "arm"),
        ("update", (0, [1.0, 0.0], 0, np.nan), ValueError, "reward"),
        ("update", (0, [1.0, 0.0], 0, "1"), TypeError, "reward"),
        ("update", (0, [1.0, 0.0, 2.0], 0, 1.0), ValueError, "context"),
        ("update", (N + 3, [1.0, 0.0], 0, 1.0), ValueError, "instance"),
    ],
)
@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
def test_bad_input_raises_and_leaves_state_unchanged(cls, method, args, exc, name, rng):
    p = cls(N, K, D, rng=0)
    _feed(p, rng, 40)
    before = snapshot(p)
    with pytest.raises(exc, match=name):
        getattr(p, method)(*args)
    assert snapshot(p) == before


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"Sigma_init": np.array([[1.0, 2.0], [2.0, 1.0]])}, ValueError, "Sigma_init"),
        ({"Sigma_init": np.eye(3)}, ValueError, "Sigma_init"),
        ({"Sigma_init": np.array([[1.0, 0.5], [0.0, 1.0]])}, ValueError, "Sigma_init"),
        ({"sigma2_init": 0.0}, ValueError, "sigma2_init"),
        ({"sigma2_init": [1.0, 2.0]}, ValueError, "sigma2_init"),
        ({"lam": 0.0}, ValueError, "lam"),
        ({"a": -1.0}, ValueError, "a"),
        ({"hyper_update_every": 0}, ValueError, "hyper_update_every"),
        ({"forced_init": "never"}, ValueError, "forced_init"),
        ({"eb_options": {"threshold": "cv"}}, TypeError, "eb_options"),
    ],
)
def test_bad_constructor_arguments(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        EbmTS(N, K, D, **kwargs)


def test_per_arm_initial_hyperparameters():
    Sig = np.stack([np.eye(D) * (k + 1) for k in range(K)])
    p = EbmUCB(N, K, D, Sigma_init=Sig, sigma2_init=[0.5, 1.0, 2.0], rng=0)
    h = p.hyperparameters()
    np.testing.assert_allclose(h.Sigma.values, Sig)
    np.testing.assert_allclose(h.sigma2.values, [0.5, 1.0, 2.0])
    # empty data: every instance's predictive is N(0, Σ + I/λ)
    post = p.posterior()
    np.testing.assert_allclose(post["cov"].values[2, 0], Sig[2] + np.eye(D) / p.lam, rtol=1e-10)


@pytest.mark.parametrize(("n", "d"), [(1, 2), (3, 1)])
def test_degenerate_sizes_run(n, d, rng):
    p = EbmTS(n, 2, d, rng=0)
    for _ in range(60):
        j = int(rng.integers(n))
        x = rng.normal(size=d)
        k = p.select(j, x)
        p.update(j, x, k, float(x.sum() * (k + 1) + rng.normal()))
    ds = p.posterior()
    assert np.all(np.isfinite(ds["cov"].values))


def test_learns_an_easy_problem(rng):
    """K = 2, N = 3, d = 2 with a clear gap: late regret far below early regret."""
    beta = np.zeros((2, 3, 2))
    beta[0] = [1.0, 0.5]
    beta[1] = [-1.0, -0.5]
    p = EbmUCB(3, 2, 2, rng=0)
    regret = []
    for _ in range(1500):
        j = int(rng.integers(3))
        x = rng.normal(size=2) + rng.choice([-1.0, 1.0], size=2)
        k = p.select(j, x)
        means = beta[:, j] @ x
        regret.append(means.max() - means[k])
        p.update(j, x, k, float(means[k] + rng.normal()))
    regret = np.array(regret)
    assert regret[-500:].mean() < 0.2 * regret[:100].mean()


def test_frozen_hyperparameters_take_the_rank_one_path(rng):
    """With both hyperparameters frozen no pull re-estimates (exact rank-one updates only)."""
    opts = EBOptions(estimate_Sigma=False, estimate_sigma2=False)
    p = EbmTS(N, K, D, eb_options=opts, rng=0)
    calls = []
    p._reestimate_arm = lambda k: calls.append(k)  # type: ignore[method-assign]
    rows = _feed(p, rng, 100)
    assert calls == []
    post = p.posterior()
    for k in range(K):
        X, y, inst = _arm_rows(rows, k)
        st = suffstats(X, y, inst, N)
        ref = posterior_given_hyper(st.G, st.b, np.eye(D), 1.0, p.lam)
        np.testing.assert_allclose(post["mean"].values[k], ref.mean, rtol=1e-8, atol=1e-10)


def test_clone_with_int_seed_reproduces():
    p = EbmTS(N, K, D, rng=5)
    a, b = p.clone(), p.clone()
    x = np.ones(D)
    for _ in range(K):
        a.update(0, x, a.select(0, x), 0.0)
        b.update(0, x, b.select(0, x), 0.0)
    assert [a.select(1, x) for _ in range(20)] == [b.select(1, x) for _ in range(20)]


def _fake_prior(rng, k=K, d=D):
    from types import SimpleNamespace

    W = rng.normal(size=(k, d, d))
    return SimpleNamespace(
        shared_mean=rng.normal(size=(k, d)),
        shared_cov=W @ np.swapaxes(W, -1, -2) + 0.2 * np.eye(d),
        Sigma=np.stack([np.eye(d) * (i + 1) for i in range(k)]),
        sigma2=np.linspace(0.5, 1.5, k),
    )


def test_warm_start_fixed_prior_is_exact_posterior(rng):
    prior = _fake_prior(rng)
    p = EbmTS(N, K, D, prior=prior, prior_mode="fixed", rng=0)
    post0 = p.posterior()
    np.testing.assert_allclose(post0["mean"].values[:, 0], prior.shared_mean, rtol=1e-10)
    np.testing.assert_allclose(
        post0["cov"].values[:, 1], prior.Sigma + prior.shared_cov, rtol=1e-10
    )
    rows = _feed(p, rng, 200)
    post = p.posterior()
    for k in range(K):
        X, y, inst = _arm_rows(rows, k)
        st = suffstats(X, y, inst, N)
        ref = posterior_given_hyper(
            st.G,
            st.b,
            prior.Sigma[k],
            prior.sigma2[k],
            1.0,
            shared_prior=(prior.shared_mean[k], prior.shared_cov[k]),
        )
        np.testing.assert_allclose(post["mean"].values[k], ref.mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(post["cov"].values[k], ref.cov, rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(p.hyperparameters().Sigma.values, prior.Sigma)


def test_warm_start_init_mode_then_empirical_bayes(rng):
    prior = _fake_prior(rng)
    p = EbmUCB(N, K, D, prior=prior, rng=0)
    np.testing.assert_allclose(p.hyperparameters().sigma2.values, prior.sigma2)
    _feed(p, rng, 300)
    assert not np.allclose(p.hyperparameters().sigma2.values, prior.sigma2)


def test_warm_start_validation(rng):
    prior = _fake_prior(rng)
    with pytest.raises(ValueError, match="prior"):
        EbmTS(N, K, D, prior=prior, Sigma_init=np.eye(D))
    with pytest.raises(ValueError, match=r"prior\.shared_mean"):
        EbmTS(N, K + 1, D, prior=prior)
    with pytest.raises(TypeError, match="prior"):
        EbmTS(N, K, D, prior=object())
    with pytest.raises(ValueError, match="prior_mode"):
        EbmTS(N, K, D, prior=prior, prior_mode="frozen")
    c = EbmTS(N, K, D, prior=prior, prior_mode="fixed", rng=1).clone()
    assert c.prior is prior and c.prior_mode == "fixed"
