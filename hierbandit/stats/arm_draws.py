"""Exact conditional draws of every arm's shared and instance coefficients for small d, with the
per-instance algebra unrolled (:mod:`hierbandit.stats._arm_codegen`).

The same formulas as :func:`hierbandit.stats.kernels.conditional_draws_soa` (whose results they
equal to rounding): for each draw and arm, the instances' blocks C̃_j, M_j⁻¹ and the sums P, r
in one pass, β₀ ~ N(P⁻¹r, P⁻¹) (or the given β₀), then β_j = A_jβ₀ + C̃_jb_j + chol(σ²C̃_j)z_j
in a second pass. A (draw, arm) whose Σ is not positive definite or some S_j does not factorise
runs the scalar kernel, and an instance whose σ²C̃_j does not factorise takes the scalar
kernel's jittered factor, as in the blocked kernel.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hierbandit.stats._arm_codegen import UNROLLED_MAX
from hierbandit.stats._arm_sums_unrolled import (
    draws_blocks_1,
    draws_blocks_2,
    draws_blocks_3,
    draws_blocks_4,
    draws_cells_1,
    draws_cells_2,
    draws_cells_3,
    draws_cells_4,
)
from hierbandit.stats.kernels import (
    _draw_arm_scalar,
    _draw_shared,
    _jittered_cholesky,
    shared_inverse_into,
    sigma_root_into,
)
from hierbandit.stats.linalg import cholesky_inverse_lower

__all__ = ["UNROLLED_MAX", "conditional_draws_unrolled"]

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(**_JIT)
def _blocks(D, Lr, Li, s2, P, r, CM):  # pragma: no cover - compiled
    d = Lr.shape[0]
    if d == 1:
        return draws_blocks_1(D, Lr, Li, s2, P, r, CM)
    if d == 2:
        return draws_blocks_2(D, Lr, Li, s2, P, r, CM)
    if d == 3:
        return draws_blocks_3(D, Lr, Li, s2, P, r, CM)
    return draws_blocks_4(D, Lr, Li, s2, P, r, CM)


@njit(**_JIT)
def _cells(D, CM, s2, b0, Z, out, bad):  # pragma: no cover - compiled
    d = b0.shape[0]
    if d == 1:
        draws_cells_1(D, CM, s2, b0, Z, out, bad)
    elif d == 2:
        draws_cells_2(D, CM, s2, b0, Z, out, bad)
    elif d == 3:
        draws_cells_3(D, CM, s2, b0, Z, out, bad)
    else:
        draws_cells_4(D, CM, s2, b0, Z, out, bad)


@njit(**_JIT)
def conditional_draws_unrolled(
    Ds, G, b, Sigma, sig2, P0, h0, beta0_in, have_beta0, z0, Z, beta0_out, beta_out
):  # pragma: no cover - compiled
    """:func:`hierbandit.stats.kernels.conditional_draws_soa` for d ≤ :data:`UNROLLED_MAX`,
    ``Ds`` (K, R, N) the arms' statistics in the layout of
    :func:`hierbandit.stats.arm_likelihood.arm_stats`; the other arguments as there."""
    C_, D_, Kn = sig2.shape
    N, d = b.shape[1], b.shape[2]
    npr = d * (d + 1) // 2
    CM = np.empty((npr + d * d, N))
    bad = np.zeros(N, dtype=np.bool_)
    Ct = np.empty((N, d, d))
    A = np.empty((N, d, d))
    Lr = np.empty((d, d))
    Li = np.empty((d, d))
    M = np.empty((d, d))
    P = np.empty((d, d))
    r = np.empty(d)
    Phi = np.empty((d, d))
    m0 = np.empty(d)
    S = np.empty((d, d))
    L = np.empty((d, d))
    Sc = np.empty((d, d))
    Lc = np.empty((d, d))
    for c in range(C_):
        for t in range(D_):
            for k in range(Kn):
                s2 = sig2[c, t, k]
                ok = sigma_root_into(Sigma[c, t, k], Lr, M)
                if ok:
                    cholesky_inverse_lower(Lr, Li)
                    for i in range(d):
                        r[i] = h0[i]
                        for m in range(d):
                            P[i, m] = P0[i, m]
                    ok = _blocks(Ds[k], Lr, Li, s2, P, r, CM)
                if not ok:
                    _draw_arm_scalar(
                        G[k], b[k], Sigma[c, t, k], s2, P0, h0, beta0_in[c, t, k], have_beta0,
                        z0[c, t, k], Z[c, t, k], beta0_out[c, t, k], beta_out[c, t, k], Ct, A,
                    )  # fmt: skip
                    continue
                for i in range(d):
                    for m in range(i):
                        v = 0.5 * (P[i, m] + P[m, i])
                        P[i, m] = v
                        P[m, i] = v
                shared_inverse_into(P, P0, Phi, Sc, Lc)
                for i in range(d):
                    v = 0.0
                    for m in range(d):
                        v += Phi[i, m] * r[m]
                    m0[i] = v
                _draw_shared(
                    Phi, m0, have_beta0, beta0_in[c, t, k], z0[c, t, k], beta0_out[c, t, k], S, L
                )
                out = beta_out[c, t, k]
                _cells(Ds[k], CM, s2, beta0_out[c, t, k], Z[c, t, k], out, bad)
                for j in range(N):
                    if bad[j]:  # σ²C̃_j did not factorise: the scalar kernel's jittered factor
                        _redraw_cell(
                            CM, j, s2, beta0_out[c, t, k], b[k, j], Z[c, t, k, j], out[j], M, S, L
                        )


@njit(**_JIT)
def _redraw_cell(CM, j, s2, b0, bj, zj, out, Ct, S, L):  # pragma: no cover - compiled
    """One instance's draw with the jittered Cholesky factor of σ²C̃_j (as the scalar kernel
    draws it), from the blocks in ``CM``; ``Ct``, ``S``, ``L``: (d, d) scratch."""
    d = b0.shape[0]
    npr = d * (d + 1) // 2
    for i in range(d):
        for m in range(i + 1):
            v = CM[i * (i + 1) // 2 + m, j]
            Ct[i, m] = v
            Ct[m, i] = v
    _jittered_cholesky(Ct, s2, S, L)
    for i in range(d):
        v = 0.0
        for m in range(d):
            v += s2 * CM[npr + i * d + m, j] * b0[m] + Ct[i, m] * bj[m]
        for m in range(i + 1):
            v += L[i, m] * zj[m]
        out[i] = v
