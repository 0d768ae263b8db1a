"""The vectorised arm likelihood (``hierbandit.stats.arm_likelihood``) against the scalar
instance-by-instance kernel of ``hierbandit.stats.marginal``, the collapsed likelihood and
finite differences, with empty cells, d = 1 and any block size."""

from __future__ import annotations

import numpy as np
import pytest

from hierbandit.stats import collapsed_loglik, marginal_loglik
from hierbandit.stats.arm_likelihood import (
    GIVEN,
    INTEGRATED,
    PROFILED,
    arm_loglik,
    arm_stats,
)
from hierbandit.stats.marginal import _check_stats, _profiled
from hierbandit.stats.marginal import _run as _scalar_run
from hierbandit.stats.suffstats import suffstats


def _stats(rng, N, d, rows, empty=(0, 3)):
    """Statistics of N instances with about ``rows`` rows each (instances ``empty`` have none)."""
    T = N * rows
    inst = rng.integers(0, N, T)
    inst = inst[~np.isin(inst, empty)]
    X = np.column_stack([np.ones(inst.size), rng.normal(size=(inst.size, d - 1))])
    beta = rng.normal(size=d) + 0.6 * rng.normal(size=(N, d))
    y = np.einsum("td,td->t", X, beta[inst]) + 0.9 * rng.normal(size=inst.size)
    s = suffstats(X, y, inst, N)
    assert (s.n == 0).any()
    return s


def _L(rng, d):
    A = rng.normal(size=(d, d))
    return np.linalg.cholesky(A @ A.T / d + 0.3 * np.eye(d))


def _run(s, L, s2, lam, mode, beta0=None, block=64):
    d = L.shape[0]
    b0 = np.zeros(d) if beta0 is None else np.array(beta0, dtype=float)
    gS, gb = np.full((d, d), np.nan), np.full(d, np.nan)
    D = arm_stats(s.G, s.b, s.q)
    ll, s2_ds2, _ = arm_loglik(D, float(s.n.sum()), L, s2, lam, mode, b0, block, gS, gb)
    return ll, s2_ds2, gS, gb, b0


#: (N, d, rows per instance): d ≤ 4 runs the unrolled sums, d = 5 and 6 the generic blocked ones
CASES = [(130, 3, 5), (20, 1, 4), (15, 2, 1), (11, 4, 9), (90, 5, 8), (12, 6, 10)]


@pytest.mark.parametrize(("N", "d", "rows"), CASES)
@pytest.mark.parametrize("block", [1, 7, 64])
def test_given_and_profiled_shared_mean_match_the_scalar_kernel(N, d, rows, block):
    """β₀ given and β₀ profiled: value, ∂ℓ/∂Σ, ∂ℓ/∂σ² and β̂₀ as the scalar kernel computes
    them, cell by cell (which ``fit_type2_ml`` used before), whatever the block."""
    rng = np.random.default_rng(N + d + block)
    s = _stats(rng, N, d, rows)
    L, s2, lam = _L(rng, d), 0.8, 0.05
    for mode, profile in ((GIVEN, False), (PROFILED, True)):
        beta0 = rng.normal(size=d)
        ref_b0 = beta0.copy()
        st = _check_stats(s.G, s.b, s.q, s.n)
        status, ll_ref, _, ds_ref, _, _, gS_ref = _scalar_run(st, L, s2, lam, profile, True, ref_b0)
        assert status == 0
        ll, s2_ds2, gS, gb, b0 = _run(s, L, s2, lam, mode, beta0, block)
        assert ll == pytest.approx(ll_ref, rel=1e-12)
        np.testing.assert_allclose(b0, ref_b0, rtol=1e-11, atol=1e-12)
        scale = np.max(np.abs(gS_ref)) + abs(ds_ref * s2)
        np.testing.assert_allclose(gS, gS_ref, rtol=1e-10, atol=1e-12 * scale)
        assert s2_ds2 == pytest.approx(ds_ref * s2, rel=1e-9, abs=1e-12 * scale)
        if mode == GIVEN:  # ∂ℓ/∂β₀ = r − Pβ₀ (P without λ), by central differences
            h = 1e-6
            fd = [
                (
                    marginal_loglik(s.G, s.b, s.q, s.n, beta0 + h * e, L @ L.T, s2)
                    - marginal_loglik(s.G, s.b, s.q, s.n, beta0 - h * e, L @ L.T, s2)
                )
                / (2 * h)
                for e in np.eye(d)
            ]
            np.testing.assert_allclose(gb, fd, rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))


@pytest.mark.parametrize(("N", "d", "rows"), CASES)
def test_integrated_shared_mean_is_the_collapsed_likelihood_and_its_gradient(N, d, rows):
    """β₀ integrated out: the value of ``collapsed_loglik`` and the gradient in the entries of
    L and in log σ² by central differences of it."""
    rng = np.random.default_rng(2 * N + d)
    s = _stats(rng, N, d, rows)
    L, s2, lam = _L(rng, d), 1.3, 0.2

    def value(L, s2):
        return collapsed_loglik(s.G, s.b, s.q, s.n, L @ L.T, s2, lam)

    ll, s2_ds2, gS, _, _ = _run(s, L, s2, lam, INTEGRATED, block=5)
    assert ll == pytest.approx(value(L, s2), rel=1e-11)
    gL = 2.0 * gS @ L
    h = 1e-6
    for i in range(d):
        for j in range(i + 1):
            E = np.zeros((d, d))
            E[i, j] = h
            fd = (value(L + E, s2) - value(L - E, s2)) / (2 * h)
            assert gL[i, j] == pytest.approx(fd, rel=1e-6, abs=1e-6)
    fd = (value(L, s2 * np.exp(h)) - value(L, s2 * np.exp(-h))) / (2 * h)
    assert s2_ds2 == pytest.approx(fd, rel=1e-6, abs=1e-6)


def test_empty_cells_contribute_nothing():
    """Appending instances without rows changes nothing, in every mode."""
    rng = np.random.default_rng(5)
    s = _stats(rng, 40, 3, 4)
    more = type(s)(
        np.concatenate([s.G, np.zeros((9, 3, 3))]),
        np.concatenate([s.b, np.zeros((9, 3))]),
        np.concatenate([s.q, np.zeros(9)]),
        np.concatenate([s.n, np.zeros(9, dtype=s.n.dtype)]),
    )
    L = _L(rng, 3)
    for mode in (GIVEN, PROFILED, INTEGRATED):
        a = _run(s, L, 0.7, 0.1, mode, np.ones(3))
        b = _run(more, L, 0.7, 0.1, mode, np.ones(3))
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-13)


def test_the_unrolled_module_is_what_the_generator_writes():
    """``_arm_sums_unrolled.py`` is :func:`render`'s output (up to formatting)."""
    import ast
    from pathlib import Path

    from hierbandit.stats import _arm_codegen

    path = Path(_arm_codegen.__file__).with_name("_arm_sums_unrolled.py")
    assert ast.dump(ast.parse(path.read_text())) == ast.dump(ast.parse(_arm_codegen.render()))


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_the_unrolled_sums_are_the_generic_kernels(d):
    """Each unrolled variant gives the generic blocked kernel's sums and log-determinant, with
    empty cells and a partial last block, including far from typical values of σ²."""
    from hierbandit.stats import _arm_sums_unrolled
    from hierbandit.stats.arm_likelihood import arm_sums, n_sums

    rng = np.random.default_rng(d)
    s = _stats(rng, 150, d, 4)
    D = arm_stats(s.G, s.b, s.q)
    unrolled = getattr(_arm_sums_unrolled, f"arm_sums_{d}")
    for s2 in (0.7, 1e-6, 1e4):
        L = _L(rng, d)
        lanes = np.empty((n_sums(d), 16))
        want_logdet = arm_sums(D, L, s2, lanes)
        want = lanes.sum(axis=1)
        got = np.full(n_sums(d), np.nan)
        got_logdet = unrolled(D, L, s2, got)
        assert got_logdet == pytest.approx(want_logdet, rel=1e-12)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * np.max(np.abs(want)))


@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_the_collapsed_objective_of_type2_ml_and_its_gradient(lam):
    """``_profiled(..., collapse=True)``: the collapsed likelihood less (d/2) log λ (with λ = 0
    the restricted likelihood), its gradient by central differences, β̂₀ = P⁻¹r and ℓ(β̂₀)."""
    from hierbandit.stats.marginal import _pack

    rng = np.random.default_rng(21)
    s = _stats(rng, 40, 3, 6)
    st = _check_stats(s.G, s.b, s.q, s.n)
    L, s2 = _L(rng, 3), 0.9
    theta = _pack(L, s2)
    f, g, b0, ll = _profiled(theta, st, lam, True)
    _, _, prof_b0, prof_ll = _profiled(theta, st, lam)
    np.testing.assert_allclose(b0, prof_b0, rtol=1e-10, atol=1e-12)  # the same β̂₀
    assert ll == pytest.approx(prof_ll, rel=1e-10)  # and ℓ(β̂₀)
    if lam > 0:
        want = collapsed_loglik(s.G, s.b, s.q, s.n, L @ L.T, s2, lam) - 1.5 * np.log(lam)
        assert f == pytest.approx(want, rel=1e-11)
    h = 1e-6
    fd = [
        (_profiled(theta + h * e, st, lam, True)[0] - _profiled(theta - h * e, st, lam, True)[0])
        / (2 * h)
        for e in np.eye(theta.size)
    ]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))
