"""Pure exploration: clustering with bandit feedback (Yang, Zhong & Tan, JMLR 2024).

The output of a run is a partition of the arms, the number of pulls it took and whether the
stopping rule fired — not a regret curve.

* :class:`BOC` (Algorithm 1) with the linear-exploration variant :class:`BOCLE` (Appendix C),
  and the baselines :class:`Uniform` and :class:`Oracle`; step-level API ``next_arm``,
  ``observe``, ``should_stop``, ``recommend`` and ``run(instance, max_pulls, rng)``.
* :func:`stopping_times` — every (threshold, δ) from one sample path.
* :func:`optimal_allocation` / :func:`hardness` / :func:`lower_bound` — D*(c, U), w*, λ* by the
  finite convex min–max of Props. 7–8 (with the correction for two or more singleton clusters),
  and the brute-force references :func:`brute_force_inner`, :func:`brute_force_hardness`.
* :func:`kmeans_maximin` — Algorithm 2.
* :func:`beta_theory`, :func:`beta_heuristic`, :func:`psi` — the stopping thresholds.
* Instances: :class:`ClusterBandit` with :func:`synthetic_instance`, :func:`class_mean_instance`,
  :func:`iris_instance` and :func:`digits_instance`.

Nothing here imports PyMC; the Bayesian diagnostic lives in :mod:`hierbandit.bayes.boc`.
"""

from hierbandit.boc import _checkpoint_rules  # noqa: F401  (registers the rules of restored state)
from hierbandit.boc.explorers import (
    BOC,
    BOCLE,
    ClusteringExplorer,
    ExplorationResult,
    Oracle,
    Uniform,
)
from hierbandit.boc.instances import (
    ArmSampler,
    ClusterBandit,
    class_mean_instance,
    digits_instance,
    iris_instance,
    synthetic_instance,
)
from hierbandit.boc.kmeans import KMeansResult, kmeans_maximin
from hierbandit.boc.lower_bound import (
    LowerBound,
    admissible_pairs,
    brute_force_hardness,
    brute_force_inner,
    hardness,
    inner_value,
    lower_bound,
    optimal_allocation,
)
from hierbandit.boc.stopping import stopping_times
from hierbandit.boc.thresholds import (
    THRESHOLDS,
    beta_heuristic,
    beta_theory,
    kl_bernoulli_delta,
    log_inv_delta_of,
    psi,
)

__all__ = [
    "BOC",
    "BOCLE",
    "THRESHOLDS",
    "ArmSampler",
    "ClusterBandit",
    "ClusteringExplorer",
    "ExplorationResult",
    "KMeansResult",
    "LowerBound",
    "Oracle",
    "Uniform",
    "admissible_pairs",
    "beta_heuristic",
    "beta_theory",
    "brute_force_hardness",
    "brute_force_inner",
    "class_mean_instance",
    "digits_instance",
    "hardness",
    "inner_value",
    "iris_instance",
    "kl_bernoulli_delta",
    "kmeans_maximin",
    "log_inv_delta_of",
    "lower_bound",
    "optimal_allocation",
    "psi",
    "stopping_times",
    "synthetic_instance",
]
