"""The ``hierbandit`` command.

``hierbandit demo`` is the main job of the README: a short ebm simulation on the paper's
data-poor setting that prints a regret table and writes a regret plot. ``hierbandit ebm
figures`` reproduces the ebm paper's Figures 1 and 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0])
ebm_app = typer.Typer(no_args_is_help=True, help="Experiments of the ebm paper (ebmTS/ebmUCB).")
app.add_typer(ebm_app, name="ebm")

Seeds = Annotated[int, typer.Option("--seeds", min=1, help="Number of random seeds.")]
Horizon = Annotated[int, typer.Option("--horizon", min=10, help="Rounds per run.")]
Out = Annotated[Path, typer.Option("--out", help="Output folder.")]
Seed = Annotated[int, typer.Option("--seed", min=0, help="Base seed.")]


def _print_table(ds, instance: int = 0) -> None:
    from rich.console import Console
    from rich.table import Table

    from .experiments.simulate import regret_table

    overall = regret_table(ds)
    inst = regret_table(ds, instance=instance)
    table = Table(title=ds.attrs.get("setting_description", "cumulative regret"))
    table.add_column("policy")
    table.add_column("overall regret (mean ± s.e.)", justify="right")
    table.add_column(f"instance {instance} regret (mean ± s.e.)", justify="right")
    for pol in overall.sort_values("mean").index:
        o, i = overall.loc[pol], inst.loc[pol]
        table.add_row(
            str(pol), f"{o['mean']:.1f} ± {o['se']:.1f}", f"{i['mean']:.1f} ± {i['se']:.1f}"
        )
    Console().print(table)


@app.command()
def demo(
    out: Out = Path("results/demo"),
    seeds: Seeds = 8,
    horizon: Horizon = 2000,
    seed: Seed = 0,
) -> None:
    """Short ebm simulation (data-poor setting): regret table and regret plot."""
    from .experiments.ebm import run_setting, write_results

    ds = run_setting("fig1-data-poor", n_seeds=seeds, horizon=horizon, seed=seed, progress=True)
    paths = write_results(ds, out, "demo")
    _print_table(ds)
    typer.echo(f"wrote {paths['plot']}, {paths['table']} and {paths['data']}")


@ebm_app.command("figures")
def ebm_figures(
    out: Out = Path("results/ebm"),
    seeds: Seeds = 20,
    horizon: Horizon = 5000,
    seed: Seed = 0,
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--setting", help="fig1-balanced, fig1-data-poor, fig2-sparse (default: all)."
        ),
    ] = None,
) -> None:
    """Reproduce the ebm paper's Figure 1 (both settings) and Figure 2."""
    from .experiments.ebm import FIGURE_POLICY_NAMES, SETTINGS, run_setting, write_results

    for name in setting or list(SETTINGS):
        if name not in SETTINGS:
            raise typer.BadParameter(f"unknown setting {name!r}; choose from {list(SETTINGS)}")
        ds = run_setting(
            name,
            n_seeds=seeds,
            horizon=horizon,
            seed=seed,
            policies=FIGURE_POLICY_NAMES,
            progress=True,
        )
        paths = write_results(ds, out, name)
        _print_table(ds)
        typer.echo(f"wrote {paths['plot']}, {paths['table']} and {paths['data']}")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
