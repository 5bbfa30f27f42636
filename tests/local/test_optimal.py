"""Optimal d_X-local randomiser (LP): all-triples check, direct vs cutting planes, spanner, baselines."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import dprivacy as dp
from dprivacy.local.baselines import exponential_randomiser, planar_laplace_loss
from dprivacy.local.cost import check_dx
from dprivacy.local.dx_randomiser import optimal_randomiser
from dprivacy.local.optimal import solve_dx_lp
from dprivacy.local.spanner import greedy_spanner, spanner_dilation


def _triples_ok(T: np.ndarray, eps: np.ndarray) -> bool:  # noqa: N803
    """Every (x, x', z) by brute force, independent of the LP and of check_dx."""
    n = T.shape[0]
    for x in range(n):
        for y in range(n):
            if np.any(T[x] > np.exp(eps[x, y]) * T[y] * (1 + 1e-9) + 1e-15):
                return False
    return True


@pytest.fixture(scope="module")
def grid() -> tuple[np.ndarray, np.ndarray]:
    pts = np.array([(i, j) for i in range(4) for j in range(4)], dtype=float)
    return pts, cdist(pts, pts)


@pytest.mark.parametrize("eps_unit", [0.5, 1.0])
def test_lp_private_and_beats_baselines(grid, eps_unit: float) -> None:
    pts, d = grid
    eps = eps_unit * d
    r = solve_dx_lp(eps, d)
    assert _triples_ok(r.T, eps) and check_dx(r.T, eps).ok
    assert np.allclose(r.T.sum(axis=1), 1.0)
    direct = solve_dx_lp(eps, d, method="direct")  # an independent formulation: all rows at once
    assert r.expected_loss == pytest.approx(direct.expected_loss, rel=1e-6)
    em = float(np.mean(np.sum(exponential_randomiser(eps) * d, axis=1)))
    pl, se = planar_laplace_loss(pts, eps_unit, d, samples=4000, rng=0)
    assert r.expected_loss <= em and r.expected_loss <= pl - 3 * se


def test_spanner_feasible_and_no_better_than_exact(grid) -> None:
    pts, d = grid
    eps = 1.0 * d
    i, j, _ = greedy_spanner(eps, 1.5)
    assert spanner_dilation(eps, i, j) <= 1.5 + 1e-9 and i.size < 16 * 15 / 2
    sp = solve_dx_lp(eps, d, edges=(i, j), dilation=1.5)
    assert _triples_ok(sp.T, eps)  # private for every pair, not only the edges
    ex = solve_dx_lp(eps, d)
    assert sp.expected_loss >= ex.expected_loss - 1e-9


def test_wrapper_with_metric_and_squared_loss() -> None:
    pts = np.array([(i, j) for i in range(3) for j in range(3)], dtype=float)
    U = dp.Universe.from_points(pts)
    M = dp.metrics.Euclidean(eps_per_unit=0.8)
    r = optimal_randomiser(U, M, loss="squared", dilation=1.2)
    assert r.check.ok and r.spanner_edges is not None
    assert r.randomiser.cost() < np.inf


def test_interior_point_rounds_reach_the_same_private_optimum(grid) -> None:
    pts, d = grid
    eps = 0.5 * d
    simplex = solve_dx_lp(eps, d)
    ipm = solve_dx_lp(eps, d, lp_solver="ipm")
    assert _triples_ok(ipm.T, eps) and check_dx(ipm.T, eps).ok
    assert np.allclose(ipm.T.sum(axis=1), 1.0)
    assert ipm.expected_loss == pytest.approx(simplex.expected_loss, rel=1e-6)
    with pytest.raises(ValueError, match="lp_solver"):
        solve_dx_lp(eps, d, lp_solver="barrier")
