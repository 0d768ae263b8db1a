"""Offline clustering of linear bandits: Off-C²LUB, Off-CLUB and the paper's baselines.

Liu, Zhang, Wang, Liu, Lui, Hajiesmaili, Joe-Wong, "Offline Clustering of Linear Bandits: The
Power of Clusters under Limited Data". Fit once on a logged dataset of (user, action features,
reward) rows, then choose an action for a test user from any action set.

* Data: :class:`OfflineDataset`, :func:`read_offline`; generators :func:`cluster_thetas`,
  :func:`movielens_thetas`, :func:`user_probabilities`, :func:`generate_offline`,
  :func:`make_problem`, :class:`OfflineTestSet`, :func:`suboptimality`.
* Algorithms: :class:`OffC2LUB` (Algorithm 1), :class:`OffCLUB` (Algorithm 2).
* Baselines: :class:`LinUCBIndOffline`, :class:`CLUBOffline`, :class:`SCLUBOffline`,
  :class:`DBSCANImprove`, :class:`XMeansImprove`, :class:`ARMUL`.
* Evaluation: :func:`evaluate`, :func:`gamma_sweep`, :func:`gamma_grid`.
"""

from hierbandit.offline.base import OfflineModel, UserGraph
from hierbandit.offline.baselines import (
    ARMUL,
    CLUBOffline,
    DBSCANImprove,
    LinUCBIndOffline,
    SCLUBOffline,
    XMeansImprove,
)
from hierbandit.offline.c2lub import OffC2LUB, gamma_grid
from hierbandit.offline.club import OffCLUB
from hierbandit.offline.dataset import OfflineDataset, read_offline
from hierbandit.offline.evaluate import evaluate, gamma_sweep
from hierbandit.offline.generate import (
    OfflineTestSet,
    cluster_thetas,
    generate_offline,
    make_problem,
    movielens_thetas,
    suboptimality,
    user_probabilities,
)

__all__ = [
    "ARMUL",
    "CLUBOffline",
    "DBSCANImprove",
    "LinUCBIndOffline",
    "OffC2LUB",
    "OffCLUB",
    "OfflineDataset",
    "OfflineModel",
    "OfflineTestSet",
    "SCLUBOffline",
    "UserGraph",
    "XMeansImprove",
    "cluster_thetas",
    "evaluate",
    "gamma_grid",
    "gamma_sweep",
    "generate_offline",
    "make_problem",
    "movielens_thetas",
    "read_offline",
    "suboptimality",
    "user_probabilities",
]
