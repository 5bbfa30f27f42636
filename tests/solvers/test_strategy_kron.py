"""Kronecker strategies on grids: the structured privacy bound against the brute-force check over
every pair, the closed-form error against the dense objective, the certified lower bound against
the dense bound and against designed strategies, the per-axis estimate against dense least
squares."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import ConstraintSet
from solvers.errors import SolverError
from solvers.strategy import optimize_strategy
from solvers.strategy.basis import Basis
from solvers.strategy.bound import laplacian, svd_bound
from solvers.strategy.estimate import estimate_map
from solvers.strategy.implicit import basis_gram, range_gram, rectangle_gram
from solvers.strategy.kron import (
    KronEstimator,
    KronGrid,
    design_kron,
    identity_error,
    kron_error,
    kron_lower_bound,
    kron_ratio,
)
from solvers.strategy.objective import Objective
from tests.mechanisms.test_strategy import all_pairs_ratio


def euclid(e: float):
    return lambda dx, dy: e * np.hypot(dx, dy)


def manhattan(e: float):
    return lambda dx, dy: e * (np.abs(dx) + np.abs(dy))


def chebyshev(e: float):
    return lambda dx, dy: e * np.maximum(np.abs(dx), np.abs(dy))


def _points(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    return np.array([[a, b] for a in xs for b in ys], float)


def _budget(grid: KronGrid) -> np.ndarray:
    pts = _points(grid.xs, grid.ys)
    d = np.abs(pts[:, None, :] - pts[None, :, :])
    E = np.asarray(grid.budget(d[..., 0], d[..., 1]), float)
    np.fill_diagonal(E, 0.0)
    return E


AXES = [(np.arange(6.0), np.arange(5.0)), (np.arange(8.0) * 0.5, np.arange(8.0)),
        (np.array([0.0, 0.3, 1.1, 1.5, 2.9, 3.0]), np.array([0.0, 2.0, 2.5, 4.0, 7.0]))]


@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("budget", [euclid(0.7), manhattan(0.4), chebyshev(1.3)])
@pytest.mark.parametrize("kind", ["gauss", "nonneg", "smooth"])
def test_structured_ratio_bounds_the_brute_force_check(axes, budget, kind):
    xs, ys = axes
    grid = KronGrid(xs, ys, budget)
    rng = np.random.default_rng(hash((xs.size, kind)) % 2**32)
    nx, ny = grid.shape
    if kind == "gauss":
        Bx, By = rng.normal(size=(nx + 2, nx)), rng.normal(size=(ny + 1, ny))
    elif kind == "nonneg":
        Bx, By = rng.uniform(size=(nx, nx)), rng.uniform(size=(3, ny))
    else:  # smooth columns: the diagonal pairs are where the bound is loosest
        Bx = np.cumsum(rng.uniform(size=(nx, nx)), axis=1) / nx
        By = np.cumsum(rng.uniform(size=(ny, ny)), axis=1) / ny
    bound, _ = kron_ratio(Bx, By, grid)
    exact = all_pairs_ratio(np.kron(Bx, By), _budget(grid))
    assert exact <= bound * (1 + 1e-12)
    assert bound <= np.sqrt(2.0) * 2.0 * exact  # never absurdly loose on these grids
    # after scaling by the bound, the brute-force check over every pair passes
    s = 1.0 / np.sqrt(bound)
    assert all_pairs_ratio(np.kron(Bx * s, By * s), _budget(grid)) <= 1 + 1e-12
    # with every cell measured too: [c I ; Bx (x) By]
    c = 0.3 * float(np.abs(Bx).sum(axis=0).max() * np.abs(By).sum(axis=0).max())
    bound_c, _ = kron_ratio(Bx, By, grid, c)
    A = np.vstack([c * np.eye(Bx.shape[1] * By.shape[1]), np.kron(Bx, By)])
    assert all_pairs_ratio(A, _budget(grid)) <= bound_c * (1 + 1e-12)
    assert all_pairs_ratio(A / bound_c, _budget(grid)) <= 1 + 1e-12


@pytest.mark.parametrize("shape", [(6, 5), (8, 8), (4, 7)])
def test_structured_ratio_is_exact_for_manhattan_on_unit_axes(shape):
    nx, ny = shape
    grid = KronGrid(np.arange(float(nx)), np.arange(float(ny)), manhattan(0.9))
    rng = np.random.default_rng(nx * 10 + ny)
    for _ in range(3):
        Bx, By = rng.normal(size=(nx + 1, nx)), rng.normal(size=(ny, ny))
        bound, _ = kron_ratio(Bx, By, grid)
        exact = all_pairs_ratio(np.kron(Bx, By), _budget(grid))
        assert bound == pytest.approx(exact, rel=1e-12)


def test_ratio_refuses_mismatched_factors_and_bad_axes():
    grid = KronGrid(np.arange(4.0), np.arange(3.0), euclid(1.0))
    with pytest.raises(SolverError, match="do not fit"):
        kron_ratio(np.eye(3), np.eye(3), grid)
    with pytest.raises(SolverError, match="increasing"):
        KronGrid(np.array([0.0, 0.0, 1.0]), np.arange(3.0), euclid(1.0))


def _centred(G: np.ndarray) -> np.ndarray:
    return basis_gram(Basis.identity(G.shape[0]), G)


@pytest.mark.parametrize("shape", [(6, 5), (8, 8)])
def test_closed_form_error_equals_the_dense_known_total_error(shape):
    nx, ny = shape
    rng = np.random.default_rng(3)
    Bx, By = rng.normal(size=(nx + 2, nx)), rng.normal(size=(ny, ny))
    Gx, Gy = range_gram(nx), range_gram(ny)
    G = rectangle_gram(nx, ny)
    dense = 2.0 * Objective(_centred(G), True).value(np.kron(Bx, By))
    assert kron_error(Bx, By, Gx, Gy) == pytest.approx(dense, rel=1e-9)
    A = np.vstack([0.4 * np.eye(nx * ny), np.kron(Bx[:2], By[:3])])  # cells + rank-deficient
    dense = 2.0 * Objective(_centred(G), True).value(A)
    assert kron_error(Bx[:2], By[:3], Gx, Gy, 0.4) == pytest.approx(dense, rel=1e-9)
    # each cell once at half the smallest budget: identity_error's closed form
    eps_min = 0.7
    C = np.eye(nx * ny) * eps_min / 2
    assert identity_error(Gx, Gy, eps_min) == pytest.approx(
        2.0 * Objective(_centred(G), True).value(C), rel=1e-9)


@pytest.mark.parametrize("cells", [0.0, 0.7])
def test_estimate_and_variances_equal_dense_least_squares(cells):
    nx, ny = 5, 4
    rng = np.random.default_rng(5)
    Bx, By = rng.normal(size=(nx + 1, nx)), rng.normal(size=(ny + 2, ny))
    if cells:  # rank-deficient factors: the cells make the strategy full rank
        Bx, By = rng.normal(size=(2, nx)), rng.normal(size=(3, ny))
    A = np.kron(Bx, By)
    if cells:
        A = np.vstack([cells * np.eye(nx * ny), A])
    est = KronEstimator(Bx, By, cells)
    x = rng.integers(0, 9, nx * ny).astype(float)
    assert np.allclose(est.measure(x), A @ x)
    y = A @ x + rng.normal(size=A.shape[0])
    G = _centred(rectangle_gram(nx, ny))
    X, z, share = estimate_map(A, Basis.identity(nx * ny), G)
    assert share < 1e-12
    assert np.allclose(est.estimate(y, x.sum()), X @ y + x.sum() * z, atol=1e-9)
    # every rectangle's variance, by axes, against the dense covariance 2 X X'
    from dprivacy.implicit_workload import ImplicitWorkload

    W = ImplicitWorkload.all_rectangles(nx, ny)
    dense = 2.0 * W.quadratic_diagonal(X @ X.T)
    assert np.allclose(est.range_variances().ravel(), dense, rtol=1e-8, atol=1e-9)
    assert np.allclose(est.range_variances(slice(3, 7)), dense.reshape(15, 10)[3:7], atol=1e-9)
    assert kron_error(Bx, By, range_gram(nx), range_gram(ny), cells) == pytest.approx(
        dense.sum(), rel=1e-9)


@pytest.mark.parametrize("shape", [(6, 5), (8, 8)])
def test_lower_bound_is_below_the_dense_bound_and_every_strategy(shape):
    nx, ny = shape
    grid = KronGrid(np.arange(float(nx)), np.arange(float(ny)), euclid(0.5))
    Gx, Gy = range_gram(nx), range_gram(ny)
    G = _centred(rectangle_gram(nx, ny))
    lb = kron_lower_bound(Gx, Gy, grid)
    # the same edge weights with the best (not only Kronecker) W: the dense SVD bound
    pts = _points(grid.xs, grid.ys)
    I, J = np.triu_indices(nx * ny, 1)  # noqa: N806, E741
    d = np.abs(pts[I] - pts[J])
    edge = d.sum(axis=1) == 1
    e = grid.budget(d[edge, 0], d[edge, 1])
    dense = svd_bound(G, laplacian(nx * ny, I[edge], J[edge], 1.0 / e**2), float(edge.sum()))
    assert 0.9 * dense <= lb <= dense * (1 + 1e-9)
    # below the error of the dense optimiser's strategy, of the Kronecker design, of the identity
    E = _budget(grid)
    res = optimize_strategy(None, ConstraintSet.dense(E), coords=pts, gram_matrix=rectangle_gram(nx, ny),
                            time_limit=20, rounds=3, maxiter=60)
    assert all_pairs_ratio(np.asarray(res.C.toarray() if hasattr(res.C, "toarray") else res.C),
                           E) <= 1 + 1e-9
    assert lb <= res.error
    kr = design_kron(Gx, Gy, grid, time_limit=5)
    assert lb <= kr.error and kr.lower_bound == pytest.approx(lb)
    assert lb <= kr.identity_error


def test_design_is_private_by_the_brute_force_check_and_beats_its_starts():
    nx, ny = 8, 6
    grid = KronGrid(np.arange(float(nx)), np.arange(float(ny)), euclid(0.3))
    Gx, Gy = range_gram(nx), range_gram(ny)
    res = design_kron(Gx, Gy, grid, time_limit=8)
    assert res.max_ratio <= 1.0
    assert all_pairs_ratio(np.kron(res.Bx, res.By), _budget(grid)) <= 1.0
    assert res.error == pytest.approx(kron_error(res.Bx, res.By, Gx, Gy))
    assert res.error <= min(res.report["starts"].values())
    assert res.lower_bound is not None and res.lower_bound <= res.error


def test_design_refuses_uneven_axes():
    grid = KronGrid(np.array([0.0, 1.0, 3.0]), np.arange(3.0), euclid(1.0))
    with pytest.raises(SolverError, match="evenly spaced"):
        design_kron(range_gram(3), range_gram(3), grid)


def test_objective_gradient_matches_finite_differences():
    from solvers.strategy.kron import _Axis, _objective

    nx, ny = 5, 4
    rng = np.random.default_rng(8)
    Bx, By = rng.normal(size=(6, nx)), rng.normal(size=(4, ny))
    kk, ll = np.meshgrid(np.arange(nx) * 1.0, np.arange(ny) * 1.0, indexing="ij")
    E = np.hypot(kk, ll) * 0.7
    E[0, 0] = np.inf
    ax, ay = _Axis(range_gram(nx), nx), _Axis(range_gram(ny), ny)
    for t in (5.0, 50.0):
        f, gx, gy = _objective(Bx, By, ax, ay, E, t, (0.05, 0.05))
        for B, g, which in ((Bx, gx, 0), (By, gy, 1)):
            for _ in range(4):
                i, j = rng.integers(B.shape[0]), rng.integers(B.shape[1])
                h = 1e-6
                Bp = B.copy()
                Bp[i, j] += h
                Bm = B.copy()
                Bm[i, j] -= h
                args_p = (Bp, By) if which == 0 else (Bx, Bp)
                args_m = (Bm, By) if which == 0 else (Bx, Bm)
                fd = (_objective(*args_p, ax, ay, E, t, (0.05, 0.05))[0]
                      - _objective(*args_m, ax, ay, E, t, (0.05, 0.05))[0]) / (2 * h)
                assert g[i, j] == pytest.approx(fd, rel=1e-4, abs=1e-6)


def test_union_objective_gradient_matches_finite_differences():
    from solvers.strategy.kron import _Axis, _union_objective

    nx, ny = 5, 4
    rng = np.random.default_rng(9)
    Bx, By = rng.normal(size=(3, nx)), rng.normal(size=(2, ny))  # rank deficient: cells needed
    kk, ll = np.meshgrid(np.arange(nx) * 1.0, np.arange(ny) * 1.0, indexing="ij")
    E = np.hypot(kk, ll) * 0.7
    E[0, 0] = np.inf
    ax, ay = _Axis(range_gram(nx), nx), _Axis(range_gram(ny), ny)
    g0 = np.log(0.8)
    for t in (5.0, 50.0):
        def f(bx, by, g, t=t):
            return _union_objective(bx, by, g, ax, ay, E, t, (0.05, 0.05))

        val, gx, gy, gg = f(Bx, By, g0)
        h = 1e-6
        assert gg == pytest.approx((f(Bx, By, g0 + h)[0] - f(Bx, By, g0 - h)[0]) / (2 * h),
                                   rel=1e-4, abs=1e-6)
        for B, g, which in ((Bx, gx, 0), (By, gy, 1)):
            for _ in range(4):
                i, j = rng.integers(B.shape[0]), rng.integers(B.shape[1])
                Bp, Bm = B.copy(), B.copy()
                Bp[i, j] += h
                Bm[i, j] -= h
                if which == 0:
                    fd = (f(Bp, By, g0)[0] - f(Bm, By, g0)[0]) / (2 * h)
                else:
                    fd = (f(Bx, Bp, g0)[0] - f(Bx, Bm, g0)[0]) / (2 * h)
                assert g[i, j] == pytest.approx(fd, rel=1e-4, abs=1e-6)
