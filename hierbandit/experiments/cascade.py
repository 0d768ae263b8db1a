"""Simulation of the cascading policies and the reproduction of Park & Jia (2025), Figure 5.

:func:`simulate_cascade` runs episode-level cascading policies on a
:class:`~hierbandit.cascade.env.CascadeEnv` over many seeds with common random numbers and
returns an :class:`xarray.Dataset` with dims (policy, seed, episode). :func:`run_reproduction`
runs the spec's §6.3 configuration for several numbers of users ``N``, :func:`acceptance` checks
the acceptance criteria of §6.5 and :func:`write_reproduction` writes the results, a table and the
two rows of Figure 5 (``docs/cascading.md``, Reproducing the experiments). :data:`EXPERIMENT` is
the named experiment ``cascade`` (``hierbandit experiment run cascade``); its parameter values
live in ``configs/cascade.toml``.

Seeding
-------
As :func:`hierbandit.experiments.simulate`: seed ``s`` uses child ``s`` of
``SeedSequence(seed)``, which spawns the **environment parameters** (θ_x, used when
``redraw_env``), the **rollout** (contexts and click uniforms) and a **policy root**; policy
``i`` gets child ``i`` of the policy root (by position in the mapping). Every policy of a seed
faces the same users and the same uniforms (a displayed arm is clicked iff ``U < σ(zᵀθ)``).
Runs with different ``N`` share the environment stream, hence θ, per seed.

Regret
------
Per episode, ``Σ_n V*_1(x_{t,n}) − V^π_1(x_{t,n})`` with the true θ (Definition 3.2):
exact (:func:`~hierbandit.cascade.env.slate_value`) for open-loop policies (every policy of
the paper, with AUCBBP's literal ranking) and the unbiased performance-difference estimate
(``docs/cascading.md``) for closed-loop ones (``AUCBBP(rank_pool="active")``).
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from hierbandit._extras import require
from hierbandit._io import atomic_write, write_dataset, write_json
from hierbandit._validation import check_bool, check_choice, check_positive_int
from hierbandit.cascade.env import (
    CascadeEnv,
    backward_plan_unchecked,
    performance_difference,
    simulate_episode,
    slate_value_unchecked,
)
from hierbandit.cascade.policies import (
    AUCBBP,
    UCBBP,
    CascadeEpsilonGreedy,
    CascadeGreedy,
    CascadeLinTS,
    CascadeLinUCB,
    CascadePolicy,
    CascadeRandom,
)
from hierbandit.experiments._config import check_seed, config_json, resolve_factories, seed_children
from hierbandit.experiments.cells import Annotate, concat_cells, group_cells, seed_cells
from hierbandit.experiments.progress import progress_task
from hierbandit.experiments.registry import SCALES, SEED, Cell, Param, define_experiment
from hierbandit.experiments.report import frame_table

__all__ = [
    "EXPERIMENT",
    "REPRODUCTION_POLICIES",
    "acceptance",
    "combine_n_users",
    "make_policies",
    "plot_figure5",
    "run_reproduction",
    "simulate_cascade",
    "summary_table",
    "write_reproduction",
]

PolicyFactory = Callable[[np.random.Generator], CascadePolicy]

#: the policies of the reproduction (spec §6.3–6.4, ``docs/cascading.md``) in plotting order
REPRODUCTION_POLICIES = (
    "UCBBP",
    "AUCBBP",
    "UCBBP-theory",
    "AUCBBP-theory",
    "eps-greedy",
    "greedy",
    "random",
    "UCBBP-literal",
    "AUCBBP-literal",
    "CascadeLinUCB",
    "CascadeLinTS",
)
_OPTIONAL_POLICIES = ("UCBBP-MAP", "AUCBBP-MAP", "AUCBBP-active")


# ---------------------------------------------------------------------- helpers
def _config_json(obj: Any) -> str:
    config = json.loads(config_json(obj, per_seed_rng=True))
    if config["params"].get("prior") not in (None, "None"):
        config["params"]["prior"] = repr(obj.get_params()["prior"])
    return json.dumps(config)


def _resolve_policies(policies: Any) -> list[tuple[str, PolicyFactory]]:
    return resolve_factories(policies, CascadePolicy)


def _make(factory: PolicyFactory, name: str, rng: np.random.Generator, env: CascadeEnv) -> Any:
    pol = factory(rng)
    if not isinstance(pol, CascadePolicy):
        raise TypeError(f"policies[{name!r}] must produce a CascadePolicy, got {type(pol)}")
    for attr in ("n_arms", "n_features", "horizon"):
        if getattr(pol, attr) != getattr(env, attr):
            raise ValueError(
                f"policies[{name!r}] has {attr}={getattr(pol, attr)} but the environment has "
                f"{attr}={getattr(env, attr)}"
            )
    if not np.array_equal(pol.rewards, env.rewards):
        raise ValueError(f"policies[{name!r}] has rewards different from the environment's")
    return pol


def _cascade_from_slate(
    P: np.ndarray, U: np.ndarray, slate: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Displayed arms and clicks of open-loop slates: the same outcome as stepping through
    :func:`~hierbandit.cascade.env.simulate_episode`, vectorised."""
    N, H = U.shape
    f = np.take_along_axis(P, slate, axis=1)
    hit = f > U  # clicked iff U < f
    clicked = hit.any(axis=1)
    first = hit.argmax(axis=1)
    last = np.where(clicked, first, H - 1)
    shown = np.arange(H)[None, :] <= last[:, None]
    arms = np.where(shown, slate, -1)
    clicks = np.zeros((N, H), dtype=np.int8)
    rows = np.flatnonzero(clicked)
    clicks[rows, first[rows]] = 1
    return arms, clicks


def _run_policy(policy: CascadePolicy, roll: Any, env: CascadeEnv) -> dict[str, np.ndarray]:
    """The hot loop over episodes (unchecked ``_start``/``_select``/``_update``)."""
    T = roll.n_episodes
    e = env.rewards
    regret = np.empty(T)
    reward = np.empty(T)
    clicks_n = np.empty(T, dtype=np.int64)
    shown_n = np.empty(T, dtype=np.int64)
    for t in range(T):
        X = roll.contexts[t]
        P = roll.click_prob[t]
        U = roll.uniforms[t]
        policy._start(X)
        if policy.open_loop:
            slate = policy._slate
            arms, clicks = _cascade_from_slate(P, U, slate)
            regret[t] = float(np.sum(roll.optimal_value[t] - slate_value_unchecked(P, e, slate)))
        else:
            arms, clicks = simulate_episode(P, U, policy._select)
            Q, V = backward_plan_unchecked(P, e, env.horizon)
            regret[t] = float(np.sum(performance_difference(Q, V, arms)))
        shown = arms >= 0
        reward[t] = float(np.sum(e[np.where(shown, arms, 0)] * clicks))
        clicks_n[t] = int(clicks.sum())
        shown_n[t] = int(shown.sum())
        policy._update(X, arms, clicks)
    return {"regret": regret, "reward": reward, "clicks": clicks_n, "displays": shown_n}


# ---------------------------------------------------------------------- simulate
def simulate_cascade(
    policies: Mapping[str, CascadePolicy | PolicyFactory],
    env: CascadeEnv,
    n_episodes: int,
    n_seeds: int,
    *,
    seed: int = 0,
    redraw_env: bool = True,
    first_seed: int = 0,
) -> xr.Dataset:
    """Run cascading policies on the same per-seed environment and random numbers.

    Parameters
    ----------
    policies
        Mapping name → :class:`~hierbandit.cascade.policies.CascadePolicy` (cloned per seed
        with ``clone(rng=...)``) or name → ``callable(rng)`` returning a fresh policy.
    env
        The environment; with ``redraw_env`` each seed uses ``env.clone(rng)`` (θ_x redrawn
        unless it was given).
    n_episodes
        ``T``.
    n_seeds
        Replications.
    seed
        Root seed (non-negative int); see the module docstring.
    redraw_env
        Redraw the environment's random parameters per seed.
    first_seed
        Run replications ``first_seed … first_seed + n_seeds − 1`` of the root seed (the
        ``seed`` coordinate holds these indices); each is the same in any window.

    Returns
    -------
    xarray.Dataset
        Dimensions ``policy``, ``seed``, ``episode`` (``1..T``) and ``param``:

        * ``regret`` (policy, seed, episode): pseudo-regret of the episode summed over users;
        * ``reward`` (policy, seed, episode): realised revenue; ``clicks``, ``displays``
          (policy, seed, episode): clicks and displayed positions;
        * ``optimal_value`` (seed, episode): ``Σ_n V*_1(x_{t,n})``;
        * ``theta`` (seed, param): the environment's θ per seed.

        ``regret.attrs["exact"]`` lists per policy whether the regret is exact (open loop) or
        the performance-difference estimate; ``attrs`` record the configuration.
    """
    from hierbandit import __version__

    factories = _resolve_policies(policies)
    if not isinstance(env, CascadeEnv):
        raise TypeError(f"env must be a CascadeEnv, got {type(env).__name__}")
    T = check_positive_int(n_episodes, "n_episodes")
    S = check_positive_int(n_seeds, "n_seeds")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    first_seed = check_seed(first_seed, "first_seed")
    redraw_env = check_bool(redraw_env, "redraw_env")
    P = len(factories)
    out = {
        "regret": np.empty((P, S, T)),
        "reward": np.empty((P, S, T)),
        "clicks": np.empty((P, S, T), dtype=np.int64),
        "displays": np.empty((P, S, T), dtype=np.int64),
    }
    opt = np.empty((S, T))
    thetas = np.empty((S, env.n_features + env.n_arms))
    configs: dict[str, str] = {}
    exact: dict[str, bool] = {}
    # progress over (seed × policy), reported as log records (hierbandit.experiments.progress)
    with progress_task(f"cascade N={env.n_users}", total=S * P) as task:
        for s, seq in enumerate(seed_children(int(seed), first_seed, S)):
            env_ss, roll_ss, pol_root = seq.spawn(3)
            env_s = env.clone(rng=np.random.default_rng(env_ss)) if redraw_env else env
            roll = env_s.rollout(T, rng=np.random.default_rng(roll_ss))
            opt[s] = roll.optimal_value.sum(axis=1)
            thetas[s] = env_s.theta
            for i, (ps, (name, factory)) in enumerate(
                zip(pol_root.spawn(P), factories, strict=True)
            ):
                pol = _make(factory, name, np.random.default_rng(ps), env_s)
                if s == 0:
                    configs[name] = _config_json(pol)
                    exact[name] = bool(pol.open_loop)
                res = _run_policy(pol, roll, env_s)
                for key, arr in res.items():
                    out[key][i, s] = arr
                task.advance()
    names = [n for n, _ in factories]
    d, K = env.n_features, env.n_arms
    labels = [f"x{i}" for i in range(d)] + [f"arm{k}" for k in range(K)]
    ds = xr.Dataset(
        {
            **{k: (("policy", "seed", "episode"), v) for k, v in out.items()},
            "optimal_value": (("seed", "episode"), opt),
            "theta": (("seed", "param"), thetas),
        },
        coords={
            "policy": np.array(names, dtype=object),
            "seed": np.arange(first_seed, first_seed + S),
            "episode": np.arange(1, T + 1),
            "param": labels,
        },
        attrs={
            "env": _config_json(env),
            "policies": json.dumps({k: json.loads(v) for k, v in configs.items()}),
            "n_episodes": T,
            "n_seeds": S,
            "seed": int(seed),
            "first_seed": first_seed,
            "redraw_env": int(redraw_env),
            "n_users": env.n_users,
            "horizon": env.horizon,
            "n_arms": K,
            "n_features": d,
            "rewards": env.rewards.tolist(),
            "hierbandit_version": __version__,
        },
    )
    ds["regret"].attrs.update(
        long_name="pseudo-regret per episode (summed over users)",
        exact=json.dumps(exact),
    )
    ds["episode"].attrs["long_name"] = "episode t"
    return ds


# ---------------------------------------------------------------------- reproduction
def make_policies(
    env: CascadeEnv,
    n_episodes: int,
    names: Sequence[str],
    *,
    beta: float = 0.5,
    epsilon: float = 0.1,
) -> dict[str, CascadePolicy]:
    """The reproduction's policies ``names`` for ``env`` (spec §6.3, ``docs/cascading.md``):
    UCBBP/AUCBBP with constant β and theory β, the literal update, ε-greedy (0.1), greedy, random
    and the linear cascading baselines (:data:`REPRODUCTION_POLICIES`); also ``"UCBBP-MAP"``/
    ``"AUCBBP-MAP"`` (full refit) and ``"AUCBBP-active"``.
    """
    K, d, e, H = env.n_arms, env.n_features, env.rewards, env.horizon
    T = n_episodes
    table: dict[str, Callable[[], CascadePolicy]] = {
        "UCBBP": lambda: UCBBP(K, d, e, H, beta=beta),
        "AUCBBP": lambda: AUCBBP(K, d, e, H, T, beta=beta),
        "UCBBP-theory": lambda: UCBBP(K, d, e, H, beta="theory"),
        "AUCBBP-theory": lambda: AUCBBP(K, d, e, H, T, beta="theory"),
        "eps-greedy": lambda: CascadeEpsilonGreedy(K, d, e, H, epsilon=epsilon),
        "greedy": lambda: CascadeGreedy(K, d, e, H),
        "random": lambda: CascadeRandom(K, d, e, H),
        "UCBBP-literal": lambda: UCBBP(K, d, e, H, beta=beta, update_rule="paper_literal"),
        "AUCBBP-literal": lambda: AUCBBP(K, d, e, H, T, beta=beta, update_rule="paper_literal"),
        "CascadeLinUCB": lambda: CascadeLinUCB(K, d, e, H),
        "CascadeLinTS": lambda: CascadeLinTS(K, d, e, H),
        "UCBBP-MAP": lambda: UCBBP(K, d, e, H, beta=beta, update_rule="batch_map"),
        "AUCBBP-MAP": lambda: AUCBBP(K, d, e, H, T, beta=beta, update_rule="batch_map"),
        "AUCBBP-active": lambda: AUCBBP(K, d, e, H, T, beta=beta, rank_pool="active"),
    }
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown policy names {unknown}; choose from {list(table)}")
    return {n: table[n]() for n in names}


def run_reproduction(
    scale: str = "small",
    *,
    n_seeds: int | None = None,
    seed: int | None = None,
    n_users: Sequence[int] | None = None,
    n_episodes: int | None = None,
    policies: Sequence[str] | None = None,
) -> xr.Dataset:
    """Figure 5 of the paper on the spec's §6.3 configuration, for every ``N``.

    Parameters
    ----------
    scale : {"small", "paper"}
        Whose shipped values (``configs/cascade.toml``) fill the arguments left ``None``: small
        is T = 300, N ∈ {10, 20, 50, 100}; paper is T = 1000, N ∈ {10, 20, 50, 100, 200}; both
        10 seeds.
    n_seeds, seed
        Replications (the paper: 10) and root seed.
    n_users, n_episodes
        Override the scale's grid.
    policies
        Names for :func:`make_policies`.

    Returns
    -------
    xarray.Dataset
        :func:`simulate_cascade` outputs concatenated along ``n_users``.
    """
    check_choice(scale, SCALES, "scale")
    cfg = EXPERIMENT.fill(
        scale,
        seeds=n_seeds,
        seed=seed,
        n_users=None if n_users is None else list(n_users),
        n_episodes=n_episodes,
        policies=None if policies is None else list(policies),
    )
    T = check_positive_int(cfg["n_episodes"], "n_episodes")
    if T < 2:
        raise ValueError("n_episodes must be >= 2 (AUCBBP's budget uses ln T)")
    Ns = tuple(check_positive_int(n, "n_users") for n in cfg["n_users"])
    if len(set(Ns)) != len(Ns) or not Ns:
        raise ValueError(f"n_users must be distinct and non-empty, got {Ns}")
    results = {}
    for N in sorted(Ns):
        env = CascadeEnv.preset("mccb-repro", n_users=N)
        pols = make_policies(env, T, cfg["policies"])
        results[N] = simulate_cascade(pols, env, T, cfg["seeds"], seed=cfg["seed"])
    return combine_n_users(results, scale)


def combine_n_users(results: Mapping[int, xr.Dataset], scale: str) -> xr.Dataset:
    """Stack :func:`simulate_cascade` results (N → Dataset) along ``n_users`` for Figure 5."""
    Ns = sorted(results)
    ds = xr.concat(
        [results[N] for N in Ns], dim=pd.Index(Ns, name="n_users"), combine_attrs="drop_conflicts"
    )
    ds.attrs.update(
        scale=scale,
        n_users_grid=[int(n) for n in Ns],
        description=(
            "Park & Jia (2025) Figure 5 on the spec's §6.3 configuration (docs/cascading.md): "
            "d=K=5, H=3, "
            "e=linspace(1,3,K), alpha=linspace(0.5,-2.5,K), theta_x=u/|u|, x~N(0,I)"
        ),
    )
    ds.attrs.pop("n_users", None)
    return ds


def _tail_window(T: int) -> int:
    return max(1, min(100, T // 3))


def summary_table(ds: xr.Dataset) -> pd.DataFrame:
    """Per (N, policy): ``R(T)`` mean ± s.e., ``R(T)/T``, ``R(50)/50``, ``R(T)/N`` and the tail
    per-user regret (mean per user-episode over the last ``min(100, T/3)`` episodes)."""
    T = ds.sizes["episode"]
    w = _tail_window(T)
    t50 = min(50, T)
    rows = []
    for N in ds["n_users"].values:
        for pol in ds["policy"].values:
            r = ds["regret"].sel(n_users=N, policy=pol).transpose("seed", "episode").values
            cum = r.sum(axis=1)
            S = cum.size
            se = cum.std(ddof=1) / np.sqrt(S) if S > 1 else 0.0
            rows.append(
                {
                    "n_users": int(N),
                    "policy": str(pol),
                    "R_T": cum.mean(),
                    "R_T_se": se,
                    "R_T_over_T": cum.mean() / T,
                    "R_50_over_50": r[:, :t50].sum(axis=1).mean() / t50,
                    "R_T_over_N": cum.mean() / N,
                    "tail_per_user": r[:, -w:].mean() / N,
                }
            )
    return pd.DataFrame(rows).set_index(["n_users", "policy"])


def acceptance(ds: xr.Dataset) -> pd.DataFrame:
    """The acceptance criteria of spec §6.5, evaluated on :func:`run_reproduction` output.

    Returns
    -------
    pandas.DataFrame
        One row per criterion with ``value``, ``threshold`` and ``ok``.
    """
    tab = summary_table(ds)
    T = ds.sizes["episode"]
    Ns = [int(n) for n in ds["n_users"].values]
    pols = set(str(p) for p in ds["policy"].values)
    rows: list[tuple[str, Any, str, bool]] = []

    def avg_curve(N: int, pol: str) -> np.ndarray:
        r = ds["regret"].sel(n_users=N, policy=pol).mean("seed").values
        return np.cumsum(r) / np.arange(1, T + 1)

    start = min(50, T - 1)
    for pol in ("UCBBP", "AUCBBP"):
        if pol not in pols:
            continue
        worst = -np.inf
        for N in Ns:
            c = avg_curve(N, pol)[start - 1 :]
            worst = max(worst, float(np.max(np.diff(c))) if c.size > 1 else 0.0)
        rows.append(
            (
                f"1. {pol}: R(t)/t non-increasing on t in [{start}, {T}] (max step up)",
                worst,
                "<= 0",
                worst <= 0,
            )
        )
        tails = [tab.loc[(N, pol), "tail_per_user"] for N in Ns if N >= 20]
        if tails:
            rows.append(
                (
                    f"1. {pol}: tail per-user regret, max over N >= 20",
                    float(max(tails)),
                    "< 0.01",
                    max(tails) < 0.01,
                )
            )
    if "eps-greedy" in pols and len(Ns) >= 2:
        lo, hi = min(Ns), max(Ns)
        ratio = (
            tab.loc[(hi, "eps-greedy"), "R_T_over_N"] / tab.loc[(lo, "eps-greedy"), "R_T_over_N"]
        )
        rows.append(
            (
                f"2. eps-greedy: R(T)/N at N={hi} over N={lo}",
                float(ratio),
                ">= 0.6",
                ratio >= 0.6,
            )
        )
        w = _tail_window(T)
        flat = []
        for N in Ns:
            r = ds["regret"].sel(n_users=N, policy="eps-greedy").mean("seed").values / N
            mid = r[T // 2 - w // 2 : T // 2 + (w - w // 2)].mean()
            flat.append(r[-w:].mean() / mid)
        rows.append(
            (
                "2. eps-greedy: tail per-user regret over mid-run value, min over N (flat)",
                float(min(flat)),
                ">= 0.7",
                min(flat) >= 0.7,
            )
        )
        if "UCBBP" in pols:
            r_u = tab.loc[(hi, "UCBBP"), "R_T_over_N"] / tab.loc[(lo, "UCBBP"), "R_T_over_N"]
            rows.append(
                (f"2. (for reference) UCBBP: R(T)/N at N={hi} over N={lo}", float(r_u), "-", True)
            )
    for pol in ("UCBBP", "AUCBBP"):
        if pol in pols and len(Ns) >= 2:
            v = [tab.loc[(N, pol), "R_T_over_N"] for N in Ns]
            rows.append(
                (
                    f"3. {pol}: R(T)/N decreasing in N ({', '.join(f'{x:.2f}' for x in v)})",
                    float(np.max(np.diff(v))),
                    "< 0",
                    bool(np.all(np.diff(v) < 0)),
                )
            )
    if {"UCBBP-theory", "AUCBBP-theory"} <= pols:
        ratios = [
            tab.loc[(N, "AUCBBP-theory"), "R_T"] / tab.loc[(N, "UCBBP-theory"), "R_T"] for N in Ns
        ]
        rows.append(
            (
                "4. theory beta: R_AUCBBP(T)/R_UCBBP(T), max over N",
                float(max(ratios)),
                "< 1",
                max(ratios) < 1,
            )
        )
        big = [r for N, r in zip(Ns, ratios, strict=True) if N >= 20]
        if big:
            rows.append(
                (
                    "4. theory beta: R_AUCBBP(T)/R_UCBBP(T), max over N >= 20",
                    float(max(big)),
                    "<= 0.5",
                    max(big) <= 0.5,
                )
            )
    for pol in ("UCBBP-literal", "AUCBBP-literal"):
        if pol in pols:
            tails = [tab.loc[(N, pol), "tail_per_user"] for N in Ns]
            rows.append(
                (
                    f"5. {pol}: tail per-user regret, min over N (the printed update fails)",
                    float(min(tails)),
                    "> 0.3",
                    min(tails) > 0.3,
                )
            )
    out = pd.DataFrame(rows, columns=["criterion", "value", "threshold", "ok"])
    out["ok"] = out["ok"].astype(bool)
    return out.set_index("criterion")


# ---------------------------------------------------------------------- plots and files
_STYLE = {
    "UCBBP": ("tab:blue", "-"),
    "AUCBBP": ("tab:orange", "-"),
    "UCBBP-theory": ("tab:blue", "--"),
    "AUCBBP-theory": ("tab:orange", "--"),
    "eps-greedy": ("tab:green", "-"),
    "greedy": ("tab:olive", ":"),
    "random": ("0.5", ":"),
    "UCBBP-literal": ("tab:red", "-."),
    "AUCBBP-literal": ("tab:pink", "-."),
    "CascadeLinUCB": ("tab:purple", "-"),
    "CascadeLinTS": ("tab:brown", "-"),
}


def plot_figure5(ds: xr.Dataset) -> Any:
    """Both rows of the paper's Figure 5.

    Row 1: time-averaged regret ``R(t)/t`` against ``t``, one panel per ``N`` (log scale, mean
    ± 1 s.e. over seeds). Row 2: context-averaged regret ``R(T)/N`` against ``N``, with the
    constant-β policies and baselines on the left and the theory-β and literal variants on the
    right.

    Returns
    -------
    matplotlib.figure.Figure
    """
    Figure = require("matplotlib.figure", "experiments", "The cascade figure").Figure
    from matplotlib.ticker import NullFormatter

    Ns = [int(n) for n in ds["n_users"].values]
    pols = [str(p) for p in ds["policy"].values]
    T = ds.sizes["episode"]
    S = ds.sizes["seed"]
    ncol = max(len(Ns), 2)
    fig = Figure(figsize=(3.4 * ncol, 7.2), layout="constrained")
    axes = fig.subplots(2, ncol, squeeze=False)
    t = np.arange(1, T + 1)
    for j, N in enumerate(Ns):
        ax = axes[0, j]
        for pol in pols:
            r = ds["regret"].sel(n_users=N, policy=pol).transpose("seed", "episode").values
            avg = np.cumsum(r, axis=1) / t
            m = avg.mean(axis=0)
            se = avg.std(axis=0, ddof=1) / np.sqrt(S) if S > 1 else np.zeros_like(m)
            color, ls = _STYLE.get(pol, (None, "-"))
            (line,) = ax.plot(t, m, ls=ls, color=color, lw=1.3, label=pol)
            ax.fill_between(
                t, np.maximum(m - se, 1e-6), m + se, color=line.get_color(), alpha=0.15, lw=0
            )
        ax.set_yscale("log")
        ax.set_title(f"N = {N}")
        ax.set_xlabel("episode t")
        if j == 0:
            ax.set_ylabel("time-averaged regret R(t)/t")
    for j in range(len(Ns), ncol):
        axes[0, j].set_visible(False)
    groups = (
        [p for p in pols if not p.endswith(("-theory", "-literal"))],
        [p for p in pols if p.endswith(("-theory", "-literal")) or p == "eps-greedy"],
    )
    titles = ("constant β = 0.5 and baselines", "theory β and the printed update")
    for j, (group, title) in enumerate(zip(groups, titles, strict=True)):
        ax = axes[1, j]
        for pol in group:
            cum = ds["regret"].sel(policy=pol).sum("episode").transpose("n_users", "seed").values
            per = cum / np.asarray(Ns)[:, None]
            m = per.mean(axis=1)
            se = per.std(axis=1, ddof=1) / np.sqrt(S) if S > 1 else np.zeros_like(m)
            color, ls = _STYLE.get(pol, (None, "-"))
            ax.errorbar(Ns, m, yerr=se, ls=ls, color=color, marker="o", ms=4, capsize=2, label=pol)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(Ns, [str(n) for n in Ns])
        ax.xaxis.set_minor_formatter(NullFormatter())  # only the N of the grid are labelled
        ax.set_xlabel("users per episode N")
        ax.set_ylabel("context-averaged regret R(T)/N")
        ax.set_title(title, fontsize=10)
        if group:
            ax.legend(fontsize=7, frameon=False)
    for j in range(2, ncol):
        axes[1, j].set_visible(False)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, frameon=False, loc="outside right upper")
    fig.suptitle(
        f"Multi-user cascading bandits (Park & Jia 2025, Fig. 5): T = {T}, {S} seeds, mean ± 1 s.e."
    )
    return fig


def _markdown(df: pd.DataFrame, floatfmt: str = "{:.4g}") -> str:
    return frame_table(df.reset_index(), float_format=floatfmt, booleans=("yes", "NO"), escape=True)


def write_reproduction(ds: xr.Dataset, out_dir: str | Path) -> dict[str, Path]:
    """Write ``results.nc``, ``summary.csv``, ``acceptance.csv``, ``report.md``,
    ``figure5.png`` (both rows) and ``acceptance.json`` into ``out_dir`` (atomically)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tab = summary_table(ds)
    acc = acceptance(ds)
    paths = {"data": write_dataset(ds, out / "results.nc")}
    paths["summary"] = atomic_write(out / "summary.csv", lambda p: tab.to_csv(p))
    paths["acceptance"] = atomic_write(out / "acceptance.csv", lambda p: acc.to_csv(p))
    paths["acceptance_json"] = write_json(
        out / "acceptance.json",
        {
            "all_ok": bool(acc["ok"].all()),
            "criteria": acc.reset_index().to_dict(orient="records"),
            "config": {k: v for k, v in ds.attrs.items() if k != "policies"},
        },
    )
    fig = plot_figure5(ds)
    paths["figure"] = atomic_write(
        out / "figure5.png", lambda p: fig.savefig(p, format="png", dpi=110)
    )
    T, S = ds.sizes["episode"], ds.sizes["seed"]
    report = [
        "# Multi-user cascading bandits: reproduction of Park & Jia (2025), Figure 5",
        "",
        f"{ds.attrs.get('description', '')}; T = {T} episodes, {S} seeds, "
        f"N in {[int(n) for n in ds['n_users'].values]}, scale {ds.attrs.get('scale', '?')}.",
        "",
        f"Acceptance (spec §6.5): {'all criteria hold' if acc['ok'].all() else 'SOME FAIL'}.",
        "",
        _markdown(acc),
        "",
        "## Regret",
        "",
        "R(T): cumulative pseudo-regret over all users (mean, s.e. over seeds); tail: mean "
        f"regret per user-episode over the last {_tail_window(T)} episodes.",
        "",
        _markdown(tab),
        "",
        "![Figure 5](figure5.png)",
        "",
    ]
    text = "\n".join(report)
    paths["report"] = atomic_write(
        out / "report.md", lambda p: p.write_text(text, encoding="utf-8")
    )
    return paths


# ---------------------------------------------------------------------- the named experiment
def _cells(p: Mapping[str, Any]) -> list[Cell]:
    return seed_cells(p, [(f"N-{n}", {"n_users": n}) for n in sorted(p["n_users"])])


def _run_cell(p: Mapping[str, Any], spec: Mapping[str, Any], deps: Any) -> xr.Dataset:
    env = CascadeEnv.preset("mccb-repro", n_users=spec["n_users"])
    return simulate_cascade(
        make_policies(env, p["n_episodes"], p["policies"]),
        env,
        p["n_episodes"],
        spec["n_seeds"],
        seed=p["seed"],
        first_seed=spec["first_seed"],
    )


def _write(
    p: Mapping[str, Any], results: Mapping[str, xr.Dataset], out: Path, annotate: Annotate
) -> tuple[dict[str, Path], list[str]]:
    per_n = {
        int(prefix.split("-")[1]): concat_cells(parts, "seed")
        for prefix, parts in group_cells(results).items()
    }
    ds = annotate(combine_n_users(per_n, "experiment"))
    files = write_reproduction(ds, out)
    tab = summary_table(ds)
    lines = ["### Final cumulative regret R(T) (mean over seeds)", "", _markdown(tab), ""]
    lines += ["![Figure 5](figure5.png)", ""]
    return files, lines


#: ``cascade``: Figure 5, one cell per number of users N and window of seeds
EXPERIMENT = define_experiment(
    "cascade",
    params=(
        Param("n_users", "int", "Numbers of users N (one panel each).", many=True, minimum=1),
        Param("n_episodes", "int", "Episodes T.", minimum=2),
        Param(
            "policies",
            "str",
            "Policies compared.",
            many=True,
            choices=(*REPRODUCTION_POLICIES, *_OPTIONAL_POLICIES),
        ),
        SEED,
    ),
    cells=_cells,
    run_cell=_run_cell,
    write=_write,
)
