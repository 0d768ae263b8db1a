"""Property-based tests of the offline clustering entry points: ``OfflineDataset`` (a user's own
table: arrays, ``from_frame``, ``read_offline``), ``OffC2LUB``/``OffCLUB`` (constructors, fit,
decide, decide_batch) and the generators.

Every call either returns a valid result or raises ``ValueError``/``TypeError`` naming the
argument; a rejected ``fit`` leaves a fitted model bit-identical, and the caller's table is
never modified. The spec's defined behaviours are checked too (docs/offline.md): users without
data get CI = +∞ and a decision from their own (empty) data, a wrong feature width is refused,
NaN rewards are refused with the row named.
"""

import copy

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierbandit.offline import (
    OffC2LUB,
    OffCLUB,
    OfflineDataset,
    cluster_thetas,
    generate_offline,
    read_offline,
    user_probabilities,
)
from tests.conftest import snapshot

from ._common import (
    SETTINGS,
    SMALL,
    check_outcome,
    ids,
    index,
    matrices,
    pairs,
    valid_array,
    valid_id,
)

U, d = 6, 3


def _base(n=40, seed=0):
    g = np.random.default_rng(seed)
    users = np.arange(n) % (U - 1)  # user U-1 has no data
    X = g.normal(size=(n, d)) / np.sqrt(d)
    theta = np.where(np.arange(U)[:, None] < 3, 1.0, -1.0) * np.array([1.0, 0.5, 0.0])
    y = np.einsum("nd,nd->n", X, theta[users]) + 0.05 * g.normal(size=n)
    return users, X, y


DATA_CORRUPTIONS = [
    ("none", True, ()),
    ("x_nan", False, ("X",)),
    ("x_inf", False, ("X",)),
    ("x_huge", False, ("X",)),
    ("x_tiny", True, ()),
    ("reward_nan", False, ("rewards",)),
    ("reward_inf", False, ("rewards",)),
    ("reward_huge", False, ("rewards",)),
    ("reward_str", False, ("rewards",)),
    ("user_negative", False, ("users",)),
    ("user_fraction", False, ("users",)),
    ("user_nan", False, ("users",)),
    ("user_integral_float", True, ()),
    ("user_too_large", False, ("users",)),
    ("user_bool", False, ("users",)),
    ("x_width_zero", False, ("X",)),
    ("x_1d", False, ("X",)),
    ("x_complex", False, ("X",)),
    ("short_rewards", False, ("rewards",)),
    ("short_users", False, ("users",)),
    ("n_users_zero", False, ("n_users",)),
    ("n_users_float", False, ("n_users",)),
    ("empty", True, ()),
    ("empty_without_n_users", False, ("n_users",)),
]


def _corrupt_data(kind, i):
    users, X, y = _base()
    n_users = U
    i = i % len(y)
    if kind == "x_nan":
        X[i, 0] = np.nan
    elif kind == "x_inf":
        X[i, 1] = -np.inf
    elif kind == "x_huge":
        X[i, 2] = 1e200
    elif kind == "x_tiny":
        X[i, 2] = 1e-300
    elif kind == "reward_nan":
        y[i] = np.nan
    elif kind == "reward_inf":
        y[i] = np.inf
    elif kind == "reward_huge":
        y[i] = -1e101
    elif kind == "reward_str":
        y = y.astype(str)
    elif kind == "user_negative":
        users[i] = -1
    elif kind == "user_fraction":
        users = users.astype(float)
        users[i] = 0.5
    elif kind == "user_nan":
        users = users.astype(float)
        users[i] = np.nan
    elif kind == "user_integral_float":
        users = users.astype(float)
    elif kind == "user_too_large":
        users[i] = U
    elif kind == "user_bool":
        users = users % 2 == 0
    elif kind == "x_width_zero":
        X = X[:, :0]
    elif kind == "x_1d":
        X = X[:, 0]
    elif kind == "x_complex":
        X = X.astype(complex)
    elif kind == "short_rewards":
        y = y[:-1]
    elif kind == "short_users":
        users = users[:-1]
    elif kind == "n_users_zero":
        n_users = 0
    elif kind == "n_users_float":
        n_users = 6.0
    elif kind == "empty":
        users, X, y = users[:0], X[:0], y[:0]
    elif kind == "empty_without_n_users":
        users, X, y, n_users = users[:0], X[:0], y[:0], None
    return users, X, y, n_users


@SETTINGS
@given(case=st.sampled_from(DATA_CORRUPTIONS), i=st.integers(0, 10**6))
def test_dataset_constructor_validates(case, i):
    kind, valid, names = case
    users, X, y, n_users = _corrupt_data(kind, i)
    copies = [np.copy(a) for a in (users, X, y)]
    ds = check_outcome(
        None,
        None,
        lambda: OfflineDataset(users, X, y, n_users=n_users),
        valid,
        names or ("users",),
    )
    for a, b in zip((users, X, y), copies, strict=True):
        np.testing.assert_array_equal(a, b)  # the caller's arrays are untouched
    if ds is not None:
        assert ds.n_users == U and ds.n_rows == len(y)
        assert np.all(np.isfinite(ds.suffstats().G))
    if kind == "reward_nan":  # the spec: the row is given
        with pytest.raises(ValueError, match=f"row {i % 40}"):
            OfflineDataset(users, X, y, n_users=n_users)


FRAME_CASES = [
    ("none", True),
    ("reward_nan", False),
    ("feature_inf", False),
    ("feature_str", False),
    ("user_str", False),
    ("user_negative", False),
    ("user_fraction", False),
    ("drop_reward", False),
    ("drop_user", False),
    ("features_missing", False),
    ("features_subset", True),
    ("features_include_reward", False),
    ("extra_text_column", True),
]
FRAME_NAMES = ("user", "reward", "x0", "x1", "x2", "features", "feature", "data", "frame")


def _frame(kind, i):
    users, X, y = _base()
    df = pd.DataFrame({"user": users, "reward": y, **{f"x{k}": X[:, k] for k in range(d)}})
    i = i % len(df)
    features = None
    if kind == "reward_nan":
        df.loc[i, "reward"] = np.nan
    elif kind == "feature_inf":
        df.loc[i, "x1"] = np.inf
    elif kind == "feature_str":
        df["x0"] = df["x0"].astype(object)
        df.loc[i, "x0"] = "a"
        features = ["x0", "x1", "x2"]  # (by default only numeric columns are features)
    elif kind == "user_str":
        df["user"] = df["user"].astype(object)
        df.loc[i, "user"] = "u"
    elif kind == "user_negative":
        df.loc[i, "user"] = -3
    elif kind == "user_fraction":
        df["user"] = df["user"].astype(float)
        df.loc[i, "user"] = 1.5
    elif kind == "drop_reward":
        df = df.drop(columns="reward")
    elif kind == "drop_user":
        df = df.drop(columns="user")
    elif kind == "features_missing":
        features = ["x0", "x9"]
    elif kind == "features_subset":
        features = ["x0", "x2"]
    elif kind == "features_include_reward":
        features = ["x0", "reward"]
    elif kind == "extra_text_column":
        df["note"] = "text"
        features = ["x0", "x1", "x2"]
    return df, features


@pytest.mark.filterwarnings("ignore:features not given:UserWarning")  # not what is tested
@SETTINGS
@given(case=st.sampled_from(FRAME_CASES), i=st.integers(0, 10**6))
def test_read_offline_table_validates(case, i):
    kind, valid = case
    df, features = _frame(kind, i)
    original = df.copy(deep=True)
    for reader in (
        lambda: read_offline(df, features=features),
        lambda: OfflineDataset.from_frame(df, features=features),
    ):
        ds = check_outcome(None, None, reader, valid, FRAME_NAMES)
        pd.testing.assert_frame_equal(df, original)
        if ds is not None:
            assert ds.n_rows == len(df)
            assert ds.n_features == (d if features is None else len(features))


# ---------------------------------------------------------------------- models

TRAIN = OfflineDataset(*_base(), n_users=U)
MODELS = {
    "OffC2LUB": OffC2LUB("overestimation", alpha=1.0, rng=0).fit(TRAIN),
    "OffC2LUB-gamma": OffC2LUB(0.5, alpha=1.0, rng=0).fit(TRAIN),
    "OffCLUB": OffCLUB(alpha=1.0, rng=0).fit(TRAIN),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_user_without_data_is_defined(name):
    """A user with no rows: CI = +∞ (so no certified neighbour in Off-C²LUB, every edge kept in
    Off-CLUB), finite decision estimates and a valid decision."""
    model = MODELS[name]
    assert model.counts_[U - 1] == 0
    assert np.isinf(model.ci_[U - 1])
    est = model.estimates()
    assert np.all(np.isfinite(est["theta"].values))
    k = model.decide(U - 1, np.eye(d))
    assert 0 <= k < d
    if name.startswith("OffC2LUB"):
        assert model.n_neighbours_[U - 1] == 0


@pytest.mark.parametrize("name", sorted(MODELS))
@SETTINGS
@given(user=index(U), actions=matrices(d))
def test_decide_never_corrupts(name, user, actions):
    model = MODELS[name]
    before = snapshot(model)
    valid = valid_id(user, U) and valid_array(actions, (None, d), min_rows=1)
    # decide draws from the tie-break stream; the check is on rejected calls
    k = check_outcome(
        model, before, lambda: model.decide(user, actions), valid, ("user", "actions")
    )
    if valid:
        assert isinstance(k, int) and 0 <= k < len(actions)
        s = model.scores(user, actions)
        assert s.shape == (len(actions),) and not np.any(np.isnan(s))


@pytest.mark.parametrize("name", ["OffC2LUB", "OffCLUB"])
@SMALL
@given(
    users=st.one_of(
        st.lists(st.integers(-1, U), min_size=0, max_size=3),
        st.sampled_from([[0.0], ["a"], np.zeros((1, 1), dtype=int)]),
    ),
    S=st.integers(0, 2),
    width=st.sampled_from([d, d, d - 1]),
    value=st.sampled_from([0.3, np.nan, -np.inf]),
)
def test_decide_batch_never_corrupts(name, users, S, width, value):
    model = MODELS[name]
    before = snapshot(model)
    arr = np.asarray(users)
    n = arr.shape[0] if arr.ndim >= 1 else 0
    actions = np.full((n, S, width), value)
    ok_users = arr.ndim == 1 and (
        arr.size == 0 or (arr.dtype.kind in "iu" and arr.min() >= 0 and arr.max() < U)
    )
    valid = ok_users and width == d and S >= 1 and (n == 0 or np.isfinite(value))
    out = check_outcome(
        model, before, lambda: model.decide_batch(users, actions), valid, ("users", "actions")
    )
    if out is not None:
        assert out.shape == (n,) and np.all((out >= 0) & (out < S))


@pytest.mark.parametrize("name", ["OffC2LUB", "OffCLUB"])
@SMALL
@given(case=st.sampled_from(DATA_CORRUPTIONS), i=st.integers(0, 10**6))
def test_refit_keeps_model_on_bad_data(name, case, i):
    kind, valid, _ = case
    model = copy.deepcopy(MODELS[name])
    before = snapshot(model)
    try:
        users, X, y, n_users = _corrupt_data(kind, i)
        data = OfflineDataset(users, X, y, n_users=n_users)
    except (ValueError, TypeError):
        data = pd.DataFrame({"user": [0, 1], "reward": [np.nan, 1.0], "x0": [0.1, 0.2]})
        valid = False
    if kind == "empty":
        valid = False  # nothing to fit
    fitted = check_outcome(
        model, before, lambda: model.fit(data), valid, ("data", "reward", "rows", "X")
    )
    if fitted is not None:
        assert fitted is model
        assert np.all(np.isfinite(model.estimates()["theta"].values))


def test_wrong_feature_width_is_refused_at_decide():
    model = MODELS["OffC2LUB"]
    before = snapshot(model)
    with pytest.raises(ValueError, match="actions"):
        model.decide(0, np.ones((3, d + 1)))
    with pytest.raises(ValueError, match="actions"):
        model.decide_batch([0, 1], np.ones((2, 3, d - 1)))
    assert snapshot(model) == before


CTOR = {
    "gamma_hat": pairs(
        ("overestimation", True),
        ("underestimation", True),
        (0.0, True),
        (0.7, True),
        (-0.1, False),
        (np.nan, False),
        ("auto", False),
    ),
    "alpha": pairs((0.1, True), (1.0, True), (0.0, False), (-1.0, False), ("1", False)),
    "lam": pairs((0.5, True), (1e-9, True), (0.0, False), (np.inf, False)),
    "delta": pairs((0.01, True), (1e-300, True), (0.0, False), (1.0, False), (2.0, False)),
    "beta_bias": pairs(("paper", True), ("theory", True), ("none", False)),
    "lambda_tilde_a": pairs(
        ("lambda_a", True), ("theory", True), (0.2, True), (0.0, False), ("x", False)
    ),
    "n_min": pairs((1, True), (0, True), ("theory", True), (-1, False), (1.5, False)),
    "ci": pairs(("paper", True), ("eigen", True), ("other", False)),
    "n_candidates": pairs((20, True), (1, True), (0, False), (2.0, False)),
}


@pytest.mark.parametrize("cls", [OffC2LUB, OffCLUB])
@SETTINGS
@given(data=st.data())
def test_constructor_validates(cls, data):
    spec = {
        k: v
        for k, v in CTOR.items()
        if cls is OffC2LUB or k not in ("gamma_hat", "n_min", "beta_bias")
    }
    chosen = {k: data.draw(v, label=k) for k, v in spec.items()}
    kw = {k: v for k, (v, _) in chosen.items()}
    valid = all(ok for _, ok in chosen.values())
    model = check_outcome(None, None, lambda: cls(rng=0, **kw), valid, tuple(spec))
    if model is not None and kw.get("lambda_tilde_a") != "theory" and kw.get("n_min") != "theory":
        model.fit(TRAIN)
        assert 0 <= model.decide(0, np.eye(d)) < d


# ---------------------------------------------------------------------- generators


@SETTINGS
@given(n_users=ids, n_clusters=ids, n_features=ids)
def test_cluster_thetas_validates(n_users, n_clusters, n_features):
    sizes = (n_users, n_clusters, n_features)
    ints = all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in sizes)
    valid = (
        ints
        and all(int(v) >= 1 for v in sizes)
        and int(n_clusters) <= int(n_users)
        and int(n_users) * int(n_features) <= 10**8
    )
    if valid and int(n_users) * int(n_features) > 10**4:
        return  # valid but too large to build here
    out = check_outcome(
        None,
        None,
        lambda: cluster_thetas(n_users, n_clusters, n_features, rng=0),
        valid,
        ("n_users", "n_clusters", "n_features"),
    )
    if out is not None:
        theta, labels = out
        assert theta.shape == (int(n_users), int(n_features)) and np.all(np.isfinite(theta))
        assert labels.shape == (int(n_users),) and labels.max() < int(n_clusters)


@SETTINGS
@given(
    labels=st.one_of(
        st.lists(st.integers(-1, 3), min_size=0, max_size=6),
        st.sampled_from([[0.5, 1.0], ["a"], None]),
    ),
    distribution=st.sampled_from(["equal", "unequal", "dirichlet", "uniform", None]),
)
def test_user_probabilities_validates(labels, distribution):
    try:
        p = user_probabilities(labels, distribution, rng=0)
    except (ValueError, TypeError) as exc:
        assert any(n in str(exc) for n in ("labels", "distribution")), exc
        return
    arr = np.asarray(labels)
    assert arr.size >= 1 and arr.dtype.kind in "iu"
    assert p.shape == (arr.size,) and np.all(p >= 0) and abs(p.sum() - 1) < 1e-12


GEN = {
    "n_samples": pairs((50, True), (1, True), (0, False), (-1, False), (2.5, False)),
    "logging": pairs(("random", True), ("linucb", True), ("greedy", False)),
    "n_candidates": pairs((5, True), (1, True), (0, False)),
    "noise_sd": pairs((0.05, True), (0.0, True), (-1.0, False), (np.nan, False)),
    "theta": pairs(
        (np.ones((4, 3)) / 2, True),
        (np.array([[np.nan, 0.0, 0.0]] * 4), False),
        (np.ones(3), False),
        (np.ones((4, 3)) * 1e200, False),
    ),
}


@SMALL
@given(data=st.data())
def test_generate_offline_validates(data):
    chosen = {k: data.draw(v, label=k) for k, v in GEN.items()}
    kw = {k: v for k, (v, _) in chosen.items()}
    valid = all(ok for _, ok in chosen.values())
    theta, n = kw.pop("theta"), kw.pop("n_samples")
    ds = check_outcome(
        None, None, lambda: generate_offline(theta, n, rng=0, **kw), valid, (*GEN, "theta")
    )
    if ds is not None:
        assert ds.n_rows == n and ds.n_users == 4 and ds.n_features == 3
        assert np.all(np.isfinite(ds.X)) and np.all(np.isfinite(ds.rewards))
