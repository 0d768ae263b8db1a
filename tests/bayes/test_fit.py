"""fit_prior: empirical Bayes, type-II ML and full Bayes return one HierarchicalPrior type."""

from __future__ import annotations

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
    """An alternative NUTS backend from the registry (nutpie, JAX-compiled model)."""
    prior = fit_prior(
        log_df, features=FEATURES, method="mcmc", nuts_sampler="nutpie", draws=200, tune=200
    )
    assert prior.idata.posterior.attrs["inference_library"] == "nutpie"
    assert set(prior.idata.posterior.data_vars) == {"Sigma", "sigma", "beta0", "beta"}
    ml = fit_prior(log_df, features=FEATURES, method="ml")
    np.testing.assert_allclose(prior.sigma2, ml.sigma2, rtol=0.15)
