"""``hierbandit experiment …``: every paper reproduction behind one door.

* ``list`` — the named experiments, their papers and cell counts;
* ``show NAME`` — an experiment's parameters with their values at each scale;
* ``run NAME`` — run or resume it (``--scale``, ``--seeds``, ``--config``, ``--set``,
  ``--workers``, ``--scheduler``, ``--out``), writing data, the paper's plots and a summary.

The defaults of every parameter are read from the experiment's shipped configuration
(``hierbandit/experiments/configs/NAME.toml``); nothing here repeats them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hierbandit.cli._common import Scale, fail

app = typer.Typer(
    no_args_is_help=True,
    help="Named experiments: every paper reproduction, resumable, local or distributed.",
)


@app.command("list")
def list_cmd() -> None:
    """List every experiment with its paper and number of cells at each scale."""
    from hierbandit.experiments.catalog import list_experiments

    for exp in list_experiments():
        small = len(exp.cells(exp.defaults["small"]))
        paper = len(exp.cells(exp.defaults["paper"]))
        typer.echo(f"{exp.name:<14} {exp.title}")
        typer.echo(f"{'':<14} paper: {exp.paper}; cells: {small} (small), {paper} (paper)")


@app.command("show")
def show_cmd(name: Annotated[str, typer.Argument(help="Experiment name.")]) -> None:
    """Show an experiment's description and parameters (values at the small and paper scales)."""
    from hierbandit.experiments.catalog import get_experiment
    from hierbandit.experiments.registry import toml_value

    try:
        exp = get_experiment(name)
    except ValueError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"{exp.name}: {exp.title}\npaper: {exp.paper}\n\n{exp.description}\n")
    for p in exp.params:
        small, paper = exp.defaults["small"][p.name], exp.defaults["paper"][p.name]
        values = (
            toml_value(small)
            if small == paper
            else f"small {toml_value(small)}, paper {toml_value(paper)}"
        )
        typer.echo(f"  {p.name}: {p.help} [{p.describe()}] = {values}")


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(help="Experiment name (see `hierbandit experiment list`).")
    ],
    scale: Annotated[
        Scale | None,
        typer.Option("--scale", help="small (minutes) or paper (the paper's protocol)."),
    ] = None,
    seeds: Annotated[
        int | None, typer.Option("--seeds", min=1, help="Override the number of seeds/trials.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Output folder (default results/NAME-SCALE).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="A TOML or YAML file of parameter values.")
    ] = None,
    assignments: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override one parameter: key=value (TOML value syntax)."),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="Local worker processes (1: in-process).")
    ] = 1,
    scheduler: Annotated[
        str | None, typer.Option("--scheduler", help="Run on this Dask scheduler address.")
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="Discard the output folder's finished cells first.")
    ] = False,
    max_cells: Annotated[
        int | None,
        typer.Option("--max-cells", min=0, help="Compute at most this many cells, then stop."),
    ] = None,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show progress bars.")
    ] = True,
) -> None:
    """Run (or resume) a named experiment."""
    from hierbandit.experiments.catalog import get_experiment
    from hierbandit.experiments.registry import load_user_config, parse_assignment
    from hierbandit.experiments.runner import run_experiment

    if not progress and ctx.obj is not None:
        ctx.obj.show_progress = False  # the command's renderer (hierbandit.cli._render)

    try:
        exp = get_experiment(name)
        overrides: dict = {}
        file_scale = None
        if config is not None:
            user = load_user_config(config)
            if user["experiment"] not in (None, exp.name):
                raise ValueError(
                    f"config: {str(config)!r} is for experiment {user['experiment']!r}, "
                    f"not {exp.name!r}"
                )
            file_scale = user["scale"]
            overrides.update(user["params"])
        for text in assignments or []:
            key, value = parse_assignment(text)
            overrides[key] = value
        if seeds is not None:
            overrides["seeds"] = seeds
        chosen = str(scale) if scale is not None else (file_scale or "small")
        folder = out if out is not None else Path("results") / f"{exp.name}-{chosen}"
        run = run_experiment(
            exp.name,
            out=folder,
            scale=chosen,
            params=overrides,
            workers=workers,
            scheduler=scheduler,
            restart=restart,
            max_cells=max_cells,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    typer.echo(
        f"{exp.name}: {len(run.computed)} cells computed, {len(run.reused)} reused "
        f"({run.executor}, {run.seconds:.1f} s)"
    )
    if run.files:
        typer.echo(f"wrote {run.files['summary']} and {len(run.files) - 1} other files in {folder}")
    else:
        typer.echo(f"stopped early; rerun the same command to continue ({folder})")
