"""The drift control of EbmTS/EbmUCB (``recompute``, docs/decisions/ebm.md §3).

Incremental (Sherman–Morrison) updates accumulate rounding. Under ``recompute="local"`` (the
default) three steps discard it, each checked here against the computation it stands for:
every R-th row of a pair refreshes that pair's blocks from its statistics (equal, bit for bit,
to the blocks the whole arm's recomputation gives the pair); every R-th incremental update of
an arm re-solves Φ and β̂₀ from its sums (equal to the solve itself); after max(R, 64 N)
updates the arm is rebuilt from all its pairs (equal to the recomputation). The batch, the
loop of ``update`` and the compiled loop run the same steps (tests/ebm/test_serving*.py,
test_compiled.py); here the long-run state is also compared with the closed form.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from hierbandit.ebm import EbmTS, EbmUCB, _rows
from hierbandit.ebm import _pairs as PR
from hierbandit.stats import kernels as K
from hierbandit.stats.empirical_bayes import EBOptions

FIXED = EBOptions(estimate_Sigma=False, estimate_sigma2=False)


def _rows_for(rng, n, d, theta, j, k):
    X = rng.normal(size=(n, d))
    return X, X @ theta[k] + 0.5 * rng.normal(size=n) + 0.3 * j


def _recomputed(p):
    """A copy of ``p`` with every arm recomputed from its pairs' statistics (the closed form
    under the current hyperparameters)."""
    q = copy.deepcopy(p)
    for k in range(q.n_arms):
        q._recompute_arm(k)
    return q


def test_every_rth_row_of_a_pair_recomputes_its_blocks_from_its_statistics():
    """At the pair's R-th row its C̃ and A are those of the arm's recomputation, bit for bit,
    whatever the rank-one steps before them left; the rows in between are rank-one steps."""
    R, d = 4, 3
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(2, d))
    p = EbmTS(5, 2, d, rng=0, eb_options=FIXED, recompute_every=R)
    # other pairs of the arm first, so that the arm's sums are not the pair's alone
    for j in (1, 2, 3):
        X, Y = _rows_for(rng, 3, d, theta, j, 0)
        p.update_batch(np.full(3, j), X, np.zeros(3, int), Y)
    seen = []
    for row in range(1, 2 * R + 1):
        X, Y = _rows_for(rng, 1, d, theta, 0, 0)
        p.update(0, X[0], 0, float(Y[0]))
        s = p._pair_slot[0, 0]
        ref = _recomputed(p)
        got, want = PR.record_views(p._pairs[s], d), PR.record_views(ref._pairs[s], d)
        same = all(np.array_equal(got[f], want[f]) for f in ("Ct", "A"))
        seen.append(same)
        if row % R == 0:
            assert same, row
        else:  # the rank-one step, close to the closed form but not its refresh
            for f in ("Ct", "A"):
                np.testing.assert_allclose(got[f], want[f], rtol=1e-12, atol=1e-14)
    assert seen[R - 1] and seen[2 * R - 1]


def test_every_rth_update_of_an_arm_resolves_phi_from_its_sums():
    """At the arm's R-th incremental update Φ and β̂₀ are the solve of P and r, bit for bit;
    under recompute="arm" (or before the R-th update) Φ is the Sherman–Morrison product."""
    R, d = 7, 3
    rng = np.random.default_rng(1)
    theta = rng.normal(size=(2, d))
    p = EbmUCB(20, 2, d, rng=0, eb_options=FIXED, recompute_every=R)
    for t in range(1, 3 * R + 1):
        j = int(rng.integers(20))
        X, Y = _rows_for(rng, 1, d, theta, j, 1)
        p.update(j, X[0], 1, float(Y[0]))
        P, P0, r = p._P[1].copy(), p._P0[1].copy(), p._r[1].copy()
        Phi, beta0 = np.empty((d, d)), np.empty(d)
        K.shared_resolve(P, P0, r, Phi, beta0)
        if t % R == 0:
            assert np.array_equal(p._Phi[1], Phi) and np.array_equal(p._beta0[1], beta0), t
        else:
            np.testing.assert_allclose(p._Phi[1], Phi, rtol=1e-10, atol=1e-14)
    assert p._rank_one_count[1] == 3 * R  # no rebuild: 64 N is far away


@pytest.mark.parametrize("recompute", ["local", "arm"])
def test_the_arm_is_rebuilt_after_max_r_and_n_over_its_budget(recompute):
    """The whole arm is rebuilt (its count reset, its state the recomputation's) after
    max(R, N / budget) incremental updates: budget = hyper_update_budget under "arm",
    1/64 under "local" (so at most 1/64 of a pair's recomputation per row amortised)."""
    N, R, d = 5, 3, 2
    budget = _rows.REBUILD_BUDGET if recompute == "local" else 1.0
    period = max(R, int(np.ceil(N / budget)))
    rng = np.random.default_rng(2)
    theta = rng.normal(size=(1, d))
    p = EbmTS(N, 1, d, rng=0, eb_options=FIXED, recompute_every=R, hyper_update_budget=1.0,
              recompute=recompute)  # fmt: skip
    for t in range(1, period + 1):
        j = int(rng.integers(N))
        X, Y = _rows_for(rng, 1, d, theta, j, 0)
        p.update(j, X[0], 0, float(Y[0]))
        assert p._rank_one_count[0] == t % period
    # the last update was the rebuild: the state is the recomputation of itself
    ref = _recomputed(p)
    for name in ("_pairs", "_P", "_r", "_Phi", "_beta0"):
        assert np.array_equal(getattr(p, name), getattr(ref, name)), name
    assert period == (320 if recompute == "local" else 5)


@pytest.mark.parametrize("recompute", ["local", "arm"])
@pytest.mark.parametrize("R", [10_000, 25])
def test_a_long_run_stays_at_the_closed_form(recompute, R):
    """20,000 rows over 40 users and 2 arms through update_batch (many rows per pair, the
    case where blocks drift most): the posterior agrees with the recomputation from the
    statistics to 1e-10, under either drift control and period."""
    d = 3
    rng = np.random.default_rng(3)
    theta = rng.normal(size=(2, d))
    p = EbmTS(40, 2, d, rng=0, eb_options=FIXED, recompute_every=R, recompute=recompute)
    for _ in range(20):
        J = rng.integers(0, 40, 1000)
        A = rng.integers(0, 2, 1000)
        X = rng.normal(size=(1000, d))
        Y = np.einsum("bd,bd->b", X, theta[A]) + 0.5 * rng.normal(size=1000)
        p.update_batch(J, X, A, Y)
    got, want = p.posterior(), _recomputed(p).posterior()
    for name in ("mean", "cov"):
        np.testing.assert_allclose(got[name].values, want[name].values, rtol=1e-10, atol=1e-12)


def test_the_batch_equals_the_loop_under_both_rules():
    """update_batch (one compiled kernel) and the loop of the Python update run the same
    drift control, bit for bit, with every step of it firing often (R = 3, N = 4)."""
    rng = np.random.default_rng(4)
    d = 2
    theta = rng.normal(size=(3, d))
    for recompute in ("local", "arm"):
        kw = {"eb_options": FIXED, "recompute_every": 3, "hyper_update_budget": 1.0,
              "recompute": recompute}  # fmt: skip
        a, b = EbmTS(4, 3, d, rng=0, **kw), EbmTS(4, 3, d, rng=0, **kw)
        J = rng.integers(0, 4, 700)
        A = rng.integers(0, 3, 700)
        X = rng.normal(size=(700, d))
        Y = np.einsum("bd,bd->b", X, theta[A]) + rng.normal(size=700)
        a.update_batch(J, X, A, Y)
        for i in range(700):
            b.update(int(J[i]), X[i], int(A[i]), float(Y[i]))
        for name in ("_pairs", "_P", "_r", "_Phi", "_beta0", "_rank_one_count"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (recompute, name)


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="recompute"):
        EbmTS(3, 2, 2, recompute="never")


def test_a_policy_past_the_old_period_round_trips(tmp_path):
    """Under "local" an arm's count passes N / budget without a rebuild; such a state is a
    valid checkpoint (the rule's own bound, 64 N), and it continues as the original does."""
    p = EbmTS(6, 1, 2, rng=0, eb_options=FIXED, recompute_every=4, hyper_update_budget=1.0)
    rng = np.random.default_rng(5)
    for _ in range(50):
        p.update(int(rng.integers(6)), rng.normal(size=2), 0, float(rng.normal()))
    assert p._rank_one_count[0] == 50
    p.save(tmp_path / "p.nc")
    q = EbmTS.load(tmp_path / "p.nc")
    assert q.recompute == "local"
    for _ in range(400):  # past the rebuild at 384 updates
        args = (int(rng.integers(6)), rng.normal(size=2), 0, float(rng.normal()))
        p.update(*args)
        q.update(*args)
    assert p._rank_one_count[0] == q._rank_one_count[0] == 450 - 384
    for name in ("_pairs", "_P", "_r", "_Phi", "_beta0"):
        assert np.array_equal(getattr(p, name), getattr(q, name)), name
