"""A hierarchy of blocks for 2-D grids whose levels never share a boundary (the ``blocks`` start).

Under the d_X constraint a move of one record between neighbouring cells costs
``sum_r |A_r(p) - A_r(q)|``: every row whose level set the move crosses pays.  In the usual
nested dyadic hierarchy the middle line of the grid is a block boundary at every level, so a
move across it pays at every level and the hierarchy cannot beat measuring each cell.  Here the
blocks of level l (side ``2^l``) are shifted by half a block, ``[k 2^l - 2^(l-1), (k+1) 2^l -
2^(l-1))`` on each axis: the boundary between positions u and u + 1 then belongs to exactly one
level l >= 1 (the one with ``u + 1 = 2^(l-1) * odd``), so a horizontal or vertical move crosses
the cells (level 0) and one other level only, and every level can carry most of the budget.
On the 32 x 32 grid with 500 random rectangles (Euclidean, eps = 0.1 per unit) the unpolished
blocks, scaled to the budget, have error 1.50e7 against 4.02e7 for the cells alone, and they take
a second to build and check; they start the polish of grids too large for the coarse-to-fine
path (:mod:`solvers.strategy.grid`).  numpy / scipy only; never imports dprivacy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from solvers.strategy.grid import Grid

#: Scale of every level l >= 1 relative to the cells (level 0); 0.73-0.84 were the optima
#: found by Nelder-Mead on the 16 x 16 and 32 x 32 rectangle benchmarks.
LEVEL_SCALE = 0.75


def shifted_intervals(n: int, level: int) -> list[tuple[int, int]]:
    """The half-open intervals of level ``level`` over positions 0..n-1 (level 0: single
    positions; level l >= 1: side 2^l, shifted by 2^(l-1), clipped to the axis)."""
    if level == 0:
        return [(u, u + 1) for u in range(n)]
    side = 2**level
    out = []
    for a in range(-(side // 2), n, side):
        lo, hi = max(0, a), min(n, a + side)
        if hi > lo:
            out.append((lo, hi))
    return out


def _indicator(n: int, level: int) -> sp.csr_array:
    ivs = shifted_intervals(n, level)
    rows = np.concatenate([np.full(hi - lo, k) for k, (lo, hi) in enumerate(ivs)])
    cols = np.concatenate([np.arange(lo, hi) for lo, hi in ivs])
    return sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(len(ivs), n))


def shifted_blocks(grid: Grid, scales: Sequence[float] | None = None) -> sp.csr_array:
    """Rows: the blocks of every level (x and y intervals of the same level), level l scaled by
    ``scales[l]`` (default 1 for the cells, :data:`LEVEL_SCALE` above), over the grid's element
    order; a level whose blocks would cover the whole grid in one block is left out (the total
    is known).  Not scaled to the budget: the caller divides by the exact constraint value."""
    nx, ny = grid.cell.shape
    top = int(np.ceil(np.log2(max(nx, ny)))) + 1
    levels = []
    for lev in range(top + 1):
        B = sp.kron(_indicator(nx, lev), _indicator(ny, lev), format="csr")
        if B.shape[0] <= 1:
            break
        s = (1.0 if lev == 0 else LEVEL_SCALE) if scales is None else float(scales[lev])
        levels.append(s * B)
    A = sp.vstack(levels, format="csr")  # columns in (a, b) order: element a * ny + b
    order = grid.cell.ravel()  # element index of cell (a, b)
    out = sp.csr_array((A.data, order[A.indices], A.indptr), shape=(A.shape[0], grid.N))
    out.sort_indices()
    return out
