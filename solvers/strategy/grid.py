"""Coarse-to-fine strategies for universes that are regular 2-D grids of points.

On a grid the polishing of a dense strategy costs O(N^3) per step, and the steps that matter most
(the global structure) are the slowest to find at full resolution.  :func:`grid_strategy` solves
a chain of coarser problems first -- the grid with its cells merged in 2 x 2 blocks, repeatedly --
and lifts each coarse strategy one level up as the start of the next:

* the coarse budget of two blocks is the smallest budget of a fine pair between them, so the
  lifted strategy (every fine element gets the column of its block) is exactly as feasible on the
  fine grid as the coarse one was on the coarse grid (pairs inside a block have column distance 0);
* the coarse workload is the fine one on block-uniform histograms (Gram ``S' G S``, S the block
  averaging), and rank is restored by adding, in every block, small indicator rows of all but one
  of its cells.

Every level is polished on a working set of close pairs plus the pairs an exact scan over all
pairs finds most loaded (:mod:`solvers.strategy.workset`), with the low-rank form of the
objective (:mod:`solvers.strategy.lowrank`).  The returned strategy is NOT yet scaled: the
caller divides it by its exact constraint value over every pair, as for every other start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from solvers.constraints import ConstraintSet
from solvers.strategy.basis import Basis
from solvers.strategy.constraint import strategy_scan
from solvers.strategy.lowrank import LowRankObjective
from solvers.strategy.optimize import polish
from solvers.strategy.workset import near_working_set

#: Coarsening stops below this many cells.
MIN_CELLS = 48
#: Iterations per round above this many cells (more temperature rounds in the time).
FINE_CELLS, FINE_MAXITER = 300, 40
#: Level d (0 = the finest) must end by ``COARSE_SHARE**d`` of the time available.
COARSE_SHARE = 0.3


@dataclass(frozen=True)
class Grid:
    """Points on a full regular lattice: ``cell[a, b]`` is the element at column a, row b;
    ``coords`` the points; ``spacing`` the larger of the two lattice steps."""

    cell: np.ndarray
    coords: np.ndarray
    spacing: float

    @property
    def N(self) -> int:  # noqa: N802
        return int(self.cell.size)


def detect_grid(coords: np.ndarray | None) -> Grid | None:
    """The :class:`Grid` of 2-D points that fill a regular lattice (every combination of the
    distinct x and distinct y values, each set evenly spaced), else None."""
    if coords is None:
        return None
    pts = np.asarray(coords, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2 or not np.all(np.isfinite(pts)):
        return None
    xs, ia = np.unique(pts[:, 0], return_inverse=True)
    ys, ib = np.unique(pts[:, 1], return_inverse=True)
    if xs.size < 2 or ys.size < 2 or xs.size * ys.size != len(pts):
        return None
    steps = []
    for v in (xs, ys):
        d = np.diff(v)
        if not np.allclose(d, d[0], rtol=1e-9, atol=0.0):
            return None
        steps.append(float(d[0]))
    cell = np.full((xs.size, ys.size), -1, np.int64)
    cell[np.ravel(ia), np.ravel(ib)] = np.arange(len(pts))
    if np.any(cell < 0):
        return None
    return Grid(cell, pts, max(steps))


def coarsen(grid: Grid) -> tuple[Grid, np.ndarray]:
    """The grid of 2 x 2 blocks (odd sides end in 1-wide blocks) and the block of every cell."""
    nx, ny = grid.cell.shape
    a, b = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    cx, cy = (nx + 1) // 2, (ny + 1) // 2
    parent = np.empty(grid.N, np.int64)
    parent[grid.cell.ravel()] = ((a // 2) * cy + (b // 2)).ravel()
    counts = np.bincount(parent, minlength=cx * cy).astype(float)
    centres = np.zeros((cx * cy, 2))
    np.add.at(centres, parent, grid.coords)
    centres /= counts[:, None]
    return Grid(np.arange(cx * cy).reshape(cx, cy), centres, 2 * grid.spacing), parent


def block_budget(cs: ConstraintSet, parent: np.ndarray, Nc: int, chunk: int = 256) -> np.ndarray:  # noqa: N803
    """``eps_c[B, B'] = min eps_ij`` over the fine pairs i in B, j in B' (0 on the diagonal)."""
    order = np.argsort(parent, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(parent[order]) != 0])
    Ec = np.full((Nc, Nc), np.inf)
    for r0 in range(0, cs.N, chunk):
        r1 = min(cs.N, r0 + chunk)
        E = np.array(cs.eps_rows(r0, r1), dtype=np.float64)  # noqa: N806
        E[np.arange(r1 - r0), np.arange(r0, r1)] = np.inf
        cols = np.minimum.reduceat(E[:, order], starts, axis=1)
        np.minimum.at(Ec, parent[r0:r1], cols)
    Ec = np.minimum(Ec, Ec.T)
    np.fill_diagonal(Ec, 0.0)
    return Ec


def coarse_gram(G: np.ndarray, parent: np.ndarray, Nc: int) -> np.ndarray:  # noqa: N803
    """The centred Gram matrix of the workload on block-uniform histograms (``S' G S``)."""
    counts = np.bincount(parent, minlength=Nc).astype(float)
    S = np.zeros((G.shape[0], Nc))
    S[np.arange(G.shape[0]), parent] = 1.0 / counts[parent]
    Gc = S.T @ G @ S
    Gc = Gc - Gc.mean(axis=0, keepdims=True)
    Gc = Gc - Gc.mean(axis=1, keepdims=True)
    return 0.5 * (Gc + Gc.T)


def lift(Cc: np.ndarray, parent: np.ndarray, detail: float) -> np.ndarray:
    """The coarse strategy on the fine grid (every cell gets its block's column) plus, in every
    block, indicator rows of all cells but the first, scaled ``detail``."""
    N = parent.size  # noqa: N806
    order = np.argsort(parent, kind="stable")
    first = np.r_[True, np.diff(parent[order]) != 0]
    extra = order[~first]
    D = np.zeros((extra.size, N))
    D[np.arange(extra.size), extra] = detail
    return np.vstack([Cc[:, parent], D])


def grid_strategy(G: np.ndarray, cs: ConstraintSet, grid: Grid, *, deadline: float,
                  rounds: int = 8, maxiter: int = 100, memory_bytes: int = 2**30
                  ) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """A polished (unscaled) strategy for the centred Gram matrix G on ``grid`` (coarse to fine,
    module doc).  Returns (C, one history entry per level, coarsest first)."""
    levels: list[tuple[Grid, ConstraintSet, np.ndarray, np.ndarray | None]] = []
    g, c, Gl = grid, cs, G
    while True:
        if g.N < 2 * MIN_CELLS or min(g.cell.shape) < 4:
            levels.append((g, c, Gl, None))
            break
        gc, parent = coarsen(g)
        levels.append((g, c, Gl, parent))
        c = ConstraintSet.dense(block_budget(c, parent, gc.N))
        Gl = coarse_gram(Gl, parent, gc.N)
        g = gc
    history: list[dict[str, Any]] = []
    C: np.ndarray | None = None
    start = time.perf_counter()
    span = max(0.0, deadline - start)
    for depth in range(len(levels) - 1, -1, -1):
        g, c, Gl, up = levels[depth]
        level_deadline = start + span * COARSE_SHARE**depth  # level d ends at share^d of the time
        if C is None:
            C0 = np.eye(g.N)
        else:
            assert up is not None
            C0 = lift(C, up, 0.3 * float(np.abs(C).max()))
        basis = Basis.identity(g.N)

        def check(X: np.ndarray, c: ConstraintSet = c, basis: Basis = basis, n: int = g.N
                  ) -> tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
            val, _, top = strategy_scan(X, basis, c, k=2 * n, memory_bytes=memory_bytes)
            return val, (top[0], top[1], c.pair_eps(top[0], top[1]))

        ws = near_working_set(c, g.coords, 1.5 * g.spacing)
        t0 = time.perf_counter()
        iters = maxiter if g.N <= FINE_CELLS else min(maxiter, FINE_MAXITER)
        C, f, hist = polish(C0, LowRankObjective(Gl, True), ws, check, rounds=rounds,
                            maxiter=iters, deadline=level_deadline)
        history.append({"N": g.N, "error": 2 * f, "rounds": len(hist) - 1,
                        "seconds": round(time.perf_counter() - t0, 2)})
    assert C is not None
    return C, history
