"""Strategies inside the row space of a low-rank workload: A = M Q' (a few dense queries).

When the workload F (m x N, centred: the total is known) has small rank r, write F_c = R Q' with
Q (N x r) orthonormal.  A strategy A = M Q' (M: p x r, rank r) answers F exactly with error
``2 tr(R (M'M)^{-1} R')`` and its d_X constraint is ``||M w_q||_1 <= 1`` with
``w_q = Q'(e_i - e_j) / eps_ij``: only p r unknowns instead of p N, and every pair of the
universe fits in an r x P matrix.  (In the l2 relaxation ``||A d||_2 <= eps`` restricting A to the
row space of F loses nothing, so this family holds the l2 optimum.)

The optimiser (:func:`rowspace_strategy`) starts from

* the l2 relaxation: ``min tr(R Z^{-1} R')`` subject to ``w_q' Z w_q <= 1`` (a small SDP over
  the most demanding pairs) factored as ``M = U Z^{1/2}`` with random p x r isometries U
  (the l1 norm is not rotation invariant: the rotation decides how many binding pair differences
  land on few rows);
* dual bases of the pairs that bind in the l2 solution (each row orthogonal to all but one of
  r binding differences, so those differences are 1-sparse), with row scales from a convex
  program;
* the (w, beta) design, A = diag(u) F (so the result is never worse than it);

and polishes each with L-BFGS on ``log f(M) + 2 log c_t(M)``: c_t is a log-sum-exp (temperature
t) of the pairs' ratios with ``|z|`` smoothed to ``sqrt(z^2 + delta^2) - delta``; t grows and
delta shrinks in rounds (continuation: a kink at an exact zero stalls quasi-Newton steps), and
every round's exact scale-free error is compared, the best iterate kept.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from solvers.errors import SolverError

#: (temperature, smoothing relative to max |M w|) of the continuation rounds
SCHEDULE = ((30.0, 1e-2), (100.0, 1e-3), (300.0, 1e-4), (1000.0, 1e-5), (3000.0, 1e-6),
            (10000.0, 1e-7))


@dataclass
class RowSpace:
    """The reduced problem: ``F_c = R Q'``; ``W[:, q] = Q'(e_I - e_J) / eps`` for every pair."""

    Q: np.ndarray
    R: np.ndarray
    W: np.ndarray
    RtR: np.ndarray

    @classmethod
    def build(cls, F: np.ndarray, I: np.ndarray, J: np.ndarray, eps: np.ndarray,  # noqa: N803, E741
              rtol: float = 1e-10, extra: np.ndarray | None = None) -> RowSpace:
        """From the dense workload F (m x N) and the constrained pairs (I, J, eps).  ``extra``
        (k x N): further directions the strategy may measure (Q then spans the rows of F_c and
        of ``extra``, and R = F_c Q)."""
        Fc = np.asarray(F, dtype=np.float64)
        Fc = Fc - Fc.mean(axis=1, keepdims=True)
        S = Fc if extra is None else np.vstack([Fc, extra - extra.mean(axis=1, keepdims=True)])
        U, s, Vt = np.linalg.svd(S, full_matrices=False)
        r = int(np.sum(s > rtol * max(float(s[0]) if s.size else 0.0, 1e-300)))
        if r == 0:
            raise SolverError("the workload is constant on the universe: nothing to estimate")
        Q = Vt[:r].T  # (N, r)
        R = U[:, :r] * s[:r] if extra is None else Fc @ Q  # F_c = R Q'
        W = (Q[I] - Q[J]).T / np.asarray(eps, dtype=np.float64)[None, :]
        return cls(Q, R, W, R.T @ R)

    @property
    def r(self) -> int:
        return int(self.Q.shape[1])

    def f_grad(self, M: np.ndarray) -> tuple[float, np.ndarray]:
        """f(M) = tr(R (M'M)^{-1} R') and df/dM = -2 M Y, Y = X^{-1} R'R X^{-1}."""
        X = M.T @ M
        try:
            Xi = np.linalg.inv(X)
        except np.linalg.LinAlgError:
            return float("inf"), np.zeros_like(M)
        XiG = Xi @ self.RtR
        f = float(np.trace(XiG))
        if not np.isfinite(f) or f <= 0:
            return float("inf"), np.zeros_like(M)
        return f, -2.0 * M @ (XiG @ Xi)

    def c(self, M: np.ndarray) -> float:
        """Exact max over every pair of ||M w_q||_1 (the constraint value of A = M Q')."""
        out = 0.0
        for s in range(0, self.W.shape[1], 65536):
            out = max(out, float(np.abs(M @ self.W[:, s:s + 65536]).sum(axis=0).max()))
        return out

    def score(self, M: np.ndarray) -> float:
        """Scale-free expected total squared error 2 c(M)^2 f(M) of A = M Q'."""
        c = self.c(M)
        f = self.f_grad(M)[0]
        return 2.0 * c * c * f if np.isfinite(f) and c > 0 else float("inf")

    def strategy(self, M: np.ndarray) -> np.ndarray:
        """A = M Q' (p x N), unscaled."""
        return M @ self.Q.T


def smooth_max(M: np.ndarray, W: np.ndarray, t: float, delta: float) -> tuple[float, np.ndarray]:
    """Log-sum-exp (temperature t) over q of sum_r sqrt((M w_q)_r^2 + delta^2) - delta, and its
    gradient in M; always >= the largest smoothed ratio."""
    Z = M @ W
    root = np.sqrt(Z * Z + delta * delta)
    ratio = (root - delta).sum(axis=0)
    top = float(ratio.max())
    w = np.exp(t * (ratio - top))
    s = float(w.sum())
    return top + float(np.log(s)) / t, ((Z / root) * (w / s)[None, :]) @ W.T


def polish_rows(rs: RowSpace, M: np.ndarray, *, maxiter: int = 300,
                deadline: float = float("inf"), active_top: int = 4000) -> tuple[np.ndarray, float]:
    """Continuation polish of M (module doc); returns (best M with c(M) = 1, its exact error).

    The smoothed maximum runs over the ``active_top`` pairs with the largest ratios at the start
    of each round (all pairs when there are fewer); the exact error uses every pair."""
    from scipy.optimize import minimize

    M = np.asarray(M, dtype=np.float64)
    M = M / rs.c(M)
    best_M, best = M.copy(), rs.score(M)
    for t, rel in SCHEDULE:
        if time.perf_counter() > deadline:
            break
        ratio = np.abs(M @ rs.W).sum(axis=0)
        W = rs.W if ratio.size <= active_top else \
            rs.W[:, np.argpartition(-ratio, active_top)[:active_top]]
        delta = rel * float(np.abs(M).max())
        shape = M.shape

        def fun(z: np.ndarray, t: float = t, delta: float = delta, W: np.ndarray = W,
                shape: tuple[int, ...] = shape) -> tuple[float, np.ndarray]:
            X = z.reshape(shape)
            f, gf = rs.f_grad(X)
            if not np.isfinite(f):
                return 1e30, np.zeros_like(z)
            cv, gc = smooth_max(X, W, t, delta)
            return float(np.log(f) + 2.0 * np.log(cv)), (gf / f + 2.0 * gc / cv).ravel()

        def stop(intermediate_result: object) -> None:
            if time.perf_counter() > deadline:
                raise StopIteration

        res = minimize(fun, M.ravel(), jac=True, method="L-BFGS-B", callback=stop,
                       options={"maxiter": maxiter, "maxcor": 20})
        Mn = res.x.reshape(shape)
        c = rs.c(Mn)
        if not np.isfinite(c) or c <= 0:
            break
        M = Mn / c
        s = rs.score(M)
        if s < best:
            best, best_M = s, M.copy()
        elif not np.isfinite(s):
            M = best_M.copy()
    return best_M, best


def l2_relaxation(rs: RowSpace, top: int = 3000) -> tuple[np.ndarray, float] | None:
    """(Z, bound): Z minimises tr(R Z^{-1} R') subject to w_q' Z w_q <= 1 over the ``top`` pairs
    with the largest |w_q| (an SDP; cvxpy + Clarabel), scaled to satisfy every pair; ``bound`` is
    the lower bound ``2 (tr (L^{1/2} R'R L^{1/2})^{1/2})^2 / sum(mu)`` with the SDP's dual
    multipliers mu as pair weights, ``L = sum_q mu_q w_q w_q'`` (valid for every strategy,
    :mod:`solvers.strategy.bound`; any weights give a bound, the dual ones the SDP's optimum).
    None if the solver fails."""
    import cvxpy as cp

    from solvers.strategy.bound import svd_bound

    norms = np.sum(rs.W * rs.W, axis=0)
    sel = np.argsort(-norms)[:top]
    D = rs.W[:, sel]
    s = float(np.abs(D).max())
    D = D / s
    r = rs.r
    Z = cp.Variable((r, r), PSD=True)
    T = cp.Variable((r, r), symmetric=True)
    Rn = rs.R / np.sqrt(max(float(np.trace(rs.RtR)), 1e-300))
    pair_cons = cp.sum(cp.multiply(D, Z @ D), axis=0) <= 1
    try:
        cp.Problem(cp.Minimize(cp.trace(T)), [cp.bmat([[T, Rn], [Rn.T, Z]]) >> 0, pair_cons]
                   ).solve(solver="CLARABEL")
    except (cp.error.SolverError, ValueError, ArithmeticError):
        return None
    if Z.value is None or pair_cons.dual_value is None:
        return None
    Zv = 0.5 * (Z.value + Z.value.T) / (s * s)
    q = np.sum(rs.W * (Zv @ rs.W), axis=0)
    mu = np.clip(np.asarray(pair_cons.dual_value, dtype=np.float64).ravel(), 0.0, None)
    bound = 0.0
    if mu.sum() > 0:
        L = (rs.W[:, sel] * mu[None, :]) @ rs.W[:, sel].T
        bound = svd_bound(rs.RtR, 0.5 * (L + L.T), float(mu.sum()))
    return Zv / max(float(q.max()), 1e-300), bound


def _sqrtm(Z: np.ndarray) -> np.ndarray:
    ev, V = np.linalg.eigh(Z)
    return (V * np.sqrt(np.clip(ev, 0.0, None))) @ V.T


def dual_basis_start(rs: RowSpace, B: np.ndarray) -> np.ndarray | None:
    """Rows orthogonal to all but one of the r pair differences W[:, B] (so those differences
    are 1-sparse), scaled by the convex program min sum_k a_k / d_k^2 s.t. every pair's l1
    ratio <= 1 (a_k = |R w_{B_k}|^2: the error of row k)."""
    import cvxpy as cp

    WB = rs.W[:, B]
    try:
        V = np.linalg.inv(WB)
    except np.linalg.LinAlgError:
        return None
    a = np.sum((rs.R @ WB) ** 2, axis=0)
    Cm = np.abs(V @ rs.W)  # (r, P)
    keep = np.argsort(-Cm.max(axis=0))[:5000]
    scale = float(a.max())
    d = cp.Variable(len(B), pos=True)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.multiply(a / scale, cp.power(d, -2)))),
                      [Cm[:, keep].T @ d <= 1])
    try:
        with warnings.catch_warnings():  # an inaccurate solution is still checked below
            warnings.simplefilter("ignore", UserWarning)
            prob.solve(solver="CLARABEL")
    except (cp.error.SolverError, ValueError, ArithmeticError):
        return None
    if d.value is None or not np.all(np.isfinite(d.value)) or np.any(d.value <= 0):
        return None
    return np.asarray(d.value)[:, None] * V


def search(rs: RowSpace, *, u: np.ndarray | None = None, rotations: int = 4,
           rows: tuple[int, ...] = (10, 12), dual_starts: int = 3, seed: int = 0,
           deadline: float = float("inf"), maxiter: int = 300
           ) -> tuple[np.ndarray | None, float, list[dict], float | None]:
    """Polish every start of the module doc on ``rs``; returns (best M or None, its error, the
    starts tried, the l2 lower bound or None).  ``rows``: p = k r / 10 rows per rotation start."""
    r = rs.r
    rng = np.random.default_rng(seed)
    tried: list[dict] = []
    best_M: np.ndarray | None = None
    best = float("inf")

    def run(name: str, M0: np.ndarray) -> None:
        nonlocal best_M, best
        if time.perf_counter() > deadline:
            return
        s0 = rs.score(M0)
        if not np.isfinite(s0):
            return
        M, s = polish_rows(rs, M0, maxiter=maxiter, deadline=deadline)
        tried.append({"start": name, "p": int(M.shape[0]), "start_error": s0, "error": s})
        if s < best:
            best, best_M = s, M

    if u is not None:
        u = np.asarray(u, dtype=np.float64)
        keep = (u > 0) & np.isfinite(u)
        if keep.any():
            run("design", u[keep, None] * rs.R[keep])
    relax = l2_relaxation(rs)
    bound = None
    if relax is not None:
        Z, bound = relax
        Zh = _sqrtm(Z)
        for k in range(rotations):
            p = max(r, int(round(rows[k % len(rows)] * r / 10)))
            U, _ = np.linalg.qr(rng.standard_normal((p, r)))
            run(f"l2-rotation-{k}", U @ Zh)
        q = np.sum(rs.W * (Z @ rs.W), axis=0)
        order = np.argsort(-q)
        for k in range(dual_starts):
            B = np.delete(order[:r + 1], k % (r + 1)) if k else order[:r]
            M0 = dual_basis_start(rs, B)
            if M0 is not None:
                run(f"dual-basis-{k}", M0)
    return best_M, best, tried, bound
