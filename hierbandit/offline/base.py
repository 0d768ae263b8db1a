"""The API every offline algorithm shares: fit once on a logged dataset, then decide.

``fit(data)`` validates the dataset, computes everything into local variables and only then
replaces the fitted state, so a rejected dataset leaves a fitted model exactly as it was.
``decide(user, actions)`` (one test user and action set) and ``decide_batch(users, actions)``
(many, vectorised) validate first and draw random numbers only to break exact ties.

After fitting, every model holds, per user u, the statistics its decision uses: an estimate
``theta_`` (U, d), the inverse design ``Ainv_`` (U, d, d) and the radius ``beta_`` (U,), and
decides argmax_a θ_uᵀa ± β_u‖a‖_{A_u⁻¹} — pessimistic (LCB) for Off-C²LUB/Off-CLUB, optimistic
(UCB) for the adapted online baselines ([OFF] App. E.2). :meth:`OfflineModel.graph` returns the
learned user graph and :meth:`OfflineModel.estimates` the per-user quantities as xarray.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import xarray as xr

from hierbandit._validation import MAX_ABS, _check_finite, as_generator, check_index, check_scalar
from hierbandit.offline._core import argmax_random_ties, lcb_ucb_scores
from hierbandit.offline.dataset import OfflineDataset, as_offline_dataset

__all__ = ["OfflineModel", "UserGraph"]

_DECIDE_CHUNK = 8192


@dataclass(frozen=True, eq=False)
class UserGraph:
    """A learned user graph: who pools data with whom.

    Attributes
    ----------
    adjacency : scipy.sparse.csr_array of bool, shape (U, U)
        ``adjacency[u, v]`` is True when user v's data enter user u's decision statistics
        (no self-loops). Symmetric except for Off-C²LUB with a per-user γ̂ policy, where row u
        is u's own neighbourhood under γ̂(u) (``directed=True``).
    labels : ndarray of int64, shape (U,)
        Cluster labels: the clusters of a cluster-based method, or the (weakly) connected
        components of the graph for Off-C²LUB/Off-CLUB, whose decisions use one-hop
        neighbourhoods rather than components ([OFF] §4.1, App. F.1).
    directed : bool
    """

    adjacency: sp.csr_array
    labels: np.ndarray
    directed: bool = False

    @property
    def n_users(self) -> int:
        return int(self.labels.size)

    @property
    def n_edges(self) -> int:
        """Number of edges (unordered pairs when undirected)."""
        nnz = int(self.adjacency.nnz)
        return nnz if self.directed else nnz // 2

    @property
    def degree(self) -> np.ndarray:
        """Number of neighbours of each user (row sums)."""
        return np.diff(self.adjacency.indptr).astype(np.int64)

    def neighbours(self, user: int) -> np.ndarray:
        """The neighbours of ``user`` (sorted user codes)."""
        u = check_index(user, self.n_users, "user")
        a = self.adjacency
        return np.sort(a.indices[a.indptr[u] : a.indptr[u + 1]]).astype(np.int64)

    def to_xarray(self) -> xr.Dataset:
        """Edge list (dim ``edge``: ``source``, ``target``) and per-user ``label``, ``degree``."""
        coo = self.adjacency.tocoo()
        src, dst = coo.row.astype(np.int64), coo.col.astype(np.int64)
        if not self.directed:
            keep = src < dst
            src, dst = src[keep], dst[keep]
        return xr.Dataset(
            {
                "source": ("edge", src),
                "target": ("edge", dst),
                "label": ("user", self.labels),
                "degree": ("user", self.degree),
            },
            coords={"user": np.arange(self.n_users)},
            attrs={"directed": int(self.directed)},
        )

    def to_dense(self) -> xr.DataArray:
        """The adjacency as a dense boolean DataArray (dims ``user``, ``user_``); small U only."""
        U = self.n_users
        return xr.DataArray(
            self.adjacency.toarray().astype(bool),
            dims=("user", "user_"),
            coords={"user": np.arange(U), "user_": np.arange(U)},
            name="adjacency",
        )


def graph_from_labels(labels: np.ndarray) -> UserGraph:
    """The graph whose edges join users with equal labels (cluster-based methods)."""
    labels = np.asarray(labels, dtype=np.int64)
    U = labels.size
    order = np.argsort(labels, kind="stable")
    rows, cols = [], []
    bounds = np.flatnonzero(np.diff(labels[order])) + 1
    for members in np.split(order, bounds):
        if members.size > 1:
            r = np.repeat(members, members.size)
            c = np.tile(members, members.size)
            keep = r != c
            rows.append(r[keep])
            cols.append(c[keep])
    r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    adj = sp.csr_array((np.ones(r.size, dtype=bool), (r, c)), shape=(U, U))
    return UserGraph(adj, labels)


def graph_from_adjacency(adj: sp.csr_array, directed: bool = False) -> UserGraph:
    """A :class:`UserGraph` whose labels are the weakly connected components of ``adj``."""
    from scipy.sparse.csgraph import connected_components

    adj = sp.csr_array(adj, dtype=bool)
    adj.setdiag(False)
    adj.eliminate_zeros()
    _, labels = connected_components(adj, directed=directed, connection="weak")
    return UserGraph(adj, labels.astype(np.int64), directed)


class OfflineModel(ABC):
    """Base class of the offline algorithms (fit once, then decide).

    Parameters
    ----------
    lam : float, default 0.5
        Ridge regulariser λ ([OFF] App. E.1: λ = 0.5).
    delta : float, default 0.01
        Confidence level δ in the radii β and CI ([OFF] App. E.1: δ = 0.01).
    rng : seed or Generator
        Breaks exact ties in the decision argmax (and drives randomised fitting steps).
    """

    #: −1: pessimistic (LCB) decisions; +1: optimistic (UCB) decisions
    _sign: float = -1.0
    #: name used in tables
    paper_name: str = ""

    def __init__(self, *, lam: float = 0.5, delta: float = 0.01, rng: Any = None) -> None:
        self.lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
        self.delta = check_scalar(delta, "delta", low=0.0, low_inclusive=False)
        if self.delta >= 1.0:
            raise ValueError(f"delta must be < 1, got {self.delta}")
        self.rng = rng
        self._rng = as_generator(rng)
        self._fitted = False

    # ------------------------------------------------------------------ fitting
    def fit(self, data: Any) -> OfflineModel:
        """Fit on a logged dataset (an :class:`OfflineDataset`, a DataFrame or a file path).

        The dataset is validated and every fitted quantity computed before any attribute of the
        model changes; on error the model is left exactly as it was.
        """
        ds = as_offline_dataset(data)
        if ds.n_rows == 0:
            raise ValueError("data has no rows: nothing to fit")
        state = self._fit(ds)
        state.update(
            n_users_=ds.n_users,
            n_features_=ds.n_features,
            counts_=np.array(ds.counts),
            _graph_cache=None,
            _fitted=True,
        )
        self.__dict__.update(state)
        return self

    @abstractmethod
    def _fit(self, ds: OfflineDataset) -> dict[str, Any]:
        """Compute the fitted state (must contain ``theta_``, ``Ainv_``, ``beta_``)."""

    def _check_fitted(self) -> None:
        if not self._fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(data) first")

    # ------------------------------------------------------------------ deciding
    def _check_actions(self, actions: Any, batch: int | None) -> np.ndarray:
        d = self.n_features_
        if isinstance(actions, str | bytes):
            raise TypeError("actions must be numeric")
        arr = np.asarray(actions)
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"actions must be numeric, got dtype {arr.dtype}")
        want = (None, d) if batch is None else (batch, None, d)
        ok = arr.ndim == len(want) and all(
            w is None or w == a for w, a in zip(want, arr.shape, strict=True)
        )
        if not ok:
            shape = tuple("S" if w is None else w for w in want)
            raise ValueError(f"actions must have shape {shape} (d = {d} features), got {arr.shape}")
        if arr.shape[-2] == 0:
            raise ValueError("actions must contain at least one action")
        arr = arr.astype(np.float64)
        _check_finite(arr, "actions", MAX_ABS)
        return arr

    def scores(self, user: int, actions: Any) -> np.ndarray:
        """The decision index θ̃_uᵀa ± β_u‖a‖_{Ã_u⁻¹} of every action (shape (S,))."""
        self._check_fitted()
        u = check_index(user, self.n_users_, "user")
        A = self._check_actions(actions, None)
        return self._scores(np.array([u]), A[None])[0]

    def decide(self, user: int, actions: Any) -> int:
        """Index of the chosen action in ``actions`` (shape (S, d)) for test user ``user``."""
        self._check_fitted()
        u = check_index(user, self.n_users_, "user")
        A = self._check_actions(actions, None)
        return int(argmax_random_ties(self._scores(np.array([u]), A[None]), self._rng)[0])

    def decide_batch(self, users: Any, actions: Any) -> np.ndarray:
        """Chosen action index for each (user, action set); ``actions`` has shape (n, S, d)."""
        self._check_fitted()
        u = np.asarray(users)
        if u.ndim != 1 or (u.size and u.dtype.kind not in "iu"):
            raise TypeError(f"users must be a 1-d array of integer ids, got {u.dtype} {u.shape}")
        u = u.astype(np.int64)
        if u.size and (u.min() < 0 or u.max() >= self.n_users_):
            raise ValueError(f"users must be in [0, {self.n_users_})")
        A = self._check_actions(actions, u.size)
        return self._decide_batch(u, A)

    def _decide_batch(self, users: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Unchecked :meth:`decide_batch` for trusted callers (evaluation loops)."""
        out = np.empty(users.size, dtype=np.int64)
        for c0 in range(0, users.size, _DECIDE_CHUNK):
            c1 = min(c0 + _DECIDE_CHUNK, users.size)
            out[c0:c1] = argmax_random_ties(self._scores(users[c0:c1], actions[c0:c1]), self._rng)
        return out

    def _scores(self, users: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return lcb_ucb_scores(
            self.theta_[users], self.Ainv_[users], self.beta_[users], actions, self._sign
        )

    # ------------------------------------------------------------------ inspection
    def graph(self) -> UserGraph:
        """The learned user graph (computed on first call, then cached)."""
        self._check_fitted()
        if self._graph_cache is None:
            self._graph_cache = self._graph()
        return self._graph_cache

    @abstractmethod
    def _graph(self) -> UserGraph: ...

    def estimates(self) -> xr.Dataset:
        """Per-user fitted quantities: the decision estimate ``theta`` (user, feature), the
        radius ``beta`` and the sample count ``count``, plus model-specific extras."""
        self._check_fitted()
        U, d = self.n_users_, self.n_features_
        data: dict[str, Any] = {
            "theta": (("user", "feature"), np.array(self.theta_)),
            "beta": ("user", np.array(self.beta_)),
            "count": ("user", np.array(self.counts_)),
        }
        data.update(self._extra_estimates())
        return xr.Dataset(
            data,
            coords={"user": np.arange(U), "feature": np.arange(d)},
            attrs={"model": type(self).__name__, **_scalar_params(self.get_params())},
        )

    def _extra_estimates(self) -> dict[str, Any]:
        return {}

    def get_params(self) -> dict[str, Any]:
        """Constructor arguments (scikit-learn style)."""
        params: dict[str, Any] = {}
        for cls in type(self).__mro__:
            if cls is object or "__init__" not in cls.__dict__:
                continue
            for name, p in inspect.signature(cls.__init__).parameters.items():
                if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                    params.setdefault(name, getattr(self, name))
        return params

    def clone(self, rng: Any = "same") -> OfflineModel:
        """An unfitted model with the same configuration (``rng="same"`` reuses the argument)."""
        params = self.get_params()
        if not (isinstance(rng, str) and rng == "same"):
            params["rng"] = rng
        return type(self)(**params)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items() if k != "rng")
        return f"{type(self).__name__}({args})"


def _scalar_params(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        if k == "rng":
            continue
        if isinstance(v, bool):
            out[k] = int(v)
        elif isinstance(v, int | float | str):
            out[k] = v
        elif v is None:
            out[k] = "None"
        else:
            out[k] = repr(v)
    return out
