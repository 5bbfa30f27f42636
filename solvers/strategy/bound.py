"""A lower bound on the error of every d_X-private strategy (an SVD-type bound, adapted).

Any strategy with ||A d_q||_1 <= eps_q also has ||A d_q||_2 <= eps_q, so for weights lam_q >= 0
the matrix X = A'A satisfies tr(L X) <= Lambda = sum lam_q with the weighted Laplacian
``L = sum_q lam_q d_q d_q' / eps_q^2``.  With Y = L^{1/2} X L^{1/2} (tr Y <= Lambda) the error is
``2 tr(G X^+) = 2 tr(L^{1/2} G L^{1/2} Y^+) >= 2 (tr (L^{1/2} G L^{1/2})^{1/2})^2 / Lambda``
(the minimum over tr Y <= Lambda; Li and Miklau's SVD bound is the case L = I).  Any choice of
weights gives a valid bound; a few are tried and the largest is reported.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla


def laplacian(N: int, I: np.ndarray, J: np.ndarray, w: np.ndarray) -> np.ndarray:  # noqa: N803, E741
    """sum_q w_q (e_I - e_J)(e_I - e_J)' (J = -1: w_q e_I e_I')."""
    L = np.zeros((N, N))
    pair = J >= 0
    np.add.at(L, (I, I), w)
    np.add.at(L, (J[pair], J[pair]), w[pair])
    np.add.at(L, (I[pair], J[pair]), -w[pair])
    np.add.at(L, (J[pair], I[pair]), -w[pair])
    return L


def svd_bound(G: np.ndarray, L: np.ndarray, total_weight: float) -> float:
    """2 (tr (L^{1/2} G L^{1/2})^{1/2})^2 / Lambda (module doc); G, L symmetric PSD (K x K)."""
    lv, U = sla.eigh(L)
    lv = np.clip(lv, 0.0, None)
    Lh = (U * np.sqrt(lv)) @ U.T
    ev = sla.eigvalsh(Lh @ G @ Lh)
    s = float(np.sqrt(np.clip(ev, 0.0, None)).sum())
    return 2.0 * s * s / float(total_weight)


def best_bound(G: np.ndarray, I: np.ndarray, J: np.ndarray, eps: np.ndarray) -> float:  # noqa: N803, E741
    """The largest of the bounds for weights 1 on every pair and 1 on each element's tightest
    pairs (the pairs whose eps is within 1 % of the element's smallest eps)."""
    K = G.shape[0]
    inv2 = 1.0 / eps**2
    out = svd_bound(G, laplacian(K, I, J, inv2), float(I.size))
    if np.any(J >= 0):
        lo = np.full(K, np.inf)
        np.minimum.at(lo, I, eps)
        np.minimum.at(lo, J[J >= 0], eps[J >= 0])
        near = (eps <= 1.01 * lo[I]) | ((J >= 0) & (eps <= 1.01 * lo[np.maximum(J, 0)]))
        if 0 < near.sum() < I.size:
            out = max(out, svd_bound(G, laplacian(K, I[near], J[near], inv2[near]),
                                     float(near.sum())))
    return out
