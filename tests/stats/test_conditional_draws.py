"""Exact conditional draws of the shared and instance coefficients given hyperparameter draws
(the second half of a collapsed full-Bayes fit), split over threads.

References: the closed-form joint posterior of one arm (``posterior_given_hyper`` and
``posterior_cross_covariances``, themselves tested against the brute-force joint Gaussian in
``test_hierarchical_exact.py``): with the hyperparameters fixed, the draws must have its means
and its covariances, cross-covariances included.
"""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.stats import posterior_cross_covariances, posterior_given_hyper, suffstats
from hierbandit.stats.hierarchical import conditional_draws
from hierbandit.stats.threads import available_threads, over_threads


def _stats(rng, K=2, N=4, d=2, sizes=(0, 1, 3, 8)):
    G = np.empty((K, N, d, d))
    b = np.empty((K, N, d))
    for k in range(K):
        inst = np.repeat(np.arange(N), sizes)
        X = np.column_stack([np.ones(inst.size), rng.normal(size=(inst.size, d - 1))])
        y = X @ np.array([1.0, -0.5][:d]) + rng.normal(size=inst.size)
        s = suffstats(X, y, inst, N)
        G[k], b[k] = s.G, s.b
    return G, b


def _hyper(S, K, d):
    Sigma = np.empty((S, K, d, d))
    Sigma[:] = np.array([[0.8, 0.3], [0.3, 0.5]])[:d, :d]
    Sigma[:, 1] *= 2.0
    sig2 = np.empty((S, K))
    sig2[:, 0], sig2[:, 1] = 0.7, 1.3
    return Sigma, sig2


def test_the_draws_do_not_depend_on_the_number_of_threads(rng):
    G, b = _stats(rng)
    K, N, d = b.shape
    S = 37
    Sigma, sig2 = _hyper(S, K, d)
    Sigma = Sigma * rng.uniform(0.5, 2.0, size=(S, K, 1, 1))  # a different Σ per draw
    z0, Z = rng.standard_normal((S, K, d)), rng.standard_normal((S, K, N, d))
    ref = conditional_draws(G, b, Sigma, sig2, 0.01, z0, Z, threads=1)
    for threads in (2, 3, 8, 64):
        got = conditional_draws(G, b, Sigma, sig2, 0.01, z0, Z, threads=threads)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
    given = conditional_draws(G, b, Sigma, sig2, 0.01, z0, Z, ref[0], threads=3)
    np.testing.assert_array_equal(given[0], ref[0])  # β₀ passed through
    np.testing.assert_array_equal(given[1], ref[1])  # and β_j | β₀ the same


def test_the_draws_have_the_closed_form_joint_posterior(rng):
    """Fixed hyperparameters: the draws' means and covariances (β₀ with each β_j, and between
    instances) are the closed form's, within Monte-Carlo error."""
    G, b = _stats(rng)
    K, N, d = b.shape
    S, lam = 20_000, 0.05
    Sigma, sig2 = _hyper(S, K, d)
    gen = np.random.default_rng(5)
    beta0, beta = conditional_draws(
        G, b, Sigma, sig2, lam, gen.standard_normal((S, K, d)), gen.standard_normal((S, K, N, d))
    )
    for k in range(K):
        post = posterior_given_hyper(G[k], b[k], Sigma[0, k], sig2[0, k], lam)
        with_shared, between = posterior_cross_covariances(post)
        joint = np.concatenate([beta0[:, k], beta[:, k].reshape(S, N * d)], axis=1)
        mean = np.concatenate([post.shared_mean, post.mean.ravel()])
        cov = np.zeros((d * (N + 1), d * (N + 1)))
        cov[:d, :d] = post.shared_cov
        cov[d:, :d] = with_shared.reshape(N * d, d)
        cov[:d, d:] = cov[d:, :d].T
        cov[d:, d:] = between.transpose(0, 2, 1, 3).reshape(N * d, N * d)
        sd = np.sqrt(np.diag(cov))
        z = (joint.mean(axis=0) - mean) / (sd / np.sqrt(S))
        assert np.max(np.abs(z)) < 4.5
        # correlations to within 4.5 standard errors of a sample correlation (about 1/sqrt(S))
        corr_err = np.corrcoef(joint.T) - cov / np.outer(sd, sd)
        assert np.max(np.abs(corr_err)) < 4.5 / np.sqrt(S) * 1.5
        var_ratio = joint.var(axis=0, ddof=1) / np.diag(cov)
        assert np.max(np.abs(var_ratio - 1)) < 4.5 * np.sqrt(2 / S)


def test_shapes_are_checked_naming_the_argument(rng):
    G, b = _stats(rng)
    K, N, d = b.shape
    Sigma, sig2 = _hyper(3, K, d)
    z0, Z = np.zeros((3, K, d)), np.zeros((3, K, N, d))
    with pytest.raises(ValueError, match="Z must have shape"):
        conditional_draws(G, b, Sigma, sig2, 1.0, z0, Z[:, :, :2])
    with pytest.raises(ValueError, match="beta0 must have shape"):
        conditional_draws(G, b, Sigma, sig2, 1.0, z0, Z, np.zeros((3, K)))
    with pytest.raises(ValueError, match="lam"):
        conditional_draws(G, b, Sigma, sig2, -1.0, z0, Z)


def test_over_threads_covers_every_item_once_and_raises_the_first_error():
    seen = np.zeros(103, dtype=int)

    def work(lo, hi):
        seen[lo:hi] += 1

    for threads in (1, 2, 7, 500):
        seen[:] = 0
        over_threads(work, 103, threads)
        assert np.all(seen == 1)
    over_threads(work, 0, 4)  # nothing to do
    seen[:] = 0
    over_threads(work, 103, 8, min_chunk=50)  # two slices only
    assert np.all(seen == 1)

    def bad(lo, hi):
        if lo > 0:
            raise RuntimeError(f"slice {lo}")

    with pytest.raises(RuntimeError, match="slice"):
        over_threads(bad, 10, 3)
    with pytest.raises(ValueError, match="threads"):
        over_threads(work, 10, 0)
    assert available_threads() >= 1


def _paths(G, b, Sigma, s2):
    """Which fallbacks one (draw, arm) takes: (S_j does not factorise, instances needing a
    jitter)."""
    from hierbandit.stats import kernels as K

    N, d = b.shape
    Lr = np.linalg.cholesky(Sigma)
    bufs = [np.empty((d, d, N)) for _ in range(5)]
    ok = K._arm_blocks_soa(
        np.ascontiguousarray(np.moveaxis(G, 0, -1)), np.ascontiguousarray(b.T), Lr,
        np.linalg.inv(Lr), s2, np.eye(d), np.zeros(d), *bufs, np.empty(N),
    )  # fmt: skip
    if not ok:
        return True, []
    L = np.empty((d, d))
    return False, [j for j in range(N) if not K.cholesky_lower(s2 * bufs[3][:, :, j].copy(), L)]


@pytest.mark.parametrize("case", ["plain", "singular Sigma", "S_j fails", "jitter", "beta0 given"])
def test_the_vectorised_kernel_is_the_scalar_kernel(rng, case):
    """The kernel that runs over arrays of instances does the scalar kernel's operations in the
    same order, and hands it the (draw, arm) pairs it cannot do (a singular Σ, an S_j that does
    not factorise) and the instances whose σ²C̃_j needs a jitter: same draws, bit for bit; the
    unrolled kernel ``conditional_draws`` runs for this d, the same draws to rounding."""
    from hierbandit.stats import kernels as K

    G, b = _stats(rng, K=3, N=6, d=2, sizes=(0, 1, 2, 5, 9, 40))
    Kn, N, d = b.shape
    S = 9
    Sigma, _ = _hyper(S, Kn, d)
    Sigma = np.concatenate([Sigma, Sigma[:, :1]], axis=1)[:, :Kn]
    sig2 = rng.uniform(0.3, 2.0, size=(S, Kn))
    if case == "singular Sigma":  # rank one in some draws of arm 1
        v = rng.normal(size=d)
        Sigma[::2, 1] = np.outer(v, v)
    x = np.array([1.0, 0.3])
    if case == "S_j fails":  # σ² lost to rounding next to a huge rank-one G_j
        G[2, 5], b[2, 5] = 1e20 * np.outer(x, x), 1e20 * x
        sig2[:, 2] = 1e-6
        assert _paths(G[2], b[2], Sigma[0, 2], 1e-6)[0]
    if case == "jitter":  # C̃_j numerically singular
        G[2, 5], b[2, 5] = 10**19.5 * np.outer(x, x) + np.eye(d), 10**19.5 * x
        sig2[:, 2] = 1e-6
        assert _paths(G[2], b[2], Sigma[0, 2], 1e-6) == (False, [5])
    z0, Z = rng.standard_normal((S, Kn, d)), rng.standard_normal((S, Kn, N, d))
    have = case == "beta0 given"
    b0_in = rng.normal(size=(1, S, Kn, d)) if have else np.zeros((1, S, Kn, d))
    P0, h0 = 0.02 * np.eye(d), np.zeros(d)
    ref0, ref = np.empty((1, S, Kn, d)), np.empty((1, S, Kn, N, d))
    K.conditional_draws(G, b, Sigma[None], sig2[None], P0, h0, b0_in, have, z0[None], Z[None],
                        ref0, ref)  # fmt: skip
    blocked0, blocked = np.empty((1, S, Kn, d)), np.empty((1, S, Kn, N, d))
    Gs, bs = (
        np.ascontiguousarray(np.moveaxis(G, 1, -1)),
        np.ascontiguousarray(np.moveaxis(b, 1, -1)),
    )
    K.conditional_draws_soa(Gs, bs, G, b, Sigma[None], sig2[None], P0, h0, b0_in, have, z0[None],
                            Z[None], blocked0, blocked)  # fmt: skip
    assert np.all(np.isfinite(ref))
    np.testing.assert_array_equal(blocked0, ref0)
    np.testing.assert_array_equal(blocked, ref)
    # the public function (d ≤ 4: the unrolled kernel) gives the same draws to rounding
    got = conditional_draws(G, b, Sigma, sig2, 0.02, z0, Z, b0_in[0] if have else None, threads=2)
    np.testing.assert_allclose(got[0], ref0[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got[1], ref[0], rtol=1e-9, atol=1e-9)


def test_a_labelled_loop_reports_its_progress_in_items(caplog):
    """With a label the loop is cut into more slices than threads and reports each one done."""
    import logging

    seen = np.zeros(1000, dtype=int)

    def work(lo, hi):
        seen[lo:hi] += 1

    for threads in (1, 2):
        seen[:] = 0
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="hierbandit.progress"):
            over_threads(work, 1000, threads, label="draws")
        assert np.all(seen == 1)
        done = [r.progress[0] for r in caplog.records if r.progress[2] == "draws"]
        assert done[0] == 0 and done[-1] == 1000 and len(done) > 20  # 40 slices
        assert done == sorted(done)


def test_a_seed_gives_each_draw_its_own_stream_of_variates(rng):
    """``seed=``: draw s takes z0[s] then Z[s] from default_rng([seed, s]), made in the threads:
    the same as passing those arrays, for any number of threads."""
    G, b = _stats(rng)
    K, N, d = b.shape
    S = 23
    Sigma, sig2 = _hyper(S, K, d)
    z0, Z = np.empty((S, K, d)), np.empty((S, K, N, d))
    for s in range(S):
        g = np.random.default_rng([7, s])
        z0[s], Z[s] = g.standard_normal((K, d)), g.standard_normal((K, N, d))
    ref = conditional_draws(G, b, Sigma, sig2, 0.1, z0, Z, threads=1)
    for threads in (1, 2, 5):
        got = conditional_draws(G, b, Sigma, sig2, 0.1, seed=7, threads=threads)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
    with pytest.raises(TypeError, match="z0 and Z, or a seed"):
        conditional_draws(G, b, Sigma, sig2, 0.1, z0, Z, seed=7)
    with pytest.raises(TypeError, match="z0 and Z, or a seed"):
        conditional_draws(G, b, Sigma, sig2, 0.1, z0)
    with pytest.raises(ValueError, match="seed"):
        conditional_draws(G, b, Sigma, sig2, 0.1, seed=-1)


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_the_unrolled_draws_are_the_blocked_kernels(d):
    """For d ≤ 4 the draws run unrolled (``stats.arm_draws``): the blocked kernel's draws from
    the same variates, to rounding, over several blocks of instances with empty cells, a
    singular Σ (the scalar path), an instance whose σ²C̃_j needs a jitter and β₀ given."""
    from hierbandit.stats import kernels
    from hierbandit.stats.arm_draws import conditional_draws_unrolled
    from hierbandit.stats.arm_likelihood import arm_stats
    from hierbandit.stats.hierarchical import shared_prior_arrays

    rng = np.random.default_rng(10 + d)
    K, N, S = 2, 150, 4
    sizes = rng.integers(0, 12, N)
    sizes[::7] = 0
    G = np.empty((K, N, d, d))
    b = np.empty((K, N, d))
    for k in range(K):
        inst = np.repeat(np.arange(N), sizes)
        X = np.column_stack([np.ones(inst.size), rng.normal(size=(inst.size, d - 1))])
        y = X @ rng.normal(size=d) + rng.normal(size=inst.size)
        s = suffstats(X, y, inst, N)
        G[k], b[k] = s.G, s.b
    G[1, 3] *= 1e12  # an instance whose σ²C̃_j is numerically singular: the jittered factor
    A = rng.normal(size=(S, K, d, d))
    Sigma = A @ np.swapaxes(A, -1, -2) / d + 0.2 * np.eye(d)
    Sigma[2, 0] = np.outer(np.ones(d), np.ones(d))  # singular for d > 1: the scalar path
    sig2 = rng.random((S, K)) + 0.5
    z0 = rng.standard_normal((1, S, K, d))
    Z = rng.standard_normal((1, S, K, N, d))
    P0, h0 = shared_prior_arrays(0.05, d)
    Ds = np.stack([arm_stats(G[k], b[k], np.zeros(N)) for k in range(K)])
    Gs = np.ascontiguousarray(np.moveaxis(G, 1, -1))
    bs = np.ascontiguousarray(np.moveaxis(b, 1, -1))
    for have_beta0 in (False, True):
        b0_in = rng.normal(size=(1, S, K, d))
        out = []
        for kernel, first in (
            (kernels.conditional_draws_soa, (Gs, bs)),
            (conditional_draws_unrolled, (Ds,)),
        ):
            beta0, beta = np.full((1, S, K, d), np.nan), np.full((1, S, K, N, d), np.nan)
            kernel(*first, G, b, Sigma[None], sig2[None], P0, h0, b0_in, have_beta0, z0, Z,
                   beta0, beta)  # fmt: skip
            out.append((beta0, beta))
        (want0, want), (got0, got) = out
        np.testing.assert_allclose(got0, want0, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
