"""Symmetries of a randomiser LP: permutations of the inputs that leave it unchanged.

If a permutation ``p`` of the N inputs (also applied to the outputs, which are the same set)
leaves the budget matrix, the cost matrix and hence the whole LP unchanged, averaging any optimal
channel over the group of such permutations gives an optimal channel with
``T[p[x], p[z]] = T[x, z]``. The LP then only needs one output column per orbit, and one row-sum
constraint per orbit of inputs (:mod:`solvers.channels.column_lagrangian`). On a square grid with a
uniform prior the eight maps of the square (rotations and reflections) cut the work about
eightfold.

Only permutations under which the matrices are *exactly* equal are kept, so nothing is
approximated.

numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["square_symmetries", "invariant_group", "is_invariant", "orbits"]


def square_symmetries(coords: Any, decimals: int = 9) -> list[np.ndarray]:
    """The maps of the plane's square group (about the bounding box's centre) that permute the points.

    Parameters
    ----------
    coords : array (N, 2)
    decimals : int
        Coordinates are matched after rounding to this many decimals (the group is then checked
        exactly against the LP's matrices by :func:`invariant_group`).

    Returns
    -------
    list of permutations ``p`` (``p[x]``: the image of point x); the identity first.

    Examples
    --------
    >>> pts = np.array([[0.0, 0], [1, 0], [0, 1], [1, 1]])
    >>> len(square_symmetries(pts))
    8
    """
    c = np.asarray(coords, dtype=float)
    if c.ndim != 2 or c.shape[1] != 2:
        return [np.arange(c.shape[0])]
    centre = (c.min(axis=0) + c.max(axis=0)) / 2
    d = c - centre
    key = {tuple(r): i for i, r in enumerate(np.round(c, decimals).tolist())}
    if len(key) != len(c):
        return [np.arange(len(c))]
    perms: list[np.ndarray] = []
    for swap in (False, True):
        for sx in (1.0, -1.0):
            for sy in (1.0, -1.0):
                e = d[:, ::-1] if swap else d
                img = np.round(centre + e * np.array([sx, sy]), decimals)
                p = [key.get(tuple(r)) for r in img.tolist()]
                if all(i is not None for i in p):
                    perms.append(np.asarray(p, dtype=np.int64))
    perms.sort(key=lambda q: not np.array_equal(q, np.arange(len(c))))
    return perms


def invariant_group(perms: list[np.ndarray], matrices: list[np.ndarray],
                    vectors: Sequence[np.ndarray] = (), block: int = 512) -> list[np.ndarray]:
    """The permutations under which every (N, N) matrix and every (N,) vector is exactly
    unchanged: ``A[p][:, p] == A`` and ``a[p] == a`` (a subgroup when ``perms`` is a group).
    Compared in row blocks (no N² temporary)."""
    keep = []
    for p in perms:
        p = np.asarray(p, dtype=np.int64)
        if is_invariant(p, matrices, vectors, block):
            keep.append(p)
    return keep


def is_invariant(p: np.ndarray, matrices: Sequence[np.ndarray], vectors: Sequence[np.ndarray] = (),
                 block: int = 512) -> bool:
    """``A[p[x], p[y]] == A[x, y]`` for every matrix and ``a[p[x]] == a[x]`` for every vector,
    exactly (row blocks).

    Examples
    --------
    >>> a = np.array([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]])
    >>> is_invariant(np.array([2, 1, 0]), [a]), is_invariant(np.array([1, 0, 2]), [a])
    (True, False)
    """
    for v in vectors:
        if not np.array_equal(np.asarray(v)[p], v):
            return False
    for a in matrices:
        a = np.asarray(a)
        for s in range(0, p.size, block):
            if not np.array_equal(a[p[s:s + block]][:, p], a[s:s + block]):
                return False
    return True


def orbits(perms: list[np.ndarray], n: int) -> np.ndarray:
    """Orbit label of each of the n points under the group (labels 0, 1, ... in order of first point).

    Examples
    --------
    >>> orbits([np.array([0, 1, 2]), np.array([2, 1, 0])], 3).tolist()
    [0, 1, 0]
    """
    parent = np.arange(n)
    for p in perms:
        for a, b in zip(range(n), p.tolist(), strict=True):
            ra, rb = _find(parent, a), _find(parent, b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    roots = np.array([_find(parent, i) for i in range(n)])
    _, label = np.unique(roots, return_inverse=True)
    return np.asarray(label, dtype=np.int64)


def _find(parent: Any, i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = int(parent[i])
    return i
