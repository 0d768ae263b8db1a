"""Historical logs (validated, coded arrays): interaction logs, cascade logs, the real default
MovieLens log, and logs reduced to their sufficient statistics (:class:`LogSummary`)."""

from hierbandit.data.cascade_log import CascadeLog, read_cascade_log
from hierbandit.data.log import HistoricalLog, check_min_rows, read_log
from hierbandit.data.movielens import movielens_log, rating_matrix
from hierbandit.data.summary import (
    LogSummary,
    PartialStats,
    check_summary_rows,
    combine_partials,
    partial_stats,
    summarise,
    summary_from_partial,
)

__all__ = [
    "CascadeLog",
    "HistoricalLog",
    "LogSummary",
    "PartialStats",
    "check_min_rows",
    "check_summary_rows",
    "combine_partials",
    "movielens_log",
    "partial_stats",
    "rating_matrix",
    "read_cascade_log",
    "read_log",
    "summarise",
    "summary_from_partial",
]
