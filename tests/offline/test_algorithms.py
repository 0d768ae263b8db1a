"""Off-C²LUB and Off-CLUB against brute-force references, and their defined edge cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import hierbandit.offline._core as core
from hierbandit.offline.c2lub import OffC2LUB, gamma_grid
from hierbandit.offline.club import OffCLUB
from hierbandit.offline.evaluate import evaluate, gamma_sweep
from hierbandit.offline.generate import cluster_thetas, generate_offline, make_problem
from hierbandit.stats.partitions import same_partition
from tests.conftest import snapshot


def _data(U=40, J=4, d=5, n=2000, noise=0.05, seed=0, probs=None):
    theta, labels = cluster_thetas(U, J, d, rng=seed)
    return generate_offline(theta, n, labels=labels, noise_sd=noise, user_probs=probs, rng=seed + 1)


# ---------------------------------------------------------------------- brute-force references
def _ridge(X, y, reg):
    d = X.shape[1]
    M = reg * np.eye(d) + X.T @ X
    return np.linalg.solve(M, X.T @ y), M


def _ci_loop(ds, lam, delta, lt):
    U, d = ds.n_users, ds.n_features
    out = np.empty(U)
    for u in range(U):
        N = int((ds.users == u).sum())
        if N == 0:
            out[u] = np.inf
            continue
        num = math.sqrt(d * math.log(1 + N / (lam * d)) + 2 * math.log(2 * U / delta))
        out[u] = (num + math.sqrt(lam)) / math.sqrt(lt * N / 2)
    return out


def _theta_loop(ds, lam):
    return np.array(
        [_ridge(ds.X[ds.users == u], ds.rewards[ds.users == u], lam)[0] for u in range(ds.n_users)]
    )


def _neighbours_loop(ds, model):
    """Edges of Eq. (2) (Off-C²LUB) or the complement of Eq. (6) (Off-CLUB), pair by pair,
    and Γ-policies γ̂(u) of Eq. (5), from raw rows."""
    U = ds.n_users
    th = _theta_loop(ds, model.lam)
    ci = _ci_loop(ds, model.lam, model.delta, model.lambda_tilde_a_)
    N = np.array([(ds.users == u).sum() for u in range(U)])
    adj = np.zeros((U, U), dtype=bool)
    margin = np.full((U, U), np.inf)
    gam = np.zeros(U)
    for u in range(U):
        if isinstance(model, OffC2LUB):
            g = model.gamma_hat
            if isinstance(g, str):
                vals = []
                for v in range(U):
                    if v == u:
                        continue
                    dist = np.linalg.norm(th[u] - th[v])
                    low = dist - model.alpha * (ci[u] + ci[v])
                    if low > 0:
                        vals.append(
                            low if g == "underestimation" else dist + model.alpha * (ci[u] + ci[v])
                        )
                g = min(vals) if vals else 0.0
            gam[u] = g
        for v in range(U):
            if v == u:
                continue
            dist = np.linalg.norm(th[u] - th[v])
            if isinstance(model, OffC2LUB):
                thr = gam[u] - model.alpha * (ci[u] + ci[v])
                adj[u, v] = dist < thr and min(N[u], N[v]) >= model.n_min_
            else:
                thr = model.alpha * (ci[u] + ci[v])
                adj[u, v] = not (dist > thr)
            margin[u, v] = abs(thr - dist) if np.isfinite(thr) else np.inf
    return adj, gam, th, margin


def _pooled_loop(ds, adj, lam, per_user_prior):
    """θ̃_u from the concatenated raw rows of u and its one-hop neighbours (line 9 / 10)."""
    out = []
    for u in range(ds.n_users):
        members = np.r_[u, np.flatnonzero(adj[u])]
        rows = np.isin(ds.users, members)
        reg = lam * members.size if per_user_prior else lam
        out.append(_ridge(ds.X[rows], ds.rewards[rows], reg)[0])
    return np.array(out)


# ---------------------------------------------------------------------- acceptance tests
def test_gamma_zero_is_per_user_lcb():
    """Off-C²LUB with γ̂ = 0 equals the per-user pessimistic LinUCB on the user's own data."""
    ds = _data(U=12, J=3, d=4, n=600)
    model = OffC2LUB(0.0, rng=0).fit(ds)
    assert model.graph().n_edges == 0
    rng = np.random.default_rng(5)
    U, d, lam, delta = ds.n_users, ds.n_features, 0.5, 0.01
    for u in range(U):
        X, y = ds.X[ds.users == u], ds.rewards[ds.users == u]
        theta, M = _ridge(X, y, lam)
        beta = math.sqrt(d * math.log(1 + len(y) / (lam * d)) + 2 * math.log(2 * U / delta))
        beta += math.sqrt(lam)
        A = rng.normal(size=(7, d))
        want = A @ theta - beta * np.sqrt(np.einsum("sd,de,se->s", A, np.linalg.inv(M), A))
        np.testing.assert_allclose(model.scores(u, A), want, rtol=1e-10, atol=1e-12)
        assert model.decide(u, A) == int(np.argmax(want))


def test_off_club_recovers_true_partition_noise_free():
    """With plentiful noise-free data (α = 1, the theorem's value), Off-CLUB's graph is exactly
    the true clusters (Theorem 5.2's event), and so is Off-C²LUB's with γ̂ = γ."""
    theta, labels = cluster_thetas(20, 4, 4, rng=6)
    ds = generate_offline(theta, 400_000, labels=labels, noise_sd=0.0, rng=4)
    assert ds.gap > 0.5
    model = OffCLUB(alpha=1.0).fit(ds)
    assert 2 * model.ci_.max() < ds.gap  # the data are sufficient: radii below the gap
    g = model.graph()
    assert same_partition(g.labels, labels)
    # one-hop neighbourhoods are the clusters themselves (a clique per cluster)
    for u in range(20):
        same = np.flatnonzero((labels == labels[u]) & (np.arange(20) != u))
        np.testing.assert_array_equal(g.neighbours(u), same)
    np.testing.assert_allclose(model.theta_, theta, atol=1e-3)
    c2 = OffC2LUB(ds.gap, alpha=1.0).fit(ds)
    np.testing.assert_array_equal(c2.graph().adjacency.toarray(), g.adjacency.toarray())


def test_overestimation_gamma_at_least_true_gap():
    """Theorem B.4: γ̂(u) ≥ γ whenever M(u) ≠ ∅, with α ≥ 1 and a valid λ̃_a."""
    theta, labels = cluster_thetas(40, 4, 5, rng=7)
    ds = generate_offline(theta, 400_000, labels=labels, noise_sd=0.3, rng=8)
    gap = ds.gap
    over = OffC2LUB("overestimation", alpha=1.0, rng=0).fit(ds)
    active = over.gamma_hat_ > 0
    assert active.sum() >= 30  # M(u) is non-empty for most users: the check has teeth
    assert np.all(over.gamma_hat_[active] >= gap)
    under = OffC2LUB("underestimation", alpha=1.0, rng=0).fit(ds)
    # the underestimate Γ is a lower bound on the true distance to the closest certified user
    assert np.all(under.gamma_hat_ <= over.gamma_hat_)


@pytest.mark.parametrize(
    "make",
    [
        lambda: OffC2LUB(0.9),
        lambda: OffC2LUB("underestimation"),
        lambda: OffC2LUB("overestimation"),
        lambda: OffC2LUB(1.2, n_min=30, beta_bias="theory"),
        lambda: OffCLUB(),
        lambda: OffCLUB(alpha=0.5),
    ],
)
def test_vectorised_pairwise_equals_loop(make, monkeypatch):
    """Blockwise vectorised pairwise stage and aggregation == a loop over pairs on raw rows."""
    probs = np.random.default_rng(0).dirichlet(np.ones(30))
    ds = _data(U=30, J=3, d=4, n=1500, noise=0.1, probs=probs)
    monkeypatch.setattr(core, "BLOCK_ENTRIES", 70)  # several row blocks of 2 rows
    model = make().fit(ds)
    adj, gam, th, margin = _neighbours_loop(ds, model)
    np.testing.assert_allclose(model.theta_hat_, th, rtol=1e-9, atol=1e-12)
    got = model.graph().adjacency.toarray()
    # pairs exactly on the threshold (e.g. the user defining an overestimated γ̂) may fall
    # either way at rounding level; every other pair must agree
    differ = got != adj
    assert np.all(margin[differ] < 1e-9), margin[differ]
    adj = got
    if isinstance(model, OffC2LUB):
        np.testing.assert_allclose(model.gamma_hat_, gam, rtol=1e-9, atol=1e-12)
    pooled = _pooled_loop(ds, adj, model.lam, per_user_prior=isinstance(model, OffC2LUB))
    np.testing.assert_allclose(model.theta_, pooled, rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(model.n_neighbours_, adj.sum(axis=1))


@pytest.mark.parametrize("density", [0.01, 0.5, 0.99])
def test_aggregate_block_regimes(density):
    """Sparse, dense and complement aggregation give the same sums as a direct loop."""
    rng = np.random.default_rng(1)
    U, d = 200, 3
    G = rng.normal(size=(U, d, d))
    b = rng.normal(size=(U, d))
    n = rng.integers(0, 9, size=U)
    mask = rng.random((17, U)) < density
    Gf = G.reshape(U, d * d)
    totals = (Gf.sum(0), b.sum(0), float(n.sum()))
    Gt, bt, Nt = core.aggregate_block(mask, Gf, b, n, totals)
    for r in range(17):
        np.testing.assert_allclose(Gt[r], Gf[mask[r]].sum(0), atol=1e-9)
        np.testing.assert_allclose(bt[r], b[mask[r]].sum(0), atol=1e-9)
        assert Nt[r] == pytest.approx(n[mask[r]].sum())


def test_with_gamma_equals_fresh_fit():
    ds = _data()
    base = OffC2LUB(0.0, rng=0).fit(ds)
    for g in (0.3, 1.0, "overestimation"):
        a = base.with_gamma(g)
        b = OffC2LUB(g, rng=0).fit(ds)
        np.testing.assert_allclose(a.theta_, b.theta_)
        np.testing.assert_allclose(a.beta_, b.beta_)
        np.testing.assert_array_equal(a.graph().adjacency.toarray(), b.graph().adjacency.toarray())
    assert base.gamma_hat == 0.0  # the original is untouched


def test_gamma_sweep_endpoints():
    """The grid runs from the empty graph (per-user LCB) to the complete graph."""
    theta, labels = cluster_thetas(50, 5, 5, rng=2)
    train, test = make_problem(theta, labels, 4000, n_test=500, rng=3)
    model = OffC2LUB(0.0, rng=0).fit(train)
    grid = gamma_grid(model, 9)
    assert grid[0] == 0.0 and np.all(np.diff(grid) > 0)
    assert model.with_gamma(grid[-1]).n_neighbours_.min() == train.n_users - 1
    sw = gamma_sweep(model, test, grid)
    club_all = OffC2LUB(float(grid[-1]), rng=0).fit(train)
    ref = evaluate({"g0": model, "all": club_all}, test)["subopt"].to_numpy()
    np.testing.assert_allclose(sw["subopt"].to_numpy()[[0, -1]], ref)
    assert sw.attrs["best_subopt"] == pytest.approx(float(sw["subopt"].min()))


# ---------------------------------------------------------------------- edge cases
def test_users_without_data_defined_behaviour():
    """N_u = 0: CI = ∞; never connected by Off-C²LUB; keeps every edge in Off-CLUB; excluded
    from M(u); θ̂ = 0 so the LCB picks the smallest-width action (spec Part C item 6)."""
    ds0 = _data(U=20, J=2, d=3, n=800)
    keep = ds0.users != 7
    ds = ds0.subset(keep)
    assert ds.counts[7] == 0
    c2 = OffC2LUB(5.0, rng=0).fit(ds)
    assert np.isinf(c2.ci_[7]) and c2.n_neighbours_[7] == 0
    assert 7 not in set(c2.graph().adjacency.tocoo().col.tolist())
    np.testing.assert_array_equal(c2.theta_[7], 0.0)
    over = OffC2LUB("overestimation", alpha=1.0, rng=0).fit(ds)
    assert over.gamma_hat_[7] == 0.0
    club = OffCLUB(rng=0).fit(ds)
    assert club.n_neighbours_[7] == 19
    assert club.graph().degree.min() >= 1
    # smallest ‖a‖_{M⁻¹}: with M = λI every unit action ties, a shorter one wins
    acts = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0]])
    assert c2.decide(7, acts) == 1
    picks = {OffC2LUB(5.0, rng=s).fit(ds).decide(7, acts[[0, 2]]) for s in range(20)}
    assert picks == {0, 1}  # exact ties are broken at random


def test_bad_input_leaves_model_unchanged():
    ds = _data(U=10, J=2, d=3, n=300)
    for model in (OffC2LUB("overestimation", rng=0), OffCLUB(rng=0)):
        model.fit(ds)
        before = snapshot(model)
        with pytest.raises(ValueError, match="actions"):
            model.decide(0, np.ones((4, 5)))  # wrong feature width
        with pytest.raises(ValueError, match="actions"):
            model.decide(0, [[np.nan, 0.0, 1.0]])
        with pytest.raises(ValueError, match="user"):
            model.decide(10, np.ones((2, 3)))
        with pytest.raises(TypeError, match="user"):
            model.decide(1.0, np.ones((2, 3)))
        with pytest.raises(ValueError, match="actions"):
            model.decide_batch([0, 1], np.ones((3, 2, 3)))
        df = ds.to_frame()
        df.loc[5, "reward"] = np.nan
        with pytest.raises(ValueError, match="reward"):
            model.fit(df)
        with pytest.raises(TypeError, match="data"):
            model.fit(np.ones((3, 3)))
        assert snapshot(model) == before


def test_parameter_validation():
    with pytest.raises(ValueError, match="gamma_hat"):
        OffC2LUB("median")
    with pytest.raises(ValueError, match="gamma_hat"):
        OffC2LUB(-0.1)
    with pytest.raises(ValueError, match="alpha"):
        OffCLUB(alpha=0.0)
    with pytest.raises(ValueError, match="lambda_tilde_a"):
        OffCLUB(lambda_tilde_a="guess")
    with pytest.raises(ValueError, match="delta"):
        OffC2LUB(delta=1.5)
    with pytest.raises(RuntimeError, match="not fitted"):
        OffCLUB().decide(0, np.ones((2, 3)))


def test_theory_quantities_are_impractical():
    """λ̃_a = 'theory' is ~1e-15 in the paper's setting and N_min ~ 1e5 even with λ̃_a = 0.05."""
    theta, labels = cluster_thetas(50, 5, 20, rng=0)
    ds = generate_offline(theta, 5000, labels=labels, rng=1)
    m = OffC2LUB(2.0, lambda_tilde_a="theory", rng=0).fit(ds)
    assert 0 < m.lambda_tilde_a_ < 1e-10
    assert core.n_min_theory(0.05, 1000, 20, 0.01) > 1e5
    assert m.n_neighbours_.sum() == 0
    eig = OffCLUB(ci="eigen").fit(ds)
    assert np.isfinite(eig.ci_).sum() > 0


def test_decide_batch_matches_decide_and_estimates():
    ds = _data()
    model = OffC2LUB(1.0, rng=0).fit(ds)
    rng = np.random.default_rng(3)
    users = rng.integers(0, ds.n_users, size=50)
    acts = rng.normal(size=(50, 6, ds.n_features))
    batch = model.decide_batch(users, acts)
    single = [model.decide(int(u), a) for u, a in zip(users, acts, strict=True)]
    np.testing.assert_array_equal(batch, single)
    est = model.estimates()
    assert est["theta"].dims == ("user", "feature") and "gamma_hat" in est
    gx = model.graph().to_xarray()
    assert gx.sizes["user"] == ds.n_users and gx.sizes["edge"] == model.graph().n_edges
    assert model.clone().get_params() == model.get_params()


@pytest.mark.filterwarnings("ignore:features not given:UserWarning")  # not what is tested
def test_fit_accepts_table():
    ds = _data(U=8, J=2, d=3, n=200)
    df = ds.to_frame()
    a = OffCLUB(rng=0).fit(df)
    b = OffCLUB(rng=0).fit(ds)
    np.testing.assert_allclose(a.theta_, b.theta_)
    assert isinstance(df, pd.DataFrame)
