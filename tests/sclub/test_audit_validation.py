"""anytime_beta refuses counts that are not counts, and a Bernoulli run refuses expected rewards
that are not probabilities (and noise that is not a uniform draw), before any state changes."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.sclub.env import ClusteredLinearEnv
from hierbandit.sclub.policies import CLUB, SCLUB, LinUCBInd, anytime_beta
from tests.conftest import snapshot


@pytest.mark.parametrize(
    ("n", "tau", "name"),
    [
        (-1.0, 10, "n"),
        (np.nan, 10, "n"),
        (np.inf, 10, "n"),
        ([3.0, -2.0], 10, "n"),
        (5, -1.0, "tau"),
        (5, np.nan, "tau"),
        (5, [1.0, np.inf], "tau"),
    ],
)
def test_anytime_beta_refuses_bad_counts(n, tau, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        anytime_beta(n, tau, 3)


@pytest.mark.parametrize(("n", "tau"), [("3", 1), (5, "x"), (True, 1)])
def test_anytime_beta_refuses_non_numbers(n, tau):
    with pytest.raises(TypeError):
        anytime_beta(n, tau, 3)


def test_anytime_beta_on_good_counts():
    want = np.sqrt(3 * np.log1p(4 / 3) + 4 * np.log(10) + np.log(2)) + 1
    assert anytime_beta(4, 10, 3) == pytest.approx(want, rel=1e-15)
    # τ < 1 is taken as 1 (docs/sclub.md C-18)
    assert anytime_beta(0, 0, 3) == pytest.approx(np.sqrt(np.log(2)) + 1)
    out = anytime_beta(np.array([0.0, 4.0]), np.array([1.0, 10.0]), 3)
    assert out.shape == (2,) and out[1] == pytest.approx(want)


@pytest.fixture(scope="module")
def roll():
    env = ClusteredLinearEnv(10, 2, 4, 5, frequency="half", reward="bernoulli", rng=0)
    return env.rollout(30, rng=1)


@pytest.mark.parametrize("cls", [SCLUB, CLUB, LinUCBInd])
@pytest.mark.parametrize(
    ("where", "value", "name"),
    [("means", 1.5, "means"), ("means", -0.2, "means"), ("noise", 1.0, "noise"),
     ("noise", -0.1, "noise")],
)  # fmt: skip
def test_bernoulli_run_refuses_values_outside_the_unit_interval(roll, cls, where, value, name):
    pol = cls(10, 4, rng=0)
    before = snapshot(pol)
    means, noise = roll.means.copy(), roll.noise.copy()
    (means if where == "means" else noise)[3, ...] = value
    with pytest.raises(ValueError, match=rf"^{name} "):
        pol.run(roll.users, roll.items, means, noise, bernoulli=True)
    assert snapshot(pol) == before
    # Gaussian rewards take any finite mean and noise
    pol.run(roll.users, roll.items, means, noise, bernoulli=False)


@pytest.mark.parametrize("cls", [SCLUB, CLUB, LinUCBInd])
def test_bernoulli_run_takes_probabilities(roll, cls):
    means = roll.means.copy()
    means[0, 0], means[1, 0] = 0.0, 1.0
    choices, ncl = cls(10, 4, rng=0).run(roll.users, roll.items, means, roll.noise)
    assert choices.shape == ncl.shape == (30,)
