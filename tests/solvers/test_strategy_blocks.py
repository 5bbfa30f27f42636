"""Shifted blocks for grids: every boundary belongs to one level, the rows are the blocks of the
grid in its element order, and the start is private on every pair and beats the cells alone."""

from __future__ import annotations

import numpy as np
import pytest

import dprivacy as dp
from solvers.strategy.grid import detect_grid
from solvers.strategy.shifted_blocks import shifted_blocks, shifted_intervals
from tests.mechanisms.test_strategy import all_pairs_ratio


@pytest.mark.parametrize("n", [2, 3, 7, 8, 16, 21, 32])
def test_every_boundary_belongs_to_exactly_one_coarse_level(n):
    seen = np.zeros(n - 1, int)
    level = 1
    while len(shifted_intervals(n, level)) > 1:
        ivs = shifted_intervals(n, level)
        assert ivs[0][0] == 0 and ivs[-1][1] == n  # each level tiles the axis
        assert all(a[1] == b[0] for a, b in zip(ivs, ivs[1:], strict=False))
        for _, hi in ivs[:-1]:
            seen[hi - 1] += 1  # the boundary between hi - 1 and hi
        level += 1
    assert np.all(seen == 1)
    assert shifted_intervals(n, 0) == [(u, u + 1) for u in range(n)]


def test_rows_are_blocks_of_cells_in_any_element_order():
    rng = np.random.default_rng(3)
    cells = np.array([[a, b] for a in range(5) for b in range(12)], float)
    pts = cells[rng.permutation(len(cells))]  # the universe lists the cells in another order
    grid = detect_grid(pts)
    assert grid is not None
    A = shifted_blocks(grid).toarray()
    assert A.shape[1] == 60
    for row in A:
        on = pts[row != 0]
        xs, ys = np.unique(on[:, 0]), np.unique(on[:, 1])
        # a full rectangle of cells: every (x, y) combination present, contiguous on each axis
        assert len(on) == xs.size * ys.size
        assert np.all(np.diff(xs) == 1) and np.all(np.diff(ys) == 1)
        assert np.unique(row[row != 0]).size == 1  # one scale per block
    # every cell is covered once per level: column sums = the sum of the level scales
    assert np.allclose(A.sum(axis=0), A.sum(axis=0)[0])


def test_blocks_start_is_private_on_every_pair_and_beats_the_cells():
    g = 16
    U = dp.Universe.from_points(np.array([[a, b] for a in range(g) for b in range(g)], float))
    M = dp.metrics.Euclidean(0.1)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(200):
        x0, x1 = np.sort(rng.integers(0, g, 2))
        y0, y1 = np.sort(rng.integers(0, g, 2))
        r = np.zeros((g, g))
        r[x0:x1 + 1, y0:y1 + 1] = 1
        rows.append(r.ravel())
    W = dp.Workload(np.array(rows))
    d = dp.design_strategy(W, U, M, starts=("identity", "blocks"), rounds=0, lower_bound=False)
    assert d.report["start"] == "blocks"
    assert d.report["starts"]["blocks"] < 0.7 * d.report["starts"]["identity"]
    assert all_pairs_ratio(d.strategy, M.budget(U)) <= 1 + 1e-9
