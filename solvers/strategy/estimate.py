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

from typing import Any

import numpy as np
import scipy.linalg as sla
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


#: A sparse strategy in the identity basis takes the Cholesky route (no SVD) when the smallest
#: diagonal entry of the Cholesky factor is at least this share of the largest.
CHOLESKY_RTOL = 1e-6


def normal_inverse(C: Mat) -> np.ndarray | None:
    """``M^{-1}`` with ``M = P C'C P + 11'/N`` (P = I - 11'/N) for a SPARSE strategy C in the
    identity basis, from ``C'C`` formed sparse and one Cholesky factorisation (no SVD, no dense
    p x N product); None when C is not sparse, or M is not (well) positive definite -- the caller
    then takes the SVD route.  M positive definite means C P has rank N - 1: every centred query
    lies in its row space, and ``(C P)^+ = (M^{-1} - 11'/N) C'`` (M^{-1} 1 = 1)."""
    if not is_sparse(C):
        return None
    S: Any = sp.csr_array(C, dtype=np.float64)
    N = int(S.shape[1])  # noqa: N806
    X = np.asarray((S.T @ S).toarray(), dtype=np.float64)
    r = X.mean(axis=1, keepdims=True)
    X -= r
    X -= r.T
    X += float(r.mean()) + 1.0 / N
    try:
        L, _ = sla.cho_factor(X, lower=True, check_finite=False, overwrite_a=True)
    except (np.linalg.LinAlgError, ValueError):
        return None
    d = np.abs(np.diag(L))
    if not np.all(np.isfinite(d)) or d.min() < CHOLESKY_RTOL * d.max():
        return None
    Minv, info = sla.lapack.dpotri(L, lower=1, overwrite_c=True)
    if info != 0:
        return None
    Minv = np.tril(Minv)
    Minv += np.tril(Minv, -1).T
    return Minv


def _cholesky_map(C: Mat, Minv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(X, z) of the identity basis from ``normal_inverse``: X = (M^{-1} - 11'/N) C'."""
    S: Any = sp.csr_array(C, dtype=np.float64)
    N = int(S.shape[1])  # noqa: N806
    Minv = Minv - 1.0 / N
    X = np.asarray(S @ Minv).T  # (N, p): sparse times dense, nnz(C) N operations
    return np.ascontiguousarray(X), (1.0 - X @ np.asarray(S.sum(axis=1)).ravel()) / N


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
    One singular value decomposition of the (centred) strategy gives both (a sparse strategy of
    full rank in the identity basis: one Cholesky factorisation, :func:`normal_inverse`)."""
    if basis.kind == "identity":
        Minv = normal_inverse(C)
        if Minv is not None:
            if float(np.trace(G)) <= 0:
                raise SolverError("the workload's Gram matrix is zero: nothing to answer")
            X, z = _cholesky_map(C, Minv)
            return X, z, 0.0
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
    if basis.kind == "identity":
        Minv = normal_inverse(C)
        if Minv is not None:
            if float(np.trace(G)) <= 0:
                raise SolverError("the workload's Gram matrix is zero: nothing to answer")
            return float(np.sum(G * Minv)), 0.0
    _, _, s, V = _svd(C, basis, rtol)
    share = _share(G, V)
    return float(np.sum(np.sum(V * (G @ V), axis=0) / (s * s))), share
