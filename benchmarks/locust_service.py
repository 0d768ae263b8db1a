"""Locust users of the decision service (``benchmarks/bench_service.py`` runs them).

Each user loops: ``POST /v1/decide`` a batch of ``BENCH_BATCH`` requests (string user ids drawn
from a pool of ``BENCH_POOL``, contexts ``[1, time, weekend]`` of the shipped MovieLens prior),
then ``POST /v1/reward`` for a random ``BENCH_REWARD_FRACTION`` of the events it was given.
Request bodies are prepared before the run (``BENCH_BODIES`` per user, cycled), so the load
generator spends its time sending, not encoding. The whole run stops after
``BENCH_MAX_DECISIONS`` decisions (the bound on the count; ``--run-time`` bounds the time).

Run it through ``bench_service.py``, or by hand against a served prior::

    BENCH_BATCH=100 locust -f benchmarks/locust_service.py --headless -u 4 -r 4 \\
        --run-time 30s --host http://127.0.0.1:8000
"""

from __future__ import annotations

import itertools
import json
import os
import random

import gevent
from locust import FastHttpUser, events, task
from locust.exception import StopUser

BATCH = int(os.environ.get("BENCH_BATCH", "100"))
POOL = int(os.environ.get("BENCH_POOL", "100000"))
REWARD_FRACTION = float(os.environ.get("BENCH_REWARD_FRACTION", "0.9"))
MAX_DECISIONS = int(os.environ.get("BENCH_MAX_DECISIONS", str(10**7)))
BODIES = int(os.environ.get("BENCH_BODIES", "200"))
SEED = int(os.environ.get("BENCH_SEED", "0"))
JSON = {"content-type": "application/json"}

_users = itertools.count()
_decided = 0  # decisions served in this process, all users together


def decide_bodies(rng: random.Random, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        body = {
            "instances": [f"user-{rng.randrange(POOL)}" for _ in range(BATCH)],
            "contexts": [
                [1.0, round(rng.gauss(0.0, 1.0), 4), float(rng.random() < 2 / 7)]
                for _ in range(BATCH)
            ],
        }
        out.append(json.dumps(body, separators=(",", ":")).encode())
    return out


class ServiceUser(FastHttpUser):
    """Decide a batch, reward most of it; again."""

    def on_start(self) -> None:
        self.rng = random.Random(SEED * 1_000_003 + next(_users))
        self.bodies = itertools.cycle(decide_bodies(self.rng, BODIES))

    @task
    def decide_and_reward(self) -> None:
        global _decided
        if _decided >= MAX_DECISIONS:
            gevent.spawn(self.environment.runner.quit)
            raise StopUser()
        with self.client.post(
            "/v1/decide", data=next(self.bodies), headers=JSON, catch_response=True
        ) as r:
            if r.status_code != 200:
                r.failure(f"status {r.status_code}: {r.text[:200]}")
                return
            served = r.json()["events"]
            if len(served) != BATCH:
                r.failure(f"{len(served)} events for {BATCH} requests")
                return
        _decided += len(served)
        rewarded = [e for e in served if self.rng.random() < REWARD_FRACTION]
        if not rewarded:
            return
        body = {
            "events": rewarded,
            "rewards": [round(self.rng.gauss(3.5, 1.0), 3) for _ in rewarded],
        }
        with self.client.post(
            "/v1/reward",
            data=json.dumps(body, separators=(",", ":")).encode(),
            headers=JSON,
            catch_response=True,
        ) as r:
            if r.status_code != 200:
                r.failure(f"status {r.status_code}: {r.text[:200]}")
            elif r.json() != {"applied": len(rewarded)}:
                r.failure(f"unexpected answer {r.text[:200]}")


@events.test_stop.add_listener
def _report(environment, **kwargs) -> None:
    print(f"bench: {_decided} decisions served")
