"""One entry point for NUTS, whatever the backend.

By default (``SamplerConfig()``) :func:`sample` calls ``pm.sample(nuts_sampler="nutpie")`` with
the model compiled by JAX (log density and gradient; PyMC's default for nutpie, numba, takes
minutes to compile these models) and PyMC's own progress bar, which shows the time left. Any
other ``nuts_sampler`` ("numpyro", "pymc", "blackjax", as installed) goes through ``pm.sample``
the same way. The NUTS settings reach ``pm.sample`` in ``nuts={...}``, under each backend's
names (``max_tree_depth``, ``dense_mass``), and nutpie gets a thread per chain.

``driver="direct"`` selects the package's own drivers:

* numpyro's NUTS kernel run directly on PyMC's JAX-compiled log-density: chains in parallel on
  host devices (:func:`~hierbandit.bayes._devices.configure_host_devices`), jittered initial
  points, warm-up and draws as 20 calls of one compiled chunk of steps, and a map back to the
  stored variables. The model's data containers (``pm.Data``) are *arguments* of the compiled
  programs, not constants, so the programs depend only on the shapes: with the on-disk
  compilation cache (:func:`~hierbandit.bayes._devices.configure_compilation_cache`) every later
  fit of a log of the same shape, in any process, skips compilation. Between chunks it reports
  progress and the time left as ``hierbandit.progress`` log records (``record.progress`` and
  ``record.remaining``), which the command renders; it prints nothing.
* nutpie's ``compile_pymc_model`` and ``sample`` (JAX backend) without ``pm.sample``.

``driver="kernel"`` runs nutpie on the collapsed model's log density and gradient compiled by
the package (:mod:`hierbandit.bayes.compiled`: a C function nutpie's Rust sampler calls without
Python or the GIL), with PyMC's progress bar for nutpie; it is the default of a collapsed
full-Bayes fit (``fit.FIT_SAMPLER``; docs/decisions/bayes.md, B18).

Every route returns an ArviZ ``DataTree`` with ``posterior`` (the model's ``trace_vars``, with
its dims and coords) and ``sample_stats`` under ArviZ's names (``diverging``, ``lp``,
``tree_depth``, ``energy``, ``step_size``, ``acceptance_rate``, ``n_steps``). Why the default is
``pm.sample`` and what each route costs: docs/decisions/bayes.md, B10.

The settings are one :class:`~hierbandit.bayes.sampler_config.SamplerConfig`. The first run of a
process, before JAX starts, gives JAX one host device per core and the on-disk compilation cache
(:mod:`hierbandit.bayes._devices`), unless JAX has already started or the user configured them:
importing the package changes nothing (``docs/bayes.md``, The sampler).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
import pymc as pm
import xarray as xr

from hierbandit._progress import PROGRESS_LOGGER, ProgressTask  # noqa: F401 (listeners' logger)
from hierbandit.bayes._devices import configure_host_devices, configure_jax_once
from hierbandit.bayes.sampler_config import (
    NUTS_SAMPLERS,
    SamplerConfig,
    available_samplers,
    resolve_sampler,
)

__all__ = [
    "NUTS_SAMPLERS",
    "SamplerConfig",
    "available_samplers",
    "configure_host_devices",
    "sample",
]

logger = logging.getLogger(__name__)

#: how many calls the direct numpyro driver splits warm-up and draws into, to report progress
PROGRESS_CHUNKS = 20


def sample(
    model: pm.Model,
    sampler: SamplerConfig | None = None,
    *,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    target_accept: float | None = None,
    random_seed: int | None = None,
    nuts_sampler: str | None = None,
    progressbar: bool | None = None,
    driver: str | None = None,
    var_names: list[str] | None = None,
    **kwargs: Any,
) -> xr.DataTree:
    """Run NUTS on ``model`` and return an ArviZ ``DataTree`` (``posterior``, ``sample_stats``).

    ``sampler`` holds the settings (default ``SamplerConfig()``: 2 chains × 1,000 draws after
    1,000 tuning steps, ``target_accept=0.9``, seed 0, ``pm.sample`` with nutpie and PyMC's
    progress bar); ``draws``, ``tune``, ``chains``, ``target_accept``, ``random_seed``,
    ``nuts_sampler``, ``progressbar`` and ``driver`` replace its fields when given.
    ``var_names`` (default: the model's ``hb_meta["trace_vars"]`` if it has one) selects the
    stored variables. ``kwargs`` join the configuration's ``options``: ``pm.sample``'s own
    arguments go to it (``cores``, ``backend``, ``compile_kwargs``, ``idata_kwargs``…) and the
    others to its NUTS step (``nuts={...}``), with ``max_tree_depth`` and ``dense_mass``
    translated for each backend; the direct numpyro driver takes ``dense_mass`` and
    ``max_tree_depth``, the direct nutpie driver nutpie's ``sample`` arguments.

    Every route stores the same posterior variables, dims and coords, and the statistics
    ``diverging``, ``lp``, ``tree_depth``, ``energy``, ``step_size``, ``acceptance_rate`` and
    ``n_steps`` (nutpie's own names are renamed; statistics held as Python objects, which
    netCDF cannot store, are dropped). ``pm.sample`` adds ``observed_data`` and
    ``constant_data``.
    """
    cfg = resolve_sampler(
        sampler,
        SamplerConfig(),
        extra=kwargs,
        draws=draws,
        tune=tune,
        chains=chains,
        target_accept=target_accept,
        random_seed=random_seed,
        nuts_sampler=nuts_sampler,
        progressbar=progressbar,
        driver=driver,
    )
    if cfg.nuts_sampler not in available_samplers():
        raise ValueError(
            f"nuts_sampler {cfg.nuts_sampler!r} is not installed; available: {available_samplers()}"
        )
    configure_jax_once()
    options = dict(cfg.options)
    meta = getattr(model, "hb_meta", None)
    if var_names is None and meta is not None:
        var_names = list(meta["trace_vars"])
    if cfg.driver == "kernel":
        if cfg.nuts_sampler != "nutpie":
            raise ValueError(
                f"driver='kernel' samples with nutpie, not nuts_sampler={cfg.nuts_sampler!r}; "
                "use driver='pymc' for the other samplers"
            )
        return _sample_kernel(
            model,
            draws=cfg.draws,
            tune=cfg.tune,
            chains=cfg.chains,
            target_accept=cfg.target_accept,
            random_seed=cfg.random_seed,
            progressbar=cfg.progressbar,
            var_names=var_names,
            **options,
        )
    if cfg.driver == "direct" and cfg.nuts_sampler in ("numpyro", "nutpie"):
        run = _sample_numpyro if cfg.nuts_sampler == "numpyro" else _sample_nutpie
        return run(
            model,
            draws=cfg.draws,
            tune=cfg.tune,
            chains=cfg.chains,
            target_accept=cfg.target_accept,
            random_seed=cfg.random_seed,
            progressbar=cfg.progressbar,
            var_names=var_names,
            **options,
        )
    if var_names is not None:
        options["var_names"] = var_names
    options = _pm_sample_options(options, cfg.nuts_sampler, cfg.chains)
    with model:
        idata = pm.sample(
            draws=cfg.draws,
            tune=cfg.tune,
            chains=cfg.chains,
            target_accept=cfg.target_accept,
            random_seed=cfg.random_seed,
            nuts_sampler=cfg.nuts_sampler,
            progressbar=cfg.progressbar,
            **options,
        )
    return _tidy(idata, var_names)


#: ``pm.sample``'s own keyword arguments; every other option is a NUTS setting (``nuts={...}``)
_PM_SAMPLE_ARGS = frozenset(
    {
        "cores",
        "progressbar_theme",
        "quiet",
        "step",
        "initvals",
        "init",
        "jitter_max_retries",
        "n_init",
        "trace",
        "discard_tuned_samples",
        "compute_convergence_checks",
        "keep_warning_stat",
        "return_inferencedata",
        "idata_kwargs",
        "callback",
        "mp_ctx",
        "blas_cores",
        "model",
        "backend",
        "compile_kwargs",
        "nuts",
        "var_names",
    }
)


def _pm_sample_options(options: dict[str, Any], nuts_sampler: str, chains: int) -> dict[str, Any]:
    """``pm.sample``'s keyword arguments from the configuration's options.

    ``pm.sample`` takes the NUTS settings of every backend in ``nuts={...}``; the portable names
    of the direct driver are translated: ``max_tree_depth`` (PyMC's ``max_treedepth``, nutpie's
    ``maxdepth``) and ``dense_mass`` (PyMC's ``init="jitter+adapt_full"``, nutpie's
    ``adaptation="low_rank"``). With fewer JAX host devices than chains, numpyro's chains run
    vectorised. nutpie compiles with JAX (``backend="jax"``, JAX's gradient) unless a backend
    is given, and a thread per chain. The end-of-sampling convergence checks are off unless
    asked for (:func:`hierbandit.bayes.diagnose` runs them with named thresholds).
    """
    out = {k: v for k, v in options.items() if k in _PM_SAMPLE_ARGS}
    nuts = dict(out.pop("nuts", None) or {})
    nuts.update({k: v for k, v in options.items() if k not in _PM_SAMPLE_ARGS})
    if nuts_sampler == "pymc":
        if "max_tree_depth" in nuts:
            nuts.setdefault("max_treedepth", nuts.pop("max_tree_depth"))
        if nuts.pop("dense_mass", False):
            out.setdefault("init", "jitter+adapt_full")
    elif nuts_sampler == "nutpie":
        _nutpie_names(nuts)
        # JAX for the log density and its gradient unless a backend is chosen: PyMC's default
        # for nutpie (numba) compiles the collapsed model for minutes (B10)
        compile_kwargs = dict(out.get("compile_kwargs") or {})
        if "backend" not in out and "mode" not in compile_kwargs:
            out["backend"] = "jax"
        if out.get("backend") == "jax" or compile_kwargs.get("mode") == "JAX":
            compile_kwargs.setdefault("gradient_backend", "jax")
            out["compile_kwargs"] = compile_kwargs
        # a thread per chain: ``pm.sample`` counts half the logical CPUs as cores (one on 2-core
        # machines) and would run nutpie's chains one after the other. PyMC's own NUTS keeps
        # ``pm.sample``'s choice: its parallel chains are forked processes, unsafe once JAX runs.
        out.setdefault("cores", min(chains, os.cpu_count() or 1))
    elif nuts_sampler == "numpyro":
        import jax

        if jax.local_device_count() < chains:
            nuts.setdefault("chain_method", "vectorized")
    if nuts:
        out["nuts"] = nuts
    out.setdefault("compute_convergence_checks", False)
    return out


def _nutpie_names(options: dict[str, Any]) -> None:
    """The portable ``dense_mass`` and ``max_tree_depth`` under nutpie's names, in place:
    ``adaptation="low_rank"`` and ``maxdepth`` (on both nutpie routes)."""
    if options.pop("dense_mass", False):
        options.setdefault("adaptation", "low_rank")
    if "max_tree_depth" in options:
        options.setdefault("maxdepth", options.pop("max_tree_depth"))


#: sample statistics under ArviZ's names (nutpie's ``depth``, ``logp``, ``mean_tree_accept``)
_STAT_NAMES = {
    "depth": "tree_depth",
    "logp": "lp",
    "mean_tree_accept": "acceptance_rate",
    "maxdepth_reached": "reached_max_treedepth",
}


def _tidy(idata: Any, var_names: list[str] | None) -> Any:
    """The same result from every route: the posterior holds ``var_names`` (all when ``None``),
    the sample statistics carry ArviZ's names, and those that are Python objects (messages,
    which netCDF cannot store) are dropped, as ``pm.sample`` drops its ``warning`` statistic."""
    import xarray as xr

    post = idata["posterior"].to_dataset()
    if var_names is not None:
        keep = [v for v in post.data_vars if v in var_names]
        if len(keep) < len(post.data_vars):
            idata["posterior"] = xr.DataTree(post[keep])
    stats = idata["sample_stats"].to_dataset()
    rename = {k: v for k, v in _STAT_NAMES.items() if k in stats and v not in stats}
    drop = [k for k, v in stats.data_vars.items() if v.dtype == object]
    if rename or drop:
        idata["sample_stats"] = xr.DataTree(stats.drop_vars(drop).rename(rename))
    return idata


def _sample_numpyro(
    model: pm.Model,
    *,
    draws: int,
    tune: int,
    chains: int,
    target_accept: float,
    random_seed: int,
    progressbar: bool,
    var_names: list[str] | None,
    dense_mass: bool = False,
    max_tree_depth: int = 10,
) -> Any:
    import arviz as az
    import jax
    from numpyro.infer import NUTS

    start = time.perf_counter()
    value_vars = model.value_vars
    names = [v.name for v in value_vars]
    logp_fn, data = _jaxify_logp_with_data(model)
    # host arrays, not ``jnp`` ones: the sampler program takes NumPy inputs directly, and every
    # conversion to a JAX array on the host would compile (and cache) a small program of its own
    data = tuple(np.asarray(v) for v in data)

    # one jitted function: the sampler evaluates the potential at several places of its program
    # (initial state, leapfrog steps), and a jitted callee is traced once and reused
    @jax.jit
    def potential_with(params: dict[str, Any], data: tuple) -> Any:
        return -logp_fn(*[params[n] for n in names], *data)[0]

    def potential(params: dict[str, Any]) -> Any:
        return potential_with(params, data)

    # jittered initial points (PyMC's rule: uniform(−1, 1) in the unconstrained space), checked
    rng = np.random.default_rng(random_seed)
    base = model.initial_point(random_seed=random_seed)
    # models built here have proper priors and log/logit transforms: every jittered point is
    # finite, so they skip compiling a separate check (``hb_meta["finite_init"]``)
    meta = getattr(model, "hb_meta", None) or {}
    check = None if meta.get("finite_init") else jax.jit(potential)
    shapes = {n: tuple(np.shape(base[n])) for n in names}

    def numpyro_model(*data: Any) -> None:
        # the unconstrained values with flat densities; the model's log density is one factor.
        # The data containers enter as arguments (``jit_model_args``), not as constants, so the
        # compiled programs depend only on the shapes and the on-disk cache reuses them.
        import numpyro
        import numpyro.distributions as dist

        vals = {
            n: numpyro.sample(n, dist.ImproperUniform(dist.constraints.real, (), shapes[n]))
            for n in names
        }
        numpyro.factor("logp", -potential_with(vals, data))

    init: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for _ in range(chains):
        for _attempt in range(100):
            point = {n: np.asarray(base[n]) + rng.uniform(-1, 1, np.shape(base[n])) for n in names}
            if check is None or np.isfinite(float(check(point))):
                break
        else:  # pragma: no cover - pathological models
            raise ValueError("could not find a finite initial point in 100 jittered attempts")
        for n in names:
            init[n].append(point[n])
    init_params = {n: np.stack(v) for n, v in init.items()}
    parallel = jax.local_device_count() >= chains
    # an informed starting diagonal of the inverse mass matrix (``hb_meta["inverse_mass"]``:
    # approximate posterior variances per value variable) spares warm-up the long phase of tiny
    # steps when some coordinates are far more concentrated than others; adaptation refines it
    inverse_mass = None
    if "inverse_mass" in meta and not dense_mass:
        guess = meta["inverse_mass"](model)
        # numpyro flattens the position as ``jax.flatten_util.ravel_pytree`` does: the dict's
        # leaves in sorted key order, each raveled in C order
        inverse_mass = np.concatenate(
            [
                np.broadcast_to(np.asarray(guess.get(n, 1.0), float), shapes[n]).ravel()
                for n in sorted(names)
            ]
        )

    def chain_kernel(chain: Any, init: dict[str, Any], data: tuple, inverse_mass: Any) -> Any:
        # numpyro's kernel API with the data (and the data-dependent starting mass matrix) as
        # arguments of the compiled program: its MCMC driver closes over the model arguments,
        # which would bake the data into the program. The chain's key is derived inside the
        # program (split(PRNGKey(seed))[chain]) rather than by separately compiled calls.
        key = jax.random.split(jax.random.PRNGKey(random_seed), chains)[chain]
        kernel = NUTS(
            numpyro_model,
            target_accept_prob=target_accept,
            dense_mass=dense_mass,
            max_tree_depth=max_tree_depth,
            inverse_mass_matrix=inverse_mass,
        )
        return kernel, kernel.init(key, tune, init, data, {})

    def start_chain(chain: Any, init: dict[str, Any], data: tuple, inverse_mass: Any) -> Any:
        return chain_kernel(chain, init, data, inverse_mass)[1]

    def advance_chain(
        state: Any, chain: Any, init: dict[str, Any], data: tuple, inverse_mass: Any
    ) -> Any:
        # ``length`` more steps from ``state``. ``kernel.init`` runs again only to build the
        # kernel's warm-up schedule inside this program (its result is unused, and XLA drops
        # it); the steps past the last one (the final chunk may be longer than what is left)
        # leave the state as it is and are discarded.
        kernel, _ = chain_kernel(chain, init, data, inverse_mass)

        def step(state: Any, _: Any) -> Any:
            state = jax.lax.cond(
                state.i < total, lambda s: kernel.sample(s, data, {}), lambda s: s, state
            )
            fields = {
                "num_steps": state.num_steps,
                "diverging": state.diverging,
                "accept_prob": state.accept_prob,
                "energy": state.energy,
                "potential_energy": state.potential_energy,
                "step_size": state.adapt_state.step_size,
            }
            return state, (state.z, fields)

        return jax.lax.scan(step, state, None, length=length)

    # warm-up and draws run as a few chunks of ``length`` steps, each one call of the same
    # compiled program (compiled once per shape like the rest), so that progress and the time
    # left can be reported between them
    total = tune + draws
    length = -(-total // min(PROGRESS_CHUNKS, total))
    chain_ids = np.arange(chains)  # each chain derives its key in the program
    if parallel:
        starter = jax.pmap(start_chain, in_axes=(0, 0, None, None))
        advancer = jax.pmap(advance_chain, in_axes=(0, 0, 0, None, None))
    else:
        starter = jax.jit(jax.vmap(start_chain, in_axes=(0, 0, None, None)))
        advancer = jax.jit(jax.vmap(advance_chain, in_axes=(0, 0, 0, None, None)))
    chunks = []
    label = f"NUTS, {chains} chain{'s' * (chains > 1)}, steps per chain"
    with ProgressTask(label, total) as progress:
        state = starter(chain_ids, init_params, data, inverse_mass)
        while progress.done < total:
            state, chunk = advancer(state, chain_ids, init_params, data, inverse_mass)
            chunks.append(jax.device_get(chunk))  # waits for the chunk: progress is real
            progress.advance(length)
    raw, extra = jax.tree_util.tree_map(
        lambda *parts: np.concatenate(parts, axis=1)[:, tune:total], *chunks
    )
    sampling_time = time.perf_counter() - start

    # map the unconstrained draws to the stored (constrained / deterministic) variables
    if "constrain" in meta:
        allv = meta["constrain"](model, {n: np.asarray(raw[n]) for n in names})
        posterior = {k: v for k, v in allv.items() if var_names is None or k in var_names}
    else:
        posterior = _constrain_with_jax(model, raw, names, var_names, chains, draws)
    dims = {name: list(d) for name, d in model.named_vars_to_dims.items() if name in posterior}
    coords = {k: np.asarray(v) for k, v in model.coords.items() if v is not None}
    stats = {
        "diverging": np.asarray(extra["diverging"]),
        "n_steps": np.asarray(extra["num_steps"]),
        "tree_depth": np.floor(np.log2(np.asarray(extra["num_steps"]) + 1)).astype(int),
        "acceptance_rate": np.asarray(extra["accept_prob"]),
        "energy": np.asarray(extra["energy"]),
        "lp": -np.asarray(extra["potential_energy"]),
        "step_size": np.asarray(extra["step_size"]),
    }
    idata = az.from_dict({"posterior": posterior, "sample_stats": stats}, coords=coords, dims=dims)
    for group in ("posterior", "sample_stats"):
        idata[group].attrs.update(
            {"inference_library": "numpyro", "sampling_time": sampling_time, "tuning_steps": tune}
        )
    return idata


def _jaxify_logp_with_data(model: pm.Model) -> tuple[Any, list[np.ndarray]]:
    """The model's log density as a JAX function of ``(*values, *data)`` and the data.

    PyMC's own JAX conversion turns data containers (shared variables) into constants, which
    makes every compiled program specific to one data set. Here each data container becomes an
    input of the function instead, so that programs compiled for one log are reused for any log
    of the same shape.
    """
    import pytensor.tensor as pt
    from pymc.sampling.jax import get_jaxified_graph
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.replace import graph_replace
    from pytensor.tensor.random.type import RandomType

    try:
        from pytensor.graph.traversal import graph_inputs
    except ImportError:  # pragma: no cover - older PyTensor
        from pytensor.graph.basic import graph_inputs

    configure_jax_once()  # before the first JAX computation of the process
    logp = model.logp()
    shared = [
        v
        for v in graph_inputs([logp])
        if isinstance(v, SharedVariable) and not isinstance(v.type, RandomType)
    ]
    values = [np.asarray(v.get_value(borrow=True)) for v in shared]
    # static shapes: the compiled program is specific to the shapes, as JAX needs
    inputs = [
        pt.tensor(v.name, dtype=v.dtype, shape=x.shape) for v, x in zip(shared, values, strict=True)
    ]
    if shared:
        logp = graph_replace(logp, dict(zip(shared, inputs, strict=True)), strict=False)
    fn = get_jaxified_graph(inputs=[*model.value_vars, *inputs], outputs=[logp])
    return fn, values


def _sample_nutpie(
    model: pm.Model,
    *,
    draws: int,
    tune: int,
    chains: int,
    target_accept: float,
    random_seed: int,
    progressbar: bool,
    var_names: list[str] | None,
    backend: str = "jax",
    **kwargs: Any,
) -> Any:
    """nutpie's NUTS (Rust, chains in parallel threads) on the model compiled with JAX by default:
    its numba backend takes minutes to compile these models (measured: 102 s for the collapsed
    ebm-synthetic model against 2.7 s with JAX). The portable ``dense_mass`` and
    ``max_tree_depth`` become nutpie's ``adaptation="low_rank"`` and ``maxdepth``."""
    import nutpie

    _nutpie_names(kwargs)
    start = time.perf_counter()
    compiled = nutpie.compile_pymc_model(
        model,
        backend=backend,
        gradient_backend="jax" if backend == "jax" else "pytensor",
    )
    idata = nutpie.sample(
        compiled,
        draws=draws,
        tune=tune,
        chains=chains,
        seed=random_seed,
        target_accept=target_accept,
        progress_bar=progressbar,
        save_warmup=False,
        **kwargs,
    )
    idata = _tidy(idata, var_names)
    for group in ("posterior", "sample_stats"):
        idata[group].attrs.update(
            {
                "inference_library": "nutpie",
                "sampling_time": time.perf_counter() - start,
                "tuning_steps": tune,
            }
        )
    return idata


def _sample_kernel(
    model: pm.Model,
    *,
    draws: int,
    tune: int,
    chains: int,
    target_accept: float,
    random_seed: int,
    progressbar: bool,
    var_names: list[str] | None,
    **kwargs: Any,
) -> Any:
    """nutpie's NUTS on the collapsed model's compiled log density and gradient
    (:mod:`hierbandit.bayes.compiled`): nutpie's Rust sampler calls the kernel as a C function,
    without Python or the GIL, with a thread per chain. PyMC's progress bar for nutpie shows
    the draws and the time left, as with ``pm.sample``. The portable ``dense_mass`` and
    ``max_tree_depth`` become nutpie's ``adaptation="low_rank"`` and ``maxdepth``; other
    options must be ``nutpie.sample``'s (``pm.sample``'s own, such as ``backend``, belong to
    ``driver="pymc"``)."""
    import nutpie
    from pymc.progress_bar import NutpieProgressBarManager

    from hierbandit.bayes.compiled import compile_collapsed

    _nutpie_names(kwargs)
    misplaced = sorted(set(kwargs) & (_PM_SAMPLE_ARGS - {"cores"}))
    if misplaced:
        raise ValueError(
            f"options {misplaced} are pm.sample's: use them with driver='pymc'; "
            "driver='kernel' passes its options to nutpie.sample"
        )
    kwargs.setdefault("cores", min(chains, os.cpu_count() or 1))
    # nutpie's seed as pm.sample derives it: with the same seed both routes start from the
    # same points and run the same random streams (the gradients agree to rounding)
    seed = int(np.random.default_rng(random_seed).spawn(chains)[0].integers(2**30))
    start = time.perf_counter()
    compiled = compile_collapsed(model)
    bar = NutpieProgressBarManager(chains=chains, draws=draws, progressbar=progressbar)
    with bar:
        idata = nutpie.sample(
            compiled,
            draws=draws,
            tune=max(tune, 1),  # nutpie needs a warm-up step (as pm.sample makes it)
            chains=chains,
            seed=seed,
            target_accept=target_accept,
            save_warmup=False,
            progress_bar=False,
            progress_callback=bar.update,
            **kwargs,
        )
    idata = _tidy(idata, var_names)
    for group in ("posterior", "sample_stats"):
        idata[group].attrs.update(
            {
                "inference_library": "nutpie",
                "sampling_time": time.perf_counter() - start,
                "tuning_steps": tune,
                "log_density": "hierbandit.bayes.compiled",
            }
        )
    return idata


def _constrain_with_jax(
    model: pm.Model, raw: dict, names: list[str], var_names: Any, chains: int, draws: int
) -> dict[str, np.ndarray]:
    """Generic map from unconstrained draws to the model's stored variables (one compiled vmap)."""
    import jax
    import jax.numpy as jnp
    from pymc.sampling.jax import get_jaxified_graph

    wanted = [v for v in model.unobserved_value_vars if var_names is None or v.name in var_names]
    to_vars = get_jaxified_graph(inputs=model.value_vars, outputs=wanted)
    flat = [jnp.reshape(raw[n], (chains * draws, *raw[n].shape[2:])) for n in names]
    outs = jax.jit(jax.vmap(lambda *a: to_vars(*a)))(*flat)
    return {
        v.name: np.asarray(o).reshape(chains, draws, *o.shape[1:])
        for v, o in zip(wanted, outs, strict=True)
    }
