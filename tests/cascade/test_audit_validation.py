"""Input checks of the cascade helpers and policies: clear errors naming the argument, δ checked
only where it is used, a prior matched by its layout, and a warning when a batch_map refit
stops short of the MAP."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from hierbandit.cascade.env import CascadeEnv, simulate_episode
from hierbandit.cascade.policies import (
    AUCBBP,
    UCBBP,
    CascadeGreedy,
    beta_theory,
    exploration_budget,
)
from tests.conftest import snapshot

K, D, H = 5, 5, 3
E = np.linspace(1.0, 3.0, K)
GOOD = {"n_obs": 10, "n_params": 10, "e_max": 3.0, "c_z": 4.0, "lam": 1.0, "delta": 0.05}


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((1, 10, 1), "n_episodes"),  # ln T = 0
        ((1, 10, 0), "n_episodes"),
        ((0, 10, 5), "t"),
        ((1, 0, 5), "n_users"),
        ((1.5, 10, 5), "t"),
        ((1, 10, 5.0), "n_episodes"),
    ],
)
def test_exploration_budget_refuses_bad_arguments(args, name):
    with pytest.raises((ValueError, TypeError), match=rf"^{name} "):
        exploration_budget(*args)


def test_exploration_budget_on_good_arguments():
    assert exploration_budget(1, 10, 2) == max(1, int(np.floor(10 * np.exp(-1 / np.log(2)))))
    assert exploration_budget(100, 10, 2) == 1


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"lam": 0.0}, "lam"),
        ({"lam": -1.0}, "lam"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"delta": np.nan}, "delta"),
        ({"n_obs": -1}, "n_obs"),
        ({"n_obs": 1.5}, "n_obs"),
        ({"n_params": 0}, "n_params"),
        ({"e_max": np.nan}, "e_max"),
        ({"e_max": 0.0}, "e_max"),
        ({"c_z": 0.0}, "c_z"),
        ({"c_z": np.inf}, "c_z"),
    ],
)
def test_beta_theory_refuses_bad_arguments(change, name):
    with pytest.raises((ValueError, TypeError), match=rf"^{name} "):
        beta_theory(**{**GOOD, **change})


def test_beta_theory_on_good_arguments():
    b = beta_theory(**GOOD)
    kappa = np.sqrt(3.0 + 2.0 * np.log1p(16.0 / 8.0))
    want = kappa * 3.0 * 4.0 * np.sqrt(2.0 * 10 * max(1.0, np.log(10)) * np.log(10 / 0.05))
    assert b == pytest.approx(want, rel=1e-12)
    assert beta_theory(**{**GOOD, "n_obs": 0}) > 0


# ---------------------------------------------------------------------- δ only with beta="theory"
@pytest.mark.parametrize("delta", [0.5, 1.0, 5.0, 0.0])
def test_a_constant_beta_does_not_check_the_unused_delta(delta):
    pol = UCBBP(K, D, E, H, beta=0.5, delta=delta)
    assert pol.delta == delta and pol.confidence_radius() == 0.5
    assert pol.clone().delta == delta
    AUCBBP(K, D, E, H, 10, beta=1.0, delta=delta)


@pytest.mark.parametrize("delta", [0.5, 0.0, np.nan])
def test_beta_theory_still_checks_delta(delta):
    with pytest.raises(ValueError, match=r"^delta "):
        UCBBP(K, D, E, H, beta="theory", delta=delta)


def test_delta_must_still_be_a_plain_number():
    """Unused, δ is still part of the configuration a checkpoint carries: a finite real."""
    for bad, err in ((np.nan, ValueError), ("0.1", TypeError), (None, TypeError)):
        with pytest.raises(err, match=r"^delta "):
            UCBBP(K, D, E, H, beta=0.5, delta=bad)


def test_a_policy_with_an_unused_out_of_range_delta_checkpoints(tmp_path):
    pol = UCBBP(K, D, E, H, beta=0.5, delta=0.9)
    again = UCBBP.load(pol.save(tmp_path / "p.nc"))
    assert again.delta == 0.9


# ---------------------------------------------------------------------- the prior's layout
class _Prior:
    """A fitted-prior stand-in: mean, cov and the layout metadata of a CascadePrior."""

    def __init__(self, n_features, n_arms):
        p = n_features + n_arms
        self.mean, self.cov = np.zeros(p), np.eye(p)
        self.n_features, self.n_arms = n_features, n_arms


def test_a_prior_of_the_same_length_but_another_layout_is_refused():
    # d = 3, K = 7 has the length 10 of the policy's d = 5, K = 5
    with pytest.raises(ValueError, match=r"^prior .*n_arms=7.*n_arms=5"):
        UCBBP(K, D, E, H, prior=_Prior(3, 7))
    with pytest.raises(ValueError, match=r"^prior "):
        CascadeGreedy(K, D, E, H, prior=_Prior(3, 7))
    UCBBP(K, D, E, H, prior=_Prior(D, K))
    UCBBP(K, D, E, H, prior=(np.zeros(D + K), np.eye(D + K)))  # a tuple has no layout


def test_a_fitted_cascade_prior_is_matched_by_its_layout():
    pytest.importorskip("xarray")
    from hierbandit.bayes.cascade import CascadePrior

    wrong = CascadePrior.from_arrays(np.zeros(D + K), np.eye(D + K), n_arms=K + 2)
    with pytest.raises(ValueError, match=r"^prior .*n_arms=7"):
        UCBBP(K, D, E, H, prior=wrong)
    right = CascadePrior.from_arrays(np.zeros(D + K), np.eye(D + K), n_arms=K)
    UCBBP(K, D, E, H, prior=right)


# ---------------------------------------------------------------------- batch_map convergence
def _run(pol, T=8, seed=1):
    env = CascadeEnv.preset("mccb-repro", n_users=12, rng=0)
    roll = env.rollout(T, rng=seed)
    for t in range(T):
        pol.start_episode(roll.contexts[t])
        arms, clicks = simulate_episode(roll.click_prob[t], roll.uniforms[t], pol.select)
        pol.update(roll.contexts[t], arms, clicks)


def test_batch_map_warns_when_the_refit_stops_short_of_the_map():
    pol = UCBBP(K, D, E, H, update_rule="batch_map")
    pol.estimator.max_iter = 1  # Newton-IRLS stops after one step
    with pytest.warns(RuntimeWarning, match="batch_map.*did not converge"):
        _run(pol)


def test_batch_map_warns_once_per_refit_that_stops_short():
    pol = UCBBP(K, D, E, H, update_rule="batch_map")
    pol.estimator.max_iter = 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(pol, T=5)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    # five episodes, five refits out of iterations, one warning each (from the estimator)
    assert len(runtime) == 5
    assert all("did not converge" in str(w.message) for w in runtime)
    assert all(w.filename == __file__ for w in runtime)
    assert pol.estimator.converged is False


def test_batch_map_is_silent_when_the_refit_converges():
    pol = UCBBP(K, D, E, H, update_rule="batch_map")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(pol)
    assert pol.estimator.converged
    ref = UCBBP(K, D, E, H, update_rule="batch_map")
    ref.estimator.max_iter = 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _run(ref)
    assert snapshot(pol.estimator.theta) != snapshot(ref.estimator.theta)
