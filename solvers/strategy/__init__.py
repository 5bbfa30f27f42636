"""Strategy (matrix) mechanisms under d_X: optimise what is measured, not only its noise.

A strategy A (p x N) is released as ``y = A x + Lap(1)^p`` and the workload F is answered by
least squares, ``F A^+ y``.  The release is d_X-private iff ``||A (e_i - e_j)||_1 <= eps_ij`` for
every constrained pair (the column l1 distances of A are bounded by the metric; for graph metrics
the edges suffice).  Expected total squared error: ``2 ||F A^+||_F^2``.  Neighbours move a
record, so the total n is known exactly and only the component of x orthogonal to 1 costs.

:func:`optimize_strategy` picks the best of several starts (the identity / Blowfish transform,
the (w, beta) design A = diag(u) F, a k-d hierarchy, weighted marginals) by their exact error and
polishes it by gradient descent on ``c(A)^2 ||F A^+||_F^2`` (:mod:`solvers.strategy.optimize`).
Points on a regular 2-D grid are instead polished coarse to fine (:mod:`solvers.strategy.grid`),
and also start from shifted blocks whose levels share no boundary
(:mod:`solvers.strategy.shifted_blocks`; the only grid start beyond the dense limit).
numpy / scipy only; never imports dprivacy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers.constraints import ConstraintSet
from solvers.errors import SolverError
from solvers.strategy.basis import Basis, Mat, is_sparse
from solvers.strategy.bound import best_bound
from solvers.strategy.constraint import PairSet, _uniform_diagonal, materialise, strategy_scan
from solvers.strategy.estimate import estimate_error, estimate_map
from solvers.strategy.few_queries import rowspace_strategy
from solvers.strategy.grid import detect_grid, grid_strategy
from solvers.strategy.implicit import basis_gram
from solvers.strategy.objective import Objective, answer_map, gram
from solvers.strategy.optimize import blas_threads, polish
from solvers.strategy.shifted_blocks import shifted_blocks
from solvers.strategy.starts import (
    design_start,
    identity_start,
    kd_hierarchy,
    marginal_start,
    spanning_tree_start,
)

__all__ = ["Basis", "StrategyResult", "answer_map", "choose_basis", "materialise",
           "optimize_strategy", "strategy_scan", "uses_answer_map"]

STARTS = ("identity", "tree", "design", "hierarchical", "marginals", "rowspace", "grid", "blocks")
#: The row-space start (A = M Q', :mod:`solvers.strategy.rowspace`) for workloads of at most
#: this many queries over at most this many pairs (every pair in an r x P matrix).
ROWSPACE_MAX_M, ROWSPACE_MAX_PAIRS = 40, 1_000_000
#: Share of the time limit the coarse-to-fine grid polishing may use (the rest: exact checks).
GRID_SHARE = 0.85
#: Above this many coordinates only structured starts are compared (no dense K x K algebra).
DENSE_LIMIT = 2048
#: All pairs form the working set up to this many pairs; beyond it the most loaded pairs do.
ALL_PAIRS_LIMIT = 150_000
#: A start within this relative distance of the lower bound is not polished (at most 0.5 % to
#: gain; all ranges of 256 points: the polish took most of the design's time for 0.4 %).
BOUND_RTOL = 5e-3
#: An explicit workload gets the m x p answer map M (answers M y + n o) up to this many entries
#: of M; beyond it, as for a Gram-only workload, the K x p estimate map (answers F x_hat, errors
#: from the Gram matrix), so memory follows the output and never m x p (a strategy of p ~ m rows
#: would make M an m x m matrix).
ANSWER_MAP_ENTRIES = 2**23


def uses_answer_map(m: int, p: int) -> bool:
    """True when a workload of m queries answered from p measurements gets the answer map."""
    return m * p <= ANSWER_MAP_ENTRIES


@dataclass
class StrategyResult:
    """A verified strategy ``A = C T`` (``basis`` gives T) with ``max ratio <= 1``.

    ``M, o``: answers = ``M y + n o`` from the release y and the total n; ``error`` the expected
    total squared error ``2 ||M||_F^2``; ``lower_bound`` (or None) a bound no strategy beats.
    A workload given only by its Gram matrix (F = None) gets ``M = o = None`` and the estimate
    map instead: ``x_hat = X y + n z``, answers ``F x_hat`` (:mod:`solvers.strategy.estimate`)."""

    C: Mat
    basis: Basis
    M: Mat | None
    o: np.ndarray | None
    error: float
    max_ratio: float
    lower_bound: float | None
    report: dict[str, Any] = field(default_factory=dict)
    X: np.ndarray | None = None
    z: np.ndarray | None = None


def choose_basis(cs: ConstraintSet) -> Basis:
    """The tree basis when ``cs`` is the edge set of a spanning tree (a path, for a line), else
    the identity."""
    if cs.kind == "edges" and cs.n_constraints == cs.N - 1 and cs.N > 1:
        I, J, _ = cs.edge_arrays()  # noqa: N806, E741
        try:
            return Basis.tree(cs.N, I, J)
        except SolverError:
            pass
    return Basis.identity(cs.N)


def _all_pairs(cs: ConstraintSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    I, J = np.triu_indices(cs.N, 1)  # noqa: N806, E741
    E = cs.pair_eps(I, J)  # noqa: N806
    keep = np.isfinite(E)
    return I[keep], J[keep], E[keep]


def optimize_strategy(F: Any, cs: ConstraintSet, *, u: np.ndarray | None = None,
                      coords: np.ndarray | None = None, codes: np.ndarray | None = None,
                      starts: tuple[str, ...] | None = None, rounds: int = 6, maxiter: int = 150,
                      time_limit: float = 600.0, polish_top: int = 1, active_k: int | None = None,
                      lower_bound: bool = True, memory_bytes: int = 2**30,
                      threads: int | None = 1, gram_matrix: np.ndarray | None = None
                      ) -> StrategyResult:
    """Design a strategy for the workload F (m x N) under the pair constraints ``cs``.

    Parameters
    ----------
    F : (m, N) array or scipy.sparse matrix, or None for a workload known only by its Gram
        matrix (``gram_matrix`` required; the result then has the estimate map X, z instead of
        the answer map, and the ``design`` and ``rowspace`` starts do not apply).
    cs : the constrained pairs (all pairs, or a graph's edges; a spanning tree's edges switch to
        the tree basis, :class:`Basis`).
    u : u = w beta of a (w, beta) design, for the ``design`` start (computed with
        ``solvers.design(method="exact")`` when that start is asked for and u is not given).
    coords : (N, d) points, for the ``hierarchical`` start (and the ``grid`` start when they fill
        a regular 2-D lattice: coarse-to-fine polishing, :mod:`solvers.strategy.grid`).
    codes : (N, k) attribute codes of a product universe, for the ``marginals`` start.
    starts : which starts to compare (default: every one that applies).
    rounds, maxiter : gradient rounds and L-BFGS iterations per round.
    time_limit : seconds after which no new round starts.
    polish_top : how many of the best starts are polished.
    active_k : pairs added to the working set per round (default 20 N).
    threads : BLAS threads while optimising (default 1, the fastest on a shared machine;
        None leaves the BLAS setting alone).
    gram_matrix : ``F' F`` (N, N) when known in closed form (:mod:`solvers.strategy.implicit`);
        the optimisation then never forms it from F (F is used for the answer map only).

    Returns
    -------
    StrategyResult whose strategy passed an exact scan over every constrained pair.
    """
    with blas_threads(threads):
        return _optimize(F, cs, u, coords, codes, starts, rounds, maxiter, time_limit, polish_top,
                         active_k, lower_bound, memory_bytes, gram_matrix=gram_matrix)


def _optimize(F: Any, cs: ConstraintSet, u: np.ndarray | None, coords: np.ndarray | None,
              codes: np.ndarray | None, starts: tuple[str, ...] | None, rounds: int, maxiter: int,
              time_limit: float, polish_top: int, active_k: int | None, lower_bound: bool,
              memory_bytes: int, *, gram_matrix: np.ndarray | None = None) -> StrategyResult:
    t0 = time.perf_counter()
    deadline = t0 + float(time_limit)
    N = cs.N  # noqa: N806
    implicit = F is None
    if implicit:
        if gram_matrix is None:
            raise SolverError("a workload without F needs its Gram matrix (gram_matrix=F'F)")
        Fm = FK = None
        f0 = np.zeros(0)
    else:
        Fm = sp.csr_array(F) if is_sparse(F) else np.asarray(F, dtype=np.float64)
        if Fm.ndim != 2 or Fm.shape[1] != N:
            raise SolverError(f"F must be (m, {N}), got shape {Fm.shape}")
    basis = choose_basis(cs)
    if not implicit:
        FK, f0 = basis.workload(Fm)
    grams: list[np.ndarray] = []

    def G_K() -> np.ndarray:  # noqa: N802 (the workload's Gram matrix in the basis, once)
        if not grams:
            grams.append(gram(FK, basis.kind == "identity") if gram_matrix is None
                         else basis_gram(basis, gram_matrix))
        return grams[0]
    centre = basis.kind == "identity"
    K = basis.K  # noqa: N806
    if basis.kind == "tree":
        I, J, E = cs.edge_arrays()  # noqa: N806, E741
        kk = basis.edge_index(I, J)
        edge_eps = np.empty(K)
        edge_eps[kk] = E
        base = PairSet(np.arange(K), -np.ones(K, np.int64), edge_eps)
    else:
        edge_eps = None
        if cs.kind == "edges":
            base = PairSet(*cs.edge_arrays())
        elif N * (N - 1) // 2 <= ALL_PAIRS_LIMIT:
            base = PairSet(*_all_pairs(cs))
        else:
            base = PairSet(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    complete = basis.kind == "tree" or cs.kind == "edges" or N * (N - 1) // 2 <= ALL_PAIRS_LIMIT
    k_new = int(active_k or 20 * N)

    def check(C: np.ndarray) -> tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
        if complete:
            return float(base.ratios(C).max()), None
        c, _, top = strategy_scan(C, basis, cs, k=k_new, memory_bytes=memory_bytes)
        I_, J_, r_ = top  # noqa: N806
        return c, (I_, J_, cs.pair_eps(I_, J_))

    wanted = tuple(starts) if starts is not None else STARTS
    unknown = set(wanted) - set(STARTS)
    if unknown:
        raise SolverError(f"unknown starts {sorted(unknown)}; choose from {STARTS}")
    cands: dict[str, Mat] = {}
    notes: dict[str, Any] = {}
    # a regular 2-D grid of points: coarse-to-fine polishing replaces the generic polish and the
    # starts that do badly on grids (a spanning tree, the k-d hierarchy)
    grid = (detect_grid(coords) if "grid" in wanted and centre and cs.kind != "edges"
            and K <= DENSE_LIMIT and rounds > 0 else None)
    if grid is not None:
        wanted = tuple(w for w in wanted if w not in ("tree", "hierarchical"))
    if "identity" in wanted:
        cands["identity"] = identity_start(basis, edge_eps)
    lattice = grid if grid is not None else (
        detect_grid(coords) if "blocks" in wanted and centre and cs.kind != "edges" else None)
    if "blocks" in wanted and lattice is not None:
        cands["blocks"] = shifted_blocks(lattice)
    if "tree" in wanted and centre and K <= DENSE_LIMIT:
        ti, tj, te = (base.I, base.J, base.eps) if complete else _nearest_pairs(cs, N)
        try:
            cands["tree"] = spanning_tree_start(N, ti, tj, te)
        except SolverError:
            notes["tree_start"] = "the constraint graph does not connect every element"
    if "design" in wanted and K <= DENSE_LIMIT and not implicit:
        if u is None:
            from solvers import design as solve_design

            u = solve_design(Fm, cs, method="exact").u
        cands["design"] = design_start(np.asarray(u), FK)
    if "hierarchical" in wanted and coords is not None and centre and K <= DENSE_LIMIT:
        cands["hierarchical"] = kd_hierarchy(coords).toarray()
    scores: dict[str, float] = {}
    #: the exact max ratio of each start scored, by identity: the final scaling reuses it
    scanned: dict[int, float] = {}

    def exact_score(C: Mat) -> float:
        c, _, _ = strategy_scan(C, basis, cs, memory_bytes=memory_bytes)
        scanned[id(C)] = c
        if not np.isfinite(c) or c <= 0:
            return float("inf")
        if implicit:  # full-rank strategies only: every query of a Gram-only workload answered
            d = _uniform_diagonal(C) if centre else None
            if d:  # C = d I: X = d^2 P + 11'/N, G = P G P, so f = tr(G) / d^2 exactly
                return 2.0 * c * c * float(np.trace(G_K())) / (d * d)
            if centre and is_sparse(C):  # one sparse C'C and one Cholesky, no dense p x N
                f, share = estimate_error(C, basis, G_K())
                return 2.0 * c * c * f if share <= 1e-9 else float("inf")
            Cd = np.asarray(C.toarray() if is_sparse(C) else C, dtype=np.float64)
            return 2.0 * c * c * Objective(G_K(), centre).value(Cd)
        assert Fm is not None
        if not uses_answer_map(Fm.shape[0], C.shape[0]):
            f, share = estimate_error(C / c, basis, G_K())
            return 2.0 * f if share <= 1e-9 else float("inf")
        try:
            M, _ = answer_map(C / c, FK, f0, centre)
        except SolverError:
            return float("inf")
        return 2.0 * float((M.multiply(M)).sum() if is_sparse(M) else np.sum(M * M))

    if "marginals" in wanted and codes is not None and centre and K <= DENSE_LIMIT:
        obj_m = Objective(G_K(), centre)

        def quick_score(C: np.ndarray) -> float:  # full-rank stacks of marginals: no pinv needed
            c = check(C)[0]
            return c * c * 2.0 * obj_m.value(C) if np.isfinite(c) and c > 0 else float("inf")

        A, theta = marginal_start(np.asarray(codes), quick_score)
        cands["marginals"] = A
        notes["marginal_weights"] = theta
    if "rowspace" in wanted and centre and cs.kind != "edges" and Fm is not None \
            and Fm.shape[0] <= ROWSPACE_MAX_M \
            and N * (N - 1) // 2 <= ROWSPACE_MAX_PAIRS:
        ri, rj, re = (base.I, base.J, base.eps) if complete else _all_pairs(cs)
        Fd = np.asarray(sp.csr_array(Fm).toarray() if is_sparse(Fm) else Fm, dtype=np.float64)
        cands["rowspace"], notes["rowspace"] = rowspace_strategy(
            Fd, ri, rj, re, u=u, deadline=t0 + 0.8 * (deadline - t0))
    history: dict[str, list[dict]] = {}
    if grid is not None:
        Cg, history["grid"] = grid_strategy(G_K(), cs, grid,
                                            deadline=t0 + GRID_SHARE * float(time_limit),
                                            rounds=rounds, maxiter=maxiter,
                                            memory_bytes=memory_bytes)
        cands["grid"] = Cg
    for name, C in cands.items():
        scores[name] = exact_score(C)
    if not scores or not any(np.isfinite(v) for v in scores.values()):
        raise SolverError(f"no start gave a finite error ({scores}); is every query answerable?")
    ranked = sorted((v, k) for k, v in scores.items() if np.isfinite(v))
    best_name, best_C, best_err = ranked[0][1], cands[ranked[0][1]], ranked[0][0]
    lb = None
    if lower_bound and K <= DENSE_LIMIT:  # before polishing: a start at the bound is kept as is
        lb = best_bound(G_K(), base.I, base.J, base.eps) if complete else \
            best_bound(G_K(), *_nearest_pairs(cs, N))
    at_bound = lb is not None and best_err <= lb * (1.0 + BOUND_RTOL)
    if at_bound:
        notes["polish"] = f"skipped: the best start is within {BOUND_RTOL:.1%} of the lower bound"
    if K <= DENSE_LIMIT and rounds > 0 and grid is None and not at_bound:
        obj = Objective(G_K(), centre)
        for _, name in ranked[:max(1, polish_top)]:
            if name == "rowspace":  # polished in its own (reduced) coordinates already
                continue
            C0 = cands[name]
            C0 = np.asarray(C0.toarray() if is_sparse(C0) else C0, dtype=np.float64)
            if not np.isfinite(obj.value(C0)):  # rank deficient: add a small identity part
                idn = identity_start(basis, edge_eps).toarray()
                c_id = check(idn)[0]
                c_0 = check(C0)[0]
                C0 = np.vstack([C0, idn * (0.01 * c_0 / c_id)])
            Cp, _, hist = polish(C0, obj, base, check, rounds=rounds, maxiter=maxiter,
                                 deadline=deadline)
            history[name] = hist
            err = exact_score(Cp)
            scores[f"{name}+polish"] = err
            if err < best_err:
                best_name, best_C, best_err = f"{name}+polish", Cp, err
    # final: exact scan over every constrained pair, scale to the budget, answer map
    # the exact max ratio of the best strategy: from its score's scan when it is an unpolished
    # start (one scan over every pair less); the scaled strategy is then scanned again below
    c = scanned[id(best_C)] if id(best_C) in scanned else \
        strategy_scan(best_C, basis, cs, memory_bytes=memory_bytes)[0]
    C = best_C / (c * (1 + 1e-12))
    if not is_sparse(C):
        C = np.asarray(C)
        if C.size > 10_000 and np.count_nonzero(C) < 0.05 * C.size:
            C = sp.csr_array(C)
    ratio, worst, _ = strategy_scan(C, basis, cs, memory_bytes=memory_bytes)
    if not ratio <= 1 + 1e-12:
        raise SolverError(f"strategy verification failed: pair {worst} at {ratio:.12g} x budget")
    X = z = None
    if implicit:
        M = o = None
        X, z, share = estimate_map(C, basis, G_K())
        if share > 1e-9:
            raise SolverError(f"{share:.3g} of the workload lies outside the row space of the "
                              "strategy: it cannot be answered from the release")
        # every query answerable and the strategy of full rank (exact_score): 2 tr(G_K X_K^+),
        # which for an unpolished start is its score scaled by the final (1 + 1e-12)^2
        if id(best_C) in scanned and np.isfinite(best_err):
            err = best_err * (1 + 1e-12) ** 2
        else:
            err = 2.0 * Objective(G_K(), centre).value(
                np.asarray(C.toarray() if is_sparse(C) else C, dtype=np.float64))
    elif Fm is not None and not uses_answer_map(Fm.shape[0], C.shape[0]):  # F x_hat: no m x p
        M = o = None
        X, z, share = estimate_map(C, basis, G_K())
        if share > 1e-9:
            raise SolverError(f"{share:.3g} of the workload lies outside the row space of the "
                              "strategy: it cannot be answered from the release")
        err = 2.0 * estimate_error(C, basis, G_K())[0]
    else:
        M, o = answer_map(C, FK, f0, centre)
        err = 2.0 * float((M.multiply(M)).sum() if is_sparse(M) else np.sum(M * M))
    rs_bound = notes.get("rowspace", {}).get("l2_bound")
    if lower_bound and rs_bound is not None:
        lb = rs_bound if lb is None else max(lb, rs_bound)
    report = {"start": best_name, "starts": scores, "history": history, "basis": basis.kind,
              "p": int(C.shape[0]), "max_ratio": ratio, "worst_pair": worst,
              "seconds": time.perf_counter() - t0, **notes}
    return StrategyResult(C, basis, M, o, err, ratio, lb, report, X, z)


def _nearest_pairs(cs: ConstraintSet, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: N803
    """Every element's tightest pairs (eps within 1 % of its smallest), for the lower bound."""
    Is, Js, Es = [], [], []
    step = max(1, 2**22 // max(N, 1))
    for r0 in range(0, N, step):
        rows = np.arange(r0, min(N, r0 + step))
        E = cs.eps_rows(r0, rows[-1] + 1).copy()  # noqa: N806
        E[np.arange(rows.size), rows] = np.inf
        lo = E.min(axis=1, keepdims=True)
        ri, cj = np.nonzero(E <= 1.01 * lo)
        Is.append(rows[ri])
        Js.append(cj)
        Es.append(E[ri, cj])
    I, J, E = np.concatenate(Is), np.concatenate(Js), np.concatenate(Es)  # noqa: N806, E741
    lo, hi = np.minimum(I, J), np.maximum(I, J)
    return lo, hi, E
