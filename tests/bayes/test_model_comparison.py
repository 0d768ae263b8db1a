"""Full-Bayes priors are ArviZ 1 results: ``az.loo`` and ``az.compare`` rank fits of one log by
feature set (leave one instance out, docs/bayes.md), from memory and from the saved file, and
``az.plot_ppc_dist`` draws the predictive check when it was asked for.

Two small fits (one per feature set; 2 chains × 200 draws) shared by every test of the module.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

az = pytest.importorskip("arviz")

# with 12 instances, each holding 30 rows, leaving one out moves the posterior: ArviZ warns
# about some Pareto k above 0.62 (docs/bayes.md); the ranking stands far beyond its error
pytestmark = pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")

#: the sampler settings of the module's fits: small, as in tests/bayes/test_fit.py
SMALL = {"draws": 200, "tune": 200, "chains": 2, "random_seed": 3}


def _log(n_instances: int = 12, rows_per_cell: int = 15, seed: int = 0) -> pd.DataFrame:
    """Two arms; the reward is 1 + 1.5·x1 (per-instance coefficients around them) + noise:
    ``x1`` is informative, ``x2`` is not."""
    rng = np.random.default_rng(seed)
    inst = np.repeat(np.arange(n_instances), 2 * rows_per_cell)
    arm = np.tile(np.repeat([0, 1], rows_per_cell), n_instances)
    x1, x2 = rng.normal(size=(2, inst.size))
    b0 = 1.0 + 0.3 * rng.normal(size=(n_instances, 2))
    b1 = 1.5 + 0.3 * rng.normal(size=(n_instances, 2))
    reward = b0[inst, arm] + b1[inst, arm] * x1 + 0.5 * rng.normal(size=inst.size)
    return pd.DataFrame(
        {"instance": inst, "arm": arm, "reward": reward, "intercept": 1.0, "x1": x1, "x2": x2}
    )


@pytest.fixture(scope="module")
def fits():
    from hierbandit.bayes import fit_prior

    df = _log()
    informative = fit_prior(
        df, method="mcmc", features=["intercept", "x1"], posterior_predictive=True, **SMALL
    )
    blind = fit_prior(df, method="mcmc", features=["intercept", "x2"], **SMALL)
    return {"informative": informative, "blind": blind}


def test_loo_and_compare_rank_the_informative_feature_set_first(fits):
    for prior in fits.values():
        assert set(prior.idata.children) >= {"posterior", "observed_data", "log_likelihood"}
        loo = az.loo(prior.idata)
        assert np.isfinite(loo.elpd) and np.isfinite(loo.se)
        assert loo.n_data_points == 12  # one point per instance
    table = az.compare({name: prior.idata for name, prior in fits.items()})
    assert list(table.index) == ["informative", "blind"]
    assert abs(table.loc["blind", "elpd_diff"]) > 4 * table.loc["blind", "dse"]


def test_a_saved_prior_opens_in_xarray_and_arviz(fits, tmp_path):
    """The file's groups are the ArviZ groups: xarray and ArviZ open it and give the same LOO."""
    from hierbandit.bayes import load_prior

    prior = fits["informative"]
    path = prior.save(tmp_path / "prior.nc")
    assert load_prior(path) == prior
    want = az.loo(prior.idata).elpd
    with xr.open_datatree(path) as tree:
        assert set(tree.children) == set(prior.idata.children)
        assert "shared_mean" in tree.to_dataset()  # the prior's own values stay at the root
        assert az.loo(tree).elpd == pytest.approx(want, rel=1e-12)
    with az.from_netcdf(path) as tree:
        assert az.loo(tree).elpd == pytest.approx(want, rel=1e-12)
        table = az.compare({"file": tree, "blind": fits["blind"].idata})
        assert table.index[0] == "file"


def test_the_predictive_check_on_request(fits, tmp_path):
    """posterior_predictive=True: each observed cell's mean reward per draw, beside the observed
    one; az.plot_ppc_dist takes the prior's draws, and the file's, as they are."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hierbandit.bayes import load_prior

    assert "posterior_predictive" not in fits["blind"].idata.children
    idata = fits["informative"].idata
    pred = idata.posterior_predictive["mean_reward"]
    obs = idata.observed_data["mean_reward"]
    assert pred.dims == ("chain", "draw", "cell") and obs.dims == ("cell",)
    assert pred.sizes["cell"] == obs.sizes["cell"] == 24 and np.all(np.isfinite(pred))
    # the observed cell means lie within the predictive's spread
    z = (obs - pred.mean(("chain", "draw"))) / pred.std(("chain", "draw"))
    assert float(np.abs(z).max()) < 5
    for draws in (idata, load_prior(fits["informative"].save(tmp_path / "p.nc")).idata):
        az.plot_ppc_dist(draws)
        plt.close("all")
