"""solvers.strategy on grids: detection, the low-rank objective, coarse budgets and lifts (checked
by brute force over all pairs), the working set, and the coarse-to-fine optimiser end to end."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from solvers import ConstraintSet, SolverError
from solvers.strategy import optimize_strategy
from solvers.strategy.grid import (
    block_budget,
    block_contrasts,
    coarse_gram,
    coarsen,
    detect_grid,
    lift,
    lift_smooth,
)
from solvers.strategy.lowrank import LowRankObjective, gram_factor
from solvers.strategy.objective import Objective, gram
from solvers.strategy.workset import near_pairs
from tests.solvers.test_strategy import brute_ratio, known_total_error


def lattice(nx: int, ny: int, step: float = 1.0, seed: int | None = 0) -> np.ndarray:
    pts = np.array([[a * step, b * step] for a in range(nx) for b in range(ny)], float)
    if seed is not None:  # elements in any order
        pts = pts[np.random.default_rng(seed).permutation(len(pts))]
    return pts


def rectangles(pts: np.ndarray, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    xs, ys = np.unique(pts[:, 0]), np.unique(pts[:, 1])
    F = np.zeros((count, len(pts)))
    for k in range(count):
        x0, x1 = np.sort(rng.choice(xs, 2))
        y0, y1 = np.sort(rng.choice(ys, 2))
        F[k] = (pts[:, 0] >= x0) & (pts[:, 0] <= x1) & (pts[:, 1] >= y0) & (pts[:, 1] <= y1)
    return F


def test_detect_grid_accepts_full_lattices_only():
    pts = lattice(5, 3, step=0.5)
    g = detect_grid(pts)
    assert g is not None and g.cell.shape == (5, 3) and g.spacing == 0.5
    # cell[a, b] is the element at (x_a, y_b), whatever the order of the elements
    for a, b in itertools.product(range(5), range(3)):
        assert np.allclose(pts[g.cell[a, b]], [0.5 * a, 0.5 * b])
    assert detect_grid(pts[:-1]) is None  # a missing cell
    uneven = pts.copy()
    uneven[uneven[:, 0] == 2.0, 0] = 2.1
    assert detect_grid(uneven) is None
    assert detect_grid(pts[:, :1]) is None and detect_grid(None) is None
    assert detect_grid(np.c_[pts, pts[:, :1]]) is None  # 3-D points


@pytest.mark.parametrize("centre", [True, False])
def test_low_rank_objective_equals_the_dense_one_and_its_gradient_is_right(centre):
    rng = np.random.default_rng(1)
    N, m, p = 12, 5, 15
    F = rng.random((m, N))
    G = gram(F, centre)
    C = rng.standard_normal((p, N))
    dense, low = Objective(G, centre), LowRankObjective(G, centre)
    assert low.R.shape[0] <= m
    f1, g1 = dense.value_grad(C)
    f2, g2 = low.value_grad(C)
    assert f2 == pytest.approx(f1, rel=1e-9)
    assert np.allclose(g2, g1, rtol=1e-7, atol=1e-10 * np.abs(g1).max())
    h = 1e-6
    for _ in range(5):  # directional finite differences
        D = rng.standard_normal(C.shape)
        fd = (low.value(C + h * D) - low.value(C - h * D)) / (2 * h)
        assert fd == pytest.approx(float(np.sum(g2 * D)), rel=1e-5)
    assert np.isinf(low.value(np.zeros((p, N))))  # singular: no estimate at all


def test_float32_low_rank_objective_is_close_to_float64():
    rng = np.random.default_rng(11)
    F = rng.random((6, 30))
    G = gram(F, True)
    C = np.eye(30) + 0.1 * rng.standard_normal((30, 30))
    f64, g64 = LowRankObjective(G, True).value_grad(C)
    f32, g32 = LowRankObjective(G, True, dtype=np.float32).value_grad(C)
    assert g32.dtype == np.float64
    assert f32 == pytest.approx(f64, rel=1e-4)
    assert np.abs(g32 - g64).max() <= 1e-3 * np.abs(g64).max()


def test_gram_factor_reproduces_the_gram_matrix():
    rng = np.random.default_rng(2)
    F = rng.random((4, 9))
    G = F.T @ F
    R = gram_factor(G)
    assert R.shape == (4, 9) and np.allclose(R.T @ R, G, atol=1e-10)


def test_near_pairs_match_brute_force():
    pts = np.random.default_rng(3).uniform(0, 5, (60, 2))
    I, J = near_pairs(pts, 1.2)  # noqa: E741
    D = cdist(pts, pts)
    want = {(i, j) for i in range(60) for j in range(i + 1, 60) if D[i, j] <= 1.2}
    assert set(zip(I.tolist(), J.tolist(), strict=True)) == want


def test_block_budget_is_the_smallest_fine_budget_between_blocks():
    pts = lattice(5, 4)  # odd side: 1-wide blocks at the end
    eps = 0.1 * cdist(pts, pts)
    g = detect_grid(pts)
    gc, parent = coarsen(g)
    assert gc.cell.shape == (3, 2) and np.bincount(parent).sum() == 20
    Ec = block_budget(ConstraintSet.dense(eps), parent, gc.N, chunk=7)
    for B, B2 in itertools.product(range(gc.N), repeat=2):
        if B != B2:
            fine = eps[np.ix_(parent == B, parent == B2)]
            assert Ec[B, B2] == fine.min()
    assert np.all(np.diag(Ec) == 0)


def test_lifted_strategy_is_as_feasible_as_the_coarse_one_by_brute_force():
    pts = lattice(6, 6, seed=4)
    eps = 0.1 * cdist(pts, pts)
    g = detect_grid(pts)
    gc, parent = coarsen(g)
    Ec = block_budget(ConstraintSet.dense(eps), parent, gc.N)
    Cc = np.random.default_rng(5).standard_normal((11, gc.N))
    Cc /= brute_ratio(Cc, Ec)  # exactly feasible on the coarse grid
    A = lift(Cc, parent, 0.0)
    assert A.shape == (11 + 36 - 9, 36)
    assert brute_ratio(A, eps) <= 1 + 1e-12
    # the detail rows make the lift full rank (up to the known total)
    A = lift(Cc, parent, 0.01)
    assert np.linalg.matrix_rank(A - A.mean(axis=1, keepdims=True)) == 35


def test_smooth_lift_interpolates_and_restores_full_rank():
    pts = lattice(5, 4, seed=12)  # odd side, elements in any order
    g = detect_grid(pts)
    gc, parent = coarsen(g)
    D = block_contrasts(g)
    assert D.shape == (20 - gc.N, 20)  # one contrast fewer than cells, in every block
    assert np.allclose(D.sum(axis=1), 0) and np.all(np.abs(D).sum(axis=1) >= 2)
    for B in range(gc.N):  # contrasts live inside their block
        rows = np.abs(D[:, parent == B]).sum(axis=1) > 0
        assert np.all(np.abs(D[rows][:, parent != B]) == 0)
    Cc = np.vstack([np.ones(gc.N), gc.coords[:, 0], np.eye(gc.N)])
    A = lift_smooth(Cc, g, gc, 0.5)
    assert A.shape == (2 + gc.N + D.shape[0], 20)
    assert np.allclose(A[0], 1.0)  # constants stay constant
    # the block centres' x (0.5, 2.5, 4) interpolated: exact between the two full blocks
    x = pts[:, 0]
    inner = (x >= 1) & (x <= 2)
    assert np.allclose(A[1, inner], x[inner], atol=1e-12)
    assert np.all((A[1] >= 0.5 - 1e-12) & (A[1] <= 4 + 1e-12))
    assert np.linalg.matrix_rank(A - A.mean(axis=1, keepdims=True)) == 19


def test_coarse_gram_is_the_workload_on_block_uniform_histograms():
    pts = lattice(4, 4, seed=None)
    F = rectangles(pts, 6, seed=6)
    gc, parent = coarsen(detect_grid(pts))
    S = np.zeros((16, gc.N))
    S[np.arange(16), parent] = 0.25
    Gc = coarse_gram(gram(F, True), parent, gc.N)
    assert np.allclose(Gc, gram(F @ S, True))


def test_grid_optimiser_is_private_by_brute_force_and_beats_its_starts():
    pts = lattice(12, 12, seed=7)
    eps = 0.1 * cdist(pts, pts)
    F = rectangles(pts, 60, seed=8)
    res = optimize_strategy(F, ConstraintSet.dense(eps), coords=pts, rounds=4, maxiter=40,
                            time_limit=60, starts=("identity", "grid"))
    assert res.report["start"] == "grid"
    assert [h["N"] for h in res.report["history"]["grid"]] == [36, 144]
    A = np.asarray(res.C)
    assert brute_ratio(A, eps) <= 1 + 1e-9
    assert res.error == pytest.approx(known_total_error(F, A), rel=1e-6)
    assert res.error < 0.8 * res.report["starts"]["identity"]
    assert res.lower_bound is not None and res.lower_bound <= res.error


def all_rectangles(nx: int, ny: int) -> np.ndarray:
    rows = []
    for a0, a1 in itertools.combinations_with_replacement(range(nx), 2):
        for b0, b1 in itertools.combinations_with_replacement(range(ny), 2):
            r = np.zeros((nx, ny))
            r[a0:a1 + 1, b0:b1 + 1] = 1.0
            rows.append(r.ravel())
    return np.array(rows)


def test_closed_form_grams_equal_the_explicit_ones():
    from solvers.strategy.implicit import prefix_gram, range_gram, rectangle_gram

    F = np.array([r for r in all_rectangles(1, 7)])  # a line: all ranges
    assert F.shape == (28, 7) and np.array_equal(range_gram(7), F.T @ F)
    P = np.tril(np.ones((6, 6)))  # row b: the prefix [0, b]
    assert np.array_equal(prefix_gram(6), P.T @ P)
    R = all_rectangles(4, 3)
    assert R.shape == (10 * 6, 12) and np.array_equal(rectangle_gram(4, 3), R.T @ R)


def test_implicit_gram_gives_the_explicit_objective_and_design():
    from solvers.strategy.implicit import basis_gram, rectangle_gram

    pts = lattice(5, 4, seed=None)
    F = all_rectangles(5, 4)
    eps = 0.1 * cdist(pts, pts)
    cs = ConstraintSet.dense(eps)
    G = rectangle_gram(5, 4)
    C = np.random.default_rng(9).standard_normal((25, 20))
    from solvers.strategy import Basis

    b = Basis.identity(20)
    assert np.allclose(basis_gram(b, G), gram(F, True), atol=1e-9)
    assert Objective(basis_gram(b, G), True).value(C) == pytest.approx(
        Objective(gram(F, True), True).value(C), rel=1e-12)
    kw = dict(coords=pts, rounds=2, maxiter=20, time_limit=30, starts=("identity", "grid"),
              lower_bound=True)
    r1 = optimize_strategy(F, cs, **kw)
    r2 = optimize_strategy(F, cs, gram_matrix=G, **kw)
    assert r2.error == pytest.approx(r1.error, rel=1e-6)
    assert r2.lower_bound == pytest.approx(r1.lower_bound, rel=1e-6)
    assert brute_ratio(np.asarray(r2.C), eps) <= 1 + 1e-9
    # the tree basis of a line: B' G B
    line = ConstraintSet.edges(np.arange(6), np.arange(1, 7), np.full(6, 0.5), 7)
    Fl = all_rectangles(1, 7)
    from solvers.strategy.implicit import range_gram

    r3 = optimize_strategy(Fl, line, rounds=1, maxiter=10, starts=("identity",))
    r4 = optimize_strategy(Fl, line, rounds=1, maxiter=10, starts=("identity",),
                           gram_matrix=range_gram(7))
    assert r4.error == pytest.approx(r3.error, rel=1e-9)
    with pytest.raises(SolverError):
        optimize_strategy(Fl, line, gram_matrix=np.eye(5), starts=("identity",))
