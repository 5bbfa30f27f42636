"""Exact design for a given n: the joint optimum of problem (6) over (w, u) (docs/theory.md).

Privacy condition (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every constrained pair,
``u = w * beta``; w is post-processing, so for fixed u the best w is closed form and problem (6)
reduces to one over u with LINEAR constraints (docs/theory.md):

    squared:  min sum_k h_k(u_k),  h_k = 2 a_k / (a_k u_k^2 + 2),   a_k = n^2 ||F_k||_inf^2,
              then w_k = a_k u_k^2 / (a_k u_k^2 + 2);
    absolute: min sum_k h_k(u_k),  h_k = min(1 / u_k, n ||F_k||_inf),
              then w_k = 1 if u_k n ||F_k||_inf >= 1 else 0.

In ``z_k = u_k / ut_k`` (``ut_k = sqrt(2 / a_k)`` resp. ``2 / (n ||F_k||_inf)``) both read
``A_k phi(z_k)`` with ``phi = 1 / (1 + z^2)`` resp. ``min(1, 1 / (2 z))``. Neither is convex
(h_k is concave below ``z = 1/sqrt(3)`` resp. has a concave kink at ``z = 1/2``), but both have
the same C^1 convex envelope ``A_k (1 - z / 2)`` for ``z <= 1`` and ``A_k phi(z)`` beyond; on the
feasible box ``z_k <= Z_k`` (a single pair's constraint) with ``Z_k < 1`` the envelope is the
chord from ``(0, A_k)`` to ``(Z_k, h_k(Z_k))``.
We minimise the envelope (a convex problem) by constraint generation -- working set of pairs,
full blocked scan, repeat to max relative violation <= tol -- with SLSQP on each working set.
The envelope optimum is a lower bound on the joint optimum; when every ``z_k >= 1`` it coincides
with h there, so it IS the global joint optimum (``report["global_optimum"]``). Otherwise
(squared loss) a local SLSQP polish on h follows and the best of it and exact-then-shrinkage is
returned, with the lower bound and ``report["convex_region"]`` (every ``u_k`` where h_k is
convex: ``u_k >= sqrt(2 / (3 a_k))`` resp. ``u_k >= 1 / (n ||F_k||_inf)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

from solvers.bcd import shrinkage
from solvers.constraints import ConstraintSet
from solvers.convex import WorkingSet, loss_objective, solve_u, start_pairs
from solvers.errors import SolverError
from solvers.operand import QueryMatrix, row_absmax
from solvers.verify import Draft

CONVEX_FROM = {"squared": 1.0 / np.sqrt(3.0), "absolute": 0.5}  # h_k convex for z >= this


@dataclass(frozen=True)
class Reduced:
    """``sum_k A_k phi(v_k / t_k)`` over the scaled variable ``v = c * u`` (in [0, 1])."""

    loss: str
    A: np.ndarray
    t: np.ndarray

    @property
    def zt(self) -> np.ndarray:
        """Where the envelope on the feasible box ``z <= 1/t`` meets phi: min(1, 1/t)."""
        return np.minimum(1.0, 1.0 / self.t)

    def value(self, v: np.ndarray, envelope: bool) -> float:
        return float(np.sum(self.A * self._phi(v / self.t, envelope)[0]))

    def grad(self, v: np.ndarray, envelope: bool) -> np.ndarray:
        return self.A * self._phi(v / self.t, envelope)[1] / self.t

    def _phi(self, z: np.ndarray, envelope: bool) -> tuple[np.ndarray, np.ndarray]:
        if self.loss == "squared":
            f, d = 1.0 / (1.0 + z * z), -2.0 * z / (1.0 + z * z) ** 2
        else:
            zc = np.maximum(z, 0.5)
            f, d = np.where(z > 0.5, 0.5 / zc, 1.0), np.where(z > 0.5, -0.5 / zc**2, 0.0)
        if envelope:  # chord from (0, 1) to (zt, phi(zt)): the tangent at 1 if 1/t >= 1
            zt = self.zt
            slope = (self._phi(zt, False)[0] - 1.0) / zt
            low = z < zt
            f, d = np.where(low, 1.0 + slope * z, f), np.where(low, slope, d)
        return f, d


def _slsqp(red: Reduced, B: np.ndarray, v0: np.ndarray, envelope: bool,
           bounds: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """min red(v) s.t. B v <= 1, lo <= v <= hi (default [0, 1]; objective normalised at v0)."""
    lo, hi = bounds if bounds is not None else (np.zeros(v0.size), np.ones(v0.size))
    v0 = np.clip(v0, lo, hi)
    scale = max(red.value(v0, envelope), 1e-300)
    cons = [{"type": "ineq", "fun": lambda v: 1.0 - B @ v, "jac": lambda v: -B}]
    v, best = v0, np.inf
    for _ in range(3):  # restart while it still improves: SLSQP's BFGS model can stall early
        # scipy-stubs type a constraint dict's fun as scalar-valued; SLSQP takes vector ones (B v <= 1)
        res = minimize(lambda x: red.value(x, envelope) / scale, v, method="SLSQP",  # type: ignore[call-overload]
                       jac=lambda x: red.grad(x, envelope) / scale, bounds=list(zip(lo, hi, strict=True)),
                       constraints=cons, options={"ftol": 1e-16, "maxiter": 2000})
        x = np.clip(res.x, lo, hi)
        x = x / max(1.0, float((B @ x).max(initial=0.0)))  # stay feasible on the working set
        val = red.value(x, envelope) / scale
        if val >= best * (1 - 1e-13):
            break
        v, best = x, val
    return v


def _generate(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray, act: np.ndarray, ws: WorkingSet,
              red: Reduced, v0: np.ndarray, envelope: bool, *, memory_bytes: int, tol: float,
              max_rounds: int, add_k: int, bounds: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[np.ndarray, int, str, float]:
    """Constraint generation with SLSQP subproblems; returns (v, rounds, status, max ratio)."""
    ca = c[act]
    u = np.full(F.shape[0], np.inf)
    v, status, ratio, rnd = v0, "round_limit", np.inf, 0
    while rnd < max_rounds:
        rnd += 1
        v = _slsqp(red, ws.matrix() / ca[None, :], v, envelope, bounds)
        u[act] = v / ca
        sc = cs.scan(F, u, memory_bytes=memory_bytes, k=add_k)
        ti, tj, tr = sc.top
        viol = tr > 1.0 + tol
        ratio = sc.max_ratio
        if (ws.add(ti[viol], tj[viol]) if viol.any() else 0) == 0:
            status = "optimal" if ratio <= 1.0 + tol else "optimal_solver_tolerance"
            break
    return v, rnd, status, float(ratio)


def joint(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray, bi: np.ndarray, bj: np.ndarray,
          n: float, loss: str, *, memory_bytes: int, tol: float, max_rounds: int | None,
          progress: bool) -> Draft:
    """Joint optimum of problem (6) over (w, u) for n records (module docstring), warm started
    from the w = 1 exact optimum (feasible). Report keys: ``global_optimum`` (objective equals
    the envelope lower bound), ``convex_region`` (every u_k where h_k is convex, docs/theory.md),
    ``convex_on_support`` (the same for u_k > 0), ``lower_bound`` (envelope optimum),
    ``shrinkage_objective`` (w = 1 optimum, then w*) and ``joint_objective``."""
    if loss not in CONVEX_FROM:
        raise SolverError(f"joint design with n is defined for squared/absolute, not {loss!r}")
    m = F.shape[0]
    act = c > 0
    if not act.any():
        return Draft(u=np.full(m, np.inf), w=np.ones(m), iterations=0,
                     notes=["no query is separated by a finite budget: all answered exactly"])
    k = max(20, 4 * int(act.sum()))
    init = start_pairs(F, cs, c, bi, bj, memory_bytes, k)
    u1, d1, ws = solve_u(F, cs, c, loss_objective(loss, c[act]), init, memory_bytes=memory_bytes,
                         tol=tol, max_rounds=max_rounds, add_k=k, progress=progress)
    assert ws is not None  # act.any(): solve_u built a working set
    fmax = row_absmax(F)[act]
    ca = c[act]
    A, ut = ((n * fmax) ** 2, np.sqrt(2.0) / (n * fmax)) if loss == "squared" else \
        (n * fmax, 2.0 / (n * fmax))
    red = Reduced(loss, A, ca * ut)
    v1 = np.clip(ca * u1[act], 0.0, 1.0) / (1.0 + max(d1.extra.get("final_violation", 0.0), 0.0))
    kw: dict[str, Any] = dict(memory_bytes=memory_bytes, tol=tol, max_rounds=max_rounds or 200, add_k=k)
    v, rounds, status, _ = _generate(F, cs, c, act, ws, red, v1, True, **kw)
    lower = red.value(v, True)
    # h = envelope at the envelope optimum (every z_k = 0 or >= zt_k): it is the global optimum
    certified = red.value(v, False) <= lower * (1.0 + 1e-12)
    notes = [f"joint (w, u) optimum for n = {n} via the convex envelope (docs/theory.md)"]
    shrink_obj = red.value(v1, False)
    cands = [(red.value(v, False), 0, v, status), (shrink_obj, 2, v1, d1.status)]
    if not certified:  # local solves on the true (non-convex) objective
        z = v / red.t  # rounding of the envelope optimum: drop z < 1/2, keep the rest convex
        drop = z < 0.5
        lo = np.where(drop, 0.0, np.minimum(CONVEX_FROM[loss] * red.t, 1.0))
        rnd_b = (lo, np.where(drop, 0.0, 1.0))
        starts: list[tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]] = [
            (np.where(drop, 0.0, np.maximum(v, lo)), rnd_b)]  # rounded: a convex problem
        if loss == "squared":  # smooth h: also polish from the envelope and w = 1 optima
            starts += [(v, None), (v1, None)]
        for start, bnd in starts:
            vp, r2, st2, _ = _generate(F, cs, c, act, ws, red, start, False, bounds=bnd, **kw)
            rounds += r2
            cands.append((red.value(vp, False), 1, vp, st2))
    obj, which, v, status = min(cands, key=lambda t: t[:2])
    z = v / red.t
    region = bool(np.all(z >= CONVEX_FROM[loss] * (1 - 1e-9)))
    on_support = bool(np.all((z >= CONVEX_FROM[loss] * (1 - 1e-9)) | (z <= 1e-12)))
    dropped = int(np.sum(z < CONVEX_FROM[loss]))
    if dropped:
        notes.append(f"{dropped} of {z.size} noisy queries are shrunk to w_k ~ 0: their noise "
                     f"would exceed ~n ||F_k||_inf, so answering ~0 has the smaller error bound")
    if not certified:
        notes.append(f"not certified globally optimal (envelope optimum has some 0 < z_k < zt_k): "
                     f"lower bound {lower:.10g}, returned {obj:.10g}"
                     + (" (exact-then-shrinkage: no better local solution)" if which == 2 else ""))
        if not region:
            notes.append("some u_k lie where the reduced objective is not convex (u_k < "
                         f"{'sqrt(2/(3 a_k))' if loss == 'squared' else '1/(n ||F_k||_inf)'}): "
                         "the design is a local optimum, still feasible"
                         + ("; every u_k > 0 is in the convex region, so it is optimal among "
                            "designs dropping the same queries" if on_support else ""))
    u = np.full(m, np.inf)
    u[act] = v / ca
    w, _ = shrinkage(u, F, n, loss)
    return Draft(u=u, w=w, iterations=d1.iterations + rounds, n_used=len(ws), status=status,
                 notes=d1.notes + notes,
                 extra={"global_optimum": certified, "convex_region": region,
                       "convex_on_support": on_support,
                        "lower_bound": float(lower), "shrinkage_objective": float(shrink_obj),
                        "joint_objective": float(obj)})
