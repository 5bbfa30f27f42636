"""The strategy error ``f(C) = tr(G X^{-1})`` through a factor of the workload's Gram matrix.

``G = R' R`` with R (r x K) of rank r < K (e.g. r = m queries, or the eigen-factor of an implicit
workload's Gram matrix): the value is ``||L^{-1} R'||_F^2`` with ``X = L L'`` (Cholesky), and the
gradient ``-2 C_c Z Z'`` with ``Z = X^{-1} R'`` -- about half the flops of the dense route of
:class:`solvers.strategy.objective.Objective`, which solves with the full K x K matrix G twice.
Same conventions (the known total: C is column-centred and X = P C'C P + 11'/N when ``centre``).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from solvers.strategy.objective import Objective, centred


def gram_factor(G: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """R (r, K) with ``R' R = G`` up to the eigenvalues below ``rtol * max`` (G symmetric PSD)."""
    ev, V = sla.eigh(0.5 * (G + G.T), check_finite=False)
    keep = ev > rtol * max(float(ev.max(initial=0.0)), 1e-300)
    return np.ascontiguousarray((V[:, keep] * np.sqrt(ev[keep])).T)


class LowRankObjective(Objective):
    """:class:`Objective` evaluated through ``R`` (``G = R' R``); ``G`` is kept for callers that
    read it (the lower bound).  ``dtype=np.float32`` halves the cost of the dense algebra for
    large polishing steps (values and gradients to ~1e-6 relative; the value is summed in float64,
    and every strategy is scored and scaled exactly in float64 afterwards)."""

    def __init__(self, G: np.ndarray, centre: bool, R: np.ndarray | None = None,
                 dtype: type = np.float64) -> None:
        super().__init__(G, centre)
        R = gram_factor(G) if R is None else R
        self.dtype = np.dtype(dtype)
        self.R = np.ascontiguousarray(R, dtype=self.dtype)

    def value_grad(self, C: np.ndarray) -> tuple[float, np.ndarray]:
        """(f(C), df/dC); f = inf and a zero gradient when X is singular."""
        Cd = np.asarray(C, dtype=self.dtype)
        Cc = centred(Cd) if self.centre else Cd
        X = Cc.T @ Cc
        if self.centre:
            X += self.dtype.type(1.0 / X.shape[0])
        try:
            L = sla.cholesky(X, lower=True, check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            return float("inf"), np.zeros_like(C)
        W = sla.solve_triangular(L, self.R.T, lower=True, check_finite=False)
        f = float(np.einsum("ij,ij->", W, W, dtype=np.float64))
        if not np.isfinite(f):
            return float("inf"), np.zeros_like(C)
        Z = sla.solve_triangular(L, W, lower=True, trans="T", check_finite=False)
        return f, np.asarray(-2.0 * (Cc @ Z) @ Z.T, dtype=np.float64)
