"""Full (unprunable) scans as distance kernels, split into independent parts for parallel engines.

Privacy condition checked (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for all pairs.
The Laplace loss of a pair is the weighted cityblock distance between columns of F,
``loss_ij = sum_k u_k |F_ki - F_kj|`` (scipy's ``cdist(..., "cityblock", w=u)``; differences are
taken before the weights, so near-equal entries keep their relative accuracy), and the
max-aggregated loss of the exponential mechanisms (Theorems 3, 5, 7) is a weighted Chebyshev
distance (a loop over the rows). The Gaussian loss ``sum_k u_k (F_ki - F_kj)^2`` (agg="sq") is
the weighted squared Euclidean distance (``cdist(..., "sqeuclidean", w=u)``).
Each row block of the upper triangle is one ``cdist`` call
(a C loop, no (m, rows, cols) difference array), divided by the budget block and reduced to its
maximum and top k. Rows with ``u_k = inf`` contribute inf wherever they differ, and 0 elsewhere.

A scan is cut into *parts* (row ranges of about equal pair counts; edge ranges for edge sets);
:func:`scan_part` runs one part and :func:`merge` combines the parts' results, so the same parts
run serially, in local processes or on a Dask cluster (:mod:`solvers.distributed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solvers.operand import take, take_range
from solvers.scan_types import PairBudgets, TopK, safe_ratio

_CACHE_CELLS = 2**19  # pair cells per block: keeps temporaries cache friendly


@dataclass
class PartResult:
    """What one part of a scan returns: for mode "scan" the max ratio, its pair and the top-k
    arrays; for mode "lipschitz" the per-row maxima and pairs. ``n`` = constrained pairs seen."""

    best: float
    worst: tuple[int, int] | None
    top: tuple[np.ndarray, np.ndarray, np.ndarray]
    c: np.ndarray | None
    ci: np.ndarray | None
    cj: np.ndarray | None
    n: int


def parts(cs: PairBudgets, n_parts: int) -> list[tuple[int, int]]:
    """Cut the pairs of ``cs`` into about ``n_parts`` ranges of equal pair counts."""
    n_parts = max(1, int(n_parts))
    if cs.kind == "edges":
        E = cs.n_constraints
        cuts = np.linspace(0, E, n_parts + 1).round().astype(int)
    else:
        N = cs.N
        # rows r < R hold sum_{r<R} (N - 1 - r) pairs: invert the quadratic for equal shares
        tot = N * (N - 1) / 2
        share = np.linspace(0, tot, n_parts + 1)
        R = (2 * N - 1 - np.sqrt(np.maximum((2 * N - 1) ** 2 - 8 * share, 0))) / 2
        cuts = np.clip(np.round(R), 0, max(N - 1, 0)).astype(int)
        cuts[-1] = max(N - 1, 0)
    out = [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]
    return out


def scan_part(cs: PairBudgets, F: np.ndarray | sp.csc_array, u: np.ndarray | None,
              lo: int, hi: int, *, k: int = 0, agg: str = "sum", mode: str = "scan",
              memory_bytes: int = 2**30) -> PartResult:
    """Scan the pairs of one part: rows ``lo..hi-1`` against all later columns (dense / oracle
    sets) or edges ``lo..hi-1`` (edge sets). ``mode="lipschitz"`` computes per-row maxima of
    ``|F_ki - F_kj| / eps_ij`` instead of the weighted loss (``u`` unused); ``mode="lipschitz_sq"``
    the per-row maxima of ``(F_ki - F_kj)^2 / eps_ij``."""
    m = F.shape[0]
    top = TopK(k)
    best, worst, n = 0.0, None, 0
    lip = mode in ("lipschitz", "lipschitz_sq")
    power = 2 if mode == "lipschitz_sq" else 1
    c = np.zeros(m) if lip else None
    ci = np.full(m, -1, np.int64) if lip else None
    cj = np.full(m, -1, np.int64) if lip else None
    cells = max(1, min(int(memory_bytes) // (8 * 6), max(_CACHE_CELLS // max(m // 4, 1), 4096)))
    for I, J, eps, ad_or_x in _blocks(cs, F, lo, hi, cells, u if mode == "scan" else None,  # noqa: E741
                                      agg):
        free = ~(eps < np.inf)
        n += int(free.size - np.count_nonzero(free))
        if lip:
            assert c is not None and ci is not None and cj is not None
            for kk in range(m):
                if eps.ndim == 2:  # ad_or_x is the column range F[:, r0:]: one row at a time
                    row = ad_or_x[kk]
                    d = np.abs(row[: eps.shape[0], None] - row[None, :])
                else:
                    d = ad_or_x[kk]
                r = safe_ratio(d**power if power != 1 else d, eps)
                r[free] = -1.0
                if r.size == 0:
                    continue
                a = int(np.argmax(r))
                if r.flat[a] > c[kk]:
                    c[kk] = r.flat[a]
                    pi, pj = _pair_at(I, J, eps.shape, a)
                    ci[kk], cj[kk] = pi, pj
            continue
        ratio = safe_ratio(ad_or_x, eps)
        ratio[free] = -1.0
        flat = ratio.ravel()
        if flat.size:
            a = int(np.argmax(flat))
            if flat[a] >= 0 and (flat[a] > best or worst is None):
                best = float(flat[a])
                worst = _pair_at(I, J, eps.shape, a)
            if k > 0:  # only cells reaching the running k-th largest can enter the top k
                idx = np.flatnonzero(flat >= top.threshold()) if top.r.size >= k else \
                    np.arange(flat.size)
                if idx.size > k:
                    idx = idx[np.argpartition(flat[idx], idx.size - k)[-k:]]
                qi, qj = _pairs_at(I, J, eps.shape, idx)
                top.add(qi, qj, flat[idx])
    return PartResult(best, worst, top.result(), c, ci, cj, n)


def _pair_at(I: np.ndarray, J: np.ndarray, shape: tuple[int, ...], flat: int  # noqa: E741
             ) -> tuple[int, int]:
    pi, pj = _pairs_at(I, J, shape, np.array([flat]))
    return int(pi[0]), int(pj[0])


def _pairs_at(I: np.ndarray, J: np.ndarray, shape: tuple[int, ...], flat: np.ndarray  # noqa: E741
              ) -> tuple[np.ndarray, np.ndarray]:
    if len(shape) == 1:
        return I[flat], J[flat]
    return I[flat // shape[1]], J[flat % shape[1]]


def _loss(Fb: np.ndarray, rows: int, u: np.ndarray, agg: str) -> np.ndarray:
    """Loss of the block rows ``Fb[:, :rows]`` against all columns of ``Fb`` (finite u only):
    the weighted cityblock distance ``sum_k u_k |F_ki - F_kj|`` (differences first, then the
    weights, so near-equal entries lose no relative accuracy) or ``max_k u_k |F_ki - F_kj|``."""
    live = u > 0
    if not live.any():
        return np.zeros((rows, Fb.shape[1]))
    X, w = Fb[live].T, u[live]
    if agg in ("sum", "sq"):
        from scipy.spatial.distance import cdist  # slow import: on use

        return cdist(X[:rows], X, "cityblock" if agg == "sum" else "sqeuclidean", w=w)
    out = np.zeros((rows, Fb.shape[1]))
    for k in range(X.shape[1]):
        np.maximum(out, w[k] * np.abs(X[:rows, k, None] - X[None, :, k]), out=out)
    return out


def _blocks(cs: PairBudgets, F: np.ndarray | sp.csc_array, lo: int, hi: int, cells: int,
            u: np.ndarray | None, agg: str):  # noqa: ANN202
    """Yield (I, J, eps, value) per block: rows/cols index arrays (2-D blocks) or edge arrays
    (1-D), the budgets, and the weighted loss (u given), else |F_ki - F_kj| (m, edges) for edge
    blocks and the column range F[:, r0:] for 2-D blocks."""
    if u is not None:
        fin = np.isfinite(u)
        inf_rows = np.flatnonzero(~fin)
    if cs.kind == "edges":
        I_all, J_all, E_all = cs.edge_arrays()
        for s in range(lo, hi, cells):
            e = min(hi, s + cells)
            I, J = I_all[s:e], J_all[s:e]  # noqa: E741
            ad = np.abs(take(F, I) - take(F, J))
            if u is None:
                yield I, J, E_all[s:e], ad
                continue
            if agg == "sum":
                val = u[fin] @ ad[fin] if fin.any() else np.zeros(I.size)
            elif agg == "sq":
                val = u[fin] @ ad[fin] ** 2 if fin.any() else np.zeros(I.size)
            else:
                val = (ad[fin] * u[fin][:, None]).max(axis=0, initial=0.0)
            if inf_rows.size:
                val = np.where((ad[inf_rows] > 0).any(axis=0), np.inf, val)
            yield I, J, E_all[s:e], val
        return
    N = cs.N
    r0 = lo
    while r0 < hi:
        ncols = N - r0
        r1 = min(hi, r0 + max(1, cells // max(ncols, 1)))
        E = cs.eps_rows(r0, r1)[:, r0:].copy()
        E[np.tril_indices(r1 - r0, 0, ncols)] = np.inf
        I, J = np.arange(r0, r1), np.arange(r0, N)  # noqa: E741
        Fb = take_range(F, r0, N)
        if u is None:
            yield I, J, E, Fb
        else:
            val = _loss(Fb[fin], r1 - r0, u[fin], agg)
            for kk in inf_rows:
                val[Fb[kk, : r1 - r0, None] != Fb[kk, None, :]] = np.inf
            yield I, J, E, val
        r0 = r1


def merge(results: list[PartResult], k: int, mode: str, m: int) -> PartResult:
    """Combine parts' results (max, top-k, per-row maxima; first part wins ties)."""
    best, worst, n = 0.0, None, 0
    top = TopK(k)
    c = np.zeros(m)
    ci = np.full(m, -1, np.int64)
    cj = np.full(m, -1, np.int64)
    for r in results:
        n += r.n
        if mode in ("lipschitz", "lipschitz_sq"):
            assert r.c is not None and r.ci is not None and r.cj is not None
            better = r.c > c
            c[better], ci[better], cj[better] = r.c[better], r.ci[better], r.cj[better]
            continue
        if r.worst is not None and (r.best > best or worst is None):
            best, worst = r.best, r.worst
        top.add(*r.top)
    if mode in ("lipschitz", "lipschitz_sq"):
        return PartResult(0.0, None, top.result(), c, ci, cj, n)
    return PartResult(best, worst, top.result(), None, None, None, n)


def l1_diameter(F: np.ndarray | sp.spmatrix | sp.sparray, *, max_signs: int = 2**11,
                memory_bytes: int = 2**28) -> float:
    """Global sensitivity ``Delta F = max_ij sum_k |F_ki - F_kj|`` (Definition 3) of a dense or
    sparse (m, N) matrix, never densifying F.

    For ``2^(m-1) <= max_signs``: the l1 norm is a maximum of linear forms,
    ``||x||_1 = max_{s in {-1, 1}^m} <s, x>``, so ``Delta F = max_s (max_i <s, F_i> - min_i <s, F_i>)``
    over the 2^(m-1) sign vectors with s_1 = 1 -- O(N 2^(m-1)) instead of O(N^2 m). Equal to the
    pairwise maximum up to rounding. Otherwise a blocked pairwise cityblock scan (O(N^2 m)).

    Examples
    --------
    >>> float(l1_diameter(np.array([[0.0, 1.0, 3.0], [2.0, 0.0, 0.0]])))
    5.0
    """
    m, N = F.shape  # type: ignore[union-attr]  # stubs: sparray lacks shape
    if N < 2:
        return 0.0
    if m == 1 or 2 ** (m - 1) <= max_signs:
        codes = np.arange(2 ** (m - 1))
        S = np.vstack([np.ones(codes.size), 1.0 - 2.0 * ((codes[None, :] >> np.arange(m - 1)[:, None]) & 1)])
        hi = np.full(S.shape[1], -np.inf)
        lo = np.full(S.shape[1], np.inf)
        C = sp.csc_array(F) if sp.issparse(F) else np.asarray(F, dtype=float)
        step = max(1, int(memory_bytes) // (8 * S.shape[1]))
        for c0 in range(0, N, step):
            block = C[:, c0:c0 + step]
            Y = np.asarray(block.T @ S)
            hi = np.maximum(hi, Y.max(axis=0))
            lo = np.minimum(lo, Y.min(axis=0))
        return float(np.max(hi - lo))
    X = (sp.csc_array(F).toarray() if sp.issparse(F) else np.asarray(F, dtype=float)).T
    rows = max(1, int(memory_bytes) // (8 * N * 2))
    from scipy.spatial.distance import cdist

    return max(float(cdist(X[s:s + rows], X, "cityblock").max()) for s in range(0, N, rows))
