"""An independent check of a Laplace design under a Euclidean budget: a quadtree pair bound.

Privacy condition checked (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for EVERY pair of
points, here with ``eps_ij = scale * ||p_i - p_j||_2``. This module shares no code with the
solvers' scans (no k-d tree, no budget oracle, no :class:`~solvers.constraints.ConstraintSet`):
it recomputes distances from the points, so a design that passed the solver's own certificate
can be checked a second time by other arithmetic.

The bound
---------
The points are sorted along a Morton (Z-order) curve of a grid over their bounding cube, so
every cell of every level of the quadtree (octree in 3-D) is a contiguous run of the sorted
points. For cells A and B with bounding boxes of their actual points at distance
``delta_AB`` and per-row ranges ``[lo_Ak, hi_Ak]`` of F, every i in A and j in B has::

    loss_ij / eps_ij <= UB(A, B) = sum_k u_k max(hi_Ak - lo_Bk, hi_Bk - lo_Ak)
                                   / (scale * (1 - rtol) * delta_AB)

(0/0 = 0, x/0 = inf). A cell pair with ``UB <= limit`` is certified as a whole; any other is
split into its children's pairs until it is small enough to evaluate pair by pair. Every pair
lies in exactly one certified or evaluated cell pair, so ``bound = max(largest certified UB,
largest exact ratio)`` is an upper bound on the ratio of every pair; the check holds when the
largest exact ratio is at most ``limit`` (``bound`` is then at most ``limit`` too).

Streaming: the cells of a coarse level are *chunks* (the points, their F columns and ids); a
task certifies one chunk against itself and its partner chunks, reading only those chunks. On a
Dask client the chunks are scattered to the workers in Morton order (neighbouring chunks on the
same worker) and the tasks run where their data lives; no process holds more than a few chunks
beyond its share.

Examples
--------
>>> import numpy as np
>>> P = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
>>> F = np.array([[0.0, 1.0, 1.0]])
>>> r = euclidean_pair_bound(P, F, np.array([1.0]), 1.0)
>>> (r.holds, float(r.max_exact))
(True, 1.0)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_SLACK = 1.0 + 1e-12  # rounding of the bound's sums, relative
_LEAF_PAIRS = 256  # cell pairs with at most this many point pairs are evaluated exactly
_BATCH = 2**16  # cell pairs per bound evaluation; point pairs per exact batch (times rows)


@dataclass
class PairBound:
    """Outcome of :func:`euclidean_pair_bound`. ``max_exact``: the largest ratio among pairs
    evaluated exactly, ``worst`` its pair (original indices); ``max_certified``: the largest
    bound of a cell pair certified as a whole; ``bound`` the larger of the two (an upper bound on
    every pair's ratio); ``holds``: ``max_exact <= limit``; ``pairs_exact`` pairs evaluated,
    ``cell_pairs`` cell pairs bounded, ``chunks`` / ``tasks`` of the streamed run."""

    max_exact: float
    worst: tuple[int, int] | None
    max_certified: float
    limit: float
    pairs_exact: int
    cell_pairs: int
    chunks: int = 0
    tasks: int = 0
    pairs_total: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def bound(self) -> float:
        return max(self.max_exact, self.max_certified)

    @property
    def holds(self) -> bool:
        return bool(self.max_exact <= self.limit)


@dataclass
class Chunk:
    """A coarse cell: its points in Morton order, their keys, F columns and original ids."""

    keys: np.ndarray
    P: np.ndarray
    F: np.ndarray
    ids: np.ndarray


def morton_keys(points: np.ndarray, bits: int) -> np.ndarray:
    """Morton keys of points on a 2^bits grid per dimension over their bounding cube."""
    P = np.asarray(points, float)
    N, D = P.shape
    lo = P.min(axis=0)
    ext = float((P.max(axis=0) - lo).max()) if N else 0.0
    if ext <= 0:
        return np.zeros(N, np.uint64)
    q = np.floor((P - lo) / ext * 2.0**bits)
    q = np.clip(q, 0, 2**bits - 1).astype(np.uint64)
    key = np.zeros(N, np.uint64)
    for b in range(bits):
        for d in range(D):
            bit = (q[:, d] >> np.uint64(b)) & np.uint64(1)
            key |= bit << np.uint64(b * D + d)
    return key


class _Levels:
    """The quadtree cells of one chunk, built level by level on demand: per level the cell
    codes, point ranges, bounding boxes, F ranges and child ranges."""

    def __init__(self, chunk: Chunk, D: int, bits: int, top: int) -> None:
        self.c, self.D, self.bits, self.top = chunk, D, bits, top
        self.cells: dict[int, dict[str, np.ndarray]] = {}

    def level(self, lev: int) -> dict[str, np.ndarray]:
        if lev not in self.cells:
            shift = np.uint64(self.D * (self.bits - lev))
            code = self.c.keys >> shift
            n = code.size
            starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]]) if n else np.zeros(0, int)
            ends = np.r_[starts[1:], n]
            P, F = self.c.P, self.c.F
            self.cells[lev] = {
                "code": code[starts], "s": starts, "e": ends,
                "plo": np.minimum.reduceat(P, starts, axis=0), "phi": np.maximum.reduceat(P, starts, axis=0),
                "flo": np.minimum.reduceat(F, starts, axis=1), "fhi": np.maximum.reduceat(F, starts, axis=1),
            }
        return self.cells[lev]

    def children(self, lev: int, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index ranges [a, b) at level lev + 1 of the children of cells idx of level lev."""
        parent = self.level(lev)["code"][idx]
        up = self.level(lev + 1)["code"] >> np.uint64(self.D)
        return np.searchsorted(up, parent, "left"), np.searchsorted(up, parent, "right")


def _cell_bound(A: dict[str, np.ndarray], B: dict[str, np.ndarray], ia: np.ndarray,
                ib: np.ndarray, u: np.ndarray, scale: float, rtol: float) -> np.ndarray:
    gap = np.maximum(np.maximum(B["plo"][ib] - A["phi"][ia], A["plo"][ia] - B["phi"][ib]), 0.0)
    dist = np.sqrt(np.einsum("pd,pd->p", gap, gap)) * scale * (1.0 - rtol)
    Dk = np.maximum(A["fhi"][:, ia] - B["flo"][:, ib], B["fhi"][:, ib] - A["flo"][:, ia])
    return _ratio(Dk, u, dist)


def _ratio(Dk: np.ndarray, u: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """sum_k u_k Dk / eps per column (u_k = inf counts where Dk > 0); 0/0 = 0, x/0 = inf."""
    fin = np.isfinite(u)
    num = u[fin] @ Dk[fin] if fin.any() else np.zeros(Dk.shape[1])
    if not fin.all():
        num = np.where((Dk[~fin] > 0).any(axis=0), np.inf, num)
    out = np.zeros(num.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(num, eps, out=out, where=num > 0)
    return out


def _product(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray, upper: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """All (x, y) with x in [a0, a1), y in [b0, b1) per row; where ``upper``, only x <= y
    (a cell paired with itself)."""
    na, nb = a1 - a0, b1 - b0
    cnt = na * nb
    tot = int(cnt.sum())
    if tot == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    row = np.repeat(np.arange(cnt.size), cnt)
    off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    x = a0[row] + off // nb[row]
    y = b0[row] + off % nb[row]
    keep = ~upper[row] | (x <= y)
    return x[keep], y[keep]


def _certify(A: _Levels, B: _Levels, same: bool, u: np.ndarray, scale: float, limit: float,
             rtol: float) -> tuple[float, tuple[int, int] | None, float, int, int]:
    """Certify every pair between chunks A and B (within A if ``same``): (largest exact ratio,
    its pair, largest certified bound, pairs evaluated, cell pairs bounded)."""
    best, worst, cert, n_exact, n_cells = 0.0, None, 0.0, 0, 0
    top = A.top
    stack = [(top, np.zeros(1, np.int64), np.zeros(1, np.int64))]
    while stack:
        lev, ia, ib = stack.pop()
        LA, LB = A.level(lev), B.level(lev)
        n_cells += ia.size
        ub = _cell_bound(LA, LB, ia, ib, u, scale, rtol) * _SLACK
        ok = ub <= limit
        if ok.any():
            cert = max(cert, float(ub[ok].max()))
        ia, ib = ia[~ok], ib[~ok]
        if ia.size == 0:
            continue
        na = LA["e"][ia] - LA["s"][ia]
        nb = LB["e"][ib] - LB["s"][ib]
        leaf = (na * nb <= _LEAF_PAIRS) | (lev == A.bits)
        if leaf.any():
            x, y = _product(LA["s"][ia[leaf]], LA["e"][ia[leaf]], LB["s"][ib[leaf]],
                            LB["e"][ib[leaf]], np.asarray(same & (ia[leaf] == ib[leaf])))
            if same:
                keep = x < y
                x, y = x[keep], y[keep]
            for s in range(0, x.size, _BATCH):
                r = _exact(A.c, B.c, x[s:s + _BATCH], y[s:s + _BATCH], u, scale)
                n_exact += r.size
                if r.size:
                    a = int(np.argmax(r))
                    if r[a] > best or worst is None:
                        best = float(r[a])
                        worst = (int(A.c.ids[x[s + a]]), int(B.c.ids[y[s + a]]))
        ia, ib = ia[~leaf], ib[~leaf]
        if ia.size == 0:
            continue
        a0, a1 = A.children(lev, ia)
        b0, b1 = B.children(lev, ib)
        ca, cb = _product(a0, a1, b0, b1, np.asarray(same & (ia == ib)))
        for s in range(0, ca.size, _BATCH):
            stack.append((lev + 1, ca[s:s + _BATCH], cb[s:s + _BATCH]))
    return best, worst, cert, n_exact, n_cells


def _exact(A: Chunk, B: Chunk, x: np.ndarray, y: np.ndarray, u: np.ndarray, scale: float
           ) -> np.ndarray:
    d = A.P[x] - B.P[y]
    eps = scale * np.sqrt(np.einsum("pd,pd->p", d, d))
    return _ratio(np.abs(A.F[:, x] - B.F[:, y]), u, eps)


def certify_chunk(chunk: Chunk, partners: list[Chunk], u: np.ndarray, scale: float, *,
                  limit: float, rtol: float, D: int, bits: int, top: int
                  ) -> tuple[float, tuple[int, int] | None, float, int, int]:
    """One task: the pairs within ``chunk`` and between it and each partner chunk."""
    A = _Levels(chunk, D, bits, top)
    best, worst, cert, n_exact, n_cells = _certify(A, A, True, u, scale, limit, rtol)
    for other in partners:
        r = _certify(A, _Levels(other, D, bits, top), False, u, scale, limit, rtol)
        if r[1] is not None and (r[0] > best or worst is None):
            best, worst = r[0], r[1]
        cert = max(cert, r[2])
        n_exact += r[3]
        n_cells += r[4]
    return best, worst, cert, n_exact, n_cells


def _chunks(P: np.ndarray, F: np.ndarray, keys: np.ndarray, order: np.ndarray, bounds: np.ndarray
            ) -> Iterator[Chunk]:
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        ids = order[s:e]
        yield Chunk(keys[s:e], P[ids], np.ascontiguousarray(F[:, ids]), ids)


def euclidean_pair_bound(points: np.ndarray, F: np.ndarray, u: np.ndarray, scale: float, *,
                         limit: float = 1.0 + 1e-9, rtol: float = 1e-9, client: Any = None,
                         chunk_points: int = 2**14, bits: int | None = None) -> PairBound:
    """Check ``sum_k u_k |F_ki - F_kj| <= limit * scale * ||p_i - p_j||`` for every pair.

    Parameters
    ----------
    points : (N, D) coordinates. F : (m, N) dense queries. u : (m,) precisions ``w * beta``
        (inf: an exact answer). scale : budget per unit of distance.
    limit : the largest ratio accepted (1 + the privacy tolerance). rtol : relative margin on
        the distance lower bounds (rounding).
    client : a ``distributed.Client``: chunks scattered in Morton order over its workers and
        one task per chunk; None: the same tasks in this process.
    chunk_points : about this many points per chunk (the coarse level is chosen from it).

    Returns
    -------
    :class:`PairBound` (``holds``: every pair within ``limit``).
    """
    P = np.asarray(points, float)
    if P.ndim == 1:
        P = P[:, None]
    Fa = np.asarray(F, float)
    uu = np.asarray(u, float).ravel()
    N, D = P.shape
    if Fa.shape != (uu.size, N) or not np.isfinite(P).all() or not np.isfinite(Fa).all():
        raise ValueError(f"pair bound: points (N, D), F (m, N) finite and u (m,) needed, got "
                         f"{P.shape}, {Fa.shape}, {uu.shape}")
    if np.isnan(uu).any() or (uu < 0).any() or not scale > 0:
        raise ValueError("pair bound: u must be >= 0 and scale > 0")
    bits = bits or min(20, 62 // D)
    keys = morton_keys(P, bits)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    top = 0
    while top < bits and N / 2 ** (D * top) > chunk_points:
        top += 1
    code = keys >> np.uint64(D * (bits - top))
    bounds = np.r_[np.flatnonzero(np.r_[True, code[1:] != code[:-1]]), N] if N else np.r_[0, 0]
    C = bounds.size - 1
    # chunk summaries: the coarse bound picks each chunk's partners (later chunks only)
    lo_p, hi_p = np.empty((C, D)), np.empty((C, D))
    lo_f, hi_f = np.empty((uu.size, C)), np.empty((uu.size, C))
    for c, (s, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        ids = order[s:e]
        lo_p[c], hi_p[c] = P[ids].min(axis=0), P[ids].max(axis=0)
        lo_f[:, c], hi_f[:, c] = Fa[:, ids].min(axis=1), Fa[:, ids].max(axis=1)
    S = {"plo": lo_p, "phi": hi_p, "flo": lo_f, "fhi": hi_f}
    partners: list[list[int]] = [[] for _ in range(C)]
    cert0, cells0 = 0.0, 0
    for a in range(C):
        b = np.arange(a + 1, C)
        if b.size == 0:
            continue
        ub = _cell_bound(S, S, np.full(b.size, a), b, uu, scale, rtol) * _SLACK
        cells0 += b.size
        ok = ub <= limit
        if ok.any():
            cert0 = max(cert0, float(ub[ok].max()))
        partners[a] = b[~ok].tolist()
    kw = dict(limit=limit, rtol=rtol, D=D, bits=bits, top=top)
    if client is None:
        chunks = list(_chunks(P, Fa, keys, order, bounds))
        results = [certify_chunk(chunks[a], [chunks[b] for b in partners[a]], uu, scale, **kw)
                   for a in range(C)]
    else:
        workers = sorted(client.scheduler_info()["workers"])
        per = -(-C // len(workers))
        futs: list[Any] = []
        gen = _chunks(P, Fa, keys, order, bounds)
        for w, wk in enumerate(workers):  # contiguous Morton runs: neighbours share a worker
            batch = [next(gen) for _ in range(min(per, C - w * per))]
            if batch:
                futs += client.scatter(batch, workers=[wk], hash=False)
        tasks = [client.submit(certify_chunk, futs[a], [futs[b] for b in partners[a]], uu, scale,
                               pure=False, **kw) for a in range(C)]
        results = client.gather(tasks)
        del futs, tasks
    best, worst, cert, n_exact, n_cells = 0.0, None, cert0, 0, cells0
    for r in results:
        if r[1] is not None and (r[0] > best or worst is None):
            best, worst = r[0], r[1]
        cert = max(cert, r[2])
        n_exact += r[3]
        n_cells += r[4]
    return PairBound(best, worst, cert, float(limit), n_exact, n_cells, chunks=C, tasks=C,
                     pairs_total=N * (N - 1) // 2)
