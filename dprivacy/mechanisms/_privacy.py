"""Shared privacy checks of the exponential-type mechanisms (Theorems 3, 5 and 7).

All three conditions are maxima over the rows of a matrix G (the utility matrix, or the query
matrix Q) of pseudometrics: ``c * max_r v_r |G_ri - G_rj| <= eps_ij`` for every constrained pair,
where ``v`` is the per-row scaling (w) and ``c`` the mechanism's multiplier (beta, or
2 T beta for MWEM).  :func:`check_max_condition` scans every constrained pair in blocks through
``ConstraintSet.scan(..., agg="max")`` (never an N x N x R array) and raises
:class:`PrivacyViolationError` naming the worst pair.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dprivacy.design import PRIVACY_RTOL, Design, call_solver
from dprivacy.errors import PrivacyViolationError, ValidationError
from dprivacy.workload import Workload

if TYPE_CHECKING:
    import scipy.sparse as sp

    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe
    from solvers import ConstraintSet


def resolve_constraints(workload: Workload, design: Design | None, universe: Universe | None,
                        metric: Metric | None) -> ConstraintSet:
    """The constraint set to verify against: re-derived from ``universe`` + ``metric`` when given
    (never trusting the design's), else the one the design carries; raise if there is none."""
    if (universe is None) != (metric is None):
        raise ValidationError("give both universe and metric, or neither")
    if universe is not None:
        assert metric is not None  # both or neither
        workload.check_universe(universe)
        return metric.constraint_set(universe)
    cs = design.constraints if design is not None else None
    if cs is None:
        raise PrivacyViolationError(
            "no constraint set to check the privacy condition against: pass universe= and "
            "metric= (or a Design that carries its constraints)"
        )
    if cs.N != workload.N:
        raise ValidationError(f"the design's constraints have N = {cs.N}, the workload N = "
                              f"{workload.N}")
    return cs


def check_max_condition(cs: ConstraintSet, G: np.ndarray | sp.csr_array, scale: np.ndarray, what: str,
                        rtol: float = PRIVACY_RTOL) -> float:
    """Check ``max_r scale_r |G_ri - G_rj| <= eps_ij`` over all constrained pairs.

    Returns the maximum ratio (<= 1 + rtol) or raises :class:`PrivacyViolationError` that names
    the worst pair and ``what`` (e.g. "Theorem 3: beta * max_r w_r |U_ri - U_rj| <= eps_ij").
    """
    res = cs.scan(G, np.asarray(scale, dtype=float), agg="max")
    if not res.max_ratio <= 1 + rtol:
        raise PrivacyViolationError(
            f"privacy condition broken ({what}): pair {res.worst} loses {res.max_ratio:.9g} x its "
            f"budget (allowed 1 + {rtol:g}); lower beta (or T) or re-run the solver"
        )
    return float(res.max_ratio)


def shared_beta(design: Design) -> float:
    """The single beta of an exponential-type design (beta repeated per row).

    Solvers may return beta_k = u_k / w_k that differ by an ulp; the largest is taken (the
    conservative choice: the privacy check runs with it)."""
    b = np.asarray(design.beta, dtype=float)
    live = b[np.asarray(design.w) > 0]
    live = live if live.size else b
    beta = float(np.max(live))
    if not beta > 0:
        raise ValidationError(f"beta = {beta}: an exponential mechanism needs beta > 0")
    if np.any(np.abs(live - beta) > 1e-9 * beta):
        raise ValidationError(
            f"the design's beta varies over rows ({live.min():.6g} .. {beta:.6g}); exponential-type "
            "mechanisms have one beta (Definition 9, no per-output beta_r)"
        )
    return beta


def scaled_log_weights(beta: float, utility: np.ndarray) -> np.ndarray:
    """Log-weights ``beta * utility / 2`` of the exponential mechanism (Definition 9).

    beta = inf is the limit: uniform over the maximisers (0 there, -inf elsewhere)."""
    util = np.asarray(utility, dtype=float)
    if np.isinf(beta):
        return np.where(util >= util.max(), 0.0, -np.inf)
    lw = beta * util / 2.0
    return lw - lw.max()


def as_design(workload: Workload, w, beta: float, *, method: str, loss: str = "max",
              objective: float = float("nan"), report: dict | None = None,
              constraints: ConstraintSet | None = None) -> Design:
    """A Design with per-row w and the shared beta repeated per row (shape (m,))."""
    w_arr = np.broadcast_to(np.asarray(w, dtype=float), (workload.m,)).copy()
    return Design(w_arr, np.full(workload.m, float(beta)), method=method, loss=loss,
                  objective=float(objective), report=dict(report or {}), constraints=constraints)


def solved_design(workload, universe: Universe, metric: Metric, solver, *args, **kwargs
                  ) -> tuple[Workload, Design]:
    """Run a parameter solver (``solvers.smalldb_params`` / ``mwem_params``) on the metric's
    constraints and wrap its result as a Design with one shared beta (SmallDB, MWEM)."""
    W = workload if isinstance(workload, Workload) else Workload(workload)
    W.check_universe(universe)
    cs = metric.constraint_set(universe)
    res = call_solver(solver, W.F, cs, *args, **kwargs)
    d = as_design(W, res.w, shared_beta(Design(res.w, res.beta)), method=res.method,
                  loss=res.loss, objective=res.objective, report=res.report, constraints=cs)
    return W, d
