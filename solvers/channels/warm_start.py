"""Warm starts of the column decomposition from a smaller square grid.

The multipliers ``u`` of the row sums (:mod:`solvers.channels.column_lagrangian`) price each
input's "one unit of probability". On a square grid with a uniform prior, a translation-invariant
budget (``ε·d`` for a norm ``d``) and a translation-invariant loss, an input's multiplier
depends on its position only through its distance to the edges and corners, and that dependence
fades at the rate the budget grows (``exp(-ε·r)`` at distance r from an edge). So the
multipliers of a small grid's solution, its edge and corner layers kept and its centre repeated
across the larger grid's interior, are a good first guess for the larger grid; any ``u`` gives a
valid lower bound, so a poor guess costs time, never correctness.

The same map moves the smaller grid's channel: the column of a larger-grid output is the column
of its smaller-grid counterpart, shifted by the same offset (:func:`grid_columns`); the column
decomposition lifts it to satisfy every pair and starts its master with it.

numpy only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["grid_index_map", "grid_duals", "grid_columns"]


def grid_index_map(side: int, new_side: int) -> np.ndarray:
    """For each coordinate ``0..new_side-1`` of the larger grid, the coordinate of the smaller
    grid at the same distance from the nearer edge (the centre of the smaller grid for the
    interior).

    Examples
    --------
    >>> grid_index_map(4, 7).tolist()
    [0, 1, 2, 2, 2, 2, 3]
    >>> grid_index_map(3, 3).tolist()
    [0, 1, 2]
    """
    if side < 1 or new_side < side:
        raise ValueError(f"map a grid of side {side} onto one of side {new_side} >= it")
    half = side // 2
    i = np.arange(new_side)
    return np.where(i < half, i, np.where(i >= new_side - (side - half), i - (new_side - side), half))


def grid_duals(u: np.ndarray, side: int, new_side: int, prior: np.ndarray | None = None,
               new_prior: np.ndarray | None = None) -> np.ndarray:
    """Row multipliers for the ``new_side x new_side`` grid from those of the ``side x side`` grid.

    Points are numbered row by row (point ``i * side + j`` at ``(i, j)``). The multiplier of a
    point of the larger grid is that of the smaller grid's point at the same distance from the
    edges (:func:`grid_index_map`), times the ratio of the two points' prior weights (the cost
    ``prior[x] · loss[x, z]`` scales with the prior; default uniform priors: ``side² /
    new_side²``).

    Examples
    --------
    >>> u = np.arange(9.0)  # a 3 x 3 grid
    >>> grid_duals(u, 3, 4).reshape(4, 4) * 16 / 9
    array([[0., 1., 1., 2.],
           [3., 4., 4., 5.],
           [3., 4., 4., 5.],
           [6., 7., 7., 8.]])
    """
    u = np.asarray(u, dtype=float)
    if u.shape != (side * side,):
        raise ValueError(f"u has shape {u.shape}, expected ({side * side},)")
    k = grid_index_map(side, new_side)
    src = (k[:, None] * side + k[None, :]).ravel()
    p_old = np.full(side * side, 1.0 / side ** 2) if prior is None else np.asarray(prior, float)
    p_new = (np.full(new_side ** 2, 1.0 / new_side ** 2) if new_prior is None
             else np.asarray(new_prior, float))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p_old[src] > 0, p_new / p_old[src], 0.0)
    return u[src] * ratio


def grid_columns(T: np.ndarray, side: int, new_side: int) -> Callable[[int], np.ndarray]:
    """Start columns for the ``new_side x new_side`` grid from the channel ``T`` of the
    ``side x side`` grid: output ``(i, j)`` gets the column of the smaller grid's output
    ``(k[i], k[j])`` (:func:`grid_index_map`), every entry moved by the same offset
    ``(i - k[i], j - k[j])``, zero where the smaller grid has no point (the column
    decomposition lifts it to the least column above it that satisfies every pair).

    Examples
    --------
    >>> T = np.eye(4)  # a 2 x 2 grid that reports the truth
    >>> grid_columns(T, 2, 3)(4).reshape(3, 3)  # the centre of the 3 x 3 grid
    array([[0., 0., 0.],
           [0., 1., 0.],
           [0., 0., 0.]])
    """
    T = np.asarray(T, dtype=float)  # noqa: N806
    if T.shape != (side * side, side * side):
        raise ValueError(f"T has shape {T.shape}, expected ({side * side}, {side * side})")
    k = grid_index_map(side, new_side)

    def column(z: int) -> np.ndarray:
        i, j = divmod(int(z), new_side)
        w = T[:, k[i] * side + k[j]].reshape(side, side)
        v = np.zeros((new_side, new_side))
        di, dj = i - int(k[i]), j - int(k[j])
        v[di:di + side, dj:dj + side] = w
        return v.ravel()

    return column
