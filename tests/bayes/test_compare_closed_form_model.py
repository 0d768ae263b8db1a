"""The model compare_closed_form samples by default (docs/bayes.md §6): the whitened
parameterisation and the likelihood from each cell's sufficient statistics.

Both are exact rewrites of the same model: the log density is the joint density of (β₀, β, y)
up to a constant, so NUTS still targets the exact posterior whatever the closed form says. The
whitening only makes that posterior easy to sample: standard normal in the sampled coordinates.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats as st

from hierbandit.bayes import compare_closed_form, conditional_model
from hierbandit.data import read_log

D = 3
SIZES = {1: (40, 3, 0, 250), 2: (0, 12, 90, 1)}  # rows per (arm, user): rich, poor and empty
SIGMA = np.stack([np.diag([0.5, 0.02, 0.1]), np.array([[0.4, 0.05, 0.0], [0.05, 0.03, 0.0],
                                                        [0.0, 0.0, 0.2]])])  # fmt: skip
SIGMA2 = np.array([0.8, 1.2])


def _frame(seed: int = 0) -> pd.DataFrame:
    """An intercept, an uncentred 'time' (0 to 10) and a 0/1 'weekend': strongly correlated
    coefficients in every cell with data."""
    g = np.random.default_rng(seed)
    rows = []
    for arm, sizes in SIZES.items():
        for user, n in enumerate(sizes):
            beta = np.array([3.0, 0.1, -0.2]) + g.normal(size=D) * [0.5, 0.1, 0.3]
            for _ in range(n):
                x = np.array([1.0, g.uniform(0, 10), float(g.uniform() < 0.3)])
                rows.append({"instance": user, "arm": arm, "reward": x @ beta + g.normal(),
                             "intercept": 1.0, "time": x[1], "weekend": x[2]})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def log():
    return read_log(_frame(), features=["intercept", "time", "weekend"])


def _log_joint(log, Sigma, lam, beta0, beta, cells):
    """log p(β₀, β, y) by the model's definition (scipy densities, row by row); ``cells`` maps
    (arm, instance) to the row of ``beta`` and lists every sampled vector's arm."""
    lp = 0.0
    for k in range(log.n_arms):
        if lam > 0:
            lp += st.multivariate_normal(np.zeros(D), np.eye(D) / lam).logpdf(beta0[k])
    for c, k in enumerate(cells["arm"]):
        lp += st.multivariate_normal(beta0[k], Sigma[k]).logpdf(beta[c])
    rows = [cells["of"][(a, j)] for a, j in zip(log.arm, log.instance, strict=True)]
    mu = np.einsum("td,td->t", log.X, beta[rows])
    return lp + st.norm(mu, np.sqrt(SIGMA2[log.arm])).logpdf(log.y).sum()


def _compiled(model):
    logp = model.compile_logp()
    values = model.compile_fn(
        model.replace_rvs_by_values([model["beta0"], model["beta"]]),
        inputs=model.value_vars,
        on_unused_input="ignore",
    )
    return logp, values


@pytest.mark.parametrize("collapse_empty", [False, True])
@pytest.mark.parametrize("lam", [0.5, 0.0])
def test_whitened_log_density_is_the_joint_density(log, collapse_empty, lam) -> None:
    model = conditional_model(log, SIGMA, SIGMA2, lam, parameterization="whitened",
                              collapse_empty=collapse_empty, likelihood="suffstats")  # fmt: skip
    assert {v.name for v in model.free_RVs} == {"zeta", "xi"}
    logp, values = _compiled(model)
    counts = np.zeros((2, 4), dtype=int)
    np.add.at(counts, (log.arm, log.instance), 1)
    if collapse_empty:
        kk, jj = np.nonzero(counts)
        arms = list(kk) + [k for k in range(2) if (counts[k] == 0).any()]
        of = {(k, j): c for c, (k, j) in enumerate(zip(kk, jj, strict=True))}
    else:
        arms = [k for k in range(2) for _ in range(4)]
        of = {(k, j): 4 * k + j for k in range(2) for j in range(4)}
    cells = {"arm": arms, "of": of}
    rng = np.random.default_rng(3)
    ip = model.initial_point()
    diffs = []
    for _ in range(3):
        point = {name: rng.normal(size=ip[name].shape) for name in ip}
        beta0, beta = values(point)
        beta = beta.reshape(-1, D)
        diffs.append(float(logp(point)) - _log_joint(log, SIGMA, lam, beta0, beta, cells))
        # the direct driver's NumPy map gives the same coefficients
        mapped = model.hb_meta["constrain"](model, {k: v[None, None] for k, v in point.items()})
        np.testing.assert_allclose(mapped["beta0"][0, 0], beta0, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(mapped["beta"][0, 0].reshape(-1, D), beta, rtol=1e-10,
                                   atol=1e-10)  # fmt: skip
    # a constant offset: the Jacobian of the affine map and, for lam = 0, nothing else
    np.testing.assert_allclose(np.ptp(diffs), 0.0, atol=1e-7)


@pytest.mark.parametrize("parameterization", ["noncentered", "centered", "whitened"])
def test_sufficient_statistics_give_the_rows_likelihood(log, parameterization) -> None:
    """Σ_rows log N(y; xᵀβ, σ²) from each cell's (G, b, Σy², n): the same log density, constant
    included, at any point."""
    by_rows = conditional_model(log, SIGMA, SIGMA2, 0.5, parameterization=parameterization)
    by_stats = conditional_model(log, SIGMA, SIGMA2, 0.5, parameterization=parameterization,
                                 likelihood="suffstats")  # fmt: skip
    assert "y" in by_rows.named_vars and "X" in by_rows.named_vars
    assert "y" not in by_stats.named_vars and "row" not in by_stats.coords
    l1, l2 = by_rows.compile_logp(), by_stats.compile_logp()
    rng = np.random.default_rng(1)
    ip = by_rows.initial_point()
    for _ in range(3):
        point = {name: rng.normal(size=ip[name].shape) for name in ip}
        assert float(l2(point)) == pytest.approx(float(l1(point)), rel=1e-12, abs=1e-8)


@pytest.mark.parametrize("lam", [1e-3, 0.0])
def test_whitened_posterior_is_standard_normal(log, lam) -> None:
    """The Hessian of −log p in the sampled coordinates (ζ, ξ) is the identity at any point:
    the posterior there is N(0, I), which NUTS samples with long steps and short trees however
    the coefficients are scaled and correlated (the centred model's is far from it)."""
    whitened = conditional_model(log, SIGMA, SIGMA2, lam, parameterization="whitened",
                                 collapse_empty=True, likelihood="suffstats")  # fmt: skip
    hessian = whitened.compile_d2logp(negate_output=False)
    rng = np.random.default_rng(2)
    ip = whitened.initial_point()
    H = -hessian({name: rng.normal(size=ip[name].shape) for name in ip})
    np.testing.assert_allclose(H, np.eye(H.shape[0]), atol=1e-8)
    centred = conditional_model(log, SIGMA, SIGMA2, lam, parameterization="centered",
                                collapse_empty=True, likelihood="suffstats")  # fmt: skip
    Hc = -centred.compile_d2logp(negate_output=False)(centred.initial_point())
    assert np.linalg.cond(Hc) > 1e4  # what the whitening removes


def test_singular_sigma_keeps_beta_on_its_range(log) -> None:
    """A rank-one Σ_k: β − β₀ stays on the range of Σ_k in the whitened model too."""
    b = np.array([1.0, 0.5, 0.0])
    Sigma = np.stack([np.outer(b, b), SIGMA[1]])
    model = conditional_model(log, Sigma, SIGMA2, 0.5, parameterization="whitened")
    _, values = _compiled(model)
    rng = np.random.default_rng(4)
    ip = model.initial_point()
    beta0, beta = values({name: rng.normal(size=ip[name].shape) for name in ip})
    dev = beta[0] - beta0[0]  # arm 1, every instance
    null = np.linalg.svd(np.outer(b, b))[0][:, 1:]  # the two null directions of Σ_1
    np.testing.assert_allclose(dev @ null, 0.0, atol=1e-10)


def test_defaults_agree_on_a_data_rich_log(log) -> None:
    res = compare_closed_form(log, SIGMA, SIGMA2, 1e-3, random_seed=3, progressbar=False)
    assert res.settings["parameterization"] == "whitened"
    assert res.settings["likelihood"] == "suffstats"
    assert res.diagnostics.ok, res.diagnostics.problems
    assert res.verdict == "agree", res.checks()
    # near-independent draws: the bulk ESS of every parameter above the number of draws
    assert res.diagnostics.min_ess_bulk > res.settings["draws"] * res.settings["chains"]


def test_likelihood_is_validated(log) -> None:
    with pytest.raises(ValueError, match="likelihood must be one of"):
        conditional_model(log, SIGMA, SIGMA2, 0.5, likelihood="cells")
    with pytest.raises(ValueError, match="likelihood must be one of"):
        compare_closed_form(log, SIGMA, SIGMA2, 0.5, likelihood="cells")
    with pytest.raises(ValueError, match="parameterization must be one of"):
        compare_closed_form(log, SIGMA, SIGMA2, 0.5, parameterization="whitening")
