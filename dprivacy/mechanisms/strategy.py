"""Strategy (matrix) mechanisms under d_X: release A x + Lap(1)^p, answer F by least squares.

A (w, beta) design can only rescale each query; a strategy A (p x N) measures other linear
functions and recombines them: y = A x + Z with Z_r ~ Lap(1) i.i.d., answers F x_hat with x_hat the
least-squares estimate (docs/theory.md, "Strategy mechanisms").  Privacy condition: for every
constrained pair, ``||A (e_i - e_j)||_1 <= eps_ij`` -- the Laplace density of y changes by at most
``exp(||A (x - x')||_1)`` when one record moves from chi_i to chi_j (graph metrics: the edges
suffice).  The total n = 1'x never changes between neighbours, so it is used exactly.
Expected total squared error: ``2 ||F A^+||_F^2`` (on the complement of 1).

Strategies are optimised in :mod:`solvers.strategy` (HDMM-style, McKenna et al., PVLDB 2018;
Blowfish's transformational equivalence for lines and trees, Haney, Machanavajjhala and Ding,
PVLDB 2015).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

import solvers.strategy as st
from dprivacy import gaussian_noise, noise
from dprivacy.design import PRIVACY_RTOL, Design, call_solver
from dprivacy.errors import PrivacyViolationError, ShapeError, ValidationError
from dprivacy.gaussian_design import check_rho, pair_constraint_set
from dprivacy.implicit_workload import ImplicitWorkload, as_workload
from dprivacy.mechanisms import kron_strategy as ks
from dprivacy.mechanisms._release import charge_release, setup_accounting
from dprivacy.mechanisms.gaussian_strategy_design import solve_gaussian_strategy
from dprivacy.universe import check_histogram
from dprivacy.workload import Workload
from solvers.errors import SolverError
from solvers.strategy.basis import Mat, is_sparse
from solvers.strategy.estimate import estimate_map
from solvers.strategy.implicit import basis_gram
from solvers.strategy.kron import KronEstimator, KronGrid, design_kron, kron_error, kron_ratio
from solvers.strategy.objective import gram

if TYPE_CHECKING:
    from dprivacy.accounting import Accountant
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe
    from solvers import ConstraintSet

__all__ = ["StrategyDesign", "StrategyMechanism", "design_strategy", "strategy_from_json",
           "strategy_to_json"]


def _sq(M: Mat) -> np.ndarray:
    """Row sums of M**2."""
    if is_sparse(M):
        return np.asarray(sp.csr_array(M).multiply(M).sum(axis=1)).ravel()
    return np.sum(np.asarray(M) ** 2, axis=1)


@dataclass(eq=False)
class StrategyDesign:
    """A strategy ``A = C T`` for a workload (T: the :class:`solvers.strategy.Basis`).

    ``strategy`` is the scaled (p, N) matrix A such that ``A x + Lap(1)^p`` is d_X-private;
    answers are ``M y + n o`` (least squares from the release y and the known total n), or, for
    an :class:`~dprivacy.implicit_workload.ImplicitWorkload`, ``F x_hat`` with the estimated
    histogram ``x_hat = X y + n z`` (no m x p answer map is formed).
    """

    workload: Workload | ImplicitWorkload
    C: Mat
    basis: st.Basis
    M: Mat | None
    o: np.ndarray | None
    max_ratio: float = float("nan")
    lower_bound: float | None = None
    report: dict[str, Any] = field(default_factory=dict)
    constraints: ConstraintSet | None = field(default=None, repr=False)
    method: str = "strategy"
    X: np.ndarray | None = field(default=None, repr=False)
    z: np.ndarray | None = field(default=None, repr=False)
    #: "laplace" (rows released with Lap(1)) or "gaussian" (rows with N(0, 1), ``rho``-zCDP per
    #: unit of the metric: ``||A (e_i - e_j)||_2^2 <= 2 rho eps_ij`` on every pair)
    noise: str = "laplace"
    rho: float | None = None
    #: a Kronecker strategy (``C`` a :class:`~dprivacy.mechanisms.kron_strategy.KronOperator`):
    #: the grid and budget it was designed and checked for (module kron_strategy)
    grid: KronGrid | None = field(default=None, repr=False)

    @property
    def is_kron(self) -> bool:
        """True for a Kronecker strategy ``A = Bx (x) By`` (large grids; never materialised)."""
        return isinstance(self.C, ks.KronOperator)

    @property
    def m(self) -> int:
        return self.workload.m

    @property
    def p(self) -> int:
        """Number of released measurements (rows of the strategy)."""
        return int(self.C.shape[0])

    @property
    def strategy(self) -> np.ndarray:
        """The scaled (p, N) strategy A (dense; a Kronecker strategy only on small grids)."""
        if self.is_kron:
            return self.C.dense()
        return st.materialise(self.C, self.basis)

    def _maps(self) -> None:
        """Derive the answer (or estimate) map of a design built by hand without it."""
        if self.M is None and self.X is None and not self.is_kron:
            self.M, self.o, self.X, self.z = _maps_for(self.workload, self.C, self.basis)

    def query_variances(self) -> np.ndarray:
        """Variance of every answer: the diagonal of v F A^+ A^+' F' (shape (m,)), v = 2 for
        Laplace rows, 1 for Gaussian rows."""
        if self.is_kron:
            assert isinstance(self.workload, ImplicitWorkload)
            return ks.kron_query_variances(self.workload,
                                           KronEstimator(self.C.Bx, self.C.By, self.C.cells))
        self._maps()
        return _variances(self.workload, self.M, self.X, _ROW_VARIANCE[self.noise])

    def expected_squared_error(self, x: object = None) -> float:
        """E||answers - F x||^2 = v ||F A^+||_F^2 (unbiased: the same for every histogram x)."""
        if self.is_kron:
            return _kron_total(self.workload, self.C)
        return float(np.sum(self.query_variances()))

    def answer(self, y: np.ndarray, n: float) -> np.ndarray:
        """Least-squares answers from measurements y and the total n."""
        if self.is_kron:
            x_hat = KronEstimator(self.C.Bx, self.C.By, self.C.cells).estimate(y, n)
            return self.workload.answer(x_hat)
        self._maps()
        return _answers(self.workload, self.M, self.o, self.X, self.z, y, n)


def _kron_total(W: Workload | ImplicitWorkload, C: ks.KronOperator) -> float:  # noqa: N803
    """Expected total squared error of a Kronecker strategy on all rectangles (closed form)."""
    assert isinstance(W, ImplicitWorkload) and W.kind == "rectangles"
    Gx, Gy = W.axis_grams()  # noqa: N806
    return float(call_solver(kron_error, C.Bx, C.By, Gx, Gy, C.cells))


def _frozen(C: Mat) -> Mat:
    """A read-only float64 copy of the strategy (CSR when sparse)."""
    if isinstance(C, ks.KronOperator):
        return ks.KronOperator(C.Bx, C.By, C.cells)
    if is_sparse(C):
        S = sp.csr_array(C, dtype=np.float64, copy=True)
        for arr in (S.data, S.indices, S.indptr):
            arr.setflags(write=False)
        return S
    D = np.array(C, dtype=np.float64, copy=True)
    D.setflags(write=False)
    return D


#: Largest number of answers a Kronecker strategy's release() returns (1.5 GiB of float64);
#: beyond, release_estimate() gives the histogram the answers are sums of.
MAX_ANSWERS = 2**28 * 3 // 4

#: variance of one strategy row's noise: Lap(1) or N(0, 1)
_ROW_VARIANCE = {"laplace": 2.0, "gaussian": 1.0}
#: rows of F times X per batch of the per-query variances of an explicit workload (~32 MB)
_BATCH_ENTRIES = 2**22


def _variances(W: Workload | ImplicitWorkload, M: Mat | None, X: np.ndarray | None,
               v: float = 2.0) -> np.ndarray:
    if M is not None:
        return v * _sq(M)
    assert X is not None
    if isinstance(W, ImplicitWorkload):
        # a covariance's quadratic forms are >= 0: clip the rounding of exact zeros (the total)
        return np.maximum(v * W.quadratic_diagonal(X @ X.T), 0.0)
    # diag(v F X X' F') a batch of queries at a time: memory follows the output (m), not m x p
    F = sp.csr_array(W.F) if sp.issparse(W.F) else np.asarray(W.F)
    out = np.empty(W.m)
    step = max(1, _BATCH_ENTRIES // max(X.shape[1], 1))
    for r in range(0, W.m, step):
        B = np.asarray(F[r:r + step] @ X)
        out[r:r + step] = np.sum(B * B, axis=1)
    return v * out


def _answers(W: Workload | ImplicitWorkload, M: Mat | None, o: np.ndarray | None,
             X: np.ndarray | None, z: np.ndarray | None, y: np.ndarray, n: float) -> np.ndarray:
    yv = np.asarray(y, dtype=np.float64).ravel()
    if M is not None:
        assert o is not None
        return np.asarray(M @ yv).ravel() + float(n) * o
    assert X is not None and z is not None
    x_hat = X @ yv + float(n) * z
    if isinstance(W, ImplicitWorkload):
        return W.answer(x_hat)
    return np.asarray(W.F @ x_hat, dtype=np.float64).ravel()


def _maps_for(W: Workload | ImplicitWorkload, C: Mat, basis: st.Basis
              ) -> tuple[Mat | None, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(M, o, X, z): the answer map ``M y + n o`` of an explicit workload, or the estimate map
    ``x_hat = X y + n z`` of an implicit one after checking that every query is answerable."""
    if isinstance(W, ImplicitWorkload):
        G = call_solver(basis_gram, basis, W.gram())
        X, z, share = call_solver(estimate_map, C, basis, G)
        if share > 1e-9:
            raise ValidationError(f"{share:.3g} of the workload lies outside the row space of "
                                  "the strategy: it cannot be answered from the release")
        return None, None, X, z
    FK, f0 = basis.workload(W.F)
    if not st.uses_answer_map(W.m, int(C.shape[0])):  # as for an implicit workload: no m x p map
        G = call_solver(gram, FK, basis.kind == "identity")
        X, z, share = call_solver(estimate_map, C, basis, G)
        if share > 1e-9:
            raise ValidationError(f"{share:.3g} of the workload lies outside the row space of "
                                  "the strategy: it cannot be answered from the release")
        return None, None, X, z
    M, o = call_solver(st.answer_map, C, FK, f0, basis.kind == "identity")
    return M, o, None, None


def _codes(universe: Universe) -> np.ndarray | None:
    keys = list(universe.key_columns)
    if universe.coords is not None or len(keys) < 2 or not universe.is_full_product():
        return None
    return np.stack([np.asarray(universe.elements[c].factorize()[0]) for c in keys], axis=1)


def design_strategy(workload: Workload | Any, universe: Universe, metric: Metric, *,
                    baseline: Design | None = None, noise: str = "laplace",
                    rho: float | None = None, structure: str = "auto",
                    **options: Any) -> StrategyDesign:
    """Optimise a strategy mechanism for ``workload`` under ``metric`` on ``universe``.

    Parameters
    ----------
    workload : Workload (or an (m, N) matrix), or an ImplicitWorkload (all ranges, prefixes or
        rectangles: optimised through its Gram matrix, never materialised).
    universe, metric : the budget eps_ij = d_X(chi_i, chi_j); graph metrics (and points on a
        line) are constrained on their edges, a spanning tree (a line) in its edge basis.
    baseline : a (w, beta) :class:`Design` of this workload to start from (its A = diag(u) F);
        default: ``design(..., method="exact")`` is solved when N <= 2048.
    noise : "laplace" (default: ``A x + Lap(1)^p``, eps_ij-d_X-private) or "gaussian"
        (``A x + N(0, I_p)``, ``rho``-zCDP per unit of the metric: the convex program in
        X = A'A solved to a certified gap, see :mod:`solvers.strategy.gaussian`).
    rho : the zCDP parameter per unit of the metric (Gaussian noise only; required there).
    structure : "auto" (default), "kronecker" or "dense".  All rectangles of a grid of at least
        32 x 32 cells under the Euclidean metric get a strategy ``[c I ; A_x (x) A_y]`` (every
        cell and a Kronecker product; "kronecker" forces it on any grid): designed, checked and
        answered from its two factors (:mod:`dprivacy.mechanisms.kron_strategy`; beyond 8192
        cells the only strategy, Euclidean metric only).
    **options : passed to :func:`solvers.strategy.optimize_strategy` (``starts``, ``rounds``,
        ``maxiter``, ``time_limit`` in seconds, ``polish_top``, ``lower_bound``; a Kronecker
        design takes ``time_limit`` and ``lower_bound``), or for
        Gaussian noise to
        :func:`solvers.strategy.gaussian_design.optimize_gaussian_strategy` (``tol``, the
        certified relative gap at which to stop, ``time_limit``, ``max_iter``, ``threads``).

    Returns
    -------
    StrategyDesign, verified by an exact scan over every constrained pair.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.arange(8.0)[:, None])
    >>> W = dp.Workload.range_queries(8, [(0, 3), (2, 6), (5, 7)])
    >>> d = dp.design_strategy(W, U, dp.metrics.Euclidean(0.5))
    >>> d.strategy.shape[1], d.expected_squared_error() > 0
    (8, True)
    """
    W = as_workload(workload)
    W.check_universe(universe)
    if structure not in ("auto", "kronecker", "dense"):
        raise ValidationError(f"structure = {structure!r}: choose 'auto', 'kronecker' or 'dense'")
    rect = isinstance(W, ImplicitWorkload) and W.kind == "rectangles"
    if structure == "kronecker" and not rect:
        raise ValidationError("a Kronecker strategy is for all rectangles of a grid "
                              "(ImplicitWorkload.all_rectangles)")
    auto_kron = structure == "auto" and rect and W.N >= ks.KRON_MIN_N and noise == "laplace" \
        and baseline is None and (W.N > 8192 or ks.kron_metric(metric))
    if rect and (structure == "kronecker" or auto_kron):
        if noise != "laplace" or rho is not None or baseline is not None:
            raise ValidationError("a Kronecker strategy takes Laplace noise and no baseline")
        assert isinstance(W, ImplicitWorkload)
        return _design_kron(W, universe, metric, **options)
    if noise == "gaussian":
        if baseline is not None:
            raise ValidationError("a Gaussian strategy is optimised from its dual; it takes no "
                                  "(w, beta) baseline")
        res, cs, r = solve_gaussian_strategy(W, universe, metric, rho=rho, **options)
        report = {**res.report, "metric": repr(metric)}
        return StrategyDesign(W, res.C, res.basis, res.M, res.o, res.max_ratio, res.lower_bound,
                              report, cs, method="gaussian strategy", X=res.X, z=res.z,
                              noise="gaussian", rho=r)
    if noise != "laplace":
        raise ValidationError(f"noise = {noise!r}: choose 'laplace' or 'gaussian'")
    if rho is not None:
        raise ValidationError("rho is the budget of Gaussian noise: pass noise='gaussian'")
    implicit = isinstance(W, ImplicitWorkload)
    if implicit and baseline is not None:
        raise ValidationError("a (w, beta) baseline needs an explicit Workload; an "
                              "ImplicitWorkload starts from the structured strategies only")
    if implicit and "gram_matrix" in options:
        raise ValidationError("an ImplicitWorkload brings its own Gram matrix")
    if implicit and set(options.get("starts") or ()) & {"design", "rowspace"}:
        raise ValidationError("the 'design' and 'rowspace' starts need an explicit Workload; an "
                              "ImplicitWorkload starts from identity, tree, hierarchical, grid "
                              "and marginals")
    if universe.N < 2:
        raise ValidationError("a universe of one element: every query is a multiple of the "
                              "total, which is known; there is nothing to design")
    cs = metric.constraint_set(universe)
    u = None
    if baseline is not None:
        if baseline.m != W.m:
            raise ShapeError(f"the baseline design has m = {baseline.m}, the workload m = {W.m}")
        u = baseline.u
    F = None
    if isinstance(W, ImplicitWorkload):
        options = {**options, "gram_matrix": W.gram()}
    else:
        F = W.F
    res = call_solver(st.optimize_strategy, F, cs, u=u, coords=universe.coords,
                      codes=_codes(universe), **options)
    report = dict(res.report)
    report["metric"] = repr(metric)
    return StrategyDesign(W, res.C, res.basis, res.M, res.o, res.max_ratio, res.lower_bound,
                          report, cs, X=res.X, z=res.z)


def _design_kron(W: ImplicitWorkload, universe: Universe, metric: Metric, *,  # noqa: N803
                 time_limit: float | None = None, lower_bound: bool = True) -> StrategyDesign:
    """A Kronecker strategy for all rectangles (module kron_strategy); the search stops after
    ``time_limit`` seconds (default :func:`ks.default_time_limit`)."""
    if time_limit is None:
        time_limit = ks.default_time_limit(W.N)
    grid = ks.kron_grid(universe, metric)
    Gx, Gy = W.axis_grams()  # noqa: N806
    res = call_solver(design_kron, Gx, Gy, grid, time_limit=time_limit, lower_bound=lower_bound)
    report = {**res.report, "metric": repr(metric), "identity_error": res.identity_error}
    C = ks.KronOperator(res.Bx, res.By, res.cells)
    return StrategyDesign(W, C, st.Basis.identity(W.N), None, None, res.max_ratio,
                          res.lower_bound, report, None, grid=grid)


class StrategyMechanism:
    """Release ``A x + Lap(1)^p`` and answer the workload by least squares.

    The constraint ``||A (e_i - e_j)||_1 <= eps_ij`` is re-checked over every constrained pair
    (the edges of a graph metric) at construction, against ``universe`` + ``metric`` when given,
    else against the constraint set the design carries; the answer map is recomputed from the
    strategy and the workload (it is never trusted from the design).

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.arange(6.0)[:, None])
    >>> W = dp.Workload.range_queries(6, [(0, 2), (1, 4)])
    >>> M = dp.metrics.Euclidean(1.0)
    >>> mech = dp.StrategyMechanism(W, dp.design_strategy(W, U, M), universe=U, metric=M)
    >>> mech.release(np.array([3, 1, 4, 1, 5, 9]), rng=0, secure=False).shape
    (2,)
    """

    kind = "strategy"
    #: the estimate map ``x_hat = X y + n z`` of an implicit workload (None: the answer map M, o)
    X: np.ndarray | None = None
    z: np.ndarray | None = None

    def __init__(self, workload: Workload | ImplicitWorkload | Any, design: StrategyDesign, *,
                 universe: Universe | None = None, metric: Metric | None = None) -> None:
        W = as_workload(workload)
        if not isinstance(design, StrategyDesign):
            raise ValidationError(f"design is a {type(design).__name__}: expected a StrategyDesign "
                                  "(dprivacy.design_strategy)")
        if design.noise not in ("laplace", "gaussian"):
            raise ValidationError(f"unknown noise {design.noise!r} of the strategy design")
        gaussian = design.noise == "gaussian"
        rho = check_rho(design.rho, "the design's rho") if gaussian else 1.0
        if design.is_kron:
            self._init_kron(W, design, universe, metric)
            return
        if design.basis.N != W.N:
            raise ShapeError(f"the strategy has N = {design.basis.N}, the workload N = {W.N}")
        if (universe is None) != (metric is None):
            raise ValidationError("give both universe and metric, or neither")
        if universe is not None:
            assert metric is not None
            W.check_universe(universe)
            # Gaussian noise: every pair (a squared norm is not subadditive along graph edges)
            cs = pair_constraint_set(metric, universe) if gaussian else metric.constraint_set(universe)
        elif design.constraints is not None:
            cs = design.constraints
        else:
            raise PrivacyViolationError("no constraint set to check the strategy against: pass "
                                        "universe= and metric=")
        if gaussian and cs.kind == "edges":
            raise PrivacyViolationError("a Gaussian strategy is checked on every pair, and the "
                                        "design carries a graph's edges only: pass universe= and "
                                        "metric=")
        # the mechanism keeps its own read-only copy of the strategy and basis, taken before the
        # check: later writes to the caller's design change nothing that is released
        C = _frozen(design.C)
        basis = call_solver(st.Basis.from_json, design.basis.to_json())
        vals = C.data if is_sparse(C) else C
        if not np.all(np.isfinite(vals)):
            raise ValidationError("the strategy has NaN or infinite entries")
        if gaussian:  # sum over rows of A of (A_ri - A_rj)^2 / (2 rho eps_ij) <= 1 on every pair
            A = C if basis.kind == "identity" else call_solver(st.materialise, C, basis)
            sc = cs.scan(A, np.full(A.shape[0], 1.0 / (2.0 * rho)), agg="sq", tag="strategy")
            ratio, worst = float(sc.max_ratio), sc.worst
        else:
            ratio, worst, _ = call_solver(st.strategy_scan, C, basis, cs)
        if not ratio <= 1 + PRIVACY_RTOL:
            norm = "||A (e_i - e_j)||_2^2 / (2 rho eps_ij)" if gaussian else \
                "||A (e_i - e_j)||_1 / eps_ij"
            raise PrivacyViolationError(
                f"privacy condition broken: {norm} = {ratio:.9g} at pair "
                f"{worst} (allowed 1 + {PRIVACY_RTOL:g}); scale the strategy down")
        self.M, self.o, self.X, self.z = _maps_for(W, C, basis)
        self.workload = W
        self.design = StrategyDesign(W, C, basis, self.M, self.o, float(ratio), design.lower_bound,
                                     dict(design.report), cs, design.method, self.X, self.z,
                                     noise=design.noise, rho=design.rho)
        self.constraints = cs
        self.max_ratio_ = float(ratio)
        self.release_notion = "zcdp" if gaussian else "pure"
        setup_accounting(self, universe, metric, scale=rho if gaussian else 1.0)

    def _init_kron(self, W: Workload | ImplicitWorkload, design: StrategyDesign,  # noqa: N803
                   universe: Universe | None, metric: Metric | None) -> None:
        """A Kronecker strategy: checked by the structured bound of its factors against the grid
        of ``universe`` + ``metric`` (else the grid the design carries), answered by the
        per-axis estimate (module kron_strategy); never an N x N matrix."""
        if design.noise != "laplace":
            raise ValidationError("a Kronecker strategy is released with Laplace noise")
        if not (isinstance(W, ImplicitWorkload) and W.kind == "rectangles"):
            raise ValidationError("a Kronecker strategy answers all rectangles of a grid "
                                  "(ImplicitWorkload.all_rectangles)")
        if (universe is None) != (metric is None):
            raise ValidationError("give both universe and metric, or neither")
        if universe is not None:
            assert metric is not None
            W.check_universe(universe)
            grid = ks.kron_grid(universe, metric)
        elif design.grid is not None:
            grid = design.grid
        else:
            raise PrivacyViolationError("no grid to check the Kronecker strategy against: pass "
                                        "universe= and metric=")
        C = _frozen(design.C)
        if C.shape[1] != W.N or grid.shape != W.shape_:
            raise ShapeError(f"the strategy has N = {C.shape[1]} over a {grid.shape} grid, the "
                             f"workload N = {W.N} over {W.shape_}")
        ratio, where = call_solver(kron_ratio, C.Bx, C.By, grid, C.cells)
        if not ratio <= 1 + PRIVACY_RTOL:
            raise PrivacyViolationError(
                f"privacy condition broken: the bound on ||A (e_i - e_j)||_1 / eps_ij of the "
                f"Kronecker strategy is {ratio:.9g} at coordinate differences {where} (allowed "
                f"1 + {PRIVACY_RTOL:g}); scale the strategy down")
        self._kron = call_solver(KronEstimator, C.Bx, C.By, C.cells)
        self.M = self.o = self.X = self.z = None
        self.workload = W
        self.design = StrategyDesign(W, C, st.Basis.identity(W.N), None, None, float(ratio),
                                     design.lower_bound, dict(design.report), None, design.method,
                                     grid=grid)
        self.constraints = None
        self.max_ratio_ = float(ratio)
        self.release_notion = "pure"
        setup_accounting(self, universe, metric)

    _kron: KronEstimator | None = None
    #: the constraint set the strategy was checked against (None: a Kronecker strategy, checked
    #: against its grid by the structured bound)
    constraints: ConstraintSet | None

    def query_variances(self) -> np.ndarray:
        """Variance of every answer (shape (m,))."""
        if self._kron is not None:
            assert isinstance(self.workload, ImplicitWorkload)
            return ks.kron_query_variances(self.workload, self._kron)
        return _variances(self.workload, self.M, self.X, _ROW_VARIANCE[self.design.noise])

    def expected_squared_error(self, x: object = None) -> float:
        """E||answers - F x||^2 = 2 ||F A^+||_F^2 (the same for every x)."""
        if self._kron is not None:
            return _kron_total(self.workload, self.design.C)
        return float(np.sum(self.query_variances()))

    def release(self, x: Any, rng: Any = None, secure: bool = True, *,
                accountant: Accountant | None = None) -> np.ndarray:
        """The m answers from one release ``y = A x + Lap(1)^p`` (``+ N(0, I_p)`` for a Gaussian
        strategy, OpenDP's Gaussian; charged rho in zCDP units) and the total n = 1'x.

        ``secure=True`` (default) draws with OpenDP's floating-point-safe sampler (``rng``
        unused); ``secure=False`` with numpy, for simulations.  ``accountant`` is charged
        :attr:`release_cost` before anything is computed (see :class:`dprivacy.DXLaplace`).
        """
        arr = check_histogram(x, self.workload.N)
        if self._kron is not None and self.workload.m > MAX_ANSWERS:
            raise ValidationError(
                f"{self.workload.m} answers would take {self.workload.m * 8 / 2**30:.1f} GiB: "
                "use release_estimate(), the least-squares histogram from the same release, "
                "from which every rectangle is a sum (nothing was charged)")
        charge_release(self, accountant)
        if self._kron is not None:
            return self.workload.answer(self._kron_estimate(arr, rng, secure))
        s = self.design.basis.apply(arr.astype(float))  # the mechanism's own checked copies
        y_true = np.asarray(self.design.C @ s, dtype=np.float64).ravel()
        add = gaussian_noise.add_gaussian if self.design.noise == "gaussian" else noise.add_laplace
        y = np.asarray(add(y_true, np.ones(y_true.shape), rng=rng, secure=secure),
                       dtype=np.float64).ravel()
        return _answers(self.workload, self.M, self.o, self.X, self.z, y, float(np.sum(arr)))

    def _kron_estimate(self, arr: np.ndarray, rng: Any, secure: bool) -> np.ndarray:
        """y = A x + Lap(1)^p (per-axis products only) and its least-squares histogram."""
        assert self._kron is not None
        yk = self._kron.measure(arr.astype(float))
        yk = np.asarray(noise.add_laplace(yk, np.ones(yk.shape), rng=rng, secure=secure),
                        dtype=np.float64).ravel()
        return self._kron.estimate(yk, float(np.sum(arr)))

    def release_estimate(self, x: Any, rng: Any = None, secure: bool = True, *,
                         accountant: Accountant | None = None) -> np.ndarray:
        """A Kronecker strategy's release as the least-squares histogram (N values, element
        order): every rectangle's answer is its sum (``workload.answer`` of it), the same
        answers as :meth:`release` at the same cost, for grids whose m answers do not fit in
        memory (all rectangles of 256 x 256 are 1.08e9)."""
        if self._kron is None:
            raise ValidationError("release_estimate is for Kronecker strategies (large grids); "
                                  "use release()")
        arr = check_histogram(x, self.workload.N)
        charge_release(self, accountant)
        return self._kron_estimate(arr, rng, secure)

    def __repr__(self) -> str:
        return (f"StrategyMechanism(m={self.workload.m}, N={self.workload.N}, p={self.design.p}, "
                f"max_ratio={self.max_ratio_:.6g})")


def strategy_to_json(design: StrategyDesign) -> dict[str, Any]:
    """The strategy ``A = C T`` as JSON: the basis (a tree as its parent array) and C, sparse
    (CSR arrays) when at most a quarter of its entries are non-zero, else dense row-major."""
    C = design.C
    p, K = C.shape  # noqa: N806
    if design.is_kron:  # the two factors, dense row-major
        kron = {"cells": float(C.cells),
                "x": {"shape": list(C.Bx.shape), "dense": C.Bx.ravel().tolist()},
                       "y": {"shape": list(C.By.shape), "dense": C.By.ravel().tolist()}}
        return {"basis": design.basis.to_json(), "shape": [int(p), int(K)], "kron": kron}
    nnz = sp.csr_array(C).nnz if is_sparse(C) else int(np.count_nonzero(C))
    out: dict[str, Any] = {"basis": design.basis.to_json(), "shape": [int(p), int(K)]}
    if nnz <= 0.25 * p * K:
        S = sp.csr_array(C, copy=True)  # C may be a mechanism's read-only copy
        S.eliminate_zeros()
        out.update(indptr=S.indptr.tolist(), indices=S.indices.tolist(), data=S.data.tolist())
    else:
        dense = C.toarray() if is_sparse(C) else C  # a sparse C can be dense enough
        out["dense"] = np.asarray(dense, dtype=np.float64).ravel().tolist()
    if design.noise == "gaussian":  # rows get N(0, 1): rho-zCDP per unit of the metric
        out.update(noise="gaussian", notion="zcdp", rho=float(check_rho(design.rho)))
    return out


def strategy_from_json(doc: Any, workload: Workload | ImplicitWorkload,
                       constraints: ConstraintSet | None,
                       report: dict[str, Any] | None = None) -> StrategyDesign:
    """Inverse of :func:`strategy_to_json` for ``workload``; raises ValidationError on any
    malformed part (shapes, non-finite entries, a basis that is not a spanning tree)."""
    try:
        basis = st.Basis.from_json(doc["basis"])
        p, K = (int(v) for v in doc["shape"])  # noqa: N806
        if p < 1 or K != basis.K or basis.N != workload.N:
            raise ValidationError(f"strategy shape {doc['shape']} does not fit a basis of "
                                  f"{basis.K} coordinates over N = {workload.N}")
        if "kron" in doc:
            fx, fy = doc["kron"]["x"], doc["kron"]["y"]
            Bx = np.asarray(fx["dense"], dtype=np.float64).reshape([int(v) for v in fx["shape"]])
            By = np.asarray(fy["dense"], dtype=np.float64).reshape([int(v) for v in fy["shape"]])
            cells = doc["kron"].get("cells", 0.0)
            if type(cells) not in (int, float):
                raise ValidationError("the Kronecker strategy's cells weight must be a number")
            op = ks.KronOperator(Bx, By, float(cells))
            if basis.kind != "identity" or op.shape != (p, K):
                raise ValidationError(f"Kronecker factors {Bx.shape}, {By.shape} do not make a "
                                      f"{p} x {K} strategy")
            return StrategyDesign(workload, op, basis, None, None,
                                  report=dict(report or {}), constraints=constraints)
        if "dense" in doc:
            C: Mat = np.asarray(doc["dense"], dtype=np.float64).reshape(p, K)
        else:
            C = sp.csr_array((np.asarray(doc["data"], dtype=np.float64),
                              np.asarray(doc["indices"], dtype=np.int64),
                              np.asarray(doc["indptr"], dtype=np.int64)), shape=(p, K))
            C.check_format(full_check=True)
        noise = doc.get("noise", "laplace")
        if noise not in ("laplace", "gaussian"):
            raise ValidationError(f"unknown strategy noise {noise!r}")
        rho = None
        if noise == "gaussian":
            if doc.get("notion") != "zcdp":
                raise ValidationError("a Gaussian strategy has notion 'zcdp'")
            rho = check_rho(doc["rho"], "the strategy's rho")
    except (KeyError, TypeError, ValueError, SolverError) as exc:
        raise ValidationError(f"malformed strategy: {exc}") from exc
    vals = sp.csr_array(C).data if is_sparse(C) else C
    if not np.all(np.isfinite(vals)):
        raise ValidationError("the strategy has NaN or infinite entries")
    M, o, X, z = _maps_for(workload, C, basis)
    return StrategyDesign(workload, C, basis, M, o, report=dict(report or {}),
                          constraints=constraints, X=X, z=z, noise=noise, rho=rho)
