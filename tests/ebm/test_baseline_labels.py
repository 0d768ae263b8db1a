"""The baselines (LinUCB, LinTS, OLSBandit, RMBandit) speak the user's ids and feature names.

A baseline built with string instance and arm ids and feature names behaves exactly as the
same baseline on integer codes (same arms, mapped, and the same state bit for bit); its
read-outs carry the labels as coordinates; a checkpoint keeps them; a DataFrame of string ids
feeds ``update_batch``; an id it does not know is refused by name, before any change.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierbandit.ebm import LinTS, LinUCB, OLSBandit, Policy, RMBandit

USERS = ["ann", "bo", "cy"]
ARMS = ["red", "green", "blue"]
FEATURES = ["one", "x", "z"]
CLASSES = [LinUCB, LinTS, OLSBandit, RMBandit]


def _stream(seed: int, T: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    J = g.integers(0, len(USERS), T)
    X = np.column_stack([np.ones(T), g.normal(size=(T, 2))])
    noise = g.normal(size=T)
    return J, X, noise


def _reward(j: int, x: np.ndarray, k: int, e: float) -> float:
    return float(x @ np.array([0.5 * k, 1.0 - k, 0.3 * j]) + e)


def _pair(cls: type) -> tuple[Policy, Policy]:
    coded = cls(len(USERS), len(ARMS), len(FEATURES), rng=3, tie_break="first")
    labelled = cls(instances=USERS, arms=ARMS, features=FEATURES, n_features=3, rng=3,
                   tie_break="first")  # fmt: skip
    return coded, labelled


@pytest.mark.parametrize("cls", CLASSES)
def test_labels_change_nothing_but_the_names(cls, tmp_path):
    coded, labelled = _pair(cls)
    J, X, noise = _stream(0, 150)
    for j, x, e in zip(J, X, noise, strict=True):
        k = coded.select(int(j), x)
        a = labelled.select(USERS[j], x)
        assert a == ARMS[k]
        y = _reward(int(j), x, k, e)
        coded.update(int(j), x, k, y)
        labelled.update(USERS[j], x, a, y)
    a_post, b_post = coded.posterior(), labelled.posterior()
    for name in a_post.data_vars:
        np.testing.assert_array_equal(a_post[name].values, b_post[name].values, err_msg=name)
    assert list(b_post["arm"].values) == ARMS
    assert list(b_post["instance"].values) == USERS
    assert list(b_post["feature"].values) == FEATURES
    hyper = labelled.hyperparameters()
    assert list(hyper["arm"].values) == ARMS and list(hyper["feature"].values) == FEATURES

    path = tmp_path / "p.nc"
    labelled.save(path)
    back = Policy.load(path)
    assert list(back.posterior()["instance"].values) == USERS
    x = np.array([1.0, 0.2, -0.4])
    assert back.select("cy", x) == labelled.select("cy", x)


@pytest.mark.parametrize("cls", CLASSES)
def test_a_dataframe_of_string_ids_feeds_update_batch(cls):
    coded, labelled = _pair(cls)
    J, X, noise = _stream(1, 80)
    K = np.arange(80) % len(ARMS)
    Y = np.array([_reward(int(j), x, int(k), e) for j, x, k, e in zip(J, X, K, noise, strict=True)])
    coded.update_batch(J, X, K, Y)
    frame = pd.DataFrame(
        {"instance": [USERS[j] for j in J], "arm": [ARMS[k] for k in K], "reward": Y}
        | {f: X[:, i] for i, f in enumerate(FEATURES)}
    )
    labelled.update_batch(frame)
    for name, value in coded.posterior().data_vars.items():
        np.testing.assert_array_equal(value.values, labelled.posterior()[name].values)


@pytest.mark.parametrize("cls", CLASSES)
def test_unknown_ids_are_refused_before_any_change(cls, tmp_path):
    _, labelled = _pair(cls)
    x = np.array([1.0, 0.0, 0.0])
    labelled.update("ann", x, "red", 1.0)
    before = tmp_path / "before.nc"
    labelled.save(before)
    with pytest.raises(ValueError, match="instance"):
        labelled.update("dee", x, "red", 1.0)  # a baseline keeps its set of instances
    with pytest.raises(ValueError, match="arm"):
        labelled.update("ann", x, "purple", 1.0)
    with pytest.raises(ValueError, match="instance"):
        labelled.select("dee", x)
    after = tmp_path / "after.nc"
    labelled.save(after)
    a, b = Policy.load(before).posterior(), Policy.load(after).posterior()
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values)
    assert labelled.t == 1


def test_sizes_are_still_required_without_labels():
    with pytest.raises(ValueError, match="fixed set of instances"):
        LinUCB(n_arms=2, n_features=2)
    with pytest.raises(TypeError, match="n_arms"):
        LinTS(n_instances=2, n_features=2)
    with pytest.raises(TypeError, match="n_features"):
        OLSBandit(instances=["a"], arms=["b", "c"])
