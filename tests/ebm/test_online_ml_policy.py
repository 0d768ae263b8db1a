"""EbmTS/EbmUCB with ``hyper_method="ml"`` (online type-II ML hyperparameters).

Checked against the slow paths they replace: the batched update and the compiled multi-seed
loop against the loop of the Python ``_update``, a restored checkpoint against the policy that
kept running, the re-estimation inside the policy against the stand-alone step
(``hierbandit.stats.online_ml.online_ml_step``) on the policy's own statistics.
"""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.ebm import EbmTS, EbmUCB, HierarchicalLinearEnv
from hierbandit.ebm.compiled import run_batched
from hierbandit.stats import EBOptions, posterior_given_hyper
from hierbandit.stats.online_ml import online_ml_step
from tests.ebm.test_serving import _rounds, _same_state
from tests.reliability.test_restore_rules import Crafted

CONFIGS = [
    {},  # the default schedule (N > budget: every N / 10 pulls of an arm)
    {"hyper_update_every": 1},
    {"hyper_update_every": 5, "ml_steps": 1},
    {"forced_init": "per_instance", "eb_options": EBOptions(estimate_Sigma=False)},
]


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
@pytest.mark.parametrize("kw", CONFIGS)
def test_batches_equal_the_loop(cls, kw):
    N, K, d = 25, 3, 3
    loop = cls(N, K, d, rng=3, hyper_method="ml", **kw)
    batch = cls(N, K, d, rng=3, hyper_method="ml", **kw)
    rng = np.random.default_rng(0)
    for J, X, Y in _rounds(rng, np.arange(N), d, 600, 40):
        Y = Y + X @ np.array([1.0, -0.5, 0.3])
        arms = np.array([loop.select(int(j), x) for j, x in zip(J, X, strict=True)])
        assert np.array_equal(batch.select_batch(J, X), arms)
        for j, x, k, y in zip(J, X, arms, Y, strict=True):
            loop._update(int(j), x, int(k), float(y))
        batch.update_batch(J, X, arms, Y)
    _same_state(loop, batch)
    # the hyperparameters moved away from their initial values, and γ is not reported
    if kw.get("eb_options") is None:
        assert not np.allclose(loop.Sigma, np.eye(d))
    assert np.all(np.isnan(loop.gamma)) and np.all(loop.n_eff > 0)


def test_compiled_loop_equals_the_python_loop():
    env = HierarchicalLinearEnv(10, 4, 3, arrival="data-poor", rng=1)
    T, S = 400, 2
    pols_c = [EbmTS(10, 4, 3, rng=s, hyper_method="ml") for s in range(S)]
    pols_p = [EbmTS(10, 4, 3, rng=s, hyper_method="ml") for s in range(S)]
    rolls = [env.clone(rng=s).rollout(T, rng=s) for s in range(S)]
    inst = np.stack([r.instance for r in rolls])
    X = np.stack([r.context for r in rolls])
    R = np.stack([r.mean_reward + r.noise for r in rolls])
    arms = run_batched(pols_c, inst, X, R, n_threads=2)
    for s, p in enumerate(pols_p):
        for t in range(T):
            j, x = int(inst[s, t]), X[s, t]
            k = p._select(j, x)
            assert k == arms[s, t]
            p._update(j, x, k, float(R[s, t, k]))
        _same_state(p, pols_c[s])


def test_reestimation_is_the_stand_alone_step_and_the_posterior_is_exact():
    """After a re-estimation the policy's (Σ̂, σ̂²) are online_ml_step's from the previous
    values on the same statistics, and its posterior is the closed form under them."""
    N, K, d = 12, 2, 3
    p = EbmUCB(N, K, d, rng=0, hyper_method="ml", hyper_update_every=1)
    rng = np.random.default_rng(2)
    for _ in range(300):
        j, x = int(rng.integers(N)), rng.normal(size=d)
        p.update(j, x, p.select(j, x), float(x @ [0.5, 1.0, -1.0] + rng.normal()))
    k = 1
    S_prev, s2_prev = p.Sigma[k].copy(), float(p.sigma2[k])
    j, x = 3, rng.normal(size=d)
    p.update(j, x, k, 0.7)
    ref = online_ml_step(
        p.G[k],
        p.b[k],
        p.q[k],
        p.n_obs[k],
        S_prev,
        s2_prev,
        lam=p.lam,
        steps=p.ml_steps,
        tol=1e-8,
    )
    assert ref.status == "ran"
    assert np.array_equal(p.Sigma[k], ref.Sigma) and p.sigma2[k] == ref.sigma2
    assert p.n_eff[k] == ref.n_eff
    post = p.posterior()
    exact = posterior_given_hyper(p.G[k], p.b[k], ref.Sigma, ref.sigma2, p.lam)
    np.testing.assert_allclose(
        post["shared_mean"].values[k], exact.shared_mean, rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(post["mean"].values[k], exact.mean, rtol=1e-8, atol=1e-10)


def test_checkpoint_mid_stream_continues_identically(tmp_path):
    N, K, d = 30, 3, 2
    p = EbmTS(N, K, d, rng=5, hyper_method="ml", ml_steps=2)
    rng = np.random.default_rng(4)
    for J, X, Y in _rounds(rng, np.arange(N), d, 300, 30):
        p.update_batch(J, X, p.select_batch(J, X), Y)
    p.save(tmp_path / "p.nc")
    q = EbmTS.load(tmp_path / "p.nc")
    assert q.hyper_method == "ml" and q.ml_steps == 2
    for J, X, Y in _rounds(rng, np.arange(N), d, 600, 30):
        a = p.select_batch(J, X)
        assert np.array_equal(q.select_batch(J, X), a)
        p.update_batch(J, X, a, Y)
        q.update_batch(J, X, a, Y)
    _same_state(p, q)


def test_a_checkpoint_written_before_the_option_loads_as_eb(tmp_path):
    p = EbmTS(6, 2, 2, rng=0)
    p.update_batch([0, 1, 2], np.ones((3, 2)), [0, 1, 0], [1.0, 2.0, 3.0])
    p.save(tmp_path / "new.nc")
    c = Crafted(tmp_path / "new.nc")
    for name in ("hyper_method", "ml_steps"):
        parent, last = c._node(name)
        del parent[last]
    q = EbmTS.load(c.write(tmp_path / "old.nc"))
    assert q.hyper_method == "eb" and q.ml_steps == 3
    _same_state(p, q)
    c = Crafted(tmp_path / "new.nc")
    c.state("hyper_method", "mcmc")
    with pytest.raises(Exception, match="hyper_method"):
        EbmTS.load(c.write(tmp_path / "bad.nc"))


def test_degenerate_data_keeps_finite_values():
    """No instance with a full-rank design: the initial values stay (the documented fallback).
    Noise-free rewards: σ̂² stops at its floor; the policy keeps choosing, nothing is NaN."""
    d = 3
    p = EbmTS(20, 2, d, rng=0, hyper_method="ml", hyper_update_every=1)
    rng = np.random.default_rng(0)
    for j in range(20):  # one row per instance
        x = rng.normal(size=d)
        p.update(j, x, 0, float(rng.normal()))
    assert np.array_equal(p.Sigma[0], np.eye(d)) and p.sigma2[0] == 1.0 and p.n_eff[0] == 0
    opts = EBOptions(sigma2_floor=1e-8)
    q = EbmUCB(5, 2, d, rng=0, hyper_method="ml", hyper_update_every=1, eb_options=opts)
    beta = rng.normal(size=(5, d))
    for _ in range(200):
        j, x = int(rng.integers(5)), rng.normal(size=d)
        k = q.select(j, x)
        q.update(j, x, k, float(x @ beta[j]))
    assert np.all(q.sigma2 >= 1e-8) and q.sigma2.min() < 1e-6
    for name in ("Sigma", "sigma2", "_beta0", "_Phi", "_empty"):
        assert np.all(np.isfinite(getattr(q, name))), name
    # every (instance, arm) pair's record: C̃, A, b, G, q, n
    assert np.all(np.isfinite(q._pairs[: q.n_pairs]))
    mu, tau = q.predict(0, rng.normal(size=d))
    assert np.all(np.isfinite(mu)) and np.all(np.isfinite(tau))


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="hyper_method"):
        EbmTS(3, 2, 2, hyper_method="reml")
    with pytest.raises(ValueError, match="ml_steps"):
        EbmTS(3, 2, 2, hyper_method="ml", ml_steps=0)
