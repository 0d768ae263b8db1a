"""Laplace vs NUTS on a cascade log: the batch Laplace posterior of θ, the online one-step
(``newton1``) posterior that UCBBP runs, and the paper-literal update, each against NUTS on the
same logistic cascading click model (``docs/cascading.md``, The Bayesian side;
``docs/maths/cascade.md`` §2, §2.4).

:func:`compare_laplace_nuts` returns a :class:`LaplaceNUTSComparison`: per-coordinate means and
standard deviations, covariances, predicted click probabilities on held-out rows, and the checks
with their thresholds, as tables, a Markdown report and a three-panel figure.

PyMC and ArviZ are imported inside the function that samples.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import expit

from hierbandit._io import atomic_write, write_json
from hierbandit._validation import check_positive_int, check_scalar
from hierbandit.bayes.cascade import (
    _cascade_sampler,
    _param_labels,
    _sampler_record,
    cascade_click_model,
    cascade_laplace,
)
from hierbandit.bayes.sampler_config import SamplerConfig
from hierbandit.data.cascade_log import CascadeLog, read_cascade_log
from hierbandit.stats.logistic import (
    LaplaceApproximation,
    OnlineLogistic,
    bernoulli_loglik,
    cascade_loglik,
    predictive_click_probability,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["LaplaceNUTSComparison", "compare_laplace_nuts"]


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
    """Laplace (batch and online) posteriors of θ against NUTS on the same log.

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
        The checks of ``docs/cascading.md`` (Laplace vs NUTS): ``value``, ``threshold``,
        ``ok``.
    idata : xarray.DataTree
        The NUTS run (ArviZ's layout: ``posterior`` θ, ``sample_stats``).
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
            "## Checks",
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
    sampler: SamplerConfig | None = None,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    random_seed: int | None = None,
    nuts_sampler: str | None = None,
    progressbar: bool | None = None,
    n_predict: int = 15,
    tolerance: float = 4.0,
    find_map: bool = True,
    **columns: Any,
) -> LaplaceNUTSComparison:
    """Compare the Laplace posteriors of θ with NUTS on a cascade log (``docs/cascading.md``,
    Laplace vs NUTS).

    The batch Laplace approximation (MAP by Newton-IRLS, Hessian at the MAP), the online
    one-step path of UCBBP (``newton1`` replayed episode by episode, posterior
    ``N(θ̂_T, A_T⁻¹)``) and the paper-literal update are compared with NUTS
    (:func:`hierbandit.bayes.sampling.sample`) on
    :func:`~hierbandit.bayes.cascade.cascade_click_model`.

    Parameters
    ----------
    data
        The log (episodes are replayed in order for the online path).
    lam : float
        Prior precision λ, the same in the model and the online ``A``.
    sampler : SamplerConfig, optional
        NUTS settings (default :data:`~hierbandit.bayes.cascade.CASCADE_SAMPLER`: 4 chains ×
        1,000 draws after 1,000 tuning steps; at least 4 draws). ``random_seed`` also seeds the
        held-out rows and the random θ of the likelihood check.
    draws, tune, chains, random_seed, nuts_sampler, progressbar
        Replace the matching fields of ``sampler`` when given (``progressbar=False``: no
        sampler progress bar).
    n_predict : int
        Held-out rows ``[x; onehot(k)]`` (``x ~ N(0, I)``, uniform ``k``) for the predictions.
    tolerance : float
        Half-width (in MCSE) of the band drawn around the z-scores of the Laplace means
        (default 4). The z-scores are reported, not checked: the Laplace mean is the posterior
        mode, whose O(1/n) gap to the posterior mean becomes many MCSE once the MCMC estimate is
        precise enough; the check is the scale-free gap ≤ 0.25 posterior sd.
    find_map : bool
        Also check ``pymc.find_MAP`` against the Newton MAP.

    Returns
    -------
    LaplaceNUTSComparison
    """
    import arviz as az

    from hierbandit.bayes.diagnostics import diagnose
    from hierbandit.bayes.sampling import sample

    log = read_cascade_log(data, **columns)
    lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
    cfg = _cascade_sampler(sampler, draws, tune, chains, random_seed, nuts_sampler, progressbar)
    n_predict = check_positive_int(n_predict, "n_predict")
    tolerance = check_scalar(tolerance, "tolerance", low=0.0, low_inclusive=False)
    d, K, p = log.n_features, log.n_arms, log.n_params
    labels = _param_labels(log.features, K)

    lap = cascade_laplace(log, lam=lam)
    online = _replay(log, lam, "newton1")
    literal = _replay(log, lam, "paper_literal")

    model = cascade_click_model(log, lam=lam)
    start = time.perf_counter()
    idata = sample(model, cfg)
    wall = time.perf_counter() - start
    diag = diagnose(idata, var_names=["theta"], warn=False)
    post = idata["posterior"].to_dataset()[["theta"]]
    th = post["theta"].transpose("chain", "draw", "param")
    draws_flat = th.to_numpy().reshape(-1, p)
    mcse = az.mcse(post, method="mean")["theta"].to_numpy()
    rhat = az.rhat(post)["theta"].to_numpy()
    ess = az.ess(post, method="bulk")["theta"].to_numpy()
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
    g = np.random.default_rng(np.random.SeedSequence([cfg.random_seed, 8_4]))
    Xh = g.standard_normal((n_predict, d))
    kh = g.integers(K, size=n_predict)
    Zh = np.zeros((n_predict, p))
    Zh[:, :d] = Xh
    Zh[np.arange(n_predict), d + kh] = 1.0
    eta = th.to_numpy() @ Zh.T  # (chain, draw, n_predict)
    prob = expit(eta)
    prob_ds = xr.Dataset({"prob": (("chain", "draw", "row"), prob)})
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
            mp = pm.find_MAP(
                progressbar=False, return_inferencedata=True, jitter=False, maxiter=5000
            )
        theta_map = mp.posterior["theta"].to_numpy().reshape(-1)
        map_gap = float(np.max(np.abs(theta_map - lap.mean)))

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
        **_sampler_record(cfg),
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
