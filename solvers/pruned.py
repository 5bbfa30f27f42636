"""Exact pruned scans for metrics with a geometric index: dual-tree branch and bound.

Privacy condition checked (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every pair.
The scans answer "what is the maximum (or what are the k largest) of ``loss_ij / eps_ij`` over
ALL pairs" while computing only a small fraction of the N(N-1)/2 pairs exactly.

The bound (a proof, not a heuristic)
------------------------------------
A :class:`GeometricIndex` gives points ``phi_i`` in R^D and constants ``c >= 0``, ``rtol``, ``atol``
with, for every pair (as the budgets are actually computed, rounding included)::

    eps_ij >= g(||phi_i - phi_j||_2),   g(t) = c * max((1 - rtol) t - atol, 0)       (1)

(Euclidean: phi = the points, exact up to rounding; geodesic on the sphere or on WGS84: phi =
the 3-D Earth-centred coordinates in km -- a straight chord is never longer than the geodesic).
The points are held in a balanced k-d tree; every node A has a bounding box and, per query row
k, the range ``[lo_Ak, hi_Ak]`` of ``F_k`` over its elements. For i in A and j in B:

    ||phi_i - phi_j|| >= delta_AB := dist(box_A, box_B)   so   eps_ij >= g(delta_AB)  (g rises)
    |F_ki - F_kj| <= D_k(A, B) := max(hi_Ak - lo_Bk, hi_Bk - lo_Ak)

hence ``loss_ij / eps_ij <= UB(A, B) := sum_k u_k D_k(A, B) / g(delta_AB)`` (``max_k`` instead
of ``sum_k`` for agg="max"; per row for the Lipschitz constants), with 0/0 = 0 (every pair in
A x B then has loss 0) and x/0 = inf (never skipped). The scan starts from the exact ratios
of near pairs (:meth:`GeometricIndex.seed_pairs`: neighbours in the k-d tree's leaves), so it
always holds a threshold ``t`` achieved by pairs it has evaluated (the running maximum, or the
k-th largest for a top-k scan). A node pair with ``UB(A, B) <= t`` cannot contain a pair that
raises the maximum (or enters the top k above t), and is skipped; every other node pair is
split until its leaves are evaluated pair by pair.
The result therefore equals the full scan over all pairs. Floating point: D_k and delta_AB are
computed from the actual extreme values with monotone rounding (node ranges are stored in
float32 rounded outward, so they still contain every value), UB is enlarged by 1e-12
relative (exact sums may round in another order), and (1) carries the metric's rtol/atol.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from solvers.operand import segment_minmax, take
from solvers.scan_types import ScanResult, TopK, safe_ratio

logger = logging.getLogger(__name__)

PairEps = Callable[[np.ndarray, np.ndarray], np.ndarray]
_UB_SLACK = 1.0 + 1e-12
_NODE_CELLS = 2**19  # node pairs x query rows per bound evaluation
_PAIR_CHUNK = 2**18  # exact pair evaluations per batch (times m)


@dataclass(eq=False)
class GeometricIndex:
    """Points phi (N, D) with ``eps_ij >= scale * max((1 - rtol) ||phi_i - phi_j|| - atol, 0)``
    for every pair (bound (1) of this module). ``all_finite``: every eps_ij is finite (the set
    then has N(N-1)/2 constraints). ``min_n``: below this many elements a full scan is cheaper
    and is used instead (None: ``solvers.constraints.PRUNE_MIN_N``). :func:`min_positive_eps`
    also assumes eps_ij = 0 when phi_i = phi_j.
    The k-d tree is built on first use and kept.

    Examples
    --------
    >>> idx = GeometricIndex(np.array([[0.0], [1.0], [3.0]]), scale=2.0)
    >>> float(idx.lower(np.array([1.0]))[0]) <= 2.0
    True
    """

    points: np.ndarray
    scale: float
    rtol: float = 1e-9
    atol: float = 0.0
    leafsize: int = 16
    all_finite: bool = False
    min_n: int | None = None
    _tree: _Tree | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        P = np.array(self.points, dtype=float)
        if P.ndim == 1:
            P = P[:, None]
        if P.ndim != 2 or not np.isfinite(P).all():
            raise ValueError("GeometricIndex points must be a finite (N, D) array")
        P.setflags(write=False)
        self.points = P
        if not (self.scale >= 0 and self.rtol >= 0 and self.atol >= 0):
            raise ValueError("GeometricIndex: scale, rtol and atol must be >= 0")

    @property
    def N(self) -> int:  # noqa: N802
        return int(self.points.shape[0])

    def lower(self, t: np.ndarray) -> np.ndarray:
        """The lower bound g(t) of (1) on eps for embedded distance t."""
        return self.scale * np.maximum((1.0 - self.rtol) * t - self.atol, 0.0)

    @property
    def tree(self) -> _Tree:
        if self._tree is None:
            t0 = time.perf_counter()
            self._tree = _Tree(self.points, self.leafsize)
            logger.debug("k-d tree on %d points, %d levels, %.3f s", self.N, self._tree.L,
                         time.perf_counter() - t0)
        return self._tree

    def seed_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Near pairs (i < j) that give a pruned scan its first threshold (see
        :meth:`_Tree.seed_positions`)."""
        pa, pb = self.tree.seed_positions(0, self.N)
        i, j = self.tree.perm[pa], self.tree.perm[pb]
        return np.minimum(i, j), np.maximum(i, j)


class _Tree:
    """Perfect binary k-d tree over a permutation of the points: node t of level l holds the
    positions ``[floor(t N / 2^l), floor((t + 1) N / 2^l))``; leaves (level L) hold <= leafsize."""

    def __init__(self, P: np.ndarray, leafsize: int) -> None:
        N, D = P.shape
        L = 0
        while -(-N // 2**L) > max(leafsize, 2):
            L += 1
        # Each level splits every node at its middle position along its widest side. Points
        # are ordered within a node by their global rank along that side (ties by index), so
        # one sort of integer keys (node * N + rank) per level orders every node at once; the
        # coordinates and ranks are carried along in the current order (1-D, contiguous).
        xs = [np.ascontiguousarray(P[:, d]) for d in range(D)]
        ranks = []
        for d in range(D):
            r = np.empty(N, np.int64)
            r[np.argsort(xs[d], kind="stable")] = np.arange(N)
            ranks.append(r)
        perm = np.arange(N)
        for lev in range(L):
            b = self.starts(N, lev)
            ext = np.stack([np.maximum.reduceat(x, b) - np.minimum.reduceat(x, b) for x in xs])
            seg = np.repeat(np.arange(b.size, dtype=np.int64), np.diff(np.append(b, N)))
            side = np.argmax(ext, axis=0)[seg]
            r = ranks[0].copy()
            for d in range(1, D):
                np.copyto(r, ranks[d], where=side == d)
            key = seg * N + r
            del seg, side, r
            order = np.argsort(key)
            del key
            perm = perm[order]
            xs = [x[order] for x in xs]
            ranks = [r[order] for r in ranks]
            del order
        del ranks
        self.N, self.L, self.perm = N, L, perm
        leaf = self.starts(N, L)
        lo = [np.stack([np.minimum.reduceat(x, leaf) for x in xs], axis=1)]
        hi = [np.stack([np.maximum.reduceat(x, leaf) for x in xs], axis=1)]
        del xs
        for _ in range(L):
            lo.append(lo[-1].reshape(-1, 2, P.shape[1]).min(axis=1))
            hi.append(hi[-1].reshape(-1, 2, P.shape[1]).max(axis=1))
        self.lo, self.hi = lo[::-1], hi[::-1]  # per level, root first
        self.leaf_size = int(np.diff(np.append(leaf, N)).max())  # elements of the largest leaf

    @staticmethod
    def starts(N: int, lev: int) -> np.ndarray:
        t = np.arange(2**lev, dtype=np.int64)
        return (t * N) // 2**lev

    def seed_positions(self, p0: int, p1: int) -> tuple[np.ndarray, np.ndarray]:
        """The seed pairs starting at tree positions ``p0 <= p < p1``, as positions (p, p + 1):
        within each leaf, the elements at offsets 2q and 2q + 1 from the leaf's start. A leaf
        is a small box sorted along one side, so these are near pairs (about N / 2 in all, each
        element in at most one): they give a pruned scan a first threshold for the price of one
        pass over the elements, with no neighbour search."""
        starts = self.starts(self.N, self.L)
        p = np.arange(max(p0, 0), min(p1, self.N), dtype=np.int64)
        leaf = np.searchsorted(starts, p, side="right") - 1
        end = np.append(starts[1:], self.N)[leaf]
        p = p[((p - starts[leaf]) % 2 == 0) & (p + 1 < end)]
        return p, p + 1

    def f_ranges(self, F: np.ndarray | sp.csc_array) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per level (root first): per row min and max of F over each node, (m, 2^l) arrays."""
        lo, hi = segment_minmax(F, self.perm, self.starts(self.N, self.L))
        lo, hi = _outward32(lo, -np.inf), _outward32(hi, np.inf)  # half the memory, still bounds
        los, his = [lo], [hi]
        for _ in range(self.L):
            los.append(np.minimum(los[-1][:, 0::2], los[-1][:, 1::2]))
            his.append(np.maximum(his[-1][:, 0::2], his[-1][:, 1::2]))
        return los[::-1], his[::-1]

    def box_lower(self, lev: int, a: np.ndarray, b: np.ndarray, index: GeometricIndex) -> np.ndarray:
        lo, hi = self.lo[lev], self.hi[lev]
        gap = np.maximum(np.maximum(lo[b] - hi[a], lo[a] - hi[b]), 0.0)
        return index.lower(np.sqrt(np.einsum("pd,pd->p", gap, gap)))

    def leaf_positions(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All element pairs of the leaf pairs (a, b), a <= b (a == b: the pairs within), as
        tree positions (element ``perm[p]`` sits at position p)."""
        S = self.leaf_size
        starts = self.starts(self.N, self.L)
        size = np.diff(np.append(starts, self.N))
        off = np.arange(S)
        I = np.broadcast_to((starts[a][:, None] + off)[:, :, None], (a.size, S, S))  # noqa: E741
        J = np.broadcast_to((starts[b][:, None] + off)[:, None, :], (a.size, S, S))
        valid = ((off[None, :] < size[a][:, None])[:, :, None]
                 & (off[None, :] < size[b][:, None])[:, None, :])
        tri = np.triu(np.ones((S, S), bool), 1)
        valid &= np.where((a == b)[:, None, None], tri[None], True)
        return I[valid], J[valid]


def _outward32(x: np.ndarray, toward: float) -> np.ndarray:
    """float32 copy of x rounded toward ``toward`` (-inf: never above x; +inf: never below), so
    node ranges stay valid bounds; values beyond float32's range become +-inf (no pruning)."""
    with np.errstate(over="ignore"):
        y = x.astype(np.float32)
    off = (y > x) if toward < 0 else (y < x)
    return np.where(off, np.nextafter(y, np.float32(toward)), y)


def _children(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Child node pairs at the next level: 4 for a < b, 3 (no mirror) for a == b."""
    same = a == b
    ca = np.concatenate([2 * a, 2 * a, 2 * a + 1, (2 * a + 1)[~same]])
    cb = np.concatenate([2 * b, 2 * b + 1, 2 * b + 1, (2 * b)[~same]])
    return ca, cb


def tree_columns(F: np.ndarray | sp.csc_array, perm: np.ndarray) -> np.ndarray | None:
    """F's columns in tree order as the rows of a C-contiguous (N, m) array (dense F only, else
    None): row p holds column ``perm[p]``. One element's m values are adjacent, and the
    elements of a leaf (and of a subtree) are adjacent rows, so the pairs of a leaf pair read a
    few contiguous runs instead of scattered rows. Built one query row at a time."""
    if not isinstance(F, np.ndarray):
        return None
    m, N = F.shape
    cols = np.empty((N, m), dtype=float)
    for k in range(m):
        cols[:, k] = F[k][perm]
    return cols


class _Evaluator:
    """Exact ratios of given pairs (the same arithmetic as the full scan), the pairs given by
    their tree positions. ``cols``: F's columns in tree order from :func:`tree_columns` (dense
    F; computed here if not given; F itself is then only read for its shape); a sparse F is
    read by element index."""

    def __init__(self, F: np.ndarray | sp.csc_array, pair_eps: PairEps, u: np.ndarray | None,
                 agg: str, perm: np.ndarray, cols: np.ndarray | None = None) -> None:
        self.F, self.pair_eps, self.agg, self.perm = F, pair_eps, agg, perm
        self.cols = cols if cols is not None else tree_columns(F, perm)
        self.u = u
        if u is not None:
            self.fin = np.isfinite(u)
            self.uf = u[self.fin]
            self.all_fin = bool(self.fin.all())
        self.count = 0

    def pairs(self, pi: np.ndarray, pj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The element pairs (i < j) at tree positions (pi, pj)."""
        i, j = self.perm[pi], self.perm[pj]
        return np.minimum(i, j), np.maximum(i, j)

    def absdiff_t(self, pi: np.ndarray, pj: np.ndarray, i: np.ndarray, j: np.ndarray
                  ) -> np.ndarray:
        """|F_ki - F_kj| as a (P, m) array (pairs by rows); (pi, pj) their tree positions."""
        if self.cols is not None:  # in place: one (P, m) array instead of four
            d = self.cols[pi]
            d -= self.cols[pj]
            return np.abs(d, out=d)
        return np.abs(take(self.F, i) - take(self.F, j)).T

    def ratios(self, pi: np.ndarray, pj: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(i, j, loss_ij / eps_ij) of the pairs at tree positions (pi, pj), i < j; ratio -1
        for unconstrained (eps = inf) pairs."""
        self.count += pi.size
        i, j = self.pairs(pi, pj)
        ad = self.absdiff_t(pi, pj, i, j)
        assert self.u is not None
        live = ad if self.all_fin else ad[:, self.fin]
        if self.agg == "sum":
            num = live @ self.uf if self.uf.size else np.zeros(i.size)
        elif self.agg == "sq":
            num = live**2 @ self.uf if self.uf.size else np.zeros(i.size)
        else:
            num = (live * self.uf[None, :]).max(axis=1, initial=0.0)
        if not self.all_fin:
            num = np.where((ad[:, ~self.fin] > 0).any(axis=1), np.inf, num)
        eps = self.pair_eps(i, j)
        r = safe_ratio(num, eps)
        return i, j, np.where(eps < np.inf, r, -1.0)

    def row_ratios(self, pi: np.ndarray, pj: np.ndarray, power: int = 1
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(i, j, |F_ki - F_kj|^power / eps_ij per row (m, P)) of the pairs at tree positions
        (pi, pj), i < j; -1 for unconstrained pairs."""
        self.count += pi.size
        i, j = self.pairs(pi, pj)
        eps = self.pair_eps(i, j)
        ad = self.absdiff_t(pi, pj, i, j).T
        r = safe_ratio(ad**power if power != 1 else ad, eps[None, :])
        return i, j, np.where(eps[None, :] < np.inf, r, -1.0)


def _node_bound(D: np.ndarray, u: np.ndarray, agg: str) -> np.ndarray:
    fin = np.isfinite(u)
    if agg == "sum":
        num = u[fin] @ D[fin]
    elif agg == "sq":  # (F_ki - F_kj)^2 <= D_k^2: D_k >= |F_ki - F_kj| >= 0
        num = u[fin] @ D[fin] ** 2
    else:
        num = (D[fin] * u[fin][:, None]).max(axis=0, initial=0.0)
    if not fin.all():
        num = np.where((D[~fin] > 0).any(axis=0), np.inf, num)
    return num


Roots = tuple[int, np.ndarray, np.ndarray]  # (level, node a's, node b's) to start a walk from
Ranges = tuple[list[np.ndarray], list[np.ndarray]]  # per level, per row min / max of F per node


def _traverse(index: GeometricIndex, F: np.ndarray | sp.csc_array,
              keep_fn: Callable[[int, np.ndarray, np.ndarray, np.ndarray], np.ndarray],
              leaf_fn: Callable[[np.ndarray, np.ndarray], None], *,
              ranges: Ranges | None = None, roots: Roots | None = None) -> int:
    """Depth-first dual-tree walk; ``keep_fn(level, a, b, D)`` says which node pairs may hold a
    better pair (D = the row bounds D_k(A, B), shape (m, P)); surviving leaf pairs go to
    ``leaf_fn`` as pairs of tree positions. ``roots``: the node pairs to start from (default: every node
    pair of level min(L, 3), i.e. all pairs); ``ranges``: ``tree.f_ranges(F)`` if already
    computed. Returns the number of node pairs bounded."""
    tree = index.tree
    flo, fhi = ranges if ranges is not None else tree.f_ranges(F)
    stack = [roots if roots is not None else root_pairs(index)]
    visited = 0
    while stack:
        lev, a, b = stack.pop()
        visited += a.size
        hi_a, hi_b = fhi[lev][:, a].astype(float), fhi[lev][:, b].astype(float)
        D = np.maximum(hi_a - flo[lev][:, b], hi_b - flo[lev][:, a])
        keep = keep_fn(lev, a, b, D)
        a, b = a[keep], b[keep]
        if a.size == 0:
            continue
        if lev == tree.L:
            S = tree.leaf_size
            step = max(1, _PAIR_CHUNK // (S * S))
            for c in range(0, a.size, step):
                leaf_fn(*tree.leaf_positions(a[c:c + step], b[c:c + step]))
            continue
        ca, cb = _children(a, b)
        step = max(256, _NODE_CELLS // max(F.shape[0], 1))
        for c in range(0, ca.size, step):
            stack.append((lev + 1, ca[c:c + step], cb[c:c + step]))
    return visited


def root_pairs(index: GeometricIndex, level: int = 3) -> Roots:
    """Every node pair (a <= b) of level ``min(L, level)``: together they hold every pair."""
    s = min(index.tree.L, level)
    a0, b0 = np.triu_indices(2**s)
    return s, a0.astype(np.int64), b0.astype(np.int64)


def split_roots(index: GeometricIndex, n_parts: int) -> list[Roots]:
    """Cut the node pairs of one level into about ``n_parts`` groups that together hold every
    pair once (for engines: each group is one independent part of a pruned scan). The level is
    the first with at least 8 node pairs per part; groups take every n-th pair so that the
    costly near-diagonal pairs spread over all parts."""
    n_parts = max(1, int(n_parts))
    level = 3
    while level < index.tree.L and 2**level * (2**level + 1) // 2 < 8 * n_parts:
        level += 1
    s, a, b = root_pairs(index, level)
    return [(s, a[g::n_parts], b[g::n_parts]) for g in range(min(n_parts, a.size))]


def _batches(i: np.ndarray, j: np.ndarray, m: int):  # noqa: ANN202
    step = max(1, _PAIR_CHUNK * 4 // max(m, 1))
    for c in range(0, i.size, step):
        yield i[c:c + step], j[c:c + step]


def pruned_scan(index: GeometricIndex, F: np.ndarray | sp.csc_array, u: np.ndarray,
                pair_eps: PairEps, n_pairs: int, *, k: int = 0, agg: str = "sum") -> ScanResult:
    """Maximum and k largest of ``loss_ij / eps_ij`` over all pairs, by branch and bound.

    Parameters
    ----------
    index : the metric's geometric index (bound (1) must hold for ``pair_eps``).
    F : (m, N) dense or CSC query matrix. u : (m,) precisions (inf allowed).
    pair_eps : exact budgets of given pairs (i, j) -> eps_ij (inf = unconstrained).
    n_pairs : number of constrained pairs (reported). k : how many top pairs to return.
    agg : "sum" (Laplace, Theorem 1), "sq" (Gaussian: ``sum_k u_k (F_ki - F_kj)^2``, bounded
        by ``sum_k u_k D_k(A, B)^2``) or "max" (exponential mechanisms).

    Returns
    -------
    ScanResult equal to the full scan's (the top-k may omit pairs of ratio 0).
    """
    t0 = time.perf_counter()
    cols = tree_columns(F, index.tree.perm)  # once for both steps
    seed, n0 = seed_scan(index, F, u, pair_eps, (0, index.N), k=k, agg=agg, cols=cols)
    top, n1, visited = walk_scan(index, F, u, pair_eps, seed, k=k, agg=agg, cols=cols)
    logger.debug("pruned scan: N=%d m=%d k=%d, %d node pairs, %d of %d pairs exact, %.3f s",
                 index.N, F.shape[0], k, visited, n0 + n1, n_pairs, time.perf_counter() - t0)
    return scan_result([top], n_pairs, k, n0 + n1)


TopArrays = tuple[np.ndarray, np.ndarray, np.ndarray]  # (i, j, ratio) of a running top k


def seed_scan(index: GeometricIndex, F: np.ndarray | sp.csc_array, u: np.ndarray,
              pair_eps: PairEps, span: tuple[int, int], *, k: int, agg: str,
              cols: np.ndarray | None = None) -> tuple[TopArrays, int]:
    """The max(k, 1) largest exact ratios among the seed pairs of the tree positions ``span``
    (the pairs that give a pruned scan its first threshold) and the number of pairs evaluated.
    ``cols``: :func:`tree_columns` of F, if already computed."""
    ev = _Evaluator(F, pair_eps, u, agg, index.tree.perm, cols)
    top = TopK(max(int(k), 1))
    for pi, pj in _batches(*index.tree.seed_positions(*span), F.shape[0]):
        top.add(*ev.ratios(pi, pj))
    return top.result(), ev.count


def walk_scan(index: GeometricIndex, F: np.ndarray | sp.csc_array, u: np.ndarray,
              pair_eps: PairEps, seed: TopArrays, *, k: int, agg: str,
              roots: Roots | None = None, ranges: Ranges | None = None,
              cols: np.ndarray | None = None) -> tuple[TopArrays, int, int]:
    """The branch and bound of :func:`pruned_scan` from the threshold of ``seed`` (pairs already
    evaluated) over the node pairs ``roots`` (default all): the max(k, 1) largest ratios of the
    seed and of the pairs under ``roots``, pairs evaluated, node pairs bounded. ``cols``:
    :func:`tree_columns` of F, if already computed."""
    ev = _Evaluator(F, pair_eps, u, agg, index.tree.perm, cols)
    top = TopK(max(int(k), 1))
    top.add(*seed)
    m = F.shape[0]

    def leaf_fn(pi: np.ndarray, pj: np.ndarray) -> None:
        for bi, bj in _batches(pi, pj, m):
            top.add(*ev.ratios(bi, bj))

    def keep_fn(lev: int, a: np.ndarray, b: np.ndarray, D: np.ndarray) -> np.ndarray:
        ub = safe_ratio(_node_bound(D, u, agg), index.tree.box_lower(lev, a, b, index))
        return ub * _UB_SLACK > top.threshold()

    visited = _traverse(index, F, keep_fn, leaf_fn, ranges=ranges, roots=roots)
    return top.result(), ev.count, visited


def scan_result(tops: list[TopArrays], n_pairs: int, k: int, evaluated: int) -> ScanResult:
    """Merge the top-k lists of a scan's parts (each holding the seed) into its ScanResult."""
    top = TopK(max(int(k), 1))
    for t in tops:
        top.add(*t)
    ti, tj, tr = top.result()
    best = float(tr[0]) if tr.size else 0.0
    worst = (int(ti[0]), int(tj[0])) if tr.size and n_pairs else None
    keep = max(int(k), 0)
    return ScanResult(best, worst, (ti[:keep], tj[:keep], tr[:keep]), n_pairs, evaluated, "pruned")


LipArrays = tuple[np.ndarray, np.ndarray, np.ndarray]  # per row: c_k, and its pair (i_k, j_k)


def pruned_row_lipschitz(index: GeometricIndex, F: np.ndarray | sp.csc_array, pair_eps: PairEps,
                         power: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per row k: ``c_k = max_ij |F_ki - F_kj|^power / eps_ij`` and its pair, by branch and bound
    (per-row bound ``D_k(A, B)^power / g(delta_AB)``). Returns (c, i, j, pairs evaluated)."""
    t0 = time.perf_counter()
    cols = tree_columns(F, index.tree.perm)
    seed, n0 = seed_lipschitz(index, F, pair_eps, (0, index.N), power=power, cols=cols)
    (c, bi, bj), n1, visited = walk_lipschitz(index, F, pair_eps, seed, power=power, cols=cols)
    logger.debug("pruned row Lipschitz: N=%d m=%d, %d node pairs, %d pairs exact, %.3f s",
                 index.N, F.shape[0], visited, n0 + n1, time.perf_counter() - t0)
    return c, bi, bj, n0 + n1


def _lip_update(state: LipArrays, R: np.ndarray, pi: np.ndarray, pj: np.ndarray) -> None:
    c, bi, bj = state
    if R.shape[1] == 0:
        return
    m = R.shape[0]
    arg = np.argmax(R, axis=1)
    val = R[np.arange(m), arg]
    better = val > c
    c[better] = val[better]
    bi[better], bj[better] = pi[arg[better]], pj[arg[better]]


def seed_lipschitz(index: GeometricIndex, F: np.ndarray | sp.csc_array, pair_eps: PairEps,
                   span: tuple[int, int], *, power: int = 1, cols: np.ndarray | None = None
                   ) -> tuple[LipArrays, int]:
    """Per-row maxima of ``|F_ki - F_kj|^power / eps_ij`` over the seed pairs of the tree
    positions ``span`` (and their pairs)."""
    m = F.shape[0]
    state = (np.zeros(m), np.full(m, -1, np.int64), np.full(m, -1, np.int64))
    ev = _Evaluator(F, pair_eps, None, "sum", index.tree.perm, cols)
    for pi, pj in _batches(*index.tree.seed_positions(*span), m):
        i, j, R = ev.row_ratios(pi, pj, power)
        _lip_update(state, R, i, j)
    return state, ev.count


def walk_lipschitz(index: GeometricIndex, F: np.ndarray | sp.csc_array, pair_eps: PairEps,
                   seed: LipArrays, *, power: int = 1, roots: Roots | None = None,
                   ranges: Ranges | None = None, cols: np.ndarray | None = None
                   ) -> tuple[LipArrays, int, int]:
    """The branch and bound of :func:`pruned_row_lipschitz` from ``seed`` over ``roots``
    (default all node pairs): per-row maxima, pairs evaluated, node pairs bounded."""
    m = F.shape[0]
    state = (seed[0].copy(), seed[1].copy(), seed[2].copy())
    ev = _Evaluator(F, pair_eps, None, "sum", index.tree.perm, cols)

    def leaf_fn(pi: np.ndarray, pj: np.ndarray) -> None:
        for bi, bj in _batches(pi, pj, m):
            i, j, R = ev.row_ratios(bi, bj, power)
            _lip_update(state, R, i, j)

    def keep_fn(lev: int, a: np.ndarray, b: np.ndarray, D: np.ndarray) -> np.ndarray:
        ub = safe_ratio(D**power if power != 1 else D, index.tree.box_lower(lev, a, b, index)[None, :])
        return np.asarray((ub * _UB_SLACK > state[0][:, None]).any(axis=0))

    visited = _traverse(index, F, keep_fn, leaf_fn, ranges=ranges, roots=roots)
    return state, ev.count, visited


def merge_lipschitz(parts: list[LipArrays]) -> LipArrays:
    """Per-row maxima of the parts' results (the first part wins ties)."""
    c, bi, bj = (parts[0][0].copy(), parts[0][1].copy(), parts[0][2].copy())
    for pc, pi, pj in parts[1:]:
        better = pc > c
        c[better], bi[better], bj[better] = pc[better], pi[better], pj[better]
    return c, bi, bj


def min_positive_eps(index: GeometricIndex, pair_eps: PairEps) -> float:
    """Smallest positive eps_ij over all pairs (inf if none), exactly: the nearest neighbours of
    the distinct points give an upper bound b; by (1) every pair with eps_ij <= b has
    ``||phi_i - phi_j|| <= (b / scale + atol) / (1 - rtol)``, and all such pairs are evaluated."""
    P = index.points
    uniq, first = np.unique(P, axis=0, return_index=True)
    if uniq.shape[0] < 2:
        return float("inf")
    from scipy.spatial import cKDTree

    tree = cKDTree(uniq)
    nb = np.asarray(tree.query(uniq, k=2)[1])
    i, j = first, first[nb[:, 1]]
    e = pair_eps(np.minimum(i, j), np.maximum(i, j))
    e = e[(e > 0) & (e < np.inf)]
    best = float(e.min()) if e.size else np.inf
    if index.scale <= 0 or not np.isfinite(best):
        return best  # pragma: no cover - no usable bound; every budget is 0 or inf
    r = (best / index.scale + index.atol) / (1.0 - index.rtol)
    pairs = tree.query_pairs(r * (1 + 1e-12), output_type="ndarray")
    if pairs.size:
        a, b = first[pairs[:, 0]], first[pairs[:, 1]]
        e = pair_eps(np.minimum(a, b), np.maximum(a, b))
        e = e[(e > 0) & (e < np.inf)]
        if e.size:
            best = min(best, float(e.min()))
    return best
