"""One SamplerConfig: checked once, overridden by keywords, and each function's default as it was."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hierbandit.bayes import sampling
from hierbandit.bayes.sampler_config import SamplerConfig, available_samplers, resolve_sampler

from .test_fit import features, synthetic_log


def test_defaults_and_normalised_values():
    cfg = SamplerConfig()
    assert (cfg.draws, cfg.tune, cfg.chains, cfg.target_accept, cfg.random_seed) == (
        1000,
        1000,
        2,
        0.9,
        0,
    )
    # pm.sample with nutpie and PyMC's progress bar (docs/decisions/bayes.md, B10)
    assert (cfg.nuts_sampler, cfg.progressbar, cfg.driver, cfg.options) == (
        "nutpie",
        True,
        "pymc",
        {},
    )
    cfg = SamplerConfig(draws=np.int64(10), target_accept=np.float32(0.5), progressbar=np.False_)
    assert type(cfg.draws) is int and type(cfg.target_accept) is float
    assert cfg.progressbar is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.draws = 3  # type: ignore[misc]
    assert {"numpyro", "nutpie"} <= set(available_samplers())


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"draws": 0}, ValueError, "draws must be >= 1"),
        ({"draws": 2.5}, TypeError, "draws must be an integer"),
        ({"tune": -1}, ValueError, "tune must be >= 0"),
        ({"chains": True}, TypeError, "chains must be an integer"),
        ({"target_accept": 1.0}, ValueError, "target_accept must be < 1"),
        ({"target_accept": 0.0}, ValueError, "target_accept must be > 0"),
        ({"target_accept": "high"}, TypeError, "target_accept must be a real number"),
        ({"random_seed": -1}, ValueError, "random_seed must be >= 0"),
        ({"random_seed": None}, TypeError, "random_seed must be an integer"),
        ({"nuts_sampler": "stan"}, ValueError, "nuts_sampler must be one of"),
        ({"progressbar": 1}, TypeError, "progressbar must be a bool"),
        ({"driver": "fast"}, ValueError, "driver must be one of"),
        ({"options": [("a", 1)]}, TypeError, "options must be a mapping"),
        ({"options": {1: 2}}, TypeError, "options keys must be strings"),
        ({"options": {"draws": 5}}, ValueError, "its own argument"),
        ({"options": {"var_names": ["a"]}}, ValueError, "its own argument"),
    ],
)
def test_every_setting_is_checked_when_built(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        SamplerConfig(**kwargs)


def test_override_resolve_and_record():
    base = SamplerConfig(chains=4, options={"max_tree_depth": 8})
    assert base.override() is base and base.override(draws=None) is base
    new = base.override(draws=50, options={"dense_mass": True})
    assert new.draws == 50 and new.chains == 4
    assert new.options == {"max_tree_depth": 8, "dense_mass": True}
    assert base.options == {"max_tree_depth": 8}  # unchanged
    with pytest.raises(ValueError, match="tune must be >= 0"):
        base.override(tune=-2)
    # the default when no sampler is given; keywords and **kwargs routed to fields or options
    cfg = resolve_sampler(None, base, extra={"driver": "direct", "cores": 1}, tune=7, chains=None)
    assert (cfg.tune, cfg.chains, cfg.driver, cfg.options) == (
        7,
        4,
        "direct",
        {"max_tree_depth": 8, "cores": 1},
    )
    mine = SamplerConfig(draws=20)
    assert resolve_sampler(mine, base) is mine
    with pytest.raises(TypeError, match="sampler must be a SamplerConfig"):
        resolve_sampler({"draws": 20}, base)
    with pytest.raises(ValueError, match="draws must be >= 4"):
        resolve_sampler(None, base, min_draws=4, draws=0)
    with pytest.raises(ValueError, match="draws must be >= 4"):
        resolve_sampler(SamplerConfig(draws=3), base, min_draws=4)
    assert SamplerConfig(random_seed=3).record() == {
        "draws": 1000,
        "tune": 1000,
        "chains": 2,
        "target_accept": 0.9,
        "random_seed": 3,
        "nuts_sampler": "nutpie",
    }
    rec = SamplerConfig(driver="direct", options={"cores": 1}, progressbar=False).record()
    assert list(rec)[-2:] == ["driver", "cores"] and "progressbar" not in rec


class _Sampled(Exception):
    pass


@pytest.fixture
def seen(monkeypatch):
    """The configuration and keyword arguments of the next ``sample`` call (not run)."""
    got = {}

    def fake(model, sampler=None, **kwargs):
        got["config"], got["kwargs"] = sampler, kwargs
        raise _Sampled

    monkeypatch.setattr(sampling, "sample", fake)
    return got


def test_each_function_keeps_its_default(seen):
    """The defaults each function had before it took a SamplerConfig (compare_closed_form's
    changed since, with B13)."""
    from hierbandit.bayes import boc, conditional, sclub
    from hierbandit.bayes.fit import FIT_SAMPLER, fit_prior
    from hierbandit.data import read_log

    df = synthetic_log(n_instances=3, n_arms=2, n_features=2, rows=60, seed=4)
    with pytest.raises(_Sampled):
        fit_prior(df, features=features(df), method="mcmc")
    # B15, B18: nutpie's warm-up and target, on the compiled log density
    assert seen["config"] == SamplerConfig(tune=400, target_accept=0.8, driver="kernel")
    assert seen["config"] == FIT_SAMPLER
    # another backend goes through pm.sample, the old route one option away
    with pytest.raises(_Sampled):
        fit_prior(df, features=features(df), method="mcmc", nuts_sampler="numpyro")
    assert seen["config"] == SamplerConfig(tune=400, target_accept=0.8, nuts_sampler="numpyro")
    with pytest.raises(_Sampled):
        fit_prior(df, features=features(df), method="mcmc", driver="pymc")
    assert seen["config"] == SamplerConfig(tune=400, target_accept=0.8)
    with pytest.raises(_Sampled):
        fit_prior(df, features=features(df), method="mcmc", collapsed=False)
    assert seen["config"] == SamplerConfig()
    with pytest.raises(_Sampled):
        conditional.compare_closed_form(read_log(df, features=features(df)), np.eye(2), 1.0, 1.0)
    # B13: the centred model, a diagonal mass matrix, the direct numpyro driver
    expected = SamplerConfig(draws=2000, nuts_sampler="numpyro", driver="direct")
    assert seen["config"] == expected == conditional.CLOSED_FORM_SAMPLER
    assert seen["kwargs"] == {"dense_mass": False}
    means = np.array([[0.0, 0.0], [0.1, 0.0], [2.0, 2.0], [2.1, 2.0]])
    with pytest.raises(_Sampled):
        boc.diagnose_partition(means, np.full(4, 5.0), [0, 0, 1, 1])
    assert seen["config"] == SamplerConfig(draws=500, tune=500) == boc.DIAGNOSTIC_SAMPLER
    G = np.broadcast_to(np.eye(2), (3, 2, 2)).copy()
    model = sclub.mixture_model(G, np.ones((3, 2)), np.full(3, 2.0), np.full(3, 4.0), 2)
    with pytest.raises(_Sampled):
        sclub.fit_mixture(model)
    assert seen["config"] == SamplerConfig(draws=500, tune=500) == sclub.MIXTURE_SAMPLER
    with pytest.raises(_Sampled):
        sclub.fit_mixture(model, sampler=SamplerConfig(chains=3), draws=40, max_tree_depth=6)
    assert seen["config"] == SamplerConfig(chains=3, draws=40, options={"max_tree_depth": 6})


def test_fit_prior_takes_a_config_and_keywords(seen):
    from hierbandit.bayes.fit import fit_prior

    df = synthetic_log(n_instances=3, n_arms=2, n_features=2, rows=60, seed=4)
    cfg = SamplerConfig(draws=30, tune=20, random_seed=9)
    with pytest.raises(_Sampled):
        fit_prior(df, features=features(df), method="mcmc", sampler=cfg, chains=3, dense_mass=True)
    assert seen["config"] == SamplerConfig(
        draws=30, tune=20, chains=3, random_seed=9, options={"dense_mass": True}
    )
    with pytest.raises(ValueError, match="target_accept must be < 1"):
        fit_prior(df, features=features(df), method="mcmc", target_accept=1.0)
    # empirical Bayes draws its cross-validation folds from the same seed
    eb = fit_prior(df, features=features(df), method="eb", sampler=cfg)
    assert eb.provenance["config"]["seed"] == 9
    np.testing.assert_array_equal(
        eb.Sigma, fit_prior(df, features=features(df), method="eb", random_seed=9).Sigma
    )
    assert fit_prior(df, features=features(df), method="eb").provenance["config"]["seed"] == 0


def test_sample_passes_the_configuration_to_the_driver(monkeypatch):
    """Defaults and overrides reach ``pm.sample`` and the direct driver unchanged."""
    import jax
    import pymc as pm

    got = {}

    def fake_pm_sample(**kwargs):
        got.update(kwargs)
        return "pm-idata"

    monkeypatch.setattr(pm, "sample", fake_pm_sample)
    monkeypatch.setattr(sampling, "_tidy", lambda idata, var_names: idata)
    monkeypatch.setattr(sampling, "configure_jax_once", lambda: None)
    monkeypatch.setattr(jax, "local_device_count", lambda: 2)  # a device per chain
    with pm.Model() as model:
        pm.Normal("x")
    # SamplerConfig()'s run settings, on every route
    run = {"draws": 1000, "tune": 1000, "chains": 2, "target_accept": 0.9, "random_seed": 0}
    # the default: pm.sample with nutpie compiled by JAX, a thread per chain, PyMC's progress bar
    assert sampling.sample(model) == "pm-idata"
    assert got == run | {
        "nuts_sampler": "nutpie",
        "progressbar": True,
        "backend": "jax",
        "compile_kwargs": {"gradient_backend": "jax"},
        "cores": 2,
        "compute_convergence_checks": False,
    }
    got.clear()  # a backend the user chose is kept
    sampling.sample(model, backend="numba", var_names=["x"], cores=1)
    assert got["backend"] == "numba" and "compile_kwargs" not in got
    assert got["var_names"] == ["x"] and got["cores"] == 1
    got.clear()
    sampling.sample(model, nuts_sampler="numpyro", progressbar=False)
    assert got == run | {
        "nuts_sampler": "numpyro",
        "progressbar": False,
        "compute_convergence_checks": False,
    }
    # NUTS settings go to ``nuts={...}``, under each backend's name
    got.clear()
    sampling.sample(model, nuts_sampler="pymc", max_tree_depth=8, dense_mass=True, cores=1)
    assert got["nuts"] == {"max_treedepth": 8} and got["init"] == "jitter+adapt_full"
    assert got["cores"] == 1
    got.clear()  # PyMC's own NUTS keeps pm.sample's choice of cores (processes)
    sampling.sample(model, nuts_sampler="pymc")
    assert "cores" not in got
    got.clear()
    sampling.sample(model, dense_mass=True, step_scale=0.5)
    assert got["nuts"] == {"adaptation": "low_rank", "step_scale": 0.5}
    got.clear()  # numpyro with fewer devices than chains: vectorised chains
    sampling.sample(model, nuts_sampler="numpyro", chains=3)
    assert got["nuts"] == {"chain_method": "vectorized"}

    # the direct drivers
    def driver(model, **kwargs):
        got.update(kwargs)
        return "idata"

    monkeypatch.setattr(sampling, "_sample_numpyro", driver)
    got.clear()
    assert sampling.sample(model, driver="direct", nuts_sampler="numpyro") == "idata"
    assert got == run | {"progressbar": True, "var_names": None}
    got.clear()
    cfg = SamplerConfig(chains=3, driver="direct", nuts_sampler="numpyro")
    sampling.sample(model, cfg, draws=5, dense_mass=True)
    assert got["chains"] == 3 and got["draws"] == 5 and got["dense_mass"] is True

    # the direct nutpie driver: the portable names become nutpie's
    import arviz as az
    import nutpie

    tree = az.from_dict(
        {"posterior": {"x": np.zeros((2, 3))}, "sample_stats": {"lp": np.zeros((2, 3))}}
    )
    monkeypatch.setattr(nutpie, "compile_pymc_model", lambda model, **kw: got.update(kw))
    monkeypatch.setattr(nutpie, "sample", lambda compiled, **kw: got.update(kw) or tree)
    got.clear()
    assert sampling.sample(model, driver="direct", dense_mass=True, max_tree_depth=7) is tree
    assert got["backend"] == "jax" and got["gradient_backend"] == "jax"
    assert got["adaptation"] == "low_rank" and got["maxdepth"] == 7
    assert "dense_mass" not in got and "max_tree_depth" not in got
    assert got["seed"] == 0 and got["draws"] == 1000 and got["progress_bar"] is True
