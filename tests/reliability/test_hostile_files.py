"""Hostile files: every file a loader reads may have been crafted or damaged by someone else.

Each case builds a bad file from a real one and checks that loading it runs no code, does not
crash or hang the process, never returns a state different from the one saved, and raises
:class:`~hierbandit.errors.InvalidFileError` naming the file (``FileNotFoundError`` for a
missing path), leaving the caller's objects and files untouched.

An attacker can recompute the seal (size and SHA-256 are no secret), so many cases are
re-sealed after the damage: those exercise the HDF5 probe and the validation of the
description and the restored state, not only the checksum. Cases where a crash or a hang is
possible run in a child interpreter under a timeout (and, where memory is at stake, under an
address-space limit), so a failure fails the test instead of killing pytest.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from hierbandit import _container
from hierbandit._container import HEADER_SIZE, seal
from hierbandit.checkpoint import load_checkpoint
from hierbandit.ebm import EbmTS, LinUCB
from hierbandit.errors import InvalidFileError
from tests.conftest import snapshot

ROOT = Path(__file__).resolve().parents[2]
REPRO = Path("/work/shared/repro/reliability")
ATTR = "hierbandit_checkpoint"
#: a load refused at the seal takes no HDF5 work at all
QUICK = 5.0
#: a load that goes through the probe (a child interpreter) and the validation
PROBED = 30.0
#: the probe's own deadline is 20 s plus a little per MB: a hanging container ends before this
HANG_LIMIT = 60.0
#: the probe's deadline for a file known to hang the HDF5 library (as tests/data does)
HANG_PROBE_SECONDS = 3.0
#: address-space limit of the children that read allocation bombs
MEMORY_LIMIT = 3 * 2**30

GADGET = "hierbandit.checkpoint:np.f2py.subprocess.Popen"


# ---------------------------------------------------------------------- building files


def _ebmts() -> Any:
    p = EbmTS(3, 2, 2, rng=0)
    g = np.random.default_rng(1)
    for _ in range(30):
        x = g.normal(size=2)
        p.update(int(g.integers(3)), x, p.select(0, x), float(g.normal()))
    return p


def _linucb() -> Any:
    p = LinUCB(3, 2, 2, rng=0)
    g = np.random.default_rng(2)
    for _ in range(30):
        j, x = int(g.integers(3)), g.normal(size=2)
        p.update(j, x, p.select(j, x), float(g.normal()))
    return p


def _sclub() -> Any:
    from hierbandit.sclub.env import ClusteredLinearEnv
    from hierbandit.sclub.policies import SCLUB

    ro = ClusteredLinearEnv(n_users=8, n_clusters=2, n_features=3, n_items=4, rng=0).rollout(
        80, rng=1
    )
    p = SCLUB(8, 3, rng=2)
    p.run(ro.users, ro.items, ro.means, ro.noise)
    return p


def _ucbbp() -> Any:
    from hierbandit.cascade import UCBBP

    p = UCBBP(2, 3, np.array([1.0, 0.5]), 2, rng=5)
    g = np.random.default_rng(3)
    for _ in range(10):
        X = g.normal(size=(1, 3))
        clicks = np.array([[0, int(g.integers(2))]])  # a click ends the session
        p.update(X, p.recommend(X), clicks)
    return p


def _boc() -> Any:
    from hierbandit.boc import BOC
    from hierbandit.boc.instances import synthetic_instance

    inst = synthetic_instance("moderate")
    alg = BOC(11, 4, 3, delta=0.05, rng=0)
    sampler = inst.sampler(5)
    for _ in range(60):
        arm = alg.next_arm()
        alg.observe(arm, sampler.pull(arm))
    return alg


def _prior() -> Any:
    from hierbandit.bayes import prior_from_arrays

    K, d = 2, 2
    return prior_from_arrays(
        np.zeros((K, d)),
        np.broadcast_to(np.eye(d), (K, d, d)).copy(),
        np.broadcast_to(0.5 * np.eye(d), (K, d, d)).copy(),
        np.ones(K),
    )


POLICIES = {"EbmTS": _ebmts, "LinUCB": _linucb, "SCLUB": _sclub, "UCBBP": _ucbbp, "BOC": _boc}


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> dict[str, Path]:
    """One good file of each kind: checkpoints of five classes, a prior, an old-format
    (unsealed) checkpoint. Built once per worker (the tests only read them), also when the
    longest tests of this module run before the others (tests/conftest.py)."""
    d = tmp_path_factory.mktemp("good")
    out = {name: make().save(d / f"{name}.nc") for name, make in POLICIES.items()}
    out["prior"] = _prior().save(d / "prior.nc")
    old = d / "old_format.nc"
    old.write_bytes(_payload(out["LinUCB"]))  # a plain netCDF file, as written before seals
    out["old"] = old
    return out


def _payload(path: Path) -> bytes:
    return path.read_bytes()[HEADER_SIZE:]


def _kind(path: Path) -> str:
    head = path.read_bytes()[:HEADER_SIZE]
    return json.loads(head[8:].split(b"\n", 1)[0])["kind"]


def _write_sealed(path: Path, payload: bytes, kind: str = "checkpoint") -> Path:
    """What an attacker does after editing a payload: recompute the seal."""
    path.write_bytes(seal(payload, kind) + payload)
    return path


@functools.lru_cache(maxsize=16)
def _saved_tree(path: Path) -> xr.DataTree:
    with xr.open_datatree(path, engine="h5netcdf") as tree:
        return tree.load()


def _tree(path: Path) -> xr.DataTree:
    """The tree of a good file, read once per file: each caller edits its own deep copy."""
    return _saved_tree(path).copy(deep=True)


def _resealed_tree(tree: xr.DataTree, dst: Path, tmp: Path, kind: str = "checkpoint") -> Path:
    plain = tmp / f"plain-{dst.name}"
    tree.to_netcdf(plain, engine="h5netcdf")
    return _write_sealed(dst, plain.read_bytes(), kind)


def _edited(src: Path, dst: Path, edit_state=None, edit_tree=None) -> Path:
    """``src`` with its object description (and/or tree) edited, re-sealed validly."""
    tree = _tree(src)
    if edit_state is not None:
        state = json.loads(tree.attrs[ATTR])
        new = edit_state(state)
        tree.attrs[ATTR] = json.dumps(state if new is None else new)
    if edit_tree is not None:
        tree = edit_tree(tree) or tree
    return _resealed_tree(tree, dst, dst.parent)


def _refused(load, path: Path, limit: float = PROBED, exc_type=InvalidFileError) -> Exception:
    t0 = time.monotonic()
    with pytest.raises(exc_type) as info:
        load(path)
    elapsed = time.monotonic() - t0
    assert type(info.value) is exc_type, repr(info.value)
    assert path.name in str(info.value), str(info.value)
    if exc_type is InvalidFileError:
        assert info.value.path == str(path) and info.value.reason
    assert elapsed < limit, f"{path.name}: refused after {elapsed:.1f} s"
    return info.value


def _refused_all(load, paths: list[Path], limit: float = PROBED) -> list[Exception]:
    """:func:`_refused` for many files at once (the probes are child processes: threads
    overlap them)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as ex:
        return list(ex.map(lambda p: _refused(load, p, limit), paths))


# ---------------------------------------------------------------------- child interpreters

_WORKER = r"""
import json, os, resource, sys, time
spec = json.loads(sys.argv[1])
if spec.get("rlimit"):
    resource.setrlimit(resource.RLIMIT_AS, (spec["rlimit"], spec["rlimit"]))
sys.path.insert(0, spec["root"])
from hierbandit import _container
from hierbandit.errors import InvalidFileError
from tests.conftest import snapshot

PROBE_SECONDS = _container.PROBE_SECONDS

def loader(name):
    if name == "checkpoint":
        from hierbandit.checkpoint import load_checkpoint
        return load_checkpoint
    if name == "prior":
        import hierbandit
        return hierbandit.load_prior
    if name == "prior-method":
        from hierbandit.bayes.prior import HierarchicalPrior
        return HierarchicalPrior.load
    import hierbandit

    return getattr(hierbandit, name).load

def same(kind, a, b):
    if kind.startswith("prior"):
        return a == b
    return snapshot(a) == snapshot(b)

for i, case in enumerate(spec["cases"]):
    load = loader(case["loader"])
    # a case known to hang the HDF5 library may shorten the probe's deadline
    _container.PROBE_SECONDS = case.get("probe_seconds", PROBE_SECONDS)
    t0 = time.monotonic()
    try:
        obj = load(case["bad"])
    except InvalidFileError as exc:
        named = os.path.basename(case["bad"]) in str(exc)
        out = "refused" if named else "unnamed: " + str(exc)[:300]
    except BaseException as exc:
        out = "error: %s: %s" % (type(exc).__name__, str(exc)[:300])
    else:
        if case.get("good") and same(case["loader"], obj, load(case["good"])):
            out = "identical"
        else:
            out = "loaded a different state"
    print(json.dumps({"i": i, "out": out, "secs": time.monotonic() - t0}), flush=True)
"""


def _start(cases: list[dict[str, Any]], rlimit: int | None = None) -> subprocess.Popen:
    spec = {"root": str(ROOT), "rlimit": rlimit, "cases": cases}
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, json.dumps(spec)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, cases: list[dict[str, Any]], timeout: float) -> list[dict]:
    """The outcome of every case of a batch; fails on a crash or a hang of the child."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        done = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        pytest.fail(f"batch hung after {len(done)} cases; next: {cases[len(done)]}")
    assert proc.returncode == 0, f"child exited {proc.returncode}: {err[-2000:]}"
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(results) == len(cases)
    return results


def _run_batches(batches: list[list[dict]], timeout: float, rlimit: int | None = None) -> list:
    """Run batches concurrently (one child each); outcomes paired with their cases."""
    procs = [_start(b, rlimit) for b in batches]
    pairs = []
    for proc, batch in zip(procs, batches, strict=True):
        pairs += list(zip(batch, _finish(proc, batch, timeout), strict=True))
    return pairs


def _check(pairs, allowed=("refused",), limit: float = PROBED) -> None:
    bad = [(c, r["out"]) for c, r in pairs if r["out"] not in allowed]
    slow = [(c, round(r["secs"], 1)) for c, r in pairs if r["secs"] > limit]
    assert not bad, f"{len(bad)} of {len(pairs)} cases: {bad[:6]}"
    assert not slow, slow


# ---------------------------------------------------------------------- damaged bytes


def _damage(data: bytes, seed: int) -> list[tuple[str, bytes]]:
    """Truncations, bit flips across header and payload, 64 zero bytes at many offsets."""
    g = np.random.default_rng(seed)
    n = len(data)
    out = [(f"truncated-{k}", data[:k]) for k in sorted({0, 7, 511, 512, 513, n // 2, n - 1})]
    offsets = np.concatenate([g.integers(0, HEADER_SIZE, 12), g.integers(HEADER_SIZE, n, 28)])
    for off in offsets:
        b = bytearray(data)
        b[off] ^= 1 << int(g.integers(8))
        out.append((f"flip-{off}", bytes(b)))
    for off in sorted(set(g.integers(0, n - 64, 24).tolist()) | {0, 8, 256, 512, n - 64}):
        b = bytearray(data)
        b[off : off + 64] = bytes(64)
        if bytes(b) != data:
            out.append((f"zero-{off}", bytes(b)))
    return out


@pytest.mark.parametrize("name", [*POLICIES, "old"])
def test_damaged_checkpoints_are_refused_quickly(name, files, tmp_path):
    good = files[name]
    seed = 100 + [*POLICIES, "old"].index(name)
    for what, data in _damage(good.read_bytes(), seed=seed):
        bad = tmp_path / f"{name}-{what}.nc"
        bad.write_bytes(data)
        _refused(load_checkpoint, bad, limit=QUICK)
    if name != "old":  # the saved file itself still loads (the attempts changed nothing)
        assert snapshot(load_checkpoint(good)) == snapshot(load_checkpoint(good))


def test_damaged_checkpoint_through_the_class_loader(files, tmp_path):
    caller = _linucb()
    before = snapshot(caller)
    bad = tmp_path / "flipped.nc"
    data = bytearray(files["LinUCB"].read_bytes())
    data[-100] ^= 4
    bad.write_bytes(bytes(data))
    _refused(LinUCB.load, bad, limit=QUICK)
    _refused(LinUCB.load, tmp_path / "missing.nc", exc_type=FileNotFoundError)
    assert snapshot(caller) == before


def test_damaged_prior_files_are_refused(files, tmp_path):
    """The prior loader reads files as untrusted as checkpoints (run in a child: a loader
    that parses damaged HDF5 directly could hang or crash)."""
    cases = []
    for what, data in _damage(files["prior"].read_bytes(), seed=7):
        bad = tmp_path / f"prior-{what}.nc"
        bad.write_bytes(data)
        cases.append({"bad": str(bad), "loader": "prior"})
    pairs = _run_batches([cases], timeout=120)  # refused at the seal: one child is enough
    _check(pairs, limit=QUICK)


def test_resealed_damage_never_crashes_hangs_or_escapes(files, tmp_path):
    """Damage, then a recomputed seal (what an attacker can do): the probe and the validation
    stand where the checksum no longer does. Every case is refused with InvalidFileError in
    bounded time, or loads a state that passed every check — the saved one when the damage
    hit unused bytes, or a different one when it hit a free value (a statistic, a counter the
    rules cannot cross-check, a setting): such a file is one an attacker could have written
    directly, and the guarantee against it is no code, no crash, no hang, no inconsistent
    state. Accidental damage (no recomputed seal) never loads: see the tests above.
    A zeroed block where the HDF5 library spins forever on this layout (a corrupt
    dimension-scale list) is refused at the probe's deadline: the package's deadline ends well
    inside HANG_LIMIT, and the child walks that file under a 3 s one (the same timeout path,
    without spinning a core for 20 s)."""
    g = np.random.default_rng(2026)
    batches: list[list[dict]] = [[], []]
    for j, name in enumerate([*POLICIES, "prior"]):
        good = files[name]
        payload = _payload(good)
        kind = _kind(good) if name == "prior" and good.read_bytes()[:4] == b"\x89HBF" else None
        variants = [("trunc-half", payload[: len(payload) // 2])]
        for off in g.integers(8, len(payload), 2):
            b = bytearray(payload)
            b[off] ^= 1 << int(g.integers(8))
            variants.append((f"flip-{off}", bytes(b)))
        for off in g.integers(8, len(payload) - 64, 2):
            b = bytearray(payload)
            b[off : off + 64] = bytes(64)
            variants.append((f"zero-{off}", bytes(b)))
        for what, data in variants:
            bad = tmp_path / f"{name}-resealed-{what}.nc"
            if not data.startswith(b"\x89HDF\r\n\x1a\n"):
                continue  # seal() refuses to seal what is no HDF5 file
            _write_sealed(bad, data, kind or "checkpoint")
            loader = "prior" if name == "prior" else "checkpoint"
            batches[j % 2].append({"bad": str(bad), "good": str(good), "loader": loader})
    # the reproducer's file (64 zero bytes in an old-format EbmTS checkpoint), re-sealed
    src = REPRO / "hang_checkpoint_case.nc"
    if src.exists():
        bad = _write_sealed(tmp_path / "hang_case_resealed.nc", src.read_bytes())
    else:  # the same damage to a checkpoint of this version (a payload offset of its layout)
        b = bytearray(_payload(files["EbmTS"]))
        b[5952 : 5952 + 64] = bytes(64)
        bad = _write_sealed(tmp_path / "EbmTS-resealed-hang.nc", bytes(b))
    assert _container.PROBE_SECONDS + len(bad.read_bytes()) / 20e6 < HANG_LIMIT / 2
    hang = {"bad": str(bad), "loader": "EbmTS", "probe_seconds": HANG_PROBE_SECONDS}
    min(batches, key=len).append(hang)
    pairs = _run_batches(batches, timeout=150)
    _check(pairs, allowed=("refused", "identical", "loaded a different state"), limit=HANG_LIMIT)
    outcomes = [r["out"] for _, r in pairs]
    # most damage is structural or breaks a cross-check: the layers past the seal do refuse
    assert outcomes.count("refused") >= len(outcomes) // 2, outcomes


# ---------------------------------------------------------------------- the reproducers' files


@pytest.mark.parametrize(
    "case", ["hang_checkpoint_case.nc", "cell_hang_case.nc", "cell_runtimeerror_case.nc"]
)
def test_old_format_reproducer_files_are_refused_quickly(case, tmp_path):
    src = REPRO / case
    if not src.exists():
        pytest.skip(f"{src} not available")
    bad = tmp_path / case
    bad.write_bytes(src.read_bytes())
    exc = _refused(load_checkpoint, bad, limit=QUICK)
    assert "not a sealed" in exc.reason
    _refused(EbmTS.load, bad, limit=QUICK)


# ---------------------------------------------------------------------- code execution


def _gadgets(mark: Path, victim: Path) -> dict[str, Any]:
    """Descriptions that ran a command or truncated a file when class names were resolved by
    walking attributes. Each is inserted into a real LinUCB checkpoint."""
    cmd = ["sh", "-c", f"touch {mark}"]
    state = {
        "bit_generator": "PCG64",
        "state": {"state": 1, "inc": 1},
        "has_uint32": 0,
        "uinteger": 0,
    }
    return {
        "dataclass-popen": {"__dataclass__": GADGET, "fields": {"args": cmd}},
        "object-popen": {"__object__": GADGET, "attrs": {"args": cmd}},
        "generator-popen": {"__generator__": GADGET, "state": state},
        "tree-popen": {"__tree__": "o0", "class": GADGET},
        "fileio-truncate": {
            "__dataclass__": "hierbandit._io:tempfile._io.FileIO",
            "fields": {"file": str(victim), "mode": "w"},
        },
        "object-fileio": {
            "__object__": "hierbandit._io:tempfile._io.FileIO",
            "attrs": {"file": str(victim), "mode": "w"},
        },
        "subprocess-popen": {"__dataclass__": "subprocess:Popen", "fields": {"args": cmd}},
        "builtins-eval": {
            "__dataclass__": "builtins:eval",
            "fields": {"source": f"open({str(mark)!r}, 'w')"},
        },
        "object-eval": {"__object__": "builtins:eval", "attrs": {}},
        "dotted-walk": {
            "__object__": "hierbandit.ebm.linear:np.f2py.subprocess.Popen",
            "attrs": {"args": cmd},
        },
        "globals-walk": {
            "__object__": "hierbandit.ebm.linear:LinUCB.__init__.__globals__",
            "attrs": {},
        },
        "allowed-prefix": {"__object__": "hierbandit.ebm.linear:LinUCB.save", "attrs": {}},
        "module-only": {"__object__": "subprocess", "attrs": {}},
        "generator-dotted": {"__generator__": "numpy.random._pcg64:PCG64.__init__", "state": state},
    }


def test_code_execution_gadgets_run_nothing(files, tmp_path):
    mark = tmp_path / "marker"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    caller = load_checkpoint(files["LinUCB"])
    before = snapshot(caller)
    saved = files["LinUCB"].read_bytes()
    paths = []
    for what, entry in _gadgets(mark, victim).items():
        # as an extra attribute of the policy, and as the whole described object
        def extra(state, entry=entry):
            state["attrs"]["zz"] = entry

        def nested(state, entry=entry):
            state["attrs"]["stats"]["attrs"]["zz"] = entry

        def whole(state, entry=entry):
            return entry

        for where, edit in (("attr", extra), ("nested", nested), ("root", whole)):
            paths.append(_edited(files["LinUCB"], tmp_path / f"rce-{what}-{where}.nc", edit))
    # replacing the policy's own class name
    for cls in (GADGET, "subprocess:Popen", "builtins:eval", "hierbandit._io:tempfile._io.FileIO"):

        def rename(state, cls=cls):
            state["__object__"] = cls

        paths.append(_edited(files["LinUCB"], tmp_path / f"rce-class-{len(paths)}.nc", rename))
    for exc in _refused_all(load_checkpoint, paths) + _refused_all(LinUCB.load, paths[::5]):
        assert "allow-list" in exc.reason or "invalid checkpoint" in exc.reason, exc.reason
    time.sleep(0.3)  # a spawned command would have had time to run
    assert not mark.exists(), "a command from the file ran"
    assert victim.read_text() == "precious\n", "a file named by the checkpoint was truncated"
    assert snapshot(caller) == before
    assert files["LinUCB"].read_bytes() == saved


def test_out_of_range_sizes_are_refused_without_corrupting_memory(files, tmp_path):
    """n_arms/n_instances of 100000 with arrays sized for the saved policy once wrote out of
    bounds in compiled kernels (segfault): in a child, refused, then nothing to update."""

    def grow(state):
        state["attrs"]["n_arms"] = 100_000
        state["attrs"]["n_instances"] = 100_000

    def grow_stats(state):
        state["attrs"]["stats"]["attrs"]["n_units"] = 10_000_000_000

    cases = [
        {"bad": str(_edited(files["LinUCB"], tmp_path / "lin_bad.nc", grow)), "loader": "LinUCB"},
        {
            "bad": str(_edited(files["LinUCB"], tmp_path / "lin_units.nc", grow_stats)),
            "loader": "LinUCB",
        },
        {"bad": str(_edited(files["EbmTS"], tmp_path / "ebm_bad.nc", grow)), "loader": "EbmTS"},
    ]
    _check(_run_batches([cases], timeout=120, rlimit=MEMORY_LIMIT))


def _bomb(src: Path, dst: Path, reseal: bool, kind: str = "checkpoint") -> Path:
    import h5py

    dst.write_bytes(src.read_bytes())
    with h5py.File(dst, "r+") as f:
        f.create_dataset(
            "big",
            shape=(4_000_000_000,),
            dtype="f8",
            chunks=(1_000_000,),
            compression="gzip",
            fillvalue=0.0,
        )
    assert dst.stat().st_size < 200_000
    if reseal:
        data = dst.read_bytes()
        start = HEADER_SIZE if data.startswith(b"\x89HBF") else 0
        _write_sealed(dst, data[start:], kind)
    return dst


def test_allocation_bombs_are_refused_without_allocating(files, tmp_path):
    """A 4e9-element chunked gzip variable (32 GB declared, a few KB stored), with the old seal
    and with a recomputed one: refused quickly in a child limited to 3 GB of address space."""
    cases = []
    for reseal in (False, True):
        bad = _bomb(files["LinUCB"], tmp_path / f"bomb-{reseal}.nc", reseal)
        cases.append({"bad": str(bad), "loader": "LinUCB"})
        cases.append({"bad": str(bad), "loader": "checkpoint"})
    prior_kind = _kind(files["prior"]) if files["prior"].read_bytes()[:4] == b"\x89HBF" else None
    for reseal in (False, True) if prior_kind else (False,):
        bad = _bomb(files["prior"], tmp_path / f"prior-bomb-{reseal}.nc", reseal, prior_kind)
        cases.append({"bad": str(bad), "loader": "prior"})
    _check(_run_batches([cases], timeout=150, rlimit=MEMORY_LIMIT))


# ---------------------------------------------------------------------- swapped files


def test_a_checkpoint_of_another_class_is_refused_by_the_class_loader(files):
    # documented by SharedStateMixin.load: the object must be an instance of the class
    for name in ("EbmTS", "SCLUB", "UCBBP", "BOC"):
        with pytest.raises(TypeError) as info:
            LinUCB.load(files[name])
        assert files[name].name in str(info.value) and "LinUCB" in str(info.value)


def test_files_of_another_kind_are_refused(files, tmp_path):
    import hierbandit
    from hierbandit._io import write_dataset

    exc = _refused(load_checkpoint, files["prior"])
    _refused(LinUCB.load, files["prior"])
    assert "prior" in exc.reason or "not a sealed" in exc.reason, exc.reason
    # a checkpoint passed to the prior loaders (a kind mismatch, refused at the seal)
    for load in (hierbandit.load_prior, type(_prior()).load):
        exc = _refused(load, files["LinUCB"], limit=QUICK)
        assert "checkpoint" in exc.reason, exc.reason
    # a sweep cell (sealed as the runner writes it) passed to the checkpoint loader
    cell = xr.Dataset(
        {"reward": (("policy", "t"), np.zeros((2, 5)))},
        attrs={
            "experiment": "ebm-synthetic",
            "experiment_cell": "x",
            "experiment_fingerprint": "f",
        },
    )
    path = write_dataset(cell, tmp_path / "cell.nc")
    exc = _refused(load_checkpoint, path, limit=QUICK)
    assert "checkpoint" in exc.reason, exc.reason


def test_swapped_and_damaged_sweep_cells_are_recomputed(tmp_path):
    """The runner reuses only its own finished cells: the reproducers' old-format cells (one
    made HDF5 spin forever, one raised RuntimeError) and a valid cell of another seed swapped
    in are recomputed, quickly, in a child that fails the test instead of hanging it."""
    hang, rterr = REPRO / "cell_hang_case.nc", REPRO / "cell_runtimeerror_case.nc"
    if not (hang.exists() and rterr.exists()):
        pytest.skip("reproducer files not available")
    code = r"""
import json, shutil, sys
from pathlib import Path
import numpy as np, xarray as xr
from hierbandit.experiments.runner import run_experiment
out, hang, rterr = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
params = {"settings": ["fig1-data-poor"], "policies": ["LinUCB"], "horizon": 30, "seeds": 3,
          "seeds_per_cell": 1}
first = run_experiment("ebm-synthetic", out=out, params=params)
keys = sorted(first.results)
ref = {k: first.results[k].copy(deep=True) for k in keys}
cells = out / "cells"
(cells / f"{keys[2]}.nc").write_bytes((cells / f"{keys[0]}.nc").read_bytes())
shutil.copy(hang, cells / f"{keys[0]}.nc")
shutil.copy(rterr, cells / f"{keys[1]}.nc")
again = run_experiment("ebm-synthetic", out=out, params=params)
same = all(np.array_equal(again.results[k][v].values, ref[k][v].values)
           for k in keys for v in ref[k].data_vars if v != "seconds")
print(json.dumps({"computed": sorted(again.computed), "keys": keys, "same": same}))
"""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "sweep"), str(hang), str(rterr)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=150,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the sweep hung on a damaged cell")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["computed"] == result["keys"], result
    assert result["same"]
    assert time.monotonic() - t0 < 150


# ---------------------------------------------------------------------- descriptions


def _first_array(state: dict) -> dict:
    return state["attrs"]["stats"]["attrs"]["G"]


def _description_cases(tmp: Path, src: Path) -> dict[str, Path]:
    def declare_huge(s):
        _first_array(s)["shape"] = [10**12]

    def declare_dtype(s):
        _first_array(s)["dtype"] = "<f4"

    def declare_object_dtype(s):
        _first_array(s)["dtype"] = "|O"

    def twice(s):
        s["attrs"]["stats"]["attrs"]["Ainv"]["__array__"] = _first_array(s)["__array__"]

    def undefined_ref(s):
        s["attrs"]["_streams"] = [{"__ref__": "r999"}]

    def ref_before_definition(s):
        s["attrs"]["stats"]["attrs"]["G"] = {"__ref__": "r5"}

    def missing_var(s):
        _first_array(s)["__array__"] = "a99"

    def deep(tree):
        text = tree.attrs[ATTR]
        tree.attrs[ATTR] = text[:-1] + ', "zz": ' + "[" * 10_000 + "]" * 10_000 + "}"

    def deep_dicts(s):
        v: Any = 1
        for _ in range(200):
            v = {"__dict__": {"k": v}}
        s["attrs"]["zz"] = v

    def unknown_tag(s):
        s["attrs"]["zz"] = {"__pickle__": "x"}

    def huge_range(s):
        s["attrs"]["zz"] = {"__range__": [0, 10**30, 1]}

    def bad_float(s):
        s["attrs"]["alpha"] = {"__float__": "1e999999"}

    def duplicate_id(s):
        s["attrs"]["_ones"]["__id__"] = "r1"

    def not_an_object(s):
        return [s]

    def extra_var(tree):
        ds = tree.to_dataset(inherit=False)
        ds["zz"] = ("zz_0", np.zeros(3))
        tree.dataset = ds

    def extra_group(tree):
        tree["zz"] = xr.DataTree(xr.Dataset({"x": ("x_0", np.zeros(2))}))

    def coord_var(tree):
        ds = tree.to_dataset(inherit=False)
        tree.dataset = ds.assign_coords(a2_0=np.arange(ds.sizes["a2_0"]))

    def no_description(tree):
        del tree.attrs[ATTR]

    def not_json(tree):
        tree.attrs[ATTR] = "{" * 50

    def deep_json_text(tree):
        tree.attrs[ATTR] = "[" * 10_000 + "]" * 10_000

    def old_version(tree):
        tree.attrs["format_version"] = 1

    state_edits = {k: v for k, v in locals().items() if k not in ("tmp", "src") and callable(v)}
    tree_edits = {
        "deep",
        "extra_var",
        "extra_group",
        "coord_var",
        "no_description",
        "not_json",
        "deep_json_text",
        "old_version",
    }
    out = {}
    for name, fn in state_edits.items():
        dst = tmp / f"desc-{name}.nc"
        if name in tree_edits:
            out[name] = _edited(src, dst, edit_tree=fn)
        else:
            out[name] = _edited(src, dst, edit_state=fn)
    return out


def test_invalid_descriptions_are_refused(files, tmp_path):
    caller = load_checkpoint(files["LinUCB"])
    before = snapshot(caller)
    cases = _description_cases(tmp_path, files["LinUCB"])
    assert len(cases) >= 20
    _refused_all(load_checkpoint, list(cases.values()))
    assert snapshot(caller) == before


# ---------------------------------------------------------------------- classes and attributes


def test_names_outside_the_allow_list_are_refused_in_every_role(files, tmp_path):
    state_pcg = {
        "bit_generator": "PCG64",
        "state": {"state": 1, "inc": 1},
        "has_uint32": 0,
        "uinteger": 0,
    }
    roles = {
        "object-policy-base": (
            "attrs",
            "zz",
            {"__object__": "hierbandit.ebm.base:Policy", "attrs": {}},
        ),
        "object-dict": ("attrs", "zz", {"__object__": "collections:OrderedDict", "attrs": {}}),
        "object-datatree": ("attrs", "zz", {"__object__": "xarray:DataTree", "attrs": {}}),
        "dataclass-not-allowed": (
            "attrs",
            "zz",
            {"__dataclass__": "hierbandit.boc.instances:Instance", "fields": {}},
        ),
        "dataclass-object-class": (
            "attrs",
            "zz",
            {"__dataclass__": "hierbandit.ebm.linear:LinUCB", "fields": {}},
        ),
        "tree-dataset": ("attrs", "zz", {"__tree__": "o0", "class": "xarray:Dataset"}),
        "tree-policy": (
            "attrs",
            "zz",
            {"__tree__": "o0", "class": "hierbandit.ebm.linear:LinUCB"},
        ),
        "generator-generator": (
            "attrs",
            "_tie_rng",
            {"__generator__": "numpy.random:Generator", "state": state_pcg},
        ),
        "generator-randomstate": (
            "attrs",
            "_tie_rng",
            {"__generator__": "numpy.random.mtrand:RandomState", "state": state_pcg},
        ),
        "generator-bad-state": (
            "attrs",
            "_tie_rng",
            {"__generator__": "numpy.random._pcg64:PCG64", "state": {"bit_generator": "MT19937"}},
        ),
    }
    paths = []
    for what, (_, key, entry) in roles.items():

        def edit(s, key=key, entry=entry):
            s["attrs"][key] = entry

        paths.append(_edited(files["LinUCB"], tmp_path / f"role-{what}.nc", edit))
    for attr in ("__class__", "__dict__", "__reduce__", "a.b", "", "1x"):

        def edit_attr(s, attr=attr):
            s["attrs"][attr] = (
                {"__object__": "hierbandit.ebm.linear:LinUCB", "attrs": {}}
                if attr == "__class__"
                else 1
            )

        paths.append(_edited(files["LinUCB"], tmp_path / f"attr-{len(paths)}.nc", edit_attr))
    _refused_all(load_checkpoint, paths)
    # a transient attribute in the file is never used: the restored object gets a new lock
    path = _edited(files["LinUCB"], tmp_path / "lock.nc", lambda s: s["attrs"].update(_lock=1))
    restored = load_checkpoint(path)
    assert isinstance(restored._lock, type(__import__("threading").RLock()))
    assert snapshot(restored) == snapshot(load_checkpoint(files["LinUCB"]))


def test_invalid_configurations_are_refused(files, tmp_path):
    edits = {
        "n_arms-negative": lambda s: s["attrs"].__setitem__("n_arms", -1),
        "n_arms-bool": lambda s: s["attrs"].__setitem__("n_arms", True),
        "ridge-nan": lambda s: s["attrs"].__setitem__("ridge", {"__float__": "nan"}),
        "ridge-negative": lambda s: s["attrs"].__setitem__("ridge", -1.0),
        "alpha-inf": lambda s: s["attrs"].__setitem__("alpha", {"__float__": "inf"}),
        "missing-config": lambda s: s["attrs"].pop("n_features"),
        "missing-state": lambda s: s["attrs"].pop("stats"),
        "units-mismatch": lambda s: s["attrs"]["stats"]["attrs"].__setitem__("n_units", 4),
        "t-negative": lambda s: s["attrs"].__setitem__("t", -5),
    }
    paths = [_edited(files["LinUCB"], tmp_path / f"config-{w}.nc", fn) for w, fn in edits.items()]
    _refused_all(load_checkpoint, paths)


# ---------------------------------------------------------------------- restored values


def _set_var(name: str, values) -> Any:
    def edit(tree):
        ds = tree.to_dataset(inherit=False)
        ds[name] = (ds[name].dims, values)
        tree.dataset = ds

    return edit


def test_non_finite_and_wrongly_typed_values_are_refused(files, tmp_path):
    src = files["LinUCB"]
    tree = _tree(src)
    state = json.loads(tree.attrs[ATTR])
    st = state["attrs"]["stats"]["attrs"]
    b_key, g_key, n_key = st["b"]["__array__"], st["G"]["__array__"], st["n"]["__array__"]
    shape_b = tree[b_key].shape
    nan_b = np.zeros(shape_b)
    nan_b.flat[0] = np.nan
    inf_g = np.array(tree[g_key].values)
    inf_g.flat[0] = np.inf
    cases = {
        "nan-statistic": _edited(src, tmp_path / "nan.nc", edit_tree=_set_var(b_key, nan_b)),
        "inf-statistic": _edited(src, tmp_path / "inf.nc", edit_tree=_set_var(g_key, inf_g)),
        "int8-for-float64": _edited(
            src,
            tmp_path / "int8.nc",
            edit_tree=_set_var(b_key, np.zeros(shape_b, dtype=np.int8)),
        ),
        "float-for-int": _edited(
            src,
            tmp_path / "float_n.nc",
            edit_tree=_set_var(n_key, np.zeros(tree[n_key].shape)),
        ),
        "negative-counts": _edited(
            src,
            tmp_path / "neg_n.nc",
            edit_tree=_set_var(n_key, -np.ones(tree[n_key].shape, dtype=np.int64)),
        ),
    }

    def declared_int8(s):
        s["attrs"]["stats"]["attrs"]["b"]["dtype"] = "|i1"

    def text_number(s):
        s["attrs"]["t"] = "5"

    def text_alpha(s):
        s["attrs"]["alpha"] = "1.0"

    def list_number(s):
        s["attrs"]["ridge"] = [1.0]

    def float_count(s):
        s["attrs"]["t"] = 5.0

    def np_scalar_text(s):
        s["attrs"]["t"] = {"__np_scalar__": "<i8", "value": "nan"}

    def readonly(s):
        s["attrs"]["stats"]["attrs"]["b"]["writeable"] = False

    int8_tree = _set_var(b_key, np.zeros(shape_b, dtype=np.int8))
    cases["int8-declared-int8"] = _edited(
        src, tmp_path / "int8_declared.nc", edit_state=declared_int8, edit_tree=int8_tree
    )
    for fn in (text_number, text_alpha, list_number, float_count, np_scalar_text, readonly):
        cases[fn.__name__] = _edited(src, tmp_path / f"{fn.__name__}.nc", edit_state=fn)
    caller = load_checkpoint(src)
    before = snapshot(caller)
    _refused_all(load_checkpoint, list(cases.values()))
    assert snapshot(caller) == before


def test_an_untouched_resealed_round_trip_loads_the_saved_state(files, tmp_path):
    """Control: the editing helpers alone (open, write, re-seal) produce a valid checkpoint
    of the same state, so the refusals above are due to the edits."""
    for name in POLICIES:
        path = _edited(files[name], tmp_path / f"{name}-same.nc", edit_state=lambda s: None)
        assert snapshot(load_checkpoint(path)) == snapshot(load_checkpoint(files[name]))
