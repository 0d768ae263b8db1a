"""Convergence diagnostics of MCMC runs, in ArviZ terms.

:func:`diagnose` reads an :class:`arviz.InferenceData` (or anything holding one as ``.idata``),
computes ArviZ's summary (R-hat, bulk and tail ESS, MCSE) and the number of divergent transitions,
and names every parameter that is past a threshold.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import arviz as az
import numpy as np
import pandas as pd

from hierbandit._validation import check_scalar

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Diagnostics", "diagnose"]

# ArviZ 0.23's numba path of mcse(method="sd") trips a NumPy 1.25 deprecation on every parameter
_ARVIZ_NUMPY_DEPRECATION = "Conversion of an array with ndim > 0 to a scalar"


def _as_idata(obj: Any) -> az.InferenceData:
    if isinstance(obj, az.InferenceData):
        idata = obj
    elif isinstance(getattr(obj, "idata", None), az.InferenceData):
        idata = obj.idata
    else:
        raise TypeError(
            "obj must be an arviz.InferenceData or have an .idata InferenceData attribute, got "
            f"{type(obj).__name__}"
        )
    if "posterior" not in idata.groups():
        raise ValueError("obj has no posterior group to diagnose")
    return idata


def _count_divergences(idata: az.InferenceData) -> int:
    stats = getattr(idata, "sample_stats", None)
    if stats is None or "diverging" not in stats:
        return 0
    return int(np.asarray(stats["diverging"]).sum())


def _figure_of(axes: Any) -> Figure:
    ax = np.ravel(np.asarray(axes, dtype=object))[0]
    return ax.get_figure()


@dataclass
class Diagnostics:
    """Convergence diagnostics of one MCMC run.

    Attributes
    ----------
    summary : pandas.DataFrame
        :func:`arviz.summary` (``mean``, ``sd``, HDI, ``mcse_mean``, ``mcse_sd``, ``ess_bulk``,
        ``ess_tail``, ``r_hat``), one row per scalar parameter.
    divergences : int
        Number of divergent transitions after tuning (0 when the run records none).
    problems : list of str
        One line per threshold crossed, e.g. ``"Sigma[0, 1, 2]: r_hat 1.03 > 1.01"``.
    rhat_max, ess_min : float
        The thresholds used.
    n_chains, n_draws : int
        Size of the posterior sample.
    idata : arviz.InferenceData
        The run (used by the plotting methods).
    """

    summary: pd.DataFrame
    divergences: int
    problems: list[str]
    rhat_max: float
    ess_min: float
    n_chains: int
    n_draws: int
    var_names: list[str] | None = None
    idata: az.InferenceData | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """No parameter past a threshold and no divergence."""
        return not self.problems

    @property
    def max_rhat(self) -> float:
        """Largest R-hat (NaN when none could be computed)."""
        return _nan_reduce(self.summary, "r_hat", np.nanmax)

    @property
    def min_ess_bulk(self) -> float:
        """Smallest bulk ESS."""
        return _nan_reduce(self.summary, "ess_bulk", np.nanmin)

    @property
    def min_ess_tail(self) -> float:
        """Smallest tail ESS."""
        return _nan_reduce(self.summary, "ess_tail", np.nanmin)

    def to_markdown(self, max_rows: int = 20) -> str:
        """A Markdown report: verdict, headline figures, problems and the worst parameters.

        Parameters
        ----------
        max_rows
            Largest number of parameter rows in the table (worst R-hat first).
        """
        status = "OK" if self.ok else f"{len(self.problems)} problem(s)"
        lines = [
            f"**MCMC diagnostics: {status}** ({self.n_chains} chains × {self.n_draws} draws, "
            f"{len(self.summary)} parameters)",
            "",
            f"- max R-hat: {self.max_rhat:.4f} (threshold {self.rhat_max:g})",
            f"- min bulk ESS: {self.min_ess_bulk:.0f}; min tail ESS: {self.min_ess_tail:.0f} "
            f"(threshold {self.ess_min:g})",
            f"- divergences: {self.divergences}",
        ]
        if self.problems:
            lines += ["", "Problems:", ""] + [f"- {p}" for p in self.problems]
        cols = [
            c
            for c in ("mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat")
            if c in self.summary.columns
        ]
        if cols and len(self.summary):
            rows = self.summary[cols]
            if "r_hat" in rows:
                rows = rows.sort_values("r_hat", ascending=False, na_position="last")
            rows = rows.head(max_rows)
            lines += [
                "",
                "| parameter | " + " | ".join(cols) + " |",
                "|---" * (len(cols) + 1) + "|",
            ]
            for name, row in rows.iterrows():
                cells = [_fmt(row[c], c) for c in cols]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            if len(self.summary) > len(rows):
                lines.append(f"\n({len(self.summary) - len(rows)} more parameters not shown)")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _plot_vars(self, var_names: Any) -> Any:
        return self.var_names if var_names is None else var_names

    def plot_trace(
        self, path: str | Path | None = None, var_names: Any = None, **kwargs: Any
    ) -> Figure:
        """ArviZ trace plot (:func:`arviz.plot_trace`); saved to ``path`` when given.

        Returns
        -------
        matplotlib.figure.Figure
            The figure; its axes are ``fig.axes``.
        """
        with _quiet_plotting():
            axes = az.plot_trace(
                self._require_idata(), var_names=self._plot_vars(var_names), **kwargs
            )
        fig = _figure_of(axes)
        if path is not None:
            fig.savefig(path)
        return fig

    def plot_forest(
        self, path: str | Path | None = None, var_names: Any = None, **kwargs: Any
    ) -> Figure:
        """ArviZ forest plot with R-hat and ESS columns (:func:`arviz.plot_forest`).

        Returns
        -------
        matplotlib.figure.Figure
        """
        kwargs.setdefault("combined", False)
        kwargs.setdefault("r_hat", True)
        kwargs.setdefault("ess", True)
        with _quiet_plotting():
            axes = az.plot_forest(
                self._require_idata(), var_names=self._plot_vars(var_names), **kwargs
            )
        fig = _figure_of(axes)
        if path is not None:
            fig.savefig(path)
        return fig

    def _require_idata(self) -> az.InferenceData:
        if self.idata is None:
            raise ValueError("these diagnostics hold no InferenceData to plot")
        return self.idata

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(ok={self.ok}, n_params={len(self.summary)}, "
            f"max_rhat={self.max_rhat:.4g}, min_ess_bulk={self.min_ess_bulk:.0f}, "
            f"divergences={self.divergences}, problems={len(self.problems)})"
        )


@contextlib.contextmanager
def _quiet_plotting() -> Iterator[None]:
    """Silence the deprecation noise ArviZ 0.23's plots trigger in matplotlib ≥ 3.11."""
    from matplotlib import MatplotlibDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MatplotlibDeprecationWarning)
        yield


def _nan_reduce(summary: pd.DataFrame, col: str, fn: Any) -> float:
    if col not in summary.columns:
        return float("nan")
    values = summary[col].to_numpy(dtype=float)
    if values.size == 0 or np.all(np.isnan(values)):
        return float("nan")
    return float(fn(values))


def _fmt(value: Any, col: str) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "nan"
    if col.startswith("ess"):
        return f"{value:.0f}"
    if col == "r_hat":
        return f"{value:.3f}"
    return f"{value:.4g}"


def diagnose(
    obj: Any,
    *,
    var_names: Any = None,
    rhat_max: float = 1.01,
    ess_min: float = 400,
    warn: bool = True,
) -> Diagnostics:
    """Convergence diagnostics of an MCMC run.

    Parameters
    ----------
    obj : arviz.InferenceData or object with an ``.idata`` attribute
        The run (for example a :class:`~hierbandit.bayes.ClosedFormComparison`).
    var_names : str or list of str, optional
        Variables to diagnose (ArviZ syntax, ``"~z"`` excludes); default every posterior
        variable.
    rhat_max : float
        Largest acceptable (rank-normalised split) R-hat.
    ess_min : float
        Smallest acceptable bulk and tail ESS.
    warn : bool
        Issue one :class:`UserWarning` listing the problems when there are any.

    Returns
    -------
    Diagnostics

    Notes
    -----
    A parameter whose R-hat or ESS is NaN (a constant, or too few draws) is not flagged.
    Divergent transitions are counted from ``sample_stats.diverging``; any divergence is a
    problem.
    """
    idata = _as_idata(obj)
    rhat_max = check_scalar(rhat_max, "rhat_max", low=1.0)
    ess_min = check_scalar(ess_min, "ess_min", low=0.0)
    if isinstance(var_names, str):
        var_names = [var_names]
    elif var_names is not None:
        var_names = list(var_names)
    with warnings.catch_warnings():
        # ArviZ warns about shapes (one chain, few draws); the thresholds report what matters
        warnings.simplefilter("ignore", UserWarning)
        warnings.filterwarnings("ignore", _ARVIZ_NUMPY_DEPRECATION, DeprecationWarning)
        summary = az.summary(idata, var_names=var_names, round_to="none")
    post = idata.posterior
    n_chains, n_draws = int(post.sizes.get("chain", 1)), int(post.sizes.get("draw", 0))
    divergences = _count_divergences(idata)

    problems: list[str] = []
    for name, row in summary.iterrows():
        r = row.get("r_hat", np.nan)
        if np.isfinite(r) and r > rhat_max:
            problems.append(f"{name}: r_hat {r:.3f} > {rhat_max:g}")
        for col in ("ess_bulk", "ess_tail"):
            e = row.get(col, np.nan)
            if np.isfinite(e) and e < ess_min:
                problems.append(f"{name}: {col} {e:.0f} < {ess_min:g}")
    if divergences > 0:
        problems.append(f"divergences: {divergences} > 0")

    diag = Diagnostics(
        summary=summary,
        divergences=divergences,
        problems=problems,
        rhat_max=rhat_max,
        ess_min=ess_min,
        n_chains=n_chains,
        n_draws=n_draws,
        var_names=var_names,
        idata=idata,
    )
    if warn and problems:
        shown = problems[:50]
        more = f"\n… and {len(problems) - 50} more" if len(problems) > 50 else ""
        warnings.warn(
            f"MCMC diagnostics found {len(problems)} problem(s):\n  " + "\n  ".join(shown) + more,
            UserWarning,
            stacklevel=2,
        )
    return diag
