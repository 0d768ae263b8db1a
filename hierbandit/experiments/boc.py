"""Reproduction of the experiments of *Optimal Clustering with Bandit Feedback* (Section 6).

* **Figure 3** (part ``"synthetic"``): the easy, moderate and challenging instances of eq. (9),
  BOC, Oracle and Uniform, thresholds β (eq. 8) and β̃ (§6.1); mean sample complexity against
  log(1/δ) with the lower bound ``d_KL(δ, 1−δ) D*``. The paper does not give its δ grid; the
  x-axis runs to log(1/δ) = 400, so the grid is ``log(1/δ) ∈ {ln 10, 5, 10, 25, 50, 100, 150,
  …, 400}``.
* **Table 1** (part ``"real"``): Iris and the digits stand-in for Yeast/MNIST (Section 6.2
  construction, D* = 2), BOC and Uniform with β̃, δ = 10⁻¹ … 10⁻¹⁰.
* **Table 2** (part ``"table2"``, Appendix C.2): the original sampling rule against linear
  exploration (LE, exact r) on the challenging instance rescaled to D* = 2 and on Iris, β̃.

Every (threshold, δ) comes from one sample path per (instance, algorithm, trial)
(:func:`~hierbandit.boc.stopping_times`). Seeds: trial ``j`` of instance ``name`` uses
the noise seed ``SeedSequence(seed, spawn_key=(crc32(name), j))`` for every algorithm (common
random numbers). Results are xarray Datasets with dims ``(algorithm, trial, threshold,
log_inv_delta)`` (:func:`run_part`); :func:`write_reproduction` writes netCDF, Markdown tables, PNG
plots and an acceptance summary. :data:`EXPERIMENT` is the named experiment ``boc``
(``hierbandit experiment run boc``); its parameter values (trials, parts, the digits dimension,
the pull budget) live in ``configs/boc.toml``.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from hierbandit._extras import require
from hierbandit._io import atomic_write, write_dataset, write_json
from hierbandit._validation import check_choice, check_positive_int
from hierbandit.boc import BOC, Oracle, Uniform, stopping_times
from hierbandit.boc.instances import (
    ClusterBandit,
    digits_instance,
    iris_instance,
    synthetic_instance,
)
from hierbandit.boc.thresholds import kl_bernoulli_delta
from hierbandit.experiments._config import check_seed
from hierbandit.experiments.cells import Annotate, concat_cells, group_cells, windows
from hierbandit.experiments.registry import SEED, Cell, Param, define_experiment
from hierbandit.experiments.report import markdown_table, write_text

__all__ = [
    "DIGITS_ARMS",
    "EXPERIMENT",
    "PARTS",
    "PART_INSTANCES",
    "REAL_LOG_INV_DELTAS",
    "SYNTHETIC_LOG_INV_DELTAS",
    "acceptance",
    "clopper_pearson",
    "make_algorithm",
    "make_instance",
    "part_instances",
    "plot_figure3",
    "run_instance",
    "run_part",
    "slopes",
    "summary_table",
    "write_reproduction",
]

SYNTHETIC_LOG_INV_DELTAS = (math.log(10.0), 5.0, 10.0, 25.0, 50.0, 100.0, 150.0, 200.0, 250.0,
                            300.0, 350.0, 400.0)  # fmt: skip
#: δ = 10⁻¹ … 10⁻¹⁰ (Tables 1 and 2)
REAL_LOG_INV_DELTAS = tuple(k * math.log(10.0) for k in range(1, 11))
ALGORITHMS = ("BOC", "Oracle", "Uniform", "BOC-LE")
#: images drawn for the digits stand-in (Section 6.2 construction)
DIGITS_ARMS = 500


def make_algorithm(name: str, instance: ClusterBandit, **kwargs: Any) -> Any:
    """A fresh algorithm for ``instance``: ``"BOC"``, ``"Oracle"`` (true λ*), ``"Uniform"`` or
    ``"BOC-LE"`` (linear exploration with the exact r of the instance)."""
    check_choice(name, ALGORITHMS, "algorithm")
    M, K, d = instance.n_arms, instance.n_clusters, instance.n_features
    if name == "BOC":
        return BOC(M, K, d, **kwargs)
    if name == "BOC-LE":
        return BOC(M, K, d, exploration="linear", r=instance.separation_ratio, **kwargs)
    if name == "Oracle":
        return Oracle(M, K, d, lam=instance.lower_bound().lam, **kwargs)
    return Uniform(M, K, d, **kwargs)


def _noise_seed(seed: int, instance: ClusterBandit, trial: int) -> np.random.SeedSequence:
    key = zlib.crc32(instance.name.encode())
    return np.random.SeedSequence(seed, spawn_key=(key, trial))


def _one_trial(args: tuple) -> tuple[int, int, dict[str, Any]]:
    instance, alg_name, a_idx, trial, seed, log_inv_deltas, thresholds, max_pulls = args
    alg = make_algorithm(alg_name, instance)
    start = time.perf_counter()
    ds = stopping_times(
        alg,
        instance,
        log_inv_deltas,
        thresholds=thresholds,
        max_pulls=max_pulls,
        rng=_noise_seed(seed, instance, trial),
    )
    out = {
        "tau": ds.tau.values,
        "stopped": ds.stopped.values,
        "correct": ds.correct.values,
        "path_length": ds.attrs["path_length"],
        "n_forced": ds.attrs["n_forced"],
        "n_fallback": ds.attrs["n_fallback"],
        "seconds": time.perf_counter() - start,
    }
    return a_idx, trial, out


def run_instance(
    instance: ClusterBandit,
    *,
    algorithms: Sequence[str] = ("BOC", "Oracle", "Uniform"),
    n_trials: int,
    log_inv_deltas: Sequence[float] = SYNTHETIC_LOG_INV_DELTAS,
    thresholds: Sequence[str] = ("beta", "beta_tilde"),
    seed: int = 0,
    workers: int = 1,
    max_pulls: int | None = None,
    executor: Executor | None = None,
    first_trial: int = 0,
) -> xr.Dataset:
    """Run every algorithm ``n_trials`` times on ``instance``; every (threshold, δ) per path.

    Trials ``first_trial … first_trial + n_trials − 1`` are run (the ``trial`` coordinate);
    trial ``j``'s noise depends only on ``seed``, the instance and ``j``, so a sweep can be
    split into windows of trials that give the same results. A run still going after
    ``max_pulls`` pulls is stopped unfinished (default: the shipped ``max_pulls`` of
    ``configs/boc.toml``).

    Returns
    -------
    xarray.Dataset
        ``tau``, ``stopped``, ``correct`` with dims ``(algorithm, trial, threshold,
        log_inv_delta)``; ``path_length``, ``n_forced``, ``n_fallback``, ``seconds`` with dims
        ``(algorithm, trial)``; ``lower_bound`` (log_inv_delta) = d_KL(δ, 1−δ) D*; attrs: the
        instance, D*, seed and configuration.

    Trials run in ``workers`` processes, or on ``executor`` (any
    :class:`concurrent.futures.Executor`) when given.
    """
    n_trials = check_positive_int(n_trials, "n_trials")
    max_pulls = EXPERIMENT.fill("small", max_pulls=max_pulls)["max_pulls"]
    workers = check_positive_int(workers, "workers")
    first_trial = check_seed(first_trial, "first_trial")
    algorithms = [check_choice(a, ALGORITHMS, "algorithms") for a in algorithms]
    Ls = np.asarray(log_inv_deltas, dtype=float)
    thresholds = list(thresholds)
    A, T, H, nL = len(algorithms), n_trials, len(thresholds), Ls.size
    tau = np.zeros((A, T, H, nL), dtype=np.int64)
    stopped = np.zeros((A, T, H, nL), dtype=bool)
    correct = np.zeros((A, T, H, nL), dtype=bool)
    extra = {k: np.zeros((A, T)) for k in ("path_length", "n_forced", "n_fallback", "seconds")}
    tasks = [
        (instance, name, a, first_trial + j, seed, tuple(Ls), tuple(thresholds), max_pulls)
        for a, name in enumerate(algorithms)
        for j in range(T)
    ]
    if executor is not None:
        results = executor.map(_one_trial, tasks)
    elif workers == 1:
        results = map(_one_trial, tasks)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_one_trial, tasks))
    for a, trial, out in results:
        j = trial - first_trial
        tau[a, j], stopped[a, j], correct[a, j] = out["tau"], out["stopped"], out["correct"]
        for k in extra:
            extra[k][a, j] = out[k]
    D = instance.hardness
    dims = ("algorithm", "trial", "threshold", "log_inv_delta")
    ds = xr.Dataset(
        {
            "tau": (dims, tau),
            "stopped": (dims, stopped),
            "correct": (dims, correct),
            **{k: (("algorithm", "trial"), v) for k, v in extra.items()},
            "lower_bound": (
                ("log_inv_delta",),
                np.array([kl_bernoulli_delta(log_inv_delta=L) * D for L in Ls]),
            ),
        },
        coords={
            "algorithm": algorithms,
            "trial": np.arange(first_trial, first_trial + T),
            "threshold": thresholds,
            "log_inv_delta": Ls,
        },
        attrs={
            "instance": instance.name,
            "hardness": D,
            "n_arms": instance.n_arms,
            "n_clusters": instance.n_clusters,
            "n_features": instance.n_features,
            "seed": seed,
            "n_trials": T,
            "max_pulls": max_pulls,
            "noise_seeds": "SeedSequence(seed, spawn_key=(crc32(instance), trial))",
        },
    )
    return ds


#: part → (algorithms, thresholds, log(1/δ) grid) of the paper's three experiments
PARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[float, ...]]] = {
    "synthetic": (("BOC", "Oracle", "Uniform"), ("beta", "beta_tilde"), SYNTHETIC_LOG_INV_DELTAS),
    "real": (("BOC", "Uniform"), ("beta_tilde",), REAL_LOG_INV_DELTAS),
    "table2": (("BOC", "BOC-LE"), ("beta_tilde",), REAL_LOG_INV_DELTAS),
}


#: part → names of its instances (the synthetic part runs the experiment's ``kinds``)
PART_INSTANCES: dict[str, tuple[str, ...]] = {
    "real": ("iris", "digits"),
    "table2": ("challenging-rescaled", "iris"),
}


def make_instance(part: str, name: str, *, digits_features: int | None = None) -> ClusterBandit:
    """Instance ``name`` of one part of the reproduction (see :data:`PARTS`).

    ``"synthetic"``: the instance of eq. (9) of that kind; ``"iris"``; ``"digits"``: the digits
    stand-in with ``digits_features`` principal components (default: the shipped
    ``digits_features``) rescaled to D* = 2 (Section 6.2); ``"challenging-rescaled"``: the
    challenging instance rescaled to D* = 2 (Appendix C.2).
    """
    check_choice(part, tuple(PARTS), "part")
    if part == "synthetic":
        return synthetic_instance(name)
    check_choice(name, PART_INSTANCES[part], "instance")
    if name == "iris":
        return iris_instance()
    if name == "digits":
        features = EXPERIMENT.fill("small", digits_features=digits_features)["digits_features"]
        return digits_instance(n_features=features, n_arms=DIGITS_ARMS)
    return synthetic_instance("challenging", target_hardness=2.0)


def part_instances(
    part: str,
    *,
    kinds: Sequence[str] | None = None,
    digits_features: int | None = None,
) -> dict[str, ClusterBandit]:
    """The instances of one part of the reproduction (:func:`make_instance`): the ``kinds`` of
    eq. (9) for ``"synthetic"`` (default: the shipped ``kinds``), :data:`PART_INSTANCES`
    otherwise."""
    check_choice(part, tuple(PARTS), "part")
    if part == "synthetic":
        names = EXPERIMENT.fill("small", kinds=None if kinds is None else list(kinds))["kinds"]
    else:
        names = PART_INSTANCES[part]
    return {n: make_instance(part, n, digits_features=digits_features) for n in names}


def run_part(
    part: str,
    instances: Mapping[str, ClusterBandit],
    *,
    n_trials: int,
    seed: int = 0,
    workers: int = 1,
    max_pulls: int | None = None,
    executor: Executor | None = None,
    first_trial: int = 0,
    log_inv_deltas: Sequence[float] | None = None,
) -> dict[str, xr.Dataset]:
    """:func:`run_instance` on each instance with the part's algorithms and thresholds."""
    algorithms, thresholds, grid = PARTS[check_choice(part, tuple(PARTS), "part")]
    return {
        name: run_instance(
            inst,
            algorithms=algorithms,
            n_trials=n_trials,
            log_inv_deltas=grid if log_inv_deltas is None else log_inv_deltas,
            thresholds=thresholds,
            seed=seed,
            workers=workers,
            max_pulls=max_pulls,
            executor=executor,
            first_trial=first_trial,
        )
        for name, inst in instances.items()
    }


# ---------------------------------------------------------------------- summaries
def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper–Pearson) confidence interval for a binomial proportion ``k/n``."""
    from scipy.stats import beta

    a = 1.0 - level
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def slopes(ds: xr.Dataset, lo: float = 200.0, hi: float = 400.0) -> xr.Dataset:
    """Slope of the mean sample complexity in log(1/δ) between ``lo`` and ``hi``.

    ``slope`` = (mean τ(hi) − mean τ(lo)) / (hi − lo), with its standard error over trials (the
    per-trial differences share a sample path, so their spread is the right one); ``ratio`` =
    slope / D*; ``ls_slope`` is the least-squares slope of mean τ over every grid point in
    ``[lo, hi]``.
    """
    Ls = ds.log_inv_delta.values
    i_lo, i_hi = int(np.argmin(np.abs(Ls - lo))), int(np.argmin(np.abs(Ls - hi)))
    if not (np.isclose(Ls[i_lo], lo) and np.isclose(Ls[i_hi], hi)):
        raise ValueError(f"the grid must contain log(1/δ) = {lo} and {hi}")
    tau = ds.tau.astype(float)
    per_trial = (tau.isel(log_inv_delta=i_hi) - tau.isel(log_inv_delta=i_lo)) / (hi - lo)
    slope = per_trial.mean("trial")
    se = per_trial.std("trial", ddof=1) / np.sqrt(ds.sizes["trial"])
    sel = (Ls >= lo - 1e-9) & (Ls <= hi + 1e-9)
    mean = tau.mean("trial").isel(log_inv_delta=np.flatnonzero(sel))
    x = Ls[sel]
    xc = x - x.mean()
    ls = (mean * xr.DataArray(xc, dims="log_inv_delta")).sum("log_inv_delta") / (xc**2).sum()
    return xr.Dataset(
        {"slope": slope, "slope_se": se, "ratio": slope / ds.attrs["hardness"], "ls_slope": ls}
    )


def summary_table(ds: xr.Dataset) -> list[dict[str, Any]]:
    """One row per (algorithm, threshold, log(1/δ)): mean, sd, errors, Clopper–Pearson CI."""
    rows = []
    n = ds.sizes["trial"]
    for alg in ds.algorithm.values:
        for thr in ds.threshold.values:
            for L in ds.log_inv_delta.values:
                cell = ds.sel(algorithm=alg, threshold=thr, log_inv_delta=L)
                tau = cell.tau.values.astype(float)
                n_stop = int(cell.stopped.sum())
                wrong = int((cell.stopped & ~cell.correct).sum())
                lo, hi = clopper_pearson(wrong, n)
                rows.append(
                    {
                        "instance": ds.attrs["instance"],
                        "algorithm": str(alg),
                        "threshold": str(thr),
                        "log_inv_delta": float(L),
                        "mean": float(tau.mean()),
                        "sd": float(tau.std(ddof=1)) if n > 1 else 0.0,
                        "n_trials": n,
                        "n_stopped": n_stop,
                        "errors": wrong,
                        "error_rate": wrong / n,
                        "error_ci_low": lo,
                        "error_ci_high": hi,
                        "lower_bound": float(ds.lower_bound.sel(log_inv_delta=L)),
                    }
                )
    return rows


def acceptance(
    synthetic: dict[str, xr.Dataset], real: dict[str, xr.Dataset] | None = None
) -> dict[str, Any]:
    """The issue's acceptance checks, evaluated on measured results.

    * BOC's slope over log(1/δ) ∈ [200, 400] within 25 % of D* on easy and moderate (threshold
      β; β̃ and the challenging instance are reported too);
    * Uniform's slope larger than BOC's on every instance and threshold;
    * BOC's mean τ at most 0.6 × Uniform's at every (instance, threshold, δ), reported
      separately for the synthetic and the real-data instances;
    * no wrong partition in any run.
    """
    out: dict[str, Any] = {"slopes": {}, "ratio_boc_uniform": {}, "errors": {}}
    ok_slope, ok_uniform, ok_ratio, ok_err = True, True, True, True
    for name, ds in synthetic.items():
        sl = slopes(ds)
        for thr in ds.threshold.values:
            s = sl.sel(threshold=thr)
            entry = {
                alg: {
                    "slope": float(s.slope.sel(algorithm=alg)),
                    "se": float(s.slope_se.sel(algorithm=alg)),
                    "ratio_to_D*": float(s.ratio.sel(algorithm=alg)),
                }
                for alg in ds.algorithm.values
            }
            entry["D*"] = ds.attrs["hardness"]
            boc = entry["BOC"]["ratio_to_D*"]
            entry["boc_within_25pct"] = bool(abs(boc - 1.0) <= 0.25)
            entry["uniform_steeper"] = bool(entry["Uniform"]["slope"] > entry["BOC"]["slope"])
            out["slopes"][f"{name}/{thr}"] = entry
            if name in ("easy", "moderate") and thr == "beta":
                ok_slope &= entry["boc_within_25pct"]
            ok_uniform &= entry["uniform_steeper"]
    ok_ratio_real = True
    for name, ds in {**synthetic, **(real or {})}.items():
        mean = ds.tau.astype(float).mean("trial")
        if "Uniform" in ds.algorithm.values and "BOC" in ds.algorithm.values:
            r = mean.sel(algorithm="BOC") / mean.sel(algorithm="Uniform")
            worst = float(r.max())
            out["ratio_boc_uniform"][name] = {
                "max": worst,
                "min": float(r.min()),
                "within_0.6": bool(worst <= 0.6),
            }
            if name in synthetic:
                ok_ratio &= worst <= 0.6
            else:
                ok_ratio_real &= worst <= 0.6
        wrong = int((ds.stopped & ~ds.correct).sum())
        unstopped = int((~ds.stopped).sum())
        out["errors"][name] = {"wrong": wrong, "not_stopped": unstopped, "runs": int(ds.tau.size)}
        ok_err &= wrong == 0 and unstopped == 0
    out["pass"] = {
        "boc_slope_within_25pct_easy_moderate_beta": bool(ok_slope),
        "uniform_slope_larger": bool(ok_uniform),
        "boc_at_most_0.6_uniform_synthetic": bool(ok_ratio),
        "boc_at_most_0.6_uniform_real": bool(ok_ratio_real) if real else None,
        "no_wrong_partitions": bool(ok_err),
    }
    return out


# ---------------------------------------------------------------------- plots and tables
def plot_figure3(synthetic: dict[str, xr.Dataset]) -> Any:
    """Figure 3: one row per instance, one column per threshold; mean τ ± sd against log(1/δ)."""
    plt = require("matplotlib.pyplot", "experiments", "The BOC figure")

    names = list(synthetic)
    thr_label = {"beta": "β (eq. 8)", "beta_tilde": "β̃ (heuristic)"}
    ncol = max(ds.sizes["threshold"] for ds in synthetic.values())
    fig, axes = plt.subplots(
        len(names),
        ncol,
        figsize=(5.0 * ncol, 3.4 * len(names)),
        squeeze=False,
        layout="constrained",
    )
    colors = {"BOC": "C0", "Oracle": "C2", "Uniform": "C3", "BOC-LE": "C1"}
    styles = {"Oracle": ("--", "s")}  # BOC and Oracle nearly coincide: keep both visible
    for i, name in enumerate(names):
        ds = synthetic[name]
        x = ds.log_inv_delta.values
        for j, thr in enumerate(ds.threshold.values):
            ax = axes[i, j]
            for alg in ds.algorithm.values:
                tau = ds.tau.sel(algorithm=alg, threshold=thr).astype(float)
                ls, marker = styles.get(str(alg), ("-", "o"))
                sd = tau.std("trial", ddof=1) if tau.sizes["trial"] > 1 else None
                ax.errorbar(
                    x,
                    tau.mean("trial"),
                    yerr=sd,
                    label=str(alg),
                    color=colors.get(str(alg)),
                    ls=ls,
                    marker=marker,
                    ms=3,
                    capsize=2,
                    lw=1.2,
                )
            ax.plot(x, ds.lower_bound.values, "k--", lw=1, label="lower bound")
            ax.set_title(f"{name} (D* = {ds.attrs['hardness']:.4g}), {thr_label.get(thr, thr)}")
            ax.set_xlabel("log(1/δ)")
            ax.set_ylabel("sample complexity")
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=8)
    return fig


def _fmt(mean: float, sd: float) -> str:
    return f"{mean:.1f} ± {sd:.1f}"


def _synthetic_markdown(synthetic: dict[str, xr.Dataset], acc: dict[str, Any]) -> str:
    lines = ["# Figure 3: sample complexity against log(1/δ) (synthetic instances, eq. 9)", ""]
    for name, ds in synthetic.items():
        n = ds.sizes["trial"]
        lines += [f"## {name}: D* = {ds.attrs['hardness']:.6g}, {n} trials (mean ± sd)", ""]
        Ls = ds.log_inv_delta.values
        rows = []
        for thr in ds.threshold.values:
            for alg in ds.algorithm.values:
                tau = ds.tau.sel(algorithm=alg, threshold=thr).astype(float)
                m, s = tau.mean("trial").values, tau.std("trial", ddof=1).values
                rows.append([thr, alg, *(_fmt(a, b) for a, b in zip(m, s, strict=True))])
        rows.append(
            ["—", "lower bound d_KL(δ,1−δ)·D*", *(f"{v:.1f}" for v in ds.lower_bound.values)]
        )
        header = ["threshold", "algorithm", *(f"{L:.4g}" for L in Ls)]
        lines += [markdown_table(header, rows), ""]
        slope_rows = []
        for thr in ds.threshold.values:
            e = acc["slopes"][f"{name}/{thr}"]
            for alg in ds.algorithm.values:
                slope_rows.append(
                    [
                        thr,
                        alg,
                        f"{e[alg]['slope']:.4g} ± {e[alg]['se']:.2g}",
                        f"{e[alg]['ratio_to_D*']:.3f}",
                    ]
                )
        lines += [
            "Slope of the mean over log(1/δ) ∈ [200, 400] (± standard error), and ratio to D*:",
            "",
            markdown_table(["threshold", "algorithm", "slope", "slope / D*"], slope_rows),
        ]
        r = acc["ratio_boc_uniform"][name]
        err = acc["errors"][name]
        lines += [
            "",
            f"BOC / Uniform mean sample complexity: {r['min']:.3f} – {r['max']:.3f} over all "
            f"(threshold, δ). Wrong partitions: {err['wrong']} of {err['runs']} "
            f"(threshold, δ, trial) stops; runs not stopped: {err['not_stopped']}.",
            "",
        ]
    return "\n".join(lines)


def _delta_label(L: float) -> str:
    k = L / math.log(10.0)
    return f"1e-{round(k)}" if abs(k - round(k)) < 1e-9 else f"e^-{L:.4g}"


def _table_markdown(title: str, results: dict[str, xr.Dataset], note: str = "") -> str:
    """Table 1/2 layout: rows δ, columns (instance, algorithm), mean ± sd; then error rates."""
    cols = [(name, str(alg)) for name, ds in results.items() for alg in ds.algorithm.values]
    first = next(iter(results.values()))
    Ls = first.log_inv_delta.values
    lines = [f"# {title}", ""]
    if note:
        lines += [note, ""]
    header = ["δ", *(f"{n} {a}" for n, a in cols)]
    rows = []
    for L in Ls:
        cells = []
        for name, alg in cols:
            tau = results[name].tau.sel(algorithm=alg, log_inv_delta=L).isel(threshold=0)
            tau = tau.astype(float)
            cells.append(_fmt(float(tau.mean()), float(tau.std(ddof=1))))
        rows.append([_delta_label(L), *cells])
    error_rows = []
    for L in Ls:
        cells = []
        for name, alg in cols:
            cell = results[name].sel(algorithm=alg, log_inv_delta=L).isel(threshold=0)
            n = cell.sizes["trial"]
            k = int((cell.stopped & ~cell.correct).sum()) + int((~cell.stopped).sum())
            lo, hi = clopper_pearson(k, n)
            cells.append(f"{k}/{n} [{lo:.3f}, {hi:.3f}]")
        error_rows.append([_delta_label(L), *cells])
    lines += [
        markdown_table(header, rows),
        "",
        "Empirical error rate (wrong partitions / trials) with a 95 % Clopper–Pearson interval:",
        "",
        markdown_table(header, error_rows),
        "",
    ]
    for name, ds in results.items():
        lines.append(
            f"* {name}: M = {ds.attrs['n_arms']}, K = {ds.attrs['n_clusters']}, "
            f"d = {ds.attrs['n_features']}, D* = {ds.attrs['hardness']:.6g}, "
            f"{ds.sizes['trial']} trials."
        )
    return "\n".join(lines) + "\n"


def write_reproduction(
    out: str | Path,
    synthetic: Mapping[str, xr.Dataset],
    real: Mapping[str, xr.Dataset],
    table2: Mapping[str, xr.Dataset],
    config: dict[str, Any],
    timings: dict[str, float] | None = None,
) -> tuple[dict[str, Path], dict[str, Any] | None]:
    """Write every artifact of the reproduction from its results into ``out``.

    ``synthetic`` (Figure 3, by instance kind), ``real`` (Table 1) and ``table2`` (Table 2) are
    :func:`run_instance` datasets; any of them may be empty. ``config`` is added to each
    dataset's attributes and to ``summary.json``. Returns the written paths and the acceptance
    summary (``None`` without synthetic results).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for prefix, group in (("figure3", synthetic), ("table1", real), ("table2", table2)):
        key = {"figure3": "synthetic", "table1": "real", "table2": "table2"}[prefix]
        for name, ds in group.items():
            ds.attrs.update(config)
            files[f"{key}_{name}"] = write_dataset(ds, out / f"{prefix}_{name}.nc")
    if synthetic:
        fig = plot_figure3(dict(synthetic))
        files["figure3"] = atomic_write(
            out / "figure3.png", lambda tmp: fig.savefig(tmp, dpi=110, format="png")
        )
        import matplotlib.pyplot as plt

        plt.close(fig)
    if real:
        files["table1"] = write_text(
            out / "table1.md",
            _table_markdown(
                "Table 1: mean ± sd of the sample complexity, heuristic threshold β̃",
                dict(real),
                "Iris as in Section 6.2; `digits` is a stand-in for Yeast/MNIST built the same "
                "way from scikit-learn's handwritten digits (random 500 images, PCA, class "
                "means, rescaled to D* = 2).",
            ),
        )
    if table2:
        files["table2"] = write_text(
            out / "table2.md",
            _table_markdown(
                "Table 2: original (forced) vs linear exploration (BOC-LE), β̃",
                dict(table2),
                "Rescaled challenging instance (D* = 2) and Iris; LE receives the exact r.",
            ),
        )
    acc = acceptance(dict(synthetic), dict(real)) if synthetic else None
    if synthetic:
        files["figure3_table"] = write_text(
            out / "figure3.md", _synthetic_markdown(dict(synthetic), acc)
        )
    rows = []
    for group in (synthetic, real):
        for ds in group.values():
            rows += summary_table(ds)
    if rows:
        import pandas as pd

        df = pd.DataFrame(rows)
        files["summary_csv"] = atomic_write(
            out / "summary.csv", lambda tmp: df.to_csv(tmp, index=False)
        )
    summary = {"config": config, "timings_seconds": timings or {}, "acceptance": acc}
    files["summary"] = write_json(out / "summary.json", summary)
    return files, acc


# ---------------------------------------------------------------------- the named experiment
def _trials(p: Mapping[str, Any], part: str) -> int:
    return p["table2_trials"] if part == "table2" else p["seeds"]


def _cells(p: Mapping[str, Any]) -> list[Cell]:
    out = []
    for part in p["parts"]:
        names = p["kinds"] if part == "synthetic" else PART_INSTANCES[part]
        for name in names:
            for first, n in windows(_trials(p, part), p["seeds_per_cell"]):
                out.append(
                    Cell(
                        f"{part}-{name}_trials-{first}-{first + n - 1}",
                        {"part": part, "instance": name, "first_trial": first, "n_trials": n},
                    )
                )
    return out


def _run_cell(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> xr.Dataset:
    part, name = spec["part"], spec["instance"]
    inst = make_instance(part, name, digits_features=p["digits_features"])
    (ds,) = run_part(
        part,
        {name: inst},
        n_trials=spec["n_trials"],
        seed=p["seed"],
        max_pulls=p["max_pulls"],
        first_trial=spec["first_trial"],
    ).values()
    return ds


def _write(
    p: Mapping[str, Any], results: Mapping[str, xr.Dataset], out: Path, annotate: Annotate
) -> tuple[dict[str, Path], list[str]]:
    groups: dict[str, dict[str, xr.Dataset]] = {"synthetic": {}, "real": {}, "table2": {}}
    for prefix, parts in group_cells(results).items():
        part, name = prefix.split("-", 1)
        groups[part][name] = annotate(concat_cells(parts, "trial"))
    config = {
        "trials": {part: _trials(p, part) for part in p["parts"]},
        "seed": p["seed"],
        "digits_features": p["digits_features"],
    }
    files, _ = write_reproduction(
        out, groups["synthetic"], groups["real"], groups["table2"], config
    )
    lines = []
    for key in ("figure3_table", "table1", "table2"):
        if key in files:
            text = Path(files[key]).read_text(encoding="utf-8")
            lines += ["##" + ln if ln.startswith("#") else ln for ln in text.splitlines()]
            lines.append("")
    if "figure3" in files:
        lines += ["![Figure 3](figure3.png)", ""]
    return files, lines


#: ``boc``: Figure 3, Tables 1 and 2, one cell per instance and window of trials
EXPERIMENT = define_experiment(
    "boc",
    params=(
        Param("parts", "str", "Figure 3, Table 1 and/or Table 2.", many=True,
              choices=tuple(PARTS)),
        Param("kinds", "str", "Synthetic instances of eq. (9).", many=True,
              choices=("easy", "moderate", "challenging")),
        Param("table2_trials", "int", "Trials of Table 2 (the others use seeds).", minimum=1),
        Param("digits_features", "int", "PCA dimension of the digits stand-in.", minimum=1),
        Param("max_pulls", "int", "Budget after which a run is stopped unfinished.", minimum=1),
        SEED,
    ),
    cells=_cells,
    run_cell=_run_cell,
    write=_write,
    timing_vars=("seconds",),
)  # fmt: skip
