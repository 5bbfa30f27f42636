"""Parameters of the synthetic-data mechanisms: SmallDB problem (8) and MWEM's T.

Privacy conditions (a maximum over queries, not a sum):

  SmallDB (Theorem 5): ``beta * max_f w_f |f_i - f_j| <= eps_ij``;
  MWEM   (Theorem 7): ``2 T beta * max_f w_f |f_i - f_j| <= eps_ij`` (beta_E = beta_L = beta).

Both are maxima of pseudometrics, so edge constraint sets suffice for graph metrics (docs/theory.md,
"Graph metrics need only their edges").
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
from scipy.optimize import minimize_scalar

from solvers.constraints import ConstraintSet, as_query_matrix
from solvers.errors import SolverError
from solvers.result import SolverResult
from solvers.verify import Draft, finalize


def _unit_queries(F: object, cs: ConstraintSet) -> np.ndarray:
    if not isinstance(cs, ConstraintSet):
        raise SolverError(f"constraints must be a ConstraintSet, got {type(cs).__name__}")
    A = as_query_matrix(F, cs.N)
    if A.min() < 0 or A.max() > 1:
        raise SolverError(f"queries must lie in [0, 1] (got range [{A.min()}, {A.max()}])")
    return A


def _check_n(n: float) -> float:
    if n is None or not np.isfinite(n) or n <= 0:
        raise SolverError(f"n (the number of records) must be a positive number, got {n}")
    return float(n)


def smalldb_params(F: object, constraints: ConstraintSet, n: float, *, delta: float = 0.05,
                   memory_bytes: int = 2**30) -> SolverResult:
    """Problem (8): ``min_{w, beta} max_f |1 - w_f| ||f||_inf + (C / (beta n))^(1/3)`` with
    ``C = 16 ln N ln|Q| + 4 ln(1/delta)``, s.t. ``beta w_f |f_i - f_j| <= eps_ij``.

    For fixed beta the optimal w is ``w_f = min(1, 1 / (beta c_f))`` (c_f = Lipschitz constant of
    f), so (8) is a 1-D minimisation over beta (docs/theory.md, "Synthetic-data designs"): a
    log-spaced grid followed by a bounded Brent refinement around the best grid point. Returns w
    (per query), beta (the shared beta repeated per query), objective = the error bound (9).

    When n is too small the bound (9) cannot beat ``max_f ||f||_inf`` and the true optimum of
    (8) is degenerate (beta -> inf, w -> 0: "answer nothing"); then ``report["degenerate"]`` is
    True, ``report["n_nonvacuous"]`` holds ``C max_f c_f / max_f ||f||_inf^3`` (eq. (10) at
    w = 1) and a ``UserWarning`` is emitted.
    """
    t0 = time.perf_counter()
    A = _unit_queries(F, constraints)
    n = _check_n(n)
    if not 0 < delta < 1:
        raise SolverError(f"delta must lie in (0, 1), got {delta}")
    m, N = A.shape
    c, _, _ = constraints.check_feasible(A, memory_bytes=memory_bytes)
    fmax = A.max(axis=1)
    C = 16.0 * math.log(N) * math.log(m) + 4.0 * math.log(1.0 / delta) if N > 1 else 0.0
    C = max(C, 4.0 * math.log(1.0 / delta))

    def phi(log_b: float) -> float:
        b = math.exp(log_b)
        w = np.minimum(1.0, 1.0 / np.maximum(b * c, 1e-300))
        return float(np.max((1.0 - w) * fmax) + (C / (b * n)) ** (1.0 / 3.0))

    if not (c > 0).any():
        w, beta, obj, notes = np.ones(m), np.inf, 0.0, ["no query is constrained: beta = inf"]
    else:
        lo = -math.log(c.max())  # below this every w_f = 1 and phi only decreases
        grid = np.linspace(lo, lo + 40.0, 4001)
        vals = np.array([phi(g) for g in grid])
        g = int(np.argmin(vals))
        a, b = grid[max(g - 1, 0)], grid[min(g + 1, grid.size - 1)]
        opt = minimize_scalar(phi, bounds=(a, b), method="bounded", options={"xatol": 1e-12})
        log_b = float(opt.x) if opt.fun <= vals[g] else float(grid[g])
        beta = math.exp(log_b)
        w = np.minimum(1.0, 1.0 / np.maximum(beta * c, 1e-300))
        obj = phi(log_b)
        notes = [f"C = {C:.6g}; 1-D search over beta (grid + Brent)"]
    u = w * beta if np.isfinite(beta) else np.full(m, np.inf)
    draft = Draft(u=u, w=w, iterations=1, n_used=constraints.n_constraints, notes=notes,
                  extra={"C": C, "delta": delta, "beta_shared": float(beta)})
    res = finalize(A, constraints, draft, method="smalldb", loss="max", n=n, t0=t0,
                   memory_bytes=memory_bytes, agg="max", objective_value=obj)
    if res.report["scaled_back"]:  # keep the objective honest after a scale-back
        b2 = float(np.max(res.beta))
        object.__setattr__(res, "objective", phi(math.log(b2)) if np.isfinite(b2) else 0.0)
    _flag_degenerate(res, c, fmax, C, n)
    return res


def _flag_degenerate(res: SolverResult, c: np.ndarray, fmax: np.ndarray, C: float,
                     n: float) -> None:
    """Mark a vacuous SmallDB design (eq. (9)-(10)): when n is too small, the bound (9)
    cannot beat ``max_f ||f||_inf`` (the error of answering 0), so the optimum of (8) sends
    beta -> inf, w -> 0. Sets ``report["degenerate"]``, ``report["n_nonvacuous"]`` and warns."""
    wmin = float(np.min(res.w)) if res.w.size else 1.0
    top = float(fmax.max()) if fmax.size else 0.0
    degenerate = bool(c.max(initial=0.0) > 0 and top > 0
                      and (res.objective >= top * (1 - 1e-9) or wmin < 1e-6))
    res.report["degenerate"] = degenerate
    beta_bar = 1.0 / c.max() if c.max(initial=0.0) > 0 else math.inf
    n0 = C * float(c.max(initial=0.0)) / top**3 if top > 0 else 0.0
    res.report["n_nonvacuous"] = float(n0)
    if not degenerate:
        return
    msg = (f"SmallDB design is degenerate for n = {n:g}: the error bound (9) is "
           f"{res.objective:.4g} >= max_f ||f||_inf = {top:.4g} or some w_f < 1e-6 "
           f"(min w = {wmin:.2e}, beta = {float(np.max(res.beta)):.3g}), i.e. answering ~0 is "
           f"'optimal' and the synthetic data carries no useful information. By eq. (10) with "
           f"w = 1 and beta = 1/max_f c_f = {beta_bar:.4g}, a non-vacuous bound needs "
           f"n > C / (beta alpha^3) with alpha = max_f ||f||_inf, i.e. n > {n0:.4g} "
           f"(C = {C:.4g}); accuracy alpha = 0.1 needs n >= {C / (beta_bar * 1e-3):.4g}.")
    res.report["notes"].append(msg)
    warnings.warn(msg, UserWarning, stacklevel=3)


def mwem_params(F: object, constraints: ConstraintSet, n: float, *, T: int | None = None,
                memory_bytes: int = 2**30) -> SolverResult:
    """MWEM parameters of the paper with w = 1: ``beta_bar = 1 / max_f c_f``,
    ``T* = (n beta_bar sqrt(ln N) / (10 ln|Q|))^(2/3)`` (rounded, >= 1) unless T is given, and
    ``beta_E = beta_L = beta = beta_bar / (2T)``. Objective: the bound
    ``2 n sqrt(ln N / T) + 5 ln|Q| / beta`` of Theorem 8 (ln|Q| taken >= ln 2). The full scan
    verifies ``2 T beta max_f |f_i - f_j| <= eps_ij``; ``report["T"]`` holds T.
    """
    t0 = time.perf_counter()
    A = _unit_queries(F, constraints)
    n = _check_n(n)
    m, N = A.shape
    c, _, _ = constraints.check_feasible(A, memory_bytes=memory_bytes)
    lnQ = max(math.log(m), math.log(2.0))
    lnN = math.log(N) if N > 1 else 0.0
    notes = []
    if T is not None:
        if int(T) < 1:
            raise SolverError(f"T must be a positive integer, got {T}")
        T = int(T)
    if c.max() <= 0:
        beta_bar = np.inf
        T = T or 1
        notes.append("no query is constrained: beta = inf")
    else:
        beta_bar = 1.0 / c.max()
        if T is None:
            T_star = (n * beta_bar * math.sqrt(lnN) / (10.0 * lnQ)) ** (2.0 / 3.0)
            cands = {max(1, math.floor(T_star)), max(1, math.ceil(T_star))}
            T = min(cands, key=lambda t: 2 * n * math.sqrt(lnN / t) + 10 * t * lnQ / beta_bar)
            notes.append(f"T* = {T_star:.6g} rounded to {T}")
    beta = beta_bar / (2 * T)
    obj = 2 * n * math.sqrt(lnN / T) + (5 * lnQ / beta if np.isfinite(beta) else 0.0)
    draft = Draft(u=np.full(m, beta), iterations=1, n_used=constraints.n_constraints, notes=notes,
                  extra={"T": int(T), "beta_E": float(beta), "beta_L": float(beta),
                         "privacy_multiplier": 2 * int(T)})
    return finalize(A, constraints, draft, method="mwem", loss="max", n=n, t0=t0,
                    memory_bytes=memory_bytes, agg="max", multiplier=2.0 * T, objective_value=obj)
