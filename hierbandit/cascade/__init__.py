"""Cascading bandits with a horizon: UCBBP and AUCBBP with their baselines and environment.

A user is shown arms one at a time until they click or the episode's budget ends; the value of a
slate is computed by backward planning over the remaining horizon (see ``docs/cascading.md``):

* :class:`UCBBP`, :class:`AUCBBP` — the paper's algorithms, over the contract
  :class:`CascadePolicy` (``start_episode``, ``select``, ``update``);
* baselines :class:`CascadeEpsilonGreedy`, :class:`CascadeGreedy`, :class:`CascadeRandom`,
  :class:`CascadeLinUCB` and :class:`CascadeLinTS`;
* the environment :class:`CascadeEnv`, :func:`simulate_episode`, and the exact planner
  :func:`backward_plan` with :func:`slate_value`.
"""

from hierbandit.cascade import _checkpoint_rules  # noqa: F401  (registers the rules of restored state)
from hierbandit.cascade.env import (
    CascadeEnv,
    CascadeRollout,
    backward_plan,
    simulate_episode,
    slate_value,
)
from hierbandit.cascade.policies import (
    AUCBBP,
    UCBBP,
    CascadeEpsilonGreedy,
    CascadeGreedy,
    CascadeLinTS,
    CascadeLinUCB,
    CascadePolicy,
    CascadeRandom,
)

__all__ = [
    "AUCBBP",
    "UCBBP",
    "CascadeEnv",
    "CascadeEpsilonGreedy",
    "CascadeGreedy",
    "CascadeLinTS",
    "CascadeLinUCB",
    "CascadePolicy",
    "CascadeRandom",
    "CascadeRollout",
    "backward_plan",
    "simulate_episode",
    "slate_value",
]
