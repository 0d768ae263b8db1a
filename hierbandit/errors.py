"""Exception types of the package.

Only errors a caller may want to catch apart from ``ValueError``/``TypeError`` live here.
"""

from __future__ import annotations

import os

__all__ = ["InvalidFileError", "MissingExtraError"]


class InvalidFileError(ValueError):
    """A file the package was asked to read is not a valid file of the expected kind.

    Raised by every loader (checkpoints, priors, sweep cells, netCDF logs) for any defect of
    the file itself: not a hierbandit file, written by an incompatible version, truncated,
    altered (its checksum fails), a container the HDF5 library cannot walk within a deadline,
    variables that are undeclared, too large or of the wrong shape or dtype, non-finite or
    inconsistent state, or a class outside the allow-list. Nothing from the file has been used
    when it is raised. It subclasses :class:`ValueError`, which loaders documented before.

    Attributes
    ----------
    path : str
        The file, as given.
    reason : str
        What is wrong with it.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class MissingExtraError(ImportError):
    """An optional dependency is not installed: the message names the extra that brings it.

    The core of the package (the online and offline policies) needs NumPy, SciPy, pandas,
    xarray, numba, h5netcdf and h5py only. The Bayesian layer, the real data sets, the
    reproductions and the command need an extra (``docs/install.md``), and an import that
    needs a missing one raises this error, for example::

        fit_prior needs pymc, which comes with the 'bayes' extra: pip install 'hierbandit[bayes]'

    It subclasses :class:`ImportError`, which a missing module raised before.

    Attributes
    ----------
    module : str
        The missing module, by its import name (``"sklearn.cluster"``).
    extra : str
        The extra that installs it (``"bayes"``, ``"data"`` or ``"experiments"``).
    """

    def __init__(self, message: str, *, module: str, extra: str) -> None:
        super().__init__(message, name=module)
        self.module = module
        self.extra = extra
