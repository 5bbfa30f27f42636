"""The Gaussian strategy program for large N and low-rank workloads: dual weights on an active set.

:func:`solvers.strategy.gaussian.solve_gaussian` keeps a weight on every pair and works with
N x N matrices.  When the workload has rank r << N (m < N explicit queries) and the optimal dual
weights sit on few pairs (on a line: the neighbours), the same multiplicative dual ascent runs on
an active set P of pairs: with the factor ``G = K K'`` (N x r), ``M = K' L K`` is r x r with L
sparse, the strategy ``A = diag(w^-1/4) V' K'`` is r x N, and the ratios are needed on P only.
Any weights on P give a valid dual bound (the other pairs have weight 0); the primal needs the
largest ratio over EVERY pair, computed from ``A'A`` once the active set has converged -- pairs
above the current level join P and the ascent resumes, until the certified gap over all pairs
is at most ``tol`` or the time is up.  Starting set: every element's ``k`` pairs with the
smallest budgets.
numpy / scipy only; never imports dprivacy.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from solvers.errors import SolverError
from solvers.strategy.basis import Mat, is_sparse
from solvers.strategy.gaussian import MU_FLOOR, SAFETY, GaussianSolution, pair_ratios


def workload_factor(F: Mat, rtol: float = 1e-12) -> np.ndarray:
    """K (N x r) with ``K K' = P F'F P`` (P centres: the total is known), from a thin SVD of the
    centred m x N workload."""
    Fd = np.asarray(sp.csr_array(F).toarray() if is_sparse(F) else F, dtype=np.float64)
    Fc = Fd - Fd.mean(axis=1, keepdims=True)
    _, s, Vt = np.linalg.svd(Fc, full_matrices=False)
    keep = s > rtol * max(float(s[0]) if s.size else 0.0, 1e-300)
    if not np.any(keep):
        raise SolverError("the workload is zero on the complement of the total: nothing to "
                          "estimate")
    return np.asarray((Vt[keep].T * s[keep]), dtype=np.float64)


def nearest_pairs(B: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every element's k pairs of smallest budget, as (I, J) with I < J, without duplicates."""
    N = B.shape[0]  # noqa: N806
    k = max(1, min(int(k), N - 1))
    idx = np.argpartition(B, k - 1, axis=1)[:, :k]
    rows = np.repeat(np.arange(N), k)
    cols = idx.ravel()
    ok = np.isfinite(B[rows, cols]) & (rows != cols)
    lo, hi = np.minimum(rows[ok], cols[ok]), np.maximum(rows[ok], cols[ok])
    key = np.unique(lo.astype(np.int64) * N + hi)
    return key // N, key % N


def _pair_sq(A: np.ndarray, I: np.ndarray, J: np.ndarray) -> np.ndarray:  # noqa: N803, E741
    out = np.empty(I.size)
    for s in range(0, I.size, 4096):
        D = A[:, I[s:s + 4096]] - A[:, J[s:s + 4096]]
        out[s:s + 4096] = np.einsum("ij,ij->j", D, D)
    return out


def solve_gaussian_active(K: np.ndarray, B: np.ndarray, *, tol: float = 1e-3,
                          time_limit: float = 600.0, k: int = 4, max_iter: int = 100_000,
                          grow: int | None = None) -> GaussianSolution:
    """Minimise ``tr(K K' X^+)`` subject to ``d_ij' X d_ij <= B_ij`` on every pair (module doc).

    Parameters
    ----------
    K : (N, r) factor of the centred Gram matrix (:func:`workload_factor`).
    B : (N, N) pair budgets (inf: no constraint), as for :func:`solve_gaussian`.
    tol : certified relative gap over ALL pairs at which to stop.
    k : starting active set: every element's k pairs of smallest budget.
    grow : pairs added per check (default 4 N).

    Returns
    -------
    GaussianSolution (``weights`` is empty: they live on the active set only).
    """
    t0 = time.perf_counter()
    K = np.asarray(K, dtype=np.float64)
    B = np.array(B, dtype=np.float64)
    N = K.shape[0]  # noqa: N806
    if B.shape != (N, N) or K.ndim != 2:
        raise SolverError(f"K must be (N, r) and B (N, N), got {K.shape} and {B.shape}")
    np.fill_diagonal(B, np.inf)
    B = np.minimum(B, B.T)
    if np.any(np.isnan(B)) or np.any(B <= 0):
        raise SolverError("every pair budget must be positive (inf for no constraint)")
    I, J = nearest_pairs(B, k)  # noqa: N806, E741
    grow = int(grow or 4 * N)
    mu = np.full(I.size, 1.0 / I.size)
    best_primal, best_dual = np.inf, 0.0
    best: tuple[np.ndarray, float] | None = None
    history: list[tuple[int, float, float, float]] = []
    it = 0
    while True:
        b = B[I, J]
        lam = mu / b
        L = sp.csr_array((np.r_[-lam, -lam], (np.r_[I, J], np.r_[J, I])), shape=(N, N))
        L = L + sp.diags_array(np.bincount(I, lam, N) + np.bincount(J, lam, N))
        M = K.T @ np.asarray(L @ K)
        w, V = np.linalg.eigh(0.5 * (M + M.T))
        pos = w > max(float(w.max(initial=0.0)), 1e-300) * 1e-13
        w, V = w[pos], V[:, pos]
        T = float(np.sqrt(w).sum())
        A = (V * w**-0.25).T @ K.T  # A'A = X(mu): error T at full scale
        r = _pair_sq(A, I, J) / b
        best_dual = max(best_dual, T * T)
        it += 1
        elapsed = time.perf_counter() - t0
        active_gap = 1.0 - T / float(r.max())
        done = it >= max_iter or elapsed > time_limit
        if active_gap <= 0.5 * tol or done:
            R = pair_ratios(A.T @ A, B)  # every pair
            rmax = float(R.max())
            if rmax * T < best_primal:
                best_primal, best = rmax * T, (A, rmax)
            history.append((it, elapsed, best_primal, best_dual))
            if (best_primal - best_dual) / best_primal <= tol or done:
                break
            # pairs above the active level join the set with a small weight
            level = float(r.max())
            cand = np.argwhere(np.triu(R > level, 1))
            if cand.size:
                order = np.argsort(-R[cand[:, 0], cand[:, 1]])[:grow]
                I = np.r_[I, cand[order, 0]]  # noqa: N806, E741
                J = np.r_[J, cand[order, 1]]  # noqa: N806
                mu = np.r_[mu, np.full(order.size, MU_FLOOR ** 0.5 * float(mu.max()))]
                mu /= mu.sum()
                continue
        mu = mu * (r / T)
        mu = np.maximum(mu, MU_FLOOR * float(mu.max()))
        mu /= mu.sum()
    assert best is not None
    A, rmax = best
    c = rmax * (1.0 + SAFETY)
    A = A / np.sqrt(c)
    ratio = float(pair_ratios(A.T @ A, B).max())
    if not ratio <= 1.0:
        raise SolverError(f"Gaussian strategy verification failed at {ratio:.12g}")
    error = c * (best_primal / rmax)
    return GaussianSolution(A, float(error), float(min(best_dual, error)), ratio, it,
                            time.perf_counter() - t0, np.zeros((0, 0)), history)
