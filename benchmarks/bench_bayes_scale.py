"""How fitting a prior scales with the number of instances N (issue "Fit priors at real size").

A synthetic hierarchical log with K = 5 arms, d = 3 features (an intercept and two standard
normal features) and about ``rows_per_cell`` rows per (instance, arm): β_{k0} ~ N(0, I),
β_{k,j} ~ N(β_{k0}, Σ_k) with Σ_k = 0.5 I + 0.1, noise sd 1. For each N it prints:

* the time of ``read_log`` on the DataFrame, then of ``fit_prior(log, method="eb")`` and
  ``fit_prior(log, method="ml")`` (the first fit of the process: loading the compiled kernels
  included);
* the cost of one gradient of the collapsed model's log density (median of repeated calls
  after the first): JAX-compiled for each way of writing its algebra in PyMC (``"batched"``,
  ``"soa"``), and the package's compiled kernel (``bayes.compiled``, one thread, value and
  gradient), and the same per instance, to show how the cost grows with N;
* with ``--mcmc N1,N2``, the wall time of the default full-Bayes fit at those N (2 chains ×
  1,000 draws after 400 tuning steps), with its smallest bulk and tail ESS over Σ and σ, max
  R-hat, divergences and steps per draw, and where the wall time went: sampling (compilation
  included), the exact conditional draws of the coefficients and the pointwise
  log-likelihood; ``--drivers kernel,pymc`` runs each listed route (``driver=``) in turn
  (default: the fit's own, ``kernel``);
* with ``--uncollapsed N``, the same for PyMC's default on the plain (uncollapsed) model at that
  N, the yardstick of the collapsed model's speed-up;
* with ``--statsmodels N``, type-II ML against statsmodels ``MixedLM(reml=False)`` (random
  effects on every feature) on one arm of the log with N instances and ``--sm-rows`` rows per
  instance: both times, their ratio, and how far apart the two answers are.

The physical floor of one gradient: K·N cells of d×d algebra (a Cholesky factorisation and a
few triangular solves, forward and backward), a few hundred flops each, i.e. about
``N · K · 2,000`` flops, well under a millisecond at N = 1,000 on one core.

Run: ``.venv/bin/python benchmarks/bench_bayes_scale.py [--n 100,1000,10000]
[--rows-per-cell 10] [--mcmc 100,1000,10000] [--drivers kernel,pymc] [--uncollapsed 100]
[--statsmodels 10000] [--sm-rows 50]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

K, D = 5, 3


def synthetic_frame(n: int, rows_per_cell: int, seed: int = 0) -> pd.DataFrame:
    """A hierarchical log with ``n`` instances, K arms and about ``rows_per_cell`` rows per cell."""
    g = np.random.default_rng(seed)
    rows = n * K * rows_per_cell
    beta0 = g.normal(size=(K, D))
    Sigma = 0.5 * np.eye(D) + 0.1
    L = np.linalg.cholesky(Sigma)
    beta = beta0[:, None, :] + g.normal(size=(K, n, D)) @ L.T
    inst = g.integers(0, n, rows)
    arm = g.integers(0, K, rows)
    X = np.column_stack([np.ones(rows), g.normal(size=(rows, D - 1))])
    y = np.einsum("rd,rd->r", X, beta[arm, inst]) + g.normal(size=rows)
    df = pd.DataFrame({"instance": inst, "arm": arm, "reward": y})
    for i in range(D):  # x0 is the intercept column: d = D features
        df[f"x{i}"] = X[:, i]
    return df


def gradient_cost(log, algebra: str, repeats: int = 50) -> float:
    """Median seconds of one compiled gradient of the collapsed log density."""
    import jax
    from pymc.sampling.jax import get_jaxified_logp

    from hierbandit.bayes.models import collapsed_model

    model = collapsed_model(log, algebra=algebra)
    logp = get_jaxified_logp(model)
    grad = jax.jit(jax.grad(lambda *x: logp(list(x)), argnums=tuple(range(len(model.value_vars)))))
    point = model.initial_point()
    x = [jax.numpy.asarray(point[v.name]) for v in model.value_vars]
    jax.block_until_ready(grad(*x))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(grad(*x))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def kernel_cost(log, repeats: int = 50) -> float:
    """Median seconds of one call of the compiled kernel (log density and gradient)."""
    from hierbandit.bayes import compiled
    from hierbandit.bayes.models import collapsed_model

    model = collapsed_model(log)
    buf = compiled.kernel_data(model)
    x = 0.1 * np.random.default_rng(0).normal(size=int(buf[compiled._H_NDIM]))
    grad = np.empty_like(x)
    compiled.logp_and_grad(x, buf, grad)  # compile or load
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        compiled.logp_and_grad(x, buf, grad)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="100,1000,10000")
    parser.add_argument("--rows-per-cell", type=int, default=10)
    parser.add_argument("--mcmc", default="", help="N values at which to run the full-Bayes fit")
    parser.add_argument("--drivers", default="kernel", help="routes of the full-Bayes fit")
    parser.add_argument("--uncollapsed", default="", help="N values for the uncollapsed model")
    parser.add_argument("--statsmodels", default="", help="N values for ML vs MixedLM")
    parser.add_argument("--sm-rows", type=int, default=50, help="rows per instance (MixedLM)")
    args = parser.parse_args()
    from hierbandit._numba_cache import configure_numba_cache
    from hierbandit.bayes import fit_prior
    from hierbandit.bayes._devices import configure_jax_once
    from hierbandit.data import read_log

    configure_numba_cache()  # as the command does: compiled kernels keyed by their sources
    configure_jax_once()
    rows = []
    for n in _sizes(args.n):
        df = synthetic_frame(n, args.rows_per_cell)
        t0 = time.perf_counter()
        log = read_log(df)
        row = {"N": n, "rows": len(df), "read_log s": time.perf_counter() - t0}
        for method in ("eb", "ml"):
            t0 = time.perf_counter()
            fit_prior(log, method=method)
            row[f"{method} s"] = time.perf_counter() - t0
        for algebra in ("batched", "soa"):
            cost = gradient_cost(log, algebra)
            row[f"grad {algebra} ms"] = 1e3 * cost
            row[f"grad {algebra} µs/instance"] = 1e6 * cost / n
        cost = kernel_cost(log)
        row["grad kernel ms"] = 1e3 * cost
        row["grad kernel µs/instance"] = 1e6 * cost / n
        rows.append(row)
        print(pd.DataFrame([row]).to_string(index=False, float_format="%.3g"), flush=True)
    if rows:
        print()
        print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"))
    for n in _sizes(args.mcmc):
        log = read_log(synthetic_frame(n, args.rows_per_cell))
        for driver in [v for v in args.drivers.split(",") if v]:
            _mcmc(log, f"mcmc N={n} driver={driver}", {"driver": driver})
    for n in _sizes(args.uncollapsed):
        log = read_log(synthetic_frame(n, args.rows_per_cell))
        _mcmc(log, f"uncollapsed (PyMC default route) N={n}", {"collapsed": False})
    for n in _sizes(args.statsmodels):
        versus_statsmodels(n, args.sm_rows)


def _sizes(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def _mcmc(log, label: str, options: dict) -> None:
    """Time a default full-Bayes fit, where its time went, and its diagnostics of Σ and σ."""
    from hierbandit.bayes import diagnose, fit_prior, models, sampling

    spent: dict[str, float] = {}

    def timed(module, name, key):
        inner = getattr(module, name)

        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[key] = time.perf_counter() - t0

        return inner, run

    # fit_prior imports these from their modules at call time
    patched = [
        (sampling, "sample", "sampling"),
        (models, "add_conditional_draws", "exact draws"),
        (models, "add_model_checks", "log-likelihood"),
    ]
    originals = []
    for module, name, key in patched:
        inner, run = timed(module, name, key)
        originals.append((module, name, inner))
        setattr(module, name, run)
    try:
        t0 = time.perf_counter()
        prior = fit_prior(log, method="mcmc", progressbar=False, **options)
        wall = time.perf_counter() - t0
    finally:
        for module, name, inner in originals:
            setattr(module, name, inner)
    diag = diagnose(prior, var_names=["Sigma", "sigma"], warn=False)
    steps = float(prior.idata.sample_stats["n_steps"].mean())
    parts = ", ".join(f"{v:.1f} s {k}" for k, v in spent.items())
    print(
        f"{label}: {wall:.1f} s ({parts}; compile included), min bulk ESS "
        f"{diag.min_ess_bulk:.0f}, min tail ESS {diag.min_ess_tail:.0f}, max R-hat "
        f"{diag.max_rhat:.3f}, {diag.divergences} divergences, {steps:.2f} steps per draw",
        flush=True,
    )


def versus_statsmodels(n: int, rows_per_instance: int) -> None:
    """Type-II ML of one arm against statsmodels' linear mixed model on the same rows."""
    import warnings

    import statsmodels.api as sm

    from hierbandit.bayes import fit_prior
    from hierbandit.data import read_log

    df = synthetic_frame(n, rows_per_instance, seed=1)
    one = df[df["arm"] == 0].drop(columns="arm").reset_index(drop=True)
    times = []
    for _ in range(2):  # the first fit of the process also loads the compiled kernels
        t0 = time.perf_counter()
        ours = fit_prior(one, arm=None, method="ml")
        times.append(time.perf_counter() - t0)
    t_first, t_ours = times
    log = read_log(one, arm=None)
    X, y, groups = np.asarray(log.X), np.asarray(log.y), np.asarray(log.instance)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = sm.MixedLM(y, X, groups=groups, exog_re=X).fit(reml=False, method="lbfgs")
    t_sm = time.perf_counter() - t0
    Sigma = ours.Sigma[0]
    diffs = {
        "Sigma": np.max(np.abs(Sigma - np.asarray(theirs.cov_re))) / np.max(np.abs(Sigma)),
        "sigma2": abs(float(ours.sigma2[0]) - float(theirs.scale)) / float(theirs.scale),
        "beta0": np.max(np.abs(ours.shared_mean[0] - np.asarray(theirs.fe_params))),
    }
    print(
        f"ML vs statsmodels MixedLM(reml=False), N={n}, {len(one):,} rows, d={D}: hierbandit "
        f"{t_ours:.2f} s (fit_prior from the DataFrame; {t_first:.2f} s as the first fit of the "
        f"process), statsmodels {t_sm:.1f} s (converged={theirs.converged}), ratio "
        f"{t_sm / t_ours:.1f}x ({t_sm / t_first:.1f}x for the first fit); relative difference "
        f"Sigma {diffs['Sigma']:.1e}, sigma2 {diffs['sigma2']:.1e}, max |beta0 diff| "
        f"{diffs['beta0']:.1e}; loglik hierbandit {float(ours.dataset['loglik'].values[0]):.3f}, "
        f"statsmodels {theirs.llf:.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
