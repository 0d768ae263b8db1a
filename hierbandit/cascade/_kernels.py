"""Compiled per-user quantities of the cascade policies (numba; see :mod:`hierbandit.cascade.policies`).

Each user's logits, confidence widths and Thompson attractions are computed row by row with
the sums in a fixed order, so the value for one user does not depend on which other users are
planned with it: a batch of B users gives bit for bit the values of B one-user calls. (A BLAS
matrix product does not promise that: its blocking, and so its rounding, changes with the number
of rows.) The kernels trust their inputs: the policies validate them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = {"cache": True, "nogil": True}


@njit(**_JIT)
def joint_logits(X, theta, n_arms, out):
    """``out[n, k] = z_{n,k}ᵀθ = x_nᵀθ_x + θ_{d+k}`` for ``z = [x; onehot(k)]``."""
    N, d = X.shape
    for n in range(N):
        s = 0.0
        for j in range(d):
            s += X[n, j] * theta[j]
        for k in range(n_arms):
            out[n, k] = s + theta[d + k]


@njit(**_JIT)
def joint_quad(X, S, n_arms, out):
    """``out[n, k] = z_{n,k}ᵀ S z_{n,k} = xᵀS_xx x + 2xᵀS_{x,d+k} + S_{d+k,d+k}`` (clipped at 0,
    which rounding can undercut); docs/maths/cascade.md §4."""
    N, d = X.shape
    for n in range(N):
        quad = 0.0
        for i in range(d):
            t = 0.0
            for j in range(d):
                t += S[i, j] * X[n, j]
            quad += X[n, i] * t
        for k in range(n_arms):
            c = 0.0
            for i in range(d):
                c += X[n, i] * S[i, d + k]
            v = quad + 2.0 * c + S[d + k, d + k]
            out[n, k] = v if v > 0.0 else 0.0


@njit(**_JIT)
def sampled_attractions(X, theta, root, xi, sigma, n_arms, out):
    """Thompson attractions: user ``n`` draws ``θ̃_n = θ + σ·root·ξ_n`` (``root`` a square root of
    the covariance, ``ξ_n = xi[n]`` standard normal) and ``out[n, k] = z_{n,k}ᵀθ̃_n``."""
    N, d = X.shape
    p = theta.shape[0]
    th = np.empty(p)
    for n in range(N):
        for i in range(p):
            s = 0.0
            for j in range(p):
                s += root[i, j] * xi[n, j]
            th[i] = theta[i] + sigma * s
        s = 0.0
        for j in range(d):
            s += X[n, j] * th[j]
        for k in range(n_arms):
            out[n, k] = s + th[d + k]
