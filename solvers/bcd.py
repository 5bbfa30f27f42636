"""Optimal shrinkage w for a given u (docs/theory.md) and block coordinate descent on (w, beta)
(paper Appendix B).

Privacy condition (Theorem 1): ``sum_k w_k beta_k |F_ki - F_kj| <= eps_ij``; it depends on
``u = w * beta`` only, so w is post-processing: for fixed u any w keeps the design private.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from solvers.constraints import ConstraintSet
from solvers.convex import ObjectiveBuilder, solve_u, start_pairs
from solvers.errors import SolverError
from solvers.operand import QueryMatrix, row_absmax
from solvers.verify import Draft, objective


def shrinkage(u: np.ndarray, F: QueryMatrix, n: float, loss: str) -> tuple[np.ndarray, str]:
    """Best w for fixed u (docs/theory.md). squared: ``w_k = a_k u_k^2 / (a_k u_k^2 + 2)`` with
    ``a_k = n^2 ||F_k||_inf^2``; absolute: ``w_k = 1`` if ``1/u_k <= n ||F_k||_inf`` else 0.
    Other losses keep w = 1. Returns (w, note)."""
    u = np.asarray(u, float)
    fmax = row_absmax(F)
    if loss == "squared":
        a = (float(n) * fmax) ** 2
        with np.errstate(invalid="ignore", over="ignore"):
            au2 = a * u**2
            w = np.where(np.isinf(au2), 1.0, au2 / (au2 + 2.0))
        return np.where(np.isinf(u), 1.0, w), f"optimal shrinkage w for n = {n} (docs/theory.md)"
    if loss == "absolute":
        with np.errstate(divide="ignore"):
            scale = np.where(np.isinf(u), 0.0, 1.0 / u)
        return np.where(scale <= float(n) * fmax, 1.0, 0.0), f"optimal shrinkage w for n = {n}"
    return np.ones_like(u), f"loss {loss!r}: w = 1 (shrinkage defined for squared/absolute)"


def bcd(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray, bi: np.ndarray, bj: np.ndarray,
        n: float | None, loss: str, *, memory_bytes: int, tol: float, max_rounds: int | None,
        progress: bool, w0: np.ndarray | None = None) -> Draft:
    """Cyclic block coordinate descent on problem (6), squared loss (paper Appendix B):

    (ii) w fixed: ``min 2 sum_k beta_k^-2`` s.t. ``sum_k beta_k (w_k |F_ki - F_kj|) <= eps_ij``;
    (i)  beta fixed: ``min n^2 sum_k (1 - w_k)^2 ||F_k||_inf^2`` s.t. the same constraints, w >= 0.

    Both blocks are convex programs with linear constraints, solved exactly by the constraint
    generation of :mod:`solvers.convex` (in u = w * beta). Starts from ``w0`` (default: the
    optimal shrinkage of the Strategy 2 design), stops when the objective improves by less than
    ``max(tol, 1e-7)`` relative or after ``max_rounds`` (default 20) cycles. A heuristic: the
    bilinear coupling makes it stall at block-wise optima (the exact u-form has no such issue).
    Without n the bias term vanishes, w = 1 is optimal and one beta-block is solved.
    """
    if loss != "squared":
        raise SolverError(f"method 'bcd' implements the squared loss of paper Appendix B, not {loss!r}")
    m = F.shape[0]
    act = c > 0
    if not act.any():
        return Draft(u=np.full(m, np.inf), iterations=0)
    ca = c[act]
    k = max(20, 4 * int(act.sum()))
    init = start_pairs(F, cs, c, bi, bj, memory_bytes, k)
    fmax = row_absmax(F)
    kw: dict[str, Any] = dict(memory_bytes=memory_bytes, tol=tol, add_k=k)
    if n is None:
        w = np.ones(m)
    elif w0 is not None:
        w = np.asarray(w0, float).copy()
    else:
        sc = cs.scan(F, act.astype(float), memory_bytes=memory_bytes)
        w = shrinkage(np.where(act, 1.0 / max(sc.max_ratio, 1e-300), np.inf), F, n, "squared")[0]
    w = np.where(act, np.clip(w, 1e-12, 1.0), 1.0)
    ws = None
    prev = np.inf
    rounds, n_inner, notes = 0, 0, []
    for rounds in range(1, (max_rounds or 20) + 1):
        # (ii) beta-block: u = w beta, objective 2 sum (w_k / u_k)^2 = 2 sum (w_k c_k / v_k)^2.
        wt = (w[act] * ca) ** 2
        wt = wt / wt.sum()
        u, d, ws = solve_u(F, cs, c, _beta_block(wt), init if ws is None else [], ws=ws, **kw)
        n_inner += d.iterations
        beta = np.where(act, u / w, np.inf)
        if n is None:
            break
        # (i) w-block: u = w beta, objective sum a_k (1 - u_k / beta_k)^2 = sum a_k (1 - v_k/(c_k beta_k))^2.
        a = (float(n) * fmax[act]) ** 2
        a = a / a.max()
        g = 1.0 / (ca * beta[act])
        u, d, ws = solve_u(F, cs, c, _w_block(a, g), [], ws=ws, **kw)
        n_inner += d.iterations
        w = np.where(act, np.clip(u / beta, 1e-12, 1.0), 1.0)
        obj = objective("squared", w, beta, F, n)
        if prev - obj <= max(tol, 1e-7) * abs(obj):
            notes.append(f"stopped after {rounds} cycles: relative improvement below tolerance")
            break
        prev = obj
    u = np.where(act, w * beta, np.inf)
    return Draft(u=u, w=w, iterations=rounds, n_used=len(ws) if ws is not None else 0,
                 notes=notes, extra={"inner_rounds": n_inner})


def _beta_block(wt: np.ndarray) -> ObjectiveBuilder:
    """v -> minimise sum_k wt_k / v_k^2 (the beta-block objective of :func:`bcd`)."""
    return lambda v: cp.Minimize(cp.sum(cp.multiply(wt, cp.power(v, -2))))


def _w_block(a: np.ndarray, g: np.ndarray) -> ObjectiveBuilder:
    """v -> minimise sum_k a_k (1 - g_k v_k)^2 (the w-block objective of :func:`bcd`)."""
    return lambda v: cp.Minimize(cp.sum(cp.multiply(a, cp.square(1 - cp.multiply(g, v)))))
