"""Cluster bandit instances for clustering with bandit feedback (Yang, Zhong & Tan, JMLR 2024).

An instance ``(c, U)`` has ``M`` arms partitioned into ``K < M`` non-empty clusters; all arms of a
cluster share a mean vector ``µ(k) ∈ ℝ^d`` and a pull of arm ``m`` returns ``µ(c_m) + η`` with
``η ~ N(0, I_d)`` (Section 3; a known covariance Σ = LLᵀ reduces to this by whitening, Remark 1).
Labels are 0-based here (the paper's are 1-based); centres are the rows of a ``(K, d)`` array.

Presets
-------
* :func:`synthetic_instance` — eq. (9): K = 4, M = 11, d = 3,
  ``c = [1,1,2,2,2,2,3,3,3,4,4]``, µ(1) = 0, µ(2) = 10 e₂, µ(3) = 10 e₃ and µ(4) = 5 e₁ (easy),
  1 e₁ (moderate) or 0.5 e₁ (challenging); optionally rescaled to a target D* (the "rescaled
  challenging instance" of Appendix C.2 has D* = 2).
* :func:`iris_instance` — Section 6.2 on Iris (scikit-learn ships it): arms = the 150 flowers,
  clusters = the 3 species, each arm's mean = the mean raw feature vector of its species, then one
  global rescaling so that D* = 2.
* :func:`digits_instance` — a stand-in for the paper's Yeast/MNIST experiments built the same way
  from scikit-learn's handwritten digits (8×8 images, 10 classes, shipped in the wheel): a random
  subset of images, PCA to ``d`` dimensions, class means, global rescaling to D* = 2. It is a
  substitute data set, not the paper's.
* :func:`class_mean_instance` — the same construction from any labelled data (e.g. a local copy of
  the UCI Yeast file).

Common random numbers
---------------------
:meth:`ClusterBandit.sampler` returns an :class:`ArmSampler` whose noise for the ``j``-th pull of
arm ``m`` is a fixed function of ``(seed, m, j)``: arm ``m`` has its own random stream
(``SeedSequence(seed, spawn_key=(m,))``) drawn in fixed blocks. Every algorithm run with the same
seed therefore sees the same observation at the same (arm, pull index), whatever order it pulls in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from hierbandit._extras import require
from hierbandit._validation import (
    check_choice,
    check_index,
    check_matrix,
    check_positive_int,
    check_scalar,
)
from hierbandit.boc._checks import check_centres, check_labels

__all__ = [
    "SYNTHETIC_KINDS",
    "ArmSampler",
    "ClusterBandit",
    "class_mean_instance",
    "digits_instance",
    "iris_instance",
    "seed_sequence",
    "synthetic_instance",
]

#: µ(4) = [x, 0, 0] of eq. (9)
SYNTHETIC_KINDS = {"easy": 5.0, "moderate": 1.0, "challenging": 0.5}
_SYNTHETIC_LABELS = np.array([0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3])


def seed_sequence(rng: Any, name: str = "rng") -> np.random.SeedSequence:
    """A :class:`numpy.random.SeedSequence` from an int seed, a SeedSequence, a Generator
    (128 bits are drawn from it) or ``None`` (fresh entropy)."""
    if isinstance(rng, np.random.SeedSequence):
        return rng
    if isinstance(rng, np.random.Generator):
        return np.random.SeedSequence(rng.integers(0, 2**63, size=2).tolist())
    if rng is None:
        return np.random.SeedSequence()
    if isinstance(rng, bool) or not isinstance(rng, int | np.integer):
        raise TypeError(f"{name} must be None, an int seed, a SeedSequence or a numpy Generator")
    if rng < 0:
        raise ValueError(f"{name} seed must be non-negative, got {rng}")
    return np.random.SeedSequence(int(rng))


class ArmSampler:
    """Observations of one run of a :class:`ClusterBandit` with common random numbers.

    The noise of the ``j``-th pull (0-based) of arm ``m`` is row ``j`` of arm ``m``'s own stream,
    drawn in blocks of ``block`` rows, so it depends only on ``(seed, m, j)``.

    Attributes
    ----------
    counts : numpy.ndarray, shape (M,), int
        Pulls of every arm so far.
    """

    def __init__(self, arm_means: np.ndarray, seed: np.random.SeedSequence) -> None:
        self._means = arm_means
        M, d = arm_means.shape
        self._entropy = seed.entropy
        self._key = tuple(seed.spawn_key)
        self.block = max(8, 4096 // d)
        self.counts = np.zeros(M, dtype=np.int64)
        self._gens: list[np.random.Generator | None] = [None] * M
        self._bufs: list[np.ndarray | None] = [None] * M

    def _generator(self, arm: int) -> np.random.Generator:
        ss = np.random.SeedSequence(self._entropy, spawn_key=(*self._key, arm))
        return np.random.Generator(np.random.PCG64(ss))

    def noise(self, arm: int, index: int) -> np.ndarray:
        """The noise vector of pull ``index`` of ``arm`` (recomputed from scratch; for checks)."""
        arm = check_index(arm, self._means.shape[0], "arm")
        index = check_index(index, 2**62, "index")
        gen = self._generator(arm)
        d = self._means.shape[1]
        for _ in range(index // self.block):
            gen.standard_normal((self.block, d))
        return gen.standard_normal((self.block, d))[index % self.block].copy()

    def pull(self, arm: int) -> np.ndarray:
        """Observe ``arm``: its mean plus the next noise vector of its stream (a new array)."""
        j = int(self.counts[arm])
        r = j % self.block
        if r == 0:
            gen = self._gens[arm]
            if gen is None:
                gen = self._gens[arm] = self._generator(arm)
            self._bufs[arm] = gen.standard_normal((self.block, self._means.shape[1]))
        self.counts[arm] = j + 1
        return self._means[arm] + self._bufs[arm][r]  # type: ignore[index]


@dataclass(frozen=True, eq=False)
class ClusterBandit:
    """A cluster bandit instance ``(c, U)`` with unit isotropic Gaussian noise.

    Parameters
    ----------
    labels : array_like of int, shape (M,)
        Cluster ``c_m ∈ [0, K)`` of every arm; every cluster non-empty and ``K < M``.
    centres : array_like, shape (K, d)
        Cluster means µ(k) as rows, pairwise distinct (U ∈ 𝒰).
    name : str
        A label for tables and plots.
    """

    labels: np.ndarray
    centres: np.ndarray
    name: str = "instance"

    def __post_init__(self) -> None:
        c = check_labels(self.labels, "labels")
        U = check_centres(self.centres, int(c.max()) + 1, "centres")
        c.flags.writeable = False
        U.flags.writeable = False
        object.__setattr__(self, "labels", c)
        object.__setattr__(self, "centres", U)
        object.__setattr__(self, "_lb", {})

    # ------------------------------------------------------------------ shape
    @property
    def n_arms(self) -> int:
        """M."""
        return int(self.labels.size)

    @property
    def n_clusters(self) -> int:
        """K."""
        return int(self.centres.shape[0])

    @property
    def n_features(self) -> int:
        """d."""
        return int(self.centres.shape[1])

    @property
    def cluster_sizes(self) -> np.ndarray:
        """n(k), shape (K,)."""
        return np.bincount(self.labels, minlength=self.n_clusters)

    @property
    def arm_means(self) -> np.ndarray:
        """µ(c_m) of every arm, shape (M, d)."""
        return self.centres[self.labels]

    @property
    def separation_ratio(self) -> float:
        """r of Assumption 1: smallest over largest pairwise centre distance."""
        iu = np.triu_indices(self.n_clusters, 1)
        dist = np.sqrt(((self.centres[:, None] - self.centres[None]) ** 2).sum(-1))[iu]
        return float(dist.min() / dist.max())

    # ------------------------------------------------------------------ lower bound
    def lower_bound(self, *, alt_pairs: str = "corrected") -> Any:
        """:class:`~hierbandit.boc.lower_bound.LowerBound` (D*, w*, λ*), cached."""
        cache = self._lb  # type: ignore[attr-defined]
        if alt_pairs not in cache:
            from hierbandit.boc.lower_bound import optimal_allocation

            cache[alt_pairs] = optimal_allocation(self.labels, self.centres, alt_pairs=alt_pairs)
        return cache[alt_pairs]

    @property
    def hardness(self) -> float:
        """D*(c, U) (corrected pair set; equal to the paper's for at most one singleton)."""
        return float(self.lower_bound().hardness)

    def rescaled(self, target_hardness: float, *, name: str | None = None) -> ClusterBandit:
        """The instance with all centres multiplied by one scalar so that D* = ``target_hardness``.

        D* scales as 1/s² when U is scaled by s (translations do not matter), so
        ``s = sqrt(D*/target)``.
        """
        target = check_scalar(target_hardness, "target_hardness", low=0.0, low_inclusive=False)
        if self.hardness == 0.0:
            raise ValueError(
                "target_hardness: an instance with one cluster has D* = 0 whatever its scale"
            )
        s = np.sqrt(self.hardness / target)
        return ClusterBandit(self.labels, self.centres * s, name=name or self.name)

    # ------------------------------------------------------------------ simulation
    def sampler(self, rng: Any = None) -> ArmSampler:
        """A fresh :class:`ArmSampler` (common random numbers per ``(seed, arm, pull index)``)."""
        return ArmSampler(np.ascontiguousarray(self.arm_means), seed_sequence(rng))

    def to_xarray(self) -> xr.Dataset:
        """``labels`` (arm), ``centres`` (cluster, feature), ``lam_star`` (arm), attrs D*."""
        lb = self.lower_bound()
        return xr.Dataset(
            {
                "labels": (("arm",), self.labels.copy()),
                "centres": (("cluster", "feature"), self.centres.copy()),
                "lam_star": (("arm",), lb.lam),
                "w_star": (("cluster",), lb.w),
            },
            coords={
                "arm": np.arange(self.n_arms),
                "cluster": np.arange(self.n_clusters),
                "feature": np.arange(self.n_features),
            },
            attrs={"name": self.name, "hardness": lb.hardness},
        )

    def __repr__(self) -> str:
        return (
            f"ClusterBandit(name={self.name!r}, M={self.n_arms}, K={self.n_clusters}, "
            f"d={self.n_features}, D*={self.hardness:.6g})"
        )


# ---------------------------------------------------------------------- presets
def synthetic_instance(
    kind: str = "easy", *, target_hardness: float | None = None
) -> ClusterBandit:
    """The synthetic instances of eq. (9) (Section 6.1).

    Parameters
    ----------
    kind
        ``"easy"`` (µ(4) = [5,0,0], D* = 0.632727), ``"moderate"`` ([1,0,0], D* = 12.140468) or
        ``"challenging"`` ([0.5,0,0], D* = 48.140117).
    target_hardness
        If given, rescale the centres so that D* equals it (Appendix C.2 uses the challenging
        instance with D* = 2).
    """
    check_choice(kind, tuple(SYNTHETIC_KINDS), "kind")
    U = np.array([[0, 0, 0], [0, 10, 0], [0, 0, 10], [SYNTHETIC_KINDS[kind], 0, 0]], dtype=float)
    inst = ClusterBandit(_SYNTHETIC_LABELS.copy(), U, name=kind)
    if target_hardness is not None:
        inst = inst.rescaled(target_hardness, name=f"{kind}-rescaled")
    return inst


def class_mean_instance(
    features: Any,
    classes: Any,
    *,
    target_hardness: float | None = 2.0,
    name: str = "data",
) -> ClusterBandit:
    """Section 6.2's construction: arms = data points, clusters = classes, each arm's mean = the
    mean raw feature vector of its class, then one global rescaling to D* = ``target_hardness``
    (``None``: no rescaling). Individual data values are discarded.
    """
    X = check_matrix(features, (None, None), "features")
    y = np.asarray(classes)
    if y.shape != (X.shape[0],):
        raise ValueError(f"classes must have shape ({X.shape[0]},), got {y.shape}")
    _, labels = np.unique(y, return_inverse=True)
    K = int(labels.max()) + 1
    centres = np.stack([X[labels == k].mean(0) for k in range(K)])
    inst = ClusterBandit(labels, centres, name=name)
    return inst if target_hardness is None else inst.rescaled(target_hardness)


def iris_instance(*, target_hardness: float | None = 2.0) -> ClusterBandit:
    """Iris (K = 3, M = 150, d = 4) built as in Section 6.2; raw D* = 87.4493, scale 6.6125."""
    load_iris = require("sklearn.datasets", "data", "The Iris instance").load_iris

    data = load_iris()
    return class_mean_instance(data.data, data.target, target_hardness=target_hardness, name="iris")


def digits_instance(
    *,
    n_features: int = 10,
    n_arms: int = 500,
    target_hardness: float | None = 2.0,
    seed: int = 0,
) -> ClusterBandit:
    """Stand-in for Yeast/MNIST (Appendix E): scikit-learn's handwritten digits.

    ``n_arms`` images drawn without replacement (``seed``) from the 1,797 shipped 8×8 images,
    projected on their first ``n_features`` principal components (PCA fitted on the sample; the
    sign of each component is fixed so that its largest loading is positive), then built as in
    Section 6.2: class-mean centres, K = 10, global rescaling to D* = ``target_hardness``.
    """
    load_digits = require("sklearn.datasets", "data", "The digits instance").load_digits

    n_features = check_positive_int(n_features, "n_features")
    n_arms = check_positive_int(n_arms, "n_arms", minimum=11)
    data = load_digits()
    if n_arms > data.data.shape[0]:
        raise ValueError(f"n_arms must be <= {data.data.shape[0]}, got {n_arms}")
    if n_features > data.data.shape[1]:
        raise ValueError(f"n_features must be <= {data.data.shape[1]}, got {n_features}")
    idx = np.sort(np.random.default_rng(seed).choice(data.data.shape[0], n_arms, replace=False))
    X = data.data[idx].astype(float)
    y = data.target[idx]
    Xc = X - X.mean(0)
    _, _, Vt = np.linalg.svd(Xc, full_matrices=False)
    comps = Vt[:n_features]
    signs = np.sign(comps[np.arange(n_features), np.abs(comps).argmax(1)])
    Z = Xc @ (comps * signs[:, None]).T
    if np.unique(y).size < 10:
        raise ValueError("the sampled images do not cover all 10 classes; use more arms")
    return class_mean_instance(
        Z, y, target_hardness=target_hardness, name=f"digits-pca{n_features}"
    )
