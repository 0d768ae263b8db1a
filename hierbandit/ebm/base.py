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

from hierbandit._params import ParamsMixin
from hierbandit._validation import (
    MAX_ABS,
    MAX_STATE_ENTRIES,
    as_generator,
    check_choice,
    check_features,
    check_index,
    check_positive_int,
    check_scalar,
)
from hierbandit.checkpoint import SharedStateMixin

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


def posterior_dataset(mean: np.ndarray, cov: np.ndarray, **attrs: Any) -> xr.Dataset:
    """Wrap ``mean`` (arm, instance, feature) and ``cov`` ``(arm, instance, feature, feature_)``."""
    K, N, d = mean.shape
    return xr.Dataset(
        {
            "mean": (("arm", "instance", "feature"), np.array(mean, dtype=float)),
            "cov": (("arm", "instance", "feature", "feature_"), np.array(cov, dtype=float)),
        },
        coords=_coords(K, N, d),
        attrs=attrs,
    )


def hyperparameter_dataset(
    Sigma: np.ndarray, sigma2: np.ndarray, extra: dict[str, Any] | None = None, **attrs: Any
) -> xr.Dataset:
    """Wrap ``Sigma`` ``(arm, feature, feature_)`` and ``sigma2`` (arm), plus per-arm extras.

    ``extra`` maps a name to either an array with a leading arm axis (shape ``(K,)`` or
    ``(K, d)``) or a ``(dims, values)`` tuple.
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
    return xr.Dataset(data, coords=_coords(K, None, d), attrs=attrs)


#: Largest number of entries of the per-(instance, arm) d×d statistics a policy may allocate
#: (10⁸ float64 values are 800 MB per array).


class Policy(SharedStateMixin, ParamsMixin, ABC):
    """Base class of the online policies.

    Parameters
    ----------
    n_instances, n_arms, n_features
        Number of bandit instances (users, tasks), arms shared by every instance, and context
        dimension.
    rng
        Seed or :class:`numpy.random.Generator`. Internal randomness (posterior draws,
        tie-breaks, resampling) is drawn from independent child streams of it.
    tie_break
        ``"random"`` (default) breaks ties in the argmax uniformly at random; ``"first"`` takes the
        lowest arm index.
    """

    #: number of independent child random streams a subclass needs (tie-breaks use the first)
    _n_streams = 1
    # the read-outs of a subclass hold the policy lock too (see the module docstring);
    # select/update validate outside the lock and take it themselves
    _locked_methods: ClassVar[tuple[str, ...]] = ("posterior", "hyperparameters")

    def __init__(
        self,
        n_instances: int,
        n_arms: int,
        n_features: int,
        *,
        tie_break: str = "random",
        rng: Any = None,
    ) -> None:
        self.n_instances = check_positive_int(n_instances, "n_instances")
        self.n_arms = check_positive_int(n_arms, "n_arms")
        self.n_features = check_positive_int(n_features, "n_features")
        self.tie_break = check_choice(tie_break, ("random", "first"), "tie_break")
        cells = self.n_instances * self.n_arms * self.n_features**2
        if cells > MAX_STATE_ENTRIES:
            raise ValueError(
                f"n_instances × n_arms × n_features² = {cells:.3g} exceeds {MAX_STATE_ENTRIES:.0e}: "
                "the per-(instance, arm) d×d statistics would not fit in memory"
            )
        self.rng = rng
        streams = as_generator(rng).spawn(self._n_streams)
        self._tie_rng = streams[0]
        self._streams = streams
        #: number of updates seen so far; the round being decided is ``t + 1``
        self.t = 0

    # ------------------------------------------------------------------ public API
    def select(self, instance: int, context: Any) -> int:
        """Choose an arm for ``instance`` given ``context`` (shape ``(n_features,)``, entries
        bounded as in :meth:`update`)."""
        j = check_index(instance, self.n_instances, "instance")
        x = check_features(context, self.n_features, "context")
        with self._lock:
            return self._select(j, x)

    def update(self, instance: int, context: Any, arm: int, reward: float) -> None:
        """Record that ``arm`` was pulled for ``instance`` with ``context`` and paid ``reward``.

        ``context`` must be finite with entries of magnitude at most
        :data:`~hierbandit._validation.MAX_FEATURE` (1e6: the range in which float64 carries
        the posterior covariances; rescale larger features) and ``reward`` finite with
        magnitude at most :data:`~hierbandit._validation.MAX_ABS`. The update is all or
        nothing: every argument is checked before anything changes (a refused call raises
        ``ValueError``/``TypeError`` naming the argument and leaves the policy bit-identical),
        and the compiled kernels that then change the statistics cannot fail on accepted input.
        """
        j = check_index(instance, self.n_instances, "instance")
        x = check_features(context, self.n_features, "context")
        k = check_index(arm, self.n_arms, "arm")
        y = check_scalar(reward, "reward", max_abs=MAX_ABS)
        with self._lock:
            self._update(j, x, k, y)

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

    # ------------------------------------------------------------------ for subclasses
    @abstractmethod
    def _select(self, j: int, x: np.ndarray) -> int:
        """Unchecked selection."""

    @abstractmethod
    def _update(self, j: int, x: np.ndarray, k: int, y: float) -> None:
        """Unchecked update; must increment ``self.t``."""

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
