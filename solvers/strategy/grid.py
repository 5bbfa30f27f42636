"""Coarse-to-fine strategies for universes that are regular 2-D grids of points.

On a grid the polishing of a dense strategy costs O(N^3) per step, and the steps that matter most
(the global structure) are the slowest to find at full resolution.  :func:`grid_strategy` solves
a chain of coarser problems first -- the grid with its cells merged in 2 x 2 blocks, repeatedly --
and lifts each coarse strategy one level up as the start of the next:

* the coarse budget of two blocks is the smallest budget of a fine pair between them, so the
  lifted strategy (every fine element gets the column of its block) is exactly as feasible on the
  fine grid as the coarse one was on the coarse grid (pairs inside a block have column distance 0);
* the coarse workload is the fine one on block-uniform histograms (Gram ``S' G S``, S the block
  averaging);
* the polishing starts from the coarse strategy interpolated bilinearly at the fine cells plus the
  Haar contrasts of every block (:func:`lift_smooth`; on the 32 x 32 grid a better start than the
  block-constant :func:`lift` with indicator rows, 3.3e7 against 2.6e8 scale-free error).

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
#: Scale of the block contrasts added to a lifted strategy, relative to its largest entry.
DETAIL = 0.3
#: Above this many cells: at most FINE_MAXITER iterations per round (more temperature rounds in
#: the time) and the objective in float32.
FINE_CELLS, FINE_MAXITER = 300, 40
#: Smoothed-max temperatures and |z| smoothing of the fine levels (None: polish's defaults).
FINE_SCHEDULE: tuple[tuple[float, ...], tuple[float, ...]] | None = None
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


def _axis_weights(n: int, nc: int) -> tuple[np.ndarray, np.ndarray]:
    """Linear interpolation of nc coarse positions at the n fine ones: (lower index, weight of
    the upper neighbour) for fine index a at coarse coordinate (a + 0.5) / 2 - 0.5."""
    t = np.clip((np.arange(n) + 0.5) / 2 - 0.5, 0.0, nc - 1.0)
    lo = np.minimum(np.floor(t).astype(np.int64), max(nc - 2, 0))
    return lo, (t - lo) if nc > 1 else np.zeros(n)


def block_contrasts(grid: Grid) -> np.ndarray:
    """In every 2 x 2 block, its Haar contrasts (+-1 by column parity, by row parity and by
    both; those that are constant or repeated on a block cut by the border are left out)."""
    nx, ny = grid.cell.shape
    rows: list[np.ndarray] = []
    for a0 in range(0, nx, 2):
        for b0 in range(0, ny, 2):
            cells = grid.cell[a0:a0 + 2, b0:b0 + 2]
            sa = np.array([[1.0], [-1.0]])[:cells.shape[0]] * np.ones(cells.shape)
            sb = np.array([[1.0, -1.0]])[:, :cells.shape[1]] * np.ones(cells.shape)
            seen: list[np.ndarray] = []
            for pat in (sa, sb, sa * sb):
                v = pat.ravel()
                if v.min() < 0 < v.max() and not any(np.array_equal(v, w) for w in seen):
                    seen.append(v)
                    row = np.zeros(grid.N)
                    row[cells.ravel()] = v
                    rows.append(row)
    return np.array(rows).reshape(len(rows), grid.N)


def lift_smooth(Cc: np.ndarray, fine: Grid, coarse: Grid, detail: float) -> np.ndarray:
    """The coarse strategy interpolated (bilinearly) at the fine cells, plus the block Haar
    contrasts scaled ``detail``: a better start than :func:`lift` (its columns change by about
    half a coarse step per fine step, which leaves budget to the contrasts)."""
    (nx, ny), (cx, cy) = fine.cell.shape, coarse.cell.shape
    la, wa = _axis_weights(nx, cx)
    lb, wb = _axis_weights(ny, cy)
    out = np.zeros((Cc.shape[0], fine.N))
    A, B = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")  # noqa: N806
    idx = fine.cell[A, B].ravel()
    for da, fa in ((0, 1 - wa), (1, wa)):
        for db, fb in ((0, 1 - wb), (1, wb)):
            w = (fa[A] * fb[B]).ravel()
            if not np.any(w > 0):
                continue
            src = coarse.cell[np.minimum(la[A] + da, cx - 1), np.minimum(lb[B] + db, cy - 1)].ravel()
            out[:, idx] += Cc[:, src] * w[None, :]
    return np.vstack([out, detail * block_contrasts(fine)])


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
            C0 = lift_smooth(C, g, levels[depth + 1][0], DETAIL * float(np.abs(C).max()))
        basis = Basis.identity(g.N)

        def check(X: np.ndarray, c: ConstraintSet = c, basis: Basis = basis, n: int = g.N
                  ) -> tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
            val, _, top = strategy_scan(X, basis, c, k=2 * n, memory_bytes=memory_bytes)
            return val, (top[0], top[1], c.pair_eps(top[0], top[1]))

        ws = near_working_set(c, g.coords, 1.5 * g.spacing)
        t0 = time.perf_counter()
        fine = g.N > FINE_CELLS
        obj = LowRankObjective(Gl, True, dtype=np.float32 if fine else np.float64)
        sched = {} if not fine or FINE_SCHEDULE is None else \
            {"temperatures": FINE_SCHEDULE[0], "smoothing": FINE_SCHEDULE[1]}
        C, f, hist = polish(C0, obj, ws, check, rounds=rounds,
                            maxiter=min(maxiter, FINE_MAXITER) if fine else maxiter,
                            deadline=level_deadline, **sched)
        history.append({"N": g.N, "error": 2 * f, "rounds": len(hist) - 1,
                        "seconds": round(time.perf_counter() - t0, 2)})
    assert C is not None
    return C, history
