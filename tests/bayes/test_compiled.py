"""The collapsed model's compiled log density (``hierbandit.bayes.compiled``): the PyMC model's
log density and gradient at random points, through the C entry points nutpie calls, and the
posterior it samples against ``pm.sample``'s."""

from __future__ import annotations

import ctypes

import numpy as np
import pandas as pd
import pytest

from hierbandit.bayes import compiled
from hierbandit.bayes.models import HyperPriors, collapsed_model, uncollapsed_model
from hierbandit.bayes.sampler_config import SamplerConfig
from hierbandit.data import read_log


def _log(n_instances, n_arms, d, rows_per_cell, seed, empty_every=5):
    """A log with an intercept and d − 1 normal features, rewards from a hierarchical model, and
    every ``empty_every``-th instance without rows in arm 0 (empty cells); the last instance
    has rows in one arm only."""
    g = np.random.default_rng(seed)
    rows = n_instances * n_arms * rows_per_cell
    inst = g.integers(0, n_instances, rows)
    arm = g.integers(0, n_arms, rows)
    keep = ~((inst % empty_every == 0) & (arm == 0)) & ~((inst == n_instances - 1) & (arm > 0))
    inst, arm = inst[keep], arm[keep]
    X = np.column_stack([np.ones(inst.size), g.normal(size=(inst.size, d - 1))])
    beta = g.normal(size=(n_arms, 1, d)) + 0.7 * g.normal(size=(n_arms, n_instances, d))
    y = np.einsum("rd,rd->r", X, beta[arm, inst]) + 0.8 * g.normal(size=inst.size)
    df = pd.DataFrame({"instance": inst, "arm": arm, "reward": y})
    for i in range(d):
        df[f"x{i}"] = X[:, i]
    log = read_log(df, features=[f"x{i}" for i in range(d)])
    assert (log.suffstats().n == 0).any()  # empty cells are part of the check
    return log


#: (instances, arms, d, rows per cell, shared mean integrated out, hyperpriors): several blocks
#: of cells with a partial last one (N > ``compiled.BLOCK``), d = 1 (no correlations), the
#: shared mean sampled, other hyperpriors
CASES = [
    pytest.param(70 + compiled.BLOCK, 3, 3, 4, True, HyperPriors(), id="K3-d3-blocks"),
    pytest.param(12, 2, 1, 3, True, HyperPriors(lam=0.2, noise_scale=0.7), id="K2-d1"),
    pytest.param(
        25, 2, 2, 5, False, HyperPriors(lam=0.05, lkj_eta=1.5, sd_scale=1.3), id="K2-d2-beta0"
    ),
    pytest.param(9, 2, 4, 6, True, HyperPriors(lkj_eta=1.0), id="K2-d4"),
]


def _flat_points(model, rng, n, scale):
    """``n`` random unconstrained points, flat (nutpie's layout) and as PyMC's point dicts."""
    names = [model.rvs_to_values[rv].name for rv in model.free_RVs]
    shapes = {k: np.shape(v) for k, v in model.initial_point().items()}
    sizes = [int(np.prod(shapes[k])) for k in names]
    for _ in range(n):
        x = scale * rng.normal(size=sum(sizes))
        parts = np.split(x, np.cumsum(sizes)[:-1])
        yield x, {k: p.reshape(shapes[k]) for k, p in zip(names, parts, strict=True)}


@pytest.mark.parametrize(("n", "k", "d", "rows", "collapse", "hyper"), CASES)
def test_the_kernel_is_the_pymc_log_density_and_gradient(n, k, d, rows, collapse, hyper):
    """At random points of the unconstrained space, far from the mode too, the kernel's log
    density and gradient are PyTensor's of the same model (priors, transforms' Jacobians and
    the collapsed potential) to 1e-10."""
    log = _log(n, k, d, rows, seed=n + d)
    model = collapsed_model(log, hyper=hyper, collapse_shared_mean=collapse)
    reference = model.compile_fn([model.logp(), model.dlogp()])
    buf = compiled.kernel_data(model)
    rng = np.random.default_rng(7)
    for scale in (0.5, 1.5):
        for x, point in _flat_points(model, rng, 4, scale):
            want, want_grad = reference(point)
            grad = np.full_like(x, np.nan)
            got = compiled.logp_and_grad(x, buf, grad)
            assert got == pytest.approx(float(want), rel=1e-10)
            np.testing.assert_allclose(
                grad, want_grad, rtol=1e-10, atol=1e-10 * np.max(np.abs(want_grad))
            )


def test_the_expanded_draws_are_the_models_variables():
    """``expand`` maps an unconstrained point to Σ, σ (and β₀) as the model's own map does."""
    from hierbandit.bayes.models import constrain_draws

    log = _log(10, 2, 3, 3, seed=2)
    for collapse in (True, False):
        model = collapsed_model(log, collapse_shared_mean=collapse)
        buf = compiled.kernel_data(model)
        for x, point in _flat_points(model, np.random.default_rng(3), 3, 1.0):
            want = constrain_draws(model, {k: v[None, None] for k, v in point.items()})
            names = ["Sigma", "sigma"] + ([] if collapse else ["beta0"])
            out = np.full(sum(want[v][0, 0].size for v in names), np.nan)
            compiled.expand(x, buf, out)
            np.testing.assert_allclose(
                out, np.concatenate([want[v][0, 0].ravel() for v in names]), rtol=1e-13
            )


def test_the_c_entry_points_return_the_kernels_values_and_status_codes():
    """The C functions nutpie calls: the kernel's value and gradient (status 0), a recoverable
    status for a point where the density is not finite, −1 for a wrong size."""
    log = _log(15, 2, 2, 4, seed=4)
    model = collapsed_model(log)
    buf = compiled.kernel_data(model)
    logp_c, expand_c = compiled._cfuncs()
    dim = int(buf[compiled._H_NDIM])
    ptr = ctypes.POINTER(ctypes.c_double)

    def call(x):
        x = np.ascontiguousarray(x, dtype=float)
        grad = np.zeros(dim)
        value = np.zeros(1)
        status = logp_c.ctypes(
            x.size,
            x.ctypes.data_as(ptr),
            grad.ctypes.data_as(ptr),
            value.ctypes.data_as(ptr),
            ctypes.c_void_p(buf.ctypes.data),
        )
        return status, float(value[0]), grad

    x = np.random.default_rng(0).normal(size=dim)
    status, value, grad = call(x)
    want_grad = np.empty(dim)
    assert status == 0
    assert value == compiled.logp_and_grad(x, buf, want_grad)
    np.testing.assert_array_equal(grad, want_grad)
    bad = x.copy()
    bad[0] = 800.0  # an sd of e^800: not finite
    assert call(bad)[0] > 0  # nutpie rejects the proposal and goes on
    assert call(np.append(x, 0.0))[0] == -1
    out = np.zeros(2 * 2 * 2 + 2)
    assert (
        expand_c.ctypes(
            dim,
            out.size,
            x.ctypes.data_as(ptr),
            out.ctypes.data_as(ptr),
            ctypes.c_void_p(buf.ctypes.data),
        )
        == 0
    )
    want = np.zeros_like(out)
    compiled.expand(x, buf, want)
    np.testing.assert_array_equal(out, want)


def test_the_kernel_refuses_models_it_does_not_compute():
    log = _log(8, 2, 2, 3, seed=5)
    with pytest.raises(ValueError, match="collapsed model only"):
        compiled.kernel_data(uncollapsed_model(log))


def test_the_kernel_driver_samples_the_same_posterior_as_pm_sample():
    """Same model, two routes: nutpie on the compiled kernel and ``pm.sample`` with nutpie on
    the JAX-compiled graph give posterior means of Σ and σ within Monte-Carlo error, with
    healthy diagnostics."""
    import arviz as az

    from hierbandit.bayes import sampling

    log = _log(30, 2, 2, 8, seed=6)
    runs = {}
    for driver in ("kernel", "pymc"):
        cfg = SamplerConfig(draws=600, tune=400, target_accept=0.8, driver=driver, random_seed=3)
        runs[driver] = sampling.sample(collapsed_model(log), cfg, progressbar=False)
    post = runs["kernel"].posterior
    assert set(post.data_vars) == {"Sigma", "sigma"}
    assert post["Sigma"].dims == ("chain", "draw", "arm", "feature", "feature_")
    assert post.attrs["log_density"] == "hierbandit.bayes.compiled"
    assert not runs["kernel"].sample_stats["diverging"].any()
    for var in ("Sigma", "sigma"):
        mean = {r: runs[r].posterior[var].mean(("chain", "draw")) for r in runs}
        mcse = {r: az.mcse(runs[r].posterior[var], method="mean") for r in runs}
        z = (mean["kernel"] - mean["pymc"]) / np.sqrt(mcse["kernel"] ** 2 + mcse["pymc"] ** 2)
        finite = np.isfinite(z.values)  # Σ's symmetric copies and exact zeros have no error
        assert finite.any() and np.max(np.abs(z.values[finite])) < 4.5, var


def test_the_kernel_driver_checks_its_model_sampler_and_options():
    from hierbandit.bayes import sampling

    log = _log(8, 2, 2, 3, seed=5)
    with pytest.raises(ValueError, match="collapsed model only"):
        sampling.sample(uncollapsed_model(log), draws=5, tune=5, driver="kernel")
    with pytest.raises(ValueError, match="driver='kernel' samples with nutpie"):
        sampling.sample(collapsed_model(log), driver="kernel", nuts_sampler="numpyro")
    with pytest.raises(ValueError, match=r"\['backend'\] are pm.sample's"):
        sampling.sample(collapsed_model(log), draws=5, tune=5, driver="kernel", backend="jax")


def test_the_kernel_drivers_progress_bar_estimates_the_time_left(monkeypatch):
    """PyMC's bar for nutpie, as with ``pm.sample``: draws done and the time left."""
    from rich.progress import TimeRemainingColumn

    from hierbandit.bayes import sampling

    seen = []
    render = TimeRemainingColumn.render

    def spy(self, task):
        seen.append((task.completed, task.total, task.time_remaining))
        return render(self, task)

    monkeypatch.setattr(TimeRemainingColumn, "render", spy)
    monkeypatch.setenv("FORCE_COLOR", "1")
    log = _log(3000, 2, 3, 3, seed=8)  # large enough to run for a few redraws of the bar
    sampling.sample(collapsed_model(log), SamplerConfig(draws=400, tune=400, driver="kernel"))
    during = [(done, total, left) for done, total, left in seen if total and 0 < done < total]
    assert during, "no progress shown while sampling"
    estimates = [left for _, _, left in during if left is not None]
    assert estimates and all(left >= 0 for left in estimates)
    assert any(left > 0 for left in estimates)
