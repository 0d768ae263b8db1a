"""Progress of long computations, reported as log records that a front end may render.

The experiments never draw progress bars or print: a long loop reports its progress as ``DEBUG``
records of the ``hierbandit.progress`` logger, each carrying ``record.progress = (done, total,
label)``; ``total`` is ``None`` while the amount of work is unknown, and ``done == total`` marks
the task finished. Events worth a line (a step that finished, a number a user waits for) are
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

    def _report(self, done: int, total: int | None) -> None:
        if _logger.isEnabledFor(logging.DEBUG):
            _logger.debug(
                "%s: %s/%s",
                self.label,
                done,
                "?" if total is None else total,
                extra={"progress": (done, total, self.label)},
            )

    def advance(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.done += n
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
        end = self.done if self.total is None else self.total
        self._report(end, end)


def progress_task(label: str, total: int | None = None) -> ProgressTask:
    """A :class:`ProgressTask` (a context manager) for ``total`` units of work."""
    return ProgressTask(label, total)
