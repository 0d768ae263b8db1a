"""Load test of the decision service: ``hierbandit serve`` on loopback under locust, against the
same policy in-process.

The issue's target: at least 5,000 decisions per second in batches of 100 on 2 cores, with
the p99 latency reported. In one run, on the shipped MovieLens prior
(``models/movielens-ml/prior.nc``: EbmTS, K = 5 arms, features intercept/time/weekend):

1. **In-process policy** (the yardstick): ``EbmTS.select_batch`` + ``choice_probabilities`` +
   ``update_batch`` on batches of ``--batch`` requests (string user ids from a pool of
   ``--pool``), the same fraction of each batch rewarded as below; no service, no HTTP.
2. **In-process service**: :class:`hierbandit.serve.DecisionService` (ledger, write-ahead log
   with ``--fsync`` as served, Parquet event log) called with the same bodies as Python dicts;
   then where its time goes (cProfile of the same loop, by piece), and the cost of JSON
   parsing and response encoding of one body.
3. **Over HTTP**: ``hierbandit serve PRIOR --state TMP --port P`` as a child process on
   127.0.0.1, and locust (``benchmarks/locust_service.py``, headless, ``--users`` users) for
   ``--seconds`` seconds or ``--max-decisions`` decisions, whichever comes first: each user
   decides a batch and rewards a random ``--reward-fraction`` of it. Printed: decisions/s,
   rewards/s, requests/s, p50/p90/p99/max latency per endpoint (locust's, client side), the
   failures, the server's own latency quantiles (``/v1/metrics``: time inside the service,
   the lock wait included), and the CPU seconds the server and locust used (both share the
   machine's cores).

The ratios of the HTTP rate to the in-process rates show the cost of HTTP, JSON and
durability. The in-process service loop is serial: it waits for each reward's fsync, whereas
over HTTP that wait (the GIL released) overlaps with other requests' HTTP and JSON work, so
the HTTP rate can exceed the in-process service's. A checkpoint (every ``--checkpoint-every``
log records) holds the service only while its snapshot is taken (the policy and the pending
decisions copied) and is written in a background thread: a 30 s run at the default period
holds none; ``--checkpoint-every 2000`` shows their effect on the tail latency. Nothing is downloaded; only loopback is used. The state directory is temporary.

Run: ``make bench`` runs the other benchmarks; this one by hand (locust comes with
``make env-bench``)::

    .venv/bin/python benchmarks/bench_service.py [--seconds 30] [--users 4] [--batch 100]
        [--fsync | --no-fsync] [--pool 100000] [--reward-fraction 0.9]
        [--checkpoint-every 10000] [--max-decisions N] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import csv
import itertools
import json
import os
import pstats
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from _machine import load

REPO = Path(__file__).resolve().parents[1]
PRIOR = REPO / "models" / "movielens-ml" / "prior.nc"
LOCUSTFILE = Path(__file__).resolve().parent / "locust_service.py"
TARGET = 5_000
STARTUP_TIMEOUT = 180.0


def say(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- the workload
class Workload:
    """Decide bodies like the locust users' (string ids from a pool, contexts of the prior's
    three features), the positions of each batch that get a reward and the rewards; prepared
    before the timing (``n`` of them, cycled), as the locust users prepare theirs."""

    def __init__(self, batch: int, pool: int, fraction: float, seed: int, n: int = 200) -> None:
        rng = random.Random(seed)
        self.items = []
        for _ in range(n):
            body = {
                "instances": [f"user-{rng.randrange(pool)}" for _ in range(batch)],
                "contexts": [
                    [1.0, round(rng.gauss(0.0, 1.0), 4), float(rng.random() < 2 / 7)]
                    for _ in range(batch)
                ],
            }
            rows = [i for i in range(batch) if rng.random() < fraction]
            rewards = [round(rng.gauss(3.5, 1.0), 3) for _ in rows]
            self.items.append((body, np.asarray(body["contexts"]), rows, rewards))
        self.cycle = itertools.cycle(self.items)

    def next(self) -> tuple[dict[str, Any], np.ndarray, list[int], list[float]]:
        return next(self.cycle)


# ---------------------------------------------------------------------- in-process
def policy_rate(args: argparse.Namespace) -> dict[str, float]:
    """Decisions per second of the policy alone (select, probabilities, update)."""
    from hierbandit.bayes import load_prior
    from hierbandit.ebm import EbmTS

    policy = EbmTS(prior=load_prior(PRIOR), rng=args.seed)
    work = Workload(args.batch, args.pool, args.reward_fraction, args.seed + 1)
    parts = {"select_batch": 0.0, "choice_probabilities": 0.0, "update_batch": 0.0}

    def step(timed: bool) -> None:
        body, X, rows, rewards = work.next()
        ids = body["instances"]
        t0 = time.perf_counter()
        arms = policy.select_batch(ids, X)
        t1 = time.perf_counter()
        policy.choice_probabilities(ids, X, arms=arms)
        t2 = time.perf_counter()
        if rows:
            policy.update_batch([ids[i] for i in rows], X[rows], arms[rows], np.asarray(rewards))
        t3 = time.perf_counter()
        if timed:
            parts["select_batch"] += t1 - t0
            parts["choice_probabilities"] += t2 - t1
            parts["update_batch"] += t3 - t2

    for _ in range(5):  # kernels compiled or loaded
        step(False)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.yardstick_seconds:
        step(True)
        n += 1
    elapsed = time.perf_counter() - start
    out = {"decisions_per_s": n * args.batch / elapsed, "batches": n}
    out.update({k: v / n * 1e3 for k, v in parts.items()})  # ms per batch
    out["instances"] = policy.n_instances
    return out


def service_loop(service: Any, work: Workload, seconds: float) -> tuple[int, float]:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        body, _, rows, rewards = work.next()
        out = service.decide(body)
        if rows:
            service.reward({"events": [out["events"][i] for i in rows], "rewards": rewards})
        n += 1
    return n, time.perf_counter() - start


#: the pieces of a decide + reward reported from the profile: (label, file suffix, function)
PIECES = [
    ("decide (all)", "serve/service.py", "decide"),
    ("  select_batch", "ebm/base.py", "select_batch"),
    ("  choice_probabilities", "ebm/base.py", "choice_probabilities"),
    ("  checks of ids and contexts", "serve/service.py", "_check_ids"),
    ("  contexts to an array", "serve/service.py", "_context_array"),
    ("  ledger.add", "serve/ledger.py", "add"),
    ("  event log (decisions)", "serve/eventlog.py", "decisions"),
    ("reward (all)", "serve/service.py", "reward"),
    ("  update_batch", "ebm/base.py", "update_batch"),
    ("  ledger.take", "serve/ledger.py", "take"),
    ("  event log (rewards)", "serve/eventlog.py", "rewards"),
    ("  write-ahead log: encode records", "serve/service.py", "_dumps"),
    ("  write-ahead log: append", "serve/wal.py", "append"),
    ("  write-ahead log: sync", "serve/wal.py", "sync"),
    ("checkpoints", "serve/service.py", "_checkpoint_locked"),
]


def service_rate(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Decisions per second of the DecisionService without HTTP, and where its time goes."""
    from hierbandit.serve import DecisionService, ServiceConfig

    out: dict[str, Any] = {}
    config = ServiceConfig(fsync=args.fsync, checkpoint_every=args.checkpoint_every)
    service = DecisionService.open(tmp / "inproc", PRIOR, seed=args.seed, config=config)
    try:
        work = Workload(args.batch, args.pool, args.reward_fraction, args.seed + 2)
        service_loop(service, work, 1.0)  # warm
        n, elapsed = service_loop(service, work, args.yardstick_seconds)
        out["decisions_per_s"] = n * args.batch / elapsed
        out["ms_per_batch"] = elapsed / n * 1e3
        # the same loop under cProfile: the share of each piece (cProfile slows Python code,
        # so the shares, not the absolute times, are the figures)
        prof = cProfile.Profile()
        prof.enable()
        n_p, elapsed_p = service_loop(service, work, min(args.yardstick_seconds, 5.0))
        prof.disable()
        stats = pstats.Stats(prof)
        total = elapsed_p / n_p
        shares = []
        for label, suffix, name in PIECES:
            ct = sum(
                v[3]
                for (file, _, func), v in stats.stats.items()  # type: ignore[attr-defined]
                if func == name and file.replace(os.sep, "/").endswith(suffix)
            )
            shares.append((label, ct / n_p / total))
        out["shares"] = shares
        out["profile"] = prof
        # JSON: parsing one decide body and one reward body, encoding their answers
        from starlette.responses import JSONResponse

        from hierbandit.serve.service import loads

        body, _, rows, rewards = work.next()
        raw = json.dumps(body).encode()
        answer = service.decide(body)
        reward = {"events": [answer["events"][i] for i in rows], "rewards": rewards}
        raw_r = json.dumps(reward).encode()
        reps = 200
        t0 = time.perf_counter()
        for _ in range(reps):
            loads(raw)
            loads(raw_r)
        t1 = time.perf_counter()
        for _ in range(reps):
            JSONResponse(answer)
            JSONResponse({"applied": len(rows)})
        t2 = time.perf_counter()
        out["json_parse_ms"] = (t1 - t0) / reps * 1e3
        out["json_encode_ms"] = (t2 - t1) / reps * 1e3
        out["body_bytes"] = len(raw)
    finally:
        service.close()
    return out


# ---------------------------------------------------------------------- over HTTP
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 30.0) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    with opener.open(url, timeout=timeout) as r:
        return json.loads(r.read())


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(args: argparse.Namespace, tmp: Path, port: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "hierbandit.cli",
        "serve",
        str(PRIOR),
        "--state",
        str(tmp / "state"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--seed",
        str(args.seed),
        "--fsync" if args.fsync else "--no-fsync",
        "--checkpoint-every",
        str(args.checkpoint_every),
    ]
    print("server:  " + " ".join(_short(c) for c in cmd))
    log = open(tmp / "serve.log", "wb")  # noqa: SIM115 - the child writes it until stopped
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def wait_ready(proc: subprocess.Popen[bytes], url: str, tmp: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the service exited while starting:\n" + _tail(tmp / "serve.log"))
        with contextlib.suppress(OSError, ValueError):
            if get(url + "/v1/health", timeout=2.0)["status"] == "ok":
                return
        time.sleep(0.1)
    raise SystemExit(f"the service did not start in {STARTUP_TIMEOUT:.0f} s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _short(arg: str) -> str:
    for base, name in ((str(REPO) + os.sep, ""), (tempfile.gettempdir() + os.sep, "$TMP/")):
        if arg.startswith(base):
            return name + arg[len(base) :]
    return arg


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_bytes()[-n:].decode(errors="replace") if path.exists() else ""


def locust_exe() -> list[str]:
    exe = Path(sys.executable).with_name("locust")
    if exe.exists():
        return [str(exe)]
    if shutil.which("locust"):
        return [str(shutil.which("locust"))]
    raise SystemExit("locust is not installed: run `make env-bench` (requirements-bench.lock)")


def run_locust(args: argparse.Namespace, tmp: Path, url: str) -> dict[str, Any]:
    prefix = tmp / "locust"
    cmd = [
        *locust_exe(),
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "-u",
        str(args.users),
        "-r",
        str(args.users),
        "--run-time",
        f"{args.seconds}s",
        "--stop-timeout",
        "10",
        "--host",
        url,
        "--csv",
        str(prefix),
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    env = dict(
        os.environ,
        BENCH_BATCH=str(args.batch),
        BENCH_POOL=str(args.pool),
        BENCH_REWARD_FRACTION=str(args.reward_fraction),
        BENCH_MAX_DECISIONS=str(args.max_decisions),
        BENCH_SEED=str(args.seed),
    )
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        env.pop(name, None)
    print(
        f"locust:  BENCH_BATCH={args.batch} BENCH_POOL={args.pool} "
        f"BENCH_REWARD_FRACTION={args.reward_fraction} BENCH_MAX_DECISIONS={args.max_decisions} "
        + " ".join(_short(c) for c in cmd)
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=args.seconds + 120,
        check=False,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    (tmp / "locust.log").write_bytes(proc.stdout)
    rows = {}
    stats_file = Path(f"{prefix}_stats.csv")
    if not stats_file.exists():
        raise SystemExit("locust wrote no statistics:\n" + proc.stdout.decode()[-3000:])
    with open(stats_file, newline="") as fh:
        for row in csv.DictReader(fh):
            rows[row["Name"]] = row
    failures = []
    fail_file = Path(f"{prefix}_failures.csv")
    if fail_file.exists():
        with open(fail_file, newline="") as fh:
            failures = list(csv.DictReader(fh))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "rows": rows,
        "failures": failures,
        "wall": wall,
        "cpu": cpu,
        "exit": proc.returncode,
        "log": proc.stdout.decode(errors="replace"),
    }


# ---------------------------------------------------------------------- report
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=30, help="locust run time (default 30)")
    ap.add_argument("--users", type=int, default=4, help="locust users (default 4)")
    ap.add_argument("--batch", type=int, default=100, help="decisions per request (100)")
    ap.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="sync each reward record before acknowledging it (the service's default)",
    )
    ap.add_argument("--pool", type=int, default=100_000, help="distinct user ids (10^5)")
    ap.add_argument("--reward-fraction", type=float, default=0.9, help="share rewarded (0.9)")
    ap.add_argument(
        "--max-decisions", type=int, default=10**7, help="stop locust after this many decisions"
    )
    ap.add_argument(
        "--yardstick-seconds", type=float, default=5.0, help="time of each in-process rate (5)"
    )
    ap.add_argument(
        "--checkpoint-every",
        type=int,
        default=10_000,
        help="log records between checkpoints (the service's default, 10,000)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true", help="print the in-process profile's top")
    args = ap.parse_args(argv)
    if args.seconds < 1 or args.users < 1 or args.batch < 1:
        ap.error("--seconds, --users and --batch must be positive")

    print("# Decision service load test (hierbandit serve + locust on loopback)")
    print(
        f"prior {PRIOR.relative_to(REPO)}, batches of {args.batch}, user ids from a pool of "
        f"{args.pool:,}, {args.reward_fraction:.0%} of decisions rewarded, "
        f"fsync {'on' if args.fsync else 'off'}, a checkpoint every {args.checkpoint_every:,} "
        "log records"
    )
    print(f"({load()} at the start)\n")

    tmp = Path(tempfile.mkdtemp(prefix="hierbandit-bench-service-"))
    try:
        say("in-process policy")
        pol = policy_rate(args)
        say("in-process service")
        svc = service_rate(args, tmp)

        print(f"## In process, {args.yardstick_seconds:g} s each")
        print(
            f"policy  (EbmTS select_batch + choice_probabilities + update_batch): "
            f"{pol['decisions_per_s']:>9,.0f} decisions/s  (ms per batch: select "
            f"{pol['select_batch']:.2f}, probabilities {pol['choice_probabilities']:.2f}, "
            f"update {pol['update_batch']:.2f}; {pol['instances']:,} users learnt)"
        )
        print(
            f"service (DecisionService.decide + .reward, no HTTP):              "
            f"{svc['decisions_per_s']:>9,.0f} decisions/s  ({svc['ms_per_batch']:.2f} ms per "
            "decide + reward)"
        )
        print("share of the service's time by piece (cProfile of the same loop):")
        for label, share in svc["shares"]:
            print(f"  {label:<38} {share:6.1%}")
        print(
            f"JSON per decide + reward, outside the service: parse {svc['json_parse_ms']:.2f} ms "
            f"(decide body {svc['body_bytes']:,} bytes), encode the answers "
            f"{svc['json_encode_ms']:.2f} ms"
        )
        if args.profile:
            print("\ntop of the profile (cumulative):")
            pstats.Stats(svc["profile"], stream=sys.stdout).sort_stats("cumulative").print_stats(30)
        print()

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        print(f"## Over HTTP: {args.users} locust users, {args.seconds} s")
        say("starting the service")
        proc = start_server(args, tmp, port)
        try:
            wait_ready(proc, url, tmp)
            state0 = get(url + "/v1/state")
            cpu0 = cpu_seconds(proc.pid)
            print(f"({load()} before locust)")
            say(f"locust for {args.seconds} s")
            res = run_locust(args, tmp, url)
            cpu1 = cpu_seconds(proc.pid)
            print(f"({load()} after locust)")
            state1 = get(url + "/v1/state")
            metrics = get(url + "/v1/metrics")
            health = get(url + "/v1/health")
        finally:
            stop_server(proc)
        rows = res["rows"]
        dec = rows.get("/v1/decide")
        rew = rows.get("/v1/reward")
        agg = rows.get("Aggregated")
        if dec is None or agg is None:
            print("locust made no decide request:\n" + res["log"][-3000:])
            return 1
        decided = state1["decisions"] - state0["decisions"]
        rewarded = state1["rewards"] - state0["rewards"]
        decide_rps = float(dec["Requests/s"])
        decisions_per_s = decide_rps * args.batch
        rewards_per_s = decisions_per_s * rewarded / decided if decided else 0.0

        print()
        print(
            f"decisions/s {decisions_per_s:,.0f}   rewards/s {rewards_per_s:,.0f}   "
            f"requests/s {float(agg['Requests/s']):,.1f}   "
            f"(locust's rates; the server counted {decided:,} decisions and {rewarded:,} "
            f"rewards; target {TARGET:,} decisions/s)"
        )
        print("\nlatency per request, client side (locust), ms:")
        print(
            f"  {'endpoint':<12} {'requests':>9} {'fail':>5} {'req/s':>7} "
            f"{'p50':>6} {'p90':>6} {'p99':>6} {'max':>7}"
        )
        for name in ("/v1/decide", "/v1/reward", "Aggregated"):
            r = rows.get(name)
            if r is None:
                continue
            print(
                f"  {name:<12} {int(r['Request Count']):>9,} {int(r['Failure Count']):>5} "
                f"{float(r['Requests/s']):>7.1f} {r['50%']:>6} {r['90%']:>6} {r['99%']:>6} "
                f"{float(r['Max Response Time']):>7.0f}"
            )
        print(
            "\nlatency inside the service (/v1/metrics, last 10,000 calls, lock wait included), ms:"
        )
        for name, q in metrics["latency"].items():
            print(
                f"  {name:<12} p50 {q['p50_ms']:7.2f}   p90 {q['p90_ms']:7.2f}   "
                f"p99 {q['p99_ms']:7.2f}   max {q['max_ms']:8.2f}"
            )
        every = args.checkpoint_every
        n_ckpt = state1["records"] // every - state0["records"] // every
        last = metrics["last_checkpoint"] or {}
        print(
            f"  responses {metrics['responses']}, health {health['status']}; "
            f"{n_ckpt} checkpoint(s) during the run (one every {every:,} log records, "
            f"written in the background; the last took {last.get('seconds', float('nan')):.2f} s)"
        )
        n_fail = int(agg["Failure Count"])
        print(f"\nfailures: {n_fail}")
        for f in res["failures"][:5]:
            print(f"  {f.get('Method')} {f.get('Name')}: {f.get('Error')} x{f.get('Occurrences')}")
        server_cpu = cpu1 - cpu0
        print(
            f"CPU seconds while locust ran ({res['wall']:.0f} s, its start included): server "
            f"{server_cpu:.1f} ({server_cpu / res['wall']:.0%} of one core), locust "
            f"{res['cpu']:.1f} ({res['cpu'] / res['wall']:.0%}); "
            f"server CPU per 1,000 decisions {server_cpu / max(decided, 1) * 1e3 * 1e3:.1f} ms"
        )

        print("\n## Summary")
        print(
            f"HTTP {decisions_per_s:,.0f} decisions/s = "
            f"{decisions_per_s / pol['decisions_per_s']:.2f} x the in-process policy "
            f"({pol['decisions_per_s']:,.0f}/s), "
            f"{decisions_per_s / svc['decisions_per_s']:.2f} x the in-process service "
            f"({svc['decisions_per_s']:,.0f}/s); p99 decide {dec['99%']} ms, "
            f"reward {rew['99%'] if rew else '-'} ms (client side)"
        )
        verdict = "met" if decisions_per_s >= TARGET else "NOT met"
        print(f"target {TARGET:,} decisions/s in batches of {args.batch}: {verdict}")
        print(f"({load()} at the end)")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
