"""Checkpoints of the online policies (save → restore → continue exactly) and thread safety."""

import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import xarray as xr

from hierbandit.checkpoint import load_checkpoint, save_checkpoint
from hierbandit.policies import EbmTS, EbmUCB, LinTS, LinUCB, OLSBandit, Policy, RMBandit
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
        from hierbandit.policies import EbmTS
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
    with pytest.raises(ValueError, match="not a hierbandit checkpoint"):
        load_checkpoint(tmp_path / "other.nc")
    # a checkpoint may only name hierbandit classes
    tree = xr.open_datatree(path, engine="h5netcdf").load()
    tree.attrs["hierbandit_checkpoint"] = tree.attrs["hierbandit_checkpoint"].replace(
        "hierbandit.policies.linear:LinUCB", "subprocess:Popen"
    )
    tree.to_netcdf(tmp_path / "evil.nc", engine="h5netcdf")
    with pytest.raises(ValueError, match="outside hierbandit"):
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
    from hierbandit.envs.cascade import CascadeEnv, simulate_episode
    from hierbandit.policies import cascade

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
