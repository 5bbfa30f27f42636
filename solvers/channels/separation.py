"""Separation of the pair constraints of one output column, without listing the pairs.

A column ``v`` of a d_X-private channel must satisfy ``v[x] <= exp(eps[x, y]) v[y]`` for every
pair. With every pair constrained (a Euclidean metric: no smaller set of pairs implies the rest)
there are N² of them per column; the pricing LPs of :mod:`solvers.channels.column_lagrangian`
hold only those found violated. This module finds them from the dense kernel
``K = exp(-eps)`` (N² numbers, held once and shared by every column) in row blocks, so no pair
list and no N² temporary is ever built:

* :func:`lift` — ``v'[y] = max_x v[x] K[x, y]``: for a metric ``eps`` (triangle inequality), the
  least vector above ``v`` that satisfies every pair;
* :func:`worst_violations` — for every y the x with the largest ``v[x] K[x, y]`` (the most
  violated pair into y, if any is), kept when ``v[x] - exp(eps[x, y]) v[y] > tol``: one pass of
  the same cost as :func:`lift`, and a y is returned iff some pair into it is violated by more
  than ``tol`` in ratio terms (see the function);
* :func:`violations` — every violated pair (brute force, blocked; for checks and tests).

numpy only.
"""

from __future__ import annotations

import numpy as np

__all__ = ["kernel", "lift", "worst_violations", "violations", "check_all_pairs", "check_edges"]

#: Rows per block: a block is ``BLOCK x N`` floats (8 MB at N = 4 096).
BLOCK = 256


def kernel(eps: np.ndarray) -> np.ndarray:
    """``K = exp(-eps)`` (``inf`` budgets give 0), the matrix every pass below reads."""
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(-np.asarray(eps, dtype=float))


def _scan(v: np.ndarray, K: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: N803
    """``max_x v[x] K[x, y]`` and its argmax for every y (row blocks; rows with v = 0 skipped)."""
    best = np.zeros(K.shape[1])
    arg = np.arange(K.shape[1])
    rows = np.flatnonzero(v > 0)
    for s in range(0, rows.size, block):
        r = rows[s:s + block]
        m = v[r, None] * K[r]
        k = np.argmax(m, axis=0)
        val = m[k, np.arange(m.shape[1])]
        better = val > best
        best[better] = val[better]
        arg[better] = r[k[better]]
    return best, arg


def lift(v: np.ndarray, K: np.ndarray, block: int = BLOCK) -> np.ndarray:  # noqa: N803
    """``v'[y] = max_x v[x] K[x, y]`` (``K[y, y] = 1``, so ``v' >= v``).

    For ``K = exp(-eps)`` with ``eps`` a metric, ``v'`` satisfies every pair constraint:
    ``v[x] K[x, x'] <= exp(eps[x', y]) v[x] K[x, y]`` by the triangle inequality, so
    ``v'[x'] <= exp(eps[x', y]) v'[y]``.

    Examples
    --------
    >>> eps = np.abs(np.subtract.outer(np.arange(3.0), np.arange(3.0)))
    >>> np.round(lift(np.array([1.0, 0.0, 0.0]), kernel(eps)), 4).tolist()
    [1.0, 0.3679, 0.1353]
    """
    return _scan(np.asarray(v, dtype=float), K, block)[0]


def worst_violations(v: np.ndarray, K: np.ndarray, eps: np.ndarray, tol: float, *,  # noqa: N803
                     cap: float = np.inf, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(x, y)``, one per y at most, with ``v[x] - exp(eps[x, y]) v[y] > tol``.

    For each y the x with the largest ``v[x] K[x, y]`` is taken (the pair into y of largest
    ratio ``v[x] / (exp(eps[x, y]) v[y])``); the pair is returned when its violation exceeds
    ``tol`` and ``eps[x, y] <= cap``. So every y into which some pair is violated in ratio
    (``v[x] K[x, y] > v[y]``) and by more than ``tol`` at its worst ratio gets a pair.

    Examples
    --------
    >>> eps = np.abs(np.subtract.outer(np.arange(3.0), np.arange(3.0)))
    >>> x, y = worst_violations(np.array([1.0, 0.0, 0.0]), kernel(eps), eps, 1e-12)
    >>> list(zip(x.tolist(), y.tolist()))
    [(0, 1), (0, 2)]
    """
    v = np.asarray(v, dtype=float)
    best, arg = _scan(v, K, block)
    y = np.flatnonzero(best > v)
    x = arg[y]
    e = eps[x, y]
    with np.errstate(over="ignore"):
        keep = (x != y) & (e <= cap) & (v[x] - np.exp(e) * v[y] > tol)
    return x[keep], y[keep]


def violations(v: np.ndarray, eps: np.ndarray, tol: float,
               block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Every pair ``(x, y)``, x != y, with ``v[x] - exp(eps[x, y]) v[y] > tol`` (brute force)."""
    v = np.asarray(v, dtype=float)
    n = v.size
    xs, ys = [], []
    with np.errstate(over="ignore", invalid="ignore"):
        for s in range(0, n, block):
            e = eps[s:s + block]
            bad = v[s:s + block, None] - np.exp(e) * v[None, :] > tol
            bad[np.arange(e.shape[0]), np.arange(s, s + e.shape[0])] = False
            a, b = np.nonzero(bad)
            xs.append(a + s)
            ys.append(b)
    return np.concatenate(xs), np.concatenate(ys)


def check_all_pairs(T: np.ndarray, eps: np.ndarray, *, rtol: float = 1e-9,  # noqa: N803
                    atol: float = 1e-12, group: list[np.ndarray] | None = None
                    ) -> tuple[bool, float, tuple[int, int]]:
    """Exact d_X check of the channel ``T`` on every pair and output, in blocks of inputs.

    A pair passes when ``ln max_z T[x, z] / T[x', z] <= eps[x, x'] (1 + rtol) + atol`` (outputs
    that neither input reports are skipped; ``T[x, z] > 0 = T[x', z]`` fails). Memory:
    ``N x (outputs checked)`` floats at a time besides ``ln T``. Returns ``(ok, worst ratio
    loss/eps, worst pair)``.

    With ``group`` (permutations of the inputs, e.g.
    :func:`solvers.channels.symmetry.square_symmetries`), the permutations under which both
    ``T`` and ``eps`` are *exactly* unchanged (``T[p[x], p[z]] == T[x, z]``, checked here
    entry by entry) are used: the constraints of column ``p[z]`` are those of column ``z``
    with every pair moved by ``p`` and the same budgets, so one column per orbit of outputs
    carries every constraint, and the check is exact with about ``|G|`` times fewer steps.

    Examples
    --------
    >>> e = np.log(3) * (1 - np.eye(2))
    >>> check_all_pairs(np.array([[0.75, 0.25], [0.25, 0.75]]), e)[0]
    True
    >>> check_all_pairs(np.array([[0.8, 0.2], [0.2, 0.8]]), e)[0]
    False
    >>> check_all_pairs(np.array([[0.75, 0.25], [0.25, 0.75]]), e, group=[np.array([1, 0])])[0]
    True
    """
    T = np.asarray(T, dtype=float)  # noqa: N806
    n = T.shape[0]
    cols = np.arange(T.shape[1])
    if group and T.shape[1] == n:
        from solvers.channels.symmetry import invariant_group, orbits

        g = invariant_group([np.arange(n)] + [np.asarray(p) for p in group], [T, eps])
        if len(g) > 1:
            orb = orbits(g, n)
            cols = np.unique(orb, return_index=True)[1]  # first output of each orbit
    with np.errstate(divide="ignore"):
        la = np.log(T if cols.size == T.shape[1] else T[:, cols])
    pos = np.isfinite(la)
    ok, worst, pair = True, 0.0, (0, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        for x in range(n):
            zs = np.flatnonzero(pos[x])
            if zs.size == 0:
                continue
            if zs.size == la.shape[1]:  # (every output: no copy of ln T)
                d = la[x][None, :] - la
            else:
                d = la[x, zs][None, :] - la[:, zs]  # (n, |zs|): ln T[x, z] - ln T[x', z]
            loss = d.max(axis=1)
            loss[x] = 0.0
            e = eps[x]
            bad = loss > e * (1 + rtol) + atol
            if bad.any():
                ok = False
            ratio = np.where(loss <= 0, 0.0, np.where(e > 0, loss / e, np.inf))
            ratio[np.isnan(ratio)] = 0.0  # (an unconstrained pair, inf / inf: no ratio)
            k = int(np.argmax(ratio))
            if ratio[k] > worst:
                worst, pair = float(ratio[k]), (x, k)
    return ok, worst, pair


def check_edges(T: np.ndarray, eps: np.ndarray, i: np.ndarray, j: np.ndarray, *,  # noqa: N803
                rtol: float = 1e-9, atol: float = 1e-12) -> tuple[bool, float, tuple[int, int]]:
    """Exact d_X check of ``T`` through a graph: every edge (both ways, every output), and the
    proof that the edges' shortest paths (edge length ``eps[i, j]``) are within ``rtol`` of
    ``eps`` for every pair (blocks of sources), so that the edges imply every pair. Returns
    ``(ok, worst edge ratio loss/eps, worst edge)``; ``ok`` is False when the paths do not
    show it.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    n = eps.shape[0]
    g = coo_matrix((eps[i, j], (i, j)), shape=(n, n)).tocsr()
    for s in range(0, n, 256):
        paths = shortest_path(g, directed=False, indices=np.arange(s, min(s + 256, n)))
        if not np.all(paths <= eps[s:s + 256] * (1 + 1e-12)):
            return False, np.inf, (0, 0)
    ok, worst, pair = True, 0.0, (0, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        for a, b in ((i, j), (j, i)):
            step = max(1, min(1024, 2 ** 21 // T.shape[1]))  # (~2M floats a block)
            for s in range(0, a.size, step):
                aa, bb = a[s:s + step], b[s:s + step]
                la, lb = np.log(T[aa]), np.log(T[bb])
                d = np.where(np.isneginf(la), -np.inf, la - lb)
                loss = d.max(axis=1)
                e = eps[aa, bb]
                ok &= bool(np.all(loss <= e * (1 + rtol) + atol))
                ratio = loss / e
                k = int(np.argmax(ratio))
                if ratio[k] > worst:
                    worst, pair = float(ratio[k]), (int(aa[k]), int(bb[k]))
    return ok, worst, pair
