"""dprivacy's numerical layer: choose (w, beta) for a workload under a metric (paper §4, App. B).

numpy / scipy / cvxpy only; never imports dprivacy. Privacy condition of every Laplace design
(Theorem 1): ``sum_k w_k beta_k |F_ki - F_kj| <= eps_ij`` for every constrained pair (i, j),
verified by a full blocked scan before any design is returned.

Examples
--------
>>> import numpy as np
>>> from solvers import ConstraintSet, design
>>> pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
>>> eps = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
>>> r = design(np.array([[0.0, 1.0, 1.0]]), ConstraintSet.dense(eps), method="closed_form")
>>> float(r.beta[0])
1.0
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from solvers.constraints import ConstraintSet, ScanResult, as_query_matrix  # noqa: F401 (public)
from solvers.errors import InfeasibleError, SolverError
from solvers.operand import as_operand
from solvers.result import SolverResult
from solvers.verify import finalize, objective

if TYPE_CHECKING:
    from solvers.bcd import shrinkage
    from solvers.synthetic import mwem_params, smalldb_params

logger = logging.getLogger(__name__)

#: Names whose modules load a heavy library (cvxpy, scipy.optimize): imported on first use, so
#: ``import solvers`` (and ``import dprivacy``) stays fast.
_LAZY = {"shrinkage": "solvers.bcd", "mwem_params": "solvers.synthetic",
         "smalldb_params": "solvers.synthetic"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'solvers' has no attribute {name!r}")

METHODS = ("closed_form", "equal_split", "uniform", "budget_sharing", "bcd", "exact")
LOSSES = ("squared", "absolute", "max", "log")

__all__ = [
    "METHODS", "LOSSES", "ConstraintSet", "ScanResult", "SolverResult", "SolverError",
    "InfeasibleError", "design", "smalldb_params", "mwem_params", "objective", "shrinkage",
]


def design(F: object, constraints: ConstraintSet, method: str = "exact", loss: str = "squared",
           n: float | None = None, *, memory_bytes: int = 2**30, tol: float = 1e-9,
           max_rounds: int | None = None, progress: bool = False,
           engine: object | None = None, working_set_bytes: int | None = None) -> SolverResult:
    """Choose (w, beta) for the workload F (m, N) under the pair constraints (problem (6)).

    Parameters
    ----------
    F : (m, N) array or scipy.sparse matrix of linear queries.
    constraints : the pairs (i, j, eps_ij) to satisfy (:class:`ConstraintSet`).
    method : "closed_form" (m = 1, paper §4.1), "equal_split" / "uniform" (Strategies 1 / 2,
        paper §4.2), "budget_sharing" (Algorithm 3, paper §4.2; ``max_rounds`` = its T, default 50),
        "bcd" (paper Appendix B, squared loss) or "exact" (convex program in u = w beta, docs/theory.md).
    loss : "squared", "absolute", "max" or "log" (objective of "exact" and the reported value).
    n : number of records; when given, the objective includes the bias term of Theorem 2 and
        "exact" solves the JOINT problem over (w, u) for the squared and absolute losses
        (:mod:`solvers.joint`; report keys ``global_optimum``, ``convex_region``,
        ``lower_bound``, ``shrinkage_objective``), "bcd" optimises w by block descent; for
        "max"/"log" "exact" keeps w = 1 (the paper's strategies and the closed form too).
    memory_bytes : work-array budget of the blocked scans. tol : max relative violation at
        which constraint generation stops. max_rounds : round limit (method specific).
    working_set_bytes : "exact" and "bcd" refuse at once (SolverError naming the strategy
        route) when their first working set of constraint rows would exceed this many bytes
        (default :data:`solvers.memory.WORKING_SET_BYTES`, 4 GiB).
    engine : run full scans on it (:class:`solvers.distributed.LocalProcesses`,
        :class:`solvers.distributed.DaskEngine`); scans with a geometric index stay local.

    Returns
    -------
    SolverResult whose design satisfies every constraint (report["max_ratio"] <= 1 + 1e-12),
    with ``report["passes"]`` (scans over all pairs this call made: total, full, pruned, pairs
    evaluated exactly, per purpose) and ``report["certificate"]`` (the final scan's outcome for
    the returned u).

    Privacy condition: ``sum_k w_k beta_k |F_ki - F_kj| <= eps_ij`` for all constrained pairs.
    """
    t0 = time.perf_counter()
    if method not in METHODS:
        raise SolverError(f"unknown method {method!r}; choose one of {METHODS}")
    if loss not in LOSSES:
        raise SolverError(f"unknown loss {loss!r}; choose one of {LOSSES}")
    if not isinstance(constraints, ConstraintSet):
        raise SolverError(f"constraints must be a ConstraintSet, got {type(constraints).__name__}")
    if n is not None and (not np.isfinite(n) or n <= 0):
        raise SolverError(f"n must be a positive number of records, got {n}")
    A = as_operand(F, constraints.N)
    if method in ("exact", "bcd"):  # before the solvers (and cvxpy) load: a quick refusal
        from solvers.memory import WORKING_SET_BYTES, check_working_set

        check_working_set(A.shape[0], constraints, working_set_bytes or WORKING_SET_BYTES)
    from solvers.bcd import bcd, shrinkage
    from solvers.closed_form import closed_form
    from solvers.convex import exact
    from solvers.joint import joint
    from solvers.strategies import budget_sharing, equal_split, uniform

    if engine is not None:
        constraints = constraints.with_engine(engine)
    before = constraints.stats.snapshot()
    c, bi, bj = constraints.check_feasible(A, memory_bytes=memory_bytes)
    kw: dict[str, Any] = dict(memory_bytes=memory_bytes)
    if method == "closed_form":
        draft = closed_form(A, constraints, c)
    elif method == "equal_split":
        draft = equal_split(A, constraints, c)
    elif method == "uniform":
        draft = uniform(A, constraints, c, **kw)
    elif method == "budget_sharing":
        draft = budget_sharing(A, constraints, c, T=max_rounds or 50, **kw)
    elif method == "bcd":
        draft = bcd(A, constraints, c, bi, bj, n, loss, tol=tol, max_rounds=max_rounds,
                    progress=progress, **kw)
    elif n is not None and loss in ("squared", "absolute"):
        draft = joint(A, constraints, c, bi, bj, n, loss, tol=tol, max_rounds=max_rounds,
                      progress=progress, **kw)
    else:
        draft = exact(A, constraints, c, bi, bj, loss, tol=tol, max_rounds=max_rounds,
                      progress=progress, **kw)
        if n is not None:
            w, note = shrinkage(draft.u, A, n, loss)
            draft.w = w
            draft.notes.append(note)
    res = finalize(A, constraints, draft, method=method, loss=loss, n=n, t0=t0, **kw)
    res.report["passes"] = constraints.stats.since(before)
    logger.info("design %s/%s: N=%d m=%d, %s", method, loss, constraints.N, A.shape[0],
                res.report["passes"])
    return res
