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


def estimate_map(C: Mat, basis: Basis, G: np.ndarray, rtol: float = 1e-9
                 ) -> tuple[np.ndarray, np.ndarray, float]:
    """(X, z, share): the least-squares estimate ``x_hat = X y + n z`` (module doc), and
    ``share = ||F_K (I - Pi)||_F^2 / ||F_K||_F^2`` computed from ``G = F_K' F_K`` (in the
    strategy's basis, centred for the identity basis), the part of the workload outside the row
    space of the strategy (Pi its orthogonal projector; 0 when every query can be answered).
    One singular value decomposition of the (centred) strategy gives both."""
    Cd = _dense(C)
    identity = basis.kind == "identity"
    Cc = centred(Cd) if identity else Cd
    U, s, Vt = np.linalg.svd(Cc, full_matrices=False)
    keep = s > rtol * max(float(s[0]) if s.size else 0.0, 1e-300)
    V = Vt[keep].T
    total = float(np.trace(G))
    if total <= 0:
        raise SolverError("the workload's Gram matrix is zero: nothing to answer")
    share = max(0.0, total - float(np.sum(V * (G @ V)))) / total
    R = (V / s[keep]) @ U[:, keep].T  # the pseudo-inverse (K, p)
    if identity:
        return R, (1.0 - R @ Cd.sum(axis=1)) / basis.N, share
    z = np.zeros(basis.N)
    z[basis.root] = 1.0
    return np.asarray(sp.csc_array(basis.B()) @ R), z, share
