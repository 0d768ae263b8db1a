"""Sufficient statistics of a log too large for memory, computed by Dask (``docs/outofcore.md``).

:func:`summarise_dask` reads a (hive-partitioned) Parquet directory or takes a Dask DataFrame,
reduces every partition to its :class:`~hierbandit.data.PartialStats` on the workers
(:func:`hierbandit.data.partial_stats`: only the cells present in the partition, never a dense
array), adds the partials up in a fixed tree on the workers, and returns the total as a
:class:`~hierbandit.data.LogSummary` to the caller. ``fit_prior`` does this for a directory or a
Dask DataFrame and fits from the summary with the same code as for a log in memory.

Where it runs
-------------
``scheduler=None`` starts a :class:`distributed.LocalCluster` for the call (one single-threaded
worker process per core, each with a memory limit) and closes it afterwards, also after an
error; ``scheduler="tcp://host:port"`` connects to a running scheduler (whose workers must have
``hierbandit`` installed) and leaves the cluster running; a :class:`distributed.Client` is used
as it is. Dask and distributed are imported by the call, so ``import hierbandit.bayes`` stays
light.

Memory
------
Partitions are submitted in order with at most ``window`` of them computing or waiting to be
combined at a time, and every ``split_every`` consecutive partials are combined as soon as they
are all done (then the combinations in turn, up to one). The statistics held at once are
therefore a few partials, each of the size of the distinct cells of a partition, whatever the
number of rows. The order of the additions is fixed by the partitions' order, so the same data
with the same partitioning give bit-identical statistics on every run.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hierbandit._extras import require
from hierbandit._progress import progress_task
from hierbandit._validation import check_positive_int
from hierbandit.data.summary import (
    LogSummary,
    PartialStats,
    combine_partials,
    partial_stats,
    resolve_columns,
    summary_from_partial,
)

__all__ = ["PROGRESS_LABEL", "is_dask_dataframe", "local_cluster", "summarise_dask"]

#: the label of the progress records (one unit per partition)
PROGRESS_LABEL = "sufficient statistics (dask)"

#: memory limit of each worker of the default local cluster (bytes)
WORKER_MEMORY_LIMIT = 2 * 1024**3


def is_dask_dataframe(data: Any) -> bool:
    """Whether ``data`` is a Dask DataFrame (checked without importing Dask)."""
    module = type(data).__module__
    if not module.startswith("dask"):
        return False
    import dask.dataframe as dd

    return isinstance(data, dd.DataFrame)


def local_cluster(n_workers: int | None = None) -> Any:
    """The default :class:`distributed.LocalCluster`: ``n_workers`` (default: the machine's
    cores) single-threaded worker processes, each limited to the smaller of
    :data:`WORKER_MEMORY_LIMIT` and an equal share of the machine's memory, no dashboard, logs
    only at ``ERROR``. The caller closes it."""
    distributed = require("distributed", "data", "Fitting a prior out of core with Dask")
    cores = os.cpu_count() or 1
    n_workers = cores if n_workers is None else check_positive_int(n_workers, "n_workers")
    try:
        import psutil

        share = psutil.virtual_memory().total // n_workers
    except Exception:  # pragma: no cover - psutil comes with distributed
        share = WORKER_MEMORY_LIMIT
    with warnings.catch_warnings():
        # no dashboard; the scheduler's HTTP server moves to a free port when 8787 is taken
        warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
        return distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=min(WORKER_MEMORY_LIMIT, share),
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )


def _read(data: Any) -> tuple[Any, str]:
    """The Dask DataFrame of ``data`` (a directory of Parquet files or a Dask DataFrame) and a
    description of its source."""
    dd = require("dask.dataframe", "data", "Fitting a prior out of core with Dask")
    if isinstance(data, dd.DataFrame):
        return data, "dask.DataFrame"
    if not isinstance(data, str | os.PathLike):
        raise TypeError(
            "data must be a Dask DataFrame or the path of a directory of (hive-partitioned) "
            f"Parquet files, got {type(data).__name__}"
        )
    path = Path(data).expanduser()
    if not path.exists():
        raise ValueError(f"data: directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise ValueError(
            f"data: {str(path)!r} is a file, not a directory of Parquet files; a single file "
            "is read in memory (hierbandit.data.read_log, or fit_prior with the path)"
        )
    files = [
        p
        for p in path.rglob("*")
        if p.is_file() and not p.name.startswith((".", "_")) and p.suffix != ".crc"
    ]
    if not files:
        raise ValueError(f"data: directory {str(path)!r} holds no Parquet files")
    require("pyarrow", "data", "Reading a Parquet directory")
    try:
        ddf = dd.read_parquet(str(path))
    except Exception as exc:
        raise ValueError(f"data: could not read Parquet directory {str(path)!r}: {exc}") from exc
    return ddf, str(path)


class _Connection:
    """The client of ``scheduler`` (see :func:`summarise_dask`), and what to close after."""

    def __init__(self, scheduler: Any) -> None:
        distributed = require("distributed", "data", "Fitting a prior out of core with Dask")
        self._close: list[Any] = []
        if scheduler is None:
            cluster = local_cluster()
            self._close.append(cluster)
            try:
                self.client = distributed.Client(cluster, set_as_default=False)
            except BaseException:
                cluster.close()
                raise
            self._close.insert(0, self.client)
        elif isinstance(scheduler, distributed.Client):
            self.client = scheduler
        elif isinstance(scheduler, str) and scheduler:
            try:
                self.client = distributed.Client(scheduler, timeout=30, set_as_default=False)
            except OSError as exc:
                raise ValueError(f"scheduler: cannot connect to {scheduler!r}: {exc}") from None
            self._close.append(self.client)
        else:
            raise TypeError(
                "scheduler must be None (a local cluster for the call), a scheduler address "
                f"such as 'tcp://host:8786', or a distributed.Client, got {scheduler!r}"
            )

    def close(self) -> None:
        for obj in self._close:
            with contextlib.suppress(Exception):  # closing what is already gone
                obj.close()


def _tree_reduce(
    client: Any, partitions: Sequence[Any], *, split_every: int, window: int, task: Any
) -> PartialStats:
    """Compute every partition's partial and add them up in a fixed tree (see the module)."""
    distributed = require("distributed", "data", "Fitting a prior out of core with Dask")
    n_parts = len(partitions)
    sizes = [n_parts]  # number of nodes at each level of the tree
    while sizes[-1] > 1:
        sizes.append(math.ceil(sizes[-1] / split_every))
    results: list[dict[int, Any]] = [{} for _ in sizes]  # finished futures per level
    where: dict[str, tuple[int, int]] = {}  # future key -> (level, index)
    pending: set[Any] = set()
    queue = distributed.as_completed(loop=client.loop)
    submitted = 0

    def track(fut: Any, level: int, index: int) -> None:
        where[fut.key] = (level, index)
        pending.add(fut)
        queue.add(fut)

    def submit_partitions() -> None:
        nonlocal submitted
        # only the partitions count: combinations wait for partitions, never the other way
        held = len(results[0]) + sum(1 for f in pending if where[f.key][0] == 0)
        while submitted < n_parts and held < window:
            track(client.compute(partitions[submitted]), 0, submitted)
            submitted += 1
            held += 1

    try:
        submit_partitions()
        for fut in queue:
            pending.discard(fut)
            if fut.status != "finished":
                fut.result()  # raises the task's error, as raised on the worker
            level, index = where.pop(fut.key)
            if level == 0:
                task.advance()
            if level == len(sizes) - 1:
                return fut.result()
            results[level][index] = fut
            group = index // split_every
            lo, hi = group * split_every, min((group + 1) * split_every, sizes[level])
            if all(i in results[level] for i in range(lo, hi)):
                members = [results[level].pop(i) for i in range(lo, hi)]
                track(client.submit(combine_partials, members, pure=False), level + 1, group)
            submit_partitions()
        raise RuntimeError("the reduction ended without a result")  # pragma: no cover
    except BaseException:
        for fut in pending:
            fut.cancel()
        raise


def summarise_dask(
    data: Any,
    *,
    instance: str = "instance",
    arm: str | None = "arm",
    reward: str = "reward",
    features: Sequence[str] | None = None,
    scheduler: Any = None,
    split_every: int = 4,
    window: int | None = None,
) -> LogSummary:
    """The :class:`~hierbandit.data.LogSummary` of a log too large for memory, computed by Dask.

    Parameters
    ----------
    data : str, path or dask.dataframe.DataFrame
        A directory of Parquet files, hive-partitioned or not (``arm=3/``, ``date=2024-01-01/``:
        a partition key comes back as a categorical column and may be any of the columns), read
        with :func:`dask.dataframe.read_parquet`; or a Dask DataFrame.
    instance, arm, reward, features
        Column names, as for :func:`~hierbandit.data.read_log`: ``arm`` may be absent (the
        default name) for a single-arm log; ``features=None`` takes every other column of
        numeric dtype (categorical columns, such as a ``date`` partition key, are left out).
        Instance and arm ids may be non-negative integers or strings (string, object or
        categorical columns, an ``arm=banner_a/`` partition key): each partition keeps the
        strings it holds once, the partials are merged by the strings themselves (exactly, no
        hashing to integers), and the summary's labels are sorted as ``read_log`` sorts them.
    scheduler : None, str or distributed.Client
        ``None`` (default): a local cluster started for this call and closed after it
        (:func:`local_cluster`); a scheduler address (``"tcp://host:8786"``): that cluster,
        left running; a client: used as it is.
    split_every : int, default 4
        How many partials one combination adds up.
    window : int, optional
        At most this many partitions are computing or waiting to be combined at a time
        (default: twice the workers' threads, at least ``split_every``); it bounds the memory.

    Returns
    -------
    LogSummary
        With ``source`` the directory (or ``"dask.DataFrame"``), and ``data_hash`` the
        order-independent hash of the rows (:mod:`hierbandit.data.summary`).

    Raises
    ------
    ValueError, TypeError
        Naming the argument or column: a path that does not exist, is a file or holds no
        Parquet files; missing columns (with the available ones); a role or feature column of
        a dtype that cannot hold numbers (or, for the ids, strings); and, from the partition
        where they occur, ids that are neither non-negative integers nor strings (or mix them,
        within a partition or across partitions) and rewards or features that are not finite
        numbers; an empty log. Progress is reported as ``hierbandit.progress`` records labelled
        :data:`PROGRESS_LABEL`, one unit per partition.
    """
    split_every = check_positive_int(split_every, "split_every", minimum=2)
    if window is not None:
        window = check_positive_int(window, "window")
    ddf, source = _read(data)
    cols = resolve_columns(ddf.dtypes, instance=instance, arm=arm, reward=reward, features=features)
    ddf = ddf[cols.used]
    partitions = ddf.to_delayed(optimize_graph=True)
    if not partitions:
        raise ValueError("data is empty (0 partitions)")
    dask = require("dask", "data", "Fitting a prior out of core with Dask")
    kwargs = {
        "instance": cols.instance,
        "arm": cols.arm,
        "reward": cols.reward,
        "features": list(cols.features),
    }
    work = [
        dask.delayed(partial_stats, pure=True)(part, partition=i, **kwargs)
        for i, part in enumerate(partitions)
    ]
    conn = _Connection(scheduler)
    try:
        threads = sum(conn.client.nthreads().values()) or 1
        win = window if window is not None else max(2 * threads, split_every)
        with progress_task(PROGRESS_LABEL, total=len(work)) as task:
            total = _tree_reduce(
                conn.client, work, split_every=split_every, window=max(win, 1), task=task
            )
    finally:
        conn.close()
    if total.n_rows == 0:
        raise ValueError(f"data is empty (0 rows; columns {cols.used})")
    return summary_from_partial(
        total,
        features=cols.features,
        instance_column=cols.instance,
        arm_column=cols.arm,
        reward_column=cols.reward,
        source=source,
        ignored_columns=cols.ignored,
    )
