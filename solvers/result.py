"""The value object every solver returns (a ``Design``-compatible result).

Privacy condition of the d_X Laplace mechanism (Theorem 1, eq. (5)), with ``u = w * beta``:
``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every constrained pair (i, j).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SolverResult:
    """A solved parameter set (w, beta) with its objective and a report.

    Attributes
    ----------
    w : (m,) float array, the per-query scaling of eq. (5) (1 = unbiased).
    beta : (m,) float array, the per-query noise precision; the Laplace scale of query k is
        ``1 / beta[k]``. ``np.inf`` means the query is answered exactly (constant row, or no
        finite constraint separates two elements where the row differs).
    objective : the value of the method's loss at (w, beta); see :mod:`solvers.objectives`.
    method, loss : the names of the method and loss that produced it.
    report : dict with at least ``n_constraints`` (finite pairs of the constraint set),
        ``n_constraints_used`` (pairs the optimiser saw), ``iterations``, ``seconds``,
        ``max_ratio`` (max over ALL constrained pairs of ``sum_k u_k |F_ki - F_kj| / eps_ij``,
        from a full scan of the returned design), ``scaled_back`` (bool), ``status`` and
        ``notes`` (list of str).
    """

    w: np.ndarray
    beta: np.ndarray
    objective: float
    method: str
    loss: str
    report: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        w = np.asarray(self.w, dtype=float).copy()
        beta = np.asarray(self.beta, dtype=float).copy()
        if w.shape != beta.shape or w.ndim != 1:
            raise ValueError(f"w {w.shape} and beta {beta.shape} must be equal 1-D shapes")
        if np.isnan(w).any() or np.isnan(beta).any():
            raise ValueError("SolverResult with NaN in w or beta")
        w.setflags(write=False)
        beta.setflags(write=False)
        object.__setattr__(self, "w", w)
        object.__setattr__(self, "beta", beta)

    @property
    def u(self) -> np.ndarray:
        """Noise precision per query of the unbiased mechanism, ``u = w * beta`` (docs/theory.md).

        ``0 * inf`` is taken as 0 (a query scaled to zero carries no information).
        """
        with np.errstate(invalid="ignore"):
            u = self.w * self.beta
        return np.where(self.w == 0, 0.0, u)

    @property
    def noise_scale(self) -> np.ndarray:
        """Laplace scale ``1 / beta`` per query (0 where beta is infinite)."""
        with np.errstate(divide="ignore"):
            return np.where(np.isinf(self.beta), 0.0, 1.0 / self.beta)
