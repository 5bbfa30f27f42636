"""Exact design: the convex program in u = w * beta solved by constraint generation (docs/theory.md).

Privacy condition (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every constrained pair
-- linear in u, so problem (6) at w = 1 is convex for every loss:

    squared:  min sum_k u_k^-2      absolute: min sum_k u_k^-1
    max:      max min_k u_k         log:      max sum_k log u_k  (geometric-mean IF)

The N(N-1)/2 constraints are never handed to the solver at once. With column scaling
``v_k = c_k u_k`` (c_k = row Lipschitz constant, so every feasible v lies in [0, 1]^m and every
scaled coefficient ``|F_ki - F_kj| / (eps_ij c_k)`` lies in [0, 1]) we solve over a working set of
pairs, scan ALL pairs for the most violated ones, add them and repeat until the maximum relative
violation over all pairs is <= tol. Solver: cvxpy + Clarabel.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import cvxpy as cp
import numpy as np

from solvers.closed_form import inverse_or_inf
from solvers.constraints import ConstraintSet
from solvers.errors import SolverError
from solvers.operand import QueryMatrix, rows, take
from solvers.verify import Draft

ObjectiveBuilder = Callable[[cp.Variable], cp.Minimize | cp.Maximize]
CLARABEL_OPTS = {"tol_gap_abs": 1e-9, "tol_gap_rel": 1e-9, "tol_feas": 1e-9, "max_iter": 400}


def loss_objective(loss: str, c: np.ndarray) -> ObjectiveBuilder:
    """The objective for ``loss`` (docs/theory.md) written in the scaled variable v = c * u (> 0)."""
    cn = c / c.max()
    if loss == "squared":
        wts = cn**2 / np.sum(cn**2)
        return lambda v: cp.Minimize(cp.sum(cp.multiply(wts, cp.power(v, -2))))
    if loss == "absolute":
        wts = cn / np.sum(cn)
        return lambda v: cp.Minimize(cp.sum(cp.multiply(wts, cp.inv_pos(v))))
    if loss == "max":
        return lambda v: cp.Maximize(cp.min(cp.multiply(cn.min() / cn, v)))
    if loss == "log":  # max sum log u = max geo_mean(v) (monotone); SOC form, since Clarabel's
        return lambda v: cp.Maximize(cp.geo_mean(v))  # exponential cones stall on many rows
    raise SolverError(f"unknown loss {loss!r}")


class WorkingSet:
    """Pairs handed to the solver, with their scaled constraint rows ``|F_ki - F_kj|^power /
    eps_ij`` (power 1: Laplace; 2: Gaussian)."""

    def __init__(self, F: QueryMatrix, cs: ConstraintSet, power: int = 1) -> None:
        self.F, self.cs, self.N, self.power = F, cs, cs.N, power
        self.keys: set[int] = set()
        self.rows: list[np.ndarray] = []

    def add(self, i: np.ndarray, j: np.ndarray) -> int:
        i = np.asarray(i, np.int64)
        j = np.asarray(j, np.int64)
        ok = (i >= 0) & (i != j)
        lo, hi = np.minimum(i[ok], j[ok]), np.maximum(i[ok], j[ok])
        keys, first = np.unique(lo * self.N + hi, return_index=True)
        new = np.array([k not in self.keys for k in keys.tolist()], dtype=bool)
        if not new.any():
            return 0
        lo, hi = lo[first][new], hi[first][new]
        eps = self.cs.pair_eps(lo, hi)
        fin = (eps < np.inf) & (eps > 0)
        lo, hi, eps = lo[fin], hi[fin], eps[fin]
        self.keys.update((lo * self.N + hi).tolist())
        if lo.size:
            ad = np.abs(take(self.F, lo) - take(self.F, hi))
            self.rows.append((ad if self.power == 1 else ad**self.power).T / eps[:, None])
        return int(lo.size)

    def matrix(self) -> np.ndarray:
        return np.vstack(self.rows) if self.rows else np.zeros((0, self.F.shape[0]))

    def __len__(self) -> int:
        return len(self.keys)


def solve_u(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray, build: ObjectiveBuilder,
            init: list[tuple[np.ndarray, np.ndarray]], *, memory_bytes: int, tol: float = 1e-9,
            max_rounds: int | None = None, add_k: int | None = None, progress: bool = False,
            ws: WorkingSet | None = None, agg: str = "sum"
            ) -> tuple[np.ndarray, Draft, WorkingSet | None]:
    """Constraint generation for ``build(v)`` over ``{v : A v <= 1, 0 <= v <= 1}`` with
    v = c * u. Only rows with c_k > 0 are variables; the others get u_k = inf (exact answer).
    ``agg``: "sum" (rows ``|F_ki - F_kj| / eps_ij``) or "sq" (rows ``(F_ki - F_kj)^2 / eps_ij``,
    Gaussian noise; ``c`` is then the per-row maximum of those).

    Returns (u, draft, working set); the working set is ``ws`` (None if not given) when no row
    has c_k > 0. ``init`` lists (i, j) arrays of starting pairs."""
    m = F.shape[0]
    act = np.flatnonzero(c > 0)
    if act.size == 0:
        return np.full(m, np.inf), Draft(u=np.full(m, np.inf), iterations=0), ws
    Fa, ca = rows(F, act), c[act]
    ws = ws if ws is not None else WorkingSet(Fa, cs, power=2 if agg == "sq" else 1)
    for i, j in init:
        ws.add(i, j)
    add_k = add_k or max(20, 4 * act.size)
    max_rounds = max_rounds or 200
    notes: list[str] = []
    status = "round_limit"
    u = np.full(m, np.inf)
    bar = _bar(progress, max_rounds)
    for rnd in range(1, max_rounds + 1):
        A = ws.matrix() / ca[None, :]
        v = cp.Variable(act.size)
        prob = cp.Problem(build(v), [A @ v <= 1, v >= 0, v <= 1])
        try:
            with warnings.catch_warnings():  # "inaccurate" is recorded in the notes instead
                warnings.simplefilter("ignore", UserWarning)
                prob.solve(solver=cp.CLARABEL, **CLARABEL_OPTS)
        except cp.SolverError as exc:
            raise SolverError(f"Clarabel failed in round {rnd}: {exc}") from exc
        if prob.status not in ("optimal", "optimal_inaccurate") or v.value is None:
            raise SolverError(f"Clarabel returned status {prob.status!r} in round {rnd}")
        if prob.status == "optimal_inaccurate":
            notes.append(f"round {rnd}: solver status optimal_inaccurate")
        u[act] = np.maximum(v.value, 0.0) / ca
        sc = cs.scan(F, u, memory_bytes=memory_bytes, k=add_k, agg=agg)
        ti, tj, tr = sc.top
        viol = tr > 1.0 + tol
        added = ws.add(ti[viol], tj[viol]) if viol.any() else 0
        if bar is not None:
            bar.update(1)
            bar.set_postfix(pairs=len(ws), max_ratio=f"{sc.max_ratio:.3g}")
        if added == 0:
            status = "optimal" if sc.max_ratio <= 1.0 + tol else "optimal_solver_tolerance"
            if status != "optimal":
                notes.append(f"max ratio {sc.max_ratio:.3g} within the working set: solver "
                             "tolerance, removed by the final scale-back")
            break
    if bar is not None:
        bar.close()
    draft = Draft(u=u, iterations=rnd, n_used=len(ws), status=status, notes=notes,
                  extra={"final_violation": float(sc.max_ratio - 1.0)},
                  scanned=(F, cs, u.copy(), agg, float(sc.max_ratio), sc.worst))
    return u, draft, ws


def _bar(progress: bool, total: int):  # noqa: ANN202
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="constraint generation", leave=False)


def start_pairs(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray, bi: np.ndarray,
                bj: np.ndarray, memory_bytes: int, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs tight for the heuristics: each row's closed-form arg-max (Strategy 1), and the
    k largest ratios of the uniform (Strategy 2) and equal-split designs."""
    act = c > 0
    init = [(bi[act], bj[act])]
    for u in (np.where(act, 1.0, 0.0), np.where(act, inverse_or_inf(c), 0.0)):
        ti, tj, _ = cs.scan(F, u, memory_bytes=memory_bytes, k=k).top
        init.append((ti, tj))
    return init


def exact(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray, bi: np.ndarray, bj: np.ndarray,
          loss: str, *, memory_bytes: int, tol: float, max_rounds: int | None,
          progress: bool) -> Draft:
    """Exact w = 1 optimum of problem (6) for ``loss`` (docs/theory.md) by constraint generation."""
    act = c > 0
    if not act.any():
        return Draft(u=np.full(F.shape[0], np.inf), iterations=0,
                     notes=["no query is separated by a finite budget: all answered exactly"])
    k = max(20, 4 * int(act.sum()))
    init = start_pairs(F, cs, c, bi, bj, memory_bytes, k)
    _, draft, _ = solve_u(F, cs, c, loss_objective(loss, c[act]), init, memory_bytes=memory_bytes,
                          tol=tol, max_rounds=max_rounds, add_k=k, progress=progress)
    if loss == "max":  # lowering u keeps feasibility, so all u_k = min_k u_k is optimal too
        draft.u = np.where(act, draft.u[act].min(), draft.u)
        draft.extra["final_violation"] = cs.scan(F, draft.u, memory_bytes=memory_bytes).max_ratio - 1
    slack = draft.extra.get("final_violation", 0.0)
    if -0.5 < slack < 0.0:  # solver slack: every loss decreases in u, so use the full budget
        draft.u = draft.u / (1.0 + slack)
        draft.extra["final_violation"] = 0.0
    return draft
