"""Simulated environments for the online policies."""

from .cascade import CascadeEnv, CascadeRollout, backward_plan, simulate_episode, slate_value
from .hierarchical import HierarchicalLinearEnv, Rollout, arrival_probabilities
from .prior_drawn import PriorDrawnEnv, env_from_prior

__all__ = [
    "CascadeEnv",
    "CascadeRollout",
    "HierarchicalLinearEnv",
    "PriorDrawnEnv",
    "Rollout",
    "arrival_probabilities",
    "backward_plan",
    "env_from_prior",
    "simulate_episode",
    "slate_value",
]
