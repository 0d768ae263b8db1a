"""``hierbandit sclub …``: online clustering of bandits (Li, Chen, Li & Leung 2019).

* ``reproduce`` — the paper's settings (1a), (1b), (1c) and the MovieLens settings (2a), (2b)
  with SCLUB, CLUB, LinUCB-One and LinUCB-Ind; writes Table-1-style final regrets, regret and
  number-of-clusters curves, a mixture audit of SCLUB's clustering and the checked claims.
* ``audit`` — train SCLUB on one setting and audit its final clustering with the user-level
  mixture of linear regressions (EM, or NUTS on the PyMC model): co-clustering matrix and
  adjusted Rand indices.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from hierbandit.cli._common import Out, Scale, Seed, fail

app = typer.Typer(
    no_args_is_help=True,
    help="Online clustering of bandits: SCLUB, CLUB, LinUCB-One and LinUCB-Ind.",
)


class Reward(enum.StrEnum):
    """Reward models."""

    gaussian = "gaussian"
    bernoulli = "bernoulli"


class Preset(enum.StrEnum):
    """Policy configurations."""

    paper = "paper"
    reference = "reference"


class AuditMethod(enum.StrEnum):
    """Mixture fitting methods."""

    em = "em"
    nuts = "nuts"


@app.command("reproduce")
def reproduce_cmd(
    scale: Annotated[
        Scale,
        typer.Option(
            "--scale",
            help="small: n_u=200, T=2^17-1, 4 seeds (minutes); paper: n_u=1000 (MovieLens 671), "
            "T=2^20-1, 10 seeds.",
        ),
    ] = Scale.small,
    seeds: Annotated[
        int | None, typer.Option("--seeds", min=1, help="Override the number of seeds.")
    ] = None,
    out: Out = Path("results/sclub"),
    seed: Seed = 0,
    settings: Annotated[
        list[str] | None,
        typer.Option("--setting", help="Settings to run (repeat; default 1a 1b 1c 2a 2b)."),
    ] = None,
    reward: Annotated[
        Reward, typer.Option("--reward", help="Reward model (the reference code: bernoulli).")
    ] = Reward.gaussian,
    noise_sd: Annotated[
        float, typer.Option("--noise-sd", min=0.0, help="Gaussian noise standard deviation.")
    ] = 0.05,
    preset: Annotated[
        Preset,
        typer.Option("--preset", help="paper (default rules) or reference (the authors' code)."),
    ] = Preset.paper,
    horizon: Annotated[
        int | None, typer.Option("--horizon", min=2, help="Override the horizon T.")
    ] = None,
    users: Annotated[
        int | None, typer.Option("--users", min=2, help="Override the number of users.")
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Seeds run in parallel.")] = 2,
    audit: Annotated[
        bool, typer.Option("--audit/--no-audit", help="EM mixture audit of SCLUB (seed 0).")
    ] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = False,
) -> None:
    """Reproduce SCLUB's Table 1 / Figure 2 and check the paper's claims."""
    from rich.console import Console
    from rich.table import Table

    from hierbandit.experiments.sclub import SETTINGS, check_claims, regret_table, reproduce

    chosen = settings or list(SETTINGS)
    try:
        results = reproduce(
            chosen,
            scale=scale.value,
            n_seeds=seeds,
            horizon=horizon,
            n_users=users,
            seed=seed,
            reward=reward.value,
            noise_sd=noise_sd,
            preset=preset.value,
            n_jobs=jobs,
            audit=audit,
            out=out,
            progress=progress,
        )
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None
    table = Table(title="final cumulative regret (mean ± s.e.) [final clusters]")
    table.add_column("policy")
    for s in results:
        table.add_column(s, justify="right")
    names = list(regret_table(next(iter(results.values()))).index)
    tabs = {s: regret_table(ds) for s, ds in results.items()}
    for name in names:
        table.add_row(
            name,
            *(
                f"{t.loc[name, 'mean']:,.0f} ± {t.loc[name, 'se']:,.0f} "
                f"[{t.loc[name, 'final_clusters']:.0f}]"
                for t in tabs.values()
            ),
        )
    console = Console()
    console.print(table)
    claims = check_claims(results)
    console.print(f"claims hold: {claims['all_hold']}", highlight=False)
    for s, res in claims.items():
        if s != "all_hold":
            console.print(f"  {s}: {res}", highlight=False, soft_wrap=True)
    typer.echo(f"wrote {out / 'table1.md'}, {out / 'regret_curves.png'}, {out / 'summary.json'}")


@app.command("audit")
def audit_cmd(
    setting: Annotated[str, typer.Option("--setting", help="Setting (1a 1b 1c 2a 2b).")] = "1a",
    scale: Annotated[Scale, typer.Option("--scale")] = Scale.small,
    horizon: Annotated[int | None, typer.Option("--horizon", min=2)] = None,
    users: Annotated[int | None, typer.Option("--users", min=2)] = None,
    reward: Annotated[Reward, typer.Option("--reward")] = Reward.gaussian,
    noise_sd: Annotated[float, typer.Option("--noise-sd", min=0.0)] = 0.05,
    method: Annotated[
        AuditMethod, typer.Option("--method", help="em (seconds) or nuts (PyMC; minutes).")
    ] = AuditMethod.em,
    components: Annotated[
        int, typer.Option("--components", min=1, help="Mixture components K.")
    ] = 10,
    draws: Annotated[int, typer.Option("--draws", min=10, help="NUTS draws per chain.")] = 300,
    tune: Annotated[int, typer.Option("--tune", min=0, help="NUTS tuning steps.")] = 300,
    out: Out = Path("results/sclub-audit"),
    seed: Seed = 0,
) -> None:
    """Train SCLUB on one seed of a setting and audit its clustering with the mixture model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from hierbandit._io import atomic_write, write_dataset, write_json
    from hierbandit.experiments.sclub import (
        SCALES,
        audit_clustering,
        make_env,
        make_policies,
        simulate_clustering,
    )

    try:
        env = make_env(
            setting, scale=scale.value, n_users=users, reward=reward.value, noise_sd=noise_sd
        )
        T = horizon or SCALES[scale.value]["horizon"]
        pol = make_policies(env.n_users, env.n_features, ["SCLUB"])
        _, runs = simulate_clustering(pol, env, T, 1, seed=seed, return_runs=True)
        sclub, env0 = runs[0]["policies"][0], runs[0]["env"]
        kwargs = {} if method == AuditMethod.em else {"draws": draws, "tune": tune}
        aud = audit_clustering(
            sclub,
            true_labels=getattr(env0, "labels", None),
            n_components=components,
            method=method.value,
            **kwargs,
        )
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    write_dataset(aud, out / f"audit_{setting}.nc")
    write_json(out / f"audit_{setting}.json", dict(aud.attrs))
    order = np.lexsort((np.arange(env.n_users), aud["policy_labels"].values))
    fig, ax = plt.subplots(figsize=(5, 4.4), layout="constrained")
    im = ax.imshow(aud["coclustering"].values[np.ix_(order, order)], vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"mixture co-clustering, users ordered by SCLUB cluster ({setting})", fontsize=9)
    fig.colorbar(im, ax=ax)
    atomic_write(out / f"audit_{setting}.png", lambda p: fig.savefig(p, dpi=110, format="png"))
    plt.close(fig)
    for k, v in aud.attrs.items():
        typer.echo(f"{k}: {v}")
    typer.echo(f"wrote {out / f'audit_{setting}.nc'} and {out / f'audit_{setting}.png'}")
