"""User-facing optimal d_X-local randomiser for a universe and a dprivacy metric.

``optimal_randomiser(U, M)`` takes the budget matrix ``eps = M.budget(U)`` and solves the LP of
:mod:`solvers.channels.optimal` (Bordenabe et al., CCS 2014), optionally on a greedy spanner
(budget divided by its dilation). The result is checked over all triples before it is returned.
Privacy condition: ``T[x, z] <= exp(eps[x, x']) T[x', z]`` for all x, x', z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from dprivacy.errors import PrivacyViolationError, ValidationError
from dprivacy.local.cost import DXCheck, check_dx
from dprivacy.local.randomiser import MatrixRandomiser
from solvers.channels.optimal import LPResult, solve_dx_lp
from solvers.channels.spanner import greedy_spanner

__all__ = ["OptimalRandomiser", "optimal_randomiser"]


@dataclass(frozen=True)
class OptimalRandomiser:
    """The solved randomiser: ``randomiser`` (inputs = element indices; outputs = the indices that
    occur with positive probability, so that its cost is finite), the LP facts,
    the independent d_X check and, with a spanner, its edge count and dilation."""

    randomiser: MatrixRandomiser
    lp: LPResult
    check: DXCheck
    spanner_edges: int | None = None
    dilation: float = 1.0


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

    Examples
    --------
    >>> import dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0, 0], [1, 0], [0, 1], [1, 1]]))
    >>> r = optimal_randomiser(U, dp.metrics.Euclidean(eps_per_unit=1.0))
    >>> r.check.ok
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
    res = solve_dx_lp(eps, L, prior, edges=edges, dilation=dil, **lp_options)
    chk = check_dx(res.T, eps, rtol=1e-9)
    if not chk.ok:
        raise PrivacyViolationError(f"the LP solution breaks pair {chk.worst}: loss {chk.loss} > {chk.eps}")
    n = eps.shape[0]
    # outputs never reported are dropped (Def. 3 would price an all-zero column at infinity)
    used = np.flatnonzero(res.T.max(axis=0) > 0)
    T = res.T[:, used]  # noqa: N806
    T = T / T.sum(axis=1, keepdims=True)  # noqa: N806
    return OptimalRandomiser(MatrixRandomiser(T, list(range(n)), used.tolist()), res, chk, n_edges, dil)
