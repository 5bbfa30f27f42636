"""The d_X constraint of a strategy and its smooth surrogate.

A strategy A (p x N) released as A x + Lap(1)^p is d_X-private iff, for every constrained pair,
``||A (e_i - e_j)||_1 <= eps_ij`` (the Laplace density ratio of neighbouring outputs is at most
``exp(||A (x - x')||_1)``; graph metrics need only their edges, docs/theory.md).  The scale-free
constraint value is ``c(A) = max_ij ||A (e_i - e_j)||_1 / eps_ij``; ``A / c(A)`` is feasible.

:func:`strategy_scan` computes c exactly over ALL constrained pairs with the blocked / pruned
scans of :class:`solvers.ConstraintSet` (the column l1 distance of A is the scan's loss with
u = 1); :class:`PairSet` is the optimiser's working set with a smoothed maximum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solvers.constraints import ConstraintSet
from solvers.errors import InfeasibleError, SolverError
from solvers.strategy.basis import Basis, Mat, is_sparse


@dataclass
class PairSet:
    """Working set of constraints ``||C v_q||_1 <= eps_q``: ``v_q = e_I - e_J`` (J >= 0) or the
    unit vector ``e_I`` (J = -1, the columns of a tree basis)."""

    I: np.ndarray  # noqa: E741
    J: np.ndarray
    eps: np.ndarray

    def __post_init__(self) -> None:
        self.I = np.asarray(self.I, np.int64)
        self.J = np.asarray(self.J, np.int64)
        self.eps = np.asarray(self.eps, dtype=np.float64)
        if np.any(self.eps <= 0):
            raise InfeasibleError("a constrained pair has budget 0: its elements must be merged "
                                  "before a strategy can be designed")
        self._cols = bool(np.all(self.J < 0))
        if not self._cols and np.any(self.J < 0):
            raise SolverError("PairSet: mix of column and pair constraints")

    @property
    def size(self) -> int:
        return int(self.I.size)

    def diffs(self, C: np.ndarray) -> np.ndarray:
        return C[:, self.I] if self._cols else C[:, self.I] - C[:, self.J]

    def ratios(self, C: np.ndarray) -> np.ndarray:
        """||C v_q||_1 / eps_q for every q."""
        return np.abs(self.diffs(C)).sum(axis=0) / self.eps

    def smooth(self, C: np.ndarray, t: float, delta: float) -> tuple[float, np.ndarray]:
        """Log-sum-exp (temperature t) of the ratios with |z| smoothed to sqrt(z^2+d^2) - d;
        returns (value, gradient in C).  Always >= the largest smoothed ratio."""
        Z = self.diffs(C)
        root = np.sqrt(Z * Z + delta * delta)
        r = (root - delta).sum(axis=0) / self.eps
        top = float(r.max())
        w = np.exp(t * (r - top))
        s = float(w.sum())
        val = top + np.log(s) / t
        GZ = (Z / root) * ((w / s) / self.eps)[None, :]
        if self._cols:
            grad = np.zeros_like(C)
            np.add.at(grad.T, self.I, GZ.T)
            return val, grad
        K = C.shape[1]
        S = sp.csr_array((np.concatenate([np.ones(self.size), -np.ones(self.size)]),
                          (np.concatenate([self.I, self.J]), np.tile(np.arange(self.size), 2))),
                         shape=(K, self.size))
        return val, np.asarray((S @ GZ.T).T)

    def union(self, I: np.ndarray, J: np.ndarray, eps: np.ndarray) -> PairSet:  # noqa: N803, E741
        """This set plus new pairs (duplicates dropped)."""
        I2, J2 = np.concatenate([self.I, I]), np.concatenate([self.J, J])  # noqa: N806
        e2 = np.concatenate([self.eps, eps])
        keys = I2 * (max(int(I2.max(initial=0)), int(J2.max(initial=0))) + 2) + (J2 + 1)
        _, idx = np.unique(keys, return_index=True)
        return PairSet(I2[idx], J2[idx], e2[idx])


def materialise(C: Mat, basis: Basis) -> np.ndarray:
    """A = C T as a dense (p, N) array."""
    if basis.kind == "identity":
        return np.asarray(C.toarray() if is_sparse(C) else C, dtype=np.float64)
    T = basis.T_dense()  # noqa: N806
    if is_sparse(C):  # e.g. the diagonal prefix strategy: a sparse product, never C dense
        return np.asarray(sp.csr_array(C) @ T, dtype=np.float64)
    return np.asarray(C, dtype=np.float64) @ T


_NO_PAIRS = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))


def _uniform_diagonal(C: Mat) -> float | None:
    """|d| when C is d times a permutation-free N x N identity (a scaled identity), else None."""
    p, K = C.shape
    if p != K or not is_sparse(C):
        return None
    S = sp.csr_array(C, copy=True)  # C may be read-only or the caller's: never changed here
    S.eliminate_zeros()
    if S.nnz != K or not np.array_equal(S.indices, np.arange(K)) or \
            not np.array_equal(S.indptr, np.arange(K + 1)):
        return None
    a = np.abs(S.data)
    return float(a[0]) if np.all(a == a[0]) else None


def strategy_scan(C: Mat, basis: Basis, cs: ConstraintSet, *, k: int = 0,
                  memory_bytes: int = 2**30) -> tuple[float, tuple[int, int] | None,
                                                      tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Exact ``max ||A (e_i - e_j)||_1 / eps_ij`` over every constrained pair of ``cs``, for
    A = C T.  Returns (max ratio, worst pair, top k pairs (i, j, ratio) as element indices).

    A tree basis checked against that tree's edges reads the column norms of C directly; every
    other case scans A = C T with :meth:`ConstraintSet.scan` (u = 1: the loss of a pair is the
    l1 distance of its two columns), pruned or blocked as the set allows.
    """
    if cs.N != basis.N:
        raise SolverError(f"the strategy has N = {basis.N}, the constraint set N = {cs.N}")
    if basis.kind == "tree" and cs.kind == "edges":
        I, J, E = cs.edge_arrays()  # noqa: N806, E741
        kk = basis.edge_index(I, J)
        if np.all(kk >= 0):
            col = np.asarray(abs(C).sum(axis=0)).ravel() if is_sparse(C) else np.abs(C).sum(axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.where(col[kk] > 0, col[kk] / E, 0.0)
            if r.size == 0:
                return 0.0, None, (I[:0], J[:0], r[:0])
            order = np.argsort(-r, kind="stable")[:k] if k else np.argsort(-r)[:1]
            b = int(np.argmax(r))
            top = (I[order], J[order], r[order]) if k else (I[:0], J[:0], r[:0])
            return float(r[b]), (int(I[b]), int(J[b])), top
    if basis.kind == "identity" and k == 0 and cs.kind != "edges":
        d = _uniform_diagonal(C)
        if d is not None:  # ||d (e_i - e_j)||_1 = 2 d for every pair: the tightest pair binds
            lo = cs.min_eps()
            if d == 0 or not np.isfinite(lo):
                return 0.0, None, _NO_PAIRS
            return (2.0 * d / lo if lo > 0 else float("inf")), None, _NO_PAIRS
    A = C if basis.kind == "identity" else materialise(C, basis)
    res = cs.scan(A, np.ones(A.shape[0]), k=k, memory_bytes=memory_bytes, tag="strategy")
    return float(res.max_ratio), res.worst, res.top
