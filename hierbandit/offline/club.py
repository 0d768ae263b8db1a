"""Off-CLUB: offline clustering of bandits for sufficient data ([OFF] Algorithm 2, App. F.1).

Start from the complete graph over users; delete (u₁, u₂) when ([OFF] Eq. 6, strict)

    ‖θ̂_{u₁} − θ̂_{u₂}‖₂ > α(CI_{u₁} + CI_{u₂});

pool each user's data with its one-hop neighbours — not the connected component, unlike online
CLUB (App. F.1) — with a single regulariser (line 10: M̃_u = λI + Σ_{v∈V(u)} G_v) and decide
pessimistically (line 13) with β = √(d·log(1 + Ñ_u/(λd)) + 2·log(2U/δ)) + √λ. No γ̂ and no N_min.

A user without data has CI = +∞, so it keeps every edge (docs/offline.md, decision 6). Users with
few samples have large radii and keep edges to heterogeneous users — the bias that makes Off-CLUB
weak under insufficient data (Remark 5.3).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierbandit.offline._core import beta_radius, ridge_solve
from hierbandit.offline._neighbour import NeighbourModel
from hierbandit.offline.dataset import OfflineDataset

__all__ = ["OffCLUB"]


class OffCLUB(NeighbourModel):
    """Off-CLUB ([OFF] Algorithm 2).

    Parameters
    ----------
    alpha : float, default 0.1
        α of Eq. (6); Theorem 5.2 uses α = 1, the experiments α = 0.1.
    lam : float, default 0.5
        λ. Algorithm 2's input line reads "λ > 1", most likely a typo for α > 1 (Algorithm 1
        takes λ > 0 and the experiments use λ = 0.5); any λ > 0 is accepted (docs/offline.md,
        decision 3).
    delta : float, default 0.01
    lambda_tilde_a, ci, n_candidates
        See :class:`~hierbandit.offline._neighbour.NeighbourModel` (``n_min`` is not used by
        Algorithm 2 and is fixed to 0 here).
    rng : seed or Generator

    Attributes
    ----------
    theta_hat_, ci_, theta_, Ainv_, beta_, n_neighbours_, count_tilde_, lambda_tilde_a_
        As for :class:`~hierbandit.offline.OffC2LUB`.

    Examples
    --------
    >>> from hierbandit.offline import cluster_thetas, generate_offline
    >>> theta, labels = cluster_thetas(20, 2, 3, rng=0)
    >>> data = generate_offline(theta, 40_000, labels=labels, noise_sd=0.0, rng=1)
    >>> g = OffCLUB(alpha=1.0, lambda_tilde_a=1.0).fit(data).graph()
    >>> from hierbandit.stats.partitions import same_partition
    >>> same_partition(g.labels, labels)
    True
    """

    paper_name = "Off-CLUB"

    def __init__(
        self,
        *,
        alpha: float = 0.1,
        lam: float = 0.5,
        delta: float = 0.01,
        lambda_tilde_a: float | str = "lambda_a",
        ci: str = "paper",
        n_candidates: int = 20,
        rng: Any = None,
    ) -> None:
        super().__init__(
            alpha=alpha,
            lam=lam,
            delta=delta,
            lambda_tilde_a=lambda_tilde_a,
            n_min=0,
            ci=ci,
            n_candidates=n_candidates,
            rng=rng,
        )

    def get_params(self) -> dict[str, Any]:
        params = super().get_params()
        params.pop("n_min", None)
        return params

    def _fit(self, ds: OfflineDataset) -> dict[str, Any]:
        stage = self._user_stage(ds)
        res = self._pairwise(stage)
        U, d = stage["b"].shape
        theta, Ainv = ridge_solve(res["Gt"], res["bt"], self.lam)
        beta = beta_radius(res["Nt"], np.full(U, self.lam), d, self.lam, self.delta, U)
        return {
            "_stage": stage,
            "theta_hat_": stage["theta_hat_"],
            "ci_": stage["ci_"],
            "lambda_tilde_a_": stage["lambda_tilde_a_"],
            "theta_": theta,
            "Ainv_": Ainv,
            "beta_": beta,
            "n_neighbours_": res["n_nb"],
            "count_tilde_": res["Nt"].astype(np.int64),
        }

    def _row_mask(
        self, D: np.ndarray, r0: int, r1: int, stage: dict[str, Any], row_param: np.ndarray
    ) -> np.ndarray:
        aci = self._alpha_ci(stage["ci_"])
        return ~(aci[r0:r1, None] + aci[None, :] < D)  # keep unless Eq. (6) holds
