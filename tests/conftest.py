"""Shared test helpers."""

from __future__ import annotations

import copy
import os
import threading
from typing import Any

import numpy as np
import pytest

from hierbandit._numba_cache import configure_numba_cache

# the test run keeps compiled kernels in the folder keyed by their sources, as the command does,
# and so do the interpreters the tests start (subprocesses, process pools): they inherit it
_NUMBA_FOLDER = configure_numba_cache()
if _NUMBA_FOLDER is not None:
    os.environ["NUMBA_CACHE_DIR"] = str(_NUMBA_FOLDER)

_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def snapshot(obj: Any) -> Any:
    """A deep, comparable copy of an object's state (arrays, scalars, RNG states)."""
    if isinstance(obj, np.random.Generator):
        return ("Generator", copy.deepcopy(obj.bit_generator.state))
    if isinstance(obj, _LOCK_TYPES):
        return ("lock",)  # synchronisation, not state
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.shape, obj.tobytes())
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(snapshot(v) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return (type(obj).__name__, snapshot(vars(obj)))
    return copy.deepcopy(obj)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)


@pytest.fixture(scope="session")
def cascade_env():
    """The small cascade environment of the click-log and cascade-prior tests."""
    from hierbandit.cascade.env import CascadeEnv

    return CascadeEnv.preset("mccb-bayes", n_users=10, rng=0)


@pytest.fixture(scope="session")
def cascade_frame(cascade_env):
    """A 40-episode click log of :func:`cascade_env`, as a DataFrame."""
    return cascade_env.simulate_log(40, rng=1)
