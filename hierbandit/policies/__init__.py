"""Online decision rules over the statistics core."""

from .base import Policy, hyperparameter_dataset, posterior_dataset
from .cascade import (
    AUCBBP,
    UCBBP,
    CascadeEpsilonGreedy,
    CascadeGreedy,
    CascadeLinTS,
    CascadeLinUCB,
    CascadePolicy,
    CascadeRandom,
)
from .clustering import CLUB, SCLUB, ClusteringPolicy, LinUCBInd, LinUCBOne
from .ebm import EbmPolicy, EbmTS, EbmUCB
from .linear import LinTS, LinUCB, OLSBandit, forced_sampling_arm, forced_sampling_schedule
from .rmbandit import RMBandit, rm_estimate

__all__ = [
    "AUCBBP",
    "CLUB",
    "SCLUB",
    "UCBBP",
    "CascadeEpsilonGreedy",
    "CascadeGreedy",
    "CascadeLinTS",
    "CascadeLinUCB",
    "CascadePolicy",
    "CascadeRandom",
    "ClusteringPolicy",
    "EbmPolicy",
    "EbmTS",
    "EbmUCB",
    "LinTS",
    "LinUCB",
    "LinUCBInd",
    "LinUCBOne",
    "OLSBandit",
    "Policy",
    "RMBandit",
    "forced_sampling_arm",
    "forced_sampling_schedule",
    "hyperparameter_dataset",
    "posterior_dataset",
    "rm_estimate",
]
