"""Online decision rules over the statistics core."""

from .base import Policy, hyperparameter_dataset, posterior_dataset

__all__ = ["Policy", "hyperparameter_dataset", "posterior_dataset"]
