"""xarray opens the package's sealed files directly: ``xr.open_datatree("prior.nc")``.

A sealed file (:mod:`hierbandit._container`) starts with the package's 512-byte header, not the
HDF5 signature, so xarray's own netCDF backends do not recognise it without ``engine=``. This
backend, registered under xarray's ``xarray.backends`` entry point as ``"hierbandit"``, claims
the files that start with the seal's magic bytes and reads them the way the package does
(:func:`hierbandit._container.read_netcdf`): the seal is verified and the payload walked with a
deadline before it is parsed, so opening a file from someone else through xarray or ArviZ
(``az.from_netcdf``) is as safe as loading it with the package (``docs/bayes.md``,
Persistence). Everything is read into memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import xarray as xr
from xarray.backends import BackendEntrypoint

from hierbandit._container import MAGIC, read_netcdf

__all__ = ["SealedNetCDFBackend"]


def _drop(ds: xr.Dataset, drop_variables: str | Iterable[str] | None) -> xr.Dataset:
    if drop_variables is None:
        return ds
    names = [drop_variables] if isinstance(drop_variables, str) else list(drop_variables)
    return ds.drop_vars([n for n in names if n in ds.variables])


class SealedNetCDFBackend(BackendEntrypoint):
    """xarray backend for hierbandit's sealed netCDF files (checkpoints, priors, sweep cells)."""

    description = "hierbandit's sealed netCDF files, verified before they are parsed"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "group")
    supports_groups = True

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, str | os.PathLike):
            return False
        try:
            with open(filename_or_obj, "rb") as fh:
                return fh.read(len(MAGIC)) == MAGIC
        except OSError:
            return False

    def open_datatree(
        self, filename_or_obj: Any, *, drop_variables: str | Iterable[str] | None = None, **_: Any
    ) -> xr.DataTree:
        groups = self.open_groups_as_dict(filename_or_obj, drop_variables=drop_variables)
        return xr.DataTree.from_dict(groups)

    def open_groups_as_dict(
        self, filename_or_obj: Any, *, drop_variables: str | Iterable[str] | None = None, **_: Any
    ) -> dict[str, xr.Dataset]:
        tree = read_netcdf(filename_or_obj, None)
        return {
            node.path: _drop(node.to_dataset(inherit=False), drop_variables)
            for node in tree.subtree
        }

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        **_: Any,
    ) -> xr.Dataset:
        tree = read_netcdf(filename_or_obj, None)
        node = tree[group] if group else tree
        return _drop(node.to_dataset(), drop_variables)
