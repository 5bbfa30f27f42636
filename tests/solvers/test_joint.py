"""Exact design with n (solvers.joint): the joint (w, u) optimum of problem (6) (spec §3.7, §9.1)
against BCD, exact-then-shrinkage and independent all-pairs scipy solves."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from solvers import ConstraintSet, design, objective, shrinkage
from tests.solvers.conftest import euclid_instance
from tests.solvers.test_exact import all_pairs

CASES = [(seed, N, m, n) for seed, (N, m) in enumerate([(12, 2), (25, 3), (40, 4), (30, 5), (40, 5)])
         for n in (0.5, 3.0, 30.0, 1e3)]


def shrink_after_exact(F: np.ndarray, cs: ConstraintSet, n: float, loss: str) -> float:
    """The previous behaviour: w = 1 optimum, then w*(u) (spec §9.1), as an objective value."""
    u = design(F, cs, method="exact", loss=loss).u
    w, _ = shrinkage(u, F, n, loss)
    beta = np.where(w > 0, u / np.where(w > 0, w, 1.0), np.inf)
    return objective(loss, w, beta, F, n)


def brute_squared(F: np.ndarray, eps: np.ndarray, n: float, rng: np.random.Generator) -> float:
    """min_u sum_k 2 a_k / (a_k u_k^2 + 2) s.t. ALL pair constraints: SLSQP from 12 starts
    (random, uniform, random subsets of queries at zero). Shares no code with solvers."""
    A, b = all_pairs(F, eps)
    B = A / b[:, None]
    c = B.max(axis=0)
    Bs = B / c  # variable v = c u in [0, 1]
    a = (n * np.abs(F).max(axis=1)) ** 2

    def h(v: np.ndarray) -> float:
        return float(np.sum(2 * a / (a * (v / c) ** 2 + 2)))

    def g(v: np.ndarray) -> np.ndarray:
        u = v / c
        return -4 * a**2 * u / (a * u**2 + 2) ** 2 / c

    m = F.shape[0]
    norm = h(np.zeros(m))
    best = np.inf
    starts = [np.ones(m)] + [rng.random(m) * (rng.random(m) < 0.7) for _ in range(11)]
    for v0 in starts:
        v = v0 / max(1.0, (Bs @ v0).max())
        for _ in range(2):
            res = minimize(lambda x: h(x) / norm, v, jac=lambda x: g(x) / norm, method="SLSQP",
                           bounds=[(0, 1)] * m, options={"ftol": 1e-16, "maxiter": 2000},
                           constraints=[{"type": "ineq", "fun": lambda x: 1 - Bs @ x,
                                         "jac": lambda x: -Bs}])
            v = np.clip(res.x, 0, 1) / max(1.0, (Bs @ np.clip(res.x, 0, 1)).max())
        best = min(best, h(v))
    return best


def global_absolute(F: np.ndarray, eps: np.ndarray, n: float) -> float:
    """Exact global optimum of min_u sum_k min(1/u_k, n ||F_k||_inf) over ALL pairs: enumerate the
    set S of queries answered with w = 1 (the others get u = 0, cost n ||F_k||_inf) and solve the
    convex min sum_{S} 1/u_k for each S with SLSQP."""
    A, b = all_pairs(F, eps)
    m = F.shape[0]
    cost = n * np.abs(F).max(axis=1)
    best = cost.sum()
    for r in range(1, m + 1):
        for S in itertools.combinations(range(m), r):
            S = list(S)
            B = A[:, S] / b[:, None]
            c = B.max(axis=0)
            Bs = B / c
            f = lambda v, c=c: float(np.sum(c / v))  # noqa: E731
            v = np.full(len(S), 1 / Bs.sum(1).max())
            for _ in range(3):
                res = minimize(f, v, jac=lambda v, c=c: -c / v**2, method="SLSQP",
                               bounds=[(1e-12, 1)] * len(S), options={"ftol": 1e-16, "maxiter": 2000},
                               constraints=[{"type": "ineq", "fun": lambda x, Bs=Bs: 1 - Bs @ x,
                                             "jac": lambda x, Bs=Bs: -Bs}])
                v = res.x / max(1.0, (Bs @ res.x).max())
            best = min(best, f(v) + cost[[k for k in range(m) if k not in S]].sum())
    return best


def assert_feasible(F: np.ndarray, eps: np.ndarray, u: np.ndarray) -> None:
    A, b = all_pairs(F, eps)
    fin = np.isfinite(u)
    assert np.all(A[:, fin] @ u[fin] <= b * (1 + 1e-9))


@pytest.mark.parametrize("seed, N, m, n", CASES)
def test_joint_squared_beats_bcd_and_shrinkage_and_matches_brute_force(seed, N, m, n):
    F, eps = euclid_instance(N, m, np.random.default_rng(seed))
    cs = ConstraintSet.dense(eps)
    r = design(F, cs, method="exact", loss="squared", n=n)
    rep = r.report
    assert_feasible(F, eps, r.u)
    assert rep["max_ratio"] <= 1 + 1e-12
    assert np.all((r.w >= 0) & (r.w <= 1))
    assert r.objective == pytest.approx(rep["joint_objective"], rel=1e-9)
    shr = shrink_after_exact(F, cs, n, "squared")
    assert rep["shrinkage_objective"] == pytest.approx(shr, rel=1e-7)
    assert r.objective <= shr * (1 + 1e-7)
    assert r.objective <= design(F, cs, method="bcd", loss="squared", n=n).objective * (1 + 1e-7)
    brute = brute_squared(F, eps, n, np.random.default_rng(seed))
    assert rep["lower_bound"] <= brute * (1 + 1e-7)  # the envelope bound is a true lower bound
    assert rep["lower_bound"] <= r.objective * (1 + 1e-12)
    if rep["convex_region"] or rep["global_optimum"]:
        assert r.objective == pytest.approx(brute, rel=1e-6)
    if not rep["convex_region"]:
        assert any("not convex" in s or "shrunk" in s for s in rep["notes"])


def test_joint_cases_cover_both_regimes():
    """The parametrised cases above include convex-region and non-convex-region solutions."""
    seen = set()
    for seed, N, m, n in CASES:
        F, eps = euclid_instance(N, m, np.random.default_rng(seed))
        seen.add(design(F, ConstraintSet.dense(eps), method="exact", n=n).report["convex_region"])
    assert seen == {True, False}


@pytest.mark.parametrize("seed, N, m, n", [c for c in CASES if c[2] <= 4])
def test_joint_absolute_is_global_when_certified(seed, N, m, n):
    F, eps = euclid_instance(N, m, np.random.default_rng(seed))
    cs = ConstraintSet.dense(eps)
    r = design(F, cs, method="exact", loss="absolute", n=n)
    assert_feasible(F, eps, r.u)
    assert set(np.unique(r.w)) <= {0.0, 1.0}
    assert r.objective <= shrink_after_exact(F, cs, n, "absolute") * (1 + 1e-7)
    glob = global_absolute(F, eps, n)
    assert r.report["lower_bound"] <= glob * (1 + 1e-7)
    assert r.objective >= glob * (1 - 1e-7)
    if r.report["global_optimum"]:
        assert r.objective == pytest.approx(glob, rel=1e-6)


def test_joint_large_n_tends_to_w_one_and_degenerate_rows():
    F, eps = euclid_instance(30, 3, np.random.default_rng(9))
    F = np.vstack([F, np.full((1, 30), 0.7)])  # a constant row: answered exactly, no NaN
    cs = ConstraintSet.dense(eps)
    r = design(F, cs, method="exact", loss="squared", n=1e9)
    plain = design(F, cs, method="exact", loss="squared")
    assert r.report["global_optimum"] and r.report["convex_region"]
    np.testing.assert_allclose(r.w, 1.0, rtol=1e-9)
    np.testing.assert_allclose(r.u[:3], plain.u[:3], rtol=1e-5)
    assert r.beta[3] == np.inf and not np.isnan(r.objective)
    for loss in ("max", "log"):  # no joint problem: w = 1, as before
        assert np.all(design(F, cs, method="exact", loss=loss, n=10.0).w == 1.0)
