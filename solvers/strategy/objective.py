"""The error of a strategy: f(C) = ||F_K C^+||_F^2, its gradient, and the answer map.

Expected total squared error of the release y = C s + Lap(1)^p answered by least squares is
``2 f(C)`` with ``f(C) = tr(G X^{-1})``, ``G = F_K' F_K`` (only the Gram matrix is needed, never a
dense m x N workload) and ``X = C'C``.  In the identity basis the total n is known, so only the
component orthogonal to 1 is estimated: C is replaced by its column-centred ``C P``
(P = I - 11'/N), G by ``P G P`` and X by ``P C'C P + 11'/N`` (invertible when C P has rank N - 1).
The gradient is ``-2 C P Y`` with ``Y = X^{-1} G X^{-1}`` (Y 1 = 0, so P Y = Y).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from solvers.errors import SolverError
from solvers.strategy.basis import Mat, is_sparse


def gram(FK: Mat, centre: bool) -> np.ndarray:
    """G = F_K' F_K (dense K x K); with ``centre`` the projected P G P."""
    G = FK.T @ FK
    G = np.asarray(G.toarray() if is_sparse(G) else G, dtype=np.float64)
    if centre:
        G = G - G.mean(axis=0, keepdims=True)
        G = G - G.mean(axis=1, keepdims=True)
    return 0.5 * (G + G.T)


def centred(C: np.ndarray) -> np.ndarray:
    """C P: every row minus its mean (the part of C that acts on the complement of 1)."""
    return C - C.mean(axis=1, keepdims=True)


@dataclass
class Objective:
    """f(C) = tr(G X^{-1}) and its gradient (module doc); ``centre`` = identity basis."""

    G: np.ndarray
    centre: bool

    def _factor(self, C: np.ndarray) -> tuple[np.ndarray, Any]:
        """(the centred strategy, the Cholesky factor of X = C'C (+ 11'/N centred), or None when
        X is singular)."""
        Cc = centred(C) if self.centre else C
        X = Cc.T @ Cc
        if self.centre:
            X += 1.0 / X.shape[0]
        try:
            return Cc, sla.cho_factor(X, check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            return Cc, None

    def value_grad(self, C: np.ndarray) -> tuple[float, np.ndarray]:
        """(f(C), df/dC); f = inf and a zero gradient when X is singular."""
        Cc, fac = self._factor(C)
        if fac is None:
            return float("inf"), np.zeros_like(C)
        XiG = sla.cho_solve(fac, self.G, check_finite=False)
        f = float(np.trace(XiG))
        if not np.isfinite(f) or f < 0:
            return float("inf"), np.zeros_like(C)
        Y = sla.cho_solve(fac, XiG.T, check_finite=False)
        return f, -2.0 * Cc @ Y

    def value(self, C: np.ndarray) -> float:
        """f(C) alone: one Cholesky factorisation and one solve (the gradient's second solve,
        as costly as the first, is skipped; inf when X is singular)."""
        fac = self._factor(C)[1]
        if fac is None:
            return float("inf")
        f = float(np.trace(sla.cho_solve(fac, self.G, check_finite=False)))
        return f if np.isfinite(f) and f >= 0 else float("inf")


def answer_map(C: Mat, FK: Mat, f0: np.ndarray,
               centre: bool, rtol: float = 1e-9) -> tuple[Mat, np.ndarray]:
    """(M, o) with least-squares answers ``M y + n o`` to the workload from y = C s + noise.

    Raises SolverError when a query is not in the row space of the strategy (it could not be
    answered from the release at all).  Diagonal strategies are inverted directly (large N).
    """
    p, K = C.shape
    if is_sparse(C) and p == K and not centre:
        d = np.asarray(C.diagonal(), dtype=np.float64)
        off = sp.csr_array(C) - sp.diags_array(d)
        if off.count_nonzero() == 0 and np.all(d != 0):
            M = FK @ sp.diags_array(1.0 / d)
            return (sp.csr_array(M) if is_sparse(M) else np.asarray(M)), np.asarray(f0, np.float64)
    Cd = np.asarray(C.toarray() if is_sparse(C) else C, dtype=np.float64)
    Cc = centred(Cd) if centre else Cd
    R = np.linalg.pinv(Cc, rcond=rtol)  # (K, p): min-norm least squares
    Fd = np.asarray(FK.toarray() if is_sparse(FK) else FK, dtype=np.float64)
    Fc = Fd - Fd.mean(axis=1, keepdims=True) if centre else Fd
    M = Fc @ R
    resid = Fc - M @ Cc
    scale = max(float(np.abs(Fc).max(initial=0.0)), 1e-300)
    if float(np.abs(resid).max(initial=0.0)) > 1e-6 * scale:
        k = int(np.argmax(np.abs(resid).max(axis=1)))
        raise SolverError(f"query {k} is not in the row space of the strategy: it cannot be "
                          "answered from the release")
    if centre:
        N = K  # noqa: N806
        o = (Fd.sum(axis=1) - M @ Cd.sum(axis=1)) / N
    else:
        o = np.asarray(f0, dtype=np.float64)
    return M, o
