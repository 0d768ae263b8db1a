"""The base of the fitted prior artifacts: one file layout, one loader, one equality.

:class:`~hierbandit.bayes.prior.HierarchicalPrior` (the ebm prior) and
:class:`~hierbandit.bayes.cascade.CascadePrior` (the cascade prior) are both an
:class:`xarray.Dataset` of point values whose attributes record the provenance of the fit, plus
the ArviZ :class:`~arviz.InferenceData` of a full-Bayes fit. :class:`PriorArtifact` owns what they
share: the file (``docs/bayes.md``, Persistence), the loader, the provenance and equality.

This module does not import PyMC (ArviZ only when a file holds draws).
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any, ClassVar

import xarray as xr

from hierbandit._container import read_netcdf
from hierbandit._io import decode_attrs, netcdf_attrs, write_sealed_netcdf
from hierbandit._version import __version__
from hierbandit.errors import InvalidFileError

__all__ = ["PriorArtifact", "prior_tree", "provenance_attrs", "read_prior_tree"]


def prior_tree(dataset: xr.Dataset, idata: Any) -> xr.DataTree:
    """A prior's file layout: its variables at the root, the InferenceData under ``idata``."""
    root = dataset.copy()
    root.attrs = netcdf_attrs(dict(dataset.attrs))
    children: dict[str, xr.Dataset] = {"/": root}
    if idata is not None:
        for group in idata.groups():
            ds = idata[group].copy()
            ds.attrs = netcdf_attrs(dict(ds.attrs))
            children[f"/idata/{group}"] = ds
    return xr.DataTree.from_dict(children)


def read_prior_tree(tree: xr.DataTree) -> tuple[xr.Dataset, Any]:
    """Inverse of :func:`prior_tree`: the root Dataset and the InferenceData (or ``None``)."""
    unknown = set(tree.children) - {"idata"}
    if unknown:
        raise ValueError(f"unexpected groups {sorted(unknown)} in a prior")
    root = tree.to_dataset().load()
    root.attrs = decode_attrs(dict(root.attrs))
    idata = None
    if "idata" in tree.children:
        import arviz as az

        groups = {}
        for name, node in tree["idata"].children.items():
            if node.children:
                raise ValueError(f"unexpected groups under idata/{name} in a prior")
            ds = _group_dataset(node)
            ds.attrs = decode_attrs(dict(ds.attrs))
            groups[name] = ds
        idata = az.InferenceData(**groups)
    return root, idata


def _group_dataset(node: xr.DataTree) -> xr.Dataset:
    """A stored InferenceData group with the coordinates it uses, including those the DataTree
    stored once at the root (DataTree does not repeat coordinates its children inherit)."""
    own = node.to_dataset(inherit=False)
    full = node.to_dataset(inherit=True)
    used = {dim for var in own.data_vars.values() for dim in var.dims}
    extra = {
        name: full[name]
        for name in full.coords
        if name not in own.coords and set(full[name].dims) <= used
    }
    return own.assign_coords(extra).load()


def provenance_attrs(method: str, log: Any, **fields: Any) -> dict[str, Any]:
    """The provenance every fitted prior records, in this order: ``method``,
    ``hierbandit_version``, ``created`` (UTC, to the second), the log's ``data_hash``,
    ``data_source`` and ``n_rows``, then ``fields`` (what is particular to the fit)."""
    return {
        "method": method,
        "hierbandit_version": __version__,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "data_hash": log.data_hash,
        "data_source": log.source,
        "n_rows": log.n_rows,
        **fields,
    }


class PriorArtifact:
    """A fitted prior: a Dataset of point values with the provenance in its attributes, and the
    InferenceData of a full-Bayes fit.

    **File.** :meth:`save` writes one sealed netCDF file atomically (:mod:`hierbandit._container`;
    never pickle): the Dataset at the root group, every InferenceData group under ``/idata``
    (:func:`prior_tree`). :meth:`load` treats the file as untrusted input: the seal is verified
    and the container walked with a deadline before it is parsed, and the subclass validates
    every array; any defect raises :class:`~hierbandit.errors.InvalidFileError` naming the file.
    Each subclass names its sealed-file ``kind``, so one kind of prior is never read as another.

    **Equality.** An artifact is its content. Two are equal when they are of the same class, their
    Datasets are :meth:`xarray.Dataset.identical` (values, dims, coordinates and attributes: the
    provenance) and they hold the same draws: both none, or the same InferenceData groups, each
    identical. Two fits from one log that differ only in their MCMC draws (another seed) are
    therefore different artifacts, as their files are. A round trip through :meth:`save` and
    :meth:`load` gives an equal artifact. Artifacts are mutable objects, so they are unhashable.

    Subclasses set ``kind`` and ``label`` (used in messages) and implement :meth:`_validate`.
    """

    #: the sealed-file kind (:mod:`hierbandit._container`)
    kind: ClassVar[str]
    #: what the file is called in messages ("invalid {label} (...)")
    label: ClassVar[str]

    def __init__(self, dataset: xr.Dataset, idata: Any = None) -> None:
        if not isinstance(dataset, xr.Dataset):
            raise TypeError("dataset must be an xarray.Dataset")
        self._validate(dataset)
        self.dataset = dataset
        self.idata = idata

    def _validate(self, dataset: xr.Dataset) -> None:
        """Raise ``ValueError`` or ``TypeError`` unless ``dataset`` is a valid prior."""
        raise NotImplementedError

    # ------------------------------------------------------------------ provenance
    @property
    def method(self) -> str:
        """How the prior was fitted (``"unknown"`` when not recorded)."""
        return str(self.dataset.attrs.get("method", "unknown"))

    @property
    def provenance(self) -> dict[str, Any]:
        """Where the prior came from: method, configuration, data hash, package version…"""
        return decode_attrs(dict(self.dataset.attrs))

    # ------------------------------------------------------------------ equality
    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, PriorArtifact)
        if not self.dataset.identical(other.dataset):
            return False
        if self.idata is None or other.idata is None:
            return self.idata is None and other.idata is None
        groups = set(self.idata.groups())
        return groups == set(other.idata.groups()) and all(
            self.idata[g].identical(other.idata[g]) for g in groups
        )

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ persistence
    def _tree(self) -> xr.DataTree:
        return prior_tree(self.dataset, self.idata)

    @classmethod
    def _from_tree(cls, tree: xr.DataTree) -> PriorArtifact:
        return cls(*read_prior_tree(tree))

    @classmethod
    def _from_file(cls, tree: xr.DataTree, path: str | os.PathLike[str]) -> Any:
        """:meth:`_from_tree`, any defect reported as an :class:`InvalidFileError` of ``path``."""
        try:
            return cls._from_tree(tree)
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidFileError(path, f"invalid {cls.label} ({exc})") from None

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the prior to a sealed netCDF file, atomically (never a half-written file at
        ``path``; :mod:`hierbandit._container`). ``path`` must end in ``.nc``. Returns it."""
        path = Path(path)
        if path.suffix != ".nc":
            raise ValueError(f"path must end in .nc, got {path.name!r}")
        return write_sealed_netcdf(self._tree(), path, self.kind)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Any:
        """Read a prior written by :meth:`save` (nothing in it can run code).

        Raises
        ------
        FileNotFoundError
            If there is no file at ``path``.
        hierbandit.errors.InvalidFileError
            (a ``ValueError``) if the file is not a valid prior of this class, naming the file
            and why.
        """
        return cls._from_file(read_netcdf(path, cls.kind), path)
