"""Dedicated rows for the most demanding pairs of a few dense queries.

A pair (i, j) is demanding when its elements are close (eps_ij small) while the queries tell
them apart (|F_c (e_i - e_j)| large): ``y_q = F_c (e_i - e_j) / eps_ij`` is long.  Give it its own
row ``E_q = (s eps_ij / 2)(e_i - e_j)'``, which spends that pair's whole budget (s = 1) on one
coordinate, and answer the part of the workload that tells i from j from that row alone:
``F_c = F_m + sum_q (y_q / s) E_q`` where F_m is F_c with columns i and j both replaced by their
mean.  The rest of the strategy then only has to answer F_m, in whose eyes i and j are one
element: their budget no longer binds it.  Each pair row costs ``2 |y_q|^2 / s^2`` of error; the
other pairs keep the budget ``eps - ||E d||_1`` for the strategy of F_m (a row-space search,
:mod:`solvers.strategy.rowspace`).  The stacked strategy [A_m; E] is finally polished as a whole
in the row space of F_c and the pair directions.
"""

from __future__ import annotations

import numpy as np

from solvers.strategy.rowspace import RowSpace, polish_rows, search


def demanding_pairs(Fc: np.ndarray, I: np.ndarray, J: np.ndarray, eps: np.ndarray,  # noqa: N803, E741
                    T: int) -> np.ndarray:  # noqa: N803
    """Indices of T pairs with the longest ``y_q``, no element in two of them."""
    D = Fc[:, I] - Fc[:, J]
    y2 = np.sum(D * D, axis=0) / eps**2
    used: set[int] = set()
    out: list[int] = []
    for q in np.argsort(-y2):
        if len(out) >= T:
            break
        if int(I[q]) in used or int(J[q]) in used:
            continue
        out.append(int(q))
        used.update((int(I[q]), int(J[q])))
    return np.asarray(out, np.int64)


def merged_strategy(F: np.ndarray, I: np.ndarray, J: np.ndarray, eps: np.ndarray, T: int,  # noqa: N803, E741
                    *, seed: int = 0, deadline: float = float("inf"), maxiter: int = 300
                    ) -> tuple[np.ndarray, float] | None:
    """(A, error) of the strategy with T pair rows (module doc), feasible (max ratio <= 1 over
    the given pairs, up to rounding) and with its exact error; None if it does not apply."""
    Fc = np.asarray(F, dtype=np.float64)
    Fc = Fc - Fc.mean(axis=1, keepdims=True)
    N = Fc.shape[1]  # noqa: N806
    eps = np.asarray(eps, dtype=np.float64)
    ded = demanding_pairs(Fc, I, J, eps, T)
    if ded.size == 0:
        return None
    E = np.zeros((ded.size, N))
    Fm = Fc.copy()
    for t, q in enumerate(ded):
        i, j = int(I[q]), int(J[q])
        E[t, i], E[t, j] = eps[q] / 2, -eps[q] / 2
        Fm[:, [i, j]] = (0.5 * (Fc[:, i] + Fc[:, j]))[:, None]
    extra = np.abs(E[:, I] - E[:, J]).sum(axis=0)
    # pairs whose merged difference vanishes need no budget from the rest of the strategy
    moves = np.abs(Fm[:, I] - Fm[:, J]).sum(axis=0) > 1e-12 * max(float(np.abs(Fc).max()), 1e-300)
    slack = eps - extra
    if np.any(moves & (slack <= 1e-9 * eps)):  # a pair row would eat a moving pair's budget
        s = 0.5 * float(np.min(eps[moves] / np.maximum(extra[moves], 1e-300)))
        E *= min(1.0, s)
        extra = np.abs(E[:, I] - E[:, J]).sum(axis=0)
        slack = eps - extra
    keep = moves & (slack > 0)
    try:
        base = RowSpace.build(Fm, I[keep], J[keep], slack[keep])
    except Exception:  # noqa: BLE001 - nothing left to estimate: no merged strategy
        return None
    M, err_m, _, _ = search(base, rotations=2, dual_starts=2, seed=seed, deadline=deadline,
                            maxiter=maxiter)
    if M is None:
        return None
    Am = base.strategy(M / base.c(M))
    A = np.vstack([Am, E])
    # the whole strategy, polished in the row space of F_c and the pair directions
    full = RowSpace.build(Fc, I, J, eps, extra=E)
    Mf, err = polish_rows(full, A @ full.Q, maxiter=maxiter, deadline=deadline)
    return full.strategy(Mf), float(err)
