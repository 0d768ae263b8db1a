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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from hierbandit._validation import check_positive_int

__all__ = ["available_threads", "over_threads"]


def available_threads() -> int:
    """The number of cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - macOS and Windows
        return max(os.cpu_count() or 1, 1)


def over_threads(
    work: Callable[[int, int], None], n: int, threads: int | None = None, *, min_chunk: int = 1
) -> None:
    """Call ``work(start, stop)`` on contiguous slices covering ``range(n)``, one per thread.

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
        Fewest items worth a thread of their own.

    Raises
    ------
    Exception
        The first exception any slice raised, after every slice has finished.
    """
    n = check_positive_int(n, "n", minimum=0)
    threads = available_threads() if threads is None else check_positive_int(threads, "threads")
    min_chunk = check_positive_int(min_chunk, "min_chunk")
    parts = max(min(threads, n // min_chunk), 1)
    bounds = [n * i // parts for i in range(parts + 1)]
    if parts == 1:
        work(0, n)
        return
    with ThreadPoolExecutor(max_workers=parts) as pool:
        futures = [pool.submit(work, bounds[i], bounds[i + 1]) for i in range(parts)]
    for f in futures:
        f.result()
