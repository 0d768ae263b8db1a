"""Online clustering of bandits: SCLUB and CLUB with the LinUCB baselines and their environments.

Users who share a preference vector are found online and pooled (see ``docs/sclub.md``):

* :class:`SCLUB`, :class:`CLUB` — the paper's algorithm and its predecessor, over the contract
  :class:`ClusteringPolicy` (``select(user, items)``, ``update(user, item, reward)``);
* baselines :class:`LinUCBOne` (one model for all users) and :class:`LinUCBInd` (one per user);
* :class:`ClusterStats` — the per-user and per-cluster ridge statistics they share;
* :func:`fit_mixture_em` — the mixture of linear regressions that audits a final clustering;
* environments :class:`ClusteredLinearEnv` (synthetic) and :class:`MovieLensEnv` (real ratings).
"""

from hierbandit.sclub import _checkpoint_rules  # noqa: F401  (registers the rules of restored state)
from hierbandit.sclub.cluster_stats import ClusterStats, confidence_F
from hierbandit.sclub.env import (
    ClusteredLinearEnv,
    ClusteredRollout,
    MovieLensEnv,
    frequency_vector,
    movielens_user_vectors,
)
from hierbandit.sclub.mixture_em import MixtureEMResult, fit_mixture_em
from hierbandit.sclub.policies import CLUB, SCLUB, ClusteringPolicy, LinUCBInd, LinUCBOne

__all__ = [
    "CLUB",
    "SCLUB",
    "ClusterStats",
    "ClusteredLinearEnv",
    "ClusteredRollout",
    "ClusteringPolicy",
    "LinUCBInd",
    "LinUCBOne",
    "MixtureEMResult",
    "MovieLensEnv",
    "confidence_F",
    "fit_mixture_em",
    "frequency_vector",
    "movielens_user_vectors",
]
