"""Pair constraint sets and the blocked scan over them (problem (4); docs/theory.md).

Privacy condition (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every constrained pair.
A pair with ``eps_ij = +inf`` imposes nothing; ``eps_ij = 0`` forces ``F[:, i] == F[:, j]``.

Three shapes of constraint set share one interface:

* ``dense``: all pairs i < j of an (N, N) budget matrix;
* ``oracle``: all pairs, but the budget rows are computed on demand (N too large to store);
* ``edges``: the edges of a graph whose shortest-path metric is d_X; by docs/theory.md the edge
  constraints imply all pair constraints, because the realised loss is a pseudometric.

Scans never build an N x N x m array. How "the maximum ratio over all pairs" is answered is a
strategy behind :meth:`ConstraintSet.scan` and :meth:`ConstraintSet.row_lipschitz`, chosen by what
the set offers: an exact branch and bound when a :class:`GeometricIndex` is attached
(:mod:`solvers.pruned`, the bound is proved there), else the distance-kernel full scan of
:mod:`solvers.kernel_scan`, serially or on an engine (local processes, Dask;
:mod:`solvers.distributed`). Every scan is counted in :attr:`ConstraintSet.stats`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import scipy.sparse as sp

from solvers import kernel_scan, pruned
from solvers.errors import InfeasibleError, SolverError
from solvers.operand import as_operand, take
from solvers.pruned import GeometricIndex
from solvers.scan_types import Block, ScanResult, ScanStats, TopK, given, safe_ratio

if TYPE_CHECKING:
    from scipy.sparse._base import _spbase  # public sp.sparray / sp.spmatrix lack toarray in the stubs

__all__ = ["Block", "ConstraintSet", "GeometricIndex", "ScanResult", "as_query_matrix",
           "safe_ratio"]
_given = given
_TopK = TopK
#: With a geometric index, scans are pruned from this many elements on (full scans are as fast
#: below it); a GeometricIndex may set its own ``min_n``.
PRUNE_MIN_N = 4000


def as_query_matrix(F: object, N: int | None = None) -> np.ndarray:
    """Return F as a dense finite float (m, N) array (scipy.sparse is densified), or raise.
    The scans take F sparse as well (:func:`solvers.operand.as_operand`)."""
    if sp.issparse(F):
        F = cast("_spbase", F).toarray()
    A = as_operand(F, N)
    assert isinstance(A, np.ndarray)
    return A


_SLOTS = ("_eps", "_I", "_J", "_E", "_keys", "_block", "_pair", "_n", "_index", "_engine",
          "_stats")


class ConstraintSet:
    """Immutable set of pairs (i, j, eps_ij), i < j, that must satisfy
    ``sum_k u_k |F_ki - F_kj| <= eps_ij`` (Theorem 1). Build with :meth:`dense`, :meth:`edges`
    or :meth:`oracle`; attach a spatial index with :meth:`with_index` (exact pruned scans) or an
    engine with :meth:`with_engine` (parallel full scans)."""

    __slots__ = ("N", "kind") + _SLOTS

    N: int  # set via object.__setattr__; dense fills _eps, edges _I/_J/_E/_keys, oracle _block
    kind: str
    _eps: np.ndarray | None
    _I: np.ndarray | None
    _J: np.ndarray | None
    _E: np.ndarray | None
    _keys: np.ndarray | None
    _block: Callable[[np.ndarray], np.ndarray] | None
    _pair: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    _n: int | None
    _index: GeometricIndex | None
    _engine: Any
    _stats: ScanStats

    def __init__(self, N: int, kind: str) -> None:
        object.__setattr__(self, "N", int(N))
        object.__setattr__(self, "kind", kind)
        for name in _SLOTS:
            object.__setattr__(self, name, None)
        object.__setattr__(self, "_stats", ScanStats())

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ConstraintSet is immutable")

    def __getstate__(self) -> dict[str, object]:  # engines pickle the set (not its counter)
        return {k: getattr(self, k) for k in ("N", "kind") + _SLOTS if k not in ("_stats", "_engine")}

    def __setstate__(self, state: dict[str, object]) -> None:
        for k in _SLOTS:
            object.__setattr__(self, k, None)
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_stats", ScanStats())

    def __repr__(self) -> str:
        n = self._n if self._n is not None else "?"
        extra = ", indexed" if self._index is not None else ""
        return f"ConstraintSet(kind={self.kind!r}, N={self.N}, n_constraints={n}{extra})"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def dense(cls, eps: np.ndarray) -> ConstraintSet:
        """All pairs i < j of a symmetric (N, N) budget matrix; +inf = no constraint."""
        E = np.array(eps, dtype=float)
        if E.ndim != 2 or E.shape[0] != E.shape[1]:
            raise SolverError(f"eps must be a square (N, N) matrix, got shape {E.shape}")
        _check_budget(E, "eps")
        if not np.array_equal(E, E.T):
            d = np.abs(np.where(np.isinf(E) & np.isinf(E.T), 0, E - E.T))
            i, j = np.unravel_index(np.nanargmax(np.where(np.isnan(d), np.inf, d)), d.shape)
            raise SolverError(
                f"eps must be symmetric: eps[{i}, {j}] = {E[i, j]} but eps[{j}, {i}] = {E[j, i]}"
            )
        E.setflags(write=False)
        cs = cls(E.shape[0], "dense")
        object.__setattr__(cs, "_eps", E)
        return cs

    @classmethod
    def edges(cls, i: np.ndarray, j: np.ndarray, eps: np.ndarray, N: int) -> ConstraintSet:
        """Edge list of a graph whose shortest-path metric is d_X (paper §5; docs/theory.md):
        enforcing the edges enforces every pair. Duplicate edges keep the smallest budget; +inf
        edges drop."""
        i = np.asarray(i, dtype=np.int64).ravel()
        j = np.asarray(j, dtype=np.int64).ravel()
        e = np.asarray(eps, dtype=float).ravel()
        if e.size == 1 and i.size != 1:
            e = np.full(i.size, e[0])
        if not (i.size == j.size == e.size):
            raise SolverError(f"edges: i, j, eps lengths differ ({i.size}, {j.size}, {e.size})")
        if i.size and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= N):
            raise SolverError(f"edges: vertex index outside [0, {N})")
        if np.any(i == j):
            raise SolverError(f"edges: self-loop at vertex {int(i[i == j][0])}")
        _check_budget(e, "edge eps")
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        fin = e < np.inf
        lo, hi, e = lo[fin], hi[fin], e[fin]
        keys = lo * N + hi
        order = np.lexsort((e, keys))
        keys, e = keys[order], e[order]
        first = np.ones(keys.size, bool)
        first[1:] = keys[1:] != keys[:-1]
        keys, e = keys[first], e[first]
        cs = cls(N, "edges")
        for name, arr in (("_I", keys // N), ("_J", keys % N), ("_E", e), ("_keys", keys)):
            arr.setflags(write=False)
            object.__setattr__(cs, name, arr)
        object.__setattr__(cs, "_n", int(keys.size))
        return cs

    @classmethod
    def oracle(cls, N: int, block: Callable[[np.ndarray], np.ndarray], *,
               pair: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
               n_constraints: int | None = None) -> ConstraintSet:
        """All pairs of a budget too large to store: ``block(rows)`` returns ``eps[rows, :]``
        as a (len(rows), N) array. The oracle must be symmetric (only j > i is read).
        ``pair(i, j)``, if given, returns ``eps_ij`` of given pairs (used for the few pairs the
        solvers look up); ``n_constraints`` the number of finite pairs, if known (else counted
        by a full pass on first use)."""
        if int(N) < 1:
            raise SolverError(f"N must be >= 1, got {N}")
        cs = cls(N, "oracle")
        object.__setattr__(cs, "_block", block)
        object.__setattr__(cs, "_pair", pair)
        if n_constraints is not None:
            object.__setattr__(cs, "_n", int(n_constraints))
        return cs

    def _copy(self, **changes: object) -> ConstraintSet:
        cs = ConstraintSet(self.N, self.kind)
        for k in _SLOTS:
            object.__setattr__(cs, k, changes.get(k, getattr(self, k)))
        object.__setattr__(cs, "_stats", self._stats)  # one counter for the whole family
        return cs

    def with_index(self, index: GeometricIndex | None) -> ConstraintSet:
        """The same pairs with a geometric index: scans become exact branch and bound
        (:mod:`solvers.pruned`). The index's bound (1) must hold for these budgets."""
        if index is not None and index.N != self.N:
            raise SolverError(f"index has {index.N} points, the constraint set N = {self.N}")
        if index is not None and self.kind == "edges":
            raise SolverError("a geometric index applies to all-pairs sets, not to edge sets")
        n = self.N * (self.N - 1) // 2 if index is not None and index.all_finite else self._n
        return self._copy(_index=index, _n=n)

    def with_engine(self, engine: object | None) -> ConstraintSet:
        """The same pairs with an engine for full scans (``engine.scan(...)``: e.g.
        :class:`solvers.distributed.LocalProcesses` or :class:`solvers.distributed.DaskEngine`);
        an engine that also offers ``pruned_scan`` / ``pruned_row_lipschitz`` (Dask) runs the
        branch and bound of an indexed set too. ``with_engine(None)`` is the set without one
        (what an engine ships to its workers)."""
        return self._copy(_engine=engine)

    def budget_source(self) -> tuple[object, ...]:
        """The objects the budgets are read from (index, stored matrix or edges, oracle
        functions): two sets with the same source (``is``) have the same budgets. Engines key
        the data they ship to workers on it."""
        return (self._index, self._eps, self._keys, self._block, self._pair)

    @property
    def index(self) -> GeometricIndex | None:
        return self._index

    @property
    def stats(self) -> ScanStats:
        """Pass counter shared by this set and the sets derived from it (with_index, ...)."""
        return self._stats

    # ------------------------------------------------------------------ blocks
    def blocks(self, F: object, memory_bytes: int = 2**30) -> Iterator[Block]:
        """Yield every constrained pair once, in blocks of at most ~memory_bytes of work arrays
        (absolute differences as an (m, ...) array; used by Algorithm 3)."""
        A = as_operand(F, self.N)
        m = A.shape[0]
        cells = max(1, min(int(memory_bytes) // (8 * (m + 6)), max(2**19 // m, 4096)))
        if self.kind == "edges":
            I_all, J_all, E_all = self.edge_arrays()
            for s in range(0, I_all.size, cells):
                I, J = I_all[s : s + cells], J_all[s : s + cells]  # noqa: E741
                yield Block(E_all[s : s + cells], np.abs(take(A, I) - take(A, J)), 0, 0, I, J)
            return
        N = self.N
        r0 = 0
        while r0 < N - 1:
            ncols = N - r0
            r1 = min(N - 1, r0 + max(1, cells // ncols))
            E = self.eps_rows(r0, r1)[:, r0:].copy()
            E[np.tril_indices(r1 - r0, 0, ncols)] = np.inf
            Fb = A[:, r0:] if isinstance(A, np.ndarray) else A[:, r0:].toarray()
            yield Block(E, np.abs(Fb[:, : r1 - r0, None] - Fb[:, None, :]), r0, ncols)
            r0 = r1

    def edge_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(I, J, eps) of an edge set."""
        return given(self._I), given(self._J), given(self._E)

    def eps_rows(self, r0: int, r1: int) -> np.ndarray:
        """Budget rows ``eps[r0:r1, :]`` of a dense or oracle set."""
        if self.kind == "dense":
            return given(self._eps)[r0:r1]
        E = np.asarray(given(self._block)(np.arange(r0, r1)), dtype=float)
        if E.shape != (r1 - r0, self.N):
            raise SolverError(f"oracle block returned shape {E.shape}, expected {(r1 - r0, self.N)}")
        _check_budget(E[:, r0:], f"oracle eps rows {r0}..{r1 - 1}")
        return E

    _eps_rows = eps_rows

    # ------------------------------------------------------------------ queries
    @property
    def n_constraints(self) -> int:
        """Number of constrained pairs (finite eps_ij, i < j)."""
        if self._n is None:
            if self.kind == "dense":
                n = int(np.count_nonzero(np.isfinite(given(self._eps)[np.triu_indices(self.N, 1)])))
            else:
                n = kernel_scan.merge([kernel_scan.scan_part(
                    self, np.zeros((1, self.N)), np.zeros(1), 0, max(self.N - 1, 0))], 0, "scan", 1).n
            object.__setattr__(self, "_n", n)
        return given(self._n)

    def min_eps(self) -> float:
        """Smallest finite eps_ij over constrained pairs (inf if there are none)."""
        if self.kind == "edges":
            return float(given(self._E).min()) if given(self._E).size else float("inf")
        if self.kind == "dense":
            v = given(self._eps)[np.triu_indices(self.N, 1)]
            return float(v.min()) if v.size else float("inf")
        return min((float(b.eps.min()) for b in self.blocks(np.zeros((1, self.N)))), default=np.inf)

    def min_positive_eps(self) -> float:
        """Smallest positive finite eps_ij (the baseline's eps_min; inf if none). Exact and
        near-linear with a geometric index (:func:`solvers.pruned.min_positive_eps`)."""
        if self._index is not None:
            return pruned.min_positive_eps(self._index, self.pair_eps)
        if self.kind == "edges":
            e = given(self._E)
            e = e[e > 0]
            return float(e.min()) if e.size else float("inf")
        if self.kind == "dense":
            v = given(self._eps)[np.triu_indices(self.N, 1)]
            v = v[v > 0]
            return float(v.min()) if v.size else float("inf")
        best = float("inf")
        for b in self.blocks(np.zeros((1, self.N))):
            v = b.eps[b.eps > 0]
            if v.size:
                best = min(best, float(v.min()))
        return best

    def pair_eps(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """eps_ij for given pairs (+inf for pairs that are not constrained)."""
        i = np.asarray(i, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        if self.kind == "dense":
            return np.where(lo == hi, np.inf, given(self._eps)[lo, hi])
        if self.kind == "edges":
            known = given(self._keys)
            if known.size == 0:
                return np.full(lo.shape, np.inf)
            keys = lo * self.N + hi
            pos = np.clip(np.searchsorted(known, keys), 0, known.size - 1)
            return np.where(known[pos] == keys, given(self._E)[pos], np.inf)
        if self._pair is not None:
            e = np.asarray(self._pair(lo, hi), dtype=float).reshape(lo.shape)
            return np.where(lo == hi, np.inf, e)
        rows, inv = np.unique(lo, return_inverse=True)
        E = np.asarray(given(self._block)(rows), dtype=float)
        return np.where(lo == hi, np.inf, E[inv, hi])

    def scan(self, F: object, u: np.ndarray, *, memory_bytes: int = 2**30, k: int = 0,
             agg: str = "sum", tag: str = "scan") -> ScanResult:
        """The maximum (and k largest) of ``loss_ij / eps_ij`` over ALL constrained pairs.

        ``loss_ij = sum_k u_k |F_ki - F_kj|`` (agg="sum", Laplace, Theorem 1) or
        ``max_k u_k |F_ki - F_kj|`` (agg="max", SmallDB/MWEM, Theorems 5 and 7) or
        ``sum_k u_k (F_ki - F_kj)^2`` (agg="sq", Gaussian noise: u_k = 1 / (2 rho sigma_k^2) gives
        ratios <= 1 exactly when the release is rho-zCDP per unit of the metric; docs/theory.md).
        ``u_k = inf`` contributes inf where row k differs and 0 where it does not. Exact branch
        and bound with a geometric index (its top k may omit pairs of ratio 0), else a full
        distance-kernel scan (on the engine, if any). ``tag`` labels the pass in :attr:`stats`.
        """
        A = as_operand(F, self.N)
        u = np.asarray(u, dtype=float).ravel()
        if u.shape != (A.shape[0],) or np.isnan(u).any() or (u < 0).any():
            raise SolverError(f"u must be a non-negative (m,) = ({A.shape[0]},) vector, got {u}")
        if agg not in ("sum", "max", "sq"):
            raise SolverError(f"agg must be 'sum', 'max' or 'sq', got {agg!r}")
        if self._pruned():
            assert self._index is not None
            if self._engine is not None and hasattr(self._engine, "pruned_scan"):
                res = self._engine.pruned_scan(self, A, u, k=k, agg=agg)
            else:
                res = pruned.pruned_scan(self._index, A, u, self.pair_eps, self.n_constraints,
                                         k=k, agg=agg)
            self._stats.record("pruned", res.pairs_evaluated, tag)
            return res
        part, how = self._run(A, u, k=k, agg=agg, mode="scan", memory_bytes=memory_bytes)
        if self._n is None:
            object.__setattr__(self, "_n", part.n)
        self._stats.record(how, self.n_constraints, tag)
        worst = part.worst if self.n_constraints else None
        return ScanResult(part.best, worst, part.top, self.n_constraints, self.n_constraints, how)

    def _pruned(self) -> bool:
        if self._index is None:
            return False
        return self.N >= (PRUNE_MIN_N if self._index.min_n is None else self._index.min_n)

    def _run(self, A: np.ndarray | sp.csc_array, u: np.ndarray | None, *, k: int, agg: str,
             mode: str, memory_bytes: int) -> tuple[kernel_scan.PartResult, str]:
        total = self._n if self.kind == "edges" else max(self.N - 1, 0)
        if self._engine is not None:
            res = self._engine.scan(self, A, u, k=k, agg=agg, mode=mode, memory_bytes=memory_bytes)
            return res, getattr(self._engine, "strategy", "engine")
        part = kernel_scan.scan_part(self, A, u, 0, int(total or 0), k=k, agg=agg, mode=mode,
                                     memory_bytes=memory_bytes)
        return part, "full"

    def row_lipschitz(self, F: object, *, memory_bytes: int = 2**30, tag: str = "lipschitz",
                      power: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per query row k: ``c_k = max_ij |F_ki - F_kj|^power / eps_ij`` (0/0 -> 0, x/0 -> inf;
        ``power`` 1, or 2 for Gaussian noise) and the arg-max pair. Returns (c (m,), i (m,),
        j (m,)); i = j = -1 where c_k = 0."""
        if power not in (1, 2):
            raise SolverError(f"power must be 1 or 2, got {power!r}")
        A = as_operand(F, self.N)
        if self._pruned():
            assert self._index is not None
            if self._engine is not None and hasattr(self._engine, "pruned_row_lipschitz"):
                c, bi, bj, n_ev = self._engine.pruned_row_lipschitz(self, A, power)
            else:
                c, bi, bj, n_ev = pruned.pruned_row_lipschitz(self._index, A, self.pair_eps,
                                                              power)
            self._stats.record("pruned", n_ev, tag)
            return c, bi, bj
        part, how = self._run(A, None, k=0, agg="sum",
                              mode="lipschitz" if power == 1 else "lipschitz_sq",
                              memory_bytes=memory_bytes)
        if self._n is None:
            object.__setattr__(self, "_n", part.n)
        self._stats.record(how, self.n_constraints, tag)
        assert part.c is not None and part.ci is not None and part.cj is not None
        return part.c, part.ci, part.cj

    def lipschitz(self, f: np.ndarray, *, memory_bytes: int = 2**30) -> float:
        """``max_ij |f_i - f_j| / eps_ij`` over constrained pairs (0/0 -> 0; x/0 -> inf): the
        optimal single-query noise scale 1/beta* of the closed form (paper §4.1)."""
        return float(self.row_lipschitz(np.asarray(f, float)[None, :], memory_bytes=memory_bytes)[0][0])

    def check_feasible(self, F: object, *, memory_bytes: int = 2**30
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`row_lipschitz` (c, i, j); raise InfeasibleError naming a pair with eps_ij = 0
        where the columns of F differ (docs/theory.md, "Zero and infinite distances")."""
        c, bi, bj = self.row_lipschitz(F, memory_bytes=memory_bytes, tag="feasibility")
        bad = np.flatnonzero(np.isinf(c))
        if bad.size:
            k = int(bad[0])
            i, j = int(bi[k]), int(bj[k])
            raise InfeasibleError(
                f"eps[{i}, {j}] = 0 but F[:, {i}] != F[:, {j}] (query row {k} differs): no finite "
                "noise can hide the difference; merge the two elements or give them a positive "
                "distance", pair=(i, j))
        return c, bi, bj


def _check_budget(E: np.ndarray, what: str) -> None:
    if np.isnan(E).any():
        idx = np.argwhere(np.isnan(E))[0]
        raise SolverError(f"{what} contains NaN at {tuple(int(t) for t in idx)}")
    neg = E < 0
    if E.ndim == 2 and E.shape[0] == E.shape[1]:
        neg = neg & ~np.eye(E.shape[0], dtype=bool)
    if neg.any():
        idx = tuple(int(t) for t in np.argwhere(neg)[0])
        raise SolverError(f"{what}{list(idx)} = {E[idx]}: a budget is non-negative")
