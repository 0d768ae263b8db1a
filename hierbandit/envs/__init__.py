"""Simulated environments for the online policies."""

from .hierarchical import HierarchicalLinearEnv, Rollout, arrival_probabilities

__all__ = ["HierarchicalLinearEnv", "Rollout", "arrival_probabilities"]
