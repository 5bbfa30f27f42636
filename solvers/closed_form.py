"""Single-query closed form of paper §4.1.

Privacy condition: ``beta |f_i - f_j| <= eps_ij`` for all constrained pairs, so the best w = 1
design is ``beta* = 1 / max_ij |f_i - f_j| / eps_ij`` -- the inverse Lipschitz constant of f
with respect to d_X (``beta* = inf`` for a constant or unconstrained query).
"""

from __future__ import annotations

import numpy as np

from solvers.constraints import ConstraintSet
from solvers.errors import SolverError
from solvers.operand import QueryMatrix
from solvers.verify import Draft


def inverse_or_inf(c: np.ndarray) -> np.ndarray:
    """``1 / c`` with ``1/0 = inf`` (a query no constraint separates is answered exactly)."""
    c = np.asarray(c, float)
    with np.errstate(divide="ignore"):
        return np.where(c > 0, 1.0 / np.where(c > 0, c, 1.0), np.inf)


def closed_form(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray) -> Draft:
    """Paper §4.1: ``w* = 1``, ``beta* = 1 / c`` with ``c = max_ij |f_i - f_j| / eps_ij``.

    ``c`` are the row Lipschitz constants (from :meth:`ConstraintSet.check_feasible`).
    Exact (optimal for every loss) when m = 1; raises SolverError for m > 1.
    """
    if F.shape[0] != 1:
        raise SolverError(
            f"method 'closed_form' is the single-query optimum (m = 1); F has m = {F.shape[0]} "
            "rows: use 'exact' or a multi-query strategy")
    notes = [] if c[0] > 0 else ["query is constant on every constrained pair: answered exactly"]
    return Draft(u=inverse_or_inf(c), n_used=cs.n_constraints, notes=notes)
