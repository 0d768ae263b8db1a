"""Fuzzing ``hierbandit serve`` as a process, over real TCP connections on loopback.

``test_fuzz.py`` sends its malformed requests straight to the ASGI application, which is what
lets it send 10,000 of them in seconds and check every byte of the state afterwards. This test
sends the same generator's requests (:class:`tests.serve.test_fuzz.Fuzzer`) as raw bytes over
a socket to the served child, so that they also pass through the HTTP server (uvicorn and its
h11 parser), and adds what only a socket can carry: request lines and headers that are not
HTTP, framing that contradicts itself (a ``Content-Length`` beside ``Transfer-Encoding:
chunked``, a chunk size that is not hexadecimal, a length that does not parse), and bytes
that are not text. Each request goes on its own connection, written whole, then read until the
server closes it.

Every request must get a 4xx: the application's, with a JSON ``{"error": ...}`` body and one
of the statuses the generator allows for it, or the HTTP server's own 400 for a request it
cannot parse (it never reaches the application). Afterwards ``/v1/state`` is unchanged, no
file of the state directory changed, and after a graceful stop the policy's checkpoint is bit
for bit that of a service fed only the valid traffic (in process, same seed).
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
from collections import Counter

import numpy as np
import pytest

from hierbandit.serve import DecisionService
from tests.serve._server import PRIOR, Server, current_policy
from tests.serve.conftest import assert_same_state
from tests.serve.test_fuzz import (
    JSON,
    MAX_BATCH,
    MAX_BODY,
    Case,
    Fuzzer,
    Traffic,
    World,
    dumps,
    state_files,
)

SEED = 77
#: malformed requests from the generator, and raw HTTP-level ones
N_CASES = 1500
N_RAW = 300
TIMEOUT = 60.0
#: the raw kinds: a 4xx from whichever layer refuses them
ANY_4XX = frozenset(range(400, 500))


def request_bytes(case: Case, host: str) -> bytes:
    """The HTTP/1.1 request of a generated case: its headers as given, a ``Content-Length``
    for a body in one piece when the case gives none, chunked transfer for a streamed one."""
    names = {name.lower() for name, _ in case.headers}
    head = [f"{case.method} ".encode() + case.path.encode("utf-8") + b" HTTP/1.1"]
    head.append(b"host: " + host.encode())
    head += [name + b": " + value for name, value in case.headers]
    body = b"".join(case.chunks)
    if b"content-length" in names:
        payload = body
    elif len(case.chunks) > 1:
        head.append(b"transfer-encoding: chunked")
        payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in case.chunks if c) + b"0\r\n\r\n"
    else:
        head.append(b"content-length: %d" % len(body))
        payload = body
    head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + payload


def raw_request(rng: np.random.Generator, host: str, valid: bytes) -> tuple[str, bytes]:
    """A request the HTTP layer itself must refuse; ``valid`` is a valid JSON body."""
    # every one says it is the last on its connection, so that the answer ends with a close
    h = b"host: " + host.encode() + b"\r\nconnection: close"
    n = len(valid)
    kinds: list[tuple[str, bytes]] = [
        (
            "not HTTP",
            bytes(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8)) + b"\r\n\r\n",
        ),
        ("no version", b"POST /v1/decide\r\n" + h + b"\r\n\r\n"),
        ("unknown version", b"POST /v1/decide HTTP/7.3\r\n" + h + b"\r\n\r\n"),
        ("a space in the target", b"POST /v1/de cide HTTP/1.1\r\n" + h + b"\r\n\r\n"),
        ("a header without a colon", b"POST /v1/decide HTTP/1.1\r\n" + h + b"\r\nbroken\r\n\r\n"),
        (
            "a space before the colon",
            b"POST /v1/decide HTTP/1.1\r\n" + h + b"\r\ncontent-type : application/json\r\n\r\n",
        ),
        (
            "a control character in a header",
            b"POST /v1/decide HTTP/1.1\r\n" + h + b"\r\nx-a: b\x00c\r\n\r\n",
        ),
        (
            "a length and chunked transfer",
            b"POST /v1/decide HTTP/1.1\r\n"
            + h
            + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (n, n, valid),
        ),
        (
            "two different lengths",
            b"POST /v1/decide HTTP/1.1\r\n"
            + h
            + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"content-length: %d\r\n\r\n%s" % (n, n + 1, valid),
        ),
        (
            "a chunk size that is not hexadecimal",
            b"POST /v1/decide HTTP/1.1\r\n"
            + h
            + b"\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            b"zz\r\n%s\r\n0\r\n\r\n" % valid,
        ),
        (
            "an unknown transfer coding",
            b"POST /v1/decide HTTP/1.1\r\n"
            + h
            + b"\r\ncontent-type: application/json\r\ntransfer-encoding: gzip\r\n\r\n%s" % valid,
        ),
        (
            "a negative length",
            b"POST /v1/decide HTTP/1.1\r\n"
            + h
            + b"\r\ncontent-type: application/json\r\ncontent-length: -%d\r\n\r\n%s" % (n, valid),
        ),
        (
            "a header folded over two lines",
            b"POST /v1/decide HTTP/1.1\r\n"
            + h
            + b"\r\ncontent-type: application/json\r\n json\r\ncontent-length: %d\r\n\r\n%s"
            % (n, valid),
        ),
        (
            "no host",
            b"POST /v1/decide HTTP/1.1\r\nconnection: close\r\n"
            b"content-type: application/json\r\n\r\n",
        ),
    ]
    name, data = kinds[int(rng.integers(len(kinds)))]
    return name, data


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it (every request
    says ``connection: close``, and a server that refuses a request closes the connection; the
    write side stays open, since the server takes a half-closed connection for a client gone)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        with contextlib.suppress(OSError):  # refused and closed early: the answer is there
            s.sendall(data)
        out = b""
        while True:
            try:
                part = s.recv(65536)
            except OSError:
                break
            if not part:
                break
            out += part
    return out


def parse(reply: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    """Status, headers (lower-case names) and body of an HTTP/1.1 response."""
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def check(reply: bytes, expect: frozenset[int]) -> str | None:
    """``None`` if the reply is an allowed refusal, else what is wrong with it."""
    if not reply:
        return "no response"
    status, headers, body = parse(reply)
    if not 400 <= status < 500:
        return f"status {status}"
    if headers.get(b"content-type", b"").split(b";")[0] == b"application/json":
        try:
            payload = json.loads(body)
        except ValueError:
            return f"body {body[:200]!r}"
        if not (isinstance(payload, dict) and set(payload) == {"error"} and payload["error"]):
            return f"body {body[:200]!r}"
        return None if status in expect else f"status {status} (expected {sorted(expect)})"
    # the HTTP server's own refusal of a request it could not parse
    return None if status == 400 else f"status {status} from the HTTP server"


def test_malformed_requests_over_sockets_are_refused_and_change_nothing(tmp_path):
    state = tmp_path / "state"
    server = Server(
        state,
        tmp_path / "logs",
        args=(
            "--max-batch",
            str(MAX_BATCH),
            "--max-body",
            str(MAX_BODY),
            "--checkpoint-every",
            str(10**6),
        ),
    )
    twin = DecisionService.open(tmp_path / "twin", PRIOR, seed=SEED)
    rng = np.random.default_rng(SEED)
    world = World(kind="int", arms=[0, 1, 2, 3, 4])
    traffic = Traffic(rng, world)
    try:
        server.start(PRIOR, seed=SEED)
        port = int(server.url.rsplit(":", 1)[1])
        host = f"127.0.0.1:{port}"
        with server.client() as http:
            for step in range(60):  # valid traffic: pending, rewarded and known ids
                body = traffic.reward() if step % 2 else None
                op = "reward" if body is not None else "decide"
                body = body if body is not None else traffic.decide()
                r = http.post(f"/v1/{op}", content=dumps(body), headers=dict(JSON))
                assert r.status_code == 200, (op, body, r.text)
                out = r.json()
                assert out == getattr(twin, op)(copy.deepcopy(body))
                traffic.learn(op, body, out)
        before_state = server.get("/v1/state")
        before_files = state_files(state)
        before_responses = Counter(server.get("/v1/metrics")["responses"])

        fuzzer = Fuzzer(rng, world, traffic)
        kinds: Counter = Counter()
        server_refusals: Counter = Counter()
        app_refusals: Counter = Counter()
        failures: list[str] = []
        cases: list[tuple[str, bytes, frozenset[int]]] = []
        for _ in range(N_CASES):
            case = fuzzer.case()
            cases.append((case.kind, request_bytes(case, host), case.expect))
        for _ in range(N_RAW):
            name, data = raw_request(rng, host, dumps(traffic.decide()))
            cases.append((f"HTTP: {name}", data, ANY_4XX))
        order = rng.permutation(len(cases))
        for i in order:
            kind, data, expect = cases[i]
            kinds[kind] += 1
            reply = exchange(port, data)
            problem = check(reply, expect)
            if problem is not None:
                failures.append(f"{kind}: {problem} <- {data[:300]!r}")
            elif not parse(reply)[1].get(b"content-type", b"").startswith(b"application/json"):
                server_refusals[kind] += 1
            else:
                app_refusals[str(parse(reply)[0])] += 1
        assert not failures, f"{len(failures)} of {len(cases)}:\n" + "\n".join(failures[:40])
        assert len(kinds) >= 25, kinds
        # the HTTP server refused the raw kinds itself; the application answered the others
        assert sum(server_refusals.values()) >= N_RAW // 2, server_refusals

        assert server.get("/v1/state") == before_state
        assert state_files(state) == before_files
        # the application counted exactly the refusals it answered, and nothing else
        seen = Counter(server.get("/v1/metrics")["responses"])
        seen.subtract(before_responses)
        # (a broken chunk size is found by the HTTP server after the application began to read
        # the body: both refuse it, and only the server's answer can reach the client)
        halfway = server_refusals["HTTP: a chunk size that is not hexadecimal"]
        assert +seen == app_refusals + Counter({"400": halfway}), (seen, app_refusals, halfway)
        print({"cases": len(cases), "refused by the HTTP server": dict(server_refusals)})
        server.stop_gracefully()
    finally:
        server.close()
    twin.checkpoint()
    twin.close()
    assert_same_state(current_policy(state), current_policy(tmp_path / "twin"))


@pytest.mark.parametrize(
    "case",
    [
        Case("one piece", "POST", "/v1/decide", list(JSON), [b"{}"], frozenset({400})),
        Case("streamed", "POST", "/v1/reward", list(JSON), [b"{", b"}"], frozenset({400})),
    ],
)
def test_request_bytes_frame_the_body(case: Case):
    data = request_bytes(case, "h")
    head, _, body = data.partition(b"\r\n\r\n")
    if len(case.chunks) == 1:
        assert b"content-length: 2" in head and body == b"{}"
    else:
        assert b"transfer-encoding: chunked" in head and body == b"1\r\n{\r\n1\r\n}\r\n0\r\n\r\n"
