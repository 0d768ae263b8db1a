"""The Bayesian layer: fit priors to historical data, PyMC models of the same generative stories,
full MCMC, closed-form-vs-MCMC comparison and ArviZ diagnostics (``docs/bayes.md``).

Imported lazily: ``import hierbandit.bayes`` is cheap and changes no process-wide setting. Each
name is imported on first use, and PyMC, PyTensor, ArviZ and JAX only with a name that needs them.
JAX is configured (host devices, compilation cache: :func:`configure_host_devices`,
:func:`configure_compilation_cache`) when a full-Bayes sampler first runs, unless the user has
configured it. Nothing below this layer (the statistics core, the logs, the papers' folders)
imports PyMC.

=============================  ===============================================================
module                         contents
=============================  ===============================================================
``prior``, ``fit``             the ebm prior: :class:`HierarchicalPrior`, :func:`fit_prior`
``outofcore``                  :func:`summarise_dask`: a log's statistics computed by Dask
``models``                     the full-Bayes models of the ebm prior
``sampling``                   :func:`sample`, the one NUTS entry point
``sampler_config``             :class:`SamplerConfig`, the settings of every sampler run
``diagnostics``                :func:`diagnose` (R-hat, ESS, divergences)
``conditional``                closed form vs NUTS with fixed hyperparameters
``cascade``                    the logistic click model and :class:`CascadePrior`
``cascade_audit``              Laplace vs NUTS on a cascade log
``boc``, ``sclub``             the mixtures that audit BOC's and SCLUB's partitions
=============================  ===============================================================
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it
_EXPORTS = {
    "fit_mixture": "hierbandit.bayes.sclub",
    "mixture_loglik": "hierbandit.bayes.sclub",
    "mixture_model": "hierbandit.bayes.sclub",
    "GMMDiagnostic": "hierbandit.bayes.boc",
    "diagnose_boc": "hierbandit.bayes.boc",
    "diagnose_partition": "hierbandit.bayes.boc",
    "exact_coclustering": "hierbandit.bayes.boc",
    "gmm_model": "hierbandit.bayes.boc",
    "CascadeLog": "hierbandit.data.cascade_log",
    "read_cascade_log": "hierbandit.data.cascade_log",
    "CascadePrior": "hierbandit.bayes.cascade",
    "cascade_click_model": "hierbandit.bayes.cascade",
    "cascade_laplace": "hierbandit.bayes.cascade",
    "fit_cascade_prior": "hierbandit.bayes.cascade",
    "load_cascade_prior": "hierbandit.bayes.cascade",
    "LaplaceNUTSComparison": "hierbandit.bayes.cascade_audit",
    "compare_laplace_nuts": "hierbandit.bayes.cascade_audit",
    "ClosedFormComparison": "hierbandit.bayes.conditional",
    "closed_form_posterior": "hierbandit.bayes.conditional",
    "compare_closed_form": "hierbandit.bayes.conditional",
    "conditional_model": "hierbandit.bayes.conditional",
    "Diagnostics": "hierbandit.bayes.diagnostics",
    "diagnose": "hierbandit.bayes.diagnostics",
    "fit_prior": "hierbandit.bayes.fit",
    "prior_from_arrays": "hierbandit.bayes.fit",
    "summarise_dask": "hierbandit.bayes.outofcore",
    "METHODS": "hierbandit.bayes.fit",
    "HierarchicalPrior": "hierbandit.bayes.prior",
    "load_prior": "hierbandit.bayes.prior",
    "upgrade_prior": "hierbandit.bayes.prior",
    "HyperPriors": "hierbandit.bayes.models",
    "collapsed_model": "hierbandit.bayes.models",
    "uncollapsed_model": "hierbandit.bayes.models",
    "add_conditional_draws": "hierbandit.bayes.models",
    "sample": "hierbandit.bayes.sampling",
    "available_samplers": "hierbandit.bayes.sampler_config",
    "SamplerConfig": "hierbandit.bayes.sampler_config",
    "configure_host_devices": "hierbandit.bayes._devices",
    "configure_compilation_cache": "hierbandit.bayes._devices",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # the layer is the 'bayes' extra: without its stack, every name of its own fails the same
    # way, naming the extra (found, not imported: a name that does not sample stays cheap)
    from hierbandit._extras import check_installed, missing_extra

    bayes_stack = ("pymc", "pytensor", "arviz", "jax", "jaxlib", "numpyro", "nutpie", "matplotlib")
    purpose = f"hierbandit.bayes.{name}"
    if _EXPORTS[name].startswith(f"{__name__}."):
        for module in bayes_stack[:3]:
            check_installed(module, "bayes", purpose)
    try:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    except ImportError as exc:  # a library of the extra that only this name imports
        missing = (exc.name or "").partition(".")[0]
        if missing not in bayes_stack:
            raise
        raise missing_extra(missing, "bayes", purpose) from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
