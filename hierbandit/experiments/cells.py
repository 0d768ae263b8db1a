"""Cells of seed windows: how the experiments split a sweep and put the pieces back together.

Cells are windows of seeds (or BOC trials) of one setting: a window gives the same replications
as one run over all seeds (:func:`hierbandit.experiments._config.seed_children`), so a sweep split
into cells, run in any order on any executor, equals the monolithic run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import xarray as xr

from hierbandit.experiments.registry import Cell

__all__ = ["Annotate", "concat_cells", "group_cells", "seed_cells", "windows"]

#: ``annotate(ds)`` records the configuration in a Dataset the experiment saves
Annotate = Callable[[xr.Dataset], xr.Dataset]


def windows(total: int, size: int) -> list[tuple[int, int]]:
    """``(first, count)`` windows covering ``0 … total − 1``."""
    return [(a, min(size, total - a)) for a in range(0, total, size)]


def seed_cells(params: Mapping[str, Any], groups: list[tuple[str, dict[str, Any]]]) -> list[Cell]:
    """One cell per (group, window of seeds); ``groups`` are (key prefix, spec) pairs."""
    return [
        Cell(
            f"{prefix}_seeds-{first}-{first + n - 1}",
            {**spec, "first_seed": first, "n_seeds": n},
        )
        for prefix, spec in groups
        for first, n in windows(params["seeds"], params["seeds_per_cell"])
    ]


def concat_cells(datasets: list[xr.Dataset], dim: str) -> xr.Dataset:
    """Stack cell Datasets along ``dim`` (sorted by it); other variables from the first."""
    datasets = sorted(datasets, key=lambda d: int(d[dim].values[0]))
    ds = xr.concat(
        datasets,
        dim=dim,
        data_vars="minimal",
        coords="minimal",
        compat="override",
        join="outer",
        combine_attrs="override",
    )
    for key in ("first_seed", "experiment_cell", "experiment_fingerprint"):
        ds.attrs.pop(key, None)
    return ds


def group_cells(results: Mapping[str, xr.Dataset]) -> dict[str, list[xr.Dataset]]:
    """Cell Datasets grouped by the key prefix before ``_seeds-`` / ``_trials-``."""
    out: dict[str, list[xr.Dataset]] = {}
    for key, ds in results.items():
        prefix = key.rsplit("_seeds-", 1)[0].rsplit("_trials-", 1)[0]
        out.setdefault(prefix, []).append(ds)
    return out
