"""Exception types of the package.

Only errors a caller may want to catch apart from ``ValueError``/``TypeError`` live here.
"""

from __future__ import annotations

import os

__all__ = ["InvalidFileError"]


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
