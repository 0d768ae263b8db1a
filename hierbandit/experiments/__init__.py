"""Experiments: simulate policies against environments over seeds, summarise and plot regret.

matplotlib is imported only when a plotting function is called.
"""

from .plotting import plot_cumulative_regret, plot_regret_panels
from .simulate import cumulative_regret, regret_table, simulate
from .vectorized import batched_unsupported, run_batched

__all__ = [
    "batched_unsupported",
    "cumulative_regret",
    "plot_cumulative_regret",
    "plot_regret_panels",
    "regret_table",
    "run_batched",
    "simulate",
]
