"""Regret plots of :func:`~hierbandit.experiments.simulate` output.

matplotlib is imported inside the functions, so importing :mod:`hierbandit.experiments` stays
cheap. Nothing here calls ``plt.show()``; the functions return the Axes or Figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from hierbandit._extras import require
from hierbandit._validation import check_choice
from hierbandit.experiments.simulate import cumulative_regret

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_cumulative_regret", "plot_regret_panels"]

_BANDS = ("se", "iqr", None)


def plot_cumulative_regret(
    ds: xr.Dataset,
    *,
    instance: int | None = None,
    ax: Axes | None = None,
    band: str | None = "se",
    kind: str = "pseudo",
) -> Axes:
    """Cumulative regret against rounds, one line per policy.

    Parameters
    ----------
    ds
        Output of :func:`~hierbandit.experiments.simulate`.
    instance
        ``None`` for the overall regret, or an instance id for its instance-specific regret.
    ax
        Axes to draw on; a new figure (``matplotlib.pyplot.subplots``) when ``None``.
    band
        ``"se"`` (default): the mean over seeds with a ±1 standard-error band;
        ``"iqr"``: the median over seeds with the interquartile (25–75 %) band;
        ``None``: the mean line only.
    kind
        ``"pseudo"`` or ``"oracle"``, as in :func:`~hierbandit.experiments.cumulative_regret`.

    Returns
    -------
    matplotlib.axes.Axes
    """
    band = check_choice(band, _BANDS, "band")
    cum = cumulative_regret(ds, instance, kind=kind)
    if ax is None:
        plt = require("matplotlib.pyplot", "experiments", "Plotting regret")

        _, ax = plt.subplots(figsize=(6.0, 4.0), layout="constrained")
    steps = cum["step"].values
    S = cum.sizes["seed"]
    for name in cum["policy"].values:
        c = cum.sel(policy=name).transpose("seed", "step").values
        if band == "iqr":
            q25, center, q75 = np.quantile(c, [0.25, 0.5, 0.75], axis=0)
            lo, hi = q25, q75
        else:
            center = c.mean(axis=0)
            se = c.std(axis=0, ddof=1) / np.sqrt(S) if S > 1 else np.zeros_like(center)
            lo, hi = center - se, center + se
        (line,) = ax.plot(steps, center, label=str(name))
        if band is not None:
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("round t")
    ylabel = "cumulative regret" if kind == "pseudo" else "cumulative oracle-policy regret"
    ax.set_ylabel(ylabel)
    what = "all instances" if instance is None else f"instance {int(instance)}"
    stat = {"se": "mean ± 1 s.e.", "iqr": "median, IQR", None: "mean"}[band]
    ax.set_title(f"Cumulative regret, {what} ({stat}, {S} seeds)")
    ax.set_xlim(steps[0], steps[-1])
    ax.legend(frameon=False)
    return ax


def plot_regret_panels(
    ds: xr.Dataset,
    instance: int = 0,
    *,
    band: str | None = "se",
    kind: str = "pseudo",
    without: Sequence[str] | None = None,
) -> Figure:
    """The ebm paper's Figure 1 layout: overall and instance-specific cumulative regret.

    Parameters
    ----------
    ds
        Output of :func:`~hierbandit.experiments.simulate`.
    instance
        Instance of the right panel (the paper shows instance 1, index 0 here, which is the
        data-poor instance in the data-poor setting).
    band, kind
        As in :func:`plot_cumulative_regret`.
    without
        Policies to leave out of a second row of the same two panels, which then has a y-axis
        of its own (the ebm figures leave out RMBandit, whose nearly linear regret sets the
        scale of the first row). The other policies keep their colours. ``None`` or empty:
        one row.

    Returns
    -------
    matplotlib.figure.Figure
        Two side-by-side panels, or a 2 × 2 grid with ``without``.
    """
    plt = require("matplotlib.pyplot", "experiments", "Plotting regret")

    # validate before creating a figure
    if instance is None:
        raise TypeError("instance must be an integer id for the right-hand panel, got None")
    cumulative_regret(ds, instance, kind=kind)
    check_choice(band, _BANDS, "band")
    kept = _kept_policies(ds, without)
    if kept is None:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.0), layout="constrained")
        plot_cumulative_regret(ds, ax=left, band=band, kind=kind)
        plot_cumulative_regret(ds, instance=instance, ax=right, band=band, kind=kind)
        return fig
    fig, axes = plt.subplots(2, 2, figsize=(11.0, 8.0), layout="constrained")
    plot_cumulative_regret(ds, ax=axes[0, 0], band=band, kind=kind)
    plot_cumulative_regret(ds, instance=instance, ax=axes[0, 1], band=band, kind=kind)
    colours = {line.get_label(): line.get_color() for line in axes[0, 0].get_lines()}
    sub = ds.sel(policy=kept)
    left_out = ", ".join(str(p) for p in ds["policy"].values if str(p) not in kept)
    for ax, inst in ((axes[1, 0], None), (axes[1, 1], instance)):
        ax.set_prop_cycle(color=[colours[p] for p in kept])
        plot_cumulative_regret(sub, instance=inst, ax=ax, band=band, kind=kind)
        ax.set_title(f"{ax.get_title()}\nwithout {left_out}")
    return fig


def _kept_policies(ds: xr.Dataset, without: Sequence[str] | None) -> list[str] | None:
    """The policies of ``ds`` not in ``without`` (in ``ds``'s order), or ``None`` for one row."""
    if without is None:
        return None
    if isinstance(without, str):
        raise TypeError(f"without must be a sequence of policy names, got the string {without!r}")
    names = [str(p) for p in ds["policy"].values]
    omit = [str(p) for p in without]
    unknown = sorted(set(omit) - set(names))
    if unknown:
        raise ValueError(f"without: unknown policies {unknown}; ds has {names}")
    if not omit:
        return None
    kept = [p for p in names if p not in omit]
    if not kept:
        raise ValueError("without leaves no policy to draw in the second row")
    return kept
