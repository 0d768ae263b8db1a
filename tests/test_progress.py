"""The package's progress records shown without the command: ``hierbandit.show_progress()``
keeps one line per task up to date (a notebook or a script), with the time left."""

from __future__ import annotations

import io
import logging
import re

import hierbandit
import hierbandit._progress as progress_module
from hierbandit._progress import PROGRESS_LOGGER, ProgressLine, format_duration, progress_task


def _handlers():
    return [h for h in logging.getLogger(PROGRESS_LOGGER).handlers if isinstance(h, ProgressLine)]


def test_a_line_per_task_with_the_time_left(monkeypatch):
    clock = iter(float(t) for t in range(100, 400, 3))  # 3 s between two readings
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: next(clock))
    stream = io.StringIO()
    level = logging.getLogger(PROGRESS_LOGGER).level
    try:
        assert hierbandit.show_progress(stream=stream) is _handlers()[0]
        hierbandit.show_progress(stream=stream)  # again: still one handler
        assert len(_handlers()) == 1
        with progress_task("conditional draws", total=12) as task:
            for _ in range(3):
                task.advance()
        with progress_task("reading") as task:  # unknown total
            task.advance(2)
    finally:
        hierbandit.show_progress(False)
        logging.getLogger(PROGRESS_LOGGER).setLevel(level)
    assert not _handlers()
    lines = stream.getvalue().split("\r")
    assert lines[0] == ""
    assert lines[1].startswith("conditional draws: 0/12 (0%) 0:00 elapsed")
    assert "estimating the time left" in lines[2]  # one step: no rate yet
    assert any(re.match(r"conditional draws: 3/12 \(25%\) 0:\d\d elapsed, about 0:\d\d left", x)
               for x in lines)  # fmt: skip
    done = [x for x in lines if x.startswith("conditional draws: 12/12")]
    assert len(done) == 1 and done[0].endswith("\n") and "left" not in done[0]
    assert any(x.startswith("reading: 2 ") and "elapsed" in x for x in lines)


def test_updates_come_at_most_every_interval_but_the_end_always_shows():
    stream = io.StringIO()
    handler = ProgressLine(stream, interval=3600.0)
    logger = logging.getLogger(PROGRESS_LOGGER)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with progress_task("fit", total=1000) as task:
            for _ in range(1000):
                task.advance()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    shown = stream.getvalue().split("\r")[1:]
    assert len(shown) == 2  # the first record and the last
    assert shown[-1].startswith("fit: 1,000/1,000 (100%)")


def test_durations_read_as_clocks():
    assert format_duration(0) == "0:00"
    assert format_duration(75.4) == "1:15"
    assert format_duration(3723) == "1:02:03"
