"""Helpers of the HTTP and fault tests: ``hierbandit serve`` as a child process on loopback,
client traffic for the shipped MovieLens prior, and the in-process replay of what a served
service applied.

The child is started as ``python -m hierbandit.cli serve ... --port 0``: the operating system
picks a free port and the test reads it from uvicorn's "running on" line, so two test workers
never race for a port. Its output goes to a log file beside the state directory (never inside
it), which every failure message quotes.

Restart speed: the child inherits the test run's settings (numba's keyed cache folder, one BLAS
thread), but where the environment forbids bytecode files (``PYTHONDONTWRITEBYTECODE``) every
start would compile the sources of NumPy, pandas, xarray... again (about 4 of a restart's
6-7 s). The child therefore keeps its bytecode under a per-user folder of the temporary
directory (``PYTHONPYCACHEPREFIX``), never beside the sources.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[2]
#: the shipped fitted prior: 5 arms (0..4), features intercept/time/weekend
PRIOR = REPO / "models" / "movielens-ml" / "prior.nc"
ARMS = [0, 1, 2, 3, 4]
FEATURES = ["intercept", "time", "weekend"]
#: a start compiles or loads kernels and reads the prior: generous on a loaded 2-core machine
STARTUP_TIMEOUT = 150.0
#: the longest a single request may take (one waiting behind a checkpoint included)
REQUEST_TIMEOUT = 120.0

_RUNNING = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")


try:  # a served child is killed if the test process dies (Linux), never left running
    _LIBC: Any = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
except OSError:  # pragma: no cover
    _LIBC = None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before ``exec``: SIGKILL on the death of the process that started it."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def child_env() -> dict[str, str]:
    """The environment of a served child: the test run's, bytecode kept outside the tree."""
    env = os.environ.copy()
    if env.get("PYTHONDONTWRITEBYTECODE") and not env.get("PYTHONPYCACHEPREFIX"):
        del env["PYTHONDONTWRITEBYTECODE"]
        env["PYTHONPYCACHEPREFIX"] = str(
            Path(tempfile.gettempdir()) / f"hierbandit-test-pycache-{os.getuid()}"
        )
    return env


def cli(*args: str) -> list[str]:
    """The command line of ``hierbandit ARGS`` with this interpreter."""
    return [sys.executable, "-m", "hierbandit.cli", *args]


def client(base_url: str) -> Any:
    """An HTTP client of one served child (no proxy from the environment: loopback only)."""
    return httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT, trust_env=False)


class Server:
    """``hierbandit serve`` on 127.0.0.1 over one state directory, started and stopped at will.

    Parameters
    ----------
    state : path
        The state directory.
    logs : path
        Folder of the child's output files (one per start).
    args : sequence of str
        Further options of ``hierbandit serve`` (``--checkpoint-every``, ``--max-batch``...).
    """

    def __init__(self, state: Path, logs: Path, args: tuple[str, ...] = ()) -> None:
        self.state = Path(state)
        self.logs = Path(logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.args = tuple(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.url: str | None = None
        self.log_path: Path | None = None

    # ------------------------------------------------------------------ life cycle
    def launch(self, source: Path | None = None, seed: int | None = None) -> None:
        """Start the child (not waiting for it): from ``source`` the first time, after that
        from the state directory alone."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        cmd = cli("serve")
        if source is not None:
            cmd.append(str(source))
        cmd += ["--state", str(self.state), "--host", "127.0.0.1", "--port", "0", *self.args]
        if seed is not None:
            cmd += ["--seed", str(seed)]
        self.starts += 1
        self.log_path = self.logs / f"serve-{self.starts:03d}.log"
        self.url = None
        with open(self.log_path, "wb") as sink:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=child_env(),
                cwd=self.logs,
                preexec_fn=None if _LIBC is None else _die_with_parent,
            )

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> Server:
        """Wait until the child listens and ``/v1/health`` answers 200."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the service exited with {self.proc.returncode} while starting:\n"
                    + self.log_text()
                )
            if self.url is None:
                m = _RUNNING.search(self.log_path.read_bytes())
                if m is not None:
                    self.url = f"http://127.0.0.1:{int(m.group(1))}"
            if self.url is not None:
                try:
                    with client(self.url) as http:
                        if http.get("/v1/health").status_code == 200:
                            return self
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the service did not start within {timeout} s:\n" + self.log_text())

    def start(self, source: Path | None = None, seed: int | None = None) -> Server:
        self.launch(source, seed)
        return self.wait_ready()

    def kill(self) -> None:
        """SIGKILL (no last checkpoint), and wait for the process to be gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()

    def stop(self) -> int:
        """SIGTERM: uvicorn shuts down and the service writes a last checkpoint; the exit
        status (uvicorn re-raises the signal after its graceful shutdown: -SIGTERM)."""
        assert self.proc is not None and self.proc.poll() is None, "not running"
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=REQUEST_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                "the service did not stop on SIGTERM:\n" + self.log_text()
            ) from None

    def stop_gracefully(self) -> None:
        """:meth:`stop`, and check that it was a clean shutdown."""
        rc = self.stop()
        text = self.log_text()
        assert rc in (0, -signal.SIGTERM), f"exit status {rc}:\n{text}"
        assert "Application shutdown complete" in text, text
        assert "Traceback" not in text and "ERROR" not in text, text

    def close(self) -> None:
        """Kill the child if it still runs (teardown after a failure)."""
        self.kill()

    # ------------------------------------------------------------------ requests
    def client(self) -> Any:
        assert self.url is not None, "not started"
        return client(self.url)

    def get(self, path: str) -> Any:
        with self.client() as http:
            r = http.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def log_text(self, tail: int = 6000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-tail:].decode(errors="replace")


def current_policy(state: Path) -> Path:
    """The policy file of the checkpoint in force of a state directory."""
    return Path(state) / (Path(state) / "CURRENT").read_text().strip() / "policy.nc"


class Traffic:
    """Client traffic for the MovieLens prior: decide batches (string or integer user ids,
    contexts ``[1, time, weekend]``, sometimes a subset of allowed arms) and reward batches of
    events decided earlier, a random subset, out of order; some events are never rewarded.

    The generator knows only what the client learns: :meth:`decided` adds events to the pool
    of those to reward, :meth:`returned` puts back the events of a reward that was not applied.
    """

    def __init__(
        self, seed: int, *, users: int = 30, max_decide: int = 40, ids: str = "str"
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.users = users
        self.max_decide = max_decide
        self.ids = ids
        self.waiting: list[int] = []

    def user(self, u: int) -> Any:
        return f"user-{u:03d}" if self.ids == "str" else int(u) * 7 + 3

    def next(self) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        if len(self.waiting) >= 3 and rng.random() < 0.5:
            k = int(rng.integers(1, min(len(self.waiting), 60) + 1))
            pick = sorted(rng.choice(len(self.waiting), size=k, replace=False).tolist())
            events = [self.waiting[i] for i in pick]
            for i in reversed(pick):
                del self.waiting[i]
            rng.shuffle(events)
            rewards = np.round(rng.normal(3.5, 1.0, size=k), 6).tolist()
            return "reward", {"events": [int(e) for e in events], "rewards": rewards}
        B = int(rng.integers(1, self.max_decide + 1))
        users = rng.integers(0, self.users, B)
        body: dict[str, Any] = {
            "instances": [self.user(int(u)) for u in users],
            "contexts": [
                [1.0, round(float(t), 4), float(w)]
                for t, w in zip(rng.normal(size=B), rng.integers(0, 2, B), strict=True)
            ],
        }
        if rng.random() < 0.3:
            body["allowed"] = [
                sorted(rng.choice(ARMS, size=int(rng.integers(2, 5)), replace=False).tolist())
                for _ in range(B)
            ]
        return "decide", body

    def decided(self, events: list[int]) -> None:
        self.waiting.extend(int(e) for e in events if self.rng.random() < 0.85)

    def returned(self, events: list[int]) -> None:
        self.waiting.extend(events)


def check_decisions(body: dict[str, Any], out: dict[str, Any], first: int, arms: list[Any]) -> None:
    """A decide response: consecutive event ids from ``first``, one arm per request among the
    service's arms (and the allowed ones), a choice probability in [0, 1] for each."""
    B = len(body["instances"])
    assert out["events"] == list(range(first, first + B)), (first, out["events"])
    assert len(out["arms"]) == B and all(a in arms for a in out["arms"]), out["arms"]
    if body.get("allowed") is not None:
        assert all(a in ok for a, ok in zip(out["arms"], body["allowed"], strict=True))
    p = np.asarray(out["probabilities"], dtype=float)
    assert p.shape == (B,) and np.all((p >= 0) & (p <= 1)), out["probabilities"]
