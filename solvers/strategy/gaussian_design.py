"""A Gaussian strategy for a workload under a constraint set, as a :class:`StrategyResult`.

Wraps :func:`solvers.strategy.gaussian.solve_gaussian`: the pair budgets ``b_ij = 2 rho eps_ij``
over every pair (an edge set completed by shortest paths), the workload's Gram matrix (from F,
or given in closed form for an implicit workload), and the answer map (or, for a workload known
only by its Gram matrix, the estimate map) of the optimal strategy.  The result's ``error`` is
the expected total squared error with unit-variance Gaussian noise on every strategy row,
``||F A^+||_F^2``, and ``lower_bound`` the dual bound of the certificate.
numpy / scipy only; never imports dprivacy.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers.constraints import ConstraintSet
from solvers.errors import SolverError
from solvers.strategy import StrategyResult
from solvers.strategy.basis import Basis, is_sparse
from solvers.strategy.estimate import estimate_map
from solvers.strategy.gaussian import centre_gram, gaussian_report, pair_budgets, solve_gaussian
from solvers.strategy.gaussian_active import solve_gaussian_active, workload_factor
from solvers.strategy.objective import answer_map, gram
from solvers.strategy.optimize import blas_threads

#: Largest universe the dense solver takes (N x N matrices, one eigendecomposition a step).
GAUSSIAN_DENSE_LIMIT = 8192
#: Above this many elements a workload of at most N / 4 queries runs on an active set of pairs
#: (:mod:`solvers.strategy.gaussian_active`: r x r eigenproblems, r the rank of the workload).
ACTIVE_MIN_N = 2048


def optimize_gaussian_strategy(F: Any, cs: ConstraintSet, *, rho: float, tol: float = 1e-3,
                               time_limit: float = 600.0, max_iter: int = 100_000,
                               gram_matrix: np.ndarray | None = None,
                               threads: int | None = 1) -> StrategyResult:
    """The strategy A minimising the error of ``y = A x + N(0, I)`` under ``rho``-zCDP per unit
    of the budgets of ``cs``: ``||A (e_i - e_j)||_2^2 <= 2 rho eps_ij`` for every pair.

    Parameters
    ----------
    F : (m, N) workload (dense or sparse), or None when only ``gram_matrix`` is known.
    cs : the pair budgets eps_ij (an edge set is completed to all pairs by shortest paths).
    rho : zCDP parameter per unit of eps_ij.
    tol : certified relative gap at which to stop (default 0.1 %).
    time_limit, max_iter : stop earlier with the gap reached so far (reported).
    gram_matrix : F'F in closed form (an implicit workload).
    threads : BLAS threads (default 1; None leaves the setting alone).

    Returns
    -------
    StrategyResult with ``C = A`` in the identity basis, verified on every pair,
    ``error = ||F A^+||_F^2`` (unit-variance noise), ``lower_bound`` the dual bound, and the
    certificate in ``report`` (``certified_gap``, ``dual_bound``, ``iterations``).
    """
    t0 = time.perf_counter()
    N = cs.N  # noqa: N806
    if N > GAUSSIAN_DENSE_LIMIT:
        raise SolverError(f"Gaussian strategies are designed densely up to N = "
                          f"{GAUSSIAN_DENSE_LIMIT} elements, got N = {N}")
    basis = Basis.identity(N)
    Fm = None
    if F is None:
        if gram_matrix is None:
            raise SolverError("a workload without F needs its Gram matrix (gram_matrix=F'F)")
        G = np.asarray(gram_matrix, dtype=np.float64)
        if G.shape != (N, N) or not np.all(np.isfinite(G)):
            raise SolverError(f"the Gram matrix must be a finite ({N}, {N}) array")
    else:
        Fm = sp.csr_array(F) if is_sparse(F) else np.asarray(F, dtype=np.float64)
        if Fm.ndim != 2 or Fm.shape[1] != N:
            raise SolverError(f"F must be (m, {N}), got shape {Fm.shape}")
        G = gram(Fm, False) if gram_matrix is None else np.asarray(gram_matrix, np.float64)
    B = pair_budgets(cs, rho)
    Gc = centre_gram(G)
    with blas_threads(threads):
        if Fm is not None and N > ACTIVE_MIN_N and Fm.shape[0] <= N // 4:
            sol = solve_gaussian_active(workload_factor(Fm), B, tol=tol, time_limit=time_limit,
                                        max_iter=max_iter)
        else:
            sol = solve_gaussian(Gc, B, tol=tol, time_limit=time_limit, max_iter=max_iter,
                                 centred=True)
    A = sol.A
    X = z = None
    if Fm is None:
        M = o = None
        X, z, share = estimate_map(A, basis, Gc)
        if share > 1e-9:
            raise SolverError(f"{share:.3g} of the workload lies outside the row space of the "
                              "strategy: it cannot be answered from the release")
        err = sol.error
    else:
        FK, f0 = basis.workload(Fm)
        M, o = answer_map(A, FK, f0, True)
        err = float((M.multiply(M)).sum() if is_sparse(M) else np.sum(M * M))
    report = gaussian_report(sol, rho=float(rho), basis="identity", p=int(A.shape[0]),
                             max_ratio=sol.max_ratio, start="gaussian dual ascent",
                             seconds=time.perf_counter() - t0)
    return StrategyResult(A, basis, M, o, err, sol.max_ratio, sol.bound, report, X, z)
