"""The Bayesian layer: fit priors to historical data, PyMC models of the same generative stories,
full MCMC, closed-form-vs-MCMC comparison and ArviZ diagnostics.

Imported lazily: ``import hierbandit.bayes`` is cheap, and PyMC is imported only when a name that
needs it is first used. Nothing on the online path (``hierbandit.stats``, ``policies``, ``envs``,
``experiments``) imports PyMC.
"""

from __future__ import annotations

import importlib
from typing import Any

from hierbandit.bayes._devices import configure_compilation_cache, configure_host_devices

configure_host_devices()
configure_compilation_cache()

_EXPORTS = {
    "fit_mixture": "mixture",
    "mixture_loglik": "mixture",
    "mixture_model": "mixture",
    "GMMDiagnostic": "gmm",
    "diagnose_boc": "gmm",
    "diagnose_partition": "gmm",
    "exact_coclustering": "gmm",
    "gmm_model": "gmm",
    "CascadeLog": "cascade",
    "CascadePrior": "cascade",
    "LaplaceNUTSComparison": "cascade",
    "cascade_click_model": "cascade",
    "cascade_laplace": "cascade",
    "compare_laplace_nuts": "cascade",
    "fit_cascade_prior": "cascade",
    "load_cascade_prior": "cascade",
    "read_cascade_log": "cascade",
    "ClosedFormComparison": "conditional",
    "closed_form_posterior": "conditional",
    "compare_closed_form": "conditional",
    "conditional_model": "conditional",
    "Diagnostics": "diagnostics",
    "diagnose": "diagnostics",
    "fit_prior": "fit",
    "prior_from_arrays": "fit",
    "METHODS": "fit",
    "HierarchicalPrior": "prior",
    "load_prior": "prior",
    "upgrade_prior": "prior",
    "HyperPriors": "models",
    "collapsed_model": "models",
    "uncollapsed_model": "models",
    "add_conditional_draws": "models",
    "sample": "sampling",
    "available_samplers": "sampling",
    "configure_host_devices": "_devices",
    "configure_compilation_cache": "_devices",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
