"""The logistic cascading click model in PyMC, priors from historical cascade logs, and the
Laplace-vs-NUTS comparison (Park & Jia 2025; ``specs/cascading.md`` §8).

The generative story: ``θ ~ N(m, C)`` (default ``N(0, λ⁻¹I)``, whose MAP is the ridge-penalised
logistic MLE with the λ of UCBBP's ``A = λI + …``); in each session a user with context ``x`` is
shown arms ``k_1, k_2, …`` chosen from past data, examines each with probability one until the
first click, and clicks ``k_h`` with probability ``σ([x; onehot(k_h)]ᵀθ)``. The arm choices and
the stopping rule depend only on observed quantities, so they are ignorable: the posterior is
the prior times the Bernoulli likelihood of the flattened table of displayed positions — plain
Bayesian logistic regression (spec §8.1). :func:`cascade_click_model` builds it in either form
(``"bernoulli"`` on the flattened rows, or ``"cascade"`` session by session) so that the
equivalence is testable.

* :func:`read_cascade_log` validates a historical log (one row per displayed position).
* :func:`fit_cascade_prior` fits a Gaussian prior on θ (Laplace — closed-form fast path — or
  NUTS) that warm-starts :class:`~hierbandit.cascade.policies.UCBBP` and its relatives
  (``UCBBP(..., prior=prior)``).
* :func:`compare_laplace_nuts` compares the batch Laplace posterior and the online one-step
  (``newton1``) posterior with NUTS: means, covariance, predicted click probabilities (§8.4).

PyMC, PyTensor and ArviZ are imported inside the functions that need them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import expit

from hierbandit._container import read_netcdf
from hierbandit._io import atomic_write, decode_attrs, write_json, write_sealed_netcdf
from hierbandit._validation import (
    MAX_ABS,
    _as_float_array,
    check_choice,
    check_covariance,
    check_positive_int,
    check_scalar,
    check_vector,
)
from hierbandit.errors import InvalidFileError
from hierbandit.stats.logistic import (
    LaplaceApproximation,
    OnlineLogistic,
    bernoulli_loglik,
    laplace_approximation,
    predictive_click_probability,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CascadeLog",
    "CascadePrior",
    "LaplaceNUTSComparison",
    "cascade_click_model",
    "cascade_laplace",
    "compare_laplace_nuts",
    "fit_cascade_prior",
    "load_cascade_prior",
    "read_cascade_log",
]

_HASH_TAG = b"hierbandit.CascadeLog/v1\x00"


# =========================================================================== the log
def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class CascadeLog:
    """A validated cascade log, one row per displayed position, sorted by
    (episode, user, position). Build one with :func:`read_cascade_log`.

    Attributes
    ----------
    X : ndarray, shape (n, d)
        Context of the session each row belongs to.
    arm : ndarray of int64, shape (n,)
        Displayed arm, in ``[0, K)``.
    click : ndarray of int8, shape (n,)
        1 on the clicked row of a session.
    episode, user, position : ndarray of int64, shape (n,)
        The original ids (``position`` is 0-based within its session after reading).
    session : ndarray of int64, shape (n,)
        Session code ``0..S-1`` in sorted order.
    n_arms : int
        ``K``.
    features : tuple of str
        Context column names.
    source : str
    data_hash : str
        SHA-256 of the content (independent of ``source`` and column names).
    columns : dict
        The column names read.
    """

    X: np.ndarray
    arm: np.ndarray
    click: np.ndarray
    episode: np.ndarray
    user: np.ndarray
    position: np.ndarray
    session: np.ndarray
    n_arms: int
    features: tuple[str, ...]
    source: str = "arrays"
    data_hash: str = ""
    columns: dict[str, Any] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        """Number of displayed positions."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """``d``."""
        return int(self.X.shape[1])

    @property
    def n_params(self) -> int:
        """``d + K``."""
        return self.n_features + self.n_arms

    @property
    def n_sessions(self) -> int:
        """Number of (episode, user) sessions."""
        return int(self.session[-1]) + 1 if self.n_rows else 0

    @property
    def horizon(self) -> int:
        """Longest session."""
        return int(self.position.max()) + 1 if self.n_rows else 0

    @property
    def n_clicks(self) -> int:
        return int(self.click.sum())

    def design(self) -> tuple[np.ndarray, np.ndarray]:
        """The flattened regression table: ``Z (n, d + K)`` rows ``[x; onehot(k)]`` and ``y (n,)``."""
        n, d = self.X.shape
        Z = np.zeros((n, d + self.n_arms))
        Z[:, :d] = self.X
        Z[np.arange(n), d + self.arm] = 1.0
        return Z, self.click.astype(float)

    def sessions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Session arrays: contexts ``(S, d)``, arms ``(S, H)`` (``-1`` after the session ended)
        and clicks ``(S, H)``."""
        S, H = self.n_sessions, self.horizon
        first = np.searchsorted(self.session, np.arange(S))
        Xs = self.X[first]
        arms = np.full((S, H), -1, dtype=np.int64)
        clicks = np.zeros((S, H), dtype=np.int8)
        arms[self.session, self.position] = self.arm
        clicks[self.session, self.position] = self.click
        return Xs, arms, clicks

    def episode_batches(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(Z, y)`` of every episode in order (to replay an online learner)."""
        Z, y = self.design()
        bounds = np.flatnonzero(np.diff(self.episode)) + 1
        return [
            (Zb, yb)
            for Zb, yb in zip(np.split(Z, bounds), np.split(y, bounds), strict=True)
            if yb.size
        ]

    def to_dataframe(self) -> pd.DataFrame:
        """The log as a DataFrame with the columns it was read with."""
        c = self.columns or {}
        out = {
            c.get("episode", "episode"): self.episode.copy(),
            c.get("user", "user"): self.user.copy(),
            c.get("position", "position"): self.position.copy(),
            c.get("arm", "arm"): self.arm.copy(),
            c.get("click", "click"): self.click.astype(np.int64),
        }
        for j, name in enumerate(self.features):
            out[name] = self.X[:, j].copy()
        return pd.DataFrame(out)

    def provenance(self) -> dict[str, Any]:
        """A JSON-serialisable record of the log."""
        return {
            "source": self.source,
            "data_hash": self.data_hash,
            "n_rows": self.n_rows,
            "n_sessions": self.n_sessions,
            "n_clicks": self.n_clicks,
            "n_arms": self.n_arms,
            "n_features": self.n_features,
            "features": list(self.features),
            "columns": dict(self.columns),
        }

    def __repr__(self) -> str:
        return (
            f"CascadeLog(n_rows={self.n_rows}, n_sessions={self.n_sessions}, "
            f"n_clicks={self.n_clicks}, n_arms={self.n_arms}, features={list(self.features)}, "
            f"data_hash={self.data_hash[:12]}…)"
        )


def _content_hash(log_arrays: dict[str, np.ndarray], features: tuple[str, ...]) -> str:
    h = hashlib.sha256(_HASH_TAG)
    h.update(json.dumps({"features": list(features)}).encode())
    for name in ("episode", "user", "position", "arm", "click"):
        h.update(np.ascontiguousarray(log_arrays[name], dtype="<i8").tobytes())
    h.update((np.ascontiguousarray(log_arrays["X"], dtype="<f8") + 0.0).tobytes())
    return h.hexdigest()


def read_cascade_log(
    data: Any,
    *,
    episode: str = "episode",
    user: str = "user",
    position: str = "position",
    arm: str = "arm",
    click: str = "click",
    features: Any = None,
    n_arms: int | None = None,
    position_base: int = 0,
) -> CascadeLog:
    """Read and validate a historical cascade log (one row per displayed position).

    Parameters
    ----------
    data : DataFrame, xarray.Dataset, path (.csv[.gz], .parquet, .nc) or CascadeLog
    episode, user, position, arm, click : str
        Column names. ``episode`` and ``user`` identify a session; ``position`` is its display
        step (contiguous from ``position_base``); ``arm`` the displayed arm id (a non-negative
        integer, the index of the arm's reward ``e_k``); ``click`` 0/1.
    features : list of str, optional
        Context columns (default: every other numeric column).
    n_arms : int, optional
        ``K``; arm ids must be below it (default: the largest id plus one).
    position_base : {0, 1}
        The first position's value.

    Returns
    -------
    CascadeLog

    Raises
    ------
    ValueError, TypeError
        Missing or duplicate columns, non-integer or negative ids, unknown arms, clicks other
        than 0/1, NaN/inf contexts, duplicate (episode, user, position) rows, and any violation
        of the cascade rule: positions not contiguous from ``position_base`` within a session,
        more than one click in a session, a displayed row after a click, a context that
        changes within a session.
    """
    if isinstance(data, CascadeLog):
        return data
    from hierbandit.data.log import _ids, _load, _missing_column, _numeric

    for name, value in (
        ("episode", episode),
        ("user", user),
        ("position", position),
        ("arm", arm),
        ("click", click),
    ):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a column name (str), got {type(value).__name__}")
    if position_base not in (0, 1) or isinstance(position_base, bool):
        raise ValueError(f"position_base must be 0 or 1, got {position_base!r}")
    frame, source = _load(data)
    if len(frame) == 0:
        raise ValueError("data is empty (0 rows)")
    columns = [str(c) for c in frame.columns]
    if len(set(columns)) != len(columns):
        raise ValueError(f"data has duplicate column names: {columns}")
    roles = {"episode": episode, "user": user, "position": position, "arm": arm, "click": click}
    if len(set(roles.values())) != len(roles):
        raise ValueError(f"the episode/user/position/arm/click columns must differ, got {roles}")
    for role, col in roles.items():
        if col not in columns:
            raise _missing_column(role, col, columns)
    if features is None:
        feats = [
            c
            for c in columns
            if c not in roles.values() and getattr(frame[c].dtype, "kind", "O") in "biuf"
        ]
        if not feats:
            raise ValueError("features: no numeric context columns besides the id columns")
    else:
        feats = [features] if isinstance(features, str) else list(features)
        if not feats:
            raise ValueError("features must name at least one column")
        for f in feats:
            if not isinstance(f, str):
                raise TypeError(f"features must hold column names (str), got {f!r}")
            if f in roles.values():
                raise ValueError(f"features must not include the id column {f!r}")
            if f not in columns:
                raise _missing_column("features", f, columns)
        if len(set(feats)) != len(feats):
            raise ValueError(f"features has duplicate names: {feats}")
    ep = _ids(frame[episode], episode, "episode")
    us = _ids(frame[user], user, "user")
    pos = _ids(frame[position], position, "position")
    ar = _ids(frame[arm], arm, "arm")
    if n_arms is None:
        K = int(ar.max()) + 1
    else:
        K = check_positive_int(n_arms, "n_arms")
        if ar.max() >= K:
            bad = int(np.flatnonzero(ar >= K)[0])
            raise ValueError(
                f"arm column {arm!r} holds unknown arms: ids must be in [0, {K}), got "
                f"{int(ar[bad])} at row {bad}"
            )
    cl_raw = frame[click]
    if getattr(cl_raw.dtype, "kind", "O") not in "biuf":
        raise TypeError(f"click column {click!r} must be 0/1, got dtype {cl_raw.dtype}")
    cl = _numeric(cl_raw, click, "click")
    if not np.all((cl == 0) | (cl == 1)):
        bad = int(np.flatnonzero((cl != 0) & (cl != 1))[0])
        raise ValueError(f"click column {click!r} must hold 0/1, got {cl[bad]!r} at row {bad}")
    X = np.column_stack([_numeric(frame[f], f, "feature") for f in feats])
    big = np.abs(X) > MAX_ABS  # squares of larger contexts overflow the information matrix
    if big.any():
        r, c = (int(v[0]) for v in np.nonzero(big))
        raise ValueError(
            f"feature column {feats[c]!r} must have magnitude <= {MAX_ABS:g}, got "
            f"{X[r, c]:g} at row {r}"
        )
    pos = pos - position_base
    if np.any(pos < 0):
        raise ValueError(f"position column {position!r} must start at {position_base}")

    order = np.lexsort((pos, us, ep))
    ep, us, pos, ar, cl, X = ep[order], us[order], pos[order], ar[order], cl[order], X[order]
    new_session = np.ones(len(ep), dtype=bool)
    new_session[1:] = (ep[1:] != ep[:-1]) | (us[1:] != us[:-1])
    session = np.cumsum(new_session) - 1
    starts = np.flatnonzero(new_session)
    first_of = starts[session]
    expected = np.arange(len(ep)) - first_of
    if np.any(pos != expected):
        i = int(np.flatnonzero(pos != expected)[0])
        dup = i > 0 and not new_session[i] and pos[i] == pos[i - 1]
        what = "duplicate position" if dup else "positions not contiguous"
        raise ValueError(
            f"{what} in session (episode={int(ep[i])}, user={int(us[i])}): positions must be "
            f"{position_base}, {position_base + 1}, … without gaps or repeats"
        )
    ends = np.append(starts[1:], len(ep)) - 1
    n_click = np.add.reduceat(cl, starts)
    if np.any(n_click > 1):
        s = int(np.flatnonzero(n_click > 1)[0])
        raise ValueError(
            f"session (episode={int(ep[starts[s]])}, user={int(us[starts[s]])}) has "
            f"{int(n_click[s])} clicks; a cascade session stops at its first click"
        )
    late = (n_click == 1) & (cl[ends] != 1)
    if np.any(late):
        s = int(np.flatnonzero(late)[0])
        raise ValueError(
            f"session (episode={int(ep[starts[s]])}, user={int(us[starts[s]])}) has rows after "
            "its click (cascade rule: every displayed item up to and including the click, "
            "nothing after)"
        )
    changed = np.any(X[first_of] != X, axis=1)
    if changed.any():
        i = int(np.flatnonzero(changed)[0])
        raise ValueError(
            f"the context changes within session (episode={int(ep[i])}, user={int(us[i])}); "
            "a session has one context"
        )
    arrays = {"episode": ep, "user": us, "position": pos, "arm": ar, "click": cl, "X": X}
    feats_t = tuple(feats)
    return CascadeLog(
        X=_readonly(X),
        arm=_readonly(ar),
        click=_readonly(cl.astype(np.int8)),
        episode=_readonly(ep),
        user=_readonly(us),
        position=_readonly(pos),
        session=_readonly(session.astype(np.int64)),
        n_arms=K,
        features=feats_t,
        source=source,
        data_hash=_content_hash(arrays, feats_t),
        columns={**roles, "features": list(feats), "position_base": position_base},
    )


# =========================================================================== the PyMC model
def _prior_arrays(p: int, lam: float, prior: Any) -> tuple[np.ndarray, np.ndarray] | None:
    if prior is None:
        return None
    if isinstance(prior, tuple) and len(prior) == 2:
        mean, cov = prior
    elif hasattr(prior, "mean") and hasattr(prior, "cov"):
        mean, cov = prior.mean, prior.cov
    else:
        raise TypeError("prior must be a CascadePrior or a (mean, cov) tuple")
    mean = check_vector(np.asarray(mean), p, "prior mean")
    cov = check_covariance(np.asarray(cov), p, "prior cov")
    if np.linalg.eigvalsh(cov).min() <= 0:
        raise ValueError("prior cov must be positive definite")
    return mean, cov


def _param_labels(features: tuple[str, ...] | list[str], K: int) -> list[str]:
    return [str(f) for f in features] + [f"arm{k}" for k in range(K)]


def cascade_click_model(
    data: Any, *, lam: float = 1.0, prior: Any = None, form: str = "bernoulli", **columns: Any
) -> Any:
    """PyMC model of the logistic cascading click model (spec §8.2).

    ``θ = [θ_x; α] ~ N(0, λ⁻¹ I)`` (or the Gaussian ``prior``); each displayed position has
    logit ``η = xᵀθ_x + α_k``.

    Parameters
    ----------
    data
        A cascade log (anything :func:`read_cascade_log` reads; ``columns`` are passed to it).
    lam : float
        Prior precision λ (> 0) when ``prior`` is None.
    prior : CascadePrior or (mean, cov), optional
        A Gaussian prior on θ.
    form : {"bernoulli", "cascade"}
        ``"bernoulli"``: ``pm.Bernoulli`` on the flattened displayed positions (production).
        ``"cascade"``: the session-level cascade likelihood as a ``pm.Potential`` (for each
        session ``Σ_{h<h*} log(1 − σ(η_h)) + log σ(η_{h*})`` if it ended in a click, else
        ``Σ_h log(1 − σ(η_h))``), built from session arrays without the per-row click column;
        its log density equals the Bernoulli form's (tested).

    Returns
    -------
    pymc.Model
        Free variable ``theta`` (dims ``param``); deterministic ``theta_x`` (``feature``) and
        ``alpha`` (``arm``). ``model.hb_meta["trace_vars"] = ["theta"]``.
    """
    import pymc as pm
    import pytensor.tensor as pt

    log = read_cascade_log(data, **columns)
    check_choice(form, ("bernoulli", "cascade"), "form")
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    d, K = log.n_features, log.n_arms
    labels = _param_labels(log.features, K)
    pr = _prior_arrays(d + K, lam, prior)
    coords = {"param": labels, "feature": list(log.features), "arm": list(range(K))}
    with pm.Model(coords=coords) as model:
        if pr is None:
            theta = pm.Normal("theta", 0.0, sigma=lam**-0.5, dims="param")
        else:
            theta = pm.MvNormal("theta", mu=pr[0], cov=pr[1], dims="param")
        pm.Deterministic("theta_x", theta[:d], dims="feature")
        pm.Deterministic("alpha", theta[d:], dims="arm")
        if form == "bernoulli":
            X = pt.as_tensor_variable(np.asarray(log.X))
            eta = pt.dot(X, theta[:d]) + theta[d:][np.asarray(log.arm)]
            pm.Bernoulli("click", logit_p=eta, observed=np.asarray(log.click, dtype=np.int64))
        else:
            Xs, arms, clicks = log.sessions()
            shown = arms >= 0
            last = shown.sum(axis=1) - 1
            is_last = np.zeros_like(shown)
            is_last[np.arange(arms.shape[0]), last] = True
            ended_click = clicks.sum(axis=1) == 1
            eta = (
                pt.dot(pt.as_tensor_variable(Xs), theta[:d])[:, None]
                + theta[d:][np.where(shown, arms, 0)]
            )
            skip = (shown & ~is_last) | (is_last & ~ended_click[:, None])
            take = is_last & ended_click[:, None]
            logp = pt.sum(
                np.asarray(skip, dtype=float) * (-pt.softplus(eta))
                + np.asarray(take, dtype=float) * (-pt.softplus(-eta))
            )
            pm.Potential("cascade", logp)
    model.hb_meta = {"trace_vars": ["theta"], "finite_init": True}
    return model


# =========================================================================== prior object
class CascadePrior:
    """A Gaussian prior on θ = [θ_x; α] fitted to historical cascade logs.

    ``UCBBP(..., prior=prior)`` (and every logistic cascade policy) starts from
    ``θ̂ = mean``, ``A = cov⁻¹`` instead of ``θ̂ = 0``, ``A = λI``.

    Parameters
    ----------
    dataset : xarray.Dataset
        ``mean`` (param) and ``cov`` ``(param, param_)``; attributes hold the provenance.
    idata : arviz.InferenceData, optional
        The NUTS run of an ``"mcmc"`` fit.
    """

    def __init__(self, dataset: xr.Dataset, idata: Any = None) -> None:
        if not isinstance(dataset, xr.Dataset):
            raise TypeError("dataset must be an xarray.Dataset")
        for name, dims in (("mean", ("param",)), ("cov", ("param", "param_"))):
            if name not in dataset:
                raise ValueError(f"dataset must contain {name!r}")
            if dataset[name].dims != dims:
                raise ValueError(f"{name} must have dims {dims}, got {dataset[name].dims}")
        p = dataset.sizes["param"]
        check_vector(dataset["mean"].values, p, "mean")
        cov = check_covariance(dataset["cov"].values, p, "cov")
        if np.linalg.eigvalsh(cov).min() <= 0:
            raise ValueError("cov must be positive definite")
        for key in ("n_arms", "n_features"):
            if key not in dataset.attrs:
                raise ValueError(f"dataset attrs must record {key!r}")
        if int(dataset.attrs["n_arms"]) + int(dataset.attrs["n_features"]) != p:
            raise ValueError("n_arms + n_features must equal the length of mean")
        self.dataset = dataset
        self.idata = idata

    @classmethod
    def from_arrays(
        cls,
        mean: Any,
        cov: Any,
        *,
        n_arms: int,
        features: Any = None,
        idata: Any = None,
        **attrs: Any,
    ) -> CascadePrior:
        """Build a prior from ``mean (d + K,)`` and ``cov (d + K, d + K)``."""
        K = check_positive_int(n_arms, "n_arms")
        m = _as_float_array(mean, "mean")
        if m.ndim != 1 or m.size <= K:
            raise ValueError(f"mean must be a vector longer than n_arms = {K}, got {m.shape}")
        d = m.size - K
        feats = [f"x{i}" for i in range(d)] if features is None else [str(f) for f in features]
        if len(feats) != d:
            raise ValueError(f"features must name the {d} context coefficients")
        labels = _param_labels(feats, K)
        ds = xr.Dataset(
            {
                "mean": (("param",), check_vector(m, d + K, "mean")),
                "cov": (("param", "param_"), check_covariance(cov, d + K, "cov")),
            },
            coords={"param": labels, "param_": labels},
            attrs={"n_arms": K, "n_features": d, "features": json.dumps(feats), **attrs},
        )
        return cls(ds, idata)

    @property
    def mean(self) -> np.ndarray:
        """Prior mean of θ, shape (d + K,)."""
        return self.dataset["mean"].values

    @property
    def cov(self) -> np.ndarray:
        """Prior covariance of θ."""
        return self.dataset["cov"].values

    @property
    def precision(self) -> np.ndarray:
        """``cov⁻¹`` (the initial ``A`` of a warm-started policy)."""
        inv = np.linalg.inv(self.cov)
        return 0.5 * (inv + inv.T)

    @property
    def sd(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))

    @property
    def n_arms(self) -> int:
        return int(self.dataset.attrs["n_arms"])

    @property
    def n_features(self) -> int:
        return int(self.dataset.attrs["n_features"])

    @property
    def features(self) -> list[str]:
        f = self.dataset.attrs.get("features")
        if isinstance(f, str):
            return list(json.loads(f[5:] if f.startswith("json:") else f))
        return [str(v) for v in (f if f is not None else [])]

    @property
    def method(self) -> str:
        return str(self.dataset.attrs.get("method", "unknown"))

    @property
    def provenance(self) -> dict[str, Any]:
        """Where the prior came from (method, λ, data hash, diagnostics, version…)."""
        return decode_attrs(dict(self.dataset.attrs))

    def click_probability(self, contexts: Any, method: str = "plugin") -> np.ndarray:
        """Predicted click probability of every arm for contexts ``(N, d)``, shape ``(N, K)``."""
        X = _as_float_array(contexts, "contexts")
        d = self.n_features
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"contexts must have shape (N, {d}), got {X.shape}")
        mu = (X @ self.mean[:d])[:, None] + self.mean[d:]
        C = self.cov
        s2 = (
            np.einsum("nd,de,ne->n", X, C[:d, :d], X)[:, None]
            + 2.0 * X @ C[:d, d:]
            + np.diag(C)[d:][None, :]
        )
        return predictive_click_probability(mu, np.maximum(s2, 0.0), method=method)

    def __repr__(self) -> str:
        return (
            f"CascadePrior(method={self.method!r}, n_features={self.n_features}, "
            f"n_arms={self.n_arms}, idata={'yes' if self.idata is not None else 'no'})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CascadePrior):
            return NotImplemented
        return self.dataset.identical(other.dataset) and (self.idata is None) == (
            other.idata is None
        )

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write to a sealed netCDF file atomically (the InferenceData, if any, under
        ``/idata``; the layout of :func:`hierbandit.bayes.prior.prior_tree`)."""
        from hierbandit.bayes.prior import prior_tree

        path = Path(path)
        if path.suffix != ".nc":
            raise ValueError(f"path must end in .nc, got {path.name!r}")
        tree = prior_tree(self.dataset, self.idata)
        return write_sealed_netcdf(tree, path, "cascade-prior")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CascadePrior:
        """Read a prior written by :meth:`save`; the file is untrusted input (its seal is
        verified, its container walked with a deadline and its arrays validated), and any
        defect raises :class:`hierbandit.errors.InvalidFileError` naming the file."""
        from hierbandit.bayes.prior import read_prior_tree

        tree = read_netcdf(path, "cascade-prior")
        try:
            root, idata = read_prior_tree(tree)
            if isinstance(root.attrs.get("features"), list):
                root.attrs["features"] = json.dumps(root.attrs["features"])
            return cls(root, idata)
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidFileError(path, f"invalid cascade prior ({exc})") from None


def load_cascade_prior(path: str | os.PathLike[str]) -> CascadePrior:
    """Load a :class:`CascadePrior` saved with :meth:`CascadePrior.save`."""
    return CascadePrior.load(path)


# =========================================================================== fitting
def cascade_laplace(data: Any, *, lam: float = 1.0, prior: Any = None, **columns: Any) -> Any:
    """The batch Laplace posterior ``N(θ_MAP, (P + Zᵀ W Z)⁻¹)`` of a cascade log (closed-form
    fast path; :func:`hierbandit.stats.logistic.laplace_approximation`)."""
    log = read_cascade_log(data, **columns)
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    Z, y = log.design()
    pr = _prior_arrays(log.n_params, lam, prior)
    if pr is None:
        return laplace_approximation(Z, y, lam=lam)
    prec = np.linalg.inv(pr[1])
    return laplace_approximation(Z, y, prior_mean=pr[0], prior_precision=0.5 * (prec + prec.T))


def _provenance(log: CascadeLog, method: str, config: dict[str, Any]) -> dict[str, Any]:
    from hierbandit import __version__

    return {
        "method": method,
        "hierbandit_version": __version__,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "data_hash": log.data_hash,
        "data_source": log.source,
        "n_rows": log.n_rows,
        "n_sessions": log.n_sessions,
        "n_clicks": log.n_clicks,
        "config": config,
    }


def fit_cascade_prior(
    data: Any,
    method: str = "laplace",
    *,
    lam: float = 1.0,
    inflate: float = 1.0,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    random_seed: int = 0,
    nuts_sampler: str = "numpyro",
    **columns: Any,
) -> CascadePrior:
    """Fit a Gaussian prior on θ to a historical cascade log.

    Parameters
    ----------
    data
        The log (anything :func:`read_cascade_log` reads; ``columns`` are passed to it, e.g.
        ``features=[...]``, ``n_arms=K``).
    method : {"laplace", "mcmc"}
        ``"laplace"``: the batch Laplace approximation at the MAP (Newton-IRLS; fast path).
        ``"mcmc"``: NUTS on :func:`cascade_click_model` (via
        :func:`hierbandit.bayes.sampling.sample`); the prior is the posterior mean and the
        sample covariance of θ, and the run is kept in ``prior.idata``.
    lam : float
        Precision λ of the ``N(0, λ⁻¹I)`` prior of the historical fit.
    inflate : float
        Multiply the fitted covariance by this factor (≥ 1 discounts old data; default 1).
    draws, tune, chains, random_seed, nuts_sampler
        NUTS settings (``"mcmc"`` only).

    Returns
    -------
    CascadePrior
        ``mean``, ``cov`` and the provenance (method, λ, data hash, diagnostics).
    """
    check_choice(method, ("laplace", "mcmc"), "method")
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    inflate = check_scalar(inflate, "inflate", low=0.0, low_inclusive=False)
    log = read_cascade_log(data, **columns)
    config: dict[str, Any] = {"lam": lam, "inflate": inflate}
    idata = None
    extra: dict[str, Any] = {}
    if method == "laplace":
        lap = cascade_laplace(log, lam=lam)
        mean, cov = lap.mean, lap.cov
        extra["newton_iterations"] = lap.map_result.n_iter
        extra["gradient_max_norm"] = lap.map_result.grad_norm
    else:
        from hierbandit.bayes.diagnostics import diagnose
        from hierbandit.bayes.sampling import sample

        draws = check_positive_int(draws, "draws", minimum=4)
        tune = check_positive_int(tune, "tune", minimum=0)
        chains = check_positive_int(chains, "chains")
        config.update(
            draws=draws, tune=tune, chains=chains, random_seed=random_seed, sampler=nuts_sampler
        )
        model = cascade_click_model(log, lam=lam)
        idata = sample(
            model,
            draws=draws,
            tune=tune,
            chains=chains,
            random_seed=random_seed,
            nuts_sampler=nuts_sampler,
        )
        th = idata.posterior["theta"].transpose("chain", "draw", "param").to_numpy()
        flat = th.reshape(-1, th.shape[-1])
        mean, cov = flat.mean(axis=0), np.cov(flat, rowvar=False)
        diag = diagnose(idata, var_names=["theta"], warn=True)
        extra.update(
            max_rhat=diag.max_rhat,
            min_ess_bulk=diag.min_ess_bulk,
            divergences=diag.divergences,
            diagnostics_ok=diag.ok,
        )
    prov = _provenance(log, method, config)
    prov.update(extra)
    return CascadePrior.from_arrays(
        mean,
        inflate * cov,
        n_arms=log.n_arms,
        features=log.features,
        idata=idata,
        **prov,
    )


# =========================================================================== comparison
def _md_table(df: pd.DataFrame) -> str:
    """A Markdown (GFM/MyST) table of a DataFrame, index included, floats as ``.4g``."""

    def fmt(v: Any) -> str:
        if isinstance(v, bool | np.bool_):
            return "yes" if v else "NO"
        if isinstance(v, float | np.floating):
            return f"{float(v):.4g}"
        return str(v).replace("|", "\\|")

    head = [str(df.index.name or "")] + [str(c) for c in df.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for idx, row in df.iterrows():
        lines.append("| " + " | ".join([fmt(idx)] + [fmt(v) for v in row.tolist()]) + " |")
    return "\n".join(lines)


@dataclass
class LaplaceNUTSComparison:
    """Laplace (batch and online) posteriors of θ against NUTS on the same log (spec §8.4).

    Attributes
    ----------
    table : pandas.DataFrame
        One row per coordinate of θ: ``mcmc_mean``, ``mcmc_sd``, ``mcse_mean``, ``r_hat``,
        ``ess_bulk``; ``laplace_mean``, ``laplace_sd``, ``z_mean = (mcmc_mean − laplace_mean) /
        mcse_mean``, ``gap_sd = (laplace_mean − mcmc_mean) / mcmc_sd``, ``sd_ratio``; the same
        for the online one-step path (``online_*``) and the paper-literal update
        (``literal_gap_sd``).
    covariance : pandas.DataFrame
        Relative Frobenius error of the Laplace and online covariances against the MCMC sample
        covariance, with the smallest/largest variance ratio.
    predictive : pandas.DataFrame
        Held-out rows ``z``: MCMC ``E[σ(zᵀθ)]`` with its MCSE, the Laplace plug-in and probit
        predictions, MCMC and Laplace logit s.d.
    checks : pandas.DataFrame
        The §8.4 checks: ``value``, ``threshold``, ``ok``.
    idata : arviz.InferenceData
    laplace : LaplaceApproximation
    settings : dict
    """

    table: pd.DataFrame
    covariance: pd.DataFrame
    predictive: pd.DataFrame
    checks: pd.DataFrame
    idata: Any
    laplace: LaplaceApproximation
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def all_ok(self) -> bool:
        return bool(self.checks["ok"].all())

    @property
    def max_abs_z(self) -> float:
        return float(self.table["z_mean"].abs().max())

    def to_markdown(self) -> str:
        """A report: settings, the checks, the per-coordinate table, covariance, predictions."""
        s = self.settings
        lines = [
            "# Laplace vs NUTS: logistic cascading click model",
            "",
            f"Data: {s.get('n_rows')} displayed positions, {s.get('n_sessions')} sessions, "
            f"{s.get('n_clicks')} clicks, d = {s.get('n_features')}, K = {s.get('n_arms')}; "
            f"prior N(0, λ⁻¹I) with λ = {s.get('lam')}; data hash {s.get('data_hash', '')[:16]}.",
            f"NUTS: {s.get('chains')} chains × {s.get('draws')} draws ({s.get('tune')} tuning), "
            f"sampler {s.get('sampler')}, seed {s.get('random_seed')}, "
            f"{s.get('wall_time', float('nan')):.1f} s.",
            "",
            f"Verdict: {'all checks pass' if self.all_ok else 'some checks FAIL'}; "
            f"max |z| of the Laplace means = {self.max_abs_z:.2f} MCSE.",
            "",
            "## Checks (spec §8.4)",
            "",
            _md_table(self.checks),
            "",
            "## Posterior of θ per coordinate",
            "",
            _md_table(self.table),
            "",
            "## Covariance",
            "",
            _md_table(self.covariance),
            "",
            "## Predicted click probabilities (held-out rows)",
            "",
            _md_table(self.predictive),
            "",
        ]
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None) -> Figure:
        """Three panels: z-scores of the batch Laplace means (±tolerance MCSE band); batch
        Laplace, online (``newton1``) and paper-literal means against the MCMC means (±2 sd
        bars); predicted click probabilities against MCMC."""
        from matplotlib.figure import Figure

        t = self.table
        tol = float(self.settings.get("tolerance", 4.0))
        fig = Figure(figsize=(13, 4.2), layout="constrained")
        ax_z, ax_m, ax_p = fig.subplots(1, 3)
        x = np.arange(len(t))
        ax_z.axhspan(-tol, tol, color="tab:green", alpha=0.12, label=f"±{tol:g} MCSE")
        ax_z.axhline(0.0, color="0.5", lw=0.8)
        ax_z.plot(x, t["z_mean"], "o", label="batch Laplace mean")
        ax_z.set_xticks(x, list(t.index), rotation=90, fontsize=7)
        ax_z.set_ylabel("(MCMC − approximation) / MCSE")
        ax_z.set_title(f"means, max |z| (Laplace) = {self.max_abs_z:.2f}")
        ax_z.legend(fontsize=7)
        lo = float(np.min(t[["mcmc_mean", "laplace_mean", "online_mean"]].to_numpy()))
        hi = float(np.max(t[["mcmc_mean", "laplace_mean", "online_mean"]].to_numpy()))
        pad = 0.1 * (hi - lo or 1.0)
        ax_m.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="0.4", lw=0.8)
        ax_m.errorbar(
            t["mcmc_mean"],
            t["laplace_mean"],
            yerr=2 * t["laplace_sd"],
            fmt="o",
            ms=4,
            label="batch Laplace ± 2 sd",
        )
        ax_m.errorbar(
            t["mcmc_mean"],
            t["online_mean"],
            yerr=2 * t["online_sd"],
            fmt="x",
            ms=4,
            label="online newton1 ± 2 sd",
        )
        if "literal_mean" in t:
            ax_m.plot(t["mcmc_mean"], t["literal_mean"], "s", mfc="none", label="paper-literal")
        ax_m.set_xlabel("MCMC posterior mean")
        ax_m.set_ylabel("approximate posterior mean")
        ax_m.legend(fontsize=7)
        pr = self.predictive
        ax_p.plot([0, 1], [0, 1], color="0.4", lw=0.8)
        ax_p.plot(pr["mcmc_prob"], pr["plugin_prob"], "o", ms=4, label="plug-in σ(μ)")
        ax_p.plot(pr["mcmc_prob"], pr["probit_prob"], "x", ms=4, label="probit")
        ax_p.set_xlabel("MCMC E[σ(zᵀθ)]")
        ax_p.set_ylabel("Laplace prediction")
        ax_p.set_title("click probabilities (held-out rows)")
        ax_p.legend(fontsize=7)
        if path is not None:
            fig.savefig(path)
        return fig

    def write(self, out: str | Path) -> dict[str, Path]:
        """Write ``report.md``, ``table.csv``, ``predictive.csv``, ``checks.json`` and
        ``comparison.png`` into ``out`` (atomically)."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = {
            "report": atomic_write(
                out / "report.md", lambda p: p.write_text(self.to_markdown(), encoding="utf-8")
            ),
            "table": atomic_write(out / "table.csv", lambda p: self.table.to_csv(p)),
            "predictive": atomic_write(out / "predictive.csv", lambda p: self.predictive.to_csv(p)),
            "checks": write_json(
                out / "checks.json",
                {
                    "settings": self.settings,
                    "checks": self.checks.reset_index().to_dict(orient="records"),
                },
            ),
        }
        fig = self.plot()
        paths["plot"] = atomic_write(out / "comparison.png", lambda p: fig.savefig(p, format="png"))
        return paths

    def __repr__(self) -> str:
        return (
            f"LaplaceNUTSComparison(n_params={len(self.table)}, all_ok={self.all_ok}, "
            f"max_abs_z={self.max_abs_z:.3g})"
        )


def _replay(log: CascadeLog, lam: float, rule: str) -> OnlineLogistic:
    est = OnlineLogistic(log.n_params, lam, rule)
    for Zb, yb in log.episode_batches():
        est.update(Zb, yb)
    return est


def compare_laplace_nuts(
    data: Any,
    *,
    lam: float = 1.0,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    random_seed: int = 0,
    nuts_sampler: str = "numpyro",
    n_predict: int = 15,
    tolerance: float = 4.0,
    find_map: bool = True,
    **columns: Any,
) -> LaplaceNUTSComparison:
    """Compare the Laplace posteriors of θ with NUTS on a cascade log (spec §8.4).

    The batch Laplace approximation (MAP by Newton-IRLS, Hessian at the MAP), the online
    one-step path of UCBBP (``newton1`` replayed episode by episode, posterior
    ``N(θ̂_T, A_T⁻¹)``) and the paper-literal update are compared with NUTS
    (:func:`hierbandit.bayes.sampling.sample`) on :func:`cascade_click_model`.

    Parameters
    ----------
    data
        The log (episodes are replayed in order for the online path).
    lam : float
        Prior precision λ, the same in the model and the online ``A``.
    draws, tune, chains, random_seed, nuts_sampler
        NUTS settings (spec §8.4: 4 × 1000 after 1000 tuning steps).
    n_predict : int
        Held-out rows ``[x; onehot(k)]`` (``x ~ N(0, I)``, uniform ``k``) for the predictions.
    tolerance : float
        Half-width (in MCSE) of the band drawn around the z-scores of the Laplace means
        (default 4). The z-scores are reported, not checked: the Laplace mean is the posterior
        mode, whose O(1/n) gap to the posterior mean becomes many MCSE once the MCMC estimate is
        precise enough; the check is the spec's scale-free gap ≤ 0.25 posterior sd.
    find_map : bool
        Also check ``pymc.find_MAP`` against the Newton MAP.

    Returns
    -------
    LaplaceNUTSComparison
    """
    import arviz as az

    from hierbandit.bayes.diagnostics import _ARVIZ_NUMPY_DEPRECATION, diagnose
    from hierbandit.bayes.sampling import sample

    log = read_cascade_log(data, **columns)
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    draws = check_positive_int(draws, "draws", minimum=4)
    tune = check_positive_int(tune, "tune", minimum=0)
    chains = check_positive_int(chains, "chains")
    n_predict = check_positive_int(n_predict, "n_predict")
    tolerance = check_scalar(tolerance, "tolerance", low=0.0, low_inclusive=False)
    d, K, p = log.n_features, log.n_arms, log.n_params
    labels = _param_labels(log.features, K)

    lap = cascade_laplace(log, lam=lam)
    online = _replay(log, lam, "newton1")
    literal = _replay(log, lam, "paper_literal")

    model = cascade_click_model(log, lam=lam)
    start = time.perf_counter()
    idata = sample(
        model,
        draws=draws,
        tune=tune,
        chains=chains,
        random_seed=random_seed,
        nuts_sampler=nuts_sampler,
    )
    wall = time.perf_counter() - start
    diag = diagnose(idata, var_names=["theta"], warn=False)
    th = idata.posterior["theta"].transpose("chain", "draw", "param")
    draws_flat = th.to_numpy().reshape(-1, p)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _ARVIZ_NUMPY_DEPRECATION, DeprecationWarning)
        mcse = az.mcse(idata, var_names=["theta"], method="mean")["theta"].to_numpy()
    rhat = az.rhat(idata, var_names=["theta"])["theta"].to_numpy()
    ess = az.ess(idata, var_names=["theta"], method="bulk")["theta"].to_numpy()
    mc_mean = draws_flat.mean(axis=0)
    mc_sd = draws_flat.std(axis=0, ddof=1)
    mc_cov = np.cov(draws_flat, rowvar=False)
    on_cov = online.cov
    table = pd.DataFrame(
        {
            "mcmc_mean": mc_mean,
            "mcmc_sd": mc_sd,
            "mcse_mean": mcse,
            "r_hat": rhat,
            "ess_bulk": ess,
            "laplace_mean": lap.mean,
            "laplace_sd": lap.sd,
            "z_mean": (mc_mean - lap.mean) / mcse,
            "gap_sd": (lap.mean - mc_mean) / mc_sd,
            "sd_ratio": lap.sd / mc_sd,
            "online_mean": online.theta,
            "online_sd": np.sqrt(np.diag(on_cov)),
            "online_z_mean": (mc_mean - online.theta) / mcse,
            "online_gap_sd": (online.theta - mc_mean) / mc_sd,
            "online_sd_ratio": np.sqrt(np.diag(on_cov)) / mc_sd,
            "literal_mean": literal.theta,
            "literal_gap_sd": (literal.theta - mc_mean) / mc_sd,
        },
        index=pd.Index(labels, name="param"),
    )

    def cov_row(name: str, C: np.ndarray) -> dict[str, Any]:
        ratio = np.diag(C) / np.diag(mc_cov)
        return {
            "approximation": name,
            "rel_frobenius": float(np.linalg.norm(C - mc_cov) / np.linalg.norm(mc_cov)),
            "var_ratio_min": float(ratio.min()),
            "var_ratio_max": float(ratio.max()),
        }

    covariance = pd.DataFrame(
        [cov_row("batch Laplace", lap.cov), cov_row("online newton1", on_cov)]
    ).set_index("approximation")

    # held-out predictions (their own stream: the comparison is reproducible from the seed)
    g = np.random.default_rng(np.random.SeedSequence([random_seed, 8_4]))
    Xh = g.standard_normal((n_predict, d))
    kh = g.integers(K, size=n_predict)
    Zh = np.zeros((n_predict, p))
    Zh[:, :d] = Xh
    Zh[np.arange(n_predict), d + kh] = 1.0
    eta = th.to_numpy() @ Zh.T  # (chain, draw, n_predict)
    prob = expit(eta)
    prob_ds = xr.Dataset({"prob": (("chain", "draw", "row"), prob)})
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _ARVIZ_NUMPY_DEPRECATION, DeprecationWarning)
        prob_mcse = az.mcse(prob_ds, method="mean")["prob"].to_numpy()
    mu_l, s2_l = lap.logit_moments(Zh)
    s2_on = np.einsum("np,pq,nq->n", Zh, on_cov, Zh)
    predictive = pd.DataFrame(
        {
            "arm": kh,
            "mcmc_prob": prob.mean(axis=(0, 1)),
            "mcmc_prob_mcse": prob_mcse,
            "plugin_prob": predictive_click_probability(mu_l, s2_l, "plugin"),
            "probit_prob": predictive_click_probability(mu_l, s2_l, "probit"),
            "mcmc_logit_sd": eta.reshape(-1, n_predict).std(axis=0, ddof=1),
            "laplace_logit_sd": np.sqrt(s2_l),
            "online_logit_sd": np.sqrt(np.maximum(s2_on, 0.0)),
        },
        index=pd.Index(np.arange(n_predict), name="row"),
    )
    logit_ratio = predictive["laplace_logit_sd"] / predictive["mcmc_logit_sd"]
    online_ratio = predictive["online_logit_sd"] / predictive["mcmc_logit_sd"]

    # the cascade and Bernoulli likelihoods at a random θ, in NumPy and compiled by PyMC
    theta_r = g.normal(size=p)
    Xs, arms, clicks = log.sessions()
    from hierbandit.stats.logistic import cascade_loglik

    Z, y = log.design()
    ll_flat = float(bernoulli_loglik(Z @ theta_r, y).sum())
    ll_cascade = cascade_loglik(theta_r, Xs, arms, clicks)
    m_casc = cascade_click_model(log, lam=lam, form="cascade")
    point = {"theta": theta_r}
    lp_b = float(model.compile_logp()(point))
    lp_c = float(m_casc.compile_logp()(point))

    map_gap = np.nan
    if find_map:
        import pymc as pm

        with model:
            mp = pm.find_MAP(progressbar=False, return_raw=False, maxeval=5000)
        map_gap = float(np.max(np.abs(np.asarray(mp["theta"]) - lap.mean)))

    rows = [
        ("MCMC max r_hat", diag.max_rhat, "<= 1.01", diag.max_rhat <= 1.01),
        ("MCMC min ess_bulk", diag.min_ess_bulk, ">= 400", diag.min_ess_bulk >= 400),
        ("MCMC divergences", diag.divergences, "== 0", diag.divergences == 0),
        (
            "Laplace mean, max |gap| (posterior sd)",
            float(table["gap_sd"].abs().max()),
            "<= 0.25",
            float(table["gap_sd"].abs().max()) <= 0.25,
        ),
        (
            "Laplace sd ratio, min",
            float(table["sd_ratio"].min()),
            ">= 0.85",
            float(table["sd_ratio"].min()) >= 0.85,
        ),
        (
            "Laplace sd ratio, max",
            float(table["sd_ratio"].max()),
            "<= 1.15",
            float(table["sd_ratio"].max()) <= 1.15,
        ),
        (
            "Laplace logit sd ratio (held-out), min",
            float(logit_ratio.min()),
            ">= 0.85",
            float(logit_ratio.min()) >= 0.85,
        ),
        (
            "Laplace logit sd ratio (held-out), max",
            float(logit_ratio.max()),
            "<= 1.15",
            float(logit_ratio.max()) <= 1.15,
        ),
        (
            "online newton1 mean, max |gap| (posterior sd)",
            float(table["online_gap_sd"].abs().max()),
            "<= 0.75",
            float(table["online_gap_sd"].abs().max()) <= 0.75,
        ),
        (
            "online sd ratio, range",
            float(np.max(np.abs(np.log(table["online_sd_ratio"])))),
            "|log| <= log 1.2",
            bool(
                table["online_sd_ratio"].between(0.8, 1.2).all()
                and online_ratio.between(0.8, 1.2).all()
            ),
        ),
        (
            "plug-in click prob, max abs err",
            float(np.max(np.abs(predictive["plugin_prob"] - predictive["mcmc_prob"]))),
            "< 0.01",
            float(np.max(np.abs(predictive["plugin_prob"] - predictive["mcmc_prob"]))) < 0.01,
        ),
        (
            "probit click prob, max abs err",
            float(np.max(np.abs(predictive["probit_prob"] - predictive["mcmc_prob"]))),
            "< 0.01",
            float(np.max(np.abs(predictive["probit_prob"] - predictive["mcmc_prob"]))) < 0.01,
        ),
        (
            "cascade vs Bernoulli log-lik (NumPy)",
            abs(ll_cascade - ll_flat),
            "< 1e-9",
            abs(ll_cascade - ll_flat) < 1e-9,
        ),
        (
            "cascade vs Bernoulli logp (PyMC compile_logp)",
            abs(lp_c - lp_b),
            "< 1e-9",
            abs(lp_c - lp_b) < 1e-9,
        ),
        (
            "paper-literal bias, max |gap| (posterior sd)",
            float(table["literal_gap_sd"].abs().max()),
            "> 2 (documents the bug)",
            float(table["literal_gap_sd"].abs().max()) > 2,
        ),
    ]
    if find_map:
        rows.insert(
            3, ("pm.find_MAP vs Newton MAP, max abs diff", map_gap, "< 1e-3", map_gap < 1e-3)
        )
    checks = pd.DataFrame(rows, columns=["check", "value", "threshold", "ok"]).set_index("check")
    checks["ok"] = checks["ok"].astype(bool)
    settings = {
        "lam": lam,
        "draws": draws,
        "tune": tune,
        "chains": chains,
        "random_seed": random_seed,
        "sampler": nuts_sampler,
        "tolerance": tolerance,
        "wall_time": wall,
        "n_rows": log.n_rows,
        "n_sessions": log.n_sessions,
        "n_clicks": log.n_clicks,
        "n_features": d,
        "n_arms": K,
        "data_hash": log.data_hash,
    }
    return LaplaceNUTSComparison(
        table=table,
        covariance=covariance,
        predictive=predictive,
        checks=checks,
        idata=idata,
        laplace=lap,
        settings=settings,
    )
