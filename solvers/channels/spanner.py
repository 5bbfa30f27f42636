"""Greedy t-spanners of a metric (for the spanner reduction of Bordenabe et al., CCS 2014).

A graph G on the points is a δ-spanner of the metric ``D`` if its shortest-path distance satisfies
``d_G(x, y) <= δ·D(x, y)`` for every pair. The greedy construction (Althöfer et al. 1993) scans
the pairs by increasing distance and adds an edge whenever the current graph is too long
between its endpoints; in the plane it has O(N) edges for any fixed δ > 1.

Privacy use: constraining a randomiser only on the edges with budget ``D(e)/δ`` makes it
``D``-private for every pair (a path of total budget ``d_G(x, y)/δ <= D(x, y)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["greedy_spanner", "spanner_dilation"]


def greedy_spanner(D: Any, dilation: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: N803
    """Edges ``(i, j, D[i, j])`` (i < j) of the greedy ``dilation``-spanner of the metric ``D``.

    Parameters
    ----------
    D : array (N, N)
        A metric (symmetric, zero diagonal, finite).
    dilation : float
        The stretch δ >= 1 allowed (δ = 1 keeps every pair not implied by shorter paths).

    Returns
    -------
    (i, j, w) : arrays of the edges

    Examples
    --------
    >>> pts = np.array([0.0, 1.0, 2.0, 3.0])
    >>> i, j, w = greedy_spanner(np.abs(np.subtract.outer(pts, pts)), 1.0)
    >>> sorted(zip(i.tolist(), j.tolist()))  # a path: longer pairs are implied
    [(0, 1), (1, 2), (2, 3)]
    """
    d = np.asarray(D, dtype=float)
    n = d.shape[0]
    if d.shape != (n, n) or not np.all(np.isfinite(d)):
        raise ValueError("D must be a finite square distance matrix")
    if not dilation >= 1:
        raise ValueError(f"dilation = {dilation}: a spanner's dilation is >= 1")
    iu, ju = np.triu_indices(n, 1)
    order = np.argsort(d[iu, ju], kind="stable")
    g = np.full((n, n), np.inf)
    np.fill_diagonal(g, 0.0)
    ei: list[int] = []
    ej: list[int] = []
    slack = 1.0 + 1e-12
    for k in order:
        u, v = int(iu[k]), int(ju[k])
        w = d[u, v]
        if g[u, v] <= dilation * w * slack:
            continue
        ei.append(u)
        ej.append(v)
        via = np.minimum(g[:, u][:, None] + w + g[v][None, :], g[:, v][:, None] + w + g[u][None, :])
        np.minimum(g, via, out=g)
    i, j = np.array(ei, dtype=np.int64), np.array(ej, dtype=np.int64)
    return i, j, d[i, j]


def spanner_dilation(D: Any, i: Any, j: Any) -> float:  # noqa: N803
    """The realised dilation ``max d_G(x, y) / D(x, y)`` of the graph with edges (i, j)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    d = np.asarray(D, dtype=float)
    n = d.shape[0]
    i, j = np.asarray(i), np.asarray(j)
    g = coo_matrix((d[i, j], (i, j)), shape=(n, n)).tocsr()
    sp = shortest_path(g, directed=False)
    off = ~np.eye(n, dtype=bool) & (d > 0)
    return float(np.max(sp[off] / d[off]))
