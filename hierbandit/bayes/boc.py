"""Gaussian mixture over arm means: a Bayesian diagnostic of BOC's output (``docs/boc.md``,
Bayesian diagnostic).

Under BOC's model (unit Gaussian noise, arms of a cluster share a mean) the likelihood of a whole
trajectory given (c, U) depends on the data only through the pull counts N_m and empirical means
µ̂_m, and adaptive sampling and optional stopping are ignorable for Bayesian inference (A_t
depends only on past data). The posterior given (N_m, µ̂_m) is therefore the posterior given the
full history, under the finite mixture with known heteroscedastic noise and no within-cluster
spread

    π ~ Dir(α 1_K),   µ_k ~ N(m₀, s₀² I_d),   z_m ~ Cat(π),   µ̂_m | z_m = k ~ N(µ_k, I_d / N_m).

:func:`gmm_model` builds it in PyMC with the labels z marginalised (NUTS cannot sample discrete
z): a potential ``Σ_m logsumexp_k(log π_k + ℓ_mk)``. :func:`diagnose_partition` samples it and
returns label-invariant summaries — the posterior co-clustering
``C_mm' = E[Σ_k r_mk r_m'k] = P(z_m = z_m' | data)`` (responsibilities r are the Rao–Blackwellised
label posteriors of each draw), its Monte-Carlo version from exact label draws (via
:func:`hierbandit.stats.partitions.coclustering_matrix`), the probability that the posterior
partition equals BOC's recommendation, and per-arm agreement — to compare against the recommended
partition. They should agree when BOC stops; the posterior has no δ-PAC meaning.

**Label switching and initialisation.** Only label-invariant summaries are reported. The centres
are parametrised as ``µ_k = c_k + s_k ζ_k`` around reference centres ``c`` (by default BOC's
``U_out``) with per-cluster scales ``s_k = 1/√(Σ_{m in k} N_m)`` (about one posterior sd): the
posterior is unchanged, but the sampler's initial jitter of ±1 in ζ stays inside the mode of the
recommended partition — a jitter of ±1 in µ can start a chain in a merged mode and leave it there
(``docs/boc.md``). The per-chain mean log density is reported to expose chains in other modes.

:func:`exact_coclustering` enumerates every labelling of a tiny instance with the centres
integrated out in closed form (the reference the PyMC pipeline is tested against).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from scipy.special import gammaln, logsumexp

from hierbandit._validation import check_matrix, check_positive_int, check_scalar, check_vector
from hierbandit.bayes.sampler_config import SamplerConfig, resolve_sampler
from hierbandit.stats.partitions import (
    adjusted_rand_index,
    canonical_labels,
    coclustering_matrix,
    same_partition,
)

__all__ = [
    "DIAGNOSTIC_SAMPLER",
    "GMMDiagnostic",
    "diagnose_boc",
    "diagnose_partition",
    "exact_coclustering",
    "gmm_model",
    "responsibilities",
]


#: NUTS settings of :func:`diagnose_partition` and :func:`diagnose_boc` unless given:
#: ``SamplerConfig()`` with 500 draws after 500 tuning steps per chain, half the default: the
#: co-clustering summaries are averages of probabilities and need no more (the exact-enumeration
#: test matches them within 0.05)
DIAGNOSTIC_SAMPLER = SamplerConfig(draws=500, tune=500)


def _check_data(means: Any, counts: Any) -> tuple[np.ndarray, np.ndarray]:
    mu = check_matrix(means, (None, None), "means")
    if mu.shape[0] < 2 or mu.shape[1] == 0:
        raise ValueError(f"means must have at least 2 arms and 1 feature, got {mu.shape}")
    N = check_vector(counts, mu.shape[0], "counts")
    if np.any(N <= 0):
        raise ValueError("counts must be positive (every arm pulled at least once)")
    return mu, N


def _prior(mu: np.ndarray, prior_mean: Any, prior_sd: Any) -> tuple[np.ndarray, float]:
    d = mu.shape[1]
    m0 = mu.mean(0) if prior_mean is None else check_vector(prior_mean, d, "prior_mean")
    s0 = (
        3.0 * float(mu.std(0).max()) + 1.0
        if prior_sd is None
        else check_scalar(prior_sd, "prior_sd", low=0.0, low_inclusive=False)
    )
    return m0, s0


def gmm_model(
    means: Any,
    counts: Any,
    n_clusters: int,
    *,
    alpha: float = 1.0,
    prior_mean: Any = None,
    prior_sd: float | None = None,
    centres: Any = None,
    scales: Any = None,
) -> pm.Model:
    """The mixture over arm means with marginalised labels (module docstring).

    Parameters
    ----------
    means : array_like, shape (M, d)
        Empirical arm means µ̂_m.
    counts : array_like, shape (M,)
        Pull counts N_m > 0 (the noise of µ̂_m is N(0, I/N_m)).
    n_clusters
        K.
    alpha
        Dirichlet concentration of π (default 1).
    prior_mean, prior_sd
        m₀ (d,) and s₀ of the centre prior; defaults: the mean of the µ̂_m and
        ``3 · max_j sd_j(µ̂) + 1``.
    centres, scales
        Reference centres ``c`` (K, d) and scales ``s`` (K,) of the parametrisation
        ``µ_k = c_k + s_k ζ_k`` (the initial point is ζ = 0, i.e. µ = c). Defaults: ``c_k = m₀``,
        ``s_k = s₀``.

    Returns
    -------
    pymc.Model
        Free variables ``pi`` (cluster) and ``zeta`` (cluster, feature); deterministic ``mu``.
        ``model.hb_meta["trace_vars"] = ["pi", "mu"]``.
    """
    mu_hat, N = _check_data(means, counts)
    M, d = mu_hat.shape
    K = check_positive_int(n_clusters, "n_clusters")
    if K > M:
        raise ValueError(f"n_clusters K={K} must not exceed the number of arms M={M}")
    alpha = check_scalar(alpha, "alpha", low=0.0, low_inclusive=False)
    m0, s0 = _prior(mu_hat, prior_mean, prior_sd)
    c = np.tile(m0, (K, 1)) if centres is None else check_matrix(centres, (K, d), "centres")
    s = np.full(K, s0) if scales is None else check_vector(scales, K, "scales")
    if np.any(s <= 0):
        raise ValueError("scales must be positive")
    coords = {"cluster": np.arange(K), "feature": np.arange(d), "arm": np.arange(M)}
    with pm.Model(coords=coords) as model:
        pi = pm.Dirichlet("pi", a=np.full(K, alpha), dims="cluster")
        # µ_k = c_k + s_k ζ_k with µ_k ~ N(m₀, s₀² I)  ⇔  ζ_k ~ N((m₀ − c_k)/s_k, (s₀/s_k)²)
        zeta = pm.Normal(
            "zeta",
            mu=(m0[None, :] - c) / s[:, None],
            sigma=(s0 / s)[:, None] * np.ones((1, d)),
            dims=("cluster", "feature"),
            initval=np.zeros((K, d)),
        )
        mu = pm.Deterministic("mu", c + s[:, None] * zeta, dims=("cluster", "feature"))
        diff = pt.as_tensor(mu_hat)[:, None, :] - mu[None, :, :]  # (M, K, d)
        Nt = pt.as_tensor(N)[:, None]
        ll = 0.5 * d * pt.log(Nt / (2.0 * np.pi)) - 0.5 * Nt * (diff**2).sum(axis=-1)
        pm.Potential("loglik", pm.math.logsumexp(pt.log(pi)[None, :] + ll, axis=1).sum())
    model.hb_meta = {  # type: ignore[attr-defined]
        "trace_vars": ["pi", "mu"],
        "finite_init": True,
        "prior_mean": m0,
        "prior_sd": s0,
        "alpha": alpha,
    }
    return model


def responsibilities(means: Any, counts: Any, pi: Any, mu: Any) -> np.ndarray:
    """r_mk = p(z_m = k | π, µ, data) for draws ``pi`` (..., K) and ``mu`` (..., K, d).

    Returns an array of shape (..., M, K).
    """
    mu_hat, N = _check_data(means, counts)
    pi = np.asarray(pi, dtype=float)
    mu = np.asarray(mu, dtype=float)
    sq = ((mu_hat[:, None, :] - mu[..., None, :, :]) ** 2).sum(-1)  # (..., M, K)
    with np.errstate(divide="ignore"):
        logits = np.log(pi)[..., None, :] - 0.5 * N[:, None] * sq
    return np.exp(logits - logsumexp(logits, axis=-1, keepdims=True))


@dataclass
class GMMDiagnostic:
    """Posterior co-clustering of the mixture against a recommended partition.

    Attributes
    ----------
    labels : numpy.ndarray, shape (M,)
        The recommended partition (canonical labels).
    coclustering : numpy.ndarray, shape (M, M)
        ``C_mm' = E[Σ_k r_mk r_m'k] = P(z_m = z_m' | data)`` (Rao–Blackwellised).
    coclustering_sampled : numpy.ndarray, shape (M, M)
        The same from one exact label draw ``z ~ Cat(r)`` per posterior draw.
    min_within, max_between : float
        Smallest co-clustering over pairs the recommendation puts together, largest over pairs it
        separates (``nan`` if there are no such pairs).
    p_exact : float
        Posterior probability that z is the recommended partition up to relabelling,
        ``E[Σ_σ Π_m r_{m,σ(c_m)}]`` (exact sum over permutations for K ≤ 7; for larger K the best
        permutation by the Hungarian algorithm, a lower bound).
    arm_agreement : numpy.ndarray, shape (M,)
        Mean co-clustering of each arm with its recommended cluster-mates (``nan`` for
        singletons); the lowest values flag borderline arms.
    map_partition : numpy.ndarray, shape (M,)
        The label-wise MAP of the posterior mean responsibilities, for reference.
    ari : float
        Adjusted Rand index between ``map_partition`` and ``labels``.
    chain_logp : numpy.ndarray, shape (chains,)
        Mean log density per chain (a chain in another mode shows as an outlier).
    idata : xarray.DataTree
        The posterior sample (ArviZ's layout: ``posterior``, ``sample_stats``).
    """

    labels: np.ndarray
    coclustering: np.ndarray
    coclustering_sampled: np.ndarray
    min_within: float
    max_between: float
    p_exact: float
    arm_agreement: np.ndarray
    map_partition: np.ndarray
    ari: float
    chain_logp: np.ndarray
    idata: Any = None
    info: dict[str, Any] = field(default_factory=dict)

    def agrees(self, eps: float = 0.05) -> bool:
        """``min_within ≥ 1 − eps`` and ``max_between ≤ eps``: the posterior puts the arms the
        recommendation groups together, and no others, in one cluster."""
        lo = 1.0 if np.isnan(self.min_within) else self.min_within
        hi = 0.0 if np.isnan(self.max_between) else self.max_between
        return bool(lo >= 1.0 - eps and hi <= eps)

    def to_xarray(self) -> xr.Dataset:
        """``coclustering`` ``(arm, arm_)``, ``labels``/``arm_agreement`` (arm); scalars: attrs."""
        M = self.labels.size
        return xr.Dataset(
            {
                "coclustering": (("arm", "arm_"), self.coclustering),
                "coclustering_sampled": (("arm", "arm_"), self.coclustering_sampled),
                "labels": (("arm",), self.labels),
                "map_partition": (("arm",), self.map_partition),
                "arm_agreement": (("arm",), self.arm_agreement),
            },
            coords={"arm": np.arange(M), "arm_": np.arange(M)},
            attrs={
                "min_within": self.min_within,
                "max_between": self.max_between,
                "p_exact": self.p_exact,
                "ari": self.ari,
                **{k: v for k, v in self.info.items() if isinstance(v, int | float | str)},
            },
        )


def _p_exact(R: np.ndarray, labels: np.ndarray, K: int) -> tuple[float, str]:
    """E_draws[Σ_σ Π_m r_{m,σ(c_m)}] (exact for K ≤ 7, best σ otherwise)."""
    logR = np.log(np.maximum(R, 1e-300))  # (S, M, K), finite
    # block log-probabilities B[s, j, k] = Σ_{m: c_m = j} log r_mk
    B = np.stack([logR[:, labels == j, :].sum(1) for j in range(K)], axis=1)
    if K <= 7:
        perms = np.array(list(itertools.permutations(range(K))))
        vals = B[:, np.arange(K)[None, :], perms].sum(-1)  # (S, n_perm)
        return float(np.exp(logsumexp(vals, axis=1)).mean()), "exact"
    from scipy.optimize import linear_sum_assignment

    out = []
    for b in B:
        r, c = linear_sum_assignment(-b)
        out.append(np.exp(b[r, c].sum()))
    return float(np.mean(out)), "best-permutation"


def diagnose_partition(
    means: Any,
    counts: Any,
    labels: Any,
    centres: Any = None,
    *,
    n_clusters: int | None = None,
    alpha: float = 1.0,
    prior_mean: Any = None,
    prior_sd: float | None = None,
    sampler: SamplerConfig | None = None,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    random_seed: int | None = None,
    max_draws: int = 1000,
    **sample_kwargs: Any,
) -> GMMDiagnostic:
    """Fit :func:`gmm_model` by NUTS and compare its posterior with a recommended partition.

    Parameters
    ----------
    means, counts
        µ̂_m (M, d) and N_m (M,) at the time of the recommendation.
    labels : array_like of int, shape (M,)
        The recommended partition (e.g. BOC's c_out).
    centres : array_like, shape (K, d), optional
        Its centres (U_out, rows in the order of ``labels``' values); default: the
        N-weighted means of the recommended clusters. The sampler starts there.
    n_clusters
        K (default: the number of clusters in ``labels``).
    alpha, prior_mean, prior_sd
        Priors (see :func:`gmm_model`).
    sampler : SamplerConfig, optional
        NUTS settings (default :data:`DIAGNOSTIC_SAMPLER`: 2 chains × 500 draws after 500 tuning
        steps, numpyro). ``random_seed`` also seeds the exact label draws.
    draws, tune, chains, random_seed, sample_kwargs
        Replace the matching fields of ``sampler`` when given (further keyword arguments are
        backend options, see :func:`hierbandit.bayes.sample`).
    max_draws
        Posterior draws used for the summaries (evenly thinned).

    Returns
    -------
    GMMDiagnostic
    """
    from hierbandit.bayes.sampling import sample

    cfg = resolve_sampler(
        sampler,
        DIAGNOSTIC_SAMPLER,
        extra=sample_kwargs,
        draws=draws,
        tune=tune,
        chains=chains,
        random_seed=random_seed,
    )
    mu_hat, N = _check_data(means, counts)
    M, d = mu_hat.shape
    lab = canonical_labels(labels)
    if lab.shape != (M,):
        raise ValueError(f"labels must have shape ({M},), got {lab.shape}")
    K = int(lab.max()) + 1 if n_clusters is None else check_positive_int(n_clusters, "n_clusters")
    if lab.max() >= K:
        raise ValueError(f"labels use {int(lab.max()) + 1} clusters but n_clusters is {K}")
    W = np.bincount(lab, weights=N, minlength=K)
    if centres is None:
        S = np.zeros((K, d))
        np.add.at(S, lab, N[:, None] * mu_hat)
        ref = np.where(W[:, None] > 0, S / np.maximum(W, 1e-300)[:, None], mu_hat.mean(0))
    else:
        ref = check_matrix(centres, (K, d), "centres")
    scales = 1.0 / np.sqrt(np.where(W > 0, W, 1.0))
    model = gmm_model(
        mu_hat,
        N,
        K,
        alpha=alpha,
        prior_mean=prior_mean,
        prior_sd=prior_sd,
        centres=ref,
        scales=scales,
    )
    idata = sample(model, cfg)
    post = idata.posterior
    C, D = post.sizes["chain"], post.sizes["draw"]
    pi = post["pi"].values.reshape(C * D, K)
    mu = post["mu"].values.reshape(C * D, K, d)
    take = np.unique(np.linspace(0, C * D - 1, min(C * D, max_draws)).astype(int))
    R = responsibilities(mu_hat, N, pi[take], mu[take])  # (S, M, K)
    cocl = np.zeros((M, M))
    for start in range(0, R.shape[0], 64):
        blk = R[start : start + 64]
        cocl += np.einsum("smk,snk->mn", blk, blk)
    cocl /= R.shape[0]
    np.fill_diagonal(cocl, 1.0)
    rng = np.random.default_rng(cfg.random_seed)
    u = rng.random((R.shape[0], M, 1))
    z = (np.cumsum(R, axis=-1) < u).sum(-1).clip(0, K - 1)  # exact draws z ~ Cat(r)
    sampled = coclustering_matrix(z)
    same = lab[:, None] == lab[None, :]
    off = ~np.eye(M, dtype=bool)
    within = cocl[same & off]
    between = cocl[~same]
    mates = (same & off).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        agreement = np.where(mates > 0, (cocl * (same & off)).sum(1) / mates, np.nan)
    p_exact, how = _p_exact(R, lab, K)
    map_part = canonical_labels(R.mean(0).argmax(-1))
    lp = idata.sample_stats["lp"].values.mean(axis=1) if "lp" in idata.sample_stats else None
    return GMMDiagnostic(
        labels=lab,
        coclustering=cocl,
        coclustering_sampled=sampled,
        min_within=float(within.min()) if within.size else float("nan"),
        max_between=float(between.max()) if between.size else float("nan"),
        p_exact=p_exact,
        arm_agreement=agreement,
        map_partition=map_part,
        ari=adjusted_rand_index(map_part, lab),
        chain_logp=np.asarray(lp) if lp is not None else np.array([]),
        idata=idata,
        info={
            "p_exact_method": how,
            "map_equals_labels": int(same_partition(map_part, lab)),
            "n_draws_used": int(take.size),
            "prior_sd": float(model.hb_meta["prior_sd"]),
        },
    )


def diagnose_boc(algorithm: Any, **kwargs: Any) -> GMMDiagnostic:
    """:func:`diagnose_partition` on a BOC/Uniform/Oracle object's current state: its empirical
    means and counts, its recommended partition ``recommend()`` and matching centres."""
    if getattr(algorithm, "labels", None) is None:
        raise ValueError("the algorithm has no estimate yet (run it first)")
    from hierbandit.boc.explorers import canonical_partition

    labels, centres = canonical_partition(algorithm.labels, algorithm.centres)
    return diagnose_partition(
        algorithm.means,
        algorithm.counts,
        labels,
        centres,
        n_clusters=algorithm.n_clusters,
        **kwargs,
    )


def exact_coclustering(
    means: Any,
    counts: Any,
    n_clusters: int,
    *,
    alpha: float = 1.0,
    prior_mean: Any = None,
    prior_sd: float | None = None,
) -> tuple[np.ndarray, dict[tuple[int, ...], float]]:
    """Exact posterior co-clustering of :func:`gmm_model` by enumerating all ``K^M`` labellings.

    π is integrated out (Dirichlet–multinomial) and so are the centres: per block and coordinate
    the µ̂ values are jointly ``N(m₀ 1, diag(1/N_m) + s₀² 11ᵀ)`` (Sherman–Morrison). Tiny
    instances only (``K^M ≤ 2·10⁵``).

    Returns
    -------
    (C, partitions)
        The co-clustering matrix and the posterior probability of every partition (canonical
        label tuples).
    """
    mu_hat, N = _check_data(means, counts)
    M, d = mu_hat.shape
    K = check_positive_int(n_clusters, "n_clusters")
    if K**M > 200_000:
        raise ValueError("exact enumeration is limited to K^M <= 2e5")
    alpha = check_scalar(alpha, "alpha", low=0.0, low_inclusive=False)
    m0, s0 = _prior(mu_hat, prior_mean, prior_sd)
    zs = np.array(list(itertools.product(range(K), repeat=M)), dtype=np.int64)
    logp = np.zeros(zs.shape[0])
    r = mu_hat - m0  # (M, d)
    s2 = s0 * s0
    for k in range(K):
        mask = (zs == k).astype(float)  # (n, M)
        nk = mask.sum(1)
        logp += gammaln(nk + alpha) - gammaln(alpha)
        sN = mask @ N  # Σ N_m over the block
        quad = mask @ (N[:, None] * r**2)  # (n, d): Σ N_m r_mj²
        lin = mask @ (N[:, None] * r)  # (n, d): Σ N_m r_mj
        logdet = -(mask @ np.log(N)) + np.log1p(s2 * sN)  # per coordinate
        q = quad - s2 * lin**2 / (1.0 + s2 * sN)[:, None]
        logp += -0.5 * (d * logdet + q.sum(1) + d * nk * np.log(2.0 * np.pi))
    logp += gammaln(K * alpha) - gammaln(M + K * alpha)
    post = np.exp(logp - logsumexp(logp))
    C = np.zeros((M, M))
    for i in range(M):
        C[i] = post @ (zs == zs[:, [i]])
    parts: dict[tuple[int, ...], float] = {}
    for z, p in zip(zs, post, strict=True):
        key = tuple(canonical_labels(z).tolist())
        parts[key] = parts.get(key, 0.0) + float(p)
    return C, parts
