"""The naive all-pairs formulation of problem (6) at w = 1 (docs/theory.md), for comparison only.

Privacy condition (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij``. Every constrained pair
becomes one row of a dense (P, m) matrix handed to cvxpy + Clarabel in one problem; memory and
time grow as N^2 m, so this is only usable for small N. :func:`solvers.design` with
method="exact" solves the same problem by constraint generation.
"""

from __future__ import annotations

from collections.abc import Callable

import cvxpy as cp
import numpy as np

from solvers.constraints import as_query_matrix
from solvers.errors import SolverError


def naive_exact(F: object, eps: np.ndarray, loss: str = "squared", *,
                scale_columns: bool = True) -> tuple[np.ndarray, str, float]:
    """Solve problem (6) at w = 1 with every pair i < j of the dense budget ``eps`` (rows scaled
    by 1/eps_ij; columns scaled to max 1 unless ``scale_columns=False``, which typically comes
    back "optimal_inaccurate" for m >~ 10). Rows never separated by a finite budget get u = inf.
    Returns (u, solver status, raw max ratio); u is scaled back so that every ratio is <= 1."""
    A = as_query_matrix(F)
    m, N = A.shape
    E = np.asarray(eps, float)
    iu, ju = np.triu_indices(N, 1)
    e = E[iu, ju]
    keep = e < np.inf
    iu, ju, e = iu[keep], ju[keep], e[keep]
    D = np.abs(A[:, iu] - A[:, ju]).T  # (P, m)
    zero = e == 0
    if (D[zero] > 0).any():
        raise SolverError("infeasible: eps_ij = 0 on a pair the queries separate")
    D, e = D[~zero], e[~zero]
    act = (D > 0).any(axis=0)
    u = np.full(m, np.inf)
    if not act.any():
        return u, "optimal", 0.0
    M = D[:, act] / e[:, None]
    s = M.max(axis=0) if scale_columns else np.ones(M.shape[1])
    v = cp.Variable(int(act.sum()))
    sn = s / s.max()  # objective in v with normalised weights (u = v / s); cf. solvers.convex
    objectives: dict[str, Callable[[], cp.Minimize | cp.Maximize]] = {
        "squared": lambda: cp.Minimize(cp.sum(cp.multiply(sn**2 / np.sum(sn**2), cp.power(v, -2)))),
        "absolute": lambda: cp.Minimize(cp.sum(cp.multiply(sn / np.sum(sn), cp.inv_pos(v)))),
        "max": lambda: cp.Maximize(cp.min(cp.multiply(sn.min() / sn, v))),
        "log": lambda: cp.Maximize(cp.geo_mean(v)),  # = max sum log x; SOC form
    }
    obj = objectives[loss]()
    prob = cp.Problem(obj, [(M / s[None, :]) @ v <= 1, v >= 0])
    try:
        prob.solve(solver=cp.CLARABEL)
    except cp.SolverError as exc:
        raise SolverError(f"naive solve failed: {exc}") from exc
    if v.value is None:
        raise SolverError(f"naive solve failed: {prob.status}")
    xv = v.value / s
    raw = float(np.max(M @ xv))
    u[act] = xv / max(raw, 1.0)
    return u, prob.status, raw
