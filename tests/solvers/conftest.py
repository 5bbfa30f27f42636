"""Shared instance builders for the solver tests (plain numpy; no dprivacy)."""

from __future__ import annotations

import itertools

import numpy as np
from scipy.sparse.csgraph import shortest_path
from scipy.spatial.distance import cdist


def euclid_instance(N: int, m: int, rng: np.random.Generator, binary: bool = False,
                    grid: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Random points (unit square, or distinct points of a grid) with eps_ij = ||p_i - p_j||."""
    if grid is None:
        P = rng.random((N, 2))
    else:
        cells = rng.choice(grid * grid, size=N, replace=False)
        P = np.c_[cells // grid, cells % grid].astype(float)
    F = (rng.random((m, N)) < 0.5).astype(float) if binary else rng.random((m, N))
    return F, cdist(P, P)


def hamming_graph(d: int, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Binary attributes {0,1}^d with the attribute-weighted metric (spec §8.2): edges join
    elements differing in one attribute k (weight eps_k). Returns (X, I, J, E) and the dense
    all-pairs shortest-path matrix as a 5th element."""
    X = np.array(list(itertools.product([0, 1], repeat=d)), dtype=float)
    N = X.shape[0]
    ei, ej, ee = [], [], []
    for a in range(N):
        for b in range(a + 1, N):
            diff = np.flatnonzero(X[a] != X[b])
            if diff.size == 1:
                ei.append(a)
                ej.append(b)
                ee.append(weights[diff[0]])
    W = np.full((N, N), np.inf)
    W[ei, ej] = ee
    W[ej, ei] = ee
    np.fill_diagonal(W, 0.0)
    D = shortest_path(W, method="D")
    return X, np.array(ei), np.array(ej), np.array(ee), D
