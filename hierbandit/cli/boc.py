"""``hierbandit boc …``: tools for clustering with bandit feedback (BOC and its lower bound).

* ``hardness`` — D*, w* and λ* of the preset instances.
* ``diagnose`` — one BOC run followed by the Bayesian mixture diagnostic of its partition.

The paper's reproduction (Figure 3, Tables 1 and 2) is the named experiment ``boc``:
``hierbandit experiment run boc``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hierbandit.cli._common import fail

app = typer.Typer(
    no_args_is_help=True,
    help="Clustering with bandit feedback: BOC, its lower bound and the baselines.",
)


@app.command()
def hardness(
    instance: Annotated[
        list[str] | None,
        typer.Option(
            "--instance", help="easy, moderate, challenging, iris, digits (default: all)."
        ),
    ] = None,
) -> None:
    """Print D*(c, U), w* and λ* (per cluster) of the preset instances."""
    import numpy as np

    from hierbandit.boc.instances import digits_instance, iris_instance, synthetic_instance

    makers = {
        "easy": lambda: synthetic_instance("easy"),
        "moderate": lambda: synthetic_instance("moderate"),
        "challenging": lambda: synthetic_instance("challenging"),
        "iris": lambda: iris_instance(target_hardness=None),
        "digits": lambda: digits_instance(target_hardness=None),
    }
    for name in instance or list(makers):
        if name not in makers:
            raise fail(f"unknown instance {name!r}; choose from {list(makers)}")
        inst = makers[name]()
        lb = inst.lower_bound()
        lam_k = np.array([lb.lam[inst.labels == k][0] for k in range(inst.n_clusters)])
        typer.echo(
            f"{name}: M={inst.n_arms} K={inst.n_clusters} d={inst.n_features} "
            f"D*={lb.hardness:.6f}  w*={np.round(lb.w, 5).tolist()}  "
            f"λ* per cluster={np.round(lam_k, 6).tolist()}"
        )


@app.command()
def diagnose(
    instance: Annotated[
        str, typer.Option("--instance", help="easy, moderate, challenging or iris.")
    ] = "easy",
    delta: Annotated[float, typer.Option("--delta", help="Confidence level δ.")] = 0.01,
    threshold: Annotated[
        str, typer.Option("--threshold", help="beta or beta_tilde.")
    ] = "beta_tilde",
    seed: Annotated[int, typer.Option("--seed", min=0, help="Noise and sampler seed.")] = 0,
    draws: Annotated[int, typer.Option("--draws", min=10, help="MCMC draws per chain.")] = 500,
    tune: Annotated[int, typer.Option("--tune", min=10, help="MCMC tuning steps.")] = 500,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the diagnostic as netCDF here.")
    ] = None,
) -> None:
    """Run BOC once, then compare its partition with the mixture posterior (co-clustering)."""
    from hierbandit.boc import BOC
    from hierbandit.boc.instances import iris_instance, synthetic_instance

    if instance == "iris":
        inst = iris_instance()
    elif instance in ("easy", "moderate", "challenging"):
        inst = synthetic_instance(instance)
    else:
        raise fail(f"unknown instance {instance!r}")
    try:
        alg = BOC(inst.n_arms, inst.n_clusters, inst.n_features, delta=delta, threshold=threshold)
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None
    res = alg.run(inst, rng=seed)
    typer.echo(f"BOC: τ = {res.n_pulls}, stopped = {res.stopped}, correct = {res.correct}")
    from hierbandit.bayes.boc import diagnose_boc

    diag = diagnose_boc(alg, draws=draws, tune=tune, random_seed=seed)
    typer.echo(
        f"posterior co-clustering: min within {diag.min_within:.4f}, max between "
        f"{diag.max_between:.4g}; P(partition) = {diag.p_exact:.4f}; agrees: {diag.agrees()}"
    )
    if out is not None:
        from hierbandit._io import write_dataset

        path = write_dataset(diag.to_xarray(), out)
        typer.echo(f"wrote {path}")


if __name__ == "__main__":  # pragma: no cover - ``python -m hierbandit.cli.boc``
    app()
