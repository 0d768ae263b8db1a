"""Run policies against an environment over many seeds, with common random numbers.

Seeding
-------
``simulate(..., seed=s0, n_seeds=S)`` derives every random stream from
``numpy.random.SeedSequence(s0)``:

* seed ``s`` (``0 <= s < S``) uses the ``s``-th child ``root.spawn(S)[s]``;
* that child spawns three streams, in this order: **environment parameters** (used only when
  ``redraw_env=True``), the **rollout** (arrivals, contexts, noise table) and a **policy root**;
* the policy root spawns one stream per policy, **by the policy's position** in the ``policies``
  mapping (its iteration order). Policy ``i`` of seed ``s`` therefore gets the stream with spawn
  key ``(s, 2, i)``: appending a policy leaves the earlier policies' results unchanged, while
  reordering the mapping changes which stream each policy gets.

The rollout stream does not depend on the policies, so every policy of a seed faces the same
arrivals, contexts and noise (common random numbers; ``docs/maths/simulation.md`` shows how the
streams stay identical in the compiled loop), and the same action at the same round pays the
same reward. Rerunning with the same arguments reproduces the results bit for bit.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from hierbandit._validation import check_bool, check_choice, check_index, check_positive_int
from hierbandit.ebm.base import Policy
from hierbandit.experiments._config import check_seed, config_json, resolve_factories, seed_children
from hierbandit.experiments.progress import progress_task

__all__ = ["cumulative_regret", "regret_table", "simulate"]

PolicyFactory = Callable[[np.random.Generator], Policy]


# ---------------------------------------------------------------------- helpers
def _resolve_policies(policies: Any) -> list[tuple[str, PolicyFactory]]:
    return resolve_factories(policies, Policy)


def _make_policy(factory: PolicyFactory, name: str, rng: np.random.Generator, env: Any) -> Policy:
    policy = factory(rng)
    if not isinstance(policy, Policy):
        raise TypeError(f"policies[{name!r}] must produce a Policy, got {type(policy).__name__}")
    for attr in ("n_instances", "n_arms", "n_features"):
        if getattr(policy, attr) != getattr(env, attr):
            raise ValueError(
                f"policies[{name!r}] has {attr}={getattr(policy, attr)} but the environment has "
                f"{attr}={getattr(env, attr)}"
            )
    return policy


def _check_env(env: Any) -> None:
    missing = [
        a
        for a in ("n_instances", "n_arms", "n_features", "rollout", "clone")
        if not hasattr(env, a)
    ]
    if missing:
        raise TypeError(
            f"env must be an environment (e.g. HierarchicalLinearEnv); it lacks {missing}"
        )


def _run_policy(
    policy: Policy,
    instances: list[int],
    rows: list[np.ndarray],
    rewards: list[list[float]],
) -> np.ndarray:
    """The hot loop: unchecked select/update, returns the pulled arms."""
    select = policy._select
    update = policy._update
    arms = [0] * len(instances)
    for t, (j, x, y) in enumerate(zip(instances, rows, rewards, strict=True)):
        k = select(j, x)
        update(j, x, k, y[k])
        arms[t] = k
    return np.asarray(arms, dtype=np.int64)


def _run_policy_oracle(
    policy: Policy,
    instances: list[int],
    rows: list[np.ndarray],
    rewards: list[list[float]],
    beta_nkd: np.ndarray,
    probs: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The loop with the Appendix F counterfactual actions; returns arms and ``p_j r_{j,t}``."""
    select = policy._select
    update = policy._update
    pure = bool(getattr(policy, "_select_is_pure", False))
    T, N = len(instances), beta_nkd.shape[0]
    arms = [0] * T
    out = np.empty((T, N))
    for t, (j, x, y) in enumerate(zip(instances, rows, rewards, strict=True)):
        probe = policy if pure else copy.deepcopy(policy)
        k = select(j, x)
        # same elementwise arithmetic as the rollout's mean_reward, so r_{Z_t} is bit-equal
        mu = (beta_nkd * x).sum(axis=-1)  # (N, K)
        best = mu.max(axis=1)
        acts = [k if i == j else probe._select(i, x) for i in range(N)]
        out[t] = probs * (best - mu[np.arange(N), acts])
        update(j, x, k, y[k])
        arms[t] = k
    return np.asarray(arms, dtype=np.int64), out


class _Batched:
    """The ``vectorize`` dispatch of :func:`simulate`: collects the runs of supported policies
    and executes them, many seeds at once, with the compiled loop of
    :mod:`hierbandit.ebm.compiled`."""

    #: pending rollout data (bytes) that triggers a flush
    max_bytes = 1 << 28

    def __init__(self, vectorize: bool | str, oracle_regret: bool, n_instances: int, T: int):
        self.enabled = vectorize is True or (vectorize == "auto" and not oracle_regret)
        self.strict = vectorize is True
        self.N = n_instances
        self.T = T
        self.jobs: list[tuple[Any, ...]] = []
        self.bytes = 0

    def accepts(self, policy: Policy, name: str) -> bool:
        if not self.enabled:
            return False
        from hierbandit.ebm.compiled import batched_unsupported

        why = batched_unsupported(policy)
        if why is not None and self.strict:
            raise TypeError(f"vectorize=True: policies[{name!r}]: {why}")
        return why is None

    def add(self, i: int, s: int, policy: Policy, instance: Any, context: Any, rest: tuple) -> None:
        from hierbandit.ebm.compiled import as_input, make_job

        inst = as_input(instance, np.int64)
        if inst.shape != (self.T,) or inst.min() < 0 or inst.max() >= self.N:
            raise ValueError(f"env.rollout returned instances outside [0, {self.N})")
        X = as_input(context, float)
        R = as_input(rest[2], float)
        if X.shape != (self.T, policy.n_features) or R.shape != (self.T, policy.n_arms):
            raise ValueError(
                f"env.rollout returned contexts {X.shape} and rewards {R.shape}; expected "
                f"{(self.T, policy.n_features)} and {(self.T, policy.n_arms)}"
            )
        arms = np.empty(self.T, dtype=np.int64)
        self.jobs.append((make_job(policy, inst, X, R, arms), i, s, arms, rest, policy))
        self.bytes += X.nbytes + 2 * R.nbytes + 24 * self.T

    def full(self) -> bool:
        from hierbandit.ebm.compiled import default_threads

        return self.bytes >= self.max_bytes and len(self.jobs) >= default_threads()

    def flush(self, finish: Callable[..., None]) -> None:
        if not self.jobs:
            return
        from hierbandit.ebm.compiled import default_threads, run_jobs

        jobs, self.jobs, self.bytes = self.jobs, [], 0
        run_jobs([job[0] for job in jobs], default_threads(), [job[5] for job in jobs])
        for _, i, s, arms, (name, mean, table, best), _ in jobs:
            finish(i, s, name, arms, mean, table, best)


# ---------------------------------------------------------------------- simulate
def simulate(
    policies: Mapping[str, Policy | PolicyFactory],
    env: Any,
    horizon: int,
    n_seeds: int,
    *,
    seed: int = 0,
    redraw_env: bool = True,
    oracle_regret: bool = False,
    first_seed: int = 0,
    vectorize: bool | str = "auto",
) -> xr.Dataset:
    """Run every policy on the same per-seed environment and random numbers.

    Parameters
    ----------
    policies
        Mapping name → :class:`~hierbandit.ebm.Policy` (cloned per seed with
        ``policy.clone(rng=...)``; the instance itself is never trained) or name →
        ``callable(rng)`` returning a fresh policy. Names become the ``policy`` coordinate.
    env
        Environment, e.g. :class:`~hierbandit.ebm.HierarchicalLinearEnv`: anything with
        ``n_instances``, ``n_arms``, ``n_features``, ``clone(rng)`` and ``rollout(horizon, rng)``
        (and ``beta``, ``arrival_probs`` for ``oracle_regret``).
    horizon
        Rounds per run ``T``.
    n_seeds
        Number of independent replications.
    seed
        Root seed (non-negative int); see the module docstring for how streams derive from it.
    redraw_env
        Draw fresh environment parameters per seed with ``env.clone(rng)`` (the ebm protocol).
        ``False`` reuses ``env``'s parameters for every seed.
    oracle_regret
        Also record the ebm paper's Appendix F "oracle-policy" regret: at each round, before
        updating, the action the policy would take for every instance ``j`` at
        the same context ``x_t``, weighted by ``p_j``. The realised instance uses the action
        actually taken; the others are evaluated on the policy itself when its class sets
        ``_select_is_pure = True`` (``_select`` changes no state, not even an RNG), and
        otherwise on one ``copy.deepcopy`` of the policy made per round, so the main trajectory
        is unchanged (a copied RNG continues the policy's stream state at that round). This
        costs ``N - 1`` extra selections and a deep copy per round.
    first_seed
        Run replications ``first_seed … first_seed + n_seeds − 1`` of the root seed (the
        ``seed`` coordinate holds these indices). Each replication is the same whatever window
        it is run in, so a sweep can be split into independent parts.
    vectorize : {"auto", True, False}, default "auto"
        Run the horizon of each policy in a compiled loop, many seeds at once on
        ``numba.get_num_threads()`` threads (:mod:`hierbandit.ebm.compiled`).
        ``"auto"`` does so for every policy :func:`~hierbandit.ebm.batched_unsupported`
        accepts (EbmTS, EbmUCB, LinUCB, LinTS) and runs the others in the Python loop; ``True``
        raises ``TypeError`` for any other policy; ``False`` always uses the Python loop. The
        Dataset is bit-for-bit the same either way. ``oracle_regret`` needs the Python loop
        (``"auto"`` uses it; ``True`` raises ``ValueError``).

    Returns
    -------
    xarray.Dataset
        Dimensions ``policy``, ``seed``, ``step`` (coordinate ``1..T``), and ``arm_``,
        ``instance_``, ``feature`` (trailing underscores because the variables ``arm`` and
        ``instance`` hold the pulled arm and the arriving instance):

        * ``regret`` (policy, seed, step): per-round pseudo-regret
          ``x_tᵀβ_{π*_t,Z_t} − x_tᵀβ_{π_t,Z_t}``;
        * ``arm`` (policy, seed, step): arm pulled; ``reward`` (policy, seed, step): reward
          observed (mean plus the shared noise table);
        * ``instance`` (seed, step): arriving instance; ``optimal_arm`` (seed, step);
        * ``beta`` ``(seed, arm_, instance_, feature)``: the environment's coefficients per seed;
        * with ``oracle_regret``: ``oracle_regret`` ``(policy, seed, step, instance_)`` holding
          ``p_j r_{j,t}``; summing over ``instance_`` gives the Appendix F per-round regret.

        ``attrs`` record the configuration: ``env`` and ``policies`` (JSON strings of the
        classes and ``get_params()``), ``horizon``, ``n_seeds``, ``seed``, ``redraw_env`` and
        ``oracle_regret`` (0/1), and ``hierbandit_version``.

    Notes
    -----
    The loop calls the unchecked ``policy._select(j, x)`` and ``policy._update(j, x, k, y)``;
    each policy gets its own writable copy of the context rows.
    """
    from hierbandit import __version__

    factories = _resolve_policies(policies)
    _check_env(env)
    T = check_positive_int(horizon, "horizon")
    S = check_positive_int(n_seeds, "n_seeds")
    seed = check_seed(seed)
    first_seed = check_seed(first_seed, "first_seed")
    redraw_env = check_bool(redraw_env, "redraw_env")
    oracle_regret = check_bool(oracle_regret, "oracle_regret")
    if isinstance(vectorize, bool | np.bool_):
        vectorize = bool(vectorize)
    elif not (isinstance(vectorize, str) and vectorize == "auto"):
        raise ValueError(f"vectorize must be 'auto', True or False, got {vectorize!r}")
    if vectorize is True and oracle_regret:
        raise ValueError(
            "vectorize=True cannot record oracle_regret (it needs the Python loop); "
            "use vectorize='auto' or False"
        )
    if oracle_regret and not (hasattr(env, "beta") and hasattr(env, "arrival_probs")):
        raise TypeError("oracle_regret=True needs an env with `beta` and `arrival_probs`")

    P = len(factories)
    N, K, d = env.n_instances, env.n_arms, env.n_features
    regret = np.empty((P, S, T))
    arm = np.empty((P, S, T), dtype=np.int32)
    reward = np.empty((P, S, T))
    instance = np.empty((S, T), dtype=np.int32)
    optimal = np.empty((S, T), dtype=np.int32)
    betas = np.empty((S, K, N, d))
    oracle = np.empty((P, S, T, N)) if oracle_regret else None
    policy_config: dict[str, str] = {}
    steps = np.arange(T)
    batched = _Batched(vectorize, oracle_regret, N, T)

    def finish(i, s, name, arms, mean, table, best) -> None:
        if arms.size and (arms.min() < 0 or arms.max() >= K):
            raise ValueError(
                f"policies[{name!r}] selected an arm outside [0, {K}) "
                f"(got {arms.min()}..{arms.max()})"
            )
        arm[i, s] = arms
        regret[i, s] = best - mean[steps, arms]
        reward[i, s] = table[steps, arms]
        task.advance()

    # progress over (seed × policy), reported as log records (hierbandit.experiments.progress)
    with progress_task("simulate", total=S * P) as task:
        for s, seed_seq in enumerate(seed_children(seed, first_seed, S)):
            env_ss, rollout_ss, policy_root = seed_seq.spawn(3)
            env_s = env.clone(rng=np.random.default_rng(env_ss)) if redraw_env else env
            for attr in ("n_instances", "n_arms", "n_features"):
                if getattr(env_s, attr) != getattr(env, attr):
                    raise ValueError(f"env.clone changed {attr}")
            roll = env_s.rollout(T, rng=np.random.default_rng(rollout_ss))
            mean = np.asarray(roll.mean_reward, dtype=float)
            table = mean + np.asarray(roll.noise, dtype=float)
            opt = mean.argmax(axis=1)
            best = mean[steps, opt]
            instance[s] = roll.instance
            optimal[s] = opt
            if hasattr(env_s, "beta"):
                betas[s] = env_s.beta
            else:
                betas[s] = np.nan
            inst_list = np.asarray(roll.instance).tolist()
            reward_rows = table.tolist()
            context = np.asarray(roll.context, dtype=float)
            if oracle_regret:
                beta_nkd = np.ascontiguousarray(np.swapaxes(env_s.beta, 0, 1))
                probs = np.asarray(env_s.arrival_probs, dtype=float)
            for i, (ps, (name, factory)) in enumerate(
                zip(policy_root.spawn(P), factories, strict=True)
            ):
                policy = _make_policy(factory, name, np.random.default_rng(ps), env)
                if s == 0:
                    policy_config[name] = config_json(policy)
                if batched.accepts(policy, name):
                    batched.add(i, s, policy, roll.instance, context, (name, mean, table, best))
                    if batched.full():
                        batched.flush(finish)
                    continue
                rows = list(context.copy())
                if oracle_regret:
                    arms, o = _run_policy_oracle(
                        policy, inst_list, rows, reward_rows, beta_nkd, probs
                    )
                    oracle[i, s] = o
                else:
                    arms = _run_policy(policy, inst_list, rows, reward_rows)
                finish(i, s, name, arms, mean, table, best)
        batched.flush(finish)

    names = [name for name, _ in factories]
    data: dict[str, Any] = {
        "regret": (("policy", "seed", "step"), regret),
        "arm": (("policy", "seed", "step"), arm),
        "reward": (("policy", "seed", "step"), reward),
        "instance": (("seed", "step"), instance),
        "optimal_arm": (("seed", "step"), optimal),
        "beta": (("seed", "arm_", "instance_", "feature"), betas),
    }
    if oracle is not None:
        data["oracle_regret"] = (("policy", "seed", "step", "instance_"), oracle)
    ds = xr.Dataset(
        data,
        coords={
            "policy": np.array(names, dtype=object),
            "seed": np.arange(first_seed, first_seed + S),
            "step": np.arange(1, T + 1),
            "arm_": np.arange(K),
            "instance_": np.arange(N),
            "feature": np.arange(d),
        },
        attrs={
            "env": config_json(env, per_seed_rng=redraw_env),
            "policies": json.dumps({k: json.loads(v) for k, v in policy_config.items()}),
            "horizon": T,
            "n_seeds": S,
            "seed": seed,
            "first_seed": first_seed,
            "redraw_env": int(redraw_env),
            "oracle_regret": int(oracle_regret),
            "n_instances": N,
            "n_arms": K,
            "n_features": d,
            "hierbandit_version": __version__,
        },
    )
    ds["regret"].attrs["long_name"] = "per-round pseudo-regret"
    ds["step"].attrs["long_name"] = "round t"
    return ds


# ---------------------------------------------------------------------- summaries
def _check_dataset(ds: Any) -> xr.Dataset:
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"ds must be an xarray.Dataset from simulate(), got {type(ds).__name__}")
    return ds


def _check_instance(ds: xr.Dataset, instance: Any) -> int | None:
    if instance is None:
        return None
    if "instance_" in ds.dims:
        n = ds.sizes["instance_"]
    elif "n_instances" in ds.attrs:
        n = int(ds.attrs["n_instances"])
    else:
        n = int(ds["instance"].max()) + 1 if "instance" in ds else 1
    return check_index(instance, n, "instance")


def cumulative_regret(
    ds: xr.Dataset, instance: int | None = None, *, kind: str = "pseudo"
) -> xr.DataArray:
    """Cumulative regret over rounds, overall or for one instance.

    Parameters
    ----------
    ds
        Output of :func:`simulate`.
    instance
        ``None`` for the overall regret ``R_t``; an instance id for the instance-specific
        regret ``R_{j,t}`` (only rounds where ``j`` arrived count, for ``kind="pseudo"``).
    kind
        ``"pseudo"`` (default, the realised per-round pseudo-regret ``regret``) or
        ``"oracle"`` (the Appendix F oracle-policy regret, needs ``oracle_regret=True``).

    Returns
    -------
    xarray.DataArray
        Dimensions (policy, seed, step).
    """
    ds = _check_dataset(ds)
    kind = check_choice(kind, ("pseudo", "oracle"), "kind")
    j = _check_instance(ds, instance)
    if kind == "pseudo":
        if "regret" not in ds:
            raise ValueError("ds has no 'regret' variable; is it the output of simulate()?")
        r = ds["regret"]
        if j is not None:
            r = r.where(ds["instance"] == j, 0.0)
    else:
        if "oracle_regret" not in ds:
            raise ValueError("kind='oracle' needs a Dataset from simulate(..., oracle_regret=True)")
        r = ds["oracle_regret"]
        r = r.sum("instance_") if j is None else r.isel(instance_=j, drop=True)
    out = r.cumsum("step")
    out.name = "cumulative_regret"
    out.attrs = {"instance": "all" if j is None else j, "kind": kind}
    return out


def regret_table(
    ds: xr.Dataset, instance: int | None = None, *, kind: str = "pseudo"
) -> pd.DataFrame:
    """Final cumulative regret per policy: mean over seeds, its standard error, and median.

    Parameters
    ----------
    ds
        Output of :func:`simulate`.
    instance, kind
        As in :func:`cumulative_regret`.

    Returns
    -------
    pandas.DataFrame
        Indexed by policy, with columns ``mean``, ``se`` (sample standard deviation over seeds
        with divisor ``S − 1``, divided by ``√S``; NaN for one seed) and ``median``.
    """
    final = cumulative_regret(ds, instance, kind=kind).isel(step=-1)
    S = final.sizes["seed"]
    mean = final.mean("seed")
    se = final.std("seed", ddof=1) / np.sqrt(S) if S > 1 else xr.full_like(mean, np.nan)
    median = final.median("seed")
    df = pd.DataFrame(
        {"mean": mean.values, "se": se.values, "median": median.values},
        index=pd.Index([str(p) for p in final["policy"].values], name="policy"),
    )
    return df
