"""Objectives of problem (6) and the final verification every returned design goes through.

Privacy condition (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every constrained pair,
with ``u = w * beta``. :func:`finalize` checks it by a full blocked scan over ALL pairs and, if a
design ends up (slightly) infeasible, scales u back so that the maximum ratio is 1 (the report
says so).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers.constraints import ConstraintSet
from solvers.errors import InfeasibleError
from solvers.operand import QueryMatrix, row_absmax
from solvers.result import SolverResult

RATIO_TOL = 1e-12  # a returned design satisfies max ratio <= 1 + RATIO_TOL


@dataclass
class Draft:
    """What a method hands to :func:`finalize`: precisions u (inf = exact answer), optional
    shrinkage w, and bookkeeping for the report."""

    u: np.ndarray
    w: np.ndarray | None = None
    iterations: int = 1
    n_used: int = 0
    status: str = "optimal"
    notes: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    #: (F, constraint set, u, agg, max ratio, worst pair) of a scan the method already made of
    #: exactly this u: :func:`finalize` then scales back from it without scanning u again.
    scanned: tuple[Any, Any, np.ndarray, str, float, Any] | None = None


def objective(loss: str, w: np.ndarray, beta: np.ndarray, F: QueryMatrix,
              n: float | None = None) -> float:
    """Value of the loss surrogate g(w, beta) of problem (6) / Theorem 2.

    squared:  n^2 sum_k (1-w_k)^2 ||F_k||_inf^2 + 2 sum_k beta_k^-2     (bound on E||e||_2^2)
    absolute: n sum_k |1-w_k| ||F_k||_inf + sum_k beta_k^-1             (bound on E||e||_1)
    max:      n max_k |1-w_k| ||F_k||_inf + max_k beta_k^-1             (ell_inf, without ln(m/delta))
    log:      mean_k log(1/beta_k) over queries with finite beta        (log geometric-mean scale)
    The bias terms vanish when n is None or w = 1; ``1/inf = 0`` (exact answers).
    """
    w = np.asarray(w, float)
    beta = np.asarray(beta, float)
    with np.errstate(divide="ignore"):
        scale = np.where(np.isinf(beta), 0.0, 1.0 / beta)
    fmax = row_absmax(F)
    bias = np.abs(1.0 - w) * fmax * (0.0 if n is None else float(n))
    if loss == "squared":
        return float(np.sum(bias**2) + 2.0 * np.sum(scale**2))
    if loss == "absolute":
        return float(np.sum(bias) + np.sum(scale))
    if loss == "max":
        return float(np.max(bias) + np.max(scale))
    if loss == "log":
        fin = np.isfinite(beta)
        if not fin.any():
            return float("-inf")
        with np.errstate(divide="ignore"):
            return float(np.mean(-np.log(beta[fin])))
    raise ValueError(f"unknown loss {loss!r}")


def _split(u: np.ndarray, w0: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(w, beta = u / w, the effective u = w * beta with 0 * inf = 0) as SolverResult holds them."""
    w = np.ones_like(u) if w0 is None else np.array(w0, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = np.where(w > 0, u / np.where(w > 0, w, 1.0), np.inf)
        beta = np.where(np.isinf(u), np.inf, beta)
        u_eff = np.where(w == 0, 0.0, w * beta)
    return w, beta, u_eff


def finalize(F: QueryMatrix, cs: ConstraintSet, draft: Draft, *, method: str, loss: str,
             n: float | None, t0: float, memory_bytes: int, agg: str = "sum",
             multiplier: float = 1.0, objective_value: float | None = None) -> SolverResult:
    """Verify the draft by a scan of ``multiplier * u`` over ALL pairs (2T for MWEM), scale back
    if any ratio exceeds 1, and package a :class:`SolverResult` with its report.

    The scan is of the effective precision ``u = w * beta`` exactly as the result will hold it
    (``SolverResult.u``), so ``report["certificate"]`` (max ratio, the scanned u, the strategy)
    certifies the returned design itself and callers need not scan again."""
    u = np.array(draft.u, dtype=float)
    notes = list(draft.notes)
    scaled_back = False
    known = draft.scanned
    for _ in range(4):
        w, beta, u_eff = _split(u, draft.w)
        ratio: float
        if (known is not None and known[0] is F and known[1] is cs and known[3] == agg
                and not scaled_back and np.array_equal(known[2], multiplier * u_eff)
                and known[4] > 1.0 + RATIO_TOL):
            ratio, worst = known[4], known[5]  # the method's own scan of exactly this u
        else:
            sc = cs.scan(F, multiplier * u_eff, memory_bytes=memory_bytes, agg=agg,
                         tag="finalize")
            ratio, worst = sc.max_ratio, sc.worst
            if ratio <= 1.0 + RATIO_TOL:
                break
        if not np.isfinite(ratio):
            assert worst is not None  # an infinite max ratio comes from a constrained pair
            i, j = worst
            raise InfeasibleError(
                f"{method}: pair ({i}, {j}) has infinite privacy loss (eps_ij = 0 or an exact "
                "answer on a separating query); no scaling can repair it", pair=(i, j))
        notes.append(f"scaled u back by 1/{ratio:.17g} (worst pair {worst})")
        u = u / (ratio * (1.0 + 1e-15)) if scaled_back else u / ratio
        scaled_back = True
    else:  # pragma: no cover - defensive
        raise InfeasibleError(f"{method}: could not scale the design back to feasibility")
    obj = objective(loss, w, beta, F, n) if objective_value is None else objective_value
    report = {
        "n_constraints": cs.n_constraints,
        "n_constraints_used": int(draft.n_used),
        "iterations": int(draft.iterations),
        "seconds": time.perf_counter() - t0,
        "max_ratio": float(sc.max_ratio),
        "worst_pair": sc.worst,
        "scaled_back": scaled_back,
        "status": draft.status,
        "notes": notes,
        "constraint_kind": cs.kind,
        "certificate": {"max_ratio": float(sc.max_ratio), "u": u_eff.copy(),
                        "multiplier": float(multiplier), "agg": agg, "strategy": sc.strategy,
                        "pairs": int(sc.n_pairs), "pairs_evaluated": int(sc.pairs_evaluated)},
    }
    report.update(draft.extra)
    return SolverResult(w=w, beta=beta, objective=obj, method=method, loss=loss, report=report)
