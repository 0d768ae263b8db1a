"""Convergence diagnostics of MCMC runs, in ArviZ terms.

:func:`diagnose` reads the :class:`xarray.DataTree` of a run (ArviZ's layout: a ``posterior``
group and, from NUTS, ``sample_stats``) or anything holding one as ``.idata`` (a prior, a
comparison), computes ArviZ's summary (R-hat, bulk and tail ESS, MCSE) and the number of divergent
transitions, and finds every parameter past a threshold, with an R-hat or ESS that cannot be
computed, or with a chain that never moved (zero variance: a stuck sampler). The problems are
reported one line per variable; :attr:`Diagnostics.failures` lists every failing scalar.

Parameters are labelled by their coordinate values, e.g. ``Sigma[Action, time, weekend]``. A
symmetric matrix (two dimensions ``d`` and ``d_`` with the same coordinates, such as Σ's
``feature`` and ``feature_``, whose draws are symmetric) has ``d(d+1)/2`` distinct entries: the
tables, the problems and the plots count each off-diagonal pair once, by its lower-triangle entry
(the position along ``d`` at or after the one along ``d_``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import arviz as az
import numpy as np
import pandas as pd
import xarray as xr

from hierbandit._validation import check_scalar

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Diagnostics", "diagnose"]

_SAMPLE_DIMS = ("chain", "draw")
#: probability of the summary's highest-density interval (columns ``hdi94_lb``, ``hdi94_ub``)
_HDI_PROB = 0.94
#: quantiles of the tail ESS
_TAIL_PROBS = (0.05, 0.95)


class _Labeller(az.labels.BaseLabeller):
    """ArviZ's labels, on one line everywhere: ``Sigma[Action, time, intercept]``."""

    def make_label_vert(self, var_name: Any, sel: Any, isel: Any) -> str:
        return self.make_label_flat(var_name, sel, isel)


def _as_tree(obj: Any) -> xr.DataTree:
    tree = obj if isinstance(obj, xr.DataTree) else getattr(obj, "idata", None)
    if tree is None and _is_prior(obj):
        method = getattr(obj, "method", "unknown")
        raise ValueError(
            f"this prior has no MCMC draws to diagnose: it was fitted with method={method!r}, and "
            "only full-Bayes priors (fitted with method='mcmc') have draws to diagnose"
        )
    if not isinstance(tree, xr.DataTree):
        raise TypeError(
            "obj must be an xarray.DataTree (an MCMC run in ArviZ's layout) or have an .idata "
            f"DataTree attribute, got {type(obj).__name__}"
        )
    if "posterior" not in tree.children:
        raise ValueError("obj has no posterior group to diagnose")
    return tree


def _is_prior(obj: Any) -> bool:
    """Whether ``obj`` is a fitted prior of the package (a point estimate has ``idata=None``)."""
    from hierbandit.bayes._artifact import PriorArtifact

    return isinstance(obj, PriorArtifact)


def _count_divergences(tree: xr.DataTree) -> int:
    if "sample_stats" not in tree.children or "diverging" not in tree["sample_stats"]:
        return 0
    return int(np.asarray(tree["sample_stats"]["diverging"]).sum())


def _var_list(var_names: Any) -> list[str] | None:
    if var_names is None:
        return None
    return [var_names] if isinstance(var_names, str) else list(var_names)


# ---------------------------------------------------------------------- the parameters, once
def _is_symmetric(da: xr.DataArray, dim: str, twin: str) -> bool:
    """Whether ``da`` is a symmetric matrix in (``dim``, ``twin``), draw by draw."""
    if da.sizes[dim] != da.sizes[twin]:
        return False
    if (
        dim in da.coords
        and twin in da.coords
        and not np.array_equal(da[dim].to_numpy(), da[twin].to_numpy())
    ):
        return False
    a = da.transpose(..., dim, twin).to_numpy()
    if not np.issubdtype(a.dtype, np.number):
        return False
    scale = float(np.nanmax(np.abs(a))) if a.size else 0.0
    return bool(
        np.allclose(a, np.swapaxes(a, -1, -2), rtol=1e-9, atol=1e-12 * scale, equal_nan=True)
    )


def _lower_triangle(da: xr.DataArray, dim: str, twin: str) -> xr.DataArray:
    """The distinct entries of a symmetric ``da``: one dimension ``<dim>_pair`` whose
    coordinate reads ``"<dim value>, <twin value>"`` (so that ArviZ's labels read
    ``Sigma[arm, feature, feature_]``), lower triangle (position along ``dim`` ≥ along ``twin``)
    in row order."""
    moved = da.transpose(..., dim, twin)
    rows, cols = np.tril_indices(da.sizes[dim])
    first = moved[dim].to_numpy() if dim in moved.coords else np.arange(da.sizes[dim])
    second = moved[twin].to_numpy() if twin in moved.coords else np.arange(da.sizes[twin])
    pair = f"{dim}_pair"
    labels = [f"{first[i]}, {second[j]}" for i, j in zip(rows, cols, strict=True)]
    values = moved.to_numpy()[..., rows, cols]
    kept = moved.dims[:-2]
    coords = {c: moved[c] for c in kept if c in moved.coords}
    coords[pair] = labels
    return xr.DataArray(values, dims=(*kept, pair), coords=coords, name=da.name, attrs=da.attrs)


def _distinct_entries(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with every symmetric matrix reduced to its distinct (lower-triangle) entries.

    A variable is a symmetric matrix in dimensions ``d`` and ``d_`` (the package's naming of a
    matrix's two axes over the same set, e.g. Σ's ``feature`` and ``feature_``) when both have
    the same coordinates and every draw is symmetric; other variables are unchanged.
    """
    out = {}
    for name, da in ds.data_vars.items():
        for dim in list(da.dims):
            twin = f"{dim}_"
            if dim in da.dims and twin in da.dims and _is_symmetric(da, dim, twin):
                da = _lower_triangle(da, dim, twin)
        out[name] = da
    return xr.Dataset(out, attrs=ds.attrs)


def _with_names(ds: xr.Dataset, names: Mapping[str, Any] | None) -> xr.Dataset:
    """``ds`` with the coordinate values of some dimensions replaced by display names
    (``names={"arm": ["Action", …]}``; a dimension ``d_`` takes ``d``'s names unless given)."""
    if not names:
        return ds
    new = {}
    for dim, values in names.items():
        for target in (dim, f"{dim}_"):
            if target in ds.dims and (target == dim or target not in names):
                values = [str(v) for v in values]
                if len(values) != ds.sizes[target]:
                    raise ValueError(
                        f"names[{dim!r}] has {len(values)} names for {ds.sizes[target]} "
                        f"values of {target!r}"
                    )
                new[target] = values
    unknown = sorted(set(names) - set(ds.dims))
    if unknown:
        raise ValueError(f"names: no dimension {unknown} in the posterior; it has {list(ds.dims)}")
    return ds.assign_coords(new)


def _posterior_view(
    tree: xr.DataTree,
    var_names: list[str] | None,
    names: Mapping[str, Any] | None,
    coords: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """The posterior variables to diagnose, named and with each symmetric entry once."""
    post = _with_names(tree["posterior"].to_dataset(), names)
    ds = az.extract(post, var_names=var_names, combined=False, keep_dataset=True)
    if coords:
        ds = ds.sel(coords)
    return _distinct_entries(ds)


@dataclass
class Diagnostics:
    """Convergence diagnostics of one MCMC run.

    Attributes
    ----------
    summary : pandas.DataFrame
        :func:`arviz.summary` (``mean``, ``sd``, 94 % HDI ``hdi94_lb``/``hdi94_ub``,
        ``ess_bulk``, ``ess_tail``, ``r_hat``, ``mcse_mean``, ``mcse_sd``), one row per distinct
        scalar parameter (a symmetric matrix's off-diagonal pair once), labelled by coordinate
        values, e.g. ``Sigma[Action, time, intercept]``.
    divergences : int
        Number of divergent transitions after tuning (0 when the run records none).
    problems : list of str
        One line per variable with failing entries: how many of its entries fail which check,
        with the worst value and where, e.g. ``"Sigma: 3 of 12 entries fail: r_hat > 1.01 in 3
        (worst 1.034 at Sigma[Action, time, intercept]); ess_bulk < 400 in 1 (worst 322 at
        Sigma[Action, time, time])"``, and ``"divergences: 3 > 0"``. The checks are ``stuck``
        (a chain with zero variance), ``r_hat`` (above ``rhat_max``, or not computable),
        ``ess_bulk`` and ``ess_tail`` (below ``ess_min``, or not computable).
    rhat_max, ess_min : float
        The thresholds used.
    n_chains, n_draws : int
        Size of the posterior sample.
    var_names : list of str or None
        The variables diagnosed (``None``: every posterior variable).
    names : dict or None
        Display names of coordinate values (:func:`diagnose`).
    idata : xarray.DataTree
        The run (used by the plotting methods).
    failures : pandas.DataFrame
        Every failing scalar, one row per parameter and check: ``variable``, ``parameter`` (its
        label in :attr:`summary`), ``check`` (``"stuck"``, ``"r_hat"``, ``"ess_bulk"``,
        ``"ess_tail"``), ``value`` (NaN when not computable; for ``stuck`` the number of
        chains with zero variance) and ``threshold``.
    """

    summary: pd.DataFrame
    divergences: int
    problems: list[str]
    rhat_max: float
    ess_min: float
    n_chains: int
    n_draws: int
    var_names: list[str] | None = None
    names: dict[str, list[str]] | None = None
    idata: xr.DataTree | None = field(default=None, repr=False)
    failures: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame({c: [] for c in _FAILURE_COLUMNS}), repr=False
    )

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

    def _view(self, var_names: Any, coords: Mapping[str, Any] | None) -> xr.Dataset:
        if self.idata is None:
            raise ValueError("these diagnostics hold no run (idata) to plot")
        chosen = self.var_names if var_names is None else _var_list(var_names)
        return _posterior_view(self.idata, chosen, self.names, coords)

    def plot_trace(
        self,
        path: str | Path | None = None,
        var_names: Any = None,
        coords: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Figure:
        """Marginal densities and traces (:func:`arviz.plot_trace_dist`), saved to ``path``
        when given.

        Parameters
        ----------
        path
            Where to save the figure (format from the suffix).
        var_names
            Variables to plot (default those diagnosed).
        coords
            Selection of coordinate values (``{"feature": ["intercept"], …}``; display names
            when the diagnostics were given ``names``).
        **kwargs
            Passed to :func:`arviz.plot_trace_dist` (``compact``, ``combined``,
            ``figure_kwargs={"figsize": …}``…). Divergent transitions are marked.

        Returns
        -------
        matplotlib.figure.Figure
            The figure; its axes are ``fig.axes``.
        """
        view = self._view(var_names, coords)
        groups = {"posterior": view}
        tree = self.idata
        if tree is not None and "sample_stats" in tree.children:
            groups["sample_stats"] = tree["sample_stats"].to_dataset()
        kwargs.setdefault("labeller", _Labeller())
        pc = az.plot_trace_dist(xr.DataTree.from_dict(groups), backend="matplotlib", **kwargs)
        fig = pc.get_viz("figure")
        if path is not None:
            fig.savefig(path)
        return fig

    def plot_forest(
        self,
        path: str | Path | None = None,
        var_names: Any = None,
        coords: Mapping[str, Any] | None = None,
        *,
        combined: bool = False,
        **kwargs: Any,
    ) -> Figure:
        """Forest plot (:func:`arviz.plot_forest`) with an R-hat and a bulk-ESS column.

        One row per distinct scalar parameter, labelled as in :attr:`summary`; a value past
        ``rhat_max`` or ``ess_min`` is drawn in red.

        Parameters
        ----------
        path, var_names, coords
            As for :meth:`plot_trace`.
        combined
            One interval for all chains (default: one per chain).
        **kwargs
            Passed to :func:`arviz.plot_forest`.

        Returns
        -------
        matplotlib.figure.Figure
        """
        view = self._view(var_names, coords)
        flat = az.dataset_to_dataarray(view, sample_dims=list(_SAMPLE_DIMS), new_dim="parameter")
        ds = flat.rename("value").to_dataset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # ArviZ's shape warnings
            rhat = az.rhat(ds)
            ess = az.ess(ds, method="bulk")
        columns = ["labels", "forest", "r_hat", "ess"]
        data = ds.expand_dims(column=len(columns)).assign_coords(column=columns)
        kwargs.setdefault("labels", ["parameter"])
        # room for labels such as "Sigma[Adventure, weekend, intercept]"; narrow text columns
        figure_kwargs = dict(kwargs.pop("figure_kwargs", None) or {})
        figure_kwargs.setdefault("width_ratios", [2.5, 3.0, 0.8, 0.8])
        kwargs["figure_kwargs"] = figure_kwargs
        pc = az.plot_forest(data, combined=combined, backend="matplotlib", **kwargs)
        y = pc.get_aes_as_dataset("y")
        if "chain" in y.dims:
            y = y.mean("chain")  # one figure per parameter, in the middle of its chains
        ignore = pc.aes_set - {"overlay"}
        for column, values, bad, fmt in (
            ("r_hat", rhat, rhat > self.rhat_max, "{:.3f}"),
            ("ess", ess, ess < self.ess_min, "{:.0f}"),
        ):
            # a value past its threshold in red (ArviZ skips the NaN of each pass)
            for label, shown, color in (
                (column, values.where(~bad), "B1"),
                (f"{column}_bad", values.where(bad), "red"),
            ):
                pc.map(
                    az.visuals.annotate_xy,
                    label,
                    data=shown,
                    text=fmt.format,
                    x=0.5,
                    y=y,
                    color=color,
                    horizontal_align="center",
                    vertical_align="center",
                    coords={"column": column},
                    ignore_aes=ignore,
                )
        _column_titles(pc, {"r_hat": "R-hat", "ess": "ESS bulk"})
        fig = pc.get_viz("figure")
        if path is not None:
            fig.savefig(path)
        return fig

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(ok={self.ok}, n_params={len(self.summary)}, "
            f"max_rhat={self.max_rhat:.4g}, min_ess_bulk={self.min_ess_bulk:.0f}, "
            f"divergences={self.divergences}, problems={len(self.problems)})"
        )


def _column_titles(pc: Any, titles: dict[str, str]) -> None:
    """Name the text columns of a forest plot below their axes, as the labels column is."""
    for column, title in titles.items():
        ax = pc.get_target(None, {"column": column})
        ax.set_xlim(0.0, 1.0)
        ax.set_xticks([0.5], [title])


def _ess_tail(view: xr.Dataset) -> pd.Series:
    """Tail ESS: the smaller ESS of the 5 % and 95 % quantile indicators (Vehtari et al. 2021,
    as ArviZ 0.x computed it; ArviZ 1's summary takes the quantiles from its credible-interval
    setting instead, 11 % and 89 % by default)."""
    tail = view.azstats.ess(sample_dims=list(_SAMPLE_DIMS), method="tail", prob=_TAIL_PROBS)
    frame = az.dataset_to_dataframe(tail.expand_dims(summary=["ess_tail"]), sample_dims=["summary"])
    return frame.T["ess_tail"]


def _per_entry(values: xr.Dataset, column: str) -> pd.Series:
    """Per-entry values (a Dataset without the sample dimensions) as a Series whose index is the
    label ArviZ's summary gives each entry."""
    frame = az.dataset_to_dataframe(values.expand_dims(summary=[column]), sample_dims=["summary"])
    return frame.T[column]


def _summary(view: xr.Dataset) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`arviz.summary` with the tail ESS of :func:`_ess_tail`, one variable at a time, and
    per row its ``variable``, how many chains are ``stuck`` (zero variance within the chain) and
    which (``stuck_mask``: the sum of 2**c over the stuck chains c).

    With ArviZ 1 (arviz-stats 1.3) a summary of variables whose dimensions differ (``beta0``
    (arm, feature) beside ``beta`` (arm, instance, feature)) pairs some row labels with another
    parameter's values; each variable's own summary is labelled right
    (``tests/bayes/test_diagnostics.py`` keeps the case).
    """
    parts, extras = [], []
    weight = xr.DataArray(2.0 ** np.arange(view.sizes.get("chain", 1)), dims="chain")
    for name in view.data_vars:
        one = view[[name]]
        part = az.summary(one, ci_kind="hdi", ci_prob=_HDI_PROB, round_to="none")
        part["ess_tail"] = _ess_tail(one).reindex(part.index)
        parts.append(part)
        flat = one.max("draw") == one.min("draw")  # (chain, ...): the chain never moved
        extras.append(
            pd.DataFrame(
                {
                    "variable": str(name),
                    "stuck": _per_entry(flat.sum("chain"), "stuck").reindex(part.index),
                    "stuck_mask": _per_entry((flat * weight).sum("chain"), "mask").reindex(
                        part.index
                    ),
                },
                index=part.index,
            )
        )
    if not parts:
        summary = az.summary(view, ci_kind="hdi", ci_prob=_HDI_PROB, round_to="none")
        return summary, pd.DataFrame(
            {"variable": [], "stuck": [], "stuck_mask": []}, index=summary.index
        )
    return pd.concat(parts), pd.concat(extras)


#: columns of :attr:`Diagnostics.failures`
_FAILURE_COLUMNS = ["variable", "parameter", "check", "value", "threshold"]
#: the checks, in the order a problem line names them
_CHECKS = ("stuck", "r_hat", "ess_bulk", "ess_tail")


def _failures(
    summary: pd.DataFrame, extra: pd.DataFrame, rhat_max: float, ess_min: float
) -> pd.DataFrame:
    """One row per failing scalar and check: an R-hat above ``rhat_max`` or not computable
    (NaN), a bulk or tail ESS below ``ess_min`` or not computable, a chain with zero variance
    (``stuck``, the value being the number of such chains)."""
    labels = summary.index.to_numpy()
    owner = extra["variable"].to_numpy()
    frames = []
    for check in _CHECKS:
        if check == "stuck":
            value = extra["stuck"].to_numpy(dtype=float)
            bad, threshold = value > 0, 0.0
        elif check not in summary.columns:
            continue
        else:
            value = summary[check].to_numpy(dtype=float)
            if check == "r_hat":
                bad, threshold = ~(value <= rhat_max), rhat_max  # NaN fails too
            else:
                bad, threshold = ~(value >= ess_min), ess_min
        frames.append(
            pd.DataFrame(
                {
                    "variable": owner[bad],
                    "parameter": labels[bad],
                    "check": check,
                    "value": value[bad],
                    "threshold": threshold,
                    "_row": np.flatnonzero(bad),
                    "_check": _CHECKS.index(check),
                }
            )
        )
    if not frames:
        return pd.DataFrame({c: [] for c in _FAILURE_COLUMNS})
    out = pd.concat(frames, ignore_index=True).sort_values(["_row", "_check"], kind="stable")
    return out[_FAILURE_COLUMNS].reset_index(drop=True)


def _chains_text(mask: float, n_chains: int, chain_labels: list[Any]) -> str:
    """``"all 4 chains constant"`` or ``"chains 0, 2 of 4 constant"`` from a stuck mask."""
    bits = int(mask)
    stuck = [chain_labels[c] for c in range(n_chains) if bits >> c & 1]
    if len(stuck) == n_chains:
        return f"all {n_chains} chains constant" if n_chains > 1 else "its one chain constant"
    which = ", ".join(str(c) for c in stuck)
    return f"chain{'s' * (len(stuck) > 1)} {which} of {n_chains} constant"


def _problem_lines(
    failures: pd.DataFrame,
    extra: pd.DataFrame,
    rhat_max: float,
    ess_min: float,
    chain_labels: list[Any],
) -> list[str]:
    """One line per variable with failing entries: how many of its entries fail which check,
    the worst value and where."""
    lines = []
    entries = extra.groupby("variable", sort=False).size()
    for var, fails in failures.groupby("variable", sort=False):
        n, n_bad = int(entries[var]), fails["parameter"].nunique()
        head = (
            f"{var}: {n_bad} of {n} {'entry' if n == 1 else 'entries'} "
            f"{'fails' if n_bad == 1 else 'fail'}"
        )
        parts = []
        for check in _CHECKS:
            one = fails[fails["check"] == check]
            if one.empty:
                continue
            value = one["value"].to_numpy(dtype=float)
            if check == "stuck":
                at = one.iloc[int(np.argmax(value))]["parameter"]
                mask = extra.loc[at, "stuck_mask"]
                chains = _chains_text(mask, len(chain_labels), chain_labels)
                parts.append(f"stuck in {len(one)} (worst: {chains} at {at})")
                continue
            nan = np.isnan(value)
            if (~nan).any():
                pick = np.flatnonzero(~nan)
                worst = pick[np.argmax(value[pick]) if check == "r_hat" else np.argmin(value[pick])]
                shown = _fmt(float(value[worst]), check)
                rule = f"> {rhat_max:g}" if check == "r_hat" else f"< {ess_min:g}"
                parts.append(
                    f"{check} {rule} in {int((~nan).sum())} (worst {shown} at "
                    f"{one.iloc[worst]['parameter']})"
                )
            if nan.any():
                at = one.iloc[int(np.flatnonzero(nan)[0])]["parameter"]
                parts.append(f"{check} not computable (nan) in {int(nan.sum())} (at {at})")
        lines.append(f"{head}: " + "; ".join(parts))
    return lines


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
    names: Mapping[str, Any] | None = None,
    rhat_max: float = 1.01,
    ess_min: float = 400,
    warn: bool = True,
) -> Diagnostics:
    """Convergence diagnostics of an MCMC run.

    Parameters
    ----------
    obj : xarray.DataTree or object with an ``.idata`` attribute
        The run in ArviZ's layout (``posterior`` group; ``sample_stats`` for divergences), or
        an object holding it, for example a full-Bayes prior or a
        :class:`~hierbandit.bayes.ClosedFormComparison`.
    var_names : str or list of str, optional
        Variables to diagnose (ArviZ syntax, ``"~z"`` excludes); default every posterior
        variable.
    names : mapping of str to sequence, optional
        Display names of coordinate values, e.g. ``{"arm": ["Action", "Comedy", …]}`` when the
        run's ``arm`` coordinate holds codes; a dimension ``d_`` (``feature_``) takes the names
        of ``d`` unless given.
    rhat_max : float
        Largest acceptable (rank-normalised split) R-hat.
    ess_min : float
        Smallest acceptable bulk and tail ESS.
    warn : bool
        Issue one :class:`UserWarning` listing the problems when there are any.

    Returns
    -------
    Diagnostics

    Raises
    ------
    ValueError
        For a prior without draws (an ``"eb"`` or ``"ml"`` fit): only full-Bayes priors
        (``method="mcmc"``) have draws to diagnose; or a run without a ``posterior`` group.
    TypeError
        For anything that is not a run and holds none.

    Notes
    -----
    A symmetric matrix (Σ) counts each off-diagonal pair once (module docstring). Every entry
    is checked for: a chain with zero variance (``stuck``: the sampler never moved in it); an
    R-hat above ``rhat_max`` or not computable (NaN, as for a constant); a bulk or tail ESS
    below ``ess_min`` or not computable. A quantity constant by construction (say the unit
    diagonal of a correlation matrix) is reported as stuck too: leave it out with
    ``var_names=["~name"]``. The problems are one line per variable (how many of its entries
    fail which check, the worst value and where); :attr:`Diagnostics.failures` lists every
    failing scalar. Divergent transitions are counted from ``sample_stats.diverging``; any
    divergence is a problem.
    """
    tree = _as_tree(obj)
    rhat_max = check_scalar(rhat_max, "rhat_max", low=1.0)
    ess_min = check_scalar(ess_min, "ess_min", low=0.0)
    var_names = _var_list(var_names)
    names = None if names is None else {str(k): [str(v) for v in vs] for k, vs in names.items()}
    view = _posterior_view(tree, var_names, names)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        # ArviZ warns about shapes (one chain, few draws) and divides by a zero variance (a
        # stuck chain); the checks below report what matters
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        summary, extra = _summary(view)
    post = tree["posterior"]
    n_chains, n_draws = int(post.sizes.get("chain", 1)), int(post.sizes.get("draw", 0))
    divergences = _count_divergences(tree)

    failures = _failures(summary, extra, rhat_max, ess_min)
    chain_labels = (
        view["chain"].to_numpy().tolist() if "chain" in view.coords else list(range(n_chains))
    )
    problems = _problem_lines(failures, extra, rhat_max, ess_min, chain_labels)
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
        names=names,
        idata=tree,
        failures=failures,
    )
    if warn and problems:
        _warn_problems(problems, stacklevel=3)
    return diag


def _warn_problems(problems: list[str], stacklevel: int = 2) -> None:
    """One :class:`UserWarning` listing the problems (the first 50)."""
    shown = problems[:50]
    more = f"\n… and {len(problems) - 50} more" if len(problems) > 50 else ""
    warnings.warn(
        f"MCMC diagnostics found {len(problems)} problem(s):\n  " + "\n  ".join(shown) + more,
        UserWarning,
        stacklevel=stacklevel,
    )
