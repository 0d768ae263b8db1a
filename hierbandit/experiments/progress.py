"""Progress of the experiments' long loops: :mod:`hierbandit._progress`, under the name the
experiments and the command have always imported it by."""

from hierbandit._progress import PROGRESS_LOGGER, ProgressTask, format_duration, progress_task

__all__ = ["PROGRESS_LOGGER", "ProgressTask", "format_duration", "progress_task"]
