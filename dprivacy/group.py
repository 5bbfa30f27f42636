"""Group privacy under d_X-privacy (Fact 1 of the paper, in its tight earth-mover form).

Two histograms with the same number of records, x and x', are reached from one another by single
record moves i -> j, each of which a d_X-private mechanism pays at most eps_ij for (Definition 2).
Chaining the cheapest set of moves bounds the privacy loss between x and x' by the earth-mover
(Kantorovich) distance with ground metric d_X:

    Pr[M(x) in S] <= exp(W_d(x, x')) Pr[M(x') in S],   W_d(x, x') = min_pi sum_ij pi_ij eps_ij

over transport plans pi >= 0 with row sums x and column sums x'.  This is never larger than the
paper's form k * max_{i, j in I} eps_ij (k moves among the differing elements I), and is often
much smaller (see docs/theory.md, "Group privacy").

The transport problem is solved exactly by POT's network simplex (:func:`ot.emd2`) on the
differing elements only; elements at infinite distance from each other (separate components of the
metric) are solved as separate problems, and the bound is +inf when some component does not hold
as many records of x as of x'.
"""

from __future__ import annotations

import logging

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from dprivacy.errors import DPrivacyError, MetricError, ValidationError
from dprivacy.metrics.base import Metric
from dprivacy.universe import Universe, check_histogram

__all__ = ["group_privacy_loss"]

logger = logging.getLogger(__name__)

#: POT's network simplex iteration cap (its default, 1e5, is too small for supports of a few
#: hundred elements).
_MAX_ITER = 10**8


def group_privacy_loss(x, x_prime, universe: Universe, metric: Metric) -> float:
    """The tight group-privacy bound W_d(x, x'): the earth-mover distance under d_X.

    Any d_X-private mechanism M satisfies Pr[M(x) in S] <= exp(W_d(x, x')) Pr[M(x') in S]
    (Fact 1 of the paper, chained over the cheapest transport plan; see docs/theory.md).

    Parameters
    ----------
    x, x_prime : histograms over ``universe`` with the same total count (bounded neighbours).
    universe, metric : the budget eps_ij = d_X(chi_i, chi_j); +inf pairs cannot be used as moves.

    Returns
    -------
    float, +inf when the records cannot be matched through finite budgets.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> float(group_privacy_loss([2, 0, 1], [0, 2, 1], U, dp.metrics.Euclidean(0.5)))
    1.0
    """
    a = check_histogram(x, universe.N, whole=False)
    b = check_histogram(x_prime, universe.N, whole=False)
    if not np.isclose(a.sum(), b.sum(), rtol=0, atol=1e-9):
        raise ValidationError(
            f"x has {a.sum():g} records and x' has {b.sum():g}: bounded neighbours keep n fixed; "
            "group privacy is defined between histograms of equal size"
        )
    common = np.minimum(a, b)  # records that stay in place cost nothing
    src = np.flatnonzero(a - common > 0)
    dst = np.flatnonzero(b - common > 0)
    if src.size == 0:
        return 0.0
    supply = (a - common)[src]
    demand = (b - common)[dst]
    eps = metric.block(universe, src)[:, dst]
    finite = np.isfinite(eps)
    # components of the bipartite "finite budget" graph: sources 0..k-1, destinations k..k+d-1
    k, n_dst = len(src), len(dst)
    rows, cols = np.nonzero(finite)
    graph = coo_matrix((np.ones(rows.size), (rows, k + cols)), shape=(k + n_dst, k + n_dst))
    n_comp, label = connected_components(graph, directed=False)
    total = 0.0
    tol = 1e-9 * max(1.0, float(supply.sum()))
    for c in range(n_comp):
        s_idx = np.flatnonzero(label[:k] == c)
        d_idx = np.flatnonzero(label[k:] == c)
        s_mass, d_mass = supply[s_idx].sum(), demand[d_idx].sum()
        if abs(s_mass - d_mass) > tol:
            return float("inf")  # these records would have to move through an infinite budget
        if s_idx.size == 0 or d_idx.size == 0:
            continue
        cost = eps[np.ix_(s_idx, d_idx)]
        if not np.all(np.isfinite(cost)):
            # a metric's budgets satisfy the triangle inequality, so "finite" is transitive
            raise MetricError(
                "the metric's budget matrix has infinite entries between elements that are "
                "connected through finite ones: it breaks the triangle inequality; use the "
                "metric's shortest-path closure"
            )
        d_sup = demand[d_idx] * (s_mass / d_mass)  # equal mass to the last bit, as POT requires
        import ot  # POT (and networkx through it) load only when a transport is solved

        value, log = ot.emd2(supply[s_idx], d_sup, np.ascontiguousarray(cost, dtype=float),
                             numItermax=_MAX_ITER, log=True)
        if log["result_code"] != 1:
            raise DPrivacyError(f"the transport problem did not solve: {log['warning']}")
        total += float(value)
    logger.debug("group privacy: %d sources, %d destinations, %d components, W_d = %g",
                 k, n_dst, n_comp, total)
    return total
