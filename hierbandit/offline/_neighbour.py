"""Shared machinery of Off-C²LUB and Off-CLUB: the per-user stage of [OFF] Eq. (1), the
vectorised pairwise stage, and one-hop aggregation of the neighbours' statistics."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np
import scipy.sparse as sp

from hierbandit._validation import check_choice, check_positive_int, check_scalar
from hierbandit.offline._core import (
    aggregate_block,
    ci_eigen,
    ci_paper,
    distance_block,
    empirical_lambda_a,
    n_min_theory,
    ridge_solve,
    row_blocks,
    smoothed_regularity,
)
from hierbandit.offline.base import OfflineModel, UserGraph, graph_from_adjacency
from hierbandit.offline.dataset import OfflineDataset

__all__ = ["NeighbourModel"]


def _check_lambda_tilde(value: Any) -> float | str:
    if isinstance(value, str):
        return check_choice(value, ("lambda_a", "theory"), "lambda_tilde_a")
    return check_scalar(value, "lambda_tilde_a", low=0.0, low_inclusive=False)


def _check_n_min(value: Any) -> int | str:
    if isinstance(value, str):
        return check_choice(value, ("theory",), "n_min")
    return check_positive_int(value, "n_min", minimum=0)


class NeighbourModel(OfflineModel):
    """Base of the two graph algorithms of [OFF] (see :class:`~hierbandit.offline.OffC2LUB`).

    Parameters
    ----------
    alpha : float, default 0.1
        Confidence multiplier α of the edge rules (Eq. 2, 4, 6). The analysis needs α ≥ 1; the
        experiments use α = 0.1 (App. E.1; docs/offline.md, decision 2).
    lam, delta : float
        λ = 0.5 and δ = 0.01 (App. E.1).
    lambda_tilde_a : float or {"lambda_a", "theory"}, default "lambda_a"
        The smoothed regularity λ̃_a in CI_u (Eq. 1), which the paper assumes known but never
        reports. ``"lambda_a"`` (default): the smallest eigenvalue of the pooled second moment
        (1/N) Σ a aᵀ of the dataset — the λ_a of Assumption A.1, which replaces λ̃_a there.
        ``"theory"``: the Assumption 3.1 integral with λ_a and σ² estimated from the data
        (σ² = variance of (wᵀa)² along the least-covered direction w) and S = ``n_candidates``;
        it is ~1e-15 in the paper's setting, so nobody would ever be connected (docs/offline.md,
        decision 1). A positive float fixes it.
    n_min : int or "theory", default 1
        Minimum samples N_min for a user to be connected (Algorithm 1, line 2; Off-C²LUB only).
        ``"theory"`` is 16/λ̃_a² · log(8Ud/(λ̃_a²δ)) — about 1.5e5 per user even with λ̃_a = 0.05,
        far above the ≤ 500 training samples per user of any experiment, so the default 1 only
        excludes users without data.
    ci : {"paper", "eigen"}, default "paper"
        ``"paper"``: CI_u of Eq. (1). ``"eigen"``: the data-dependent form of Remark A.2,
        (√(d log(1 + N_u/(λd)) + 2 log(2U/δ)) + √λ) / √λ_min(G_u), needing no λ̃_a.
    n_candidates : int, default 20
        Candidate-set size S, used only by ``lambda_tilde_a="theory"``.
    rng : seed or Generator
        Breaks exact ties in the decision.
    """

    def __init__(
        self,
        *,
        alpha: float = 0.1,
        lam: float = 0.5,
        delta: float = 0.01,
        lambda_tilde_a: float | str = "lambda_a",
        n_min: int | str = 1,
        ci: str = "paper",
        n_candidates: int = 20,
        rng: Any = None,
    ) -> None:
        super().__init__(lam=lam, delta=delta, rng=rng)
        self.alpha = check_scalar(alpha, "alpha", low=0.0, low_inclusive=False)
        self.lambda_tilde_a = _check_lambda_tilde(lambda_tilde_a)
        self.n_min = _check_n_min(n_min)
        self.ci = check_choice(ci, ("paper", "eigen"), "ci")
        self.n_candidates = check_positive_int(n_candidates, "n_candidates")

    # ------------------------------------------------------------------ per-user stage
    def _user_stage(self, ds: OfflineDataset) -> dict[str, Any]:
        """M_u, b_u, θ̂_u = M_u⁻¹b_u and CI_u of [OFF] Eq. (1), plus λ̃_a and N_min."""
        G, b, _, n = ds.suffstats()
        U, d = ds.n_users, ds.n_features
        theta_hat, _ = ridge_solve(G, b, self.lam)
        lt = self._resolve_lambda_tilde(ds, G, n)
        if self.ci == "paper":
            ci = ci_paper(n, d, self.lam, self.delta, U, lt)
        else:
            ci = ci_eigen(G, n, d, self.lam, self.delta, U)
        n_min = n_min_theory(lt, U, d, self.delta) if self.n_min == "theory" else self.n_min
        return {
            "G": G,
            "b": b,
            "n": n,
            "theta_hat_": theta_hat,
            "ci_": ci,
            "lambda_tilde_a_": lt,
            "n_min_": float(n_min),
        }

    def _resolve_lambda_tilde(self, ds: OfflineDataset, G: np.ndarray, n: np.ndarray) -> float:
        if not isinstance(self.lambda_tilde_a, str):
            return float(self.lambda_tilde_a)
        G_tot, N_tot = G.sum(axis=0), int(n.sum())
        lam_a = empirical_lambda_a(G_tot, N_tot)
        if self.lambda_tilde_a == "lambda_a":
            if lam_a <= 0:
                raise ValueError(
                    "the pooled second moment of the actions is singular (lambda_a = 0); "
                    "pass lambda_tilde_a as a positive number or use ci='eigen'"
                )
            return lam_a
        w = np.linalg.eigh(G_tot / N_tot)[1][:, 0]
        sigma2 = float(np.var((ds.X @ w) ** 2))
        lt = smoothed_regularity(lam_a, sigma2, self.n_candidates)
        if lt <= 0:
            raise ValueError("the theoretical lambda_tilde_a is 0 for this dataset")
        return lt

    # ------------------------------------------------------------------ pairwise stage
    def _alpha_ci(self, ci: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(ci), self.alpha * np.where(np.isfinite(ci), ci, 0.0), np.inf)

    @abstractmethod
    def _row_mask(
        self, D: np.ndarray, r0: int, r1: int, stage: dict[str, Any], row_param: np.ndarray
    ) -> np.ndarray:
        """Neighbour mask of users [r0, r1) against every user (self excluded)."""

    def _row_params(self, D: np.ndarray, r0: int, r1: int, stage: dict[str, Any]) -> np.ndarray:
        """Per-row parameters computed from the distance block (e.g. γ̂(u)); default none."""
        return np.zeros(r1 - r0)

    def _pairwise(
        self, stage: dict[str, Any], *, aggregate: bool = True, edges: bool = False
    ) -> dict[str, Any]:
        """One blockwise pass over user pairs: distances (O(U²d) by GEMM), per-row parameters,
        neighbour masks, and (optionally) the one-hop sums Σ_{v ∈ V(u)} (G_v, b_v, N_v) and
        the edge list."""
        theta = stage["theta_hat_"]
        G, b, n = stage["G"], stage["b"], stage["n"]
        U, d = b.shape
        sq = np.einsum("ud,ud->u", theta, theta)
        Gflat = G.reshape(U, d * d)
        totals = (Gflat.sum(axis=0), b.sum(axis=0), float(n.sum()))
        out: dict[str, Any] = {"row_param": np.zeros(U), "n_nb": np.zeros(U, dtype=np.int64)}
        if aggregate:
            out.update(Gt=np.empty((U, d * d)), bt=np.empty((U, d)), Nt=np.empty(U))
        rows, cols = [], []
        for r0, r1 in row_blocks(U, U):
            D = distance_block(theta, sq, r0, r1)
            param = self._row_params(D, r0, r1, stage)
            mask = self._row_mask(D, r0, r1, stage, param)
            idx = np.arange(r0, r1)
            mask[idx - r0, idx] = False
            out["row_param"][r0:r1] = param
            out["n_nb"][r0:r1] = mask.sum(axis=1)
            if edges:
                rr, cc = np.nonzero(mask)
                rows.append(rr + r0)
                cols.append(cc)
            if aggregate:
                mask[idx - r0, idx] = True  # D̃_u includes D_u
                Gt, bt, Nt = aggregate_block(mask, Gflat, b, n, totals)
                out["Gt"][r0:r1], out["bt"][r0:r1], out["Nt"][r0:r1] = Gt, bt, Nt
        if edges:
            r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
            c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
            out["adjacency"] = sp.csr_array((np.ones(r.size, dtype=bool), (r, c)), shape=(U, U))
        if aggregate:
            out["Gt"] = out["Gt"].reshape(U, d, d)
        return out

    def _graph(self) -> UserGraph:
        res = self._pairwise(self._stage, aggregate=False, edges=True)
        return graph_from_adjacency(res["adjacency"], directed=self._directed())

    def _directed(self) -> bool:
        return False

    def _extra_estimates(self) -> dict[str, Any]:
        return {
            "theta_hat": (("user", "feature"), np.array(self.theta_hat_)),
            "ci": ("user", np.array(self.ci_)),
            "n_neighbours": ("user", np.array(self.n_neighbours_)),
            "count_tilde": ("user", np.array(self.count_tilde_)),
        }
