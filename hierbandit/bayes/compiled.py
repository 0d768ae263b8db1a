"""The collapsed model's log density and gradient as one compiled kernel, for nutpie.

:func:`~hierbandit.bayes.models.collapsed_model` defines the model; this module evaluates the
same log density (the PyMC model's, normalising constants and the Jacobians of PyMC's
transforms included) and its gradient in the model's unconstrained coordinates with a numba
kernel over the per-(arm, instance) sufficient statistics, and hands it to nutpie as a C
function: nutpie's Rust sampler calls it without Python and without the GIL, one thread per
chain (``SamplerConfig(driver="kernel")``, the default of a collapsed full-Bayes fit;
docs/decisions/bayes.md, B18).

The log density is, per arm, the priors of the model in its unconstrained coordinates
(half-normal sds of Σ_k and σ_k on the log scale, Beta CPCs of Σ_k's correlations on the
log-odds scale, each with the Jacobian of its transform; ``models._lkj_cholesky``) plus the
collapsed log-likelihood of the arm and its gradient in (Σ_k, σ²_k), which
:func:`hierbandit.stats.arm_likelihood.arm_loglik` computes in one vectorised pass over the
arm's cells (its module docstring gives the formulas). The gradient is then carried by hand
from Σ_k = L_kL_kᵀ, L_k = diag(s_k)W_k, through the CPC recursion of W_k to the unconstrained
coordinates.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import njit

from hierbandit.stats.arm_likelihood import GIVEN, INTEGRATED, arm_loglik, arm_stats

__all__ = ["BLOCK", "compile_collapsed", "expand", "kernel_data", "logp_and_grad", "n_params"]

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
_LOG_2PI = float(np.log(2.0 * np.pi))
_HALF_LOG_2_OVER_PI = float(0.5 * np.log(2.0 / np.pi))

#: cells per block of the kernel's vectorised loops
BLOCK = 64

#: layout of the kernel's data buffer: a header of ``_HEADER`` doubles, then the Beta
#: parameters of the CPCs, the rows per arm, and the statistics (K, R, N) with
#: R = d(d+1)/2 + d + 1 rows per arm: the lower triangle of G row by row, b, q
_HEADER = 16
(
    _H_K,
    _H_N,
    _H_D,
    _H_COLLAPSED,
    _H_LAM,
    _H_SD_SCALE,
    _H_NOISE_SCALE,
    _H_BLOCK,
    _H_TOTAL,
    _H_NDIM,
) = range(10)

# status codes for nutpie: 0 success; positive: recoverable (the proposal is rejected)
_OK, _NONFINITE_GRAD, _NONFINITE_LOGP, _BAD_DIM = 0, 3, 4, -1


def kernel_data(model: Any) -> np.ndarray:
    """The kernel's data buffer for a model built by
    :func:`~hierbandit.bayes.models.collapsed_model`: its sufficient statistics (read from the
    model's data containers) and hyperpriors (``hb_meta["hyper"]``), in one float64 array."""
    meta = getattr(model, "hb_meta", None) or {}
    if meta.get("kind") != "collapsed":
        raise ValueError(
            "model: the compiled kernel evaluates the collapsed model only "
            "(hierbandit.bayes.collapsed_model); sample other models with driver='pymc'"
        )
    hyper = meta["hyper"]
    G = np.asarray(model["suff_G"].get_value(), dtype=float)
    b = np.asarray(model["suff_b"].get_value(), dtype=float)
    q = np.asarray(model["suff_q"].get_value(), dtype=float)
    n = np.asarray(model["suff_n"].get_value(), dtype=float)
    Kn, N, d = b.shape
    stats = np.stack([arm_stats(G[k], b[k], q[k]) for k in range(Kn)])  # (K, R, N)
    pairs = [(i, j) for i in range(d) for j in range(i)]
    alpha = np.array([hyper["lkj_eta"] + (d - j - 2) / 2.0 for _, j in pairs], dtype=float)
    header = np.zeros(_HEADER)
    header[[_H_K, _H_N, _H_D]] = Kn, N, d
    header[_H_COLLAPSED] = 1.0 if meta["collapse_shared_mean"] else 0.0
    header[_H_LAM] = hyper["lam"]
    header[_H_SD_SCALE] = hyper["sd_scale"]
    header[_H_NOISE_SCALE] = hyper["noise_scale"]
    header[_H_BLOCK] = BLOCK
    header[_H_NDIM] = n_params(Kn, d, bool(meta["collapse_shared_mean"]))
    buf = np.concatenate([header, alpha, n.sum(axis=1), stats.ravel()])
    buf[_H_TOTAL] = buf.size
    return np.ascontiguousarray(buf, dtype=np.float64)


def n_params(K: int, d: int, collapsed: bool) -> int:
    """Unconstrained coordinates: log sds (K, d), logit CPCs (K, d(d−1)/2), log σ (K) and,
    unless the shared mean is integrated out, β₀ (K, d)."""
    return K * d + K * (d * (d - 1) // 2) + K + (0 if collapsed else K * d)


@njit(**_JIT)
def _softplus(x):  # pragma: no cover - compiled
    """log(1 + eˣ) without overflow."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit(**_JIT)
def logp_and_grad(x, buf, grad):  # pragma: no cover - compiled
    """The collapsed model's log density at the unconstrained point ``x`` and its gradient
    (into ``grad``), from the buffer of :func:`kernel_data`.

    ``x`` is laid out as PyMC and nutpie lay out the model's value variables: ``Sigma_sd_log__``
    (K, d), ``Sigma_cpc_logodds__`` (K, d(d−1)/2, absent for d = 1), ``sigma_log__`` (K) and,
    with the shared mean sampled, ``beta0`` (K, d), each in C order. Returns the log density
    (PyMC's ``model.logp()``: priors, Jacobians of the log and log-odds transforms, and the
    ``marginal_loglik`` potential).
    """
    Kn = int(buf[_H_K])
    N = int(buf[_H_N])
    d = int(buf[_H_D])
    collapsed = buf[_H_COLLAPSED] != 0.0
    mode = INTEGRATED if collapsed else GIVEN
    lam = buf[_H_LAM]
    sd_scale = buf[_H_SD_SCALE]
    noise_scale = buf[_H_NOISE_SCALE]
    nb_max = int(buf[_H_BLOCK])
    npair = d * (d - 1) // 2
    npr = d * (d + 1) // 2
    R = npr + d + 1
    o_alpha = _HEADER
    o_T = o_alpha + npair
    o_D = o_T + Kn
    stats = buf[o_D : o_D + Kn * R * N].reshape((Kn, R, N))
    ox_cpc = Kn * d
    ox_sig = ox_cpc + Kn * npair
    ox_b0 = ox_sig + Kn
    L = np.zeros((d, d))
    Wm = np.zeros((d, d))
    sd = np.empty(d)
    gS = np.empty((d, d))
    gL = np.empty((d, d))
    gW = np.empty((d, d))
    gb0 = np.zeros(d)
    beta0 = np.zeros(d)
    Z = np.zeros((d, d))  # the CPCs z_ij and 1 − acc_j of the row recursion, per row
    Tm = np.ones((d, d))
    logp = 0.0
    log_norm_sd = _HALF_LOG_2_OVER_PI - np.log(sd_scale)
    log_norm_noise = _HALF_LOG_2_OVER_PI - np.log(noise_scale)
    for k in range(Kn):
        # priors: HalfNormal sds and noise sd (log transform), Beta CPCs (log-odds transform)
        for i in range(d):
            xs = x[k * d + i]
            s = np.exp(xs)
            sd[i] = s
            logp += log_norm_sd - 0.5 * (s / sd_scale) ** 2 + xs
            grad[k * d + i] = 1.0 - (s / sd_scale) ** 2
        xsig = x[ox_sig + k]
        sig = np.exp(xsig)
        s2 = sig * sig
        logp += log_norm_noise - 0.5 * (sig / noise_scale) ** 2 + xsig
        grad[ox_sig + k] = 1.0 - (sig / noise_scale) ** 2
        for p in range(npair):
            xc = x[ox_cpc + k * npair + p]
            al = buf[o_alpha + p]
            # α(log u + log(1 − u)) − log B(α, α), u = expit(x)
            logp += -al * (_softplus(-xc) + _softplus(xc)) - (
                2.0 * math.lgamma(al) - math.lgamma(2.0 * al)
            )
            u = 1.0 / (1.0 + np.exp(-xc))
            grad[ox_cpc + k * npair + p] = al * (1.0 - 2.0 * u)
        if not collapsed:
            for i in range(d):
                bv = x[ox_b0 + k * d + i]
                beta0[i] = bv
                logp += -0.5 * _LOG_2PI + 0.5 * np.log(lam) - 0.5 * lam * bv * bv
                grad[ox_b0 + k * d + i] = -lam * bv
        # L = diag(sd) W from the CPCs z = 2u − 1 (models._cholesky_entries)
        p = 0
        for i in range(d):
            acc = 0.0
            for j in range(i):
                xc = x[ox_cpc + k * npair + p]
                z = 2.0 / (1.0 + np.exp(-xc)) - 1.0
                Z[i, j] = z
                t = 1.0 - acc
                Tm[i, j] = t
                Wm[i, j] = z * np.sqrt(t) if j > 0 else z
                acc += Wm[i, j] * Wm[i, j]
                p += 1
            Wm[i, i] = np.sqrt(1.0 - acc)
            for j in range(i + 1):
                L[i, j] = sd[i] * Wm[i, j]
        ll, s2_dll, _ = arm_loglik(stats[k], buf[o_T + k], L, s2, lam, mode, beta0, nb_max, gS, gb0)
        logp += ll
        grad[ox_sig + k] += 2.0 * s2_dll
        if not collapsed:
            for i in range(d):
                grad[ox_b0 + k * d + i] += gb0[i]
        # ∂ℓ/∂L = 2ΓL (lower triangle), then to the sds and the CPCs
        for i in range(d):
            for j in range(i + 1):
                v = 0.0
                for a in range(d):
                    v += gS[i, a] * L[a, j]
                gL[i, j] = 2.0 * v
        p0 = k * npair
        for i in range(d):
            gsd = 0.0
            for j in range(i + 1):
                gsd += gL[i, j] * Wm[i, j]
                gW[i, j] = gL[i, j] * sd[i]
            grad[k * d + i] += gsd * sd[i]
            # reverse of the row recursion: W_ij = z_ij √(1 − acc_j), W_ii = √(1 − acc_i)
            row0 = p0 + i * (i - 1) // 2
            gacc = -0.5 * gW[i, i] / Wm[i, i] if i > 0 else 0.0
            for j in range(i - 1, -1, -1):
                g_w = gW[i, j] + 2.0 * Wm[i, j] * gacc
                xc = x[ox_cpc + row0 + j]
                u = 1.0 / (1.0 + np.exp(-xc))
                if j > 0:
                    st = np.sqrt(Tm[i, j])
                    gz = g_w * st
                    gacc += -0.5 * g_w * Z[i, j] / st
                else:
                    gz = g_w
                grad[ox_cpc + row0 + j] += gz * 2.0 * u * (1.0 - u)
    return logp


@njit(**_JIT)
def expand(x, buf, out):  # pragma: no cover - compiled
    """The stored variables of one draw at the unconstrained point ``x``: Σ (K, d, d), σ (K)
    and, with the shared mean sampled, β₀ (K, d), one after the other in ``out``
    (``models.constrain_draws`` in compiled form)."""
    Kn = int(buf[_H_K])
    d = int(buf[_H_D])
    collapsed = buf[_H_COLLAPSED] != 0.0
    npair = d * (d - 1) // 2
    ox_cpc = Kn * d
    ox_sig = ox_cpc + Kn * npair
    ox_b0 = ox_sig + Kn
    o_sig = Kn * d * d
    L = np.zeros((d, d))
    for k in range(Kn):
        p = 0
        for i in range(d):
            s = np.exp(x[k * d + i])
            acc = 0.0
            for j in range(i):
                z = 2.0 / (1.0 + np.exp(-x[ox_cpc + k * npair + p])) - 1.0
                w = z * np.sqrt(1.0 - acc) if j > 0 else z
                acc += w * w
                L[i, j] = s * w
                p += 1
            L[i, i] = s * np.sqrt(1.0 - acc)
        for i in range(d):
            for j in range(d):
                v = 0.0
                for a in range(min(i, j) + 1):
                    v += L[i, a] * L[j, a]
                out[k * d * d + i * d + j] = v
        out[o_sig + k] = np.exp(x[ox_sig + k])
        if not collapsed:
            for i in range(d):
                out[o_sig + Kn + k * d + i] = x[ox_b0 + k * d + i]


_CFUNCS: list[Any] = []


def _cfuncs() -> tuple[Any, Any]:
    """The C entry points nutpie calls (compiled on first use, then from numba's cache):
    ``logp(dim, x, grad, logp, data) -> status`` and
    ``expand(dim, n_expanded, x, out, data) -> status``, ``data`` the :func:`kernel_data`
    buffer. Status 0 is success; 3 and 4 (a non-finite gradient or log density: nutpie rejects
    the proposal) are recoverable; −1 (wrong sizes) is not."""
    if _CFUNCS:
        return _CFUNCS[0], _CFUNCS[1]
    from numba import carray, types

    sig_logp = types.int64(
        types.uint64,
        types.CPointer(types.double),
        types.CPointer(types.double),
        types.CPointer(types.double),
        types.voidptr,
    )
    sig_expand = types.int64(
        types.uint64,
        types.uint64,
        types.CPointer(types.double),
        types.CPointer(types.double),
        types.voidptr,
    )

    @numba.cfunc(sig_logp, cache=True, nogil=True, error_model="numpy")
    def logp_c(dim, x_, out_, logp_, data_):  # pragma: no cover - compiled
        head = carray(data_, (_HEADER,), dtype=np.float64)
        if dim != int(head[_H_NDIM]):
            return _BAD_DIM
        buf = carray(data_, (int(head[_H_TOTAL]),), dtype=np.float64)
        x = carray(x_, (dim,))
        grad = carray(out_, (dim,))
        value = logp_and_grad(x, buf, grad)
        logp_[0] = value
        for i in range(dim):
            if not np.isfinite(grad[i]):
                return _NONFINITE_GRAD
        if not np.isfinite(value):
            return _NONFINITE_LOGP
        return _OK

    @numba.cfunc(sig_expand, cache=True, nogil=True, error_model="numpy")
    def expand_c(dim, n_expanded, x_, out_, data_):  # pragma: no cover - compiled
        head = carray(data_, (_HEADER,), dtype=np.float64)
        if dim != int(head[_H_NDIM]):
            return _BAD_DIM
        buf = carray(data_, (int(head[_H_TOTAL]),), dtype=np.float64)
        x = carray(x_, (dim,))
        out = carray(out_, (n_expanded,))
        expand(x, buf, out)
        return _OK

    _CFUNCS[:] = [logp_c, expand_c]
    return logp_c, expand_c


def compile_collapsed(model: Any) -> Any:
    """A nutpie model of ``model`` (built by :func:`~hierbandit.bayes.models.collapsed_model`)
    whose log density and gradient are the compiled kernel (:func:`logp_and_grad`) and whose
    draws are expanded to ``Sigma``, ``sigma`` and, with the shared mean sampled, ``beta0``
    (:func:`expand`). The initial points are PyMC's, jittered as nutpie's own compilation of a
    PyMC model jitters them. Pass it to ``nutpie.sample``.

    Raises
    ------
    ValueError
        If ``model`` is not a collapsed model built by the package.
    """
    import threading

    import pandas as pd
    from nutpie.compile_pymc import CompiledPyMCModel
    from pymc.initial_point import make_initial_point_fn

    buf = kernel_data(model)
    Kn, d = int(buf[_H_K]), int(buf[_H_D])
    collapsed = buf[_H_COLLAPSED] != 0.0
    n_dim = int(buf[_H_NDIM])
    logp_c, expand_c = _cfuncs()
    names = ["Sigma", "sigma"] + ([] if collapsed else ["beta0"])
    shapes = [(Kn, d, d), (Kn,)] + ([] if collapsed else [(Kn, d)])
    all_dims = {
        "Sigma": ("arm", "feature", "feature_"),
        "sigma": ("arm",),
        "beta0": ("arm", "feature"),
    }
    ends = np.cumsum([int(np.prod(s)) for s in shapes])
    slices = [slice(int(e - np.prod(s)), int(e)) for s, e in zip(shapes, ends, strict=True)]
    value_names = [model.rvs_to_values[rv].name for rv in model.free_RVs]
    point_fn = make_initial_point_fn(
        model=model, jitter_rvs=set(model.free_RVs), return_transformed=True
    )
    lock = threading.Lock()

    def initial_point(seed: int) -> np.ndarray:
        with lock:  # nutpie calls it from its chains' threads
            point = point_fn(seed)
        flat = np.concatenate([np.asarray(point[n], dtype=float).ravel() for n in value_names])
        if flat.size != n_dim:  # pragma: no cover - the model and the kernel disagree
            raise ValueError(f"initial point of size {flat.size}; the kernel expects {n_dim}")
        return flat

    coords = {
        k: pd.Index(np.asarray(v))
        for k, v in model.coords.items()
        if k in ("arm", "feature", "feature_")
    }
    return CompiledPyMCModel(
        _n_dim=n_dim,
        dims={n: all_dims[n] for n in names},
        _coords=coords,
        _shapes=dict(zip(names, shapes, strict=True)),
        compiled_logp_func=logp_c,
        compiled_expand_func=expand_c,
        initial_point_func=initial_point,
        shared_data={},
        shared_var_keys={},
        user_data=buf,
        n_expanded=int(ends[-1]),
        shape_info=(names, slices, shapes),
        logp_func=None,
        expand_func=None,
        reparameterized_names=[],
    )
