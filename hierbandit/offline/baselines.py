"""The paper's baselines, adapted to the offline setting ([OFF] App. E.2).

The online methods are run in the ``batch`` adaptation of docs/offline.md ("The baselines"):
per-user statistics (G_u, b_u, N_u) from the whole training set, the method's clustering rule
applied once to the final estimates, everything frozen, and an **optimistic** decision on the
cluster's pooled statistics
("we uniformly augment all compared methods by introducing an upper confidence bound term"):

    argmax_a θ̂_Cᵀa + β‖a‖_{M_C⁻¹},  M_C = λI + Σ_{v∈C} G_v,
    β = √(d·log(1 + N_C/(λd)) + 2·log(2U/δ)) + √λ   (Off-CLUB line 13).

* :class:`LinUCBIndOffline` — every user alone (Abbasi-Yadkori et al. 2011).
* :class:`CLUBOffline` — complete graph, delete (u, v) if ‖θ̂_u − θ̂_v‖ > α₂(F(N_u) + F(N_v)),
  clusters = connected components (Gentile et al. 2014); α₂ = 1.
* :class:`SCLUBOffline` — one initial cluster, then split passes (user vs its cluster's pivot,
  weight and frequency tests) and merge passes (checked clusters, App. E order) until stable
  (Li et al. 2019); α_θ = 1, α_p = 1/√2.
* :class:`DBSCANImprove`, :class:`XMeansImprove` — CLUB with its clustering step replaced by
  DBSCAN (Schubert et al. 2017) or X-means (Pelleg & Moore 2000) on {θ̂_u}. Reconstructions:
  the paper gives no parameters.
* :class:`ARMUL` — vanilla adaptive robust multi-task learning (Duan & Wang 2023): a documented
  reconstruction (see the class).

Users without data are singletons in every clustering baseline (their θ̂ = 0 carries no
information about where they belong).

``CLUBOffline`` and ``SCLUBOffline`` also offer ``mode="stream"`` (docs/offline.md): the training
rows, in a random order drawn from the model's ``rng``, are replayed through the online algorithm's
update and clustering rules (:class:`hierbandit.sclub.CLUB`, :class:`hierbandit.sclub.SCLUB`)
with the logged actions in place of its recommendations ("treating the dataset as a one-shot
interaction stream"); the partition it ends with is frozen and the decision is the same
optimistic one on the cluster's pooled statistics as in ``batch`` mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from hierbandit._extras import require
from hierbandit._validation import check_choice, check_positive_int, check_scalar
from hierbandit.offline._core import (
    beta_radius,
    confidence_F,
    distance_block,
    ridge_solve,
    row_blocks,
)
from hierbandit.offline.base import OfflineModel, UserGraph, graph_from_labels
from hierbandit.offline.dataset import OfflineDataset

__all__ = [
    "ARMUL",
    "CLUBOffline",
    "DBSCANImprove",
    "LinUCBIndOffline",
    "SCLUBOffline",
    "XMeansImprove",
]


class _ClusterModel(OfflineModel):
    """A baseline that partitions users and decides by UCB on pooled cluster statistics."""

    _sign = 1.0

    def _replay(self, ds: OfflineDataset, policy: Any) -> np.ndarray:
        """Replay the rows in a random order through an online clustering ``policy``.

        ``mode="stream"`` of docs/offline.md: its final partition, users without data as
        singletons.
        """
        order = self._rng.permutation(ds.n_rows)
        users, X, y = ds.users[order], ds.X[order], ds.rewards[order]
        for u, x, r in zip(users.tolist(), X, y.tolist(), strict=True):
            policy._update(u, np.ascontiguousarray(x), r)
        return _singletons_for_empty(policy._labels(), ds.counts)

    def _fit(self, ds: OfflineDataset) -> dict[str, Any]:
        G, b, _, n = ds.suffstats()
        theta_hat, _ = ridge_solve(G, b, self.lam)
        labels, extra = self._cluster(ds, G, b, n, theta_hat)
        state = _pooled_state(labels, G, b, n, self.lam, self.delta)
        state.update(theta_hat_=theta_hat, labels_=labels, **extra)
        return state

    def _cluster(
        self, ds: OfflineDataset, G: np.ndarray, b: np.ndarray, n: np.ndarray, theta: np.ndarray
    ) -> tuple[np.ndarray, dict[str, Any]]:
        raise NotImplementedError

    def _graph(self) -> UserGraph:
        return graph_from_labels(self.labels_)

    def _extra_estimates(self) -> dict[str, Any]:
        return {
            "theta_hat": (("user", "feature"), np.array(self.theta_hat_)),
            "cluster": ("user", np.array(self.labels_)),
        }


def _canonical(labels: np.ndarray) -> np.ndarray:
    _, inv = np.unique(labels, return_inverse=True)
    return inv.astype(np.int64)


def _pooled_state(
    labels: np.ndarray, G: np.ndarray, b: np.ndarray, n: np.ndarray, lam: float, delta: float
) -> dict[str, Any]:
    """Cluster sums, θ̂_C, M_C⁻¹ and β_C, spread back to users."""
    U, d = b.shape
    labels = _canonical(labels)
    K = int(labels.max()) + 1 if U else 0
    Gc = np.zeros((K, d * d))
    np.add.at(Gc, labels, G.reshape(U, d * d))
    bc = np.zeros((K, d))
    np.add.at(bc, labels, b)
    Nc = np.bincount(labels, weights=n.astype(np.float64), minlength=K)
    theta_c, Ainv_c = ridge_solve(Gc.reshape(K, d, d), bc, lam)
    beta_c = beta_radius(Nc, np.full(K, lam), d, lam, delta, U)
    return {
        "labels_": labels,
        "theta_": theta_c[labels],
        "Ainv_": Ainv_c[labels],
        "beta_": beta_c[labels],
        "n_clusters_": K,
    }


def _singletons_for_empty(labels: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Give users without data their own cluster."""
    labels = np.array(labels, dtype=np.int64)
    empty = np.flatnonzero(n == 0)
    if empty.size:
        labels[empty] = labels.max(initial=-1) + 1 + np.arange(empty.size)
    return _canonical(labels)


# ---------------------------------------------------------------------- LinUCB-Ind
class LinUCBIndOffline(_ClusterModel):
    """LinUCB_IND: per-user ridge, M_u = λI + G_u, optimistic decision ([OFF] App. E.2).

    Parameters
    ----------
    lam, delta : float, default 0.5, 0.01
    rng : seed or Generator
    """

    paper_name = "LinUCB_IND"

    def __init__(self, *, lam: float = 0.5, delta: float = 0.01, rng: Any = None) -> None:
        super().__init__(lam=lam, delta=delta, rng=rng)

    def _cluster(self, ds, G, b, n, theta):
        return np.arange(ds.n_users, dtype=np.int64), {}


# ---------------------------------------------------------------------- CLUB
def _components_blockwise(theta: np.ndarray, keep_fn) -> np.ndarray:
    """Connected components of the graph {(u, v): keep_fn(D_block, r0, r1)} built block by
    block (memory O(block·U + U)): each block's edges are joined with the current partition."""
    U = theta.shape[0]
    sq = np.einsum("ud,ud->u", theta, theta)
    labels = np.arange(U, dtype=np.int64)
    for r0, r1 in row_blocks(U, U):
        D = distance_block(theta, sq, r0, r1)
        keep = keep_fn(D, r0, r1)
        idx = np.arange(r0, r1)
        keep[idx - r0, idx] = False
        rr, cc = np.nonzero(keep)
        rows = np.concatenate([rr + r0, np.arange(U)])
        cols = np.concatenate([cc, labels])  # link every user to its component's representative
        A = sp.csr_array((np.ones(rows.size, dtype=bool), (rows, cols)), shape=(U, U))
        _, comp = connected_components(A, directed=False)
        # representative = smallest member, so the chain edges stay valid in the next block
        rep = np.full(comp.max() + 1, U, dtype=np.int64)
        np.minimum.at(rep, comp, np.arange(U))
        labels = rep[comp]
    return _canonical(labels)


class CLUBOffline(_ClusterModel):
    """CLUB (Gentile et al. 2014) adapted offline: one deletion pass on the final estimates.

    Start from the complete graph, delete (u, v) if ‖θ̂_u − θ̂_v‖ > α₂(F(N_u) + F(N_v)) with
    F(T) = √((1 + ln(1+T))/(1+T)); clusters are the connected components and data are pooled
    over the whole component; optimistic decision (docs/offline.md, "The baselines").

    Parameters
    ----------
    alpha2 : float, default 1.0
        Edge-deletion scale α₂ (unspecified in the papers; 1 in the SCLUB reference code).
    mode : {"batch", "stream"}, default "batch"
        ``"batch"``: one deletion pass on the final estimates (docs/offline.md). ``"stream"``: the
        rows replayed in a random order through online :class:`~hierbandit.sclub.CLUB` on the
        complete graph, whose edges are deleted as the estimates evolve (a deleted edge never
        comes back); its final components are the clusters.
    lam, delta : float, default 0.5, 0.01
    rng : seed or Generator
    """

    paper_name = "CLUB"

    def __init__(
        self,
        *,
        alpha2: float = 1.0,
        mode: str = "batch",
        lam: float = 0.5,
        delta: float = 0.01,
        rng: Any = None,
    ) -> None:
        super().__init__(lam=lam, delta=delta, rng=rng)
        self.alpha2 = check_scalar(alpha2, "alpha2", low=0.0, low_inclusive=False)
        self.mode = check_choice(mode, ("batch", "stream"), "mode")

    def _cluster(self, ds, G, b, n, theta):
        if self.mode == "stream":
            from hierbandit.sclub.policies import CLUB

            online = CLUB(
                ds.n_users, ds.n_features, alpha_2=self.alpha2, graph="complete", reg=self.lam,
                rng=self._rng,
            )  # fmt: skip
            return self._replay(ds, online), {}
        width = self.alpha2 * confidence_F(n)
        has = n > 0

        def keep(D, r0, r1):
            return (width[r0:r1, None] + width[None, :] >= D) & has[r0:r1, None] & has[None, :]

        labels = _components_blockwise(theta, keep)
        return labels, {}


# ---------------------------------------------------------------------- SCLUB
class SCLUBOffline(_ClusterModel):
    """SCLUB (Li et al. 2019) adapted offline: split/merge passes on final estimates.

    See docs/offline.md, "The baselines".

    One initial cluster with frequencies p̂_u = N_u/τ, τ = N_total. A *split pass* takes every
    cluster's pivot (θ̃^j, T̃^j) = (pooled estimate, sample count) at the start of the pass and
    splits out, as a singleton, each member of a non-singleton cluster with
    ‖θ̂_u − θ̃^j‖ > α_θ(F(N_u) + F(T̃^j)) or a frequency inconsistency; a *merge pass* then
    repeatedly merges the lowest-index cluster with its lowest-index consistent partner
    (‖θ̂^{j₁} − θ̂^{j₂}‖ < α_θ/2·(F(T^{j₁}) + F(T^{j₂})) and ``|p̂^{j₁} − p̂^{j₂}|`` < α_p F(τ),
    ``p̂^j = T^j/(|C^j|τ)``) until none is left. Passes repeat until the partition is stable
    (at most ``max_passes``), or until a partition recurs (the passes can cycle between two
    partitions, each a fixed point of the other's pass). Optimistic decision on cluster
    statistics.

    Parameters
    ----------
    alpha_theta : float, default 1.0
        α_θ (the reference code's value; the theoretical 4R√(d/λ_x) ≈ 55 never splits).
    alpha_p : float, default 1/√2
        α_p; with the paper's pairwise rule it reproduces the reference code's thresholds
        (docs/sclub.md C-17).
    use_frequency : bool, default True
        Apply the frequency tests.
    freq_test : {"pairwise", "cluster_avg"}, default "pairwise"
        Split if ∃ i' ∈ C^j: ``|p̂_u − p̂_{i'}|`` > 2α_p F(τ) (paper), or if
        ``|p̂_u − p̂^j|`` > 2α_p F(τ) (reference code); the threshold is online SCLUB's, so
        ``mode="batch"`` and ``mode="stream"`` apply the same test.
    max_passes : int, default 50
    mode : {"batch", "stream"}, default "batch"
        ``"batch"``: the passes above on the final estimates (docs/offline.md). ``"stream"``: the
        rows replayed in a random order through online :class:`~hierbandit.sclub.SCLUB` (Algorithms
        1–4 with the same ``alpha_theta``, ``alpha_p``, ``use_frequency`` and ``freq_test``); its
        final partition is the clustering (``max_passes`` is unused).
    lam, delta : float, default 0.5, 0.01
    rng : seed or Generator
    """

    paper_name = "SCLUB"

    def __init__(
        self,
        *,
        alpha_theta: float = 1.0,
        alpha_p: float = 2**-0.5,
        use_frequency: bool = True,
        freq_test: str = "pairwise",
        max_passes: int = 50,
        mode: str = "batch",
        lam: float = 0.5,
        delta: float = 0.01,
        rng: Any = None,
    ) -> None:
        super().__init__(lam=lam, delta=delta, rng=rng)
        self.mode = check_choice(mode, ("batch", "stream"), "mode")
        self.alpha_theta = check_scalar(alpha_theta, "alpha_theta", low=0.0, low_inclusive=False)
        self.alpha_p = check_scalar(alpha_p, "alpha_p", low=0.0, low_inclusive=False)
        if not isinstance(use_frequency, bool):
            raise TypeError("use_frequency must be a bool")
        self.use_frequency = use_frequency
        self.freq_test = check_choice(freq_test, ("pairwise", "cluster_avg"), "freq_test")
        self.max_passes = check_positive_int(max_passes, "max_passes")

    def _cluster(self, ds, G, b, n, theta):
        if self.mode == "stream":
            from hierbandit.sclub.policies import SCLUB

            online = SCLUB(
                ds.n_users, ds.n_features, alpha_theta=self.alpha_theta, alpha_p=self.alpha_p,
                use_frequency=self.use_frequency, freq_test=self.freq_test, reg=self.lam,
                rng=self._rng,
            )  # fmt: skip
            return self._replay(ds, online), {"n_passes_": 0}
        U, d = b.shape
        tau = float(n.sum())
        p = n / tau
        Ftau = float(confidence_F(tau))
        Fn = confidence_F(n)
        Gf = G.reshape(U, d * d)
        labels = np.zeros(U, dtype=np.int64)
        seen = {_canonical(labels).tobytes()}
        passes = 0
        for passes in range(1, self.max_passes + 1):  # noqa: B007
            labels = self._split_pass(labels, Gf, b, n, p, theta, Fn, Ftau)
            labels = _canonical(self._merge_pass(labels, Gf, b, n, p, Ftau))
            key = labels.tobytes()
            if key in seen:  # stable, or cycling through partitions already visited
                break
            seen.add(key)
        return labels, {"n_passes_": passes}

    def _cluster_sums(self, labels, Gf, b, n):
        labels = _canonical(labels)
        K = int(labels.max()) + 1
        _U, d = b.shape
        Gc = np.zeros((K, d * d))
        np.add.at(Gc, labels, Gf)
        bc = np.zeros((K, d))
        np.add.at(bc, labels, b)
        Tc = np.bincount(labels, weights=n.astype(np.float64), minlength=K)
        size = np.bincount(labels, minlength=K)
        return labels, Gc, bc, Tc, size

    def _split_pass(self, labels, Gf, b, n, p, theta, Fn, Ftau):
        _U, d = b.shape
        labels, Gc, bc, Tc, size = self._cluster_sums(labels, Gf, b, n)
        pivot, _ = ridge_solve(Gc.reshape(-1, d, d), bc, self.lam)
        dist = np.linalg.norm(theta - pivot[labels], axis=1)
        split = dist > self.alpha_theta * (Fn + confidence_F(Tc)[labels])
        if self.use_frequency:
            K = size.size
            if self.freq_test == "pairwise":
                pmin = np.full(K, np.inf)
                pmax = np.full(K, -np.inf)
                np.minimum.at(pmin, labels, p)
                np.maximum.at(pmax, labels, p)
                gap = np.maximum(p - pmin[labels], pmax[labels] - p)
                split |= gap > 2.0 * self.alpha_p * Ftau
            else:
                pbar = Tc / (size * Tc.sum())
                # the same 2α_p F(τ) as the pairwise rule and online SCLUB (docs/sclub.md C-17)
                split |= np.abs(p - pbar[labels]) > 2.0 * self.alpha_p * Ftau
        split &= size[labels] > 1  # a singleton cannot split
        new = labels.copy()
        idx = np.flatnonzero(split)
        new[idx] = labels.max() + 1 + np.arange(idx.size)
        return new

    def _merge_pass(self, labels, Gf, b, n, p, Ftau):
        _U, d = b.shape
        labels, Gc, bc, Tc, size = self._cluster_sums(labels, Gf, b, n)
        tau = Tc.sum()
        K = size.size
        th, _ = ridge_solve(Gc.reshape(K, d, d), bc, self.lam)
        alive = np.ones(K, dtype=bool)
        F = confidence_F(Tc)
        pc = Tc / (size * tau)

        def consistent(j: int) -> np.ndarray:
            ok = np.linalg.norm(th - th[j], axis=1) < 0.5 * self.alpha_theta * (F + F[j])
            if self.use_frequency:
                ok &= np.abs(pc - pc[j]) < self.alpha_p * Ftau
            ok &= alive
            ok[j] = False
            return ok

        cons = np.zeros((K, K), dtype=bool)
        for j in range(K):
            cons[j] = consistent(j)
        deg = cons.sum(axis=1)
        parent = np.arange(K)
        while True:
            rows = np.flatnonzero(deg > 0)
            if rows.size == 0:
                break
            j1 = int(rows[0])
            j2 = int(np.flatnonzero(cons[j1])[0])
            Gc[j1] += Gc[j2]
            bc[j1] += bc[j2]
            Tc[j1] += Tc[j2]
            size[j1] += size[j2]
            alive[j2] = False
            parent[parent == j2] = j1
            th[j1] = ridge_solve(Gc[j1].reshape(1, d, d), bc[j1][None], self.lam)[0][0]
            F[j1] = confidence_F(Tc[j1])
            pc[j1] = Tc[j1] / (size[j1] * tau)
            # drop j2 and the old row/column of j1, then insert j1's new row/column
            deg -= cons[:, j2]
            deg -= cons[:, j1]
            cons[:, j2] = False
            cons[j2] = False
            deg[j2] = 0
            row = consistent(j1)
            cons[j1] = row
            cons[:, j1] = row
            deg += row
            deg[j1] = int(row.sum())
        return parent[labels]


# ---------------------------------------------------------------------- DBSCAN / X-means
class DBSCANImprove(_ClusterModel):
    """DBSCAN_Improve: CLUB whose clustering step is DBSCAN on {θ̂_u} ([OFF] App. E.2).

    A reconstruction: the paper gives no parameters. Noise points become singletons.

    Parameters
    ----------
    eps : float or "auto", default "auto"
        Neighbourhood radius. ``"auto"``: ``eps_scale`` times the median k-distance (distance
        from each θ̂_u to its (``min_samples − 1``)-th nearest other user), a simple reading of
        the k-distance plot that Schubert et al. (2017) recommend for choosing eps.
    min_samples : int, default 2
    eps_scale : float, default 2.0
    lam, delta : float, default 0.5, 0.01
    rng : seed or Generator
    """

    paper_name = "DBSCAN_Improve"

    def __init__(
        self,
        *,
        eps: float | str = "auto",
        min_samples: int = 2,
        eps_scale: float = 2.0,
        lam: float = 0.5,
        delta: float = 0.01,
        rng: Any = None,
    ) -> None:
        super().__init__(lam=lam, delta=delta, rng=rng)
        if isinstance(eps, str):
            check_choice(eps, ("auto",), "eps")
        else:
            eps = check_scalar(eps, "eps", low=0.0, low_inclusive=False)
        self.eps = eps
        self.min_samples = check_positive_int(min_samples, "min_samples", minimum=1)
        self.eps_scale = check_scalar(eps_scale, "eps_scale", low=0.0, low_inclusive=False)

    def _cluster(self, ds, G, b, n, theta):
        DBSCAN = require("sklearn.cluster", "data", "The DBSCAN baseline").DBSCAN
        from sklearn.neighbors import NearestNeighbors

        active = np.flatnonzero(n > 0)
        labels = np.arange(ds.n_users, dtype=np.int64) + active.size + 1
        eps = self.eps
        if active.size >= 2:
            X = theta[active]
            if eps == "auto":
                k = min(max(self.min_samples, 2), active.size)
                dist, _ = NearestNeighbors(n_neighbors=k).fit(X).kneighbors(X)
                eps = self.eps_scale * float(np.median(dist[:, -1]))
                eps = max(eps, 1e-12)
            lab = DBSCAN(eps=eps, min_samples=self.min_samples).fit(X).labels_
            noise = lab < 0
            lab[noise] = lab.max(initial=-1) + 1 + np.arange(int(noise.sum()))
            labels[active] = lab
        return _singletons_for_empty(labels, n), {"eps_": eps}


def _bic(X: np.ndarray, labels: np.ndarray, centres: np.ndarray) -> float:
    """Bayesian information criterion of a spherical Gaussian k-means model (Pelleg & Moore)."""
    n, d = X.shape
    K = centres.shape[0]
    if n <= K:
        return -np.inf
    sizes = np.bincount(labels, minlength=K).astype(float)
    sse = float(((X - centres[labels]) ** 2).sum())
    var = max(sse / (d * (n - K)), 1e-300)
    nz = sizes[sizes > 0]
    ll = float(
        np.sum(nz * np.log(nz))
        - n * np.log(n)
        - n * d / 2.0 * np.log(2.0 * np.pi * var)
        - d * (n - K) / 2.0
    )
    n_params = (K - 1) + K * d + 1
    return ll - n_params / 2.0 * np.log(n)


def xmeans(
    X: np.ndarray, k_min: int = 2, k_max: int = 20, rng: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """X-means (Pelleg & Moore 2000): k-means from ``k_min`` centres, then each cluster is split
    in two when the split model's BIC (on that cluster's points) beats the one-centre model's;
    repeat until no split improves or ``k_max`` centres. Returns (labels, centres)."""
    KMeans = require("sklearn.cluster", "data", "X-means clustering").KMeans

    gen = np.random.default_rng(rng)
    n = X.shape[0]
    k0 = max(1, min(k_min, n))

    def seed() -> int:
        return int(gen.integers(0, 2**31 - 1))

    km = KMeans(n_clusters=k0, n_init=3, random_state=seed()).fit(X)
    centres, labels = km.cluster_centers_, km.labels_
    while centres.shape[0] < k_max:
        new_centres = []
        split_any = False
        for j in range(centres.shape[0]):
            P = X[labels == j]
            if P.shape[0] < 4 or len(new_centres) + (centres.shape[0] - j) + 1 > k_max:
                new_centres.append(centres[j])
                continue
            one = _bic(P, np.zeros(P.shape[0], dtype=np.int64), P.mean(axis=0, keepdims=True))
            km2 = KMeans(n_clusters=2, n_init=1, random_state=seed()).fit(P)
            two = _bic(P, km2.labels_, km2.cluster_centers_)
            if two > one:
                new_centres.extend(km2.cluster_centers_)
                split_any = True
            else:
                new_centres.append(centres[j])
        if not split_any:
            break
        init = np.asarray(new_centres)[:k_max]
        km = KMeans(n_clusters=init.shape[0], init=init, n_init=1).fit(X)
        centres, labels = km.cluster_centers_, km.labels_
    return labels.astype(np.int64), centres


class XMeansImprove(_ClusterModel):
    """XMeans_Improve: CLUB whose clustering step is X-means on {θ̂_u} ([OFF] App. E.2).

    A reconstruction: k is chosen by BIC in [``k_min``, ``k_max``] = [2, 20] (docs/offline.md,
    "The baselines").

    Parameters
    ----------
    k_min, k_max : int, default 2, 20
    lam, delta : float, default 0.5, 0.01
    rng : seed or Generator
        Seeds the k-means runs.
    """

    paper_name = "XMeans_Improve"

    def __init__(
        self,
        *,
        k_min: int = 2,
        k_max: int = 20,
        lam: float = 0.5,
        delta: float = 0.01,
        rng: Any = None,
    ) -> None:
        super().__init__(lam=lam, delta=delta, rng=rng)
        self.k_min = check_positive_int(k_min, "k_min")
        self.k_max = check_positive_int(k_max, "k_max")
        if self.k_max < self.k_min:
            raise ValueError(f"k_max must be >= k_min, got {self.k_max} < {self.k_min}")

    def _cluster(self, ds, G, b, n, theta):
        active = np.flatnonzero(n > 0)
        labels = np.arange(ds.n_users, dtype=np.int64) + active.size + 1
        if active.size >= 2:
            seed = int(self._rng.integers(0, 2**31 - 1))
            lab, _ = xmeans(theta[active], self.k_min, self.k_max, rng=seed)
            labels[active] = lab
        return _singletons_for_empty(labels, n), {}


# ---------------------------------------------------------------------- ARMUL
class ARMUL(OfflineModel):
    """Vanilla ARMUL (adaptive robust multi-task learning; Duan & Wang 2023), reconstructed.

    Objective (docs/offline.md, "ARMUL (reconstruction)"):

        min_{θ_u, θ̄} Σ_u (N_u/N)·[ 1/(2N_u)·Σ_i (r_u^i − a_u^iᵀθ_u)² + λ_u‖θ_u − θ̄‖₂ ],
        λ_u = c·√(d/N_u),

    from sufficient statistics, started at the per-user ridge estimates and the pooled ridge
    estimate θ̄, and optimised by ``n_iter`` = 10 (sub)gradient steps of learning rate ``eta``
    = 0.01 ([OFF] App. E.1); c is chosen from ``c_grid`` by ``n_folds`` = 2-fold
    cross-validation of the squared prediction error (rows split uniformly at random within
    each user). Decision: optimistic, per-user M_u = λI + G_u.

    ``step="per_task"`` (default) steps each θ_u along the gradient of its own bracket (the
    block-coordinate form); ``step="literal"`` along the gradient of the whole objective, whose
    N_u/N weights make the 10 steps move θ_u by ~1e-5 (ARMUL = LinUCB_IND). θ̄ always takes the
    gradient of the whole objective. Users without data get θ_u = θ̄.

    Parameters
    ----------
    eta : float, default 0.01
    n_iter : int, default 10
    n_folds : int, default 2
    c_grid : sequence of float, default (0.05, 0.1, 0.2, 0.5, 1, 2)
    step : {"per_task", "literal"}, default "per_task"
    lam, delta : float, default 0.5, 0.01
    rng : seed or Generator
        Draws the cross-validation folds.
    """

    paper_name = "ARMUL"
    _sign = 1.0

    def __init__(
        self,
        *,
        eta: float = 0.01,
        n_iter: int = 10,
        n_folds: int = 2,
        c_grid: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0),
        step: str = "per_task",
        lam: float = 0.5,
        delta: float = 0.01,
        rng: Any = None,
    ) -> None:
        super().__init__(lam=lam, delta=delta, rng=rng)
        self.eta = check_scalar(eta, "eta", low=0.0, low_inclusive=False)
        self.n_iter = check_positive_int(n_iter, "n_iter", minimum=0)
        self.n_folds = check_positive_int(n_folds, "n_folds", minimum=2)
        grid = tuple(float(check_scalar(c, "c_grid", low=0.0)) for c in c_grid)
        if not grid:
            raise ValueError("c_grid must not be empty")
        self.c_grid = grid
        self.step = check_choice(step, ("per_task", "literal"), "step")

    def _optimise(self, G, b, n, c):
        U, d = b.shape
        theta, _ = ridge_solve(G, b, self.lam)
        has = n > 0
        N = max(float(n.sum()), 1.0)
        bar = ridge_solve(G.sum(axis=0)[None], b.sum(axis=0)[None], self.lam)[0][0]
        w = n / N
        lam_u = np.zeros(U)
        lam_u[has] = c * np.sqrt(d / n[has])
        nsafe = np.maximum(n, 1).astype(np.float64)
        for _ in range(self.n_iter):
            diff = theta - bar
            norm = np.linalg.norm(diff, axis=1)
            s = np.zeros_like(diff)
            nz = norm > 0
            s[nz] = diff[nz] / norm[nz, None]
            grad_task = (np.einsum("uij,uj->ui", G, theta) - b) / nsafe[:, None]
            grad_task += lam_u[:, None] * s
            if self.step == "literal":
                grad_task *= w[:, None]
            grad_bar = -(w * lam_u) @ s
            theta = theta - self.eta * np.where(has[:, None], grad_task, 0.0)
            bar = bar - self.eta * grad_bar
        theta[~has] = bar
        return theta

    def _fit(self, ds: OfflineDataset) -> dict[str, Any]:
        from hierbandit.offline._core import user_suffstats

        G, b, _, n = ds.suffstats()
        U, d = b.shape
        folds = self._rng.integers(0, self.n_folds, size=ds.n_rows)
        cv = np.zeros(len(self.c_grid))
        for f in range(self.n_folds):
            tr, te = folds != f, folds == f
            sf = user_suffstats(ds.users[tr], ds.X[tr], ds.rewards[tr], U)
            for k, c in enumerate(self.c_grid):
                th = self._optimise(sf.G, sf.b, sf.n, c)
                pred = np.einsum("nd,nd->n", ds.X[te], th[ds.users[te]])
                cv[k] += float(((ds.rewards[te] - pred) ** 2).sum())
        c_best = self.c_grid[int(np.argmin(cv))]
        theta = self._optimise(G, b, n, c_best)
        _, Ainv = ridge_solve(G, b, self.lam)
        beta = beta_radius(n, np.full(U, self.lam), d, self.lam, self.delta, U)
        return {"theta_": theta, "Ainv_": Ainv, "beta_": beta, "c_": c_best, "cv_error_": cv}

    def _graph(self) -> UserGraph:
        return graph_from_labels(np.arange(self.n_users_))
