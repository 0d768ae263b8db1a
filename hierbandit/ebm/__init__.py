"""Empirical-Bayes multi-task bandits: ebmTS and ebmUCB with their baselines and environments.

The paper's algorithms share strength across instances through a Gaussian prior over each
arm's per-instance coefficients, re-estimated from all instances' data (see ``docs/ebm.md``):

* :class:`EbmTS`, :class:`EbmUCB` — the paper's algorithms (:class:`EbmPolicy` holds both);
* baselines :class:`LinUCB`, :class:`LinTS`, :class:`OLSBandit` and :class:`RMBandit`;
* the contract every one of them follows, :class:`Policy` (``select(instance, contexts)``,
  ``update(instance, arm, context, reward)``), and the xarray views of its state;
* environments :class:`HierarchicalLinearEnv` (the paper's synthetic settings) and
  :class:`PriorDrawnEnv` (coefficients drawn from a fitted prior);
* :func:`run_batched` — compiled whole-horizon loops over seeds that reproduce the classes'
  decisions exactly.
"""

from hierbandit.ebm import _checkpoint_rules  # noqa: F401  (registers the rules of restored state)
from hierbandit.ebm.base import Policy, hyperparameter_dataset, posterior_dataset
from hierbandit.ebm.compiled import batched_unsupported, run_batched
from hierbandit.ebm.env import HierarchicalLinearEnv, Rollout, arrival_probabilities
from hierbandit.ebm.linear import (
    LinTS,
    LinUCB,
    OLSBandit,
    forced_sampling_arm,
    forced_sampling_schedule,
)
from hierbandit.ebm.policy import EbmPolicy, EbmTS, EbmUCB
from hierbandit.ebm.prior_env import PriorDrawnEnv, env_from_prior
from hierbandit.ebm.rmbandit import RMBandit, rm_estimate

__all__ = [
    "EbmPolicy",
    "EbmTS",
    "EbmUCB",
    "HierarchicalLinearEnv",
    "LinTS",
    "LinUCB",
    "OLSBandit",
    "Policy",
    "PriorDrawnEnv",
    "RMBandit",
    "Rollout",
    "arrival_probabilities",
    "batched_unsupported",
    "env_from_prior",
    "forced_sampling_arm",
    "forced_sampling_schedule",
    "hyperparameter_dataset",
    "posterior_dataset",
    "rm_estimate",
    "run_batched",
]
