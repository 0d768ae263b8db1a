"""How fitting a prior scales with the number of instances N (issue "Fit priors at real size").

A synthetic hierarchical log with K = 5 arms, d = 3 features (an intercept and two standard
normal features) and about ``rows_per_cell`` rows per (instance, arm): β_{k0} ~ N(0, I),
β_{k,j} ~ N(β_{k0}, Σ_k) with Σ_k = 0.5 I + 0.1, noise sd 1. For each N it prints:

* the time of ``fit_prior(method="eb")`` and ``fit_prior(method="ml")``;
* the cost of one gradient of the collapsed model's log density (JAX, compiled; median of
  repeated calls after the first) for each way of writing its algebra (``"batched"``, ``"soa"``),
  and the same per instance, to show how the cost grows with N;
* with ``--mcmc N1,N2``, the wall time of the default full-Bayes fit at those N (2 chains ×
  1,000 draws), with its smallest bulk and tail ESS over Σ and σ, max R-hat and divergences.

The physical floor of one gradient: K·N cells of d×d algebra (a Cholesky factorisation and a
few triangular solves, forward and backward), a few hundred flops each, i.e. about
``N · K · 2,000`` flops, well under a millisecond at N = 1,000 on one core.

Run: ``.venv/bin/python benchmarks/bench_bayes_scale.py [--n 100,1000,10000]
[--rows-per-cell 10] [--mcmc 100,1000]``.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="100,1000,10000")
    parser.add_argument("--rows-per-cell", type=int, default=10)
    parser.add_argument("--mcmc", default="", help="N values at which to run the full-Bayes fit")
    args = parser.parse_args()
    from hierbandit.bayes import diagnose, fit_prior
    from hierbandit.bayes._devices import configure_jax_once
    from hierbandit.data import read_log

    configure_jax_once()
    rows = []
    for n in (int(v) for v in args.n.split(",")):
        df = synthetic_frame(n, args.rows_per_cell)
        log = read_log(df)
        row = {"N": n, "rows": len(df)}
        for method in ("eb", "ml"):
            t0 = time.perf_counter()
            fit_prior(log, method=method)
            row[f"{method} s"] = time.perf_counter() - t0
        for algebra in ("batched", "soa"):
            cost = gradient_cost(log, algebra)
            row[f"grad {algebra} ms"] = 1e3 * cost
            row[f"grad {algebra} µs/instance"] = 1e6 * cost / n
        rows.append(row)
        print(pd.DataFrame([row]).to_string(index=False, float_format="%.3g"), flush=True)
    print()
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"))
    for n in (int(v) for v in args.mcmc.split(",") if v):
        log = read_log(synthetic_frame(n, args.rows_per_cell))
        t0 = time.perf_counter()
        prior = fit_prior(log, method="mcmc", progressbar=False)
        wall = time.perf_counter() - t0
        diag = diagnose(prior, var_names=["Sigma", "sigma"], warn=False)
        print(
            f"mcmc N={n}: {wall:.1f} s, min bulk ESS {diag.min_ess_bulk:.0f}, min tail ESS "
            f"{diag.min_ess_tail:.0f}, max R-hat {diag.max_rhat:.3f}, "
            f"{diag.divergences} divergences"
        )


if __name__ == "__main__":
    main()
