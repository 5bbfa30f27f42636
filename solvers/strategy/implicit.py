"""Gram matrices of large structured workloads without their m x N query matrix.

The optimiser needs the workload only through ``G = F' F`` (N x N): all 2-D rectangles of a
32 x 32 grid are m = 278 784 queries (a 2.3 GB dense matrix) but their Gram matrix is the
Kronecker product of two 32 x 32 matrices.

* all ranges [a, b] of a line of N points: ``G_ij = (min(i, j) + 1) (N - max(i, j))`` (the
  ranges that contain both i and j);
* all rectangles of an nx x ny grid (element index ``a ny + b``): ``G = G_x (x) G_y``;
* all prefixes [0, b]: ``G_ij = N - max(i, j)``.
"""

from __future__ import annotations

import numpy as np

from solvers.errors import SolverError
from solvers.strategy.basis import Basis


def range_gram(N: int) -> np.ndarray:  # noqa: N803
    """F'F of the N (N + 1) / 2 range queries of a line of N points."""
    i = np.arange(N)
    lo, hi = np.minimum.outer(i, i), np.maximum.outer(i, i)
    return ((lo + 1) * (N - hi)).astype(np.float64)


def prefix_gram(N: int) -> np.ndarray:  # noqa: N803
    """F'F of the N prefix queries [0, b] of a line of N points."""
    i = np.arange(N)
    return (N - np.maximum.outer(i, i)).astype(np.float64)


def rectangle_gram(nx: int, ny: int) -> np.ndarray:
    """F'F of the nx (nx + 1) ny (ny + 1) / 4 axis-aligned rectangles of an nx x ny grid whose
    element ``a ny + b`` is the cell (a, b)."""
    return np.kron(range_gram(nx), range_gram(ny))


def basis_gram(basis: Basis, G: np.ndarray) -> np.ndarray:
    """The Gram matrix in the coordinates of ``basis`` as the optimiser uses it: ``P G P``
    (centred: the total is known) for the identity basis, ``B' G B`` for a tree basis."""
    G = np.asarray(G, dtype=np.float64)
    if G.shape != (basis.N, basis.N) or not np.all(np.isfinite(G)):
        raise SolverError(f"the Gram matrix must be a finite ({basis.N}, {basis.N}) array")
    if basis.kind == "identity":
        Gc = G - G.mean(axis=0, keepdims=True)
        Gc = Gc - Gc.mean(axis=1, keepdims=True)
    else:
        B = basis.B()
        Gc = np.asarray(B.T @ (B.T @ G).T)
    return 0.5 * (Gc + Gc.T)
