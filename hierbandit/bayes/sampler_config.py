"""One set of NUTS settings for every sampler run of the Bayesian layer.

:class:`SamplerConfig` holds the settings :func:`hierbandit.bayes.sample` runs with and checks
them once, when it is built. Every function of :mod:`hierbandit.bayes` that runs NUTS takes one
(``sampler=SamplerConfig(...)``), and its keyword arguments ``draws=``, ``tune=``, ``chains=``…
replace single fields of it (:func:`resolve_sampler`)::

    cfg = SamplerConfig(chains=4, random_seed=7)
    prior = fit_prior(log, method="mcmc", sampler=cfg)
    prior = fit_prior(log, method="mcmc", sampler=cfg, draws=2000)  # cfg with draws = 2000

Without one, a function runs with its own default configuration. The defaults are those of
:class:`SamplerConfig` (2 chains × 1,000 draws after 1,000 tuning steps, ``target_accept`` 0.9,
seed 0, ``pm.sample`` with nutpie and PyMC's progress bar) except where a function states
otherwise at its own definition:

======================================================  =========================================
function                                                default configuration
======================================================  =========================================
``sample``, ``fit_prior(collapsed=False)``              ``SamplerConfig()``
``fit_prior`` (the collapsed model)                     ``fit.FIT_SAMPLER``: 400 tuning steps,
                                                        ``target_accept=0.8``
``fit_cascade_prior``, ``compare_laplace_nuts``         ``cascade.CASCADE_SAMPLER``: 4 chains
``compare_closed_form``                                 ``conditional.CLOSED_FORM_SAMPLER``:
                                                        2,000 draws, the direct numpyro driver
``diagnose_partition``, ``diagnose_boc``                ``boc.DIAGNOSTIC_SAMPLER``: 500 draws
                                                        after 500 tuning steps
``fit_mixture``                                         ``sclub.MIXTURE_SAMPLER``: 500 draws
                                                        after 500 tuning steps
======================================================  =========================================

This module imports neither PyMC nor JAX (``docs/bayes.md``, The sampler).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hierbandit._validation import check_bool, check_choice, check_positive_int, check_scalar

__all__ = ["DRIVERS", "NUTS_SAMPLERS", "SamplerConfig", "available_samplers", "resolve_sampler"]

#: the NUTS backends :func:`hierbandit.bayes.sample` knows (``available_samplers()``: installed)
NUTS_SAMPLERS = ("numpyro", "pymc", "nutpie", "blackjax")
#: ``"pymc"``: ``pm.sample``; ``"direct"``: the package's own numpyro and nutpie drivers;
#: ``"kernel"``: nutpie on the collapsed model's compiled log density (``bayes.compiled``)
DRIVERS = ("direct", "pymc", "kernel")


def available_samplers() -> list[str]:
    """The NUTS backends installed here (found without importing them)."""
    return [s for s in NUTS_SAMPLERS if importlib.util.find_spec(s) is not None]


@dataclass(frozen=True)
class SamplerConfig:
    """NUTS settings, checked when built (a ``ValueError`` or ``TypeError`` names the field).

    Attributes
    ----------
    draws : int
        Draws kept per chain (≥ 1).
    tune : int
        Tuning (warm-up) steps per chain, discarded (≥ 0).
    chains : int
        Independent chains (≥ 1); they run in parallel on JAX host devices when there are enough
        (:func:`~hierbandit.bayes.configure_host_devices`).
    target_accept : float
        Target acceptance probability of the step-size adaptation, in (0, 1).
    random_seed : int
        Seed of the initial points and of every chain (≥ 0): a run is reproducible from it.
    nuts_sampler : {"nutpie", "numpyro", "pymc", "blackjax"}
        The NUTS implementation (:func:`~hierbandit.bayes.available_samplers` lists those
        installed; checked when the sampler runs). nutpie compiles the model with JAX unless
        ``options`` choose another ``backend`` (docs/decisions/bayes.md, B10).
    progressbar : bool
        Show PyMC's progress bar, with the time left (``pm.sample`` and ``driver="kernel"``),
        or nutpie's (its direct driver). The direct numpyro driver reports its progress and the
        time left as ``hierbandit.progress`` log records whatever this says (the command
        renders them).
    driver : {"pymc", "direct", "kernel"}
        ``"pymc"`` runs ``pm.sample``; ``"direct"`` runs numpyro and nutpie through the package's
        own drivers (other backends still go through ``pm.sample``). The direct numpyro driver
        is the fastest on refits of logs of one shape (docs/decisions/bayes.md, B10).
        ``"kernel"`` runs nutpie on the collapsed model's log density and gradient compiled by
        the package (:mod:`hierbandit.bayes.compiled`; collapsed models and nutpie only): the
        default of a collapsed full-Bayes fit (B18).
    options : dict
        Further keyword arguments for the backend: ``dense_mass`` and ``max_tree_depth`` under
        these names for every route (translated for each backend), anything else ``pm.sample``
        or its NUTS step takes. Recorded in the provenance of a fitted prior with the other
        settings. Read-only by convention.
    """

    draws: int = 1000
    tune: int = 1000
    chains: int = 2
    target_accept: float = 0.9
    random_seed: int = 0
    nuts_sampler: str = "nutpie"
    progressbar: bool = True
    driver: str = "pymc"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        put = object.__setattr__  # a frozen dataclass stores the normalised values so
        put(self, "draws", check_positive_int(self.draws, "draws"))
        put(self, "tune", check_positive_int(self.tune, "tune", minimum=0))
        put(self, "chains", check_positive_int(self.chains, "chains"))
        target = check_scalar(self.target_accept, "target_accept", low=0.0, low_inclusive=False)
        if target >= 1.0:
            raise ValueError(f"target_accept must be < 1, got {target}")
        put(self, "target_accept", target)
        put(self, "random_seed", check_positive_int(self.random_seed, "random_seed", minimum=0))
        check_choice(self.nuts_sampler, NUTS_SAMPLERS, "nuts_sampler")
        put(self, "progressbar", check_bool(self.progressbar, "progressbar"))
        check_choice(self.driver, DRIVERS, "driver")
        if not isinstance(self.options, Mapping):
            raise TypeError(f"options must be a mapping, got {type(self.options).__name__}")
        fields = {f.name for f in dataclasses.fields(self)}
        for key in self.options:
            if not isinstance(key, str):
                raise TypeError(f"options keys must be strings, got {key!r}")
            if key in fields or key == "var_names":
                raise ValueError(f"options must not hold {key!r}: it has its own argument")
        put(self, "options", dict(self.options))

    def override(self, **changes: Any) -> SamplerConfig:
        """A copy with the fields in ``changes`` that are not ``None`` replaced (and checked);
        ``options=`` is merged into the current options."""
        given = {k: v for k, v in changes.items() if v is not None}
        if "options" in given:
            given["options"] = {**self.options, **given["options"]}
        return dataclasses.replace(self, **given) if given else self

    def label(self) -> str:
        """The route in words, for reports and progress lines: ``"nutpie through pm.sample"``,
        ``"numpyro, the package's direct driver"``."""
        if self.driver == "direct" and self.nuts_sampler in ("numpyro", "nutpie"):
            return f"{self.nuts_sampler}, the package's direct driver"
        if self.driver == "kernel":
            return f"{self.nuts_sampler} on the compiled log density"
        return f"{self.nuts_sampler} through pm.sample"

    def record(self) -> dict[str, Any]:
        """The settings as provenance (JSON-serialisable when ``options`` are): draws, tune,
        chains, target_accept, random_seed, nuts_sampler, the driver when it is not
        ``pm.sample``, then the options; the progress bar is not recorded."""
        out: dict[str, Any] = {
            "draws": self.draws,
            "tune": self.tune,
            "chains": self.chains,
            "target_accept": self.target_accept,
            "random_seed": self.random_seed,
            "nuts_sampler": self.nuts_sampler,
        }
        if self.driver != "pymc":
            out["driver"] = self.driver
        return out | self.options


def resolve_sampler(
    sampler: SamplerConfig | None,
    default: SamplerConfig,
    *,
    min_draws: int = 1,
    extra: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> SamplerConfig:
    """The configuration a function runs with: ``sampler`` (``default`` when ``None``) with the
    keyword arguments that were given (not ``None``) replacing its fields.

    ``extra`` holds a function's further keyword arguments (its ``**kwargs``): those that name a
    field set it, the others are merged into ``options`` for the backend. ``min_draws`` is the
    fewest draws the caller can work with (an audit that estimates Monte-Carlo standard errors
    needs 4); a smaller value, given or configured, is a ``ValueError``.
    """
    if sampler is None:
        sampler = default
    elif not isinstance(sampler, SamplerConfig):
        raise TypeError(f"sampler must be a SamplerConfig, got {type(sampler).__name__}")
    if extra:
        names = {f.name for f in dataclasses.fields(SamplerConfig)} - {"options"}
        options = {k: v for k, v in extra.items() if k not in names}
        given = {k: v for k, v in overrides.items() if v is not None}
        overrides = {**{k: v for k, v in extra.items() if k in names}, **given}
        if options:
            overrides["options"] = options
    if overrides.get("draws") is not None:
        check_positive_int(overrides["draws"], "draws", minimum=min_draws)
    config = sampler.override(**overrides)
    check_positive_int(config.draws, "draws", minimum=min_draws)
    return config
