"""Fit a hierarchical prior to a historical log: type-II ML, empirical Bayes, or full Bayes (NUTS).

Type-II maximum likelihood is the default (B16 in ``docs/decisions/bayes.md``). All three return
one :class:`~hierbandit.bayes.prior.HierarchicalPrior` with the per-arm shared mean β_{k0} (and
its covariance), Σ_k and σ²_k, plus provenance. ``EbmTS(..., prior=prior)`` warm-starts from
any of them.

Every fit needs only the log's per-(arm, instance) sufficient statistics. A log in memory is a
:class:`~hierbandit.data.HistoricalLog`; a log too large for memory (a Parquet directory, a Dask
DataFrame) is reduced to a :class:`~hierbandit.data.LogSummary` by Dask
(:func:`hierbandit.bayes.outofcore.summarise_dask`), and the same estimators run from it
(``docs/outofcore.md``).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from hierbandit._validation import check_choice, check_scalar
from hierbandit.bayes._artifact import provenance_attrs
from hierbandit.bayes.prior import HierarchicalPrior
from hierbandit.bayes.sampler_config import SamplerConfig, resolve_sampler
from hierbandit.data import (
    HistoricalLog,
    LogSummary,
    check_min_rows,
    check_summary_rows,
    read_log,
)
from hierbandit.data.log import check_id_labels
from hierbandit.stats import EBOptions, empirical_bayes, fit_type2_ml, posterior_given_hyper

__all__ = ["FIT_SAMPLER", "METHODS", "fit_prior", "prior_from_arrays"]

METHODS = ("eb", "ml", "mcmc")

#: The package's folder: the warnings of a fit point at the first frame outside it.
_PACKAGE_DIR = str(Path(__file__).parent.parent) + os.sep

#: NUTS settings of a collapsed full-Bayes fit unless given: nutpie on the model's compiled log
#: density and gradient (``driver="kernel"``, :mod:`hierbandit.bayes.compiled`; B18), with
#: nutpie's own defaults for the warm-up (400 steps) and the target acceptance rate (0.8). The
#: collapsed model has d(d+1)/2 + 1 parameters per arm and no funnel: from N = 10 to 10,000
#: instances its diagnostics are as good as with 1,000 steps and 0.9 or better, for a third
#: less time at N = 1,000 and 10,000 (B15)
FIT_SAMPLER = SamplerConfig(tune=400, target_accept=0.8, driver="kernel")

#: Rewards whose least-squares residual on the features is below this fraction of their own size
#: (root sum of squares) count as an exact linear function of the features.
EXACT_FIT_RTOL = 1e-10

#: The same, for a log known only by its sufficient statistics (:class:`LogSummary`): there the
#: residual is q - bᵀG⁺b, whose rounding error is about 1e-16 of the rewards' squared size (times
#: the condition of G), so the threshold is looser (a residual below 1e-6 of the rewards' size).
SUMMARY_EXACT_FIT_RTOL = 1e-6


def _residual(X: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """Squared norm of the least-squares residual of ``y`` on ``X``, and its degrees of freedom."""
    U, sv, _ = np.linalg.svd(X, full_matrices=False)
    tol = sv[0] * max(X.shape) * np.finfo(float).eps if sv.size else 0.0
    Ur = U[:, : int(np.sum(sv > tol))]
    r = y - Ur @ (Ur.T @ y)
    return float(r @ r), X.shape[0] - Ur.shape[1]


def _check_rewards_vary(log: HistoricalLog) -> None:
    """Refuse a log from which no noise variance can be estimated, for every method alike.

    Per arm (the prior is fitted arm by arm), with at least two rows:

    * the rewards are all equal (all zero, for instance: an arm that was never clicked): there is
      no variation to fit. Type-II ML then has σ̂² = 0 whenever the constant is a linear function
      of the features (always for zero rewards, and with an intercept for any constant), so its
      likelihood grows without bound; empirical Bayes returns its numerical floors for σ² and Σ;
      full Bayes returns what the hyperpriors say (its posterior of σ is not even proper when
      σ̂² = 0). None of these is an estimate from the data, and a bandit warm-started from one
      would be confidently wrong, so the log is refused.
    * the rewards are an exact linear function of the features, over the whole arm (typically a
      feature column that copies the reward) or within every instance (each with its own
      coefficients), with rows to spare (least-squares residual below ``EXACT_FIT_RTOL`` of the
      rewards' size): σ² = 0 again, with the same consequences.

    Raises
    ------
    ValueError
        Naming the reward column and every arm (by original label) at fault.
    """
    constant, pooled, within = [], [], []
    for k in range(log.n_arms):
        X, y, inst = log.arm_rows(k)
        if y.size < 2:
            continue
        label = log.arm_labels[k]
        if np.all(y == y[0]):
            constant.append((label, y[0]))
            continue
        # scaled so that huge or tiny values neither overflow nor underflow
        ys = y / np.max(np.abs(y))
        scale = np.max(np.abs(X), axis=0)
        Xs = X / np.where(scale > 0, scale, 1.0)
        limit = EXACT_FIT_RTOL**2 * float(ys @ ys)
        rss, dof = _residual(Xs, ys)
        if dof > 0 and rss <= limit:
            pooled.append(label)
            continue
        order = np.argsort(inst, kind="stable")
        bounds = np.flatnonzero(np.diff(inst[order])) + 1
        rss, dof = 0.0, 0
        for rows in np.split(order, bounds):
            r, f = _residual(Xs[rows], ys[rows])
            rss, dof = rss + r, dof + f
            if rss > limit:
                break
        if dof > 0 and rss <= limit:
            within.append(label)
    _refuse(log, constant, pooled, within)


def _stats_residual(G: np.ndarray, b: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Residual sums of squares q - bᵀG⁺b of the least-squares fits of batches of cells from
    their statistics (..., d, d), (..., d), (...), and the ranks of G. The columns are scaled
    to unit norm first; eigenvalues below 1e-10 of the largest count as zero (a rank too small
    only makes the residual larger, never a log refused that would not be)."""
    dg = np.sqrt(np.maximum(np.einsum("...ii->...i", G), 0.0))
    inv = np.where(dg > 0, 1.0 / np.where(dg > 0, dg, 1.0), 0.0)
    Gs = G * inv[..., :, None] * inv[..., None, :]
    bs = b * inv
    w, V = np.linalg.eigh(Gs)
    keep = w > 1e-10 * np.maximum(w[..., -1:], np.finfo(float).tiny)
    proj = np.einsum("...ij,...i->...j", V, bs)
    fitted = np.sum(np.where(keep, proj**2 / np.where(keep, w, 1.0), 0.0), axis=-1)
    return np.maximum(q - fitted, 0.0), keep.sum(axis=-1)


def _check_rewards_vary_stats(summary: LogSummary) -> None:
    """:func:`_check_rewards_vary` for a log known by its statistics (a :class:`LogSummary`).

    The same refusals and messages. A constant arm is recognised exactly (its smallest and
    largest reward are equal). An exact linear fit, pooled over the arm or within every instance,
    is recognised from the residual sums of squares q - bᵀG⁺b, which carry rounding errors of
    about 1e-16·q: the residual must be below ``SUMMARY_EXACT_FIT_RTOL`` (1e-6) of the rewards'
    size, where the rows are checked at ``EXACT_FIT_RTOL`` (1e-10). This is the one place where
    a fit from statistics and a fit from rows can differ: a log whose rewards are within that
    band of an exact linear fit (a pathological log) is refused from statistics only.
    """
    st = summary.suffstats()
    n = st.n
    constant, pooled, within = [], [], []
    for k in range(summary.n_arms):
        rows = int(n[k].sum())
        if rows < 2:
            continue
        label = summary.arm_labels[k]
        if summary.y_min[k] == summary.y_max[k]:
            constant.append((label, summary.y_min[k]))
            continue
        qk = float(st.q[k].sum())
        limit = SUMMARY_EXACT_FIT_RTOL**2 * qk
        rss, rank = _stats_residual(st.G[k].sum(axis=0), st.b[k].sum(axis=0), np.array(qk))
        if rows - int(rank) > 0 and float(rss) <= limit:
            pooled.append(label)
            continue
        cells = n[k] > 0
        rss, rank = _stats_residual(st.G[k][cells], st.b[k][cells], st.q[k][cells])
        dof = int(np.sum(n[k][cells] - rank))
        if dof > 0 and float(rss.sum()) <= limit:
            within.append(label)
    _refuse(summary, constant, pooled, within)


def _refuse(log: Any, constant: list, pooled: list, within: list) -> None:
    """Raise the refusal of :func:`_check_rewards_vary` for the arms found at fault."""
    col = log.reward_column
    if constant:
        values = {float(v) for _, v in constant}
        if len(constant) == log.n_arms and len(values) == 1:
            where, fix = f"(every value is {values.pop():g})", "fit on a log whose rewards vary"
        else:
            where = f"within arm{'s' if len(constant) > 1 else ''} " + ", ".join(
                f"{a} (every value is {float(v):g})" for a, v in constant
            )
            fix = "leave such arms out or collect rewards that vary"
        raise ValueError(
            f"reward column {col!r} is constant {where}: nothing to fit (a prior describes how "
            f"rewards vary, and these do not); {fix}"
        )
    for arms, how, hint in (
        (pooled, "", "; is one of the features a copy of the reward?"),
        (within, ", within every instance,", ""),
    ):
        if arms:
            raise ValueError(
                f"reward column {col!r} is{how} an exact linear function of the features "
                f"{list(log.features)} (arm{'s' if len(arms) > 1 else ''} "
                f"{', '.join(str(a) for a in arms)}): the noise variance σ² would be 0 and "
                f"there is nothing to fit{hint}"
            )


def prior_from_arrays(
    shared_mean: Any,
    shared_cov: Any,
    Sigma: Any,
    sigma2: Any,
    *,
    arms: Any = None,
    features: Any = None,
    extra: dict[str, tuple[tuple[str, ...], Any]] | None = None,
    idata: Any = None,
    **attrs: Any,
) -> HierarchicalPrior:
    """Build a :class:`HierarchicalPrior` from arrays (K, d), (K, d, d), (K, d, d), (K,).

    ``arms`` (default ``0 .. K-1``): the arm ids, unique integers or unique strings (kept as an
    object array of ``str``); ``features`` (default ``x0 .. x{d-1}``): the feature names."""
    shared_mean = np.asarray(shared_mean, dtype=float)
    Kn, d = shared_mean.shape
    feats = list(features) if features is not None else [f"x{i}" for i in range(d)]
    data: dict[str, Any] = {
        "shared_mean": (("arm", "feature"), shared_mean),
        "shared_cov": (("arm", "feature", "feature_"), np.asarray(shared_cov, dtype=float)),
        "Sigma": (("arm", "feature", "feature_"), np.asarray(Sigma, dtype=float)),
        "sigma2": (("arm",), np.asarray(sigma2, dtype=float)),
    }
    data.update(extra or {})
    ds = xr.Dataset(
        data,
        coords={
            # string arm ids (a log's labels) as an object array of str, integers as int64
            "arm": check_id_labels(arms, "arms") if arms is not None else np.arange(Kn),
            "feature": feats,
            "feature_": feats,
        },
        attrs=attrs,
    )
    return HierarchicalPrior(ds, idata)


def _provenance(
    log: HistoricalLog | LogSummary, method: str, config: dict[str, Any]
) -> dict[str, Any]:
    return provenance_attrs(
        method, log, n_instances=log.n_instances, config=config, data=log.provenance()
    )


def _fit_per_arm(
    log: HistoricalLog | LogSummary,
    method: str,
    config: dict[str, Any],
    fit_arm: Callable[[Any, int], tuple[Any, Any, Any, float, dict[str, Any]]],
) -> HierarchicalPrior:
    """Run ``fit_arm(stats, k)`` → (shared mean, its covariance, Σ_k, σ²_k, per-arm extras) for
    every arm and assemble the prior."""
    st = log.suffstats()
    fits = [fit_arm(st, k) for k in range(log.n_arms)]
    m, S0, Sigma, s2, extras = zip(*fits, strict=True)
    extra = {name: (("arm",), np.array([e[name] for e in extras])) for name in extras[0]}
    return prior_from_arrays(
        m,
        S0,
        Sigma,
        s2,
        arms=log.arm_labels,
        features=log.features,
        extra=extra,
        **_provenance(log, method, config),
    )


def _fit_eb(
    log: HistoricalLog | LogSummary, lam: float, options: EBOptions, seed: int
) -> HierarchicalPrior:
    rng = np.random.default_rng(seed)  # one stream for the arms in turn
    fallbacks: list[str] = []

    def fit_arm(st: Any, k: int) -> tuple[Any, Any, Any, float, dict[str, Any]]:
        res = empirical_bayes(st.G[k], st.b[k], st.q[k], st.n[k], lam, options=options, rng=rng)
        if options.estimate_Sigma and np.isnan(res.gamma):
            fallbacks.append(_sigma_fallback(log.arm_labels[k], res.n_eff, options))
        post = res.posterior
        extra = {"gamma": res.gamma, "n_eff": res.n_eff}
        return post.shared_mean, post.shared_cov, res.Sigma, res.sigma2, extra

    config = {"lam": lam, "eb_options": options.to_dict(), "seed": seed}
    prior = _fit_per_arm(log, "eb", config, fit_arm)
    if fallbacks:
        warnings.warn(
            _sigma_fallback_message(fallbacks, log.n_features),
            UserWarning,
            skip_file_prefixes=(_PACKAGE_DIR,),  # the first caller outside the package
        )
    return prior


def _sigma_fallback(label: Any, n_eff: int, options: EBOptions) -> str:
    """Why empirical Bayes left one arm's Σ at its starting value (its ``gamma`` is NaN)."""
    needed = options.instances_for_sigma
    if n_eff < needed:
        return (
            f"arm {label}: {n_eff} instance{'' if n_eff == 1 else 's'} with a full-rank design, "
            f"{needed} needed"
        )
    return f"arm {label}: the scatter of its {n_eff} per-instance OLS estimates overflows"


def _sigma_fallback_message(arms: list[str], d: int) -> str:
    """The warning of an EB fit that could not estimate Σ for some arms (:func:`_fit_eb`)."""
    one = len(arms) == 1
    return (
        f"empirical Bayes could not estimate Σ for {len(arms)} arm{'' if one else 's'} "
        f"({'; '.join(arms)}), so Σ fell back to its starting value, the {d}×{d} identity: not "
        "an estimate from the data. Σ̂ is the covariance of per-instance OLS estimates, and an "
        f"instance has one only with a full-rank design (at least {d} rows whose features "
        'are linearly independent). Type-II maximum likelihood (method="ml") does not need '
        "per-instance full-rank designs."
    )


def _fit_ml(log: HistoricalLog | LogSummary, lam: float, tol: float) -> HierarchicalPrior:
    def fit_arm(st: Any, k: int) -> tuple[Any, Any, Any, float, dict[str, Any]]:
        res = fit_type2_ml(st.G[k], st.b[k], st.q[k], st.n[k], lam=lam, tol=tol)
        post = posterior_given_hyper(st.G[k], st.b[k], res.Sigma, res.sigma2, lam)
        extra = {"loglik": res.loglik, "converged": int(res.converged)}
        return res.shared_mean, post.shared_cov, res.Sigma, res.sigma2, extra

    return _fit_per_arm(log, "ml", {"lam": lam, "tol": tol}, fit_arm)


def _fit_mcmc(
    log: HistoricalLog | LogSummary,
    lam: float,
    *,
    hyper: Any,
    collapsed: bool,
    collapse_shared_mean: bool,
    sampler: SamplerConfig,
    posterior_predictive: bool,
) -> HierarchicalPrior:
    from hierbandit.bayes.models import (
        HyperPriors,
        add_conditional_draws,
        add_model_checks,
        collapsed_model,
        uncollapsed_model,
    )
    from hierbandit.bayes.sampling import sample

    if hyper is None:
        hyper = HyperPriors(lam=lam)
    elif not isinstance(hyper, HyperPriors):
        raise TypeError("hyper must be a HyperPriors instance")
    if collapsed:
        model = collapsed_model(log, hyper=hyper, collapse_shared_mean=collapse_shared_mean)
    elif isinstance(log, LogSummary):
        raise ValueError(
            "collapsed=False samples the plain model over the log's rows, and this log is known "
            "by its sufficient statistics only (a LogSummary, a Parquet directory or a Dask "
            "DataFrame); use collapsed=True (the default), or fit a log that fits in memory"
        )
    else:
        model = uncollapsed_model(log, hyper=hyper)
    idata = sample(model, sampler)
    if collapsed:
        add_conditional_draws(idata, log, hyper=hyper, rng=sampler.random_seed)
    # the predictive's noise: a stream of its own, so that asking for it changes no other draw
    noise = np.random.default_rng([sampler.random_seed, 1])
    add_model_checks(idata, log, posterior_predictive=posterior_predictive, rng=noise)
    post = idata["posterior"]
    Sigma = post["Sigma"].mean(("chain", "draw")).values
    sigma2 = (post["sigma"] ** 2).mean(("chain", "draw")).values
    b0 = post["beta0"].stack(s=("chain", "draw")).transpose("arm", "s", "feature").values
    m = b0.mean(axis=1)
    S0 = np.einsum("ksi,ksj->kij", b0 - m[:, None], b0 - m[:, None]) / (b0.shape[1] - 1)
    config = {
        "lam": hyper.lam,
        "hyper": hyper.to_dict(),
        "collapsed": collapsed,
        "collapse_shared_mean": collapse_shared_mean,
        "posterior_predictive": posterior_predictive,
        "sampler": sampler.record(),
    }
    return prior_from_arrays(
        m,
        S0,
        0.5 * (Sigma + np.swapaxes(Sigma, -1, -2)),
        sigma2,
        arms=log.arm_labels,
        features=log.features,
        idata=idata,
        **_provenance(log, "mcmc", config),
    )


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Run the block with the BLAS libraries NumPy and SciPy load limited to one thread each,
    and restore their settings after it (``threadpoolctl``; nothing when it is missing).

    A fit's linear algebra is on small matrices (the quasi-Newton steps of type-II ML, d×d
    factors), where waking a BLAS thread costs more than the work: SciPy's L-BFGS-B took
    4.7 ms a step with OpenBLAS's two threads on a loaded two-core machine and a few µs with
    one, and the ML fit at 10⁶ rows 3.7 s against 1.6 s (B18). The package's own kernels
    choose their threads themselves.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - installed with PyMC
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _is_directory(data: Any) -> bool:
    """A path to a directory (of Parquet files); a path the OS cannot even look at is not."""
    if not isinstance(data, str | os.PathLike):
        return False
    try:
        return Path(data).expanduser().is_dir()
    except (OSError, ValueError):
        return False


def _read_data(
    data: Any, *, instance: str, arm: str | None, reward: str, features: Any, scheduler: Any
) -> HistoricalLog | LogSummary:
    """The log of ``data``: as it is, in memory (:func:`read_log`) or summarised by Dask."""
    from hierbandit.bayes.outofcore import is_dask_dataframe, summarise_dask

    if isinstance(data, HistoricalLog | LogSummary):
        return data
    columns = {"instance": instance, "arm": arm, "reward": reward, "features": features}
    if is_dask_dataframe(data) or _is_directory(data):
        return summarise_dask(data, scheduler=scheduler, **columns)
    return read_log(data, **columns)


def fit_prior(
    data: Any,
    *,
    instance: str = "instance",
    arm: str | None = "arm",
    reward: str = "reward",
    features: Any = None,
    method: str = "ml",
    lam: float | None = None,
    eb_options: EBOptions | None = None,
    ml_tol: float = 1e-10,
    hyper: Any = None,
    collapsed: bool = True,
    collapse_shared_mean: bool = True,
    posterior_predictive: bool = False,
    sampler: SamplerConfig | None = None,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    target_accept: float | None = None,
    random_seed: int | None = None,
    nuts_sampler: str | None = None,
    progressbar: bool | None = None,
    scheduler: Any = None,
    **sampler_kwargs: Any,
) -> HierarchicalPrior:
    """Fit a per-arm hierarchical prior (shared mean, Σ_k, σ²_k) to a historical log.

    Parameters
    ----------
    data
        A tidy log, one row per past interaction:

        * in memory: a pandas DataFrame, a CSV, Parquet or netCDF file, an xarray Dataset or a
          :class:`~hierbandit.data.HistoricalLog` (:func:`~hierbandit.data.read_log`);
        * out of core: the path of a **directory** of Parquet files (hive-partitioned or not,
          e.g. ``date=2024-01-01/part-0.parquet``) or a Dask DataFrame. Dask computes the
          sufficient statistics (:func:`hierbandit.bayes.outofcore.summarise_dask`, on the
          cluster chosen by ``scheduler``) and the fit runs from them with the same code;
        * a :class:`~hierbandit.data.LogSummary` (statistics already computed).
    instance, arm, reward, features
        Column names; ``features=None`` uses every other numeric column (and warns, naming
        them); ``arm`` may be absent (a single-arm log). See :func:`~hierbandit.data.read_log`.
        Ignored for a ``HistoricalLog`` or a ``LogSummary``.
    method : {"ml", "eb", "mcmc"}, default "ml"
        * ``"ml"`` (default) — type-II maximum likelihood of (β_{k0}, Σ_k, σ²_k) with the
          instance coefficients integrated out; with ``lam=0`` (default) the linear-mixed-model
          ML estimate (it matches lme4 and statsmodels), with ``lam > 0`` the mode under the
          N(0, λ⁻¹I) prior on β_{k0};
        * ``"eb"`` — the ebm paper's empirical-Bayes estimators (thresholded covariance of the
          per-instance OLS estimates, pooled residual variance; the same code the online
          policies run), iterated ``eb_options.eb_iters`` times (default 20 here). Kept to
          reproduce the paper, and not the default: on real logs (MovieLens, lme4's InstEval)
          its Σ̂ is 10 to 28,000 times the type-II ML estimate, and it is the identity when
          fewer than two instances of an arm have a full-rank design (then a warning says so;
          B16 in ``docs/decisions/bayes.md``);
        * ``"mcmc"`` — full Bayes with PyMC/NUTS: LKJ + half-normal priors on Σ_k, half-normal
          on σ_k, N(0, λ⁻¹I) on β_{k0} (see ``hyper``); by default the instance coefficients and
          the shared mean are integrated out analytically (``collapsed``,
          ``collapse_shared_mean``) and drawn exactly afterwards; ``collapsed=False`` samples the
          plain model.
    lam
        Precision of the shared-mean prior; default 0.001 for "eb"/"mcmc", 0 for "ml".
    hyper : HyperPriors, optional
        Priors of the full-Bayes model (``method="mcmc"``).
    posterior_predictive : bool
        ``method="mcmc"``: also draw each observed (arm, instance) cell's mean reward from the
        posterior predictive (``prior.idata.posterior_predictive``, for
        ``az.plot_ppc_dist(prior.idata)``; one value per draw and cell).
    sampler : SamplerConfig, optional
        NUTS settings of ``method="mcmc"``: by default :data:`FIT_SAMPLER` for the collapsed
        model (2 chains × 1,000 draws after 400 tuning steps, ``target_accept=0.8``: nutpie's
        own defaults; seed 0; nutpie on the model's compiled log density, ``driver="kernel"``;
        B15 and B18 in ``docs/decisions/bayes.md``) and ``SamplerConfig()`` (1,000 tuning
        steps, ``target_accept=0.9``, ``pm.sample`` with nutpie) for ``collapsed=False``.
        ``driver="pymc"`` samples the collapsed model with ``pm.sample`` and nutpie compiled
        by JAX, the default before B18.
    draws, tune, chains, target_accept, random_seed, nuts_sampler, progressbar, **sampler_kwargs
        Replace the matching fields of ``sampler`` when given; further keyword arguments are
        backend options (``SamplerConfig.options``) or ``driver``. A ``nuts_sampler`` other
        than nutpie, given without a ``driver``, runs through ``pm.sample``.
        ``random_seed`` (default 0, or the ``sampler``'s) also seeds the cross-validation of
        ``method="eb"``.
    scheduler : None, str or distributed.Client
        Only used for out-of-core input (a directory or a Dask DataFrame), ignored otherwise:
        ``None`` (default) starts a local Dask cluster for the call (one worker process per
        core, with a memory limit) and closes it afterwards; a scheduler address
        (``"tcp://host:8786"``) uses that running cluster, whose workers must have
        ``hierbandit`` installed; a ``distributed.Client`` is used as it is.

    Returns
    -------
    HierarchicalPrior
        For ``method="mcmc"`` with ``prior.idata``, an :class:`xarray.DataTree` of ArviZ
        groups: ``posterior`` (dims chain, draw, arm, instance, feature), ``sample_stats``,
        ``observed_data`` (the log's sufficient statistics and mean reward per cell, not its
        rows), ``log_likelihood`` (``reward``, one value per draw and instance: ``az.loo`` and
        ``az.compare`` leave one instance out) and, if asked for, ``posterior_predictive``
        (``docs/bayes.md``, Checking and comparing fits).

    Warns
    -----
    UserWarning
        ``features=None`` on a log read here: :func:`~hierbandit.data.read_log` names the
        columns it took as features and flags those that look like ids. ``method="eb"``: when
        Σ_k could not be estimated for some arm (fewer than
        ``eb_options.instances_for_sigma`` instances with a full-rank design), naming the arm,
        how many instances had one and how many were needed; that arm's Σ_k is the identity
        (the starting value), not an estimate.

    Raises
    ------
    ValueError, TypeError
        Everything :func:`~hierbandit.data.read_log` refuses (for out-of-core input, what
        :func:`~hierbandit.bayes.outofcore.summarise_dask` refuses: the same checks, made
        partition by partition); too few rows for the method
        (:func:`~hierbandit.data.check_min_rows`; for ``method="eb"``, fewer than two instances
        per arm with at least d rows); ``collapsed=False`` for a log known by its
        statistics only; and, for every method, an arm whose rewards are constant or an exact
        linear function of the features (σ² would be 0: nothing can be estimated; refused
        rather than returning numerical floors or a degenerate fit).

    Notes
    -----
    A fit from statistics (out of core, or a ``LogSummary``) equals the fit of the same log in
    memory up to the rounding of the sums (1e-10 and better in the tests), with one difference:
    the exact-linear-fit refusal is computed from the statistics with a looser tolerance
    (``SUMMARY_EXACT_FIT_RTOL``, see ``_check_rewards_vary_stats``), so a log whose rewards are
    within 1e-6 (relative) of an exact linear function of the features is refused from
    statistics and fitted from rows. The provenance records the summary's ``data_hash``, a hash
    of the rows that does not depend on their order or partitioning (it differs from the hash
    of the same log read in memory, which depends on the order of the rows).

    While it runs, the BLAS libraries of NumPy and SciPy use one thread each (their settings
    are restored afterwards): a fit's linear algebra is on small matrices, where a second BLAS
    thread costs more than it brings (B18 in ``docs/decisions/bayes.md``).
    """
    method = check_choice(method, METHODS, "method")
    with _one_blas_thread():
        return _fit_prior(
            data,
            instance=instance,
            arm=arm,
            reward=reward,
            features=features,
            method=method,
            lam=lam,
            eb_options=eb_options,
            ml_tol=ml_tol,
            hyper=hyper,
            collapsed=collapsed,
            collapse_shared_mean=collapse_shared_mean,
            posterior_predictive=posterior_predictive,
            sampler=sampler,
            draws=draws,
            tune=tune,
            chains=chains,
            target_accept=target_accept,
            random_seed=random_seed,
            nuts_sampler=nuts_sampler,
            progressbar=progressbar,
            scheduler=scheduler,
            sampler_kwargs=sampler_kwargs,
        )


def _fit_prior(
    data: Any,
    *,
    instance: str,
    arm: str | None,
    reward: str,
    features: Any,
    method: str,
    lam: float | None,
    eb_options: EBOptions | None,
    ml_tol: float,
    hyper: Any,
    collapsed: bool,
    collapse_shared_mean: bool,
    posterior_predictive: bool,
    sampler: SamplerConfig | None,
    draws: int | None,
    tune: int | None,
    chains: int | None,
    target_accept: float | None,
    random_seed: int | None,
    nuts_sampler: str | None,
    progressbar: bool | None,
    scheduler: Any,
    sampler_kwargs: dict[str, Any],
) -> HierarchicalPrior:
    """:func:`fit_prior` after its method is checked, with one BLAS thread."""
    log = _read_data(
        data, instance=instance, arm=arm, reward=reward, features=features, scheduler=scheduler
    )
    if isinstance(log, LogSummary):
        check_rows, check_vary = check_summary_rows, _check_rewards_vary_stats
    else:
        check_rows, check_vary = check_min_rows, _check_rewards_vary
    d = log.n_features
    if lam is None:
        lam = 0.0 if method == "ml" else 1e-3
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=method == "ml")
    if method == "eb":
        try:
            check_rows(
                log, per_arm=d + 2, instances_per_arm=2, min_rows_per_instance=d, method="eb"
            )
        except ValueError as exc:
            raise ValueError(
                f"{exc}; empirical Bayes estimates Σ from per-instance OLS fits, which need at "
                f"least {d} rows (as many as features) in an instance; type-II maximum likelihood "
                '(method="ml") does not need per-instance full-rank designs'
            ) from None
        check_vary(log)
        options = eb_options if eb_options is not None else EBOptions(eb_iters=20)
        if not isinstance(options, EBOptions):
            raise TypeError("eb_options must be an EBOptions instance")
        if random_seed is None:
            random_seed = resolve_sampler(sampler, SamplerConfig()).random_seed
        return _fit_eb(log, lam, options, random_seed)
    if method == "ml":
        check_rows(log, per_arm=d + 1, instances_per_arm=2, min_rows_per_instance=1, method="ml")
        check_vary(log)
        return _fit_ml(log, lam, check_scalar(ml_tol, "ml_tol", low=0.0, low_inclusive=False))
    check_rows(log, per_arm=1, method="mcmc")
    check_vary(log)
    default = FIT_SAMPLER if collapsed else SamplerConfig()
    if nuts_sampler not in (None, "nutpie") and "driver" not in sampler_kwargs:
        # the compiled kernel runs on nutpie; another backend goes through pm.sample
        default = default.override(driver="pymc")
    config = resolve_sampler(
        sampler,
        default,
        extra=sampler_kwargs,
        draws=draws,
        tune=tune,
        chains=chains,
        target_accept=target_accept,
        random_seed=random_seed,
        nuts_sampler=nuts_sampler,
        progressbar=progressbar,
    )
    return _fit_mcmc(
        log,
        lam,
        hyper=hyper,
        collapsed=bool(collapsed),
        collapse_shared_mean=bool(collapse_shared_mean),
        sampler=config,
        posterior_predictive=bool(posterior_predictive),
    )
