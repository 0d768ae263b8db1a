"""Every update completes or leaves the policy bit-identical (docs/reliability.md).

For the seven cascade policies and the six ``Policy`` classes:

* contexts beyond the accepted magnitude (``MAX_FEATURE``), among them the episodes that used
  to leave every cascade policy failing forever (features of 1e8 and 1e16), are refused with a
  ``ValueError`` naming the argument; the policy is bit-identical (a deep snapshot of every
  array, counter and generator) and so is its checkpoint, and it goes on learning from
  ordinary data;
* contexts up to the bound, mixtures of tiny and huge features included, are accepted and
  leave finite, symmetric positive semi-definite covariances;
* a cascade update whose factorisation fails (the failure is injected) raises and leaves the
  policy bit-identical: the new state is computed in temporaries and committed whole.

The ``Policy`` classes update through compiled kernels that cannot raise for accepted
(finite, bounded) input, so there is no failure to inject after their first change.
"""

import copy

import numpy as np
import pytest
import scipy.linalg

from hierbandit._validation import MAX_FEATURE
from hierbandit.cascade import policies as cascade
from hierbandit.ebm import EbmTS, EbmUCB, LinTS, LinUCB, OLSBandit, RMBandit
from hierbandit.stats import logistic
from tests.conftest import snapshot

from ._common import CASCADE_POLICIES

# ---------------------------------------------------------------------- helpers


def _psd(C, tol=1e-10):
    """Finite, exactly symmetric and positive semi-definite after diagonal scaling."""
    C = np.asarray(C, dtype=float)
    if not (np.all(np.isfinite(C)) and np.array_equal(C, np.swapaxes(C, -1, -2))):
        return False
    C = C.reshape(-1, C.shape[-1], C.shape[-1])
    for M in C:
        dg = np.diag(M)
        if np.any(dg < 0):
            return False
        D = np.where(dg > 0, 1 / np.sqrt(np.where(dg > 0, dg, 1)), 1.0)
        w = np.linalg.eigvalsh(D[:, None] * M * D[None, :])
        if w[0] < -tol * max(abs(w).max(), 1e-300):
            return False
    return True


def _same_checkpoint(policy, before_path, tmp_path):
    """The policy's checkpoint now restores to the same state as ``before_path``."""
    after = policy.save(tmp_path / "after.nc")
    cls = type(policy)
    assert snapshot(cls.load(before_path)) == snapshot(cls.load(after))


# ---------------------------------------------------------------------- cascade

NC, HC, KC, DC = 2, 2, 3, 3
CASCADE = list(CASCADE_POLICIES)
REWARDS = np.array([1.0, 1.5, 2.0])


def _cascade(name):
    cls = getattr(cascade, name)
    args = (KC, DC, REWARDS, HC) + ((40,) if name == "AUCBBP" else ())
    pol = cls(*args, rng=0)
    g = np.random.default_rng(1)
    for _ in range(6):
        X = g.normal(size=(NC, DC))
        arms = pol.recommend(X)
        pol.update(X, arms, np.zeros((NC, HC), dtype=np.int8))
    return pol


def _episode(X, g):
    """A valid episode for contexts X: all positions shown, the second user clicks at 0."""
    n = X.shape[0]
    arms = g.integers(0, KC, (n, HC))
    clicks = np.zeros((n, HC), dtype=np.int8)
    if n > 1:
        arms[1, 1:] = -1
        clicks[1, 0] = 1
    return arms, clicks


def _check_cascade(pol):
    post = pol.posterior()
    assert np.all(np.isfinite(post["mean"].values))
    assert _psd(post["cov"].values)
    assert _psd(post["precision"].values)


#: (contexts, arms, clicks) of the episodes the reproducer used (one user, H = 1 and 2) and
#: of generic huge episodes (N = 2)
_HUGE = [
    np.array([[1e8, 1e8, 1e8]]),
    np.array([[1.0196462012592535, 2.3713951304250124e16, 4.468527690930699e16]]),
    np.array([[-1.0, 1e7, 0.3], [1e-300, 0.5, -2.0]]),
    np.array([[1e100, 1e-300, -1e100], [0.0, 1.0, 1.0]]),
]


@pytest.mark.parametrize("name", CASCADE)
@pytest.mark.parametrize("case", range(len(_HUGE)))
def test_cascade_refuses_huge_contexts_whole(name, case, tmp_path):
    pol = _cascade(name)
    g = np.random.default_rng(case)
    X = _HUGE[case]
    arms, clicks = _episode(X, g)
    before = snapshot(pol)
    path = pol.save(tmp_path / "before.nc")
    with pytest.raises(ValueError, match="contexts"):
        pol.update(X, arms, clicks)
    assert snapshot(pol) == before
    _same_checkpoint(pol, path, tmp_path)
    # and it keeps learning from ordinary data
    for _ in range(3):
        Xo = g.normal(size=(NC, DC))
        pol.update(Xo, pol.recommend(Xo), np.zeros((NC, HC), dtype=np.int8))
    assert pol.t == 9
    _check_cascade(pol)


def _bound_contexts(g, n):
    """Rows mixing features at ±MAX_FEATURE with tiny, subnormal and ordinary ones."""
    pool = np.array([MAX_FEATURE, -MAX_FEATURE, 0.7 * MAX_FEATURE, 1e-300, 5e-324, 0.0, 1.3])
    return g.choice(pool, (n, DC)) * g.choice([1.0, -1.0], (n, DC))


@pytest.mark.parametrize("name", CASCADE)
def test_cascade_accepts_contexts_up_to_the_bound(name):
    pol = _cascade(name)
    g = np.random.default_rng(7)
    for t in range(8):
        X = _bound_contexts(g, NC) if t % 2 == 0 else g.normal(size=(NC, DC))
        arms, clicks = _episode(X, g)
        pol.update(X, arms, clicks)
        _check_cascade(pol)
        slate = pol.recommend(g.normal(size=(NC, DC)))
        assert np.all((slate >= 0) & (slate < KC))
    assert pol.t == 14


def _raise_runtime(*args, **kwargs):
    raise RuntimeError("injected failure")


def _failing_at(call, real):
    """``real`` (a factorisation) failing at its ``call``-th use, as on a matrix rounding made
    indefinite."""
    count = [0]

    def factor(*args, **kwargs):
        count[0] += 1
        if count[0] == call:
            raise np.linalg.LinAlgError("injected: not positive definite")
        return real(*args, **kwargs)

    return factor


@pytest.mark.parametrize("name", CASCADE)
@pytest.mark.parametrize("call", [1, 2, 3])
def test_cascade_failed_factorisation_changes_nothing(name, call, monkeypatch):
    """Whichever factorisation of an update fails (LAPACK's, and the floored fallback with it),
    the update raises with the policy bit-identical, or completes."""
    pol = _cascade(name)
    g = np.random.default_rng(3)
    X = g.normal(size=(NC, DC))
    arms, clicks = _episode(X, g)
    before = snapshot(pol)
    monkeypatch.setattr(scipy.linalg, "cho_factor", _failing_at(call, scipy.linalg.cho_factor))
    for module in (cascade, logistic):
        monkeypatch.setattr(module, "spd_factor", _raise_runtime, raising=False)
    try:
        pol.update(X, arms, clicks)
    except (RuntimeError, np.linalg.LinAlgError):
        assert snapshot(pol) == before
        monkeypatch.undo()
        pol.update(X, arms, clicks)
    assert pol.t == 7
    _check_cascade(pol)


# ---------------------------------------------------------------------- Policy classes

N, K, D = 3, 2, 3
POLICIES = {
    "EbmTS": lambda: EbmTS(N, K, D, rng=0),
    "EbmUCB": lambda: EbmUCB(N, K, D, rng=0, hyper_update_every=3),
    "LinUCB": lambda: LinUCB(N, K, D, rng=0),
    "LinTS": lambda: LinTS(N, K, D, rng=0),
    "OLSBandit": lambda: OLSBandit(N, K, D, rng=0),
    "RMBandit": lambda: RMBandit(N, K, D, q=2, rng=0),
}


def _policy(name):
    pol = POLICIES[name]()
    g = np.random.default_rng(1)
    for _ in range(20):
        j, x = int(g.integers(N)), g.normal(size=D)
        pol.update(j, x, pol.select(j, x), float(g.normal()))
    return pol


def _check_policy(pol):
    post = pol.posterior()
    assert np.all(np.isfinite(post["mean"].values))
    assert _psd(post["cov"].values)
    if "shared_cov" in post:
        assert _psd(post["shared_cov"].values)
    if hasattr(pol, "stats"):
        assert _psd(pol.stats.Ainv)
    hyp = pol.hyperparameters()
    assert np.all(np.isfinite(hyp["sigma2"].values))


_HUGE_ROWS = [
    [1e8, 1e8, 1e8],  # a raw count or timestamp in every feature
    [1.0196462012592535, 2.3713951304250124e16, 4.468527690930699e16],
    [1e16, 1e50, 0.0],
    [2.580262315747864e99, 1e-300, 1.0],
    [1.0, -1.0001 * MAX_FEATURE, 0.5],
]


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("case", range(len(_HUGE_ROWS)))
def test_policy_refuses_huge_contexts_whole(name, case, tmp_path):
    pol = _policy(name)
    before = snapshot(pol)
    path = pol.save(tmp_path / "before.nc")
    with pytest.raises(ValueError, match="context"):
        pol.update(1, _HUGE_ROWS[case], 0, 1.0)
    with pytest.raises(ValueError, match="context"):
        pol.select(1, _HUGE_ROWS[case])
    assert snapshot(pol) == before
    _same_checkpoint(pol, path, tmp_path)
    g = np.random.default_rng(case)
    for _ in range(5):
        j, x = int(g.integers(N)), g.normal(size=D)
        pol.update(j, x, pol.select(j, x), float(g.normal()))
    assert pol.t == 25
    _check_policy(pol)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_accepts_contexts_up_to_the_bound(name):
    pol = _policy(name)
    g = np.random.default_rng(11)
    pool = np.array([MAX_FEATURE, -MAX_FEATURE, 0.6 * MAX_FEATURE, 1e-300, 5e-324, 0.0, 0.7])
    for t in range(12):
        x = g.choice(pool, D) * g.choice([1.0, -1.0], D) if t % 2 == 0 else g.normal(size=D)
        j = int(g.integers(N))
        pol.update(j, x, pol.select(j, x), float(g.normal()))
        _check_policy(pol)
    assert pol.t == 32


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_checkpoint_after_refusal_continues_like_the_original(name, tmp_path):
    """A checkpoint taken after a refused update continues exactly as the original would."""
    pol = _policy(name)
    with pytest.raises(ValueError):
        pol.update(0, [1e9, 0.0, 1e9], 1, 1.0)
    restored = type(pol).load(pol.save(tmp_path / "ckpt.nc"))
    twin = copy.deepcopy(pol)
    g = np.random.default_rng(5)
    for _ in range(5):
        j, x, y = int(g.integers(N)), g.normal(size=D), float(g.normal())
        a, b = restored.select(j, x), twin.select(j, x)
        assert a == b
        restored.update(j, x, a, y)
        twin.update(j, x, b, y)
    assert snapshot(restored) == snapshot(twin)
