"""Hostile checkpoints whose seal, declarations and shapes are valid but whose *values* would
corrupt memory, hang or mislead the compiled kernels: each is refused by a class rule of
:mod:`hierbandit._restore_rules`, with a message naming the attribute.

Every file here is crafted as an attacker would: a real mid-run checkpoint is opened with
xarray, its arrays or its JSON description edited, and the result written and sealed again
with a valid checksum.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from hierbandit._container import seal
from hierbandit.checkpoint import _ATTR, KIND, load_checkpoint, save_checkpoint
from hierbandit.errors import InvalidFileError

# ---------------------------------------------------------------------- crafting


def _entries(node: Any, ids: dict[str, Any]) -> None:
    """Every shared entry of the description by its ``__id__``."""
    if isinstance(node, dict):
        if "__id__" in node:
            ids[node["__id__"]] = node
        for v in node.values():
            _entries(v, ids)
    elif isinstance(node, list):
        for v in node:
            _entries(v, ids)


class Crafted:
    """A checkpoint opened for editing: ``arr("stats.next")`` is the array of that attribute
    (edit it in place), ``state("t", value)`` replaces a JSON value."""

    def __init__(self, path: Path) -> None:
        with xr.open_datatree(path, engine="h5netcdf") as tree:
            self.root = tree.to_dataset(inherit=False).load().copy(deep=True)
        self.desc = json.loads(self.root.attrs[_ATTR])
        self.ids: dict[str, Any] = {}
        _entries(self.desc, self.ids)

    def _node(self, dotted: str) -> tuple[dict[str, Any], str]:
        node = self.desc
        *path, last = dotted.split(".")
        for name in path:
            node = node["attrs"][name]
            if "__ref__" in node:
                node = self.ids[node["__ref__"]]
        return node["attrs"], last

    def entry(self, dotted: str) -> Any:
        parent, last = self._node(dotted)
        node = parent[last]
        return self.ids[node["__ref__"]] if isinstance(node, dict) and "__ref__" in node else node

    def arr(self, dotted: str) -> np.ndarray:
        key = self.entry(dotted)["__array__"]
        return self.root[key].values

    def state(self, dotted: str, value: Any) -> None:
        parent, last = self._node(dotted)
        parent[last] = value

    def write(self, path: Path) -> Path:
        self.root.attrs[_ATTR] = json.dumps(self.desc)
        tmp = path.with_suffix(".tmp")
        xr.DataTree(self.root).to_netcdf(tmp, engine="h5netcdf")
        payload = tmp.read_bytes()
        path.write_bytes(seal(payload, KIND) + payload)
        tmp.unlink()
        return path


_GOOD: dict[int, tuple[Any, Path]] = {}


def _good(obj: Any, tmp_path: Path) -> Path:
    """A checkpoint of ``obj`` that loads (saved and checked once per object)."""
    if id(obj) not in _GOOD:
        src = save_checkpoint(obj, tmp_path / "good.nc")
        load_checkpoint(src)
        _GOOD[id(obj)] = (obj, src)
    return _GOOD[id(obj)][1]


def _refused(obj: Any, tmp_path: Path, edit: Callable[[Crafted], None], attr: str) -> str:
    """Apply ``edit`` to a valid checkpoint of ``obj`` and check the result is refused naming
    ``attr``."""
    c = Crafted(_good(obj, tmp_path))
    edit(c)
    bad = c.write(tmp_path / "bad.nc")
    with pytest.raises(InvalidFileError) as info:
        load_checkpoint(bad)
    msg = str(info.value)
    assert attr in msg, msg
    return msg


# ---------------------------------------------------------------------- states


def _clustered(policy: Any, T: int = 600, seed: int = 0) -> Any:
    g = np.random.default_rng(seed)
    U, d = policy.n_users, policy.n_features
    theta = g.normal(size=(3, d))
    theta /= np.linalg.norm(theta, axis=1, keepdims=True)
    group = g.integers(0, 3, U)
    users = g.integers(0, U, T)
    items = g.normal(size=(T, 6, d)) / np.sqrt(d)
    means = np.clip(0.5 + 0.5 * np.einsum("tld,td->tl", items, theta[group[users]]), 0, 1)
    policy.run(users, items, means, g.random(T))
    return policy


@pytest.fixture(scope="module")
def sclub():
    from hierbandit.sclub.policies import SCLUB

    p = _clustered(SCLUB(12, 4, rng=1))
    assert 1 < p.n_clusters < 12
    return p


@pytest.fixture(scope="module")
def club():
    from hierbandit.sclub.policies import CLUB

    p = _clustered(CLUB(12, 4, alpha_2=0.3, rng=1))
    assert p.n_clusters > 1
    return p


def _slot(p: Any, min_size: int = 2) -> int:
    cs = p.stats
    return int(np.flatnonzero(cs.size >= min_size)[0])


@pytest.fixture(scope="module")
def cascade():
    from hierbandit.cascade.env import CascadeEnv, simulate_episode
    from hierbandit.cascade.policies import AUCBBP, CascadeLinTS

    env = CascadeEnv.preset(n_users=4, rng=0)
    ro = env.rollout(12, rng=1)
    out = {}
    for cls, extra in ((AUCBBP, {"n_episodes": 40}), (CascadeLinTS, {})):
        pol = cls(env.n_arms, env.n_features, env.rewards, env.horizon, rng=3, **extra)
        for t in range(11):
            pol.start_episode(ro.contexts[t])
            arms, clicks = simulate_episode(ro.click_prob[t], ro.uniforms[t], pol.select)
            pol.update(ro.contexts[t], arms, clicks)
        pol.start_episode(ro.contexts[11])  # an episode in progress
        out[cls.__name__] = pol
    return out


@functools.cache
def _policy(name: str) -> Any:
    from hierbandit.ebm import EbmTS, LinUCB, OLSBandit

    make = {
        "EbmTS": lambda: EbmTS(4, 3, 2, rng=1),
        "LinUCB": lambda: LinUCB(4, 3, 2, rng=1),
        "OLSBandit": lambda: OLSBandit(4, 3, 2, rng=1),
    }[name]
    p = make()
    g = np.random.default_rng(0)
    for _ in range(60):
        j, x = int(g.integers(0, 4)), g.normal(size=2)
        k = p.select(j, x)
        p.update(j, x, k, float(g.normal() + x.sum() * (k == 1)))
    return p


@pytest.fixture(scope="module")
def explorer():
    from hierbandit.boc import BOC
    from hierbandit.boc.instances import synthetic_instance

    inst = synthetic_instance("moderate")
    a = BOC(11, 4, 3, delta=0.05, rng=0)
    s = inst.sampler(5)
    while a.t < 60:
        arm = a.next_arm()
        a.observe(arm, s.pull(arm))
    a.next_arm()  # a pending decision
    assert a.labels is not None and a._pending is not None
    return a


# ---------------------------------------------------------------------- ClusterStats


def test_next_out_of_range(sclub, tmp_path):
    def edit(c):
        c.arr("stats.next")[int(sclub.stats.head[_slot(sclub)])] = 10**6

    _refused(sclub, tmp_path, edit, "next")


def test_labels_out_of_range(sclub, tmp_path):
    _refused(sclub, tmp_path, lambda c: c.arr("stats.labels").__setitem__(3, 12), "labels")


def test_labels_naming_a_free_slot(sclub, tmp_path):
    dead = int(np.flatnonzero(sclub.stats.size == 0)[0])
    _refused(sclub, tmp_path, lambda c: c.arr("stats.labels").__setitem__(0, dead), "labels")


def test_head_out_of_range(sclub, tmp_path):
    _refused(sclub, tmp_path, lambda c: c.arr("stats.head").__setitem__(_slot(sclub), -7), "head")


def test_cycle_in_member_list(sclub, tmp_path):
    c0 = _slot(sclub)
    head, tail = int(sclub.stats.head[c0]), int(sclub.stats.tail[c0])

    def edit(c):
        c.arr("stats.next")[tail] = head

    _refused(sclub, tmp_path, edit, "next")


def test_two_users_swapped_between_lists(sclub, tmp_path):
    """prev no longer mirrors next."""
    c0 = _slot(sclub)
    u = int(sclub.stats.next[sclub.stats.head[c0]])

    def edit(c):
        c.arr("stats.prev")[u] = u

    _refused(sclub, tmp_path, edit, "prev")


def test_slot_count_mismatch(sclub, tmp_path):
    c0 = _slot(sclub)
    _refused(sclub, tmp_path, lambda c: c.arr("stats.n").__setitem__(c0, 10**9), f"n[{c0}]")


def test_slot_size_mismatch(sclub, tmp_path):
    c0 = _slot(sclub)
    _refused(sclub, tmp_path, lambda c: c.arr("stats.size").__setitem__(c0, 1), "size")


def test_pooled_gram_is_not_the_sum(sclub, tmp_path):
    c0 = _slot(sclub)
    _refused(
        sclub, tmp_path, lambda c: c.arr("stats.G").__setitem__(c0, 1.01 * sclub.stats.G[c0]), "G"
    )


def test_free_list_holds_a_live_slot(sclub, tmp_path):
    def edit(c):
        c.arr("stats.free")[0] = _slot(sclub, 1)

    _refused(sclub, tmp_path, edit, "free")


def test_meta_counts(sclub, tmp_path):
    _refused(sclub, tmp_path, lambda c: c.arr("stats.meta").__setitem__(0, 10**6), "meta")


def test_since_beyond_the_recompute_period(sclub, tmp_path):
    _refused(sclub, tmp_path, lambda c: c.arr("stats.since").__setitem__(0, 10**6), "since")


def test_user_count_negative(sclub, tmp_path):
    _refused(sclub, tmp_path, lambda c: c.arr("stats.users.n").__setitem__(0, -1), "n")


# ---------------------------------------------------------------------- SCLUB / CLUB private state


def test_sclub_kernel_parameters(sclub, tmp_path):
    _refused(sclub, tmp_path, lambda c: c.arr("_ip").__setitem__(0, 7), "_ip")


def test_sclub_checked_count(sclub, tmp_path):
    epoch = int(sclub._sm[0])
    c0 = int(np.flatnonzero((sclub.stats.size > 0) & (sclub._cstamp == epoch))[0])

    def edit(c):
        c.arr("_nchk")[c0] += 1

    _refused(sclub, tmp_path, edit, "_nchk")


def test_sclub_member_count_extremes(sclub, tmp_path):
    c0 = _slot(sclub, 1)
    _refused(sclub, tmp_path, lambda c: c.arr("_tmin").__setitem__(c0, -5), "_tmin")


def test_sclub_round_counter(sclub, tmp_path):
    _refused(sclub, tmp_path, lambda c: c.state("t", -1), "t")


def test_club_asymmetric_graph(club, tmp_path):
    def edit(c):
        a = c.arr("adjacency")
        a[0, 0] ^= np.uint64(1) << np.uint64(5)

    _refused(club, tmp_path, edit, "adjacency")


def test_club_edge_between_clusters(club, tmp_path):
    lab = club.stats.labels
    u, v = 0, int(np.flatnonzero(lab != lab[0])[0])

    def edit(c):
        a = c.arr("adjacency")
        a[u, v >> 6] |= np.uint64(1) << np.uint64(v & 63)
        a[v, u >> 6] |= np.uint64(1) << np.uint64(u & 63)

    _refused(club, tmp_path, edit, "adjacency")


# ---------------------------------------------------------------------- cascade


def test_slate_arm_out_of_range(cascade, tmp_path):
    pol = cascade["CascadeLinTS"]
    _refused(pol, tmp_path, lambda c: c.arr("_slate").__setitem__((0, 0), pol.n_arms), "_slate")


def test_aucbbp_ucb_arm_out_of_range(cascade, tmp_path):
    pol = cascade["AUCBBP"]
    assert pol._k_ucb is not None
    _refused(pol, tmp_path, lambda c: c.arr("_k_ucb").__setitem__((1, 0), -1), "_k_ucb")


def test_aucbbp_nan_score(cascade, tmp_path):
    pol = cascade["AUCBBP"]
    _refused(pol, tmp_path, lambda c: c.arr("_score").__setitem__((0, 0), np.nan), "_score")


def test_aucbbp_budget(cascade, tmp_path):
    _refused(cascade["AUCBBP"], tmp_path, lambda c: c.state("_budget", 10**6), "_budget")


def test_logistic_cholesky_factor(cascade, tmp_path):
    def edit(c):
        c.arr("estimator._chol")[0, 0] *= -1

    _refused(cascade["AUCBBP"], tmp_path, edit, "_chol")


# ---------------------------------------------------------------------- per-instance policies


def test_ebm_negative_pulls(tmp_path):
    _refused(_policy("EbmTS"), tmp_path, lambda c: c.arr("pulls").__setitem__(0, -1), "pulls")


def test_ebm_sigma_not_psd(tmp_path):
    def edit(c):
        c.arr("Sigma")[0] = np.array([[1.0, 0.0], [0.0, -1.0]])

    _refused(_policy("EbmTS"), tmp_path, edit, "Sigma")


def test_ebm_sigma2_not_positive(tmp_path):
    _refused(_policy("EbmTS"), tmp_path, lambda c: c.arr("sigma2").__setitem__(0, 0.0), "sigma2")


def test_ridge_gram_not_symmetric(tmp_path):
    def edit(c):
        c.arr("stats.G")[0, 0, 1] += 1.0

    _refused(_policy("LinUCB"), tmp_path, edit, "G")


def test_linucb_round_counter(tmp_path):
    _refused(_policy("LinUCB"), tmp_path, lambda c: c.state("t", 7), "t")


def test_ols_round_counts(tmp_path):
    _refused(
        _policy("OLSBandit"), tmp_path, lambda c: c.arr("n_rounds").__setitem__(0, -3), "n_rounds"
    )


# ---------------------------------------------------------------------- pure exploration


def test_explorer_labels_out_of_range(explorer, tmp_path):
    _refused(explorer, tmp_path, lambda c: c.arr("labels").__setitem__(2, 4), "labels")


def test_explorer_pending_arm_out_of_range(explorer, tmp_path):
    def edit(c):
        c.state("_pending", {"__tuple__": [explorer.t, 11]})

    _refused(explorer, tmp_path, edit, "_pending")


def test_explorer_counts_do_not_sum_to_t(explorer, tmp_path):
    _refused(explorer, tmp_path, lambda c: c.state("t", explorer.t + 5), "counts")


def test_explorer_fractional_count(explorer, tmp_path):
    _refused(explorer, tmp_path, lambda c: c.arr("counts").__setitem__(0, 2.5), "counts")


def test_explorer_centres_of_the_wrong_shape(explorer, tmp_path):
    """A run-dependent attribute with a consistent declaration but the wrong shape."""

    def edit(c):
        entry = c.entry("centres")
        key = entry["__array__"]
        c.root[key] = xr.Variable((f"{key}_0", f"{key}_1x"), np.zeros((4, 5)))
        entry["shape"] = [4, 5]

    _refused(explorer, tmp_path, edit, "centres")
