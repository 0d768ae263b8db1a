"""The cascade log reader: one row per displayed position, validated once (no PyMC)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierbandit.data import CascadeLog, read_cascade_log
from hierbandit.stats.logistic import bernoulli_loglik, cascade_loglik


# ---------------------------------------------------------------------- the log
def test_read_cascade_log_roundtrip_and_views(cascade_frame, cascade_env, tmp_path):
    shuffled = cascade_frame.sample(frac=1.0, random_state=0)
    log = read_cascade_log(shuffled)
    assert (
        log.n_rows == len(cascade_frame) and log.n_arms == 3 and log.features == ("x0", "x1", "x2")
    )
    back = log.to_dataframe()
    pd.testing.assert_frame_equal(back, cascade_frame.reset_index(drop=True), check_dtype=False)
    path = tmp_path / "log.csv"
    cascade_frame.to_csv(path, index=False)
    assert read_cascade_log(path).data_hash == log.data_hash
    Z, y = log.design()
    assert Z.shape == (log.n_rows, 6) and np.all(Z[:, 3:].sum(axis=1) == 1)
    Xs, arms, clicks = log.sessions()
    assert Xs.shape == (log.n_sessions, 3) and arms.shape == (log.n_sessions, cascade_env.horizon)
    theta = np.random.default_rng(1).normal(size=6)
    flat = float(bernoulli_loglik(Z @ theta, y).sum())
    assert abs(cascade_loglik(theta, Xs, arms, clicks) - flat) < 1e-9
    batches = log.episode_batches()
    assert len(batches) == 40 and sum(b[1].size for b in batches) == log.n_rows
    assert log.provenance()["n_clicks"] == int(cascade_frame["click"].sum())
    one_based = cascade_frame.assign(position=cascade_frame["position"] + 1)
    assert read_cascade_log(one_based, position_base=1).data_hash == log.data_hash


def _mutate(cascade_frame, how):
    df = cascade_frame.copy()
    if how == "missing":
        return df.drop(columns="click"), ValueError, "click"
    if how == "unknown_arm":
        df.loc[0, "arm"] = 7
        return df, ValueError, "unknown arms"
    if how == "negative_arm":
        df.loc[0, "arm"] = -1
        return df, ValueError, "non-negative"
    if how == "click_value":
        df.loc[0, "click"] = 2
        return df, ValueError, "0/1"
    if how == "nan_context":
        df.loc[3, "x1"] = np.nan
        return df, ValueError, "NaN"
    if how == "text_context":
        df["x1"] = "a"
        return df, ValueError, "features"
    if how == "float_id":
        df["user"] = df["user"] + 0.5
        return df, TypeError, "integer"
    if how == "duplicate":
        return pd.concat([df, df.iloc[[0]]]), ValueError, "duplicate position"
    if how == "gap":
        g = df[(df["position"] == 1)].index[0]
        return df.drop(index=g), ValueError, "contiguous"
    if how == "two_clicks":
        g = df[(df["click"] == 1) & (df["position"] >= 1)].index[0]
        same = (df["episode"] == df.loc[g, "episode"]) & (df["user"] == df.loc[g, "user"])
        df.loc[df[same & (df["position"] == 0)].index[0], "click"] = 1
        return df, ValueError, "has 2 clicks"
    if how == "after_click":
        g = df[(df["click"] == 1) & (df["position"] == 0)].index[0]
        extra = df.loc[[g]].copy()
        extra["position"] = 1
        extra["click"] = 0
        return pd.concat([df, extra]), ValueError, "after its click"
    if how == "context_changes":
        g = df[df["position"] == 1].index[0]
        df.loc[g, "x0"] += 1.0
        return df, ValueError, "context changes"
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "missing",
        "unknown_arm",
        "negative_arm",
        "click_value",
        "nan_context",
        "text_context",
        "float_id",
        "duplicate",
        "gap",
        "two_clicks",
        "after_click",
        "context_changes",
    ],
)
def test_read_cascade_log_rejects_bad_logs(cascade_frame, how):
    df, err, match = _mutate(cascade_frame, how)
    kwargs = {"n_arms": 3} if how == "unknown_arm" else {}
    if how == "text_context":
        kwargs["features"] = ["x0", "x1", "x2"]
        err = TypeError
        match = "numeric"
    with pytest.raises(err, match=match):
        read_cascade_log(df, **kwargs)


def test_read_cascade_log_argument_errors(cascade_frame):
    with pytest.raises(ValueError, match="did you mean"):
        read_cascade_log(cascade_frame, click="clicks")
    with pytest.raises(ValueError, match="must differ"):
        read_cascade_log(cascade_frame, user="episode")
    with pytest.raises(ValueError, match="empty"):
        read_cascade_log(cascade_frame.iloc[:0])
    with pytest.raises(ValueError, match="position_base"):
        read_cascade_log(cascade_frame, position_base=2)
    with pytest.raises(ValueError, match="id column"):
        read_cascade_log(cascade_frame, features=["x0", "arm"])
    with pytest.raises(TypeError, match="data must be"):
        read_cascade_log([1, 2, 3])


def test_the_bayesian_layer_names_the_same_reader():
    """``hierbandit.bayes`` keeps exporting the log type and reader, now from ``data``."""
    import hierbandit.bayes as hb
    from hierbandit.bayes import cascade

    assert hb.CascadeLog is CascadeLog and hb.read_cascade_log is read_cascade_log
    assert cascade.read_cascade_log is read_cascade_log
    assert CascadeLog.__module__ == "hierbandit.data.cascade_log"


def test_a_cascade_log_is_returned_as_it_is(cascade_frame):
    log = read_cascade_log(cascade_frame)
    assert read_cascade_log(log) is log
