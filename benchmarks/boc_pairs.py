"""BOC: the paper's pair set against the corrected one, and why BOC's slope sits above D*.

Two measurements of docs/boc.md.

``pairs`` (default): the instance with two singleton clusters of decision 1 (docs/boc.md),
c = [0, 0, 1, 2], µ = (0, 10, 10.5), d = 1. With the paper's pair set (Lemma 4, Props. 5 and 7:
n(k) > 1 only) the lower bound and the stopping statistic Z₂ never compare the two singletons,
so D* and the allocation ignore the only hard pair (10 against 10.5) and the test can stop on a
partition that merges them. Every trial runs BOC with ``alt_pairs="paper"`` and with
``alt_pairs="corrected"`` on the same noise (common random numbers: seed = trial number) and
counts wrong partitions, with 95 % Clopper–Pearson intervals.

``slope``: at the stop, ½(√Z₂ − √Z₁)² ≥ β, so Z₂ ≈ (√(2β) + √Z₁)², and under exact tracking of
λ* with the true partition Z₂ ≈ 2τ/D*. Writing e = Z₂ D*/(2τ) for the realised efficiency,
τ/D* = (√β + √(Z₁/2))² / e exactly at the stop (up to the overshoot of one pull). The script
runs BOC at log(1/δ) = 200 and 400 on the synthetic instances of eq. (9) and reports the means of
τ/D*, β, Z₁ and e, and the slope of each term between the two levels; the slope of the lower
bound d_KL(δ, 1−δ) D* is D* per unit of log(1/δ).

Run::

    .venv/bin/python benchmarks/boc_pairs.py pairs --trials 300 --delta 0.01
    .venv/bin/python benchmarks/boc_pairs.py slope --trials 64
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.stats import beta as beta_dist

from hierbandit.boc import BOC
from hierbandit.boc.instances import ClusterBandit, synthetic_instance


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta_dist.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1 - a, k + 1, n - k))
    return lo, hi


def pairs(trials: int, delta: float, threshold: str) -> None:
    inst = ClusterBandit(np.array([0, 0, 1, 2]), np.array([[0.0], [10.0], [10.5]]), name="pairs")
    print(
        f"instance c = [0, 0, 1, 2], mu = (0, 10, 10.5), d = 1; delta = {delta}, threshold "
        f"{threshold}, {trials} trials (seeds 0..{trials - 1}, the same noise for both rules)"
    )
    for rule in ("paper", "corrected"):
        lb = inst.lower_bound(alt_pairs=rule)
        print(f"  D*({rule} pairs) = {lb.hardness:.6g}")
    print()
    print("| pair set | wrong partitions | 95 % CI | not stopped | mean τ ± sd | wrong: τ |")
    print("|---|---|---|---|---|---|")
    for rule in ("paper", "corrected"):
        t0 = time.perf_counter()
        alg = BOC(4, 3, 1, delta=delta, threshold=threshold, alt_pairs=rule)
        res = [alg.run(inst, rng=s) for s in range(trials)]
        wrong = [r for r in res if r.stopped and not r.correct]
        tau = np.array([r.n_pulls for r in res], dtype=float)
        lo, hi = clopper_pearson(len(wrong), trials)
        wtau = np.array([r.n_pulls for r in wrong], dtype=float)
        wdesc = f"median {np.median(wtau):.0f}" if wrong else "—"
        print(
            f"| {rule} | {len(wrong)}/{trials} ({100 * len(wrong) / trials:.1f} %) | "
            f"{100 * lo:.1f}–{100 * hi:.1f} % | {sum(not r.stopped for r in res)} | "
            f"{tau.mean():.1f} ± {tau.std(ddof=1):.1f} | {wdesc} |"
        )
        example = wrong[0].labels.tolist() if wrong else None
        print(f"<!-- {rule}: {time.perf_counter() - t0:.1f} s; first wrong partition {example} -->")


def _stop(inst: ClusterBandit, L: float, seed: int) -> tuple[int, float, float, float]:
    alg = BOC(inst.n_arms, inst.n_clusters, inst.n_features, log_inv_delta=L)
    sampler = inst.sampler(seed)
    while not alg.should_stop():
        a = alg.next_arm()
        alg.observe(a, sampler.pull(a))
    _, z1, z2 = alg.statistic()
    return alg.t, alg.threshold_value(), z1, z2


def slope(trials: int, levels: tuple[float, float]) -> None:
    L0, L1 = levels
    print(
        f"BOC, threshold beta (eq. 8), {trials} trials per level (seeds 0..{trials - 1}), "
        f"log(1/delta) = {L0:g} and {L1:g}; means over trials; slope = change / {L1 - L0:g}"
    )
    print()
    head = "| instance | D* | quantity | at {L0:g} | at {L1:g} | slope |"
    print(head.format(L0=L0, L1=L1))
    print("|---|---|---|---|---|---|")
    for kind in ("easy", "moderate", "challenging"):
        inst = synthetic_instance(kind)
        D = inst.hardness
        rows: dict[str, list[float]] = {}
        for L in levels:
            runs = np.array([_stop(inst, L, s) for s in range(trials)])
            tau, beta, z1, z2 = runs.T
            eff = z2 * D / (2 * tau)
            model = (np.sqrt(beta) + np.sqrt(z1 / 2)) ** 2 / eff
            vals = {
                "τ/D*": tau / D,
                "β": beta,
                "(√β + √(Z₁/2))²": (np.sqrt(beta) + np.sqrt(z1 / 2)) ** 2,
                "Z₁": z1,
                "e = Z₂D*/(2τ)": eff,
                "(√β + √(Z₁/2))²/e": model,
            }
            for k, v in vals.items():
                rows.setdefault(k, []).append(float(v.mean()))
        for k, (a, b) in rows.items():
            f = "{:.3f}" if k.startswith("e") else "{:.1f}"
            cells = [kind, f"{D:.4g}", k, f.format(a), f.format(b), f"{(b - a) / (L1 - L0):.3f}"]
            print("| " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", nargs="?", default="pairs", choices=("pairs", "slope"))
    ap.add_argument("--trials", type=int, default=None, help="300 (pairs) or 64 (slope)")
    ap.add_argument("--delta", type=float, default=0.01, help="pairs: the confidence level")
    ap.add_argument("--threshold", default="beta", choices=("beta", "beta_tilde"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.what == "pairs":
        pairs(args.trials or 300, args.delta, args.threshold)
    else:
        slope(args.trials or 64, (200.0, 400.0))
    print(f"\n<!-- {time.perf_counter() - t0:.0f} s -->")


if __name__ == "__main__":
    main()
