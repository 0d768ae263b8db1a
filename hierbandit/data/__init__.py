"""Historical logs (validated, coded arrays): interaction logs, cascade logs, and the real
default MovieLens log."""

from hierbandit.data.cascade_log import CascadeLog, read_cascade_log
from hierbandit.data.log import HistoricalLog, check_min_rows, read_log
from hierbandit.data.movielens import movielens_log, rating_matrix

__all__ = [
    "CascadeLog",
    "HistoricalLog",
    "check_min_rows",
    "movielens_log",
    "rating_matrix",
    "read_cascade_log",
    "read_log",
]
