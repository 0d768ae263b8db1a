"""Experiments: simulate policies against environments over seeds, summarise and plot regret.

The papers' reproductions are named experiments (:mod:`hierbandit.experiments.catalog`), each
defined by its paper's module and run by :func:`hierbandit.experiments.runner.run_experiment`
(``hierbandit experiment run NAME``). matplotlib is imported only when a plotting function is
called.
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
