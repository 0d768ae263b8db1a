"""Simulated environments for the online policies."""

from .boc import (
    ArmSampler,
    ClusterBandit,
    class_mean_instance,
    digits_instance,
    iris_instance,
    synthetic_instance,
)
from .cascade import CascadeEnv, CascadeRollout, backward_plan, simulate_episode, slate_value
from .hierarchical import HierarchicalLinearEnv, Rollout, arrival_probabilities
from .prior_drawn import PriorDrawnEnv, env_from_prior

__all__ = [
    "ArmSampler",
    "CascadeEnv",
    "CascadeRollout",
    "ClusterBandit",
    "HierarchicalLinearEnv",
    "PriorDrawnEnv",
    "Rollout",
    "arrival_probabilities",
    "backward_plan",
    "class_mean_instance",
    "digits_instance",
    "env_from_prior",
    "iris_instance",
    "simulate_episode",
    "slate_value",
    "synthetic_instance",
]
