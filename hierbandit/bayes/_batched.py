"""Batched small-matrix algebra for PyMC models (generic d).

Used by the collapsed model when d is too large for the structure-of-arrays form
(``models._collapsed_soa``), which writes every matrix entry as its own array.
"""

from __future__ import annotations

import pytensor.tensor as pt

#: largest dimension for which the collapsed model uses the structure-of-arrays form
UNROLL_MAX = 8


class BatchedCholesky:
    """Lower Cholesky factor of a batch of symmetric positive-definite matrices ``B`` (..., d, d)."""

    def __init__(self, B: pt.TensorVariable) -> None:
        self._L = pt.linalg.cholesky(B)

    def logdet(self) -> pt.TensorVariable:
        """log |B| over the batch."""
        return 2.0 * pt.log(pt.diagonal(self._L, axis1=-2, axis2=-1)).sum(axis=-1)

    def solve_lower(self, R: pt.TensorVariable) -> pt.TensorVariable:
        """L⁻¹ R for R (..., d, m)."""
        return pt.linalg.solve_triangular(self._L, R, lower=True)


def matT(A: pt.TensorVariable) -> pt.TensorVariable:
    """Transpose of the last two axes."""
    return pt.swapaxes(A, -1, -2)
