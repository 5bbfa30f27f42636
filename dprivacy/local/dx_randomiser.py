"""User-facing optimal d_X-local randomiser for a universe and a dprivacy metric.

``optimal_randomiser(U, M)`` takes the budget matrix ``eps = M.budget(U)`` and solves the LP of
:mod:`solvers.channels.optimal` (Bordenabe et al., CCS 2014), optionally on a greedy spanner
(budget divided by its dilation). By default the LP is decomposed by output column and stopped
at a certified gap (:func:`solvers.channels.column_lagrangian.solve_by_columns`): the result
carries its expected loss, a lower bound on the optimum proven from the pricing LPs' duals, and
their relative gap. Points in the plane are searched for the symmetries of the square (used only
when they leave the budgets, the prior and the loss exactly unchanged); a metric that is the
path metric of a sparse graph (a grid under the Manhattan distance) is constrained on that
graph's edges only, which is exact.

The result is checked before it is returned: over all triples, or, above ``CHECK_ALL_MAX``
inputs and when the metric is such a graph metric, on every edge of the graph together with a
shortest-path computation showing that the edges' path lengths equal the budgets (then every
pair's constraint follows along a path). The all-triples check uses the square's maps that leave
the channel and the budgets exactly unchanged (verified entry by entry): the outputs of one orbit
carry the same constraints, so one output per orbit is checked (eight times fewer steps on a
square grid), in blocks of one input, with the same outcome as :func:`check_dx` over every
output.
Privacy condition: ``T[x, z] <= exp(eps[x, x']) T[x', z]`` for all x, x', z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from dprivacy.errors import PrivacyViolationError, ValidationError
from dprivacy.local.cost import DXCheck, validate_stochastic
from dprivacy.local.randomiser import MatrixRandomiser
from solvers.channels.optimal import LPResult, solve_dx_lp
from solvers.channels.separation import check_all_pairs
from solvers.channels.spanner import graph_edges, greedy_spanner
from solvers.channels.symmetry import square_symmetries

__all__ = ["OptimalRandomiser", "optimal_randomiser", "CHECK_ALL_MAX"]

#: Above this many inputs a graph metric's randomiser is checked on the graph's edges (plus the
#: path lengths) instead of on all N³ triples.
CHECK_ALL_MAX = 2500


@dataclass(frozen=True)
class OptimalRandomiser:
    """The solved randomiser: ``randomiser`` (inputs = element indices; outputs = the indices that
    occur with positive probability, so that its cost is finite), the LP facts,
    the independent d_X check and, with a spanner, its edge count and dilation.

    ``expected_loss``, ``lower_bound`` and ``gap`` are the certificate: no randomiser that is
    ε·d-private (for a spanner: private on its edges at the divided budget) has an expected loss
    below ``lower_bound``; ``checked`` says how the privacy was checked ("all pairs" or "graph
    edges")."""

    randomiser: MatrixRandomiser
    lp: LPResult
    check: DXCheck
    spanner_edges: int | None = None
    dilation: float = 1.0
    checked: str = "all pairs"

    @property
    def expected_loss(self) -> float:
        return self.lp.expected_loss

    @property
    def lower_bound(self) -> float:
        return self.lp.lower_bound

    @property
    def gap(self) -> float:
        """Relative gap ``(expected_loss - lower_bound) / expected_loss``."""
        return self.lp.gap


def _check_edges(T: np.ndarray, eps: np.ndarray, i: np.ndarray, j: np.ndarray,  # noqa: N803
                 rtol: float = 1e-9) -> DXCheck | None:
    """The d_X check through a graph: every edge (both ways, every output) and the proof that the
    edges' shortest paths are within ``rtol`` of every budget. None if the paths do not show it."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    n = eps.shape[0]
    paths = shortest_path(coo_matrix((eps[i, j], (i, j)), shape=(n, n)).tocsr(), directed=False)
    if not np.all(paths <= eps * (1 + 1e-12)):  # (inf budgets: no constraint to show)
        return None
    worst, ok, w_pair = 0.0, True, (0, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        la = np.log(T)
        for a, b in ((i, j), (j, i)):
            for s in range(0, a.size, 1024):
                aa, bb = a[s:s + 1024], b[s:s + 1024]
                d = la[aa] - la[bb]
                d = np.where(np.isneginf(la[aa]), -np.inf, d)
                loss = d.max(axis=1)
                ratio = loss / eps[aa, bb]
                ok &= bool(np.all(loss <= eps[aa, bb] * (1 + rtol) + 1e-12))
                k = int(np.argmax(ratio))
                if ratio[k] > worst:
                    worst, w_pair = float(ratio[k]), (int(aa[k]), int(bb[k]))
    x, y = w_pair
    loss_w = float(np.max(la[x] - la[y])) if worst > 0 else 0.0
    return DXCheck(ok=ok, worst=w_pair, loss=loss_w, eps=float(eps[x, y]), ratio=worst)


def _check_all_pairs(T: np.ndarray, eps: np.ndarray, group: list[np.ndarray] | None,  # noqa: N803
                     rtol: float = 1e-9, atol: float = 1e-12) -> DXCheck:
    """:func:`dprivacy.local.cost.check_dx` (same tolerances, same outcome and worst ratio) over
    one output per orbit of the maps in ``group`` that leave ``T`` and ``eps`` exactly unchanged
    (:func:`solvers.channels.separation.check_all_pairs`), one input at a time: about ``|G|``
    times fewer steps than every triple, and no N x N temporary per input beyond the checked
    outputs. The worst pair may be another pair of the same orbit than check_dx's (same ratio)."""
    validate_stochastic(T)
    ok, worst, (x, y) = check_all_pairs(T, eps, rtol=rtol, atol=atol, group=group)
    loss = 0.0
    if x != y:
        with np.errstate(divide="ignore", invalid="ignore"):
            lx, ly = np.log(T[x]), np.log(T[y])
            loss = float(np.max(np.where(np.isneginf(lx), -np.inf, lx - ly)))
    return DXCheck(ok=ok, worst=(int(x), int(y)), loss=loss, eps=float(eps[x, y]), ratio=float(worst))


def optimal_randomiser(universe: Any, metric: Any, *, loss: str = "distance", quality: Any = None,
                       prior: Any = None, dilation: float | None = None, **lp_options: Any
                       ) -> OptimalRandomiser:
    """The optimal d_X-locally-private randomiser of ``universe`` under ``metric``.

    Parameters
    ----------
    universe : dprivacy.Universe
    metric : dprivacy.metrics.Metric
        Its budget matrix is the privacy constraint.
    loss : "distance" or "squared"
        Expected distance or expected squared distance between truth and report.
    quality : array (N, N), optional
        The distance of the loss (default: Euclidean distance of the universe's coordinates).
    prior : array (N,), optional
    dilation : float, optional
        Use a greedy spanner of this dilation (> 1) instead of every pair.
    lp_options
        Passed to :func:`solvers.channels.optimal.solve_dx_lp`: ``method`` (default
        ``"lagrangian"``), ``gap`` (relative, default 1e-9), ``time_limit`` (seconds; the result
        is private with the gap reached), ...

    Examples
    --------
    >>> import dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0, 0], [1, 0], [0, 1], [1, 1]]))
    >>> r = optimal_randomiser(U, dp.metrics.Euclidean(eps_per_unit=1.0))
    >>> r.check.ok and r.lower_bound <= r.expected_loss * (1 + 1e-9)
    True
    """
    eps = np.asarray(metric.budget(universe), dtype=float)
    if quality is None:
        if universe.coords is None:
            raise ValidationError("give quality=(N, N) distances: the universe has no coordinates")
        quality = cdist(universe.coords, universe.coords)
    q = np.asarray(quality, dtype=float)
    if loss not in ("distance", "squared"):
        raise ValidationError(f"loss = {loss!r}: use 'distance' or 'squared'")
    L = q if loss == "distance" else q ** 2  # noqa: N806
    edges, n_edges, dil = None, None, 1.0
    if dilation is not None:
        i, j, _ = greedy_spanner(eps, float(dilation))
        edges, n_edges, dil = (i, j), int(i.size), float(dilation)
    lp_options.setdefault("method", "lagrangian")
    graph = None
    if lp_options["method"] == "lagrangian":
        if universe.coords is not None:
            lp_options.setdefault("symmetries", square_symmetries(universe.coords))
        if dilation is None:
            me = metric.edges(universe)  # a graph metric: its edges imply every pair (exact)
            if me is not None:
                graph = edges = (np.asarray(me[0], dtype=np.int64), np.asarray(me[1], dtype=np.int64))
    res = solve_dx_lp(eps, L, prior, edges=edges, dilation=dil, **lp_options)
    n = eps.shape[0]
    chk, checked = None, "all pairs"
    if n > CHECK_ALL_MAX:
        graph = graph if graph is not None else graph_edges(eps) if np.all(np.isfinite(eps)) else None
        if graph is not None:
            chk, checked = _check_edges(res.T, eps, *graph), "graph edges"
    if chk is None:
        group = lp_options.get("symmetries")
        if group is None and universe.coords is not None:  # (used only if T keeps them exactly)
            group = square_symmetries(universe.coords)
        chk, checked = _check_all_pairs(res.T, eps, group), "all pairs"
    if not chk.ok:
        raise PrivacyViolationError(f"the LP solution breaks pair {chk.worst}: loss {chk.loss} > {chk.eps}")
    # outputs never reported are dropped (Def. 3 would price an all-zero column at infinity)
    used = np.flatnonzero(res.T.max(axis=0) > 0)
    T = res.T[:, used]  # noqa: N806
    T = T / T.sum(axis=1, keepdims=True)  # noqa: N806
    return OptimalRandomiser(MatrixRandomiser(T, list(range(n)), used.tolist()), res, chk, n_edges, dil,
                             checked)
