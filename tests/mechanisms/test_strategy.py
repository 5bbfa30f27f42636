"""Strategy mechanisms: privacy checked independently on every pair, errors, releases, audit."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import null_space
from scipy.sparse.csgraph import shortest_path

import dprivacy as dp
from dprivacy import metrics
from dprivacy.audit import audit
from dprivacy.errors import BudgetExceededError, PrivacyViolationError, ValidationError


def all_pairs_ratio(A: np.ndarray, eps: np.ndarray) -> float:
    """max over ALL pairs i < j of ||A e_i - A e_j||_1 / eps_ij from the dense budget matrix:
    no constraint set, no edges, no scan."""
    N = A.shape[1]
    worst = 0.0
    for i in range(N):
        d = np.abs(A[:, i:i + 1] - A[:, i + 1:]).sum(axis=0)
        e = eps[i, i + 1:]
        fin = np.isfinite(e)
        if np.any(fin):
            with np.errstate(divide="ignore"):
                worst = max(worst, float(np.max(np.where(d[fin] > 0, d[fin] / e[fin], 0.0))))
    return worst


def known_total_error(F: np.ndarray, A: np.ndarray) -> float:
    Q = null_space(np.ones((1, F.shape[1])))
    return 2.0 * float(np.sum((F @ Q @ np.linalg.pinv(A @ Q)) ** 2))


def _cases():
    rng = np.random.default_rng(11)
    line = dp.Universe.from_points(np.sort(rng.uniform(0, 10, 12))[:, None])
    plane = dp.Universe.from_points(rng.uniform(0, 3, size=(10, 2)))
    cities = dp.Universe.from_points(np.c_[rng.uniform(30, 45, 9), rng.uniform(-120, -75, 9)],
                                     )
    grid = dp.Universe.from_points(np.array([[a, b] for a in range(3) for b in range(4)], float))
    prod = dp.Universe.from_domains({"a": [0, 1, 2], "b": [0, 1], "c": [0, 1]})
    ring = dp.Universe.from_points(np.arange(8.0)[:, None])
    eps = rng.uniform(0.5, 2.0, (7, 7))
    eps = eps + eps.T
    np.fill_diagonal(eps, 0)
    eps = shortest_path(eps)  # a metric: no closure warning
    mat_u = dp.Universe.from_points(np.arange(7.0)[:, None])
    return [
        ("euclid1d", line, metrics.Euclidean(0.3), "ranges"),
        ("euclid2d", plane, metrics.Euclidean(0.8), "dense"),
        ("geodesic", cities, metrics.Geodesic(0.002), "dense"),
        ("blowfish", grid, metrics.BlowfishThreshold(theta=1.0, eps=0.7), "dense"),
        ("attribute", prod, metrics.AttributeWeighted({"a": 0.5, "b": 1.0, "c": 2.0}), "marginals"),
        ("graph", ring, metrics.Graph([(i, (i + 1) % 8, 0.2 + 0.1 * i) for i in range(8)]), "ranges"),
        ("matrix", mat_u, metrics.Matrix(eps), "dense"),
    ]


def _workload(kind: str, U: dp.Universe, rng: np.random.Generator) -> dp.Workload:
    if kind == "ranges":
        return dp.Workload.range_queries(U.N, count=15, rng=rng)
    if kind == "marginals":
        return dp.Workload.marginals(U, k=2)
    return dp.Workload(rng.random((4, U.N)))


@pytest.mark.parametrize("name,U,M,kind", _cases(), ids=[c[0] for c in _cases()])
def test_every_pair_within_budget_and_error_formula(name, U, M, kind):
    rng = np.random.default_rng(5)
    W = _workload(kind, U, rng)
    base = dp.design(W, U, M, method="exact")
    d = dp.design_strategy(W, U, M, baseline=base, rounds=2)
    A = d.strategy
    assert all_pairs_ratio(A, M.budget(U)) <= 1 + 1e-9
    F = W.dense()
    assert d.expected_squared_error() == pytest.approx(known_total_error(F, A), rel=1e-6)
    assert d.query_variances().shape == (W.m,)
    # never worse than the (w, beta) design it started from (w = 1: its error is sum 2 / beta^2)
    finite = np.isfinite(base.beta)
    assert d.expected_squared_error() <= float(np.sum(2 / base.beta[finite] ** 2)) * (1 + 1e-9)
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    assert mech.max_ratio_ <= 1 + 1e-9
    assert mech.expected_squared_error() == pytest.approx(d.expected_squared_error(), rel=1e-9)


def test_path_metrics_use_edges_and_the_prefix_basis():
    U = dp.Universe.from_points(np.arange(16.0)[:, None])
    M = metrics.Euclidean(0.1)
    cs = M.constraint_set(U)
    assert cs.kind == "edges" and cs.n_constraints == 15
    W = dp.Workload.range_queries(16, [(a, b) for a in range(16) for b in range(a, 16)])
    d = dp.design_strategy(W, U, M, rounds=1)
    assert d.basis.kind == "tree"
    wb = dp.design(W, U, M, method="exact")
    assert d.expected_squared_error() * 100 < float(np.sum(2 / wb.beta**2))


@pytest.fixture(scope="module")
def small():
    U = dp.Universe.from_points(np.arange(6.0)[:, None])
    M = metrics.Euclidean(1.0)
    W = dp.Workload.range_queries(6, [(0, 2), (1, 4), (3, 5), (0, 5), (2, 2)])
    return U, M, W, dp.design_strategy(W, U, M, rounds=1)


def test_release_is_unbiased_with_the_expected_error(small):
    U, M, W, d = small
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    x = np.array([3, 1, 4, 1, 5, 9])
    truth = W.answer(x)
    acc = dp.Accountant(total=np.inf)
    rng = np.random.default_rng(0)
    R = 4000
    out = np.array([mech.release(x, rng=rng, secure=False, accountant=acc) for _ in range(R)])
    err = np.sum((out - truth) ** 2, axis=1)
    expected = mech.expected_squared_error()
    se = err.std(ddof=1) / np.sqrt(R)
    assert abs(err.mean() - expected) < 5 * se
    var = out.var(axis=0, ddof=1)
    assert np.allclose(var, mech.query_variances(), rtol=0.15)
    assert np.all(np.abs(out.mean(axis=0) - truth) <= 5 * np.sqrt(mech.query_variances() / R) + 1e-9)
    # the total is exact: the range (0, 5) covers everything
    assert np.allclose(out[:, 3], x.sum())


def test_secure_release_and_the_one_release_default(small):
    U, M, W, d = small
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    y = mech.release(np.array([1, 0, 2, 0, 0, 1]))
    assert y.shape == (W.m,) and np.all(np.isfinite(y))
    with pytest.raises(BudgetExceededError):
        mech.release(np.array([1, 0, 2, 0, 0, 1]))
    with pytest.raises(ValidationError):
        mech.release(np.array([1, 0, 2]), accountant=dp.Accountant(total=5))


def _scaled(d: dp.StrategyDesign, factor: float) -> dp.StrategyDesign:
    return dp.StrategyDesign(d.workload, d.C * factor, d.basis, d.M / factor, d.o,
                             constraints=d.constraints)


def test_a_strategy_over_budget_is_refused(small):
    U, M, W, d = small
    with pytest.raises(PrivacyViolationError, match="privacy condition"):
        dp.StrategyMechanism(W, _scaled(d, 1.001), universe=U, metric=M)
    with pytest.raises(ValidationError):
        dp.StrategyMechanism(W, dp.design(W, U, M, method="uniform"))  # not a strategy design


class _Unchecked(dp.StrategyMechanism):
    """A strategy mechanism that skips the privacy check (to be caught by the audit)."""

    def __init__(self, W, design, U, M):
        from dprivacy.mechanisms._release import setup_accounting

        self.workload, self.design, self.constraints = W, design, M.constraint_set(U)
        FK, f0 = design.basis.workload(W.F)
        from solvers.strategy import answer_map

        self.M, self.o = answer_map(design.C, FK, f0, design.basis.kind == "identity")
        self.max_ratio_ = 2.0
        setup_accounting(self, U, M)


def test_audit_flags_a_strategy_scaled_twice_too_large():
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [2.0]]))
    M = metrics.Euclidean(1.0)
    W = dp.Workload.range_queries(3, [(0, 0), (0, 1), (1, 2)])
    d = dp.design_strategy(W, U, M, rounds=1)
    x = np.array([4, 2, 1])
    good = dp.StrategyMechanism(W, d, universe=U, metric=M)
    r = audit(good, x, 0, 1, samples=20000, rng=3)
    assert not r.violated
    r = audit(_Unchecked(W, _scaled(d, 2.0), U, M), x, 0, 1, samples=20000, rng=3)
    assert r.violated and r.eps_lower_bound > r.eps_ij == 1.0


@pytest.mark.parametrize("name,U,M,kind", [c for c in _cases() if c[0] in ("euclid2d", "graph")],
                         ids=["euclid2d", "graph"])
def test_many_queries_take_the_estimate_route_with_the_same_answers(name, U, M, kind,
                                                                    monkeypatch):
    """Beyond the answer-map limit an explicit workload is answered as F x_hat (no m x p map):
    the same errors, variances and answers as the answer map M y + n o."""
    import solvers.strategy as st

    W = _workload(kind, U, np.random.default_rng(5))
    d = dp.design_strategy(W, U, M, rounds=1)
    small_mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    assert small_mech.M is not None
    monkeypatch.setattr(st, "ANSWER_MAP_ENTRIES", 0)
    big = dp.design_strategy(W, U, M, rounds=1)
    assert big.M is None and big.X is not None
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    assert mech.M is None and mech.X is not None
    assert mech.query_variances() == pytest.approx(small_mech.query_variances(), rel=1e-9)
    assert all_pairs_ratio(big.strategy, M.budget(U)) <= 1 + 1e-9
    assert big.expected_squared_error() == pytest.approx(known_total_error(W.dense(), big.strategy),
                                                         rel=1e-6)
    x = np.arange(U.N) % 4
    for a, b in ((mech, small_mech),):
        ya = a.release(x, rng=3, secure=False)
        yb = b.release(x, rng=3, secure=False)
        assert ya == pytest.approx(yb, rel=1e-9, abs=1e-9)
