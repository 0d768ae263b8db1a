"""A fitted hierarchical prior: per-arm shared mean (with its uncertainty), Σ_k and σ²_k.

:class:`HierarchicalPrior` is what :func:`hierbandit.bayes.fit_prior` returns, what
``EbmTS(..., prior=prior)`` warm-starts from, and what ``models/`` stores. It holds an
:class:`xarray.Dataset` with named dims (arm, feature, feature_), the provenance of the fit, and
for full-Bayes fits the draws as ArviZ 1 holds them (``prior.idata``, an :class:`xarray.DataTree`
of ArviZ groups).

Files are netCDF only (never pickle): the prior's variables at the root group, the ArviZ
groups as top-level groups (``/posterior``, ``/log_likelihood``…; files of the earlier layout,
with them under ``/idata``, load too), sealed with their size and SHA-256
(:mod:`hierbandit._container`). :meth:`HierarchicalPrior.save` writes to a temporary file in the
same folder and atomically renames it, so an interrupted save leaves the previous file intact;
:meth:`HierarchicalPrior.load` treats the file as untrusted input. Saving, loading, provenance and
equality are those of every fitted prior (:class:`~hierbandit.bayes._artifact.PriorArtifact`;
``docs/bayes.md``, Persistence). This module does not import PyMC.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import xarray as xr

from hierbandit._container import read_netcdf
from hierbandit.bayes._artifact import PriorArtifact, prior_tree, read_prior_tree
from hierbandit.data.log import check_id_labels

__all__ = ["HierarchicalPrior", "load_prior", "prior_tree", "read_prior_tree", "upgrade_prior"]

#: the sealed-file kind of a prior (:mod:`hierbandit._container`)
KIND = "prior"

_REQUIRED = {
    "shared_mean": ("arm", "feature"),
    "shared_cov": ("arm", "feature", "feature_"),
    "Sigma": ("arm", "feature", "feature_"),
    "sigma2": ("arm",),
}


def _check_psd(mats: np.ndarray, name: str) -> None:
    """Refuse a stack of matrices that is not symmetric positive semi-definite (relative to
    its scale: eigenvalues ≥ −1e-8·max|entry|, as round-off of a PSD fit allows)."""
    if not np.allclose(mats, np.swapaxes(mats, -1, -2), rtol=1e-10, atol=0.0):
        raise ValueError(f"{name} must be symmetric")
    if mats.size:
        sym = 0.5 * (mats + np.swapaxes(mats, -1, -2))
        scale = np.abs(sym).max(axis=(-1, -2))
        low = np.linalg.eigvalsh(sym).min(axis=-1)
        if np.any(low < -1e-8 * scale):
            raise ValueError(f"{name} must be positive semi-definite")


def _check_coordinates(dataset: xr.Dataset) -> None:
    """Refuse labels a policy could not take: the ``arm`` coordinate (the arm ids
    ``EbmTS(prior=prior)`` takes) must hold unique integers or unique non-empty strings
    (:func:`hierbandit.data.log.check_id_labels`: no booleans, floats or bytes; no blank, NUL
    or invalid-Unicode strings), and ``feature`` / ``feature_`` unique names, the same in both."""
    if "arm" in dataset.coords:
        check_id_labels(dataset["arm"].values, "the arm coordinate")
    names = {}
    for dim in ("feature", "feature_"):
        if dim in dataset.coords:
            names[dim] = check_id_labels(dataset[dim].values, f"the {dim} coordinate").tolist()
    if len(names) == 2 and names["feature"] != names["feature_"]:
        raise ValueError("the feature and feature_ coordinates must hold the same names")


class HierarchicalPrior(PriorArtifact):
    """Per-arm hierarchical prior fitted to historical data.

    Parameters
    ----------
    dataset : xarray.Dataset
        Variables ``shared_mean`` (arm, feature), ``shared_cov`` ``(arm, feature, feature_)``,
        ``Sigma`` ``(arm, feature, feature_)``, ``sigma2`` (arm), optionally more (diagnostics of
        the fit); attributes hold the provenance (method, λ, data hash, package version…).
    idata : xarray.DataTree, optional
        The draws of a full-Bayes fit: ArviZ groups (``posterior``, ``sample_stats``,
        ``observed_data``, ``log_likelihood``, optionally ``posterior_predictive``), as
        :func:`~hierbandit.bayes.fit_prior` makes them (``docs/bayes.md``, Persistence).

    Notes
    -----
    ``==`` compares content: the datasets (values, coordinates, provenance) and the draws
    (:class:`~hierbandit.bayes._artifact.PriorArtifact`). :meth:`to_datatree` and
    :meth:`from_datatree` let a policy's checkpoint embed the prior (``EbmTS(..., prior=prior)``).
    """

    kind = KIND
    label = "prior"

    def _validate(self, dataset: xr.Dataset) -> None:
        for name, dims in _REQUIRED.items():
            if name not in dataset:
                raise ValueError(f"dataset must contain {name!r}")
            if dataset[name].dims != dims:
                raise ValueError(f"{name} must have dims {dims}, got {dataset[name].dims}")
            if dataset[name].dtype.kind != "f":
                raise ValueError(f"{name} must be floating point, got {dataset[name].dtype}")
            if not np.all(np.isfinite(dataset[name].values)):
                raise ValueError(f"{name} must be finite (no NaN or inf)")
        if np.any(dataset["sigma2"].values <= 0):
            raise ValueError("sigma2 must be positive")
        for name in ("Sigma", "shared_cov"):
            _check_psd(dataset[name].values, name)
        _check_coordinates(dataset)

    # ------------------------------------------------------------------ arrays
    @property
    def shared_mean(self) -> np.ndarray:
        """Mean of each arm's shared coefficient vector β_{k0}, shape (K, d)."""
        return self.dataset["shared_mean"].values

    @property
    def shared_cov(self) -> np.ndarray:
        """Covariance of β_{k0} (its posterior uncertainty given the historical data), (K, d, d)."""
        return self.dataset["shared_cov"].values

    @property
    def Sigma(self) -> np.ndarray:
        """Covariance Σ_k of instance coefficients around the shared mean, (K, d, d)."""
        return self.dataset["Sigma"].values

    @property
    def sigma2(self) -> np.ndarray:
        """Noise variance σ²_k per arm, (K,)."""
        return self.dataset["sigma2"].values

    @property
    def n_arms(self) -> int:
        return int(self.dataset.sizes["arm"])

    @property
    def n_features(self) -> int:
        return int(self.dataset.sizes["feature"])

    @property
    def features(self) -> list[str]:
        return [str(f) for f in self.dataset["feature"].values]

    @property
    def arms(self) -> np.ndarray:
        return self.dataset["arm"].values

    def __repr__(self) -> str:
        return (
            f"HierarchicalPrior(method={self.method!r}, n_arms={self.n_arms}, "
            f"features={self.features}, idata={'yes' if self.idata is not None else 'no'})"
        )

    # ------------------------------------------------------------------ checkpoints
    def to_datatree(self) -> xr.DataTree:
        """The prior as a DataTree: the variables at the root, the ArviZ groups below it (the
        file's layout)."""
        return self._tree()

    @classmethod
    def from_datatree(cls, tree: xr.DataTree) -> HierarchicalPrior:
        """Inverse of :meth:`to_datatree` (the data are loaded into memory); also reads the
        earlier layout, with the ArviZ groups under ``idata``."""
        return cls._from_tree(tree)  # type: ignore[return-value]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> HierarchicalPrior:
        """Read a prior written by :meth:`save` (nothing in it can run code).

        The file's seal is verified and its container walked with a deadline before it is
        parsed, groups other than ArviZ groups are refused, and every array of the prior is
        checked (finite, σ² > 0, Σ and the shared covariance symmetric positive semi-definite),
        and so are its labels (the arm ids unique integers or unique, non-empty, valid strings;
        the feature names unique).
        Files of the earlier layout (the ArviZ groups under ``/idata``) load as well.

        Raises
        ------
        FileNotFoundError
            If there is no file at ``path``.
        hierbandit.errors.InvalidFileError
            (a ``ValueError``) if the file is not a valid prior, naming the file and why.
        """
        return super().load(path)  # type: ignore[no-any-return]


def upgrade_prior(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> Path:
    """Rewrite a prior file of an earlier version in the current layout, sealed.

    Reads a file written before sealed files (a plain netCDF file; only for a file you trust,
    since it carries no checksum) or a sealed file of the earlier layout (the ArviZ groups under
    ``/idata``, verified as :meth:`HierarchicalPrior.load` verifies it); everything else is
    checked as :meth:`HierarchicalPrior.load` does. Returns ``destination``, written atomically.
    """
    prior = HierarchicalPrior._from_file(read_netcdf(source, None), source)
    return prior.save(destination)


def load_prior(path: str | os.PathLike[str]) -> HierarchicalPrior:
    """Load a :class:`HierarchicalPrior` saved with :meth:`HierarchicalPrior.save`."""
    return HierarchicalPrior.load(path)
