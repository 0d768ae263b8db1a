"""Reproduction of the offline clustering paper's experiments ([OFF] §6, App. E).

* **Sufficient data** (Table 3 shape): average SubOpt of every algorithm at |D| = 0.2M … 1M,
  under the equal and the semi-random user distributions (the paper does not say which one
  Table 3 uses; §6 evaluates both).
* **Insufficient data** (Figure 2 shape): SubOpt against |D| in [5k, 100k] under the equal and the
  semi-random user distributions.
* **Paired comparisons**: every difference between a proposed method and LinUCB_IND or CLUB,
  paired by seed, with its standard error (``summary.json``, ``paired.md``).
* **γ̂ sweep** (Figures 3–6 shape): Off-C²LUB's SubOpt over a γ̂ grid, with the under- and
  overestimation policies and Off-CLUB as reference lines; the sweep minimum is the oracle
  "Off-C²LUB" of the tables (γ̂ tuned on the equal distribution, reused for the semi-random one,
  as in §6).

Setting (App. E.1): U = 1,000 users (671 on the shipped MovieLens data), d = 20, J = 10
clusters, S = 20 candidates per sample, σ = 0.05, λ = 0.5, α = 0.1, δ = 0.01; the first half of
|D| trains, the second half supplies the test decisions. Random logging by default (Figure 2,
Table 3); ``logging="linucb"`` gives the Figure 7 variant.

λ̃_a, the one quantity the paper never reports, is ``REPRODUCE_LAMBDA_TILDE_A`` = 1 here (CI_u of
Eq. (1) without the λ̃_a factor): with the spec's reading λ̃_a = λ_a = 1/d, Off-CLUB keeps
cross-cluster edges at 100 samples per user and cannot reach the near-zero SubOpt of Table 3 (see
``docs/offline.md``). Pass ``lambda_tilde_a="lambda_a"`` for the spec's reading.

:data:`EXPERIMENT` is the named experiment ``offline`` (``hierbandit experiment run offline``);
every default of the reproduction (λ̃_a, the sizes, the users, the γ̂ grid, …) lives in
``configs/offline.toml``, and the functions below read it for the arguments they are not given.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from hierbandit._extras import require
from hierbandit._io import atomic_write, write_dataset, write_json
from hierbandit._validation import check_choice, check_positive_int
from hierbandit.experiments.cells import Annotate, concat_cells
from hierbandit.experiments.progress import progress_task
from hierbandit.experiments.registry import SCALES, SEED, Cell, Param, define_experiment
from hierbandit.experiments.report import frame_table, markdown_table, write_text
from hierbandit.offline import (
    ARMUL,
    CLUBOffline,
    DBSCANImprove,
    LinUCBIndOffline,
    OffC2LUB,
    OffCLUB,
    SCLUBOffline,
    XMeansImprove,
    cluster_thetas,
    evaluate,
    gamma_grid,
    make_problem,
    movielens_thetas,
    user_probabilities,
)
from hierbandit.offline.base import OfflineModel

__all__ = [
    "ALGORITHMS",
    "ENV_PARAMS",
    "EXPERIMENT",
    "PAPER_SETTINGS",
    "REPRODUCE_LAMBDA_TILDE_A",
    "STREAM_ALGORITHMS",
    "acceptance",
    "make_models",
    "parse_lambda_tilde",
    "run_offline",
    "subopt_table",
    "tuned_on",
    "write_offline_results",
]

_log = logging.getLogger(__name__)

#: Table 3's algorithms, in its order
ALGORITHMS = (
    "DBSCAN_Improve",
    "XMeans_Improve",
    "CLUB",
    "Off-CLUB",
    "LinUCB_IND",
    "SCLUB",
    "ARMUL",
    "Off-C2LUB",
    "Off-C2LUB_Underestimation",
    "Off-C2LUB_Overestimation",
)
#: the spec's ``mode="stream"`` adaptations of CLUB and SCLUB (not in the paper's tables)
STREAM_ALGORITHMS = ("CLUB_stream", "SCLUB_stream")
#: the parameters of ``configs/offline.toml`` that describe the environment and the data
ENV_PARAMS = ("n_users", "n_features", "n_clusters", "n_candidates", "n_test", "grid_points")
#: the paper's settings of the algorithms (App. E.1): α, λ and δ
PAPER_SETTINGS = {"alpha": 0.1, "lam": 0.5, "delta": 0.01}
#: the noise standard deviation σ of the generated rewards (the data generator's)
_NOISE_SD = inspect.signature(make_problem).parameters["noise_sd"].default


def parse_lambda_tilde(value: str | float) -> float | str:
    """λ̃_a from its configuration text: ``"lambda_a"``, ``"theory"`` or a positive number."""
    if value in ("lambda_a", "theory"):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise ValueError(
            f"params.lambda_tilde_a must be 'lambda_a', 'theory' or a positive number, got {value!r}"
        )
    return number


def make_models(
    rng: Any = None,
    *,
    names: Sequence[str] = tuple(a for a in ALGORITHMS if a != "Off-C2LUB"),
    alpha: float = PAPER_SETTINGS["alpha"],
    lam: float = PAPER_SETTINGS["lam"],
    delta: float = PAPER_SETTINGS["delta"],
    lambda_tilde_a: float | str | None = None,
) -> dict[str, OfflineModel]:
    """Fresh models with the paper's settings (App. E.1), one child random stream each.

    ``lambda_tilde_a`` defaults to :data:`REPRODUCE_LAMBDA_TILDE_A`. ``"Off-C2LUB"`` (the oracle
    sweep) is built by :func:`run_offline`, not here; asking for it returns
    ``OffC2LUB(gamma_hat=0)``, the base the sweep starts from.
    """
    if lambda_tilde_a is None:
        lambda_tilde_a = REPRODUCE_LAMBDA_TILDE_A
    common = {"lam": lam, "delta": delta}
    off = {"alpha": alpha, "lambda_tilde_a": lambda_tilde_a, **common}
    factories: dict[str, Callable[[Any], OfflineModel]] = {
        "DBSCAN_Improve": lambda r: DBSCANImprove(rng=r, **common),
        "XMeans_Improve": lambda r: XMeansImprove(rng=r, **common),
        "CLUB": lambda r: CLUBOffline(rng=r, **common),
        "Off-CLUB": lambda r: OffCLUB(rng=r, **off),
        "LinUCB_IND": lambda r: LinUCBIndOffline(rng=r, **common),
        "SCLUB": lambda r: SCLUBOffline(rng=r, **common),
        "ARMUL": lambda r: ARMUL(rng=r, **common),
        "Off-C2LUB": lambda r: OffC2LUB(0.0, rng=r, **off),
        "Off-C2LUB_Underestimation": lambda r: OffC2LUB("underestimation", rng=r, **off),
        "Off-C2LUB_Overestimation": lambda r: OffC2LUB("overestimation", rng=r, **off),
        # appended last: the streams above keep their positions
        "CLUB_stream": lambda r: CLUBOffline(mode="stream", rng=r, **common),
        "SCLUB_stream": lambda r: SCLUBOffline(mode="stream", rng=r, **common),
    }
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise ValueError(f"names: unknown algorithms {unknown}; choose from {list(factories)}")
    streams = np.random.SeedSequence(_seed_entropy(rng)).spawn(len(factories))
    by_name = dict(zip(factories, streams, strict=True))
    return {n: factories[n](np.random.default_rng(by_name[n])) for n in names}


def _seed_entropy(rng: Any) -> Any:
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, 2**63, size=4)
    if isinstance(rng, np.random.SeedSequence):
        return rng.generate_state(4)
    return rng


def _environment(
    dataset: str, cfg: dict[str, Any], distribution: str, seq: np.random.SeedSequence
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g_theta, g_prob = (np.random.default_rng(s) for s in seq.spawn(2))
    if dataset == "synthetic":
        theta, labels = cluster_thetas(
            cfg["n_users"], cfg["n_clusters"], cfg["n_features"], rng=g_theta
        )
    else:
        n_users = cfg["n_users"] if cfg["n_users"] <= 671 else None
        theta, labels, _ = movielens_thetas(
            n_users, cfg["n_features"], n_clusters=cfg["n_clusters"], rng=g_theta
        )
    probs = user_probabilities(labels, distribution, rng=g_prob)
    return theta, labels, probs


def run_offline(
    sizes: Sequence[int],
    *,
    distribution: str = "equal",
    dataset: str | None = None,
    scale: str = "small",
    n_seeds: int | None = None,
    seed: int = 0,
    logging: str | None = None,
    algorithms: Sequence[str] | None = None,
    lambda_tilde_a: float | str | None = None,
    grids: dict[int, np.ndarray] | None = None,
    oracle_index: dict[int, int] | None = None,
    **overrides: Any,
) -> xr.Dataset:
    """SubOpt of every algorithm at every dataset size and seed, plus Off-C²LUB's γ̂ sweep.

    Parameters
    ----------
    sizes : sequence of int
        Dataset sizes |D| (half trains, half tests).
    distribution : {"equal", "semi-random", "random"}
    dataset : {"synthetic", "movielens"}, optional
    scale : {"small", "paper"}
        Whose shipped values (``configs/offline.toml``) fill the arguments left ``None`` and the
        environment's sizes (:data:`ENV_PARAMS`); keyword ``overrides`` replace the latter.
    n_seeds, seed : int
        Number of seeds (default: the scale's) and base seed. Seed k uses child k of
        ``SeedSequence(seed)`` for the users, data and algorithms alike, so every algorithm sees
        the same data (common random numbers) and the users are the same at every size.
    logging : {"random", "linucb"}, optional
    algorithms : sequence of str, optional
        Subset of :data:`ALGORITHMS` and :data:`STREAM_ALGORITHMS`.
    lambda_tilde_a : float or str, optional
        λ̃_a of Off-CLUB and Off-C²LUB (default :data:`REPRODUCE_LAMBDA_TILDE_A`).
    grids, oracle_index : dict, optional
        γ̂ grid per size and the index of the oracle γ̂ per size (from an earlier run on the equal
        distribution). By default the grid is built on seed 0's data (:func:`gamma_grid`) and the
        oracle is the grid point of least seed-averaged SubOpt in this run.

    Returns
    -------
    xarray.Dataset
        ``subopt``/``subopt_se`` (algorithm, size, seed); ``sweep`` (size, gamma_index, seed) and
        ``gamma`` (size, gamma_index); ``oracle_gamma`` (size); ``fit_seconds``
        (algorithm, size, seed); attrs: the full configuration.
    """
    check_choice(scale, SCALES, "scale")
    unknown = sorted(set(overrides) - set(ENV_PARAMS))
    if unknown:
        raise TypeError(f"run_offline got unknown settings {unknown}; choose from {ENV_PARAMS}")
    shipped = EXPERIMENT.fill(
        scale,
        dataset=dataset,
        seeds=n_seeds,
        logging=logging,
        algorithms=None if algorithms is None else list(algorithms),
    )
    dataset, logging = shipped["dataset"], shipped["logging"]
    if lambda_tilde_a is None:
        lambda_tilde_a = REPRODUCE_LAMBDA_TILDE_A
    check_choice(dataset, ("synthetic", "movielens"), "dataset")
    base = {k: EXPERIMENT.defaults[scale][k] for k in ENV_PARAMS}
    cfg = {**base, **overrides}
    n_seeds = check_positive_int(shipped["seeds"], "n_seeds")
    sizes = [check_positive_int(s, "sizes", minimum=4) for s in sizes]
    algorithms = list(shipped["algorithms"])
    known = (*ALGORITHMS, *STREAM_ALGORITHMS)
    unknown = [a for a in algorithms if a not in known]
    if unknown:
        raise ValueError(f"algorithms: unknown {unknown}; choose from {list(known)}")
    want_oracle = "Off-C2LUB" in algorithms
    G = int(cfg["grid_points"])
    seeds = np.random.SeedSequence(seed).spawn(n_seeds)
    A, S = len(algorithms), len(sizes)
    sub = np.full((A, S, n_seeds), np.nan)
    se = np.full((A, S, n_seeds), np.nan)
    fit_s = np.full((A, S, n_seeds), np.nan)
    sweep = np.full((S, G, n_seeds), np.nan)
    gam = np.full((S, G), np.nan)
    grids = dict(grids or {})
    # one (users, data, algorithms) triple of streams per seed, shared by every size, so that a
    # size's results do not depend on which other sizes are run (the experiment interface runs
    # each size as its own cell)
    streams = [sq.spawn(3) for sq in seeds]
    env_cache: dict[int, tuple] = {}
    # progress over (size × seed), reported as log records (hierbandit.experiments.progress)
    with progress_task(f"offline {dataset}/{distribution}", total=S * n_seeds) as task:
        for i, size in enumerate(sizes):
            for k in range(n_seeds):
                env_seq, data_seq, algo_seq = streams[k]
                if k not in env_cache:
                    env_cache[k] = _environment(dataset, cfg, distribution, env_seq)
                theta, labels, probs = env_cache[k]
                train, test = make_problem(
                    theta,
                    labels,
                    size,
                    user_probs=probs,
                    n_test=cfg["n_test"],
                    logging=logging,
                    n_candidates=cfg["n_candidates"],
                    rng=data_seq,
                )
                models = make_models(
                    algo_seq,
                    names=algorithms,
                    lambda_tilde_a=lambda_tilde_a,
                )
                for a, name in enumerate(algorithms):
                    t0 = time.perf_counter()
                    models[name].fit(train)
                    fit_s[a, i, k] = time.perf_counter() - t0
                scored: dict[str, OfflineModel] = {
                    n: m for n, m in models.items() if n != "Off-C2LUB"
                }
                if want_oracle:
                    base_model = models["Off-C2LUB"]
                    if size not in grids:
                        grids[size] = _pad(gamma_grid(base_model, G), G)
                    gam[i] = grids[size]
                    for g, value in enumerate(grids[size]):
                        scored[f"__gamma{g}"] = base_model.with_gamma(float(value))
                res = evaluate(scored, test)
                for a, name in enumerate(algorithms):
                    if name in scored:
                        sub[a, i, k] = float(res["subopt"].sel(algorithm=name))
                        se[a, i, k] = float(res["subopt_se"].sel(algorithm=name))
                if want_oracle:
                    for g in range(G):
                        sweep[i, g, k] = float(res["subopt"].sel(algorithm=f"__gamma{g}"))
                _log.debug(
                    "%s/%s |D|=%d seed %d: %s",
                    dataset,
                    distribution,
                    size,
                    k,
                    ", ".join(
                        f"{n}={sub[a, i, k]:.4g}"
                        for a, n in enumerate(algorithms)
                        if np.isfinite(sub[a, i, k])
                    ),
                )
                task.advance()
    oracle_gamma = np.full(S, np.nan)
    oracle_idx = np.zeros(S, dtype=np.int64)
    if want_oracle:
        a = algorithms.index("Off-C2LUB")
        for i, size in enumerate(sizes):
            if oracle_index is not None and size in oracle_index:
                j = int(oracle_index[size])
            else:
                j = int(np.nanargmin(sweep[i].mean(axis=1)))
            oracle_idx[i] = j
            oracle_gamma[i] = gam[i, j]
            sub[a, i] = sweep[i, j]
    attrs = {
        "experiment": "offline clustering of linear bandits",
        "dataset": dataset,
        "distribution": distribution,
        "logging": logging,
        # the named scale only when its values were used unchanged ("config" has every value)
        "scale": scale if all(cfg[k] == base[k] for k in overrides) else "custom",
        "seed": seed,
        "n_seeds": n_seeds,
        "lambda_tilde_a": lambda_tilde_a,
        **PAPER_SETTINGS,
        "noise_sd": _NOISE_SD,
        "config": json.dumps(cfg, default=list),
    }
    return xr.Dataset(
        {
            "subopt": (("algorithm", "size", "seed"), sub),
            "subopt_se": (("algorithm", "size", "seed"), se),
            "fit_seconds": (("algorithm", "size", "seed"), fit_s),
            "sweep": (("size", "gamma_index", "seed"), sweep),
            "gamma": (("size", "gamma_index"), gam),
            "oracle_gamma": ("size", oracle_gamma),
            "oracle_index": ("size", oracle_idx),
        },
        coords={
            "algorithm": algorithms,
            "size": np.asarray(sizes, dtype=np.int64),
            "seed": np.arange(n_seeds),
            "gamma_index": np.arange(G),
        },
        attrs=attrs,
    )


def _pad(grid: np.ndarray, n: int) -> np.ndarray:
    """Exactly ``n`` grid points (the quantile grid may merge duplicates): pad with its max."""
    if grid.size >= n:
        return grid[:n]
    return np.concatenate([grid, np.full(n - grid.size, grid[-1])])


# ---------------------------------------------------------------------- summaries
def subopt_table(ds: xr.Dataset, with_se: bool = False) -> pd.DataFrame:
    """Mean SubOpt over seeds, algorithms × sizes (Table 3 shape)."""
    mean = ds["subopt"].mean("seed").to_pandas()
    if not with_se:
        return mean
    n = ds.sizes["seed"]
    sd = ds["subopt"].std("seed", ddof=1 if n > 1 else 0).to_pandas()
    return mean.round(6).astype(str) + " ± " + (sd / np.sqrt(n)).round(6).astype(str)


#: the proposed methods and the baselines the issue compares them with
PROPOSED = ("Off-C2LUB", "Off-CLUB")
COMPARED = ("LinUCB_IND", "CLUB")


def paired_difference(ds: xr.Dataset, a: str, b: str) -> dict[int, dict[str, Any]]:
    """SubOpt of ``a`` minus that of ``b`` per size, paired by seed (same users, data and test
    decisions): mean, standard error over seeds, a verdict, and the number of seeds where ``a``
    is below ``b`` (``seeds_lower`` of ``n_seeds``; heavy-tailed differences can tie on the
    mean while every seed points the same way).

    The verdict is ``"lower"`` when the mean is more than two standard errors below zero,
    ``"higher"`` when more than two above, and ``"tie"`` otherwise. With one seed there is no
    standard error (``nan``) and the verdict is the sign of the difference.
    """
    diff = ds["subopt"].sel(algorithm=a) - ds["subopt"].sel(algorithm=b)
    n = diff.sizes["seed"]
    out = {}
    for size in ds.size.values:
        v = diff.sel(size=size).to_numpy()
        mean = float(v.mean())
        se = float(v.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
        margin = 2.0 * se if np.isfinite(se) else 0.0
        verdict = "lower" if mean < -margin else "higher" if mean > margin else "tie"
        out[int(size)] = {
            "mean": mean,
            "se": se,
            "verdict": verdict,
            "seeds_lower": int((v < 0).sum()),
            "n_seeds": n,
        }
    return out


def _runs(
    sufficient: xr.Dataset | Mapping[str, xr.Dataset] | None,
    insufficient: Mapping[str, xr.Dataset] | None,
) -> dict[str, xr.Dataset]:
    if isinstance(sufficient, xr.Dataset):
        sufficient = {"equal": sufficient}
    runs = {f"sufficient/{k}": v for k, v in (sufficient or {}).items()}
    runs.update({f"insufficient/{k}": v for k, v in (insufficient or {}).items()})
    return runs


def acceptance(
    sufficient: xr.Dataset | Mapping[str, xr.Dataset] | None,
    insufficient: Mapping[str, xr.Dataset] | None,
    sweep_sizes: Sequence[int] = (),
) -> dict[str, Any]:
    """The issue's acceptance checks on the measured SubOpt of every run (a run is a part and
    a user distribution; a bare ``sufficient`` Dataset is the equal distribution).

    * ``proposed_beat_baselines``: Off-C²LUB and Off-CLUB below LinUCB_IND and CLUB at every
      size, on the seed-averaged SubOpt;
    * ``paired``: the same comparisons paired by seed, with standard errors and a verdict
      (:func:`paired_difference`), and ``verdicts`` counting them per run;
    * ``falls_with_size``: for Off-C²LUB, Off-CLUB, LinUCB_IND and CLUB, SubOpt at the largest
      size below that at the smallest, and the fraction of consecutive decreases;
    * ``u_shaped``: at each sweep size, the least SubOpt is at an interior γ̂ and strictly below
      both ends of the grid.
    """
    runs = _runs(sufficient, insufficient)
    out: dict[str, Any] = {
        "proposed_beat_baselines": {},
        "paired": {},
        "verdicts": {},
        "falls_with_size": {},
        "u_shaped": {},
    }
    for rname, ds in runs.items():
        m = ds["subopt"].mean("seed")
        algs = list(ds.algorithm.values)
        pairs = [(p, b) for p in PROPOSED for b in COMPARED if p in algs and b in algs]
        res = {}
        for size in ds.size.values:
            row = m.sel(size=size)
            res[int(size)] = all(
                bool(row.sel(algorithm=p) < row.sel(algorithm=b)) for p, b in pairs
            )
        out["proposed_beat_baselines"][rname] = res
        paired = {f"{p} - {b}": paired_difference(ds, p, b) for p, b in pairs}
        out["paired"][rname] = paired
        counts = {"lower": 0, "tie": 0, "higher": 0}
        for by_size in paired.values():
            for cell in by_size.values():
                counts[cell["verdict"]] += 1
        out["verdicts"][rname] = counts
        falls = {}
        for a in ("Off-C2LUB", "Off-CLUB", "LinUCB_IND", "CLUB"):
            if a in algs:
                v = m.sel(algorithm=a).to_numpy()
                falls[a] = {
                    "last_below_first": bool(v[-1] < v[0]),
                    "fraction_decreasing": float(np.mean(np.diff(v) < 0)) if v.size > 1 else 1.0,
                }
        out["falls_with_size"][rname] = falls
        for size in sweep_sizes:
            if size in ds.size.values and np.isfinite(ds["sweep"].sel(size=size)).all():
                curve = ds["sweep"].sel(size=size).mean("seed").to_numpy()
                j = int(np.argmin(curve))
                out["u_shaped"][f"{rname}/{int(size)}"] = bool(
                    0 < j < curve.size - 1 and curve[0] > curve[j] and curve[-1] > curve[j]
                )
    flat = [v for r in out["proposed_beat_baselines"].values() for v in r.values()]
    out["all_proposed_beat_baselines"] = bool(flat) and all(flat)
    out["all_u_shaped"] = bool(out["u_shaped"]) and all(out["u_shaped"].values())
    return out


def paired_markdown(summary: Mapping[str, Any]) -> str:
    """The ``paired`` comparisons of :func:`acceptance` as one markdown table per run."""
    blocks = []
    for rname, paired in summary["paired"].items():
        if not paired:
            continue
        sizes = list(next(iter(paired.values())))
        header = ["paired difference", *(_size_label(int(s)) for s in sizes)]
        rows = [
            [name]
            + [
                f"{float(c['mean']):+.3g} ± {float(c['se']):.2g} ({c['verdict']}; "
                f"{c['seeds_lower']}/{c['n_seeds']} seeds lower)"
                for c in (by_size[s] for s in sizes)
            ]
            for name, by_size in paired.items()
        ]
        intro = (f"**{rname}** (mean ± s.e. over seeds; verdict at 2 s.e.; seeds where the "
                 "proposed method is lower)")  # fmt: skip
        blocks.append(f"{intro}\n\n{markdown_table(header, rows)}\n")
    return "\n".join(blocks)


# ---------------------------------------------------------------------- writing
def _markdown(df: pd.DataFrame, fmt: str = "{:.6f}") -> str:
    return frame_table(df, index_header="algorithm", float_format=fmt) + "\n"


def _size_label(size: int) -> str:
    return f"{size / 1e6:g}M" if size >= 1_000_000 or size % 100_000 == 0 else f"{size // 1000}k"


def _distribution_tables(runs: Mapping[str, xr.Dataset]) -> tuple[pd.DataFrame, str]:
    """Mean SubOpt of each distribution's run: one CSV-ready frame with a ``distribution``
    column, and markdown with a section per distribution."""
    frames, md = [], []
    for dist, ds in runs.items():
        t = subopt_table(ds)
        t.columns = [_size_label(int(c)) for c in t.columns]
        md.append(f"## {dist} distribution\n\n" + _markdown(t))
        t.insert(0, "distribution", dist)
        frames.append(t)
    return pd.concat(frames), "\n".join(md)


def write_offline_results(
    out: str | Path,
    sufficient: xr.Dataset | Mapping[str, xr.Dataset] | None = None,
    insufficient: Mapping[str, xr.Dataset] | None = None,
    sweep_sizes: Sequence[int] = (),
) -> dict[str, Path]:
    """Write netCDF data, CSV/markdown tables, PNG figures and ``summary.json`` to ``out``.

    ``sufficient`` and ``insufficient`` map a user distribution to its run (a bare
    ``sufficient`` Dataset is the equal distribution). ``paired.md`` holds the paired
    comparisons of :func:`acceptance`.
    """
    plt = require("matplotlib.pyplot", "experiments", "The offline figures")

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if isinstance(sufficient, xr.Dataset):
        sufficient = {"equal": sufficient}
    if sufficient:
        for dist, ds in sufficient.items():
            paths[f"sufficient_{dist}"] = write_dataset(ds, out / f"sufficient_{dist}.nc")
        table, md = _distribution_tables(sufficient)
        paths["table3_csv"] = atomic_write(out / "table3.csv", lambda t: table.to_csv(t))
        write_text(out / "table3.md", md)
        paths["table3_md"] = out / "table3.md"
    if insufficient:
        fig, axes = plt.subplots(
            1, len(insufficient), figsize=(5.5 * len(insufficient), 4.2), squeeze=False,
            layout="constrained",
        )  # fmt: skip
        for ax, (dist, ds) in zip(axes[0], insufficient.items(), strict=True):
            paths[f"insufficient_{dist}"] = write_dataset(ds, out / f"insufficient_{dist}.nc")
            mean = ds["subopt"].mean("seed")
            n = ds.sizes["seed"]
            sem = ds["subopt"].std("seed", ddof=1 if n > 1 else 0) / np.sqrt(n)
            x = ds.size.values / 1000
            for alg in ds.algorithm.values:
                style = "-" if str(alg).startswith("Off") else "--"
                ax.errorbar(
                    x, mean.sel(algorithm=alg), yerr=sem.sel(algorithm=alg), label=str(alg),
                    ls=style, marker="o", ms=3, capsize=2,
                )  # fmt: skip
            ax.set_xlabel("dataset size |D| (thousands)")
            ax.set_ylabel("average SubOpt")
            ax.set_title(f"{ds.attrs.get('dataset', '')}, {dist} distribution")
        axes[0, -1].legend(fontsize=7)
        paths["figure2"] = out / "figure2.png"
        fig.savefig(paths["figure2"], dpi=120)
        plt.close(fig)
        fig2, md = _distribution_tables(insufficient)
        paths["figure2_csv"] = atomic_write(out / "figure2.csv", lambda t: fig2.to_csv(t))
        write_text(out / "figure2.md", md)
        equal = insufficient.get("equal")
        if equal is not None and sweep_sizes:
            paths["sweep"] = _plot_sweep(equal, sweep_sizes, out / "gamma_sweep.png", plt)
    summary = acceptance(sufficient, insufficient, sweep_sizes)
    paths["summary"] = write_json(out / "summary.json", summary)
    write_text(out / "paired.md", paired_markdown(summary))
    paths["paired_md"] = out / "paired.md"
    return paths


def _plot_sweep(ds: xr.Dataset, sizes: Sequence[int], path: Path, plt: Any) -> Path:
    sizes = [s for s in sizes if s in ds.size.values]
    fig, axes = plt.subplots(
        1, max(len(sizes), 1), figsize=(5.0 * max(len(sizes), 1), 4.0), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    mean = ds["subopt"].mean("seed")
    for ax, size in zip(axes[0], sizes, strict=False):
        g = ds["gamma"].sel(size=size).to_numpy()
        curve = ds["sweep"].sel(size=size).mean("seed").to_numpy()
        ax.plot(g, curve, "o-", ms=3, label="Off-C2LUB (fixed γ̂)")
        for alg, ls in (
            ("Off-C2LUB_Underestimation", ":"),
            ("Off-C2LUB_Overestimation", "-."),
            ("Off-CLUB", "--"),
        ):
            if alg in ds.algorithm.values:
                ax.axhline(float(mean.sel(algorithm=alg, size=size)), ls=ls, color="k", lw=1,
                           label=alg)  # fmt: skip
        j = int(np.argmin(curve))
        ax.plot([g[j]], [curve[j]], "r*", ms=10, label="sweep minimum (oracle)")
        ax.set_xlabel("γ̂")
        ax.set_ylabel("average SubOpt")
        ax.set_title(f"|D| = {_size_label(int(size))}")
    axes[0, 0].legend(fontsize=7)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def tuned_on(equal: xr.Dataset) -> dict[str, Any]:
    """``grids`` and ``oracle_index`` arguments of :func:`run_offline` that reuse the γ̂ grid and
    the oracle γ̂ of a run on the equal distribution (§6: γ̂ "optimized under the equal
    distribution scenario and applied to the semi-random distribution")."""
    sizes = [int(s) for s in equal.size.values]
    return {
        "grids": {s: equal["gamma"].sel(size=s).to_numpy() for s in sizes},
        "oracle_index": {s: int(equal["oracle_index"].sel(size=s)) for s in sizes},
    }


# ---------------------------------------------------------------------- the named experiment
def _sizes(p: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """Sizes of the sufficient-data table and of the insufficient-data comparison (with the
    sweep sizes), each empty when its part is not run."""
    suff = sorted(p["sufficient_sizes"]) if "sufficient" in p["parts"] else []
    insuff = (
        sorted(set(p["insufficient_sizes"]) | set(p["sweep_sizes"]))
        if "insufficient" in p["parts"]
        else []
    )
    return suff, insuff


def _key(dist: str, size: int, p: Mapping[str, Any]) -> str:
    return f"{dist}_size-{size}_seeds-{p['seeds']}"


def _cells(p: Mapping[str, Any]) -> list[Cell]:
    parse_lambda_tilde(p["lambda_tilde_a"])
    suff, insuff = _sizes(p)
    grid = sorted(set(suff) | set(insuff))
    out = [Cell(_key("equal", s, p), {"distribution": "equal", "size": s}) for s in grid]
    # Off-C2LUB's γ̂ is tuned on the equal distribution and reused for the semi-random one
    out += [
        Cell(
            _key("semi-random", s, p),
            {"distribution": "semi-random", "size": s},
            depends=(_key("equal", s, p),),
        )
        for s in grid
    ]
    return out


def _run_cell(
    p: Mapping[str, Any], spec: Mapping[str, Any], deps: Mapping[str, xr.Dataset]
) -> xr.Dataset:
    tuned = {}
    if deps:
        (eq,) = deps.values()
        tuned = tuned_on(eq)
    return run_offline(
        [spec["size"]],
        distribution=spec["distribution"],
        dataset=p["dataset"],
        n_seeds=p["seeds"],
        seed=p["seed"],
        logging=p["logging"],
        algorithms=p["algorithms"],
        lambda_tilde_a=parse_lambda_tilde(p["lambda_tilde_a"]),
        **tuned,
        **{k: p[k] for k in ENV_PARAMS},
    )


def _write(
    p: Mapping[str, Any], results: Mapping[str, xr.Dataset], out: Path, annotate: Annotate
) -> tuple[dict[str, Path], list[str]]:
    suff, insuff = _sizes(p)

    def stack(grid: list[int]) -> dict[str, xr.Dataset] | None:
        if not grid:
            return None
        return {
            dist: annotate(concat_cells([results[_key(dist, s, p)] for s in grid], "size"))
            for dist in ("equal", "semi-random")
        }

    runs = {"Sufficient data": stack(suff), "Insufficient data": stack(insuff)}
    files = write_offline_results(
        out, runs["Sufficient data"], runs["Insufficient data"], p["sweep_sizes"]
    )
    lines = []
    for title, by_dist in runs.items():
        for dist, ds in (by_dist or {}).items():
            lines += [f"### {title} ({dist}): SubOpt by dataset size", ""]
            lines += [_markdown(subopt_table(ds), "{:.4g}"), ""]
    lines += ["### Paired differences", "", Path(files["paired_md"]).read_text(), ""]
    return files, lines


#: ``offline``: Table 3 and Figure 2, one cell per user distribution and dataset size
EXPERIMENT = define_experiment(
    "offline",
    params=(
        Param("parts", "str", "Table 3 and/or Figure 2.", many=True, choices=("sufficient", "insufficient")),
        Param("dataset", "str", "Synthetic users or MovieLens.", choices=("synthetic", "movielens")),
        Param("logging", "str", "Logging policy of the data.", choices=("random", "linucb")),
        Param("algorithms", "str", "Algorithms compared.", many=True, choices=(*ALGORITHMS, *STREAM_ALGORITHMS)),
        Param("lambda_tilde_a", "str", "λ̃_a: a positive number, 'lambda_a' or 'theory'."),
        Param("sufficient_sizes", "int", "Dataset sizes of Table 3.", many=True, minimum=4),
        Param("insufficient_sizes", "int", "Dataset sizes of Figure 2.", many=True, minimum=4),
        Param("sweep_sizes", "int", "Sizes of the γ̂ sweep plots.", many=True, minimum=4),
        Param("n_users", "int", "Users.", minimum=2),
        Param("n_features", "int", "Feature dimension d.", minimum=1),
        Param("n_clusters", "int", "Clusters J.", minimum=1),
        Param("n_candidates", "int", "Actions per decision.", minimum=2),
        Param("n_test", "int", "Test decisions (none: as many as training rows).", minimum=1, optional=True),
        Param("grid_points", "int", "Points of the γ̂ grid.", minimum=2),
        SEED,
    ),
    cells=_cells,
    run_cell=_run_cell,
    write=_write,
    timing_vars=("fit_seconds",),
)  # fmt: skip

#: the λ̃_a of the reproduction (see the module docstring): ``lambda_tilde_a`` of
#: ``configs/offline.toml``
REPRODUCE_LAMBDA_TILDE_A = parse_lambda_tilde(EXPERIMENT.defaults["small"]["lambda_tilde_a"])
