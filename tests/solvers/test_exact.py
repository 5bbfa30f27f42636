"""Exact constraint generation vs independent all-pairs solves, and vs every heuristic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog, minimize

from solvers import METHODS, ConstraintSet, design, objective, shrinkage
from tests.solvers.conftest import euclid_instance, hamming_graph


def all_pairs(F: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, m) matrix of |F_ki - F_kj| and the (P,) budgets, built by a plain python loop."""
    rows, b = [], []
    N = eps.shape[0]
    for i in range(N):
        for j in range(i + 1, N):
            if np.isfinite(eps[i, j]):
                rows.append(np.abs(F[:, i] - F[:, j]))
                b.append(eps[i, j])
    return np.array(rows), np.array(b)


def independent_optimum(F: np.ndarray, eps: np.ndarray, loss: str) -> float:
    """Problem (6) at w = 1 solved over ALL pairs with scipy (HiGHS LP for 'max', SLSQP on
    t = log u for the smooth losses) -- no code shared with solvers.convex."""
    A, b = all_pairs(F, eps)
    m = F.shape[0]
    if loss == "max":  # maximise s s.t. A u <= b, s <= u_k
        c = np.r_[np.zeros(m), -1.0]
        A_ub = np.block([[A, np.zeros((len(b), 1))], [-np.eye(m), np.ones((m, 1))]])
        res = linprog(c, A_ub=A_ub, b_ub=np.r_[b, np.zeros(m)], bounds=[(0, None)] * (m + 1),
                      method="highs")
        assert res.status == 0
        return 1.0 / -res.fun
    B = A / b[:, None]
    sc = 1.0 / B.max(axis=0)  # u = sc * v: columns scaled to max 1
    B = B * sc[None, :]
    f, g = {"squared": (lambda v: 2 * np.sum((sc * v) ** -2), lambda v: -4 * sc * (sc * v) ** -3),
            "absolute": (lambda v: np.sum(1 / (sc * v)), lambda v: -sc / (sc * v) ** 2),
            "log": (lambda v: -np.mean(np.log(sc * v)), lambda v: -1 / (m * v))}[loss]
    norm = abs(f(np.ones(m)))
    v = np.full(m, 1 / B.sum(1).max())  # Strategy 2 start, feasible
    for _ in range(3):
        res = minimize(lambda v: f(v) / norm, v, jac=lambda v: g(v) / norm, method="SLSQP",
                       bounds=[(1e-12, 1)] * m, options={"ftol": 1e-16, "maxiter": 2000},
                       constraints=[{"type": "ineq", "fun": lambda v: 1 - B @ v,
                                     "jac": lambda v: -B}])
        v = res.x / max(1.0, (B @ res.x).max())  # feasible point
    return float(f(v))


@pytest.mark.parametrize("loss", ["squared", "absolute", "max", "log"])
@pytest.mark.parametrize("seed, N, m, binary", [(0, 40, 3, False), (1, 60, 4, True), (2, 25, 2, False)])
def test_exact_equals_independent_dense_solve(loss, seed, N, m, binary):
    F, eps = euclid_instance(N, m, np.random.default_rng(seed), binary=binary)
    r = design(F, ConstraintSet.dense(eps), method="exact", loss=loss)
    ref = independent_optimum(F, eps, loss)
    assert r.report["max_ratio"] <= 1 + 1e-12
    if loss == "max":
        assert r.objective == pytest.approx(ref, rel=1e-6)
    elif loss == "log":
        assert r.objective == pytest.approx(ref, abs=1e-6)  # log scale: absolute = relative
    else:
        assert r.objective <= ref * (1 + 1e-6)  # SLSQP is a local method: exact never worse
        assert r.objective == pytest.approx(ref, rel=1e-6)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), N=st.integers(2, 50), m=st.integers(1, 6),
       binary=st.booleans(), loss=st.sampled_from(["squared", "absolute", "max", "log"]))
def test_exact_beats_every_heuristic_and_all_feasible(seed, N, m, binary, loss):
    F, eps = euclid_instance(N, m, np.random.default_rng(seed), binary=binary)
    cs = ConstraintSet.dense(eps)
    res = {meth: design(F, cs, method=meth, loss=loss)
           for meth in METHODS if (meth != "closed_form" or m == 1)
           and (meth != "bcd" or loss == "squared")}
    for r in res.values():
        assert r.report["max_ratio"] <= 1 + 1e-9
        assert not np.isnan(r.beta).any() and not np.isnan(r.w).any()
        u = r.u
        A, b = all_pairs(F, eps)
        fin = np.isfinite(u)
        assert np.all(A[:, fin] @ u[fin] <= b * (1 + 1e-9))
    best = res["exact"].objective
    for meth, r in res.items():
        assert best <= r.objective + 1e-9 * abs(r.objective) + 1e-12, meth


def test_exact_with_small_memory_and_forced_rounds_matches():
    F, eps = euclid_instance(120, 5, np.random.default_rng(7))
    cs = ConstraintSet.dense(eps)
    a = design(F, cs, method="exact")
    b = design(F, ConstraintSet.oracle(120, lambda rows: eps[rows]), method="exact",
               memory_bytes=50_000)
    assert a.objective == pytest.approx(b.objective, rel=1e-8)
    assert b.report["n_constraints"] == a.report["n_constraints"] == 120 * 119 // 2
    assert a.report["n_constraints_used"] < a.report["n_constraints"] / 20


def test_edges_only_equals_all_pairs_on_hamming_graph():
    """Spec §9.2: for a graph metric the edge constraints give the same optimum as all pairs."""
    w = np.array([0.3, 1.0, 2.5, 0.7])
    X, ei, ej, E, D = hamming_graph(4, w)
    rng = np.random.default_rng(11)
    F = np.vstack([rng.random((3, 16)), X.T[:2]])  # random queries and two 1-way marginals
    dense = ConstraintSet.dense(D)
    edges = ConstraintSet.edges(ei, ej, E, 16)
    assert edges.n_constraints == 32 and dense.n_constraints == 120
    for loss in ("squared", "log", "max"):
        a = design(F, dense, method="exact", loss=loss)
        b = design(F, edges, method="exact", loss=loss)
        assert a.objective == pytest.approx(b.objective, rel=1e-7, abs=1e-9)
        assert dense.scan(F, b.u).max_ratio <= 1 + 1e-9  # edge design is all-pairs feasible
    # the marginal of attribute k gets exactly eps_k (spec §8.2)
    marg = design(X.T[[2]], edges, method="closed_form")
    assert marg.beta[0] == pytest.approx(w[2])


def test_shrinkage_with_n_improves_the_bound():
    F, eps = euclid_instance(50, 3, np.random.default_rng(5))
    cs = ConstraintSet.dense(eps)
    for n in (10.0, 1e3):
        plain = design(F, cs, method="exact", loss="squared")
        w, _ = shrinkage(plain.u, F, n, "squared")  # shrinkage alone keeps u: privacy unchanged
        assert np.all(w <= 1) and np.all(w > 0)
        shr = objective("squared", w, plain.u / w, F, n)
        at_one = objective("squared", np.ones(3), plain.beta, F, n)
        assert shr < at_one
        joint = design(F, cs, method="exact", loss="squared", n=n)  # joint (w, u): better still
        assert joint.objective <= shr * (1 + 1e-9)
        bcd = design(F, cs, method="bcd", loss="squared", n=n)
        assert bcd.report["max_ratio"] <= 1 + 1e-9
        assert bcd.objective <= objective("squared", np.ones(3), plain.beta, F, n) * (1 + 1e-6)
    # without n, bcd is the w = 1 exact problem
    assert design(F, cs, method="bcd").objective == pytest.approx(plain.objective, rel=1e-7)


def test_finalize_scales_back_from_the_methods_own_scan_of_the_same_u():
    """A scan the method already made of exactly u (same F, same set) sets the scale-back
    without a second scan of u; the certificate is still finalize's own scan of the result."""
    from solvers.verify import Draft, finalize

    rng = np.random.default_rng(3)
    P = rng.random((40, 2))
    eps = np.sqrt(((P[:, None] - P[None]) ** 2).sum(-1))
    cs = ConstraintSet.dense(eps)
    F = rng.random((3, 40))
    u = np.array([4.0, 1.0, 2.0])
    sc = cs.scan(F, u)
    assert sc.max_ratio > 1.5
    for scanned, scans in (((F, cs, u.copy(), "sum", sc.max_ratio, sc.worst), 1),
                           ((F.copy(), cs, u.copy(), "sum", sc.max_ratio, sc.worst), 2),
                           ((F, cs, u * 2, "sum", sc.max_ratio, sc.worst), 2),
                           (None, 2)):
        before = cs.stats.snapshot()
        res = finalize(F, cs, Draft(u=u.copy(), scanned=scanned), method="exact",
                       loss="squared", n=None, t0=0.0, memory_bytes=2**26)
        assert cs.stats.since(before)["by"] == {"finalize": scans}
        np.testing.assert_array_equal(res.u, u / sc.max_ratio)
        assert res.report["certificate"]["max_ratio"] <= 1.0 + 1e-9
        assert res.report["certificate"]["max_ratio"] == cs.scan(F, res.u).max_ratio
