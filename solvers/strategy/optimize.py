"""Gradient polishing of a strategy: minimise the scale-free error c(C)^2 f(C) (HDMM-style).

The constraint value c is a maximum over pairs, so it is replaced by a log-sum-exp of the pairs'
ratios with |z| smoothed (a kink at 0 stalls quasi-Newton steps at exact zeros).  Each round runs
L-BFGS on ``log f(C) + 2 log c_smooth(C)`` over a working set of pairs, then computes the EXACT c
over all constrained pairs, adds the most loaded pairs to the working set, and records the exact
scale-free error; the best iterate is kept (the problem is not convex).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import numpy as np

from solvers.strategy.constraint import PairSet
from solvers.strategy.objective import Objective

#: check(C) -> (exact c over all pairs, new working pairs (I, J, eps) or None)
Check = Callable[[np.ndarray], tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray] | None]]


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Limit BLAS to ``n`` threads (None: leave it).  The polishing loop runs many small dense
    products and factorisations; on a loaded shared machine one thread per process is up to
    ten times faster than threads that contend for the cores."""
    if n is None:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - a declared dependency
        yield
        return
    with threadpool_limits(limits=int(n), user_api="blas"):
        yield


def polish(C0: np.ndarray, obj: Objective, active: PairSet, check: Check, *, rounds: int = 6,
           maxiter: int = 150, deadline: float = float("inf"),
           temperatures: tuple[float, ...] = (30.0, 100.0, 300.0, 1000.0, 3000.0),
           smoothing: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-5)
           ) -> tuple[np.ndarray, float, list[dict]]:
    """Polish C0; returns (best C scaled to c = 1, its exact scale-free error f, history with the
    error 2 f after each round).  No round starts, and L-BFGS stops, after ``deadline``."""
    from scipy.optimize import minimize

    t_start = time.perf_counter()
    c0, new = check(C0)
    C = C0 / c0
    if new is not None:
        active = active.union(*new)
    best_f, best_C = obj.value(C), C.copy()
    stalled = 0
    history = [{"round": 0, "error": 2 * best_f, "pairs": active.size}]
    for r in range(rounds):
        if time.perf_counter() > deadline:
            break
        t = temperatures[min(r, len(temperatures) - 1)]
        delta = smoothing[min(r, len(smoothing) - 1)] * float(np.abs(C).max())
        shape = C.shape

        def fun(z: np.ndarray, t: float = t, delta: float = delta, shape: tuple[int, ...] = shape,
                active: PairSet = active) -> tuple[float, np.ndarray]:
            X = z.reshape(shape)
            f, gf = obj.value_grad(X)
            if not np.isfinite(f) or f <= 0:
                return 1e30, np.zeros_like(z)
            cs, gc = active.smooth(X, t, delta)
            return float(np.log(f) + 2 * np.log(cs)), (gf / f + 2 * gc / cs).ravel()

        def stop(intermediate_result: object) -> None:
            if time.perf_counter() > deadline:
                raise StopIteration  # minimize returns the last iterate

        res = minimize(fun, C.ravel(), jac=True, method="L-BFGS-B", callback=stop,
                       options={"maxiter": maxiter, "maxcor": 20})
        Cn = res.x.reshape(shape)
        c, new = check(Cn)
        if not np.isfinite(c) or c <= 0:
            break
        Cn = Cn / c
        f = obj.value(Cn)
        if new is not None:
            active = active.union(*new)
        history.append({"round": r + 1, "error": 2 * f, "pairs": active.size, "iters": int(res.nit),
                        "seconds": round(time.perf_counter() - t_start, 2)})
        if f < best_f:
            stalled = 0 if f < best_f * (1 - 1e-4) else stalled + 1
            best_f, best_C = f, Cn.copy()
        else:
            stalled += 1
        if stalled >= 2:
            break
        C = Cn if np.isfinite(f) else best_C
    return best_C, best_f, history
