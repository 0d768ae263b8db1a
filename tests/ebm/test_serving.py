"""Serving real traffic with EbmTS/EbmUCB: ids of any int/str type, instances that arrive,
batched decisions and feedback, the default hyperparameter schedule.

Every fast path is checked against the slow one it replaces: a batch of decisions against the
loop of ``select`` calls, a batch of feedback against the loop of the Python ``_update`` (the
reference implementation), a new instance's prediction against the closed form of the shared
posterior, the default schedule at N ≤ budget against the paper's every-pull schedule.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierbandit._labels import Labels
from hierbandit.ebm import EbmTS, EbmUCB, LinUCB
from hierbandit.errors import InvalidFileError
from tests.reliability.test_restore_rules import Crafted

STATE = ("_pair_slot", "_pairs", "_empty", "Sigma", "sigma2", "gamma", "n_eff")
STATE += ("_P", "_r", "_Phi", "_beta0", "pulls", "arrivals", "_rank_one_count", "_since_estimate")


def _same_state(p1, p2):
    """The same state bit for bit: the slot of every pair, the records, the arms' arrays."""
    n, used = p1.n_instances, p1.n_pairs
    assert n == p2.n_instances and p1.t == p2.t and used == p2.n_pairs
    for name in STATE:
        a, b = getattr(p1, name), getattr(p2, name)
        if name in ("_pair_slot", "arrivals"):
            a, b = a[:n], b[:n]
        elif name == "_pairs":
            a, b = a[:used], b[:used]
        assert np.array_equal(a, b, equal_nan=True), name


def _rounds(rng, ids, d, T, B):
    for _ in range(T // B):
        yield rng.choice(ids, B), rng.normal(size=(B, d)), rng.normal(size=B)


CONFIGS = [
    {},
    {"hyper_update_every": 1},
    {"hyper_update_every": 7},
    {"forced_init": "per_instance", "alpha_clock": "instance"},
    {"hyper_update_budget": 2.0},
]


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
@pytest.mark.parametrize("kw", CONFIGS)
def test_batches_equal_the_loop(cls, kw):
    """select_batch returns the arms of the loop of select; update_batch leaves the state of
    the loop of _update (the Python reference), bit for bit, over many rounds."""
    N, K, d = 25, 4, 3
    loop, batch = cls(N, K, d, rng=3, **kw), cls(N, K, d, rng=3, **kw)
    rng = np.random.default_rng(0)
    for J, X, Y in _rounds(rng, np.arange(N), d, 800, 40):
        arms = np.array([loop.select(int(j), x) for j, x in zip(J, X, strict=True)])
        assert np.array_equal(batch.select_batch(J, X), arms)
        for j, x, k, y in zip(J, X, arms, Y, strict=True):
            loop._update(int(j), x, int(k), float(y))
        batch.update_batch(J, X, arms, Y)
    _same_state(loop, batch)


def test_growing_policy_with_string_ids_equals_its_loop():
    """New string user ids in batches: the same arms and state as one call at a time."""
    arms = ["news", "sport", "music"]
    kw = {"arms": arms, "n_features": 2, "features": ["age", "hour"], "rng": 5}
    loop, batch = EbmTS(**kw), EbmTS(**kw)
    assert loop.grow and loop.n_instances == 0
    users = np.array([f"user-{i}" for i in range(60)])
    rng = np.random.default_rng(1)
    for J, X, Y in _rounds(rng, users, 2, 600, 50):
        chosen = [loop.select(u, x) for u, x in zip(J, X, strict=True)]
        assert set(chosen) <= set(arms)
        assert list(batch.select_batch(J, X)) == chosen
        for u, x, a, y in zip(J, X, chosen, Y, strict=True):
            loop.update(u, x, a, y)
        frame = pd.DataFrame({"instance": J, "arm": chosen, "reward": Y})
        frame[["age", "hour"]] = X
        batch.update_batch(frame)
    _same_state(loop, batch)
    assert loop.instances.values() == batch.instances.values()
    assert loop.n_instances == len(set(users) & set(loop.instances.values()))
    post = batch.posterior()
    assert list(post["arm"].values) == arms
    assert list(post["feature"].values) == ["age", "hour"]
    assert set(post["instance"].values) <= set(users)
    assert list(batch.hyperparameters()["arm"].values) == arms


def test_a_new_instance_gets_the_shared_posterior():
    """An id never seen: μ̂ = xᵀβ̂₀ and τ² = xᵀ(Σ + Φ)x (closed form), and a select for it
    registers nothing."""
    p = EbmUCB(None, 3, 2, rng=0)
    rng = np.random.default_rng(2)
    p.update_batch(
        rng.integers(0, 30, 300),
        rng.normal(size=(300, 2)),
        rng.integers(0, 3, 300),
        rng.normal(size=300),
    )
    n = p.n_instances
    x = np.array([0.3, -1.2])
    mu, tau = p.predict(10_000, x)
    Phi = p.posterior()["shared_cov"].values
    for k in range(3):
        assert mu[k] == pytest.approx(x @ p._beta0[k], rel=1e-10, abs=1e-12)
        assert tau[k] ** 2 == pytest.approx(x @ (p.Sigma[k] + Phi[k]) @ x, rel=1e-9)
    p.select(10_000, x)
    p.select_batch([10_000, 10_001], np.stack([x, x]))
    assert p.n_instances == n


def test_default_schedule_is_every_pull_while_n_is_within_the_budget():
    N, K, d = 10, 3, 2
    paper, default = EbmTS(N, K, d, hyper_update_every=1, rng=1), EbmTS(N, K, d, rng=1)
    rng = np.random.default_rng(3)
    for J, X, Y in _rounds(rng, np.arange(N), d, 400, 20):
        arms = paper.select_batch(J, X)
        assert np.array_equal(default.select_batch(J, X), arms)
        paper.update_batch(J, X, arms, Y)
        default.update_batch(J, X, arms, Y)
    _same_state(paper, default)


def test_default_schedule_spaces_reestimations_by_n_over_budget():
    N = 400
    p = EbmUCB(N, 2, 2, hyper_update_budget=20.0, rng=0)
    rng = np.random.default_rng(4)
    seen = []
    for i in range(200):
        before = p._since_estimate.copy()
        p.update(int(rng.integers(N)), rng.normal(size=2), i % 2, float(rng.normal()))
        if np.any(p._since_estimate < before):
            seen.append(i)
    # arm i % 2 is re-estimated once it has 400 / 20 = 20 pulls since the last time
    assert seen == [i for i in range(200) if (i // 2 + 1) % 20 == 0]


def test_ties_are_broken_as_in_the_loop():
    """With no data and no forced arms every arm ties: the tie draws follow the loop's."""
    loop, batch = (
        EbmUCB(5, 4, 2, forced_init="none", rng=7),
        EbmUCB(5, 4, 2, forced_init="none", rng=7),
    )
    J = np.arange(5).repeat(4)
    X = np.zeros((20, 2))
    arms = [loop.select(int(j), x) for j, x in zip(J, X, strict=True)]
    assert len(set(arms)) > 1
    assert list(batch.select_batch(J, X)) == arms


def test_allowed_arms():
    p = EbmTS(None, arms=["a", "b", "c", "d"], n_features=2, rng=0)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 2))
    J = rng.integers(0, 10, 200)
    mask = rng.random((200, 4)) < 0.5
    mask[np.arange(200), rng.integers(0, 4, 200)] = True
    out = p.select_batch(J, X, allowed=mask)
    codes = np.array(["abcd".index(a) for a in out])
    assert mask[np.arange(200), codes].all()
    assert p.select(3, X[0], allowed=["c"]) == "c"
    lists = [["a", "d"]] * 200
    assert set(p.select_batch(J, X, allowed=lists)) <= {"a", "d"}
    with pytest.raises(ValueError, match="allows no arm"):
        p.select_batch(J[:2], X[:2], allowed=np.zeros((2, 4), dtype=bool))
    with pytest.raises(ValueError, match="not one of this policy's arms"):
        p.select(1, X[0], allowed=["z"])


def test_a_prior_gives_labels_and_no_forced_round_robin():
    class Prior:
        shared_mean = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
        shared_cov = np.broadcast_to(np.eye(2) * 1e-4, (3, 2, 2)).copy()
        Sigma = np.broadcast_to(np.eye(2) * 1e-4, (3, 2, 2)).copy()
        sigma2 = np.ones(3)

    p = EbmUCB(None, prior=Prior(), a=0.0, rng=0)
    assert (p.n_arms, p.n_features, p.forced_init) == (3, 2, "none")
    # before any feedback every request goes to the arm the prior prefers
    X = np.tile([1.0, 0.0], (8, 1))
    assert list(p.select_batch(np.arange(8), X)) == [1] * 8
    assert EbmUCB(None, prior=Prior(), forced_init="global").select(0, X[0]) == 0


def test_a_refused_batch_changes_nothing(tmp_path):
    p = EbmTS(None, 3, 2, rng=0)
    rng = np.random.default_rng(6)
    p.update_batch(
        rng.integers(0, 5, 50),
        rng.normal(size=(50, 2)),
        rng.integers(0, 3, 50),
        rng.normal(size=50),
    )
    p.save(tmp_path / "before.nc")
    before = EbmTS.load(tmp_path / "before.nc")
    J = np.array([1, 2, 99, 100])
    X = rng.normal(size=(4, 2))
    bad = [
        (J, X, [0, 1, 2, 3], np.zeros(4), "arms must be in"),
        (J, X, [0, 1, 2, 0], [0.0, np.nan, 0.0, 0.0], "rewards must be finite"),
        (J, X[:3], [0, 1, 2, 0], np.zeros(4), "a 1-D array of 3"),
        (J, X[:, :1], [0, 1, 2, 0], np.zeros(4), "contexts must have shape"),
        (J, np.where(X > 0, 1e9, X), [0, 1, 2, 0], np.zeros(4), "contexts must have magnitude"),
        ([1, 2, "u", 3], X, [0, 1, 2, 0], np.zeros(4), "all integers or all strings"),
        ([1, 2, 3.5, 3], X, [0, 1, 2, 0], np.zeros(4), "integer or string id"),
    ]
    for j, x, a, y, msg in bad:
        with pytest.raises((ValueError, TypeError), match=msg):
            p.update_batch(j, x, a, y)
    p._trim()
    _same_state(p, before)
    assert p.instances == before.instances


def test_fixed_policies_refuse_unknown_ids():
    p = EbmTS(4, 2, 2)
    with pytest.raises(ValueError, match=r"in \[0, 4\)"):
        p.select_batch([0, 4], np.zeros((2, 2)))
    q = EbmTS(instances=["a", "b"], n_arms=2, n_features=2, grow=False)
    with pytest.raises(ValueError, match="not one of this policy's 2 instances"):
        q.update("c", [0.0, 0.0], 0, 1.0)
    with pytest.raises(ValueError, match="keeps a fixed set of instances"):
        LinUCB(None, 2, 2)


def test_checkpoints_keep_labels_and_continue_exactly(tmp_path):
    kw = {"arms": ["x", "y"], "n_features": 2, "features": ["f", "g"], "rng": 9}
    p = EbmTS(**kw)
    rng = np.random.default_rng(7)
    users = np.array(["ä-1", "b", "ccc", "d-ü"])
    for J, X, Y in _rounds(rng, users, 2, 120, 30):
        p.update_batch(J, X, p.select_batch(J, X), Y)
    p.save(tmp_path / "p.nc")
    q = EbmTS.load(tmp_path / "p.nc")
    assert q.instances.values() == p.instances.values() and q.features == ("f", "g")
    for J, X, Y in _rounds(rng, np.append(users, "new"), 2, 120, 30):
        a = p.select_batch(J, X)
        assert list(q.select_batch(J, X)) == list(a)
        p.update_batch(J, X, a, Y)
        q.update_batch(J, X, a, Y)
    _same_state(p, q)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda c: c.arr("instances._ends").__setitem__(0, 10_000), "offsets"),
        (lambda c: c.arr("instances._utf8").__setitem__(0, 0xFF), "UTF-8"),
        (lambda c: c.arr("instances._utf8").__setitem__(slice(0, 2), [98, 98]), "not unique"),
        (lambda c: c.state("instances.n", 2), "n_instances = 3 but 2 instance ids"),
        (lambda c: c.state("instances.n", 5), "does not hold 5 ids"),
        (lambda c: c.state("instances.kind", "pickle"), "unknown kind"),
    ],
)
def test_hostile_label_tables_are_refused(tmp_path, edit, why):
    p = EbmTS(instances=["ab", "bb", "cd"], n_arms=2, n_features=2, rng=0)
    p.update_batch(["ab", "bb", "cd"], np.ones((3, 2)), [0, 1, 0], [1.0, 2.0, 3.0])
    p.save(tmp_path / "good.nc")
    c = Crafted(tmp_path / "good.nc")
    edit(c)
    with pytest.raises(InvalidFileError, match=why):
        EbmTS.load(c.write(tmp_path / "bad.nc"))


def test_labels_table():
    lab = Labels(["a", "é", "c"], name="instance")
    assert lab.get("é") == 1 and lab.get("z") == -1
    assert list(lab.labels(np.array([2, 0]))) == ["c", "a"]
    with pytest.raises(ValueError, match="given twice"):
        lab.extend(["a"])
    with pytest.raises(TypeError, match="strings"):
        lab.add(3)
    r = Labels.range(3, name="arm")
    assert r.get(2) == 2 and r.get(3) == -1
    r.add(3)
    r.add(10)
    assert r.kind == "int" and r.values() == [0, 1, 2, 3, 10]
    with pytest.raises(TypeError, match="integer or string"):
        Labels([True])


def test_a_checkpoint_between_recomputations_at_large_n_loads(tmp_path):
    """The arm's recomputation waits for N / budget incremental steps (recompute_due): a
    policy saved after more than recompute_every of them is a valid state."""
    from hierbandit.stats.empirical_bayes import EBOptions

    fixed = EBOptions(estimate_Sigma=False, estimate_sigma2=False)
    p = EbmTS(50, 2, 2, rng=0, eb_options=fixed, recompute_every=5, hyper_update_budget=1.0)
    rng = np.random.default_rng(0)
    for _ in range(40):
        p.update(int(rng.integers(50)), rng.normal(size=2), 0, float(rng.normal()))
    assert p._rank_one_count[0] == 40  # past recompute_every, below N / budget
    p.save(tmp_path / "p.nc")
    q = EbmTS.load(tmp_path / "p.nc")
    assert np.array_equal(q._rank_one_count, p._rank_one_count)


def test_a_mix_of_integer_and_string_ids_is_refused():
    """NumPy would read [5, "a"] as two strings: the batch is refused, the policy unchanged."""
    p = EbmTS(n_arms=2, n_features=1, rng=0)
    p.update_batch(["a"], np.ones((1, 1)), [0], [1.0])
    for call in (
        lambda: p.select_batch(["a", 5], np.ones((2, 1))),
        lambda: p.update_batch(["a", 5], np.ones((2, 1)), [0, 1], [1.0, 2.0]),
    ):
        with pytest.raises(TypeError, match="not a mix"):
            call()
    assert p.t == 1 and p.instances.values() == ["a"]
