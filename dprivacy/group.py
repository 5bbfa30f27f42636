"""Group privacy under d_X-privacy (Fact 1.3 of the paper; tight form of spec §1.4).

Two histograms with the same number of records, x and x', are reached from one another by single
record moves i -> j, each of which a d_X-private mechanism pays at most eps_ij for (Definition 2).
Chaining the cheapest set of moves bounds the privacy loss between x and x' by the earth-mover
(Kantorovich) distance with ground metric d_X:

    Pr[M(x) in S] <= exp(W_d(x, x')) Pr[M(x') in S],   W_d(x, x') = min_pi sum_ij pi_ij eps_ij

over transport plans pi >= 0 with row sums x and column sums x'.  This is never larger than the
paper's form k * max_{i, j in I} eps_ij (k moves among the differing elements I), and is often
much smaller.  Computed exactly as a linear program (scipy's HiGHS) on the differing elements only.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from dprivacy.errors import ValidationError
from dprivacy.metrics.base import Metric
from dprivacy.universe import Universe, check_histogram

__all__ = ["group_privacy_loss"]


def group_privacy_loss(x, x_prime, universe: Universe, metric: Metric) -> float:
    """The tight group-privacy bound W_d(x, x') of spec §1.4 (earth-mover distance under d_X).

    Any d_X-private mechanism M satisfies Pr[M(x) in S] <= exp(W_d(x, x')) Pr[M(x') in S].

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
    a = check_histogram(x, universe.N)
    b = check_histogram(x_prime, universe.N)
    if not np.isclose(a.sum(), b.sum(), rtol=0, atol=1e-9):
        raise ValidationError(
            f"x has {a.sum():g} records and x' has {b.sum():g}: bounded neighbours keep n fixed "
            "(spec §1.1); group privacy is defined between histograms of equal size"
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
    if not finite.any():
        return float("inf")
    k, n_dst = len(src), len(dst)
    # variables: pi[s, d] for finite pairs only; rows sum to supply, columns to demand
    rows, cols = np.nonzero(finite)
    n_var = rows.size
    A = np.zeros((k + n_dst, n_var))
    A[rows, np.arange(n_var)] = 1.0
    A[k + cols, np.arange(n_var)] = 1.0
    res = linprog(eps[rows, cols], A_eq=A, b_eq=np.concatenate([supply, demand]),
                  bounds=(0, None), method="highs")
    if res.status == 2:  # infeasible: some records can only move through infinite budgets
        return float("inf")
    if res.status != 0 or res.fun is None:
        raise ValidationError(f"the transport problem did not solve: {res.message}")
    return float(res.fun)
