"""What the command shows while it works: the library's log records, rendered with rich.

The library reports events as log records of the ``hierbandit`` loggers and progress as records
of ``hierbandit.progress`` carrying ``record.progress = (done, total, label)``
(:mod:`hierbandit.experiments.progress`). :class:`Renderer` is the one handler that turns them
into lines and progress bars (with the time elapsed and the library's estimate of the time
left) on standard error; the command attaches it when it starts
(:func:`start_rendering`) and detaches it when it ends.
"""

from __future__ import annotations

import logging
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TimeElapsedColumn,
)
from rich.text import Text

from hierbandit.experiments.progress import PROGRESS_LOGGER, format_duration

__all__ = ["ROOT_LOGGER", "Renderer", "TimeLeftColumn", "start_rendering"]

#: the logger whose records the command shows
ROOT_LOGGER = "hierbandit"


class TimeLeftColumn(ProgressColumn):
    """The library's estimate of the time left (``record.remaining``), not rich's own: the
    library's rate leaves out start-up such as compiling, which a rate over the whole task would
    spread over the rest. Blank while the total is unknown, "…" while there is no rate yet."""

    def render(self, task: Task) -> Text:
        if task.total is None or task.finished:
            return Text("")
        left = task.fields.get("remaining")
        if left is None:
            return Text("…", style="progress.remaining")
        return Text(f"{format_duration(left)} left", style="progress.remaining")


class Renderer(logging.Handler):
    """Lines for ordinary records (``DEBUG`` ones only when ``verbose``), a progress bar per
    running task for progress records (unless ``show_progress`` is off).

    A task's bar is created at its first record and updated by the next. A finished task whose
    amount of work was unknown, or that finishes while another task still runs (a cell's
    simulation inside the sweep), is removed; the last one to finish stays on screen.
    """

    def __init__(self, console: Console | None = None, *, verbose: bool = False) -> None:
        super().__init__(level=logging.DEBUG)
        self.console = console if console is not None else Console(stderr=True)
        self.verbose = verbose
        self.show_progress = True
        self._bars: Progress | None = None
        self._tasks: dict[str, tuple[Any, bool]] = {}  # label → (task id, unknown total)
        self._saved: tuple[int, bool, int] | None = None

    # ------------------------------------------------------------------ records
    def emit(self, record: logging.LogRecord) -> None:
        try:
            progress = getattr(record, "progress", None)
            if progress is not None:
                if self.show_progress:
                    self._update(*progress, remaining=getattr(record, "remaining", None))
            elif record.levelno >= logging.INFO or self.verbose:
                self._line(record)
        except Exception:  # a display problem must never stop the computation
            self.handleError(record)

    def _line(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _update(
        self, done: int, total: int | None, label: str, *, remaining: float | None = None
    ) -> None:
        finished = total is not None and done >= total
        entry = self._tasks.get(label)
        if entry is None:
            if finished:  # nothing to do, or a task already reported as done
                return
            bars = self._start()
            task = bars.add_task(escape(label), total=total, completed=done, remaining=remaining)
            entry = (task, total is None)
            self._tasks[label] = entry
            return
        bars = self._start()
        task, unknown = entry
        bars.update(task, completed=done, total=total, remaining=remaining)
        if finished:
            del self._tasks[label]
            if unknown or self._tasks:
                bars.remove_task(task)

    def _start(self) -> Progress:
        if self._bars is None:
            self._bars = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeLeftColumn(),
                console=self.console,
                transient=False,
            )
            self._bars.start()
        return self._bars

    # ------------------------------------------------------------------ attaching
    def attach(self) -> Renderer:
        """Show the ``hierbandit`` loggers' records here (``DEBUG`` ones when ``verbose``)."""
        root = logging.getLogger(ROOT_LOGGER)
        progress = logging.getLogger(PROGRESS_LOGGER)
        self._saved = (root.level, root.propagate, progress.level)
        root.setLevel(logging.DEBUG if self.verbose else logging.INFO)
        root.propagate = False  # shown here, not again by a handler of the root logger
        progress.setLevel(logging.DEBUG)
        root.addHandler(self)
        return self

    def detach(self) -> None:
        """Restore the loggers as :meth:`attach` found them and stop the display."""
        root = logging.getLogger(ROOT_LOGGER)
        root.removeHandler(self)
        saved = self._saved
        if saved is not None:
            root.setLevel(saved[0])
            root.propagate = saved[1]
            logging.getLogger(PROGRESS_LOGGER).setLevel(saved[2])
            self._saved = None
        self.close()

    def close(self) -> None:
        """Stop the progress display (its last state stays on screen)."""
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
        self._tasks.clear()
        super().close()


def start_rendering(*, verbose: bool = False) -> Renderer:
    """A :class:`Renderer` attached to the ``hierbandit`` loggers (``detach()`` it at the end)."""
    return Renderer(verbose=verbose).attach()
