"""Simulated environments for the online policies."""

from .hierarchical import HierarchicalLinearEnv, Rollout, arrival_probabilities
from .prior_drawn import PriorDrawnEnv, env_from_prior

__all__ = [
    "HierarchicalLinearEnv",
    "PriorDrawnEnv",
    "Rollout",
    "arrival_probabilities",
    "env_from_prior",
]
