"""sample(): every route returns an ArviZ DataTree of the same shape, and a fit reports its
progress with an estimate of the time left."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import xarray as xr

from hierbandit.bayes import sampling
from hierbandit.bayes.models import collapsed_model
from hierbandit.bayes.sampler_config import SamplerConfig

from .test_fit import synthetic_hlog

#: the statistics every route stores, under ArviZ's names
STATS = {"diverging", "lp", "tree_depth", "energy", "step_size", "acceptance_rate", "n_steps"}


@pytest.fixture(scope="module")
def log():
    return synthetic_hlog(n_instances=4, n_arms=2, n_features=2, rows=300, seed=5)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def progress_records():
    """The ``hierbandit.progress`` records emitted while the test runs."""
    handler = _Records()
    logger = logging.getLogger(sampling.PROGRESS_LOGGER)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.records
    logger.removeHandler(handler)
    logger.setLevel(level)


def _check_tree(idata, log, draws: int, chains: int) -> None:
    assert isinstance(idata, xr.DataTree)
    assert {"posterior", "sample_stats"} <= set(idata.children)
    post = idata.posterior
    assert set(post.data_vars) == {"Sigma", "sigma"}
    assert post["Sigma"].dims == ("chain", "draw", "arm", "feature", "feature_")
    assert post["sigma"].dims == ("chain", "draw", "arm")
    assert (post.sizes["chain"], post.sizes["draw"]) == (chains, draws)
    assert list(post["arm"].values) == list(log.arm_labels)
    assert list(post["feature"].values) == list(log.features)
    stats = idata.sample_stats
    assert set(stats.data_vars) >= STATS
    assert stats["diverging"].dtype == bool
    assert all(stats[v].dims[:2] == ("chain", "draw") for v in STATS)
    assert all(v.dtype != object for v in stats.data_vars.values())
    assert np.all(stats["n_steps"] >= 1)
    assert np.isfinite(stats["lp"]).all()


def test_the_default_fit_shows_pymcs_progress_bar_with_the_time_left(log, monkeypatch):
    """The default goes through ``pm.sample`` with nutpie, and PyMC's progress bar estimates the
    time left while the chains run."""
    from rich.progress import TimeRemainingColumn

    seen = []
    render = TimeRemainingColumn.render

    def spy(self, task):
        seen.append((task.completed, task.total, task.time_remaining))
        return render(self, task)

    monkeypatch.setattr(TimeRemainingColumn, "render", spy)
    monkeypatch.setenv("FORCE_COLOR", "1")  # the bar redraws as on a terminal
    cfg = SamplerConfig(draws=400, tune=400)
    assert (cfg.driver, cfg.nuts_sampler, cfg.progressbar) == ("pymc", "nutpie", True)
    idata = sampling.sample(collapsed_model(log), cfg)
    _check_tree(idata, log, draws=400, chains=2)
    assert idata.posterior.attrs["inference_library"] == "nutpie"
    during = [(done, total, left) for done, total, left in seen if total and 0 < done < total]
    assert during, "no progress shown while sampling"
    estimates = [left for _, _, left in during if left is not None]
    assert estimates and all(left >= 0 for left in estimates)
    assert any(left > 0 for left in estimates)


def test_the_direct_numpyro_driver_reports_progress_with_the_time_left(log, progress_records):
    """The direct numpyro driver reports steps done out of the total, with an estimate of the
    time left once it has a rate, and keeps exactly the configured draws after warm-up."""
    cfg = SamplerConfig(draws=60, tune=47, driver="direct", nuts_sampler="numpyro")
    idata = sampling.sample(collapsed_model(log), cfg)
    _check_tree(idata, log, draws=60, chains=2)
    got = [r for r in progress_records if getattr(r, "progress", None) is not None]
    total = cfg.draws + cfg.tune
    done = [r.progress[0] for r in got]
    assert all(r.progress[1] == total for r in got)
    assert done[0] == 0 and done[-1] == total and done == sorted(done)
    assert len(set(done)) >= 10  # reported along the way, not only at the start and the end
    remaining = [r.remaining for r in got]
    assert remaining[0] is None  # no rate yet
    estimates = [x for x in remaining if x is not None]
    assert len(estimates) >= 5 and all(x >= 0 for x in estimates)
    assert remaining[-1] == 0.0
    assert any(x > 0 for x in estimates[:-1])
    assert "left" in got[1].getMessage()
    # the stored draws are those after warm-up: numpyro's step size is fixed once it ends
    step = idata.sample_stats["step_size"].values
    assert np.all(step == step[:, :1])


def test_progress_chunks_do_not_change_the_sampler(log, monkeypatch):
    """One compiled call or many: the same chains, up to floating-point reassociation."""
    runs = []
    for chunks in (1, 7):
        monkeypatch.setattr(sampling, "PROGRESS_CHUNKS", chunks)
        model = collapsed_model(log)
        runs.append(
            sampling.sample(model, draws=40, tune=30, driver="direct", nuts_sampler="numpyro")
        )
    a, b = (r.sample_stats["n_steps"].values for r in runs)
    assert np.mean(a == b) > 0.9
    np.testing.assert_allclose(
        runs[0].posterior["sigma"].mean(), runs[1].posterior["sigma"].mean(), rtol=1e-3
    )


@pytest.mark.parametrize(
    "route",
    [
        pytest.param({"driver": "direct", "nuts_sampler": "nutpie"}, id="direct-nutpie"),
        pytest.param({"nuts_sampler": "numpyro"}, id="pm-numpyro"),
        pytest.param({"backend": "numba"}, id="pm-nutpie-numba"),
        pytest.param({"nuts_sampler": "pymc"}, id="pm-pymc"),
    ],
)
@pytest.mark.slow
def test_every_route_returns_the_same_datatree(log, route):
    idata = sampling.sample(collapsed_model(log), draws=50, tune=50, progressbar=False, **route)
    _check_tree(idata, log, draws=50, chains=2)
