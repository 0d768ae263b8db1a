"""PyMC models of the same generative stories, closed-form-vs-MCMC comparison and diagnostics.

Importing this package imports PyMC; nothing on the online path (``hierbandit.stats``,
``policies``, ``envs``, ``experiments``) imports it.
"""

from .conditional import (
    ClosedFormComparison,
    closed_form_posterior,
    compare_closed_form,
    conditional_model,
)
from .diagnostics import Diagnostics, diagnose

__all__ = [
    "ClosedFormComparison",
    "Diagnostics",
    "closed_form_posterior",
    "compare_closed_form",
    "conditional_model",
    "diagnose",
]
