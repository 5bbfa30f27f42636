"""Optimal Gaussian strategies: ``design_strategy(..., noise="gaussian", rho=R)``.

The strategy A is released as ``A x + N(0, I_p)``; the release is ``rho``-zCDP per unit of the
metric exactly when ``||A (e_i - e_j)||_2^2 <= 2 rho eps_ij`` for every pair of elements (graph
metrics on every pair, not only their edges: a squared norm is not subadditive along a path).
The squared error ``tr(G (A'A)^+)`` is convex in X = A'A and the constraints are linear, so the
design is solved to a certified gap: the report carries the dual bound
(docs/theory.md, "Optimal Gaussian strategies").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dprivacy.design import call_solver
from dprivacy.errors import ValidationError
from dprivacy.implicit_workload import ImplicitWorkload
from dprivacy.workload import Workload
from solvers.strategy.gaussian_design import optimize_gaussian_strategy

if TYPE_CHECKING:
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe
    from solvers import ConstraintSet
    from solvers.strategy import StrategyResult

_OPTIONS = ("tol", "time_limit", "max_iter", "threads")


def solve_gaussian_strategy(W: Workload | ImplicitWorkload, universe: Universe, metric: Metric,
                            *, rho: Any, **options: Any
                            ) -> tuple[StrategyResult, ConstraintSet, float]:
    """The optimal strategy for Gaussian noise (see :func:`dprivacy.design_strategy`): the
    solver's result, the constraint set it was checked against and rho as a float."""
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not (
            math.isfinite(float(rho)) and float(rho) > 0):
        raise ValidationError(f"rho = {rho!r}: Gaussian noise needs a zCDP budget rho > 0 (per "
                              "unit of the metric)")
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise ValidationError(f"unknown options {sorted(unknown)} for a Gaussian strategy; "
                              f"choose from {list(_OPTIONS)}")
    if universe.N < 2:
        raise ValidationError("a universe of one element: every query is a multiple of the "
                              "total, which is known; there is nothing to design")
    cs = metric.constraint_set(universe)
    if isinstance(W, ImplicitWorkload):
        res = call_solver(optimize_gaussian_strategy, None, cs, rho=float(rho),
                          gram_matrix=W.gram(), **options)
    else:
        res = call_solver(optimize_gaussian_strategy, W.F, cs, rho=float(rho), **options)
    return res, cs, float(rho)
