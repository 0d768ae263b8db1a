"""Run a named experiment: resumable cells, any executor, data + plots + a Markdown summary.

Layout of an output folder::

    OUT/experiment.json    the experiment, its resolved parameters and the package version
    OUT/cells/KEY.nc       one finished cell (written atomically as soon as it finishes)
    OUT/...                the combined results (netCDF), tables and the paper's plots
    OUT/summary.md         a short Markdown summary

Resuming: a run into a folder that already holds cells of the *same* configuration skips them,
so an interrupted or crashed sweep continues where it stopped and loses no finished cell. A cell
file is reused only if its seal (size and SHA-256) verifies and it records this run's
fingerprint, its own key and the digest of its own specification; a corrupted, truncated,
swapped or foreign cell is computed again. Only
the number of seeds may change between runs (more seeds reuse the finished ones). A different
configuration is refused, unless ``restart=True`` clears the folder's cells first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import xarray as xr

from hierbandit._container import read_netcdf
from hierbandit._io import atomic_write, write_dataset, write_json
from hierbandit.errors import InvalidFileError
from hierbandit.experiments.catalog import get_experiment
from hierbandit.experiments.executors import make_executor
from hierbandit.experiments.progress import progress_task
from hierbandit.experiments.registry import SWEEP_PARAMS, Cell, Experiment, toml_value
from hierbandit.experiments.report import markdown_table

__all__ = ["ExperimentRun", "run_cell", "run_experiment"]

MANIFEST = "experiment.json"
CELLS = "cells"
#: the sealed-file kind of a cell (:mod:`hierbandit._container`)
CELL_KIND = "experiment-cell"


@dataclasses.dataclass
class ExperimentRun:
    """What :func:`run_experiment` did.

    ``results`` maps cell keys to their Datasets; ``files`` the outputs written; ``computed`` and
    ``reused`` the keys of the cells computed in this run and of those found finished.
    """

    experiment: str
    params: dict[str, Any]
    out: Path
    results: dict[str, xr.Dataset]
    files: dict[str, Path]
    computed: list[str]
    reused: list[str]
    executor: str
    seconds: float


def run_cell(name: str, params: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> Any:
    """Compute one cell of experiment ``name`` (the function every executor calls)."""
    return get_experiment(name).run_cell(params, spec, deps)


def _cell_path(out: Path, key: str) -> Path:
    return out / CELLS / f"{key}.nc"


def _check_manifest(exp: Experiment, params: dict[str, Any], out: Path, restart: bool) -> None:
    path = out / MANIFEST
    if not path.exists():
        return
    if restart:
        shutil.rmtree(out / CELLS, ignore_errors=True)
        path.unlink()
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"out: cannot read {path} ({exc}); use restart to start over") from None
    if old.get("fingerprint") != exp.fingerprint(params):
        before = old.get("params", {})
        diff = sorted(
            k
            for k in set(before) | set(params)
            if before.get(k) != params.get(k) and k not in SWEEP_PARAMS
        )
        what = f"parameters {diff}" if diff else f"experiment {old.get('experiment')!r}"
        raise ValueError(
            f"out: {str(out)!r} holds a run of a different configuration ({what} differ); "
            "choose another output folder or restart to discard its cells"
        )


def _check_graph(cells: list[Cell]) -> None:
    """Unique keys, known dependencies and no cycle (each cell then starts once its own
    dependencies have finished; there are no stages to wait for)."""
    keys = {c.key for c in cells}
    if len(keys) != len(cells):
        raise ValueError("experiment produced duplicate cell keys")
    for c in cells:
        missing = set(c.depends) - keys
        if missing:
            raise ValueError(f"cell {c.key!r} depends on unknown cells {sorted(missing)}")
    placed: set[str] = set()
    remaining = list(cells)
    while remaining:
        ready = [c for c in remaining if set(c.depends) <= placed]
        if not ready:
            raise ValueError("experiment cells have a dependency cycle")
        placed |= {c.key for c in ready}
        remaining = [c for c in remaining if c.key not in placed]


def _cell_identity(fingerprint: str, key: str, spec: Mapping[str, Any]) -> dict[str, str]:
    """What a cell file must say it is: the run's configuration, the cell's key and a digest
    of the cell's own specification (its seeds and settings)."""
    text = json.dumps(dict(spec), sort_keys=True, default=str)
    return {
        "experiment_fingerprint": fingerprint,
        "experiment_cell": key,
        "experiment_cell_spec": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }


def _load_cell(path: Path, identity: Mapping[str, str]) -> xr.Dataset | None:
    """A finished cell's Dataset, or ``None`` if the file is not that cell of this run.

    The file is untrusted (a crash, a disk error or a hand edit may have left anything there):
    its seal is verified and its container walked with a deadline
    (:func:`hierbandit._container.read_netcdf`), and the identity it records must be this
    cell's. Anything else means the cell is computed again; nothing here raises or hangs.
    """
    try:
        ds = read_netcdf(path, CELL_KIND).to_dataset()
    except (InvalidFileError, OSError, ValueError, KeyError, TypeError):
        return None
    if any(ds.attrs.get(k) != v for k, v in identity.items()):
        return None
    return ds


def run_experiment(
    name: str,
    *,
    out: str | Path,
    scale: str = "small",
    params: Mapping[str, Any] | None = None,
    workers: int = 1,
    scheduler: str | None = None,
    restart: bool = False,
    max_cells: int | None = None,
) -> ExperimentRun:
    """Run (or resume) experiment ``name`` into ``out``.

    Parameters
    ----------
    name
        A name from :func:`~hierbandit.experiments.catalog.list_experiments`.
    out
        Output folder (created). Finished cells found there are reused.
    scale
        ``"small"`` (minutes) or ``"paper"`` (the paper's protocol).
    params
        Parameter overrides, validated against the experiment's schema.
    workers
        Local worker processes (1: in this process).
    scheduler
        Address of a Dask distributed scheduler to run the cells on instead.
    restart
        Discard the folder's finished cells and configuration first.
    max_cells
        Compute at most this many new cells, then stop without writing the combined outputs
        (for splitting a long sweep into sessions; rerun to continue).

    Returns
    -------
    ExperimentRun
    """
    from hierbandit import __version__

    exp = get_experiment(name)
    resolved = exp.resolve(scale, params)
    if max_cells is not None and (
        isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 0
    ):
        raise ValueError(f"max_cells must be a non-negative int or None, got {max_cells!r}")
    cells = exp.cells(resolved)
    _check_graph(cells)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out: {str(out)!r} exists and is not a folder")
    # every argument is checked (and the executor started) before the folder is touched
    executor = make_executor(workers, scheduler)
    try:
        _check_manifest(exp, resolved, out, bool(restart))
    except BaseException:
        executor.close()
        raise
    start = time.perf_counter()
    fingerprint = exp.fingerprint(resolved)
    manifest = {
        "experiment": exp.name,
        "title": exp.title,
        "scale": scale,
        "params": resolved,
        "fingerprint": fingerprint,
        "hierbandit_version": __version__,
    }
    (out / CELLS).mkdir(parents=True, exist_ok=True)
    write_json(out / MANIFEST, manifest)
    _write_config(out / "config.toml", exp.name, scale, resolved)

    results: dict[str, xr.Dataset] = {}
    reused: list[str] = []
    for cell in cells:
        path = _cell_path(out, cell.key)
        if path.exists():
            ds = _load_cell(path, _cell_identity(fingerprint, cell.key, cell.spec))
            if ds is not None:
                results[cell.key] = ds
                reused.append(cell.key)
    computed: list[str] = []
    todo = sum(c.key not in results for c in cells)
    budget = todo if max_cells is None else min(todo, max_cells)

    waiting = [c for c in cells if c.key not in results]  # in the experiment's order
    running: dict[Any, Cell] = {}  # executor handle → cell, in submission order
    started = 0
    # progress over the new cells, reported as log records (hierbandit.experiments.progress)
    task = progress_task(f"{exp.name} ({executor.description})", total=budget)
    try:
        with task:
            while True:
                # start every cell whose dependencies are done (within the budget of new cells)
                for cell in [c for c in waiting if all(k in results for k in c.depends)]:
                    if started >= budget:
                        break
                    deps = {k: results[k] for k in cell.depends}
                    args = (exp.name, resolved, dict(cell.spec), deps)
                    running[executor.submit(run_cell, *args)] = cell
                    waiting.remove(cell)
                    started += 1
                if not running:
                    break
                handle, ds = executor.next_done(list(running))
                cell = running.pop(handle)
                if not isinstance(ds, xr.Dataset):
                    raise TypeError(f"cell {cell.key!r} returned {type(ds).__name__}, not Dataset")
                ds = ds.copy()
                ds.attrs.update(
                    experiment=exp.name,
                    hierbandit_version=__version__,
                    **_cell_identity(fingerprint, cell.key, cell.spec),
                )
                write_dataset(ds, _cell_path(out, cell.key), kind=CELL_KIND)
                results[cell.key] = ds
                computed.append(cell.key)
                task.advance()
    finally:
        executor.cancel(list(running))
        executor.close()

    files: dict[str, Path] = {}
    complete = all(c.key in results for c in cells)
    if complete:
        config = json.dumps(
            {"experiment": exp.name, "scale": scale, "params": resolved}, sort_keys=True
        )

        def annotate(ds: xr.Dataset) -> xr.Dataset:
            for key in [k for k in ds.attrs if k.startswith("experiment_")]:
                del ds.attrs[key]
            ds.attrs.update(
                experiment=exp.name,
                experiment_config=config,
                hierbandit_version=__version__,
            )
            return ds

        ordered = {c.key: results[c.key] for c in cells}
        files, lines = exp.write(resolved, ordered, out, annotate)
        elapsed = time.perf_counter() - start
        files["summary"] = _write_summary(
            exp, scale, resolved, out, files, lines, computed, reused, executor.description,
            elapsed, __version__,
        )  # fmt: skip
    return ExperimentRun(
        experiment=exp.name,
        params=resolved,
        out=out,
        results=results,
        files=files,
        computed=computed,
        reused=reused,
        executor=executor.description,
        seconds=time.perf_counter() - start,
    )


def _write_config(path: Path, name: str, scale: str, params: Mapping[str, Any]) -> Path:
    """The resolved parameters as a user configuration file (``--config`` reruns them)."""
    lines = [
        "# resolved configuration of this run; rerun with --config",
        f"experiment = {json.dumps(name)}",
        f"scale = {json.dumps(scale)}",
        "",
        "[params]",
        *(f"{k} = {toml_value(v)}" for k, v in params.items()),
        "",
    ]
    return atomic_write(path, lambda p: p.write_text("\n".join(lines), encoding="utf-8"))


def _write_summary(
    exp: Experiment,
    scale: str,
    params: dict[str, Any],
    out: Path,
    files: dict[str, Path],
    lines: list[str],
    computed: list[str],
    reused: list[str],
    executor: str,
    seconds: float,
    version: str,
) -> Path:
    text = [
        f"# {exp.title}",
        "",
        f"Paper: {exp.paper}. Experiment `{exp.name}`, scale `{scale}`, hierbandit {version}.",
        "",
        exp.description,
        "",
        f"{len(computed)} cells computed ({executor}) and {len(reused)} reused in "
        f"{seconds:.1f} s.",
        "",
        *lines,
        "",
        "## Parameters",
        "",
        markdown_table(["parameter", "value"], ([k, json.dumps(v)] for k, v in params.items())),
        "",
        "## Files",
        "",
        *(f"* `{Path(p).relative_to(out) if Path(p).is_relative_to(out) else p}`" for p in
          files.values()),
        "",
        f"Rerun: `hierbandit experiment run {exp.name} --config {out / 'config.toml'} "
        f"--out {out}` (finished cells are reused).",
        "",
    ]  # fmt: skip
    return atomic_write(
        out / "summary.md", lambda p: p.write_text("\n".join(text), encoding="utf-8")
    )
