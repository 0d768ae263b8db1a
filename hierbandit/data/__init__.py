"""Historical interaction logs (validated, coded arrays) and the real default MovieLens log."""

from hierbandit.data.log import HistoricalLog, check_min_rows, read_log
from hierbandit.data.movielens import movielens_log, rating_matrix

__all__ = ["HistoricalLog", "check_min_rows", "movielens_log", "rating_matrix", "read_log"]
