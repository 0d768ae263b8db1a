"""Fuzzing the decision service's HTTP interface: at least 10,000 malformed requests, every one
refused with a 4xx and a JSON ``{"error": ...}`` body, and the service's state bit-identical
afterwards.

The requests go straight to the ASGI application (:func:`hierbandit.serve.create_app`), as
uvicorn would hand them over, through a small driver of the ASGI protocol: any header, any
path, any body, in one piece or streamed in chunks, with or without a ``Content-Length``. An
exception that escapes the application (a 500 behind uvicorn) is recorded as status 500.

Two services are fuzzed, so that both kinds of labels are exercised: one with string arm and
instance ids (``small_policy``), one with integer arms ``0..4`` and integer instance ids. Each
first takes valid traffic (decisions, most of them rewarded), so that there are pending
events, rewarded events and known instances; then a seeded generator sends malformed requests
of every kind it knows (see :class:`Fuzzer`): mutations of valid bodies (a field missing,
unknown, of the wrong type; a bad id, context, arm, event or reward at one place), JSON that
is not JSON (truncated, NaN/Infinity, repeated keys, invalid UTF-8, 100,000 nested arrays),
bodies over the size limit (declared or streamed), the wrong content type or length, wrong
methods and paths. Each generated request is invalid by construction, and each kind states
the statuses it may get: a 200 (or any status outside that set) fails the test.

Afterwards the policy's checkpoint file is bit-identical to the one saved before the fuzzing
(:func:`tests.serve.conftest.assert_same_state`), every file of the state directory (write-ahead
log, event log, checkpoint) is byte-identical, ``/v1/state`` is unchanged, the service's own
response counters saw exactly the refusals sent, the next valid decision is the one a twin
service fed only the valid traffic makes (the policy's random generators did not move), and a
restart from the state directory restores the same state.

``HIERBANDIT_FUZZ_REQUESTS`` sets the number of malformed requests per service (default 6,000:
12,000 in all, ~15 s on a loaded 2-core machine).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from hierbandit.ebm import EbmTS
from hierbandit.serve import DecisionService, ServiceConfig, create_app
from tests.serve.conftest import ARMS, N_FEATURES, assert_same_state, small_policy

#: malformed requests sent to each of the two services
PER_SERVICE = int(os.environ.get("HIERBANDIT_FUZZ_REQUESTS", "6000"))
#: the largest body the fuzzed application accepts (small, so that oversized bodies are cheap)
MAX_BODY = 1024 * 1024
#: the largest batch the fuzzed services accept
MAX_BATCH = 64
JSON = [(b"content-type", b"application/json")]


class Raw:
    """A value written into the JSON text as-is (literals ``json.dumps`` cannot produce)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"raw({self.text!r})"


raw = Raw


def dumps(obj: Any) -> bytes:
    """JSON text of ``obj`` (NaN and Infinity written as the literals), :class:`Raw` values
    spliced in as their text."""
    spliced: dict[str, str] = {}

    def swap(v: Any) -> Any:
        if isinstance(v, Raw):
            token = f"@raw{len(spliced)}@"
            spliced[json.dumps(token)] = v.text
            return token
        if isinstance(v, list):
            return [swap(x) for x in v]
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        return v

    text = json.dumps(swap(obj), separators=(",", ":"))
    for token, value in spliced.items():
        text = text.replace(token, value, 1)
    return text.encode("utf-8")


# ---------------------------------------------------------------------------- the ASGI driver
@dataclass
class Reply:
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    error: BaseException | None = None


async def call(
    app: Any,
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    chunks: list[bytes] | None = None,
) -> Reply:
    """One HTTP request to the ASGI application ``app``; the body in ``chunks`` (streamed as
    that many messages). An exception escaping the application is a 500."""
    parts = list(chunks) if chunks else [b""]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": b"",
        "root_path": "",
        "headers": list(headers or []),
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent < len(parts):
            sent += 1
            return {"type": "http.request", "body": parts[sent - 1], "more_body": sent < len(parts)}
        await anyio.sleep_forever()  # the client stays connected until the answer is sent
        raise AssertionError  # pragma: no cover

    reply = Reply(0, {}, b"")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            reply.status = message["status"]
            reply.headers = dict(message.get("headers", []))
        elif message["type"] == "http.response.body":
            reply.body += message.get("body", b"")

    try:
        await app(scope, receive, send)
    except Exception as exc:  # behind uvicorn: a 500
        reply.status, reply.error = 500, exc
    return reply


# ---------------------------------------------------------------------------- what a client knows
@dataclass
class World:
    """One fuzzed service as its client knows it."""

    kind: str  # "str": string arm and instance ids; "int": arms 0..4, integer instance ids
    arms: list[Any]
    next_event: int = 0
    pending: list[int] = field(default_factory=list)
    rewarded: list[int] = field(default_factory=list)

    def user(self, u: int) -> Any:
        return f"user-{u:03d}" if self.kind == "str" else int(u) * 7 - 40


class Traffic:
    """Valid requests for a :class:`World`, and what their answers teach the client."""

    def __init__(self, rng: np.random.Generator, world: World) -> None:
        self.rng = rng
        self.world = world

    def decide(self, users: int = 25) -> dict[str, Any]:
        rng, w = self.rng, self.world
        B = int(rng.integers(1, 8))
        body: dict[str, Any] = {
            "instances": [w.user(int(u)) for u in rng.integers(0, users, B)],
            "contexts": np.round(rng.normal(size=(B, N_FEATURES)), 4).tolist(),
        }
        if rng.random() < 0.3:
            body["allowed"] = [
                [w.arms[a] for a in sorted(rng.choice(len(w.arms), size=2, replace=False))]
                for _ in range(B)
            ]
        return body

    def reward(self) -> dict[str, Any] | None:
        rng, w = self.rng, self.world
        if len(w.pending) < 2:
            return None
        k = int(rng.integers(1, min(len(w.pending), 10) + 1))
        pick = rng.choice(len(w.pending), size=k, replace=False)
        events = [w.pending[i] for i in pick]
        return {"events": events, "rewards": np.round(rng.normal(size=k), 6).tolist()}

    def learn(self, op: str, body: dict[str, Any], out: dict[str, Any]) -> None:
        w = self.world
        if op == "decide":
            assert out["events"] == list(range(w.next_event, w.next_event + len(out["events"])))
            w.next_event += len(out["events"])
            w.pending.extend(out["events"])
        else:
            assert out == {"applied": len(body["events"])}
            done = set(body["events"])
            w.pending = [e for e in w.pending if e not in done]
            w.rewarded.extend(body["events"])


# ---------------------------------------------------------------------------- the fuzzer
@dataclass
class Case:
    kind: str
    method: str
    path: str
    headers: list[tuple[bytes, bytes]]
    chunks: list[bytes]
    expect: frozenset[int]

    def describe(self) -> str:
        body = b"".join(self.chunks)
        return f"{self.kind}: {self.method} {self.path!r:.80} {self.headers!r:.200} {body[:300]!r}"


S400 = frozenset({400})
NAN_INF = [raw("NaN"), raw("Infinity"), raw("-Infinity"), raw("1e400"), raw("-1e999")]
NOT_A_LIST = [None, 0, 1.5, -3, "abc", "", True, False, {}, {"0": 1}]
NOT_A_NUMBER = [None, "1", "", True, False, [], [1.0], {}, {"x": 1.0}]


class Fuzzer:
    """Malformed requests for one :class:`World`, each with the statuses it may get.

    Every generator below returns a request that is invalid by construction: a valid body
    (:class:`Traffic`) with one defect, or an HTTP-level defect (method, path, headers, size).
    """

    def __init__(self, rng: np.random.Generator, world: World, traffic: Traffic) -> None:
        self.rng = rng
        self.w = world
        self.traffic = traffic
        self.kinds = [
            (self.decide_missing_or_extra, 4),
            (self.decide_wrong_field, 6),
            (self.decide_bad_instance, 10),
            (self.decide_bad_context, 12),
            (self.decide_bad_allowed, 10),
            (self.decide_sizes, 2),
            (self.reward_missing_or_extra, 3),
            (self.reward_wrong_field, 4),
            (self.reward_bad_event, 12),
            (self.reward_bad_reward, 8),
            (self.reward_sizes, 2),
            (self.top_level, 3),
            (self.broken_json, 12),
            (self.deep_nesting, 2),
            (self.oversized, 1),
            (self.headers, 4),
            (self.method_or_path, 5),
        ]
        weights = np.array([w for _, w in self.kinds], dtype=float)
        self.p = weights / weights.sum()

    # helpers -------------------------------------------------------------
    def pick(self, values: list[Any]) -> Any:
        return values[int(self.rng.integers(len(values)))]

    def post(self, kind: str, op: str, body: Any, expect: frozenset[int] = S400) -> Case:
        data = body if isinstance(body, bytes) else dumps(body)
        return Case(kind, "POST", f"/v1/{op}", list(JSON), [data], expect)

    def valid_decide(self) -> dict[str, Any]:
        return self.traffic.decide()

    def valid_reward(self) -> dict[str, Any]:
        body = self.traffic.reward()
        assert body is not None, "the warm-up left too few pending events"
        return body

    def valid_body(self) -> tuple[str, dict[str, Any]]:
        if self.rng.random() < 0.5:
            return "decide", self.valid_decide()
        return "reward", self.valid_reward()

    def bad_ids(self) -> list[Any]:
        """Instance ids the service must refuse (the policy holds ids of the world's kind)."""
        common: list[Any] = [1.5, 0.0, -2.0, 1e300, True, False, None, [], ["a"], {}, {"id": 1}]
        common += [[self.w.user(1)], raw("NaN"), raw("Infinity")]
        if self.w.kind == "str":
            # integers in a policy of string ids; strings that are not Unicode (lone surrogates)
            return [*common, 7, -1, 0, 2**64, raw('"\\ud800"'), raw('"a\\udfff"')]
        return [*common, "7", "user", "", 2**63, -(2**63) - 1, 10**30, -(10**40)]

    def bad_arms(self) -> list[Any]:
        """Arm ids that are not the service's arms."""
        common: list[Any] = [None, 1.5, True, False, [], {}, raw("NaN")]
        if self.w.kind == "str":
            return [*common, "purple", "RED", "red ", "", 0, 3, -1, [self.w.arms[0]]]
        return [*common, 5, -1, 2**64, "0", "red", 1.0, [0]]

    # decide --------------------------------------------------------------
    def decide_missing_or_extra(self) -> Case:
        body = self.valid_decide()
        if self.rng.random() < 0.4:
            del body[self.pick(["instances", "contexts"])]
        else:
            name = self.pick(["extra", "Instances", "allowed ", "", "events", "\u00e9", "a" * 300])
            body[name] = self.pick([None, 1, "x", [], {}, body["instances"]])
        return self.post("decide: missing or unknown field", "decide", body)

    def decide_wrong_field(self) -> Case:
        body = self.valid_decide()
        key = self.pick(["instances", "contexts", "allowed"])
        # "allowed": null is valid (all arms allowed): never given here
        values = [v for v in NOT_A_LIST if not (key == "allowed" and v is None)] + [[]]
        body[key] = self.pick(values)
        return self.post(f"decide: {key} of the wrong type", "decide", body)

    def decide_bad_instance(self) -> Case:
        body = self.valid_decide()
        i = int(self.rng.integers(len(body["instances"])))
        body["instances"][i] = self.pick(self.bad_ids())
        return self.post("decide: a bad instance id", "decide", body)

    def decide_bad_context(self) -> Case:
        rng = self.rng
        body = self.valid_decide()
        B = len(body["contexts"])
        i = int(rng.integers(B))
        r = rng.random()
        if r < 0.2:  # wrong width
            width = self.pick([0, 1, N_FEATURES - 1, N_FEATURES + 1, 10])
            body["contexts"][i] = np.round(rng.normal(size=width), 3).tolist()
        elif r < 0.35:  # a row that is not an array
            body["contexts"][i] = self.pick([None, 1.0, "1,0,0", {}, {"a": 1.0}, True])
        elif r < 0.5:  # one row too many or too few
            if B > 1 and rng.random() < 0.5:
                body["contexts"].pop()
            else:
                body["contexts"].append([0.0] * N_FEATURES)
        elif r < 0.6:  # nested one level too deep
            body["contexts"] = (
                [body["contexts"]] if rng.random() < 0.5 else [[row] for row in body["contexts"]]
            )
        else:  # one entry that is not a finite number of magnitude at most 1e6
            j = int(rng.integers(N_FEATURES))
            body["contexts"][i][j] = self.pick(
                NOT_A_NUMBER
                + NAN_INF
                + [1e6 * 1.0000001, -2e6, 1e300, 10**7, -(10**7), 10**20, 10**309, -(10**400)]
            )
        return self.post("decide: a bad context", "decide", body)

    def decide_bad_allowed(self) -> Case:
        rng = self.rng
        body = self.valid_decide()
        B = len(body["instances"])
        allowed = body.get("allowed") or [list(self.w.arms) for _ in range(B)]
        i = int(rng.integers(B))
        r = rng.random()
        if r < 0.45:  # an arm that is not one of the service's
            allowed[i] = [*allowed[i], self.pick(self.bad_arms())]
            rng.shuffle(allowed[i])
        elif r < 0.6:  # a request that allows no arm
            allowed[i] = []
        elif r < 0.75:  # a row that is not an array
            allowed[i] = self.pick([None, self.w.arms[0], 0, "red,blue", {}, {"red": True}, True])
        elif r < 0.9:  # one row too many or too few
            allowed = allowed[:-1] if B > 1 and rng.random() < 0.5 else [*allowed, allowed[0]]
        else:  # a row of booleans (a mask is not accepted over JSON) or nested rows
            allowed[i] = [True] * len(self.w.arms) if rng.random() < 0.5 else [list(self.w.arms)]
        body["allowed"] = allowed
        return self.post("decide: a bad allowed list", "decide", body)

    def decide_sizes(self) -> Case:
        rng = self.rng
        if rng.random() < 0.3:
            body = self.valid_decide()
            body["instances"], body["contexts"] = [], []
            return self.post("decide: an empty batch", "decide", body)
        B = MAX_BATCH + int(rng.integers(1, 4))
        body = {
            "instances": [self.w.user(int(u)) for u in rng.integers(0, 25, B)],
            "contexts": np.round(rng.normal(size=(B, N_FEATURES)), 3).tolist(),
        }
        return self.post("decide: a batch over the limit", "decide", body, frozenset({413}))

    # reward --------------------------------------------------------------
    def reward_missing_or_extra(self) -> Case:
        body = self.valid_reward()
        if self.rng.random() < 0.4:
            del body[self.pick(["events", "rewards"])]
        else:
            name = self.pick(["extra", "Events", "reward", "instances", "", "time"])
            body[name] = self.pick([None, 1, "x", [], {}, body["events"]])
        return self.post("reward: missing or unknown field", "reward", body)

    def reward_wrong_field(self) -> Case:
        body = self.valid_reward()
        key = self.pick(["events", "rewards"])
        body[key] = self.pick([*NOT_A_LIST, []])
        return self.post(f"reward: {key} of the wrong type", "reward", body)

    def reward_bad_event(self) -> Case:
        rng, w = self.rng, self.w
        body = self.valid_reward()
        k = len(body["events"])
        i = int(rng.integers(k))
        r = rng.random()
        if r < 0.25:  # never issued
            body["events"][i] = self.pick(
                [
                    w.next_event,
                    w.next_event + int(rng.integers(1, 10**6)),
                    -1,
                    -(2**63),
                    2**64,
                    10**30,
                ]
            )
            expect = frozenset({404})
        elif r < 0.5:  # already rewarded
            body["events"][i] = self.pick(w.rewarded)
            expect = frozenset({409})
        elif r < 0.7:  # the same event twice in one batch
            body["events"].insert(int(rng.integers(k + 1)), body["events"][i])
            body["rewards"].append(0.5)
            expect = S400
        else:  # not an integer
            e = body["events"][i]
            body["events"][i] = self.pick(
                [float(e), str(e), True, False, None, [e], {"e": e}, raw("NaN")]
            )
            expect = S400
        return self.post("reward: a bad event", "reward", body, expect)

    def reward_bad_reward(self) -> Case:
        rng = self.rng
        body = self.valid_reward()
        k = len(body["rewards"])
        if rng.random() < 0.2:  # one reward too many or too few
            if k > 1 and rng.random() < 0.5:
                body["rewards"].pop()
            else:
                body["rewards"].append(1.0)
        else:
            body["rewards"][int(rng.integers(k))] = self.pick(
                NOT_A_NUMBER + NAN_INF + [1e101, -1e200, 10**101, -(10**101), 10**400]
            )
        return self.post("reward: a bad reward", "reward", body)

    def reward_sizes(self) -> Case:
        rng, w = self.rng, self.w
        if rng.random() < 0.3:
            return self.post("reward: an empty batch", "reward", {"events": [], "rewards": []})
        k = MAX_BATCH + int(rng.integers(1, 4))
        events = [int(e) for e in rng.choice(max(w.next_event, k), size=k, replace=False)]
        body = {"events": events, "rewards": [1.0] * k}
        return self.post("reward: a batch over the limit", "reward", body, frozenset({413}))

    # the body as a whole -------------------------------------------------
    def top_level(self) -> Case:
        op, body = self.valid_body()
        value = self.pick([[body], [], "text", 1, -1.5, None, True, [1, 2, 3], raw("NaN")])
        return self.post("a body that is not an object", op, value)

    def broken_json(self) -> Case:
        rng = self.rng
        op, body = self.valid_body()
        text = dumps(body)
        r = rng.random()
        if r < 0.3:  # truncated: a proper prefix of an object is never JSON
            data = text[: int(rng.integers(len(text)))]
        elif r < 0.5:  # bytes that are not UTF-8 somewhere
            at = int(rng.integers(len(text) + 1))
            bad = self.pick(
                [
                    b"\xff",
                    b"\xfe",
                    b"\x80",
                    b"\xc3",
                    b"\xc0\x80",
                    b"\xed\xa0\x80",
                    b"\xf8\x88\x80\x80\x80",
                ]
            )
            data = text[:at] + bad + text[at:]
        elif r < 0.65:  # a key given twice
            key = self.pick(sorted(body))
            data = b"{" + dumps(key) + b":" + dumps(body[key]) + b"," + text[1:]
        elif r < 0.8:  # something after the object, before it, or instead of its quotes
            data = self.pick(
                [
                    text + self.pick([b"x", b"{}", b",", b"]", b"\x00", b"//"]),
                    self.pick([b"x", b"\xef\xbb\xbf", b"//c\n", b",", b"\x00"]) + text,
                    text.replace(b'"', b"'"),
                    text.replace(b":", b"=", 1),
                    text.replace(b",", b",,", 1) if b"," in text else text[:-1],
                ]
            )
        elif r < 0.9:  # another encoding
            data = text.decode().encode(self.pick(["utf-16", "utf-32", "utf-16-be"]))
        else:  # whitespace or nothing
            data = self.pick([b"", b" ", b"\n\t ", b"\r\n"])
        return self.post("JSON that is not JSON", op, data)

    def deep_nesting(self) -> Case:
        op = self.pick(["decide", "reward"])
        n = self.pick([1000, 5000, 100_000])
        r = self.rng.random()
        if r < 0.4:
            data = b"[" * n
        elif r < 0.6:
            data = b'{"a":' * n
        elif r < 0.8:  # closed nesting inside a field
            key = "instances" if op == "decide" else "events"
            data = b'{"' + key.encode() + b'":' + b"[" * n + b"]" * n + b"}"
        else:  # a shallower nesting where an id or a number belongs
            m = self.pick([2, 50, 500])
            if op == "decide":
                data = b'{"instances":["u"],"contexts":[' + b"[" * m + b"]" * m + b"]}"
            else:
                data = b'{"events":[' + b"[" * m + b"0" + b"]" * m + b'],"rewards":[1]}'
        return self.post("deep nesting", op, data)

    def oversized(self) -> Case:
        """A valid body padded with whitespace past the size limit: declared, or streamed
        without a length; or a declared length over the limit on a small body."""
        rng = self.rng
        op, body = self.valid_body()
        text = dumps(body)
        big = text + b" " * (MAX_BODY + 1 - len(text) + int(rng.integers(0, 5000)))
        r = rng.random()
        if r < 0.4:
            headers = [*JSON, (b"content-length", str(len(big)).encode())]
            chunks = [big]
        elif r < 0.8:
            size = int(rng.integers(1000, 20000))
            chunks = [big[i : i + size] for i in range(0, len(big), size)]
            headers = list(JSON)
        else:
            headers = [
                *JSON,
                (b"content-length", str(MAX_BODY + int(rng.integers(1, 10**9))).encode()),
            ]
            chunks = [text]
        return Case(
            "a body over the size limit", "POST", f"/v1/{op}", headers, chunks, frozenset({413})
        )

    def headers(self) -> Case:
        """A valid body with a wrong content type or an unreadable Content-Length."""
        op, body = self.valid_body()
        text = dumps(body)
        if self.rng.random() < 0.6:
            ctype = self.pick(
                [
                    b"text/plain",
                    b"application/xml",
                    b"application/x-www-form-urlencoded",
                    b"multipart/form-data; boundary=x",
                    b"application/octet-stream",
                    b"application/jsonx",
                    b"json",
                    b"",
                    b"text/json",
                ]
            )
            return Case(
                "a wrong content type",
                "POST",
                f"/v1/{op}",
                [(b"content-type", ctype)],
                [text],
                frozenset({415}),
            )
        length = self.pick(
            [b"abc", b"-1", b"1.5", b"0x10", b"", b" ", b"1e3", b"\xb2", b"\xd9\xa1", b"+5"]
        )
        headers = [*JSON, (b"content-length", length)]
        return Case("an unreadable Content-Length", "POST", f"/v1/{op}", headers, [text], S400)

    def method_or_path(self) -> Case:
        rng = self.rng
        text = dumps(self.valid_body()[1])
        if rng.random() < 0.5:  # an endpoint with a method it does not take
            path = self.pick(
                ["/v1/decide", "/v1/reward", "/v1/health", "/v1/metrics", "/v1/info", "/v1/state"]
            )
            takes_post = path in ("/v1/decide", "/v1/reward")
            methods = (
                ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"]
                if takes_post
                else ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
            )
            return Case(
                "a wrong method", self.pick(methods), path, list(JSON), [text], frozenset({405})
            )
        path = self.pick(
            [
                "/",
                "/v1",
                "/v2/decide",
                "/v1/Decide",
                "/V1/reward",
                "/v1/decide/x",
                "/v1/rewards",
                "/v1/health/x",
                "/v1//decide",
                "/v1/decide%00",
                "/v1/d\u00e9cide",
                "/../v1/decide",
                "/" + "a" * 5000,
                "/v1/decide.json",
                "/v1/decide/",
                "/v1/state/",
            ]
        )
        method = self.pick(["GET", "POST", "PUT", "DELETE"])
        return Case("an unknown path", method, path, list(JSON), [text], frozenset({404}))

    def case(self) -> Case:
        fn = self.kinds[int(self.rng.choice(len(self.kinds), p=self.p))][0]
        return fn()


# ---------------------------------------------------------------------------- the test
def state_files(state: Path) -> dict[str, tuple[int, str]]:
    """Size and SHA-256 of every file of a state directory (the lock file aside)."""
    out = {}
    for path in sorted(state.rglob("*")):
        if path.is_file() and path.name != "LOCK":
            out[str(path.relative_to(state))] = (
                path.stat().st_size,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return out


def int_policy(seed: int = 5) -> EbmTS:
    """A growing EbmTS with integer arms 0..4 and (once it learns) integer instance ids."""
    return EbmTS(n_arms=5, n_features=N_FEATURES, rng=seed)


async def fuzz_service(
    tmp: Path, world: World, make_policy: Any, seed: int, n: int
) -> tuple[Counter, list[str]]:
    """Warm a service up, fuzz it with ``n`` malformed requests, check its state. Returns the
    count of requests by kind and the failures (unexpected statuses or bodies)."""
    config = ServiceConfig(max_batch=MAX_BATCH, checkpoint_every=10**9)
    service = DecisionService.open(tmp / "state", make_policy(), config=config)
    twin = DecisionService.open(tmp / "twin", make_policy(), config=config)
    app = create_app(service, max_body=MAX_BODY)
    rng = np.random.default_rng(seed)
    traffic = Traffic(rng, world)
    try:
        # valid traffic: pending events, rewarded events, known instances
        for step in range(60):
            body = traffic.reward() if step % 2 else None
            op = "reward" if body is not None else "decide"
            body = body if body is not None else traffic.decide()
            r = await call(app, "POST", f"/v1/{op}", JSON, [dumps(body)])
            assert r.status == 200, (op, body, r.status, r.body, r.error)
            out = json.loads(r.body)
            assert out == await anyio.to_thread.run_sync(getattr(twin, op), copy.deepcopy(body))
            traffic.learn(op, body, out)
        assert world.pending and world.rewarded

        service.checkpoint()  # the state directory settles: nothing below may change it
        before_policy = tmp / "before.nc"
        service.policy.save(before_policy)
        before_files = state_files(tmp / "state")
        before_state = json.loads((await call(app, "GET", "/v1/state")).body)
        before_responses = dict(service.metrics.status)

        fuzzer = Fuzzer(rng, world, traffic)
        kinds: Counter = Counter()
        failures: list[str] = []
        for _ in range(n):
            case = fuzzer.case()
            kinds[case.kind] += 1
            r = await call(app, case.method, case.path, case.headers, case.chunks)
            problem = None
            if r.status not in case.expect:
                problem = f"status {r.status} (expected {sorted(case.expect)})"
            elif r.headers.get(b"content-type", b"").split(b";")[0] != b"application/json":
                problem = f"content type {r.headers.get(b'content-type')!r}"
            else:
                try:
                    payload = json.loads(r.body)
                except ValueError:
                    payload = None
                ok = isinstance(payload, dict) and set(payload) == {"error"}
                if not (ok and isinstance(payload["error"], str) and payload["error"]):
                    problem = f"body {r.body[:200]!r}"
            if problem is not None:
                detail = (
                    f" ({type(r.error).__name__}: {r.error})" if r.error else f" {r.body[:200]!r}"
                )
                failures.append(f"{problem}{detail} <- {case.describe()}")

        assert not failures, f"{len(failures)} of {n} requests:\n" + "\n".join(failures[:40])

        # nothing changed: the policy, every file of the state directory, the counters
        after_policy = tmp / "after.nc"
        service.policy.save(after_policy)
        assert_same_state(before_policy, after_policy)
        assert state_files(tmp / "state") == before_files
        assert json.loads((await call(app, "GET", "/v1/state")).body) == before_state
        # the service counted every refusal, by status, and nothing else
        seen = Counter(service.metrics.status)
        seen.subtract(before_responses)
        assert sum(v for k, v in seen.items() if 400 <= int(k) < 500) == n
        assert all(v == 0 for k, v in seen.items() if not 400 <= int(k) < 500), seen
        health = await call(app, "GET", "/v1/health")
        assert health.status == 200 and json.loads(health.body)["status"] == "ok"

        # the policy's generators did not move: the next decisions are the twin's
        for _ in range(3):
            body = traffic.decide(users=40)  # some instances new
            r = await call(app, "POST", "/v1/decide", JSON, [dumps(body)])
            assert r.status == 200, (r.body, r.error)
            assert json.loads(r.body) == await anyio.to_thread.run_sync(
                twin.decide, copy.deepcopy(body)
            )
        return kinds, failures
    finally:
        await anyio.to_thread.run_sync(service.close)
        await anyio.to_thread.run_sync(twin.close)


@pytest.mark.parametrize(
    ("kind", "make_policy", "arms"),
    [("str", small_policy, ARMS), ("int", int_policy, [0, 1, 2, 3, 4])],
)
def test_malformed_requests_are_refused_and_change_nothing(tmp_path, kind, make_policy, arms):
    world = World(kind=kind, arms=list(arms))
    seed = 1234 if kind == "str" else 5678
    kinds, failures = anyio.run(fuzz_service, tmp_path, world, make_policy, seed, PER_SERVICE)
    assert not failures
    assert sum(kinds.values()) == PER_SERVICE
    # every kind of defect was sent, many times
    assert len(kinds) >= 20 and min(kinds.values()) >= 10, kinds
    # the restart restores the state the fuzzing left
    service = DecisionService.open(tmp_path / "state")
    try:
        twin = DecisionService.open(tmp_path / "twin")
        try:
            assert service.state() | {"records": 0, "committed": 0} == twin.state() | {
                "records": 0,
                "committed": 0,
            }
            service.policy.save(tmp_path / "a.nc")
            twin.policy.save(tmp_path / "b.nc")
            assert_same_state(tmp_path / "a.nc", tmp_path / "b.nc")
        finally:
            twin.close()
    finally:
        service.close()


def test_at_least_ten_thousand_malformed_requests():
    """The issue's requirement: the default run sends at least 10,000 malformed requests."""
    assert 2 * PER_SERVICE >= 10_000
