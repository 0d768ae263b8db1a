"""The decision service end to end over HTTP: ``hierbandit serve`` on loopback from the shipped
fitted prior, a real HTTP client, a graceful restart from the state directory alone, the same
decisions as a service that was never stopped, a refit from the event log in one command, and
the refusals of malformed requests."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
from typing import Any

import numpy as np
import pytest

from hierbandit.serve import DecisionService, ServiceConfig, read_events
from hierbandit.serve.eventlog import committed_record
from tests.serve._server import (
    ARMS,
    FEATURES,
    PRIOR,
    Server,
    Traffic,
    check_decisions,
    child_env,
    cli,
    current_policy,
)
from tests.serve.conftest import assert_same_state

pd = pytest.importorskip("pandas")

SEED = 20_241


class Exchange:
    """Sends traffic to a served child and the same requests, in the same order, to an
    in-process reference service that is never stopped; checks every answer on the way."""

    def __init__(self, reference: DecisionService, traffic: Traffic) -> None:
        self.reference = reference
        self.traffic = traffic
        self.next_event = 0
        self.arms: dict[int, Any] = {}
        self.rewards: dict[int, float] = {}

    def run(self, http: Any, requests: int) -> None:
        for _ in range(requests):
            op, body = self.traffic.next()
            r = http.post(f"/v1/{op}", json=body)
            assert r.status_code == 200, (op, r.status_code, r.text)
            out = r.json()
            # the served answer is the uninterrupted reference's, bit for bit
            assert out == getattr(self.reference, op)(copy.deepcopy(body)), op
            if op == "decide":
                check_decisions(body, out, self.next_event, ARMS)
                self.next_event += len(body["instances"])
                self.arms.update(zip(out["events"], out["arms"], strict=True))
                self.traffic.decided(out["events"])
            else:
                assert out == {"applied": len(body["events"])}
                for e, y in zip(body["events"], body["rewards"], strict=True):
                    self.rewards[e] = y


def test_serve_restart_and_refit_over_http(tmp_path):
    state = tmp_path / "state"
    server = Server(state, tmp_path / "logs")
    reference = DecisionService.open(tmp_path / "reference", PRIOR, seed=SEED)
    try:
        server.start(PRIOR, seed=SEED)
        info = server.get("/v1/info")
        assert info["policy"] == "EbmTS" and info["probabilities"] is True
        assert info["arms"] == ARMS and info["features"] == FEATURES
        assert server.get("/v1/state") == reference.state()
        assert server.get("/v1/health") == {"status": "ok", "reason": None}

        ex = Exchange(reference, Traffic(seed=1, max_decide=80))
        with server.client() as http:
            ex.run(http, 40)
        before = server.get("/v1/state")
        assert before == reference.state()
        assert before["decisions"] == before["next_event"] == ex.next_event > 0
        assert before["rewards"] == len(ex.rewards) == before["t"] > 0
        assert before["pending"] == before["decisions"] - before["rewards"]
        metrics = server.get("/v1/metrics")
        assert metrics["state"] == before and metrics["responses"] == {"200": 40}

        # SIGTERM: a last checkpoint covering every record; then the state directory alone
        server.stop_gracefully()
        assert committed_record(state) == before["records"]
        server.start()
        assert server.get("/v1/state") == before | {"committed": before["records"]}
        assert server.get("/v1/info") == info

        # the decisions after the restart are those of the service that never stopped
        with server.client() as http:
            ex.run(http, 40)
        final = server.get("/v1/state")
        assert final == reference.state() | {"committed": final["committed"]}
        server.stop_gracefully()
        reference.close()
        assert_same_state(current_policy(state), current_policy(tmp_path / "reference"))
    finally:
        server.close()
        reference.close()

    # the event log: every reward once, as sent, against its decision
    rew = pd.read_parquet(state / "events" / "rewards")
    pd.testing.assert_frame_equal(rew, read_events(state, "rewards"))
    assert len(rew) == final["rewards"] == rew["event"].nunique()
    assert dict(zip(rew["event"], rew["reward"], strict=True)) == ex.rewards
    assert dict(zip(rew["event"], rew["arm"], strict=True)) == {e: ex.arms[e] for e in ex.rewards}
    assert all(isinstance(u, str) and u.startswith("user-") for u in rew["instance"])
    dec = read_events(state, "decisions")
    assert dec["event"].tolist() == list(range(final["decisions"]))
    assert dec["arm"].tolist() == [ex.arms[e] for e in range(final["decisions"])]
    assert dec["propensity"].between(0, 1).all()

    # refit from the event log in one command; the prior starts a new service
    refit = tmp_path / "prior-2.nc"
    proc = subprocess.run(
        cli(
            "fit-prior",
            str(state / "events" / "rewards"),
            "--out",
            str(refit),
            "--method",
            "ml",
            *("--feature", "intercept", "--feature", "time", "--feature", "weekend"),
        ),
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from hierbandit.bayes import load_prior

    old, new = load_prior(PRIOR), load_prior(refit)
    assert list(new.arms) == list(old.arms) == ARMS
    assert list(new.features) == list(old.features) == FEATURES
    data = new.provenance["data"]
    assert data["n_rows"] == len(rew) and data["n_instances"] == rew["instance"].nunique()
    assert data["ids"]["instance"] == "str"
    assert np.all(np.isfinite(new.shared_mean)) and np.all(np.asarray(new.sigma2) > 0)
    served = DecisionService.open(tmp_path / "state-2", refit, seed=1)
    try:
        out = served.decide({"instances": ["user-001"], "contexts": [[1.0, 0.0, 1.0]]})
        assert out["events"] == [0] and out["arms"][0] in ARMS
    finally:
        served.close()


def _raw(url: str, request: bytes) -> tuple[int, bytes]:
    """Send raw bytes to the service and read the status line and body of the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    return int(head.split(b" ")[1]), body


def test_refusals_over_http(tmp_path):
    state = tmp_path / "state"
    server = Server(state, tmp_path / "logs", args=("--max-batch", "4"))
    reference = DecisionService.open(
        tmp_path / "reference",
        PRIOR,
        seed=SEED,
        config=ServiceConfig(max_batch=4),
    )
    try:
        server.start(PRIOR, seed=SEED)
        assert server.get("/v1/info")["max_batch"] == 4
        good = {"instances": ["a", "b"], "contexts": [[1.0, 0.5, 0.0], [1.0, -0.5, 1.0]]}
        with server.client() as http:
            first = http.post("/v1/decide", json=good)
            assert first.status_code == 200
            assert first.json() == reference.decide(copy.deepcopy(good))
            reward = {"events": [1], "rewards": [4.0]}
            assert http.post("/v1/reward", json=reward).json() == {"applied": 1}
            reference.reward(copy.deepcopy(reward))
            before = server.get("/v1/state")
            assert before["records"] == 2

            js = {"content-type": "application/json"}
            five = {"instances": ["a"] * 5, "contexts": [[1.0, 0.0, 0.0]] * 5}
            refusals: list[tuple[str, str, dict[str, Any], int]] = [
                # (method, path, keyword arguments of httpx, expected status)
                ("POST", "/v1/decide", {"content": b'{"instances": [', "headers": js}, 400),
                ("POST", "/v1/decide", {"content": b"", "headers": js}, 400),
                ("POST", "/v1/decide", {"content": b"\xff\xfe{}", "headers": js}, 400),
                (
                    "POST",
                    "/v1/decide",
                    {
                        "content": b'{"instances": ["a"], "contexts": [[1, NaN, 0]]}',
                        "headers": js,
                    },
                    400,
                ),
                (
                    "POST",
                    "/v1/reward",
                    {"content": b'{"events": [0], "events": [0], "rewards": [1]}', "headers": js},
                    400,
                ),
                ("POST", "/v1/decide", {"json": [1, 2, 3]}, 400),
                ("POST", "/v1/decide", {"json": {**good, "extra": 1}}, 400),
                (
                    "POST",
                    "/v1/decide",
                    {
                        "content": json.dumps(good).encode(),
                        "headers": {"content-type": "text/plain"},
                    },
                    415,
                ),
                ("POST", "/v1/reward", {"data": {"events": "0", "rewards": "1"}}, 415),
                ("POST", "/v1/decide", {"json": five}, 413),
                (
                    "POST",
                    "/v1/reward",
                    {"json": {"events": [0, 1, 2, 3, 4], "rewards": [1] * 5}},
                    413,
                ),
                ("POST", "/v1/reward", {"json": {"events": [99], "rewards": [1.0]}}, 404),
                ("POST", "/v1/reward", {"json": {"events": [1], "rewards": [1.0]}}, 409),
                ("POST", "/v1/reward", {"json": {"events": [0], "rewards": [1e300]}}, 400),
                ("GET", "/v1/nothing", {}, 404),
                ("POST", "/v2/decide", {"json": good}, 404),
                ("GET", "/", {}, 404),
                ("GET", "/v1/decide", {}, 405),
                ("PUT", "/v1/reward", {"json": reward}, 405),
                ("DELETE", "/v1/state", {}, 405),
                ("POST", "/v1/state", {"json": {}}, 405),
            ]
            for method, path, kwargs, status in refusals:
                r = http.request(method, path, **kwargs)
                assert r.status_code == status, (method, path, kwargs, r.status_code, r.text)
                body = r.json()
                assert set(body) == {"error"} and isinstance(body["error"], str), body

        # a declared body over the limit (32 MiB) is refused before it is read
        status, body = _raw(
            server.url,
            b"POST /v1/reward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 40000000\r\n\r\n",
        )
        assert status == 413 and "at most" in json.loads(body)["error"], body
        status, body = _raw(
            server.url,
            b"POST /v1/reward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 12abc\r\n\r\n",
        )
        assert 400 <= status < 500, (status, body)

        # nothing refused changed the state or the log; the service still works
        assert server.get("/v1/state") == before
        assert server.get("/v1/health")["status"] == "ok"
        responses = server.get("/v1/metrics")["responses"]
        assert responses["200"] == 2 and responses["413"] >= 3 and responses["405"] == 4
        with server.client() as http:
            again = {"instances": ["c"], "contexts": [[1.0, 0.0, 0.0]]}
            assert http.post("/v1/decide", json=again).json() == reference.decide(
                copy.deepcopy(again)
            )
        server.stop_gracefully()
        reference.close()
        assert_same_state(current_policy(state), current_policy(tmp_path / "reference"))
    finally:
        server.close()
        reference.close()


def test_a_second_service_on_a_used_state_directory_is_refused(tmp_path):
    """One service per state directory, also between processes; the first keeps serving."""
    state = tmp_path / "state"
    server = Server(state, tmp_path / "logs")
    try:
        server.start(PRIOR, seed=SEED)
        proc = subprocess.run(
            cli("serve", "--state", str(state), "--port", "0"),
            capture_output=True,
            text=True,
            env=child_env(),
            cwd=tmp_path,
            timeout=300,
        )
        assert proc.returncode != 0
        assert "another service" in proc.stdout + proc.stderr
        assert server.get("/v1/health")["status"] == "ok"
        server.stop_gracefully()
    finally:
        server.close()
