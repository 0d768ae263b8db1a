"""PyMC models of the ebm hierarchical linear model, per arm k over instances j:

    β_{k0} ~ N(0, λ⁻¹I),  β_{k,j} | β_{k0} ~ N(β_{k0}, Σ_k),  y = xᵀβ_{k,j} + N(0, σ_k²),
    Σ_k = diag(s_k) R_k diag(s_k),  R_k ~ LKJ(η) (via canonical partial correlations, batched
    over arms),  s_{k,i} ~ HalfNormal(sd_scale),
    σ_k ~ HalfNormal(noise_scale).

* :func:`collapsed_model` integrates the instance coefficients out analytically from the
  per-(arm, instance) sufficient statistics (ebm eq. 4.3 in d×d form), and by default the shared
  mean too, so NUTS samples only (Σ_k, σ_k): the cost of a gradient is independent of the number of
  rows. :func:`add_conditional_draws` then adds exact draws of β_{k0} and β_{k,j} given each
  posterior draw of the hyperparameters (Rao–Blackwellisation).
* :func:`uncollapsed_model` samples everything (non-centred) from the rows: the reference the
  collapsed model is tested against.
* :func:`add_model_checks` adds what ArviZ needs to check and compare fits: ``observed_data``
  (the per-cell sufficient statistics and mean rewards, :func:`observed_cells`),
  ``log_likelihood`` (each instance's rewards given the hyperparameters and the shared mean,
  :func:`instance_loglik`; ``az.loo`` then leaves one instance out) and, on request,
  ``posterior_predictive`` (each cell's mean reward, :func:`cell_mean_predictive`).

For one arm with Σ = LLᵀ and B_j = I + LᵀG_jL/σ² (d×d, positive definite):

    log|V_j| = n_j log σ² + log|B_j|,
    X_jᵀV_j⁻¹X_j = (G_j − W_jᵀW_j/σ²)/σ²,  X_jᵀV_j⁻¹y_j = (b_j − W_jᵀw_j/σ²)/σ²,
    y_jᵀV_j⁻¹y_j = (q_j − w_jᵀw_j/σ²)/σ²,  with W_j = C_j⁻¹LᵀG_j, w_j = C_j⁻¹Lᵀb_j, B_j = C_jC_jᵀ,

and with P = λI + Σ_j X_jᵀV_j⁻¹X_j, r = Σ_j X_jᵀV_j⁻¹y_j the shared mean integrates out to
log p(y | Σ, σ) = Σ_j[−½n_j log 2π − ½log|V_j| − ½y_jᵀV_j⁻¹y_j] + ½rᵀP⁻¹r − ½log|P| + (d/2)log λ.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from numba import njit

from hierbandit._validation import as_generator, check_choice, check_scalar
from hierbandit.bayes._batched import UNROLL_MAX, BatchedCholesky, matT
from hierbandit.data.summary import LogSummary
from hierbandit.stats.hierarchical import conditional_draws
from hierbandit.stats.threads import over_threads

__all__ = [
    "HyperPriors",
    "add_conditional_draws",
    "add_model_checks",
    "cell_mean_predictive",
    "collapsed_model",
    "instance_loglik",
    "model_coords",
    "observed_cells",
    "uncollapsed_model",
]

_LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass(frozen=True)
class HyperPriors:
    """Priors of the full-Bayes model.

    Attributes
    ----------
    lam : float
        Precision λ of the N(0, λ⁻¹I) prior on each arm's shared mean (default 0.001, the paper).
    lkj_eta : float
        Concentration of the LKJ prior on each Σ_k's correlation matrix (1 = uniform).
    sd_scale : float
        Scale of the half-normal priors on the standard deviations of Σ_k.
    noise_scale : float
        Scale of the half-normal prior on each arm's noise standard deviation σ_k.
    """

    lam: float = 1e-3
    lkj_eta: float = 2.0
    sd_scale: float = 2.5
    noise_scale: float = 2.5

    def __post_init__(self) -> None:
        check_scalar(self.lam, "lam", low=0.0, low_inclusive=False)
        check_scalar(self.lkj_eta, "lkj_eta", low=0.0, low_inclusive=False)
        check_scalar(self.sd_scale, "sd_scale", low=0.0, low_inclusive=False)
        check_scalar(self.noise_scale, "noise_scale", low=0.0, low_inclusive=False)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def model_coords(log: Any) -> dict[str, Any]:
    """Named coordinates arm, instance, feature, feature_ of a historical log."""
    feats = list(log.features)
    return {
        "arm": np.asarray(log.arm_labels),
        "instance": np.asarray(log.instance_labels),
        "feature": feats,
        "feature_": feats,
    }


def _cpc_pairs(d: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(d) for j in range(i)]


def _cholesky_entries(sd: Any, z: Any, d: int, sqrt: Any) -> dict[tuple[int, int], Any]:
    """Entries L[i, j] (j ≤ i) of L = diag(sd) W from the CPCs ``z`` (last axis), for NumPy
    arrays or PyTensor tensors alike (``sqrt`` is ``np.sqrt`` or ``pt.sqrt``).

    W_ij = z_ij (1 − Σ_{m<j} W_im²)^{1/2} for j < i and W_ii = (1 − Σ_{m<i} W_im²)^{1/2}.
    """
    col = {p: c for c, p in enumerate(_cpc_pairs(d))}
    W: dict[tuple[int, int], Any] = {(0, 0): sd[..., 0] * 0.0 + 1.0}
    for i in range(1, d):
        acc = 0.0
        for j in range(i):
            W[i, j] = z[..., col[i, j]] * sqrt(1.0 - acc) if j else z[..., col[i, j]]
            acc = acc + W[i, j] ** 2
        W[i, i] = sqrt(1.0 - acc)
    return {(i, j): sd[..., i] * W[i, j] for i in range(d) for j in range(i + 1)}


def _lkj_cholesky(Kn: int, d: int, hyper: HyperPriors) -> tuple[dict, pt.TensorVariable, Any]:
    """Cholesky factors L_k = diag(s_k) W_k of Σ_k for every arm, batched over arms.

    W_k is the Cholesky factor of an LKJ(η) correlation matrix built from its canonical partial
    correlations (CPCs, :func:`_cholesky_entries`). Under LKJ(η) the CPCs are independent,
    z_ij = 2u − 1 with u ~ Beta(α_j, α_j), α_j = η + (d − j − 2)/2 for 0-based column j
    (Lewandowski, Kurowicka & Joe 2009), so one batched Beta variable gives every arm's
    correlation matrix the exact LKJ prior; s_k ~ HalfNormal(sd_scale). Returns the entries
    L[i, j] as (K,) tensors (structure of arrays), the stacked (K, d, d) factor, and the noise
    sd σ (K,).
    """
    pairs = _cpc_pairs(d)
    # the scales as float64 scalars: PyTensor makes a Python float that float32 represents
    # exactly (2.5) a float32 constant, and its logarithm in the prior's normalising constant
    # would then be rounded to float32 (an offset of 3e-8 per coordinate)
    sd = pm.HalfNormal("Sigma_sd", np.float64(hyper.sd_scale), dims=("arm", "feature"))
    z = pt.zeros((Kn, 0))
    if pairs:
        alpha = np.array([hyper.lkj_eta + (d - j - 2) / 2.0 for _, j in pairs])
        z = 2.0 * pm.Beta("Sigma_cpc", alpha=alpha, beta=alpha, shape=(Kn, len(pairs))) - 1.0
    L = _cholesky_entries(sd, z, d, pt.sqrt)
    zero = pt.zeros((Kn,))
    Lmat = pt.stack(
        [pt.stack([L[i, j] if j <= i else zero for j in range(d)], axis=-1) for i in range(d)],
        axis=-2,
    )
    pm.Deterministic("Sigma", pt.matmul(Lmat, matT(Lmat)), dims=("arm", "feature", "feature_"))
    sigma = pm.HalfNormal("sigma", np.float64(hyper.noise_scale), dims="arm")
    return L, Lmat, sigma


def constrain_draws(model: pm.Model, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Stored variables (Σ, σ and, where sampled, β₀/β) from unconstrained draws of a model built
    here, in NumPy: raw arrays have leading (chain, draw) axes and are keyed by value-variable
    name. Uses PyMC's own log / log-odds transforms' inverses (exp / expit)."""
    from scipy.special import expit

    names = {rv.name: model.rvs_to_values[rv].name for rv in model.free_RVs}
    d = len(model.coords["feature"])
    sd = np.exp(raw[names["Sigma_sd"]])
    z = 2.0 * expit(raw[names["Sigma_cpc"]]) - 1.0 if "Sigma_cpc" in names else sd[..., :0]
    L = _cholesky_entries(sd, z, d, np.sqrt)
    Lm = np.zeros((*sd.shape[:-1], d, d))
    for (i, j), v in L.items():
        Lm[..., i, j] = v
    out = {"Sigma": Lm @ np.swapaxes(Lm, -1, -2), "sigma": np.exp(raw[names["sigma"]])}
    if "beta0" in names:
        out["beta0"] = np.asarray(raw[names["beta0"]])
    if "z" in names:  # uncollapsed: β = β₀ + L z
        out["beta"] = out["beta0"][..., None, :] + np.einsum(
            "...kab,...kjb->...kja", Lm, raw[names["z"]]
        )
    return out


def _collapsed_soa(st: Any, Ld: dict, s2: Any, lam: float, beta0: Any = None) -> Any:
    """Per-arm collapsed log-likelihood (K,) in structure-of-arrays form.

    Every entry of every d×d matrix is its own (arm, instance) array, so the whole computation is
    elementwise except the sums over instances; backends fuse it into a few kernels. Symmetric
    matrices keep only their lower triangle. Same formulas as the module docstring.
    """
    d = st.d
    G = {(a, c): st.G[:, :, a, c] for a in range(d) for c in range(d)}
    bv = [st.b[:, :, a] for a in range(d)]
    q, n = st.q, st.n
    Le = {key: v[:, None] for key, v in Ld.items()}
    s2c = s2[:, None]
    # U = LᵀG, u = Lᵀb   (L lower triangular: L_ai ≠ 0 only for a ≥ i)
    U = {(i, c): sum(Le[a, i] * G[a, c] for a in range(i, d)) for i in range(d) for c in range(d)}
    u = [sum(Le[a, i] * bv[a] for a in range(i, d)) for i in range(d)]
    # B = I + U L / σ², lower triangle, and its Cholesky factor C
    C: dict[tuple[int, int], Any] = {}
    for i in range(d):
        for j in range(i + 1):
            s = sum(U[i, c] * Le[c, j] for c in range(j, d)) / s2c + (1.0 if i == j else 0.0)
            for k in range(j):
                s = s - C[i, k] * C[j, k]
            C[i, j] = pt.sqrt(s) if i == j else s / C[j, j]

    def forward(col: list[Any]) -> list[Any]:
        x: list[Any] = []
        for i in range(d):
            s = col[i]
            for k in range(i):
                s = s - C[i, k] * x[k]
            x.append(s / C[i, i])
        return x

    W = [forward([U[i, c] for i in range(d)]) for c in range(d)]  # W[c][i] = (C⁻¹U)_{ic}
    w = forward(u)
    inv2 = 1.0 / s2c
    P = {}
    r = []
    for a in range(d):
        r.append(((bv[a] - sum(W[a][i] * w[i] for i in range(d)) * inv2) * inv2).sum(axis=1))
        for c in range(a + 1):
            xvx = (G[a, c] - sum(W[a][i] * W[c][i] for i in range(d)) * inv2) * inv2
            P[a, c] = xvx.sum(axis=1) + (lam if (a == c and beta0 is None) else 0.0)
    yvy = (q - sum(wi * wi for wi in w) * inv2) * inv2
    logdet = n * pt.log(s2c) + 2.0 * sum(pt.log(C[i, i]) for i in range(d))
    base = -0.5 * (n * np.log(2 * np.pi) + logdet + yvy).sum(axis=1)
    if beta0 is not None:
        quad = sum(
            (1.0 if a == c else 2.0) * beta0[:, a] * P[a, c] * beta0[:, c]
            for a in range(d)
            for c in range(a + 1)
        )
        return base + sum(beta0[:, a] * r[a] for a in range(d)) - 0.5 * quad
    # integrate the shared mean out: ½ rᵀP⁻¹r − ½ log|P| + (d/2) log λ
    Cp: dict[tuple[int, int], Any] = {}
    for i in range(d):
        for j in range(i + 1):
            s = P[i, j]
            for k in range(j):
                s = s - Cp[i, k] * Cp[j, k]
            Cp[i, j] = pt.sqrt(s) if i == j else s / Cp[j, j]
    z: list[Any] = []
    for i in range(d):
        s = r[i]
        for k in range(i):
            s = s - Cp[i, k] * z[k]
        z.append(s / Cp[i, i])
    logdetP = 2.0 * sum(pt.log(Cp[i, i]) for i in range(d))
    return base + 0.5 * sum(zi * zi for zi in z) - 0.5 * logdetP + 0.5 * d * np.log(lam)


def _suff_data(st: Any) -> SimpleNamespace:
    """The sufficient statistics as data containers of the model being built (``suff_G``,
    ``suff_b``, ``suff_q``, ``suff_n``), plus the static dimension ``d``.

    Data containers, not constants: the sampler passes them to the compiled log density as
    arguments, so the compiled program depends only on the shapes and is reused, through the
    on-disk compilation cache, by every later fit of a log of the same shape.
    """
    return SimpleNamespace(
        G=pm.Data("suff_G", np.asarray(st.G, dtype=float)),
        b=pm.Data("suff_b", np.asarray(st.b, dtype=float)),
        q=pm.Data("suff_q", np.asarray(st.q, dtype=float)),
        n=pm.Data("suff_n", np.asarray(st.n, dtype=float)),
        d=int(st.b.shape[2]),
    )


def _collapsed_batched(st: Any, L: Any, s2: Any, lam: float, beta0: Any = None) -> Any:
    """Per-arm collapsed log-likelihood (K,) with batched linear-algebra ops (any d)."""
    d = st.d
    G, b, q, n = st.G, st.b, st.q, st.n
    eye = pt.eye(d)
    s2b = s2[:, None, None, None]
    LtG = pt.matmul(matT(L)[:, None], G)  # (K, N, d, d)
    chol = BatchedCholesky(eye + pt.matmul(LtG, L[:, None]) / s2b)
    rhs = pt.concatenate([LtG, pt.matmul(matT(L)[:, None], b[..., None])], axis=-1)
    Wf = chol.solve_lower(rhs)  # (K, N, d, d+1)
    W, w = Wf[..., :d], Wf[..., d]
    XVX = ((G - pt.matmul(matT(W), W) / s2b) / s2b).sum(axis=1)
    r = ((b - (matT(W) * w[..., None, :]).sum(-1) / s2[:, None, None]) / s2[:, None, None]).sum(1)
    yVy = (q - (w * w).sum(-1) / s2[:, None]) / s2[:, None]
    logdetV = n * pt.log(s2)[:, None] + chol.logdet()
    base = -0.5 * (n * np.log(2 * np.pi) + logdetV + yVy).sum(axis=1)
    if beta0 is not None:
        quad = (beta0[:, :, None] * XVX * beta0[:, None, :]).sum((-1, -2))
        return base + (beta0 * r).sum(-1) - 0.5 * quad
    cp = BatchedCholesky(lam * eye + XVX)
    z = cp.solve_lower(r[..., None])[..., 0]
    return base + 0.5 * (z * z).sum(-1) - 0.5 * cp.logdet() + 0.5 * d * np.log(lam)


def collapsed_model(
    log: Any,
    *,
    hyper: HyperPriors | None = None,
    collapse_shared_mean: bool = True,
    algebra: str = "auto",
) -> pm.Model:
    """Full-Bayes model with the instance coefficients integrated out (and the shared mean too,
    unless ``collapse_shared_mean=False``, in which case NUTS samples ``beta0``).

    ``log`` is a :class:`~hierbandit.data.HistoricalLog` or a
    :class:`~hierbandit.data.LogSummary`; only its sufficient statistics enter the model, so the
    cost per gradient does not depend on the number of rows. ``algebra`` chooses how the
    per-(arm, instance) d×d algebra is written: ``"soa"`` (every matrix entry its own array)
    or ``"batched"`` (batched linear-algebra ops); ``"auto"`` (default) picks ``"soa"`` for
    d ≤ 8. On the current stack ``"soa"`` is the faster at every size measured: a default fit
    took 13–14 s against 18 s at N = 10 and 23 s against 213 s at N = 1,000, with the same
    draws up to rounding (docs/decisions/bayes.md, B12; ``benchmarks/bench_bayes_scale.py``).
    """
    hyper = hyper or HyperPriors()
    algebra = check_choice(algebra, ("auto", "soa", "batched"), "algebra")
    st = log.suffstats()
    Kn, d = st.b.shape[0], st.b.shape[2]
    soa = algebra == "soa" or (algebra == "auto" and d <= UNROLL_MAX)
    with pm.Model(coords=model_coords(log)) as model:
        data = _suff_data(st)
        Ld, L, sigma = _lkj_cholesky(Kn, d, hyper)
        beta0 = None
        if not collapse_shared_mean:
            beta0 = pm.Normal("beta0", 0.0, np.float64(hyper.lam**-0.5), dims=("arm", "feature"))
        if soa:
            ll = _collapsed_soa(data, Ld, sigma**2, hyper.lam, beta0)
        else:
            ll = _collapsed_batched(data, L, sigma**2, hyper.lam, beta0)
        pm.Potential("marginal_loglik", ll.sum())
    model.hb_meta = {  # type: ignore[attr-defined]
        "kind": "collapsed",
        "collapse_shared_mean": collapse_shared_mean,
        "algebra": "soa" if soa else "batched",
        "hyper": hyper.to_dict(),
        "trace_vars": ["Sigma", "sigma"] + ([] if collapse_shared_mean else ["beta0"]),
        "constrain": constrain_draws,
        "finite_init": True,
        "inverse_mass": _collapsed_inverse_mass,
    }
    return model


def _collapsed_inverse_mass(model: pm.Model) -> dict[str, np.ndarray]:
    """Approximate posterior variances of the collapsed model's unconstrained coordinates.

    log σ_k has Fisher information 2 n_k from the n_k rows of arm k, so its posterior variance is
    about 1/(2 n_k); the other coordinates (Σ_k's scales and correlations, informed by the N
    instances) start at 1, numpyro's default.
    """
    n = np.asarray(model["suff_n"].get_value(), dtype=float).sum(axis=1)
    return {"sigma_log__": 1.0 / (2.0 * np.maximum(n, 1.0))}


def uncollapsed_model(log: Any, *, hyper: HyperPriors | None = None) -> pm.Model:
    """Full-Bayes model over the raw rows with every coefficient sampled (non-centred):
    β_{k,j} = β_{k0} + L_k z_{k,j}, z ~ N(0, I). The reference for :func:`collapsed_model`."""
    hyper = hyper or HyperPriors()
    Kn, d = log.n_arms, log.n_features
    with pm.Model(coords=model_coords(log)) as model:
        _, L, sigma = _lkj_cholesky(Kn, d, hyper)
        beta0 = pm.Normal("beta0", 0.0, np.float64(hyper.lam**-0.5), dims=("arm", "feature"))
        z = pm.Normal("z", 0.0, 1.0, dims=("arm", "instance", "feature"))
        beta = pm.Deterministic(
            "beta",
            beta0[:, None, :] + (L[:, None, :, :] * z[:, :, None, :]).sum(-1),
            dims=("arm", "instance", "feature"),
        )
        rows = beta[log.arm, log.instance]  # (T, d)
        mu = (pt.as_tensor(log.X) * rows).sum(-1)
        pm.Normal("y", mu=mu, sigma=sigma[log.arm], observed=log.y)
    model.hb_meta = {  # type: ignore[attr-defined]
        "kind": "uncollapsed",
        "hyper": hyper.to_dict(),
        "trace_vars": ["Sigma", "sigma", "beta0", "beta"],
        "constrain": constrain_draws,
        "finite_init": True,
    }
    return model


def add_conditional_draws(
    idata: Any, log: Any, *, hyper: HyperPriors | None = None, rng: Any = None
) -> Any:
    """Add exact draws of ``beta0`` (arm, feature) and ``beta`` (arm, instance, feature) to the
    posterior of a collapsed fit: for every draw of (Σ_k, σ_k) [and β_{k0} if it was sampled],
    β_{k0} ~ N(β̂_{k0}, Φ_k) and β_{k,j} | β_{k0} ~ N(A_jβ_{k0} + C̃_jb_j, σ²C̃_j) (eq. 4.1).

    Draws of an exact conditional given each hyperparameter draw are draws of the joint posterior,
    so these marginals carry no extra Monte-Carlo error beyond that of the hyperparameters.
    Computed by :func:`hierbandit.stats.conditional_draws`, vectorised over instances and split
    over the cores, with the standard normal variates of draw s from
    ``numpy.random.default_rng([seed, s])`` (``seed`` drawn from ``rng``) made slice by slice in
    the threads.
    """
    hyper = hyper or HyperPriors()
    gen = as_generator(rng)
    st = log.suffstats()
    post = idata.posterior
    Sigma = np.ascontiguousarray(post["Sigma"].values)  # (C, D, K, d, d)
    sig2 = np.ascontiguousarray(post["sigma"].values ** 2)  # (C, D, K)
    C_, D_, Kn, d, _ = Sigma.shape
    N = st.b.shape[1]
    have_beta0 = "beta0" in post
    b0_in = np.ascontiguousarray(post["beta0"].values) if have_beta0 else np.zeros((C_, D_, Kn, d))
    S = C_ * D_
    beta0, beta = conditional_draws(
        st.G,
        st.b,
        Sigma.reshape(S, Kn, d, d),
        sig2.reshape(S, Kn),
        hyper.lam,
        beta0=b0_in.reshape(S, Kn, d) if have_beta0 else None,
        seed=int(gen.integers(2**63 - 1)),  # draw s: default_rng([seed, s]), in the threads
        progress="exact draws of the shared and instance coefficients",
    )
    beta0 = beta0.reshape(C_, D_, Kn, d)
    beta = beta.reshape(C_, D_, Kn, N, d)
    coords = {
        "chain": post.chain.values,
        "draw": post.draw.values,
        "arm": post.arm.values,
        "instance": np.asarray(log.instance_labels),
        "feature": post.feature.values,
    }
    if not have_beta0:
        post["beta0"] = xr.DataArray(
            beta0,
            dims=("chain", "draw", "arm", "feature"),
            coords={k: coords[k] for k in ("chain", "draw", "arm", "feature")},
        )
    post["beta"] = xr.DataArray(
        beta, dims=("chain", "draw", "arm", "instance", "feature"), coords=coords
    )
    return idata


# =========================================================================== model checking
#: cells per block of :func:`_instance_loglik_kernel`'s vectorised loops
_LOGLIK_BLOCK = 128


@njit(cache=True, nogil=True, error_model="numpy")
def _instance_loglik_kernel(Gs, bs, q, n, beta0, F, sig2, log_sig2, out):  # pragma: no cover
    """out[s, j] = Σ_k log N(y_kj; X_kjβ_k0[s], X_kjΣ_k[s]X_kjᵀ + σ_k²[s]I) from sufficient
    statistics with the instance axis last: Gs (K, d, d, N), bs (K, d, N), q (K, N), n (K, N);
    per draw s: β₀ (S, K, d), any factor F (S, K, d, d) with FFᵀ = Σ, σ² and log σ² (S, K).
    With K_j = FᵀG_jF + σ²I = RRᵀ, c = b − Gβ₀ and e = q − β₀ᵀ(b + c) = ‖y − Xβ₀‖²:
    log|V| = (n − d) log σ² + log|K_j| and (y − Xβ₀)ᵀV⁻¹(y − Xβ₀) = (e − ‖R⁻¹Fᵀc‖²)/σ².

    The cells are processed in blocks of instances, every entry of every d×d matrix a vector
    over the block (structure of arrays), so that the inner loops vectorise. A cell without rows
    contributes exactly 0; a K_j that is not numerically positive definite gives NaN.
    """
    S, Kn = sig2.shape
    d, N = bs.shape[1], bs.shape[2]
    nb_max = min(_LOGLIK_BLOCK, max(N, 1))
    GF = np.empty((d, d, nb_max))
    R = np.empty((d, d, nb_max))
    ir = np.empty((d, nb_max))
    c = np.empty((d, nb_max))
    v = np.empty((d, nb_max))
    e = np.empty(nb_max)
    det = np.empty(nb_max)
    bad = np.empty(nb_max, dtype=np.bool_)
    log2pi = _LOG_2PI
    for s in range(S):
        for j in range(N):
            out[s, j] = 0.0
        for k in range(Kn):
            s2 = sig2[s, k]
            inv_s2 = 1.0 / s2
            ls2 = log_sig2[s, k]
            Fk = F[s, k]
            b0 = beta0[s, k]
            for j0 in range(0, N, nb_max):
                nb = min(nb_max, N - j0)
                # GF = G F
                for i in range(d):
                    for m in range(d):
                        for t in range(nb):
                            GF[i, m, t] = 0.0
                        for a in range(d):
                            f = Fk[a, m]
                            for t in range(nb):
                                GF[i, m, t] += Gs[k, i, a, j0 + t] * f
                # K = FᵀGF + σ²I (lower triangle) and its Cholesky factor R, in place
                for t in range(nb):
                    bad[t] = False
                    det[t] = 1.0
                for i in range(d):
                    for m in range(i + 1):
                        for t in range(nb):
                            R[i, m, t] = s2 if i == m else 0.0
                        for a in range(d):
                            f = Fk[a, i]
                            for t in range(nb):
                                R[i, m, t] += f * GF[a, m, t]
                for i in range(d):
                    for m in range(i + 1):
                        for a in range(m):
                            for t in range(nb):
                                R[i, m, t] -= R[i, a, t] * R[m, a, t]
                        if i == m:
                            for t in range(nb):
                                piv = R[i, i, t]
                                bad[t] |= not piv > 0.0
                                det[t] *= piv
                                rv = np.sqrt(piv)
                                R[i, i, t] = rv
                                ir[i, t] = 1.0 / rv
                        else:
                            for t in range(nb):
                                R[i, m, t] *= ir[m, t]
                # c = b − Gβ₀, e = q − β₀ᵀ(b + c)
                for t in range(nb):
                    e[t] = q[k, j0 + t]
                for i in range(d):
                    for t in range(nb):
                        c[i, t] = bs[k, i, j0 + t]
                    for a in range(d):
                        ba = b0[a]
                        for t in range(nb):
                            c[i, t] -= Gs[k, i, a, j0 + t] * ba
                    bi = b0[i]
                    for t in range(nb):
                        e[t] -= bi * (bs[k, i, j0 + t] + c[i, t])
                # v = R⁻¹Fᵀc
                for i in range(d):
                    for t in range(nb):
                        v[i, t] = 0.0
                    for a in range(d):
                        f = Fk[a, i]
                        for t in range(nb):
                            v[i, t] += f * c[a, t]
                    for a in range(i):
                        for t in range(nb):
                            v[i, t] -= R[i, a, t] * v[a, t]
                    for t in range(nb):
                        v[i, t] *= ir[i, t]
                for t in range(nb):
                    nj = n[k, j0 + t]
                    if nj > 0.0:
                        vv = 0.0
                        for i in range(d):
                            vv += v[i, t] * v[i, t]
                        dt = det[t]
                        if 1e-300 < dt < 1e300:
                            logdet = np.log(dt)
                        else:  # the product of the pivots left the float range
                            logdet = 0.0
                            for i in range(d):
                                logdet += 2.0 * np.log(R[i, i, t])
                        val = -0.5 * (nj * log2pi + (nj - d) * ls2 + logdet + (e[t] - vv) * inv_s2)
                        out[s, j0 + t] += np.nan if bad[t] else val


def _psd_factors(Sigma: np.ndarray) -> np.ndarray:
    """Factors F with FFᵀ = Σ for a stack of PSD matrices (symmetric square roots, negative
    rounding clipped: defined for a singular Σ too)."""
    w, U = np.linalg.eigh(0.5 * (Sigma + np.swapaxes(Sigma, -1, -2)))
    return U * np.sqrt(np.clip(w, 0.0, None))[..., None, :]


def instance_loglik(stats: Any, beta0: Any, Sigma: Any, sigma: Any) -> np.ndarray:
    """Each instance's log-likelihood given the hyperparameters and the shared mean, per draw.

    For every draw and instance j, ``Σ_k log p(y_kj | β_k0, Σ_k, σ_k)`` with the instance's own
    coefficients β_kj integrated out: y_kj ~ N(X_kjβ_k0, X_kjΣ_kX_kjᵀ + σ_k²I) for the rows of
    arm k and instance j, summed over the arms. This is the collapsed model's likelihood with the
    shared mean given (``_collapsed_batched`` with ``beta0``) before its sum over instances: given
    (β₀, Σ, σ) the instances are independent, so it is the pointwise log-likelihood of
    leave-one-instance-out cross-validation (``docs/bayes.md``, Checking and comparing fits).

    Parameters
    ----------
    stats
        The sufficient statistics ``(G, b, q, n)`` of :meth:`HistoricalLog.suffstats`
        (K, N, d, d), (K, N, d), (K, N), (K, N), or the log itself.
    beta0, Sigma, sigma
        Draws with any leading sample axes: (..., K, d), (..., K, d, d), (..., K).

    Returns
    -------
    ndarray
        Shape (..., N). Computed by a compiled loop over draws and arms with the d×d algebra
        of blocks of instances vectorised (``docs/bayes.md`` gives its cost), the draws split
        over the cores
        (:func:`hierbandit.stats.threads.over_threads`; the same values for any split).
    """
    if hasattr(stats, "suffstats"):
        stats = stats.suffstats()
    G, b, q, n = (np.ascontiguousarray(a, dtype=float) for a in stats)
    Kn, N, d = b.shape
    Gs = np.ascontiguousarray(np.moveaxis(G, 1, -1))  # (K, d, d, N): instances last
    bs = np.ascontiguousarray(np.moveaxis(b, 1, -1))  # (K, d, N)
    Sigma = np.asarray(Sigma, dtype=float)
    lead = Sigma.shape[:-3]
    if Sigma.shape[-3:] != (Kn, d, d):
        raise ValueError(f"Sigma must have shape (..., {Kn}, {d}, {d}), got {Sigma.shape}")
    beta0 = np.broadcast_to(np.asarray(beta0, dtype=float), (*lead, Kn, d))
    sig2 = np.broadcast_to(np.asarray(sigma, dtype=float) ** 2, (*lead, Kn))
    S = int(np.prod(lead, dtype=np.int64))
    F = np.ascontiguousarray(_psd_factors(Sigma).reshape(S, Kn, d, d))
    sig2 = np.ascontiguousarray(sig2.reshape(S, Kn))
    out = np.empty((S, N))
    beta0 = np.ascontiguousarray(beta0.reshape(S, Kn, d))
    log_sig2 = np.log(sig2)

    def work(lo: int, hi: int) -> None:  # the draws lo..hi-1 (nogil kernel: threads overlap)
        _instance_loglik_kernel(
            Gs, bs, q, n, beta0[lo:hi], F[lo:hi], sig2[lo:hi], log_sig2[lo:hi], out[lo:hi]
        )

    over_threads(work, S, label="pointwise log-likelihood (one per draw and instance)")
    return out.reshape(*lead, N)


def observed_cells(log: Any) -> xr.Dataset:
    """The ``observed_data`` group of a fit of ``log``: what the collapsed model sees, per cell.

    A cell is an (arm, instance) pair with at least one row; cells are stacked along ``cell``
    (arm by arm, instances in order), so a sparse log stores no empty cells. The data variable
    is ``mean_reward`` (cell), the mean reward of the cell's rows (the variable of the
    posterior predictive check). The sufficient statistics are coordinates along ``cell``, so
    that ArviZ's predictive plots, which pair every data variable with a predictive one, take
    the group as it is: ``n_rows``, ``sum_xx`` = Σxxᵀ (cell, feature, feature_), ``sum_xr`` =
    Σxr (cell, feature), ``sum_rr`` = Σr² and ``mean_x`` = Σx/n (cell, feature), with the cell's
    labels ``cell_arm`` and ``cell_instance``. The rows themselves are not kept.

    ``log`` is a :class:`~hierbandit.data.HistoricalLog` or a
    :class:`~hierbandit.data.LogSummary` (whose per-cell sums of rewards and features serve).
    """
    st = log.suffstats()
    arm_code, inst_code = np.nonzero(st.n)
    n = st.n[arm_code, inst_code]
    C = arm_code.size
    if isinstance(log, LogSummary):  # the sums per cell are part of the statistics
        sum_r = np.asarray(log.sum_y)[arm_code, inst_code]
        sum_x = np.asarray(log.sum_x)[arm_code, inst_code].reshape(C, log.n_features)
    else:
        cell_of = np.full(st.n.shape, -1, dtype=np.int64)
        cell_of[arm_code, inst_code] = np.arange(C)
        row_cell = cell_of[log.arm, log.instance]
        sum_r = np.bincount(row_cell, weights=log.y, minlength=C)
        sum_x = np.stack(
            [
                np.bincount(row_cell, weights=log.X[:, i], minlength=C)
                for i in range(log.n_features)
            ],
            axis=-1,
        ).reshape(C, log.n_features)
    feats = list(log.features)
    cell = ("cell",)
    return xr.Dataset(
        {"mean_reward": (cell, sum_r / n, {"long_name": "mean reward of the cell's rows"})},
        coords={
            "cell": np.arange(C),
            "cell_arm": (cell, np.asarray(log.arm_labels)[arm_code]),
            "cell_instance": (cell, np.asarray(log.instance_labels)[inst_code]),
            "n_rows": (cell, n.astype(np.int64), {"long_name": "rows n"}),
            "sum_xx": (
                (*cell, "feature", "feature_"),
                st.G[arm_code, inst_code],
                {"long_name": "sum of x xᵀ (G)"},
            ),
            "sum_xr": (
                (*cell, "feature"),
                st.b[arm_code, inst_code],
                {"long_name": "sum of x r (b)"},
            ),
            "sum_rr": (cell, st.q[arm_code, inst_code], {"long_name": "sum of r² (q)"}),
            "mean_x": ((*cell, "feature"), sum_x / n[:, None], {"long_name": "mean of x"}),
            "feature": feats,
            "feature_": feats,
        },
    )


def cell_mean_predictive(
    observed: xr.Dataset, beta: Any, sigma: Any, arm_labels: Any, instance_labels: Any, rng: Any
) -> np.ndarray:
    """Draws of each observed cell's mean reward given the coefficients: for cell (k, j) with n
    rows of mean context x̄, x̄ᵀβ_kj + N(0, σ_k²/n), the mean of the cell's rows replicated with
    the same contexts. ``beta`` (S..., K, N, d) and ``sigma`` (S..., K); returns (S..., C)."""
    gen = as_generator(rng)
    arm_pos = {a: i for i, a in enumerate(np.asarray(arm_labels).tolist())}
    inst_pos = {a: i for i, a in enumerate(np.asarray(instance_labels).tolist())}
    k = np.array([arm_pos[a] for a in observed["cell_arm"].values.tolist()], dtype=np.int64)
    j = np.array([inst_pos[a] for a in observed["cell_instance"].values.tolist()], dtype=np.int64)
    beta = np.asarray(beta, dtype=float)
    sigma = np.asarray(sigma, dtype=float)
    xbar = observed["mean_x"].values
    mean = np.einsum("...cd,cd->...c", beta[..., k, j, :], xbar)
    sd = sigma[..., k] / np.sqrt(observed["n_rows"].values)
    return mean + sd * gen.standard_normal(mean.shape)


def add_model_checks(
    idata: xr.DataTree, log: Any, *, posterior_predictive: bool = False, rng: Any = None
) -> xr.DataTree:
    """Add the groups with which ArviZ checks and compares a fit of ``log``, in place.

    * ``observed_data``: :func:`observed_cells` (the log's sufficient statistics and mean reward
      per cell; not its rows).
    * ``log_likelihood``: ``reward`` (chain, draw, instance), :func:`instance_loglik` at every
      posterior draw of (``beta0``, ``Sigma``, ``sigma``): ``az.loo`` and ``az.compare`` then
      estimate how well the fit predicts a held-out instance's rewards.
    * ``posterior_predictive`` with ``posterior_predictive=True``: ``mean_reward`` (chain, draw,
      cell), :func:`cell_mean_predictive` from the posterior's ``beta`` (the exact conditional
      draws of :func:`add_conditional_draws` for a collapsed fit), noise from ``rng``. Then
      ``az.plot_ppc_dist(idata)`` compares it with the observed ``mean_reward``.

    The posterior must hold ``beta0``, ``Sigma`` and ``sigma`` (and ``beta`` for the predictive):
    for a collapsed fit, call :func:`add_conditional_draws` first. A ``constant_data`` group
    (``pm.sample``'s copy of the model's data containers) is removed, so that a fit holds the
    same groups whichever sampler route drew it.
    """
    post = idata["posterior"]
    missing = [v for v in ("beta0", "Sigma", "sigma") if v not in post]
    if posterior_predictive and "beta" not in post:
        missing.append("beta")
    if missing:
        raise ValueError(
            f"the posterior has no {missing}: add the conditional draws first "
            "(hierbandit.bayes.add_conditional_draws)"
        )
    order = ("chain", "draw", "arm")
    beta0 = post["beta0"].transpose(*order, "feature").values
    Sigma = post["Sigma"].transpose(*order, "feature", "feature_").values
    sigma = post["sigma"].transpose(*order).values
    ll = instance_loglik(log.suffstats(), beta0, Sigma, sigma)
    sample = {"chain": post["chain"].values, "draw": post["draw"].values}
    attrs = {"sample_dims": ["chain", "draw"]}
    idata["log_likelihood"] = xr.DataTree(
        xr.Dataset(
            {
                "reward": (
                    ("chain", "draw", "instance"),
                    ll,
                    {"long_name": "log p(rewards of the instance | beta0, Sigma, sigma)"},
                )
            },
            coords={**sample, "instance": np.asarray(log.instance_labels)},
            attrs=attrs,
        )
    )
    observed = observed_cells(log)
    idata["observed_data"] = xr.DataTree(observed)
    if "constant_data" in idata.children:
        del idata["constant_data"]
    if posterior_predictive:
        beta = post["beta"].transpose(*order, "instance", "feature").values
        draws = cell_mean_predictive(
            observed, beta, sigma, post["arm"].values, post["instance"].values, rng
        )
        idata["posterior_predictive"] = xr.DataTree(
            xr.Dataset(
                {"mean_reward": (("chain", "draw", "cell"), draws)},
                coords={
                    **sample,
                    "cell": observed["cell"].values,
                    "cell_arm": ("cell", observed["cell_arm"].values),
                    "cell_instance": ("cell", observed["cell_instance"].values),
                },
                attrs=attrs,
            )
        )
    return idata
