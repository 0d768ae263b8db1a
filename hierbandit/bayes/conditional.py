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

from hierbandit._validation import (
    _as_float_array,
    check_choice,
    check_covariance,
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
    "ClosedFormComparison",
    "closed_form_posterior",
    "compare_closed_form",
    "conditional_model",
]

_PARAMETERIZATIONS = ("noncentered", "centered")

#: NUTS settings of :func:`compare_closed_form` unless given: ``SamplerConfig()`` with 2,000
#: draws per chain, twice the default, so that the Monte-Carlo standard errors the comparison is
#: measured in are small next to the posterior standard deviations
CLOSED_FORM_SAMPLER = SamplerConfig(draws=2000)
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


# --------------------------------------------------------------------------- the model
def conditional_model(
    log: Any, Sigma: Any, sigma2: Any, lam: float, *, parameterization: str = "noncentered"
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

    Returns
    -------
    pymc.Model
        Coordinates ``arm``, ``instance``, ``feature`` (the log's labels and feature names) and
        ``row``. Free variables: ``beta0`` (arm, feature) and, non-centred, the standard-normal
        ``z`` (arm, instance, feature) or, centred, ``eta`` (arm, instance, feature); deterministic
        ``beta`` (arm, instance, feature); observed ``y`` (row). The design matrix and the row
        codes are stored as data ``X``, ``arm_idx`` and ``instance_idx``.

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

    The likelihood gathers ``beta[arm_idx, instance_idx]`` for all rows at once; the algebra
    uses broadcasting and ``pt.matmul`` only (PyTensor's JAX backend rejects ``pt.einsum``).
    """
    check_choice(parameterization, _PARAMETERIZATIONS, "parameterization")
    log = _as_log(log)
    a = _log_arrays(log)
    K, d = a["K"], a["d"]
    Sigma, s2, lam = _check_hyperparameters(Sigma, sigma2, lam, K, d)
    w, U = np.linalg.eigh(Sigma)
    w = np.clip(w, 0.0, None)
    sigma = np.sqrt(s2)
    coords = {
        "arm": a["arm_labels"],
        "instance": a["instance_labels"],
        "feature": a["features"],
        "row": np.arange(a["y"].shape[0]),
    }
    with pm.Model(coords=coords) as model:
        X = pm.Data("X", a["X"], dims=("row", "feature"))
        arm_idx = pm.Data("arm_idx", a["arm"], dims="row")
        inst_idx = pm.Data("instance_idx", a["instance"], dims="row")
        if lam > 0:
            beta0 = pm.Normal("beta0", 0.0, sigma=lam**-0.5, dims=("arm", "feature"))
        else:
            beta0 = pm.Flat("beta0", dims=("arm", "feature"))
        dims_b = ("arm", "instance", "feature")
        if parameterization == "noncentered":
            # (K, N, d) @ (K, d, d): row j of arm k is (L_k z_{k,j})ᵀ with L_kᵀ = diag(√w) U_kᵀ
            L_T = np.sqrt(w)[:, :, None] * np.swapaxes(U, -1, -2)
            z = pm.Normal("z", 0.0, 1.0, dims=dims_b)
            beta = beta0[:, None, :] + pt.matmul(z, pt.constant(L_T))
        else:
            pos = w > 1e-12 * np.maximum(1.0, w.max(axis=-1, keepdims=True))  # (K, d)
            m = pt.matmul(beta0[:, None, :], pt.constant(U))  # (K, 1, d): (U_kᵀ β_{k0})ᵀ
            mask = pt.constant(pos[:, None, :].astype(float))
            sd = np.where(pos, np.sqrt(w), 1.0)[:, None, :]
            eta = pm.Normal("eta", mu=mask * m, sigma=pt.constant(sd), dims=dims_b)
            coef = mask * eta + (1.0 - mask) * m  # eigen-coordinates of β_{k,j}
            beta = pt.matmul(coef, pt.constant(np.swapaxes(U, -1, -2)))
        beta = pm.Deterministic("beta", beta, dims=dims_b)
        mu = (X * beta[arm_idx, inst_idx]).sum(axis=-1)
        pm.Normal("y", mu=mu, sigma=pt.constant(sigma)[arm_idx], observed=a["y"], dims="row")
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
        One row per scalar parameter (``beta[arm, instance, feature]`` and
        ``beta0[arm, feature]``), indexed by that name, with columns ``variable``, ``arm``,
        ``instance`` (``None`` for ``beta0``), ``feature``, ``closed_mean``, ``closed_sd``,
        ``mcmc_mean``, ``mcmc_sd``, ``mcse_mean``, ``mcse_sd`` (ArviZ :func:`arviz.mcse`),
        ``z_mean = (mcmc_mean − closed_mean) / mcse_mean``, ``z_sd`` likewise, ``r_hat``,
        ``ess_bulk`` and ``ok = |z_mean| ≤ tolerance and |z_sd| ≤ tolerance``.
    idata : xarray.DataTree
        The MCMC run of :func:`conditional_model` (ArviZ's layout: ``posterior``,
        ``sample_stats``).
    closed_form : xarray.Dataset
        :func:`closed_form_posterior` on the same data and hyperparameters.
    diagnostics : Diagnostics
        Convergence diagnostics of the run (:func:`~hierbandit.bayes.diagnose`).
    tolerance : float
        The ``|z|`` bound of the ``ok`` column.
    settings : dict
        Sampler settings and the sampling wall time in seconds (``"wall_time"``).
    """

    table: pd.DataFrame
    idata: xr.DataTree
    closed_form: xr.Dataset
    diagnostics: Diagnostics
    tolerance: float
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        """Number of scalar parameters compared."""
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
        """The ``n`` parameters with the largest ``max(|z_mean|, |z_sd|)``."""
        key = self.table[["z_mean", "z_sd"]].abs().max(axis=1)
        return self.table.loc[key.sort_values(ascending=False).index[:n]]

    def covariance_table(self) -> pd.DataFrame:
        """MCMC vs closed-form covariance of every coefficient vector (``docs/bayes.md`` §6).

        Returns
        -------
        pandas.DataFrame
            One row per ``beta[arm, instance]`` and ``beta0[arm]`` vector with ``rel_frobenius``
            = ‖Ĉ_MCMC − C‖_F / ‖C‖_F and the smallest and largest variance ratio
            ``var_ratio_min``/``var_ratio_max`` (MCMC over closed form).
        """
        post = self.idata.posterior
        cf = self.closed_form
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

        beta = post["beta"].transpose("chain", "draw", "arm", "instance", "feature").to_numpy()
        beta0 = post["beta0"].transpose("chain", "draw", "arm", "feature").to_numpy()
        for k, arm in enumerate(cf["arm"].to_numpy().tolist()):
            for j, inst in enumerate(cf["instance"].to_numpy().tolist()):
                add(f"beta[{arm}, {inst}]", beta[:, :, k, j], cf["cov"].to_numpy()[k, j], arm, inst)
            add(f"beta0[{arm}]", beta0[:, :, k], cf["shared_cov"].to_numpy()[k], arm, None)
        return pd.DataFrame(rows).set_index("vector")

    def plot(self, path: str | Path | None = None) -> Figure:
        """z-scores per parameter and closed-form vs MCMC means.

        Parameters
        ----------
        path
            Where to save the figure (format from the suffix); nothing is saved when ``None``.

        Returns
        -------
        matplotlib.figure.Figure
            Left: ``z_mean`` and ``z_sd`` of every parameter with the ±``tolerance`` band.
            Right: MCMC mean against closed-form mean (±2 MCSE bars) with the identity line.
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


def _comparison_table(idata: xr.DataTree, cf: xr.Dataset, tolerance: float) -> pd.DataFrame:
    post = idata["posterior"].to_dataset()[["beta", "beta0"]]
    sample_dims = ("chain", "draw")
    mc_mean = post.mean(sample_dims)
    mc_sd = post.std(sample_dims, ddof=1)
    se_mean = az.mcse(post, method="mean")
    se_sd = az.mcse(post, method="sd")
    rhat = az.rhat(post)
    ess = az.ess(post, method="bulk")
    closed = {
        "beta": (cf["mean"], cf["sd"]),
        "beta0": (cf["shared_mean"], cf["shared_sd"]),
    }
    frames = []
    for var, dims in (("beta", ("arm", "instance", "feature")), ("beta0", ("arm", "feature"))):
        cols = {}

        def flat(da: xr.DataArray, dims: tuple[str, ...] = dims) -> np.ndarray:
            return da.transpose(*dims).to_numpy().ravel()

        cm, cs = closed[var]
        cols["closed_mean"], cols["closed_sd"] = flat(cm), flat(cs)
        cols["mcmc_mean"], cols["mcmc_sd"] = flat(mc_mean[var]), flat(mc_sd[var])
        cols["mcse_mean"], cols["mcse_sd"] = flat(se_mean[var]), flat(se_sd[var])
        cols["r_hat"], cols["ess_bulk"] = flat(rhat[var]), flat(ess[var])
        grid = np.meshgrid(*(cf[dm].to_numpy() for dm in dims), indexing="ij")
        labels = [g.ravel().tolist() for g in grid]
        frame = pd.DataFrame(cols)
        frame.insert(0, "variable", var)
        frame.insert(1, "arm", labels[0])
        frame.insert(2, "instance", labels[1] if var == "beta" else [None] * len(frame))
        frame.insert(3, "feature", labels[-1])
        frame.index = [f"{var}[{', '.join(map(str, lab))}]" for lab in zip(*labels, strict=True)]
        frames.append(frame)
    table = pd.concat(frames)
    table.index.name = "parameter"
    with np.errstate(divide="ignore", invalid="ignore"):
        table["z_mean"] = (table["mcmc_mean"] - table["closed_mean"]) / table["mcse_mean"]
        table["z_sd"] = (table["mcmc_sd"] - table["closed_sd"]) / table["mcse_sd"]
    table["ok"] = (table["z_mean"].abs() <= tolerance) & (table["z_sd"].abs() <= tolerance)
    return table[_TABLE_COLUMNS]


def compare_closed_form(
    data: Any,
    Sigma: Any,
    sigma2: Any,
    lam: float,
    *,
    sampler: SamplerConfig | None = None,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    target_accept: float | None = None,
    random_seed: int | None = None,
    nuts_sampler: str | None = None,
    instance: str = "instance",
    arm: str = "arm",
    reward: str = "reward",
    features: Any = None,
    tolerance: float = 4.0,
    parameterization: str = "noncentered",
    dense_mass: bool = True,
    rhat_max: float = 1.01,
    ess_min: float = 400,
    progressbar: bool | None = None,
    warn: bool = True,
    **sample_kwargs: Any,
) -> ClosedFormComparison:
    """Sample the fixed-hyperparameter model with NUTS and compare it with the closed form.

    Parameters
    ----------
    data : DataFrame, path (CSV/Parquet), xarray.Dataset or HistoricalLog
        The log, read by :func:`hierbandit.data.read_log` with the column names ``instance``,
        ``arm``, ``reward`` and ``features``.
    Sigma : array_like, shape (d, d) or (K, d, d)
        Fixed covariance Σ_k of the instance coefficients (PSD, may be singular).
    sigma2 : float or array_like, shape (K,)
        Fixed noise variance σ_k² (> 0).
    lam : float
        Precision of the shared-mean hyperprior (≥ 0).
    sampler : SamplerConfig, optional
        NUTS settings (default :data:`CLOSED_FORM_SAMPLER`: 2 chains × 2,000 draws after 1,000
        tuning steps, ``target_accept=0.9``, seed 0, and the default route of
        :func:`hierbandit.bayes.sample`; at least 4 draws). Every route runs through
        :func:`hierbandit.bayes.sample`: ``pm.sample`` with any installed backend
        (:func:`~hierbandit.bayes.available_samplers`), or ``driver="direct"`` for the
        package's own numpyro and nutpie drivers.
    draws, tune, chains, target_accept, random_seed, nuts_sampler, progressbar
        Replace the matching fields of ``sampler`` when given.
    instance, arm, reward, features
        Column names for :func:`~hierbandit.data.read_log`.
    tolerance : float
        Largest acceptable ``|z|`` (in MCSE units) for every mean and sd (default 4).
    parameterization : {"noncentered", "centered"}
        Passed to :func:`conditional_model`.
    dense_mass : bool
        Adapt a dense mass matrix (numpyro ``dense_mass=True``; PyMC ``init="jitter+adapt_full"``;
        nutpie ``adaptation="low_rank"``) unless the corresponding option is given
        explicitly. The posterior is Gaussian, so a dense mass matrix removes its correlations
        (between β₀ and the non-centred z when instances have much data) and NUTS mixes as on a
        standard normal: on the ebm synthetic setting the smallest bulk ESS of 2 × 2000 draws
        goes from about 160 (diagonal) to about 3500.
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
        On bad hyperparameters or sampler settings, before anything is compiled or sampled.

    Notes
    -----
    The closed form is exact given the hyperparameters, so every ``|z|`` should look like a draw
    from (roughly) a standard normal, which exceeds 4 with probability 6.3e-5: over the 2P
    values of P parameters a bound of 4 fails by chance with probability about 2P × 6.3e-5
    (2 % for 165 parameters, 6 % for 465), more when the ESS is low (the MCSE of an sd then
    rests on few effective squared draws). Check :attr:`ClosedFormComparison.verdict`: when the
    diagnostics fail the run is a sampler problem, not evidence against the formulas.
    """
    log = _as_log(data, instance=instance, arm=arm, reward=reward, features=features)
    K, d = int(log.n_arms), int(log.n_features)
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
        progressbar=progressbar,
    )
    tolerance = check_scalar(tolerance, "tolerance", low=0.0, low_inclusive=False)
    check_choice(cfg.nuts_sampler, available_samplers(), "nuts_sampler")
    check_choice(parameterization, _PARAMETERIZATIONS, "parameterization")
    if not isinstance(dense_mass, bool | np.bool_):
        raise TypeError(f"dense_mass must be a bool, got {type(dense_mass).__name__}")

    closed = closed_form_posterior(log, Sigma, s2, lam)  # also rejects an improper posterior
    model = conditional_model(log, Sigma, s2, lam, parameterization=parameterization)
    from hierbandit.bayes.sampling import sample

    start = time.perf_counter()
    idata = sample(model, cfg, dense_mass=bool(dense_mass))
    wall = time.perf_counter() - start
    table = _comparison_table(idata, closed, tolerance)
    diag = diagnose(idata, rhat_max=rhat_max, ess_min=ess_min, warn=warn)
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
        "wall_time": wall,
    }
    return ClosedFormComparison(table, idata, closed, diag, tolerance, settings)
