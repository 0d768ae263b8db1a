"""SCLUBOffline's frequency split test has the same threshold in batch and stream modes: 2α_p F(τ)
for both ``freq_test`` rules (docs/sclub.md C-17), as online SCLUB has."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.offline import OfflineDataset, SCLUBOffline
from hierbandit.offline._core import confidence_F


def _two_users(gap: float, n: int = 1000, seed: int = 0) -> OfflineDataset:
    """Two users with the same weights and noiseless rewards; user 0 has a share 1/2 + gap of
    the rows, so only the frequency test can split them."""
    rng = np.random.default_rng(seed)
    n0 = round((0.5 + gap) * n)
    users = np.r_[np.zeros(n0, dtype=np.int64), np.ones(n - n0, dtype=np.int64)]
    X = rng.normal(size=(n, 2))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    theta = np.array([0.6, -0.8])
    return OfflineDataset(users, X, X @ theta, n_users=2)


def test_the_gap_between_the_two_thresholds_is_where_the_modes_disagreed():
    a_p, F = 2**-0.5, float(confidence_F(1000.0))
    # the cluster average is 1/2: |p̂_0 − 1/2| = 0.09 lies between α_p F(τ) and 2α_p F(τ)
    assert a_p * F < 0.09 < 2 * a_p * F


@pytest.mark.parametrize("freq_test", ["cluster_avg", "pairwise"])
@pytest.mark.parametrize("gap", [0.03, 0.09, 0.3])
@pytest.mark.parametrize("seed", [0, 1])
def test_batch_and_stream_take_the_same_split_decisions(freq_test, gap, seed):
    ds = _two_users(gap, seed=seed)
    kw = {"alpha_theta": 10.0, "freq_test": freq_test}  # weights never split
    batch = SCLUBOffline(**kw, rng=seed).fit(ds)
    stream = SCLUBOffline(**kw, mode="stream", rng=seed).fit(ds)
    assert batch.n_clusters_ == stream.n_clusters_
    split = 2 * 2**-0.5 * float(confidence_F(1000.0))
    gap_seen = gap if freq_test == "cluster_avg" else 2 * gap
    assert batch.n_clusters_ == (2 if gap_seen > split else 1)


def test_cluster_average_threshold_is_twice_alpha_p():
    """One split pass on a single cluster: the user splits exactly when |p̂_u − p̂^j| > 2α_p F(τ)."""
    ds = _two_users(0.09)
    tau = float(ds.n_rows)
    for a_p in (0.09 / (2 * confidence_F(tau)) * 0.99, 0.09 / (2 * confidence_F(tau)) * 1.01):
        m = SCLUBOffline(alpha_theta=10.0, alpha_p=float(a_p), freq_test="cluster_avg", rng=0)
        m.fit(ds)
        assert m.n_clusters_ == (2 if 2 * a_p * confidence_F(tau) < 0.09 else 1)
