"""``hierbandit cascade …``: tools for the multi-user cascading bandits (UCBBP, AUCBBP).

* ``compare`` — Laplace (batch and online) vs NUTS on a simulated cascade log
  (``docs/cascading.md``, the Bayesian side).
* ``simulate-log`` — write a simulated historical cascade log (CSV).
* ``fit-prior`` — fit a Gaussian prior on θ to a cascade log (Laplace or NUTS) for warm starts.

The paper's reproduction (Figure 5 and its acceptance criteria) is the named experiment
``cascade``: ``hierbandit experiment run cascade``.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from hierbandit.cli._common import Out, Seed, fail

app = typer.Typer(
    no_args_is_help=True,
    help="Multi-user cascading bandits: UCBBP, AUCBBP and the logistic click model.",
)


class Method(enum.StrEnum):
    """Prior-fitting methods."""

    laplace = "laplace"
    mcmc = "mcmc"


def _print_frame(df, title: str) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    frame = df.reset_index()
    for col in frame.columns:
        table.add_column(str(col))
    for _, row in frame.iterrows():
        cells = []
        for v in row.tolist():
            if isinstance(v, bool):
                cells.append("yes" if v else "[red]NO[/red]")
            elif isinstance(v, float):
                cells.append(f"{v:.4g}")
            else:
                cells.append(str(v))
        table.add_row(*cells)
    Console().print(table)


@app.command("compare")
def compare(
    out: Out = Path("results/cascade-compare"),
    episodes: Annotated[
        int, typer.Option("--episodes", min=1, help="Episodes of the simulated log (N=10).")
    ] = 150,
    draws: Annotated[int, typer.Option("--draws", min=10, help="NUTS draws per chain.")] = 1000,
    tune: Annotated[int, typer.Option("--tune", min=0, help="NUTS tuning steps.")] = 1000,
    chains: Annotated[int, typer.Option("--chains", min=1, help="NUTS chains.")] = 4,
    lam: Annotated[float, typer.Option("--lam", min=0.0, help="Prior precision λ.")] = 1.0,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Compare on this cascade log instead of a simulated one."),
    ] = None,
    seed: Seed = 0,
) -> None:
    """Laplace (batch and online newton1) vs NUTS on a cascade log: report and plot (§8.4)."""
    from hierbandit.bayes import compare_laplace_nuts
    from hierbandit.cascade.env import CascadeEnv

    try:
        if data is None:
            env = CascadeEnv.preset("mccb-bayes", n_users=10, rng=seed)
            log = env.simulate_log(episodes, rng=seed + 1)
        else:
            log = data
        cmp = compare_laplace_nuts(
            log, lam=lam, draws=draws, tune=tune, chains=chains, random_seed=seed
        )
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None
    paths = cmp.write(out)
    _print_frame(cmp.checks, 'Laplace vs NUTS (docs/cascading.md, "Laplace vs NUTS")')
    typer.echo(f"wrote {paths['report']} and {paths['plot']}")


@app.command("simulate-log")
def simulate_log(
    out: Annotated[Path, typer.Option("--out", help="Output CSV file.")],
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="Episodes.")] = 150,
    users: Annotated[int, typer.Option("--users", min=1, help="Users per episode.")] = 10,
    preset: Annotated[
        str, typer.Option("--preset", help="Environment preset: mccb-repro or mccb-bayes.")
    ] = "mccb-bayes",
    seed: Seed = 0,
) -> None:
    """Write a cascade log (uniformly random arms; one row per displayed position)."""
    from hierbandit._io import atomic_write
    from hierbandit.cascade.env import CascadeEnv

    try:
        env = CascadeEnv.preset(preset, n_users=users, rng=seed)
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None
    df = env.simulate_log(episodes, rng=seed + 1)
    atomic_write(out, lambda p: df.to_csv(p, index=False))
    typer.echo(f"wrote {len(df)} rows to {out} (true theta = {env.theta.round(4).tolist()})")


@app.command("fit-prior")
def fit_prior(
    data: Annotated[Path, typer.Argument(help="Cascade log: CSV, Parquet or netCDF.")],
    out: Annotated[Path, typer.Option("--out", help="Output netCDF file (PATH.nc).")],
    method: Annotated[Method, typer.Option("--method", help="laplace or mcmc.")] = Method.laplace,
    lam: Annotated[float, typer.Option("--lam", min=0.0, help="Prior precision λ.")] = 1.0,
    n_arms: Annotated[
        int | None, typer.Option("--n-arms", min=1, help="K (default: largest arm id + 1).")
    ] = None,
    feature: Annotated[
        list[str] | None,
        typer.Option("--feature", help="Context column (repeat; default every other numeric)."),
    ] = None,
    draws: Annotated[int, typer.Option("--draws", min=10)] = 1000,
    tune: Annotated[int, typer.Option("--tune", min=0)] = 1000,
    chains: Annotated[int, typer.Option("--chains", min=1)] = 4,
    seed: Seed = 0,
) -> None:
    """Fit a Gaussian prior on θ to a cascade log and save it (warm-starts UCBBP/AUCBBP)."""
    if out.suffix != ".nc":
        raise fail(f"--out must end in .nc, got {str(out)!r}")
    from hierbandit.bayes.cascade import fit_cascade_prior

    try:
        prior = fit_cascade_prior(
            data,
            method.value,
            lam=lam,
            draws=draws,
            tune=tune,
            chains=chains,
            random_seed=seed,
            n_arms=n_arms,
            features=list(feature) if feature else None,
        )
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    path = prior.save(out)
    import pandas as pd

    frame = pd.DataFrame(
        {"mean": prior.mean, "sd": prior.sd},
        index=pd.Index(prior.dataset["param"].values.tolist(), name="param"),
    )
    _print_frame(frame, f"{prior.method} prior on θ ({prior.provenance.get('n_rows')} rows)")
    typer.echo(f"wrote {path}")
