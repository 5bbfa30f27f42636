"""From metric and workload to a solved design (w, beta), and the improvement factor.

``design(W, U, M, method, loss)`` builds the constraint set {(i, j, eps_ij)} of problem (4) — all
pairs, or only the edges of a graph metric (paper Appendix C; docs/theory.md, "Graph metrics need
only their edges") — and hands it to :mod:`solvers`.  The privacy condition of every design is
Theorem 1: sum_k beta_k w_k |F_ki - F_kj| <= eps_ij.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

import solvers
from dprivacy.errors import (
    PrivacyViolationError,
    ShapeError,
    ValidationError,
)
from dprivacy.metrics.base import Metric
from dprivacy.solver_calls import PRIVACY_RTOL, call_solver
from dprivacy.universe import Universe
from dprivacy.workload import Workload

if TYPE_CHECKING:
    from solvers import ConstraintSet

METHODS = ("closed_form", "equal_split", "uniform", "budget_sharing", "bcd", "exact")
LOSSES = ("squared", "absolute", "max", "log")
NOISES = ("laplace", "gaussian")


@dataclass(frozen=True, eq=False)
class Design:
    """A solved parameter set: per-query scaling ``w`` and noise precision ``beta`` (shape (m,)).

    The Laplace noise scale of query k is ``1 / beta[k]`` (``beta = inf`` means an exact answer);
    ``u = w * beta`` alone determines privacy (docs/theory.md, "The design problem, and why it is
    convex").  ``constraints`` is the constraint set
    the design was solved and verified against (kept for mechanisms to re-check; not compared).
    """

    w: np.ndarray
    beta: np.ndarray
    method: str = "manual"
    loss: str = "squared"
    objective: float = float("nan")
    report: Mapping[str, Any] = field(default_factory=dict)
    constraints: ConstraintSet | None = field(default=None, repr=False)
    #: fingerprint of the (universe, metric) the design was solved for (set by :func:`design`):
    #: the unit a mechanism built from it charges an accountant in
    unit: str | None = field(default=None, repr=False)

    noise = "laplace"

    def __post_init__(self) -> None:
        w = np.atleast_1d(np.array(self.w, dtype=float))
        beta = np.atleast_1d(np.array(self.beta, dtype=float))
        if w.ndim != 1 or beta.shape != w.shape:
            raise ShapeError(f"w {w.shape} and beta {beta.shape} must be vectors of one length m")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValidationError(f"w = {w}: scalings must be finite and >= 0")
        if np.any(np.isnan(beta)) or np.any(beta < 0):
            raise ValidationError(f"beta = {beta}: precisions must be >= 0 (inf = exact answer)")
        for a in (w, beta):
            a.setflags(write=False)
        object.__setattr__(self, "w", w)
        object.__setattr__(self, "beta", beta)
        object.__setattr__(self, "report", dict(self.report))

    @property
    def m(self) -> int:
        return int(self.w.shape[0])

    @property
    def u(self) -> np.ndarray:
        """u = w * beta, the effective precision that fixes the privacy loss (docs/theory.md)."""
        with np.errstate(invalid="ignore"):
            u = self.w * self.beta
        return np.where(self.w == 0, 0.0, u)  # 0 * inf = 0: a zero-weight query reveals nothing

    @property
    def noise_scale(self) -> np.ndarray:
        """Laplace scale 1 / beta_k of each query (0 where beta is infinite)."""
        with np.errstate(divide="ignore"):
            return np.where(np.isinf(self.beta), 0.0, 1.0 / self.beta)

    def error_bars(self, level: float = 0.95) -> np.ndarray:
        """Half-width h_k of an interval that holds the Laplace noise of query k with probability
        ``level``: P(|Lap(1/beta_k)| <= h_k) = level, i.e. h_k = ln(1 / (1 - level)) / beta_k
        (0 for a query answered exactly). A released answer y_k then lies within h_k of
        w_k f_k(x) with that probability: of the query's own answer when w_k = 1 (the default;
        w_k < 1 only when ``design(..., n=...)`` shrinks the answer). The noise is independent
        of the data, so these bars are public and cost no budget.

        Examples
        --------
        >>> d = Design(w=[1.0, 1.0], beta=[0.5, float("inf")])
        >>> [round(float(h), 4) for h in d.error_bars(0.95)]   # 2 ln 20, exact
        [5.9915, 0.0]
        """
        if not 0 < level < 1:
            raise ValidationError(f"level = {level}: a probability strictly between 0 and 1")
        return self.noise_scale * float(np.log(1 / (1 - level)))

    def max_ratio(self, workload: Workload, constraints: ConstraintSet | None = None) -> float:
        """max over constrained pairs of sum_k u_k |F_ki - F_kj| / eps_ij (<= 1 means private)."""
        cs = constraints if constraints is not None else self.constraints
        if cs is None:
            raise PrivacyViolationError(
                "this design carries no constraint set: pass the universe and metric so that its "
                "privacy condition can be checked"
            )
        if workload.m != self.m:
            raise ShapeError(f"the design has m = {self.m} queries, the workload m = {workload.m}")
        return float(cs.scan(workload.F, self.u).max_ratio)

    def verify(self, workload: Workload, constraints: ConstraintSet | None = None,
               rtol: float = PRIVACY_RTOL) -> float:
        """Check Theorem 1 over all constrained pairs; return the max ratio or raise."""
        cs = constraints if constraints is not None else self.constraints
        ratio = self.max_ratio(workload, cs)
        assert cs is not None  # max_ratio raised otherwise
        if not ratio <= 1 + rtol:
            worst = cs.scan(workload.F, self.u, k=1)
            raise PrivacyViolationError(
                f"privacy condition broken: pair {worst.worst} loses {ratio:.9g} x its budget "
                f"(allowed 1 + {rtol:g})"
            )
        return ratio

    def plot(self, workload: Workload, universe: Universe, metric: Metric, *,
             path: Any = None, max_pairs: int = 200) -> Any:
        """A picture of this design: noise per query against the ε_min-DP baseline, and the
        pairs whose privacy constraint binds over the universe's points (a lon/lat map for a
        geodesic metric). Returns a matplotlib ``Figure``, also written to ``path`` if given;
        needs the ``[plot]`` extra (see :func:`dprivacy.plotting.plot_design`)."""
        from dprivacy.plotting import plot_design

        return plot_design(self, workload, universe, metric, path=path, max_pairs=max_pairs)


def design(
    workload: Workload, universe: Universe, metric: Metric, method: str = "exact",
    loss: str = "squared", n: int | None = None, *, noise: str = "laplace", rho: Any = None,
    **options: Any,
) -> Any:
    """Choose (w, beta) for ``workload`` under the budget ``metric`` on ``universe``.

    Parameters
    ----------
    workload : Workload
        The m linear queries, F of shape (m, N).
    universe, metric :
        The budget eps_ij = d_X(chi_i, chi_j).  Graph-type metrics are solved on their edges.
    method : {"closed_form", "equal_split", "uniform", "budget_sharing", "bcd", "exact"}
        ``closed_form`` is the single-query optimum of paper §4.1 (beta = min eps_ij / |f_i - f_j|);
        ``equal_split``, ``uniform`` and ``budget_sharing`` are Strategies 1-3 (Algorithm 3);
        ``bcd`` the paper's block coordinate descent; ``exact`` the convex program in u (docs/theory.md).
    loss : {"squared", "absolute", "max", "log"}
    n : int, optional
        Number of records (public under bounded DP).  With method "exact" and the squared or
        absolute loss, (w, u) are then optimised jointly (docs/theory.md, "The joint optimum for a
        given n"; see the report keys ``global_optimum``, ``convex_region`` and ``lower_bound``).
    noise : {"laplace", "gaussian"}
        ``"gaussian"`` (with ``rho``) returns a :class:`~dprivacy.gaussian_design.GaussianDesign`:
        per-query Gaussian noise that is ``rho``-zCDP per unit of the metric, the exact optimum
        of the convex program in 1 / sigma_k^2 (docs/theory.md, "Gaussian noise and metric
        zCDP"); ``method`` must then be "exact" and ``n`` None.
    rho : float, only with ``noise="gaussian"``: the zCDP budget per unit of the metric.
    **options : passed to :func:`solvers.design` (``memory_bytes``, ``tol``, ``progress``, ...).

    Returns
    -------
    Design, verified over all constrained pairs: sum_k u_k |F_ki - F_kj| <= eps_ij.
    **A query that never changes when a record moves** (above all the total count, a row of
    ones) gets beta = inf: it is released exactly, with no noise, and an
    :class:`ExactAnswerWarning` names it (docs/theory.md, "What d_X-privacy does not hide").  The report
    says how (``verified_by``: the solver's final scan of exactly this u is reused as the
    certificate, else a new scan) and counts the scans over all pairs (``passes``: total, full,
    pruned -- exact branch and bound for metrics with a geometric index -- pairs evaluated, and
    per purpose).

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]]))
    >>> d = dp.design(dp.Workload([[0.0, 1.0, 2.0]]), U, dp.metrics.Euclidean(1.0),
    ...               method="closed_form")
    >>> float(d.beta[0])
    1.0
    """
    if not isinstance(workload, Workload):
        workload = Workload(workload)
    if noise not in NOISES:
        raise ValidationError(f"noise = {noise!r}: choose one of {', '.join(NOISES)}")
    if noise == "gaussian":
        if rho is None:
            raise ValidationError("noise='gaussian' needs rho= (the zCDP budget per unit of the "
                                  "metric), e.g. rho=0.5")
        if method != "exact" or n is not None:
            raise ValidationError("noise='gaussian' has one method, 'exact' (the convex program "
                                  "in 1 / sigma^2), and no n")
        from dprivacy.gaussian_design import design_gaussian

        return design_gaussian(workload, universe, metric, rho=rho, loss=loss, **options)
    if rho is not None:
        raise ValidationError("rho= is the zCDP budget of Gaussian noise: pass noise='gaussian' "
                              "too (a Laplace design's budget is the metric itself)")
    if method not in METHODS:
        raise ValidationError(f"method = {method!r}: choose one of {', '.join(METHODS)}")
    if loss not in LOSSES:
        raise ValidationError(f"loss = {loss!r}: choose one of {', '.join(LOSSES)}")
    if method == "closed_form" and workload.m != 1:
        raise ValidationError(
            f"method='closed_form' is the single-query optimum but the workload has m = "
            f"{workload.m} queries; use 'exact' or a multi-query strategy"
        )
    if n is not None and (int(n) != n or n < 0):
        raise ValidationError(f"n = {n}: the number of records is a non-negative integer")
    workload.check_universe(universe)
    cs = metric.constraint_set(universe)
    before = cs.stats.snapshot()
    res = call_solver(solvers.design, workload.F, cs, method=method, loss=loss, n=n, **options)
    report = dict(res.report)
    report.setdefault("metric", repr(metric))
    d = Design(res.w, res.beta, method=res.method, loss=res.loss, objective=float(res.objective),
               report=report, constraints=cs, unit=metric.fingerprint(universe))
    verified_by = _verify_or_reuse(d, workload, cs, res.report.get("certificate"))
    cast("dict[str, Any]", d.report).update(verified_by=verified_by,
                                            passes=cs.stats.since(before))
    _warn_exact(d, workload)
    return d


class ExactAnswerWarning(UserWarning):
    """Some queries are released exactly (beta = inf): d_X-privacy does not hide them."""


def _warn_exact(d: Design, workload: Workload) -> None:
    """Say loudly which queries the design releases with no noise at all, and why."""
    exact = np.flatnonzero(np.isinf(d.beta) & (d.w > 0))
    if exact.size == 0:
        return
    names = workload.query_names()
    shown = ", ".join(repr(names[k]) for k in exact[:8]) + (", ..." if exact.size > 8 else "")
    warnings.warn(
        f"{exact.size} of {workload.m} queries ({shown}) will be released EXACTLY, with no noise: "
        "their answer never changes when a record moves between elements at finite distance "
        "(e.g. the total count: moving a record never changes the total). d_X-privacy protects "
        "where a record is, not how many records there are; drop such queries from the workload "
        "if their answer must stay secret (docs/theory.md, 'What d_X-privacy does not hide')",
        ExactAnswerWarning, stacklevel=3)


def _verify_or_reuse(d: Design, workload: Workload, cs: ConstraintSet,
                     certificate: Mapping[str, Any] | None) -> str:
    """Reuse the solver's final scan over all pairs as the verification certificate when it was
    a scan of exactly this design's u (Theorem 1 over every pair of ``cs``); else scan again.
    Raises :class:`PrivacyViolationError` if the condition fails."""
    if (certificate is not None and certificate.get("agg") == "sum"
            and certificate.get("multiplier") == 1.0
            and np.array_equal(np.asarray(certificate["u"]), d.u)):
        ratio = float(certificate["max_ratio"])
        if not ratio <= 1 + PRIVACY_RTOL:
            raise PrivacyViolationError(
                f"privacy condition broken: the solver's final scan found max ratio {ratio:.9g} "
                f"(allowed 1 + {PRIVACY_RTOL:g})")
        return f"certificate: the solver's final {certificate['strategy']} scan of this u"
    d.verify(workload, cs)
    return "scan after solve"


class ImprovementFactorWarning(UserWarning):
    """Some queries were left out of the improvement factor (w = 0, or answered exactly)."""


#: A scaling w_k at or below this (the solvers' default tolerance, 1e-9) is numerically zero:
#: the query's answer w_k F_k x is below the solver's precision, so its beta_k says nothing and
#: the query is treated as w_k = 0 by :func:`improvement_factor`.
W_ZERO_TOL = 1e-9


def improvement_factor(
    workload: Workload, universe: Universe, metric: Metric, design: Design, *,
    per_query: bool = False,
) -> float | np.ndarray:
    """The paper's improvement factor IF (eq. (6)): baseline noise / designed noise.

    The baseline is the eps_min-DP Laplace mechanism, scale Delta F / eps_min on every query;
    query k of the design has scale 1 / beta_k, so IF_k = beta_k Delta F / eps_min.  For m = 1
    this is beta* Delta f / eps_min >= 1; for m > 1 the geometric mean over queries is returned.
    Queries answered exactly (beta_k = inf) and queries with w_k = 0 (their answer is 0 plus
    noise: it carries no information, so beta_k means nothing) are left out of the mean, with an
    :class:`ImprovementFactorWarning` naming them; a w_k at or below :data:`W_ZERO_TOL` (1e-9, the
    solvers' tolerance) is numerically zero and treated as w_k = 0, and the warning says so.
    ``per_query=True`` returns the vector IF_k (inf for exact answers, NaN for w_k = 0).  eps_min
    is taken over pairs of positive distance (zero-distance elements are indistinguishable, i.e.
    merged).

    The design is first checked against Theorem 1 for ``metric.constraint_set(universe)``: a
    design that is not private (e.g. a query answered exactly although it separates two
    elements) is refused with :class:`~dprivacy.errors.PrivacyViolationError` instead of being
    credited with an infinite improvement.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> W, M = dp.Workload([[0.0, 1.0, 2.0]]), dp.metrics.Euclidean(1.0)
    >>> float(improvement_factor(W, U, M, dp.design(W, U, M, method="closed_form")))
    2.0
    """
    workload.check_universe(universe)
    if design.m != workload.m:
        raise ShapeError(f"the design has m = {design.m} queries, the workload m = {workload.m}")
    eps_min = metric.eps_min(universe)
    dF = workload.sensitivity()
    if not np.isfinite(eps_min):
        raise ValidationError("no pair is constrained (eps_min = inf): IF is undefined")
    if dF == 0:
        raise ValidationError("every query is constant (Delta F = 0): IF is undefined (0/0)")
    design.verify(workload, metric.constraint_set(universe))  # PrivacyViolationError if not private
    w = np.asarray(design.w)
    silent = w <= W_ZERO_TOL
    tiny = silent & (w > 0)
    per = np.where(silent, np.nan, design.beta * dF / eps_min)
    if per_query:
        return per
    exact = ~silent & np.isinf(per)
    if silent.any() or exact.any():
        parts = []
        if silent.any():
            note = (f", {int(tiny.sum())} of them numerically zero (0 < w <= {W_ZERO_TOL:g}, the "
                    "solver's tolerance)") if tiny.any() else ""
            parts.append(f"{int(silent.sum())} with w = 0 (answered by 0: no information{note}) "
                         f"{_first(np.flatnonzero(silent))}")
        if exact.any():
            parts.append(f"{int(exact.sum())} answered exactly (beta = inf) "
                         f"{_first(np.flatnonzero(exact))}")
        warnings.warn(f"improvement factor: left {' and '.join(parts)} out of the geometric mean "
                      f"over {workload.m} queries", ImprovementFactorWarning, stacklevel=2)
    finite = per[~silent & np.isfinite(per)]
    if finite.size == 0:
        return float("inf") if exact.any() else float("nan")
    if np.any(finite == 0):
        return 0.0
    return float(np.exp(np.mean(np.log(finite))))


def _first(idx: np.ndarray, k: int = 8) -> str:
    shown = ", ".join(map(str, idx[:k].tolist()))
    return f"(queries {shown}{', ...' if idx.size > k else ''})"
