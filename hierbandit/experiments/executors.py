"""Where an experiment's cells run: in this process, in a local process pool, or on Dask.

Every executor offers the same three operations: :meth:`submit` starts ``fn(*args)`` and returns
a handle, :meth:`next_done` waits until one of the given handles has finished and returns it with
its result (raising the call's error, if any), and :meth:`cancel` drops calls not yet finished.
The runner submits each cell as soon as the cells it depends on have finished. The cells are pure
functions of their arguments, so the results do not depend on the executor.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from hierbandit._extras import require
from hierbandit._validation import check_positive_int

__all__ = ["DaskExecutor", "InProcessExecutor", "ProcessPoolCellExecutor", "make_executor"]


class _Call:
    """A call not yet run (the in-process executor's handle; hashed by identity)."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args


class InProcessExecutor:
    """Run the calls one after the other in this process, each when the runner asks for a
    finished one (so every result is saved before the next call starts)."""

    description = "in-process"

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Call:
        return _Call(fn, args)

    def next_done(self, handles: Sequence[_Call]) -> tuple[_Call, Any]:
        call = handles[0]
        return call, call.fn(*call.args)

    def cancel(self, handles: Sequence[_Call]) -> None:
        pass

    def close(self) -> None:
        pass


def _numba_cache_of_this_process() -> str | None:
    """numba's cache folder if this process set one (the command does), else ``None``."""
    numba = sys.modules.get("numba")
    folder = getattr(getattr(numba, "config", None), "CACHE_DIR", None)
    return str(folder) if folder else None


def _use_numba_cache(folder: str | None) -> None:
    """Worker initialiser: the parent's numba cache folder, before any kernel is imported."""
    if folder is not None:
        import numba

        numba.config.CACHE_DIR = folder


class ProcessPoolCellExecutor:
    """A local pool of ``workers`` processes (started with ``spawn``: no state leaks in).

    The workers keep compiled kernels where this process does (numba's cache folder, which the
    command sets when it starts). On an error the runner cancels the calls not yet started; the
    cells that finished before it are already saved.
    """

    def __init__(self, workers: int) -> None:
        self.workers = check_positive_int(workers, "workers")
        self.description = f"process pool ({self.workers} workers)"
        self._pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_use_numba_cache,
            initargs=(_numba_cache_of_this_process(),),
        )

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        return self._pool.submit(fn, *args)

    def next_done(self, handles: Sequence[Future]) -> tuple[Future, Any]:
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        fut = next(h for h in handles if h in done)  # the earliest submitted of those done
        return fut, fut.result()

    def cancel(self, handles: Sequence[Future]) -> None:
        for fut in handles:
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
        Client = require("dask.distributed", "experiments", "The Dask executor").Client

        self.address = address
        self.description = f"Dask scheduler {address}"
        self._done: Any = None
        try:
            self._client = Client(address, timeout=timeout, set_as_default=False)
        except OSError as exc:
            raise ValueError(f"scheduler: cannot connect to {address!r}: {exc}") from None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        from dask.distributed import as_completed

        fut = self._client.submit(fn, *args, pure=False)
        # one completion queue for every call in flight (this client is not the default one)
        if self._done is None or self._done.is_empty():
            self._done = as_completed([fut], loop=self._client.loop)
        else:
            self._done.add(fut)
        return fut

    def next_done(self, handles: Sequence[Any]) -> tuple[Any, Any]:
        fut = next(self._done)
        return fut, fut.result()

    def cancel(self, handles: Sequence[Any]) -> None:
        for fut in handles:
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
