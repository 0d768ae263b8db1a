"""Checkpoints and priors written before the package took one folder per paper still load, and
resume exactly (tests/fixtures/before-folders/README.md says how each file was written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hierbandit.checkpoint import load_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "before-folders"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
POLICIES = {
    "EbmTS-prior": "hierbandit.ebm.policy",
    "RMBandit": "hierbandit.ebm.rmbandit",
    "UCBBP": "hierbandit.cascade.policies",
    "SCLUB": "hierbandit.sclub.policies",
    "CLUB": "hierbandit.sclub.policies",
}


@pytest.fixture(scope="module")
def cases():
    from tests.test_checkpoint import _kill_cases

    return _kill_cases()


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_checkpoint_of_the_flat_layout_resumes_exactly(name, cases):
    _, play, mid, end = cases[name]
    restored = load_checkpoint(FIXTURES / f"{name}.nc")
    assert type(restored).__module__ == POLICIES[name]
    assert restored.t == EXPECTED[name]["t"] == mid
    assert play(restored, mid, end) == EXPECTED[name]["decisions"]
    # and the class's own loader takes it as well
    again = type(restored).load(FIXTURES / f"{name}.nc")
    assert again.t == mid


def test_an_explorer_of_the_flat_layout_resumes_exactly():
    from hierbandit import BOC

    restored = BOC.load(FIXTURES / "BOC.nc")
    assert type(restored).__module__ == "hierbandit.boc.explorers"
    assert [int(restored.next_arm())] == EXPECTED["BOC"]["next_arm"]


def test_priors_of_the_flat_layout_load():
    from hierbandit import load_prior
    from hierbandit.bayes import load_cascade_prior

    prior = load_prior(FIXTURES / "prior-eb.nc")
    np.testing.assert_array_equal(prior.Sigma, np.asarray(EXPECTED["prior-eb"]["Sigma"]))
    cascade = load_cascade_prior(FIXTURES / "cascade-prior-laplace.nc")
    np.testing.assert_array_equal(cascade.mean, EXPECTED["cascade-prior-laplace"]["mean"])
    np.testing.assert_array_equal(cascade.cov, EXPECTED["cascade-prior-laplace"]["cov"])
