"""JAX host-device configuration (no heavy imports, so it can run before JAX starts)."""

from __future__ import annotations

import os

_DEVICE_FLAG = "--xla_force_host_platform_device_count"


def configure_host_devices(n: int | None = None) -> None:
    """Let JAX run MCMC chains in parallel on ``n`` CPU host devices (default: the core count).

    Sets ``XLA_FLAGS`` as ``numpyro.set_host_device_count`` does, unless it already asks for a
    device count. It takes effect only if JAX's backend has not started yet, which is why
    importing :mod:`hierbandit.bayes` calls it.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if _DEVICE_FLAG in flags:
        return
    n = n or os.cpu_count() or 1
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_FLAG}={n}".strip()
