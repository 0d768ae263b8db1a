"""Every paper reproduction as a named experiment (see :mod:`hierbandit.experiments.registry`).

Each experiment below declares its parameter schema, how it splits into cells, how one cell is
computed (by the paper's own reproduction module) and how the finished cells are combined and
written. The parameter values of each scale are in ``configs/<name>.toml``.

Cells are windows of seeds (or BOC trials) of one setting: a window gives the same replications
as one run over all seeds (:func:`hierbandit.experiments._config.seed_children`), so a sweep split
into cells, run in any order on any executor, equals the monolithic run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import xarray as xr

from hierbandit.experiments.registry import Cell, Param, register

__all__: list[str] = []

Annotate = Callable[[xr.Dataset], xr.Dataset]


# ---------------------------------------------------------------------- shared helpers
def _windows(total: int, size: int) -> list[tuple[int, int]]:
    """``(first, count)`` windows covering ``0 … total − 1``."""
    return [(a, min(size, total - a)) for a in range(0, total, size)]


def _seed_cells(params: Mapping[str, Any], groups: list[tuple[str, dict[str, Any]]]) -> list[Cell]:
    """One cell per (group, window of seeds); ``groups`` are (key prefix, spec) pairs."""
    return [
        Cell(
            f"{prefix}_seeds-{first}-{first + n - 1}",
            {**spec, "first_seed": first, "n_seeds": n},
        )
        for prefix, spec in groups
        for first, n in _windows(params["seeds"], params["seeds_per_cell"])
    ]


def _concat(datasets: list[xr.Dataset], dim: str) -> xr.Dataset:
    """Stack cell Datasets along ``dim`` (sorted by it); other variables from the first."""
    datasets = sorted(datasets, key=lambda d: int(d[dim].values[0]))
    ds = xr.concat(
        datasets,
        dim=dim,
        data_vars="minimal",
        coords="minimal",
        compat="override",
        join="outer",
        combine_attrs="override",
    )
    for key in ("first_seed", "experiment_cell", "experiment_fingerprint"):
        ds.attrs.pop(key, None)
    return ds


def _grouped(results: Mapping[str, xr.Dataset]) -> dict[str, list[xr.Dataset]]:
    """Cell Datasets grouped by the key prefix before ``_seeds-`` / ``_trials-``."""
    out: dict[str, list[xr.Dataset]] = {}
    for key, ds in results.items():
        prefix = key.rsplit("_seeds-", 1)[0].rsplit("_trials-", 1)[0]
        out.setdefault(prefix, []).append(ds)
    return out


def _rel(out: Path, paths: Mapping[str, Path]) -> str:
    return ", ".join(f"`{Path(p).relative_to(out)}`" for p in paths.values())


def _regret_lines(ds: xr.Dataset, title: str, var: str = "regret") -> list[str]:
    from hierbandit.experiments.simulate import regret_table

    table = regret_table(ds)
    lines = [f"### {title}", "", "| policy | final regret (mean ± s.e.) |", "|---|---|"]
    lines += [f"| {p} | {r['mean']:.1f} ± {r['se']:.1f} |" for p, r in table.iterrows()]
    return [*lines, ""]


def _write_regret_groups(
    results: Mapping[str, xr.Dataset],
    annotate: Annotate,
    write_one: Callable[[str, xr.Dataset], dict[str, Path]],
) -> tuple[dict[str, Path], list[str]]:
    """Combine each group's seed windows, write it with ``write_one(name, ds)`` (paths with a
    ``"plot"`` entry) and summarise its final regrets."""
    files: dict[str, Path] = {}
    lines: list[str] = []
    for name, parts in _grouped(results).items():
        ds = annotate(_concat(parts, "seed"))
        paths = write_one(name, ds)
        files.update({f"{name}_{k}": v for k, v in paths.items()})
        lines += _regret_lines(ds, ds.attrs["setting_description"])
        lines += [f"![{name}]({Path(paths['plot']).name})", ""]
    return files, lines


SEED = Param("seed", "int", "Root seed of every random stream.", minimum=0)
HYPER_UPDATE_EVERY = Param(
    "hyper_update_every",
    "int",
    "EbmTS/EbmUCB re-estimate (Σ̂, σ̂²) every this many pulls of an arm (1: every pull, as in "
    "the paper; 20 is about 10 times faster, with no measurable change in regret).",
    minimum=1,
)


# ---------------------------------------------------------------------- ebm: Figures 1-2
def _ebm_synthetic() -> None:
    from hierbandit.experiments.ebm import FIGURE_POLICY_NAMES, SETTINGS

    def cells(p: Mapping[str, Any]) -> list[Cell]:
        return _seed_cells(p, [(s, {"setting": s}) for s in p["settings"]])

    def run(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> xr.Dataset:
        from hierbandit.experiments.ebm import make_env, make_policies
        from hierbandit.experiments.simulate import simulate

        env = make_env(spec["setting"])
        policies = make_policies(
            env.n_instances,
            env.n_arms,
            env.n_features,
            p["policies"],
            hyper_update_every=p["hyper_update_every"],
        )
        ds = simulate(
            policies,
            env,
            p["horizon"],
            spec["n_seeds"],
            seed=p["seed"],
            first_seed=spec["first_seed"],
        )
        ds.attrs["setting"] = spec["setting"]
        ds.attrs["hyper_update_every"] = p["hyper_update_every"]
        ds.attrs["setting_description"] = SETTINGS[spec["setting"]][0]
        return ds

    def write(p, results, out, annotate):
        from hierbandit.experiments.ebm import write_results

        return _write_regret_groups(
            results, annotate, lambda name, ds: write_results(ds, out, name)
        )

    register(
        "ebm-synthetic",
        params=(
            Param("settings", "str", "Figure panels to run.", many=True, choices=tuple(SETTINGS)),
            Param("horizon", "int", "Rounds per run.", minimum=10),
            Param("policies", "str", "Policies compared.", many=True, choices=FIGURE_POLICY_NAMES),
            HYPER_UPDATE_EVERY,
            SEED,
        ),
        cells=cells,
        run_cell=run,
        write=write,
    )


# ---------------------------------------------------------------------- ebm: Figure 4
def _ebm_real() -> None:
    from hierbandit.experiments.ebm import POLICY_NAMES
    from hierbandit.experiments.ebm_real import REAL_EXPERIMENTS

    def cells(p: Mapping[str, Any]) -> list[Cell]:
        return _seed_cells(p, [(d, {"dataset": d}) for d in p["datasets"]])

    def run(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> xr.Dataset:
        from hierbandit.experiments.ebm_real import run_real

        name = spec["dataset"]
        return run_real(
            name,
            n_seeds=spec["n_seeds"],
            horizon=REAL_EXPERIMENTS[name][1] // p["horizon_divisor"],
            seed=p["seed"],
            policies=p["policies"],
            first_seed=spec["first_seed"],
            hyper_update_every=p["hyper_update_every"],
        )

    def write(p, results, out, annotate):
        from hierbandit.experiments.ebm_real import write_real

        def write_one(name: str, ds: xr.Dataset) -> dict[str, Path]:
            ds.attrs["scale"] = f"horizon / {p['horizon_divisor']}"
            return write_real(ds, out)

        return _write_regret_groups(results, annotate, write_one)

    register(
        "ebm-real",
        params=(
            Param(
                "datasets", "str", "Real-data tasks.", many=True, choices=tuple(REAL_EXPERIMENTS)
            ),
            Param(
                "horizon_divisor",
                "int",
                "Horizon = the paper's horizon of each data set divided by this.",
                minimum=1,
            ),
            Param("policies", "str", "Policies compared.", many=True, choices=POLICY_NAMES),
            HYPER_UPDATE_EVERY,
            SEED,
        ),
        cells=cells,
        run_cell=run,
        write=write,
    )


# ---------------------------------------------------------------------- cascading: Figure 5
def _cascade() -> None:
    from hierbandit.experiments.cascade import REPRODUCTION_POLICIES, make_policies

    known = (*REPRODUCTION_POLICIES, "UCBBP-MAP", "AUCBBP-MAP", "AUCBBP-active")

    def cells(p: Mapping[str, Any]) -> list[Cell]:
        return _seed_cells(p, [(f"N-{n}", {"n_users": n}) for n in sorted(p["n_users"])])

    def run(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> xr.Dataset:
        from hierbandit.cascade.env import CascadeEnv
        from hierbandit.experiments.cascade import simulate_cascade

        env = CascadeEnv.preset("mccb-repro", n_users=spec["n_users"])
        return simulate_cascade(
            make_policies(env, p["n_episodes"], p["policies"]),
            env,
            p["n_episodes"],
            spec["n_seeds"],
            seed=p["seed"],
            first_seed=spec["first_seed"],
        )

    def write(p, results, out, annotate):
        from hierbandit.experiments.cascade import (
            _markdown,
            combine_n_users,
            summary_table,
            write_reproduction,
        )

        per_n = {
            int(prefix.split("-")[1]): _concat(parts, "seed")
            for prefix, parts in _grouped(results).items()
        }
        ds = annotate(combine_n_users(per_n, "experiment"))
        files = write_reproduction(ds, out)
        tab = summary_table(ds)
        lines = ["### Final cumulative regret R(T) (mean over seeds)", "", _markdown(tab), ""]
        lines += ["![Figure 5](figure5.png)", ""]
        return files, lines

    register(
        "cascade",
        params=(
            Param("n_users", "int", "Numbers of users N (one panel each).", many=True, minimum=1),
            Param("n_episodes", "int", "Episodes T.", minimum=2),
            Param("policies", "str", "Policies compared.", many=True, choices=known),
            SEED,
        ),
        cells=cells,
        run_cell=run,
        write=write,
    )


# ---------------------------------------------------------------------- SCLUB: Table 1
def _sclub() -> None:
    from hierbandit.experiments.sclub import POLICY_NAMES, SETTINGS

    def cells(p: Mapping[str, Any]) -> list[Cell]:
        return _seed_cells(p, [(s, {"setting": s}) for s in p["settings"]])

    def run(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> xr.Dataset:
        from hierbandit.experiments.sclub import run_setting

        return run_setting(
            spec["setting"],
            scale=p["env_scale"],
            n_seeds=spec["n_seeds"],
            horizon=p["horizon"],
            n_users=p["n_users"],
            seed=p["seed"],
            reward=p["reward"],
            noise_sd=p["noise_sd"],
            preset=p["preset"],
            policies=p["policies"],
            audit=p["audit"],
            first_seed=spec["first_seed"],
        )

    def write(p, results, out, annotate):
        from hierbandit.experiments.sclub import check_claims, regret_table, write_results

        datasets = {}
        for setting, parts in _grouped(results).items():
            first = min(parts, key=lambda d: int(d["seed"].values[0]))
            audit_vars = [v for v in first.data_vars if str(v).startswith("audit_")]
            audit_attrs = {k: v for k, v in first.attrs.items() if k.startswith("audit_")}
            plain = [
                d.drop_vars([v for v in d.data_vars if str(v).startswith("audit_")]) for d in parts
            ]
            ds = _concat(plain, "seed")
            for v in audit_vars:
                ds[v] = first[v]
            ds.attrs.update(audit_attrs)
            ds.attrs["n_seeds"] = ds.sizes["seed"]
            datasets[setting] = annotate(ds)
        files = write_results(datasets, out)
        lines = ["### Final cumulative regret (mean ± s.e.)", ""]
        for setting, ds in datasets.items():
            tab = regret_table(ds)
            lines.append(
                f"* {setting}: "
                + ", ".join(f"{pol} {r['mean']:,.0f} ± {r['se']:,.0f}" for pol, r in tab.iterrows())
            )
        claims = check_claims(datasets)
        lines += ["", f"Paper's claims (all hold: {claims.pop('all_hold', None)}):", ""]
        lines += [
            f"* {setting}: " + ", ".join(f"{k} = {v}" for k, v in found.items())
            for setting, found in claims.items()
        ]
        lines.append("")
        lines += ["![regret](regret_curves.png)", "", "![clusters](n_clusters.png)", ""]
        return files, lines

    register(
        "sclub",
        params=(
            Param("settings", "str", "Settings (Table 1 columns).", many=True, choices=tuple(SETTINGS)),
            Param("env_scale", "str", "Environment sizes (users) of sclub.SCALES.", choices=("small", "paper")),
            Param("n_users", "int", "Override the number of users.", minimum=2, optional=True),
            Param("horizon", "int", "Rounds T.", minimum=2),
            Param("reward", "str", "Reward model.", choices=("gaussian", "bernoulli")),
            Param("noise_sd", "float", "Gaussian noise standard deviation.", minimum=0.0),
            Param("preset", "str", "Policy configuration.", choices=("paper", "reference")),
            Param("policies", "str", "Policies compared.", many=True, choices=POLICY_NAMES),
            Param("audit", "bool", "Mixture audit of SCLUB's clustering on seed 0."),
            SEED,
        ),
        cells=cells,
        run_cell=run,
        write=write,
        timing_vars=("elapsed",),
    )  # fmt: skip


# ---------------------------------------------------------------------- offline: Table 3, Fig. 2
_OFFLINE_CFG = (
    "n_users",
    "n_features",
    "n_clusters",
    "n_candidates",
    "n_test",
    "grid_points",
)


def _lambda_tilde(value: str) -> float | str:
    if value in ("lambda_a", "theory"):
        return value
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise ValueError(
            f"params.lambda_tilde_a must be 'lambda_a', 'theory' or a positive number, got {value!r}"
        )
    return number


def _offline() -> None:
    from hierbandit.experiments.offline import ALGORITHMS, STREAM_ALGORITHMS

    def sizes(p: Mapping[str, Any]) -> tuple[list[int], list[int]]:
        suff = sorted(p["sufficient_sizes"]) if "sufficient" in p["parts"] else []
        insuff = (
            sorted(set(p["insufficient_sizes"]) | set(p["sweep_sizes"]))
            if "insufficient" in p["parts"]
            else []
        )
        return suff, insuff

    def key(dist: str, size: int, p: Mapping[str, Any]) -> str:
        return f"{dist}_size-{size}_seeds-{p['seeds']}"

    def cells(p: Mapping[str, Any]) -> list[Cell]:
        _lambda_tilde(p["lambda_tilde_a"])
        suff, insuff = sizes(p)
        out = [Cell(key("equal", s, p), {"distribution": "equal", "size": s})
               for s in sorted(set(suff) | set(insuff))]  # fmt: skip
        # Off-C2LUB's γ̂ is tuned on the equal distribution and reused for the semi-random one
        out += [
            Cell(
                key("semi-random", s, p),
                {"distribution": "semi-random", "size": s},
                depends=(key("equal", s, p),),
            )
            for s in sorted(set(suff) | set(insuff))
        ]
        return out

    def run(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Mapping[str, xr.Dataset]):
        from hierbandit.experiments.offline import run_offline, tuned_on

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
            lambda_tilde_a=_lambda_tilde(p["lambda_tilde_a"]),
            **tuned,
            **{k: p[k] for k in _OFFLINE_CFG},
        )

    def write(p, results, out, annotate):
        from hierbandit.experiments.offline import _markdown, subopt_table, write_offline_results

        suff, insuff = sizes(p)

        def stack(grid: list[int]) -> dict[str, xr.Dataset] | None:
            if not grid:
                return None
            return {
                dist: annotate(_concat([results[key(dist, s, p)] for s in grid], "size"))
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

    register(
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
        cells=cells,
        run_cell=run,
        write=write,
        timing_vars=("fit_seconds",),
    )  # fmt: skip


# ---------------------------------------------------------------------- BOC: Fig. 3, Tables 1-2
_BOC_INSTANCES = {"real": ("iris", "digits"), "table2": ("challenging-rescaled", "iris")}


def _boc() -> None:
    def trials(p: Mapping[str, Any], part: str) -> int:
        return p["table2_trials"] if part == "table2" else p["seeds"]

    def cells(p: Mapping[str, Any]) -> list[Cell]:
        out = []
        for part in p["parts"]:
            names = p["kinds"] if part == "synthetic" else _BOC_INSTANCES[part]
            for name in names:
                for first, n in _windows(trials(p, part), p["seeds_per_cell"]):
                    out.append(
                        Cell(
                            f"{part}-{name}_trials-{first}-{first + n - 1}",
                            {"part": part, "instance": name, "first_trial": first, "n_trials": n},
                        )
                    )
        return out

    def run(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> xr.Dataset:
        from hierbandit.boc.instances import digits_instance, iris_instance, synthetic_instance
        from hierbandit.experiments.boc import run_part

        part, name = spec["part"], spec["instance"]
        if part == "synthetic":
            inst = synthetic_instance(name)
        elif name == "iris":
            inst = iris_instance()
        elif name == "digits":
            inst = digits_instance(n_features=p["digits_features"], n_arms=500)
        else:
            inst = synthetic_instance("challenging", target_hardness=2.0)
        (ds,) = run_part(
            part,
            {name: inst},
            n_trials=spec["n_trials"],
            seed=p["seed"],
            max_pulls=p["max_pulls"],
            first_trial=spec["first_trial"],
        ).values()
        return ds

    def write(p, results, out, annotate):
        from hierbandit.experiments.boc import write_reproduction

        groups: dict[str, dict[str, xr.Dataset]] = {"synthetic": {}, "real": {}, "table2": {}}
        for prefix, parts in _grouped(results).items():
            part, name = prefix.split("-", 1)
            groups[part][name] = annotate(_concat(parts, "trial"))
        config = {
            "trials": {part: trials(p, part) for part in p["parts"]},
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

    register(
        "boc",
        params=(
            Param("parts", "str", "Figure 3, Table 1 and/or Table 2.", many=True,
                  choices=("synthetic", "real", "table2")),
            Param("kinds", "str", "Synthetic instances of eq. (9).", many=True,
                  choices=("easy", "moderate", "challenging")),
            Param("table2_trials", "int", "Trials of Table 2 (the others use seeds).", minimum=1),
            Param("digits_features", "int", "PCA dimension of the digits stand-in.", minimum=1),
            Param("max_pulls", "int", "Budget after which a run is stopped unfinished.", minimum=1),
            SEED,
        ),
        cells=cells,
        run_cell=run,
        write=write,
        timing_vars=("seconds",),
    )  # fmt: skip


for _define in (_ebm_synthetic, _ebm_real, _cascade, _sclub, _offline, _boc):
    _define()
