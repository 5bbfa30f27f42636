"""The strategy for a few dense queries: the better of the row-space search
(:mod:`solvers.strategy.rowspace`) and strategies with dedicated rows for the most demanding
close pairs (:mod:`solvers.strategy.pairrows`)."""

from __future__ import annotations

import time

import numpy as np

from solvers.errors import SolverError
from solvers.strategy.pairrows import merged_strategy
from solvers.strategy.rowspace import RowSpace, search

__all__ = ["rowspace_strategy"]


def rowspace_strategy(F: np.ndarray, I: np.ndarray, J: np.ndarray, eps: np.ndarray,  # noqa: N803, E741
                      *, u: np.ndarray | None = None, rotations: int = 4, rows: tuple[int, ...] = (10, 12),
                      dual_starts: int = 3, merges: tuple[int, ...] = (1, 2), seed: int = 0,
                      deadline: float = float("inf"), maxiter: int = 300) -> tuple[np.ndarray, dict]:
    """Best strategy found from the starts of the module doc and, for each T in ``merges``, the
    strategy with T dedicated pair rows (:mod:`solvers.strategy.pairrows`); returns (A, report)
    with A unscaled (the caller scales it by its exact constraint value)."""
    t0 = time.perf_counter()
    rs = RowSpace.build(F, I, J, eps)
    best_M, best, tried, bound = search(rs, u=u, rotations=rotations, rows=rows,
                                        dual_starts=dual_starts, seed=seed, deadline=deadline,
                                        maxiter=maxiter)
    if best_M is None:
        raise SolverError("no row-space start gave a finite error")
    A = rs.strategy(best_M)
    for T in merges:
        if time.perf_counter() > deadline:
            break
        got = merged_strategy(F, I, J, eps, T, seed=seed, deadline=deadline, maxiter=maxiter)
        if got is None:
            continue
        A_T, err_T = got
        tried.append({"start": f"pair-rows-{T}", "p": int(A_T.shape[0]), "error": err_T})
        if err_T < best:
            best, A = err_T, A_T
    report = {"rank": rs.r, "starts": tried, "error": best, "l2_bound": bound,
              "seconds": time.perf_counter() - t0}
    return A, report
