"""One entry point for NUTS, whatever the backend."""

from __future__ import annotations

import importlib.util
from typing import Any

import pymc as pm

from .._validation import check_choice

__all__ = ["NUTS_SAMPLERS", "available_samplers", "sample"]

NUTS_SAMPLERS = ("numpyro", "pymc", "nutpie", "blackjax")
_MODULE = {"numpyro": "numpyro", "nutpie": "nutpie", "blackjax": "blackjax", "pymc": "pymc"}


def available_samplers() -> list[str]:
    """The NUTS backends installed here."""
    return [s for s in NUTS_SAMPLERS if importlib.util.find_spec(_MODULE[s]) is not None]


def sample(
    model: pm.Model,
    *,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 2,
    target_accept: float = 0.9,
    random_seed: int = 0,
    nuts_sampler: str = "numpyro",
    progressbar: bool = False,
    **kwargs: Any,
) -> Any:
    """Run NUTS on ``model`` and return ArviZ InferenceData (with sample stats).

    ``nuts_sampler`` selects the backend; an uninstalled one raises a ValueError listing the
    available ones.
    """
    check_choice(nuts_sampler, NUTS_SAMPLERS, "nuts_sampler")
    if nuts_sampler not in available_samplers():
        raise ValueError(
            f"nuts_sampler {nuts_sampler!r} is not installed; available: {available_samplers()}"
        )
    meta = getattr(model, "hb_meta", None)
    if meta is not None and "var_names" not in kwargs:
        kwargs["var_names"] = list(meta["trace_vars"])
    if nuts_sampler == "numpyro":
        nk = dict(kwargs.pop("nuts_sampler_kwargs", {}) or {})
        nk.setdefault("chain_method", "vectorized")
        kwargs["nuts_sampler_kwargs"] = nk
    with model:
        return pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            target_accept=target_accept,
            random_seed=random_seed,
            nuts_sampler=nuts_sampler,
            progressbar=progressbar,
            **kwargs,
        )
