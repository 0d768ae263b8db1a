"""Progress of long computations, reported as log records that a front end may render.

Library code never draws progress bars or prints: a long loop (an experiment, the direct NUTS
driver) reports its progress as ``DEBUG`` records of the ``hierbandit.progress`` logger, each
carrying ``record.progress = (done, total, label)``; ``total`` is ``None`` while the amount of
work is unknown, and ``done == total`` marks the task finished. With a known total each record
also carries ``record.remaining``: an estimate of the seconds left, the rate of the work since
the first :meth:`ProgressTask.advance` (whose time may include start-up such as compiling)
applied to the work left; ``None`` before there is a rate, ``0.0`` at the end. Events worth a line (a step that finished, a number a user waits for) are
ordinary ``INFO`` records of the module's own logger (``logging.getLogger(__name__)``).

Nothing is shown unless a handler asks for it: the ``hierbandit`` command renders both kinds of
record (progress bars and lines) with rich; a script can attach any :class:`logging.Handler`, or
read ``record.progress``.

Usage::

    with progress_task("simulate", total=n) as task:
        for ...:
            ...
            task.advance()
"""

from __future__ import annotations

import logging
import time
from types import TracebackType

__all__ = ["PROGRESS_LOGGER", "ProgressTask", "progress_task"]

#: name of the logger that carries the progress records
PROGRESS_LOGGER = "hierbandit.progress"

_logger = logging.getLogger(PROGRESS_LOGGER)


class ProgressTask:
    """One task's progress: ``done`` of ``total`` units of work (``total=None``: unknown).

    Entering it reports ``(0, total)``, :meth:`advance` the new count, and leaving it
    ``(n, n)`` (finished, also after an error), with ``n = total`` or the count reached.
    """

    def __init__(self, label: str, total: int | None = None) -> None:
        self.label = str(label)
        self.total = None if total is None else int(total)
        self.done = 0
        self._first: tuple[int, float] | None = None  # (done, time) at the first advance

    def _remaining(self, done: int, total: int) -> float | None:
        """Seconds left at the rate since the first advance (``None`` before there is one)."""
        if done >= total:
            return 0.0
        if self._first is None or self._first[0] == done:
            return None
        done0, t0 = self._first
        return (time.perf_counter() - t0) / (done - done0) * (total - done)

    def _report(self, done: int, total: int | None) -> None:
        if not _logger.isEnabledFor(logging.DEBUG):
            return
        if total is None:
            _logger.debug(
                "%s: %s/?", self.label, done, extra={"progress": (done, None, self.label)}
            )
            return
        remaining = self._remaining(done, total)
        left = "estimating the time left" if remaining is None else f"about {remaining:.0f} s left"
        _logger.debug(
            "%s: %s/%s, %s",
            self.label,
            done,
            total,
            left,
            extra={"progress": (done, total, self.label), "remaining": remaining},
        )

    def advance(self, n: int = 1) -> None:
        """``n`` more units done (at most the total, when it is known)."""
        self.done += n
        if self.total is not None:
            self.done = min(self.done, self.total)
        if self._first is None:
            self._first = (self.done, time.perf_counter())
        self._report(self.done, self.total)

    def __enter__(self) -> ProgressTask:
        self._report(self.done, self.total)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.total is not None:
            self.done = self.total
        self._report(self.done, self.done)


def progress_task(label: str, total: int | None = None) -> ProgressTask:
    """A :class:`ProgressTask` (a context manager) for ``total`` units of work."""
    return ProgressTask(label, total)
