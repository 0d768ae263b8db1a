"""SCLUB, CLUB, LinUCB-One and LinUCB-Ind batches: ``select_batch`` and ``update_batch`` make
the decisions, tie draws and state of the loop of ``select``/``update`` calls in the same order,
bit for bit, with splits, merges, edge deletions and periodic recomputations happening inside
the batches; refused batches change nothing; user ids may be strings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierbandit.sclub.env import ClusteredLinearEnv
from hierbandit.sclub.policies import CLUB, SCLUB, LinUCBInd, LinUCBOne
from tests.conftest import snapshot

N_USERS, D, L = 40, 5, 8

CONFIGS = {
    "sclub": (SCLUB, {}),
    "sclub-often": (SCLUB, {"recompute_every": 7, "user_recompute_every": 5}),
    "sclub-reference": (SCLUB, "reference"),
    "sclub-cluster-avg": (SCLUB, {"freq_test": "cluster_avg", "pivot": "current"}),
    "club": (CLUB, {"recompute_every": 11, "user_recompute_every": 6}),
    "club-complete": (CLUB, {"graph": "complete", "bonus": "no_sqrt"}),
    "linucb-one": (LinUCBOne, {"recompute_every": 9}),
    "linucb-ind": (LinUCBInd, {"tie_break": "first", "beta": 0.3}),
}


def _make(name, **extra):
    cls, kw = CONFIGS[name]
    if kw == "reference":
        return cls.reference(N_USERS, D, rng=5, **extra)
    return cls(N_USERS, D, rng=5, **kw, **extra)


def _rounds(seed, T=2400, B=60):
    """Blocks of B requests of a planted-cluster stream, with exact ties (requests whose items
    are all the same row, and duplicated rows) and random allowed masks."""
    env = ClusteredLinearEnv(N_USERS, 4, D, L, rng=seed)
    roll = env.rollout(T, rng=seed + 1)
    rng = np.random.default_rng(seed + 2)
    for s in range(0, T, B):
        users = roll.users[s : s + B]
        items = roll.items[s : s + B].copy()
        means = roll.means[s : s + B].copy()
        tie = rng.random(users.size) < 0.15
        items[tie] = items[tie, :1]  # every candidate the same: an L-way tie
        means[tie] = means[tie, :1]
        dup = rng.random(users.size) < 0.2
        items[dup, 1] = items[dup, 0]
        means[dup, 1] = means[dup, 0]
        mask = rng.random(means.shape) < 0.7
        mask[np.arange(users.size), rng.integers(L, size=users.size)] = True
        yield users, items, means, roll.noise[s : s + B], mask


def _reward(means, noise, choice):
    return (noise < means[np.arange(choice.size), choice]).astype(float)


def _loop_block(p, users, items, means, noise, mask):
    """One block through the public single calls; returns the choices and the number of
    clusters after every update."""
    masked = np.array(
        [p.select(int(u), X, allowed=m) for u, X, m in zip(users, items, mask, strict=True)]
    )
    plain = np.array([p.select(int(u), X) for u, X in zip(users, items, strict=True)])
    shared = np.array(
        [p.select(int(u), items[0], allowed=m) for u, m in zip(users, mask, strict=True)]
    )
    y = _reward(means, noise, masked)
    ncl = []
    for u, X, k, r in zip(users, items, masked, y, strict=True):
        p.update(int(u), X[k], float(r))
        ncl.append(p.n_clusters)
    return masked, plain, shared, np.array(ncl)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_batches_equal_the_loop(name):
    loop, batch = _make(name), _make(name)
    ncl = [loop.n_clusters]
    for users, items, means, noise, mask in _rounds(3):
        want, plain, shared, counts = _loop_block(loop, users, items, means, noise, mask)
        got = batch.select_batch(users, items, allowed=mask)
        assert np.array_equal(got, want)
        assert mask[np.arange(users.size), got].all()
        assert np.array_equal(batch.select_batch(users, items), plain)
        # one item set for every request: each slot's scores are computed once and reused
        assert np.array_equal(batch.select_batch(users, items[0], allowed=mask), shared)
        y = _reward(means, noise, got)
        batch.update_batch(users, items[np.arange(users.size), got], y)
        assert snapshot(batch) == snapshot(loop)
        ncl.extend(counts.tolist())
    steps = np.diff(ncl)
    if isinstance(loop, SCLUB | CLUB):
        assert steps.max() > 0  # splits (SCLUB) or components breaking up (CLUB) happened
    if name in ("sclub", "sclub-often"):
        assert steps.min() < 0  # and SCLUB merged clusters inside the batches


def test_ties_are_drawn_from_the_stream_in_order():
    """With every candidate tied, the choice is the tie draw: batch and loop draw the same
    uniforms and the choices are spread over the items."""
    a, b = SCLUB(N_USERS, D, rng=1), SCLUB(N_USERS, D, rng=1)
    items = np.tile(np.eye(D)[:1], (L, 1))
    users = np.arange(200) % N_USERS
    loop = [a.select(int(u), items) for u in users]
    got = b.select_batch(users, items)
    assert np.array_equal(got, loop)
    assert np.unique(got).size == L
    assert snapshot(a) == snapshot(b)


def test_shared_items_and_padding_equal_per_request_items():
    """A shared (L, d) item set equals the same set repeated per request; requests with fewer
    candidates, padded and masked, equal the loop over their own shorter lists."""
    rng = np.random.default_rng(0)
    a, b, c = SCLUB(N_USERS, D, rng=2), SCLUB(N_USERS, D, rng=2), SCLUB(N_USERS, D, rng=2)
    users = rng.integers(N_USERS, size=30)
    X = rng.normal(size=(L, D))
    for p in (a, b, c):  # some state first
        p.update_batch(users, rng.normal(size=(30, D)) * 0 + X[users % L], np.ones(30))
    shared = a.select_batch(users, X)
    assert np.array_equal(shared, b.select_batch(users, np.broadcast_to(X, (30, L, D))))
    lengths = rng.integers(1, L + 1, size=30)
    lists = [rng.normal(size=(n, D)) for n in lengths]
    padded = np.zeros((30, L, D))
    mask = np.zeros((30, L), dtype=bool)
    for i, Xi in enumerate(lists):
        padded[i, : len(Xi)] = Xi
        mask[i, : len(Xi)] = True
    loop = [c.select(int(u), Xi) for u, Xi in zip(users, lists, strict=True)]
    assert np.array_equal(a.select_batch(users, padded, allowed=mask), loop)


def test_dataframe_and_string_ids_equal_integer_codes():
    names = [f"user-{i:02d}" for i in range(N_USERS)]
    feats = [f"f{j}" for j in range(D)]
    coded = SCLUB(N_USERS, D, rng=4)
    named = SCLUB(users=names, features=feats, rng=4)
    assert named.n_users == N_USERS and named.n_features == D
    for users, items, means, noise, mask in _rounds(7, T=900):
        ids = np.array(names, dtype=object)[users]
        k = coded.select_batch(users, items, allowed=mask)
        assert np.array_equal(named.select_batch(ids, items, allowed=mask), k)
        assert named.select(ids[0], items[0], allowed=mask[0]) == coded.select(
            int(users[0]), items[0], allowed=mask[0]
        )
        rows = items[np.arange(users.size), k]
        y = _reward(means, noise, k)
        coded.update_batch(users, rows, y)
        frame = pd.DataFrame(rows, columns=feats).assign(user=ids, reward=y)
        named.update_batch(frame.sample(frac=1.0, random_state=0).sort_index())
    assert snapshot(named.stats) == snapshot(coded.stats)
    assert named.clusters().equals(coded.clusters().assign_coords(user=names))
    stats = named.user_stats()
    assert list(stats["feature"].values) == feats and stats["user"].values[3] == names[3]
    # the default column names x0 .. x{d-1}
    plain = LinUCBInd(3, 2, rng=0)
    plain.update_batch(
        pd.DataFrame({"user": [2, 0], "x0": [1.0, 0.5], "x1": [0.0, 1], "reward": 1})
    )
    assert plain.stats.n.tolist() == [1, 0, 1]


def _bad_batches():
    X = np.ones((4, D))
    good = ([0, 1, 2, 3], X, np.ones(4))
    nan = X.copy()
    nan[3, 1] = np.nan
    big = X.copy()
    big[3, 0] = 2e6
    return [
        (([0, 1, 2, N_USERS], X, good[2]), ValueError, r"users\[3\]"),
        (([0, 1, 2, -1], X, good[2]), ValueError, r"users\[3\]"),
        (([0, 1, 2, 3.0], X, good[2]), TypeError, "users"),
        (([0, 1, 2, "a"], X, good[2]), TypeError, "users"),
        (([0, 1, 2, True], X, good[2]), TypeError, "users"),
        ((good[0], nan, good[2]), ValueError, "item_features"),
        ((good[0], big, good[2]), ValueError, "item_features"),
        ((good[0], X[:3], good[2]), ValueError, "item_features"),
        ((good[0], X, [1.0, 1.0, 1.0, np.inf]), ValueError, "rewards"),
        ((good[0], X, [1.0, 1.0, 1.0]), ValueError, "rewards"),
        ((good[0], X, np.ones(4, dtype=bool)), TypeError, "rewards"),
    ]


@pytest.mark.parametrize("name", ["sclub", "club", "linucb-one"])
@pytest.mark.parametrize(("args", "exc", "match"), _bad_batches())
def test_a_bad_row_anywhere_refuses_the_whole_batch(name, args, exc, match):
    p = _make(name)
    for users, items, means, noise, _ in _rounds(1, T=240):
        k = p.select_batch(users, items)
        p.update_batch(users, items[np.arange(users.size), k], _reward(means, noise, k))
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        p.update_batch(*args)
    assert snapshot(p) == before


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"users": [0, 1, 99]}, ValueError, r"users\[2\]"),
        ({"items": np.ones((3, L, D + 1))}, ValueError, "items"),
        ({"items": np.ones((2, L, D))}, ValueError, "items"),
        ({"items": np.full((3, L, D), np.nan)}, ValueError, "items"),
        ({"items": np.ones((3, 0, D))}, ValueError, "items"),
        ({"allowed": np.ones((3, L))}, TypeError, "allowed"),
        ({"allowed": np.ones((3, L - 1), dtype=bool)}, ValueError, "allowed"),
        ({"allowed": np.eye(3, L, dtype=bool) & False}, ValueError, r"allowed\[0\] allows no"),
    ],
)
def test_bad_requests_raise_and_draw_nothing(kwargs, exc, match):
    p = _make("sclub")
    args = {"users": [0, 1, 2], "items": np.ones((3, L, D)), "allowed": None} | kwargs
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        p.select_batch(args["users"], args["items"], allowed=args["allowed"])
    assert snapshot(p) == before
    with pytest.raises((TypeError, ValueError), match="allowed"):
        p.select(0, np.ones((L, D)), allowed=np.zeros(L, dtype=bool))
    assert snapshot(p) == before


@pytest.mark.parametrize("name", ["sclub", "club", "linucb-one", "sclub-reference"])
def test_checkpoint_mid_stream_then_batches_continue_identically(name, tmp_path):
    cls = CONFIGS[name][0]
    straight, saved = _make(name), _make(name)
    blocks = list(_rounds(11, T=1200))
    for i, (users, items, means, noise, mask) in enumerate(blocks):
        if i == len(blocks) // 2:
            saved.save(tmp_path / "p.nc")
            saved = cls.load(tmp_path / "p.nc")
        for p in (straight, saved):
            k = p.select_batch(users, items, allowed=mask)
            p.update_batch(users, items[np.arange(users.size), k], _reward(means, noise, k))
    assert snapshot(saved) == snapshot(straight)


def test_labels_are_kept_by_checkpoints_and_clones(tmp_path):
    p = CLUB(users=["b", "a", "c"], features=["u", "v"], rng=0)
    p.update_batch(["c", "a"], np.eye(2), [1.0, 0.0])
    p.save(tmp_path / "club.nc")
    back = CLUB.load(tmp_path / "club.nc")
    assert back.users.values() == ["b", "a", "c"] and back.features == ("u", "v")
    assert snapshot(back) == snapshot(p)
    assert back.clone().users.values() == ["b", "a", "c"]
    with pytest.raises(ValueError, match="not one of"):
        back.update("d", [1.0, 0.0], 1.0)
    with pytest.raises(ValueError, match="n_users = 2 but 3 user ids"):
        SCLUB(2, 2, users=["b", "a", "c"])
    with pytest.raises(ValueError, match="given twice"):
        SCLUB(users=["b", "b"], n_features=2)
    with pytest.raises(TypeError, match="n_features"):
        LinUCBOne(users=["b", "a"])
