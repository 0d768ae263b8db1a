"""Online type-II ML hyperparameters against the paper's empirical Bayes in EbmTS/EbmUCB.

``hyper_method="ml"`` re-estimates an arm's (Σ̂, σ̂²) by a few warm-started Fisher-scoring
steps on its collapsed likelihood (docs/maths/ebm.md §7.5); ``"eb"`` (the default) by the
paper's moments (§7). Three sections:

1. ``cost``: the time of one re-estimation of one arm, EB and ML, on the same statistics (d = 3,
   N = 10 … 10,000 instances with data; d = 10 at N = 100; d + 2 rows per instance), median of
   repeated calls. ML is warm-started from the optimum of the statistics less one row (the
   situation after a pull), and, for comparison, started from (I, 1) with 3 steps.
2. ``regret``: final cumulative regret with each method on the same environments and random
   numbers (``hierbandit.experiments.simulate``): the paper's Figure 1 (N = 10, K = 5, d = 3,
   balanced and data-poor arrivals) and Figure 2 (sparse heterogeneity) with the default
   schedule (which is the paper's every pull at N = 10), the balanced setting at N = 100 (where
   the default schedule re-estimates every N / 10 pulls of an arm), and the quickstart's
   MovieLens environment (``env_from_prior`` of the full-Bayes prior fitted to the quickstart's
   log, the log's users and rows, arrival frequencies of the log), cold and warm-started from
   that prior (``prior_mode="init"``). Printed: the mean of each, the paired difference
   ML − EB with a 95 % interval over seeds, and the seeds where ML has the lower and the
   higher regret, the extreme paired differences and the mean difference without the seed
   where ML does worst, and for that seed the smallest eigenvalue of each arm's final Σ̂.
3. the same runs' final estimates against the environment's truth: per (seed, arm), the
   relative error ‖Σ̂ − Σ‖_F/‖Σ‖_F and σ̂²/σ², medians (and quartiles) over seeds and arms.
   Σ is the environment's population covariance of the coefficients (for Figure 2 the
   population covariance (s/d)I of the sparse deviations; for MovieLens the prior's Σ_k).

Run: ``.venv/bin/python benchmarks/online_ml.py [--seeds 30] [--horizon 5000]
[--sections cost,regret] [--settings fig1-balanced,fig1-data-poor,fig2-sparse,fig1-balanced-N100,movielens]
[--threads 2] [--movielens-prior mcmc|ml]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from hierbandit.ebm import EbmTS, EbmUCB, HierarchicalLinearEnv
from hierbandit.experiments import simulate
from hierbandit.stats import EBOptions
from hierbandit.stats import kernels as K
from hierbandit.stats.hierarchical import shared_prior_arrays
from hierbandit.stats.online_ml import ML_TOL, reestimate_arm_ml

METHODS = ("eb", "ml")


# ----------------------------------------------------------------------------------- cost
def _stats(rng: np.random.Generator, N: int, d: int, rows: int = 5):
    G = np.zeros((N, d, d))
    b = np.zeros((N, d))
    q = np.zeros(N)
    n = np.full(N, rows, dtype=np.int64)
    A = rng.normal(size=(d, d))
    Sigma = A @ A.T / d + 0.3 * np.eye(d)
    beta = rng.multivariate_normal(rng.normal(size=d), Sigma, size=N)
    for j in range(N):
        X = rng.normal(size=(rows, d))
        y = X @ beta[j] + rng.normal(size=rows)
        G[j], b[j], q[j] = X.T @ X, X.T @ y, y @ y
    return G, b, q, n


def _time(fn, repeat: int) -> float:
    fn()  # compile / warm
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _ml_args(opts: EBOptions) -> tuple:
    return (opts.eig_floor, opts.sigma2_floor, opts.min_instances_for_sigma, opts.rank_tol)


def _cost_row(rng: np.random.Generator, d: int, N: int, opts: EBOptions) -> dict:
    """Timings of one re-estimation of one arm with N instances of d + 2 rows each."""
    G, b, q, n = _stats(rng, N, d, rows=d + 2)
    P0, h0 = shared_prior_arrays(1e-3, d, None)
    out = [np.empty((d, d)), np.empty((N, d, d)), np.empty((N, d, d))]
    out += [np.empty((d, d)), np.empty(d), np.empty((d, d)), np.empty(d)]
    cv = np.random.default_rng(1)
    ml = _ml_args(opts)

    def eb():
        K.reestimate_arm(
            G, b, q, n, P0, h0, 1.0, np.eye(d), *opts.reestimate_args[:9], cv,
            opts.splits_drawn, *opts.reestimate_args[9:], *out,
        )  # fmt: skip

    def ml_step(stats, Sigma, sigma2):
        tr = np.empty(4)
        return reestimate_arm_ml(
            *stats, P0, h0, sigma2, Sigma, *ml, True, True, 3, ML_TOL, *out, tr
        )

    # ML warm-started from the previous optimum: the re-estimation the policy runs
    S_prev, s2_prev = np.eye(d), 1.0
    for _ in range(20):
        s2_prev = ml_step((G, b, q, n), S_prev, s2_prev)[0]
        S_prev = out[0].copy()
    # one more row, as after a pull: the warm start is one row behind the optimum
    G2, b2, q2, n2 = G.copy(), b.copy(), q.copy(), n.copy()
    x = rng.normal(size=d)
    G2[0] += np.outer(x, x)
    b2[0] += x
    q2[0] += 1.0
    n2[0] += 1
    after = (G2, b2, q2, n2)
    repeat = max(5, min(200, 20_000 // N))
    t_eb = _time(eb, repeat)
    t_ml = _time(lambda: ml_step(after, S_prev, s2_prev), repeat)
    steps = ml_step(after, S_prev, s2_prev)[5]
    t_cold = _time(lambda: ml_step(after, np.eye(d), 1.0), repeat)
    t_post = _time(lambda: K.arm_posterior(G, b, np.eye(d), 1.0, P0, h0, *out[1:]), repeat)
    return {
        "d": d,
        "N": N,
        "EB µs": f"{1e6 * t_eb:.0f}",
        "ML warm µs (steps taken)": f"{1e6 * t_ml:.0f} ({steps})",
        "ML from I, 3 steps µs": f"{1e6 * t_cold:.0f}",
        "ML warm / EB": f"{t_ml / t_eb:.2f}",
        "one posterior µs": f"{1e6 * t_post:.0f}",
    }


def cost() -> None:
    print("## Cost of one re-estimation of one arm (median of repeated calls)\n")
    rng = np.random.default_rng(0)
    opts = EBOptions()
    rows = [_cost_row(rng, d, N, opts) for d, N in ((3, 10), (3, 100), (3, 1000), (3, 10_000))]
    rows.append(_cost_row(rng, 10, 100, opts))
    print(pd.DataFrame(rows).to_markdown(index=False))
    print()


# --------------------------------------------------------------------------------- regret
def _movielens_env(prior_method: str):
    from hierbandit.bayes import fit_prior
    from hierbandit.data import movielens_log, read_log
    from hierbandit.data.movielens import FEATURES
    from hierbandit.ebm.prior_env import env_from_prior

    t0 = time.perf_counter()
    log = read_log(movielens_log(), features=list(FEATURES))  # the quickstart's log
    prior = fit_prior(log, method=prior_method, random_seed=0)
    N = log.n_instances
    arrival = np.bincount(log.instance, minlength=N) / log.n_rows
    env = env_from_prior(prior, N, np.asarray(log.X), rng=0, arrival_probs=arrival)
    print(
        f"(MovieLens: {log.n_rows:,} ratings, {N} users × {log.n_arms} genres, d = "
        f"{log.n_features}; prior by {prior_method!r} fitted in {time.perf_counter() - t0:.0f} s)"
    )
    return env, prior


def _setting(name: str, prior_method: str):
    if name == "movielens":
        return _movielens_env(prior_method)
    N = 100 if name.endswith("N100") else 10
    kw = {"heterogeneity": "sparse", "sparsity": 1} if name == "fig2-sparse" else {}
    arrival = "data-poor" if name == "fig1-data-poor" else "balanced"
    return HierarchicalLinearEnv(N, 5, 3, arrival=arrival, rng=0, **kw), None


def _truth(env, seeds: int, seed: int = 0):
    """Each seed's environment as simulate draws it (the documented seeding: seed s uses the
    first of the three streams of SeedSequence(seed).spawn(S)[s])."""
    out = []
    for child in np.random.SeedSequence(seed).spawn(seeds):
        env_ss = child.spawn(3)[0]
        out.append(env.clone(rng=np.random.default_rng(env_ss)))
    return out


def _eigs(S) -> str:
    return " ".join(f"{np.linalg.eigvalsh(Sk)[0]:.2f}" for Sk in np.asarray(S))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def regret(settings: list[str], seeds: int, horizon: int, prior_method: str) -> None:
    print(f"## Regret and estimates: ML − EB, paired over {seeds} seeds, horizon {horizon:,}\n")
    reg_rows, est_rows, tail_rows = [], [], []
    for name in settings:
        env, prior = _setting(name, prior_method)
        N, Kn, d = env.n_instances, env.n_arms, env.n_features
        variants = [("EbmTS", EbmTS, {}), ("EbmUCB", EbmUCB, {})]
        if prior is not None:
            variants.append(("EbmTS warm", EbmTS, {"prior": prior, "prior_mode": "init"}))
        truth = _truth(env, seeds)
        for label, cls, kw in variants:
            made: dict[str, list] = {m: [] for m in METHODS}

            def factory(method, cls=cls, kw=kw, made=made, shape=(N, Kn, d)):
                def make(rng):
                    p = cls(*shape, rng=rng, hyper_method=method, **kw)
                    made[method].append(p)
                    return p

                return make

            t0 = time.perf_counter()
            ds = simulate({m: factory(m) for m in METHODS}, env, horizon, seeds)
            wall = time.perf_counter() - t0
            final = ds["regret"].sum("step")
            eb, ml = final.sel(policy="eb").values, final.sel(policy="ml").values
            diff = ml - eb
            half = 1.96 * diff.std(ddof=1) / np.sqrt(diff.size)
            reg_rows.append(
                {
                    "setting": name,
                    "policy": label,
                    "EB": f"{eb.mean():.1f} ± {eb.std(ddof=1) / np.sqrt(eb.size):.1f}",
                    "ML": f"{ml.mean():.1f} ± {ml.std(ddof=1) / np.sqrt(ml.size):.1f}",
                    "ML − EB (95 % CI)": (
                        f"{diff.mean():+.1f} [{diff.mean() - half:+.1f}, {diff.mean() + half:+.1f}]"
                    ),
                    "ML lower / higher": f"{int((diff < 0).sum())} / {int((diff > 0).sum())}",
                    "ML − EB min / max (seed)": (
                        f"{diff.min():+.0f} / {diff.max():+.0f} ({int(np.argmax(diff))})"
                    ),
                    "without that seed": f"{np.delete(diff, np.argmax(diff)).mean():+.1f}",
                    "time": f"{wall:.0f} s",
                }
            )
            for s, env_s in enumerate(truth):
                assert np.array_equal(env_s.beta, ds["beta"].values[s]), "seeding mismatch"
            worst = int(np.argmax(diff))
            tail_rows.append(
                {
                    "setting": name,
                    "policy": label,
                    "seed": worst,
                    "smallest eigenvalue of Σ per arm, truth": _eigs(truth[worst].Sigma),
                    "EB": _eigs(made["eb"][worst].Sigma),
                    "ML": _eigs(made["ml"][worst].Sigma),
                }
            )
            for m in METHODS:
                errs, ratios = [], []
                for s, p in enumerate(made[m]):
                    for k in range(Kn):
                        errs.append(_rel(p.Sigma[k], np.asarray(truth[s].Sigma)[k]))
                        ratios.append(float(p.sigma2[k]) / float(truth[s].noise_var[k]))
                e, r = np.array(errs), np.array(ratios)
                est_rows.append(
                    {
                        "setting": name,
                        "policy": label,
                        "method": m,
                        "‖Σ̂ − Σ‖/‖Σ‖ median [IQR]": (
                            f"{np.median(e):.2f} [{np.quantile(e, 0.25):.2f}, "
                            f"{np.quantile(e, 0.75):.2f}]"
                        ),
                        "σ̂²/σ² median [IQR]": (
                            f"{np.median(r):.2f} [{np.quantile(r, 0.25):.2f}, "
                            f"{np.quantile(r, 0.75):.2f}]"
                        ),
                    }
                )
            print(f"{name} {label} done ({wall:.0f} s)", flush=True)
    print()
    print(pd.DataFrame(reg_rows).to_markdown(index=False))
    print("\nThe seed where ML − EB is largest: the final Σ̂'s smallest eigenvalues\n")
    print(pd.DataFrame(tail_rows).to_markdown(index=False))
    print("\nFinal estimates against the truth (per seed and arm):\n")
    print(pd.DataFrame(est_rows).to_markdown(index=False))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--horizon", type=int, default=5000)
    parser.add_argument("--sections", default="cost,regret")
    parser.add_argument(
        "--settings",
        default="fig1-balanced,fig1-data-poor,fig2-sparse,fig1-balanced-N100,movielens",
    )
    parser.add_argument("--movielens-prior", default="mcmc", choices=("mcmc", "ml", "eb"))
    parser.add_argument("--threads", type=int, default=2, help="seeds run at once")
    args = parser.parse_args()
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    sections = args.sections.split(",")
    if "cost" in sections:
        cost()
    if "regret" in sections:
        regret(args.settings.split(","), args.seeds, args.horizon, args.movielens_prior)


if __name__ == "__main__":
    main()
