"""Per-query Gaussian noise for a workload under a metric: the exact convex program.

Query k is released as ``F_k x + N(0, sigma_k^2)``. Moving one record from element i to j shifts
the answers by ``F[:, i] - F[:, j]``; the Rényi divergence of order alpha between the two output
distributions is ``alpha/2 * sum_k (F_ki - F_kj)^2 / sigma_k^2`` (docs/theory.md, "Gaussian noise
and metric zCDP"), so the release is rho-zCDP per unit of the metric exactly when

    sum_k (F_ki - F_kj)^2 / sigma_k^2 <= 2 rho eps_ij     for every constrained pair.     (G)

With ``q_k = 1 / (2 rho sigma_k^2)`` condition (G) reads ``sum_k q_k (F_ki - F_kj)^2 <= eps_ij``:
linear in q and free of rho, so the design is solved once for rho = 1 and scaled
(``sigma_k^2 = 1 / (2 rho q_k)``). The losses, in q:

    squared:  min sum_k sigma_k^2 = sum_k 1 / (2 rho q_k)      (expected squared error)
    absolute: min sum_k sigma_k   ∝ sum_k q_k^(-1/2)            (expected absolute error)
    max:      min max_k sigma_k^2  (all q_k equal: closed form)
    log:      max sum_k log q_k    (geometric mean of the variances)

are convex, and the all-pairs constraints are handled by the constraint generation of
:mod:`solvers.convex` with the squared pair scans (``agg="sq"``: full kernel scans, or exact
branch and bound with a geometric index). Graph metrics must be given ALL pairs (a dense or
oracle set of shortest-path budgets): unlike the Laplace loss, the squared loss is not a
pseudometric, so edge constraints do not imply the other pairs.
"""

from __future__ import annotations

import time

import cvxpy as cp
import numpy as np

from solvers.constraints import ConstraintSet
from solvers.convex import ObjectiveBuilder, solve_u
from solvers.errors import InfeasibleError, SolverError
from solvers.operand import as_operand

__all__ = ["GAUSSIAN_LOSSES", "gaussian_precisions"]

GAUSSIAN_LOSSES = ("squared", "absolute", "max", "log")
RATIO_TOL = 1e-12


def _objective(loss: str, c: np.ndarray) -> ObjectiveBuilder:
    """The loss in the scaled variable y = c * q (0 < y <= 1): sigma_k^2 ∝ c_k / y_k."""
    cn = c / c.max()
    if loss == "squared":
        wts = cn / np.sum(cn)
        return lambda y: cp.Minimize(cp.sum(cp.multiply(wts, cp.inv_pos(y))))
    if loss == "absolute":
        wts = np.sqrt(cn) / np.sum(np.sqrt(cn))
        return lambda y: cp.Minimize(cp.sum(cp.multiply(wts, cp.power(y, -0.5))))
    if loss == "log":
        return lambda y: cp.Maximize(cp.geo_mean(y))
    raise SolverError(f"unknown loss {loss!r}")


def gaussian_precisions(F: object, constraints: ConstraintSet, loss: str = "squared", *,
                        memory_bytes: int = 2**30, tol: float = 1e-9,
                        max_rounds: int | None = None, progress: bool = False) -> tuple[np.ndarray, dict]:
    """The optimal ``q`` (m,) with ``sum_k q_k (F_ki - F_kj)^2 <= eps_ij`` on every constrained
    pair (q_k = inf: query k never changes across a finite-budget pair, answered exactly).

    Returns ``(q, report)``; ``report["max_ratio"]`` is the final scan's maximum over ALL pairs
    (<= 1 + 1e-12: a draft that ends slightly above is scaled back), ``report["certificate"]``
    the scan's outcome for exactly this q. For rho-zCDP per unit of the metric use
    ``sigma_k = 1 / sqrt(2 rho q_k)``.
    """
    t0 = time.perf_counter()
    if loss not in GAUSSIAN_LOSSES:
        raise SolverError(f"unknown loss {loss!r}; choose one of {GAUSSIAN_LOSSES}")
    if not isinstance(constraints, ConstraintSet):
        raise SolverError(f"constraints must be a ConstraintSet, got {type(constraints).__name__}")
    if constraints.kind == "edges":
        raise SolverError("Gaussian noise needs every pair's budget, not a graph's edges: the "
                          "squared loss is not a pseudometric (pass a dense or oracle set)")
    A = as_operand(F, constraints.N)
    m = A.shape[0]
    before = constraints.stats.snapshot()
    c, bi, bj = constraints.row_lipschitz(A, memory_bytes=memory_bytes, power=2,
                                          tag="feasibility")
    bad = np.flatnonzero(np.isinf(c))
    if bad.size:
        kk = int(bad[0])
        i, j = int(bi[kk]), int(bj[kk])
        raise InfeasibleError(
            f"eps[{i}, {j}] = 0 but F[:, {i}] != F[:, {j}] (query row {kk} differs): no finite "
            "noise can hide the difference; merge the two elements or give them a positive "
            "distance", pair=(i, j))
    act = c > 0
    notes: list[str] = []
    iterations, n_used, status = 0, 0, "optimal"
    if not act.any():
        q = np.full(m, np.inf)
        notes.append("no query is separated by a finite budget: all answered exactly")
    elif loss == "max" or int(act.sum()) == 1:
        # one common q on the separating rows: the largest feasible is 1 / max ratio at q = 1
        ones = np.where(act, 1.0, 0.0)
        r = constraints.scan(A, ones, memory_bytes=memory_bytes, agg="sq", tag="closed form").max_ratio
        q = np.where(act, 1.0 / r, np.inf)
        if int(act.sum()) == 1:
            notes.append("one separating query: closed form q = 1 / max_ij (F_i - F_j)^2 / eps_ij")
    else:
        k = max(20, 4 * int(act.sum()))
        init = [(bi[act], bj[act])]
        for u0 in (np.where(act, 1.0, 0.0), np.where(act, 1.0 / np.where(act, c, 1.0), 0.0)):
            ti, tj, _ = constraints.scan(A, u0, memory_bytes=memory_bytes, k=k, agg="sq",
                                         tag="start pairs").top
            init.append((ti, tj))
        q, draft, _ = solve_u(A, constraints, c, _objective(loss, c[act]), init,
                              memory_bytes=memory_bytes, tol=tol, max_rounds=max_rounds,
                              add_k=k, progress=progress, agg="sq")
        q = np.where(act, q, np.inf)
        iterations, n_used, status = draft.iterations, draft.n_used, draft.status
        notes += draft.notes
        slack = float(draft.extra.get("final_violation", 0.0))
        if -0.5 < slack < 0.0:  # every loss decreases in q: use the full budget
            q = np.where(act, q / (1.0 + slack), q)
    scaled_back = False
    for _ in range(4):
        sc = constraints.scan(A, q, memory_bytes=memory_bytes, agg="sq", tag="finalize")
        if sc.max_ratio <= 1.0 + RATIO_TOL:
            break
        if not np.isfinite(sc.max_ratio):
            raise InfeasibleError(f"pair {sc.worst} has infinite privacy loss", pair=sc.worst)
        notes.append(f"scaled q back by 1/{sc.max_ratio:.17g} (worst pair {sc.worst})")
        q = np.where(np.isfinite(q), q / (sc.max_ratio * (1.0 + 1e-15 if scaled_back else 1.0)), q)
        scaled_back = True
    else:  # pragma: no cover - defensive
        raise InfeasibleError("could not scale the Gaussian design back to feasibility")
    report = {
        "n_constraints": constraints.n_constraints, "n_constraints_used": int(n_used),
        "iterations": int(iterations), "seconds": time.perf_counter() - t0,
        "max_ratio": float(sc.max_ratio), "worst_pair": sc.worst, "scaled_back": scaled_back,
        "status": status, "notes": notes, "constraint_kind": constraints.kind,
        "certificate": {"max_ratio": float(sc.max_ratio), "q": q.copy(), "agg": "sq",
                        "strategy": sc.strategy, "pairs": int(sc.n_pairs)},
        "passes": constraints.stats.since(before),
    }
    return q, report
