"""Numerical range of the online policies (docs/reliability.md, "Updates are all or nothing").

* Property tests: for contexts drawn up to the accepted bound ``MAX_FEATURE`` (mixtures of
  features at the bound with tiny, subnormal and ordinary ones) and rewards up to 1e100, every
  update is accepted, ``posterior()`` never raises, and every stored and posterior covariance
  is finite, exactly symmetric and positive semi-definite (eigenvalues of the diagonally
  scaled matrix ≥ −1e-10 times the largest) — the six ``Policy`` classes, the seven cascade
  policies and the four clustering policies.
* The reproducers' cases at the bound: a single feature at the bound and the smallest accepted
  ridge give the exact inverse (Sherman–Morrison refactorised), OLSBandit/RMBandit posteriors
  of rank-deficient data at the bound, EbmTS/EbmUCB with a small noise variance.
* A Python integer beyond the float range as a reward (or in clicks, click rewards,
  regularisers) is a ``ValueError``/``TypeError`` naming the argument, object unchanged.
* Regularisation and covariance-scale parameters outside their documented bounds are refused
  naming the argument; at the bounds they work (``hyperparameters()`` included).
"""

import copy
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierbandit._validation import MAX_FEATURE, MAX_REG, MAX_VARIANCE, MIN_REG, MIN_VARIANCE
from hierbandit.cascade import policies as cascade
from hierbandit.ebm import EbmTS, EbmUCB, LinTS, LinUCB, OLSBandit, RMBandit
from hierbandit.sclub.policies import CLUB, SCLUB, LinUCBInd, LinUCBOne
from hierbandit.stats.empirical_bayes import EBOptions
from tests.conftest import snapshot

from ._common import CASCADE_POLICIES, SMALL

D = 3


def _psd(C, tol=1e-10):
    """Finite, exactly symmetric, positive semi-definite after diagonal scaling (each matrix
    of a stack)."""
    C = np.asarray(C, dtype=float)
    assert np.all(np.isfinite(C)), "covariance not finite"
    assert np.array_equal(C, np.swapaxes(C, -1, -2)), "covariance not exactly symmetric"
    for M in C.reshape(-1, C.shape[-1], C.shape[-1]):
        dg = np.diag(M)
        assert np.all(dg >= 0), f"negative variance {dg.min():.3g}"
        Dg = np.where(dg > 0, 1 / np.sqrt(np.where(dg > 0, dg, 1)), 1.0)
        w = np.linalg.eigvalsh(Dg[:, None] * M * Dg[None, :])
        assert w[0] >= -tol * max(abs(w).max(), 1e-300), f"eigenvalue {w[0]:.3g} of {w}"
    return True


#: feature values: at and near the bound, tiny, subnormal, ordinary, any scale in between
features = st.one_of(
    st.sampled_from([MAX_FEATURE, -MAX_FEATURE, 0.0, 5e-324, -1e-300, 1e-150]),
    st.floats(-3, 3),
    st.floats(-MAX_FEATURE, MAX_FEATURE),
    st.builds(lambda m, e: m * 10.0**e, st.floats(-1, 1), st.integers(-300, 6)),
)
rows = st.lists(st.lists(features, min_size=D, max_size=D), min_size=1, max_size=5)
rewards = st.one_of(st.floats(-5, 5), st.sampled_from([1e100, -1e100, 1e6, 0.0, 5e-324]))

# ---------------------------------------------------------------------- Policy classes

N, K = 2, 2
POLICIES = {
    "EbmTS": lambda: EbmTS(N, K, D, rng=0),
    "EbmUCB": lambda: EbmUCB(N, K, D, rng=0, hyper_update_every=3),
    "EbmTS-small-noise": lambda: EbmTS(
        N,
        K,
        D,
        rng=0,
        sigma2_init=1e-6,
        eb_options=EBOptions(estimate_sigma2=False, sigma2_floor=1e-6),
    ),
    "LinUCB": lambda: LinUCB(N, K, D, rng=0),
    "LinTS": lambda: LinTS(N, K, D, ridge=MIN_REG, rng=0),
    "OLSBandit": lambda: OLSBandit(N, K, D, rng=0),
    "RMBandit": lambda: RMBandit(N, K, D, q=1, rng=0),
}


def _warm(pol):
    g = np.random.default_rng(1)
    for _ in range(6):
        j, x = int(g.integers(N)), g.normal(size=D)
        pol.update(j, x, pol.select(j, x), float(g.normal()))
    return pol


WARM = {name: _warm(make()) for name, make in POLICIES.items()}


def _check_policy(pol):
    post = pol.posterior()
    assert np.all(np.isfinite(post["mean"].values))
    _psd(post["cov"].values)
    for extra in ("shared_cov",):
        if extra in post:
            _psd(post[extra].values)
    if hasattr(pol, "stats"):
        _psd(pol.stats.Ainv)
    if hasattr(pol, "all_stats"):
        _psd(pol.all_stats.cov_unscaled())
        _psd(pol.forced_stats.cov_unscaled())
    if hasattr(pol, "_pairs"):  # ebm: C̃ of every (arm, instance), pairs and empty records
        _psd(pol._dense("Ct"))
        _psd(pol._Phi)
    hyp = pol.hyperparameters()
    assert np.all(np.isfinite(hyp["sigma2"].values))
    if not isinstance(pol, OLSBandit | RMBandit):  # their flat prior has +inf on the diagonal
        _psd(hyp["Sigma"].values)


@pytest.mark.parametrize("name", sorted(POLICIES))
@SMALL
@given(data=rows, ys=st.lists(rewards, min_size=5, max_size=5), seed=st.integers(0, 99))
def test_policy_covariances_stay_psd_up_to_the_bound(name, data, ys, seed):
    pol = copy.deepcopy(WARM[name])
    g = np.random.default_rng(seed)
    for x, y in zip(data, ys, strict=False):
        j = int(g.integers(N))
        pol.update(j, x, pol.select(j, x), y)
        _check_policy(pol)


def _exact_inverse(rows, ridge):
    """(ridge·I + Σ x xᵀ)⁻¹ in exact rational arithmetic."""
    d = len(rows[0])
    A = [[Fraction(ridge) if i == k else Fraction(0) for k in range(d)] for i in range(d)]
    for x in rows:
        for i in range(d):
            for k in range(d):
                A[i][k] += Fraction(x[i]) * Fraction(x[k])
    M = [row[:] + [Fraction(int(i == k)) for k in range(d)] for i, row in enumerate(A)]
    for c in range(d):
        p = next(i for i in range(c, d) if M[i][c] != 0)
        M[c], M[p] = M[p], M[c]
        M[c] = [v / M[c][c] for v in M[c]]
        for i in range(d):
            if i != c and M[i][c] != 0:
                f = M[i][c]
                M[i] = [a - f * b for a, b in zip(M[i], M[c], strict=True)]
    return np.array([[float(v) for v in row[d:]] for row in M]), np.array(
        [[float(v) for v in row] for row in A]
    )


def _scaled_error(C, exact, A):
    Dg = np.sqrt(np.diag(A))
    return np.linalg.norm(Dg[:, None] * (C - exact) * Dg[None, :]) / np.linalg.norm(
        Dg[:, None] * exact * Dg[None, :]
    )


@pytest.mark.parametrize(
    ("x", "ridge"),
    [
        ([MAX_FEATURE], 1.0),  # a raw count at the bound: 1 + xᵀA⁻¹x = 1e12
        ([1.0, MAX_FEATURE, 0.0], 1.0),
        ([0.7 * MAX_FEATURE, 1e-300, 2.0], 1.5),
        ([-3.96746849, 1.0], MIN_REG),  # the smallest ridge: 1 + xᵀA⁻¹x ≈ 1.7e7
    ],
)
@pytest.mark.parametrize("cls", [LinUCB, LinTS])
def test_ridge_inverse_is_exact_after_a_large_row(cls, x, ridge):
    """The Sherman–Morrison step would cancel all but ε·(1 + xᵀA⁻¹x) of A⁻¹ along x; the unit
    is refactorised instead and its inverse is exact to rounding."""
    pol = cls(1, 1, len(x), ridge=ridge, rng=0)
    pol.update(0, x, 0, 1.0)
    pol.update(0, np.ones(len(x)), 0, -1.0)
    exact, A = _exact_inverse([x, np.ones(len(x))], ridge)
    assert _scaled_error(pol.stats.Ainv[0], exact, A) <= 1e-12
    _check_policy(pol)


@pytest.mark.parametrize("cls", [OLSBandit, RMBandit])
@pytest.mark.parametrize(
    "x", [[MAX_FEATURE, MAX_FEATURE, 0.0], [MAX_FEATURE, 1e-300, -0.5 * MAX_FEATURE]]
)
def test_ols_posterior_of_rank_deficient_data_at_the_bound(cls, x):
    """(G + ridge·I)⁻¹ of one row at the bound: the ridge is below the resolution of G, the
    inverse comes from the floored eigendecomposition; posterior() works and is PSD."""
    pol = cls(1, 1, D, rng=0)
    pol.update(0, x, 0, 7.0)
    _check_policy(pol)
    cov = pol.all_stats.cov_unscaled()[0]
    assert np.max(np.diag(cov)) <= 1.0001 / pol.ridge


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
def test_ebm_small_noise_variance_keeps_variances_positive(cls):
    """σ² = 1e-6 against rows at the bound: σ² is below the resolution of ΣG_j, the old
    Gauss–Jordan form gave variances of −1 (relative); C̃_j is a Gram matrix now."""
    pol = cls(
        2,
        1,
        D,
        rng=0,
        sigma2_init=1e-6,
        eb_options=EBOptions(estimate_sigma2=False, sigma2_floor=1e-6),
    )
    g = np.random.default_rng(0)
    for t in range(6):
        x = MAX_FEATURE * np.ones(D) if t % 2 == 0 else g.normal(size=D)
        pol.update(t % 2, x, 0, float(g.normal()))
        _check_policy(pol)


# ---------------------------------------------------------------------- cascade

NC, HC, KC = 2, 2, 3
CASCADE = list(CASCADE_POLICIES)
E = np.array([1.0, 1.5, 2.0])


def _cascade(name, **kw):
    cls = getattr(cascade, name)
    return cls(KC, D, E, HC, *((40,) if name == "AUCBBP" else ()), rng=0, **kw)


@pytest.mark.parametrize("lam", [1.0, MIN_REG], ids=["lam1", "lam_min"])
@pytest.mark.parametrize("name", CASCADE)
@SMALL
@given(data=rows, seed=st.integers(0, 99))
def test_cascade_covariances_stay_psd_up_to_the_bound(name, lam, data, seed):
    pol = _cascade(name, lam=lam)
    g = np.random.default_rng(seed)
    for x in data:
        X = np.array([x, g.normal(size=D)])
        arms = pol.recommend(X)
        clicks = np.zeros((NC, HC), dtype=np.int8)
        if g.random() < 0.5:  # the second user clicks at its first position
            arms[1, 1:] = -1
            clicks[1, 0] = 1
        pol.update(X, arms, clicks)
        post = pol.posterior()
        assert np.all(np.isfinite(post["mean"].values))
        _psd(post["cov"].values)
        _psd(post["precision"].values)


# ---------------------------------------------------------------------- clustering

U = 4
CLUSTERING = {
    "SCLUB": lambda **kw: SCLUB(U, D, alpha_theta=0.3, rng=0, **kw),
    "CLUB": lambda **kw: CLUB(U, D, rng=0, **kw),
    "LinUCBOne": lambda **kw: LinUCBOne(U, D, rng=0, **kw),
    "LinUCBInd": lambda **kw: LinUCBInd(U, D, rng=0, **kw),
}


def _check_clustering(pol):
    stats = pol.stats
    if hasattr(stats, "users"):  # ClusterStats: the users' inverses and the live clusters'
        _psd(stats.users.Ainv)
        _psd(stats.Ainv[stats.size > 0])
        assert np.all(np.isfinite(stats.theta[stats.size > 0]))
    else:
        _psd(stats.Ainv)
        assert np.all(np.isfinite(stats.theta))


@pytest.mark.parametrize("reg", [1.0, MIN_REG], ids=["reg1", "reg_min"])
@pytest.mark.parametrize("name", sorted(CLUSTERING))
@SMALL
@given(data=rows, ys=st.lists(rewards, min_size=5, max_size=5), seed=st.integers(0, 99))
def test_clustering_inverses_stay_psd_up_to_the_bound(name, reg, data, ys, seed):
    pol = CLUSTERING[name](reg=reg)
    g = np.random.default_rng(seed)
    for x, y in zip(data, ys, strict=False):
        u = int(g.integers(U))
        items = np.array([x, g.normal(size=D)])
        pol.select(u, items)
        pol.update(u, x, y)
        _check_clustering(pol)


# ---------------------------------------------------------------------- huge integers

HUGE_INTS = [10**400, -(10**400), 2**1024]
HUGE_IDS = ["1e400", "-1e400", "2^1024"]


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("reward", HUGE_INTS, ids=HUGE_IDS)
def test_policy_refuses_huge_integer_reward(name, reward):
    pol = WARM[name]
    before = snapshot(pol)
    with pytest.raises(ValueError, match="reward"):
        pol.update(0, np.ones(D), 0, reward)
    assert snapshot(pol) == before


@pytest.mark.parametrize("name", sorted(CLUSTERING))
@pytest.mark.parametrize("reward", HUGE_INTS, ids=HUGE_IDS)
def test_clustering_refuses_huge_integer_reward(name, reward):
    pol = CLUSTERING[name]()
    before = snapshot(pol)
    with pytest.raises(ValueError, match="reward"):
        pol.update(0, np.ones(D), reward)
    assert snapshot(pol) == before
    g = np.random.default_rng(0)
    users, items = np.array([1, 2]), g.normal(size=(2, 2, D))
    with pytest.raises((ValueError, TypeError), match="means"):
        pol.run(users, items, np.array([[0.0, 1.0], [10**400, 0.0]], dtype=object), np.zeros(2))
    assert snapshot(pol) == before


#: the scalar arguments of each cascade constructor (besides ``lam``)
CASCADE_SCALARS = {
    "UCBBP": ("beta", "delta", "c_z"),
    "AUCBBP": ("beta", "delta", "c_z"),
    "CascadeEpsilonGreedy": ("epsilon",),
    "CascadeGreedy": (),
    "CascadeRandom": (),
    "CascadeLinUCB": ("alpha",),
    "CascadeLinTS": ("sigma",),
}


@pytest.mark.parametrize("name", CASCADE)
def test_cascade_refuses_huge_integers(name):
    pol = _cascade(name)
    X = np.ones((NC, D))
    arms = pol.recommend(X)
    before = snapshot(pol)
    clicks = [[0, 0], [0, 10**400]]
    with pytest.raises((ValueError, TypeError), match="clicks"):
        pol.update(X, arms, clicks)
    assert snapshot(pol) == before
    with pytest.raises((ValueError, TypeError), match="rewards"):
        getattr(cascade, name)(
            KC, D, [1.0, 10**400, 2.0], HC, *((40,) if name == "AUCBBP" else ()), rng=0
        )
    for param in ("lam", *CASCADE_SCALARS[name]):
        with pytest.raises(ValueError, match=param):
            _cascade(name, **{param: 10**400})


# ---------------------------------------------------------------------- parameter bounds

BELOW, ABOVE = MIN_REG / 10, MAX_REG * 10


def _constructors():
    """(label, factory(**kw), parameter name, (lowest, highest) accepted)."""
    out = []
    for cls in (LinUCB, LinTS, OLSBandit, RMBandit):
        out.append((cls.__name__, lambda cls=cls, **kw: cls(2, 2, D, **kw), "ridge", MIN_REG))
    for cls in (EbmTS, EbmUCB):
        out.append((cls.__name__, lambda cls=cls, **kw: cls(2, 2, D, **kw), "lam", MIN_REG))
    for name in CASCADE:
        out.append((name, lambda name=name, **kw: _cascade(name, **kw), "lam", MIN_REG))
    for cls in (SCLUB, CLUB, LinUCBOne, LinUCBInd):
        out.append((cls.__name__, lambda cls=cls, **kw: cls(U, D, **kw), "reg", MIN_REG))
    out.append(("LinTS", lambda **kw: LinTS(2, 2, D, **kw), "v", 0.0))
    out.append(("CascadeLinTS", lambda **kw: _cascade("CascadeLinTS", **kw), "sigma", 0.0))
    return out


CONSTRUCTORS = _constructors()


@pytest.mark.parametrize(
    ("label", "make", "param", "lowest"),
    CONSTRUCTORS,
    ids=[f"{c[0]}-{c[2]}" for c in CONSTRUCTORS],
)
def test_regularisation_bounds(label, make, param, lowest):
    refused = [1e308, ABOVE, 10**400, -(10**400)]
    if lowest > 0:
        refused += [BELOW, 1e-50, 5e-324, 1e-15]
    for value in refused:
        with pytest.raises(ValueError, match=param):
            make(**{param: value})
    for value in (lowest, MAX_REG) if lowest > 0 else (0.0, MAX_REG):
        pol = make(**{param: value})
        assert getattr(pol, param) == value
        if hasattr(pol, "hyperparameters"):  # LinTS(v=1e308) used to overflow here
            hyp = pol.hyperparameters()
            assert np.all(np.isfinite(hyp["sigma2"].values))


@pytest.mark.parametrize("cls", [EbmTS, EbmUCB])
def test_noise_variance_bounds(cls):
    for value in (MIN_VARIANCE / 10, MAX_VARIANCE * 10, 10**400, 0.0):
        with pytest.raises(ValueError, match="sigma2_init"):
            cls(2, 2, D, sigma2_init=value)
    for value in (MIN_VARIANCE, MAX_VARIANCE):
        pol = cls(2, 2, D, sigma2_init=value, rng=0)
        pol.update(0, np.ones(D), 0, 1.0)
        _check_policy(pol)
    with pytest.raises(ValueError, match="sigma2_floor"):
        EBOptions(sigma2_floor=MIN_VARIANCE / 10)
    with pytest.raises(ValueError, match="Sigma_init"):
        cls(2, 2, D, Sigma_init=MAX_VARIANCE * 10 * np.eye(D))
