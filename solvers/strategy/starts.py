"""Candidate strategies the optimiser starts from (in the coordinates of a :class:`Basis`).

* ``identity``: every coordinate measured once (for a tree basis: the subtree / prefix sums,
  each at its edge budget: the Blowfish transformational-equivalence strategy);
* ``design``: the per-query rescaling A = diag(u) F of a (w, beta) design, so that the result is
  never worse than that design;
* ``hierarchical``: a k-d tree over the points (every node's count), for spatial universes;
* ``marginals``: weighted marginals over every subset of attributes (HDMM's marginal family),
  the weights chosen by a small search.

Starts are unnormalised; the optimiser divides each by its constraint value c(A).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from solvers.strategy.basis import Basis, Mat, is_sparse


def identity_start(basis: Basis, edge_eps: np.ndarray | None) -> Mat:
    """diag(eps_edge) for a tree basis (each column exactly at its budget), else I."""
    if basis.kind == "tree":
        assert edge_eps is not None
        return sp.csr_array(sp.diags_array(np.asarray(edge_eps, dtype=np.float64)))
    return sp.csr_array(sp.eye_array(basis.N))


def design_start(u: np.ndarray, FK: Mat) -> np.ndarray:
    """diag(u) F_K over the queries with 0 < u < inf (exact answers are constant on connected
    elements and carry nothing the known total does not)."""
    u = np.asarray(u, dtype=np.float64)
    keep = np.flatnonzero((u > 0) & np.isfinite(u))
    Fk = FK[keep] if not is_sparse(FK) else sp.csr_array(FK)[keep]
    Fd = np.asarray(Fk.toarray() if is_sparse(Fk) else Fk, dtype=np.float64)
    return u[keep, None] * Fd


def kd_hierarchy(coords: np.ndarray, leaf: int = 1) -> Mat:
    """Indicator rows of every node of a median-split k-d tree over the points (root left out:
    the total is known)."""
    pts = np.asarray(coords, dtype=np.float64).reshape(len(coords), -1)
    rows: list[np.ndarray] = []
    stack = [np.arange(len(pts))]
    while stack:
        idx = stack.pop()
        if idx.size <= leaf:
            continue
        spread = np.ptp(pts[idx], axis=0)
        ax = int(np.argmax(spread))
        order = idx[np.argsort(pts[idx, ax], kind="stable")]
        half = order.size // 2
        for part in (order[:half], order[half:]):
            rows.append(part)
            stack.append(part)
    data = np.concatenate([np.ones(r.size) for r in rows])
    ri = np.concatenate([np.full(r.size, k) for k, r in enumerate(rows)])
    ci = np.concatenate(rows)
    return sp.csr_array((data, (ri, ci)), shape=(len(rows), len(pts)))


def marginal_blocks(codes: np.ndarray) -> list[tuple[tuple[int, ...], Mat]]:
    """For every non-empty subset S of attributes, the indicator rows of the S-marginal."""
    codes = np.asarray(codes, np.int64)
    N, k = codes.shape  # noqa: N806
    out = []
    for r in range(1, k + 1):
        for S in itertools.combinations(range(k), r):
            _, grp = np.unique(codes[:, list(S)], axis=0, return_inverse=True)
            grp = np.asarray(grp).ravel()
            M = sp.csr_array((np.ones(N), (grp, np.arange(N))), shape=(int(grp.max()) + 1, N))
            out.append((S, M))
    return out


def marginal_start(codes: np.ndarray, score: Callable[[np.ndarray], float],
                   max_evals: int = 150) -> tuple[np.ndarray, dict[str, float]]:
    """Weighted marginals sum_S theta_S M_S with theta chosen to minimise ``score`` (the exact
    scale-free error c(A)^2 f(A) of the stacked strategy).  Returns (A, {subset: theta})."""
    from scipy.optimize import minimize

    blocks = marginal_blocks(codes)

    def build(theta: np.ndarray) -> np.ndarray:
        parts = [t * M.toarray() for t, (_, M) in zip(theta, blocks, strict=True) if t > 1e-12]
        return np.vstack(parts)

    def obj(z: np.ndarray) -> float:
        v = score(build(np.exp(z)))
        return float(np.log(v)) if np.isfinite(v) and v > 0 else 1e300

    k = codes.shape[1]
    # start: the full table plus every marginal at equal weight, and the top-order ones only
    cands = [np.zeros(len(blocks)), np.array([0.0 if len(S) >= k - 1 else -3.0 for S, _ in blocks])]
    best = min(cands, key=obj)
    res = minimize(obj, best, method="Nelder-Mead",
                   options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-6})
    z = res.x if res.fun <= obj(best) else best
    theta = np.exp(z)
    return build(theta), {",".join(map(str, S)): float(t) for t, (S, _) in zip(theta, blocks, strict=True)}


def spanning_tree_start(N: int, I: np.ndarray, J: np.ndarray, eps: np.ndarray) -> np.ndarray:  # noqa: N803, E741
    """The subtree-sum strategy of a minimum spanning tree of the constraint graph, each row at
    its edge's budget (the prefix strategy when the metric is a line); dense (N - 1, N)."""
    from scipy.sparse.csgraph import minimum_spanning_tree

    g = sp.coo_array((eps, (I, J)), shape=(N, N)).tocsr()
    t = minimum_spanning_tree(g).tocoo()
    tree = Basis.tree(N, t.row, t.col)
    w = np.empty(tree.K)
    w[tree.edge_index(t.row, t.col)] = t.data
    return w[:, None] * tree.T_dense()
