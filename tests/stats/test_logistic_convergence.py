"""OnlineLogistic reports a batch_map refit that stops short of the MAP: ``converged`` is False
and the update warns once (a RuntimeWarning); converged refits and the one-step rules are
silent."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import expit

from hierbandit.checkpoint import load_checkpoint, save_checkpoint
from hierbandit.stats.logistic import OnlineLogistic, penalized_map

P = 4


def _batch(rng, n=40, scale=1.0):
    Z = rng.standard_normal((n, P))
    theta = np.array([1.0, -0.5, 0.25, 0.0]) * scale
    y = (rng.random(n) < expit(Z @ theta)).astype(float)
    return Z, y


def _separable(rng, n=40):
    """Rows whose clicks follow the sign of the first feature exactly."""
    Z = rng.standard_normal((n, P))
    return Z, (Z[:, 0] > 0).astype(float)


def _record(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_a_refit_out_of_iterations_clears_converged_and_warns_once():
    rng = np.random.default_rng(0)
    est = OnlineLogistic(P, 1.0, "batch_map", max_iter=1)
    assert est.converged  # nothing solved yet
    Z, y = _batch(rng)
    caught = _record(lambda: est.update(Z, y))
    assert len(caught) == 1
    assert "batch_map" in str(caught[0].message)
    assert "did not converge in 1 iterations" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the caller, not the package
    assert est.converged is False
    # the update is kept: θ̂ is the single Newton step from the prior mean
    one = penalized_map(Z, y, lam=1.0, max_iter=1)
    np.testing.assert_allclose(est.theta, one.theta, rtol=1e-12)
    assert est.n_obs == Z.shape[0]


def test_pytest_sees_the_warning_class():
    rng = np.random.default_rng(1)
    est = OnlineLogistic(P, 1.0, "batch_map", max_iter=1)
    with pytest.warns(RuntimeWarning, match=r"batch_map.*did not converge"):
        est.update(*_batch(rng))
    assert not est.converged


def test_separable_data_with_a_weak_prior_does_not_converge():
    rng = np.random.default_rng(2)
    est = OnlineLogistic(P, 1e-8, "batch_map", max_iter=5)
    caught = _record(lambda: est.update(*_separable(rng)))
    assert len(caught) == 1
    assert not est.converged


def test_the_flag_follows_the_last_refit():
    rng = np.random.default_rng(3)
    est = OnlineLogistic(P, 1.0, "batch_map", max_iter=1)
    _record(lambda: est.update(*_batch(rng)))
    assert not est.converged
    est.max_iter = 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.update(*_batch(rng))
    assert est.converged


def test_an_empty_episode_keeps_the_flag():
    rng = np.random.default_rng(4)
    est = OnlineLogistic(P, 1.0, "batch_map", max_iter=1)
    _record(lambda: est.update(*_batch(rng)))
    est.update(np.empty((0, P)), np.empty(0))
    assert not est.converged


@pytest.mark.parametrize("rule", ["newton1", "paper_literal", "batch_map"])
def test_converged_runs_are_silent(rule):
    rng = np.random.default_rng(5)
    est = OnlineLogistic(P, 1.0, rule)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(6):
            est.update(*_batch(rng))
            assert est.converged


@pytest.mark.parametrize("rule", ["newton1", "paper_literal"])
def test_one_step_rules_have_nothing_to_converge(rule):
    rng = np.random.default_rng(6)
    est = OnlineLogistic(P, 1e-8, rule, max_iter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            est.update(*_separable(rng))
    assert est.converged


def test_converged_is_read_only():
    est = OnlineLogistic(P, 1.0, "batch_map")
    with pytest.raises(AttributeError):
        est.converged = False


def test_the_flag_survives_a_checkpoint(tmp_path):
    from hierbandit.cascade.env import CascadeEnv, simulate_episode
    from hierbandit.cascade.policies import UCBBP

    K, D, H = 5, 5, 3
    pol = UCBBP(K, D, np.linspace(1.0, 3.0, K), H, update_rule="batch_map")
    pol.estimator.max_iter = 1
    env = CascadeEnv.preset("mccb-repro", n_users=12, rng=0)
    roll = env.rollout(3, rng=1)

    def play():
        for t in range(3):
            pol.start_episode(roll.contexts[t])
            arms, clicks = simulate_episode(roll.click_prob[t], roll.uniforms[t], pol.select)
            pol.update(roll.contexts[t], arms, clicks)

    assert len(_record(play)) == 3
    assert not pol.estimator.converged
    pol.estimator.max_iter = 50  # the configuration a policy builds its estimator with
    save_checkpoint(pol, tmp_path / "ucbbp.nc")
    again = load_checkpoint(tmp_path / "ucbbp.nc")
    assert again.estimator.converged is False
