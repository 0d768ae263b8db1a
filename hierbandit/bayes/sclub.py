"""PyMC model of the user-level mixture of linear regressions (``docs/sclub.md``, The Bayesian
audit).

The generative model behind the clustering bandits (SCLUB, CLUB, Off-CLUB):

    w ~ Dir(α₀ 1_K),  μ_k ~ N(0, s² I_d),  z_u ~ Cat(w),
    θ_u = μ_{z_u}  (``kind="exact"``)   or   θ_u ~ N(μ_{z_u}, τ² I)  (``kind="partial"``),
    r_u^i ~ N(x_u^iᵀθ_u, σ²).

The assignment z_u is shared by *all* of user u's rewards, so it is marginalised per user
(``pm.Mixture`` on individual rewards would let every reward choose its own component): the model
adds the potential Σ_u logsumexp_k(log w_k + ℓ_uk), where ℓ_uk is the log-likelihood of the
user's rows under component k computed from the sufficient statistics G_u, b_u, rr_u, N_u —

* exact clusters: ℓ_uk = −N_u/2 log(2πσ²) − (rr_u − 2μ_kᵀb_u + μ_kᵀG_uμ_k)/(2σ²);
* partial pooling, θ_u integrated out (Woodbury, with P = (σ²/τ²)I + G_u):
  ℓ_uk = −½[N log 2π + (N − d) log σ² + log det(σ²I + τ²G_u)
  + (Q_uk − (b_u − G_uμ_k)ᵀP⁻¹(b_u − G_uμ_k))/σ²], Q_uk = rr_u − 2μ_kᵀb_u + μ_kᵀG_uμ_k.
  The d×d algebra is diagonalised once in NumPy (G_u = V_uΛ_uV_uᵀ), so the model only needs
  elementwise operations (fast under JAX).

Label switching makes component-level summaries meaningless across draws; :func:`posterior_summary`
reports label-invariant ones: the per-draw responsibilities r_uk ∝ w_k e^{ℓ_uk}, the co-clustering
matrix P_uv = E[Σ_k r_uk r_vk], the number of occupied components, the gap between occupied
components, and a point partition (the per-draw MAP labelling closest to P in squared loss,
Dahl 2006).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from scipy.special import logsumexp

from hierbandit._validation import check_choice, check_positive_int, check_scalar
from hierbandit.bayes.sampler_config import SamplerConfig, resolve_sampler
from hierbandit.sclub.mixture_em import check_user_stats
from hierbandit.stats.partitions import coclustering_matrix

__all__ = ["MIXTURE_SAMPLER", "fit_mixture", "mixture_loglik", "mixture_model", "posterior_summary"]

#: NUTS settings of :func:`fit_mixture` unless given: ``SamplerConfig()`` with 500 draws after 500
#: tuning steps per chain, half the default, enough for the label-invariant summaries of
#: :func:`posterior_summary` (which thins to 400 draws)
MIXTURE_SAMPLER = SamplerConfig(draws=500, tune=500)


def _eig(G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lam, V = np.linalg.eigh(0.5 * (G + np.swapaxes(G, 1, 2)))
    return np.maximum(lam, 0.0), V


def mixture_model(
    G: Any,
    b: Any,
    rr: Any,
    N: Any,
    n_components: int = 10,
    *,
    kind: str = "exact",
    alpha0: float = 0.1,
    mu_sd: float = 1.0,
    sigma_scale: float = 0.5,
    tau_scale: float = 0.2,
) -> pm.Model:
    """The user-level mixture of linear regressions with z_u marginalised per user.

    Parameters
    ----------
    G, b, rr, N : array_like
        Per-user Σxxᵀ (U, d, d), Σrx (U, d), Σr² (U,) and row counts (U,).
    n_components : int, default 10
        Number of components K (an upper bound: with a small ``alpha0`` the posterior empties
        the superfluous ones, an "overfitted mixture").
    kind : {"exact", "partial"}, default "exact"
        θ_u = μ_{z_u} (the clustering papers' assumption) or θ_u ~ N(μ_{z_u}, τ²I) integrated out.
    alpha0 : float, default 0.1
        Dirichlet concentration of the weights.
    mu_sd : float, default 1.0
        Prior standard deviation of the component means (the papers' θ are unit vectors).
    sigma_scale, tau_scale : float
        Half-normal scales of the noise σ and of the within-cluster spread τ.

    Returns
    -------
    pymc.Model
        Free variables ``w`` (component), ``mu`` (component, feature), ``sigma`` (and ``tau``);
        ``model.hb_meta["trace_vars"]`` lists them for :func:`hierbandit.bayes.sample`.
    """
    G, b, rr, Nf = check_user_stats(G, b, rr, N)
    K = check_positive_int(n_components, "n_components")
    check_choice(kind, ("exact", "partial"), "kind")
    alpha0 = check_scalar(alpha0, "alpha0", low=0.0, low_inclusive=False)
    mu_sd = check_scalar(mu_sd, "mu_sd", low=0.0, low_inclusive=False)
    sigma_scale = check_scalar(sigma_scale, "sigma_scale", low=0.0, low_inclusive=False)
    tau_scale = check_scalar(tau_scale, "tau_scale", low=0.0, low_inclusive=False)
    U, d = b.shape
    coords = {"component": np.arange(K), "feature": np.arange(d), "user": np.arange(U)}
    with pm.Model(coords=coords) as model:
        w = pm.Dirichlet("w", a=np.full(K, alpha0), dims="component")
        mu = pm.Normal("mu", 0.0, mu_sd, dims=("component", "feature"))
        sigma = pm.HalfNormal("sigma", sigma_scale)
        s2 = sigma**2
        bmu = pt.dot(pt.as_tensor(b), mu.T)  # (U, K)
        if kind == "exact":
            Gmu = (pt.as_tensor(G)[:, None, :, :] * mu[None, :, None, :]).sum(axis=-1)
            quad = (Gmu * mu[None, :, :]).sum(axis=-1)  # μ_kᵀ G_u μ_k
            Q = pt.as_tensor(rr)[:, None] - 2.0 * bmu + quad
            ll = -0.5 * pt.as_tensor(Nf)[:, None] * pt.log(2.0 * np.pi * s2) - Q / (2.0 * s2)
            trace = ["w", "mu", "sigma"]
        else:
            tau = pm.HalfNormal("tau", tau_scale)
            t2 = tau**2
            lam, V = _eig(G)
            Vb = np.einsum("uji,uj->ui", V, b)  # Vᵀb
            Vmu = (pt.as_tensor(V)[:, None, :, :] * mu[None, :, :, None]).sum(axis=2)  # (U,K,d)
            lamT = pt.as_tensor(lam)
            quad = (lamT[:, None, :] * Vmu**2).sum(axis=-1)  # μᵀGμ
            Q = pt.as_tensor(rr)[:, None] - 2.0 * bmu + quad
            c = pt.as_tensor(Vb)[:, None, :] - lamT[:, None, :] * Vmu  # Vᵀ(b − Gμ)
            corr = (c**2 / (s2 / t2 + lamT[:, None, :])).sum(axis=-1)
            logdet = pt.log(s2 + t2 * lamT).sum(axis=-1)  # (U,)
            Nt = pt.as_tensor(Nf)
            ll = -0.5 * (
                (Nt * np.log(2.0 * np.pi) + (Nt - d) * pt.log(s2) + logdet)[:, None]
                + (Q - corr) / s2
            )
            trace = ["w", "mu", "sigma", "tau"]
        pm.Potential("loglik", pm.math.logsumexp(pt.log(w)[None, :] + ll, axis=1).sum())
    model.hb_meta = {  # type: ignore[attr-defined]
        "trace_vars": trace,
        "finite_init": True,
        "kind": kind,
    }
    return model


def mixture_loglik(
    G: Any,
    b: Any,
    rr: Any,
    N: Any,
    mu: Any,
    sigma: Any,
    tau: Any = None,
) -> np.ndarray:
    """ℓ_uk in NumPy for one or many parameter draws.

    ``mu`` has shape (..., K, d) and ``sigma`` (and ``tau`` for the partial-pooling model) shape
    (...); returns (..., U, K).
    """
    G, b, rr, Nf = check_user_stats(G, b, rr, N)
    mu = np.asarray(mu, dtype=float)
    s2 = np.asarray(sigma, dtype=float)[..., None, None] ** 2
    bmu = np.einsum("ud,...kd->...uk", b, mu)
    if tau is None:
        quad = np.einsum("...kd,ude,...ke->...uk", mu, G, mu)
        Q = rr[:, None] - 2.0 * bmu + quad
        return -0.5 * Nf[:, None] * np.log(2.0 * np.pi * s2) - Q / (2.0 * s2)
    t2 = np.asarray(tau, dtype=float)[..., None, None] ** 2
    lam, V = _eig(G)
    d = b.shape[1]
    Vb = np.einsum("uji,uj->ui", V, b)
    Vmu = np.einsum("uji,...kj->...uki", V, mu)
    quad = (lam[:, None, :] * Vmu**2).sum(axis=-1)
    Q = rr[:, None] - 2.0 * bmu + quad
    c = Vb[:, None, :] - lam[:, None, :] * Vmu
    corr = (c**2 / (s2[..., None] / t2[..., None] + lam[:, None, :])).sum(axis=-1)
    logdet = np.log(s2 + t2 * lam).sum(axis=-1)  # (..., U)
    return -0.5 * (
        (Nf * np.log(2.0 * np.pi) + (Nf - d) * np.log(s2[..., 0]) + logdet)[..., None]
        + (Q - corr) / s2
    )


def fit_mixture(
    model: pm.Model,
    *,
    method: str = "nuts",
    sampler: SamplerConfig | None = None,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    random_seed: int | None = None,
    advi_iterations: int = 20_000,
    **kwargs: Any,
) -> Any:
    """Posterior of :func:`mixture_model`: NUTS through :func:`hierbandit.bayes.sample`
    (numpyro by default) or ADVI (``method="advi"``, ``draws`` samples from the fit).

    ``sampler`` holds the settings (default :data:`MIXTURE_SAMPLER`: 2 chains × 500 draws after
    500 tuning steps); ``draws``, ``tune``, ``chains``, ``random_seed`` and ``kwargs`` (backend
    options) replace its fields when given. ADVI uses ``draws`` and ``random_seed`` only.

    Returns the run as an :class:`xarray.DataTree` in ArviZ's layout (``posterior``, and
    ``sample_stats`` from NUTS).
    """
    check_choice(method, ("nuts", "advi"), "method")
    cfg = resolve_sampler(
        sampler,
        MIXTURE_SAMPLER,
        extra=kwargs,
        draws=draws,
        tune=tune,
        chains=chains,
        random_seed=random_seed,
    )
    if method == "nuts":
        from hierbandit.bayes.sampling import sample

        return sample(model, cfg)
    with model:
        approx = pm.fit(
            check_positive_int(advi_iterations, "advi_iterations"),
            method="advi",
            random_seed=cfg.random_seed,
            progressbar=False,
        )
        return approx.sample(cfg.draws, random_seed=cfg.random_seed)


def posterior_summary(
    idata: Any,
    G: Any,
    b: Any,
    rr: Any,
    N: Any,
    *,
    max_draws: int = 400,
) -> xr.Dataset:
    """Label-invariant summaries of a mixture posterior.

    Parameters
    ----------
    idata
        The run of :func:`fit_mixture` (posterior ``w``, ``mu``, ``sigma`` [, ``tau``]).
    G, b, rr, N
        The per-user statistics the model was built from.
    max_draws : int, default 400
        Draws used (evenly thinned over all chains).

    Returns
    -------
    xarray.Dataset
        ``coclustering`` (user, user_): E[Σ_k r_uk r_vk]; ``coclustering_map`` (user, user_): the
        fraction of draws whose MAP labels put u and v together; ``partition`` (user): the draw's
        MAP labelling closest to ``coclustering`` in squared loss (canonical labels);
        ``n_occupied`` (draw): components that are some user's MAP component; ``gap`` (draw):
        smallest distance between two occupied components' means (∞ with one component).
    """
    from hierbandit.stats.partitions import canonical_labels

    G, b, rr, Nf = check_user_stats(G, b, rr, N)
    post = idata.posterior
    w = post["w"].values
    mu = post["mu"].values
    sigma = post["sigma"].values
    tau = post["tau"].values if "tau" in post else None
    C, D = sigma.shape
    flat = lambda a: a.reshape(C * D, *a.shape[2:])  # noqa: E731
    w, mu, sigma = flat(w), flat(mu), flat(sigma)
    tau = None if tau is None else flat(tau)
    n = w.shape[0]
    take = np.unique(
        np.linspace(0, n - 1, min(n, check_positive_int(max_draws, "max_draws"))).astype(int)
    )
    w, mu, sigma = w[take], mu[take], sigma[take]
    tau = None if tau is None else tau[take]
    ll = mixture_loglik(G, b, rr, Nf, mu, sigma, tau)  # (S, U, K)
    with np.errstate(divide="ignore"):
        logits = np.log(w)[:, None, :] + ll
    R = np.exp(logits - logsumexp(logits, axis=2, keepdims=True))
    P = np.einsum("suk,svk->uv", R, R) / R.shape[0]
    np.fill_diagonal(P, 1.0)
    hard = R.argmax(axis=2)  # (S, U)
    Pmap = coclustering_matrix(hard)
    loss = [float((((h[:, None] == h[None, :]).astype(float) - P) ** 2).sum()) for h in hard]
    best = int(np.argmin(loss))
    occupied = np.array([np.unique(h).size for h in hard])
    gaps = np.full(hard.shape[0], np.inf)
    for s, h in enumerate(hard):
        ks = np.unique(h)
        if ks.size > 1:
            M = mu[s, ks]
            dist = np.linalg.norm(M[:, None] - M[None], axis=-1)
            gaps[s] = dist[np.triu_indices(ks.size, 1)].min()
    U = b.shape[0]
    return xr.Dataset(
        {
            "coclustering": (("user", "user_"), P),
            "coclustering_map": (("user", "user_"), Pmap),
            "partition": (("user",), canonical_labels(hard[best])),
            "n_occupied": (("draw",), occupied),
            "gap": (("draw",), gaps),
        },
        coords={"user": np.arange(U), "user_": np.arange(U), "draw": take},
    )
