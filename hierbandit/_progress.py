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
record (progress bars and lines) with rich; in a notebook or a script, :func:`show_progress`
(``hierbandit.show_progress()``) attaches :class:`ProgressLine`, which keeps one line per task up
to date on standard error (a carriage return rewrites it, in a terminal and in Jupyter alike,
with no widget library); any other :class:`logging.Handler` can read ``record.progress``.

Usage::

    with progress_task("simulate", total=n) as task:
        for ...:
            ...
            task.advance()
"""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = [
    "PROGRESS_LOGGER",
    "ProgressLine",
    "ProgressTask",
    "format_duration",
    "progress_task",
    "show_progress",
]

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


def format_duration(seconds: float) -> str:
    """Seconds as ``m:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressLine(logging.Handler):
    """Shows the progress records as one line per task, rewritten in place: the label, the
    count, the percentage, the time elapsed and the estimate of the time left, e.g.
    ``conditional draws: 1,200/2,000 (60%) 0:07 elapsed, about 0:05 left``.

    A carriage return rewrites the line (a terminal and Jupyter both honour it); a finished task
    ends its line. Updates of the same task come at most every ``interval`` seconds, except the
    first and the last; a task is shown once it is under way.
    """

    def __init__(self, stream: TextIO | None = None, *, interval: float = 0.5) -> None:
        super().__init__(level=logging.DEBUG)
        self.stream = stream
        self.interval = float(interval)
        self._started: dict[str, float] = {}
        self._shown: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        progress = getattr(record, "progress", None)
        if progress is None:
            return
        try:
            done, total, label = progress
            now = time.perf_counter()
            finished = total is not None and done >= total
            if finished and label not in self._started:
                return  # nothing was under way: a repeated end, or no work at all
            start = self._started.setdefault(label, now)
            if not finished and now - self._shown.get(label, -1e300) < self.interval:
                return
            self._shown[label] = now
            text = f"{label}: {done:,}" + ("" if total is None else f"/{total:,}")
            if total:
                text += f" ({100 * done / total:.0f}%)"
            text += f" {format_duration(now - start)} elapsed"
            if not finished and total is not None:
                left = getattr(record, "remaining", None)
                text += (
                    ", estimating the time left"
                    if left is None
                    else f", about {format_duration(left)} left"
                )
            stream = self.stream if self.stream is not None else sys.stderr
            stream.write("\r" + text.ljust(79) + ("\n" if finished else ""))
            stream.flush()
            if finished:
                del self._started[label], self._shown[label]
        except Exception:  # a display problem must never stop the computation
            self.handleError(record)


def show_progress(enable: bool = True, *, stream: TextIO | None = None) -> ProgressLine | None:
    """Show the package's progress (long fits, draws, experiments) as lines on ``stream``
    (standard error by default), in a notebook or a script: ``hierbandit.show_progress()``.

    Attaches one :class:`ProgressLine` to the ``hierbandit.progress`` logger (replacing one
    attached earlier) and returns it; ``show_progress(False)`` removes it. MCMC samplers show
    their own bars (``progressbar=``); this shows the package's own steps.
    """
    logger = logging.getLogger(PROGRESS_LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, ProgressLine)]:
        logger.removeHandler(handler)
    if not enable:
        return None
    handler = ProgressLine(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler
