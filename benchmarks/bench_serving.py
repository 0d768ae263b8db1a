"""Serving throughput of the online policies against MABWiser and bayesianbandits, in one run.

Setting: K = 5 arms, d = 3 features, contexts standard normal, rewards linear in the context plus
Gaussian noise. Every policy is warmed with the same 2,000 logged (context, arm, reward) rows
(the peers through their batch ``fit``/``update``, hierbandit through ``update_batch``), then
the benchmark times, as the median of ``--repeats`` repeats after one warm-up call:

* batched decisions for B contexts in one call: MABWiser ``MAB(arms, LearningPolicy.LinTS())``
  and ``LinUCB()`` ``.predict(contexts)``, bayesianbandits' ``ContextualAgent`` with one
  ``NormalRegressor`` per arm and ``ThompsonSampling`` ``.pull(X)``, and hierbandit's
  ``select_batch(instances, contexts)`` (EbmTS, EbmUCB, LinTS, LinUCB; N = 100 instances drawn
  uniformly per request);
* hierbandit's one-at-a-time loop, B calls of ``select(instance, context)``;
* batched updates of B rows: MABWiser ``partial_fit(decisions, rewards, contexts)``,
  bayesianbandits ``select_for_update(arm).update(X, y)`` once per arm, hierbandit
  ``update_batch(instances, contexts, arms, rewards)`` (defaults, ``hyper_update_budget=0.1``
  and fixed hyperparameters), and hierbandit's loop of ``update``.

It prints decisions (or rows) per second and the ratio of EbmTS's batched figure to each row
(EbmTS's loop when the policy has no ``select_batch``/``update_batch``).

A second section, latency by number of users, builds EbmTS (default settings, K = 5, d = 3) for
each N of ``--users``, warms it with 2N random rows, then times single steps (``select`` +
``update`` on a random instance) and prints the median, 99th percentile and mean (amortised) µs
per step, and the memory of the policy's state (the numpy arrays it holds). It times at least
``--steps`` steps and at least K·N / ``hyper_update_budget``, so that every arm re-estimates its
hyperparameters during the timed steps and the mean includes their cost (50,001 steps at
N = 100,000).

A third section, memory by number of users, warms EbmTS (K = 5, d = 3) at each N of
``--memory-users`` (default 10⁵ and 10⁶) with 2 rows in each of 1 to 3 arms per user, and prints
the pairs with data and the bytes of the state against what the dense (K, N, …) layout held.

``--big`` adds the issue's serving size: N = 100,000 users, K = 20, d = 10, hierbandit batched
only, one warm row per user: select_batch (with the default threads and with one), and
update_batch under the default schedule, re-estimating every 10 N pulls of an arm
(``hyper_update_budget=0.1``) and with fixed hyperparameters: one batch repeated, and three
sustained streams of fresh batches (drawn before the clock starts): random users and arms,
most of whose rows give a pair its first record, into the growing state; the same stream into
a policy that called ``reserve`` first; and (user, arm) pairs that have data already, the
steady state of a service whose users come back.

Batches of decisions run on ``serving_threads()`` threads (the cores, at most
``NUMBA_NUM_THREADS``); the rows marked "1 thread" set it to 1 for the call.

Targets (from the issue): hierbandit's batched select at B = 10⁴ ahead of MABWiser's and
bayesianbandits' batched calls; ≥ 10⁶ decisions/s at N = 10⁵, K = 20, d = 10 (``--big``);
batched update ≥ 10⁶ rows/s; amortised ≤ 50 µs and p99 ≤ 1 ms per step at N = 10⁵.

Run: ``make bench`` (installs the peers of the ``bench`` extra from requirements-bench.lock) or
``.venv/bin/python benchmarks/bench_serving.py [--quick] [--big] [--B 10000] [--repeats 5]
[--users 100,10000,100000]``. ``--quick`` is a smoke run: B = 1,000, 2 repeats, users 100 and
1,000, 1,000 timed steps. A peer that is not installed is reported and skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from _machine import load

from hierbandit.ebm import EbmTS, EbmUCB, LinTS, LinUCB, Policy
from hierbandit.stats.empirical_bayes import EBOptions
from hierbandit.stats.threads import serving_threads

K, D = 5, 3
N_INSTANCES = 100
N_LOG = 2_000
NOISE = 0.5
SPARSE_BUDGET = 0.1  # hyper_update_budget of the row that re-estimates less often
STREAM_BATCHES = 30  # at most this many fresh batches in the --big section's sustained rows
LOOP_WARM_CAP = 20_000  # rows of warm-up through a loop of update when update_batch is missing
BIG = (100_000, 20, 10)  # users, arms, features of --big


# ---------------------------------------------------------------------- data
class Data:
    """A linear reward model and draws from it: rewards x·θ_k + noise."""

    def __init__(self, n_arms: int, n_features: int, n_instances: int, seed: int) -> None:
        self.K, self.d, self.N = n_arms, n_features, n_instances
        self.rng = np.random.default_rng(seed)
        self.theta = self.rng.standard_normal((n_arms, n_features))

    def contexts(self, n: int) -> np.ndarray:
        return self.rng.standard_normal((n, self.d))

    def instances(self, n: int) -> np.ndarray:
        return self.rng.integers(0, self.N, n)

    def rewards(self, X: np.ndarray, arms: np.ndarray) -> np.ndarray:
        mean = np.einsum("bd,bd->b", X, self.theta[arms])
        return mean + NOISE * self.rng.standard_normal(X.shape[0])

    def log(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``n`` logged rows: instances, contexts, arms (uniform), rewards."""
        X = self.contexts(n)
        arms = self.rng.integers(0, self.K, n)
        return self.instances(n), X, arms, self.rewards(X, arms)


# ---------------------------------------------------------------------- timing
@contextlib.contextmanager
def one_thread() -> Any:
    """Serve batches on the calling thread only (``NUMBA_NUM_THREADS`` = 1, which
    :func:`hierbandit.stats.threads.serving_threads` reads at each call)."""
    before = numba.config.NUMBA_NUM_THREADS
    numba.config.NUMBA_NUM_THREADS = 1
    try:
        yield
    finally:
        numba.config.NUMBA_NUM_THREADS = before


def rate(fn: Callable[[], Any], count: int, repeats: int) -> float:
    """``count`` / median seconds of ``fn()`` over ``repeats`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return count / statistics.median(times)


def has_batch(policy: Any) -> bool:
    return hasattr(policy, "select_batch") and hasattr(policy, "update_batch")


def batch_kind(policy: Any) -> str:
    """Whether the policy's batched calls run in one compiled call or loop over single calls."""
    own = getattr(type(policy), "_select_batch", None)
    base = getattr(Policy, "_select_batch", None)
    if own is None or base is None:
        return ""
    return "loop of single calls inside" if own is base else "one compiled call"


def state_bytes(policy: Any) -> int:
    """Bytes of the numpy arrays in ``vars(policy)``, looking one level into containers (lists,
    tuples, dicts and objects with attributes); views are counted once, by their base."""
    seen: set[int] = set()
    total = 0

    def add(value: Any) -> None:
        nonlocal total
        if isinstance(value, np.ndarray):
            base = value
            while isinstance(base.base, np.ndarray):
                base = base.base
            if id(base) not in seen:
                seen.add(id(base))
                total += base.nbytes

    for value in vars(policy).values():
        if isinstance(value, np.ndarray):
            add(value)
            continue
        if isinstance(value, dict):
            inner = list(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            inner = list(value)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            inner = list(vars(value).values())
        else:
            inner = []
        for v in inner:
            add(v)
    return total


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "not available"
    return f"{value:,.0f}"


def fmt_ratio(ref: float | None, value: float | None) -> str:
    if ref is None or value is None:
        return ""
    return f"{ref / value:.2f}"


def is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return False
    return True


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """A Markdown table; the columns of numbers are aligned right."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    right = {
        i
        for i in range(len(header))
        if any(is_number(r[i]) for r in rows)
        and all(is_number(r[i]) or r[i] in {"", "not available"} for r in rows)
    }

    def line(cells: list[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
            + " |"
        )

    print(line(header))
    print(
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if i in right else "-" * (w + 2) for i, w in enumerate(widths)
        )
        + "|"
    )
    for r in rows:
        print(line(r))


def progress(message: str) -> None:
    """A line on stderr while a long section runs (the tables go to stdout)."""
    print(f"... {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- peers
def mabwiser_rows(data: Data, log: tuple, B: int, repeats: int) -> list[tuple]:
    try:
        from mabwiser.mab import MAB, LearningPolicy
    except ImportError:
        return [("MABWiser", "LinTS, LinUCB", "", None, None, "not installed (make env-bench)")]
    _, X0, A0, Y0 = log
    X = data.contexts(B)
    A = data.rng.integers(0, K, B)
    Y = data.rewards(X, A)
    out = []
    for name, lp in (
        ("LinTS", LearningPolicy.LinTS(alpha=1.0)),
        ("LinUCB", LearningPolicy.LinUCB(alpha=1.0)),
    ):
        mab = MAB(list(range(K)), lp, seed=0)
        mab.fit(decisions=A0, rewards=Y0, contexts=X0)
        out.append(
            (
                "MABWiser",
                name,
                "predict(contexts)",
                "decisions",
                rate(lambda mab=mab: mab.predict(X), B, repeats),
                "",
            )
        )
        out.append(
            (
                "MABWiser",
                name,
                "partial_fit(decisions, rewards, contexts)",
                "rows",
                rate(lambda mab=mab: mab.partial_fit(A, Y, X), B, repeats),
                "",
            )
        )
    return out


def bayesianbandits_rows(data: Data, log: tuple, B: int, repeats: int) -> list[tuple]:
    try:
        from bayesianbandits import Arm, ContextualAgent, NormalRegressor, ThompsonSampling
    except ImportError:
        return [("bayesianbandits", "TS", "", None, None, "not installed (make env-bench)")]

    def update(agent: Any, X: np.ndarray, arms: np.ndarray, y: np.ndarray) -> None:
        for k in range(K):
            rows = arms == k
            if rows.any():
                agent.select_for_update(k).update(X[rows], y[rows])

    _, X0, A0, Y0 = log
    agent = ContextualAgent(
        [Arm(k, learner=NormalRegressor(alpha=1.0, beta=1.0 / NOISE**2)) for k in range(K)],
        ThompsonSampling(),
        random_seed=0,
    )
    update(agent, X0, A0, Y0)
    X = data.contexts(B)
    A = data.rng.integers(0, K, B)
    Y = data.rewards(X, A)
    return [
        (
            "bayesianbandits",
            "ContextualAgent TS",
            "pull(X)",
            "decisions",
            rate(lambda: agent.pull(X), B, repeats),
            "",
        ),
        (
            "bayesianbandits",
            "ContextualAgent TS",
            "update(X, y) once per arm",
            "rows",
            rate(lambda: update(agent, X, A, Y), B, repeats),
            "",
        ),
    ]


# ---------------------------------------------------------------------- hierbandit
def hierbandit_rows(data: Data, log: tuple, B: int, repeats: int) -> list[tuple]:
    J0, X0, A0, Y0 = log
    J = data.instances(B)
    X = data.contexts(B)
    A = data.rng.integers(0, K, B)
    Y = data.rewards(X, A)
    js, xs, As, ys = J.tolist(), list(X), A.tolist(), Y.tolist()
    out = []
    for cls in (EbmTS, EbmUCB, LinTS, LinUCB):
        name = cls.__name__
        policy = cls(N_INSTANCES, K, D, rng=0)
        if has_batch(policy):
            policy.update_batch(J0, X0, A0, Y0)
        else:
            for j, x, k, y in zip(J0.tolist(), X0, A0.tolist(), Y0.tolist(), strict=True):
                policy.update(j, x, k, y)

        def loop_select(policy: Any = policy) -> None:
            select = policy.select
            for j, x in zip(js, xs, strict=True):
                select(j, x)

        def loop_update(policy: Any = policy) -> None:
            update = policy.update
            for j, x, k, y in zip(js, xs, As, ys, strict=True):
                update(j, x, k, y)

        if has_batch(policy):
            kind = batch_kind(policy)
            out.append(
                (
                    "hierbandit",
                    name,
                    "select_batch(instances, contexts)",
                    "decisions",
                    rate(lambda policy=policy: policy.select_batch(J, X), B, repeats),
                    f"{kind}, {serving_threads()} threads",
                )
            )
            with one_thread():
                out.append(
                    (
                        "hierbandit",
                        name,
                        "select_batch, NUMBA_NUM_THREADS=1",
                        "decisions",
                        rate(lambda policy=policy: policy.select_batch(J, X), B, repeats),
                        f"{kind}, 1 thread",
                    )
                )
        else:
            out.append(("hierbandit", name, "select_batch", "decisions", None, ""))
        out.append(
            ("hierbandit", name, "select loop", "decisions", rate(loop_select, B, repeats), "")
        )
        if has_batch(policy):
            out.append(
                (
                    "hierbandit",
                    name,
                    "update_batch(instances, contexts, arms, rewards)",
                    "rows",
                    rate(lambda policy=policy: policy.update_batch(J, X, A, Y), B, repeats),
                    kind,
                )
            )
        else:
            out.append(("hierbandit", name, "update_batch", "rows", None, ""))
        out.append(("hierbandit", name, "update loop", "rows", rate(loop_update, B, repeats), ""))
    # serving a fitted prior as it is (prior_mode="fixed"): no re-estimation, rank-one updates
    # only, the configuration the peers' updates compare with (they estimate no hyperparameters)
    fixed = EbmTS(
        N_INSTANCES, K, D, rng=0, eb_options=EBOptions(estimate_Sigma=False, estimate_sigma2=False)
    )
    fixed.update_batch(J0, X0, A0, Y0)
    out.append(
        (
            "hierbandit",
            "EbmTS, fixed hyperparameters",
            "update_batch(instances, contexts, arms, rewards)",
            "rows",
            rate(lambda: fixed.update_batch(J, X, A, Y), B, repeats),
            "one compiled call, no re-estimation",
        )
    )
    # still learning the hyperparameters, less often: every 10 N pulls of an arm instead of
    # every N / 10 (the regret this gives up: benchmarks/regret_schedule.py --budgets 0.1)
    sparse = EbmTS(N_INSTANCES, K, D, rng=0, hyper_update_budget=SPARSE_BUDGET)
    sparse.update_batch(J0, X0, A0, Y0)
    out.append(
        (
            "hierbandit",
            f"EbmTS, hyper_update_budget={SPARSE_BUDGET:g}",
            "update_batch(instances, contexts, arms, rewards)",
            "rows",
            rate(lambda: sparse.update_batch(J, X, A, Y), B, repeats),
            f"re-estimating every {1 / SPARSE_BUDGET:g} N pulls of an arm",
        )
    )
    return out


def throughput(B: int, repeats: int) -> None:
    print(
        f"## Throughput: K = {K}, d = {D}, {N_LOG:,} warm rows, B = {B:,}, "
        f"median of {repeats} after one warm-up"
    )
    print(f"({load()} at the start)\n")
    data = Data(K, D, N_INSTANCES, seed=0)
    log = data.log(N_LOG)
    rows = hierbandit_rows(data, log, B, repeats)
    rows += mabwiser_rows(data, log, B, repeats)
    rows += bayesianbandits_rows(data, log, B, repeats)

    def ebm(call_prefix: str) -> float | None:
        for lib, pol, call, _, value, _ in rows:
            if lib == "hierbandit" and pol == "EbmTS" and call.startswith(call_prefix):
                return value
        return None

    ref = {
        "decisions": ebm("select_batch") or ebm("select loop"),
        "rows": ebm("update_batch") or ebm("update loop"),
    }
    ref_name = {
        "decisions": "EbmTS select_batch" if ebm("select_batch") else "EbmTS select loop",
        "rows": "EbmTS update_batch" if ebm("update_batch") else "EbmTS update loop",
    }
    table = []
    for lib, pol, call, unit, value, note in rows:
        table.append(
            [
                lib,
                pol,
                call,
                f"{B:,}",
                unit or "",
                fmt_rate(value) if unit else "",
                fmt_ratio(ref.get(unit), value),
                note,
            ]
        )
    print_table(
        ["library", "policy", "call", "B", "unit", "per second", "EbmTS ÷ row", "note"], table
    )
    print(
        f"\nEbmTS ÷ row: {ref_name['decisions']} decisions/s (or {ref_name['rows']} rows/s) "
        f"over the row's figure; above 1, {ref_name['decisions']} (or {ref_name['rows']}) is faster."
    )
    peers = [r for r in rows if r[0] != "hierbandit" and r[3] == "decisions" and r[4]]
    if peers and ebm("select_batch"):
        best = max(peers, key=lambda r: r[4])
        print(
            f"target: EbmTS select_batch ahead of the peers' batched decisions: "
            f"{ebm('select_batch') / best[4]:.2f} × the fastest peer ({best[0]} {best[1]} "
            f"{best[2]})"
        )
    if ebm("update_batch"):
        fixed = [r[4] for r in rows if r[1] == "EbmTS, fixed hyperparameters" and r[4]]
        sparse = [r[4] for r in rows if r[1].endswith(f"budget={SPARSE_BUDGET:g}") and r[4]]
        print(
            f"target: batched update ≥ 1,000,000 rows/s: EbmTS {fmt_rate(ebm('update_batch'))} "
            f"(re-estimating every N / {EbmTS(1, 1, 1).hyper_update_budget:g} pulls of an arm, "
            f"N = {N_INSTANCES:,}), "
            f"{fmt_rate(sparse[0]) if sparse else 'n/a'} re-estimating every "
            f"{1 / SPARSE_BUDGET:g} N pulls, "
            f"{fmt_rate(fixed[0]) if fixed else 'n/a'} with fixed hyperparameters"
        )
    print(f"({load()} at the end)\n")


# ---------------------------------------------------------------------- latency by users
def latency(users: list[int], steps_min: int) -> None:
    print(
        f"## Latency by number of users: EbmTS (defaults), K = {K}, d = {D}, "
        f"at least {steps_min:,} single steps (select + update on a random instance), and at "
        "least K·N / hyper_update_budget, so that every arm re-estimates"
    )
    print(f"({load()} at the start)\n")
    # compile the kernels before anything is timed
    warm = EbmTS(10, K, D, rng=0)
    warm_data = Data(K, D, 10, seed=1)
    for j, x in zip(warm_data.instances(300).tolist(), warm_data.contexts(300), strict=True):
        k = warm.select(j, x)
        warm.update(j, x, k, float(warm_data.rewards(x[None], np.array([k]))[0]))
    if has_batch(warm):
        J, X, A, Y = warm_data.log(300)
        warm.update_batch(J, X, A, Y)
        warm.select_batch(J, X)
    table = []
    notes = []
    for N in users:
        data = Data(K, D, N, seed=2)
        policy = EbmTS(N, K, D, rng=0)
        n_warm = 2 * N
        progress(f"N = {N:,}: warming, then the timed steps")
        t0 = time.perf_counter()
        if has_batch(policy):
            how = "update_batch"
            policy.update_batch(*data.log(n_warm))
        else:
            n_warm = min(n_warm, LOOP_WARM_CAP)
            how = "update loop"
            if n_warm < 2 * N:
                notes.append(
                    f"N = {N:,}: warmed with {n_warm:,} rows, not {2 * N:,} (no "
                    f"update_batch; the loop's warm-up is capped at {LOOP_WARM_CAP:,})"
                )
            J, X, A, Y = data.log(n_warm)
            for j, x, k, y in zip(J.tolist(), X, A.tolist(), Y.tolist(), strict=True):
                policy.update(j, x, k, y)
        warm_s = time.perf_counter() - t0
        # enough steps for every arm to re-estimate at least once under the default schedule
        # (every N / hyper_update_budget pulls of the arm), so the mean is the amortised cost
        steps = max(steps_min, int(np.ceil(K * N / policy.hyper_update_budget)) + 1)
        before = policy.pulls.copy()
        J = data.instances(steps + 200).tolist()
        X = data.contexts(steps + 200)
        R = (X @ data.theta.T) + NOISE * data.rng.standard_normal((steps + 200, K))
        R = R.tolist()
        times = np.empty(steps, dtype=np.int64)
        clock = time.perf_counter_ns
        for t in range(steps + 200):
            j, x = J[t], X[t]
            t0 = clock()
            k = policy.select(j, x)
            policy.update(j, x, k, R[t][k])
            if t >= 200:  # the first 200 steps are not timed
                times[t - 200] = clock() - t0
        us = times / 1e3
        table.append(
            [
                f"{N:,}",
                f"{n_warm:,} ({how}, {warm_s:.1f} s)",
                f"{steps:,} ({int((policy.pulls - before).min()):,})",
                f"{np.median(us):.1f}",
                f"{np.percentile(us, 99):.1f}",
                f"{us.mean():.1f}",
                f"{state_bytes(policy) / 1e6:.1f}",
            ]
        )
    print_table(
        [
            "N users",
            "warm rows",
            "timed steps (fewest pulls of an arm)",
            "median µs",
            "p99 µs",
            "mean µs",
            "state MB",
        ],
        table,
    )
    for note in notes:
        print(f"note: {note}")
    print("\ntarget at N = 100,000: mean (amortised) ≤ 50 µs and p99 ≤ 1,000 µs per step")
    print(f"({load()} at the end)\n")


# ---------------------------------------------------------------------- memory by users
def sparse_log(data: Data, n_users: int, arms_per_user: tuple[int, int], rows: int):
    """Every user gives ``rows`` rows in each of 1 to 3 arms (``arms_per_user`` bounds, drawn
    uniformly), the arms drawn without replacement: each user sees a few of the K arms."""
    lo, hi = arms_per_user
    m = data.rng.integers(lo, hi + 1, n_users)
    keys = data.rng.random((n_users, data.K)).argsort(axis=1)  # a random order of the arms
    users = np.repeat(np.arange(n_users), m)
    arms = keys[users, np.concatenate([np.arange(c) for c in m])]
    users, arms = np.repeat(users, rows), np.repeat(arms, rows)
    order = data.rng.permutation(users.size)
    users, arms = users[order], arms[order]
    X = data.contexts(users.size)
    return users, X, arms, data.rewards(X, arms)


def memory(users: list[int]) -> None:
    print(
        f"## Memory by number of users: EbmTS (defaults), K = {K}, d = {D}; every user gives 2 "
        "rows in each of 1 to 3 of the arms"
    )
    print(f"({load()} at the start)\n")
    table = []
    for N in users:
        data = Data(K, D, N, seed=4)
        log = sparse_log(data, N, (1, 3), 2)
        progress(f"N = {N:,}: {log[0].size:,} rows")
        policy = EbmTS(N, K, D, rng=0)
        t0 = time.perf_counter()
        for i in range(0, log[0].size, 100_000):
            policy.update_batch(*(a[i : i + 100_000] for a in log))
        warm_s = time.perf_counter() - t0
        width = policy._pairs.shape[1]
        dense = K * N * (width * 8) + N * 8  # the per-(arm, instance) layout it replaced
        table.append(
            [
                f"{N:,}",
                f"{log[0].size:,} ({warm_s:.1f} s)",
                f"{policy.n_pairs:,}",
                f"{policy.n_pairs / N:.2f}",
                f"{policy._pair_slot.nbytes / 1e6:.1f}",
                f"{policy._pairs.nbytes / 1e6:.1f}",
                f"{state_bytes(policy) / 1e6:.1f}",
                f"{dense / 1e6:.1f}",
            ]
        )
    print_table(
        [
            "N users",
            "rows (update_batch)",
            "pairs with data",
            "pairs per user",
            "index MB",
            "records in use MB",
            "state MB (allocated)",
            "dense layout MB",
        ],
        table,
    )
    print(
        f"\nA record holds 3d² + d + 2 = {3 * D * D + D + 2} float64 values per (user, arm) pair "
        "with data; the index 4 bytes per (user, arm); the record buffer doubles when full, so up "
        "to half of it is spare capacity. The dense layout held a record's worth for every "
        "(user, arm)."
    )
    print(f"({load()} at the end)\n")


# ---------------------------------------------------------------------- --big
def stream_rate(
    policy: Any, data: Data, Kb: int, B: int, n_batches: int, existing: bool = False
) -> tuple[float, int, int]:
    """Rows per second of ``update_batch`` over ``n_batches`` fresh batches of B rows drawn
    before the clock starts: random users and arms, or (``existing``) random (user, arm)
    pairs that have data already. Also returns the new pairs and the arms that
    re-estimated their hyperparameters in the stream."""
    if existing:
        users, arms = np.nonzero(policy._pair_slot[: policy.n_instances] >= 0)
        picks = [data.rng.integers(0, users.size, B) for _ in range(n_batches)]
        draws = [(users[i], arms[i]) for i in picks]
    else:
        draws = [(data.instances(B), data.rng.integers(0, Kb, B)) for _ in range(n_batches)]
    stream = []
    for J, A in draws:
        X = data.contexts(B)
        stream.append((J, X, A, data.rewards(X, A)))
    before, pairs_before = policy.pulls.copy(), policy.n_pairs
    t0 = time.perf_counter()
    for args in stream:
        policy.update_batch(*args)
    rows_s = n_batches * B / (time.perf_counter() - t0)
    estimated = int((policy._since_estimate < policy.pulls - before).sum())
    return rows_s, policy.n_pairs - pairs_before, estimated


def big(B: int, repeats: int) -> None:
    N, Kb, d = BIG
    print(f"## Serving size: N = {N:,} users, K = {Kb}, d = {d}, hierbandit batched, B = {B:,}")
    print(f"({load()} at the start)\n")
    probe = EbmTS(10, Kb, d, rng=0)
    if not has_batch(probe):
        print("skipped: EbmTS has no select_batch/update_batch in this version\n")
        return
    table = []
    notes = []
    fixed = {"eb_options": EBOptions(estimate_Sigma=False, estimate_sigma2=False)}
    sparse = {"hyper_update_budget": SPARSE_BUDGET}
    for label, options in (
        ("defaults", None),
        (f"hyper_update_budget={SPARSE_BUDGET:g}", sparse),
        ("fixed hyperparameters", fixed),
    ):
        data = Data(Kb, d, N, seed=3)
        policy = EbmTS(N, Kb, d, rng=0, **(options or {}))
        # every user takes state: one warm row each, in a random order
        progress(f"{label}: warming, {N:,} users, one row each")
        ids = data.rng.permutation(N)
        X0 = data.contexts(N)
        A0 = data.rng.integers(0, Kb, N)
        t0 = time.perf_counter()
        policy.update_batch(ids, X0, A0, data.rewards(X0, A0))
        warm_s = time.perf_counter() - t0
        J = data.instances(B)
        X = data.contexts(B)
        A = data.rng.integers(0, Kb, B)
        Y = data.rewards(X, A)
        how = f"EbmTS({N}, {Kb}, {d}), {label}"
        if options is None:
            select = functools.partial(policy.select_batch, J, X)
            sel = rate(select, B, repeats)
            with one_thread():
                sel1 = rate(select, B, repeats)
            table.append(
                [how, f"select_batch, {serving_threads()} threads", f"{B:,}", fmt_rate(sel)]
            )
            table.append([how, "select_batch, 1 thread", f"{B:,}", fmt_rate(sel1)])
        upd = rate(functools.partial(policy.update_batch, J, X, A, Y), B, repeats)
        table.append([how, "update_batch (rows)", f"{B:,}", fmt_rate(upd)])
        # sustained: a stream of fresh batches of random users and arms, long enough for every
        # arm to re-estimate under the default schedule (K·N / budget rows) and capped at
        # STREAM_BATCHES; most rows give a pair its first record (the fill of the state), and
        # its growth, the drift control and the re-estimations that fall in it are included
        n_batches = int(np.ceil(Kb * N / policy.hyper_update_budget / B)) + 1
        n_batches = min(max(n_batches, 10), STREAM_BATCHES)
        fill, pairs_new, arms_est = stream_rate(policy, data, Kb, B, n_batches)
        table.append(
            [how, f"update_batch (rows), {n_batches} fresh batches, new pairs", f"{B:,}",
             fmt_rate(fill)]
        )  # fmt: skip
        # the same stream into a policy whose records were reserved up front
        reserved = EbmTS(N, Kb, d, rng=0, **(options or {}))
        reserved.reserve(N + n_batches * B)
        reserved.update_batch(ids, X0, A0, data.rewards(X0, A0))
        fill_r, _, _ = stream_rate(reserved, data, Kb, B, n_batches)
        del reserved
        table.append(
            [how, f"the same after reserve({N + n_batches * B:,})", f"{B:,}", fmt_rate(fill_r)]
        )
        # the steady state: a stream of fresh batches of (user, arm) pairs that have data
        steady, _, _ = stream_rate(policy, data, Kb, B, n_batches, existing=True)
        table.append(
            [how, f"update_batch (rows), {n_batches} fresh batches, pairs with data", f"{B:,}",
             fmt_rate(steady)]
        )  # fmt: skip
        notes.append(
            f"{label}: the stream of {n_batches * B:,} rows gave {pairs_new:,} new pairs; "
            f"{arms_est} of {Kb} arms re-estimated their hyperparameters in it"
        )
        notes.append(
            f"{label}: {N:,} warm rows through update_batch in {warm_s:.1f} s; state "
            f"{state_bytes(policy) / 1e9:.2f} GB, {policy.n_pairs:,} (user, arm) pairs"
        )
    print_table(["policy", "call", "B", "per second"], table)
    print(
        "\ntargets: ≥ 1,000,000 decisions/s and ≥ 1,000,000 rows/s (fixed hyperparameters, "
        f"or re-estimating every {1 / SPARSE_BUDGET:g} N pulls of an arm). A new pair's record "
        "is fresh memory: a stream of new pairs into a growing buffer pays the operating "
        "system's first touch of it (and the copies of a doubling) on the serving path, which "
        "reserve() moves to start-up"
    )
    for note in notes:
        print(f"note: {note}")
    print(f"({load()} at the end)\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--B", type=int, default=None, help="batch size (default 10,000)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5)")
    parser.add_argument(
        "--users",
        default=None,
        help="N of the latency section, comma-separated (default 100,10000,100000)",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="timed single steps per N (default 5,000)"
    )
    parser.add_argument(
        "--memory-users",
        default=None,
        help="N of the memory section, comma-separated (default 100000,1000000)",
    )
    parser.add_argument(
        "--sections",
        default="throughput,latency,memory",
        help="sections to run, comma-separated (throughput, latency, memory; --big adds big)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: B = 1,000, 2 repeats, users 100,1000, 1,000 steps",
    )
    parser.add_argument(
        "--big", action="store_true", help="also N = 100,000, K = 20, d = 10, batched (about 5 GB)"
    )
    args = parser.parse_args(argv)
    B = args.B or (1_000 if args.quick else 10_000)
    repeats = args.repeats or (2 if args.quick else 5)
    steps = args.steps or (1_000 if args.quick else 5_000)
    users = args.users or ("100,1000" if args.quick else "100,10000,100000")
    mem_users = args.memory_users or ("10000,100000" if args.quick else "100000,1000000")
    sections = set(args.sections.split(","))
    if "throughput" in sections:
        throughput(B, repeats)
    if "latency" in sections:
        latency([int(u) for u in users.split(",")], steps)
    if "memory" in sections:
        memory([int(u) for u in mem_users.split(",")])
    if args.big or "big" in sections:
        big(B, repeats)


if __name__ == "__main__":
    main()
