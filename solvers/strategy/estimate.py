"""The least-squares estimate of the histogram from a strategy release, for implicit workloads.

For a workload given only through its Gram matrix G = F'F (all ranges, all rectangles: m too
large for an m x N answer map), answers are computed as ``F x_hat`` with the estimate
``x_hat = X y + n z`` (N x p and N), y the release and n the known total:

* identity basis (the total is known; only the part orthogonal to 1 is estimated):
  ``X = (C P)^+`` and ``z = (1 - X C 1) / N`` (P = I - 11'/N);
* tree basis (x = B s + n e_root): ``X = B C^+`` and ``z = e_root``.

The answers then equal the explicit answer map's ``M y + n o`` (:func:`answer_map`) for every F
whose rows lie in the row space of the strategy, and their covariance is ``2 F X X' F'``.
:func:`estimate_map` also measures, from G alone and with the same singular value
decomposition, how much of F lies outside that row space.
numpy / scipy only; never imports dprivacy.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from solvers.errors import SolverError
from solvers.strategy.basis import Basis, Mat, is_sparse
from solvers.strategy.objective import centred


def _dense(C: Mat) -> np.ndarray:
    return np.asarray(C.toarray() if is_sparse(C) else C, dtype=np.float64)


def _svd(C: Mat, basis: Basis, rtol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                     np.ndarray]:
    """(Cd, U_r, s_r, V_r): the dense strategy and the kept part of the SVD of (centred) C."""
    Cd = _dense(C)
    Cc = centred(Cd) if basis.kind == "identity" else Cd
    U, s, Vt = np.linalg.svd(Cc, full_matrices=False)
    keep = s > rtol * max(float(s[0]) if s.size else 0.0, 1e-300)
    return Cd, U[:, keep], s[keep], Vt[keep].T


def _share(G: np.ndarray, V: np.ndarray) -> float:
    total = float(np.trace(G))
    if total <= 0:
        raise SolverError("the workload's Gram matrix is zero: nothing to answer")
    return max(0.0, total - float(np.sum(V * (G @ V)))) / total


def estimate_map(C: Mat, basis: Basis, G: np.ndarray, rtol: float = 1e-9
                 ) -> tuple[np.ndarray, np.ndarray, float]:
    """(X, z, share): the least-squares estimate ``x_hat = X y + n z`` (module doc), and
    ``share = ||F_K (I - Pi)||_F^2 / ||F_K||_F^2`` computed from ``G = F_K' F_K`` (in the
    strategy's basis, centred for the identity basis), the part of the workload outside the row
    space of the strategy (Pi its orthogonal projector; 0 when every query can be answered).
    One singular value decomposition of the (centred) strategy gives both."""
    Cd, U, s, V = _svd(C, basis, rtol)
    share = _share(G, V)
    R = (V / s) @ U.T  # the pseudo-inverse (K, p)
    if basis.kind == "identity":
        return R, (1.0 - R @ Cd.sum(axis=1)) / basis.N, share
    z = np.zeros(basis.N)
    z[basis.root] = 1.0
    return np.asarray(sp.csc_array(basis.B()) @ R), z, share


def estimate_error(C: Mat, basis: Basis, G: np.ndarray, rtol: float = 1e-9
                   ) -> tuple[float, float]:
    """(f, share): ``f = ||F_K C^+||_F^2 = sum_k v_k' G v_k / s_k^2`` over the kept singular
    pairs of the (centred) strategy (the expected total squared error is 2 f when share is 0),
    and the share of the workload outside the strategy's row space (:func:`estimate_map`).
    Only K x K and p x K arrays: the m x p answer map is never formed."""
    _, _, s, V = _svd(C, basis, rtol)
    share = _share(G, V)
    return float(np.sum(np.sum(V * (G @ V), axis=0) / (s * s))), share
