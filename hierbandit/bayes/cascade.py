"""The logistic cascading click model in PyMC and Gaussian priors on θ from historical cascade
logs (Park & Jia 2025; ``docs/cascading.md``, The Bayesian side; ``docs/maths/cascade.md`` §1,
§2.4).

The generative story: ``θ ~ N(m, C)`` (default ``N(0, λ⁻¹I)``, whose MAP is the ridge-penalised
logistic MLE with the λ of UCBBP's ``A = λI + …``); in each session a user with context ``x`` is
shown arms ``k_1, k_2, …`` chosen from past data, examines each with probability one until the
first click, and clicks ``k_h`` with probability ``σ([x; onehot(k_h)]ᵀθ)``. The arm choices and
the stopping rule depend only on observed quantities, so they are ignorable: the posterior is
the prior times the Bernoulli likelihood of the flattened table of displayed positions — plain
Bayesian logistic regression. :func:`cascade_click_model` builds it in either form
(``"bernoulli"`` on the flattened rows, or ``"cascade"`` session by session) so that the
equivalence is testable.

* The log is a :class:`~hierbandit.data.CascadeLog` (:func:`hierbandit.data.read_cascade_log`).
* :func:`fit_cascade_prior` fits a Gaussian prior on θ (Laplace — closed-form fast path — or
  NUTS) that warm-starts :class:`~hierbandit.cascade.policies.UCBBP` and its relatives
  (``UCBBP(..., prior=prior)``); :class:`CascadePrior` saves and loads as every fitted prior
  does (:class:`~hierbandit.bayes._artifact.PriorArtifact`).
* :func:`~hierbandit.bayes.cascade_audit.compare_laplace_nuts` compares the Laplace posteriors
  with NUTS.

PyMC and PyTensor are imported inside the functions that need them.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import xarray as xr

from hierbandit._validation import (
    _as_float_array,
    check_choice,
    check_covariance,
    check_positive_int,
    check_scalar,
    check_vector,
)
from hierbandit.bayes._artifact import PriorArtifact, provenance_attrs, read_prior_tree
from hierbandit.bayes.sampler_config import SamplerConfig, resolve_sampler
from hierbandit.cascade.policies import check_prior_layout
from hierbandit.data.cascade_log import CascadeLog, read_cascade_log
from hierbandit.stats.logistic import laplace_approximation, predictive_click_probability

__all__ = [
    "CASCADE_SAMPLER",
    "CascadePrior",
    "add_session_checks",
    "cascade_click_model",
    "cascade_laplace",
    "fit_cascade_prior",
    "load_cascade_prior",
    "session_loglik",
]

#: NUTS settings of :func:`fit_cascade_prior` and
#: :func:`~hierbandit.bayes.cascade_audit.compare_laplace_nuts` unless given: 4 chains × 1,000
#: draws after 1,000 tuning steps, the size of the Laplace-vs-NUTS comparison of
#: ``docs/cascading.md`` (the other settings are ``SamplerConfig()``'s)
CASCADE_SAMPLER = SamplerConfig(chains=4)


# =========================================================================== the PyMC model
def _prior_arrays(log: CascadeLog, prior: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(mean, cov)`` of a prior for the parameters of ``log``.

    A prior that records its layout (a :class:`CascadePrior`: ``n_features``, ``n_arms`` and
    the feature names) must match the log's: the same length ``d + K`` with another split, or
    other context columns (or the same ones in another order), would put its coefficients on
    the wrong parameters. Names ``x0, x1, …`` (a prior built from arrays without names) are
    not compared; a ``(mean, cov)`` tuple is matched by length only."""
    if prior is None:
        return None
    p = log.n_params
    if isinstance(prior, tuple) and len(prior) == 2:
        mean, cov = prior
    elif hasattr(prior, "mean") and hasattr(prior, "cov"):
        _check_prior_layout(prior, log)
        mean, cov = prior.mean, prior.cov
    else:
        raise TypeError("prior must be a CascadePrior or a (mean, cov) tuple")
    mean = check_vector(np.asarray(mean), p, "prior mean")
    cov = check_covariance(np.asarray(cov), p, "prior cov")
    if np.linalg.eigvalsh(cov).min() <= 0:
        raise ValueError("prior cov must be positive definite")
    return mean, cov


def _check_prior_layout(prior: Any, log: CascadeLog) -> None:
    check_prior_layout(prior, log.n_features, log.n_arms, "the log")
    names = [str(f) for f in getattr(prior, "features", None) or []]
    default = [f"x{i}" for i in range(len(names))]
    if names and names != default and names != [str(f) for f in log.features]:
        raise ValueError(
            f"prior was fitted on the features {names} but the log has {list(log.features)} "
            "(the context coefficients must name the same columns, in the same order)"
        )


def _param_labels(features: tuple[str, ...] | list[str], K: int) -> list[str]:
    return [str(f) for f in features] + [f"arm{k}" for k in range(K)]


def cascade_click_model(
    data: Any, *, lam: float = 1.0, prior: Any = None, form: str = "bernoulli", **columns: Any
) -> Any:
    """PyMC model of the logistic cascading click model (``docs/cascading.md``, The Bayesian side).

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
    pr = _prior_arrays(log, prior)
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
class CascadePrior(PriorArtifact):
    """A Gaussian prior on θ = [θ_x; α] fitted to historical cascade logs.

    ``UCBBP(..., prior=prior)`` (and every logistic cascade policy) starts from
    ``θ̂ = mean``, ``A = cov⁻¹`` instead of ``θ̂ = 0``, ``A = λI``.

    Parameters
    ----------
    dataset : xarray.Dataset
        ``mean`` (param) and ``cov`` ``(param, param_)``; attributes hold the provenance.
    idata : xarray.DataTree, optional
        The NUTS run of an ``"mcmc"`` fit: ArviZ groups (``posterior``, ``sample_stats``,
        ``observed_data``, ``log_likelihood``).

    Notes
    -----
    Saved and loaded as every fitted prior (:class:`~hierbandit.bayes._artifact.PriorArtifact`):
    one sealed netCDF file of kind ``"cascade-prior"`` (the ArviZ groups, if any, as top-level
    groups), and ``==`` compares content, the draws included.
    """

    kind = "cascade-prior"
    label = "cascade prior"

    def _validate(self, dataset: xr.Dataset) -> None:
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

    @classmethod
    def _from_tree(cls, tree: xr.DataTree) -> CascadePrior:
        root, idata = read_prior_tree(tree)
        if isinstance(root.attrs.get("features"), list):
            root.attrs["features"] = json.dumps(root.attrs["features"])
        return cls(root, idata)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CascadePrior:
        """Read a prior written by :meth:`save`; the file is untrusted input (its seal is
        verified, its container walked with a deadline and its arrays validated), and any
        defect raises :class:`hierbandit.errors.InvalidFileError` naming the file."""
        return super().load(path)  # type: ignore[no-any-return]


def load_cascade_prior(path: str | os.PathLike[str]) -> CascadePrior:
    """Load a :class:`CascadePrior` saved with :meth:`CascadePrior.save`."""
    return CascadePrior.load(path)


# =========================================================================== model checking
#: at most this many (draw, row) log-likelihood terms are held at once
_LOGLIK_CHUNK = 4_000_000


def session_loglik(log: CascadeLog, theta: Any) -> np.ndarray:
    """Each session's log-likelihood given θ, per draw: the sum over its displayed rows of
    ``log σ(η)`` (the click) or ``log(1 − σ(η))``, ``η = [x; onehot(k)]ᵀθ``. ``theta`` has
    leading sample axes (..., d + K); returns (..., n_sessions). Sessions are independent given
    θ, so these are the pointwise terms of leave-one-session-out cross-validation."""
    Z, y = log.design()
    theta = np.asarray(theta, dtype=float)
    lead = theta.shape[:-1]
    flat = theta.reshape(-1, theta.shape[-1])
    starts = np.flatnonzero(np.r_[True, np.diff(log.session) != 0])
    out = np.empty((flat.shape[0], starts.size))
    step = max(1, _LOGLIK_CHUNK // max(1, Z.shape[0]))
    sign = 1.0 - 2.0 * y  # log σ(η) = −softplus(−η) for a click, −softplus(η) otherwise
    for s0 in range(0, flat.shape[0], step):
        eta = flat[s0 : s0 + step] @ Z.T
        rows = -np.logaddexp(0.0, sign * eta)
        out[s0 : s0 + step] = np.add.reduceat(rows, starts, axis=1)
    return out.reshape(*lead, starts.size)


def add_session_checks(idata: xr.DataTree, log: CascadeLog) -> xr.DataTree:
    """Add ``observed_data`` and ``log_likelihood`` to the draws of a cascade fit, in place.

    ``observed_data``: ``click`` (row), the clicks of the displayed positions, with their
    ``row_session``, ``row_arm`` and ``row_position`` as coordinates (the contexts are not
    kept). ``log_likelihood``: ``click`` (chain, draw, session), :func:`session_loglik` at every
    draw of θ, so that ``az.loo`` leaves one session out and ``az.compare`` ranks fits of one log.
    ``pm.sample``'s ``constant_data`` group is removed: the groups are the same on every route.
    """
    theta = idata["posterior"]["theta"].transpose("chain", "draw", "param")
    ll = session_loglik(log, theta.values)
    idata["log_likelihood"] = xr.DataTree(
        xr.Dataset(
            {"click": (("chain", "draw", "session"), ll)},
            coords={
                "chain": theta["chain"].values,
                "draw": theta["draw"].values,
                "session": np.arange(ll.shape[-1]),
            },
            attrs={"sample_dims": ["chain", "draw"]},
        )
    )
    idata["observed_data"] = xr.DataTree(
        xr.Dataset(
            {"click": (("row",), np.asarray(log.click, dtype=np.int8))},
            coords={
                "row": np.arange(log.n_rows),
                "row_session": ("row", np.asarray(log.session)),
                "row_arm": ("row", np.asarray(log.arm)),
                "row_position": ("row", np.asarray(log.position)),
            },
        )
    )
    if "constant_data" in idata.children:
        del idata["constant_data"]
    return idata


# =========================================================================== fitting
def cascade_laplace(data: Any, *, lam: float = 1.0, prior: Any = None, **columns: Any) -> Any:
    """The batch Laplace posterior ``N(θ_MAP, (P + Zᵀ W Z)⁻¹)`` of a cascade log (closed-form
    fast path; :func:`hierbandit.stats.logistic.laplace_approximation`)."""
    log = read_cascade_log(data, **columns)
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    Z, y = log.design()
    pr = _prior_arrays(log, prior)
    if pr is None:
        return laplace_approximation(Z, y, lam=lam)
    prec = np.linalg.inv(pr[1])
    return laplace_approximation(Z, y, prior_mean=pr[0], prior_precision=0.5 * (prec + prec.T))


def _cascade_sampler(
    sampler: SamplerConfig | None,
    draws: int | None,
    tune: int | None,
    chains: int | None,
    random_seed: int | None,
    nuts_sampler: str | None,
    progressbar: bool | None = None,
) -> SamplerConfig:
    """The NUTS settings of a cascade fit or comparison: ``sampler`` (default
    :data:`CASCADE_SAMPLER`) with the given keywords replacing its fields, at least 4 draws."""
    return resolve_sampler(
        sampler,
        CASCADE_SAMPLER,
        min_draws=4,
        draws=draws,
        tune=tune,
        chains=chains,
        random_seed=random_seed,
        nuts_sampler=nuts_sampler,
        progressbar=progressbar,
    )


def _sampler_record(cfg: SamplerConfig) -> dict[str, Any]:
    """The NUTS settings a cascade fit or comparison records: ``draws``, ``tune``, ``chains``,
    ``random_seed`` and ``sampler`` (the backend), then any other setting that differs from
    :data:`CASCADE_SAMPLER`."""
    record: dict[str, Any] = {
        "draws": cfg.draws,
        "tune": cfg.tune,
        "chains": cfg.chains,
        "random_seed": cfg.random_seed,
        "sampler": cfg.nuts_sampler,
    }
    if cfg.target_accept != CASCADE_SAMPLER.target_accept:
        record["target_accept"] = cfg.target_accept
    if cfg.driver != CASCADE_SAMPLER.driver:
        record["driver"] = cfg.driver
    return record | cfg.options


def _provenance(log: CascadeLog, method: str, config: dict[str, Any]) -> dict[str, Any]:
    return provenance_attrs(
        method, log, n_sessions=log.n_sessions, n_clicks=log.n_clicks, config=config
    )


def fit_cascade_prior(
    data: Any,
    method: str = "laplace",
    *,
    lam: float = 1.0,
    inflate: float = 1.0,
    sampler: SamplerConfig | None = None,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    random_seed: int | None = None,
    nuts_sampler: str | None = None,
    progressbar: bool | None = None,
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
        sample covariance of θ, and the run is kept in ``prior.idata`` (ArviZ groups, with
        ``observed_data`` and a per-session ``log_likelihood``: :func:`add_session_checks`).
    lam : float
        Precision λ of the ``N(0, λ⁻¹I)`` prior of the historical fit.
    inflate : float
        Multiply the fitted covariance by this factor (≥ 1 discounts old data; default 1).
    sampler : SamplerConfig, optional
        NUTS settings (``"mcmc"`` only; default :data:`CASCADE_SAMPLER`, 4 chains × 1,000 draws
        after 1,000 tuning steps; at least 4 draws).
    draws, tune, chains, random_seed, nuts_sampler, progressbar
        Replace the matching fields of ``sampler`` when given (``progressbar=False``: no
        sampler progress bar).

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

        cfg = _cascade_sampler(sampler, draws, tune, chains, random_seed, nuts_sampler, progressbar)
        config.update(_sampler_record(cfg))
        model = cascade_click_model(log, lam=lam)
        idata = sample(model, cfg)
        add_session_checks(idata, log)
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
