"""Shared test helpers."""

from __future__ import annotations

import os

# One BLAS/OpenMP thread per process, unless the user set a number: `make test` runs two workers
# on two cores, and two OpenBLAS threads in each (spinning while they wait for work) made
# BLAS-heavy tests take several times the CPU (test_movielens_construction: 24 s of CPU with two
# threads, 6 s with one). Set before NumPy loads; the workers and the interpreters the tests
# start inherit it.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import copy  # noqa: E402
import threading  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from hierbandit._numba_cache import configure_numba_cache  # noqa: E402

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
