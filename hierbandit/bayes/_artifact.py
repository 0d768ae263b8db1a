"""The base of the fitted prior artifacts: one file layout, one loader, one equality.

:class:`~hierbandit.bayes.prior.HierarchicalPrior` (the ebm prior) and
:class:`~hierbandit.bayes.cascade.CascadePrior` (the cascade prior) are both an
:class:`xarray.Dataset` of point values whose attributes record the provenance of the fit, plus,
for a full-Bayes fit, the ArviZ draws: an :class:`xarray.DataTree` whose children are the ArviZ
groups (``posterior``, ``sample_stats``, ``observed_data``, ``log_likelihood``…).
:class:`PriorArtifact` owns what they share: the file (``docs/bayes.md``, Persistence), the
loader, the provenance and equality.

This module imports neither PyMC nor ArviZ.
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

__all__ = [
    "ARVIZ_GROUPS",
    "PriorArtifact",
    "draws_tree",
    "prior_tree",
    "provenance_attrs",
    "read_prior_tree",
]

#: the groups of ArviZ's data schema: the only children a prior's file (and ``prior.idata``) may
#: have; anything else in a file is refused
ARVIZ_GROUPS = (
    "posterior",
    "posterior_predictive",
    "predictions",
    "log_likelihood",
    "log_prior",
    "sample_stats",
    "observed_data",
    "constant_data",
    "predictions_constant_data",
    "prior",
    "prior_predictive",
    "sample_stats_prior",
    "unconstrained_posterior",
    "unconstrained_prior",
    "warmup_posterior",
    "warmup_posterior_predictive",
    "warmup_predictions",
    "warmup_sample_stats",
    "warmup_log_likelihood",
    "warmup_log_prior",
)

#: the group under which files written before the move to ArviZ 1 kept the ArviZ groups
#: (``/idata/posterior``…); still read, never written
LEGACY_GROUP = "idata"


def _group_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attributes of an ArviZ group as netCDF stores them: as :func:`netcdf_attrs`, except that a
    list of two or more strings (ArviZ's ``sample_dims``) stays a native string array, so that
    ArviZ reads the group straight from the file (h5netcdf gives back a one-item list as a plain
    string: such a list is JSON-encoded like other values)."""
    native = {
        k: list(v)
        for k, v in attrs.items()
        if isinstance(v, list | tuple) and len(v) > 1 and all(isinstance(x, str) for x in v)
    }
    out = netcdf_attrs({k: v for k, v in attrs.items() if k not in native})
    return {k: native.get(k, out.get(k)) for k in attrs}


def draws_tree(groups: dict[str, xr.Dataset]) -> xr.DataTree:
    """The draws of a fit as ArviZ 1 holds them: a DataTree with one child per ArviZ group."""
    unknown = sorted(set(groups) - set(ARVIZ_GROUPS))
    if unknown:
        raise ValueError(f"unknown ArviZ groups {unknown}")
    return xr.DataTree.from_dict({name: groups[name] for name in ARVIZ_GROUPS if name in groups})


def _groups(idata: xr.DataTree) -> dict[str, xr.Dataset]:
    """The ArviZ groups of ``idata`` as Datasets (coordinates inherited from its root included)."""
    return {name: node.to_dataset(inherit=True) for name, node in idata.children.items()}


def check_idata(idata: Any) -> None:
    """Raise ``TypeError`` or ``ValueError`` unless ``idata`` is ``None`` or a DataTree whose
    children are ArviZ groups, each a plain Dataset (no groups below it)."""
    if idata is None:
        return
    if not isinstance(idata, xr.DataTree):
        raise TypeError(
            f"idata must be an xarray.DataTree of ArviZ groups (ArviZ 1), got {type(idata).__name__}"
        )
    unknown = sorted(set(idata.children) - set(ARVIZ_GROUPS))
    if unknown:
        raise ValueError(f"idata holds groups {unknown} that are not ArviZ groups")
    for name, node in idata.children.items():
        if node.children:
            raise ValueError(f"idata group {name!r} holds groups of its own")


def prior_tree(dataset: xr.Dataset, idata: xr.DataTree | None) -> xr.DataTree:
    """A prior's file layout: its variables at the root, every ArviZ group of ``idata`` a
    top-level group (``/posterior``, ``/sample_stats``, ``/log_likelihood``…), so that
    ``xarray.open_datatree`` and ArviZ's loaders give the groups directly.

    The groups inherit the root's coordinates (``arm``, ``feature``…, or ``param``), so a group
    that has one of them must hold the same values; DataTree refuses the tree otherwise
    (``ValueError``)."""
    root = dataset.copy()
    root.attrs = netcdf_attrs(dict(dataset.attrs))
    children: dict[str, xr.Dataset] = {"/": root}
    if idata is not None:
        check_idata(idata)
        for name, ds in _groups(idata).items():
            _check_shared_coords(dataset, ds, name)
            ds = ds.copy()
            ds.attrs = _group_attrs(dict(ds.attrs))
            children[f"/{name}"] = ds
    try:
        return xr.DataTree.from_dict(children)
    except ValueError as exc:
        raise ValueError(
            f"the draws' coordinates disagree with the prior's own ({exc})".replace("\n", " ")
        ) from None


def _check_shared_coords(dataset: xr.Dataset, group: xr.Dataset, name: str) -> None:
    """Refuse a group whose dimension shared with the prior's Dataset differs in length or
    coordinate values (the file keeps the Dataset's, which the group inherits)."""
    for dim in set(group.dims) & set(dataset.dims):
        if group.sizes[dim] != dataset.sizes[dim]:
            raise ValueError(
                f"idata group {name!r} has {group.sizes[dim]} {dim!r} entries, the prior "
                f"{dataset.sizes[dim]}"
            )
        if dim in group.indexes and dim in dataset.indexes:
            mine, theirs = group.indexes[dim], dataset.indexes[dim]
            if not mine.equals(theirs):
                raise ValueError(
                    f"idata group {name!r} labels {dim!r} {list(mine)[:6]}, the prior "
                    f"{list(theirs)[:6]}: the draws' coordinates must be the prior's"
                )


def read_prior_tree(tree: xr.DataTree) -> tuple[xr.Dataset, xr.DataTree | None]:
    """Inverse of :func:`prior_tree`: the root Dataset and the draws (``None`` without).

    Reads both layouts: the ArviZ groups at the top level (this version) and under ``/idata``
    (files written before ArviZ 1). Anything else is refused with a ``ValueError`` naming it:
    a group that is not an ArviZ group, groups below a group, the two layouts mixed, variables
    in ``/idata``.
    """
    names = set(tree.children)
    if LEGACY_GROUP in names:
        if names != {LEGACY_GROUP}:
            raise ValueError(
                f"unexpected groups {sorted(names - {LEGACY_GROUP})} beside /idata in a prior"
            )
        holder = tree[LEGACY_GROUP]
        if holder.to_dataset(inherit=False).variables:
            raise ValueError("unexpected variables in the prior's /idata group")
        where = "/idata/"
    else:
        holder = tree
        where = "/"
    unknown = sorted(set(holder.children) - set(ARVIZ_GROUPS))
    if unknown:
        raise ValueError(
            f"unexpected groups {[where + u for u in unknown]} in a prior (only the prior's "
            f"variables at the root and ArviZ groups: {', '.join(ARVIZ_GROUPS)})"
        )
    root = tree.to_dataset(inherit=False).load()
    root.attrs = decode_attrs(dict(root.attrs))
    if not holder.children:
        return root, None
    groups = {}
    for name, node in holder.children.items():
        if node.children:
            raise ValueError(f"unexpected groups under {where}{name} in a prior")
        ds = _group_dataset(node)
        ds.attrs = decode_attrs(dict(ds.attrs))
        groups[name] = ds
    return root, draws_tree(groups)


def _group_dataset(node: xr.DataTree) -> xr.Dataset:
    """A stored ArviZ group with the coordinates it uses, including those the DataTree
    stored once at the root (DataTree does not repeat coordinates its children inherit)."""
    own = node.to_dataset(inherit=False)
    full = node.to_dataset(inherit=True)
    used = {dim for var in own.variables.values() for dim in var.dims}
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
    draws of a full-Bayes fit.

    **Draws.** ``idata`` is ``None`` or an :class:`xarray.DataTree` whose children are ArviZ
    groups (:data:`ARVIZ_GROUPS`), as ArviZ 1 returns them. Its coordinates must agree with the
    Dataset's where they share a name (checked here): the file stores such a coordinate once.

    **File.** :meth:`save` writes one sealed netCDF file atomically (:mod:`hierbandit._container`;
    never pickle): the Dataset at the root group and every ArviZ group as a top-level group
    (:func:`prior_tree`), so that ``xarray.open_datatree(path, engine="h5netcdf")`` and
    ``arviz.from_netcdf`` read the draws as they are. :meth:`load` treats the file as untrusted
    input: the seal is verified and the container walked with a deadline before it is parsed,
    groups that are not ArviZ groups are refused, and the subclass validates every array of the
    Dataset; any defect raises :class:`~hierbandit.errors.InvalidFileError` naming the file. Files
    of the earlier layout (the groups under ``/idata``) load too. Each subclass names its
    sealed-file ``kind``, so one kind of prior is never read as another.

    **Equality.** An artifact is its content. Two are equal when they are of the same class, their
    Datasets are :meth:`xarray.Dataset.identical` (values, dims, coordinates and attributes: the
    provenance) and they hold the same draws: both none, or the same ArviZ groups, each
    identical. Two fits from one log that differ only in their MCMC draws (another seed) are
    therefore different artifacts, as their files are. A round trip through :meth:`save` and
    :meth:`load` gives an equal artifact. Artifacts are mutable objects, so they are unhashable.

    Subclasses set ``kind`` and ``label`` (used in messages) and implement :meth:`_validate`.
    """

    #: the sealed-file kind (:mod:`hierbandit._container`)
    kind: ClassVar[str]
    #: what the file is called in messages ("invalid {label} (...)")
    label: ClassVar[str]

    def __init__(self, dataset: xr.Dataset, idata: xr.DataTree | None = None) -> None:
        if not isinstance(dataset, xr.Dataset):
            raise TypeError("dataset must be an xarray.Dataset")
        self._validate(dataset)
        if idata is not None:
            prior_tree(dataset, idata)  # the groups are ArviZ groups, the coordinates agree
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
        mine, theirs = _groups(self.idata), _groups(other.idata)
        return mine.keys() == theirs.keys() and all(mine[g].identical(theirs[g]) for g in mine)

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
