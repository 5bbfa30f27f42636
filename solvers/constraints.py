"""Pair constraint sets and the blocked scan over them (spec §3.3, §9.2, §9.3).

Privacy condition (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every constrained pair.
A pair with ``eps_ij = +inf`` imposes nothing; ``eps_ij = 0`` forces ``F[:, i] == F[:, j]``.

Three shapes of constraint set share one interface:

* ``dense``: all pairs i < j of an (N, N) budget matrix;
* ``oracle``: all pairs, but the budget rows are computed on demand (N too large to store);
* ``edges``: the edges of a graph whose shortest-path metric is d_X; by spec §9.2 the edge
  constraints imply all pair constraints, because the realised loss is a pseudometric.

Scans never build an N x N x m array: rows are processed in blocks sized to ``memory_bytes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
import scipy.sparse as sp

from solvers.errors import InfeasibleError, SolverError

if TYPE_CHECKING:
    from scipy.sparse._base import _spbase  # public sp.sparray / sp.spmatrix lack toarray in the stubs

_CACHE_CELLS = 2**19  # cap on pair cells per block: keeps temporaries cache friendly
_T = TypeVar("_T")


def _given(value: _T | None) -> _T:
    assert value is not None  # an attribute that the constructor of this kind of set always fills in
    return value


def as_query_matrix(F: object, N: int | None = None) -> np.ndarray:
    """Return F as a dense finite float (m, N) array (scipy.sparse is densified), or raise."""
    if sp.issparse(F):
        F = cast("_spbase", F).toarray()
    try:
        A = np.asarray(F, dtype=float)
    except (TypeError, ValueError) as exc:
        raise SolverError(f"F must be a numeric (m, N) array: {exc}") from exc
    if A.ndim == 1:
        A = A[None, :]
    if A.ndim != 2:
        raise SolverError(f"F must be 2-D (m, N), got shape {A.shape}")
    if N is not None and A.shape[1] != N:
        raise SolverError(f"F has {A.shape[1]} columns but the constraint set has N = {N}")
    if A.shape[0] == 0:
        raise SolverError("F has no rows (m = 0)")
    if not np.isfinite(A).all():
        raise SolverError("F contains NaN or infinite entries")
    return A


@dataclass(frozen=True)
class Block:
    """A block of constrained pairs: budgets ``eps`` (any shape S; +inf = no constraint) and the
    absolute column differences ``ad`` of shape (m,) + S. ``pairs(flat)`` maps flat positions of
    S back to global (i, j) with i < j."""

    eps: np.ndarray
    ad: np.ndarray
    r0: int
    ncols: int
    I: np.ndarray | None = None  # noqa: E741 (edge blocks only)
    J: np.ndarray | None = None

    def pairs(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = np.asarray(flat, dtype=np.int64)
        if self.I is not None:
            return self.I[flat], _given(self.J)[flat]
        return self.r0 + flat // self.ncols, self.r0 + flat % self.ncols


def safe_ratio(num: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """``num / eps`` with 0/x = 0 (also 0/0 and 0/inf), x/0 = inf and x/inf = 0 (spec §9.3)."""
    out = np.zeros(np.broadcast_shapes(num.shape, eps.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(num, eps, out=out, where=(num > 0) & (eps < np.inf))
    return out


@dataclass(frozen=True)
class ScanResult:
    """Outcome of a full blocked scan of the realised loss ratios.

    ``max_ratio`` = max over all constrained pairs of ``loss_ij / eps_ij`` (0 if there are none),
    ``worst`` its pair, ``top`` = (i, j, ratio) arrays of the k largest ratios (descending),
    ``n_pairs`` the number of constrained (finite-budget) pairs seen."""

    max_ratio: float
    worst: tuple[int, int] | None
    top: tuple[np.ndarray, np.ndarray, np.ndarray]
    n_pairs: int


class _TopK:
    """Running k largest values over blocks."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.i = np.empty(0, np.int64)
        self.j = np.empty(0, np.int64)
        self.r = np.empty(0)

    def add(self, block: Block, flat_vals: np.ndarray) -> None:
        if self.k <= 0 or flat_vals.size == 0:
            return
        if flat_vals.size > self.k:
            idx = np.argpartition(flat_vals, flat_vals.size - self.k)[-self.k :]
        else:
            idx = np.arange(flat_vals.size)
        bi, bj = block.pairs(idx)
        self.i = np.concatenate([self.i, bi])
        self.j = np.concatenate([self.j, bj])
        self.r = np.concatenate([self.r, flat_vals[idx]])
        if self.r.size > 4 * self.k:
            self._trim()

    def _trim(self) -> None:
        if self.r.size > self.k:
            keep = np.argpartition(self.r, self.r.size - self.k)[-self.k :]
            self.i, self.j, self.r = self.i[keep], self.j[keep], self.r[keep]

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._trim()
        keep = self.r >= 0
        self.i, self.j, self.r = self.i[keep], self.j[keep], self.r[keep]
        order = np.argsort(-self.r, kind="stable")
        return self.i[order], self.j[order], self.r[order]


class ConstraintSet:
    """Immutable set of pairs (i, j, eps_ij), i < j, that must satisfy
    ``sum_k u_k |F_ki - F_kj| <= eps_ij`` (Theorem 1). Build with :meth:`dense`, :meth:`edges`
    or :meth:`oracle`."""

    __slots__ = ("N", "kind", "_eps", "_I", "_J", "_E", "_keys", "_block", "_n")

    N: int  # set via object.__setattr__; dense fills _eps, edges _I/_J/_E/_keys, oracle _block
    kind: str
    _eps: np.ndarray | None
    _I: np.ndarray | None
    _J: np.ndarray | None
    _E: np.ndarray | None
    _keys: np.ndarray | None
    _block: Callable[[np.ndarray], np.ndarray] | None
    _n: int | None

    def __init__(self, N: int, kind: str) -> None:
        object.__setattr__(self, "N", int(N))
        object.__setattr__(self, "kind", kind)
        for name in ("_eps", "_I", "_J", "_E", "_keys", "_block", "_n"):
            object.__setattr__(self, name, None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ConstraintSet is immutable")

    def __repr__(self) -> str:
        n = self._n if self._n is not None else "?"
        return f"ConstraintSet(kind={self.kind!r}, N={self.N}, n_constraints={n})"

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
        """Edge list of a graph whose shortest-path metric is d_X (spec §9.2): enforcing the
        edges enforces every pair. Duplicate edges keep the smallest budget; +inf edges drop."""
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
    def oracle(cls, N: int, block: Callable[[np.ndarray], np.ndarray]) -> ConstraintSet:
        """All pairs of a budget too large to store: ``block(rows)`` returns ``eps[rows, :]``
        as a (len(rows), N) array. The oracle must be symmetric (only j > i is read)."""
        if int(N) < 1:
            raise SolverError(f"N must be >= 1, got {N}")
        cs = cls(N, "oracle")
        object.__setattr__(cs, "_block", block)
        return cs

    # ------------------------------------------------------------------ blocks
    def blocks(self, F: np.ndarray, memory_bytes: int = 2**30) -> Iterator[Block]:
        """Yield every constrained pair once, in blocks of at most ~memory_bytes of work arrays."""
        m = F.shape[0]
        cells = max(1, min(int(memory_bytes) // (8 * (m + 6)), max(_CACHE_CELLS // m, 4096)))
        if self.kind == "edges":
            I_all, J_all, E_all = _given(self._I), _given(self._J), _given(self._E)
            for s in range(0, I_all.size, cells):
                I, J = I_all[s : s + cells], J_all[s : s + cells]  # noqa: E741
                yield Block(E_all[s : s + cells], np.abs(F[:, I] - F[:, J]), 0, 0, I, J)
            return
        N = self.N
        r0 = 0
        while r0 < N - 1:
            ncols = N - r0
            r1 = min(N - 1, r0 + max(1, cells // ncols))
            E = self._eps_rows(r0, r1)[:, r0:].copy()
            E[np.tril_indices(r1 - r0, 0, ncols)] = np.inf
            ad = np.abs(F[:, r0:r1, None] - F[:, None, r0:])
            yield Block(E, ad, r0, ncols)
            r0 = r1

    def _eps_rows(self, r0: int, r1: int) -> np.ndarray:
        if self.kind == "dense":
            return _given(self._eps)[r0:r1]
        E = np.asarray(_given(self._block)(np.arange(r0, r1)), dtype=float)
        if E.shape != (r1 - r0, self.N):
            raise SolverError(f"oracle block returned shape {E.shape}, expected {(r1 - r0, self.N)}")
        _check_budget(E[:, r0:], f"oracle eps rows {r0}..{r1 - 1}")
        return E

    # ------------------------------------------------------------------ queries
    @property
    def n_constraints(self) -> int:
        """Number of constrained pairs (finite eps_ij, i < j)."""
        if self._n is None:
            if self.kind == "dense":
                n = int(np.count_nonzero(np.isfinite(_given(self._eps)[np.triu_indices(self.N, 1)])))
            else:
                n = sum(int(np.count_nonzero(b.eps < np.inf)) for b in self.blocks(np.zeros((1, self.N))))
            object.__setattr__(self, "_n", n)
        return _given(self._n)

    def min_eps(self) -> float:
        """Smallest finite eps_ij over constrained pairs (inf if there are none)."""
        if self.kind == "edges":
            return float(_given(self._E).min()) if _given(self._E).size else float("inf")
        if self.kind == "dense":
            v = _given(self._eps)[np.triu_indices(self.N, 1)]
            return float(v.min()) if v.size else float("inf")
        return min((float(b.eps.min()) for b in self.blocks(np.zeros((1, self.N)))), default=np.inf)

    def pair_eps(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """eps_ij for given pairs (+inf for pairs that are not constrained)."""
        i = np.asarray(i, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        if self.kind == "dense":
            return np.where(lo == hi, np.inf, _given(self._eps)[lo, hi])
        if self.kind == "edges":
            known = _given(self._keys)
            if known.size == 0:
                return np.full(lo.shape, np.inf)
            keys = lo * self.N + hi
            pos = np.clip(np.searchsorted(known, keys), 0, known.size - 1)
            return np.where(known[pos] == keys, _given(self._E)[pos], np.inf)
        rows, inv = np.unique(lo, return_inverse=True)
        E = np.asarray(_given(self._block)(rows), dtype=float)
        return np.where(lo == hi, np.inf, E[inv, hi])

    def scan(self, F: object, u: np.ndarray, *, memory_bytes: int = 2**30, k: int = 0,
             agg: str = "sum") -> ScanResult:
        """Full blocked scan of ``loss_ij / eps_ij`` over ALL constrained pairs.

        ``loss_ij = sum_k u_k |F_ki - F_kj|`` (agg="sum", Laplace, Theorem 1) or
        ``max_k u_k |F_ki - F_kj|`` (agg="max", SmallDB/MWEM, Theorems 5 and 7).
        ``u_k = inf`` contributes inf where row k differs and 0 where it does not.
        """
        F = as_query_matrix(F, self.N)
        u = np.asarray(u, dtype=float).ravel()
        if u.shape != (F.shape[0],) or np.isnan(u).any() or (u < 0).any():
            raise SolverError(f"u must be a non-negative (m,) = ({F.shape[0]},) vector, got {u}")
        if agg not in ("sum", "max"):
            raise SolverError(f"agg must be 'sum' or 'max', got {agg!r}")
        fin = np.isfinite(u)
        uf = u[fin]
        top = _TopK(int(k))
        best, worst, n = 0.0, None, 0
        for b in self.blocks(F, memory_bytes):
            adf = b.ad[fin]
            if agg == "sum":
                num = np.tensordot(uf, adf, axes=1) if uf.size else np.zeros(b.eps.shape)
            else:
                num = (adf * uf.reshape((-1,) + (1,) * b.eps.ndim)).max(axis=0, initial=0.0)
            if not fin.all():
                num = np.where((b.ad[~fin] > 0).any(axis=0), np.inf, num)
            ratio = safe_ratio(num, b.eps).ravel()
            free = ~(b.eps < np.inf).ravel()
            ratio[free] = -1.0  # unconstrained cells never enter max / top
            n += int(free.size - np.count_nonzero(free)) if self._n is None else 0
            if ratio.size:
                a = int(np.argmax(ratio))
                if ratio[a] >= 0 and (ratio[a] > best or worst is None):
                    best = float(ratio[a])
                    bi, bj = b.pairs(np.array([a]))
                    worst = (int(bi[0]), int(bj[0]))
                top.add(b, ratio)
        if self._n is None:
            object.__setattr__(self, "_n", n)
        if self.n_constraints == 0:
            worst = None
        return ScanResult(best, worst, top.result(), self.n_constraints)

    def row_lipschitz(self, F: object, *, memory_bytes: int = 2**30
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per query row k: ``c_k = max_ij |F_ki - F_kj| / eps_ij`` (0/0 -> 0, x/0 -> inf) and
        the arg-max pair. Returns (c (m,), i (m,), j (m,)); i = j = -1 where c_k = 0."""
        F = as_query_matrix(F, self.N)
        m = F.shape[0]
        c = np.zeros(m)
        bi = np.full(m, -1, np.int64)
        bj = np.full(m, -1, np.int64)
        n = 0
        for b in self.blocks(F, memory_bytes):
            if self._n is None:
                n += int(np.count_nonzero(b.eps < np.inf))
            if b.eps.size == 0:
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                r = (b.ad / b.eps[None]).reshape(m, -1)  # 0/0 = NaN is skipped by fmax
            top = np.fmax.reduce(r, axis=1)
            for k in np.flatnonzero(top > c):
                a = int(np.nanargmax(r[k]))
                c[k] = r[k, a]
                pi, pj = b.pairs(np.array([a]))
                bi[k], bj[k] = pi[0], pj[0]
        if self._n is None:
            object.__setattr__(self, "_n", n)
        return c, bi, bj

    def lipschitz(self, f: np.ndarray, *, memory_bytes: int = 2**30) -> float:
        """``max_ij |f_i - f_j| / eps_ij`` over constrained pairs (0/0 -> 0; x/0 -> inf): the
        optimal single-query noise scale 1/beta* of spec §3.8."""
        return float(self.row_lipschitz(np.asarray(f, float)[None, :], memory_bytes=memory_bytes)[0][0])

    def check_feasible(self, F: object, *, memory_bytes: int = 2**30
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`row_lipschitz` (c, i, j); raise InfeasibleError naming a pair with eps_ij = 0 where
        the columns of F differ (spec §9.3)."""
        c, bi, bj = self.row_lipschitz(F, memory_bytes=memory_bytes)
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
