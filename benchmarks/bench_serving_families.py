"""Batched serving of the clustering and cascade policies against their one-at-a-time loops.

Clustering policies (SCLUB, CLUB, LinUCB-One, LinUCB-Ind) at the size of SCLUB's synthetic
experiment: n_u = 1,000 users in 10 planted clusters, d = 20, L = 20 candidate items per
request (``ClusteredLinearEnv`` defaults). Each policy is first played through ``--warm``
rounds of the environment (``run``, so the clusters have formed), then the benchmark times, as
the median of ``--repeats`` repeats after one warm-up call, each repeat on a fresh copy of the
warmed policy:

* ``select_batch(users, items)`` for B requests with their own (B, L, d) items, and with one
  shared (L, d) item set, against the loop of B ``select`` calls;
* ``update_batch(users, item_features, rewards)`` of B rows against the loop of ``update``.

Cascade policies (UCBBP, AUCBBP, ε-greedy, CascadeLinUCB, CascadeLinTS) on the reproduction's
configuration (d = K = 5, H = 3, ``CascadeEnv.preset("mccb-repro")``), trained for 20
episodes of 100 users: ``recommend_batch`` of B users (slates per second) against the loop of
one-user calls, and ``update_batch`` of B sessions followed by ``end_episode`` (sessions per
second), as arrays and as a DataFrame of displayed positions, against the loop of one-session
``update_batch`` calls and ``end_episode``.

The loops run at most ``--loop`` requests (their rate does not depend on the count). It prints
requests (or rows) per second and the ratio batch / loop. Run:
``.venv/bin/python benchmarks/bench_serving_families.py [--quick] [--B 10000] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from _machine import load

from hierbandit.cascade.env import CascadeEnv, simulate_episode
from hierbandit.cascade.policies import (
    AUCBBP,
    UCBBP,
    CascadeEpsilonGreedy,
    CascadeLinTS,
    CascadeLinUCB,
)
from hierbandit.sclub.env import ClusteredLinearEnv
from hierbandit.sclub.policies import CLUB, SCLUB, LinUCBInd, LinUCBOne


def timed(make: Callable[[], Any], fn: Callable[[Any], Any], count: int, repeats: int) -> float:
    """``count`` / median seconds of ``fn(make())`` (``make`` untimed), after one warm-up."""
    fn(make())
    times = []
    for _ in range(repeats):
        obj = make()
        t0 = time.perf_counter()
        fn(obj)
        times.append(time.perf_counter() - t0)
    return count / statistics.median(times)


def row(name: str, batch: float, loop: float) -> str:
    return f"| {name} | {batch:,.0f} | {loop:,.0f} | {batch / loop:.1f} |"


def header(what: str) -> None:
    print(f"| {what} | batch per s | loop per s | batch / loop |")
    print("|---|---:|---:|---:|")


# ---------------------------------------------------------------------- clustering
def clustering(B: int, repeats: int, n_loop: int, warm: int) -> None:
    env = ClusteredLinearEnv(rng=0)  # 1,000 users, 10 clusters, d = 20, L = 20
    roll = env.rollout(warm + 2 * B, rng=1)
    users = roll.users[warm : warm + B]
    items = roll.items[warm : warm + B]
    shared = roll.items[warm]
    rows = items[:, 0]
    rewards = (roll.noise[warm : warm + B] < roll.means[warm : warm + B, 0]).astype(float)
    m = min(B, n_loop)
    print(
        f"\n## Clustering policies: n_u = {env.n_users}, d = {env.n_features}, "
        f"L = {env.n_items}, B = {B}, warmed with {warm:,} rounds ({load()})\n"
    )
    header("policy, call")
    for name, make in [
        ("SCLUB", lambda: SCLUB(env.n_users, env.n_features, rng=2)),
        ("CLUB", lambda: CLUB(env.n_users, env.n_features, rng=2)),
        ("LinUCBOne", lambda: LinUCBOne(env.n_users, env.n_features, rng=2)),
        ("LinUCBInd", lambda: LinUCBInd(env.n_users, env.n_features, rng=2)),
    ]:
        print(f"... {name}: warming", file=sys.stderr, flush=True)
        policy = make()
        policy.run(roll.users[:warm], roll.items[:warm], roll.means[:warm], roll.noise[:warm])

        def fresh(p=policy):
            return copy.deepcopy(p)

        sel = timed(fresh, lambda p: p.select_batch(users, items), B, repeats)
        sel_loop = timed(
            fresh,
            lambda p: [p.select(int(u), X) for u, X in zip(users[:m], items[:m], strict=True)],
            m,
            repeats,
        )
        shr = timed(fresh, lambda p: p.select_batch(users, shared), B, repeats)
        shr_loop = timed(fresh, lambda p: [p.select(int(u), shared) for u in users[:m]], m, repeats)
        upd = timed(fresh, lambda p: p.update_batch(users, rows, rewards), B, repeats)
        upd_loop = timed(
            fresh,
            lambda p: [
                p.update(int(u), x, float(y))
                for u, x, y in zip(users[:m], rows[:m], rewards[:m], strict=True)
            ],
            m,
            repeats,
        )
        print(row(f"{name} select_batch, own items", sel, sel_loop))
        print(row(f"{name} select_batch, shared items", shr, shr_loop))
        print(row(f"{name} update_batch (rows)", upd, upd_loop), flush=True)
        if name == "SCLUB":
            print(f"... SCLUB: {policy.n_clusters} clusters after warm-up", file=sys.stderr)


# ---------------------------------------------------------------------- cascade
def cascade(B: int, repeats: int, n_loop: int) -> None:
    env = CascadeEnv.preset("mccb-repro", n_users=B, rng=0)
    K, d, H = env.n_arms, env.n_features, env.horizon
    train = CascadeEnv.preset("mccb-repro", n_users=100, rng=0).rollout(20, rng=1)
    roll = env.rollout(1, rng=2)
    X, P, U = roll.contexts[0], roll.click_prob[0], roll.uniforms[0]
    m = min(B, n_loop)
    print(f"\n## Cascade policies: d = {d}, K = {K}, H = {H}, B = {B} users ({load()})\n")
    header("policy, call")
    for name, make in [
        ("UCBBP", lambda: UCBBP(K, d, env.rewards, H, rng=3)),
        ("AUCBBP", lambda: AUCBBP(K, d, env.rewards, H, n_episodes=1000, rng=3)),
        ("eps-greedy", lambda: CascadeEpsilonGreedy(K, d, env.rewards, H, rng=3)),
        ("CascadeLinUCB", lambda: CascadeLinUCB(K, d, env.rewards, H, rng=3)),
        ("CascadeLinTS", lambda: CascadeLinTS(K, d, env.rewards, H, rng=3)),
    ]:
        cascade_rows(name, make(), train, (X, P, U), m, repeats)


def cascade_rows(name: str, policy: Any, train: Any, episode: tuple, m: int, repeats: int) -> None:
    """Train ``policy`` on the ``train`` rollout, then time its batches on ``episode``."""
    X, P, U = episode
    B, d = X.shape
    for t in range(train.n_episodes):
        Xt = train.contexts[t]
        plan = policy.recommend_batch(Xt)
        arms, clicks = simulate_episode(
            train.click_prob[t], train.uniforms[t], lambda h, a, s=plan: s[:, h]
        )
        policy.update_batch(Xt, arms, clicks)
        policy.end_episode()
    slates = policy.recommend_batch(X)
    arms, clicks = simulate_episode(P, U, lambda h, a: slates[:, h])
    policy.end_episode()
    n, h = np.nonzero(arms >= 0)
    frame = pd.DataFrame(X[n], columns=[f"x{j}" for j in range(d)]).assign(
        user=n, position=h, arm=arms[n, h], click=clicks[n, h]
    )

    def fresh():
        return copy.deepcopy(policy)

    rec = timed(fresh, lambda p: p.recommend_batch(X), B, repeats)
    if name == "AUCBBP":  # one call per episode: the loop is not defined
        rec_loop = float("nan")
    else:
        rec_loop = timed(
            fresh, lambda p: [p.recommend_batch(X[i : i + 1]) for i in range(m)], m, repeats
        )

    def batch_update(p):
        p.update_batch(X, arms, clicks)
        p.end_episode()

    def frame_update(p):
        p.update_batch(frame)
        p.end_episode()

    def loop_update(p):
        for i in range(m):
            p.update_batch(X[i : i + 1], arms[i : i + 1], clicks[i : i + 1])
        p.end_episode()

    upd = timed(fresh, batch_update, B, repeats)
    upd_frame = timed(fresh, frame_update, B, repeats)
    upd_loop = timed(fresh, loop_update, m, repeats)
    print(row(f"{name} recommend_batch (slates)", rec, rec_loop))
    print(row(f"{name} update_batch + end_episode (sessions)", upd, upd_loop))
    print(row(f"{name} update_batch(DataFrame) + end_episode", upd_frame, upd_loop), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--B", type=int, default=None, help="batch size (default 10,000)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5)")
    parser.add_argument("--loop", type=int, default=2_000, help="requests of the loops")
    parser.add_argument("--warm", type=int, default=None, help="warm-up rounds (default 50,000)")
    parser.add_argument("--quick", action="store_true", help="smoke run: B = 1,000, 2 repeats")
    args = parser.parse_args(argv)
    B = args.B or (1_000 if args.quick else 10_000)
    repeats = args.repeats or (2 if args.quick else 5)
    warm = args.warm or (5_000 if args.quick else 50_000)
    clustering(B, repeats, args.loop, warm)
    cascade(B, repeats, args.loop)


if __name__ == "__main__":
    main()
