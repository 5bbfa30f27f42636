"""Optimal Gaussian strategies: the convex program in X = A'A, solved with a duality certificate.

A strategy A (p x N) released as ``y = A x + N(0, I_p)`` and answered by least squares has
expected total squared error ``f(X) = tr(G X^+)`` (G = F'F centred: the total n is known, so
only the component of x orthogonal to 1 is estimated; X = A'A).  Its privacy condition is
``(e_i - e_j)' X (e_i - e_j) <= b_ij`` for every pair (``b_ij = 2 rho d_ij`` for rho-zCDP per
unit of the metric) -- linear in X, so the design is a convex program (docs/theory.md,
"Optimal Gaussian strategies").

Dual.  For weights lam_ij >= 0 with the weighted Laplacian ``L = sum lam_ij d_ij d_ij'``,
``min_X tr(G X^+) + tr(L X) = 2 tr((G^1/2 L G^1/2)^1/2)``, so every lam gives the lower bound
``g(lam) = 2 tr((G^1/2 L G^1/2)^1/2) - sum lam_ij b_ij``.  Writing lam = s mu / b with
``sum mu = 1`` and maximising over the scale s gives ``g = T(mu)^2`` with
``T(mu) = tr(M^1/2)``, ``M = G^1/2 L_mu G^1/2``; T is concave in mu.  The minimiser of the
Lagrangian is ``X(mu) = G^1/2 M^-1/2 G^1/2``, whose pair ratios ``r_ij = d' X d / b_ij`` are
twice the gradient of T and average (under mu) to T.  Scaled to feasibility, ``X(mu) / max r``
is a strategy with error ``max(r) T``, so the certified relative gap is ``1 - T / max(r)``:
it closes exactly when every pair that carries weight is tight -- the optimality condition.

Algorithm: the multiplicative update ``mu <- mu r / T`` (it keeps sum mu = 1; the classical
fixed-point iteration of optimal experimental design), one symmetric eigendecomposition of
the r x r matrix ``M`` (r = rank of G) per step.  The best primal and the best dual seen are
kept; the strategy returned is ``A = diag(w^-1/4) V' K'`` (``M = V diag(w) V'``,
``G = K K'``), scaled so that its own pair ratios are at most 1.
numpy / scipy only; never imports dprivacy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from solvers.constraints import ConstraintSet
from solvers.errors import InfeasibleError, SolverError

#: Relative floor of the weights (a pair whose weight underflowed could never come back).
MU_FLOOR = 1e-30
#: Eigenvalues of M below this share of the largest are treated as zero.
EIG_RTOL = 1e-13
#: The returned strategy is scaled to pair ratios <= 1 / (1 + SAFETY) as computed in floats.
SAFETY = 1e-9


@dataclass
class GaussianSolution:
    """The strategy ``A`` (p x N, pair ratios ``||A d_ij||^2 / b_ij <= 1``) of a Gaussian design.

    ``error``: ``tr(G (A'A)^+)``, the expected total squared error with unit-variance noise per
    row (the primal value); ``bound``: the dual lower bound no feasible strategy beats;
    ``gap = (error - bound) / error``; ``weights``: the dual weights mu (N x N, symmetric,
    zero diagonal, summing to 2); ``history``: (iteration, seconds, primal, dual) rows."""

    A: np.ndarray
    error: float
    bound: float
    max_ratio: float
    iterations: int
    seconds: float
    weights: np.ndarray = field(repr=False)
    history: list[tuple[int, float, float, float]] = field(default_factory=list, repr=False)

    @property
    def gap(self) -> float:
        return (self.error - self.bound) / self.error if self.error > 0 else 0.0


def centre_gram(G: np.ndarray) -> np.ndarray:
    """P G P with P = I - 11'/N (symmetrised)."""
    G = np.asarray(G, dtype=np.float64)
    Gc = G - G.mean(axis=0, keepdims=True)
    Gc = Gc - Gc.mean(axis=1, keepdims=True)
    return 0.5 * (Gc + Gc.T)


def pair_budgets(cs: ConstraintSet, rho: float) -> np.ndarray:
    """The N x N matrix ``b_ij = 2 rho eps_ij`` over EVERY pair (inf: unconstrained).

    The Gaussian condition bounds a squared norm, which is not subadditive along a path, so an
    edge set (a graph metric, points on a line) is completed to all pairs by shortest paths --
    the metric the edges define."""
    rho = float(rho)
    if not (np.isfinite(rho) and rho > 0):
        raise SolverError(f"rho must be a positive finite number, got {rho}")
    N = cs.N  # noqa: N806
    if cs.kind == "edges":
        I, J, E = cs.edge_arrays()  # noqa: N806, E741
        W = sp.csr_array((E, (I, J)), shape=(N, N))
        if np.any(E <= 0):
            raise InfeasibleError("a constrained pair has budget 0: its elements must be merged "
                                  "before a strategy can be designed")
        D = csgraph.shortest_path(W, method="D", directed=False)
    else:
        D = np.vstack([cs.eps_rows(r0, min(N, r0 + 512)) for r0 in range(0, N, 512)])
        D = np.minimum(D, D.T)
    D = np.array(D, dtype=np.float64)
    np.fill_diagonal(D, np.inf)
    if np.any(np.isnan(D)) or np.any(D < 0):
        raise SolverError("the pair budgets must be non-negative")
    if np.any(D == 0):
        i, j = np.argwhere(D == 0)[0]
        raise InfeasibleError(f"pair ({i}, {j}) has budget 0: its elements must be merged "
                              "before a strategy can be designed", pair=(int(i), int(j)))
    return 2.0 * rho * D


def pair_ratios(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``(X_ii + X_jj - 2 X_ij) / B_ij`` for every pair (0 on the diagonal and where B = inf)."""
    d = np.diag(X)
    Q = d[:, None] + d[None, :] - 2.0 * X
    with np.errstate(divide="ignore", invalid="ignore"):
        R = Q / B
    R[~np.isfinite(B)] = 0.0
    np.fill_diagonal(R, 0.0)
    return R


def strategy_ratio(A: np.ndarray, B: np.ndarray) -> tuple[float, tuple[int, int]]:
    """max over pairs of ``||A (e_i - e_j)||^2 / b_ij`` (the exact l2 privacy condition is that
    this is at most 1) and the worst pair, from the Gram matrix of the columns of A."""
    A = np.asarray(A, dtype=np.float64)
    R = pair_ratios(A.T @ A, B)
    k = int(np.argmax(R))
    N = R.shape[0]  # noqa: N806
    return float(R.flat[k]), (min(k // N, k % N), max(k // N, k % N))


def _connected(B: np.ndarray) -> bool:
    fin = sp.csr_array(np.isfinite(B).astype(np.int8))
    return csgraph.connected_components(fin, directed=False)[0] == 1


class _Dual:
    """T(mu), the ratios r and the Lagrangian minimiser X(mu) for one workload (module doc)."""

    def __init__(self, Gc: np.ndarray, B: np.ndarray) -> None:
        w, U = np.linalg.eigh(Gc)
        keep = w > max(float(w.max(initial=0.0)), 1e-300) * 1e-12
        if not np.any(keep):
            raise SolverError("the workload's Gram matrix is zero on the complement of the "
                              "total: nothing to estimate")
        self.K = U[:, keep] * np.sqrt(w[keep])  # G = K K' (N x r)
        self.B = B
        self.invB = np.where(np.isfinite(B), 1.0 / B, 0.0)
        np.fill_diagonal(self.invB, 0.0)

    def evaluate(self, mu: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """(T, R, V, w): T(mu), the ratio matrix R of X(mu), and M = V diag(w) V'."""
        Wl = mu * self.invB
        L = -Wl
        L[np.diag_indices_from(L)] = Wl.sum(axis=1)
        KL = L @ self.K
        M = self.K.T @ KL
        M = 0.5 * (M + M.T)
        w, V = np.linalg.eigh(M)
        pos = w > max(float(w.max(initial=0.0)), 1e-300) * EIG_RTOL
        w, V = w[pos], V[:, pos]
        T = float(np.sqrt(w).sum())
        Z = self.K @ V
        X = (Z * w**-0.5) @ Z.T
        return T, pair_ratios(X, self.B), V, w

    def strategy(self, V: np.ndarray, w: np.ndarray) -> np.ndarray:
        """A with A'A = X(mu): ``diag(w^-1/4) V' K'``."""
        return (V * w**-0.25).T @ self.K.T


def solve_gaussian(G: np.ndarray, B: np.ndarray, *, tol: float = 1e-3,
                   time_limit: float = 600.0, max_iter: int = 100_000,
                   mu0: np.ndarray | None = None, centred: bool = False,
                   step: float = 1.0) -> GaussianSolution:
    """Minimise ``tr(G X^+)`` over X = A'A subject to ``d_ij' X d_ij <= B_ij`` for every pair.

    Parameters
    ----------
    G : (N, N) Gram matrix F'F of the workload (centred here unless ``centred``).
    B : (N, N) symmetric pair budgets (inf: no constraint; the diagonal is ignored).
    tol : stop when the certified relative gap ``(primal - dual) / primal`` is at most tol.
    time_limit, max_iter : stop after this many seconds / iterations (the gap is reported).
    mu0 : starting dual weights (N x N, non-negative on the constrained pairs), e.g. from a
        coarser or symmetric problem; default uniform.
    step : exponent of the multiplicative update ``mu <- mu (r / T)^step``.

    Returns
    -------
    GaussianSolution: the best feasible strategy found with its error, the best dual bound and
    the certified gap between them.
    """
    t0 = time.perf_counter()
    G = np.asarray(G, dtype=np.float64)
    B = np.array(B, dtype=np.float64)
    N = G.shape[0]  # noqa: N806
    if G.shape != (N, N) or B.shape != (N, N):
        raise SolverError(f"G and B must be (N, N) arrays, got {G.shape} and {B.shape}")
    if N < 2:
        raise SolverError("a strategy needs at least two elements (the total is known)")
    if not np.all(np.isfinite(G)):
        raise SolverError("the Gram matrix has NaN or infinite entries")
    np.fill_diagonal(B, np.inf)
    if np.any(np.isnan(B)) or np.any(B <= 0):
        raise InfeasibleError("every pair budget must be positive (inf for no constraint)")
    B = np.minimum(B, B.T)
    if not _connected(B):
        raise SolverError("the constrained pairs do not connect every element: a direction "
                          "between the parts costs no privacy and the program is unbounded")
    Gc = G if centred else centre_gram(G)
    dual = _Dual(Gc, B)
    mask = np.isfinite(B)
    if mu0 is None:
        mu = mask.astype(np.float64)
    else:
        mu = np.where(mask, np.maximum(np.asarray(mu0, dtype=np.float64), 0.0), 0.0)
        mu = 0.5 * (mu + mu.T)
        if not np.all(np.isfinite(mu)) or mu.sum() <= 0:
            raise SolverError("mu0 must be finite with positive weight on a constrained pair")
    mu *= 2.0 / mu.sum()
    best_primal, best_dual = np.inf, 0.0
    best: tuple[np.ndarray, np.ndarray, float, float] | None = None
    history: list[tuple[int, float, float, float]] = []
    it = 0
    while True:
        T, R, V, w = dual.evaluate(mu)
        rmax = float(R.max())
        primal, dval = rmax * T, T * T
        if primal < best_primal:
            best_primal, best = primal, (V, w, rmax, T)
        best_dual = max(best_dual, dval)
        it += 1
        elapsed = time.perf_counter() - t0
        history.append((it, elapsed, best_primal, best_dual))
        gap = (best_primal - best_dual) / best_primal
        if gap <= tol or it >= max_iter or elapsed > time_limit:
            break
        mu = mu * (R / T) ** step if step != 1.0 else mu * (R / T)
        mu = np.maximum(mu, MU_FLOOR * float(mu.max())) * mask
        mu *= 2.0 / mu.sum()
    assert best is not None
    V, w, rmax, T = best
    A = dual.strategy(V, w)  # A'A = X(mu), tr(G (A'A)^+) = T
    c, _ = strategy_ratio(A, B)
    c *= 1.0 + SAFETY
    A = A / np.sqrt(c)
    ratio, pair = strategy_ratio(A, B)
    if not ratio <= 1.0:
        raise SolverError(f"Gaussian strategy verification failed: pair {pair} at {ratio:.12g}")
    error = c * T  # tr(G (A'A / c)^+) = c T
    return GaussianSolution(A, error, best_dual, ratio, it, time.perf_counter() - t0, mu,
                            history)


def gaussian_report(sol: GaussianSolution, **extra: Any) -> dict[str, Any]:
    """The certificate as a plain dict (for a design's report)."""
    return {"noise": "gaussian", "error_unit_variance": sol.error, "dual_bound": sol.bound,
            "certified_gap": sol.gap, "iterations": sol.iterations,
            "solve_seconds": sol.seconds, **extra}
