"""Helpers of the decision service's tests: a small policy, a script of requests, state
comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hierbandit._container import read_netcdf
from hierbandit.ebm import EbmTS

pytest.importorskip("starlette")

N_FEATURES = 3
ARMS = ["red", "green", "blue", "gold"]


def small_policy(seed: int = 5) -> EbmTS:
    """A growing EbmTS with string arms and features, hyperparameters re-estimated online."""
    return EbmTS(
        n_arms=len(ARMS), n_features=N_FEATURES, arms=ARMS, features=["a", "b", "c"], rng=seed
    )


def request_script(seed: int, steps: int, users: int = 40) -> list[tuple[str, dict[str, Any]]]:
    """Decide batches and reward batches, in an order a client could send them: each reward
    batch rewards events issued earlier (some never), out of order. Event ids are counted as
    the service issues them (consecutively from 0)."""
    rng = np.random.default_rng(seed)
    script: list[tuple[str, dict[str, Any]]] = []
    issued = 0
    waiting: list[int] = []
    for _ in range(steps):
        if waiting and rng.random() < 0.5:
            k = int(rng.integers(1, len(waiting) + 1))
            pick = sorted(rng.choice(len(waiting), size=k, replace=False).tolist(), reverse=True)
            events = [waiting.pop(i) for i in pick]
            rewards = np.round(rng.normal(size=k), 6).tolist()
            script.append(("reward", {"events": events, "rewards": rewards}))
        else:
            B = int(rng.integers(1, 12))
            body: dict[str, Any] = {
                "instances": [f"user-{int(u)}" for u in rng.integers(0, users, B)],
                "contexts": np.round(rng.normal(size=(B, N_FEATURES)), 4).tolist(),
            }
            if rng.random() < 0.3:
                body["allowed"] = [
                    [ARMS[a] for a in sorted(rng.choice(len(ARMS), size=2, replace=False))]
                    for _ in range(B)
                ]
            script.append(("decide", body))
            new = list(range(issued, issued + B))
            issued += B
            waiting.extend(e for e in new if rng.random() < 0.8)
    return script


def policy_state(path: Path) -> dict[str, Any]:
    """Every variable and the object description of a policy checkpoint file."""
    tree = read_netcdf(path, "checkpoint")
    ds = tree.to_dataset()
    return {"attrs": ds.attrs["hierbandit_checkpoint"], **{k: v.values for k, v in ds.items()}}


def assert_same_state(a: Path, b: Path) -> None:
    sa, sb = policy_state(a), policy_state(b)
    assert sa.keys() == sb.keys()
    assert sa["attrs"] == sb["attrs"]
    for key in sa:
        if key != "attrs":
            np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
