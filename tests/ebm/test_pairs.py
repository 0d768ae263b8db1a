"""Pair-sparse state of EbmTS/EbmUCB (:mod:`hierbandit.ebm._pairs`).

State grows with the (instance, arm) pairs that have data, and the results are those of the
dense layout it replaced, bit for bit: the decisions and final state of runs made by the dense
layout (tests/fixtures/dense-layout/results.json), the arm's recomputation and re-estimation
against the dense kernels on dense arrays built from the slots, and checkpoints of the dense
layout, which load (converted) and continue exactly. Hostile slot indexes are refused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from hierbandit.ebm import EbmTS, EbmUCB, _rows
from hierbandit.ebm import _pairs as PR
from hierbandit.errors import InvalidFileError
from hierbandit.stats import kernels as K
from hierbandit.stats.empirical_bayes import EBOptions
from tests.reliability.test_restore_rules import Crafted

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dense-layout"
RESULTS = json.loads((FIXTURES / "results.json").read_text())
FIXED = EBOptions(estimate_Sigma=False, estimate_sigma2=False)
CONFIGS = {
    "default": {},
    "every-pull": {"hyper_update_every": 1},
    # the dense layout ran the whole-arm drift control (recompute="arm"), which these
    # configurations exercise
    "budget-1-recompute-3": {"hyper_update_budget": 1.0, "recompute_every": 3, "recompute": "arm"},
    "fixed": {
        "eb_options": FIXED,
        "recompute_every": 5,
        "hyper_update_budget": 1.0,
        "recompute": "arm",
    },
}


def _dense_layout_run(cls, kw, seed=3, N=30, K=4, d=3):
    """The run of results.json (see tests/fixtures/dense-layout/README.md)."""
    p = cls(N, K, d, rng=seed, **kw)
    rng = np.random.default_rng(100 + seed)
    theta = rng.normal(size=(K, d))
    arms = []
    for _ in range(400):
        j = int(rng.integers(N))
        x = rng.normal(size=d)
        k = p.select(j, x)
        arms.append(int(k))
        p.update(j, x, k, float(x @ theta[k] + 0.5 * rng.normal()))
    for _ in range(4):
        J = rng.integers(0, N, 50)
        X = rng.normal(size=(50, d))
        A = p.select_batch(J, X)
        arms.extend(int(a) for a in A)
        p.update_batch(J, X, A, np.einsum("bd,bd->b", X, theta[A]) + 0.5 * rng.normal(size=50))
    post = p.posterior()
    return p, {
        "arms": arms,
        "mean": post["mean"].values.ravel().tolist(),
        "cov_diag": np.diagonal(post["cov"].values, axis1=-2, axis2=-1).ravel().tolist(),
        "Sigma": p.Sigma.ravel().tolist(),
        "sigma2": p.sigma2.tolist(),
        "n_obs": p.n_obs.ravel().tolist(),
    }


@pytest.mark.parametrize("key", sorted(RESULTS))
def test_the_dense_layouts_decisions_and_state_bit_for_bit(key):
    """600 decisions (single calls and batches) and the final posterior, Σ̂, σ̂² and row counts
    equal those the dense layout produced, float for float."""
    name, config = key.split("/")
    p, got = _dense_layout_run({"EbmTS": EbmTS, "EbmUCB": EbmUCB}[name], CONFIGS[config])
    want = RESULTS[key]
    assert got["arms"] == want["arms"]
    for field in ("mean", "cov_diag", "Sigma", "sigma2", "n_obs"):
        assert got[field] == want[field], field
    # and the state is sparse: one record per pair with rows, none for the others
    assert p.n_pairs == int(np.count_nonzero(p.n_obs)) < p.n_arms * p.n_instances


def test_state_grows_with_the_pairs_seen():
    """Construction allocates the int32 index only; each pair takes one record at its first
    row; a request or a prediction for a pair without data takes none."""
    N, Kn, d = 100_000, 5, 3
    p = EbmTS(N, Kn, d, rng=0)
    width = 3 * d * d + d + 2
    assert p._pair_slot.shape == (N, Kn) and p._pair_slot.dtype == np.int32
    assert p._pairs.shape == (0, width) and p.n_pairs == 0
    rng = np.random.default_rng(0)
    users = rng.choice(N, 2_000, replace=False)
    J = np.repeat(users, 3)
    arms = np.concatenate([rng.choice(Kn, 2, replace=False)[[0, 1, 0]] for _ in users])
    p.update_batch(J, rng.normal(size=(J.size, d)), arms, rng.normal(size=J.size))
    pairs = {(int(j), int(k)) for j, k in zip(J, arms, strict=True)}
    assert p.n_pairs == len(pairs) == 4_000
    assert p._pairs.shape == (4_000, width)
    assert p._pair_buffer().shape[0] <= 1.5 * 4_000 + 16
    assert np.count_nonzero(p._pair_slot >= 0) == 4_000
    p.select_batch(rng.integers(0, N, 500), rng.normal(size=(500, d)))
    p.predict(int(N - 1), np.ones(d))
    assert p.n_pairs == 4_000
    # a user's rows in one arm: one record, counted as it should be
    j, k = next(iter(pairs))
    s = p._pair_slot[j, k]
    assert p._pairs[s, PR.offsets(d)["n"]] == np.sum((j == J) & (arms == k))


@pytest.fixture(scope="module")
def sparse_policy():
    """A policy whose arms hold data for some instances only (and rows with a zero context:
    a pair with rows but G = 0), between re-estimations."""
    p = EbmTS(60, 3, 3, rng=1, hyper_update_budget=1.0, recompute_every=10**6)
    rng = np.random.default_rng(2)
    J = rng.integers(0, 40, 500)  # instances 40-59 hold no data
    X = rng.normal(size=(500, 3))
    X[::37] = 0.0
    p.update_batch(J, X, rng.integers(0, 3, 500), X @ np.ones(3) + rng.normal(size=500))
    assert 0 < p.n_pairs < 60 * 3
    return p


def _dense_blocks(p, k):
    return p._dense("Ct")[k], p._dense("A")[k]


@pytest.mark.parametrize("k", [0, 1, 2])
def test_recomputation_reads_the_slots_as_the_dense_layout(sparse_policy, k):
    """The compiled recomputation of an arm from its slots equals kernels.arm_posterior on
    the dense (N, d, d) arrays built from them (instances without data included), bit for bit."""
    p = copy.deepcopy(sparse_policy)
    G, b = p.G[k], p.b[k]
    Ct, A = np.empty_like(G), np.empty_like(G)
    P, r, Phi, beta0 = np.empty((3, 3)), np.empty(3), np.empty((3, 3)), np.empty(3)
    K.arm_posterior(G, b, p.Sigma[k], p.sigma2[k], p._P0[k], p._h0[k], Ct, A, P, r, Phi, beta0)
    _rows.recompute_pairs(k, p.n_instances, p._row_state())
    got_Ct, got_A = _dense_blocks(p, k)
    assert np.array_equal(got_Ct, Ct) and np.array_equal(got_A, A)
    for name, want in (("_P", P), ("_r", r), ("_Phi", Phi), ("_beta0", beta0)):
        assert np.array_equal(getattr(p, name)[k], want), name
    assert p._rank_one_count[k] == 0


@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize(
    "options", [EBOptions(), EBOptions(eb_iters=3, sigma2_df="paper", debias_ols_noise=True)]
)
def test_reestimation_reads_the_slots_as_the_dense_layout(sparse_policy, k, options):
    """The compiled re-estimation of an arm from its slots equals kernels.reestimate_arm on
    the dense arrays (the same cross-validation draws: the generators end in the same state)."""
    p = copy.deepcopy(sparse_policy)
    p.eb_options = options
    rng = copy.deepcopy(p._cv_rng)
    G, b, q, n = p.G[k], p.b[k], p.q[k], p.n_obs[k]
    Ct, A = np.empty_like(G), np.empty_like(G)
    Sigma = np.empty((3, 3))
    P, r, Phi, beta0 = np.empty((3, 3)), np.empty(3), np.empty((3, 3)), np.empty(3)
    args = options.reestimate_args
    sigma2, gamma, n_eff, _ = K.reestimate_arm(
        G,
        b,
        q,
        n,
        p._P0[k],
        p._h0[k],
        p.sigma2[k],
        p.Sigma[k].copy(),
        *args[:9],
        rng,
        options.cv_splits,
        *args[9:],
        Sigma,
        Ct,
        A,
        P,
        r,
        Phi,
        beta0,
    )
    state = p._row_state()
    _rows.reestimate_pairs(k, p.n_instances, state, p._row_options(), p._cv_rng)
    assert np.array_equal(p.Sigma[k], Sigma) and p.sigma2[k] == sigma2
    assert p.n_eff[k] == n_eff and np.array_equal(p.gamma[k], gamma, equal_nan=True)
    got_Ct, got_A = _dense_blocks(p, k)
    assert np.array_equal(got_Ct, Ct) and np.array_equal(got_A, A)
    for name, want in (("_P", P), ("_r", r), ("_Phi", Phi), ("_beta0", beta0)):
        assert np.array_equal(getattr(p, name)[k], want), name
    assert p._cv_rng.bit_generator.state == rng.bit_generator.state
    # the arm's empty record holds the blocks of the new hyperparameters (instance 59: no data)
    e = PR.views(p._empty[k], 3)
    assert np.array_equal(e["Ct"], Ct[59]) and np.array_equal(e["A"], A[59])


def test_python_update_equals_the_compiled_row(sparse_policy):
    """The Python ``_update`` (numpy views of the records, kernels.observe_row, a numpy gather
    for re-estimation) and the compiled row_step leave the same state."""
    py, nb = copy.deepcopy(sparse_policy), copy.deepcopy(sparse_policy)
    rng = np.random.default_rng(8)
    J = rng.integers(0, 60, 300)
    X = rng.normal(size=(300, 3))
    A = rng.integers(0, 3, 300)
    Y = rng.normal(size=300)
    for j, x, k, y in zip(J.tolist(), X, A.tolist(), Y.tolist(), strict=True):
        py._update(j, x, k, y)
    nb.update_batch(J, X, A, Y)
    from tests.ebm.test_serving import _same_state

    _same_state(py, nb)


@pytest.mark.parametrize("name", ["EbmTS", "EbmUCB"])
def test_a_dense_layout_checkpoint_loads_and_continues_exactly(name):
    """A checkpoint of the dense layout converts to the pair-sparse state and then makes the
    uninterrupted dense policy's decisions, ending in its posterior."""
    want = json.loads((FIXTURES / "continuation.json").read_text())[name]
    cls = {"EbmTS": EbmTS, "EbmUCB": EbmUCB}[name]
    p = cls.load(FIXTURES / f"{name}-dense.nc")
    assert p.t == want["t_saved"] and p.n_pairs == int(np.count_nonzero(p.n_obs))
    rng = np.random.default_rng()
    rng.bit_generator.state = want["rng_state"]
    ids = np.array([f"user-{i}" for i in range(40)]) if p.grow else np.arange(12)
    decisions = []
    for _ in range(8):
        J = rng.choice(ids, 25)
        X = rng.normal(size=(25, 2))
        A = p.select_batch(J, X)
        decisions.extend(np.asarray(A).tolist())
        p.update_batch(J, X, A, rng.normal(size=25) + X[:, 0])
    assert decisions == want["decisions"]
    assert p.posterior()["mean"].values.tolist() == want["mean"]
    assert p.sigma2.tolist() == want["sigma2"]


# ---------------------------------------------------------------------- hostile files


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    p = EbmUCB(6, 3, 2, rng=0)
    rng = np.random.default_rng(3)
    p.update_batch(
        rng.integers(0, 4, 40),
        rng.normal(size=(40, 2)),
        rng.integers(0, 3, 40),
        rng.normal(size=40),
    )
    assert 3 <= p.n_pairs < 18
    path = p.save(tmp_path_factory.mktemp("pairs") / "good.nc")
    assert EbmUCB.load(path).n_pairs == p.n_pairs
    return path, p


def _taken(c):
    slot = c.arr("_pair_slot")
    return slot, list(zip(*np.nonzero(slot >= 0), strict=True))


def _slot_out_of_range(c):
    slot, taken = _taken(c)
    slot[taken[0]] = slot.max() + 1


def _slot_beyond_int(c):
    slot, taken = _taken(c)
    slot[taken[0]] = 2**31 - 1


def _slot_twice(c):
    slot, taken = _taken(c)
    slot[taken[1]] = slot[taken[0]]


def _slot_dropped(c):
    slot, taken = _taken(c)
    slot[taken[0]] = -1


def _slot_added(c):
    slot = c.arr("_pair_slot")
    slot[tuple(np.argwhere(slot < 0)[0])] = 0


def _slot_negative(c):
    slot, taken = _taken(c)
    slot[taken[0]] = -5


def _field(name, value):
    def edit(c):
        c.arr("_pairs")[0, PR.offsets(2)[name]] = value

    return edit


def _asymmetric_gram(c):
    c.arr("_pairs")[0, PR.offsets(2)["G"] + 1] += 1.0


def _empty_with_data(c):
    c.arr("_empty")[1, PR.offsets(2)["G"]] = 1.0


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (_slot_out_of_range, "out of range"),
        (_slot_beyond_int, "out of range"),
        (_slot_negative, "out of range"),
        (_slot_twice, "names a slot twice"),
        (_slot_dropped, "names .* slots, but _pairs holds"),
        (_slot_added, "names .* slots, but _pairs holds"),
        (_field("n", 0.0), "whole number >= 1"),
        (_field("n", 1.5), "whole number >= 1"),
        (_field("n", 40.0), "do not sum to pulls"),
        (_field("q", -1.0), "pairs q"),
        (_field("q", np.nan), "NaN or inf"),
        (_asymmetric_gram, "pairs G"),
        (_empty_with_data, "empty records hold a nonzero G"),
    ],
)
def test_hostile_slot_indexes_and_records_are_refused(saved, tmp_path, edit, why):
    path, _ = saved
    c = Crafted(path)
    edit(c)
    with pytest.raises(InvalidFileError, match=why):
        EbmUCB.load(c.write(tmp_path / "bad.nc"))


def test_a_dense_layout_file_with_bad_arrays_is_refused(tmp_path):
    """A dense-layout checkpoint is checked after its conversion like any other."""
    c = Crafted(FIXTURES / "EbmUCB-dense.nc")
    c.arr("n_obs")[0, 0] = -1
    with pytest.raises(InvalidFileError, match="n_obs must hold counts"):
        EbmUCB.load(c.write(tmp_path / "bad.nc"))
    c = Crafted(FIXTURES / "EbmUCB-dense.nc")
    k, j = np.argwhere(c.arr("n_obs") > 0)[0]
    c.arr("G")[k, j, 0, 1] += 1.0
    with pytest.raises(InvalidFileError, match="pairs G is not symmetric"):
        EbmUCB.load(c.write(tmp_path / "bad2.nc"))
