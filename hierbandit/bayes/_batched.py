"""Batched small-matrix algebra for PyMC models, written to vectorise well.

The collapsed models need a d×d Cholesky factor and triangular solves for every (arm, instance)
pair at every gradient evaluation. Generic batched linear-algebra ops loop over the batch in
PyTensor's C backend and call LAPACK once per tiny matrix; for small d this module instead unrolls
the factorisation into elementwise operations on whole (arm, instance) arrays, which every backend
(C, numba, JAX) fuses and vectorises. ``unroll=False`` (automatic for d > ``UNROLL_MAX``) uses
``pytensor.tensor.linalg``.
"""

from __future__ import annotations

import pytensor.tensor as pt

#: largest dimension for which the algebra is unrolled (O(d³) graph nodes)
UNROLL_MAX = 8


class BatchedCholesky:
    """Lower Cholesky factor of a batch of symmetric positive-definite matrices ``B`` (..., d, d).

    Provides the log-determinant and forward substitution, unrolled or via ``pt.linalg``.
    """

    def __init__(self, B: pt.TensorVariable, d: int, unroll: bool | None = None) -> None:
        self.d = d
        self.unroll = d <= UNROLL_MAX if unroll is None else unroll
        if self.unroll:
            L: dict[tuple[int, int], pt.TensorVariable] = {}
            for i in range(d):
                for j in range(i + 1):
                    s = B[..., i, j]
                    for k in range(j):
                        s = s - L[i, k] * L[j, k]
                    L[i, j] = pt.sqrt(s) if i == j else s / L[j, j]
            self._L = L
        else:
            self._Lmat = pt.linalg.cholesky(B)

    def logdet(self) -> pt.TensorVariable:
        """log |B| over the batch (shape of B without the last two axes)."""
        if self.unroll:
            return 2.0 * sum(pt.log(self._L[i, i]) for i in range(self.d))
        return 2.0 * pt.log(pt.diagonal(self._Lmat, axis1=-2, axis2=-1)).sum(axis=-1)

    def solve_lower(self, R: pt.TensorVariable) -> pt.TensorVariable:
        """L⁻¹ R for R (..., d, m) (forward substitution)."""
        if not self.unroll:
            return pt.linalg.solve_triangular(self._Lmat, R, lower=True)
        X = []
        for i in range(self.d):
            s = R[..., i, :]
            for k in range(i):
                s = s - self._L[i, k][..., None] * X[k]
            X.append(s / self._L[i, i][..., None])
        return pt.stack(X, axis=-2)


def matT(A: pt.TensorVariable) -> pt.TensorVariable:
    """Transpose of the last two axes."""
    return pt.swapaxes(A, -1, -2)
