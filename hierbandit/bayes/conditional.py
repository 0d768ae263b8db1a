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
:func:`compare_closed_form` samples the model and compares the two in units of the Monte-Carlo
standard error: parameter by parameter (means and sds), the cross-covariances of every coefficient
vector, and the predictive mean xᵀμ and variance xᵀCx at contexts x (``docs/bayes.md`` §6).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import numbers
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import xarray as xr

from hierbandit._progress import PROGRESS_LOGGER, ProgressLine, progress_task
from hierbandit._validation import (
    _as_float_array,
    check_bool,
    check_choice,
    check_covariance,
    check_positive_int,
    check_scalar,
    check_vector,
)
from hierbandit.bayes.diagnostics import Diagnostics, _warn_problems, diagnose
from hierbandit.bayes.sampler_config import SamplerConfig, available_samplers, resolve_sampler
from hierbandit.stats.hierarchical import posterior_cross_covariances, posterior_given_hyper
from hierbandit.stats.suffstats import suffstats

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CLOSED_FORM_SAMPLER",
    "FAMILY_ALPHA",
    "N_CONTEXTS",
    "ClosedFormComparison",
    "closed_form_posterior",
    "compare_closed_form",
    "conditional_model",
    "family_bound",
    "family_tolerance",
]

_PARAMETERIZATIONS = ("noncentered", "centered", "whitened")
_LIKELIHOODS = ("rows", "suffstats")

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


def _cell_stats(
    a: dict[str, Any], cells: _Cells
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each cell's sufficient statistics from its rows: G = Σ xxᵀ (M, d, d), b = Σ xy (M, d),
    q = Σ y² (M,) and the number of rows n (M,)."""
    d, M = a["d"], cells.arm.size
    X, y, cell = a["X"], a["y"], cells.of_row
    G = np.zeros((M, d, d))
    b = np.zeros((M, d))
    q = np.zeros(M)
    n = np.zeros(M)
    np.add.at(G, cell, X[:, :, None] * X[:, None, :])
    np.add.at(b, cell, X * y[:, None])
    np.add.at(q, cell, y**2)
    np.add.at(n, cell, 1.0)
    return G, b, q, n


def _whitening(
    a: dict[str, Any], cells: _Cells, w: np.ndarray, U: np.ndarray, s2: np.ndarray, lam: float
) -> dict[str, np.ndarray]:
    """The affine maps of the whitened parameterisation (``conditional_model``, Notes), from
    the data's sufficient statistics alone.

    Per cell, with F = U_k diag(√w_k), the cell's G = Σ xxᵀ and b = Σ xy and
    P = I + FᵀGF/σ_k²: u = h − Aβ₀ + Rξ with h = P⁻¹Fᵀb/σ_k², A = P⁻¹FᵀG/σ_k², RRᵀ = P⁻¹, and
    β = β₀ + Fu = Bβ₀ + c + Qξ (B = I − FA, c = Fh, Q = FR). Per arm, β₀ = m + Tζ with
    Λ = λI + Σ_cells GB/σ_k² (the precision of β₀ once the cells are integrated out),
    m = Λ⁻¹ Σ_cells (b − Gc)/σ_k² and TTᵀ = Λ⁻¹ (by its eigenvalues, floored at 1e-12 of the
    largest, so that an unidentified direction, rejected by the closed form, does not fail
    here)."""
    d = a["d"]
    G, b = _cell_stats(a, cells)[:2]
    F = (U * np.sqrt(w)[:, None, :])[cells.arm]  # (M, d, d), F Fᵀ = Σ_k
    Ft = np.swapaxes(F, -1, -2)
    s2c = s2[cells.arm][:, None, None]
    P = np.eye(d) + Ft @ G @ F / s2c
    P_inv = np.linalg.inv(P)
    P_inv = 0.5 * (P_inv + np.swapaxes(P_inv, -1, -2))
    R = np.linalg.cholesky(P_inv)
    A = P_inv @ Ft @ G / s2c
    h = (P_inv @ (Ft @ b[..., None]))[..., 0] / s2c[..., 0]
    B = np.eye(d) - F @ A
    c = (F @ h[..., None])[..., 0]
    K = w.shape[0]
    Lam = np.broadcast_to(lam * np.eye(d), (K, d, d)).copy()
    r = np.zeros((K, d))
    np.add.at(Lam, cells.arm, G @ B / s2c)
    np.add.at(r, cells.arm, (b - (G @ c[..., None])[..., 0]) / s2c[..., 0])
    ev, V = np.linalg.eigh(0.5 * (Lam + np.swapaxes(Lam, -1, -2)))
    ev = np.maximum(ev, 1e-12 * np.maximum(ev.max(axis=-1, keepdims=True), 1e-300))
    T = V / np.sqrt(ev)[:, None, :]  # T Tᵀ = Λ⁻¹
    m = (T @ (np.swapaxes(T, -1, -2) @ r[..., None]))[..., 0]
    return {"B": B, "c": c, "Q": F @ R, "A": A, "h": h, "R": R, "m": m, "T": T}


def _whitened_shared(zeta: Any, W: dict[str, Any], expand: Any) -> Any:
    """β₀ = m + Tζ per arm (``(..., K, d)``)."""
    return W["m"] + (expand(zeta, -2) * W["T"]).sum(axis=-1)


def _whitened(beta0_c: Any, xi: Any, W: dict[str, Any], expand: Any) -> tuple[Any, Any]:
    """β = Bβ₀ + c + Qξ and u = h − Aβ₀ + Rξ per cell (``(..., M, d)``), by elementwise
    products and sums as :func:`_coefficients` (NumPy or PyTensor, ``expand`` their
    ``expand_dims``)."""
    b0, x = expand(beta0_c, -2), expand(xi, -2)  # (..., M, 1, d)
    beta = (b0 * W["B"]).sum(axis=-1) + W["c"] + (x * W["Q"]).sum(axis=-1)
    u = W["h"] - (b0 * W["A"]).sum(axis=-1) + (x * W["R"]).sum(axis=-1)
    return beta, u


# --------------------------------------------------------------------------- the model
def conditional_model(
    log: Any,
    Sigma: Any,
    sigma2: Any,
    lam: float,
    *,
    parameterization: str = "noncentered",
    collapse_empty: bool = False,
    likelihood: str = "rows",
    instance: str = "instance",
    arm: str = "arm",
    reward: str = "reward",
    features: Any = None,
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
    parameterization : {"noncentered", "centered", "whitened"}
        How the coefficients are sampled (see Notes). All three define the same model.
    collapse_empty : bool
        Sample one coefficient vector per arm for all the instances without rows in that arm
        instead of one per instance (see Notes). Default ``False``: every (arm, instance).
    likelihood : {"rows", "suffstats"}
        ``"rows"`` (default): the observed ``y``, one normal term per row. ``"suffstats"``: the
        same log-likelihood, constant included, from each cell's sufficient statistics
        (G = Σ xxᵀ, b = Σ xy, Σ y², n) as a potential ``loglik``: its cost grows with the
        number of cells, not of rows.
    instance, arm, reward, features
        Column names for :func:`~hierbandit.data.read_log` (unused when ``log`` is a
        ``HistoricalLog``).

    Returns
    -------
    pymc.Model
        Coordinates ``arm``, ``feature`` (the log's labels and feature names), ``row`` (with the
        rows likelihood) and either ``instance`` or, with ``collapse_empty``, ``cell``. Free
        variables: ``beta0`` (arm, feature) and, non-centred, the standard-normal ``z`` or,
        centred, ``eta``, with the dims of the deterministic ``beta``: (arm, instance,
        feature), or (cell, feature) with ``collapse_empty``; whitened, the flat ``zeta``
        (arm, feature) and ``xi`` (dims of ``beta``), ``beta0`` then being deterministic too.
        With the rows likelihood, observed ``y`` (row), and the design matrix and the row codes
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
    * ``"whitened"``: the coordinates in which the posterior is standard normal, built from the
      data's sufficient statistics alone. β_{k,j} = β_{k0} + L_k u_{k,j} with u ~ N(0, I) a
      priori (the potential ``u_prior``), and u = h − Aβ_{k0} + Rξ, where, with the cell's
      G = Σ xxᵀ, b = Σ xy and P = I + L_kᵀGL_k/σ_k², RRᵀ = P⁻¹, A = P⁻¹L_kᵀG/σ_k² and
      h = P⁻¹L_kᵀb/σ_k²: given β_{k0} and the data, ξ is N(0, I). The shared mean is
      β_{k0} = m_k + T_kζ_k with T_kT_kᵀ = Λ_k⁻¹, Λ_k = λI + Σ_j G_j(I − L_kA_j)/σ_k² the
      precision of β_{k0} once the instances are integrated out and m_k its mean; its prior
      N(0, λ⁻¹I) is the potential ``beta0_prior`` (none for ``lam = 0``). The maps are affine
      with a constant Jacobian, so the log density is the model's up to a constant whatever
      they are: an error in them would slow NUTS, never bias it. With them right, the
      posterior of (ζ, ξ) is N(0, I) exactly, and NUTS takes long steps with short trees
      however the coefficients are scaled or correlated (uncentred features, hundreds of rows
      per cell): the default of :func:`compare_closed_form`. A null direction of Σ_k gives
      a u_e that nothing else depends on, N(0, 1) a posteriori.

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

    The rows likelihood gathers each row's coefficient vector for all rows at once; the
    sufficient-statistics one takes per cell −n/2 log(2πσ_k²) − (Σy² − 2bᵀβ + βᵀGβ)/(2σ_k²).
    The algebra uses broadcasting, products and sums only (PyTensor's JAX backend rejects
    ``pt.einsum``). A whitened model has flat free variables and potentials: it is for
    posterior sampling, not for prior predictive draws.
    """
    check_choice(parameterization, _PARAMETERIZATIONS, "parameterization")
    check_choice(likelihood, _LIKELIHOODS, "likelihood")
    collapse_empty = check_bool(collapse_empty, "collapse_empty")
    log = _as_log(log, instance=instance, arm=arm, reward=reward, features=features)
    a = _log_arrays(log)
    Sigma, s2, lam = _check_hyperparameters(Sigma, sigma2, lam, a["K"], a["d"])
    cells = _cells(a, collapse_empty)
    return _build_model(a, Sigma, s2, lam, parameterization, cells, likelihood)


def _build_model(
    a: dict[str, Any],
    Sigma: np.ndarray,
    s2: np.ndarray,
    lam: float,
    parameterization: str,
    cells: _Cells,
    likelihood: str = "rows",
) -> pm.Model:
    K, N, d = a["K"], a["N"], a["d"]
    rows = likelihood == "rows"
    collapsed = cells.collapsed
    w, U = np.linalg.eigh(Sigma)
    w = np.clip(w, 0.0, None)
    sigma = np.sqrt(s2)
    coords: dict[str, Any] = {"arm": a["arm_labels"], "feature": a["features"]}
    if rows:
        coords["row"] = np.arange(a["y"].shape[0])
    if collapsed:
        coords["cell"] = cells.labels
        dims_b: tuple[str, ...] = ("cell", "feature")
        shape_b: tuple[int, ...] = (cells.arm.size, d)
    else:
        coords["instance"] = a["instance_labels"]
        dims_b = ("arm", "instance", "feature")
        shape_b = (K, N, d)
    M = cells.arm.size
    basis: np.ndarray | None = None
    mask: np.ndarray | None = None
    W: dict[str, np.ndarray] = {}
    if parameterization == "whitened":
        W = _whitening(a, cells, w, U, s2, lam)
    elif parameterization == "noncentered":
        basis = (np.sqrt(w)[:, :, None] * np.swapaxes(U, -1, -2))[cells.arm]  # L_kᵀ per cell
    else:
        pos = w > 1e-12 * np.maximum(1.0, w.max(axis=-1, keepdims=True))  # (K, d)
        basis = U[cells.arm]
        mask = pos[cells.arm].astype(float)
        sd = np.where(pos, np.sqrt(w), 1.0)[cells.arm]
    with pm.Model(coords=coords) as model:
        if rows:
            X = pm.Data("X", a["X"], dims=("row", "feature"))
            arm_idx = pm.Data("arm_idx", a["arm"], dims="row")
            if collapsed:
                cell_idx = pm.Data("cell_idx", cells.of_row, dims="row")
            else:
                inst_idx = pm.Data("instance_idx", a["instance"], dims="row")
        Wt = {k: pt.constant(v) for k, v in W.items()}
        if W:
            zeta = pm.Flat("zeta", dims=("arm", "feature"))
            beta0 = pm.Deterministic(
                "beta0", _whitened_shared(zeta, Wt, pt.expand_dims), dims=("arm", "feature")
            )
            if lam > 0:  # N(0, λ⁻¹I) up to a constant
                pm.Potential("beta0_prior", -0.5 * lam * (beta0**2).sum())
        elif lam > 0:
            beta0 = pm.Normal("beta0", 0.0, sigma=lam**-0.5, dims=("arm", "feature"))
        else:
            beta0 = pm.Flat("beta0", dims=("arm", "feature"))
        beta0_c = beta0[pt.constant(cells.arm)]
        if W:
            free = pm.Flat("xi", dims=dims_b)
            beta, u = _whitened(beta0_c, free.reshape((M, d)), Wt, pt.expand_dims)
            pm.Potential("u_prior", -0.5 * (u**2).sum())  # u = F⁺(β − β₀) ~ N(0, I)
        elif mask is None:
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
        if not rows:
            # Σ_rows log N(y; xᵀβ, σ²) of each cell from its sufficient statistics, exactly
            G, b, q, n = (pt.constant(v) for v in _cell_stats(a, cells))
            s2c = pt.constant(s2[cells.arm])
            flat = beta.reshape((M, d))
            quad = (flat * (G * pt.expand_dims(flat, -2)).sum(axis=-1)).sum(axis=-1)
            resid = q - 2.0 * (b * flat).sum(axis=-1) + quad
            pm.Potential("loglik", (-0.5 * n * pt.log(2.0 * np.pi * s2c) - resid / (2 * s2c)).sum())
        beta = pm.Deterministic("beta", beta.reshape(shape_b), dims=dims_b)
        if rows:
            row_beta = beta[cell_idx] if collapsed else beta[arm_idx, inst_idx]
            mu = (X * row_beta).sum(axis=-1)
            pm.Normal("y", mu=mu, sigma=pt.constant(sigma)[arm_idx], observed=a["y"], dims="row")

    free_name = "xi" if W else "z" if mask is None else "eta"

    def constrain(model: pm.Model, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The stored variables from the unconstrained draws (the direct driver's map)."""
        f = np.asarray(raw[free_name])
        lead = f.shape[: f.ndim - len(shape_b)]
        if W:
            zeta = np.asarray(raw["zeta"])
            b0 = _whitened_shared(zeta, W, np.expand_dims)
            beta, _ = _whitened(b0[..., cells.arm, :], f.reshape(*lead, M, d), W, np.expand_dims)
            return {"zeta": zeta, "beta0": b0, "xi": f, "beta": beta.reshape(*lead, *shape_b)}
        b0 = np.asarray(raw["beta0"])
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
def closed_form_posterior(
    log: Any,
    Sigma: Any,
    sigma2: Any,
    lam: float,
    *,
    instance: str = "instance",
    arm: str = "arm",
    reward: str = "reward",
    features: Any = None,
) -> xr.Dataset:
    """The exact posterior of :func:`conditional_model`, arm by arm (ebm eq. 4.1–4.3).

    Parameters
    ----------
    log, Sigma, sigma2, lam, instance, arm, reward, features
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
    log = _as_log(log, instance=instance, arm=arm, reward=reward, features=features)
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
        estimate (they are all equal when the formulas are right). These are the marginals
        only: :attr:`cross_table` and :attr:`predictive_table` check the correlations.
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
        The ``|z|`` bound of the ``ok`` columns of all three tables.
    settings : dict
        Sampler settings, the sampling wall time in seconds (``"wall_time"``, compilation
        included) and the wall time of every phase (``"timings"``: ``closed_form``, ``model``,
        ``sampling``, ``diagnostics``, ``table``: the three tables).
    cross_table : pandas.DataFrame
        The full posterior covariance of every coefficient vector: one row per sampled vector
        (``beta[arm, instance]``, a collapsed ``beta[arm, instances without data (n=…)]``
        once, ``beta0[arm]``) and pair of features i > j (the variances are the table's
        ``sd``), indexed ``beta[arm, instance, feature_i, feature_j]``. Columns ``vector``,
        ``arm``, ``instance``, ``n_instances``, ``feature``, ``feature_``, ``closed_cov``,
        ``mcmc_cov`` (of the draws), ``mcse`` (of the mean of the products of the centred
        draws, from their ESS), ``z = (mcmc_cov − closed_cov) / mcse`` and ``ok``.
    predictive_table : pandas.DataFrame
        Predictive checks at the :attr:`contexts`: one row per vector and context x, indexed
        ``beta[arm, instance] @ x0``. Columns ``vector``, ``arm``, ``instance``,
        ``n_instances``, ``context`` (its row in :attr:`contexts`), ``closed_mean`` = xᵀμ,
        ``mcmc_mean`` (of xᵀβ over the draws), ``mcse_mean``, ``z_mean``, ``closed_var`` =
        xᵀCx (the square of a UCB width), ``mcmc_var``, ``mcse_var`` (of the mean of
        (xᵀβ − xᵀβ̄)², from its ESS), ``z_var`` and ``ok``.
    contexts : numpy.ndarray
        The contexts of the predictive checks, (n, d).
    """

    table: pd.DataFrame
    idata: xr.DataTree
    closed_form: xr.Dataset
    diagnostics: Diagnostics
    tolerance: float
    settings: dict[str, Any] = field(default_factory=dict)
    cross_table: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=_CROSS_COLUMNS))
    predictive_table: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=_PREDICTIVE_COLUMNS)
    )
    contexts: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    @property
    def n_params(self) -> int:
        """Number of scalar parameters compared (rows of :attr:`table`)."""
        return len(self.table)

    def _tables(self) -> dict[str, pd.DataFrame]:
        return {
            "table": self.table,
            "cross_table": self.cross_table,
            "predictive_table": self.predictive_table,
        }

    @property
    def all_ok(self) -> bool:
        """Whether every check agrees within ``tolerance`` MCSE: each parameter's mean and sd,
        each cross-covariance, and each predictive mean and variance."""
        return all(bool(t["ok"].all()) for t in self._tables().values())

    @property
    def max_abs_z(self) -> float:
        """The largest ``|z|`` over every check (NaN when there is none)."""
        tables = self._tables()
        parts = [
            tables[t][list(cs)].abs().to_numpy(dtype=float).ravel()
            for t, cs in _CHECK_SCORES.values()
        ]
        z = np.concatenate(parts)
        return float(np.nanmax(z)) if z.size and not np.all(np.isnan(z)) else float("nan")

    def checks(self) -> pd.DataFrame:
        """One row per check: ``marginal`` (means and sds of :attr:`table`),
        ``cross-covariance`` (:attr:`cross_table`), ``predictive mean`` and ``predictive
        variance`` (:attr:`predictive_table`), with the number of ``z_scores``, how many
        ``failed`` (``|z|`` above the tolerance, or not computable), ``max_abs_z`` and the row of
        the ``worst``."""
        tables = self._tables()
        rows = []
        for check, (name, cols) in _CHECK_SCORES.items():
            z = tables[name][list(cols)].abs().astype(float)
            worst_z = z.max(axis=1)
            has = bool(len(z)) and not worst_z.isna().all()
            rows.append(
                {
                    "check": check,
                    "z_scores": int(z.size),
                    "failed": int((~(z <= self.tolerance)).to_numpy().sum()),
                    "max_abs_z": float(worst_z.max()) if has else float("nan"),
                    "worst": worst_z.idxmax() if has else None,
                }
            )
        return pd.DataFrame(rows).set_index("check")

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
        failed = self.checks()["failed"].to_dict()
        return (
            f"{type(self).__name__}(n_params={self.n_params}, all_ok={self.all_ok}, "
            f"max_abs_z={self.max_abs_z:.3g}, tolerance={self.tolerance:g}, "
            f"failed={{marginal: {failed['marginal']}, cross: {failed['cross-covariance']}, "
            f"predictive: {failed['predictive mean'] + failed['predictive variance']}}}, "
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
    idata: xr.DataTree, cf: xr.Dataset, summary: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The comparison, one row per parameter (:attr:`ClosedFormComparison.table`), without its
    ``ok`` column (:func:`_set_ok`). The MCSEs, R-hat and bulk ESS are read from ``summary``
    (:attr:`Diagnostics.summary` of the same run, which labels every parameter as the table
    does) when it has every parameter, else computed."""
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
    columns = ("mcse_mean", "mcse_sd", "r_hat", "ess_bulk")
    labels = pd.Index(labels_b + labels_0)
    if (
        summary is not None
        and set(columns) <= set(summary.columns)
        and summary.index.is_unique
        and labels.isin(summary.index).all()
    ):
        for name in columns:  # diagnose's summary, one variable at a time: the same values
            values = summary[name].reindex(labels).to_numpy(dtype=float)
            stats[name] = (values[: M * d].reshape(M, d), values[M * d :].reshape(K, d))
    else:
        # ArviZ's functions on each variable: az.summary of a Dataset whose variables order
        # their dimensions differently (beta0 (arm, feature), beta (cell, feature)) pairs some
        # labels with another parameter's values (arviz-stats 1.3.3)
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
    table["ok"] = False
    return table[_TABLE_COLUMNS]


_CROSS_COLUMNS = [
    "vector", "arm", "instance", "n_instances", "feature", "feature_", "closed_cov", "mcmc_cov",
    "mcse", "z", "ok",
]  # fmt: skip
_PREDICTIVE_COLUMNS = [
    "vector", "arm", "instance", "n_instances", "context", "closed_mean", "mcmc_mean", "mcse_mean",
    "z_mean", "closed_var", "mcmc_var", "mcse_var", "z_var", "ok",
]  # fmt: skip
#: how many contexts (random rows of the log) the predictive checks use unless given
N_CONTEXTS = 5


@dataclass(frozen=True)
class _Vectors:
    """Every sampled coefficient vector (the cells of ``beta``, then ``beta0`` per arm) with
    its draws and the closed form of each instance it stands for."""

    labels: list[str]  # (V,) "beta[3, 20]", "beta[3, instances without data (n=4)]", "beta0[3]"
    arm: list[Any]  # (V,) arm label
    instance: list[Any]  # (V,) instance label, None for a collapsed vector and for beta0
    n_instances: list[Any]  # (V,) instances it stands for, pd.NA for beta0
    draws: np.ndarray  # (chain, draw, V, d)
    means: list[np.ndarray]  # V × (m, d): the closed-form mean of each of its m instances
    covs: list[np.ndarray]  # V × (m, d, d)


def _vectors(idata: xr.DataTree, cf: xr.Dataset) -> _Vectors:
    post = idata["posterior"]
    cells = _table_cells(post, cf)
    arms = cf["arm"].to_numpy().tolist()
    insts = cf["instance"].to_numpy().tolist()
    order = ("chain", "draw", "cell", "feature") if cells.collapsed else (
        "chain", "draw", "arm", "instance", "feature")  # fmt: skip
    beta = post["beta"].transpose(*order).to_numpy()
    beta = beta.reshape(*beta.shape[:2], -1, beta.shape[-1])  # (chain, draw, cell, d)
    beta0 = post["beta0"].transpose("chain", "draw", "arm", "feature").to_numpy()
    mean, cov = cf["mean"].to_numpy(), cf["cov"].to_numpy()
    labels, arm, inst, n_inst, means, covs = [], [], [], [], [], []
    for c, (k, j) in enumerate(zip(cells.arm.tolist(), cells.instance.tolist(), strict=True)):
        members = [j] if j >= 0 else np.flatnonzero(cells.counts[k] == 0).tolist()
        labels.append(f"beta[{cells.labels[c]}]")
        arm.append(arms[k])
        inst.append(insts[j] if j >= 0 else None)
        n_inst.append(int(cells.n_instances[c]))
        means.append(mean[k, members])
        covs.append(cov[k, members])
    for k, a in enumerate(arms):
        labels.append(f"beta0[{a}]")
        arm.append(a)
        inst.append(None)
        n_inst.append(pd.NA)
        means.append(cf["shared_mean"].to_numpy()[k][None])
        covs.append(cf["shared_cov"].to_numpy()[k][None])
    draws = np.concatenate([beta, beta0], axis=2)
    return _Vectors(labels, arm, inst, n_inst, draws, means, covs)


def _farthest(mcmc: np.ndarray, mcse: np.ndarray, closed: list[np.ndarray]) -> np.ndarray:
    """Per vector, the closed-form values (``closed[v]``: (m, ...)) of the instance it stands
    for that lies farthest from the MCMC estimate (``mcmc``, ``mcse``: (V, ...)), judged by the
    largest ``|z|`` over the vector's entries; all equal when the formulas are right."""
    out = np.empty_like(mcmc)
    for v, values in enumerate(closed):
        if len(values) == 1:
            out[v] = values[0]
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.abs(mcmc[v] - values) / mcse[v]
        z = np.nan_to_num(z, nan=np.inf).reshape(len(values), -1).max(axis=1)
        out[v] = values[int(np.argmax(z))]
    return out


def _check_frame(vec: _Vectors, per: int, index: pd.Index, columns: dict[str, Any]) -> pd.DataFrame:
    """A check table with ``per`` rows per vector, its identifying columns first."""
    rep = lambda values: [v for v in values for _ in range(per)]  # noqa: E731
    frame = pd.DataFrame(
        {
            "vector": rep(vec.labels),
            "arm": rep(vec.arm),
            "instance": pd.Series(rep(vec.instance), dtype=object),
            "n_instances": pd.array(rep(vec.n_instances), dtype="Int64"),
        }
    )
    for name, values in columns.items():
        frame[name] = values
    frame.index = index
    return frame


def _cross_and_predictive(
    idata: xr.DataTree, cf: xr.Dataset, contexts: np.ndarray
) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """The cross-covariance and predictive tables (:class:`ClosedFormComparison`), without
    their ``ok`` column, and the ESS of every coefficient's squared deviations (V, d), for the
    floor of the table's ``mcse_sd`` (:func:`_floor_mcse_sd`).

    Every MCSE is sd(series)/√ESS(series) (ArviZ's ESS of the mean). Cross-covariances: for
    every vector and pair of features i > j, the MCMC covariance (``ddof=1``) against the
    closed form, the series being the products (β_i − β̄_i)(β_j − β̄_j). Predictive: for every
    vector and context x, the mean of xᵀβ against xᵀμ, and its variance against xᵀCx, the
    series being (xᵀβ − xᵀβ̄)². For these variance-type series the sd is the larger of the
    draws' and of its value for the Gaussian posterior the closed form states
    (√(C_iiC_jj + C_ij²), √2·xᵀCx): the draws' own sd is small exactly when their variance is
    low by chance, which would make the ``|z|`` of that chance too large.
    """
    vec = _vectors(idata, cf)
    B = vec.draws  # (chain, draw, V, d)
    n = B.shape[0] * B.shape[1]
    scale = n / (n - 1.0)
    feats = cf["feature"].to_numpy().tolist()
    d = len(feats)
    rows, cols = np.tril_indices(d, k=-1)  # i > j, row by row
    centred = B - B.mean(axis=(0, 1))
    u = centred[..., rows] * centred[..., cols]  # (chain, draw, V, P)
    s = np.einsum("cdvf,xf->cdvx", B, contexts)  # (chain, draw, V, n_ctx)
    w = (s - s.mean(axis=(0, 1))) ** 2
    dims = ("chain", "draw", "vector")
    series = xr.Dataset(
        {
            "u": ((*dims, "pair"), u),
            "s": ((*dims, "context"), s),
            "w": ((*dims, "context"), w),
            "q": ((*dims, "feature"), centred**2),
        }
    )
    ess = az.ess(series, method="mean")  # one call: ArviZ's ESS of every series

    def sd(x: np.ndarray) -> np.ndarray:
        return np.asarray(x.std(axis=(0, 1), ddof=1))

    def root(name: str) -> np.ndarray:
        return np.sqrt(ess[name].to_numpy())

    mcmc_cov = u.mean(axis=(0, 1)) * scale
    sd_u = sd(u)
    closed_cov = _farthest(
        mcmc_cov, sd_u / root("u"), [c[:, rows, cols] for c in vec.covs]
    ) if rows.size else np.zeros((len(vec.labels), 0))  # fmt: skip
    diag = np.stack([np.diagonal(c[0]) for c in vec.covs])  # (V, d), equal over members
    null_u = np.sqrt(np.abs(diag[:, rows] * diag[:, cols] + closed_cov**2))
    mcse_cov = np.fmax(sd_u, null_u) / root("u") * scale

    mcmc_mean, mcse_mean = s.mean(axis=(0, 1)), sd(s) / root("s")
    mcmc_var, sd_w = w.mean(axis=(0, 1)) * scale, sd(w)
    both = [
        np.concatenate([m @ contexts.T, np.einsum("xf,mfg,xg->mx", contexts, C, contexts)], axis=1)
        for m, C in zip(vec.means, vec.covs, strict=True)
    ]  # per vector (m, 2 n_ctx): xᵀμ then xᵀCx of each instance it stands for
    closed = _farthest(
        np.concatenate([mcmc_mean, mcmc_var], axis=1),
        np.concatenate([mcse_mean, sd_w / root("w") * scale], axis=1),
        both,
    )
    n_ctx = contexts.shape[0]
    closed_mean, closed_var = closed[:, :n_ctx], closed[:, n_ctx:]
    mcse_var = np.fmax(sd_w, np.sqrt(2.0) * np.abs(closed_var)) / root("w") * scale

    with np.errstate(divide="ignore", invalid="ignore"):
        pairs = [(feats[i], feats[j]) for i, j in zip(rows.tolist(), cols.tolist(), strict=True)]
        cross = _check_frame(
            vec,
            len(pairs),
            pd.Index(
                [f"{lab[:-1]}, {fi}, {fj}]" for lab in vec.labels for fi, fj in pairs],
                name="parameter",
            ),
            {
                "feature": [fi for _ in vec.labels for fi, _ in pairs],
                "feature_": [fj for _ in vec.labels for _, fj in pairs],
                "closed_cov": closed_cov.ravel(),
                "mcmc_cov": mcmc_cov.ravel(),
                "mcse": mcse_cov.ravel(),
                "z": ((mcmc_cov - closed_cov) / mcse_cov).ravel(),
                "ok": False,
            },
        )
        pred = _check_frame(
            vec,
            n_ctx,
            pd.Index(
                [f"{lab} @ x{c}" for lab in vec.labels for c in range(n_ctx)], name="prediction"
            ),
            {
                "context": np.tile(np.arange(n_ctx), len(vec.labels)),
                "closed_mean": closed_mean.ravel(),
                "mcmc_mean": mcmc_mean.ravel(),
                "mcse_mean": mcse_mean.ravel(),
                "z_mean": ((mcmc_mean - closed_mean) / mcse_mean).ravel(),
                "closed_var": closed_var.ravel(),
                "mcmc_var": mcmc_var.ravel(),
                "mcse_var": mcse_var.ravel(),
                "z_var": ((mcmc_var - closed_var) / mcse_var).ravel(),
                "ok": False,
            },
        )
    return cross[_CROSS_COLUMNS], pred[_PREDICTIVE_COLUMNS], ess["q"].to_numpy()


def _floor_mcse_sd(table: pd.DataFrame, ess_sq: np.ndarray) -> None:
    """Floor the table's ``mcse_sd`` (ArviZ's, from the draws' second and fourth moments) at
    its value for the Gaussian posterior the closed form states, σ/√(2 ESS) with the ESS of
    the squared deviations (``ess_sq``, in the table's row order), and recompute ``z_sd``."""
    null = table["closed_sd"].to_numpy() / np.sqrt(2.0 * ess_sq.ravel())
    table["mcse_sd"] = np.fmax(table["mcse_sd"].to_numpy(dtype=float), null)
    with np.errstate(divide="ignore", invalid="ignore"):
        table["z_sd"] = (table["mcmc_sd"] - table["closed_sd"]) / table["mcse_sd"]


#: the z-score columns of each check (:meth:`ClosedFormComparison.checks`)
_CHECK_SCORES = {
    "marginal": ("table", ("z_mean", "z_sd")),
    "cross-covariance": ("cross_table", ("z",)),
    "predictive mean": ("predictive_table", ("z_mean",)),
    "predictive variance": ("predictive_table", ("z_var",)),
}


def _set_ok(tables: dict[str, pd.DataFrame], tolerance: float) -> None:
    """Fill each table's ``ok`` column: every z-score of the row within ``tolerance`` (a NaN
    z-score, from a zero MCSE, fails)."""
    for name, frame in tables.items():
        scores = [c for table, cs in _CHECK_SCORES.values() if table == name for c in cs]
        frame["ok"] = (frame[scores].abs() <= tolerance).all(axis=1)


def _n_scores(tables: dict[str, pd.DataFrame]) -> int:
    return sum(len(tables[t]) * len(cs) for t, cs in _CHECK_SCORES.values())


def _contexts(contexts: Any, X: np.ndarray, seed: int) -> np.ndarray:
    """The contexts of the predictive checks: ``contexts`` random rows of the log (an int, or
    :data:`N_CONTEXTS` for ``None``; drawn with ``seed``) or the given (n, d) array."""
    d = X.shape[1]
    if contexts is None or isinstance(contexts, numbers.Integral):
        n = N_CONTEXTS if contexts is None else check_positive_int(contexts, "contexts")
        rows = np.random.default_rng(seed).choice(X.shape[0], size=min(n, X.shape[0]),
                                                  replace=False)  # fmt: skip
        return X[np.sort(rows)].copy()
    C = _as_float_array(contexts, "contexts")
    if C.ndim != 2 or C.shape[1] != d or C.shape[0] < 1:
        raise ValueError(f"contexts must have shape (n, {d}) (n ≥ 1 contexts of the log's "
                         f"{d} features), got {C.shape}")  # fmt: skip
    if not np.all(np.isfinite(C)):
        raise ValueError("contexts must be finite (no NaN or inf)")
    return C


#: chance that a comparison of exact formulas fails with the default tolerance, whatever the
#: number of parameters (:func:`family_tolerance`)
FAMILY_ALPHA = 0.01


def family_bound(n_scores: int, alpha: float = FAMILY_ALPHA) -> float:
    """The bound on ``|z|`` that ``n_scores`` z-scores, standard normal when the formulas are
    right, all stay under with probability at least 1 − ``alpha`` (Bonferroni:
    Φ⁻¹(1 − α / (2 n))), and never less than 4: the default tolerance of
    :func:`compare_closed_form` over every z-score it computes."""
    from scipy.stats import norm

    n = check_positive_int(int(n_scores), "n_scores", minimum=0)
    alpha = check_scalar(alpha, "alpha", low=0.0, low_inclusive=False, high=1.0)
    return max(4.0, float(norm.isf(alpha / (2 * max(n, 1)))))


def family_tolerance(n_params: int, alpha: float = FAMILY_ALPHA) -> float:
    """:func:`family_bound` of the 2P z-scores of P parameters (a mean and an sd each): 4 up to
    78 parameters, 4.17 at 165, 4.59 at 1,140, 4.73 at 2,265 with α = 1 %."""
    n = check_positive_int(int(n_params), "n_params", minimum=0)
    return family_bound(2 * max(n, 1), alpha)


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
    contexts: Any = None,
    parameterization: str = "whitened",
    likelihood: str = "suffstats",
    dense_mass: bool = False,
    collapse_empty: bool = True,
    rhat_max: float = 1.01,
    ess_min: float = 400,
    confirm: bool = True,
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
        Replace the matching fields of ``sampler`` when given. With ``progressbar`` (the
        default) the progress is shown on standard error (see Notes).
    instance, arm, reward, features
        Column names for :func:`~hierbandit.data.read_log`.
    tolerance : float, optional
        Largest acceptable ``|z|`` (in MCSE units) for every check: each mean and sd, each
        cross-covariance, each predictive mean and variance. Default :func:`family_bound` of
        the number of z-scores computed: 4, raised just enough that exact formulas fail by
        chance in at most 1 % of runs however many checks there are (4.83 for the 7,220
        z-scores of 150 instances of a sparse log).
    contexts : int or array_like, shape (n, d), optional
        The contexts x of the predictive checks (xᵀμ and xᵀCx against the draws): an array of
        held-out contexts, or how many rows of the log to draw at random (with the run's
        ``random_seed``). Default :data:`N_CONTEXTS` (5) random rows.
    parameterization : {"whitened", "centered", "noncentered"}
        Passed to :func:`conditional_model` (default ``"whitened"``, see Notes).
    likelihood : {"suffstats", "rows"}
        Passed to :func:`conditional_model` (default ``"suffstats"``: the rows' log-likelihood
        from each cell's sufficient statistics, exactly; ``"rows"`` one term per row).
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
    confirm : bool
        When a healthy run fails a check, sample again (the next seed) and give the verdict on
        the two runs' draws pooled (default ``True``; see Notes). ``False``: one run.
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
    **Defaults.** The whitened model (:func:`conditional_model`: coordinates in which the
    posterior is standard normal, built from the data's sufficient statistics), its
    likelihood from each cell's sufficient statistics, a diagonal mass matrix and the direct
    numpyro driver with 2 × 2,000 draws after 1,000 tuning steps. Both model options are exact
    rewrites of the same density (NUTS targets the exact posterior whatever the closed form
    says); they make a gradient cost a few operations per cell instead of per row and let NUTS
    take long steps however the coefficients are scaled and correlated. On the MovieLens log
    of 150 users (58,863 ratings) the centred model with the rows likelihood (the earlier
    default, still ``parameterization="centered", likelihood="rows"``) sampled for 726 s with
    a step size of 0.08; the defaults take about 40 s (docs/bayes.md, Sampling vs closed
    form). The defaults before that (non-centred, dense mass matrix,
    ``pm.sample`` with nutpie) remain available: ``parameterization="noncentered",
    likelihood="rows", dense_mass=True, driver="pymc", nuts_sampler="nutpie",
    collapse_empty=False``.

    **Confirmation.** With ``confirm`` (the default), a healthy run in which some check is past
    the tolerance is sampled again with the next seed, and the verdict is given on the two runs
    pooled (twice the chains; :attr:`ClosedFormComparison.idata` holds them all,
    ``settings["confirmation"]`` the seed and the first run's failures). A wrong formula's
    z-scores grow by √2 with the doubled draws; a chance excursion of the first run is diluted.
    This costs a second sampling only when a check failed.

    **Instances without data** (``collapse_empty``): all the instances without rows in arm k
    share one marginal posterior, N(β̂_{k0}, Φ_k + Σ_k); the model samples one representative
    for them and the table reports it once, ``beta[k, instances without data (n=…), feature]``,
    compared with the closed form of every one of them (the row keeps the farthest).

    **What is compared.** Each scalar's mean and sd (:attr:`ClosedFormComparison.table`), the
    full posterior covariance of each coefficient vector, every off-diagonal entry against the
    covariance of the draws (:attr:`~ClosedFormComparison.cross_table`), and at each context x
    the predictive mean xᵀμ and variance xᵀCx against those of xᵀβ over the draws
    (:attr:`~ClosedFormComparison.predictive_table`), all in units of a Monte-Carlo standard
    error from the ESS of the series concerned (ArviZ). A closed form with the right marginals
    and wrong correlations fails the last two. :meth:`ClosedFormComparison.checks` counts the
    failures of each.

    **Progress.** The direct numpyro driver reports the sampling's progress (steps per chain,
    warm-up included) and the time left as ``hierbandit.progress`` records, and the
    comparison its phases as one more task of that logger, with the wall time of each in
    ``settings["timings"]``. With ``progressbar`` (the default) and no handler of the
    package's loggers attached (the ``hierbandit`` command's, or
    :func:`~hierbandit.show_progress`'s), the comparison shows them on standard error while
    it runs (:class:`~hierbandit._progress.ProgressLine`: one line per task, with the time
    elapsed and left); ``pm.sample`` routes also show PyMC's progress bar.

    **Time.** 150 users of the MovieLens log (K = 5, d = 3, 2,265 parameters) take about a
    minute with the defaults on two shared cores, 150 instances of a sparse synthetic log
    about half a minute (docs/bayes.md, Sampling vs closed form).

    **Tolerance.** The closed form is exact given the hyperparameters, so every ``|z|`` should
    look like a draw from (roughly) a standard normal, which exceeds 4 with probability 6.3e-5:
    over the 2P values of P parameters a fixed bound of 4 fails by chance with probability
    about 2P × 6.3e-5 (2 % for 165 parameters, 13 % for 1,140), more when the ESS is low (the
    MCSE of an sd then rests on few effective squared draws). The default bound grows with the
    number of z-scores of all the checks so that this chance stays at 1 % (:func:`family_bound`);
    a wrong formula is not hidden by it, since its z-scores grow with the number of draws. Check
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
    check_choice(likelihood, _LIKELIHOODS, "likelihood")
    if not isinstance(dense_mass, bool | np.bool_):
        raise TypeError(f"dense_mass must be a bool, got {type(dense_mass).__name__}")
    collapse_empty = check_bool(collapse_empty, "collapse_empty")
    confirm = check_bool(confirm, "confirm")
    a = _log_arrays(log)
    X_checks = _contexts(contexts, a["X"], cfg.random_seed)
    from hierbandit.bayes.sampling import sample

    timings: dict[str, float] = {}
    confirmation: dict[str, Any] | None = None
    given_tolerance = tolerance

    def compare(idata: xr.DataTree) -> tuple[Diagnostics, dict[str, pd.DataFrame], float]:
        with _phase("diagnostics", "diagnostics", timings):
            diag = diagnose(idata, rhat_max=rhat_max, ess_min=ess_min, warn=False)
        with _phase("table", "the comparison tables", timings):
            table = _comparison_table(idata, closed, diag.summary)
            cross, pred, ess_sq = _cross_and_predictive(idata, closed, X_checks)
            _floor_mcse_sd(table, ess_sq)
            tables = {"table": table, "cross_table": cross, "predictive_table": pred}
            tol = (
                given_tolerance if given_tolerance is not None else family_bound(_n_scores(tables))
            )
            _set_ok(tables, tol)
        return diag, tables, tol

    with _progress_shown(cfg.progressbar):
        with _phase("closed_form", "the closed form", timings):
            closed = closed_form_posterior(log, Sigma, s2, lam)  # rejects an improper posterior
        with _phase("model", "the model", timings):
            cells = _cells(a, collapse_empty)
            model = _build_model(a, Sigma, s2, lam, parameterization, cells, likelihood)
        with _phase("sampling", None, timings):  # NUTS reports its own progress
            idata = sample(model, cfg, dense_mass=bool(dense_mass))
        wall = timings["sampling"]
        diag, tables, tolerance = compare(idata)
        failed = not all(bool(t["ok"].all()) for t in tables.values())
        if confirm and diag.ok and failed:
            # a check past the tolerance: twice the draws (a second run, pooled with the first)
            # before calling it a mismatch
            first = ClosedFormComparison(tables["table"], idata, closed, diag, tolerance, {},
                                         tables["cross_table"], tables["predictive_table"])  # fmt: skip
            again = cfg.override(random_seed=cfg.random_seed + 1)
            start = time.perf_counter()
            with progress_task(  # a line of its own, before the second run's progress
                "sampling vs closed form: a check failed, confirming it on a second run", total=1
            ) as note:
                note.advance()
            more = sample(model, again, dense_mass=bool(dense_mass))
            timings["confirmation"] = time.perf_counter() - start
            wall += timings["confirmation"]
            idata = _pooled(idata, more)
            diag, tables, tolerance = compare(idata)
            confirmation = {
                "random_seed": again.random_seed,
                "first_max_abs_z": first.max_abs_z,
                "first_failed": first.checks()["failed"].to_dict(),
            }
    if warn and diag.problems:
        _warn_problems(diag.problems, stacklevel=3)
    settings = {
        "draws": cfg.draws,
        "tune": cfg.tune,
        "chains": int(idata["posterior"].sizes["chain"]),
        "target_accept": cfg.target_accept,
        "random_seed": cfg.random_seed,
        "nuts_sampler": cfg.nuts_sampler,
        "route": cfg.label(),
        "parameterization": parameterization,
        "likelihood": likelihood,
        "dense_mass": bool(dense_mass),
        "collapse_empty": collapse_empty,
        "lam": lam,
        "wall_time": wall,
        "timings": timings,
        "confirmation": confirmation,
    }
    return ClosedFormComparison(
        tables["table"], idata, closed, diag, tolerance, settings, tables["cross_table"],
        tables["predictive_table"], X_checks,
    )  # fmt: skip


def _pooled(first: xr.DataTree, second: xr.DataTree) -> xr.DataTree:
    """The chains of two runs of the same model as one run (the second's chains numbered
    after the first's); other groups from the first."""
    groups = {}
    for name in first.children:
        ds = first[name].to_dataset()
        if "chain" in ds.dims and name in second.children:
            other = second[name].to_dataset()
            other = other.assign_coords(chain=other["chain"] + ds.sizes["chain"])
            ds = xr.concat([ds, other], dim="chain", combine_attrs="override")
        groups[name] = ds
    return xr.DataTree.from_dict(groups)


@contextlib.contextmanager
def _phase(name: str, label: str | None, timings: dict[str, float]) -> Iterator[None]:
    """One phase of the comparison: its wall time in ``timings[name]`` and, with a ``label``,
    a progress task ``"sampling vs closed form: <label>"`` of one unit."""
    start = time.perf_counter()
    if label is None:
        yield
    else:
        with progress_task(f"sampling vs closed form: {label}", total=1) as task:
            yield
            task.advance()
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


def _progress_rendered(logger: logging.Logger) -> bool:
    """Whether a handler of the package's loggers (``hierbandit.progress`` or ``hierbandit``,
    as the command's renderer or :func:`~hierbandit.show_progress` attach) already shows the
    progress records."""
    current: logging.Logger | None = logger
    while current is not None and current.name != "root":
        if current.handlers:
            return True
        if not current.propagate:
            break
        current = current.parent
    return False


@contextlib.contextmanager
def _progress_shown(enabled: bool) -> Iterator[None]:
    """Show the progress records (the sampler's steps with the time left, the comparison's
    phases) as lines on standard error while the comparison runs, when ``enabled`` and nothing
    of the package shows them already."""
    logger = logging.getLogger(PROGRESS_LOGGER)
    if not enabled or _progress_rendered(logger):
        yield
        return
    handler, level = ProgressLine(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
