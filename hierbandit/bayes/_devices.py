"""JAX configuration: host devices and the on-disk compilation cache (no heavy imports, so it
can run before JAX starts).

Importing :mod:`hierbandit.bayes` changes no process-wide setting. The first full-Bayes sampler
run of a process calls both functions (:func:`hierbandit.bayes.sampling.sample`), unless JAX has
already started or the user configured them; users and the command may call them earlier.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

_DEVICE_FLAG = "--xla_force_host_platform_device_count"

logger = logging.getLogger(__name__)


def configure_host_devices(n: int | None = None) -> None:
    """Let JAX run MCMC chains in parallel on ``n`` CPU host devices (default: the core count).

    Sets ``XLA_FLAGS`` as ``numpyro.set_host_device_count`` does, unless it already asks for a
    device count. It takes effect only if JAX's backend has not started yet, which is why the
    first sampler run calls it before anything starts JAX; call it yourself to choose ``n``.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if _DEVICE_FLAG in flags:
        return
    n = n or os.cpu_count() or 1
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_FLAG}={n}".strip()


#: ``HIERBANDIT_JAX_CACHE`` values that turn the on-disk compilation cache off
_OFF = ("0", "off", "false", "no", "none")


def configure_compilation_cache(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Keep the programs JAX compiles for NUTS on disk, so later fits skip XLA compilation.

    A full-Bayes fit compiles its model's log density, gradient and sampler (several seconds);
    the compiled programs depend only on the model's shapes, so every later fit of a model of
    the same shape, in any process, reuses them. The folder is ``path``, else the environment
    variable ``HIERBANDIT_JAX_CACHE``, else ``$XDG_CACHE_HOME/hierbandit/jax`` (by default
    ``~/.cache/hierbandit/jax``). ``HIERBANDIT_JAX_CACHE=0`` (or ``off``) disables it, and a
    ``JAX_COMPILATION_CACHE_DIR`` set by the user wins. The first sampler run of a process calls
    this unless a cache folder is already configured. Returns the folder in use, or ``None``
    when the cache is off.
    """
    if path is None:
        setting = os.environ.get("HIERBANDIT_JAX_CACHE", "").strip()
        if setting.lower() in _OFF:
            return None
        if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
            return Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
        try:
            base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
            path = setting or str(Path(base) / "hierbandit" / "jax")
            folder = Path(path).expanduser()
        except RuntimeError:  # no home directory to be found: run without the cache
            return None
    else:
        folder = Path(path).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # read-only home: run without the cache
        return None
    options = {
        "jax_compilation_cache_dir": str(folder),
        # cache every program (the defaults skip those compiled in under a second)
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }
    if "jax" in sys.modules:
        import jax

        for key, value in options.items():
            jax.config.update(key, value)
    else:
        for key, value in options.items():
            os.environ[key.upper()] = str(value)
    return folder


def jax_started() -> bool:
    """Whether JAX's backend has started in this process (then ``XLA_FLAGS`` no longer applies)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is None:
        return False
    started = getattr(bridge, "backends_are_initialized", None)
    if started is not None:
        return bool(started())
    return bool(getattr(bridge, "_backends", None))  # pragma: no cover - older JAX


def cache_configured() -> bool:
    """Whether a compilation-cache folder is set in JAX's configuration (by the user or by
    :func:`configure_compilation_cache`) or by the environment."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return True
    if "jax" in sys.modules:
        return bool(sys.modules["jax"].config.jax_compilation_cache_dir)
    return False


_jax_configured = False


def configure_jax_once() -> None:
    """Before the first sampler run of the process: JAX host devices (one per core) and the
    compilation cache, each unless the user set it, and only while JAX has not started (its
    backend reads ``XLA_FLAGS`` once, when it starts). Later calls do nothing."""
    global _jax_configured
    if _jax_configured:
        return
    _jax_configured = True
    if jax_started():
        logger.debug("JAX has started: host devices and compilation cache left as they are")
        return
    configure_host_devices()
    if not cache_configured():
        folder = configure_compilation_cache()
        logger.debug("JAX compilation cache: %s", folder if folder is not None else "off")
