"""SCLUB (Algorithms 1–4), CLUB, LinUCB-One and LinUCB-Ind."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

from hierbandit.sclub.policies import CLUB, SCLUB, LinUCBInd, LinUCBOne, anytime_beta, theory_beta
from hierbandit.stats.partitions import same_partition
from tests.conftest import snapshot


def F(T: float) -> float:
    return math.sqrt((1.0 + math.log(1.0 + T)) / (1.0 + T))


# ---------------------------------------------------------------------- a literal SCLUB

ALPHA_P = 1 / math.sqrt(2)


class LiteralSCLUB:
    """Algorithms 1–4 written out with sets and exact solves (slow, obviously correct).

    Statistics are updated in place, as in the reference code; with ``double_count_split`` a
    user split into a new cluster shares the *same arrays* with it, which is the reference
    code's aliasing (every later row then lands twice in the shared arrays).
    """

    def __init__(
        self,
        n,
        d,
        *,
        alpha_theta=1.0,
        alpha_p=ALPHA_P,
        freq_test="pairwise",
        use_frequency=True,
        pivot="phase_start",
        uncheck="phase",
        merge_scan="current",
        double_count_split=False,
        **_selection,  # bonus, beta: selection only
    ):
        self.d, self.at, self.ap = d, alpha_theta, alpha_p
        self.freq = freq_test if use_frequency else None
        self.pivot, self.uncheck, self.scan = pivot, uncheck, merge_scan
        self.alias = double_count_split
        self.S = [np.eye(d) for _ in range(n)]
        self.b = [np.zeros(d) for _ in range(n)]
        self.T = [0] * n
        # cluster index -> dict; new clusters get max J + 1 (line 3: J = {1})
        self.C = {1: {"users": set(range(n)), "S": np.eye(d), "b": np.zeros(d), "T": 0}}
        self.C[1]["piv"] = (np.zeros(d), 0)
        self.j = dict.fromkeys(range(n), 1)
        self.checked: set[int] = set()
        self.tau = 0

    def theta(self, c):
        return np.linalg.solve(self.C[c]["S"], self.C[c]["b"])

    def labels(self):
        return np.array([self.j[i] for i in range(len(self.j))])

    def is_checked(self, c):
        return self.C[c]["users"] <= self.checked

    def consistent(self, c1, c2):
        A, B = self.C[c1], self.C[c2]
        if np.linalg.norm(self.theta(c1) - self.theta(c2)) >= self.at / 2 * (F(A["T"]) + F(B["T"])):
            return False
        if self.freq is None:
            return True
        tau = self.tau
        p1 = A["T"] / (len(A["users"]) * tau)
        p2 = B["T"] / (len(B["users"]) * tau)
        return abs(p1 - p2) < self.ap * F(tau)

    def merge(self, c1, c2):
        A, B = self.C[c1], self.C.pop(c2)
        A["S"] = A["S"] + B["S"] - np.eye(self.d)
        A["b"] = A["b"] + B["b"]
        A["T"] += B["T"]
        A["users"] |= B["users"]
        for i in B["users"]:
            self.j[i] = c1

    def update(self, i, x, y):
        self.tau += 1
        tau = self.tau
        if (tau + 1) & tau == 0:  # phase start
            for c in self.C:
                self.C[c]["piv"] = (self.theta(c), self.C[c]["T"])
        if self.uncheck == "round" or (tau + 1) & tau == 0:
            self.checked = set()
        # Update (Alg. 2)
        xx = np.outer(x, x)
        self.S[i] += xx
        self.b[i] += y * x
        self.T[i] += 1
        c = self.j[i]
        Cj = self.C[c]
        Cj["S"] += xx
        Cj["b"] += y * x
        Cj["T"] += 1
        # Split (Alg. 3)
        if len(Cj["users"]) > 1:
            th_i = np.linalg.solve(self.S[i], self.b[i])
            piv_th, piv_T = Cj["piv"] if self.pivot == "phase_start" else (self.theta(c), Cj["T"])
            split = np.linalg.norm(th_i - piv_th) > self.at * (F(self.T[i]) + F(piv_T))
            if not split and self.freq == "pairwise":
                gap = max(abs(self.T[i] - self.T[k]) for k in Cj["users"])
                split = gap / tau > 2 * self.ap * F(tau)
            if not split and self.freq == "cluster_avg":
                split = abs(self.T[i] / tau - Cj["T"] / (len(Cj["users"]) * tau)) > (
                    2 * self.ap * F(tau)
                )
            if split:
                Cj["S"] = Cj["S"] - self.S[i] + np.eye(self.d)
                Cj["b"] = Cj["b"] - self.b[i]
                Cj["T"] -= self.T[i]
                Cj["users"].discard(i)
                new = max(self.C) + 1
                share = (lambda a: a) if self.alias else np.copy
                self.C[new] = {
                    "users": {i},
                    "S": share(self.S[i]),
                    "b": share(self.b[i]),
                    "T": self.T[i],
                }
                self.C[new]["piv"] = (self.theta(new), self.T[i])
                self.j[i] = new
                c = new
        self.checked.add(i)
        # Merge (Alg. 4)
        if self.scan == "current":
            while self.is_checked(c):
                cands = [
                    k
                    for k in sorted(self.C)
                    if k != c and self.is_checked(k) and self.consistent(c, k)
                ]
                if not cands:
                    break
                lo, hi = sorted((c, cands[0]))
                self.merge(lo, hi)
                c = lo
        else:
            for c1 in sorted(self.C):
                for c2 in sorted(self.C):
                    if c2 <= c1 or c1 not in self.C or c2 not in self.C:
                        continue
                    if self.is_checked(c1) and self.is_checked(c2) and self.consistent(c1, c2):
                        self.merge(c1, c2)


def _stream(n_users=8, d=3, T=1500, seed=0, noise=0.05, p=None):
    """Users of two clusters (and different frequencies), random unit items, linear rewards."""
    rng = np.random.default_rng(seed)
    thetas = np.array([[1.0, 0.0, 0.3], [-0.5, 0.9, 0.1]])[:, :d]
    z = np.arange(n_users) % 2
    if p is None:
        p = np.where(z == 0, 2.0, 1.0)
        p = p / p.sum()
    users = rng.choice(n_users, size=T, p=p)
    X = rng.standard_normal((T, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.einsum("td,td->t", X, thetas[z[users]]) + noise * rng.standard_normal(T)
    return users, X, y


CONFIGS = [
    {},
    {"alpha_theta": 0.3},
    {"alpha_theta": 0.3, "merge_scan": "all"},
    {"alpha_theta": 0.3, "pivot": "current"},
    {"alpha_theta": 0.4, "freq_test": "cluster_avg", "alpha_p": 0.1},
    {"alpha_theta": 0.3, "uncheck": "round"},
    {"use_frequency": False, "alpha_theta": 0.7},
    {"alpha_p": 0.05},
    {"alpha_theta": 0.3, "double_count_split": True},
    {**SCLUB._REFERENCE, "alpha_theta": 0.3, "bonus": "sqrt"},
]
#: configurations in which both splits and merges happen on the test stream
WITH_MERGES = {1, 2, 3, 4, 6, 7, 8}


def _config_id(c: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in c.items()) or "default"


@pytest.mark.parametrize("index", range(len(CONFIGS)), ids=[_config_id(c) for c in CONFIGS])
def test_sclub_matches_literal_algorithm(index):
    """Same partition as the literal Algorithms 1–4 after every round."""
    config = CONFIGS[index]
    users, X, y = _stream()
    fast = SCLUB(8, 3, rng=0, **config)
    ref = LiteralSCLUB(8, 3, **config)
    ups = downs = 0
    prev = 1
    for t in range(users.size):
        fast.update(int(users[t]), X[t], float(y[t]))
        ref.update(int(users[t]), X[t], float(y[t]))
        assert same_partition(fast.clusters().values, ref.labels()), f"round {t + 1}"
        ups += fast.n_clusters > prev
        downs += fast.n_clusters < prev
        prev = fast.n_clusters
    assert ups > 0
    if index in WITH_MERGES:
        assert downs > 0
    # cluster statistics are the pooled user statistics
    st = fast.stats
    for c in st.live():
        k = ref.j[int(st.members(int(c))[0])]
        np.testing.assert_allclose(st.G[c] + np.eye(3), ref.C[k]["S"], atol=1e-9)
        np.testing.assert_allclose(st.theta[c], ref.theta(k), atol=1e-8)
        assert st.n[c] == ref.C[k]["T"]


def test_sclub_finds_planted_clusters():
    users, X, y = _stream(n_users=10, T=4000, noise=0.02, p=np.full(10, 0.1))
    pol = SCLUB(10, 3, rng=0)
    for t in range(users.size):
        pol.update(int(users[t]), X[t], float(y[t]))
    assert same_partition(pol.clusters().values, np.arange(10) % 2)


# ---------------------------------------------------------------------- hand-built rules


def test_split_on_weight_inconsistency_against_phase_start_pivot():
    """Alg. 3: user 1's estimate moves far from the pivot frozen at τ = 1 → split."""
    pol = SCLUB(2, 2, alpha_theta=0.1, use_frequency=False, rng=0)
    e0, e1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    pol.update(0, e0, 0.0)  # τ = 1: phase 1 starts, pivot θ̃ = 0, T̃ = 0
    assert pol.n_clusters == 1  # ‖θ̂_0 − θ̃‖ = 0
    pol.update(1, e1, 2.0)  # τ = 2: θ̂_1 = (0, 1) ; threshold 0.1 (F(1) + F(0)) ≈ 0.185
    assert pol.n_clusters == 2
    assert pol.clusters().values.tolist() == [0, 1]
    # the new cluster holds exactly user 1's statistics; the old one lost them
    c1 = pol.stats.labels[1]
    np.testing.assert_array_equal(pol.stats.G[c1], np.outer(e1, e1))
    np.testing.assert_array_equal(pol.stats.b[pol.stats.labels[0]], np.zeros(2))


def test_double_count_split_reproduces_the_reference_aliasing():
    """After a split the user's rows enter twice (as √2·(x, y)); T_i counts them once."""
    e0, e1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    pol = SCLUB(2, 2, alpha_theta=0.1, use_frequency=False, double_count_split=True, rng=0)
    pol.update(0, e0, 0.0)
    pol.update(1, e1, 2.0)  # split (the splitting row itself is counted once)
    pol.update(1, e1, 2.0)
    st = pol.stats
    np.testing.assert_allclose(st.users.G[1], 3 * np.outer(e1, e1))
    np.testing.assert_allclose(st.users.b[1], 6 * e1)
    assert st.users.n[1] == 2
    np.testing.assert_allclose(st.G[st.labels[1]], st.users.G[1])
    plain = SCLUB(2, 2, alpha_theta=0.1, use_frequency=False, rng=0)
    for u, x, y in ((0, e0, 0.0), (1, e1, 2.0), (1, e1, 2.0)):
        plain.update(u, x, y)
    np.testing.assert_allclose(plain.stats.users.G[1], 2 * np.outer(e1, e1))


def test_no_split_below_threshold_and_singletons_never_split():
    pol = SCLUB(2, 2, alpha_theta=10.0, use_frequency=False, rng=0)
    pol.update(0, [1.0, 0.0], 0.0)
    pol.update(1, [0.0, 1.0], 2.0)  # ‖(0, 1)‖ = 1 < 10 (F(1) + F(0))
    assert pol.n_clusters == 1
    one = SCLUB(1, 2, alpha_theta=1e-6, rng=0)
    for _ in range(5):
        one.update(0, [0.0, 1.0], 5.0)
    assert one.n_clusters == 1  # C-20: a singleton is never split


def test_split_on_frequency_pairwise_vs_cluster_average():
    """Same weights, different frequencies: the pairwise test splits the frequent user out."""
    x = np.array([1.0, 0.0])
    thr = 2 * (1 / math.sqrt(2))
    pair = SCLUB(3, 2, alpha_theta=1e3, rng=0)
    avg = SCLUB(3, 2, alpha_theta=1e3, freq_test="cluster_avg", rng=0)
    off = SCLUB(3, 2, alpha_theta=1e3, use_frequency=False, rng=0)
    for pol in (pair, avg, off):
        for _ in range(40):
            pol.update(0, x, 1.0)
    tau = 40
    # pairwise: |T_0 − T_1| / τ = 1 > √2·F(40) ≈ 0.44 → split; cluster average:
    # |1 − 40/(3·40)| = 0.67 > 0.44 → split as well, but at different rounds
    assert thr * F(tau) < 1.0
    assert pair.n_clusters == 2 and avg.n_clusters == 2 and off.n_clusters == 1
    # first split round: the smallest τ with gap/τ > √2 F(τ), gap = τ (users 1, 2 never seen)
    first_pair = next(t for t in range(1, 41) if thr * F(t) < 1.0)
    first_avg = next(t for t in range(1, 41) if abs(1.0 - 1.0 / 3.0) > thr * F(t))
    assert first_pair < first_avg
    for first, kw in ((first_pair, {}), (first_avg, {"freq_test": "cluster_avg"})):
        pol = SCLUB(3, 2, alpha_theta=1e3, rng=0, **kw)
        counts = []
        for _ in range(first + 1):
            pol.update(0, x, 1.0)
            counts.append(pol.n_clusters)
        assert counts.index(2) + 1 == first


def test_merge_requires_checked_clusters_and_lower_index_absorbs():
    """Alg. 4: clusters merge only when both are checked; the older cluster absorbs."""
    x = np.array([1.0])
    pol = SCLUB(3, 1, alpha_theta=0.5, use_frequency=False, rng=0)
    pol.update(0, x, 0.0)  # τ = 1
    pol.update(1, x, 3.0)  # τ = 2: θ̂_1 = 1.5 > 0.5 (F(1) + F(0)) → user 1 split out
    assert pol.n_clusters == 2
    old = pol.stats.labels[0]
    # τ = 3 opens phase 2 (everyone unchecked). User 1 pulls its estimate back towards 0.
    pol.update(1, x, -2.0)  # θ̂_1 = (3 − 2)/3 ≈ 0.33: {1} checked, {0, 2} not (0, 2 unseen)
    assert pol.n_clusters == 2 and pol.checked.tolist() == [False, True, False]
    pol.update(0, x, 0.0)  # {0, 2} still unchecked (user 2 unseen): no merge
    assert pol.n_clusters == 2
    # user 2 arrives: {0, 2} becomes checked; θ̂ = 0 vs 1/3 < 0.25 (F(3) + F(2)) ≈ 0.37
    pol.update(2, x, 0.0)
    assert pol.n_clusters == 1
    assert pol.stats.labels.tolist() == [old] * 3  # merged into the older cluster
    assert pol.stats.n[old] == 5


def test_phase_start_resets_checks_and_pivots():
    pol = SCLUB(3, 2, alpha_theta=100.0, rng=0)
    x = np.array([0.6, 0.8])
    pol.update(0, x, 1.0)  # τ = 1
    pol.update(1, x, 1.0)  # τ = 2
    assert pol.checked.tolist() == [True, True, False]
    np.testing.assert_array_equal(pol.pivot_theta[pol.stats.labels[0]], np.zeros(2))
    pol.update(2, x, 1.0)  # τ = 3 = 2² − 1 opens phase 2: unchecked, pivots frozen
    assert pol.checked.tolist() == [False, False, True]
    c = pol.stats.labels[0]
    A = np.eye(2) + 2 * np.outer(x, x)
    np.testing.assert_allclose(pol.pivot_theta[c], np.linalg.solve(A, 2 * x))
    assert pol.pivot_count[c] == 2


# ---------------------------------------------------------------------- CLUB


def test_club_deletes_edges_by_rule_and_uses_components(rng):
    U, d = 12, 3
    pol = CLUB(U, d, alpha_2=0.3, graph="complete", rng=0)
    assert pol.n_edges == U * (U - 1) // 2 and pol.n_clusters == 1
    users, X, y = _stream(n_users=U, T=800, seed=3)
    for t in range(users.size):
        i = int(users[t])
        before = pol.edges()
        pol.update(i, X[t], float(y[t]))
        th = pol.stats.users.theta
        Tn = pol.stats.users.n
        expect = before.copy()
        for v in np.flatnonzero(before[i]):
            if np.linalg.norm(th[i] - th[v]) > 0.3 * (F(Tn[i]) + F(Tn[v])):
                expect[i, v] = expect[v, i] = False
        np.testing.assert_array_equal(pol.edges(), expect)
        _, comp = connected_components(pol.edges(), directed=False)
        assert same_partition(pol.clusters().values, comp)
    assert pol.n_clusters > 1
    for c in pol.stats.live():
        m = pol.stats.labels == c
        np.testing.assert_allclose(pol.stats.G[c], pol.stats.users.G[m].sum(0), atol=1e-9)


def _set_graph(pol: CLUB, edges: list[tuple[int, int]]) -> None:
    from hierbandit.sclub.policies import _components

    pol.adjacency[:] = 0
    for a, b in edges:
        for i, j in ((a, b), (b, a)):
            pol.adjacency[i, j >> 6] |= np.uint64(1) << np.uint64(j & 63)
    pol.stats.assign(_components(pol.adjacency))


@pytest.mark.parametrize(
    ("edges", "user", "expect"),
    [
        # star: the centre loses every edge → six singletons ("several components")
        ([(0, k) for k in range(1, 6)], 0, [0, 1, 2, 3, 4, 5]),
        # path 0-1-2-3-4: user 1 loses both edges → {1}, {0}, {2, 3, 4}
        ([(0, 1), (1, 2), (2, 3), (3, 4)], 1, [0, 1, 2, 2, 2, 5]),
        # user 4 is a leaf of a triangle-with-tail: it splits off; the rest stays in place
        ([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4)], 4, [0, 0, 0, 0, 4, 5]),
        # user 0 loses both edges; its former neighbours 1 and 2 still reach each other, so
        # there are two components: {0} moves out and {1, 2, 3, 4} keeps the slot
        ([(0, 1), (0, 2), (1, 2), (2, 3), (3, 4)], 0, [0, 1, 1, 1, 1, 5]),
    ],
)
def test_club_component_splits_on_hand_built_graphs(edges, user, expect):
    pol = CLUB(6, 2, alpha_2=1e-9, rng=0)
    _set_graph(pol, edges)
    slot_before = pol.stats.labels[1 if user != 1 else 2]
    pol.update(user, [1.0, 0.5], 1.0)  # θ̂_user ≠ 0 = θ̂_ℓ: every edge of `user` is deleted
    assert not pol.edges()[user].any()
    assert same_partition(pol.clusters().values, expect)
    _, comp = connected_components(pol.edges(), directed=False)
    assert same_partition(pol.clusters().values, comp)
    st = pol.stats
    for c in st.live():
        m = st.labels == c
        np.testing.assert_array_equal(st.G[c], st.users.G[m].sum(0))
        assert st.n[c] == st.users.n[m].sum()
    # the largest remaining component keeps its slot (only smaller pieces are moved)
    sizes = np.bincount(pol.clusters().values)
    biggest_user = int(np.flatnonzero(pol.clusters().values == sizes.argmax())[0])
    if sizes.max() > 1:
        assert st.labels[biggest_user] == slot_before


def test_club_random_graph():
    pol = CLUB(200, 3, rng=1)
    g = np.random.default_rng(1).spawn(2)[1]  # the policy's graph stream
    p = 3 * math.log(200) / 200
    dense = np.zeros((200, 200), dtype=bool)
    for i in range(199):
        dense[i, i + 1 :] = g.random(199 - i) < p
    np.testing.assert_array_equal(pol.edges(), dense | dense.T)
    deg = pol.edges().sum(axis=1)
    p = 3 * math.log(200) / 200
    assert abs(deg.mean() - p * 199) < 3
    assert np.array_equal(pol.edges(), pol.edges().T) and not pol.edges().diagonal().any()
    _, comp = connected_components(pol.edges(), directed=False)
    assert same_partition(pol.clusters().values, comp)
    assert np.array_equal(CLUB(200, 3, rng=1).edges(), pol.edges())


# ---------------------------------------------------------------------- LinUCB


def _ucb(Ainv, theta, items, beta, sqrt=True):
    w = np.einsum("ld,de,le->l", items, Ainv, items)
    return items @ theta + beta * (np.sqrt(w) if sqrt else w)


@pytest.mark.parametrize("cls", [LinUCBOne, LinUCBInd])
@pytest.mark.parametrize("bonus", ["sqrt", "no_sqrt"])
def test_linucb_select_is_the_ucb_argmax(cls, bonus, rng):
    U, d, L = 4, 3, 6
    pol = cls(U, d, bonus=bonus, rng=0)
    Gs = [np.zeros((d, d)) for _ in range(U)]
    bs = [np.zeros(d) for _ in range(U)]
    for t in range(300):
        u = int(rng.integers(U))
        items = rng.standard_normal((L, d))
        k = pol.select(u, items)
        slot = 0 if cls is LinUCBOne else u
        G = sum(Gs) if cls is LinUCBOne else Gs[u]
        bb = sum(bs) if cls is LinUCBOne else bs[u]
        n = t if cls is LinUCBOne else pol.stats.n[u]
        A = np.eye(d) + G
        beta = anytime_beta(n, t + 1, d)
        scores = _ucb(np.linalg.inv(A), np.linalg.solve(A, bb), items, beta, bonus == "sqrt")
        assert k == int(np.argmax(scores))
        yv = float(rng.standard_normal())
        pol.update(u, items[k], yv)
        Gs[u] = Gs[u] + np.outer(items[k], items[k])
        bs[u] = bs[u] + yv * items[k]
        assert slot in (0, u)
    stats = pol.user_stats()
    np.testing.assert_allclose(stats["G"].values, np.stack(Gs), atol=1e-10)
    assert stats["n"].values.sum() == 300


def test_clusters_of_baselines():
    assert LinUCBOne(5, 2).clusters().values.tolist() == [0] * 5
    assert LinUCBInd(5, 2).clusters().values.tolist() == list(range(5))
    assert LinUCBOne(5, 2).n_clusters == 1 and LinUCBInd(5, 2).n_clusters == 5


# ---------------------------------------------------------------------- fast path, API


POLICIES = [
    (SCLUB, {}),
    (SCLUB, {"merge_scan": "all", "pivot": "current", "freq_test": "cluster_avg"}),
    (SCLUB, {"uncheck": "round", "bonus": "no_sqrt"}),
    (CLUB, {}),
    (CLUB, {"graph": "complete", "alpha_2": 0.5}),
    (LinUCBOne, {"beta": 0.7}),
    (LinUCBInd, {"tie_break": "first"}),
]


@pytest.mark.parametrize(("cls", "kw"), POLICIES)
@pytest.mark.parametrize("bernoulli", [True, False])
def test_compiled_run_equals_select_update_loop(cls, kw, bernoulli):
    from hierbandit.sclub.env import ClusteredLinearEnv

    env = ClusteredLinearEnv(
        20, 3, 4, 5, frequency="half", reward="bernoulli" if bernoulli else "gaussian", rng=0
    )
    roll = env.rollout(1500, rng=1)
    a, b = cls(20, 4, rng=3, **kw), cls(20, 4, rng=3, **kw)
    choice, ncl = a.run(roll.users, roll.items, roll.means, roll.noise, bernoulli=bernoulli)
    for t in range(roll.horizon):
        u = int(roll.users[t])
        k = b.select(u, roll.items[t])
        assert k == choice[t]
        b.update(u, roll.items[t, k], float(env.realised_reward(roll.means[t, k], roll.noise[t])))
        assert b.n_clusters == ncl[t]
    assert a.t == b.t == roll.horizon
    assert snapshot(a) == snapshot(b)


def test_random_tie_break_is_uniform_and_reproducible():
    items = np.tile(np.array([[0.6, 0.8]]), (4, 1))
    pol = LinUCBOne(1, 2, rng=5)
    picks = [pol.select(0, items) for _ in range(400)]
    counts = np.bincount(picks, minlength=4)
    assert counts.min() > 60
    again = LinUCBOne(1, 2, rng=5)
    assert [again.select(0, items) for _ in range(400)] == picks
    assert LinUCBOne(1, 2, tie_break="first").select(0, items) == 0


@pytest.mark.parametrize("cls", [SCLUB, CLUB, LinUCBOne, LinUCBInd])
def test_bad_input_raises_and_changes_nothing(cls, rng):
    pol = cls(4, 3, rng=0)
    for _ in range(30):
        items = rng.standard_normal((5, 3))
        u = int(rng.integers(4))
        k = pol.select(u, items)
        pol.update(u, items[k], float(rng.standard_normal()))
    good = rng.standard_normal((5, 3))
    bad_calls = [
        (lambda: pol.select(4, good), ValueError, "user must be in"),
        (lambda: pol.select(-1, good), ValueError, "user must be in"),
        (lambda: pol.select(True, good), TypeError, "user must be an integer"),
        (lambda: pol.select(1.0, good), TypeError, "user must be an integer"),
        (lambda: pol.select(0, good[:, :2]), ValueError, "items must have shape"),
        (lambda: pol.select(0, good[0]), ValueError, "items must have shape"),
        (lambda: pol.select(0, np.empty((0, 3))), ValueError, "at least one item"),
        (
            lambda: pol.select(0, np.where(good > 0, np.nan, good)),
            ValueError,
            "items must be finite",
        ),
        (lambda: pol.select(0, good.astype(str)), TypeError, "items must be numeric"),
        (lambda: pol.update(0, good[0, :2], 1.0), ValueError, "item_features must have shape"),
        (lambda: pol.update(0, [np.inf, 0, 0], 1.0), ValueError, "item_features must be finite"),
        (lambda: pol.update(0, good[0], np.nan), ValueError, "reward must be finite"),
        (lambda: pol.update(0, good[0], "1"), TypeError, "reward must be a real"),
        (lambda: pol.update(9, good[0], 1.0), ValueError, "user must be in"),
        (lambda: pol.run([0], good[None], np.zeros((1, 4)), [0.0]), ValueError, "means"),
        (lambda: pol.run([5], good[None], np.zeros((1, 5)), [0.0]), ValueError, "users must be"),
        (lambda: pol.run([0], good[None], np.zeros((1, 5)), [np.nan]), ValueError, "noise"),
    ]
    before = snapshot(pol)
    for call, exc, match in bad_calls:
        with pytest.raises(exc, match=match):
            call()
        assert snapshot(pol) == before


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"alpha_theta": 0.0}, ValueError, "alpha_theta"),
        ({"alpha_p": -1.0}, ValueError, "alpha_p"),
        ({"freq_test": "pair"}, ValueError, "freq_test"),
        ({"pivot": "start"}, ValueError, "pivot"),
        ({"uncheck": "never"}, ValueError, "uncheck"),
        ({"merge_scan": "some"}, ValueError, "merge_scan"),
        ({"use_frequency": 1}, TypeError, "use_frequency"),
        ({"beta": "theory"}, ValueError, "beta"),
        ({"beta": -1.0}, ValueError, "beta"),
        ({"bonus": "square"}, ValueError, "bonus"),
        ({"reg": 0.0}, ValueError, "reg"),
        ({"recompute_every": 0}, ValueError, "recompute_every"),
        ({"tie_break": "last"}, ValueError, "tie_break"),
    ],
)
def test_sclub_constructor_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        SCLUB(3, 2, **kwargs)


def test_club_constructor_validation():
    with pytest.raises(ValueError, match="graph"):
        CLUB(3, 2, graph="ring")
    with pytest.raises(ValueError, match="edge_probability"):
        CLUB(3, 2, edge_probability=1.5)
    with pytest.raises(ValueError, match="alpha_2"):
        CLUB(3, 2, alpha_2=0.0)


def test_presets_clone_and_params():
    ref = SCLUB.reference(10, 4, rng=1)
    assert (ref.pivot, ref.uncheck, ref.merge_scan, ref.freq_test, ref.bonus) == (
        "current",
        "round",
        "all",
        "cluster_avg",
        "no_sqrt",
    )
    assert ref.alpha_p == pytest.approx(1 / math.sqrt(2)) and ref.alpha_theta == 1.0
    assert ref.double_count_split and not SCLUB(3, 2).double_count_split
    th = SCLUB.theory(1000, 20, horizon=2**20 - 1)
    assert th.alpha_theta == pytest.approx(4 * 0.5 * math.sqrt(20 * 38))  # ≈ 55
    assert th.alpha_p == 2.0
    assert th.beta == pytest.approx(theory_beta(1000, 20, 2**20 - 1))
    assert CLUB.reference(10, 4).graph == "erdos_renyi"
    assert LinUCBInd.reference(10, 4).bonus == "no_sqrt"
    clone = ref.clone()
    assert clone.get_params() == ref.get_params()
    assert type(clone) is SCLUB and clone.t == 0
    assert ref.clone(rng=7).rng == 7


def test_beta_helpers():
    assert anytime_beta(0, 1, 20) == pytest.approx(math.sqrt(math.log(2)) + 1)
    assert anytime_beta(100, 10, 5) == pytest.approx(
        math.sqrt(5 * math.log(1 + 20) + 4 * math.log(10) + math.log(2)) + 1
    )
    assert anytime_beta(0, 0, 3) == anytime_beta(0, 1, 3)  # τ ≥ 1 (C-18: no ln 0)
    assert theory_beta(10, 2, 100, noise_scale=1.0) == pytest.approx(
        math.sqrt(2 * math.log(1 + 50) + 2 * math.log(400))
    )
