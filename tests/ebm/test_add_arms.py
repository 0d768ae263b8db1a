"""Arms that arrive: ``EbmPolicy.add_arms``.

What is exactly comparable: a policy built with the arm from the start, which never pulled it,
against one that adds it later. Before the addition the first must not choose the arm (an
``allowed`` mask), so EbmUCB (deterministic scores, ``tie_break="first"``, nothing forced) makes
the same decisions; EbmTS draws one normal per arm and request, so its decisions differ before
the addition by construction, but its state under the same feedback rows is the same. After the
addition both policies are identical, bit for bit, through checkpoints too.
"""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.ebm import EbmTS, EbmUCB, LinTS, LinUCB
from tests.conftest import snapshot
from tests.ebm.test_serving import _same_state

N, K, D = 12, 3, 2


class Prior:
    """Prior entries of K + 1 arms (the fields a fitted prior has)."""

    def __init__(self, n_arms: int, seed: int = 0) -> None:
        g = np.random.default_rng(seed)
        self.shared_mean = g.normal(size=(n_arms, D))
        L = g.normal(size=(n_arms, D, D))
        self.shared_cov = L @ L.transpose(0, 2, 1) + np.eye(D)
        self.Sigma = 0.5 * (L @ L.transpose(0, 2, 1)) + 0.1 * np.eye(D)
        self.sigma2 = g.uniform(0.5, 2.0, n_arms)

    def first(self, n: int) -> Prior:
        out = object.__new__(Prior)
        for name in ("shared_mean", "shared_cov", "Sigma", "sigma2"):
            setattr(out, name, getattr(self, name)[:n].copy())
        return out

    def entries(self, start: int) -> dict[str, np.ndarray]:
        return {
            name: getattr(self, name)[start:].copy()
            for name in ("shared_mean", "shared_cov", "Sigma", "sigma2")
        }


def _play(p, rng, rounds, B, allowed=None):
    arms = []
    for _ in range(rounds):
        J = rng.integers(0, N, B)
        X = rng.normal(size=(B, D))
        a = p.select_batch(J, X, allowed=None if allowed is None else np.tile(allowed, (B, 1)))
        p.update_batch(J, X, a, X.sum(axis=1) * (1 + a) + rng.normal(size=B))
        arms.extend(a.tolist())
    return arms


def _same_arm_state(whole, grown):
    """The state of a policy that had every arm from the start and of one that added arms."""
    assert whole.n_arms == grown.n_arms and whole.arms == grown.arms
    _same_state(whole, grown)
    for name in ("_P0", "_h0"):
        assert np.array_equal(getattr(whole, name), getattr(grown, name)), name


@pytest.mark.parametrize("kw", [{}, {"hyper_update_every": 1}, {"hyper_update_budget": 1.0}])
def test_an_added_arm_equals_an_arm_never_pulled_from_the_start(kw):
    kw = {"forced_init": "none", "tie_break": "first", "rng": 4, **kw}
    whole, grown = EbmUCB(N, K + 1, D, **kw), EbmUCB(N, K, D, **kw)
    r1, r2 = np.random.default_rng(0), np.random.default_rng(0)
    mask = np.array([True] * K + [False])
    assert _play(whole, r1, 10, 20, allowed=mask) == _play(grown, r2, 10, 20)
    grown.add_arms([K])
    assert grown.arms.kind == "range" and grown.n_arms == K + 1
    _same_arm_state(whole, grown)
    after = _play(whole, r1, 15, 20)
    assert _play(grown, r2, 15, 20) == after
    assert K in after  # the new arm is chosen
    _same_arm_state(whole, grown)
    # single calls consider it too
    x = np.array([0.3, -0.2])
    assert grown.select(1, x) == whole.select(1, x)


def test_an_added_arm_with_prior_entries_equals_the_arm_of_a_prior():
    prior = Prior(K + 2)
    kw = {"tie_break": "first", "rng": 2}
    whole = EbmUCB(N, prior=prior, **kw)
    grown = EbmUCB(N, prior=prior.first(K), **kw)
    r1, r2 = np.random.default_rng(1), np.random.default_rng(1)
    mask = np.array([True] * K + [False, False])
    assert _play(whole, r1, 6, 25, allowed=mask) == _play(grown, r2, 6, 25)
    grown.add_arms([K, K + 1], prior=prior.entries(K))
    _same_arm_state(whole, grown)
    assert _play(grown, r2, 10, 25) == _play(whole, r1, 10, 25)
    _same_arm_state(whole, grown)


def test_thompson_sampling_state_under_the_same_feedback():
    """EbmTS: the same rows give the same state (the Thompson stream is not used by updates)."""
    whole, grown = (
        EbmTS(None, arms=["a", "b", "c"], n_features=D, rng=3),
        EbmTS(None, arms=["a", "b"], n_features=D, rng=3),
    )
    rng = np.random.default_rng(5)
    users = [f"u{i}" for i in range(30)]

    def feed(p, arms):
        J = rng.choice(users, 40)
        X = rng.normal(size=(40, D))
        Y = rng.normal(size=40)
        p.update_batch(J, X, arms, Y)
        return J, X, arms, Y

    for _ in range(5):
        rows = feed(whole, rng.choice(["a", "b"], 40))
        grown.update_batch(*rows)
    grown.add_arms(["c"])
    _same_arm_state(whole, grown)
    for _ in range(5):
        rows = feed(whole, rng.choice(["a", "b", "c"], 40))
        grown.update_batch(*rows)
    _same_arm_state(whole, grown)
    assert list(grown.posterior()["arm"].values) == ["a", "b", "c"]
    assert grown.hyperparameters()["pulls"].sel(arm="c") > 0


def test_added_arms_survive_checkpoints_and_clones(tmp_path):
    prior = Prior(K + 1, seed=3)
    p = EbmUCB(N, K, D, tie_break="first", rng=6)
    rng = np.random.default_rng(2)
    _play(p, rng, 4, 20)
    p.add_arms([K], prior=prior.entries(K))
    p.add_arms([K + 1])
    assert p.n_arms == K + 2 and list(p.added_arms["prior"]) == [True, False]
    _play(p, rng, 4, 20)
    q = EbmUCB.load(p.save(tmp_path / "p.nc"))
    assert q.n_arms == K + 2
    r1, r2 = np.random.default_rng(9), np.random.default_rng(9)
    assert _play(q, r1, 6, 20) == _play(p, r2, 6, 20)
    assert snapshot(q) == snapshot(p)
    fresh = p.clone()
    assert fresh.n_arms == K + 2 and fresh.t == 0
    whole = EbmUCB(N, prior=prior, tie_break="first", rng=6)  # arm K's prior entries
    assert np.array_equal(fresh._P0[K], whole._P0[K]) and np.array_equal(fresh._h0[K], whole._h0[K])
    assert np.array_equal(fresh.Sigma[K], whole.Sigma[K]) and fresh.sigma2[K] == whole.sigma2[K]
    plain = EbmUCB(N, K + 2, D)  # the others: the lam prior and the default initial values
    for name in ("_P0", "_h0", "Sigma", "sigma2", "_Phi", "_beta0"):
        keep = [0, 1, 2, K + 1]
        assert np.array_equal(getattr(fresh, name)[keep], getattr(plain, name)[keep]), name


def test_a_new_arm_starts_from_the_policys_shared_initial_values():
    S = np.array([[2.0, 0.5], [0.5, 1.0]])
    p = EbmTS(N, K, D, Sigma_init=S, sigma2_init=0.3, rng=0)
    p.add_arms([K])
    assert np.array_equal(p.Sigma[K], S) and p.sigma2[K] == 0.3
    assert np.array_equal(p._Phi[K], EbmTS(N, K + 1, D, Sigma_init=S, sigma2_init=0.3)._Phi[K])
    per_arm = EbmTS(N, K, D, Sigma_init=np.stack([S] * K), sigma2_init=np.full(K, 0.3), rng=0)
    per_arm.add_arms([K])
    assert np.array_equal(per_arm.Sigma[K], np.eye(D)) and per_arm.sigma2[K] == 1.0


def test_refused_additions_change_nothing():
    p = EbmTS(None, arms=["a", "b"], n_features=D, rng=0)
    rng = np.random.default_rng(0)
    p.update_batch(["u", "v", "u"], rng.normal(size=(3, D)), ["a", "b", "b"], [1.0, 2.0, 3.0])
    before = snapshot(p)
    bad = [
        ((["a"],), {}, ValueError, "given twice"),
        ((["c", "c"],), {}, ValueError, "given twice"),
        (([3],), {}, TypeError, "strings"),
        (("c",), {}, TypeError, "sequence of arm ids"),
        (([],), {}, ValueError, "at least one"),
        ((["c"],), {"prior": {"Sigma": np.eye(D)}}, TypeError, "prior must provide"),
        (
            (["c"],),
            {
                "prior": {
                    "shared_mean": np.zeros((2, D)),
                    "shared_cov": np.stack([np.eye(D)] * 2),
                    "Sigma": np.stack([np.eye(D)] * 2),
                    "sigma2": np.ones(2),
                }
            },
            ValueError,
            "shapes",
        ),
        (
            (["c"],),
            {
                "prior": {
                    "shared_mean": np.zeros((1, D)),
                    "shared_cov": np.zeros((1, D, D)),
                    "Sigma": np.eye(D)[None],
                    "sigma2": np.ones(1),
                }
            },
            ValueError,
            "positive definite",
        ),
        (
            (["c"],),
            {
                "prior": {
                    "shared_mean": np.zeros((1, D)),
                    "shared_cov": np.eye(D)[None],
                    "Sigma": np.eye(D)[None],
                    "sigma2": np.array([-1.0]),
                }
            },
            ValueError,
            "sigma2",
        ),
    ]
    for args, kw, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            p.add_arms(*args, **kw)
        assert snapshot(p) == before
    every = {
        "Sigma": np.stack([np.eye(D)] * K),
        "sigma2": np.ones(K),
        "shared_mean": np.zeros((K, D)),
        "shared_cov": np.zeros((K, D, D)),
        "prior": np.zeros(K, dtype=bool),
    }
    with pytest.raises(ValueError, match="between 1 and n_arms"):
        EbmTS(N, K, D, added_arms=every)
    with pytest.raises(TypeError, match="added_arms must be a dict"):
        EbmTS(N, K, D, added_arms={"Sigma": np.eye(D)})


@pytest.mark.parametrize("cls", [LinUCB, LinTS])
def test_linear_baselines_add_arms(cls, tmp_path):
    """LinUCB: decisions and state of an arm added later equal those of an arm never pulled
    from the start; LinTS (K normals per request): the state under the same feedback."""
    kw = {"tie_break": "first", "rng": 1}
    whole = cls(N, arms=["a", "b", "c", "d"], n_features=D, **kw)
    grown = cls(N, arms=["a", "b", "c"], n_features=D, **kw)
    rng = np.random.default_rng(4)
    for p in (whole, grown):
        p.update_batch(
            rng.integers(0, N, 60),
            rng.normal(size=(60, D)),
            rng.choice(["a", "b"], 60),
            rng.normal(size=60),
        )
        rng = np.random.default_rng(4)
    grown.add_arms(["d"])
    assert grown.arms == whole.arms and grown.n_arms == 4
    assert snapshot(grown.stats) == snapshot(whole.stats)
    if cls is LinUCB:
        r1, r2 = np.random.default_rng(6), np.random.default_rng(6)
        got = [[], []]
        for _ in range(6):
            for i, (p, r) in enumerate(((whole, r1), (grown, r2))):
                J, X = r.integers(0, N, 20), r.normal(size=(20, D))
                a = p.select_batch(J, X)
                got[i].extend(a)
                p.update_batch(J, X, a, r.normal(size=20))
        assert got[0] == got[1] and "d" in got[0]
        assert snapshot(grown.stats) == snapshot(whole.stats)
    q = cls.load(grown.save(tmp_path / "p.nc"))
    assert q.arms == whole.arms and snapshot(q.stats) == snapshot(grown.stats)
    with pytest.raises(ValueError, match="given twice"):
        grown.add_arms(["a"])
    with pytest.raises(TypeError, match="strings"):
        grown.add_arms([7])
    assert snapshot(q.stats) == snapshot(grown.stats)
