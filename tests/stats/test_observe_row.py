"""One observation without visiting the other instances (``kernels.observe_row``): the
Sherman–Morrison step, or the O(d³) refresh of the instance where it is ill-conditioned, must
leave the arm where recomputing it from its sufficient statistics puts it."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.stats import kernels as K
from hierbandit.stats.hierarchical import IncrementalHierarchicalPosterior, shared_prior_arrays


def _arm(rng, N, d, scale):
    A0 = rng.normal(size=(d, d))
    Sigma = scale * (A0 @ A0.T / d + 0.1 * np.eye(d))
    sigma2 = float(rng.uniform(0.05, 2.0))
    P0, h0 = shared_prior_arrays(1e-3, d)
    G = np.zeros((N, d, d))
    b = np.zeros((N, d))
    for j in range(0, N, 2):  # every other instance has data, the rest none
        X = rng.normal(size=(rng.integers(1, 6), d))
        G[j] = X.T @ X
        b[j] = X.T @ (X @ rng.normal(size=d) + rng.normal(size=X.shape[0]))
    return Sigma, sigma2, P0, h0, G, b


def _posterior(G, b, Sigma, sigma2, P0, h0):
    N, d = b.shape
    out = dict(
        Ct=np.empty((N, d, d)),
        A=np.empty((N, d, d)),
        P=np.empty((d, d)),
        r=np.empty(d),
        Phi=np.empty((d, d)),
        beta0=np.empty(d),
    )
    K.arm_posterior(G, b, Sigma, sigma2, P0, h0, *out.values())
    return out


def _step_args(x, y, j, G, b, state, Sigma, sigma2, P0):
    """The arguments of ``observe_row``/``refresh_instance`` for instance j of the arm."""
    S = state
    blocks = (G[j], b[j], S["Ct"][j], S["A"][j])
    shared = (S["P"], S["r"], S["Phi"], S["beta0"])
    return (x, y, *blocks, *shared, Sigma, sigma2, P0)


def _close(state, ref, rtol):
    for name, value in ref.items():
        scale = max(np.abs(value).max(), 1e-300)
        err = np.abs(state[name] - value).max() / scale
        assert err <= rtol, f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("seed", range(6))
def test_observe_row_matches_recomputing_the_arm(seed):
    rng = np.random.default_rng(seed)
    N, d = 12, 3
    scale = [1.0, 1e3, 1e-2][seed % 3]
    Sigma, sigma2, P0, h0, G, b = _arm(rng, N, d, scale)
    state = _posterior(G, b, Sigma, sigma2, P0, h0)
    paths = []
    for step in range(60):
        j = int(rng.integers(N))
        x = rng.normal(size=d)
        if step % 5 == 0:  # a row large against what the arm knows: the refresh path
            x *= 10.0 ** rng.uniform(2, 3) / np.sqrt(scale)
        y = float(x.sum() + rng.normal())
        paths.append(K.observe_row(*_step_args(x, y, j, G, b, state, Sigma, sigma2, P0)))
        _close(state, _posterior(G, b, Sigma, sigma2, P0, h0), 1e-8)
    assert any(paths) and not all(paths), "both the rank-one step and the refresh ran"


def test_refresh_instance_alone_matches_recomputing_the_arm():
    rng = np.random.default_rng(11)
    N, d = 9, 4
    Sigma, sigma2, P0, h0, G, b = _arm(rng, N, d, 1.0)
    state = _posterior(G, b, Sigma, sigma2, P0, h0)
    for j in (0, 1, 4, 1):  # with data, without data, again
        x = rng.normal(size=d)
        y = float(rng.normal())
        K.refresh_instance(*_step_args(x, y, j, G, b, state, Sigma, sigma2, P0))
        _close(state, _posterior(G, b, Sigma, sigma2, P0, h0), 1e-10)


def test_a_declined_rank_one_step_changes_nothing():
    rng = np.random.default_rng(3)
    N, d = 4, 3
    Sigma, sigma2, P0, h0, G, b = _arm(rng, N, d, 1e6)
    sigma2 = 1e-6
    state = _posterior(G, b, Sigma, sigma2, P0, h0)
    before = {k: v.copy() for k, v in state.items()}
    Gb, bb = G.copy(), b.copy()
    x = np.array([1e3, 0.0, 0.0])
    # the shared-mean step's denominator is far above the limit: declined, nothing moved
    ok = K._sherman_morrison(
        x, 1.0, G[1], b[1], state["Ct"][1], state["A"][1], state["P"], state["r"],
        state["Phi"], state["beta0"], sigma2,
    )  # fmt: skip
    assert not ok
    np.testing.assert_array_equal(G, Gb)
    np.testing.assert_array_equal(b, bb)
    for name in before:
        np.testing.assert_array_equal(state[name], before[name])
    # the public rank-one update adds the row to the statistics and asks for a recomputation
    assert not K.rank_one_update(
        x, 1.0, G[1], b[1], state["Ct"][1], state["A"][1], state["P"], state["r"],
        state["Phi"], state["beta0"], sigma2,
    )  # fmt: skip
    np.testing.assert_array_equal(G[1], Gb[1] + np.outer(x, x))


def test_incremental_posterior_with_large_rows_matches_the_batch_posterior():
    rng = np.random.default_rng(5)
    N, d = 6, 3
    Sigma = np.diag([100.0, 1.0, 0.01])
    inc = IncrementalHierarchicalPosterior(N, d, Sigma, 0.5, 1e-3, recompute_every=None)
    G = np.zeros((N, d, d))
    b = np.zeros((N, d))
    for _ in range(200):
        j = int(rng.integers(N))
        x = rng.normal(size=d) * 10.0 ** rng.uniform(-1, 3)
        y = float(rng.normal())
        inc.add(j, x, y)
        G[j] += np.outer(x, x)
        b[j] += x * y
    P0, h0 = shared_prior_arrays(1e-3, d)
    ref = _posterior(G, b, Sigma, 0.5, P0, h0)
    state = dict(Ct=inc._Ct, A=inc._A, P=inc._P, r=inc._r, Phi=inc._Phi, beta0=inc._beta0)
    _close(state, ref, 1e-7)
