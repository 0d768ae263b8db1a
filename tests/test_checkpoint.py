"""Checkpoints of the online policies (save → restore → continue exactly) and thread safety."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import xarray as xr

from hierbandit._container import seal
from hierbandit.checkpoint import load_checkpoint, save_checkpoint
from hierbandit.ebm import EbmTS, EbmUCB, LinTS, LinUCB, OLSBandit, Policy, RMBandit
from hierbandit.errors import InvalidFileError
from tests.conftest import snapshot

N, K, d = 4, 3, 2


def _prior():
    from hierbandit.bayes import prior_from_arrays

    return prior_from_arrays(
        np.zeros((K, d)),
        np.broadcast_to(np.eye(d), (K, d, d)).copy(),
        np.broadcast_to(0.5 * np.eye(d), (K, d, d)).copy(),
        np.ones(K),
    )


FACTORIES = {
    "EbmTS": lambda: EbmTS(N, K, d, rng=1),
    "EbmUCB": lambda: EbmUCB(N, K, d, rng=1),
    "EbmTS-prior": lambda: EbmTS(N, K, d, rng=1, prior=_prior()),
    "EbmTS-Sigma_init": lambda: EbmTS(N, K, d, rng=1, Sigma_init=2.0 * np.eye(d)),
    "LinUCB": lambda: LinUCB(N, K, d, rng=1),
    "LinTS": lambda: LinTS(N, K, d, rng=1),
    "OLSBandit": lambda: OLSBandit(N, K, d, rng=1),
    "RMBandit": lambda: RMBandit(N, K, d, rng=1, q=2),
}


def _stream(T, seed=0):
    g = np.random.default_rng(seed)
    return g.integers(0, N, T), g.normal(size=(T, d)), g.normal(size=(T, K))


def _play(policy, J, X, Y, start, stop):
    arms = []
    for t in range(start, stop):
        k = policy.select(int(J[t]), X[t])
        policy.update(int(J[t]), X[t], k, float(Y[t, k] + X[t].sum() * (k == 1)))
        arms.append(k)
    return arms


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_restore_continues_exactly(name, tmp_path):
    J, X, Y = _stream(300)
    policy = FACTORIES[name]()
    _play(policy, J, X, Y, 0, 150)
    path = policy.save(tmp_path / "ckpt.nc")
    restored = type(policy).load(path)
    assert type(restored) is type(policy)
    assert snapshot(restored) == snapshot(policy)
    assert restored.get_params().keys() == policy.get_params().keys()
    a = _play(policy, J, X, Y, 150, 300)
    b = _play(restored, J, X, Y, 150, 300)
    assert a == b
    assert snapshot(restored) == snapshot(policy)
    xr.testing.assert_identical(restored.posterior(), policy.posterior())
    # the restored policy clones into a fresh, equal configuration
    assert snapshot(restored.clone()) == snapshot(policy.clone())


def test_shared_references_stay_shared(tmp_path):
    policy = EbmTS(N, K, d, rng=0)
    restored = load_checkpoint(save_checkpoint(policy, tmp_path / "p.nc"))
    assert restored._streams[0] is restored._tie_rng


def test_checkpoint_survives_a_crash_mid_run(tmp_path):
    """A process checkpoints, keeps going and is killed; the restored policy continues exactly
    as an uninterrupted run does."""
    path = tmp_path / "ckpt.nc"
    script = textwrap.dedent(
        f"""
        import os, signal, numpy as np
        from hierbandit.ebm import EbmTS
        g = np.random.default_rng(0)
        J, X, Y = g.integers(0, {N}, 400), g.normal(size=(400, {d})), g.normal(size=(400, {K}))
        p = EbmTS({N}, {K}, {d}, rng=7)
        for t in range(300):
            if t == 200:
                p.save({str(path)!r})
            k = p.select(int(J[t]), X[t]); p.update(int(J[t]), X[t], k, float(Y[t, k]))
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    g = np.random.default_rng(0)
    J, X, Y = g.integers(0, N, 400), g.normal(size=(400, d)), g.normal(size=(400, K))
    reference = EbmTS(N, K, d, rng=7)
    ref_arms = []
    for t in range(400):
        k = reference.select(int(J[t]), X[t])
        reference.update(int(J[t]), X[t], k, float(Y[t, k]))
        ref_arms.append(k)
    restored = EbmTS.load(path)
    assert restored.t == 200
    arms = []
    for t in range(200, 400):
        k = restored.select(int(J[t]), X[t])
        restored.update(int(J[t]), X[t], k, float(Y[t, k]))
        arms.append(k)
    assert arms == ref_arms[200:]
    assert snapshot(restored) == snapshot(reference)


def test_failed_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.nc"
    policy = LinUCB(N, K, d, rng=0)
    policy.save(path)
    before = path.read_bytes()
    policy.update(0, np.ones(d), 1, 2.0)

    def broken(self, target, **kwargs):
        with open(target, "wb") as fh:
            fh.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(xr.DataTree, "to_netcdf", broken)
    with pytest.raises(OSError, match="disk full"):
        policy.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert LinUCB.load(path).t == 0
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.nc"]


def test_checkpoint_errors(tmp_path):
    policy = LinUCB(N, K, d, rng=0)
    with pytest.raises(ValueError, match="path"):
        policy.save(tmp_path / "ckpt.json")
    with pytest.raises(FileNotFoundError):
        LinUCB.load(tmp_path / "missing.nc")
    path = policy.save(tmp_path / "ckpt.nc")
    with pytest.raises(TypeError, match="LinUCB"):
        EbmTS.load(path)
    assert isinstance(Policy.load(path), LinUCB)
    xr.Dataset({"x": ("a", [1.0])}).to_netcdf(tmp_path / "other.nc", engine="h5netcdf")
    with pytest.raises(InvalidFileError, match="not a sealed hierbandit file"):
        load_checkpoint(tmp_path / "other.nc")
    # a checkpoint may only name allow-listed classes, even with a valid seal
    tree = xr.open_datatree(path, engine="h5netcdf").load()
    tree.attrs["hierbandit_checkpoint"] = tree.attrs["hierbandit_checkpoint"].replace(
        "hierbandit.ebm.linear:LinUCB", "subprocess:Popen"
    )
    tree.to_netcdf(tmp_path / "plain.nc", engine="h5netcdf")
    payload = (tmp_path / "plain.nc").read_bytes()
    (tmp_path / "evil.nc").write_bytes(seal(payload, "checkpoint") + payload)
    with pytest.raises(InvalidFileError, match=r"evil\.nc.*not on the allow-list"):
        load_checkpoint(tmp_path / "evil.nc")
    with pytest.raises(TypeError, match="unsupported"):
        save_checkpoint(_Holder(), tmp_path / "x.nc")
    assert not (tmp_path / "x.nc").exists()


class _Holder:
    """Not a hierbandit class: its state cannot be checkpointed."""

    def __init__(self):
        self.f = open


_Holder.__module__ = "hierbandit.tests_only"


@pytest.mark.parametrize("cls", [LinUCB, EbmTS])
def test_concurrent_updates_equal_sequential(cls):
    """Threads updating one shared policy give the statistics of the sequential run."""
    n_threads, per_thread = 4, 200
    g = np.random.default_rng(3)
    J = g.integers(0, N, (n_threads, per_thread))
    X = g.normal(size=(n_threads, per_thread, d))
    A = g.integers(0, K, (n_threads, per_thread))
    Y = g.normal(size=(n_threads, per_thread))
    shared = cls(N, K, d, rng=0)
    errors = []
    barrier = threading.Barrier(n_threads)

    def work(i):
        try:
            barrier.wait()
            for t in range(per_thread):
                shared.select(int(J[i, t]), X[i, t])
                shared.update(int(J[i, t]), X[i, t], int(A[i, t]), float(Y[i, t]))
                if t % 50 == 0:
                    shared.posterior()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    sequential = cls(N, K, d, rng=0)
    for i in range(n_threads):
        for t in range(per_thread):
            sequential.update(int(J[i, t]), X[i, t], int(A[i, t]), float(Y[i, t]))
    assert shared.t == sequential.t == n_threads * per_thread
    if cls is LinUCB:
        got, want = shared.stats, sequential.stats
        np.testing.assert_array_equal(got.n, want.n)
        np.testing.assert_allclose(got.G, want.G, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.b, want.b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.theta, want.theta, rtol=1e-8, atol=1e-10)
    else:
        np.testing.assert_array_equal(shared.n_obs, sequential.n_obs)
        np.testing.assert_allclose(shared.G, sequential.G, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(shared.b, sequential.b, rtol=1e-12, atol=1e-12)


def test_pickle_round_trip_for_process_pools():
    import pickle

    policy = EbmTS(N, K, d, rng=0)
    J, X, Y = _stream(50)
    _play(policy, J, X, Y, 0, 50)
    copy = pickle.loads(pickle.dumps(policy))
    assert snapshot(copy) == snapshot(policy)
    assert _play(copy, J, X, Y, 0, 50) == _play(policy, J, X, Y, 0, 50)
    assert os.environ is not None


CASCADE = [
    "UCBBP",
    "AUCBBP",
    "CascadeEpsilonGreedy",
    "CascadeGreedy",
    "CascadeLinTS",
    "CascadeLinUCB",
    "CascadeRandom",
]


@pytest.mark.parametrize("name", CASCADE)
def test_cascade_policies_restore_exactly(name, tmp_path):
    from hierbandit.cascade import policies as cascade
    from hierbandit.cascade.env import CascadeEnv, simulate_episode

    env = CascadeEnv.preset(n_users=6, rng=0)
    ro = env.rollout(60, rng=1)
    cls = getattr(cascade, name)
    extra = {"n_episodes": 60} if name == "AUCBBP" else {}
    policy = cls(env.n_arms, env.n_features, env.rewards, env.horizon, rng=3, **extra)

    def play(pol, t0, t1):
        out = []
        for t in range(t0, t1):
            pol.start_episode(ro.contexts[t])
            arms, clicks = simulate_episode(ro.click_prob[t], ro.uniforms[t], pol.select)
            pol.update(ro.contexts[t], arms, clicks)
            out.append(arms)
        return np.array(out)

    play(policy, 0, 30)
    restored = load_checkpoint(save_checkpoint(policy, tmp_path / "c.nc"))
    assert snapshot(restored) == snapshot(policy)
    np.testing.assert_array_equal(play(policy, 30, 60), play(restored, 30, 60))
    assert snapshot(restored) == snapshot(policy)


# ---------------------------------------------------------------------- clustering policies


def _clustering_factories():
    from hierbandit.sclub.policies import CLUB, SCLUB, LinUCBInd, LinUCBOne

    U, dd = 12, 4
    return {
        "SCLUB": lambda: SCLUB(U, dd, rng=2),
        "SCLUB-reference": lambda: SCLUB.reference(U, dd, rng=2),
        "SCLUB-all-merges": lambda: SCLUB(U, dd, merge_scan="all", rng=2),
        "CLUB": lambda: CLUB(U, dd, rng=2),
        "CLUB-complete": lambda: CLUB(U, dd, graph="complete", rng=2),
        "LinUCBOne": lambda: LinUCBOne(U, dd, rng=2),
        "LinUCBInd": lambda: LinUCBInd(U, dd, rng=2),
    }


CLUSTERING = sorted(_clustering_factories())


def _clustered_rollout(T, seed=1):
    from hierbandit.sclub.env import ClusteredLinearEnv

    env = ClusteredLinearEnv(n_users=12, n_clusters=3, n_features=4, n_items=6, rng=0)
    return env.rollout(T, rng=seed)


def _play_clustering(policy, ro, t0, t1):
    """select/update loop over rounds [t0, t1) with Bernoulli rewards from the rollout."""
    arms = []
    for t in range(t0, t1):
        u = int(ro.users[t])
        k = policy.select(u, ro.items[t])
        policy.update(u, ro.items[t, k], float(ro.noise[t] < ro.means[t, k]))
        arms.append(k)
    return np.array(arms)


@pytest.mark.parametrize("name", CLUSTERING)
def test_clustering_restore_continues_exactly(name, tmp_path):
    """Checkpoint mid-phase (after round 515; phases start at τ = 511 and 1023), after splits
    and merges; the restored policy makes the same decisions through the next phase start."""
    ro = _clustered_rollout(1400)
    policy = _clustering_factories()[name]()
    T0 = 515
    policy.run(ro.users[:T0], ro.items[:T0], ro.means[:T0], ro.noise[:T0])
    if name.startswith("SCLUB"):
        assert policy.n_clusters > 1  # splits happened before the checkpoint
    if name == "SCLUB":
        assert not policy.checked.all() and policy.checked.any()  # mid-phase
    if name == "CLUB":
        assert policy.n_edges < policy.n_users * (policy.n_users - 1) // 2
    path = policy.save(tmp_path / "ckpt.nc")
    restored = type(policy).load(path)
    assert type(restored) is type(policy)
    assert snapshot(restored) == snapshot(policy)
    assert restored.get_params().keys() == policy.get_params().keys()
    a = _play_clustering(policy, ro, T0, 1100)
    b = _play_clustering(restored, ro, T0, 1100)
    np.testing.assert_array_equal(a, b)
    # the compiled block loop continues identically too
    ca, na = policy.run(ro.users[1100:], ro.items[1100:], ro.means[1100:], ro.noise[1100:])
    cb, nb = restored.run(ro.users[1100:], ro.items[1100:], ro.means[1100:], ro.noise[1100:])
    np.testing.assert_array_equal(ca, cb)
    np.testing.assert_array_equal(na, nb)
    assert snapshot(restored) == snapshot(policy)
    xr.testing.assert_identical(restored.clusters(), policy.clusters())
    xr.testing.assert_identical(restored.user_stats(), policy.user_stats())
    # the kernels' state tuples still alias the statistics arrays after a restore
    if name.startswith("LinUCB"):
        assert restored._st[0] is restored.stats.G
    else:
        assert restored._st[0][0] is restored.stats.users.G


def test_sclub_merges_before_checkpoint(tmp_path):
    """The mid-phase SCLUB checkpoint above is taken after merges, not only splits."""
    ro = _clustered_rollout(515)
    policy = _clustering_factories()["SCLUB"]()
    _, ncl = policy.run(ro.users, ro.items, ro.means, ro.noise)
    assert np.any(np.diff(ncl) < 0) and np.any(np.diff(ncl) > 0)


def test_clustering_load_checks_class(tmp_path):
    from hierbandit.sclub.policies import CLUB, SCLUB

    path = SCLUB(4, 2, rng=0).save(tmp_path / "s.nc")
    with pytest.raises(TypeError, match="SCLUB"):
        CLUB.load(path)
    with pytest.raises(ValueError, match="path"):
        SCLUB(4, 2, rng=0).save(tmp_path / "s.json")


# ---------------------------------------------------------------------- threads


def _record(policy, names):
    """Log every call of the unchecked methods ``names`` (made under the policy's lock) in the
    order the calls took the lock."""
    log = []
    for name in names:
        method = getattr(policy, name)

        def wrapped(*args, _name=name, _method=method):
            log.append((_name, tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)))
            return _method(*args)

        setattr(policy, name, wrapped)
    return log


def _unrecord(policy, names):
    for name in names:
        del policy.__dict__[name]


def _replay(policy, log):
    return [getattr(policy, name)(*args) for name, args in log]


def _run_threads(work, n_threads):
    errors = []
    barrier = threading.Barrier(n_threads)

    def target(i):
        try:
            barrier.wait()
            work(i)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


@pytest.mark.parametrize("name", ["SCLUB", "SCLUB-reference", "CLUB", "LinUCBOne", "LinUCBInd"])
def test_clustering_concurrent_calls_equal_sequential(name):
    """Four threads select and update one shared clustering policy (order-dependent: splits,
    merges, edge deletions, random tie-breaks); the final state is bit-identical to applying
    the same calls one after another in the order they took the lock, and the sums of the
    user statistics equal those of the data whatever the order."""
    n_threads, per_thread = 4, 150
    ro = _clustered_rollout(n_threads * per_thread, seed=4)
    shared = _clustering_factories()[name]()
    names = ("_select", "_update")
    log = _record(shared, names)

    def work(i):
        for t in range(i * per_thread, (i + 1) * per_thread):
            u = int(ro.users[t])
            k = shared.select(u, ro.items[t])
            shared.update(u, ro.items[t, k], float(ro.noise[t] < ro.means[t, k]))
            if t % 50 == 0:
                shared.clusters()

    _run_threads(work, n_threads)
    _unrecord(shared, names)
    assert shared.t == n_threads * per_thread
    assert sum(1 for n, _ in log if n == "_update") == shared.t
    sequential = _clustering_factories()[name]()
    chosen = _replay(sequential, log)
    assert snapshot(sequential) == snapshot(shared)
    # every update was applied exactly once: per-user sums equal those of the logged rows
    G = np.zeros((12, 4, 4))
    for n, args in log:
        if n == "_update":
            u, x, _y = args
            G[u] += np.outer(x, x)
    if name != "SCLUB-reference":  # (its double-counting alias adds some rows twice)
        np.testing.assert_allclose(shared.user_stats()["G"].values, G, rtol=1e-12, atol=1e-12)
    assert all(isinstance(k, int) for k in chosen if k is not None)


@pytest.mark.parametrize("name", ["UCBBP", "AUCBBP", "CascadeLinTS", "CascadeEpsilonGreedy"])
def test_cascade_concurrent_calls_equal_sequential(name):
    """Four threads recommend and update one shared cascade policy; the final state equals the
    sequential run of the same calls in lock order (the Newton update is order-dependent)."""
    from hierbandit.cascade import policies as cascade
    from hierbandit.cascade.env import CascadeEnv, simulate_episode

    n_threads, per_thread = 4, 15
    env = CascadeEnv.preset(n_users=5, rng=0)
    ro = env.rollout(n_threads * per_thread, rng=1)
    cls = getattr(cascade, name)
    extra = {"n_episodes": n_threads * per_thread} if name == "AUCBBP" else {}

    def make():
        return cls(env.n_arms, env.n_features, env.rewards, env.horizon, rng=3, **extra)

    shared = make()
    names = ("_start", "_select", "_update")
    log = _record(shared, names)

    def work(i):
        for t in range(i * per_thread, (i + 1) * per_thread):
            slate = shared.recommend(ro.contexts[t])
            arms, clicks = simulate_episode(
                ro.click_prob[t], ro.uniforms[t], lambda h, active, s=slate: s[:, h]
            )
            shared.update(ro.contexts[t], arms, clicks)
            if t % 5 == 0:
                shared.posterior()

    _run_threads(work, n_threads)
    _unrecord(shared, names)
    assert shared.t == n_threads * per_thread
    sequential = make()
    _replay(sequential, log)
    assert snapshot(sequential) == snapshot(shared)
    xr.testing.assert_identical(sequential.posterior(), shared.posterior())


def test_lock_is_per_object_and_recreated():
    """Every object has its own lock; copies, pickles and checkpoints get a fresh one."""
    import copy
    import pickle

    from hierbandit.cascade.policies import UCBBP
    from hierbandit.sclub.policies import SCLUB

    a, b = SCLUB(4, 2, rng=0), SCLUB(4, 2, rng=0)
    assert a._lock is not b._lock
    for clone in (copy.deepcopy(a), pickle.loads(pickle.dumps(a))):
        assert clone._lock is not a._lock
        assert snapshot(clone) == snapshot(a)
    c = UCBBP(3, 2, np.ones(3), 2, rng=0)
    assert copy.copy(c)._lock is not c._lock
    # a held lock does not block the same thread (re-entrant) but blocks others
    with a._lock:
        a.select(0, np.eye(2))
        got = []
        th = threading.Thread(target=lambda: got.append(a._lock.acquire(timeout=0.05)))
        th.start()
        th.join()
        assert got == [False]


# ---------------------------------------------------------------------- pure exploration


@pytest.mark.parametrize("name", ["BOC", "BOC-random-seed", "BOCLE", "Uniform", "Oracle"])
def test_explorer_checkpoint_between_steps(name, tmp_path):
    """BOC's step API (next_arm / observe) is checkpointed mid-run; the restored explorer makes
    the same choices and stops at the same pull with the same partition. The environment's
    noise depends only on (seed, arm, pull index), so a fresh sampler advanced to the restored
    counts gives the same observations."""
    from hierbandit.boc import BOC, BOCLE, ClusteringExplorer, Oracle, Uniform
    from hierbandit.boc.instances import synthetic_instance

    inst = synthetic_instance("moderate")
    make = {
        "BOC": lambda: BOC(11, 4, 3, delta=0.05, rng=0),
        "BOC-random-seed": lambda: BOC(11, 4, 3, delta=0.05, first_seed="random", rng=0),
        "BOCLE": lambda: BOCLE(11, 4, 3, r=0.2, delta=0.05, rng=0),
        "Uniform": lambda: Uniform(11, 4, 3, delta=0.05, rng=0),
        "Oracle": lambda: Oracle(11, 4, 3, lam=inst.lower_bound().lam, delta=0.05, rng=0),
    }[name]

    def play(alg, sampler, budget):
        arms = []
        while alg.t < budget and not alg.should_stop():
            arm = alg.next_arm()
            alg.observe(arm, sampler.pull(arm))
            arms.append(arm)
        return arms

    alg = make()
    sampler = inst.sampler(5)
    play(alg, sampler, 150)
    alg.next_arm()  # a pending choice is part of the state
    path = alg.save(tmp_path / "explorer.nc")
    restored = ClusteringExplorer.load(path)
    assert type(restored) is type(alg) and snapshot(restored) == snapshot(alg)
    resumed = inst.sampler(5)
    for m, n in enumerate(restored.counts.astype(int)):
        for _ in range(n):
            resumed.pull(m)
    a = play(alg, sampler, 20_000)
    b = play(restored, resumed, 20_000)
    assert a == b and alg.should_stop() and restored.should_stop()
    np.testing.assert_array_equal(alg.recommend(), restored.recommend())
    assert snapshot(restored) == snapshot(alg)
    with pytest.raises(TypeError, match="Uniform"):
        Uniform.load(path) if name != "Uniform" else BOC.load(path)


# ---------------------------------------------------------------------- every online policy


def _kill_cases():
    """name -> (make, play, mid, end): a factory, a loop returning the decisions of rounds
    [t0, t1) as a list, the checkpoint round and the last round."""
    from hierbandit.cascade import policies as cascade
    from hierbandit.cascade.env import CascadeEnv, simulate_episode

    cases = {}
    J, X, Y = _stream(200)
    for name, make in FACTORIES.items():
        cases[name] = (make, lambda p, t0, t1: _play(p, J, X, Y, t0, t1), 100, 200)
    env = CascadeEnv.preset(n_users=4, rng=0)
    ro = env.rollout(40, rng=1)

    def play_cascade(pol, t0, t1):
        out = []
        for t in range(t0, t1):
            pol.start_episode(ro.contexts[t])
            arms, clicks = simulate_episode(ro.click_prob[t], ro.uniforms[t], pol.select)
            pol.update(ro.contexts[t], arms, clicks)
            out.append(arms.tolist())
        return out

    for name in CASCADE:
        cls = getattr(cascade, name)
        extra = {"n_episodes": 40} if name == "AUCBBP" else {}

        def make(cls=cls, extra=extra):
            return cls(env.n_arms, env.n_features, env.rewards, env.horizon, rng=3, **extra)

        cases[name] = (make, play_cascade, 20, 40)
    ro_c = _clustered_rollout(800)
    for name, make in _clustering_factories().items():
        cases[name] = (
            make,
            lambda p, t0, t1: _play_clustering(p, ro_c, t0, t1).tolist(),
            515,
            800,
        )
    return cases


def test_every_online_policy_survives_a_crash(tmp_path):
    """One process checkpoints every online policy mid-run (6 Policy subclasses and their
    prior variants, 7 cascade policies, 4 clustering policies in 7 configurations), keeps
    going and is killed with SIGKILL; each restored policy then makes the decisions of an
    uninterrupted run and ends in the same state."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {os.getcwd()!r})
        from tests.test_checkpoint import _kill_cases
        for name, (make, play, mid, end) in _kill_cases().items():
            p = make()
            play(p, 0, mid)
            p.save({str(tmp_path)!r} + "/" + name + ".nc")
            play(p, mid, end)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    err = tmp_path / "child.err"  # a file, not a pipe: nothing reads it while the child runs
    with open(err, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=sink
        )
    # while the child runs, this process plays the uninterrupted reference runs
    cases = _kill_cases()
    assert len(cases) == len(FACTORIES) + len(CASCADE) + len(CLUSTERING)
    references = {}
    for name, (make, play, _, end) in cases.items():
        reference = make()
        references[name] = (reference, play(reference, 0, end))
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("the child did not finish in 600 s")
    assert proc.returncode == -signal.SIGKILL, err.read_text(errors="replace")
    # each load walks its file in a child interpreter first: threads overlap those walks
    with ThreadPoolExecutor(4) as pool:
        paths = [tmp_path / f"{name}.nc" for name in cases]
        loaded = dict(zip(cases, pool.map(load_checkpoint, paths), strict=True))
    for name, (_, play, mid, end) in cases.items():
        reference, ref = references[name]
        restored = loaded[name]
        assert restored.t == mid, name
        assert play(restored, mid, end) == ref[mid:], name
        assert snapshot(restored) == snapshot(reference), name


def test_explorer_concurrent_observations_equal_sequential():
    """Four threads feed observations to one BOC while reading its statistic: every
    observation is counted once and the sums equal the sequential ones."""
    from hierbandit.boc import BOC

    n_threads, per_thread = 4, 300
    g = np.random.default_rng(0)
    arms = g.integers(0, 11, (n_threads, per_thread))
    obs = g.normal(size=(n_threads, per_thread, 3))
    shared = BOC(11, 4, 3, rng=0)

    def work(i):
        for t in range(per_thread):
            shared.observe(int(arms[i, t]), obs[i, t])
            if t % 25 == 0:
                shared.next_arm()
                shared.should_stop()

    _run_threads(work, n_threads)
    assert shared.t == n_threads * per_thread
    np.testing.assert_array_equal(shared.counts, np.bincount(arms.ravel(), minlength=11))
    sums = np.zeros((11, 3))
    np.add.at(sums, arms.ravel(), obs.reshape(-1, 3))
    np.testing.assert_allclose(shared.sums, sums, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(shared.means, sums / shared.counts[:, None], rtol=1e-12)
