"""The API every online policy shares.

``select(instance, context) -> arm`` and ``update(instance, context, arm, reward)`` validate their
arguments and then call the unchecked ``_select``/``_update`` that subclasses implement (the
simulation loop calls those directly, since environment data are trusted). ``posterior()`` and
``hyperparameters()`` return :class:`xarray.Dataset` objects with named dimensions.

Thread safety: ``select``, ``update``, ``posterior``, ``hyperparameters`` and ``save`` hold the
policy's re-entrant lock, so one policy can be shared by threads serving requests concurrently;
the calls are serialised, and the final statistics equal those of some sequential order of the
updates. The unchecked ``_select``/``_update`` take no lock (they are for single-threaded
simulation loops).

Checkpoints: ``save(path)`` writes the policy's full state (statistics, hyperparameters, counters
and random-generator states) to netCDF atomically; ``Policy.load(path)`` restores a policy that
continues exactly as the original would have (:mod:`hierbandit.checkpoint`).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import xarray as xr

from hierbandit._labels import Labels, as_label
from hierbandit._labels import check_feature_names as _check_feature_names
from hierbandit._labels import labels_arg as _labels_arg
from hierbandit._params import ParamsMixin
from hierbandit._validation import (
    MAX_ABS,
    MAX_STATE_ENTRIES,
    _as_float_array,
    _check_finite,
    as_generator,
    check_bool,
    check_choice,
    check_feature_array,
    check_features,
    check_index,
    check_positive_int,
    check_scalar,
)
from hierbandit.checkpoint import SharedStateMixin
from hierbandit.stats.choice import choice_probabilities, chosen_probability

__all__ = ["Policy", "SharedStateMixin", "hyperparameter_dataset", "posterior_dataset"]


def _coords(n_arms: int, n_instances: int | None, n_features: int) -> dict[str, np.ndarray]:
    coords = {
        "arm": np.arange(n_arms),
        "feature": np.arange(n_features),
        "feature_": np.arange(n_features),
    }
    if n_instances is not None:
        coords["instance"] = np.arange(n_instances)
    return coords


def posterior_dataset(
    mean: np.ndarray, cov: np.ndarray, *, coords: dict[str, Any] | None = None, **attrs: Any
) -> xr.Dataset:
    """Wrap ``mean`` (arm, instance, feature) and ``cov`` ``(arm, instance, feature, feature_)``.

    ``coords`` overrides the default integer coordinates (labels of arms, instances and
    features, :meth:`Policy.coords`)."""
    K, N, d = mean.shape
    return xr.Dataset(
        {
            "mean": (("arm", "instance", "feature"), np.array(mean, dtype=float)),
            "cov": (("arm", "instance", "feature", "feature_"), np.array(cov, dtype=float)),
        },
        coords=_coords(K, N, d) if coords is None else coords,
        attrs=attrs,
    )


def hyperparameter_dataset(
    Sigma: np.ndarray,
    sigma2: np.ndarray,
    extra: dict[str, Any] | None = None,
    *,
    coords: dict[str, Any] | None = None,
    **attrs: Any,
) -> xr.Dataset:
    """Wrap ``Sigma`` ``(arm, feature, feature_)`` and ``sigma2`` (arm), plus per-arm extras.

    ``extra`` maps a name to either an array with a leading arm axis (shape ``(K,)`` or
    ``(K, d)``) or a ``(dims, values)`` tuple. ``coords`` as in :func:`posterior_dataset`
    (its ``instance`` entry is ignored).
    """
    K, d, _ = Sigma.shape
    data: dict[str, Any] = {
        "Sigma": (("arm", "feature", "feature_"), np.array(Sigma, dtype=float)),
        "sigma2": (("arm",), np.array(sigma2, dtype=float)),
    }
    for name, value in (extra or {}).items():
        if isinstance(value, tuple):
            data[name] = value
        else:
            value = np.asarray(value)
            dims = ("arm", "feature", "feature_")[: value.ndim]
            data[name] = (dims, value)
    if coords is None:
        coords = _coords(K, None, d)
    else:
        coords = {k: v for k, v in coords.items() if k != "instance"}
    return xr.Dataset(data, coords=coords, attrs=attrs)


#: Largest number of entries of the per-(instance, arm) d×d statistics a policy may allocate
#: (10⁸ float64 values are 800 MB per array).


class Policy(SharedStateMixin, ParamsMixin, ABC):
    """Base class of the online policies.

    Parameters
    ----------
    n_instances, n_arms, n_features
        Number of bandit instances (users, tasks), arms shared by every instance, and context
        dimension.
    instances, arms : sequence of int or str, optional
        Ids of the instances and the arms (user ids, item names), in code order; by default the
        integers ``0 .. n-1``. :meth:`select` then takes and returns these ids, and
        :meth:`posterior`/:meth:`hyperparameters` carry them as coordinates.
    features : sequence of str, optional
        Names of the context features (coordinates, and the columns :meth:`update_batch` reads
        from a DataFrame).
    grow : bool, optional
        Accept instance ids the policy has not seen (they start from the shared posterior and
        take state at their first feedback). Default: when ``n_instances`` is None. Only
        policies whose state can grow support it (EbmTS/EbmUCB).
    rng
        Seed or :class:`numpy.random.Generator`. Internal randomness (posterior draws,
        tie-breaks, resampling) is drawn from independent child streams of it.
    tie_break
        ``"random"`` (default) breaks ties in the argmax uniformly at random; ``"first"`` takes the
        lowest arm index.
    """

    #: number of independent child random streams a subclass needs (tie-breaks use the first)
    _n_streams = 1
    #: whether the per-instance state can grow (``grow=True``); a subclass that says so
    #: implements :meth:`_grow`
    _can_grow = False
    # the read-outs of a subclass hold the policy lock too (see the module docstring);
    # select/update validate outside the lock and take it themselves
    _locked_methods: ClassVar[tuple[str, ...]] = ("posterior", "hyperparameters")
    #: attributes added since checkpoints were first written, with the value an older
    #: checkpoint implies (:mod:`hierbandit._restore` fills them in before checking)
    _checkpoint_added: ClassVar[dict[str, Any]] = {
        "instances": lambda p: Labels.range(int(p.n_instances), name="instance"),
        "arms": lambda p: Labels.range(int(p.n_arms), name="arm"),
        "features": lambda p: None,
        "grow": lambda p: False,
    }

    def __init__(
        self,
        n_instances: int | None,
        n_arms: int | None,
        n_features: int,
        *,
        instances: Any = None,
        arms: Any = None,
        features: Any = None,
        grow: bool | None = None,
        tie_break: str = "random",
        rng: Any = None,
    ) -> None:
        self.grow = (n_instances is None) if grow is None else check_bool(grow, "grow")
        if self.grow and not self._can_grow:
            raise ValueError(
                f"{type(self).__name__} keeps a fixed set of instances: give n_instances "
                "(EbmTS and EbmUCB accept new instance ids)"
            )
        self.n_features = check_positive_int(n_features, "n_features")
        if n_instances is None and instances is None:
            instances = []
        self.instances = _labels_arg(
            n_instances, instances, "n_instances", "instance", minimum=0 if self.grow else 1
        )
        self.arms = _labels_arg(n_arms, arms, "n_arms", "arm", minimum=1)
        self.n_instances = self.instances.n
        self.n_arms = self.arms.n
        self.features = _check_feature_names(features, self.n_features)
        self.tie_break = check_choice(tie_break, ("random", "first"), "tie_break")
        cells = self._state_entries(self.n_instances, self.n_arms, self.n_features)
        if cells > MAX_STATE_ENTRIES:
            raise ValueError(
                f"{self._state_entries_text} = {cells:.3g} exceeds {MAX_STATE_ENTRIES:.0e}: "
                "the state allocated up front would not fit in memory"
            )
        self.rng = rng
        streams = as_generator(rng).spawn(self._n_streams)
        self._tie_rng = streams[0]
        self._streams = streams
        #: number of updates seen so far; the round being decided is ``t + 1``
        self.t = 0

    #: what :meth:`_state_entries` counts, for its error message
    _state_entries_text = "n_instances × n_arms × n_features²"

    @classmethod
    def _state_entries(cls, n_instances: int, n_arms: int, n_features: int) -> int:
        """Entries of the state a policy of this size allocates up front (refused above
        :data:`~hierbandit._validation.MAX_STATE_ENTRIES`): d×d statistics per (instance, arm)."""
        return n_instances * n_arms * n_features**2

    # ------------------------------------------------------------------ labels
    def coords(self, *, instances: bool = True) -> dict[str, np.ndarray]:
        """Coordinates of the read-outs: arm, instance and feature labels."""
        names = (
            np.arange(self.n_features)
            if self.features is None
            else np.array(self.features, dtype=object)
        )
        out = {"arm": self.arms.to_numpy(), "feature": names, "feature_": names.copy()}
        if instances:
            out["instance"] = self.instances.to_numpy()
        return out

    def _instance_code(self, instance: Any) -> int:
        """Code of an instance id; −1 for an id not seen yet (only when the policy grows)."""
        if self.instances.kind == "range" and not self.grow:
            return check_index(instance, self.n_instances, "instance")
        label = as_label(instance, "instance")
        code = self.instances.get(label)
        if code < 0 and not self.grow:
            raise ValueError(
                f"instance {label!r:.80} is not one of this policy's {self.n_instances} "
                "instances (build it with n_instances=None to accept new ids)"
            )
        return code

    def _arm_code(self, arm: Any, name: str = "arm") -> int:
        if self.arms.kind == "range":
            return check_index(arm, self.n_arms, name)
        code = self.arms.get(as_label(arm, name))
        if code < 0:
            raise ValueError(f"{name} {arm!r:.80} is not one of this policy's arms")
        return code

    def _arm_label(self, code: int) -> Any:
        return code if self.arms.kind == "range" else self.arms.label(code)

    def _instance_codes(self, instances: Any, B: int) -> tuple[np.ndarray, list[Any]]:
        """Codes of B instance ids; ids not seen yet get the codes n, n + 1, … in order of
        first appearance, returned with the list of those new ids (empty unless growing)."""
        arr = np.asarray(instances)
        if arr.ndim != 1 or arr.shape[0] != B:
            raise ValueError(f"instances must be a 1-D array of {B} ids, got shape {arr.shape}")
        if arr.dtype.kind == "U" and not all(isinstance(v, str | np.str_) for v in instances):
            # NumPy turns [5, "a"] into ["5", "a"]: two kinds of id, refused as a mix
            raise TypeError("instances: ids must be all integers or all strings, not a mix")
        if self.instances.kind == "range" and not self.grow:
            if arr.dtype.kind not in "iu":
                if arr.dtype.kind == "O" and B:
                    return np.array(
                        [check_index(v, self.n_instances, "instances") for v in arr],
                        dtype=np.int64,
                    ), []
                if B:
                    raise TypeError(f"instances must be integer ids, got dtype {arr.dtype}")
                return np.zeros(0, dtype=np.int64), []
            codes = arr.astype(np.int64)
            if B and (codes.min() < 0 or codes.max() >= self.n_instances):
                bad = codes[(codes < 0) | (codes >= self.n_instances)][0]
                raise ValueError(f"instances must be in [0, {self.n_instances}), got {bad}")
            return codes, []
        codes = np.empty(B, dtype=np.int64)
        new: dict[Any, int] = {}
        get = self.instances.get
        n = self.n_instances
        for i, v in enumerate(arr.tolist()):
            label = as_label(v, "instances")
            c = get(label)
            if c < 0:
                if not self.grow:
                    raise ValueError(
                        f"instances[{i}] = {label!r:.80} is not one of this policy's "
                        f"{self.n_instances} instances (build it with n_instances=None to "
                        "accept new ids)"
                    )
                c = new.setdefault(label, n + len(new))
            codes[i] = c
        if new:
            kinds = {isinstance(v, str) for v in new}
            have = self.instances.kind
            if len(kinds) > 1 or (self.n_instances and (have == "str") != kinds.pop()):
                raise TypeError(
                    "instances: ids must be all integers or all strings, like the ids the "
                    "policy holds"
                )
        return codes, list(new)

    def _arm_codes(self, arms: Any, B: int) -> np.ndarray:
        arr = np.asarray(arms)
        if arr.ndim != 1 or arr.shape[0] != B:
            raise ValueError(f"arms must be a 1-D array of {B} arm ids, got shape {arr.shape}")
        if self.arms.kind == "range" and arr.dtype.kind in "iu":
            codes = arr.astype(np.int64)
            if B and (codes.min() < 0 or codes.max() >= self.n_arms):
                bad = codes[(codes < 0) | (codes >= self.n_arms)][0]
                raise ValueError(f"arms must be in [0, {self.n_arms}), got {bad}")
            return codes
        return np.array(
            [self._arm_code(v, f"arms[{i}]") for i, v in enumerate(arr.tolist())], dtype=np.int64
        )

    def _allowed_mask(self, allowed: Any, B: int) -> np.ndarray | None:
        """``allowed`` as a (B, K) boolean mask (or None): a boolean array, or one collection
        of arm ids per request."""
        if allowed is None:
            return None
        arr = np.asarray(allowed) if not isinstance(allowed, list) else None
        if arr is not None and arr.dtype == bool:
            if arr.shape != (B, self.n_arms):
                raise ValueError(
                    f"allowed must be a ({B}, {self.n_arms}) boolean mask, got {arr.shape}"
                )
            mask = arr.copy()
        else:
            rows = list(allowed)
            if len(rows) != B:
                raise ValueError(f"allowed must give the allowed arms of each of the {B} requests")
            mask = np.zeros((B, self.n_arms), dtype=bool)
            for i, row in enumerate(rows):
                if isinstance(row, str) or not hasattr(row, "__iter__"):
                    raise TypeError(f"allowed[{i}] must be a collection of arm ids")
                for a in row:
                    mask[i, self._arm_code(a, f"allowed[{i}]")] = True
        empty = ~mask.any(axis=1)
        if empty.any():
            raise ValueError(f"allowed[{int(np.flatnonzero(empty)[0])}] allows no arm")
        return mask

    def _contexts(self, contexts: Any, B: int | None = None) -> np.ndarray:
        X = _as_float_array(contexts, "contexts")
        if X.ndim != 2 or X.shape[1] != self.n_features or (B is not None and X.shape[0] != B):
            want = f"({'B' if B is None else B}, {self.n_features})"
            raise ValueError(f"contexts must have shape {want}, got {X.shape}")
        check_feature_array(X, "contexts")
        return X

    # ------------------------------------------------------------------ public API
    def select(self, instance: Any, context: Any, *, allowed: Any = None) -> Any:
        """Choose an arm for ``instance`` given ``context`` (shape ``(n_features,)``, entries
        bounded as in :meth:`update`); returns the arm's id.

        ``allowed``: the arm ids this request may receive (default all).
        """
        x = check_features(context, self.n_features, "context")
        if allowed is not None:
            return self.select_batch([instance], x[None, :], allowed=[allowed])[0]
        with self._lock:
            return self._arm_label(self._select(self._instance_code(instance), x))

    def select_batch(self, instances: Any, contexts: Any, *, allowed: Any = None) -> np.ndarray:
        """Choose arms for B requests in one call: ``instances`` (B ids), ``contexts`` (B, d).

        ``allowed`` (optional): a (B, n_arms) boolean mask, or for each request a collection
        of arm ids it may receive. Returns the B chosen arm ids, the same as B calls of
        :meth:`select` in order would return (nothing is learned between them: the
        policy changes only on feedback).
        """
        X = self._contexts(contexts)
        B = X.shape[0]
        mask = self._allowed_mask(allowed, B)
        with self._lock:  # the codes of ids are read under the lock (another thread may add ids)
            J, _ = self._instance_codes(instances, B)
            J[self.n_instances <= J] = -1  # ids not seen yet start from the shared posterior
            codes = self._select_batch(J, X, mask)
        return codes if self.arms.kind == "range" else self.arms.labels(codes)

    def choice_probabilities(
        self, instances: Any, contexts: Any, *, allowed: Any = None, arms: Any = None
    ) -> np.ndarray:
        """The probability with which :meth:`select_batch` chooses each arm for each request,
        in the current state: the propensities that off-policy evaluation needs.

        Without ``arms``, a (B, n_arms) array whose rows sum to 1 (columns in arm-code order);
        with ``arms`` (B arm ids, e.g. the ones :meth:`select_batch` returned), the (B,)
        probabilities of those arms. Nothing is drawn and nothing changes. A Thompson policy's
        probabilities are integrals over its score distribution, computed by quadrature to
        about 1e-10 (:mod:`hierbandit.stats.choice`); a deterministic index gives 1 to its
        argmax, split evenly over ties.

        Raises ``NotImplementedError`` for a policy whose choices are not an index of
        independent scores (OLSBandit, RMBandit).
        """
        X = self._contexts(contexts)
        B = X.shape[0]
        mask = self._allowed_mask(allowed, B)
        codes = None if arms is None else self._arm_codes(arms, B)
        with self._lock:
            J, _ = self._instance_codes(instances, B)
            J[self.n_instances <= J] = -1
            return self._choice_probabilities(J, X, mask, codes)

    def _choice_probabilities(
        self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None, arms: np.ndarray | None
    ) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not compute choice probabilities")

    @staticmethod
    def _index_probabilities(
        MU: np.ndarray,
        S: np.ndarray,
        mask: np.ndarray | None,
        arms: np.ndarray | None,
        random: bool,
        forced: np.ndarray | None = None,
    ) -> np.ndarray:
        """Choice probabilities of scores ``MU + S·Z`` (Z standard normal if ``random``, else
        1); a request with ``forced[i] >= 0`` gets that arm for sure."""
        if arms is None:
            P = choice_probabilities(MU, S, mask, random=random)
            if forced is not None and np.any(forced >= 0):
                f = np.flatnonzero(forced >= 0)
                P[f] = 0.0
                P[f, forced[f]] = 1.0
            return P
        p = chosen_probability(MU, S, arms, mask, random=random)
        if forced is not None:
            f = forced >= 0
            p[f] = (forced[f] == arms[f]).astype(float)
        return p

    def update(self, instance: Any, context: Any, arm: Any, reward: float) -> None:
        """Record that ``arm`` was pulled for ``instance`` with ``context`` and paid ``reward``.

        ``context`` must be finite with entries of magnitude at most
        :data:`~hierbandit._validation.MAX_FEATURE` (1e6: the range in which float64 carries
        the posterior covariances; rescale larger features) and ``reward`` finite with
        magnitude at most :data:`~hierbandit._validation.MAX_ABS`. The update is all or
        nothing: every argument is checked before anything changes (a refused call raises
        ``ValueError``/``TypeError`` naming the argument and leaves the policy bit-identical),
        and the compiled kernels that then change the statistics cannot fail on accepted input.
        """
        x = check_features(context, self.n_features, "context")
        k = self._arm_code(arm)
        y = check_scalar(reward, "reward", max_abs=MAX_ABS)
        with self._lock:
            j = self._instance_code(instance)
            if j < 0:  # a new id (growing policies): checked, then given the next code
                _, new = self._instance_codes([instance], 1)
                self._grow(self.n_instances + 1)
                self.instances.extend(new)
                j = self.n_instances
            self._update(j, x, k, y)

    def update_batch(
        self, instances: Any, contexts: Any = None, arms: Any = None, rewards: Any = None
    ) -> None:
        """Apply B feedback rows in one call, as B calls of :meth:`update` in order would.

        Either four arrays (``instances`` (B,), ``contexts`` (B, d), ``arms`` (B,), ``rewards``
        (B,)), or one pandas DataFrame with columns ``instance``, ``arm``, ``reward`` and the
        policy's feature names (``features=`` at construction; ``x0 .. x{d-1}`` otherwise).
        All rows are checked before any changes; a refused batch leaves the policy as it was.
        """
        if contexts is None and arms is None and rewards is None and hasattr(instances, "columns"):
            instances, contexts, arms, rewards = self._frame_columns(instances)
        X = self._contexts(contexts)
        B = X.shape[0]
        Karr = self._arm_codes(arms, B)
        Y = _as_float_array(rewards, "rewards")
        if Y.shape != (B,):
            raise ValueError(f"rewards must have shape ({B},), got {Y.shape}")
        _check_finite(Y, "rewards", MAX_ABS)
        with self._lock:  # new ids take codes n, n + 1, ...: read n under the lock
            J, new = self._instance_codes(instances, B)
            if new:
                self._grow(self.n_instances + len(new))
                self.instances.extend(new)
            self._update_batch(J, X, Karr, Y)

    def _frame_columns(self, frame: Any) -> tuple[Any, Any, Any, Any]:
        names = (
            list(self.features)
            if self.features is not None
            else [f"x{i}" for i in range(self.n_features)]
        )
        missing = [c for c in ("instance", "arm", "reward", *names) if c not in frame.columns]
        if missing:
            raise ValueError(f"the DataFrame lacks the columns {missing}")
        return (
            frame["instance"].to_numpy(),
            frame[names].to_numpy(dtype=float),
            frame["arm"].to_numpy(),
            frame["reward"].to_numpy(),
        )

    @abstractmethod
    def posterior(self) -> xr.Dataset:
        """Current belief about every coefficient: ``mean`` (arm, instance, feature) and ``cov``."""

    @abstractmethod
    def hyperparameters(self) -> xr.Dataset:
        """Current hyperparameters: ``Sigma`` ``(arm, feature, feature_)`` and ``sigma2`` (arm)."""

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Policy:
        """Restore a policy saved with :meth:`save`; it must be an instance of ``cls``."""
        return super().load(path)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_instances={self.n_instances}, n_arms={self.n_arms}, "
            f"n_features={self.n_features})"
        )

    def save(self, path: str | os.PathLike[str]) -> Any:
        """Write a checkpoint of the full state to ``path`` (``.nc``), atomically
        (:mod:`hierbandit.checkpoint`); the spare capacity of growing state is dropped first."""
        with self._lock:
            self._trim()
            return super().save(path)

    def _trim(self) -> None:
        """Drop spare capacity (growing policies); the state is unchanged otherwise."""
        self.instances.trim()

    # ------------------------------------------------------------------ for subclasses
    @abstractmethod
    def _select(self, j: int, x: np.ndarray) -> int:
        """Unchecked selection."""

    @abstractmethod
    def _update(self, j: int, x: np.ndarray, k: int, y: float) -> None:
        """Unchecked update; must increment ``self.t``."""

    def _select_batch(self, J: np.ndarray, X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Unchecked batched selection: arm codes for codes ``J`` (−1: a new instance) and
        contexts ``X``. By default the loop of :meth:`_select`, which is what it must equal."""
        if mask is not None:
            raise ValueError(f"allowed= is not supported by {type(self).__name__}")
        return np.array(
            [self._select(int(j), x) for j, x in zip(J, X, strict=True)], dtype=np.int64
        )

    def _update_batch(self, J: np.ndarray, X: np.ndarray, Karr: np.ndarray, Y: np.ndarray) -> None:
        """Unchecked batched update, rows in order. By default the loop of :meth:`_update`."""
        for j, x, k, y in zip(J.tolist(), X, Karr.tolist(), Y.tolist(), strict=True):
            self._update(j, x, k, y)

    def _grow(self, n: int) -> None:
        """Make room for ``n`` instances (policies with ``_can_grow``)."""
        raise NotImplementedError  # pragma: no cover - grow=True is refused at construction

    def _argmax_rows(self, scores: np.ndarray) -> np.ndarray:
        """:meth:`_argmax` of every row, in order (the tie draws are the loop's)."""
        k = scores.argmax(axis=1).astype(np.int64)
        if self.tie_break == "random" and scores.shape[0]:
            best = scores[np.arange(scores.shape[0]), k]
            self._break_ties(k, np.count_nonzero(scores == best[:, None], axis=1) > 1, scores)
        return k

    def _break_ties(self, out: np.ndarray, tie: np.ndarray, scores: np.ndarray) -> None:
        """With ``tie_break="random"``, replace the first maximum ``out[i]`` of every tied row
        (``tie[i]``) by a uniform draw among the row's maxima from the tie-break stream, rows
        in order, as :meth:`_argmax` draws in a loop."""
        if self.tie_break != "random":
            return
        for i in np.flatnonzero(tie):
            idx = np.flatnonzero(scores[i] == scores[i, out[i]])
            out[i] = idx[self._tie_rng.integers(idx.size)]

    def _argmax(self, scores: np.ndarray) -> int:
        """Argmax with the configured tie-break (randomness only when a tie occurs)."""
        k = int(scores.argmax())
        if self.tie_break == "random":
            ties = np.flatnonzero(scores == scores[k])
            if ties.size > 1:
                k = int(ties[self._tie_rng.integers(ties.size)])
        return k


def check_alpha(value: Any, name: str = "a") -> float:
    """Exploration scales must be finite and non-negative."""
    return check_scalar(value, name, low=0.0)
