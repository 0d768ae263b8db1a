"""Experiments: simulate policies against environments over seeds, summarise and plot regret.

matplotlib is imported only when a plotting function is called.
"""

from hierbandit.experiments.plotting import plot_cumulative_regret, plot_regret_panels
from hierbandit.experiments.simulate import cumulative_regret, regret_table, simulate

__all__ = [
    "cumulative_regret",
    "plot_cumulative_regret",
    "plot_regret_panels",
    "regret_table",
    "simulate",
]
