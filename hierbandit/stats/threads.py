"""Run a compiled loop over samples on several threads.

The d×d kernels of :mod:`hierbandit.stats.kernels` (and the package's other numba kernels) are
compiled with ``nogil=True``, so Python threads run them in parallel. A loop over independent
samples (posterior draws, seeds) is split into one contiguous slice per thread, each slice writes
its own part of the output, and the result is the same, bit for bit, whatever the number of
threads. Python threads rather than numba's ``parallel=True``: no OpenMP runtime in the process
(which a later ``fork`` may not survive) and no restriction on calling the kernels from several
threads at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from itertools import pairwise
from typing import Any

from hierbandit._progress import progress_task
from hierbandit._validation import check_positive_int

__all__ = ["available_threads", "beside", "over_threads", "over_threads_now", "serving_threads"]


def available_threads() -> int:
    """The number of cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - macOS and Windows
        return max(os.cpu_count() or 1, 1)


def serving_threads() -> int:
    """Threads of a batch of requests (:func:`over_threads_now`): :func:`available_threads`,
    at most ``NUMBA_NUM_THREADS`` (``numba.config.NUMBA_NUM_THREADS``, read at each call, so
    that ``NUMBA_NUM_THREADS=1`` keeps serving on the calling thread, as on a machine whose
    other cores are busy)."""
    import numba

    return max(min(available_threads(), int(numba.config.NUMBA_NUM_THREADS)), 1)


#: how many slices a loop with a progress label is cut into, to report its progress
PROGRESS_SLICES = 40


def over_threads(
    work: Callable[[int, int], None],
    n: int,
    threads: int | None = None,
    *,
    min_chunk: int = 1,
    label: str | None = None,
) -> None:
    """Call ``work(start, stop)`` on contiguous slices covering ``range(n)``, one per thread
    (with a ``label``: :data:`PROGRESS_SLICES` slices shared by the threads, and progress
    reported as ``hierbandit.progress`` records, in items, with the time left).

    Parameters
    ----------
    work : callable
        ``work(start, stop)`` processes items ``start <= i < stop``; it must release the GIL
        (a ``nogil`` numba kernel) for the threads to overlap, and must write only the items of
        its slice.
    n : int
        Number of items.
    threads : int, optional
        Number of threads (default :func:`available_threads`); never more than ``n // min_chunk``.
    min_chunk : int
        Fewest items worth a thread (or a slice) of their own.
    label : str, optional
        Name of the task in the progress records.

    Raises
    ------
    Exception
        The first exception any slice raised, after every slice has finished.
    """
    n, min_chunk, parts = _parts(n, threads, min_chunk)
    if label is None:
        _run(work, _slices(n, parts), parts, lambda k: None)
        return
    with progress_task(label, total=n) as task:
        _run(
            work, _slices(n, max(min(PROGRESS_SLICES, n // min_chunk), parts)), parts, task.advance
        )


def _parts(n: int, threads: int | None, min_chunk: int) -> tuple[int, int, int]:
    """The checked ``n`` and ``min_chunk``, and the number of slices: ``threads`` (default
    :func:`available_threads`), but at least ``min_chunk`` items each, and at least one."""
    n = check_positive_int(n, "n", minimum=0)
    threads = available_threads() if threads is None else check_positive_int(threads, "threads")
    min_chunk = check_positive_int(min_chunk, "min_chunk")
    return n, min_chunk, max(min(threads, n // min_chunk), 1)


def _slices(n: int, count: int) -> list[tuple[int, int]]:
    bounds = [n * i // count for i in range(count + 1)]
    return list(pairwise(bounds))


def _run(
    work: Callable[[int, int], None],
    pieces: list[tuple[int, int]],
    parts: int,
    advance: Callable[[int], None],
) -> None:
    """Run the slices on ``parts`` threads (in this one when 1), telling ``advance`` the number
    of items each finished slice held; raise the first error once every slice is done."""
    if parts == 1:
        for lo, hi in pieces:
            work(lo, hi)
            advance(hi - lo)
        return
    errors = []
    with ThreadPoolExecutor(max_workers=parts) as pool:
        futures = {pool.submit(work, lo, hi): hi - lo for lo, hi in pieces}
        for future in as_completed(futures):
            if future.exception() is not None:
                errors.append(future.exception())
            advance(futures[future])
    if errors:
        raise errors[0]


#: the helper threads of :func:`over_threads_now`, started on first use and kept
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < workers:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hierbandit")
        return _POOL


def over_threads_now(
    work: Callable[[int, int], None], n: int, threads: int | None = None, *, min_chunk: int = 1
) -> None:
    """:func:`over_threads` for short calls made often (a batch of requests served in a few
    milliseconds): the same contiguous slices, but run by helper threads kept for the life of
    the process, the calling thread taking the first slice, so that no thread is started per
    call (starting a pool cost about 0.1 ms a call). ``work`` must not call this function
    itself (its helpers would wait for one another).

    Parameters
    ----------
    work, n, threads, min_chunk
        As in :func:`over_threads`.

    Raises
    ------
    Exception
        The first exception any slice raised, after every slice has finished.
    """
    n, min_chunk, parts = _parts(n, threads, min_chunk)
    pieces = _slices(n, parts)
    if parts == 1:
        for lo, hi in pieces:
            work(lo, hi)
        return
    pool = _pool(parts - 1)
    futures = [pool.submit(work, lo, hi) for lo, hi in pieces[1:]]
    errors = []
    try:
        work(*pieces[0])
    except Exception as exc:  # re-raised once the helpers are done
        errors.append(exc)
    for future in futures:
        if future.exception() is not None:
            errors.append(future.exception())
    if errors:
        raise errors[0]


def beside(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
    """Run ``fn(*args, **kwargs)`` on a helper thread of :func:`over_threads_now` while the
    caller goes on (work that releases the GIL: a NumPy generator filling an array, a ``nogil``
    kernel); the caller must wait for the returned future before it uses the result."""
    return _pool(1).submit(fn, *args, **kwargs)
