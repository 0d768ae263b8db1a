"""A CascadePrior given to the models of a cascade log is matched by its layout and its feature
names, not by its length alone."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.bayes.cascade import CascadePrior, cascade_laplace
from hierbandit.data import read_cascade_log


def test_a_prior_of_another_layout_is_refused(cascade_frame):
    log = read_cascade_log(cascade_frame)  # d = 3 features x0..x2, K = 3 arms
    assert (log.n_features, log.n_arms) == (3, 3)
    wrong = CascadePrior.from_arrays(np.zeros(6), np.eye(6), n_arms=2)  # d = 4, K = 2
    with pytest.raises(ValueError, match=r"^prior was fitted for n_features=4, n_arms=2"):
        cascade_laplace(log, prior=wrong)


def test_a_prior_on_other_feature_names_is_refused(cascade_frame):
    log = read_cascade_log(cascade_frame)
    swapped = CascadePrior.from_arrays(
        np.zeros(6), np.eye(6), n_arms=3, features=["x2", "x1", "x0"]
    )
    with pytest.raises(ValueError, match=r"^prior was fitted on the features \['x2'"):
        cascade_laplace(log, prior=swapped)
    other = CascadePrior.from_arrays(np.zeros(6), np.eye(6), n_arms=3, features=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"^prior "):
        cascade_laplace(log, prior=other)


def test_matching_priors_are_taken(cascade_frame):
    log = read_cascade_log(cascade_frame)
    unnamed = CascadePrior.from_arrays(np.zeros(6), 4.0 * np.eye(6), n_arms=3)
    named = CascadePrior.from_arrays(
        np.zeros(6), 4.0 * np.eye(6), n_arms=3, features=list(log.features)
    )
    a = cascade_laplace(log, prior=unnamed)
    b = cascade_laplace(log, prior=named)
    c = cascade_laplace(log, prior=(np.zeros(6), 4.0 * np.eye(6)))
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.mean, c.mean)
