"""evaluate() and gamma_sweep() name the test set they need when given a logged data set, and
make_problem() names itself and the mistyped keyword."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.offline import CLUBOffline, OffC2LUB, evaluate, gamma_sweep
from hierbandit.offline.generate import cluster_thetas, make_problem


@pytest.fixture(scope="module")
def problem():
    theta, labels = cluster_thetas(12, 3, 4, rng=0)
    train, test = make_problem(theta, labels, 2000, n_test=200, rng=1)
    return train, test


def test_evaluate_given_a_data_set_names_the_test_set_it_needs(problem):
    train, _ = problem
    model = CLUBOffline(rng=0).fit(train)
    with pytest.raises(TypeError, match=r"^test must be an OfflineTestSet.*got OfflineDataset"):
        evaluate({"club": model}, train)
    with pytest.raises(TypeError, match=r"^test must be an OfflineTestSet.*make_problem"):
        evaluate({"club": model}, None)


def test_gamma_sweep_given_a_data_set_names_the_test_set_it_needs(problem):
    train, _ = problem
    model = OffC2LUB(0.0, rng=0).fit(train)
    with pytest.raises(TypeError, match=r"^test must be an OfflineTestSet"):
        gamma_sweep(model, train, grid=3)


def test_evaluate_still_scores_a_test_set(problem):
    train, test = problem
    res = evaluate({"club": CLUBOffline(rng=0).fit(train)}, test)
    assert res.n_test == 200 and np.isfinite(res["subopt"].item())


def test_make_problem_names_itself_and_the_mistyped_keyword():
    theta, labels = cluster_thetas(12, 3, 4, rng=0)
    with pytest.raises(
        TypeError, match=r"^make_problem\(\) got an unexpected keyword.*'logging_alfa'"
    ):
        make_problem(theta, labels, 200, logging_alfa=0.2)
    # the logging keywords it passes on are accepted
    train, _ = make_problem(theta, labels, 200, logging="linucb", logging_alpha=0.2, rng=0)
    assert train.attrs["logging_alpha"] == 0.2


def test_make_problem_validates_theta_by_name():
    with pytest.raises(ValueError, match=r"^theta "):
        make_problem(np.zeros(5), None, 200)
    with pytest.raises(TypeError, match=r"^theta "):
        make_problem("abc", None, 200)
    train, _ = make_problem([[1.0, 0.0], [0.0, 1.0]], None, 200, rng=0)
    assert train.n_users == 2
