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
from .clustered import (
    ClusteredLinearEnv,
    ClusteredRollout,
    MovieLensEnv,
    frequency_vector,
    movielens_user_vectors,
)
from .hierarchical import HierarchicalLinearEnv, Rollout, arrival_probabilities
from .prior_drawn import PriorDrawnEnv, env_from_prior

__all__ = [
    "ArmSampler",
    "CascadeEnv",
    "CascadeRollout",
    "ClusterBandit",
    "ClusteredLinearEnv",
    "ClusteredRollout",
    "HierarchicalLinearEnv",
    "MovieLensEnv",
    "PriorDrawnEnv",
    "Rollout",
    "arrival_probabilities",
    "backward_plan",
    "class_mean_instance",
    "digits_instance",
    "env_from_prior",
    "frequency_vector",
    "iris_instance",
    "movielens_user_vectors",
    "simulate_episode",
    "slate_value",
    "synthetic_instance",
]
