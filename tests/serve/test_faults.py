"""SIGKILL under load: ``hierbandit serve`` is killed at random moments while a client sends
decisions and rewards, and restarted from its state directory each time. Every acknowledged
reward is in the restored state, none is applied twice, and the final state is bit for bit that
of a service that was fed, without interruption, exactly the requests the killed one applied.

How the applied requests are known. One client sends its requests one at a time, so the
service applies them in the order they are sent and at most one request is in flight when the
process dies (no answer: it may or may not be in the write-ahead log). After each restart the
restored counters say which: a decide batch of B requests landed iff ``next_event`` grew by B,
a reward batch of k iff ``rewards`` grew by k (a record is in the log whole or not at all), and
anything else fails the test. The client then behaves as a real one that lost an answer: it
sends an unanswered reward again, which must be refused (409) if it had landed and accepted
otherwise. A second thread reads ``/v1/state`` throughout (concurrent load; the counters may
never go back within one life of the process); it changes nothing, so the order stays known.

The checkpoint period is short (every 10 log records) so that kills also land while a checkpoint
(event-log files, policy, ledger, ``CURRENT``, old segments) is being written; every fifth
cycle also kills the restarting process at a random moment before it serves.

Every start imports the package's sources afresh: a source file edited while the test runs (a
shared checkout) makes the later starts run other code than the replay, and the answers differ.

The default run kills 5 times; the slow run (``make test-slow``, or
``.venv/bin/pytest -m slow tests/serve/test_faults.py``) kills 50 times under load.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hierbandit.serve import DecisionService, read_events
from tests.serve._server import (
    ARMS,
    PRIOR,
    Server,
    Traffic,
    check_decisions,
    current_policy,
    httpx,
)
from tests.serve.conftest import assert_same_state

pd = pytest.importorskip("pandas")

SEED = 424_242


class Client:
    """What the one client knows: the requests the service applied, in order, the answers it
    got, the rewards acknowledged, and the counters it expects."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, dict[str, Any]]] = []
        self.answers: dict[int, dict[str, Any]] = {}  # index in applied -> answer of a decide
        self.life: list[int] = []  # the start of the process that applied each request
        self.lives = 1
        self.acked: dict[int, float] = {}  # event -> reward acknowledged (200)
        self.next_event = 0
        self.rewards = 0
        self.outcomes = {"decide": [0, 0], "reward": [0, 0]}  # in flight: [not landed, landed]

    def decided(self, body: dict[str, Any], out: dict[str, Any] | None, traffic: Traffic) -> None:
        B = len(body["instances"])
        events = list(range(self.next_event, self.next_event + B))
        if out is not None:
            check_decisions(body, out, self.next_event, ARMS)
            self.answers[len(self.applied)] = out
        self.applied.append(("decide", body))
        self.life.append(self.lives)
        self.next_event += B
        traffic.decided(events)

    def rewarded(self, body: dict[str, Any]) -> None:
        self.applied.append(("reward", body))
        self.life.append(self.lives)
        self.rewards += len(body["events"])
        for e, y in zip(body["events"], body["rewards"], strict=True):
            assert e not in self.acked
            self.acked[e] = y


def _watch(server: Server, stop: threading.Event, problems: list[str]) -> None:
    """Read the counters until the process dies: they never go back within one life."""
    last = (0, 0, 0)
    try:
        with server.client() as http:
            while not stop.is_set():
                st = http.get("/v1/state").json()
                now = (st["decisions"], st["rewards"], st["records"])
                if any(a < b for a, b in zip(now, last, strict=True)):
                    problems.append(f"the counters went back: {last} -> {now}")
                last = now
                time.sleep(0.01)
    except httpx.TransportError:
        pass


def _load_until_killed(
    server: Server, client: Client, traffic: Traffic, delay: float
) -> tuple[str, dict[str, Any]]:
    """Send requests back to back; SIGKILL the process after ``delay`` seconds; the request
    left without an answer."""
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        server.proc.kill()

    problems: list[str] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(server, stop, problems), daemon=True)
    watcher.start()
    timer = threading.Timer(delay, kill)
    timer.start()
    try:
        with server.client() as http:
            while True:
                op, body = traffic.next()
                try:
                    r = http.post(f"/v1/{op}", json=body)
                except httpx.TransportError:
                    break
                assert r.status_code == 200, (op, r.status_code, r.text, server.log_text())
                if op == "decide":
                    client.decided(body, r.json(), traffic)
                else:
                    assert r.json() == {"applied": len(body["events"])}
                    client.rewarded(body)
    finally:
        timer.join()
        stop.set()
        watcher.join(timeout=60)
    server.kill()
    assert killed.is_set(), "a request failed before the kill:\n" + server.log_text()
    assert not problems, problems
    return op, body


def _settle(
    server: Server, client: Client, traffic: Traffic, inflight: tuple[str, dict[str, Any]]
) -> None:
    """After a restart: find out from the restored counters whether the request in flight
    landed, and act as a client that lost its answer."""
    st = server.get("/v1/state")
    op, body = inflight
    if op == "decide":
        B = len(body["instances"])
        assert st["rewards"] == client.rewards, (st, client.rewards)
        assert st["next_event"] in (client.next_event, client.next_event + B), (st, B)
        landed = st["next_event"] == client.next_event + B
        if landed:  # its events exist: the client learns them from the counters
            client.decided(body, None, traffic)
    else:
        k = len(body["events"])
        assert st["next_event"] == client.next_event, (st, client.next_event)
        assert st["rewards"] in (client.rewards, client.rewards + k), (st, client.rewards, k)
        landed = st["rewards"] == client.rewards + k
        with server.client() as http:  # the client sends the unanswered rewards again
            r = http.post("/v1/reward", json=body)
        assert r.status_code == (409 if landed else 200), (landed, r.status_code, r.text)
        client.rewarded(body)
    client.outcomes[op][int(landed)] += 1


def _check_counters(server: Server, client: Client, t0: int, rng: np.random.Generator) -> None:
    st = server.get("/v1/state")
    assert st["decisions"] == st["next_event"] == client.next_event, st
    assert st["rewards"] == client.rewards == st["t"] - t0, (st, client.rewards)
    assert st["pending"] + st["rewards"] + st["expired"] == st["decisions"], st
    assert st["records"] == len(client.applied), (st, len(client.applied))
    if client.acked:  # an acknowledged reward sent again is refused and changes nothing
        e = int(rng.choice(list(client.acked)))
        with server.client() as http:
            r = http.post("/v1/reward", json={"events": [e], "rewards": [1.0]})
        assert r.status_code == 409, (e, r.status_code, r.text)
        assert server.get("/v1/state") == st


def _kill_and_restart(tmp_path: Path, kills: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    state = tmp_path / "state"
    server = Server(state, tmp_path / "logs", args=("--checkpoint-every", "10"))
    client = Client()
    traffic = Traffic(seed=seed + 1, max_decide=40)
    restarts: list[float] = []
    cycles: list[float] = []
    startup_kills = 0
    try:
        server.start(PRIOR, seed=SEED)
        t0 = server.get("/v1/state")["t"]
        for cycle in range(kills):
            began = time.monotonic()
            inflight = _load_until_killed(server, client, traffic, delay=rng.uniform(0.0, 1.5))
            if cycle % 5 == 4:  # also kill the restart itself, at a random moment
                server.launch()
                time.sleep(rng.uniform(0.0, 3.0))
                server.kill()
                startup_kills += 1
            t = time.monotonic()
            server.start()  # from the state directory alone
            client.lives += 1
            restarts.append(time.monotonic() - t)
            _settle(server, client, traffic, inflight)
            _check_counters(server, client, t0, rng)
            cycles.append(time.monotonic() - began)
        final = server.get("/v1/state")
        server.stop_gracefully()
    finally:
        server.close()

    # the event log: every acknowledged reward exactly once, with the value sent
    rew = pd.read_parquet(state / "events" / "rewards")
    pd.testing.assert_frame_equal(rew, read_events(state, "rewards"))
    assert rew["event"].is_unique
    assert dict(zip(rew["event"], rew["reward"], strict=True)) == client.acked
    assert len(rew) == final["rewards"] == final["t"] - t0 == client.rewards
    dec = read_events(state, "decisions")
    assert dec["event"].tolist() == list(range(final["decisions"]))

    # the same requests, in the same order, to a service that is never killed
    replay = DecisionService.open(tmp_path / "replay", PRIOR, seed=SEED)
    try:
        outs = [getattr(replay, op)(copy.deepcopy(body)) for op, body in client.applied]
        (tmp_path / "client.json").write_text(
            json.dumps({"applied": client.applied, "answers": client.answers, "life": client.life})
        )
        for i, answer in client.answers.items():
            if outs[i] != answer:
                p, q = np.array(outs[i]["probabilities"]), np.array(answer["probabilities"])
                raise AssertionError(
                    f"request {i}, answered by start {client.life[i]} of {client.lives}: not "
                    f"the replay's answer (arms equal: {outs[i]['arms'] == answer['arms']}; "
                    f"probabilities differ at {np.flatnonzero(p != q).tolist()}, by up to "
                    f"{np.max(np.abs(p - q))}); the requests are in {tmp_path / 'client.json'}"
                )
        arms = [
            a
            for (op, _), out in zip(client.applied, outs, strict=True)
            if op == "decide"
            for a in out["arms"]
        ]
        assert dec["arm"].tolist() == arms
        assert replay.state() == final | {"committed": replay.state()["committed"]}
    finally:
        replay.close()
    assert_same_state(current_policy(state), current_policy(tmp_path / "replay"))
    report = {
        "kills under load": kills,
        "kills while restarting": startup_kills,
        "requests applied": len(client.applied),
        "rewards acknowledged": len(client.acked),
        "in flight [not landed, landed]": client.outcomes,
        "restart s (median, max)": (float(np.median(restarts)), float(np.max(restarts))),
        "kill/restart cycle s (median, max)": (float(np.median(cycles)), float(np.max(cycles))),
    }
    print(report)
    return report


def test_sigkill_under_load_loses_and_repeats_no_reward(tmp_path):
    report = _kill_and_restart(tmp_path, kills=5, seed=1)
    assert report["rewards acknowledged"] > 0


@pytest.mark.slow
def test_fifty_sigkills_under_load_lose_and_repeat_no_reward(tmp_path):
    report = _kill_and_restart(tmp_path, kills=50, seed=2)
    assert report["rewards acknowledged"] > 0
