"""Gaussian designs: per-query noise sigma_k for rho-zCDP per unit of the metric.

Query k is released as ``F_k x + N(0, sigma_k^2)``. The release is rho-zCDP per unit of the
metric (docs/theory.md, "Gaussian noise and metric zCDP") exactly when, for every pair of
elements at finite distance,

    sum_k (F_ki - F_kj)^2 / sigma_k^2 <= 2 rho eps_ij                                (G)

where ``eps_ij`` is the metric's budget (the same numbers a Laplace design is held to). (G) is
linear in ``1 / sigma_k^2``, so the design is an exact convex program
(:func:`solvers.gaussian_queries.gaussian_precisions`). Graph metrics are checked on ALL pairs
(shortest-path budgets), not only on their edges: the squared loss is not a pseudometric.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from dprivacy.errors import PrivacyViolationError, ShapeError, ValidationError
from dprivacy.solver_calls import PRIVACY_RTOL, call_solver
from dprivacy.workload import Workload

if TYPE_CHECKING:
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe
    from solvers import ConstraintSet

__all__ = ["GaussianDesign", "check_rho", "design_gaussian", "pair_constraint_set"]


def check_rho(rho: Any, what: str = "rho") -> float:
    """``rho`` as a positive finite float, or a clear :class:`ValidationError`."""
    if isinstance(rho, bool) or not isinstance(rho, (int, float, np.integer, np.floating)):
        raise ValidationError(f"{what} = {rho!r}: expected a positive number (zCDP per unit of "
                              "the metric)")
    r = float(rho)
    if not (r > 0 and math.isfinite(r)):
        raise ValidationError(f"{what} = {rho!r}: a zCDP budget rho is a finite number > 0 (per "
                              "unit of the metric)")
    return r


def pair_constraint_set(metric: Metric, universe: Universe) -> ConstraintSet:
    """Every pair's budget (dense, or an oracle beyond the dense limit, with the metric's
    geometric index when it has one) -- also for graph-type metrics, whose edge sets suffice for
    Laplace noise but not for the squared (Gaussian) loss."""
    from dprivacy.metrics.base import DENSE_LIMIT, checked_budget, with_scan_hints
    from solvers import ConstraintSet

    if metric.edges(universe) is None:
        return metric.constraint_set(universe)
    if universe.N <= DENSE_LIMIT and not metric._prunes(universe):
        return with_scan_hints(metric, universe, ConstraintSet.dense(metric.budget(universe)))
    return with_scan_hints(metric, universe, ConstraintSet.oracle(
        universe.N, lambda rows: checked_budget(metric, lambda: metric.block(universe, rows)),
        pair=metric.pair_budget(universe)))


@dataclass(frozen=True, eq=False)
class GaussianDesign:
    """Per-query Gaussian noise ``sigma`` (shape (m,); 0 = exact answer) for ``rho``-zCDP per
    unit of the metric; ``constraints`` holds every pair's budget (kept to re-check), ``unit``
    the fingerprint of the (universe, metric) it was designed for."""

    sigma: np.ndarray
    rho: float
    method: str = "exact"
    loss: str = "squared"
    objective: float = float("nan")
    report: Mapping[str, Any] = field(default_factory=dict)
    constraints: ConstraintSet | None = field(default=None, repr=False)
    unit: str | None = field(default=None, repr=False)

    noise = "gaussian"

    def __post_init__(self) -> None:
        s = np.atleast_1d(np.array(self.sigma, dtype=float))
        if s.ndim != 1 or not np.all(np.isfinite(s)) or np.any(s < 0):
            raise ValidationError(f"sigma = {s}: a vector of finite noise levels >= 0")
        s.setflags(write=False)
        object.__setattr__(self, "sigma", s)
        object.__setattr__(self, "rho", check_rho(self.rho))
        object.__setattr__(self, "report", dict(self.report))

    @property
    def m(self) -> int:
        return int(self.sigma.shape[0])

    @property
    def precision(self) -> np.ndarray:
        """``q_k = 1 / (2 rho sigma_k^2)`` (inf for an exact answer): condition (G) is
        ``sum_k q_k (F_ki - F_kj)^2 <= eps_ij``."""
        with np.errstate(divide="ignore"):
            return 1.0 / (2.0 * self.rho * self.sigma**2)

    @property
    def noise_scale(self) -> np.ndarray:
        """The standard deviation sigma_k of each query's noise."""
        return self.sigma

    def expected_squared_error(self) -> float:
        """E||M(x) - F x||^2 = sum_k sigma_k^2."""
        return float(np.sum(self.sigma**2))

    def eps_delta(self, distance: float, delta: float) -> dict[str, float]:
        """What this design promises a pair at ``distance`` (in units of the metric) as
        (eps, delta)-DP: ``eps_zcdp`` from rho * distance (any zCDP release, the discrete
        Gaussian too) and ``eps_gaussian`` from the exact Gaussian curve at
        mu = sqrt(2 rho distance) (continuous Gaussian noise; docs/theory.md)."""
        from dprivacy.zcdp import gaussian_eps, zcdp_eps

        d = float(distance)
        if not (d >= 0 and math.isfinite(d)):
            raise ValidationError(f"distance = {distance!r}: expected a finite number >= 0")
        rd = self.rho * d
        return {"distance": d, "rho": rd, "eps_zcdp": zcdp_eps(rd, delta),
                "eps_gaussian": gaussian_eps(math.sqrt(2 * rd), delta)}

    def max_ratio(self, workload: Workload, constraints: ConstraintSet | None = None) -> float:
        """max over ALL pairs of ``sum_k (F_ki - F_kj)^2 / sigma_k^2 / (2 rho eps_ij)``."""
        cs = constraints if constraints is not None else self.constraints
        if cs is None:
            raise PrivacyViolationError(
                "this Gaussian design carries no constraint set: pass the universe and metric so "
                "that its privacy condition can be checked")
        if cs.kind == "edges":
            raise ValidationError("a Gaussian design is checked on every pair, not on a graph's "
                                  "edges (use dprivacy.gaussian_design.pair_constraint_set)")
        if workload.m != self.m:
            raise ShapeError(f"the design has m = {self.m} queries, the workload m = {workload.m}")
        return float(cs.scan(workload.F, self.precision, agg="sq", tag="gaussian check").max_ratio)

    def verify(self, workload: Workload, constraints: ConstraintSet | None = None,
               rtol: float = PRIVACY_RTOL) -> float:
        """Check (G) on every pair; return the max ratio (<= 1 + rtol) or raise."""
        cs = constraints if constraints is not None else self.constraints
        ratio = self.max_ratio(workload, cs)
        if not ratio <= 1 + rtol:
            assert cs is not None
            worst = cs.scan(workload.F, self.precision, agg="sq", k=1).worst
            raise PrivacyViolationError(
                f"privacy condition broken: pair {worst} has sum_k (F_ki - F_kj)^2 / sigma_k^2 = "
                f"{ratio:.9g} x 2 rho eps_ij (allowed 1 + {rtol:g})")
        return ratio


def design_gaussian(workload: Workload, universe: Universe, metric: Metric, *, rho: Any,
                    loss: str = "squared", **options: Any) -> GaussianDesign:
    """The optimal per-query Gaussian noise for ``rho``-zCDP per unit of ``metric``.

    ``loss``: "squared" (total variance, default), "absolute" (sum of the sigmas), "max" (the
    largest variance: one common sigma) or "log" (geometric mean of the variances). Verified on
    every pair before it is returned (the solver's final scan is the certificate).
    """
    from solvers.gaussian_queries import GAUSSIAN_LOSSES, gaussian_precisions  # cvxpy: on use

    r = check_rho(rho)
    if not isinstance(workload, Workload):
        workload = Workload(workload)
    if loss not in GAUSSIAN_LOSSES:
        raise ValidationError(f"loss = {loss!r}: choose one of {', '.join(GAUSSIAN_LOSSES)}")
    workload.check_universe(universe)
    cs = pair_constraint_set(metric, universe)
    keep = {k: options[k] for k in ("memory_bytes", "tol", "max_rounds", "progress") if k in options}
    unknown = sorted(set(options) - set(keep))
    if unknown:
        raise ValidationError(f"unknown option(s) for a Gaussian design: {', '.join(unknown)}")
    q, report = call_solver(gaussian_precisions, workload.F, cs, loss, **keep)
    with np.errstate(divide="ignore"):
        sigma = np.where(np.isinf(q), 0.0, 1.0 / np.sqrt(2.0 * r * q))
    report["metric"] = repr(metric)
    d = GaussianDesign(sigma, r, method="exact", loss=loss,
                       objective=float(np.sum(sigma**2)), report=report, constraints=cs,
                       unit=metric.fingerprint(universe))
    # sigma was rounded from q: check exactly this sigma once more on every pair
    ratio = d.verify(workload, cs)
    cast("dict[str, Any]", d.report).update(verified_by="scan of sigma after solve", max_ratio=ratio)
    return d
