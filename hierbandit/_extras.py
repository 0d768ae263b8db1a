"""The optional dependencies: import one, or say which extra to install (``docs/install.md``).

The core (NumPy, SciPy, pandas, xarray, numba, h5netcdf, h5py) serves the online and offline
policies. Everything else comes with an extra, and every import of it goes through
:func:`require` (or :func:`check_installed`, which finds without importing), so that a missing
one fails with a :class:`~hierbandit.errors.MissingExtraError` naming the extra::

    KMeans = require("sklearn.cluster", "data", "X-means clustering").KMeans
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from hierbandit.errors import MissingExtraError

__all__ = ["EXTRAS", "check_installed", "missing_extra", "require"]

#: extra -> what it enables (the table of docs/install.md)
EXTRAS = {
    "bayes": "fitted priors, full Bayes with PyMC, MCMC diagnostics (hierbandit.bayes)",
    "data": "parquet logs, the MovieLens log, scikit-learn's data sets and clusterings",
    "experiments": "the paper reproductions, their figures, Dask sweeps, the hierbandit command",
    "serve": "the decision service: hierbandit serve, its HTTP API and Parquet event log",
}

#: top-level import name -> the name pip installs it under, where they differ
_PIP_NAMES = {
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "dask": "dask[distributed]",
    "distributed": "dask[distributed]",
}


def missing_extra(module: str, extra: str, purpose: str) -> MissingExtraError:
    """The error for ``module`` missing, ``purpose`` needing it and ``extra`` providing it."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; expected one of {sorted(EXTRAS)}")
    top = module.partition(".")[0]
    pip_name = _PIP_NAMES.get(top, top)
    return MissingExtraError(
        f"{purpose} needs {pip_name}, which comes with the {extra!r} extra: "
        f"pip install 'hierbandit[{extra}]'",
        module=module,
        extra=extra,
    )


def _is_missing(exc: ImportError, module: str) -> bool:
    """Whether ``exc`` says ``module`` (or a package above it) is absent, rather than that an
    installed module failed on an import of its own."""
    if exc.name is None:  # a package's own "not installed" message (dask.distributed's)
        return True
    parts = module.split(".")
    return exc.name in {".".join(parts[: i + 1]) for i in range(len(parts))}


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` and return it, or raise :class:`~hierbandit.errors.MissingExtraError`
    naming ``extra`` when it is not installed.

    Parameters
    ----------
    module : str
        The dotted import name (``"sklearn.cluster"``, ``"matplotlib.pyplot"``).
    extra : str
        The extra of ``pyproject.toml`` that installs it (``"bayes"``, ``"data"``,
        ``"experiments"``).
    purpose : str
        What needs it, the start of the message (``"X-means clustering"``).

    Raises
    ------
    MissingExtraError
        ``module`` or a package above it is not installed. An installed module that fails on
        an import of its own raises that ImportError unchanged.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if not _is_missing(exc, module):
            raise
        raise missing_extra(module, extra, purpose) from exc


def check_installed(module: str, extra: str, purpose: str) -> None:
    """Like :func:`require` for a top-level ``module``, without importing it (a look-up only)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent, or an entry of None in sys.modules
        found = False
    if not found:
        raise missing_extra(module, extra, purpose)
