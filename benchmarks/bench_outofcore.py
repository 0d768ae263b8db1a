"""Fitting a prior out of core with Dask (issue "Fit priors on real logs at real size").

Writes a hive-partitioned Parquet log of ``--rows`` rows (default 10⁸) to ``--out`` (one
``date=…/part-0.parquet`` file of ``--chunk`` rows per day, written chunk by chunk so that the
generation holds one chunk at a time), unless the directory is already complete; then times
``fit_prior(path, method=...)`` for eb and ml through the default local Dask cluster
(``scheduler=None``: one worker process per core), and reports the wall time and the peak memory
of the whole fit: the sum of the resident memory of this process and all its children (the
cluster's scheduler runs in this process, its workers are children), sampled every 0.2 s by a
background thread. It also fits a smaller log of the same kind (``--compare-rows``) both in
memory and out of core and reports the largest difference of the estimates.

The synthetic log is the one of ``bench_bayes_scale.py``: K arms, ``--users`` instances, d = 3
features (an intercept column ``one`` and two standard normal features), β_{k0} ~ N(0, I),
β_{k,j} ~ N(β_{k0}, 0.5 I + 0.1), noise sd 1; instance and arm drawn uniformly per row.

Run: ``.venv/bin/python benchmarks/bench_outofcore.py [--rows 100000000] [--users 100000]
[--out /tmp/hierbandit-outofcore] [--methods eb,ml] [--compare-rows 1000000]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

K, D = 5, 3
COLUMNS = {"instance": "user", "arm": "arm", "reward": "reward", "features": ["one", "x1", "x2"]}


def generate(path: Path, rows: int, users: int, chunk: int, seed: int = 0) -> Path:
    """Write the log to ``path`` (a directory of ``date=…`` partitions), chunk by chunk; skip
    when ``path`` is complete (it holds ``_SUCCESS``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if (path / "_SUCCESS").exists():
        return path
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    g = np.random.default_rng(seed)
    beta0 = g.normal(size=(K, D))
    L = np.linalg.cholesky(0.5 * np.eye(D) + 0.1)
    beta = beta0[:, None, :] + g.normal(size=(K, users, D)) @ L.T
    day0 = np.datetime64("2024-01-01")
    for i, start in enumerate(range(0, rows, chunk)):
        m = min(chunk, rows - start)
        inst = g.integers(0, users, m)
        arm = g.integers(0, K, m)
        x = g.normal(size=(m, D - 1))
        b = beta[arm, inst]
        y = b[:, 0] + np.einsum("rd,rd->r", x, b[:, 1:]) + g.normal(size=m)
        table = pa.table(
            {
                "user": inst,
                "arm": arm,
                "reward": y,
                "one": np.ones(m),
                "x1": x[:, 0],
                "x2": x[:, 1],
            }
        )
        part = tmp / f"date={day0 + np.timedelta64(i, 'D')}"
        part.mkdir(parents=True)
        pq.write_table(table, part / "part-0.parquet")
    (tmp / "_SUCCESS").touch()
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


class PeakMemory:
    """The peak of the summed RSS of this process and all its children, sampled every 0.2 s."""

    def __init__(self, interval: float = 0.2) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        import psutil

        total = self._proc.memory_info().rss
        for child in self._proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += child.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakMemory:
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def measure(what: str, fn) -> tuple[dict, object]:
    t0 = time.perf_counter()
    with PeakMemory() as mem:
        out = fn()
    wall = time.perf_counter() - t0
    return {"what": what, "wall s": round(wall, 1), "peak GB": round(mem.peak / 1e9, 2)}, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=1_000_000, help="rows per file (per day)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/hierbandit-outofcore"))
    parser.add_argument("--methods", default="eb,ml")
    parser.add_argument("--compare-rows", type=int, default=1_000_000)
    parser.add_argument("--compare-users", type=int, default=10_000)
    args = parser.parse_args()

    from hierbandit.bayes import fit_prior
    from hierbandit.bayes.outofcore import summarise_dask
    from hierbandit.data import read_log

    print(f"machine: {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    big = args.out / f"rows={args.rows}-users={args.users}"
    t0 = time.perf_counter()
    generate(big, args.rows, args.users, args.chunk)
    print(f"log: {big} ({time.perf_counter() - t0:.0f} s to generate or find)")

    rows = []
    row, summary = measure(
        "statistics only (summarise_dask)", lambda: summarise_dask(big, **COLUMNS)
    )
    rows.append({**row, "rows": summary.n_rows, "N": summary.n_instances})
    for method in args.methods.split(","):
        row, prior = measure(
            f"fit_prior(path, method={method!r})",
            lambda m=method: fit_prior(big, method=m, **COLUMNS),
        )
        rows.append({**row, "rows": prior.dataset.attrs["n_rows"], "N": summary.n_instances})
    print(f"load average after: {os.getloadavg()}")
    print(pd.DataFrame(rows).to_markdown(index=False))

    # the same kind of log at a size that fits in memory: in memory vs out of core
    small = args.out / f"rows={args.compare_rows}-users={args.compare_users}"
    generate(small, args.compare_rows, args.compare_users, max(args.compare_rows // 8, 1), seed=1)
    frame = pd.read_parquet(small).drop(columns="date")
    log = read_log(frame, **COLUMNS)
    cmp = []
    for method in args.methods.split(","):
        t0 = time.perf_counter()
        mem = fit_prior(log, method=method)
        t_mem = time.perf_counter() - t0
        t0 = time.perf_counter()
        dask = fit_prior(small, method=method, **COLUMNS)
        t_dask = time.perf_counter() - t0
        diff = max(
            float(np.max(np.abs(mem.dataset[v].values - dask.dataset[v].values)))
            for v in ("shared_mean", "shared_cov", "Sigma", "sigma2")
        )
        cmp.append(
            {
                "method": method,
                "rows": log.n_rows,
                "N": log.n_instances,
                "in memory s": round(t_mem, 1),
                "out of core s": round(t_dask, 1),
                "max |difference|": f"{diff:.1e}",
            }
        )
    print(pd.DataFrame(cmp).to_markdown(index=False))


if __name__ == "__main__":
    main()
