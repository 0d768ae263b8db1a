"""Where an experiment's cells run: in this process, in a local process pool, or on Dask.

Every executor offers the same operation, :meth:`map_unordered`: call ``fn(*args)`` for every
argument tuple and yield ``(index, result)`` as each call finishes, in completion order. The
cells are pure functions of their arguments, so the results do not depend on the executor.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from .._validation import check_positive_int

__all__ = ["DaskExecutor", "InProcessExecutor", "ProcessPoolCellExecutor", "make_executor"]


class InProcessExecutor:
    """Run the calls one after the other in this process."""

    description = "in-process"

    def map_unordered(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]
    ) -> Iterator[tuple[int, Any]]:
        for i, a in enumerate(args):
            yield i, fn(*a)

    def close(self) -> None:
        pass


class ProcessPoolCellExecutor:
    """A local pool of ``workers`` processes (started with ``spawn``: no state leaks in).

    On an error the calls not yet started are cancelled and the error is raised; the calls that
    finished before it have already been yielded.
    """

    def __init__(self, workers: int) -> None:
        self.workers = check_positive_int(workers, "workers")
        self.description = f"process pool ({self.workers} workers)"
        self._pool = ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")
        )

    def map_unordered(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]
    ) -> Iterator[tuple[int, Any]]:
        futures = {self._pool.submit(fn, *a): i for i, a in enumerate(args)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield futures[fut], fut.result()
        finally:
            for fut in pending:
                fut.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """The workers of a running Dask distributed scheduler at ``address``.

    The workers must have ``hierbandit`` installed (the same version). The client connects on
    construction and is closed by :meth:`close`; the cluster itself is left running.
    """

    def __init__(self, address: str, *, timeout: float = 30.0) -> None:
        if not isinstance(address, str) or not address:
            raise ValueError(f"scheduler must be a scheduler address string, got {address!r}")
        from dask.distributed import Client

        self.address = address
        self.description = f"Dask scheduler {address}"
        try:
            self._client = Client(address, timeout=timeout, set_as_default=False)
        except OSError as exc:
            raise ValueError(f"scheduler: cannot connect to {address!r}: {exc}") from None

    def map_unordered(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]
    ) -> Iterator[tuple[int, Any]]:
        from dask.distributed import as_completed

        futures = [self._client.submit(fn, *a, pure=False) for a in args]
        index = {fut.key: i for i, fut in enumerate(futures)}
        try:
            for fut in as_completed(futures, loop=self._client.loop):
                yield index[fut.key], fut.result()
        finally:
            for fut in futures:
                if not fut.done():
                    fut.cancel()

    def close(self) -> None:
        self._client.close()


def make_executor(workers: int = 1, scheduler: str | None = None) -> Any:
    """The executor for ``--workers`` / ``--scheduler`` (in-process when ``workers == 1``)."""
    workers = check_positive_int(workers, "workers")
    if scheduler is not None:
        if workers != 1:
            raise ValueError("give either workers (a local pool) or scheduler (Dask), not both")
        return DaskExecutor(scheduler)
    if workers == 1:
        return InProcessExecutor()
    return ProcessPoolCellExecutor(workers)
