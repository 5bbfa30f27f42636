"""The Gaussian strategy program: optimum against an SDP solver, certificate, exact l2 privacy."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import ConstraintSet
from solvers.errors import InfeasibleError, SolverError
from solvers.strategy.gaussian import centre_gram, pair_budgets, solve_gaussian
from solvers.strategy.gaussian_active import solve_gaussian_active, workload_factor
from solvers.strategy.gaussian_design import optimize_gaussian_strategy
from solvers.strategy.gaussian_line import line_ranges_strategy
from solvers.strategy.implicit import range_gram, rectangle_gram


def _ratio_from_columns(A: np.ndarray, B: np.ndarray) -> float:
    """max ||A e_i - A e_j||^2 / b_ij from the column differences themselves."""
    N = A.shape[1]
    worst = 0.0
    for i in range(N - 1):
        q = ((A[:, i:i + 1] - A[:, i + 1:]) ** 2).sum(axis=0)
        b = B[i, i + 1:]
        ok = np.isfinite(b)
        worst = max(worst, float(np.max(q[ok] / b[ok], initial=0.0)))
    return worst


def _error(G: np.ndarray, A: np.ndarray) -> float:
    return float(np.trace(centre_gram(G) @ np.linalg.pinv(A.T @ A, rcond=1e-10, hermitian=True)))


def _cvxpy_optimum(G: np.ndarray, B: np.ndarray) -> float:
    """The same program by an interior-point SDP solver (small N only)."""
    cp = pytest.importorskip("cvxpy")
    N = G.shape[0]
    Q = np.linalg.svd(np.eye(N) - 1.0 / N)[0][:, : N - 1]  # orthonormal basis of 1-perp
    w, U = np.linalg.eigh(Q.T @ centre_gram(G) @ Q)
    K = U[:, w > 1e-12] * np.sqrt(w[w > 1e-12])
    Y = cp.Variable((N - 1, N - 1), PSD=True)
    obj = sum(cp.matrix_frac(K[:, c], Y) for c in range(K.shape[1]))
    cons = []
    for i in range(N):
        for j in range(i + 1, N):
            if np.isfinite(B[i, j]):
                d = Q.T @ (np.eye(N)[i] - np.eye(N)[j])
                cons.append(d @ Y @ d <= B[i, j])
    prob = cp.Problem(cp.Minimize(obj), cons)
    prob.solve(solver="CLARABEL")
    return float(prob.value)


@pytest.mark.parametrize("seed", [0, 1])
def test_optimum_matches_an_sdp_solver_and_the_certificate_brackets_it(seed):
    rng = np.random.default_rng(seed)
    N = 6
    F = rng.random((4, N))
    pts = rng.uniform(0, 3, (N, 2))
    B = 0.7 * np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    np.fill_diagonal(B, np.inf)
    sol = solve_gaussian(F.T @ F, B, tol=1e-6)
    ref = _cvxpy_optimum(F.T @ F, B)
    assert sol.bound <= ref * (1 + 1e-6)
    assert sol.error >= ref * (1 - 1e-6)
    assert sol.error == pytest.approx(ref, rel=2e-5)
    assert sol.gap <= 1e-6
    assert _error(F.T @ F, sol.A) == pytest.approx(sol.error, rel=1e-8)
    assert _ratio_from_columns(sol.A, B) <= 1.0


def test_weak_duality_against_other_feasible_strategies():
    N = 20
    G = range_gram(N)
    x = np.arange(N, dtype=float)
    B = 0.4 * np.abs(x[:, None] - x[None])
    np.fill_diagonal(B, np.inf)
    sol = solve_gaussian(G, B, tol=1e-3)
    assert sol.gap <= 1e-3 and sol.bound <= sol.error
    # prefix sums: ||A (e_i - e_j)||^2 = |i - j|, scaled to the budget; and the identity
    P = np.tril(np.ones((N, N)))
    for A in (P, np.eye(N), np.random.default_rng(0).standard_normal((30, N))):
        A = A / np.sqrt(_ratio_from_columns(A, B))
        assert _error(G, A) >= sol.bound
    assert _error(G, P / np.sqrt(_ratio_from_columns(P, B))) > sol.error  # not optimal here


def test_rank_deficient_workload_gets_a_rank_deficient_optimum():
    N = 12
    F = np.zeros((2, N))
    F[0, :6] = 1
    F[1, 3:] = 1
    x = np.arange(N, dtype=float)
    B = np.abs(x[:, None] - x[None])
    np.fill_diagonal(B, np.inf)
    sol = solve_gaussian(F.T @ F, B, tol=1e-4)
    assert sol.A.shape[0] == 2  # rank of the centred Gram matrix
    assert sol.gap <= 1e-4
    assert _ratio_from_columns(sol.A, B) <= 1.0
    assert _error(F.T @ F, sol.A) == pytest.approx(sol.error, rel=1e-7)


def test_edge_sets_are_completed_by_shortest_paths():
    I, J = np.arange(4), np.arange(1, 5)  # noqa: E741
    cs = ConstraintSet.edges(I, J, np.array([1.0, 2.0, 1.0, 0.5]), 5)
    B = pair_budgets(cs, 0.25)
    assert B[0, 4] == pytest.approx(2 * 0.25 * 4.5)
    assert B[1, 3] == pytest.approx(2 * 0.25 * 3.0)
    assert np.all(np.isinf(np.diag(B)))


def test_implicit_grid_to_the_target_gap_and_private_on_every_pair():
    g = 6
    pts = np.array([[a, b] for a in range(g) for b in range(g)], float)
    eps = 0.1 * np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    cs = ConstraintSet.dense(eps)
    res = optimize_gaussian_strategy(None, cs, rho=0.5, gram_matrix=rectangle_gram(g, g))
    assert res.report["certified_gap"] <= 1e-3
    assert res.lower_bound <= res.error
    assert res.error == pytest.approx(_error(rectangle_gram(g, g), res.C), rel=1e-7)
    B = 2 * 0.5 * eps
    np.fill_diagonal(B, np.inf)
    assert _ratio_from_columns(np.asarray(res.C), B) <= 1.0
    assert res.X is not None and res.z is not None


def test_explicit_workload_answer_map_error():
    rng = np.random.default_rng(5)
    F = rng.random((3, 10))
    eps = np.abs(np.subtract.outer(np.arange(10.0), np.arange(10.0)))
    res = optimize_gaussian_strategy(F, ConstraintSet.dense(eps), rho=1.0, tol=1e-4)
    assert res.M is not None
    assert float(np.sum(res.M ** 2)) == pytest.approx(res.error)
    assert res.error == pytest.approx(_error(F.T @ F, np.asarray(res.C)), rel=1e-6)
    # the answers are exact without noise: M A x + n o = F x
    x = rng.integers(0, 9, 10).astype(float)
    assert np.allclose(res.M @ (np.asarray(res.C) @ x) + x.sum() * res.o, F @ x)


def test_bad_input():
    eps = np.ones((4, 4))
    np.fill_diagonal(eps, 0)
    with pytest.raises(SolverError, match="rho"):
        pair_budgets(ConstraintSet.dense(eps), -1.0)
    B = np.full((4, 4), np.inf)
    B[0, 1] = B[2, 3] = 1.0
    with pytest.raises(SolverError, match="connect"):
        solve_gaussian(np.eye(4), B)
    B = np.ones((4, 4))
    B[0, 1] = B[1, 0] = 0.0
    with pytest.raises(InfeasibleError):
        solve_gaussian(np.eye(4), B)
    with pytest.raises(SolverError, match="Gram"):
        optimize_gaussian_strategy(None, ConstraintSet.dense(eps), rho=1.0)


@pytest.mark.parametrize("kind", ["linear", "superlinear"])
def test_line_closed_form_matches_the_dense_solver(kind):
    N = 30
    ell = np.arange(N, dtype=float)
    b = 0.3 * ell if kind == "linear" else 0.3 * ell + 0.05 * ell**2
    sol = line_ranges_strategy(N, b)
    assert sol.gap <= 1e-8
    B = b[np.abs(np.subtract.outer(np.arange(N), np.arange(N)))]
    np.fill_diagonal(B, np.inf)
    ref = solve_gaussian(range_gram(N), B, tol=1e-6)
    assert sol.error == pytest.approx(ref.error, rel=2e-6)
    assert ref.bound <= sol.error and sol.bound <= ref.error
    assert _error(range_gram(N), sol.A) == pytest.approx(sol.error, rel=1e-8)
    assert _ratio_from_columns(sol.A, B) <= 1.0


def test_line_closed_form_reports_a_gap_when_far_pairs_bind():
    N = 20
    ell = np.arange(N, dtype=float)
    b = np.sqrt(ell)  # sublinear: long ranges bind, the edge dual is no longer tight
    sol = line_ranges_strategy(N, b)
    B = b[np.abs(np.subtract.outer(np.arange(N), np.arange(N)))]
    np.fill_diagonal(B, np.inf)
    assert _ratio_from_columns(sol.A, B) <= 1.0
    assert sol.gap > 1e-3 and sol.bound <= sol.error
    assert solve_gaussian(range_gram(N), B, tol=1e-4).error <= sol.error


def test_active_set_solver_matches_the_dense_one_and_checks_every_pair():
    rng = np.random.default_rng(4)
    N, m = 60, 6
    pts = rng.uniform(0, 5, (N, 2))
    F = rng.random((m, N))
    B = 0.5 * np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    np.fill_diagonal(B, np.inf)
    dense = solve_gaussian(F.T @ F, B, tol=1e-5)
    act = solve_gaussian_active(workload_factor(F), B, tol=1e-5, k=2)
    assert act.gap <= 1e-5 and act.bound <= act.error
    assert act.error == pytest.approx(dense.error, rel=2e-5)
    assert act.A.shape[0] <= m
    assert _ratio_from_columns(act.A, B) <= 1.0
    assert _error(F.T @ F, act.A) == pytest.approx(act.error, rel=1e-7)


def test_large_universes_with_few_queries_use_the_active_set(monkeypatch):
    import solvers.strategy.gaussian_design as gd

    monkeypatch.setattr(gd, "ACTIVE_MIN_N", 20)
    rng = np.random.default_rng(2)
    F = rng.random((3, 40))
    eps = np.abs(np.subtract.outer(np.arange(40.0), np.arange(40.0)))
    res = gd.optimize_gaussian_strategy(F, ConstraintSet.dense(eps), rho=1.0, tol=1e-4)
    ref = solve_gaussian(F.T @ F, 2 * eps + np.diag(np.full(40, np.inf)), tol=1e-4)
    assert res.report["certified_gap"] <= 1e-4
    assert res.error == pytest.approx(ref.error, rel=3e-4)
    assert float(np.sum(res.M ** 2)) == pytest.approx(res.error, rel=1e-8)
