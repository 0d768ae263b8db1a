"""``hierbandit sclub …``: tools for the online clustering of bandits (SCLUB, CLUB, …).

* ``audit`` — train SCLUB on one setting and audit its final clustering with the user-level
  mixture of linear regressions (EM, or NUTS on the PyMC model): co-clustering matrix and
  adjusted Rand indices.

The paper's reproduction (Table 1) is the named experiment ``sclub``: ``hierbandit experiment
run sclub``. The defaults of ``audit`` (horizon, reward model, noise) are the experiment's, read
from its shipped configuration.
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


class AuditMethod(enum.StrEnum):
    """Mixture fitting methods."""

    em = "em"
    nuts = "nuts"


@app.command("audit")
def audit_cmd(
    setting: Annotated[str, typer.Option("--setting", help="Setting (1a 1b 1c 2a 2b).")] = "1a",
    scale: Annotated[Scale, typer.Option("--scale")] = Scale.small,
    horizon: Annotated[
        int | None, typer.Option("--horizon", min=2, help="Rounds T (default: the scale's).")
    ] = None,
    users: Annotated[
        int | None, typer.Option("--users", min=2, help="Users (default: the scale's).")
    ] = None,
    reward: Annotated[
        Reward | None, typer.Option("--reward", help="Reward model (default: the experiment's).")
    ] = None,
    noise_sd: Annotated[
        float | None,
        typer.Option("--noise-sd", min=0.0, help="Gaussian noise sd (default: the experiment's)."),
    ] = None,
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
    import matplotlib.pyplot as plt
    import numpy as np

    from hierbandit._io import atomic_write, write_dataset, write_json
    from hierbandit.experiments.catalog import get_experiment
    from hierbandit.experiments.sclub import (
        audit_clustering,
        make_env,
        make_policies,
        simulate_clustering,
    )

    try:
        env = make_env(
            setting,
            scale=scale.value,
            n_users=users,
            reward=None if reward is None else reward.value,
            noise_sd=noise_sd,
        )
        T = horizon or get_experiment("sclub").defaults[scale.value]["horizon"]
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
