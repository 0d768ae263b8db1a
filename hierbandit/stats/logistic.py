"""Logistic regression core: Newton/IRLS steps, the penalised MLE and the Laplace approximation.

The click model of the multi-user cascading bandits (Park & Jia 2025, §3.1.1) is a logistic
regression ``P(click | z) = σ(zᵀθ)`` on the joint feature ``z = [x; onehot(k)]`` (see
docs/maths/cascade.md §1, and "The Bayesian side" of docs/cascading.md). Everything here works
on a flattened table of observed pulls ``(Z, y)`` (one row per displayed position,
``y ∈ {0, 1}``) and a Gaussian prior ``N(m, P⁻¹)`` (``P = λI, m = 0`` is the paper's ``A = λI``
initialisation).

* :func:`newton_update` — the corrected one-step Newton / recursive-Laplace update of
  docs/maths/cascade.md §2.2 (``update="newton1"``): ``A ← A + Σ w z zᵀ``,
  ``θ ← θ + A⁻¹ Σ z (y − p̂)`` with ``p̂, w`` at the pre-update ``θ`` and the updated ``A`` in
  the solve.
* :func:`literal_update` — Algorithm 1 lines 23–28 as printed (``b ← b + Σ z (y − p̂)``,
  ``θ ← A⁻¹ b``), which settles near θ*/2 (docs/maths/cascade.md §2.1; kept for fidelity
  only).
* :func:`penalized_map` — Newton-IRLS to convergence on the penalised log-likelihood
  (``update="batch_map"``), and :func:`laplace_approximation` — the Gaussian ``N(θ_MAP, H⁻¹)``
  with ``H = P + Zᵀ W(θ_MAP) Z`` (docs/maths/cascade.md §2.3–2.4).
* :func:`joint_quadform` — the squared UCB widths ``zᵀ S z`` for every context and arm from the
  block structure of ``z`` (docs/maths/cascade.md §4, O(N(d² + dK))).
* :class:`OnlineLogistic` — the estimator state shared by UCBBP, AUCBBP and their baselines.

The functions accept leading batch dimensions (``theta (..., p)``, ``A (..., p, p)``,
``Z (..., n, p)``, ``y (..., n)``) so that independent problems are solved together; the hot
paths use plain NumPy arrays and do not validate (the public policies validate first).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.linalg
from scipy.special import expit

from hierbandit._validation import check_choice, check_scalar
from hierbandit.stats import linalg

__all__ = [
    "UPDATES",
    "LaplaceApproximation",
    "MAPResult",
    "OnlineLogistic",
    "bernoulli_loglik",
    "cascade_loglik",
    "joint_features",
    "joint_quadform",
    "laplace_approximation",
    "literal_update",
    "logistic_loglik",
    "newton_update",
    "penalized_map",
    "predictive_click_probability",
    "sigmoid",
    "spd_factor",
]

#: parameter-update rules of the cascading policies (docs/maths/cascade.md §2)
UPDATES = ("newton1", "paper_literal", "batch_map")

#: warnings point at the first caller outside the package
_PACKAGE_DIR = str(Path(__file__).parent.parent) + os.sep


def sigmoid(u: Any) -> np.ndarray:
    """The logistic function σ(u) = 1 / (1 + e⁻ᵘ) (``scipy.special.expit``: no overflow)."""
    return expit(u)


def bernoulli_loglik(eta: Any, y: Any) -> np.ndarray:
    """Elementwise ``y log σ(η) + (1 − y) log(1 − σ(η)) = yη − log(1 + eᶯ)``, overflow-free."""
    eta = np.asarray(eta, dtype=float)
    return np.asarray(y, dtype=float) * eta - np.logaddexp(0.0, eta)


def logistic_loglik(theta: Any, Z: Any, y: Any) -> np.ndarray:
    """Log-likelihood ``Σᵢ log p(yᵢ | zᵢ, θ)`` of a logistic regression (batched over leading dims).

    Parameters
    ----------
    theta : array_like, shape (..., p)
    Z : array_like, shape (..., n, p)
    y : array_like, shape (..., n), entries in {0, 1}

    Returns
    -------
    numpy.ndarray, shape (...)
    """
    theta = np.asarray(theta, dtype=float)
    eta = np.einsum("...np,...p->...n", np.asarray(Z, dtype=float), theta)
    return bernoulli_loglik(eta, y).sum(axis=-1)


def cascade_loglik(theta: Any, X: Any, arms: Any, clicks: Any) -> float:
    """Session-level log-likelihood of cascade data, computed session by session.

    See docs/maths/cascade.md §1.

    For a session with context ``x`` and displayed arms ``k_1, …, k_{h*}`` (a click at ``h*``, or
    no click and ``h* = H``),
    ``log p = Σ_{h<h*} log(1 − σ(η_h)) + [click] log σ(η_{h*}) + [no click] log(1 − σ(η_{h*}))``
    with ``η_h = [x; onehot(k_h)]ᵀθ``. This is the cascade form the test of
    :func:`logistic_loglik` on the flattened rows checks against.

    Parameters
    ----------
    theta : array_like, shape (d + K,)
    X : array_like, shape (S, d)
        Context of each session.
    arms : array_like of int, shape (S, H)
        Displayed arm at each position, ``-1`` after the session ended.
    clicks : array_like, shape (S, H)
        1 at the clicked position, 0 elsewhere (the cascade rule is assumed, not checked).

    Returns
    -------
    float
    """
    theta = np.asarray(theta, dtype=float)
    X = np.asarray(X, dtype=float)
    arms = np.asarray(arms, dtype=np.int64)
    clicks = np.asarray(clicks)
    d = X.shape[1]
    total = 0.0
    for s in range(X.shape[0]):
        shown = arms[s][arms[s] >= 0]
        eta = X[s] @ theta[:d] + theta[d + shown]
        h_star = shown.size - 1
        clicked = bool(clicks[s, h_star]) if shown.size else False
        # every position before the last was examined and skipped
        total += float(np.sum(-np.logaddexp(0.0, eta[:h_star])))
        if shown.size:
            last = eta[h_star]
            total += float(-np.logaddexp(0.0, -last) if clicked else -np.logaddexp(0.0, last))
    return total


def joint_features(X: Any, arms: Any, n_arms: int) -> np.ndarray:
    """Rows ``z = [x; onehot(k)]`` for contexts ``X (..., d)`` and arms ``arms (...)``.

    Returns an array of shape ``(..., d + K)``.
    """
    X = np.asarray(X, dtype=float)
    arms = np.asarray(arms, dtype=np.int64)
    d = X.shape[-1]
    Z = np.zeros((*arms.shape, d + n_arms))
    Z[..., :d] = X
    np.put_along_axis(Z, (d + arms)[..., None], 1.0, axis=-1)
    return Z


def joint_quadform(X: Any, S: Any, n_arms: int) -> np.ndarray:
    """``z_{n,k}ᵀ S z_{n,k}`` for every context row and arm, from the block structure of ``z``.

    With ``z = [x; e_k]``: ``zᵀSz = xᵀS_xx x + 2 xᵀ S_{x,d+k} + S_{d+k,d+k}``
    (docs/maths/cascade.md §4).
    Rounding can make a value a hair below zero; results are clipped at 0.

    Parameters
    ----------
    X : array_like, shape (N, d)
    S : array_like, shape (d + K, d + K), symmetric
    n_arms : int

    Returns
    -------
    numpy.ndarray, shape (N, K)
    """
    X = np.asarray(X, dtype=float)
    S = np.asarray(S, dtype=float)
    d = X.shape[-1]
    XS = X @ S[:d, :d]
    quad = np.einsum("nd,nd->n", XS, X)
    cross = X @ S[:d, d : d + n_arms]
    out = quad[:, None] + 2.0 * cross + np.diagonal(S)[d : d + n_arms][None, :]
    np.maximum(out, 0.0, out=out)
    return out


def spd_factor(A: np.ndarray, floor: float | None = None) -> np.ndarray:
    """Lower Cholesky factor (for :func:`scipy.linalg.cho_solve` with ``lower=True``) of a
    symmetric matrix that is positive definite in exact arithmetic, with A ⪰ ``floor``·I.

    LAPACK's factorisation is used when it succeeds. When rounding has made ``A`` numerically
    indefinite (a regulariser below the resolution of huge data), every pivot is floored at
    ``floor`` instead (:func:`~hierbandit.stats.linalg.cholesky_floored`): each exact pivot
    is a Schur complement of ``A`` and so at least ``floor``. Without ``floor`` the floor is
    p·ε·max diag(A), the resolution of float64. The result is always a finite factor of a
    positive definite matrix (for finite ``A``).
    """
    try:
        return scipy.linalg.cho_factor(A, lower=True, check_finite=False)[0]
    except np.linalg.LinAlgError:
        pass
    p = A.shape[0]
    top = float(np.max(np.abs(np.diagonal(A)))) if p else 1.0
    if floor is None or not floor > 0:
        floor = p * np.finfo(float).eps * top
    floor = max(float(floor), np.finfo(float).tiny)
    L = np.empty((p, p))
    linalg.cholesky_floored(np.ascontiguousarray(0.5 * (A + A.T)), floor, L)
    return L


def _solve_spd(A: np.ndarray, rhs: np.ndarray, floor: float | None = None) -> np.ndarray:
    """Solve ``A x = rhs`` for symmetric positive definite ``A`` (batched over leading dims);
    a 2-d ``A`` is factorised by :func:`spd_factor` (so a numerically singular ``A`` ⪰
    ``floor``·I is still solved)."""
    if A.ndim == 2:
        return scipy.linalg.cho_solve((spd_factor(A, floor), True), rhs, check_finite=False)
    return np.linalg.solve(A, rhs[..., None])[..., 0]


def newton_update(theta: Any, A: Any, Z: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """The corrected one-step Newton (recursive Laplace) update (``newton1``).

    See docs/maths/cascade.md §2.2.

    With ``p̂ = σ(Zθ)`` and ``w = p̂(1 − p̂)`` at the pre-update ``θ``::

        A_new = A + Zᵀ diag(w) Z
        θ_new = θ + A_new⁻¹ Zᵀ (y − p̂)

    This equals keeping the paper's ``A`` and accumulating the IRLS working responses
    ``b ← b + w z (zᵀθ + (y − p̂)/w)`` with ``θ = A⁻¹ b`` (the invariant ``b = Aθ``).

    Parameters
    ----------
    theta : array_like, shape (..., p)
    A : array_like, shape (..., p, p), symmetric positive definite
    Z : array_like, shape (..., n, p)
    y : array_like, shape (..., n), entries in {0, 1}

    Returns
    -------
    theta_new : numpy.ndarray, shape (..., p)
    A_new : numpy.ndarray, shape (..., p, p)
    """
    theta = np.asarray(theta, dtype=float)
    A = np.asarray(A, dtype=float)
    Z = np.asarray(Z, dtype=float)
    y = np.asarray(y, dtype=float)
    p_hat = expit(np.einsum("...np,...p->...n", Z, theta))
    w = p_hat * (1.0 - p_hat)
    A_new = A + np.swapaxes(Z, -1, -2) @ (w[..., None] * Z)
    grad = np.einsum("...np,...n->...p", Z, y - p_hat)
    return theta + _solve_spd(A_new, grad), A_new


def literal_update(
    theta: Any, A: Any, b: Any, Z: Any, y: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Algorithm 1 lines 23–28 / Algorithm 3 lines 35–40 exactly as printed.

    See docs/maths/cascade.md §2.1.

    ``A ← A + Σ w z zᵀ``, ``b ← b + Σ z (y − p̂)`` with ``p̂, w`` at the pre-update ``θ``, then
    ``θ ← A⁻¹ b``. The working-response term ``w z zᵀ θ`` of a real IRLS step is missing, so the
    estimate settles near θ*/2 and the policies built on it have linear regret; it is kept only
    to document that (``update="paper_literal"``).

    Returns
    -------
    theta_new, A_new, b_new : numpy.ndarray
    """
    theta = np.asarray(theta, dtype=float)
    A = np.asarray(A, dtype=float)
    b = np.asarray(b, dtype=float)
    Z = np.asarray(Z, dtype=float)
    y = np.asarray(y, dtype=float)
    p_hat = expit(np.einsum("...np,...p->...n", Z, theta))
    w = p_hat * (1.0 - p_hat)
    A_new = A + np.swapaxes(Z, -1, -2) @ (w[..., None] * Z)
    b_new = b + np.einsum("...np,...n->...p", Z, y - p_hat)
    return _solve_spd(A_new, b_new), A_new, b_new


@dataclass(frozen=True)
class MAPResult:
    """Result of :func:`penalized_map`.

    Attributes
    ----------
    theta : numpy.ndarray, shape (..., p)
        The maximiser of the penalised log-likelihood.
    hessian : numpy.ndarray, shape (..., p, p)
        ``P + Zᵀ W(θ) Z``, the negative Hessian at ``theta`` (the Laplace precision).
    n_iter : int
        Newton iterations run.
    converged : bool
        Whether every problem's step fell below ``tol``.
    grad_norm : float
        Largest max-norm of the penalised gradient at ``theta``.
    """

    theta: np.ndarray
    hessian: np.ndarray
    n_iter: int
    converged: bool
    grad_norm: float


def _prior_terms(p: int, lam: float | None, prior_mean: Any, prior_precision: Any) -> tuple:
    if prior_precision is None:
        lam = 1.0 if lam is None else float(lam)
        P = lam * np.eye(p)
    else:
        P = np.asarray(prior_precision, dtype=float)
    m = np.zeros(p) if prior_mean is None else np.asarray(prior_mean, dtype=float)
    return m, P


def penalized_map(
    Z: Any,
    y: Any,
    *,
    lam: float | None = None,
    prior_mean: Any = None,
    prior_precision: Any = None,
    theta0: Any = None,
    tol: float = 1e-8,
    max_iter: int = 50,
) -> MAPResult:
    """Newton-IRLS for the MAP of a logistic regression with a Gaussian prior.

    See docs/maths/cascade.md §2.3.

    Maximises ``Σᵢ [yᵢ log σ(zᵢᵀθ) + (1 − yᵢ) log(1 − σ(zᵢᵀθ))] − ½ (θ − m)ᵀ P (θ − m)`` by
    ``θ ← θ + (P + Zᵀ W Z)⁻¹ (Zᵀ(y − p) − P(θ − m))`` until the largest step coordinate is below
    ``tol``. The objective is strictly concave (``P`` positive definite), so plain Newton from a
    warm start converges; a step-halving guard keeps the objective increasing far from the mode.

    Parameters
    ----------
    Z : array_like, shape (..., n, p)
    y : array_like, shape (..., n)
    lam : float, optional
        Ridge precision: the prior is ``N(0, λ⁻¹ I)`` (default λ = 1) unless ``prior_precision``
        is given.
    prior_mean : array_like, shape (..., p), optional
    prior_precision : array_like, shape (..., p, p), optional
    theta0 : array_like, shape (..., p), optional
        Warm start (default the prior mean).
    tol, max_iter
        Stopping rule.

    Returns
    -------
    MAPResult
    """
    Z = np.asarray(Z, dtype=float)
    y = np.asarray(y, dtype=float)
    p = Z.shape[-1]
    m, P = _prior_terms(p, lam, prior_mean, prior_precision)
    batch = np.broadcast_shapes(Z.shape[:-2], m.shape[:-1], P.shape[:-2])
    theta = np.broadcast_to(m if theta0 is None else np.asarray(theta0, float), (*batch, p)).copy()
    Zt = np.swapaxes(Z, -1, -2)

    def objective(th: np.ndarray) -> np.ndarray:
        dev = th - m
        return logistic_loglik(th, Z, y) - 0.5 * np.einsum("...p,...pq,...q->...", dev, P, dev)

    # H ⪰ P: the floor of a factorisation that rounding defeats (huge rows)
    floor = float(np.linalg.eigvalsh(0.5 * (P + P.T))[0]) if P.ndim == 2 else None
    converged = False
    n_iter = 0
    obj = objective(theta)
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        prob = expit(np.einsum("...np,...p->...n", Z, theta))
        w = prob * (1.0 - prob)
        H = P + Zt @ (w[..., None] * Z)
        grad = np.einsum("...np,...n->...p", Z, y - prob) - np.einsum(
            "...pq,...q->...p", P, theta - m
        )
        step = _solve_spd(H, grad, floor)
        new = theta + step
        new_obj = objective(new)
        # step halving where the full step would decrease the objective (rare; far from the mode)
        for _ in range(30):
            bad = new_obj < obj - 1e-12 * np.maximum(1.0, np.abs(obj))
            if not np.any(bad):
                break
            step = np.where(np.asarray(bad)[..., None], 0.5 * step, step)
            new = theta + step
            new_obj = objective(new)
        theta, obj = new, new_obj
        if float(np.max(np.abs(step))) < tol:
            converged = True
            break
    prob = expit(np.einsum("...np,...p->...n", Z, theta))
    w = prob * (1.0 - prob)
    H = P + Zt @ (w[..., None] * Z)
    grad = np.einsum("...np,...n->...p", Z, y - prob) - np.einsum("...pq,...q->...p", P, theta - m)
    return MAPResult(
        theta=theta,
        hessian=0.5 * (H + np.swapaxes(H, -1, -2)),
        n_iter=n_iter,
        converged=converged,
        grad_norm=float(np.max(np.abs(grad))) if grad.size else 0.0,
    )


@dataclass(frozen=True)
class LaplaceApproximation:
    """A Gaussian approximation ``N(mean, precision⁻¹)`` of a logistic-regression posterior.

    Attributes
    ----------
    mean : numpy.ndarray, shape (p,)
    precision : numpy.ndarray, shape (p, p)
    map_result : MAPResult or None
        The Newton run that produced it (``None`` for an online posterior).
    """

    mean: np.ndarray
    precision: np.ndarray
    map_result: MAPResult | None = None

    @property
    def cov(self) -> np.ndarray:
        """The covariance ``precision⁻¹`` (Cholesky inverse, exactly symmetric)."""
        return _spd_inverse(self.precision)

    @property
    def sd(self) -> np.ndarray:
        """Marginal standard deviations."""
        return np.sqrt(np.diagonal(self.cov, axis1=-2, axis2=-1))

    def logit_moments(self, Z: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean ``zᵀμ`` and variance ``zᵀΣz`` of the logit for each row of ``Z (n, p)``."""
        Z = np.asarray(Z, dtype=float)
        mu = Z @ self.mean
        s2 = np.einsum("np,pq,nq->n", Z, self.cov, Z)
        return mu, np.maximum(s2, 0.0)

    def click_probability(self, Z: Any, method: str = "plugin") -> np.ndarray:
        """Predictive click probability of each row of ``Z`` (see
        :func:`predictive_click_probability`)."""
        mu, s2 = self.logit_moments(Z)
        return predictive_click_probability(mu, s2, method=method)


def _spd_inverse(A: np.ndarray) -> np.ndarray:
    if A.ndim == 2:
        inv = scipy.linalg.cho_solve(
            scipy.linalg.cho_factor(A, check_finite=False), np.eye(A.shape[0])
        )
    else:
        inv = np.linalg.inv(A)
    return 0.5 * (inv + np.swapaxes(inv, -1, -2))


def laplace_approximation(
    Z: Any,
    y: Any,
    *,
    lam: float | None = None,
    prior_mean: Any = None,
    prior_precision: Any = None,
    theta0: Any = None,
    tol: float = 1e-10,
    max_iter: int = 100,
) -> LaplaceApproximation:
    """The batch Laplace approximation ``N(θ_MAP, (P + Zᵀ W(θ_MAP) Z)⁻¹)``.

    See docs/maths/cascade.md §2.4.

    Arguments as in :func:`penalized_map`; raises ``ValueError`` if Newton did not converge.
    """
    res = penalized_map(
        Z,
        y,
        lam=lam,
        prior_mean=prior_mean,
        prior_precision=prior_precision,
        theta0=theta0,
        tol=tol,
        max_iter=max_iter,
    )
    if not res.converged:
        raise ValueError(
            f"Newton-IRLS did not converge in {max_iter} iterations (last gradient max-norm "
            f"{res.grad_norm:.3g}); the data may be separable with a very weak prior"
        )
    return LaplaceApproximation(mean=res.theta, precision=res.hessian, map_result=res)


def predictive_click_probability(mu: Any, s2: Any, method: str = "plugin") -> np.ndarray:
    """Predictive ``P(click)`` from the logit mean ``mu`` and variance ``s2``.

    See docs/maths/cascade.md §2.4.

    ``"plugin"``: ``σ(μ)`` (what the paper uses); ``"probit"``: MacKay's approximation
    ``σ(μ / √(1 + π s²/8))`` of ``E[σ(η)]``, ``η ~ N(μ, s²)``.
    """
    check_choice(method, ("plugin", "probit"), "method")
    mu = np.asarray(mu, dtype=float)
    if method == "plugin":
        return expit(mu)
    return expit(mu / np.sqrt(1.0 + np.pi * np.asarray(s2, dtype=float) / 8.0))


class OnlineLogistic:
    """The logistic estimator state of UCBBP / AUCBBP (Algorithm 1 line 1 and lines 23–28).

    Holds ``θ̂``, the information matrix ``A`` (``λI`` plus the weighted Gram matrix), the
    paper's ``b`` (used by the literal update only), its Cholesky factor and the observation
    count ``ñ``; :meth:`update` adds one episode's batch of displayed pulls by the chosen rule.

    Parameters
    ----------
    n_params : int
        ``p = d + K``.
    lam : float
        Ridge / prior precision λ (> 0): ``A₀ = λI``, ``θ̂₀ = 0``.
    update : {"newton1", "paper_literal", "batch_map"}
        ``"newton1"`` (default, the corrected recursive-Laplace step), ``"paper_literal"`` (as
        printed; biased to ≈θ*/2) or ``"batch_map"`` (Newton-IRLS to convergence on all data so
        far, with ``A`` the Hessian at the MAP; keeps the data, cost grows with history).
    prior_mean, prior_precision : array_like, optional
        Gaussian prior ``N(m, P⁻¹)`` replacing ``N(0, λ⁻¹I)`` (warm start from historical logs):
        ``θ̂₀ = m``, ``A₀ = P`` and, for the literal rule, ``b₀ = P m``.
    tol, max_iter
        Stopping rule of ``batch_map``.

    Notes
    -----
    Inputs are not validated here; the policies validate them first.

    A ``batch_map`` refit runs at most ``max_iter`` Newton-IRLS iterations. When it stops
    short of the MAP, :attr:`converged` is False and :meth:`update` emits a
    ``RuntimeWarning``; the estimate is the last iterate, and the next refit starts from it.
    """

    #: state added after checkpoints were first written, with the value an older file implies
    #: (whether its θ̂ is within ``tol`` of the MAP of its stored rows; see :attr:`converged`)
    _checkpoint_added: ClassVar[dict[str, Any]] = {
        "_converged": lambda est: bool(est._map_step() <= est.tol),
    }

    def __init__(
        self,
        n_params: int,
        lam: float = 1.0,
        update: str = "newton1",
        *,
        prior_mean: Any = None,
        prior_precision: Any = None,
        tol: float = 1e-8,
        max_iter: int = 50,
    ) -> None:
        self.n_params = int(n_params)
        self.lam = check_scalar(lam, "lam", low=0.0, low_inclusive=False)
        self.update_rule = check_choice(update, UPDATES, "update")
        p = self.n_params
        self.prior_mean = np.zeros(p) if prior_mean is None else np.array(prior_mean, dtype=float)
        self.prior_precision = (
            self.lam * np.eye(p)
            if prior_precision is None
            else np.array(prior_precision, dtype=float)
        )
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self.theta = self.prior_mean.copy()
        self.A = self.prior_precision.copy()
        self.b = self.prior_precision @ self.prior_mean
        self.n_obs = 0
        self._chol = scipy.linalg.cho_factor(self.A, lower=True, check_finite=False)[0]
        self._cov: np.ndarray | None = None
        # stored data for batch_map: rows z and responses y (grown by doubling)
        self._Z = np.empty((0, p))
        self._y = np.empty(0)
        self._converged = True

    # ------------------------------------------------------------------ state
    @property
    def cov(self) -> np.ndarray:
        """``A⁻¹`` (cached until the next update)."""
        if self._cov is None:
            inv = scipy.linalg.cho_solve((self._chol, True), np.eye(self.n_params))
            self._cov = 0.5 * (inv + inv.T)
        return self._cov

    def quadform(self, Z: Any) -> np.ndarray:
        """``zᵀA⁻¹z`` for every row of ``Z (n, p)`` by one triangular solve."""
        Z = np.asarray(Z, dtype=float)
        V = scipy.linalg.solve_triangular(self._chol, Z.T, lower=True, check_finite=False)
        return np.einsum("pn,pn->n", V, V)

    @property
    def converged(self) -> bool:
        """Whether the last :meth:`update` reached its solution.

        For ``batch_map``: whether the Newton-IRLS refit ended within ``tol`` of the MAP (its
        last step, or the Newton step from where it stopped after ``max_iter`` iterations, below
        ``tol`` in every coordinate). False: θ̂ is the last iterate, not the MAP, and the update
        warned. The one-step rules (``newton1``, ``paper_literal``) solve one linear system
        and have nothing to converge: always True, as before any update.
        """
        return bool(self._converged)

    def stored_data(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows kept by ``batch_map`` (empty for the other rules)."""
        n = self.n_obs if self.update_rule == "batch_map" else 0
        return self._Z[:n], self._y[:n]

    # ------------------------------------------------------------------ update
    def _floor(self) -> float:
        """λ_min of the prior precision: A ⪰ it always (the floor of :func:`spd_factor`)."""
        return float(np.linalg.eigvalsh(self.prior_precision)[0])

    def _factor(self, A: np.ndarray) -> np.ndarray:
        try:
            return scipy.linalg.cho_factor(A, lower=True, check_finite=False)[0]
        except np.linalg.LinAlgError:
            return spd_factor(A, self._floor())

    def _map_step(
        self,
        Z: np.ndarray | None = None,
        y: np.ndarray | None = None,
        theta: np.ndarray | None = None,
        chol: np.ndarray | None = None,
    ) -> float:
        """Largest coordinate of the Newton step ``A⁻¹∇`` at θ (``∇`` the penalised gradient
        over the rows, ``A`` the Hessian there): how far a ``batch_map`` θ still is from the
        MAP. Defaults: the stored rows, θ̂ and the current factor; 0 for the one-step rules,
        which store no rows."""
        if self.update_rule != "batch_map":
            return 0.0
        if Z is None or y is None:
            Z, y = self.stored_data()
        theta = self.theta if theta is None else theta
        chol = self._chol if chol is None else chol
        grad = Z.T @ (y - expit(Z @ theta)) - self.prior_precision @ (theta - self.prior_mean)
        step = scipy.linalg.cho_solve((chol, True), grad, check_finite=False)
        return float(np.max(np.abs(step))) if step.size else 0.0

    def update(self, Z: np.ndarray, y: np.ndarray) -> None:
        """Add one episode's batch of displayed pulls (rows ``Z (n, p)``, clicks ``y (n,)``).

        The new state is computed in temporaries and committed only when complete: a
        ``ValueError`` (naming ``contexts``, whose magnitude is the only way to get there)
        leaves the estimator unchanged. The information matrix is factorised by
        :func:`spd_factor` with the prior precision's smallest eigenvalue as the floor, so a
        regulariser hidden by rounding never makes the factorisation fail.

        Warns
        -----
        RuntimeWarning
            A ``batch_map`` refit did not converge in ``max_iter`` iterations (:attr:`converged`
            is then False; the update is kept).
        """
        n = Z.shape[0]
        if n == 0:
            return
        rule = self.update_rule
        converged, step = True, 0.0
        if rule == "batch_map":
            Zall = np.concatenate([self._Z[: self.n_obs], Z])
            yall = np.concatenate([self._y[: self.n_obs], y])
            res = penalized_map(
                Zall,
                yall,
                prior_mean=self.prior_mean,
                prior_precision=self.prior_precision,
                theta0=self.theta,
                tol=self.tol,
                max_iter=self.max_iter,
            )
            theta, A = res.theta, res.hessian
            A = 0.5 * (A + A.T)
            chol = self._factor(A)
            b = A @ theta
            if not res.converged:
                # out of iterations: converged all the same if θ is within tol of the MAP
                step = self._map_step(Zall, yall, theta, chol)
                converged = bool(step <= self.tol)
        else:
            p_hat = expit(Z @ self.theta)
            w = p_hat * (1.0 - p_hat)
            A = self.A + Z.T @ (w[:, None] * Z)
            A = 0.5 * (A + A.T)
            chol = self._factor(A)
            if rule == "newton1":
                grad = Z.T @ (y - p_hat)
                theta = self.theta + scipy.linalg.cho_solve((chol, True), grad, check_finite=False)
                b = A @ theta
            else:  # paper_literal
                b = self.b + Z.T @ (y - p_hat)
                theta = scipy.linalg.cho_solve((chol, True), b, check_finite=False)
        if not (
            np.all(np.isfinite(theta))
            and np.all(np.isfinite(A))
            and np.all(np.isfinite(b))
            and np.all(np.isfinite(chol))
        ):
            raise ValueError(
                "contexts: the episode's rows overflow the logistic estimator in float64 "
                "(rescale the features); the policy is unchanged"
            )
        if rule == "batch_map":
            self._append(Z, y)
        self.theta, self.A, self.b = theta, A, b
        self.n_obs += n
        self._chol = chol
        self._cov = None
        self._converged = converged
        if not converged:
            warnings.warn(
                f"update='batch_map': the Newton-IRLS refit on {self.n_obs} rows did not "
                f"converge in {self.max_iter} iterations (θ̂ is still {step:.3g} "
                f"from the MAP in a coordinate, tolerance {self.tol:g}); the estimate is the "
                "last iterate. Rescale the contexts or raise lam if this persists",
                RuntimeWarning,
                skip_file_prefixes=(_PACKAGE_DIR,),
            )

    def _append(self, Z: np.ndarray, y: np.ndarray) -> None:
        need = self.n_obs + Z.shape[0]
        if need > self._Z.shape[0]:
            cap = max(need, 2 * self._Z.shape[0], 256)
            Znew = np.empty((cap, self.n_params))
            ynew = np.empty(cap)
            Znew[: self.n_obs] = self._Z[: self.n_obs]
            ynew[: self.n_obs] = self._y[: self.n_obs]
            self._Z, self._y = Znew, ynew
        self._Z[self.n_obs : need] = Z
        self._y[self.n_obs : need] = y

    def copy(self) -> OnlineLogistic:
        """An independent copy of the state."""
        new = object.__new__(OnlineLogistic)
        new.__dict__.update(
            {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}
        )
        return new

    def __repr__(self) -> str:
        return (
            f"OnlineLogistic(n_params={self.n_params}, lam={self.lam:g}, "
            f"update={self.update_rule!r}, n_obs={self.n_obs})"
        )
