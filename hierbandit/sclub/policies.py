"""Online clustering of bandits: SCLUB, CLUB, LinUCB-One and LinUCB-Ind.

The setting (Li, Chen, Li & Leung 2019, "Improved Algorithm on Online Clustering of Bandits",
IJCAI; SCLUB below): at every round a user ``i_t`` arrives with a set of ``L`` candidate items
``D_t ⊂ R^d`` (rows of an ``(L, d)`` array); the policy recommends one item and observes a reward
whose mean is ``θ_{i_t}ᵀx``. Users sharing a weight vector form an unknown cluster.

* :class:`SCLUB` — set-based clustering of bandits, SCLUB Algorithms 1–4: phases of 2^s rounds,
  phase-start pivots, checked/unchecked users, Update, Split (weight and frequency tests against
  the pivot) and Merge of checked clusters.
* :class:`CLUB` — graph-based clustering (Gentile, Li & Zappella 2014): a user graph that only
  loses edges; clusters are its connected components.
* :class:`LinUCBOne` — one ridge model for all users; :class:`LinUCBInd` — one per user.

Every policy recommends by the same optimistic index (SCLUB Alg. 1 line 11),

    U(x) = θ̂ᵀx + β(N, τ) · ‖x‖_{S⁻¹},

computed on the statistics of the model serving the user (its cluster, component, the global or
its own model), with ``N`` that model's number of observations and ``τ`` the round. The default
β is the anytime bound of the authors' reference code, β(N, τ) = sqrt(d ln(1 + N/d) + 4 ln τ +
ln 2) + 1 (docs/sclub.md C-18); a float gives a constant β.

API: ``select(user, items) -> int`` and ``update(user, item_features, reward)`` validate every
argument before anything changes; ``_select``/``_update`` are the unchecked versions, and
``_run`` is the compiled loop over a block of pre-drawn rounds that the simulator uses (it calls
the very same compiled step functions, so results are identical to a ``select``/``update`` loop).
``clusters()`` returns the current user → cluster labels as an :class:`xarray.DataArray`.

Departures between the paper and the reference code (docs/sclub.md, rows C-16 to C-26)
are options with the paper's reading as the default; ``SCLUB.reference(...)`` and
``CLUB.reference(...)`` build the reference code's configuration, ``SCLUB.theory(...)`` the
Theorem 1 constants. See ``docs/sclub.md``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import xarray as xr

from hierbandit._labels import Labels, as_label, check_feature_names, labels_arg
from hierbandit._params import ParamsMixin
from hierbandit._validation import (
    MAX_ABS,
    MAX_FEATURE,
    MAX_STATE_ENTRIES,
    _as_float_array,
    _check_finite,
    as_generator,
    check_bool,
    check_choice,
    check_feature_array,
    check_features,
    check_index,
    check_matrix,
    check_positive_int,
    check_regularisation,
    check_scalar,
)
from hierbandit.checkpoint import SharedStateMixin
from hierbandit.sclub.cluster_stats import (
    ClusterStats,
)
from hierbandit.stats.ridge import RidgeStats, ridge_add, suff_add

__all__ = [
    "CLUB",
    "SCLUB",
    "ClusteringPolicy",
    "LinUCBInd",
    "LinUCBOne",
    "anytime_beta",
    "theory_beta",
]

from hierbandit.sclub._kernels import (
    _club_run,
    _club_select,
    _club_update,
    _club_update_rows,
    _component,
    _ridge_run,
    _ridge_select,
    _ridge_update_rows,
    _sclub_run,
    _sclub_select,
    _sclub_update,
    _sclub_update_rows,
    _ucb_rows,
    _within,
)

# ---------------------------------------------------------------------- β helpers


def anytime_beta(n: Any, tau: Any, n_features: int) -> Any:
    """β(N, τ) = sqrt(d ln(1 + N/d) + 4 ln τ + ln 2) + 1 (docs/sclub.md C-18), τ ≥ 1.

    ``n`` (observation counts) and ``tau`` (rounds; below 1 taken as 1) are numbers or arrays
    of finite, non-negative values; anything else raises ``TypeError`` / ``ValueError`` naming
    the argument.
    """
    d = check_positive_int(n_features, "n_features")
    n = _as_float_array(n, "n")
    tau = _as_float_array(tau, "tau")
    for name, arr in (("n", n), ("tau", tau)):
        _check_finite(arr, name, None)
        if np.any(arr < 0):
            raise ValueError(f"{name} must hold non-negative counts, got {arr.min():g}")
    tau = np.maximum(tau, 1.0)
    out = np.sqrt(d * np.log1p(n / d) + 4.0 * np.log(tau) + np.log(2.0)) + 1.0
    return float(out) if out.ndim == 0 else out


def theory_beta(
    n_users: int, n_features: int, horizon: int, *, noise_scale: float = 0.5, n_clusters=None
) -> float:
    """Theorem 1's β = R sqrt(d ln(1 + T/d) + 2 ln(4 m n_u)); ``m`` defaults to ``n_u``
    (an upper bound on the unknown number of clusters, docs/sclub.md C-18)."""
    n_users = check_positive_int(n_users, "n_users")
    d = check_positive_int(n_features, "n_features")
    T = check_positive_int(horizon, "horizon")
    R = check_scalar(noise_scale, "noise_scale", low=0.0, low_inclusive=False)
    m = n_users if n_clusters is None else check_positive_int(n_clusters, "n_clusters")
    return float(R * math.sqrt(d * math.log1p(T / d) + 2.0 * math.log(4.0 * m * n_users)))


def _check_beta(beta: Any) -> float:
    """``"anytime"`` → −1 (the kernels' code for the anytime bound), else a float ≥ 0."""
    if isinstance(beta, str):
        check_choice(beta, ("anytime",), "beta")
        return -1.0
    return check_scalar(beta, "beta", low=0.0)


def _check_every(value: Any, name: str) -> int:
    if value is None:
        return 0
    return check_positive_int(value, name)


# ---------------------------------------------------------------------- base class


class ClusteringPolicy(SharedStateMixin, ParamsMixin):
    """Shared API of the clustering bandits (validated select/update, clusters, clone).

    Thread safety and checkpoints: ``select``, ``update``, ``run``, ``clusters``,
    ``user_stats`` and ``save`` hold the policy's re-entrant lock, so one policy can be shared
    by threads (calls are serialised; the result equals that of the same calls made one after
    another in the order they took the lock). ``save(path)`` writes the full state (user and
    cluster statistics, the partition, pivots, checked flags, the CLUB graph, counters and the
    random-generator states) to netCDF atomically, and ``SCLUB.load(path)`` restores a policy
    that continues exactly (:mod:`hierbandit.checkpoint`). The unchecked ``_select``,
    ``_update`` and ``_run`` take no lock.

    Batches: :meth:`select_batch` scores B requests against the current state in one compiled
    call and :meth:`update_batch` applies B feedback rows (arrays or a DataFrame) in one
    compiled call; both equal the loop of :meth:`select` / :meth:`update` calls in the same
    order bit for bit (decisions, tie draws, splits, merges, edge deletions and periodic
    recomputations included). Users may be named by ids of any kind the package accepts
    (``users=``, integers or strings); the set of users is fixed at construction, because the
    algorithms are defined over it (SCLUB's first cluster holds all ``n_u`` users and its
    frequency tests divide by cluster sizes; CLUB's initial graph is drawn over all users).

    Parameters
    ----------
    n_users : int, optional
        Number of users ``n_u`` (or give ``users``).
    n_features : int, optional
        Item dimension ``d`` (or give ``features``).
    users : sequence of int or str, optional
        Ids of the users, in code order (default ``0 .. n_u-1``). :meth:`select`,
        :meth:`update`, the batch calls and a DataFrame take these ids, and
        :meth:`clusters`/:meth:`user_stats` carry them as the ``user`` coordinate.
        :meth:`run`, the simulator's loop, takes the codes ``0 .. n_u-1``.
    features : sequence of str, optional
        Names of the item features (coordinates of :meth:`user_stats`, and the columns
        :meth:`update_batch` reads from a DataFrame; ``x0 .. x{d-1}`` otherwise).
    beta : "anytime" or float, default "anytime"
        Exploration width: the anytime β(N, τ) of the reference code (default) or a constant
        (for instance :func:`theory_beta`).
    bonus : {"sqrt", "no_sqrt"}, default "sqrt"
        ``"sqrt"`` uses β‖x‖_{S⁻¹} as in SCLUB Alg. 1 line 11; ``"no_sqrt"`` uses β xᵀS⁻¹x as the
        reference code does (C-18).
    reg : float, default 1.0
        Ridge regulariser (S = reg·I + Σxxᵀ; the paper's I), in [1e-6, 1e6]
        (:data:`~hierbandit._validation.MIN_REG`, ``MAX_REG``). Item features must have
        magnitude at most ``MAX_FEATURE`` = 1e6.
    recompute_every : int or None, default 2000
        Exact recomputation period of the rank-one-updated statistics (C-25).
    tie_break : {"random", "first"}, default "random"
        Exact ties in the index are broken uniformly at random (one uniform drawn per selection
        from the policy's own stream) or towards the first item.
    rng : seed or numpy.random.Generator, optional
        Source of the policy's random streams (tie-breaks, random graphs).
    """

    #: number of independent child random streams (the first is the tie-break stream)
    _n_streams = 1
    #: constructor arguments of the reference-code configuration (see :meth:`reference`)
    _REFERENCE: ClassVar[dict[str, Any]] = {"bonus": "no_sqrt"}
    _locked_methods: ClassVar[tuple[str, ...]] = (
        "select",
        "select_batch",
        "update",
        "update_batch",
        "run",
        "clusters",
        "user_stats",
    )
    #: attributes added since checkpoints were first written, with the value an older
    #: checkpoint implies (:mod:`hierbandit._restore` fills them in before checking)
    _checkpoint_added: ClassVar[dict[str, Any]] = {
        "users": lambda p: Labels.range(int(p.n_users), name="user"),
        "features": lambda p: None,
    }

    def __init__(
        self,
        n_users: int | None = None,
        n_features: int | None = None,
        *,
        users: Any = None,
        features: Any = None,
        beta: float | str = "anytime",
        bonus: str = "sqrt",
        reg: float = 1.0,
        recompute_every: int | None = 2000,
        tie_break: str = "random",
        rng: Any = None,
    ) -> None:
        self.users = labels_arg(n_users, users, "n_users", "user", minimum=1)
        self.users.trim()
        n_users = self.users.n
        n_features = _n_features(n_features, features)
        self.features = check_feature_names(features, n_features)
        cells = n_users * n_features**2
        if cells > MAX_STATE_ENTRIES:
            raise ValueError(
                f"n_users × n_features² = {cells:.3g} exceeds {MAX_STATE_ENTRIES:.0e}: the "
                "per-user d×d statistics would not fit in memory"
            )
        self.n_users = n_users
        self.n_features = n_features
        self._beta_const = _check_beta(beta)
        self.beta = beta
        self.bonus = check_choice(bonus, ("sqrt", "no_sqrt"), "bonus")
        self.reg = check_regularisation(reg, "reg")
        self._every = _check_every(recompute_every, "recompute_every")
        self.recompute_every = recompute_every
        self.tie_break = check_choice(tie_break, ("random", "first"), "tie_break")
        self.rng = rng
        self._streams = as_generator(rng).spawn(self._n_streams)
        self._tie_rng = self._streams[0]
        #: number of updates so far; the round being decided is τ = t + 1
        self.t = 0

    # ------------------------------------------------------------------ presets
    @classmethod
    def reference(
        cls, n_users: int | None = None, n_features: int | None = None, **kwargs: Any
    ) -> ClusteringPolicy:
        """The configuration of the authors' reference code (docs/sclub.md, decisions)."""
        params = {**cls._REFERENCE, **kwargs}
        return cls(n_users, n_features, **params)

    # ------------------------------------------------------------------ ids
    def _user_code(self, user: Any) -> int:
        if self.users.kind == "range":
            return check_index(user, self.n_users, "user")
        code = self.users.get(as_label(user, "user"))
        if code < 0:
            raise ValueError(f"user {user!r:.80} is not one of this policy's {self.n_users} users")
        return code

    def _user_codes(self, users: Any) -> np.ndarray:
        if hasattr(users, "to_numpy"):  # a pandas Series
            users = users.to_numpy()
        return self.users.codes(users, "users")

    # ------------------------------------------------------------------ public API
    def _check_items(self, items: Any) -> np.ndarray:
        arr = check_matrix(items, (None, self.n_features), "items", max_abs=MAX_FEATURE)
        if arr.shape[0] == 0:
            raise ValueError("items must contain at least one item")
        return np.ascontiguousarray(arr)

    def select(self, user: Any, items: Any, *, allowed: Any = None) -> int:
        """Index of the item to recommend to ``user`` among ``items`` (shape ``(L, d)``).

        ``allowed`` (optional): a boolean mask of shape ``(L,)``, the items this request may
        receive (at least one); the index refers to ``items``.
        """
        u = self._user_code(user)
        X = self._check_items(items)
        if allowed is None:
            return self._select(u, X)
        mask = _check_mask(allowed, (X.shape[0],), "allowed")[None, :]
        return int(self._select_rows(np.array([u], dtype=np.int64), X[None], mask)[0])

    def select_batch(self, users: Any, items: Any, *, allowed: Any = None) -> np.ndarray:
        """Choose an item for each of B requests in one compiled call.

        Parameters
        ----------
        users : sequence of B user ids
        items : array_like, shape (B, L, d) or (L, d)
            The candidate items of every request, or one item set shared by all of them.
            Requests with fewer candidates are padded to ``L`` rows and their padding masked
            out with ``allowed`` (the returned index then refers to the unpadded list too).
        allowed : array_like of bool, shape (B, L), optional
            The items each request may receive (at least one per request).

        Returns
        -------
        ndarray of int64, shape (B,)
            The index of the chosen item of every request: the same as B calls of
            :meth:`select` in order (nothing is learned between them; the tie draws are taken
            from the policy's stream in the same order).
        """
        codes = self._user_codes(users)
        B = codes.shape[0]
        X = _feature_array(items, "items")
        d = self.n_features
        if X.ndim == 2 and X.shape[1] == d:
            X = X[None]
        elif X.ndim != 3 or X.shape[0] != B or X.shape[2] != d:
            raise ValueError(f"items must have shape ({B}, L, {d}) or (L, {d}), got {X.shape}")
        if X.shape[1] == 0:
            raise ValueError("items must contain at least one item per request")
        mask = None if allowed is None else _check_mask(allowed, (B, X.shape[1]), "allowed")
        return self._select_rows(codes, X, mask)

    def update(self, user: Any, item_features: Any, reward: float) -> None:
        """Record that ``user`` was shown ``item_features`` (shape ``(d,)``) and paid ``reward``."""
        u = self._user_code(user)
        x = check_features(item_features, self.n_features, "item_features")
        y = check_scalar(reward, "reward", max_abs=MAX_ABS)
        self._update(u, x, y)

    def update_batch(self, users: Any, item_features: Any = None, rewards: Any = None) -> None:
        """Apply B feedback rows in one compiled call, as B calls of :meth:`update` in order.

        Either three arrays (``users`` (B,) ids, ``item_features`` (B, d), ``rewards`` (B,)), or
        one pandas DataFrame with columns ``user``, ``reward`` and the item features (the
        names given as ``features=``; ``x0 .. x{d-1}`` otherwise). Every row is checked before
        anything changes: a refused batch leaves the policy bit-identical.
        """
        if item_features is None and rewards is None and hasattr(users, "columns"):
            users, item_features, rewards = self._frame_columns(users)
        codes = self._user_codes(users)
        B = codes.shape[0]
        X = _feature_array(item_features, "item_features")
        if X.shape != (B, self.n_features):
            raise ValueError(
                f"item_features must have shape ({B}, {self.n_features}), got {X.shape}"
            )
        Y = _as_float_array(rewards, "rewards")
        if Y.shape != (B,):
            raise ValueError(f"rewards must have shape ({B},), got {Y.shape}")
        _check_finite(Y, "rewards", MAX_ABS)
        self._update_rows(codes, X, Y)

    def _frame_columns(self, frame: Any) -> tuple[Any, Any, Any]:
        names = (
            list(self.features)
            if self.features is not None
            else [f"x{i}" for i in range(self.n_features)]
        )
        missing = [c for c in ("user", "reward", *names) if c not in frame.columns]
        if missing:
            raise ValueError(f"the DataFrame lacks the columns {missing}")
        return frame["user"].to_numpy(), frame[names].to_numpy(), frame["reward"].to_numpy()

    def _select_rows(self, codes: np.ndarray, items: np.ndarray, mask: np.ndarray | None) -> Any:
        """Unchecked batched selection: one tie draw per request, in order, as ``select``."""
        B, L = codes.shape[0], items.shape[1]
        ties = self._ties(B)
        out = np.empty(B, dtype=np.int64)
        Ainv, theta, counts, slots = self._scoring(codes)
        allow = np.zeros((0, L), dtype=np.bool_) if mask is None else mask
        _ucb_rows(
            Ainv,
            theta,
            counts,
            slots,
            items,
            allow,
            self.t + 1,
            self._beta_const,
            self.bonus == "sqrt",
            ties,
            out,
        )
        return out

    def _tie(self) -> float:
        return float(self._tie_rng.random()) if self.tie_break == "random" else -1.0

    def _ties(self, n: int) -> np.ndarray:
        if self.tie_break == "random":
            return self._tie_rng.random(n)
        return np.full(n, -1.0)

    def run(
        self,
        users: Any,
        items: Any,
        means: Any,
        noise: Any,
        *,
        bernoulli: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Play a block of pre-drawn rounds (validated; the simulator calls :meth:`_run`).

        Parameters
        ----------
        users : array_like of int, shape (T,)
            Arriving users.
        items : array_like, shape (T, L, d)
            Candidate items per round.
        means : array_like, shape (T, L)
            Expected reward of every candidate (θ_{i_t}ᵀx).
        noise : array_like, shape (T,)
            Per-round noise: a uniform on [0, 1) for Bernoulli rewards (reward = 1 when
            ``noise < mean``), or the additive noise of Gaussian rewards.
        bernoulli : bool, default True
            Reward model. Bernoulli rewards need ``means`` in [0, 1] (probabilities) and
            ``noise`` in [0, 1) (the uniforms); otherwise ``ValueError`` naming the array.

        Returns
        -------
        choices : ndarray of int64, shape (T,)
            Recommended item per round.
        n_clusters : ndarray of int64, shape (T,)
            Number of clusters after each round.
        """
        users = np.asarray(users)
        if users.ndim != 1 or (users.size and users.dtype.kind not in "iu"):
            raise ValueError("users must be a 1-d integer array")
        T = users.shape[0]
        if T and (users.min() < 0 or users.max() >= self.n_users):
            raise ValueError(f"users must be in [0, {self.n_users})")
        items = _as_float_array(items, "items")
        if items.ndim != 3 or items.shape[0] != T or items.shape[2] != self.n_features:
            raise ValueError(
                f"items must have shape ({T}, L, {self.n_features}), got {items.shape}"
            )
        if items.shape[1] == 0:
            raise ValueError("items must contain at least one item per round")
        means = _as_float_array(means, "means")
        if means.shape != items.shape[:2]:
            raise ValueError(f"means must have shape {items.shape[:2]}, got {means.shape}")
        noise = _as_float_array(noise, "noise")
        if noise.shape != (T,):
            raise ValueError(f"noise must have shape ({T},), got {noise.shape}")
        check_feature_array(items, "items")
        for name, arr in (("means", means), ("noise", noise)):
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{name} must be finite (no NaN or inf)")
            if arr.size and np.max(np.abs(arr)) > MAX_ABS:
                raise ValueError(f"{name} must have magnitude <= {MAX_ABS:g}")
        if not isinstance(bernoulli, bool | np.bool_):
            raise TypeError("bernoulli must be a bool")
        if bernoulli and means.size and (means.min() < 0.0 or means.max() > 1.0):
            raise ValueError(
                "means must be probabilities in [0, 1] with bernoulli=True (the reward is 1 "
                f"when noise < mean), got values in [{means.min():g}, {means.max():g}]"
            )
        if bernoulli and noise.size and (noise.min() < 0.0 or noise.max() >= 1.0):
            raise ValueError(
                "noise must hold uniforms in [0, 1) with bernoulli=True, got values in "
                f"[{noise.min():g}, {noise.max():g}]"
            )
        return self._run(
            users.astype(np.int64),
            np.ascontiguousarray(items),
            np.ascontiguousarray(means),
            noise,
            bool(bernoulli),
        )

    def _run(
        self,
        users: np.ndarray,
        items: np.ndarray,
        means: np.ndarray,
        noise: np.ndarray,
        bernoulli: bool,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Unchecked compiled loop over pre-drawn rounds; same results as select/update."""
        T = users.shape[0]
        choices = np.empty(T, dtype=np.int64)
        ncl = np.empty(T, dtype=np.int64)
        ties = self._ties(T)
        self._run_kernel(users, items, means, noise, bernoulli, ties, choices, ncl)
        self.t += T
        return choices, ncl

    # ------------------------------------------------------------------ inspection
    def _labels(self) -> np.ndarray:
        raise NotImplementedError

    def clusters(self) -> xr.DataArray:
        """Current clustering: canonical cluster number (0, 1, ... by first user) per user."""
        from hierbandit.stats.partitions import canonical_labels

        return xr.DataArray(
            canonical_labels(self._labels()),
            dims=("user",),
            coords={"user": self.users.to_numpy()},
            name="cluster",
            attrs={"policy": type(self).__name__, "round": self.t},
        )

    @property
    def n_clusters(self) -> int:
        """Number of clusters currently used to serve users."""
        return int(np.unique(self._labels()).size)

    def _user_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def user_stats(self) -> xr.Dataset:
        """Per-user sufficient statistics G = Σxxᵀ, b = Σyx, rr = Σy², n (for the mixture audit)."""
        G, b, q, n = self._user_arrays()
        d = self.n_features
        names = np.arange(d) if self.features is None else np.array(self.features, dtype=object)
        return xr.Dataset(
            {
                "G": (("user", "feature", "feature_"), G.copy()),
                "b": (("user", "feature"), b.copy()),
                "rr": (("user",), q.copy()),
                "n": (("user",), n.copy()),
            },
            coords={
                "user": self.users.to_numpy(),
                "feature": names,
                "feature_": names.copy(),
            },
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_users={self.n_users}, n_features={self.n_features}, "
            f"t={self.t}, n_clusters={self.n_clusters})"
        )

    # ------------------------------------------------------------------ subclasses
    def _select(self, u: int, items: np.ndarray) -> int:
        raise NotImplementedError

    def _update(self, u: int, x: np.ndarray, y: float) -> None:
        raise NotImplementedError

    def _run_kernel(self, users, items, means, noise, bernoulli, ties, choices, ncl) -> None:
        raise NotImplementedError

    def _scoring(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The scoring model of every request: (A⁻¹, θ̂, counts) by slot and the slots."""
        raise NotImplementedError

    def _update_rows(self, codes: np.ndarray, X: np.ndarray, Y: np.ndarray) -> None:
        """Unchecked batched update, rows in order; must advance ``t`` by the row count."""
        raise NotImplementedError


def _n_features(n_features: Any, features: Any) -> int:
    if n_features is None:
        if features is None:
            raise TypeError("give n_features (the item dimension) or features (their names)")
        if isinstance(features, str) or not hasattr(features, "__len__"):
            raise TypeError("features must be a sequence of feature names (str)")
        return check_positive_int(len(features), "n_features")
    return check_positive_int(n_features, "n_features")


def _feature_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a C-contiguous float64 array whose entries are finite with magnitude at
    most ``MAX_FEATURE`` (else the error of :func:`check_feature_array`). A float64 array is
    checked in place, in one compiled pass (nothing keeps it: the kernels read it during the
    call, under the policy's lock)."""
    if isinstance(value, np.ndarray) and value.dtype == np.float64:
        arr = np.ascontiguousarray(value)
    else:
        arr = np.ascontiguousarray(_as_float_array(value, name))
    if not _within(arr.reshape(-1), MAX_FEATURE):
        check_feature_array(arr, name)  # raises, naming the argument
    return arr


def _check_mask(allowed: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``allowed`` as a boolean mask of ``shape`` that allows at least one item per row."""
    mask = np.asarray(allowed)
    if mask.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean mask, got dtype {mask.dtype}")
    if mask.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {mask.shape}")
    empty = ~mask.any(axis=-1)
    if np.any(empty):
        where = f"[{int(np.flatnonzero(empty)[0])}]" if mask.ndim == 2 else ""
        raise ValueError(f"{name}{where} allows no item")
    return np.ascontiguousarray(mask)


# ---------------------------------------------------------------------- LinUCB


class _RidgeLinUCB(ClusteringPolicy):
    _one = False

    def __init__(
        self,
        n_users: int | None = None,
        n_features: int | None = None,
        *,
        users: Any = None,
        features: Any = None,
        beta: float | str = "anytime",
        bonus: str = "sqrt",
        reg: float = 1.0,
        recompute_every: int | None = 2000,
        tie_break: str = "random",
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_users,
            n_features,
            users=users,
            features=features,
            beta=beta,
            bonus=bonus,
            reg=reg,
            recompute_every=recompute_every,
            tie_break=tie_break,
            rng=rng,
        )
        self.stats = RidgeStats(
            1 if self._one else self.n_users,
            self.n_features,
            self.reg,
            recompute_every=recompute_every,
        )
        s = self.stats
        self._st = (s.G, s.b, s.q, s.n, s.Ainv, s.theta)
        # per-user data for the audit (LinUCB-One pools everything in one model)
        if self._one:
            U, d = self.n_users, self.n_features
            self._pu = (np.zeros((U, d, d)), np.zeros((U, d)), np.zeros(U), np.zeros(U, np.int64))
        else:
            self._pu = (s.G, s.b, s.q, s.n)

    def _select(self, u: int, items: np.ndarray) -> int:
        slot = 0 if self._one else u
        return int(
            _ridge_select(
                self._st,
                self._beta_const,
                self.bonus == "sqrt",
                slot,
                items,
                self.t + 1,
                self._tie(),
            )
        )

    def _update(self, u: int, x: np.ndarray, y: float) -> None:
        slot = 0 if self._one else u
        ridge_add(*self._st, self.reg, slot, x, y, self._every)
        if self._one:
            suff_add(*self._pu, u, x, y)
        self.t += 1

    def _scoring(self, codes):
        _G, _b, _q, n, Ainv, theta = self._st
        slots = np.zeros_like(codes) if self._one else codes
        return Ainv, theta, n, slots

    def _update_rows(self, codes, X, Y) -> None:
        _ridge_update_rows(self._st, self._pu, self.reg, self._every, self._one, codes, X, Y)
        self.t += codes.shape[0]

    def _run_kernel(self, users, items, means, noise, bernoulli, ties, choices, ncl) -> None:
        _ridge_run(
            self._st,
            self._pu,
            self.reg,
            self._every,
            self._beta_const,
            self.bonus == "sqrt",
            self._one,
            users,
            items,
            means,
            noise,
            bernoulli,
            ties,
            self.t,
            choices,
            ncl,
        )

    def _user_arrays(self):
        return self._pu


class LinUCBOne(_RidgeLinUCB):
    """LinUCB-One: a single ridge model shared by all users (SCLUB §5's baseline).

    Parameters are those of :class:`ClusteringPolicy`. ``clusters()`` puts every user in one
    cluster.
    """

    _one = True

    def _labels(self) -> np.ndarray:
        return np.zeros(self.n_users, dtype=np.int64)


class LinUCBInd(_RidgeLinUCB):
    """LinUCB-Ind: an independent ridge model per user (SCLUB §5's baseline).

    Parameters are those of :class:`ClusteringPolicy`. ``clusters()`` puts every user alone.
    """

    def _labels(self) -> np.ndarray:
        return np.arange(self.n_users, dtype=np.int64)


# ---------------------------------------------------------------------- SCLUB


class SCLUB(ClusteringPolicy):
    """Set-based clustering of bandits (Li, Chen, Li & Leung 2019, Algorithms 1–4).

    Clusters are sets of users with pooled statistics S^j = I + Σ_{i∈C^j}(S_i − I) (kept by
    :class:`~hierbandit.sclub.cluster_stats.ClusterStats`). Rounds are grouped in phases
    s = 1, 2, ... of 2^s rounds (τ = 2^s − 2 + t). At a phase start every user is unchecked and
    every cluster's pivot (θ̃^j, T̃^j) is frozen. Each round: recommend with the cluster's index
    (line 11), Update user and cluster (Alg. 2), Split the user out of its cluster if
    ‖θ̂_i − θ̃^j‖ > α_θ(F(T_i) + F(T̃^j)) or some member's frequency differs by more than
    2α_p F(τ) (Alg. 3), mark the user checked, and Merge checked clusters with
    ‖θ̂^{j1} − θ̂^{j2}‖ < α_θ/2 (F(T^{j1}) + F(T^{j2})) and ``|p̂^{j1} − p̂^{j2}|`` < α_p F(τ)
    (Alg. 4).

    Parameters
    ----------
    n_users, n_features
        ``n_u`` and ``d``.
    alpha_theta : float, default 1.0
        α_θ. Theorem 1's 4R sqrt(d/λ_x) (about 55 on the paper's data) never splits within
        10⁶ rounds; the default is the reference code's constant (C-17); see :meth:`theory`.
    alpha_p : float, default 1/sqrt(2)
        α_p in the paper's parametrisation (split threshold 2α_p F(τ), merge threshold
        α_p F(τ)); 1/√2 gives the reference code's √2·F and √2·F/2 (C-17).
    freq_test : {"pairwise", "cluster_avg"}, default "pairwise"
        Split frequency test against every other member (paper) or against the cluster's
        average frequency ``T^j/(|C^j|τ)`` (reference code).
    use_frequency : bool, default True
        ``False`` drops both frequency tests (B4.3).
    pivot : {"phase_start", "current"}, default "phase_start"
        Split against the phase-start pivot (paper; clusters created mid-phase get their pivot at
        creation, C-19) or against the cluster's current estimate (reference code).
    uncheck : {"phase", "round"}, default "phase"
        Uncheck every user once per phase (paper) or before every round (reference code, where
        merges then essentially never fire; C-21).
    merge_scan : {"current", "all"}, default "current"
        Merge the current user's cluster with the lowest-index consistent checked cluster until
        none is left (App. E, C-22) or scan every pair of checked clusters j1 < j2 (reference
        code; ``O(|J|²)`` per round).
    double_count_split : bool, default False
        Reproduce an aliasing in the reference code: a user split into a new cluster shares its
        Gram matrix and moment vector with that cluster (the same array), so each later
        observation of the user is added twice to both — the row (x, y) enters as (√2x, √2y)
        while T_i grows by one — until the cluster is merged. This halves the singleton's
        exploration bonus; it is on in :meth:`reference` only (see ``docs/sclub.md``).
    beta, bonus, reg, recompute_every, tie_break, rng
        See :class:`ClusteringPolicy`.
    user_recompute_every : int or None, default 10_000
        Exact recomputation period of each user's inverse.

    Examples
    --------
    >>> import numpy as np
    >>> pol = SCLUB(n_users=4, n_features=3, rng=0)
    >>> items = np.eye(3)
    >>> k = pol.select(0, items); pol.update(0, items[k], 1.0)
    >>> pol.n_clusters
    1
    """

    _REFERENCE: ClassVar[dict[str, Any]] = {
        "alpha_theta": 1.0,
        "alpha_p": 1.0 / math.sqrt(2.0),
        "freq_test": "cluster_avg",
        "pivot": "current",
        "uncheck": "round",
        "merge_scan": "all",
        "double_count_split": True,
        "bonus": "no_sqrt",
        "beta": "anytime",
    }

    def __init__(
        self,
        n_users: int | None = None,
        n_features: int | None = None,
        *,
        users: Any = None,
        features: Any = None,
        alpha_theta: float = 1.0,
        alpha_p: float = 1.0 / math.sqrt(2.0),
        freq_test: str = "pairwise",
        use_frequency: bool = True,
        pivot: str = "phase_start",
        uncheck: str = "phase",
        merge_scan: str = "current",
        double_count_split: bool = False,
        beta: float | str = "anytime",
        bonus: str = "sqrt",
        reg: float = 1.0,
        recompute_every: int | None = 2000,
        user_recompute_every: int | None = 10_000,
        tie_break: str = "random",
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_users,
            n_features,
            users=users,
            features=features,
            beta=beta,
            bonus=bonus,
            reg=reg,
            recompute_every=recompute_every,
            tie_break=tie_break,
            rng=rng,
        )
        self.double_count_split = check_bool(double_count_split, "double_count_split")
        self.alpha_theta = check_scalar(alpha_theta, "alpha_theta", low=0.0, low_inclusive=False)
        self.alpha_p = check_scalar(alpha_p, "alpha_p", low=0.0, low_inclusive=False)
        self.freq_test = check_choice(freq_test, ("pairwise", "cluster_avg"), "freq_test")
        self.use_frequency = check_bool(use_frequency, "use_frequency")
        self.pivot = check_choice(pivot, ("phase_start", "current"), "pivot")
        self.uncheck = check_choice(uncheck, ("phase", "round"), "uncheck")
        self.merge_scan = check_choice(merge_scan, ("current", "all"), "merge_scan")
        uevery = _check_every(user_recompute_every, "user_recompute_every")
        self.user_recompute_every = user_recompute_every

        U, d = self.n_users, self.n_features
        self.stats = ClusterStats(
            U,
            d,
            self.reg,
            recompute_every=recompute_every,
            user_recompute_every=user_recompute_every,
        )
        #: phase-start pivots θ̃^j, T̃^j per cluster slot
        self.pivot_theta = np.zeros((U, d))
        self.pivot_count = np.zeros(U, dtype=np.int64)
        self._cstamp = np.zeros(U, dtype=np.int64)
        self._nchk = np.zeros(U, dtype=np.int64)
        self._tmin = np.zeros(U, dtype=np.int64)
        self._tmax = np.zeros(U, dtype=np.int64)
        self._nmin = np.zeros(U, dtype=np.int64)
        self._nmin[0] = U
        self._alias = np.zeros(U, dtype=np.bool_)
        # sm[0] = epoch (unchecking increments it), sm[1:] = epoch at which each user was checked
        self._sm = np.zeros(U + 1, dtype=np.int64)
        self._sm[1:] = -1
        freq = 0 if not self.use_frequency else (1 if self.freq_test == "pairwise" else 2)
        self._ip = np.array(
            [
                freq,
                0 if self.pivot == "phase_start" else 1,
                0 if self.uncheck == "phase" else 1,
                0 if self.merge_scan == "current" else 1,
                uevery,
                self._every,
                1 if self.bonus == "sqrt" else 0,
                1 if self.double_count_split else 0,
            ],
            dtype=np.int64,
        )
        self._fp = np.array([self.alpha_theta, self.alpha_p, self._beta_const])
        self._X = (
            self.pivot_theta,
            self.pivot_count,
            self._cstamp,
            self._nchk,
            self._tmin,
            self._tmax,
            self._nmin,
            self._alias,
        )
        # F(T^j) (F(0) = 1) and θ̂^j[:4] per slot
        self._XF = (np.ones(U), np.zeros((U, min(4, d))))
        self._st = self.stats._state()

    @classmethod
    def theory(
        cls,
        n_users: int | None = None,
        n_features: int | None = None,
        *,
        horizon: int = 2**20 - 1,
        noise_scale: float = 0.5,
        lambda_x: float | None = None,
        **kwargs: Any,
    ) -> SCLUB:
        """Theorem 1's constants: α_θ = 4R sqrt(d/λ_x), α_p = 2, β = :func:`theory_beta`.

        ``lambda_x`` defaults to 1/(2(d − 1)), the value for the paper's items (Eq. 3);
        ``noise_scale`` R = 1/2 suits Bernoulli rewards. With these values SCLUB practically
        never splits (C-17); provided for completeness.
        """
        n_u = len(labels_arg(n_users, kwargs.get("users"), "n_users", "user", minimum=1))
        d = _n_features(n_features, kwargs.get("features"))
        if lambda_x is None:
            lambda_x = 1.0 / (2.0 * max(d - 1, 1))
        lambda_x = check_scalar(lambda_x, "lambda_x", low=0.0, low_inclusive=False)
        R = check_scalar(noise_scale, "noise_scale", low=0.0, low_inclusive=False)
        params = {
            "alpha_theta": 4.0 * R * math.sqrt(d / lambda_x),
            "alpha_p": 2.0,
            "beta": theory_beta(n_u, d, horizon, noise_scale=R),
            **kwargs,
        }
        return cls(n_users, n_features, **params)

    def _labels(self) -> np.ndarray:
        return self.stats.labels

    @property
    def n_clusters(self) -> int:
        return self.stats.n_clusters

    @property
    def checked(self) -> np.ndarray:
        """Whether each user has been checked in the current phase (bool, shape (n_users,))."""
        return self._sm[1:] == self._sm[0]

    def _select(self, u: int, items: np.ndarray) -> int:
        U, C, L = self._st
        return int(_sclub_select(U, C, L, self._fp, self._ip, u, items, self.t + 1, self._tie()))

    def _update(self, u: int, x: np.ndarray, y: float) -> None:
        U, C, L = self._st
        _sclub_update(
            U, C, L, self._X, self._XF, self._sm, self._fp, self._ip, self.reg, u, x, y, self.t + 1
        )
        self.t += 1

    def _scoring(self, codes):
        _U, C, L = self._st
        return C[4], C[5], C[3], L[0][codes]

    def _update_rows(self, codes, X, Y) -> None:
        U, C, L = self._st
        _sclub_update_rows(
            U, C, L, self._X, self._XF, self._sm, self._fp, self._ip, self.reg, codes, X, Y, self.t
        )
        self.t += codes.shape[0]

    def _run_kernel(self, users, items, means, noise, bernoulli, ties, choices, ncl) -> None:
        U, C, L = self._st
        _sclub_run(
            U,
            C,
            L,
            self._X,
            self._XF,
            self._sm,
            self._fp,
            self._ip,
            self.reg,
            users,
            items,
            means,
            noise,
            bernoulli,
            ties,
            self.t,
            choices,
            ncl,
        )

    def _user_arrays(self):
        s = self.stats.users
        return s.G, s.b, s.q, s.n


# ---------------------------------------------------------------------- CLUB


class CLUB(ClusteringPolicy):
    """Graph-based clustering of bandits (Gentile, Li & Zappella 2014), as compared in SCLUB §5.

    Users are the nodes of a graph that only loses edges. After each update of user ``i`` every
    edge (i, ℓ) with ‖θ̂_i − θ̂_ℓ‖ > α₂(F(T_i) + F(T_ℓ)) is deleted; the clusters are the
    connected components, whose pooled statistics S = I + Σ(S_i − I) serve the recommendation.
    Only the component of ``i`` can split; it is re-explored by a breadth-first search over a
    bitset adjacency matrix.

    Parameters
    ----------
    n_users, n_features
        ``n_u`` and ``d``.
    alpha_2 : float, default 1.0
        Edge-deletion scale α₂ (the reference code's value; docs/sclub.md, "CLUB").
    graph : {"erdos_renyi", "complete"}, default "erdos_renyi"
        Initial graph: Erdős–Rényi G(n_u, p), connected with high probability, as in the
        experiments of both CLUB papers and the reference code; or the complete graph. The
        initial clusters are its connected components.
    edge_probability : float, optional
        p of the random graph; default 3 ln(n_u)/n_u (the reference code's ``edge_probability``).
    beta, bonus, reg, recompute_every, tie_break, rng
        See :class:`ClusteringPolicy`. The random graph is drawn from the policy's second stream.
    user_recompute_every : int or None, default 10_000
        Exact recomputation period of each user's inverse.
    """

    _n_streams = 2
    _REFERENCE: ClassVar[dict[str, Any]] = {
        "alpha_2": 1.0,
        "graph": "erdos_renyi",
        "bonus": "no_sqrt",
        "beta": "anytime",
    }

    def __init__(
        self,
        n_users: int | None = None,
        n_features: int | None = None,
        *,
        users: Any = None,
        features: Any = None,
        alpha_2: float = 1.0,
        graph: str = "erdos_renyi",
        edge_probability: float | None = None,
        beta: float | str = "anytime",
        bonus: str = "sqrt",
        reg: float = 1.0,
        recompute_every: int | None = 2000,
        user_recompute_every: int | None = 10_000,
        tie_break: str = "random",
        rng: Any = None,
    ) -> None:
        super().__init__(
            n_users,
            n_features,
            users=users,
            features=features,
            beta=beta,
            bonus=bonus,
            reg=reg,
            recompute_every=recompute_every,
            tie_break=tie_break,
            rng=rng,
        )
        self.alpha_2 = check_scalar(alpha_2, "alpha_2", low=0.0, low_inclusive=False)
        self.graph = check_choice(graph, ("complete", "erdos_renyi"), "graph")
        if edge_probability is not None:
            edge_probability = check_scalar(edge_probability, "edge_probability", low=0.0, high=1.0)
        self.edge_probability = edge_probability
        self._uevery = _check_every(user_recompute_every, "user_recompute_every")
        self.user_recompute_every = user_recompute_every
        U = self.n_users
        W = (U + 63) // 64
        if U * W > MAX_STATE_ENTRIES:
            raise ValueError(
                f"n_users = {U} needs a {U}×{U} graph of {U * W:.3g} 64-bit words, more than "
                f"{MAX_STATE_ENTRIES:.0e}"
            )
        self.adjacency = np.zeros((U, W), dtype=np.uint64)
        if self.graph == "complete":
            full = np.full(W, np.iinfo(np.uint64).max, dtype=np.uint64)
            if U % 64:
                full[-1] = np.uint64((1 << (U % 64)) - 1)
            self.adjacency[:] = full
            idx = np.arange(U)
            self.adjacency[idx, idx >> 6] &= ~(np.uint64(1) << (idx & 63).astype(np.uint64))
        else:
            p = (
                min(1.0, 3.0 * math.log(U) / U)
                if self.edge_probability is None
                else self.edge_probability
            )
            g = self._streams[1]
            one = np.uint64(1)
            for i in range(U - 1):  # edge (i, j), j > i, with probability p; O(edges) memory
                js = i + 1 + np.flatnonzero(g.random(U - i - 1) < p)
                if js.size:
                    bits = np.left_shift(one, (js & 63).astype(np.uint64))
                    np.bitwise_or.at(self.adjacency[i], js >> 6, bits)
                    self.adjacency[js, i >> 6] |= one << np.uint64(i & 63)
        self.stats = ClusterStats(
            U,
            self.n_features,
            self.reg,
            labels=_components(self.adjacency),
            recompute_every=recompute_every,
            user_recompute_every=user_recompute_every,
        )
        self._UF = (np.ones(U),)  # F(T_i) per user (F(0) = 1)
        self._st = self.stats._state()

    def edges(self) -> np.ndarray:
        """Current adjacency matrix as a dense boolean array (n_users, n_users)."""
        bits = np.unpackbits(self.adjacency.view(np.uint8), axis=1, bitorder="little")
        return bits[:, : self.n_users].astype(bool)

    @property
    def n_edges(self) -> int:
        """Number of undirected edges left."""
        return int(np.unpackbits(self.adjacency.view(np.uint8)).sum()) // 2

    def _labels(self) -> np.ndarray:
        return self.stats.labels

    @property
    def n_clusters(self) -> int:
        return self.stats.n_clusters

    def _select(self, u: int, items: np.ndarray) -> int:
        U, C, L = self._st
        return int(
            _club_select(
                U, C, L, self._beta_const, self.bonus == "sqrt", u, items, self.t + 1, self._tie()
            )
        )

    def _update(self, u: int, x: np.ndarray, y: float) -> None:
        U, C, L = self._st
        _club_update(
            U,
            C,
            L,
            self.adjacency,
            self._UF,
            self.alpha_2,
            self.reg,
            self._uevery,
            self._every,
            u,
            x,
            y,
        )
        self.t += 1

    def _scoring(self, codes):
        _U, C, L = self._st
        return C[4], C[5], C[3], L[0][codes]

    def _update_rows(self, codes, X, Y) -> None:
        U, C, L = self._st
        _club_update_rows(
            U,
            C,
            L,
            self.adjacency,
            self._UF,
            self.alpha_2,
            self.reg,
            self._uevery,
            self._every,
            codes,
            X,
            Y,
        )
        self.t += codes.shape[0]

    def _run_kernel(self, users, items, means, noise, bernoulli, ties, choices, ncl) -> None:
        U, C, L = self._st
        _club_run(
            U,
            C,
            L,
            self.adjacency,
            self._UF,
            self.alpha_2,
            self.reg,
            self._uevery,
            self._every,
            self._beta_const,
            self.bonus == "sqrt",
            users,
            items,
            means,
            noise,
            bernoulli,
            ties,
            self.t,
            choices,
            ncl,
        )

    def _user_arrays(self):
        s = self.stats.users
        return s.G, s.b, s.q, s.n


def _components(adjacency: np.ndarray) -> np.ndarray:
    """Connected-component labels of a bitset graph."""
    n = adjacency.shape[0]
    visited = np.zeros(adjacency.shape[1], dtype=np.uint64)
    queue = np.empty(n, dtype=np.int64)
    labels = np.full(n, -1, dtype=np.int64)
    k = 0
    for v in range(n):
        if labels[v] >= 0:
            continue
        cnt = _component(adjacency, v, visited, queue)
        labels[queue[:cnt]] = k
        k += 1
    return labels
