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

#: the longest tests of the default suite (``--durations`` of whole runs, longest first), all over
#: 10 s on a busy two-core machine. They run first:
#: with ``-n 2 --dist worksteal`` (pyproject.toml) one worker starts with them while the other
#: takes the short tests, and neither ends the run alone in a long test while the other idles.
#: A test missing from the collection (renamed, deselected) is simply not moved.
LONGEST_FIRST = (
    "tests/test_docs.py::test_site_builds_without_warnings",
    "tests/experiments/test_experiment_interface.py::test_process_pool_and_dask_give_identical_results",
    "tests/experiments/test_quickstart.py::test_run_quickstart_smoke",
    "tests/reliability/test_hostile_files.py::test_resealed_damage_never_crashes_hangs_or_escapes",
    "tests/architecture/test_architecture.py::test_the_import_contracts_hold",
    "tests/test_checkpoint.py::test_every_online_policy_survives_a_crash",
    "tests/reliability/test_hostile_files.py::test_code_execution_gadgets_run_nothing",
    "tests/cli/test_numba_cache_command.py::test_a_command_points_numba_at_the_keyed_folder_and_compiles_into_it",
    "tests/reliability/test_hostile_files.py::test_swapped_and_damaged_sweep_cells_are_recomputed",
    "tests/experiments/test_experiment_interface.py::test_killed_sweep_resumes_without_recomputing_finished_cells",
    "tests/bayes/test_sampling_cache.py::test_compilation_cache_location_and_switch",
    "tests/test_numba_cache.py::test_a_changed_callee_is_recompiled_with_the_keyed_folder",
    "tests/test_checkpoint.py::test_checkpoint_survives_a_crash_mid_run",
    "tests/architecture/test_architecture.py::test_importing_the_package_loads_no_heavy_library_and_changes_no_setting",
    "tests/bayes/test_sampling_cache.py::test_compiled_log_density_takes_the_data_as_arguments[batched]",
    "tests/experiments/test_quickstart.py::test_cli_fit_prior_mcmc_and_default_features",
    "tests/experiments/test_quickstart.py::test_cli_build_models_round_trip",
    "tests/reliability/test_hostile_files.py::test_allocation_bombs_are_refused_without_allocating",
    "tests/bayes/test_fit.py::test_mcmc_collapsed_small",
    "tests/reliability/test_hostile_files.py::test_out_of_range_sizes_are_refused_without_corrupting_memory",
    "tests/experiments/test_ebm_reproduction.py::test_figure1_data_poor_acceptance",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move :data:`LONGEST_FIRST` to the front, in that order; every other test keeps its place."""
    rank = {nodeid: i for i, nodeid in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))


def snapshot(obj: Any) -> Any:
    """A deep, comparable copy of an object's state (arrays, scalars, RNG states; not the
    attributes a checkpoint leaves out, ``_checkpoint_transient``)."""
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
        # what a checkpoint leaves out (locks, caches rebuilt on use) is not state
        transient = getattr(type(obj), "_checkpoint_transient", {})
        state = {k: v for k, v in vars(obj).items() if k not in transient}
        return (type(obj).__name__, snapshot(state))
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
