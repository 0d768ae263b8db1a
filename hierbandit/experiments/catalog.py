"""The catalog: every paper reproduction as a named experiment, looked up by name.

Each paper's module defines its experiment (``EXPERIMENT``: the parameter schema, how it splits
into cells, how one cell is computed and how the finished cells are written) with the framework
of :mod:`hierbandit.experiments.registry`; the values of each scale are in
``configs/<name>.toml``. This module only lists them, so registration flows one way: the papers'
modules use the framework, and the catalog uses the papers' modules.
"""

from __future__ import annotations

from hierbandit.experiments import boc, cascade, ebm, ebm_real, offline, sclub
from hierbandit.experiments.registry import Experiment

__all__ = ["EXPERIMENTS", "get_experiment", "list_experiments"]

#: name → experiment, in the order of ``hierbandit experiment list``
EXPERIMENTS: dict[str, Experiment] = {
    module.EXPERIMENT.name: module.EXPERIMENT
    for module in (ebm, ebm_real, cascade, sclub, offline, boc)
}


def list_experiments() -> list[Experiment]:
    """Every experiment, in catalog order."""
    return list(EXPERIMENTS.values())


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name`` (``ValueError`` listing the names otherwise)."""
    if not isinstance(name, str) or name not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {list(EXPERIMENTS)}, got {name!r}")
    return EXPERIMENTS[name]
