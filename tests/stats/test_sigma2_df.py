"""σ̂² divided by the degrees of freedom the fit used (``EBOptions.sigma2_df``).

The paper divides the residuals of the posterior means by Σ_j T_j − d − 1; the means nearly
interpolate instances with few rows, so σ̂² collapses towards its floor (docs/decisions/ebm.md
A9). The default divides by the rows less the trace of the hat matrix (``kernels.hat_trace``),
checked here against the hat matrix built row by row.
"""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.checkpoint import load_checkpoint, save_checkpoint
from hierbandit.ebm import EbmTS
from hierbandit.stats import kernels as K
from hierbandit.stats.empirical_bayes import EBOptions, empirical_bayes, estimate_sigma2
from hierbandit.stats.hierarchical import posterior_given_hyper
from tests.reliability.test_restore_rules import Crafted
from tests.stats.test_empirical_bayes import _stats


def _rows(rng, N, d, sizes, sigma2=1.0):
    Sigma = np.diag(np.linspace(0.5, 2.0, d))
    beta = rng.multivariate_normal(np.ones(d), Sigma, size=N)
    X, y, inst = [], [], []
    for j in range(N):
        Xj = rng.normal(size=(sizes[j], d))
        X.append(Xj)
        y.append(Xj @ beta[j] + np.sqrt(sigma2) * rng.normal(size=sizes[j]))
        inst.append(np.full(sizes[j], j))
    return np.concatenate(X), np.concatenate(y), np.concatenate(inst), Sigma


def _hat_diagonal(X, inst, N, Sigma, sigma2, lam):
    """H_ii: the fitted value of row i when y is the i-th unit vector (the means are linear
    in y with the paper's zero prior mean of β₀)."""
    out = np.empty(X.shape[0])
    for i in range(X.shape[0]):
        e = np.zeros(X.shape[0])
        e[i] = 1.0
        G, b, _, _ = _stats(X, e, inst, N)
        mean = posterior_given_hyper(G, b, Sigma, sigma2, lam).mean
        out[i] = X[i] @ mean[inst[i]]
    return out


@pytest.mark.parametrize("sigma2", [1e-4, 0.3, 5.0])
def test_hat_trace_is_the_trace_of_the_hat_matrix(sigma2):
    rng = np.random.default_rng(4)
    N, d, lam = 7, 3, 0.2
    sizes = np.array([0, 1, 2, 3, 5, 8, 2])
    X, y, inst, Sigma = _rows(rng, N, d, sizes)
    G, b, _, _ = _stats(X, y, inst, N)
    post = posterior_given_hyper(G, b, Sigma, sigma2, lam)
    got = K.hat_trace(G, post.Ctilde, post.A, post.shared_cov, sigma2)
    want = _hat_diagonal(X, inst, N, Sigma, sigma2, lam).sum()
    assert got == pytest.approx(want, rel=1e-9)
    assert 0.0 < got < X.shape[0]


def test_default_sigma2_divides_by_the_rows_less_the_hat_trace():
    rng = np.random.default_rng(8)
    N, d, lam, s2_init = 12, 3, 0.5, 1.3
    X, y, inst, _ = _rows(rng, N, d, rng.integers(1, 9, size=N))
    G, b, q, n = _stats(X, y, inst, N)
    res = empirical_bayes(G, b, q, n, lam, sigma2_init=s2_init, rng=3)
    post = posterior_given_hyper(G, b, res.Sigma, s2_init, lam)
    fitted = np.einsum("id,id->i", X, post.mean[inst])
    trace = _hat_diagonal(X, inst, N, res.Sigma, s2_init, lam).sum()
    assert res.sigma2 == pytest.approx(((y - fitted) ** 2).sum() / (len(y) - trace), rel=1e-9)
    # the public estimator with the same degrees of freedom, and the paper's divisor
    assert estimate_sigma2(G, b, q, n, post.mean, used_df=trace) == pytest.approx(
        res.sigma2, rel=1e-9
    )
    paper = estimate_sigma2(G, b, q, n, post.mean)
    assert paper == pytest.approx(((y - fitted) ** 2).sum() / (len(y) - d - 1), rel=1e-9)


def test_sigma2_keeps_its_value_without_a_degree_of_freedom():
    rng = np.random.default_rng(2)
    N, d = 5, 3
    X, y, inst, _ = _rows(rng, N, d, np.full(N, 2))  # two rows each: the means interpolate
    G, b, q, n = _stats(X, y, inst, N)
    mean = np.zeros((N, d))
    assert estimate_sigma2(G, b, q, n, mean, sigma2_prev=0.7, used_df=len(y) - 0.5) == 0.7
    with pytest.raises(ValueError, match="used_df"):
        estimate_sigma2(G, b, q, n, mean, used_df=-1.0)
    with pytest.raises(ValueError, match="sigma2_df"):
        EBOptions(sigma2_df="hat")


def test_data_poor_arms_keep_sigma2_near_the_noise():
    """Few rows per instance and arm (the audit's 5–20 rows per arm): the paper's σ̂² falls
    far below the noise variance 1, the default stays near it."""
    N, d = 40, 3
    got = {}
    for mode in ("paper", "effective"):
        vals = []
        for seed in range(5):
            r = np.random.default_rng(seed)
            X, y, inst, _ = _rows(r, N, d, r.integers(1, 5, size=N))
            G, b, q, n = _stats(X, y, inst, N)
            s2 = 1.0
            for _ in range(30):  # the sweeps the online policy makes over its re-estimations
                s2 = empirical_bayes(
                    G, b, q, n, 1e-3, options=EBOptions(sigma2_df=mode), sigma2_init=s2, rng=seed
                ).sigma2
            vals.append(s2)
        got[mode] = np.median(vals)
    assert got["paper"] < 0.3, got
    assert 0.5 < got["effective"] < 2.0, got


def test_checkpoints_of_older_versions_keep_the_papers_divisor(tmp_path):
    p = EbmTS(4, 2, 2, rng=0)
    for t in range(30):
        x = np.array([1.0, t % 3 - 1.0])
        p.update(t % 4, x, p.select(t % 4, x), float(t % 5))
    save_checkpoint(p, tmp_path / "good.nc")
    assert load_checkpoint(tmp_path / "good.nc").eb_options.sigma2_df == "effective"
    c = Crafted(tmp_path / "good.nc")
    fields = c.entry("eb_options")["fields"]
    del fields["sigma2_df"]  # a file written before the option existed
    old = load_checkpoint(c.write(tmp_path / "old.nc"))
    assert old.eb_options.sigma2_df == "paper"
    assert old._eb_args[-1] == 1
    fields["sigma2_df"] = "hat"
    with pytest.raises(Exception, match="sigma2_df"):
        load_checkpoint(c.write(tmp_path / "bad.nc"))


def test_full_rank_test_is_the_trace_test_of_the_docs():
    """docs/maths/ebm.md §7.2: full rank ⇔ Cholesky succeeds and 1/tr(G⁻¹) > rank_tol·tr(G).
    A squared-pivot test admitted this condition number of about 1e13 under rank_tol = 1e-10."""
    from hierbandit.stats.linalg import full_rank_cholesky

    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    L = np.empty((3, 3))
    for cond, admitted in ((1e13, False), (1e11, False), (1e9, True), (10.0, True)):
        G = Q @ np.diag([1.0, 0.5, 1.0 / cond]) @ Q.T
        G = 0.5 * (G + G.T)
        inv_tr = np.trace(np.linalg.inv(G))
        assert (1.0 / inv_tr > 1e-10 * np.trace(G)) == admitted
        assert full_rank_cholesky(G, 1e-10, L) == admitted, cond
        np.testing.assert_allclose(L @ L.T, G, rtol=1e-12, atol=1e-14)
    # unit pivots with large multipliers: every squared pivot is 1, the condition number 2.6e12
    F = np.array([[1.0, 0.0, 0.0], [100.0, 1.0, 0.0], [100.0, 100.0, 1.0]])
    assert not full_rank_cholesky(F @ F.T, 1e-10, L)
