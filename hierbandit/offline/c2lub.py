"""Off-C²LUB: offline connection-based clustering of bandits ([OFF] Algorithm 1, §4).

Start from the null graph over users; connect u₁, u₂ when ([OFF] Eq. 2)

    ‖θ̂_{u₁} − θ̂_{u₂}‖₂ < γ̂ − α(CI_{u₁} + CI_{u₂})   and   min(N_{u₁}, N_{u₂}) ≥ N_min;

pool each user's data with its one-hop neighbours (line 9: M̃_u = λ·ñ_u·I + Σ_{v∈V(u)} G_v,
b̃_u = Σ b_v, ñ_u = |V(u)|, the product of the neighbours' ridge posteriors) and decide
pessimistically (line 12): argmax_a θ̃_uᵀa − β‖a‖_{M̃_u⁻¹} with
β = √(d·log(1 + Ñ_u/(λ·ñ_u·d)) + 2·log(2U/δ)) + √λ.

γ̂ is a number (Case 1, γ known: γ̂ = γ; any γ̂ ≤ γ is bias-free) or, per test user, one of the
data-driven policies of Eq. (5) built on Eq. (4):
Γ(u,v) = ‖θ̂_u − θ̂_v‖ − α(CI_u + CI_v), Γ̃(u,v) = ‖θ̂_u − θ̂_v‖ + α(CI_u + CI_v),
M(u) = {v ≠ u : Γ(u,v) > 0};

* ``"underestimation"``: γ̂(u) = min_{v∈M(u)} Γ(u,v) (0 if M(u) = ∅);
* ``"overestimation"``: γ̂(u) = min_{v∈M(u)} Γ̃(u,v) (0 if M(u) = ∅), which is ≥ γ whenever
  M(u) ≠ ∅ and α ≥ 1 (Theorem B.4).

The experiments' plain "Off-C²LUB" uses a γ̂ "selected to be approximate to the optimal value"
(App. E.2): an oracle sweep over a grid (:func:`gamma_grid`, :meth:`OffC2LUB.with_gamma`,
:func:`hierbandit.offline.gamma_sweep`), whose minimum is also the "Off-C²LUB lower bound" of
Figures 4–6 (docs/offline.md, decision 15).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from hierbandit._validation import check_choice, check_positive_int, check_scalar
from hierbandit.offline._core import beta_radius, ridge_solve, row_blocks
from hierbandit.offline._neighbour import NeighbourModel
from hierbandit.offline.dataset import OfflineDataset

__all__ = ["GAMMA_POLICIES", "OffC2LUB", "gamma_grid"]

GAMMA_POLICIES = ("underestimation", "overestimation")


def _check_gamma(value: Any) -> float | str:
    if isinstance(value, str):
        return check_choice(value, GAMMA_POLICIES, "gamma_hat")
    return check_scalar(value, "gamma_hat", low=0.0)


class OffC2LUB(NeighbourModel):
    """Off-C²LUB ([OFF] Algorithm 1) with the γ̂ policies of §4.3.

    Parameters
    ----------
    gamma_hat : float or {"underestimation", "overestimation"}, default "overestimation"
        The connection threshold γ̂ ≥ 0, or a per-test-user policy of Eq. (5). γ̂ = 0 (or no
        edges) is the per-user pessimistic LinUCB on the test user's own data.
    alpha : float, default 0.1
        α of Eq. (2) and (4).
    lam, delta : float, default 0.5, 0.01
        λ and δ ([OFF] App. E.1).
    beta_bias : {"paper", "theory"}, default "paper"
        The additive term of β in line 12: √λ as printed (``"paper"``) or √(ñ_u·λ), which matches
        the regulariser λ·ñ_u·I and the proof's β(S, δ) (``"theory"``; docs/offline.md,
        decision 4).
    lambda_tilde_a, n_min, ci, n_candidates
        See :class:`~hierbandit.offline._neighbour.NeighbourModel`: λ̃_a defaults to the
        empirical λ_a (the theoretical value is ~1e-15), N_min to 1 (the theoretical one is
        ~1.5e5 samples per user), CI_u to Eq. (1).
    rng : seed or Generator
        Breaks exact ties (e.g. a user without data: θ̃ = 0, the smallest-width action wins).

    Attributes
    ----------
    theta_hat_, ci_ : ndarray
        Per-user ridge estimates θ̂_u (U, d) and radii CI_u (U,) (+inf without data).
    gamma_hat_ : ndarray, shape (U,)
        The γ̂ used for each user as test user.
    theta_, Ainv_, beta_ : ndarray
        θ̃_u, M̃_u⁻¹ and β of each user's decision.
    n_neighbours_, count_tilde_ : ndarray
        ñ_u − 1 and Ñ_u.
    lambda_tilde_a_, n_min_ : float
        The values used.

    Examples
    --------
    >>> from hierbandit.offline import cluster_thetas, generate_offline
    >>> theta, labels = cluster_thetas(60, 3, 5, rng=0)
    >>> data = generate_offline(theta, 3000, labels=labels, rng=1)
    >>> model = OffC2LUB(gamma_hat="overestimation", alpha=1.0, rng=0).fit(data)
    >>> model.decide(0, theta[[0, 30]])
    0
    """

    paper_name = "Off-C2LUB"

    def __init__(
        self,
        gamma_hat: float | str = "overestimation",
        *,
        alpha: float = 0.1,
        lam: float = 0.5,
        delta: float = 0.01,
        beta_bias: str = "paper",
        lambda_tilde_a: float | str = "lambda_a",
        n_min: int | str = 1,
        ci: str = "paper",
        n_candidates: int = 20,
        rng: Any = None,
    ) -> None:
        super().__init__(
            alpha=alpha,
            lam=lam,
            delta=delta,
            lambda_tilde_a=lambda_tilde_a,
            n_min=n_min,
            ci=ci,
            n_candidates=n_candidates,
            rng=rng,
        )
        self.gamma_hat = _check_gamma(gamma_hat)
        self.beta_bias = check_choice(beta_bias, ("paper", "theory"), "beta_bias")

    # ------------------------------------------------------------------ fitting
    def _fit(self, ds: OfflineDataset) -> dict[str, Any]:
        stage = self._user_stage(ds)
        return self._fit_from_stage(stage)

    def _fit_from_stage(self, stage: dict[str, Any]) -> dict[str, Any]:
        res = self._pairwise(stage)
        U, d = stage["b"].shape
        n_tilde = res["n_nb"] + 1  # ñ_u = |V_γ̂(u)|
        theta, Ainv = ridge_solve(res["Gt"], res["bt"], self.lam, self.lam * (n_tilde - 1.0))
        bias = np.sqrt(n_tilde * self.lam) if self.beta_bias == "theory" else None
        beta = beta_radius(res["Nt"], self.lam * n_tilde, d, self.lam, self.delta, U, bias)
        return {
            "_stage": stage,
            "theta_hat_": stage["theta_hat_"],
            "ci_": stage["ci_"],
            "lambda_tilde_a_": stage["lambda_tilde_a_"],
            "n_min_": stage["n_min_"],
            "gamma_hat_": res["row_param"],
            "theta_": theta,
            "Ainv_": Ainv,
            "beta_": beta,
            "n_neighbours_": res["n_nb"],
            "count_tilde_": res["Nt"].astype(np.int64),
        }

    def _row_params(self, D: np.ndarray, r0: int, r1: int, stage: dict[str, Any]) -> np.ndarray:
        if not isinstance(self.gamma_hat, str):
            return np.full(r1 - r0, float(self.gamma_hat))
        aci = self._alpha_ci(stage["ci_"])
        width = aci[r0:r1, None] + aci[None, :]  # +inf where a radius is infinite
        lower = D - width  # Γ(u, v), Eq. (4)
        idx = np.arange(r0, r1)
        lower[idx - r0, idx] = -np.inf
        certified = lower > 0.0  # M(u)
        if self.gamma_hat == "underestimation":
            cand = np.where(certified, lower, np.inf)
        else:
            cand = np.where(certified, D + np.where(certified, width, 0.0), np.inf)  # Γ̃
        g = cand.min(axis=1)
        return np.where(np.isfinite(g), g, 0.0)

    def _row_mask(
        self, D: np.ndarray, r0: int, r1: int, stage: dict[str, Any], row_param: np.ndarray
    ) -> np.ndarray:
        aci = self._alpha_ci(stage["ci_"])
        thr = row_param[:, None] - (aci[r0:r1, None] + aci[None, :])  # −inf if a CI is infinite
        mask = thr > D  # Eq. (2), strict
        enough = stage["n"] >= stage["n_min_"]
        mask &= enough[r0:r1, None] & enough[None, :]
        return mask

    def _directed(self) -> bool:
        return isinstance(self.gamma_hat, str)

    # ------------------------------------------------------------------ sweeps
    def with_gamma(self, gamma_hat: float | str) -> OffC2LUB:
        """A fitted copy with another γ̂, reusing this fit's per-user statistics (only the
        pairwise stage and the aggregation are redone). The copy has its own tie-break stream
        (a deep copy of this model's generator)."""
        self._check_fitted()
        new = copy.copy(self)
        new.gamma_hat = _check_gamma(gamma_hat)
        new._rng = copy.deepcopy(self._rng)
        new.__dict__.update(new._fit_from_stage(self._stage))
        new._graph_cache = None
        return new

    def _extra_estimates(self) -> dict[str, Any]:
        out = super()._extra_estimates()
        out["gamma_hat"] = ("user", np.array(self.gamma_hat_))
        return out


def gamma_grid(
    model: OffC2LUB, n_points: int = 41, *, power: float = 2.0, n_gaps: int | None = None
) -> np.ndarray:
    """A γ̂ grid for the oracle sweep, adapted to a fitted model's data (no test data used).

    An edge (u, v) of Eq. (2) appears once γ̂ exceeds its activation threshold
    t_uv = ‖θ̂_u − θ̂_v‖ + α(CI_u + CI_v). The grid holds 0 (the empty graph: per-user LCB),
    quantiles of the finite t_uv at levels (k/m)^``power`` (denser at small edge fractions, up to
    the complete graph), and the midpoints of the ``n_gaps`` widest gaps between consecutive
    sorted thresholds inside their 0.1–99 % quantile range (default ``n_points // 5``): a γ̂ in
    such a gap adds a whole well-separated group of edges at once — with sufficient data, the
    within-cluster edges and none of the others. (A grid that stops at 2, such as
    ``np.linspace(0, 2, 41)``, is too short: with α·CI added, thresholds beyond 2 matter when data
    are scarce.)
    """
    model._check_fitted()
    n_points = check_positive_int(n_points, "n_points", minimum=3)
    power = check_scalar(power, "power", low=0.0, low_inclusive=False)
    n_gaps = max(1, n_points // 5) if n_gaps is None else check_positive_int(n_gaps, "n_gaps", 0)
    n_gaps = min(n_gaps, n_points - 3)
    st = model._stage
    theta = st["theta_hat_"]
    U = theta.shape[0]
    aci = model._alpha_ci(st["ci_"])
    enough = st["n"] >= st["n_min_"]
    sq = np.einsum("ud,ud->u", theta, theta)
    # subsample rows for very many users: the quantiles need only a representative sample
    rows = np.arange(U) if U <= 3000 else np.linspace(0, U - 1, 3000).astype(np.int64)
    vals = []
    for r0, r1 in row_blocks(rows.size, U):
        sub = rows[r0:r1]
        D = _rows_distance(theta, sq, sub)
        t = D + aci[sub, None] + aci[None, :]
        keep = np.isfinite(t) & enough[sub, None] & enough[None, :]
        keep &= sub[:, None] < np.arange(U)[None, :]
        vals.append(t[keep])
    t_all = np.sort(np.concatenate(vals)) if vals else np.zeros(0)
    if t_all.size == 0:
        return np.linspace(0.0, 2.0, n_points)
    levels = np.linspace(0.0, 1.0, n_points - 1 - n_gaps) ** power
    q = np.quantile(t_all, levels)
    q[-1] = np.nextafter(q[-1], np.inf)  # strictly above the largest threshold: complete graph
    mids = np.zeros(0)
    if n_gaps:
        lo, hi = np.quantile(t_all, [0.001, 0.99])
        inner = t_all[(t_all >= lo) & (t_all <= hi)]
        if inner.size > 1:
            gaps = np.diff(inner)
            top = np.argsort(gaps)[::-1][:n_gaps]
            mids = 0.5 * (inner[top] + inner[top + 1])
    return np.unique(np.concatenate([[0.0], q, mids]))


def _rows_distance(theta: np.ndarray, sq: np.ndarray, rows: np.ndarray) -> np.ndarray:
    D2 = sq[rows, None] + sq[None, :] - 2.0 * (theta[rows] @ theta.T)
    np.maximum(D2, 0.0, out=D2)
    D2[np.arange(rows.size), rows] = 0.0
    return np.sqrt(D2)
