"""The ``hierbandit`` command.

``hierbandit quickstart`` is the main job of the README: the whole workflow on the default real
log (MovieLens ratings): fit the prior by EB, ML and MCMC, diagnose, compare sampling with the
closed form, simulate EbmTS warm-started from the prior against LinTS, and write a report folder.
``hierbandit fit-prior`` fits a prior to a user's own CSV/Parquet log; ``hierbandit
build-models`` rebuilds the default priors in ``models/``. ``hierbandit demo`` is a short ebm
simulation on the paper's data-poor setting. Every paper's reproduction runs through one door,
``hierbandit experiment run NAME`` (:mod:`hierbandit.cli.experiment`); the per-paper groups hold
the tools that are not reproductions (``sclub audit``, the cascade priors, the BOC diagnostics).

The process-wide settings are made here, when the command starts and before anything is
compiled: numba's cache folder keyed by the kernels' sources
(:func:`hierbandit._numba_cache.configure_numba_cache`), matplotlib's file-only backend, and the
display of the library's log records and progress (:mod:`hierbandit.cli._render`).
"""

from __future__ import annotations

import contextlib
import enum
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from hierbandit.cli._common import Out, Seed, Seeds, fail
from hierbandit.cli.boc import app as boc_app
from hierbandit.cli.cascade import app as cascade_app
from hierbandit.cli.experiment import app as experiment_app
from hierbandit.cli.sclub import app as sclub_app
from hierbandit.cli.serve import serve_cmd

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0])
app.add_typer(experiment_app, name="experiment")
app.add_typer(boc_app, name="boc")
app.add_typer(cascade_app, name="cascade")
app.add_typer(sclub_app, name="sclub")
app.command("serve")(serve_cmd)

Horizon = Annotated[int, typer.Option("--horizon", min=10, help="Rounds per run.")]
Draws = Annotated[int, typer.Option("--draws", min=1, help="MCMC draws per chain.")]
Tune = Annotated[int, typer.Option("--tune", min=0, help="MCMC tuning steps.")]
Chains = Annotated[int, typer.Option("--chains", min=1, help="MCMC chains.")]


def _show_version(value: bool) -> None:
    """``--version``: the package's version, then the Python and libraries it runs on."""
    if not value:
        return
    import platform

    from hierbandit._version import __version__, library_versions

    typer.echo(f"hierbandit {__version__}")
    typer.echo(
        f"Python {platform.python_version()}; "
        + ", ".join(f"{name} {v or 'not installed'}" for name, v in library_versions().items())
    )
    raise typer.Exit()


@app.callback()
def start(
    ctx: typer.Context,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the detailed log lines.")
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Show the version of hierbandit and of the libraries it runs on, and exit.",
        ),
    ] = False,
) -> None:
    """Make the process-wide settings, once, before any command runs."""
    from hierbandit._numba_cache import configure_numba_cache

    configure_numba_cache()  # before any kernel module is imported (numba reads it then)
    import matplotlib

    matplotlib.use("Agg")  # the command writes figures to files and opens no window
    from hierbandit.cli._render import start_rendering

    renderer = start_rendering(verbose=verbose)
    ctx.obj = renderer
    ctx.call_on_close(renderer.detach)


def _print_table(ds, instance: int = 0) -> None:
    from rich.console import Console
    from rich.table import Table

    from hierbandit.experiments.simulate import regret_table

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


def _given(**options: Any) -> dict[str, Any]:
    """The options given on the command line (the others keep the library's defaults)."""
    return {k: v for k, v in options.items() if v is not None}


MaybeInt = int | None
MaybeUsers = Annotated[
    MaybeInt, typer.Option("--users", min=2, help="Users (instances) of the MovieLens log.")
]
MaybeSeed = Annotated[MaybeInt, typer.Option("--seed", min=0, help="Base seed.")]


@app.command()
def quickstart(
    out: Out = Path("results/quickstart"),
    seeds: Annotated[MaybeInt, typer.Option("--seeds", min=1, help="Simulation seeds.")] = None,
    horizon: Annotated[
        MaybeInt, typer.Option("--horizon", min=10, help="Rounds per simulation.")
    ] = None,
    draws: Annotated[
        MaybeInt,
        typer.Option("--draws", min=10, help="MCMC draws per chain of the full-Bayes fit."),
    ] = None,
    tune: Annotated[
        MaybeInt, typer.Option("--tune", min=0, help="MCMC tuning steps of the full-Bayes fit.")
    ] = None,
    chains: Annotated[MaybeInt, typer.Option("--chains", min=1, help="MCMC chains.")] = None,
    users: MaybeUsers = None,
    compare_draws: Annotated[
        MaybeInt,
        typer.Option("--compare-draws", min=10, help="Draws per chain of sampling vs closed form."),
    ] = None,
    compare_tune: Annotated[
        MaybeInt,
        typer.Option("--compare-tune", min=0, help="Tuning steps of sampling vs closed form."),
    ] = None,
    seed: MaybeSeed = None,
) -> None:
    """The whole workflow on real MovieLens data: fit, diagnose, compare, simulate, report.

    Options not given take the values of ``hierbandit.experiments.quickstart.DEFAULTS``.
    """
    from hierbandit.experiments.quickstart import run_quickstart

    try:
        result = run_quickstart(
            out,
            **_given(
                draws=draws,
                tune=tune,
                chains=chains,
                seeds=seeds,
                horizon=horizon,
                n_users=users,
                random_seed=seed,
                compare_draws=compare_draws,
                compare_tune=compare_tune,
            ),
        )
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None
    _print_quickstart_summary(result)


def _print_quickstart_summary(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="quickstart: final cumulative regret (mean ± s.e. over seeds)")
    table.add_column("policy")
    table.add_column("overall", justify="right")
    table.add_column("least active user", justify="right")
    regret = result["regret"]
    for pol in sorted(regret, key=lambda p: regret[p]["mean"]):
        r = regret[pol]
        table.add_row(
            pol,
            f"{r['mean']:.1f} ± {r['se']:.1f}",
            f"{r['poorest_user_mean']:.1f} ± {r['poorest_user_se']:.1f}",
        )
    console = Console()
    console.print(table)
    d, c = result["diagnostics"], result["closed_form"]
    console.print(
        f"MCMC: max R-hat {d['max_rhat']:.3f}, min bulk ESS {d['min_ess_bulk']:.0f}, "
        f"{d['divergences']} divergences. Sampling vs closed form: {c['n_params']} parameters, "
        f"max |z| {c['max_abs_z']:.2f}, verdict {c['verdict']}.",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"wrote {result['report']}", highlight=False, soft_wrap=True)


class Method(enum.StrEnum):
    """Fitting methods of ``fit-prior`` (``ml`` by default, as ``fit_prior``)."""

    ml = "ml"
    eb = "eb"
    mcmc = "mcmc"


def _print_prior_summary(prior: Any, path: Path, diag: Any = None) -> None:
    import numpy as np
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    feats = prior.features
    table = Table(title=f"{prior.method} prior: Σ_k and σ²_k per arm")
    table.add_column("arm", justify="right")
    table.add_column("σ²_k", justify="right")
    show_diag = len(feats) <= 6
    if show_diag:
        for f in feats:
            table.add_column(escape(f"Σ[{f}, {f}]"), justify="right")
    else:
        table.add_column("trace Σ_k", justify="right")
    table.add_column("max |corr|", justify="right")
    for k, arm in enumerate(prior.arms):
        S = prior.Sigma[k]
        sd = np.sqrt(np.clip(np.diag(S), 0.0, None))
        with np.errstate(divide="ignore", invalid="ignore"):
            corr = S / np.outer(sd, sd)
        off = corr[~np.eye(len(feats), dtype=bool)]
        off = off[np.isfinite(off)]
        cells = [f"{v:.4g}" for v in np.diag(S)] if show_diag else [f"{np.trace(S):.4g}"]
        table.add_row(
            str(arm),
            f"{prior.sigma2[k]:.4g}",
            *cells,
            f"{np.abs(off).max():.2f}" if off.size else "-",
        )
    console = Console()
    console.print(table)
    prov = prior.provenance
    console.print(
        f"{prov.get('n_rows', '?')} rows, {prov.get('n_instances', '?')} instances, "
        f"{prior.n_arms} arm{'' if prior.n_arms == 1 else 's'}, features {feats}; "
        f"data hash {str(prov.get('data_hash', ''))[:16]}…",
        highlight=False,
        soft_wrap=True,
    )
    if diag is not None:
        status = "OK" if diag.ok else f"{len(diag.problems)} problem(s)"
        console.print(
            f"MCMC diagnostics {status}: max R-hat {diag.max_rhat:.3f}, min bulk ESS "
            f"{diag.min_ess_bulk:.0f}, {diag.divergences} divergences",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"wrote {path}", highlight=False, soft_wrap=True)


def _print_ignored_columns(ignored: tuple[tuple[str, str], ...]) -> None:
    """Say which columns were not taken as features (inferred features only) and why."""
    if ignored:
        listed = ", ".join(f"{name!r} (not numeric: {why})" for name, why in ignored)
        typer.echo(
            f"ignored column{'' if len(ignored) == 1 else 's'} {listed}; to choose the features "
            "yourself, name them with --feature"
        )


#: The beginnings of the warnings of the package that the command shows as lines of its own:
#: features inferred by ``read_log``, an EB fit that could not estimate Σ.
_OWN_WARNINGS = ("features not given", "empirical Bayes could not estimate")


@contextlib.contextmanager
def _recording_warnings() -> Iterator[list[Any]]:
    """Record the warnings issued in the block, the package's own each time they are issued."""
    with warnings.catch_warnings(record=True) as caught:
        for start in _OWN_WARNINGS:
            warnings.filterwarnings("always", message=start, category=UserWarning)
        yield caught


def _print_warnings(caught: list[Any]) -> None:
    """Show the package's warnings among ``caught`` (:data:`_OWN_WARNINGS`) as lines of the
    command's output, in the command's terms; any other warning is issued again as it was."""
    for w in caught:
        text = str(w.message)
        if issubclass(w.category, UserWarning) and text.startswith(_OWN_WARNINGS):
            text = text.replace("Pass features=[...]", "Name them with --feature")
            typer.echo("warning: " + text.replace('method="ml"', "--method ml"))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@app.command("fit-prior")
def fit_prior_cmd(
    data: Annotated[
        Path,
        typer.Argument(
            help="The log: a CSV (optionally compressed) or Parquet file, or a directory of "
            "Parquet files (hive-partitioned or not), read out of core with Dask."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output netCDF file (PATH.nc).")],
    method: Annotated[
        Method,
        typer.Option(
            "--method",
            help="Fitting method: ml (type-II maximum likelihood, the default), eb (the ebm "
            "paper's empirical Bayes) or mcmc (full Bayes).",
        ),
    ] = Method.ml,
    instance: Annotated[str, typer.Option("--instance", help="Instance (user) column.")] = (
        "instance"
    ),
    arm: Annotated[str, typer.Option("--arm", help="Arm column.")] = "arm",
    single_arm: Annotated[
        bool, typer.Option("--single-arm", help="The log has no arm column (one arm).")
    ] = False,
    reward: Annotated[str, typer.Option("--reward", help="Reward column.")] = "reward",
    feature: Annotated[
        list[str] | None,
        typer.Option(
            "--feature", help="Feature column (repeat for several; default: every other numeric)."
        ),
    ] = None,
    lam: Annotated[
        float | None,
        typer.Option("--lam", help="Shared-mean prior precision (default 0.001; 0 for ml)."),
    ] = None,
    draws: Draws = 1000,
    tune: Annotated[
        int | None,
        typer.Option("--tune", min=0, help="MCMC tuning steps (default: the fit's, 400)."),
    ] = None,
    chains: Chains = 2,
    seed: Seed = 0,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            help="A directory log: the address of a running Dask scheduler (default: a local "
            "cluster for this command).",
        ),
    ] = None,
) -> None:
    """Fit a hierarchical prior (per-arm shared mean, Σ_k, σ²_k) to your own log and save it."""
    if out.suffix != ".nc":
        raise fail(f"--out must be a netCDF path ending in .nc, got {str(out)!r}")
    if out.exists() and out.is_dir():
        raise fail(f"--out {str(out)!r} is a directory; give a file path ending in .nc")
    from hierbandit.bayes import diagnose, fit_prior
    from hierbandit.data import read_log

    kwargs: dict[str, Any] = {"method": method.value, "lam": lam, "random_seed": seed}
    if method is Method.mcmc:
        kwargs.update(draws=draws, tune=tune, chains=chains)
    columns = {
        "instance": instance,
        "arm": None if single_arm else arm,
        "reward": reward,
        "features": list(feature) if feature else None,
    }
    try:
        with _recording_warnings() as caught:
            if data.is_dir():  # out of core: the sufficient statistics, computed by Dask
                from hierbandit.bayes import summarise_dask

                log = summarise_dask(data, scheduler=scheduler, **columns)
            else:
                log = read_log(data, **columns)
    except (ValueError, TypeError, FileNotFoundError, OSError) as exc:
        raise fail(str(exc)) from None
    _print_warnings(caught)
    _print_ignored_columns(log.ignored_columns)
    what = (
        f"fitting the prior ({method.value}) to {log.n_rows:,} rows, {log.n_instances:,} "
        f"instances, {log.n_arms} arm{'s' if log.n_arms > 1 else ''}"
    )
    try:
        with _recording_warnings() as caught:
            # MCMC: no spinner; the sampler's own bar (draws, speed, time left) and the
            # renderer's bars of the steps after it (exact draws, log-likelihood) show the
            # progress, and a spinner on top of them would fight them for the terminal
            if method is not Method.mcmc and sys.stderr.isatty():
                from rich.console import Console

                with Console(stderr=True).status(f"{what} …"):
                    prior = fit_prior(log, **kwargs)
            else:
                prior = fit_prior(log, **kwargs)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    _print_warnings(caught)
    diag = diagnose(prior, warn=False) if method is Method.mcmc else None
    try:
        path = prior.save(out)
    except OSError as exc:
        raise fail(f"could not write {str(out)!r}: {exc}") from None
    _print_prior_summary(prior, path, diag)


@app.command("build-models")
def build_models_cmd(
    out: Annotated[Path, typer.Option("--out", help="Models folder.")] = Path("models"),
    draws: Annotated[MaybeInt, typer.Option("--draws", min=1, help="MCMC draws per chain.")] = None,
    tune: Annotated[MaybeInt, typer.Option("--tune", min=0, help="MCMC tuning steps.")] = None,
    chains: Annotated[MaybeInt, typer.Option("--chains", min=1, help="MCMC chains.")] = None,
    users: MaybeUsers = None,
    seed: MaybeSeed = None,
) -> None:
    """Rebuild the default priors: models/movielens-{eb,ml,mcmc}/ (prior.nc + card.json).

    Options not given take the values of ``hierbandit.experiments.models_build.DEFAULTS``.
    """
    from hierbandit.experiments.models_build import build_models

    try:
        build_models(
            out,
            **_given(n_users=users, draws=draws, tune=tune, chains=chains, random_seed=seed),
        )
    except (ValueError, TypeError) as exc:
        raise fail(str(exc)) from None


@app.command()
def demo(
    out: Out = Path("results/demo"),
    seeds: Seeds = 8,
    horizon: Horizon = 2000,
    seed: Seed = 0,
) -> None:
    """Short ebm simulation (synthetic data-poor setting): regret table and regret plot."""
    from hierbandit.experiments.ebm import run_setting, write_results

    ds = run_setting("fig1-data-poor", n_seeds=seeds, horizon=horizon, seed=seed)
    paths = write_results(ds, out, "demo")
    _print_table(ds)
    typer.echo(f"wrote {paths['plot']}, {paths['table']} and {paths['data']}")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
