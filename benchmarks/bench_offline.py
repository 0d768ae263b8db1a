"""Fit time of Off-C²LUB and Off-CLUB against the number of users and the dataset size.

Prints, for each configuration, the wall time of the stages of a fit:

* ``suffstats``: per-user G_u, b_u, N_u (one pass over the rows, O(n·d²));
* ``user``: per-user ridge estimates θ̂_u and radii CI_u (O(U·d³));
* ``pairwise``: the vectorised pairwise stage alone — distances by blocks of GEMMs, the γ̂
  policy and the edge masks (O(U²·d));
* ``fit``: the whole fit (pairwise stage + one-hop aggregation O(min(|E|, U² − |E|)·d²) or
  O(U²·d²) for mid-density graphs + per-user d×d solves);

then the empirical growth exponent (least-squares slope of log time on log U, or on log n), and
a naive loop over user pairs at small U as the baseline the vectorised stage is compared with.

Run: ``.venv/bin/python benchmarks/bench_offline.py`` (``--quick`` for a shorter run).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hierbandit.offline import OffC2LUB, OffCLUB, cluster_thetas, generate_offline


def _time(fn, repeat: int = 1) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _stages(model, data) -> dict[str, float]:
    out = {}
    data._cache.clear()
    out["suffstats"] = _time(data.suffstats)
    out["user"] = _time(lambda: model._user_stage(data))
    stage = model._user_stage(data)
    out["pairwise"] = _time(lambda: model._pairwise(stage, aggregate=False))
    out["fit"] = _time(lambda: model.fit(data))
    return out


def _naive_pairs(model, data) -> float:
    """The pairwise stage as a Python loop over user pairs (the obviously-correct baseline)."""
    st = model._user_stage(data)
    th, ci = st["theta_hat_"], st["ci_"]
    U = th.shape[0]
    t0 = time.perf_counter()
    adj = np.zeros((U, U), dtype=bool)
    for u in range(U):
        for v in range(u + 1, U):
            adj[u, v] = np.linalg.norm(th[u] - th[v]) <= model.alpha * (ci[u] + ci[v])
    return time.perf_counter() - t0


def _slope(x, y) -> float:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and smaller configurations")
    parser.add_argument("--d", type=int, default=20, help="feature dimension (default 20)")
    parser.add_argument("--per-user", type=int, default=50, help="rows per user in the U sweep")
    args = parser.parse_args()
    d = args.d
    users = (100, 300, 1000, 3000) if args.quick else (100, 300, 1000, 3000, 10_000)
    sizes = (20_000, 100_000, 300_000) if args.quick else (20_000, 100_000, 500_000, 1_000_000)
    models = {
        "Off-C2LUB(over)": lambda: OffC2LUB("overestimation", lambda_tilde_a=1.0, rng=0),
        "Off-CLUB": lambda: OffCLUB(lambda_tilde_a=1.0, rng=0),
    }

    print(f"== fit time against the number of users U (d = {d}, {args.per_user} rows/user, J = 10)")
    header = f"{'model':<16} {'U':>6} {'rows':>9} " + " ".join(
        f"{k:>10}" for k in ("suffstats", "user", "pairwise", "fit")
    )
    print(header + f" {'edges/U':>9}")
    rec: dict[str, list[tuple[int, dict[str, float]]]] = {m: [] for m in models}
    for U in users:
        theta, labels = cluster_thetas(U, 10, d, rng=0)
        data = generate_offline(theta, U * args.per_user, labels=labels, rng=1)
        for name, make in models.items():
            m = make()
            t = _stages(m, data)
            rec[name].append((U, t))
            print(
                f"{name:<16} {U:>6} {data.n_rows:>9} "
                + " ".join(f"{t[k]:>9.3f}s" for k in ("suffstats", "user", "pairwise", "fit"))
                + f" {m.n_neighbours_.mean():>9.1f}",
                flush=True,
            )
    print("\ngrowth exponents in U (time ∝ U^k; pairwise target k ≤ 2 at fixed d):")
    for name, rows in rec.items():
        Us = [u for u, _ in rows]
        big = [i for i, u in enumerate(Us) if u >= 1000] or list(range(len(Us)))
        for stage in ("pairwise", "fit"):
            ts = [rows[i][1][stage] for i in range(len(rows))]
            k_all = _slope(Us, ts)
            k_big = _slope([Us[i] for i in big], [ts[i] for i in big]) if len(big) > 1 else k_all
            print(f"  {name:<16} {stage:<9} k = {k_all:.2f} overall, {k_big:.2f} for U ≥ 1000")

    print(f"\n== fit time against the dataset size (U = 1000, d = {d})")
    theta, labels = cluster_thetas(1000, 10, d, rng=0)
    for name, make in models.items():
        ts = []
        for n in sizes:
            data = generate_offline(theta, n, labels=labels, rng=1)
            t = _stages(make(), data)
            ts.append(t)
            print(
                f"{name:<16} rows {n:>9} "
                + " ".join(f"{k} {t[k]:.3f}s" for k in ("suffstats", "pairwise", "fit"))
            )
        print(
            f"  growth in n: suffstats k = {_slope(sizes, [t['suffstats'] for t in ts]):.2f}, "
            f"fit k = {_slope(sizes, [t['fit'] for t in ts]):.2f}"
        )

    print("\n== vectorised pairwise stage vs a Python loop over pairs (Off-CLUB rule)")
    for U in (100, 300) if args.quick else (100, 300, 600):
        theta, labels = cluster_thetas(U, 10, d, rng=0)
        data = generate_offline(theta, U * args.per_user, labels=labels, rng=1)
        m = OffCLUB(lambda_tilde_a=1.0, rng=0)
        stage = m._user_stage(data)
        vec = _time(lambda stage=stage, m=m: m._pairwise(stage, aggregate=False), repeat=3)
        loop = _naive_pairs(m, data)
        print(
            f"  U = {U:>4}: vectorised {vec * 1e3:8.2f} ms, loop {loop * 1e3:9.1f} ms, "
            f"speed-up {loop / vec:7.1f}x"
        )


if __name__ == "__main__":
    main()
