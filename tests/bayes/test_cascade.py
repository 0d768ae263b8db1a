"""The logistic cascading click model: PyMC model, priors, Laplace vs NUTS (the log reader is
tested in tests/data/test_cascade_log.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierbandit.bayes.cascade import (
    CASCADE_SAMPLER,
    CascadePrior,
    cascade_laplace,
    fit_cascade_prior,
    load_cascade_prior,
)
from hierbandit.bayes.sampler_config import SamplerConfig
from hierbandit.data import read_cascade_log
from hierbandit.stats.logistic import bernoulli_loglik, cascade_loglik, penalized_map


# ---------------------------------------------------------------------- the PyMC model
def test_pymc_cascade_and_bernoulli_log_densities_agree(cascade_frame):
    pytest.importorskip("pymc")
    from scipy.stats import multivariate_normal, norm

    from hierbandit.bayes.cascade import cascade_click_model

    log = read_cascade_log(cascade_frame)
    Z, y = log.design()
    Xs, arms, clicks = log.sessions()
    mb = cascade_click_model(log, lam=2.0)
    mc = cascade_click_model(log, lam=2.0, form="cascade")
    fb, fc = mb.compile_logp(), mc.compile_logp()
    rng = np.random.default_rng(3)
    for _ in range(3):
        theta = rng.normal(size=6)
        lb, lc = float(fb({"theta": theta})), float(fc({"theta": theta}))
        assert abs(lb - lc) < 1e-9
        want = cascade_loglik(theta, Xs, arms, clicks) + norm.logpdf(theta, 0, 2**-0.5).sum()
        assert abs(lb - want) < 1e-8
    mean, cov = np.linspace(-1, 1, 6), np.diag(np.linspace(0.5, 2, 6))
    mp = cascade_click_model(log, prior=(mean, cov))
    theta = rng.normal(size=6)
    want = float(bernoulli_loglik(Z @ theta, y).sum()) + multivariate_normal(mean, cov).logpdf(
        theta
    )
    assert abs(float(mp.compile_logp()({"theta": theta})) - want) < 1e-8
    assert mb.hb_meta["trace_vars"] == ["theta"]
    with pytest.raises(ValueError, match="form"):
        cascade_click_model(log, form="dbn")


# ---------------------------------------------------------------------- priors
def test_laplace_prior_fit_save_load_and_warm_start(cascade_frame, tmp_path):
    from hierbandit.cascade.policies import UCBBP

    log = read_cascade_log(cascade_frame)
    prior = fit_cascade_prior(log, "laplace", lam=1.5)
    Z, y = log.design()
    ref = penalized_map(Z, y, lam=1.5, tol=1e-12)
    np.testing.assert_allclose(prior.mean, ref.theta, atol=1e-8)
    np.testing.assert_allclose(prior.precision, ref.hessian, rtol=1e-6, atol=1e-9)
    assert prior.method == "laplace" and prior.provenance["data_hash"] == log.data_hash
    assert prior.features == ["x0", "x1", "x2"] and prior.n_arms == 3
    path = prior.save(tmp_path / "prior.nc")
    assert [p.name for p in tmp_path.iterdir()] == ["prior.nc"]  # no temporary files left
    again = load_cascade_prior(path)
    assert again == prior
    np.testing.assert_array_equal(again.cov, prior.cov)
    pol = UCBBP(3, 3, [1.0, 2.0, 3.0], 3, prior=again)
    np.testing.assert_allclose(pol.theta, prior.mean)
    np.testing.assert_allclose(pol.estimator.A, prior.precision, rtol=1e-10, atol=1e-9)
    wide = fit_cascade_prior(log, inflate=4.0, lam=1.5)
    np.testing.assert_allclose(wide.cov, 4.0 * prior.cov)
    probs = prior.click_probability(np.zeros((2, 3)))
    assert probs.shape == (2, 3) and np.all((probs > 0) & (probs < 1))
    lap = cascade_laplace(log, lam=1.5)
    np.testing.assert_allclose(lap.mean, prior.mean)
    with pytest.raises(ValueError, match=r"\.nc"):
        prior.save(tmp_path / "prior.json")
    with pytest.raises(FileNotFoundError):
        load_cascade_prior(tmp_path / "nope.nc")


def test_prior_validation():
    with pytest.raises(ValueError, match="positive definite"):
        CascadePrior.from_arrays(np.zeros(4), np.zeros((4, 4)), n_arms=2)
    with pytest.raises(ValueError, match="cov"):
        CascadePrior.from_arrays(np.zeros(4), np.ones((3, 3)), n_arms=2)
    with pytest.raises(ValueError, match="mean"):
        CascadePrior.from_arrays(np.zeros(2), np.eye(2), n_arms=2)
    with pytest.raises(ValueError, match="method"):
        fit_cascade_prior(pd.DataFrame(), method="vb")
    with pytest.raises(ValueError, match="lam"):
        fit_cascade_prior(pd.DataFrame(), lam=0.0)


class _Sampled(Exception):
    """Raised by a stand-in sampler once it has seen the configuration."""


@pytest.fixture
def seen_config(monkeypatch):
    """The SamplerConfig the next sampler run receives (the run itself is skipped)."""
    from hierbandit.bayes import sampling

    seen = {}

    def fake(model, sampler=None, **kwargs):
        seen["config"], seen["kwargs"] = sampler, kwargs
        raise _Sampled

    monkeypatch.setattr(sampling, "sample", fake)
    return seen


def test_sampler_defaults_and_overrides(cascade_frame, seen_config):
    """4 chains × 1,000 draws after 1,000 tuning steps unless told; keywords override fields of
    ``sampler``; fewer than 4 draws are refused before anything is built."""
    from hierbandit.bayes.cascade_audit import compare_laplace_nuts

    assert SamplerConfig(chains=4) == CASCADE_SAMPLER
    with pytest.raises(_Sampled):
        fit_cascade_prior(cascade_frame, "mcmc")
    assert seen_config["config"] == CASCADE_SAMPLER
    with pytest.raises(_Sampled):
        compare_laplace_nuts(cascade_frame)
    assert seen_config["config"] == CASCADE_SAMPLER
    mine = SamplerConfig(draws=300, chains=3, random_seed=5)
    with pytest.raises(_Sampled):
        fit_cascade_prior(cascade_frame, "mcmc", sampler=mine, random_seed=6)
    assert seen_config["config"] == SamplerConfig(draws=300, chains=3, random_seed=6)
    for call in (
        lambda **kw: fit_cascade_prior(cascade_frame, "mcmc", **kw),
        lambda **kw: compare_laplace_nuts(cascade_frame, **kw),
    ):
        with pytest.raises(ValueError, match="draws must be >= 4"):
            call(draws=3)
        with pytest.raises(ValueError, match="draws must be >= 4"):
            call(sampler=SamplerConfig(draws=2))
        with pytest.raises(TypeError, match="SamplerConfig"):
            call(sampler={"draws": 100})


def _fake_sampler(monkeypatch, scale: float) -> None:
    """Replace NUTS by normal draws of θ (chains × draws from the sampler's settings)."""
    import arviz as az

    from hierbandit.bayes import sampling

    def fake(model, sampler=None, **kwargs):
        size = (sampler.chains, sampler.draws, len(model.coords["param"]))
        theta = np.random.default_rng(0).normal(0.0, scale, size=size)
        return az.from_dict(
            {"posterior": {"theta": theta}},
            dims={"theta": ["param"]},
            coords={"param": list(model.coords["param"])},
        )

    monkeypatch.setattr(sampling, "sample", fake)


def test_mcmc_prior_records_the_settings(cascade_frame, monkeypatch):
    """The provenance keeps its keys; a setting other than the default is recorded too."""

    _fake_sampler(monkeypatch, scale=1.0)
    with pytest.warns(UserWarning, match="MCMC diagnostics"):
        prior = fit_cascade_prior(cascade_frame, "mcmc", draws=10, tune=5, chains=2)
    assert prior.provenance["config"] == {
        "lam": 1.0,
        "inflate": 1.0,
        "draws": 10,
        "tune": 5,
        "chains": 2,
        "random_seed": 0,
        "sampler": SamplerConfig().nuts_sampler,
    }
    cfg = SamplerConfig(draws=10, tune=5, chains=2, target_accept=0.95)
    with pytest.warns(UserWarning, match="MCMC diagnostics"):
        prior = fit_cascade_prior(cascade_frame, "mcmc", sampler=cfg)
    assert prior.provenance["config"]["target_accept"] == 0.95


def test_session_loglik_is_the_bernoulli_likelihood_of_each_session(cascade_frame):
    from hierbandit.bayes.cascade import session_loglik

    log = read_cascade_log(cascade_frame)
    Z, y = log.design()
    theta = np.random.default_rng(1).normal(size=(3, 2, Z.shape[1]))
    got = session_loglik(log, theta)
    assert got.shape == (3, 2, log.n_sessions)
    p = 1.0 / (1.0 + np.exp(-(theta @ Z.T)))
    rows = np.where(y == 1, np.log(p), np.log1p(-p))
    want = np.stack([rows[..., log.session == s].sum(-1) for s in range(log.n_sessions)], -1)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_an_mcmc_prior_carries_its_loo_groups(cascade_frame, monkeypatch, tmp_path):
    """The cascade prior's draws: observed_data (the clicks) and a log-likelihood per session,
    which az.loo reads from the prior and from its file."""
    import arviz as az
    import xarray as xr

    _fake_sampler(monkeypatch, scale=0.1)
    with pytest.warns(UserWarning, match="MCMC diagnostics"):
        prior = fit_cascade_prior(cascade_frame, "mcmc", draws=100, tune=5, chains=2)
    assert set(prior.idata.children) == {"posterior", "observed_data", "log_likelihood"}
    n_sessions = int(prior.provenance["n_sessions"])
    assert prior.idata.log_likelihood["click"].shape == (2, 100, n_sessions)
    assert int(prior.idata.observed_data["click"].sum()) == prior.provenance["n_clicks"]
    path = prior.save(tmp_path / "c.nc")
    assert load_cascade_prior(path) == prior
    with xr.open_datatree(path, engine="h5netcdf") as tree:
        assert az.loo(tree).elpd == pytest.approx(az.loo(prior.idata).elpd, rel=1e-12)


# ---------------------------------------------------------------------- Laplace vs NUTS
def test_laplace_vs_nuts_small(cascade_frame, tmp_path):
    """Fast version of the comparison of docs/cascading.md (≈800 rows, 2 × 400 draws):
    scale-free checks."""
    pytest.importorskip("pymc")
    from hierbandit.bayes.cascade_audit import compare_laplace_nuts

    cmp = compare_laplace_nuts(cascade_frame, draws=400, tune=400, chains=2, find_map=False)
    t = cmp.table
    assert cmp.idata.posterior["theta"].shape == (2, 400, 6)
    assert t["r_hat"].max() < 1.05
    assert t["gap_sd"].abs().max() <= 0.25
    assert t["sd_ratio"].between(0.8, 1.2).all()
    assert t["online_gap_sd"].abs().max() <= 0.75
    assert t["literal_gap_sd"].abs().max() > 2  # the printed update's bias
    pred = cmp.predictive
    assert np.max(np.abs(pred["plugin_prob"] - pred["mcmc_prob"])) < 0.02
    checks = cmp.checks["ok"]
    assert checks["cascade vs Bernoulli log-lik (NumPy)"]
    assert checks["cascade vs Bernoulli logp (PyMC compile_logp)"]
    paths = cmp.write(tmp_path / "cmp")
    assert {p.name for p in paths.values()} == {
        "report.md",
        "table.csv",
        "predictive.csv",
        "checks.json",
        "comparison.png",
    }
    assert "Laplace vs NUTS" in paths["report"].read_text()


@pytest.mark.slow
def test_laplace_vs_nuts_spec_8_4_few_thousand_rows(cascade_env):
    """The comparison of docs/cascading.md on ≈3,000 rows, 4 × 1000 draws: every check passes;
    the Laplace means' z-scores are reported (a real MAP–mean gap of a few hundredths of a
    posterior sd shows as 2–5 MCSE depending on the seed, so they are bounded loosely)."""
    from hierbandit.bayes.cascade_audit import compare_laplace_nuts

    df = cascade_env.simulate_log(150, rng=1)
    assert len(df) > 2500
    cmp = compare_laplace_nuts(df, draws=1000, tune=1000, chains=4, tolerance=4.0)
    assert cmp.all_ok, cmp.checks
    assert np.isfinite(cmp.max_abs_z) and cmp.max_abs_z <= 8.0
    assert "Laplace mean, max |z| (MCSE)" not in cmp.checks.index


@pytest.mark.slow
def test_mcmc_prior_agrees_with_laplace(cascade_frame):
    mc = fit_cascade_prior(cascade_frame, "mcmc", draws=500, tune=500, chains=2)
    lap = fit_cascade_prior(cascade_frame, "laplace")
    assert mc.idata is not None and mc.provenance["diagnostics_ok"] in (0, 1, True, False)
    assert np.max(np.abs(mc.mean - lap.mean) / lap.sd) < 0.25
    np.testing.assert_allclose(np.sqrt(np.diag(mc.cov)), lap.sd, rtol=0.2)


def test_the_comparison_lives_in_the_audit_module():
    """``compare_laplace_nuts`` lives in ``cascade_audit`` and is exported by ``hierbandit.bayes``."""
    import hierbandit.bayes as hb
    from hierbandit.bayes import cascade, cascade_audit

    assert hb.compare_laplace_nuts is cascade_audit.compare_laplace_nuts
    assert hb.LaplaceNUTSComparison is cascade_audit.LaplaceNUTSComparison
    assert not hasattr(cascade, "compare_laplace_nuts")
