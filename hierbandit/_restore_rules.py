"""Per-class rules for restored checkpoint state (see :mod:`hierbandit._restore`).

The template comparison fixes every attribute's type, shape and dtype to what the class's
constructor builds from the restored configuration; these rules name the attributes whose
shape depends on the run or that may hold ±inf, and check what compiled kernels rely on.
"""

from __future__ import annotations

from ._restore import RULES, Rule

__all__: list[str] = []

_EBM = "hierbandit.policies.ebm:"
_BOC = "hierbandit.exploration.boc:"

for _name in ("EbmTS", "EbmUCB"):
    RULES[_EBM + _name] = Rule(nonfinite=frozenset({"gamma"}))

for _name in ("BOC", "BOCLE", "Uniform", "Oracle"):
    RULES[_BOC + _name] = Rule(dynamic=frozenset({"_pending", "centres", "labels"}))

RULES["hierbandit.policies.cascade:AUCBBP"] = Rule(
    dynamic=frozenset({"_k_ucb", "_k_greedy", "_score"}), nonfinite=frozenset({"_score"})
)
# Oracle's target is its allocation λ, shared with ``lam`` or not depending on the argument
RULES[_BOC + "Oracle"] = Rule(dynamic=frozenset({"_pending", "centres", "labels", "target"}))
