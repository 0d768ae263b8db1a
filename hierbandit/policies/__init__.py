"""Online decision rules over the statistics core."""

from .base import Policy, hyperparameter_dataset, posterior_dataset
from .ebm import EbmPolicy, EbmTS, EbmUCB

__all__ = ["EbmPolicy", "EbmTS", "EbmUCB", "Policy", "hyperparameter_dataset", "posterior_dataset"]
