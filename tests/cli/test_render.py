"""The command's one renderer of the library's log records: lines, and progress bars fed by the
``hierbandit.progress`` records (the library itself never prints)."""

from __future__ import annotations

import io
import logging

from rich.console import Console
from typer.testing import CliRunner

from hierbandit.cli._render import Renderer
from hierbandit.cli.main import app
from hierbandit.experiments.progress import PROGRESS_LOGGER, progress_task

TINY = ["--set", 'settings=["fig2-sparse"]', "--set", 'policies=["LinUCB"]',
        "--set", "horizon=20", "--seeds", "2", "--set", "seeds_per_cell=1"]  # fmt: skip


def _renderer(verbose: bool = False) -> tuple[Renderer, io.StringIO]:
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, force_terminal=False)
    return Renderer(console, verbose=verbose).attach(), buffer


def test_lines_and_bars():
    log = logging.getLogger("hierbandit.experiments.somewhere")
    renderer, buffer = _renderer()
    try:
        log.info("[1/9] a step with [brackets]")
        log.debug("a detail")
        log.warning("careful")
        with progress_task("outer", total=2) as outer:
            with progress_task("inner", total=3) as inner:
                for _ in range(3):
                    inner.advance()
            outer.advance(2)
        with progress_task("unknown amount"):
            pass
    finally:
        renderer.detach()
    text = buffer.getvalue()
    assert "[1/9] a step with [brackets]" in text and "warning: careful" in text
    assert "a detail" not in text
    # the finished nested and indeterminate tasks are removed; the last one stays
    assert "outer" in text and "2/2" in text
    assert "inner" not in text and "unknown amount" not in text


def test_detach_restores_the_loggers():
    root, progress = logging.getLogger("hierbandit"), logging.getLogger(PROGRESS_LOGGER)
    before = (root.level, root.propagate, progress.level, list(root.handlers))
    renderer, buffer = _renderer(verbose=True)
    logging.getLogger("hierbandit.x").debug("shown when verbose")
    renderer.detach()
    assert "shown when verbose" in buffer.getvalue()
    assert (root.level, root.propagate, progress.level, list(root.handlers)) == before


def test_the_command_renders_progress_unless_told_not_to(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["experiment", "run", "ebm-synthetic", *TINY, "--out",
                              str(tmp_path / "a")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "ebm-synthetic (in-process)" in res.output and "2/2" in res.output
    res = runner.invoke(app, ["experiment", "run", "ebm-synthetic", *TINY, "--out",
                              str(tmp_path / "b"), "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "ebm-synthetic (in-process)" not in res.output
    assert not logging.getLogger("hierbandit").handlers  # detached when the command ended


def test_verbose_shows_the_detailed_lines(tmp_path):
    sets = ["--set", "seeds=1", "--set", 'parts=["insufficient"]', "--set",
            "insufficient_sizes=[400]", "--set", "sweep_sizes=[400]", "--set", "n_users=20",
            "--set", "n_test=50", "--set", "grid_points=3",
            "--set", 'algorithms=["Off-CLUB", "LinUCB_IND"]']  # fmt: skip
    res = CliRunner().invoke(
        app, ["-v", "experiment", "run", "offline", *sets, "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    assert "synthetic/equal |D|=400 seed 0: Off-CLUB=" in res.output


def test_bars_show_the_librarys_estimate_of_the_time_left(monkeypatch):
    """The bar's "left" column is ``record.remaining`` (the rate since the first step, so a
    slow start such as compiling does not count), as m:ss or h:mm:ss, and "…" before there is
    a rate. The last state of an unfinished bar is what a non-terminal console keeps."""
    import hierbandit._progress as progress_module

    def shown(steps: int) -> str:
        clock = iter([100.0 + 3.0 * i for i in range(steps)])  # 3 s per step after the first
        monkeypatch.setattr(progress_module.time, "perf_counter", lambda: next(clock))
        renderer, buffer = _renderer()
        try:
            task = progress_task("sampling", total=12).__enter__()
            for _ in range(steps):
                task.advance()
        finally:
            renderer.detach()
        return buffer.getvalue()

    assert "1/12" in shown(1) and "…" in shown(1)  # one step: no rate yet
    assert "3/12" in shown(3) and "0:27 left" in shown(3)  # 2 steps in 6 s, 9 to go
    renderer, buffer = _renderer()
    try:
        record = logging.LogRecord("hierbandit.progress", logging.DEBUG, "", 0, "x", (), None)
        record.progress, record.remaining = (1, 10, "fit"), 3723.0
        renderer.emit(record)
    finally:
        renderer.detach()
    assert "1:02:03 left" in buffer.getvalue()
