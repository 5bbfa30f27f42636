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

__all__ = ["greedy_spanner", "spanner_dilation", "graph_edges"]


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


def graph_edges(D: Any, neighbours: int = 8, rtol: float = 1e-12) -> tuple[np.ndarray, np.ndarray] | None:  # noqa: N803
    """Edges ``(i, j)`` (i < j) whose path lengths give back the whole metric, or None.

    When ``D`` is the shortest-path metric of a sparse graph (a grid under the Manhattan distance,
    a road network), constraining a randomiser on that graph's edges alone, each with its own
    budget ``D[i, j]``, is *exact*: a path of edges of total length ``D[x, x']`` gives the pair
    constraint of (x, x'), and no budget is divided. The candidates are the pairs of each point
    with its ``neighbours`` nearest points; a candidate with a third point z on a shortest route
    (``D[i, z] + D[z, j] <= D[i, j]``) is dropped; and the rest are accepted only if the
    shortest paths over them are within ``rtol`` (relative) of ``D`` for *every* pair, so a metric
    that is not such a graph metric (e.g. the Euclidean distance) returns None.

    Examples
    --------
    >>> pts = np.array([(i, j) for i in range(5) for j in range(5)], dtype=float)
    >>> manhattan = np.abs(pts[:, None] - pts[None]).sum(axis=-1)
    >>> i, j = graph_edges(manhattan)
    >>> int(i.size)  # the 40 edges of the 5 x 5 grid
    40
    >>> graph_edges(np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(axis=-1))) is None
    True
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    d = np.asarray(D, dtype=float)
    n = d.shape[0]
    if d.shape != (n, n) or not np.all(np.isfinite(d)) or n < 2:
        return None
    k = min(neighbours, n - 1)
    order = np.empty((n, k), dtype=np.int64)  # each point's k nearest others (row blocks)
    for s in range(0, n, 512):
        e = np.array(d[s:s + 512])
        e[np.arange(e.shape[0]), np.arange(s, s + e.shape[0])] = np.inf
        order[s:s + 512] = np.argpartition(e, k - 1, axis=1)[:, :k]
    a = np.repeat(np.arange(n), k)
    b = order.ravel()
    i, j = np.minimum(a, b), np.maximum(a, b)
    pairs = np.unique(i * n + j)
    i, j = pairs // n, pairs % n
    keep = np.ones(i.size, dtype=bool)
    for s in range(0, i.size, 512):  # drop candidates with a point on a shortest route
        ii, jj = i[s:s + 512], j[s:s + 512]
        via = d[ii] + d[:, jj].T
        via[np.arange(ii.size), ii] = np.inf
        via[np.arange(ii.size), jj] = np.inf
        keep[s:s + 512] = via.min(axis=1) > d[ii, jj] * (1 + rtol)
    i, j = i[keep], j[keep]
    if np.any(d[i, j] <= 0):
        return None
    g = coo_matrix((d[i, j], (i, j)), shape=(n, n)).tocsr()
    for s in range(0, n, 256):  # every pair's path, a block of sources at a time
        paths = shortest_path(g, directed=False, indices=np.arange(s, min(s + 256, n)))
        if not np.all(paths <= d[s:s + 256] * (1 + rtol) + 1e-300):
            return None
    return i.astype(np.int64), j.astype(np.int64)
