"""The coordinates a strategy measures in: the histogram itself, or the edge sums of a tree.

A strategy is stored as ``A = C T``: a core matrix C (p x K) applied to coordinates ``s = T x``.

* ``identity``: K = N, T = I.  The total n = 1'x is known exactly (neighbours move a record, so
  it never changes); the error is that of the component of x orthogonal to 1.
* ``tree``: the metric is the shortest-path distance of a spanning tree (a path for a line).  For
  the tree edge e = (parent, child), s_e is the number of records in the subtree below the child;
  moving a record across an edge changes exactly one coordinate by one (Blowfish's
  transformational equivalence, Haney, Machanavajjhala and Ding, PVLDB 2015), so the d_X
  constraint becomes a bound on each column of C: ||C e_k||_1 <= eps_k.  x is recovered from s and
  n as ``x = B s + n e_root`` with column e of B equal to e_child - e_parent.

Either way the workload answers are ``F x = F_K s + n f0`` with ``F_K = F B`` and ``f0 = F e_root``
(identity: F_K = F, and the total enters through the known-total projection).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components

from solvers.errors import SolverError

#: a dense ndarray or a scipy.sparse matrix (the stubs type the two apart)
Mat = Any


def is_sparse(X: Any) -> bool:
    """scipy.sparse.issparse without narrowing the static type."""
    return bool(sp.issparse(X))


@dataclass(frozen=True)
class Basis:
    """Coordinates ``s = T x`` (see the module doc).  ``parent`` (tree only): parent of every
    element in the rooted spanning tree (-1 at the root); ``order``: a breadth-first order."""

    kind: str  # "identity" or "tree"
    N: int
    parent: np.ndarray | None = None
    order: np.ndarray | None = None

    @property
    def K(self) -> int:  # noqa: N802 (the number of coordinates)
        return self.N if self.kind == "identity" else self.N - 1

    @property
    def root(self) -> int:
        assert self.order is not None
        return int(self.order[0])

    # edge k of a tree basis is the edge above element child[k]
    @property
    def child(self) -> np.ndarray:
        assert self.order is not None
        return np.asarray(self.order[1:])

    @classmethod
    def identity(cls, N: int) -> Basis:
        return cls("identity", int(N))

    @classmethod
    def tree(cls, N: int, i: np.ndarray, j: np.ndarray) -> Basis:
        """The tree basis of the spanning tree with edges (i, j); raises unless they form one."""
        i, j = np.asarray(i, np.int64), np.asarray(j, np.int64)
        if i.size != N - 1:
            raise SolverError(f"{i.size} edges on {N} vertices: not a spanning tree")
        g = sp.coo_array((np.ones(i.size), (i, j)), shape=(N, N)).tocsr()
        ncomp, _ = connected_components(g, directed=False)
        if ncomp != 1:
            raise SolverError("the edges do not connect every element: not a spanning tree")
        order, pred = breadth_first_order(g, 0, directed=False, return_predecessors=True)
        parent = np.where(pred < 0, -1, pred).astype(np.int64)
        parent[order[0]] = -1
        return cls("tree", int(N), parent, np.asarray(order, np.int64))

    # ------------------------------------------------------------------ maps
    def apply(self, x: np.ndarray) -> np.ndarray:
        """s = T x for a vector or the columns of an (N, r) matrix."""
        x = np.asarray(x, dtype=np.float64)
        if self.kind == "identity":
            return x.copy()
        assert self.parent is not None and self.order is not None
        acc = x.copy()
        for v in self.order[:0:-1]:  # leaves first: add each subtree to its parent
            acc[self.parent[v]] += acc[v]
        return acc[self.child]

    def edge_index(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Coordinate k of the tree edge (i, j) (-1 if (i, j) is not a tree edge)."""
        assert self.parent is not None
        pos = np.full(self.N, -1, np.int64)
        pos[self.child] = np.arange(self.K)
        i, j = np.asarray(i, np.int64), np.asarray(j, np.int64)
        k = np.where(self.parent[i] == j, pos[i], np.where(self.parent[j] == i, pos[j], -1))
        return k

    def B(self) -> Mat:  # noqa: N802
        """(N, K) with x = B s + n e_root (tree) or the identity."""
        if self.kind == "identity":
            return sp.eye_array(self.N, format="csc")
        assert self.parent is not None
        c = self.child
        rows = np.concatenate([c, self.parent[c]])
        cols = np.concatenate([np.arange(self.K), np.arange(self.K)])
        vals = np.concatenate([np.ones(self.K), -np.ones(self.K)])
        return sp.csc_array((vals, (rows, cols)), shape=(self.N, self.K))

    def T_dense(self) -> np.ndarray:  # noqa: N802
        """T as a dense (K, N) array (T e_l = 1 on the edges between l and the root)."""
        return self.apply(np.eye(self.N))

    def workload(self, F: Mat) -> tuple[Mat, np.ndarray]:
        """(F_K, f0): F x = F_K s + n f0 (identity: f0 = 0 and the total is handled apart)."""
        if self.kind == "identity":
            return F, np.zeros(F.shape[0])
        FK = F @ self.B()
        f0 = np.asarray(F[:, [self.root]].toarray() if is_sparse(F) else F[:, self.root]).ravel()
        return (sp.csr_array(FK) if is_sparse(FK) else np.asarray(FK)), f0

    def to_json(self) -> dict:
        """The basis as JSON (a tree as its parent array and breadth-first order)."""
        return {"kind": self.kind, "N": self.N,
                "parent": None if self.parent is None else self.parent.tolist(),
                "order": None if self.order is None else self.order.tolist()}

    @classmethod
    def from_json(cls, d: dict) -> Basis:
        """Inverse of :meth:`to_json`; a tree is checked to be one (its order too)."""
        if d.get("kind") == "identity":
            return cls.identity(int(d["N"]))
        if d.get("kind") != "tree":
            raise SolverError(f"unknown basis kind {d.get('kind')!r}")
        N = int(d["N"])  # noqa: N806
        parent = np.asarray(d["parent"], np.int64)
        order = np.asarray(d["order"], np.int64)
        if parent.shape != (N,) or order.shape != (N,) or not np.array_equal(np.sort(order), np.arange(N)):
            raise SolverError("tree basis: parent and order must list every element once")
        child = np.flatnonzero(parent >= 0)
        cls.tree(N, child, parent[child])  # raises unless a spanning tree
        seen = np.zeros(N, bool)
        seen[order[0]] = True
        for v in order[1:]:
            if not seen[parent[v]]:
                raise SolverError("tree basis: order must list every parent before its children")
            seen[v] = True
        if parent[order[0]] != -1:
            raise SolverError("tree basis: the order must start at the root")
        return cls("tree", N, parent, order)
