"""Sampling vs closed form: the ebm two-level model with fixed hyperparameters, in PyMC.

Given the covariance Σ_k, the noise variance σ_k² and the hyperprior precision λ, every arm's
model is a Gaussian hierarchical linear regression (``docs/maths/ebm.md`` §1; ``docs/bayes.md``,
Sampling vs closed form)::

    β_{k0}         ~ N(0, λ⁻¹ I)
    β_{k,j} | β_{k0} ~ N(β_{k0}, Σ_k)                 (non-centred: β_{k,j} = β_{k0} + L_k z_{k,j})
    y_t           ~ N(x_tᵀ β_{arm_t, instance_t}, σ_{arm_t}²)

Its posterior is exactly Gaussian and equals the closed form of
:func:`hierbandit.stats.posterior_given_hyper` (ebm eq. 4.1–4.3), so NUTS must reproduce it within
Monte-Carlo error. :func:`conditional_model` builds the PyMC model for all arms at once,
:func:`closed_form_posterior` computes the exact answer as an :class:`xarray.Dataset`, and
:func:`compare_closed_form` samples the model and compares the two parameter by parameter in units
of the Monte-Carlo standard error (``docs/bayes.md`` §6).
"""

from __future__ import annotations

import dataclasses
import numbers
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import xarray as xr

from hierbandit._progress import progress_task
from hierbandit._validation import (
    _as_float_array,
    check_bool,
    check_choice,
    check_covariance,
    check_positive_int,
    check_scalar,
    check_vector,
)
from hierbandit.bayes.diagnostics import Diagnostics, diagnose
from hierbandit.bayes.sampler_config import SamplerConfig, available_samplers, resolve_sampler
from hierbandit.stats.hierarchical import posterior_cross_covariances, posterior_given_hyper
from hierbandit.stats.suffstats import suffstats

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CLOSED_FORM_SAMPLER",
    "FAMILY_ALPHA",
    "ClosedFormComparison",
    "closed_form_posterior",
    "compare_closed_form",
    "conditional_model",
    "family_tolerance",
]

_PARAMETERIZATIONS = ("noncentered", "centered")

#: NUTS settings of :func:`compare_closed_form` unless given: the package's direct numpyro
#: driver (docs/decisions/bayes.md, B13) with 2,000 draws per chain, twice the default, so that
#: the Monte-Carlo standard errors the comparison is measured in are small next to the posterior
#: standard deviations (B11)
CLOSED_FORM_SAMPLER = SamplerConfig(draws=2000, nuts_sampler="numpyro", driver="direct")
_LOG_ATTRS = ("X", "y", "instance", "arm", "n_instances", "n_arms", "n_features")


# --------------------------------------------------------------------------- inputs
def _as_log(data: Any, **columns: Any) -> Any:
    """``data`` itself when it already looks like a ``HistoricalLog``, else ``read_log(data)``."""
    if all(hasattr(data, a) for a in _LOG_ATTRS):
        return data
    from hierbandit.data import read_log

    return read_log(data, **columns)


def _labels(values: Any, n: int) -> list[Any]:
    """Coordinate labels (``range(n)`` when the log has none), as plain Python scalars."""
    if values is None:
        return list(range(n))
    out = np.asarray(values).tolist()
    if len(out) != n:
        raise ValueError(f"expected {n} labels, got {len(out)}")
    return out


def _log_arrays(log: Any) -> dict[str, Any]:
    X = np.asarray(log.X, dtype=float)
    y = np.asarray(log.y, dtype=float)
    inst = np.asarray(log.instance, dtype=np.int64)
    arm = np.asarray(log.arm, dtype=np.int64)
    K, N, d = int(log.n_arms), int(log.n_instances), int(log.n_features)
    return {
        "X": X.reshape(-1, d),
        "y": y,
        "instance": inst,
        "arm": arm,
        "K": K,
        "N": N,
        "d": d,
        "arm_labels": _labels(getattr(log, "arm_labels", None), K),
        "instance_labels": _labels(getattr(log, "instance_labels", None), N),
        "features": _labels(getattr(log, "features", None), d),
    }


def _check_hyperparameters(
    Sigma: Any, sigma2: Any, lam: Any, n_arms: int, n_features: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Validate Σ ((d, d) or (K, d, d), PSD), σ² (scalar or (K,), > 0) and λ (≥ 0)."""
    K, d = n_arms, n_features
    S = _as_float_array(Sigma, "Sigma")
    if S.shape not in ((d, d), (K, d, d)):
        raise ValueError(
            f"Sigma must have shape ({d}, {d}) or ({K}, {d}, {d}) (n_arms, n_features, "
            f"n_features), got {S.shape}"
        )
    Sigma = check_covariance(S, d, "Sigma", batch=K)
    if isinstance(sigma2, numbers.Real) or np.ndim(sigma2) == 0:
        s2 = np.full(K, check_scalar(sigma2, "sigma2", low=0.0, low_inclusive=False))
    else:
        s2 = check_vector(sigma2, K, "sigma2")
        if np.any(s2 <= 0):
            raise ValueError(f"sigma2 must be > 0 for every arm, got {s2.tolist()}")
    lam = check_scalar(lam, "lam", low=0.0)
    return Sigma, s2, lam


# --------------------------------------------------------------------------- cells
@dataclass(frozen=True)
class _Cells:
    """The coefficient vectors a model samples, one per *cell*.

    Without collapsing, every (arm, instance) pair is a cell, arm by arm. With ``collapse_empty``
    the cells are the pairs with rows (arm by arm, instances in order), then one *representative*
    per arm that has instances without rows, standing for all of them.
    """

    arm: np.ndarray  # (M,) arm code of each cell
    instance: np.ndarray  # (M,) instance code, -1 for a representative
    n_instances: np.ndarray  # (M,) how many instances the cell stands for (1, or n)
    labels: list[str]  # (M,) "arm, instance" or "arm, instances without data (n=…)"
    of_row: np.ndarray  # (T,) the cell of every row
    counts: np.ndarray  # (K, N) rows per (arm, instance)
    collapsed: bool  # built with collapse_empty (the cells are a dimension of their own)


def _without_data(n: int) -> str:
    return f"instances without data (n={n})"


def _cells_from_counts(
    counts: np.ndarray, arm_labels: list[Any], instance_labels: list[Any], collapse_empty: bool
) -> _Cells:
    """The cells of a log with ``counts[k, j]`` rows per (arm, instance); ``of_row`` is left
    empty (:func:`_cells` fills it)."""
    K, N = counts.shape
    if collapse_empty:
        kk, jj = np.nonzero(counts)  # arm by arm, instances in order
    else:
        kk, jj = np.divmod(np.arange(K * N), N)
    arm, inst, n = [kk], [jj], [np.ones(kk.size, dtype=np.int64)]
    if collapse_empty:
        empty = (counts == 0).sum(axis=1)
        rep = np.nonzero(empty)[0]
        arm.append(rep)
        inst.append(np.full(rep.size, -1, dtype=np.int64))
        n.append(empty[rep])
    arm_, inst_, n_ = np.concatenate(arm), np.concatenate(inst), np.concatenate(n)
    labels = [
        f"{arm_labels[k]}, {instance_labels[j]}"
        if j >= 0
        else f"{arm_labels[k]}, {_without_data(m)}"
        for k, j, m in zip(arm_.tolist(), inst_.tolist(), n_.tolist(), strict=True)
    ]
    none = np.zeros(0, dtype=np.int64)
    return _Cells(arm_, inst_, n_, labels, none, counts, collapse_empty)


def _cells(a: dict[str, Any], collapse_empty: bool) -> _Cells:
    """The cells of the log ``a`` (:func:`_log_arrays`) and the cell of each of its rows."""
    counts = np.zeros((a["K"], a["N"]), dtype=np.int64)
    np.add.at(counts, (a["arm"], a["instance"]), 1)
    cells = _cells_from_counts(counts, a["arm_labels"], a["instance_labels"], collapse_empty)
    cell_of = np.full(counts.shape, -1, dtype=np.int64)
    data = cells.instance >= 0
    cell_of[cells.arm[data], cells.instance[data]] = np.nonzero(data)[0]
    return dataclasses.replace(cells, of_row=cell_of[a["arm"], a["instance"]])


def _coefficients(
    beta0_c: Any, free: Any, basis: np.ndarray, mask: np.ndarray | None, expand: Any
) -> tuple[Any, Any]:
    """Each cell's β from its arm's β₀ (gathered per cell, ``(..., M, d)``) and its free
    variable ``(..., M, d)``; returns ``(beta, eta_mean)``.

    Non-centred (``mask is None``): β = β₀ + L z with ``basis`` = L_kᵀ per cell (M, d, d).
    Centred: ``basis`` = U_k per cell, ``mask`` the directions with w > 0; the eigen-coordinates
    are η where w > 0 and (U_kᵀβ₀) elsewhere, and ``eta_mean`` = mask · U_kᵀβ₀ is η's prior mean.
    Only elementwise products and sums, so that NumPy and PyTensor (``expand``: their
    ``expand_dims``) run the same code and the JAX backend accepts it.
    """
    if mask is None:
        return beta0_c + (expand(free, -1) * basis).sum(axis=-2), None
    m = (expand(beta0_c, -1) * basis).sum(axis=-2)  # U_kᵀ β₀ per cell
    coef = mask * free + (1.0 - mask) * m
    return (basis * expand(coef, -2)).sum(axis=-1), mask * m


# --------------------------------------------------------------------------- the model
def conditional_model(
    log: Any,
    Sigma: Any,
    sigma2: Any,
    lam: float,
    *,
    parameterization: str = "noncentered",
    collapse_empty: bool = False,
) -> pm.Model:
    """The ebm two-level model of every arm with the hyperparameters held fixed.

    Parameters
    ----------
    log : HistoricalLog or anything :func:`hierbandit.data.read_log` accepts
        The rows ``(instance, x, arm, reward)``.
    Sigma : array_like, shape (d, d) or (K, d, d)
        Covariance Σ_k of the instance coefficients around the arm's shared mean (one for every
        arm, or per arm). Positive semi-definite; may be singular.
    sigma2 : float or array_like, shape (K,)
        Noise variance σ_k² (> 0), shared or per arm.
    lam : float
        Precision λ of the N(0, λ⁻¹I) hyperprior on every shared mean β_{k0}; ``lam = 0`` gives a
        flat (improper) prior, and the data must then identify every shared mean.
    parameterization : {"noncentered", "centered"}
        How the instance coefficients are sampled (see Notes). Both define the same model.
    collapse_empty : bool
        Sample one coefficient vector per arm for all the instances without rows in that arm
        instead of one per instance (see Notes). Default ``False``: every (arm, instance).

    Returns
    -------
    pymc.Model
        Coordinates ``arm``, ``feature`` (the log's labels and feature names), ``row`` and
        either ``instance`` or, with ``collapse_empty``, ``cell``. Free variables: ``beta0``
        (arm, feature) and, non-centred, the standard-normal ``z`` or, centred, ``eta``, with
        the dims of the deterministic ``beta``: (arm, instance, feature), or (cell, feature)
        with ``collapse_empty``; observed ``y`` (row). The design matrix and the row codes are
        stored as data ``X``, ``arm_idx`` and ``instance_idx`` (or ``cell_idx``).
        ``model.hb_meta["trace_vars"]`` is ``["beta0", "beta"]``.

    Notes
    -----
    With Σ_k = U_k diag(w_k) U_kᵀ (eigendecomposition, w ≥ 0):

    * ``"noncentered"`` (the default): β_{k,j} = β_{k0} + L_k z_{k,j}, z ~ N(0, I), with the eigen
      square root L_k = U_k diag(√w_k) (L_k L_kᵀ = Σ_k exactly; not triangular). A singular Σ_k
      needs no jitter, and β has exactly the prior N(β_{k0}, Σ_k). Samples best when the
      instances have little data.
    * ``"centered"``: β_{k,j} = U_k η_{k,j} with η_e ~ N((U_kᵀβ_{k0})_e, w_e) in every direction
      with w_e > 0 (centred in the eigenbasis), while in a null direction of Σ_k (w_e ≤ 1e-12
      max w) η_e = (U_kᵀβ_{k0})_e exactly and the free η_e ~ N(0, 1) is an unused dummy. Samples
      best when the instances have much data, where the non-centred posterior is a narrow ridge
      in (β₀, z) that a diagonal mass matrix mixes slowly.

    **Collapsing instances without data.** An instance j with no rows in arm k enters the model
    only through β_{k,j} | β_{k0} ~ N(β_{k0}, Σ_k), independently of every other coefficient:
    integrating it out leaves the rest of the posterior unchanged, and all such instances share
    one marginal posterior, N(β̂_{k0}, Φ_k + Σ_k). With ``collapse_empty`` the model has one
    cell per (arm, instance) with rows and, for every arm with instances without rows, one
    representative cell ``"<arm>, instances without data (n=<count>)"`` whose β has exactly
    that shared marginal. The cells are the dimension ``cell``, labelled ``"<arm>, <instance>"``
    (ArviZ then labels a parameter ``beta[<arm>, <instance>, <feature>]`` as without
    collapsing). On a log where most users rated a few of the arms this removes most of the
    parameters.

    The likelihood gathers each row's coefficient vector for all rows at once; the algebra
    uses broadcasting, products and sums only (PyTensor's JAX backend rejects ``pt.einsum``).
    """
    check_choice(parameterization, _PARAMETERIZATIONS, "parameterization")
    collapse_empty = check_bool(collapse_empty, "collapse_empty")
    log = _as_log(log)
    a = _log_arrays(log)
    Sigma, s2, lam = _check_hyperparameters(Sigma, sigma2, lam, a["K"], a["d"])
    return _build_model(a, Sigma, s2, lam, parameterization, _cells(a, collapse_empty))


def _build_model(
    a: dict[str, Any],
    Sigma: np.ndarray,
    s2: np.ndarray,
    lam: float,
    parameterization: str,
    cells: _Cells,
) -> pm.Model:
    K, N, d = a["K"], a["N"], a["d"]
    collapsed = cells.collapsed
    w, U = np.linalg.eigh(Sigma)
    w = np.clip(w, 0.0, None)
    sigma = np.sqrt(s2)
    coords: dict[str, Any] = {
        "arm": a["arm_labels"],
        "feature": a["features"],
        "row": np.arange(a["y"].shape[0]),
    }
    if collapsed:
        coords["cell"] = cells.labels
        dims_b: tuple[str, ...] = ("cell", "feature")
        shape_b: tuple[int, ...] = (cells.arm.size, d)
    else:
        coords["instance"] = a["instance_labels"]
        dims_b = ("arm", "instance", "feature")
        shape_b = (K, N, d)
    M = cells.arm.size
    if parameterization == "noncentered":
        basis = (np.sqrt(w)[:, :, None] * np.swapaxes(U, -1, -2))[cells.arm]  # L_kᵀ per cell
        mask = None
        sd = None
    else:
        pos = w > 1e-12 * np.maximum(1.0, w.max(axis=-1, keepdims=True))  # (K, d)
        basis = U[cells.arm]
        mask = pos[cells.arm].astype(float)
        sd = np.where(pos, np.sqrt(w), 1.0)[cells.arm]
    with pm.Model(coords=coords) as model:
        X = pm.Data("X", a["X"], dims=("row", "feature"))
        arm_idx = pm.Data("arm_idx", a["arm"], dims="row")
        if collapsed:
            cell_idx = pm.Data("cell_idx", cells.of_row, dims="row")
        else:
            inst_idx = pm.Data("instance_idx", a["instance"], dims="row")
        if lam > 0:
            beta0 = pm.Normal("beta0", 0.0, sigma=lam**-0.5, dims=("arm", "feature"))
        else:
            beta0 = pm.Flat("beta0", dims=("arm", "feature"))
        beta0_c = beta0[pt.constant(cells.arm)]
        if mask is None:
            free = pm.Normal("z", 0.0, 1.0, dims=dims_b)
            beta, _ = _coefficients(
                beta0_c, free.reshape((M, d)), pt.constant(basis), None, pt.expand_dims
            )
        else:
            _, eta_mean = _coefficients(
                beta0_c, pt.zeros((M, d)), pt.constant(basis), pt.constant(mask), pt.expand_dims
            )
            free = pm.Normal(
                "eta", mu=eta_mean.reshape(shape_b), sigma=pt.constant(sd.reshape(shape_b)),
                dims=dims_b,
            )  # fmt: skip
            beta, _ = _coefficients(
                beta0_c, free.reshape((M, d)), pt.constant(basis), pt.constant(mask),
                pt.expand_dims,
            )  # fmt: skip
        beta = pm.Deterministic("beta", beta.reshape(shape_b), dims=dims_b)
        row_beta = beta[cell_idx] if collapsed else beta[arm_idx, inst_idx]
        mu = (X * row_beta).sum(axis=-1)
        pm.Normal("y", mu=mu, sigma=pt.constant(sigma)[arm_idx], observed=a["y"], dims="row")

    free_name = "z" if mask is None else "eta"

    def constrain(model: pm.Model, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The stored variables from the unconstrained draws (the direct driver's map)."""
        b0 = np.asarray(raw["beta0"])
        f = np.asarray(raw[free_name])
        lead = f.shape[: f.ndim - len(shape_b)]
        beta, _ = _coefficients(
            b0[..., cells.arm, :], f.reshape(*lead, M, d), basis, mask, np.expand_dims
        )
        return {"beta0": b0, free_name: f, "beta": beta.reshape(*lead, *shape_b)}

    model.hb_meta = {  # type: ignore[attr-defined]
        "trace_vars": ["beta0", "beta"],
        "finite_init": True,  # proper Gaussians (or a flat β₀): every jittered point is finite
        "constrain": constrain,
    }
    return model


# --------------------------------------------------------------------------- closed form
def closed_form_posterior(log: Any, Sigma: Any, sigma2: Any, lam: float) -> xr.Dataset:
    """The exact posterior of :func:`conditional_model`, arm by arm (ebm eq. 4.1–4.3).

    Parameters
    ----------
    log, Sigma, sigma2, lam
        As in :func:`conditional_model`.

    Returns
    -------
    xarray.Dataset
        ``mean``, ``sd`` (arm, instance, feature); ``cov`` ``(arm, instance, feature, feature_)``;
        ``shared_mean``, ``shared_sd`` (arm, feature); ``shared_cov`` ``(arm, feature, feature_)``;
        the cross-covariances ``cov_with_shared`` = Cov(β_{k,j}, β_{k0})
        ``(arm, instance, feature, feature_)`` and ``cov_between`` = Cov(β_{k,j}, β_{k,l})
        ``(arm, instance, instance_, feature, feature_)``; ``n_rows`` (arm, instance). Attributes
        record λ; ``sigma2`` is a variable (arm).
    """
    log = _as_log(log)
    a = _log_arrays(log)
    K, N, d = a["K"], a["N"], a["d"]
    Sigma, s2, lam = _check_hyperparameters(Sigma, sigma2, lam, K, d)
    mean = np.empty((K, N, d))
    cov = np.empty((K, N, d, d))
    shared_mean = np.empty((K, d))
    shared_cov = np.empty((K, d, d))
    with_shared = np.empty((K, N, d, d))
    between = np.empty((K, N, N, d, d))
    n_rows = np.zeros((K, N), dtype=np.int64)
    for k in range(K):
        rows = a["arm"] == k
        stats = suffstats(a["X"][rows], a["y"][rows], a["instance"][rows], N)
        try:
            post = posterior_given_hyper(stats.G, stats.b, Sigma[k], s2[k], lam)
        except ValueError as exc:
            raise ValueError(f"arm {a['arm_labels'][k]!r}: {exc}") from exc
        if lam == 0:
            # the stats kernel can return a huge Φ instead of failing on a singular Φ⁻¹
            ev = np.linalg.eigvalsh(post.precision)
            if ev[0] <= 1e-10 * max(ev[-1], 1e-300):
                raise ValueError(
                    f"arm {a['arm_labels'][k]!r}: the shared-mean posterior is improper with "
                    "lam=0 (the arm's data do not identify its shared mean); use lam > 0"
                )
        mean[k], cov[k] = post.mean, post.cov
        shared_mean[k], shared_cov[k] = post.shared_mean, post.shared_cov
        with_shared[k], between[k] = posterior_cross_covariances(post)
        n_rows[k] = stats.n
    dims_b = ("arm", "instance", "feature")
    return xr.Dataset(
        {
            "mean": (dims_b, mean),
            "sd": (dims_b, np.sqrt(np.diagonal(cov, axis1=-2, axis2=-1))),
            "cov": ((*dims_b, "feature_"), cov),
            "shared_mean": (("arm", "feature"), shared_mean),
            "shared_sd": (("arm", "feature"), np.sqrt(np.diagonal(shared_cov, 0, -2, -1))),
            "shared_cov": (("arm", "feature", "feature_"), shared_cov),
            "cov_with_shared": ((*dims_b, "feature_"), with_shared),
            "cov_between": (("arm", "instance", "instance_", "feature", "feature_"), between),
            "n_rows": (("arm", "instance"), n_rows),
            "sigma2": (("arm",), s2),
            "Sigma": (("arm", "feature", "feature_"), Sigma),
        },
        coords={
            "arm": a["arm_labels"],
            "instance": a["instance_labels"],
            "instance_": a["instance_labels"],
            "feature": a["features"],
            "feature_": a["features"],
        },
        attrs={"lam": lam, "source": "hierbandit.stats.posterior_given_hyper (ebm eq. 4.1-4.3)"},
    )


# --------------------------------------------------------------------------- comparison
_TABLE_COLUMNS = [
    "variable",
    "arm",
    "instance",
    "feature",
    "n_instances",
    "closed_mean",
    "closed_sd",
    "mcmc_mean",
    "mcmc_sd",
    "mcse_mean",
    "mcse_sd",
    "z_mean",
    "z_sd",
    "r_hat",
    "ess_bulk",
    "ok",
]


@dataclass
class ClosedFormComparison:
    """The closed-form posterior next to the MCMC posterior of the same model and data.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per scalar parameter compared, indexed by its name: ``beta[arm, instance,
        feature]`` for an instance with rows in the arm, ``beta[arm, instances without data
        (n=37), feature]`` once per arm for all its instances without rows (collapsed, the
        default; without collapsing one row per instance), and ``beta0[arm, feature]``. Columns
        ``variable`` (``"beta"`` or ``"beta0"``), ``arm``, ``instance`` (``None`` for a
        collapsed row and for ``beta0``), ``feature``, ``n_instances`` (how many instances the
        row stands for; ``<NA>`` for ``beta0``), ``closed_mean``, ``closed_sd``, ``mcmc_mean``,
        ``mcmc_sd``, ``mcse_mean``, ``mcse_sd`` (ArviZ :func:`arviz.mcse`), ``z_mean =
        (mcmc_mean − closed_mean) / mcse_mean``, ``z_sd`` likewise, ``r_hat``, ``ess_bulk`` and
        ``ok = |z_mean| ≤ tolerance and |z_sd| ≤ tolerance``. A collapsed row's closed-form
        values are those of the instance it stands for that lies farthest from the MCMC
        estimate (they are all equal when the formulas are right).
    idata : xarray.DataTree
        The MCMC run of :func:`conditional_model` (ArviZ's layout: ``posterior`` with ``beta0``
        and ``beta``, ``sample_stats``). Collapsed, ``beta`` has dims (cell, feature) (the cells
        of :func:`conditional_model`); otherwise (arm, instance, feature).
    closed_form : xarray.Dataset
        :func:`closed_form_posterior` on the same data and hyperparameters (every instance,
        collapsed or not).
    diagnostics : Diagnostics
        Convergence diagnostics of the run (:func:`~hierbandit.bayes.diagnose`).
    tolerance : float
        The ``|z|`` bound of the ``ok`` column.
    settings : dict
        Sampler settings, the sampling wall time in seconds (``"wall_time"``, compilation
        included) and the wall time of every phase (``"timings"``: ``closed_form``, ``model``,
        ``sampling``, ``table``, ``diagnostics``).
    """

    table: pd.DataFrame
    idata: xr.DataTree
    closed_form: xr.Dataset
    diagnostics: Diagnostics
    tolerance: float
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        """Number of scalar parameters compared (rows of :attr:`table`)."""
        return len(self.table)

    @property
    def all_ok(self) -> bool:
        """Whether every parameter's mean and sd agree within ``tolerance`` MCSE."""
        return bool(self.table["ok"].all())

    @property
    def max_abs_z(self) -> float:
        """The largest ``|z|`` over all means and sds."""
        z = self.table[["z_mean", "z_sd"]].abs().to_numpy()
        return float(np.nanmax(z)) if z.size else float("nan")

    @property
    def verdict(self) -> str:
        """``"agree"``, ``"mismatch"`` or ``"sampler problem"`` (diagnostics failed).

        A failed diagnostic takes precedence: a disagreement from a sampler that did not
        converge says nothing about the closed form.
        """
        if not self.diagnostics.ok:
            return "sampler problem"
        return "agree" if self.all_ok else "mismatch"

    def worst(self, n: int = 5) -> pd.DataFrame:
        """The ``n`` parameters with the largest ``max(|z_mean|, |z_sd|)`` (a collapsed row
        counts once)."""
        key = self.table[["z_mean", "z_sd"]].abs().max(axis=1)
        return self.table.loc[key.sort_values(ascending=False).index[:n]]

    def covariance_table(self) -> pd.DataFrame:
        """MCMC vs closed-form covariance of every coefficient vector (``docs/bayes.md`` §6).

        Returns
        -------
        pandas.DataFrame
            One row per sampled ``beta[arm, instance]`` vector (a collapsed
            ``beta[arm, instances without data (n=…)]`` once, with ``instance`` ``None``) and
            ``beta0[arm]`` vector, with ``rel_frobenius`` = ‖Ĉ_MCMC − C‖_F / ‖C‖_F and the
            smallest and largest variance ratio ``var_ratio_min``/``var_ratio_max`` (MCMC over
            closed form).
        """
        post = self.idata.posterior
        cf = self.closed_form
        arms = cf["arm"].to_numpy().tolist()
        insts = cf["instance"].to_numpy().tolist()
        cells = _table_cells(post, cf)
        beta = post["beta"].to_numpy()
        beta = beta.reshape(*beta.shape[:2], -1, beta.shape[-1])  # (chain, draw, cell, d)
        beta0 = post["beta0"].transpose("chain", "draw", "arm", "feature").to_numpy()
        cov = cf["cov"].to_numpy()
        rows = []

        def add(name: str, draws: np.ndarray, C: np.ndarray, arm: Any, inst: Any) -> None:
            S = np.cov(draws.reshape(-1, draws.shape[-1]), rowvar=False)
            err = np.linalg.norm(S - C) / np.linalg.norm(C)
            ratio = np.diag(S) / np.diag(C)
            rows.append(
                {
                    "vector": name,
                    "arm": arm,
                    "instance": inst,
                    "rel_frobenius": float(err),
                    "var_ratio_min": float(ratio.min()),
                    "var_ratio_max": float(ratio.max()),
                }
            )

        for c, (k, j) in enumerate(zip(cells.arm.tolist(), cells.instance.tolist(), strict=True)):
            member = j if j >= 0 else int(np.argmin(cells.counts[k]))  # an instance without rows
            inst = insts[j] if j >= 0 else None
            add(f"beta[{cells.labels[c]}]", beta[:, :, c], cov[k, member], arms[k], inst)
        for k, arm in enumerate(arms):
            add(f"beta0[{arm}]", beta0[:, :, k], cf["shared_cov"].to_numpy()[k], arm, None)
        out = pd.DataFrame(rows).set_index("vector")
        out["instance"] = pd.Series(
            [r["instance"] for r in rows], index=out.index, dtype=object
        )  # None, not NaN, for beta0 and a collapsed vector
        return out

    def plot(self, path: str | Path | None = None) -> Figure:
        """z-scores per parameter and closed-form vs MCMC means.

        Parameters
        ----------
        path
            Where to save the figure (format from the suffix); nothing is saved when ``None``.

        Returns
        -------
        matplotlib.figure.Figure
            Left: ``z_mean`` and ``z_sd`` of every parameter (a collapsed row once) with the
            ±``tolerance`` band. Right: MCMC mean against closed-form mean (±2 MCSE bars) with
            the identity line.
        """
        from matplotlib.figure import Figure

        t = self.table
        fig = Figure(figsize=(11, 4.2), layout="constrained")
        ax_z, ax_m = fig.subplots(1, 2, width_ratios=[1.6, 1])
        x = np.arange(len(t))
        tol = self.tolerance
        ax_z.axhspan(-tol, tol, color="tab:green", alpha=0.12, label=f"±{tol:g} MCSE")
        ax_z.axhline(0.0, color="0.5", lw=0.8)
        ax_z.plot(x, t["z_mean"], "o", ms=4, label="mean")
        ax_z.plot(x, t["z_sd"], "x", ms=4, label="sd")
        bad = ~t["ok"].to_numpy(dtype=bool)
        if bad.any():
            worst = np.maximum(t["z_mean"].abs(), t["z_sd"].abs())
            ax_z.plot(
                x[bad],
                np.sign(t["z_mean"])[bad] * worst[bad],
                "s",
                mfc="none",
                color="tab:red",
                ms=8,
                label="outside",
            )
        collapsed = ((t["variable"] == "beta") & t["instance"].isna()).to_numpy()
        if collapsed.any():
            ax_z.plot(
                x[collapsed],
                t["z_mean"].to_numpy()[collapsed],
                "^",
                mfc="none",
                color="tab:purple",
                ms=7,
                label="instances without data",
            )
        if len(t) <= 40:
            ax_z.set_xticks(x, list(t.index), rotation=90, fontsize=7)
        else:
            n_b = int((t["variable"] == "beta").sum())
            ax_z.axvline(n_b - 0.5, color="0.7", ls=":")
            ax_z.set_xlabel(f"parameter (beta: 0–{n_b - 1}, beta0: {n_b}–{len(t) - 1})")
        ax_z.set_ylabel("(MCMC − closed form) / MCSE")
        ax_z.set_title(f"{self.n_params} parameters, max |z| = {self.max_abs_z:.2f}")
        ax_z.legend(fontsize=8, loc="upper right")

        for var, marker in (("beta", "o"), ("beta0", "D")):
            s = t[t["variable"] == var]
            ax_m.errorbar(
                s["closed_mean"],
                s["mcmc_mean"],
                yerr=2 * s["mcse_mean"],
                fmt=marker,
                ms=4,
                lw=0.8,
                label=var,
            )
        lo = float(np.nanmin(t[["closed_mean", "mcmc_mean"]].to_numpy())) if len(t) else 0.0
        hi = float(np.nanmax(t[["closed_mean", "mcmc_mean"]].to_numpy())) if len(t) else 1.0
        pad = 0.05 * (hi - lo or 1.0)
        ax_m.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="0.4", lw=0.8, label="y = x")
        ax_m.set_xlabel("closed-form posterior mean")
        ax_m.set_ylabel("MCMC posterior mean")
        ax_m.set_title(f"verdict: {self.verdict}")
        ax_m.legend(fontsize=8)
        if path is not None:
            fig.savefig(path)
        return fig

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_params={self.n_params}, all_ok={self.all_ok}, "
            f"max_abs_z={self.max_abs_z:.3g}, tolerance={self.tolerance:g}, "
            f"verdict={self.verdict!r}, max_rhat={self.diagnostics.max_rhat:.4g}, "
            f"min_ess_bulk={self.diagnostics.min_ess_bulk:.0f}, "
            f"divergences={self.diagnostics.divergences})"
        )


def _table_cells(post: xr.Dataset | xr.DataTree, cf: xr.Dataset) -> _Cells:
    """The cells of a run's ``beta`` (collapsed when it has a ``cell`` dimension)."""
    cells = _cells_from_counts(
        cf["n_rows"].to_numpy(),
        cf["arm"].to_numpy().tolist(),
        cf["instance"].to_numpy().tolist(),
        "cell" in post["beta"].dims,
    )
    if cells.collapsed and cells.labels != [str(c) for c in post["beta"]["cell"].to_numpy()]:
        raise ValueError("the run's cells do not match the closed form's rows per cell")
    return cells


def _comparison_table(
    idata: xr.DataTree, cf: xr.Dataset, tolerance: float | None
) -> tuple[pd.DataFrame, float]:
    """The comparison, one row per parameter (:attr:`ClosedFormComparison.table`)."""
    post = idata["posterior"].to_dataset()[["beta", "beta0"]]
    cells = _table_cells(post, cf)
    arms = cf["arm"].to_numpy().tolist()
    insts = cf["instance"].to_numpy().tolist()
    feats = cf["feature"].to_numpy().tolist()
    M, d, K = cells.arm.size, len(feats), len(arms)
    labels_b = [f"beta[{lab}, {f}]" for lab in cells.labels for f in feats]
    labels_0 = [f"beta0[{arm}, {f}]" for arm in arms for f in feats]
    order = ("cell", "feature") if cells.collapsed else ("arm", "instance", "feature")

    def flat(ds: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
        return (
            ds["beta"].transpose(*order).to_numpy().reshape(M, d),
            ds["beta0"].transpose("arm", "feature").to_numpy().reshape(K, d),
        )

    sample_dims = ("chain", "draw")
    stats = {
        "mcmc_mean": flat(post.mean(sample_dims)),
        "mcmc_sd": flat(post.std(sample_dims, ddof=1)),
    }
    # ArviZ's functions on each variable: az.summary of a Dataset whose variables order their
    # dimensions differently (beta0 (arm, feature), beta (cell, feature)) pairs some labels with
    # another parameter's values (arviz-stats 1.3.3)
    stats["mcse_mean"] = flat(az.mcse(post, method="mean"))
    stats["mcse_sd"] = flat(az.mcse(post, method="sd"))
    stats["r_hat"] = flat(az.rhat(post))
    stats["ess_bulk"] = flat(az.ess(post, method="bulk"))
    b = {name: v[0] for name, v in stats.items()}

    # beta: one row per (cell, feature)
    mean, sd = cf["mean"].to_numpy(), cf["sd"].to_numpy()
    closed_mean = np.empty((M, d))
    closed_sd = np.empty((M, d))
    data = cells.instance >= 0
    closed_mean[data] = mean[cells.arm[data], cells.instance[data]]
    closed_sd[data] = sd[cells.arm[data], cells.instance[data]]
    for c in np.flatnonzero(~data):
        # the instances without rows the cell stands for: each one's closed form (equal by
        # construction) against the one sampled vector; the row keeps the farthest
        k = cells.arm[c]
        members = np.flatnonzero(cells.counts[k] == 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            zm = np.abs(b["mcmc_mean"][c] - mean[k, members]) / b["mcse_mean"][c]
            zs = np.abs(b["mcmc_sd"][c] - sd[k, members]) / b["mcse_sd"][c]
        far = np.argmax(np.nan_to_num(np.fmax(zm, zs), nan=np.inf), axis=0)
        closed_mean[c] = mean[k, members[far], np.arange(d)]
        closed_sd[c] = sd[k, members[far], np.arange(d)]
    beta = pd.DataFrame({name: v.ravel() for name, v in b.items()}, index=labels_b)
    beta.insert(0, "variable", "beta")
    beta.insert(1, "arm", [arms[k] for k in cells.arm.tolist() for _ in range(d)])
    inst = [insts[j] if j >= 0 else None for j in cells.instance.tolist()]
    beta.insert(2, "instance", pd.Series([v for v in inst for _ in range(d)], dtype=object,
                                         index=beta.index))  # fmt: skip
    beta.insert(3, "feature", feats * M)
    beta.insert(4, "n_instances", np.repeat(cells.n_instances, d))
    beta.insert(5, "closed_mean", closed_mean.ravel())
    beta.insert(6, "closed_sd", closed_sd.ravel())

    # beta0: one row per (arm, feature)
    beta0 = pd.DataFrame({name: v[1].ravel() for name, v in stats.items()}, index=labels_0)
    beta0.insert(0, "variable", "beta0")
    beta0.insert(1, "arm", [arm for arm in arms for _ in range(d)])
    beta0.insert(2, "instance", pd.Series([None] * len(beta0), dtype=object, index=beta0.index))
    beta0.insert(3, "feature", feats * K)
    beta0.insert(4, "n_instances", pd.NA)
    beta0.insert(5, "closed_mean", cf["shared_mean"].to_numpy().ravel())
    beta0.insert(6, "closed_sd", cf["shared_sd"].to_numpy().ravel())

    table = pd.concat([beta, beta0])
    table["n_instances"] = table["n_instances"].astype("Int64")
    table["instance"] = table["instance"].astype(object).where(table["instance"].notna(), None)
    table.index.name = "parameter"
    with np.errstate(divide="ignore", invalid="ignore"):
        table["z_mean"] = (table["mcmc_mean"] - table["closed_mean"]) / table["mcse_mean"]
        table["z_sd"] = (table["mcmc_sd"] - table["closed_sd"]) / table["mcse_sd"]
    if tolerance is None:
        tolerance = family_tolerance(len(table))
    table["ok"] = (table["z_mean"].abs() <= tolerance) & (table["z_sd"].abs() <= tolerance)
    return table[_TABLE_COLUMNS], tolerance


#: chance that a comparison of exact formulas fails with the default tolerance, whatever the
#: number of parameters (:func:`family_tolerance`)
FAMILY_ALPHA = 0.01


def family_tolerance(n_params: int, alpha: float = FAMILY_ALPHA) -> float:
    """The default tolerance of :func:`compare_closed_form`: the bound on ``|z|`` that the 2P
    z-scores of P parameters (a mean and an sd each), standard normal when the formulas are
    right, all stay under with probability at least 1 − ``alpha`` (Bonferroni), and never less
    than 4. With α = 1 %: 4 up to 78 parameters, 4.17 at 165, 4.59 at 1,140, 4.73 at 2,265."""
    from scipy.stats import norm

    n = check_positive_int(int(n_params), "n_params", minimum=0)
    alpha = check_scalar(alpha, "alpha", low=0.0, low_inclusive=False, high=1.0)
    return max(4.0, float(norm.isf(alpha / (4 * max(n, 1)))))


def _from_prior(prior: Any, log: Any, lam: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """Σ_k, σ²_k of a :class:`~hierbandit.bayes.HierarchicalPrior` in the log's arm and feature
    order, and λ (``lam`` when given, else the one its fit recorded)."""
    from hierbandit.bayes.prior import HierarchicalPrior

    if not isinstance(prior, HierarchicalPrior):
        raise TypeError(f"prior must be a HierarchicalPrior, got {type(prior).__name__}")
    ds = prior.dataset
    mine = {"arm": list(ds["arm"].to_numpy().tolist()), "feature": list(prior.features)}
    theirs = {
        "arm": np.asarray(log.arm_labels).tolist()
        if getattr(log, "arm_labels", None) is not None
        else list(range(int(log.n_arms))),
        "feature": [str(f) for f in log.features]
        if getattr(log, "features", None) is not None
        else [str(i) for i in range(int(log.n_features))],
    }
    for dim, what in (("arm", "arms"), ("feature", "features")):
        if sorted(map(str, mine[dim])) != sorted(map(str, theirs[dim])) or len(
            set(map(str, mine[dim]))
        ) != len(mine[dim]):
            raise ValueError(
                f"prior does not match the log: its {what} are {mine[dim]}, the log's are "
                f"{theirs[dim]}"
            )
    # the log's order (labels compared as text: a saved prior may hold another integer type)
    arm_pos = {str(v): i for i, v in enumerate(mine["arm"])}
    feat_pos = {str(v): i for i, v in enumerate(mine["feature"])}
    ai = [arm_pos[str(v)] for v in theirs["arm"]]
    fi = [feat_pos[str(v)] for v in theirs["feature"]]
    Sigma = np.asarray(prior.Sigma)[np.ix_(ai, fi, fi)]
    sigma2 = np.asarray(prior.sigma2)[ai]
    if lam is None:
        config = prior.provenance.get("config")
        lam = config.get("lam") if isinstance(config, dict) else None
        if lam is None:
            raise ValueError(
                "lam is required: prior records no lam in its provenance (config['lam'])"
            )
    return Sigma, sigma2, lam


def compare_closed_form(
    data: Any,
    Sigma: Any = None,
    sigma2: Any = None,
    lam: float | None = None,
    *,
    prior: Any = None,
    sampler: SamplerConfig | None = None,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    target_accept: float | None = None,
    random_seed: int | None = None,
    nuts_sampler: str | None = None,
    driver: str | None = None,
    instance: str = "instance",
    arm: str = "arm",
    reward: str = "reward",
    features: Any = None,
    tolerance: float | None = None,
    parameterization: str = "centered",
    dense_mass: bool = False,
    collapse_empty: bool = True,
    rhat_max: float = 1.01,
    ess_min: float = 400,
    progressbar: bool | None = None,
    warn: bool = True,
    **sample_kwargs: Any,
) -> ClosedFormComparison:
    """Sample the fixed-hyperparameter model with NUTS and compare it with the closed form.

    Two forms::

        compare_closed_form(log, prior)               # a HierarchicalPrior from fit_prior
        compare_closed_form(log, Sigma, sigma2, lam)  # the hyperparameters themselves

    Parameters
    ----------
    data : DataFrame, path (CSV/Parquet), xarray.Dataset or HistoricalLog
        The log, read by :func:`hierbandit.data.read_log` with the column names ``instance``,
        ``arm``, ``reward`` and ``features``.
    Sigma : array_like, shape (d, d) or (K, d, d), or HierarchicalPrior
        Fixed covariance Σ_k of the instance coefficients (PSD, may be singular); or a prior
        (the second positional argument, as ``prior=``).
    sigma2 : float or array_like, shape (K,)
        Fixed noise variance σ_k² (> 0); not with a prior.
    lam : float, optional
        Precision of the shared-mean hyperprior (≥ 0). Required with ``Sigma``; with a prior,
        the ``lam`` its fit recorded (``prior.provenance["config"]["lam"]``) unless given.
    prior : HierarchicalPrior, optional
        A fitted prior (:func:`hierbandit.bayes.fit_prior`) whose Σ_k and σ²_k are held fixed.
        Its arms and features must be the log's (in any order).
    sampler : SamplerConfig, optional
        NUTS settings (default :data:`CLOSED_FORM_SAMPLER`: the package's direct numpyro
        driver, 2 chains × 2,000 draws after 1,000 tuning steps, ``target_accept=0.9``, seed 0;
        at least 4 draws). Every route runs through :func:`hierbandit.bayes.sample`:
        ``pm.sample`` with any installed backend (:func:`~hierbandit.bayes.available_samplers`,
        ``driver="pymc"``), or the package's own numpyro and nutpie drivers.
    draws, tune, chains, target_accept, random_seed, nuts_sampler, driver, progressbar
        Replace the matching fields of ``sampler`` when given.
    instance, arm, reward, features
        Column names for :func:`~hierbandit.data.read_log`.
    tolerance : float, optional
        Largest acceptable ``|z|`` (in MCSE units) for every mean and sd. Default
        :func:`family_tolerance` of the number of parameters compared: 4, raised just enough
        that exact formulas fail by chance in at most 1 % of runs however many parameters there
        are (4.59 at 1,140 parameters).
    parameterization : {"centered", "noncentered"}
        Passed to :func:`conditional_model` (default ``"centered"``, see Notes).
    dense_mass : bool
        Adapt a dense mass matrix (numpyro ``dense_mass=True``; PyMC ``init="jitter+adapt_full"``;
        nutpie ``adaptation="low_rank"``) unless the corresponding option is given explicitly.
        Default ``False`` (a diagonal one, see Notes).
    collapse_empty : bool
        Sample one coefficient vector per arm for all the instances without rows in it, and
        report it once (default ``True``; see :func:`conditional_model`); ``False`` samples and
        reports every (arm, instance).
    rhat_max, ess_min
        Diagnostic thresholds passed to :func:`~hierbandit.bayes.diagnose`.
    warn : bool
        Warn (``UserWarning``) when the diagnostics find problems.
    **sample_kwargs
        Further options, joined to the ``sampler``'s: ``pm.sample``'s own arguments
        (``cores``, ``init``…) and NUTS settings, as :func:`hierbandit.bayes.sample` takes them.

    Returns
    -------
    ClosedFormComparison

    Raises
    ------
    ValueError, TypeError
        On bad hyperparameters, a prior that does not match the log (naming ``prior``) or bad
        sampler settings, before anything is compiled or sampled.

    Notes
    -----
    **Defaults.** A centred model, a diagonal mass matrix and the direct numpyro driver with 2 ×
    2,000 draws: measured on logs of 30 to 500 instances with data-rich and data-poor cells
    (docs/decisions/bayes.md, B13), this passes the diagnostics with margin in well under the
    time of the earlier defaults (non-centred, dense mass matrix, ``pm.sample`` with nutpie),
    which need a long adaptation of a dense matrix over every coefficient and mix slowly along
    the ridge that data-rich instances make in the non-centred model. Those remain available:
    ``parameterization="noncentered", dense_mass=True, driver="pymc", nuts_sampler="nutpie",
    collapse_empty=False``.

    **Instances without data** (``collapse_empty``): all the instances without rows in arm k
    share one marginal posterior, N(β̂_{k0}, Φ_k + Σ_k); the model samples one representative
    for them and the table reports it once, ``beta[k, instances without data (n=…), feature]``,
    compared with the closed form of every one of them (the row keeps the farthest).

    **Progress.** The direct numpyro driver reports the sampling's progress and the time left
    as ``hierbandit.progress`` records (``pm.sample`` routes show PyMC's progress bar when
    ``progressbar``); the comparison reports its phases as one more task of that logger, and
    the wall time of each in ``settings["timings"]``.

    **Tolerance.** The closed form is exact given the hyperparameters, so every ``|z|`` should
    look like a draw from (roughly) a standard normal, which exceeds 4 with probability 6.3e-5:
    over the 2P values of P parameters a fixed bound of 4 fails by chance with probability
    about 2P × 6.3e-5 (2 % for 165 parameters, 13 % for 1,140), more when the ESS is low (the
    MCSE of an sd then rests on few effective squared draws). The default bound grows with P so
    that this chance stays at 1 % (:func:`family_tolerance`); a wrong formula is not hidden by
    it, since its z-scores grow with the number of draws. Check
    :attr:`ClosedFormComparison.verdict`: when the diagnostics fail the run is a sampler
    problem, not evidence against the formulas.
    """
    log = _as_log(data, instance=instance, arm=arm, reward=reward, features=features)
    K, d = int(log.n_arms), int(log.n_features)
    from hierbandit.bayes.prior import HierarchicalPrior

    if isinstance(Sigma, HierarchicalPrior):
        if prior is not None:
            raise TypeError("give the prior once: as the second argument or as prior=")
        prior, Sigma = Sigma, None
    if prior is not None:
        if Sigma is not None or sigma2 is not None:
            raise TypeError("prior replaces Sigma and sigma2: give one or the other")
        Sigma, sigma2, lam = _from_prior(prior, log, lam)
    elif Sigma is None or sigma2 is None or lam is None:
        missing = [n for n, v in (("Sigma", Sigma), ("sigma2", sigma2), ("lam", lam)) if v is None]
        raise TypeError(f"compare_closed_form needs prior, or Sigma, sigma2 and lam: {missing} "
                        "missing")  # fmt: skip
    Sigma, s2, lam = _check_hyperparameters(Sigma, sigma2, lam, K, d)
    cfg = resolve_sampler(
        sampler,
        CLOSED_FORM_SAMPLER,
        min_draws=4,
        extra=sample_kwargs,
        draws=draws,
        tune=tune,
        chains=chains,
        target_accept=target_accept,
        random_seed=random_seed,
        nuts_sampler=nuts_sampler,
        driver=driver,
        progressbar=progressbar,
    )
    if tolerance is not None:
        tolerance = check_scalar(tolerance, "tolerance", low=0.0, low_inclusive=False)
    check_choice(cfg.nuts_sampler, available_samplers(), "nuts_sampler")
    check_choice(parameterization, _PARAMETERIZATIONS, "parameterization")
    if not isinstance(dense_mass, bool | np.bool_):
        raise TypeError(f"dense_mass must be a bool, got {type(dense_mass).__name__}")
    collapse_empty = check_bool(collapse_empty, "collapse_empty")
    from hierbandit.bayes.sampling import sample

    timings: dict[str, float] = {}
    with progress_task("sampling vs closed form: phases", total=5) as phases:
        start = time.perf_counter()
        closed = closed_form_posterior(log, Sigma, s2, lam)  # also rejects an improper posterior
        timings["closed_form"] = time.perf_counter() - start
        phases.advance()

        start = time.perf_counter()
        a = _log_arrays(log)
        cells = _cells(a, collapse_empty)
        model = _build_model(a, Sigma, s2, lam, parameterization, cells)
        timings["model"] = time.perf_counter() - start
        phases.advance()

        start = time.perf_counter()
        idata = sample(model, cfg, dense_mass=bool(dense_mass))
        timings["sampling"] = wall = time.perf_counter() - start
        phases.advance()

        start = time.perf_counter()
        diag = diagnose(idata, rhat_max=rhat_max, ess_min=ess_min, warn=warn)
        timings["diagnostics"] = time.perf_counter() - start
        phases.advance()

        start = time.perf_counter()
        table, tolerance = _comparison_table(idata, closed, tolerance)
        timings["table"] = time.perf_counter() - start
        phases.advance()
    settings = {
        "draws": cfg.draws,
        "tune": cfg.tune,
        "chains": cfg.chains,
        "target_accept": cfg.target_accept,
        "random_seed": cfg.random_seed,
        "nuts_sampler": cfg.nuts_sampler,
        "route": cfg.label(),
        "parameterization": parameterization,
        "dense_mass": bool(dense_mass),
        "collapse_empty": collapse_empty,
        "lam": lam,
        "wall_time": wall,
        "timings": timings,
    }
    return ClosedFormComparison(table, idata, closed, diag, tolerance, settings)
