"""fit_prior: empirical Bayes, type-II ML and full Bayes return one HierarchicalPrior type."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from hierbandit.bayes.fit import fit_prior
from hierbandit.ebm import EbmTS, HierarchicalLinearEnv
from hierbandit.stats import EBOptions, empirical_bayes, fit_type2_ml


def synthetic_log(n_instances=6, n_arms=2, n_features=2, rows=600, seed=0) -> pd.DataFrame:
    env = HierarchicalLinearEnv(n_instances, n_arms, n_features, rng=seed)
    roll = env.rollout(rows, np.random.default_rng(seed + 1))
    arm = np.random.default_rng(seed + 2).integers(0, n_arms, rows)
    t = np.arange(rows)
    df = pd.DataFrame(
        {
            "instance": roll.instance,
            "arm": arm,
            "reward": roll.mean_reward[t, arm] + roll.noise[t, arm],
        }
    )
    for i in range(n_features):
        df[f"x{i}"] = roll.context[:, i]
    return df


def features(df: pd.DataFrame) -> list[str]:
    """The feature columns of a :func:`synthetic_log` (named, so that reading warns of nothing)."""
    return [c for c in df.columns if c.startswith("x")]


def synthetic_hlog(**kwargs):
    """:func:`synthetic_log` read as a HistoricalLog, with its features named."""
    from hierbandit.data import read_log

    df = synthetic_log(**kwargs)
    return read_log(df, features=features(df))


FEATURES = ["x0", "x1"]


@pytest.fixture(scope="module")
def log_df():
    return synthetic_log()


def test_eb_equals_the_online_estimators(log_df):
    from hierbandit.data import read_log

    prior = fit_prior(log_df, features=FEATURES, method="eb")
    st = read_log(log_df, features=FEATURES).suffstats()
    rng = np.random.default_rng(0)
    for k in range(2):
        ref = empirical_bayes(
            st.G[k], st.b[k], st.q[k], st.n[k], 1e-3, options=EBOptions(eb_iters=20), rng=rng
        )
        np.testing.assert_allclose(prior.Sigma[k], ref.Sigma, rtol=1e-12)
        assert prior.sigma2[k] == pytest.approx(ref.sigma2, rel=1e-12)
        np.testing.assert_allclose(prior.shared_mean[k], ref.posterior.shared_mean, rtol=1e-10)
        np.testing.assert_allclose(prior.shared_cov[k], ref.posterior.shared_cov, rtol=1e-10)
    assert prior.method == "eb"
    assert prior.provenance["data_hash"] == read_log(log_df, features=FEATURES).data_hash
    assert prior.features == ["x0", "x1"]


def test_ml_equals_type2_ml(log_df):
    from hierbandit.data import read_log

    prior = fit_prior(log_df, features=FEATURES, method="ml")
    st = read_log(log_df, features=FEATURES).suffstats()
    for k in range(2):
        ref = fit_type2_ml(st.G[k], st.b[k], st.q[k], st.n[k])
        np.testing.assert_allclose(prior.Sigma[k], ref.Sigma, rtol=1e-8)
        np.testing.assert_allclose(prior.shared_mean[k], ref.shared_mean, rtol=1e-8)
    assert prior.dataset["converged"].values.all()


def test_warm_start_from_a_fitted_prior(log_df):
    prior = fit_prior(log_df, features=FEATURES, method="ml")
    policy = EbmTS(n_instances=4, n_arms=2, n_features=2, prior=prior, prior_mode="fixed", rng=0)
    post = policy.posterior()
    np.testing.assert_allclose(post["mean"].values[:, 0], prior.shared_mean)
    np.testing.assert_allclose(post["cov"].values[:, 0], prior.Sigma + prior.shared_cov)


def test_validation_messages(log_df):
    with pytest.raises(ValueError, match="method"):
        fit_prior(log_df, features=FEATURES, method="vb")
    with pytest.raises(ValueError, match=r"rewrad|reward"):
        fit_prior(log_df, features=FEATURES, reward="rewrad")
    tiny = log_df.iloc[:3]
    with pytest.raises(ValueError, match=r"eb.*(needs|need)"):
        fit_prior(tiny, features=FEATURES, method="eb")
    with pytest.raises(ValueError, match="lam"):
        fit_prior(log_df, features=FEATURES, method="eb", lam=-1.0)
    with pytest.raises(TypeError, match="eb_options"):
        fit_prior(log_df, features=FEATURES, method="eb", eb_options={"eb_iters": 2})
    with pytest.raises(ValueError, match="nuts_sampler"):
        fit_prior(log_df, features=FEATURES, method="mcmc", nuts_sampler="stan", draws=10, tune=10)


def test_mcmc_collapsed_small(log_df, tmp_path):
    prior = fit_prior(log_df, features=FEATURES, method="mcmc", draws=300, tune=300, random_seed=1)
    post = prior.idata.posterior
    # the default route: nutpie on the compiled log density (B18), recorded in the provenance
    assert post.attrs["log_density"] == "hierbandit.bayes.compiled"
    assert prior.provenance["config"]["sampler"]["driver"] == "kernel"
    assert post["beta"].dims == ("chain", "draw", "arm", "instance", "feature")
    assert post["beta0"].dims == ("chain", "draw", "arm", "feature")
    assert set(post.data_vars) == {"Sigma", "sigma", "beta0", "beta"}
    # ArviZ 1: a DataTree of groups; the predictive only when asked for
    assert set(prior.idata.children) == {
        "posterior",
        "sample_stats",
        "observed_data",
        "log_likelihood",
    }
    ll = prior.idata.log_likelihood["reward"]
    assert ll.dims == ("chain", "draw", "instance") and np.all(np.isfinite(ll))
    assert prior.provenance["config"]["posterior_predictive"] is False
    assert np.all(np.linalg.eigvalsh(prior.Sigma) > 0)
    # posterior means near the ML estimate on this well-identified data
    ml = fit_prior(log_df, features=FEATURES, method="ml")
    np.testing.assert_allclose(prior.sigma2, ml.sigma2, rtol=0.15)
    from hierbandit.bayes.prior import load_prior

    assert load_prior(prior.save(tmp_path / "m.nc")) == prior


def test_mcmc_with_the_nutpie_backend(log_df):
    """The route before B18, one option away: ``pm.sample`` with nutpie on the JAX-compiled
    model."""
    prior = fit_prior(log_df, features=FEATURES, method="mcmc", driver="pymc", draws=200, tune=200)
    assert prior.provenance["config"]["sampler"]["nuts_sampler"] == "nutpie"
    assert "driver" not in prior.provenance["config"]["sampler"]  # pm.sample
    assert prior.idata.posterior.attrs["inference_library"] == "nutpie"
    assert set(prior.idata.posterior.data_vars) == {"Sigma", "sigma", "beta0", "beta"}
    ml = fit_prior(log_df, features=FEATURES, method="ml")
    np.testing.assert_allclose(prior.sigma2, ml.sigma2, rtol=0.15)


# ---------------------------------------------------------------------- EB without full-rank designs
EB_FEATURES = ["intercept", "x", "weekend"]


def _rank_deficient_log(rows_per_cell=5, n_users=8, seed=0) -> pd.DataFrame:
    """Two arms (labels 10 and 11), 3 features, every user with ``rows_per_cell`` rows per arm,
    and ``weekend`` constant within each user: no user's design has full rank."""
    g = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        for k in (10, 11):
            for _ in range(rows_per_cell):
                x = g.normal()
                rows.append(
                    {
                        "user": 100 + u,
                        "arm": k,
                        "reward": 0.5 + x * (1.0 + 0.3 * g.normal()) + g.normal(),
                        "intercept": 1.0,
                        "x": x,
                        "weekend": float(u % 2),
                    }
                )
    return pd.DataFrame(rows)


def test_eb_warns_when_no_instance_has_a_full_rank_design():
    df = _rank_deficient_log()
    with pytest.warns(UserWarning) as record:
        prior = fit_prior(df, instance="user", features=EB_FEATURES, method="eb")
    assert len(record) == 1
    msg = str(record[0].message)
    for fragment in (
        "empirical Bayes could not estimate Σ for 2 arms",
        "arm 10: 0 instances with a full-rank design, 2 needed",
        "arm 11: 0 instances with a full-rank design, 2 needed",
        "fell back to its starting value, the 3×3 identity",
        'method="ml") does not need per-instance full-rank designs',
    ):
        assert fragment in msg, (fragment, msg)
    assert record[0].filename == __file__  # attributed to the caller of fit_prior
    np.testing.assert_array_equal(prior.Sigma, np.broadcast_to(np.eye(3), (2, 3, 3)))
    assert np.isnan(prior.dataset["gamma"].values).all()
    np.testing.assert_array_equal(prior.dataset["n_eff"].values, [0, 0])
    # type-II ML fits the same log, with no warning and a Σ from the data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ml = fit_prior(df, instance="user", features=EB_FEATURES, method="ml")
    assert not np.allclose(ml.Sigma, np.eye(3))


def test_eb_warning_names_only_the_arms_that_fell_back():
    df = _rank_deficient_log()
    # arm 10 gets a weekend that varies within users: its designs have full rank
    g = np.random.default_rng(1)
    arm10 = df["arm"] == 10
    df.loc[arm10, "weekend"] = g.integers(0, 2, arm10.sum()).astype(float)
    df.loc[arm10 & (df.groupby(["user", "arm"]).cumcount() == 0), "weekend"] = 0.0
    df.loc[arm10 & (df.groupby(["user", "arm"]).cumcount() == 1), "weekend"] = 1.0
    with pytest.warns(UserWarning, match="could not estimate Σ for 1 arm ") as record:
        prior = fit_prior(df, instance="user", features=EB_FEATURES, method="eb")
    msg = str(record[0].message)
    assert "arm 11: 0 instances" in msg and "arm 10" not in msg
    assert prior.dataset["n_eff"].values.tolist() == [8, 0]
    # a bar set higher than the log reaches: the count and the bar are named
    options = EBOptions(eb_iters=20, min_instances_for_sigma=20)
    with pytest.warns(UserWarning, match="arm 10: 8 instances with a full-rank design, 20 needed"):
        fit_prior(df, instance="user", features=EB_FEATURES, method="eb", eb_options=options)


def test_eb_fit_with_full_rank_designs_does_not_warn(log_df):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prior = fit_prior(log_df, features=FEATURES, method="eb")
    assert not np.isnan(prior.dataset["gamma"].values).any()  # inf is a threshold too


def test_eb_refuses_a_log_whose_users_all_have_fewer_rows_than_features():
    df = _rank_deficient_log(rows_per_cell=2)  # 2 rows per user and arm, 3 features
    with pytest.raises(ValueError) as info:
        fit_prior(df, instance="user", features=EB_FEATURES, method="eb")
    msg = str(info.value)
    for fragment in (
        "arm 10 needs at least 2 instances with >= 3 rows each, has 0",
        "per-instance OLS fits, which need at least 3 rows",
        'method="ml") does not need per-instance full-rank designs',
    ):
        assert fragment in msg, (fragment, msg)
    # type-II ML fits it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ml = fit_prior(df, instance="user", features=EB_FEATURES, method="ml")
    assert np.all(np.isfinite(ml.Sigma)) and ml.method == "ml"


def test_the_default_method_is_type2_ml(log_df):
    """B16: type-II ML by default; the paper's EB is one option away."""
    import inspect

    assert inspect.signature(fit_prior).parameters["method"].default == "ml"
    prior = fit_prior(log_df, features=FEATURES)
    assert prior.method == "ml"
    # the same values (``equals``: the attributes hold the creation time, to the second)
    assert prior.dataset.equals(fit_prior(log_df, features=FEATURES, method="ml").dataset)
    assert fit_prior(log_df, features=FEATURES, method="eb").method == "eb"


def test_a_fit_runs_with_one_blas_thread_and_restores_the_setting(log_df, monkeypatch):
    """BLAS on one thread while fitting (small matrices: B18), the user's setting afterwards."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from hierbandit.bayes import fit as fit_module

    seen = []
    inner = fit_module._fit_ml

    def spy(*args, **kwargs):
        seen.append({i["filepath"]: i["num_threads"] for i in threadpool_info()})
        return inner(*args, **kwargs)

    monkeypatch.setattr(fit_module, "_fit_ml", spy)
    with threadpool_limits(limits=2, user_api="blas"):
        before = {i["filepath"]: i["num_threads"] for i in threadpool_info()}
        fit_prior(log_df, features=FEATURES, method="ml")
        after = {i["filepath"]: i["num_threads"] for i in threadpool_info()}
    blas = {i["filepath"] for i in threadpool_info() if i["user_api"] == "blas"}
    assert blas and all(seen[0][p] == 1 for p in blas)
    assert after == before
