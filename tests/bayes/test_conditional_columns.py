"""``closed_form_posterior`` and ``conditional_model`` read a DataFrame's columns as
``compare_closed_form`` does: named features give the same result as a log read with them, and
no warning that the features were guessed."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pymc")

import hierbandit.bayes as hb
from hierbandit.data import read_log


def _frame() -> pd.DataFrame:
    g = np.random.default_rng(0)
    n = 60
    return pd.DataFrame(
        {
            "who": g.integers(0, 4, n),
            "what": g.integers(0, 2, n),
            "y": g.normal(size=n),
            "one": np.ones(n),
            "x": g.normal(size=n),
            "row_id": np.arange(n),  # a column that is not a feature
        }
    )


def test_named_columns_give_the_posterior_of_the_log_read_with_them():
    df = _frame()
    cols = {"instance": "who", "arm": "what", "reward": "y", "features": ["one", "x"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = hb.closed_form_posterior(df, np.eye(2), 1.0, 1.0, **cols)
        model = hb.conditional_model(df, np.eye(2), 1.0, 1.0, **cols)
    want = hb.closed_form_posterior(read_log(df, **cols), np.eye(2), 1.0, 1.0)
    for name in want.data_vars:
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    assert list(got["feature"].values) == ["one", "x"]
    assert model.coords["feature"] == ("one", "x")


def test_without_features_the_guess_is_still_announced():
    df = _frame()
    with pytest.warns(UserWarning, match="features not given"):
        hb.closed_form_posterior(df, np.eye(3), 1.0, 1.0, instance="who", arm="what", reward="y")
