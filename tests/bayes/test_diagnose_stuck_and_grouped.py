"""diagnose (docs/bayes.md §5): a sampler stuck at one point is a problem, problems are reported
one line per variable, and a prior without draws is refused in plain words."""

from __future__ import annotations

import re
import warnings

import arviz as az
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from hierbandit.bayes import HierarchicalPrior, diagnose

CHAINS, DRAWS = 4, 500


def _tree(posterior: dict, dims: dict | None = None, coords: dict | None = None) -> xr.DataTree:
    return az.from_dict({"posterior": posterior}, dims=dims or {}, coords=coords or {})


def test_every_chain_stuck_at_one_point_is_a_problem(rng) -> None:
    """Every chain at the same value: R-hat is NaN and the ESS is the number of draws, so no
    threshold sees it."""
    ok = rng.normal(size=(CHAINS, DRAWS))
    stuck = np.full((CHAINS, DRAWS), 0.25)
    with pytest.warns(UserWarning, match="stuck"):
        diag = diagnose(_tree({"ok": ok, "stuck": stuck}))
    assert not diag.ok
    assert [p.split(":")[0] for p in diag.problems] == ["stuck"]
    line = diag.problems[0]
    assert "stuck in 1 (worst: all 4 chains constant at stuck)" in line
    assert "r_hat" in line  # the NaN R-hat is named as such
    assert np.isnan(diag.summary.loc["stuck", "r_hat"])


def test_one_stuck_chain_is_a_problem(rng) -> None:
    """A single chain frozen at the centre of the others' draws (zero variance in that chain)."""
    mu = rng.normal(size=(CHAINS, DRAWS))
    mu[2] = float(np.median(mu[[0, 1, 3]]))
    one_chain = rng.normal(size=(1, DRAWS))
    one_chain[0, :] = 1.0  # a run of one chain that never moved: every diagnostic is NaN
    diag = diagnose(_tree({"mu": mu}), warn=False)
    named = {p.split(":")[0]: p for p in diag.problems}
    assert "stuck in 1 (worst: chain 2 of 4 constant at mu)" in named["mu"]
    alone = diagnose(_tree({"alone": one_chain}), warn=False)
    assert not alone.ok and "stuck" in alone.problems[0]


def test_stuck_entries_of_a_vector_are_counted_and_located(rng) -> None:
    beta = rng.normal(size=(CHAINS, DRAWS, 2, 3))
    beta[1, :, 1, 2] = 3.0  # chain 1 stuck in beta[1, c]
    beta[:, :, 0, 0] = -1.0  # every chain stuck in beta[0, a]
    tree = _tree({"beta": beta}, dims={"beta": ["arm", "feature"]},
                 coords={"arm": [0, 1], "feature": ["a", "b", "c"]})  # fmt: skip
    diag = diagnose(tree, warn=False)
    assert len(diag.problems) == 1  # one line for the variable
    line = diag.problems[0]
    assert line.startswith("beta: 2 of 6 entries fail")
    assert "stuck" in line and "beta[0, a]" in line
    f = diag.failures
    assert set(f.loc[f["check"] == "stuck", "parameter"]) == {"beta[0, a]", "beta[1, c]"}


def test_problems_are_grouped_by_variable(rng) -> None:
    """One line per variable (how many entries fail which check, the worst value and where),
    however many of its entries fail; every failing scalar is in ``failures``."""
    n_inst = 40
    beta = rng.normal(size=(CHAINS, DRAWS, 2, n_inst, 3))
    beta[1, :, :, :20, :] += 2.0  # chain 1 elsewhere for 2 × 20 × 3 = 120 entries
    beta[1, :, 1, 7, 2] += 3.0  # the worst one
    mu = rng.normal(size=(CHAINS, DRAWS))
    e = rng.normal(size=(CHAINS, DRAWS))
    for t in range(1, DRAWS):
        e[:, t] = 0.995 * e[:, t - 1] + np.sqrt(1 - 0.995**2) * e[:, t]
    tree = _tree({"beta": beta, "mu": mu, "slow": e},
                 dims={"beta": ["arm", "instance", "feature"]},
                 coords={"arm": [0, 1], "instance": list(range(n_inst)),
                         "feature": ["a", "b", "c"]})  # fmt: skip
    with pytest.warns(UserWarning) as record:
        diag = diagnose(tree)
    assert len(record) == 1
    assert len(diag.problems) == 2  # beta and slow, one line each; mu is fine
    beta_line = next(p for p in diag.problems if p.startswith("beta:"))
    assert beta_line.startswith("beta: 120 of 240 entries fail")
    m = re.search(r"r_hat > 1\.01 in (\d+) \(worst ([\d.]+) at (beta\[[^\]]+\])\)", beta_line)
    assert m, beta_line
    assert int(m.group(1)) == 120
    assert m.group(3) == "beta[1, 7, c]"
    assert float(m.group(2)) == pytest.approx(diag.summary.loc["beta[1, 7, c]", "r_hat"], abs=5e-3)
    slow_line = next(p for p in diag.problems if p.startswith("slow:"))
    assert "ess_bulk < 400 in 1" in slow_line and "(worst" in slow_line
    # the detail: one row per failing scalar and check
    f = diag.failures
    assert isinstance(f, pd.DataFrame)
    assert list(f.columns) == ["variable", "parameter", "check", "value", "threshold"]
    rhat = f[(f["variable"] == "beta") & (f["check"] == "r_hat")]
    assert len(rhat) == 120 and rhat["parameter"].is_unique
    assert (rhat["value"] > 1.01).all()
    md = diag.to_markdown()
    assert md.count("\n- beta:") == 1
    assert "2 problem(s)" in md or "2 variable" in md


def test_divergences_stay_a_line_of_their_own(rng) -> None:
    mu = rng.normal(size=(CHAINS, DRAWS))
    div = np.zeros((CHAINS, DRAWS), dtype=bool)
    div[0, :3] = True
    tree = az.from_dict({"posterior": {"mu": mu}, "sample_stats": {"diverging": div}})
    diag = diagnose(tree, warn=False)
    assert diag.problems == ["divergences: 3 > 0"]


def _point_prior(method: str) -> HierarchicalPrior:
    d, k = 2, 2
    ds = xr.Dataset(
        {
            "shared_mean": (("arm", "feature"), np.zeros((k, d))),
            "shared_cov": (("arm", "feature", "feature_"), np.tile(np.eye(d), (k, 1, 1))),
            "Sigma": (("arm", "feature", "feature_"), np.tile(np.eye(d), (k, 1, 1))),
            "sigma2": (("arm",), np.ones(k)),
        },
        coords={"arm": [0, 1], "feature": ["x", "y"], "feature_": ["x", "y"]},
        attrs={"method": method},
    )
    return HierarchicalPrior(ds)


@pytest.mark.parametrize("method", ["ml", "eb"])
def test_a_prior_without_draws_is_refused_plainly(method: str) -> None:
    with pytest.raises(ValueError, match="only full-Bayes") as info:
        diagnose(_point_prior(method))
    message = str(info.value)
    assert f"method={method!r}" in message or f"'{method}'" in message
    assert "method='mcmc'" in message


def test_a_full_bayes_prior_is_diagnosed(rng) -> None:
    prior = _point_prior("mcmc")
    post = {"Sigma": rng.normal(size=(2, 300, 2))}
    tree = az.from_dict({"posterior": post}, dims={"Sigma": ["arm"]}, coords={"arm": [0, 1]})
    with_draws = HierarchicalPrior(prior.dataset, tree)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diag = diagnose(with_draws, ess_min=100)
    assert diag.ok
