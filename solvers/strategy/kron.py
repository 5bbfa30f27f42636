"""Kronecker strategies ``A = A_x (x) A_y`` for workloads on large 2-D grids (e.g. all rectangles).

All rectangles of an nx x ny grid are the Kronecker product of the all-ranges workloads of its two
axes, so their Gram matrix is ``G = G_x (x) G_y`` (element ``a ny + b`` is the cell (a, b)).  A
strategy ``A = A_x (x) A_y`` (HDMM's product strategies, McKenna et al., PVLDB 2018) is then
designed, checked and evaluated from its two factors alone -- never an N x N matrix:

**Error.**  With ``X_k = A_k' A_k`` (full column rank), the plain least-squares estimate has
covariance ``2 X_x^{-1} (x) X_y^{-1}``.  The total n = 1'x is known exactly (neighbours move a
record), and the least-squares estimate under the constraint ``1'x = n`` is
``x_hat - S 1 (1'S 1)^{-1} (1'x_hat - n)`` with S that covariance; its expected total squared
error on the workload is

    ``2 [t_x t_y - (s_x s_y) / (u_x u_y)]``,  ``t_k = tr(G_k X_k^{-1})``,
    ``s_k = 1' X_k^{-1} G_k X_k^{-1} 1``,  ``u_k = 1' X_k^{-1} 1``

(:func:`kron_error`; it equals the centred objective of :mod:`solvers.strategy.objective`, which
is the same constrained least squares).

**Privacy.**  Let the budget of a pair of cells depend only on their coordinate differences,
``eps_ij = e(|x_a - x_a'|, |y_b - y_b'|)`` with e non-decreasing in each argument (any monotone
norm times a constant: Euclidean, Manhattan, Chebyshev).  For i = (a, b), j = (a', b'),

    ``A (e_i - e_j) = (A_x (e_a - e_a')) (x) (A_y e_b) + (A_x e_a') (x) (A_y (e_b - e_b'))``,

and ``||u (x) v||_1 = ||u||_1 ||v||_1``, so by the triangle inequality

    ``||A (e_i - e_j)||_1 <= D_x(a, a') n_y + n_x D_y(b, b')``,

with ``D_k`` the column l1 distances of ``A_k`` and ``n_k`` its largest column l1 norm; also,
by the triangle inequality on the two columns themselves,
``||A e_i - A e_j||_1 <= ||A e_i||_1 + ||A e_j||_1 <= 2 n_x n_y``.  Hence
``max_ij ||A (e_i - e_j)||_1 / eps_ij <= max min(D_x n_y + n_x D_y, 2 n_x n_y) / e(dx, dy)``
over the pairs of axis pairs (including "same coordinate", D = 0, d = 0; not both); for
``A = c I (x) I`` (every cell once) this is the exact ``2 c / eps_min``.  Only the Pareto frontier of
each axis matters (a pair with a larger difference and a smaller column distance than another
can never give the larger ratio, since e is monotone), so the bound costs
``O(n_x^2 p_x + n_y^2 p_y + |frontier_x| |frontier_y|)`` (:func:`kron_ratio`).  Scaling A so the
bound is 1 makes the release private; the bound is exact for a Manhattan budget on unit-spaced
axes (both sides then equal the largest edge ratio) and at most a factor sqrt(2) loose for a
Euclidean one.

**Lower bound (every strategy, not only products).**  The bound of :mod:`solvers.strategy.bound`
with weight alpha on every horizontal and beta on every vertical edge of the grid uses
``L = alpha L_x (x) I + beta I (x) L_y`` (L_k the path Laplacians with weights 1 / e^2), diagonal
in the product of the axes' eigenbases, and ``2 ||G^{1/2} L^{1/2}||_*^2 / Lambda``.  For any
orthogonal W, ``||M||_* >= tr(W'M)``; with ``W = W_x (x) W_y`` that trace is
``h_x' D h_y`` (``D_ab = sqrt(alpha mu_a + beta nu_b)``, ``h_k`` the diagonal of
``U_k' W_k' G_k^{1/2} U_k``), computed from the factors (:func:`kron_lower_bound`).  Any choice of
(alpha, beta, W_x, W_y) gives a valid bound; alternating polar factors pick good ones.

numpy / scipy only; never imports dprivacy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla

from solvers.errors import SolverError

#: Budget of a pair from its absolute coordinate differences (vectorised; non-decreasing in each).
PairBudget = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: Pairs of columns per block when the column distances of a factor are computed.
PAIR_BLOCK = 4096


@dataclass(frozen=True)
class KronGrid:
    """A full grid: ``xs`` (nx,) and ``ys`` (ny,) the increasing axis values, element
    ``a * ny + b`` the point (xs[a], ys[b]); ``budget(dx, dy)`` the budget of two points whose
    coordinates differ by |dx| and |dy| (non-decreasing in each)."""

    xs: np.ndarray
    ys: np.ndarray
    budget: PairBudget

    def __post_init__(self) -> None:
        for name in ("xs", "ys"):
            v = np.asarray(getattr(self, name), dtype=np.float64)
            if v.ndim != 1 or v.size < 2 or not np.all(np.isfinite(v)) or np.any(np.diff(v) <= 0):
                raise SolverError(f"{name} must be at least two increasing finite values")
            object.__setattr__(self, name, v)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.xs.size), int(self.ys.size)

    @property
    def N(self) -> int:  # noqa: N802
        return self.shape[0] * self.shape[1]

    def edge_budgets(self) -> tuple[np.ndarray, np.ndarray]:
        """Budgets of the horizontal (x) and vertical (y) neighbour steps of the grid."""
        dx, dy = np.diff(self.xs), np.diff(self.ys)
        ex = np.asarray(self.budget(dx, np.zeros_like(dx)), dtype=np.float64)
        ey = np.asarray(self.budget(np.zeros_like(dy), dy), dtype=np.float64)
        if np.any(~np.isfinite(ex)) or np.any(ex <= 0) or np.any(~np.isfinite(ey)) or \
                np.any(ey <= 0):
            raise SolverError("every neighbour step of the grid needs a positive finite budget")
        return ex, ey


# ------------------------------------------------------------------------------------ privacy
def column_distances(B: np.ndarray, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|coords[a] - coords[a']|, ||B (e_a - e_a')||_1) over every pair a < a' of columns."""
    B = np.asarray(B, dtype=np.float64)
    n = B.shape[1]
    I, J = np.triu_indices(n, 1)  # noqa: N806, E741
    D = np.empty(I.size)
    for s in range(0, I.size, PAIR_BLOCK):
        sl = slice(s, s + PAIR_BLOCK)
        D[sl] = np.abs(B[:, J[sl]] - B[:, I[sl]]).sum(axis=0)
    return np.abs(coords[J] - coords[I]), D


def pareto(delta: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # noqa: N803
    """The pairs (delta, D) not dominated by one with a smaller-or-equal delta and a
    larger-or-equal D, plus (0, 0) (the same coordinate), increasing in delta."""
    order = np.lexsort((-D, delta))
    d, v = delta[order], D[order]
    best = np.maximum.accumulate(v)
    keep = np.r_[True, v[1:] > best[:-1]]
    return np.r_[0.0, d[keep]], np.r_[0.0, v[keep]]


def kron_ratio(Bx: np.ndarray, By: np.ndarray, grid: KronGrid  # noqa: N803
               ) -> tuple[float, tuple[float, float]]:
    """An upper bound on ``max_ij ||(Bx (x) By)(e_i - e_j)||_1 / eps_ij`` over every pair of
    cells (module doc: exact for a Manhattan budget on unit-spaced axes), and the coordinate
    differences (dx, dy) where it is reached.  Dividing the strategy by it makes it private."""
    Bx, By = np.asarray(Bx, dtype=np.float64), np.asarray(By, dtype=np.float64)  # noqa: N806
    if Bx.shape[1] != grid.shape[0] or By.shape[1] != grid.shape[1]:
        raise SolverError(f"factors of {Bx.shape[1]} and {By.shape[1]} columns do not fit a "
                          f"{grid.shape[0]} x {grid.shape[1]} grid")
    nx, ny = float(np.abs(Bx).sum(axis=0).max()), float(np.abs(By).sum(axis=0).max())
    dx, Dx = pareto(*column_distances(Bx, grid.xs))  # noqa: N806
    dy, Dy = pareto(*column_distances(By, grid.ys))  # noqa: N806
    best, where = 0.0, (0.0, 0.0)
    step = max(1, 2**22 // dy.size)
    for s in range(0, dx.size, step):
        ddx, DDx = dx[s:s + step, None], Dx[s:s + step, None]  # noqa: N806
        num = np.minimum(DDx * ny + nx * Dy[None, :], 2.0 * nx * ny)
        eps = np.asarray(grid.budget(np.broadcast_to(ddx, num.shape),
                                     np.broadcast_to(dy[None, :], num.shape)), dtype=np.float64)
        both0 = (ddx == 0) & (dy[None, :] == 0)
        if np.any((eps <= 0) & ~both0 & (num > 0)):
            return float("inf"), (0.0, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(both0 | (num == 0), 0.0, num / eps)
        k = int(np.argmax(r))
        if r.flat[k] > best:
            a, b = np.unravel_index(k, r.shape)
            best, where = float(r.flat[k]), (float(dx[s + a]), float(dy[b]))
    return best, where


# -------------------------------------------------------------------------------------- error
def _factor_terms(B: np.ndarray, G: np.ndarray) -> tuple[float, float, float]:
    """(tr(G X^-1), 1'X^-1 G X^-1 1, 1'X^-1 1) for X = B'B; SolverError when X is singular."""
    X = B.T @ B
    try:
        fac = sla.cho_factor(X, check_finite=False)
    except (np.linalg.LinAlgError, ValueError) as exc:
        raise SolverError("a Kronecker factor does not have full column rank") from exc
    XiG = sla.cho_solve(fac, G, check_finite=False)
    v = sla.cho_solve(fac, np.ones(X.shape[0]), check_finite=False)
    return float(np.trace(XiG)), float(v @ G @ v), float(v.sum())


def kron_error(Bx: np.ndarray, By: np.ndarray, Gx: np.ndarray, Gy: np.ndarray) -> float:  # noqa: N803
    """Expected total squared error of ``Bx (x) By`` (rows released with Lap(1)) on the workload
    of Gram ``Gx (x) Gy``, the total known (module doc)."""
    tx, sx, ux = _factor_terms(np.asarray(Bx, np.float64), Gx)
    ty, sy, uy = _factor_terms(np.asarray(By, np.float64), Gy)
    return 2.0 * max(tx * ty - (sx * sy) / (ux * uy), 0.0)


def identity_error(Gx: np.ndarray, Gy: np.ndarray, eps_min: float) -> float:  # noqa: N803
    """Error of measuring every cell once, at the budget of the closest pair (each column of
    ``(eps_min / 2) I`` is at l1 distance eps_min from every other), the total known:
    ``2 tr(P G P) / (eps_min / 2)^2``."""
    tr = float(np.trace(Gx)) * float(np.trace(Gy))
    N = Gx.shape[0] * Gy.shape[0]  # noqa: N806
    tot = float(Gx.sum()) * float(Gy.sum())
    return 2.0 * (tr - tot / N) / (eps_min / 2.0) ** 2


# ---------------------------------------------------------------------------------- estimates
@dataclass
class KronEstimator:
    """Least-squares estimates and answer variances of the release ``y = (Bx (x) By) x + Z``
    (Z with variance ``v`` per row), the total n known: never an N x N matrix."""

    Bx: np.ndarray
    By: np.ndarray
    v: float = 2.0
    _parts: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for name in ("Bx", "By"):
            B = np.asarray(getattr(self, name), dtype=np.float64)
            X = B.T @ B
            try:
                fac = sla.cho_factor(X, check_finite=False)
            except (np.linalg.LinAlgError, ValueError) as exc:
                raise SolverError("a Kronecker factor does not have full column rank: some "
                                  "query cannot be answered") from exc
            Xi = sla.cho_solve(fac, np.eye(X.shape[0]), check_finite=False)
            Xi = 0.5 * (Xi + Xi.T)
            self._parts[name] = (B, Xi @ B.T, Xi, Xi.sum(axis=1))

    @property
    def shape(self) -> tuple[int, int]:
        return self._parts["Bx"][0].shape[1], self._parts["By"][0].shape[1]

    def measure(self, x: np.ndarray) -> np.ndarray:
        """``(Bx (x) By) x`` for x in element order (length nx * ny)."""
        Bx, By = self._parts["Bx"][0], self._parts["By"][0]  # noqa: N806
        nx, ny = self.shape
        return (Bx @ np.asarray(x, np.float64).reshape(nx, ny) @ By.T).ravel()

    def estimate(self, y: np.ndarray, n: float) -> np.ndarray:
        """The least-squares histogram from the release y (length px * py) with ``1'x = n``."""
        _, Rx, _, vx = self._parts["Bx"]
        _, Ry, _, vy = self._parts["By"]
        Y = np.asarray(y, np.float64).reshape(Rx.shape[1], Ry.shape[1])  # noqa: N806
        xh = Rx @ Y @ Ry.T
        s1 = np.outer(vx, vy)  # (X^-1 1) = vx (x) vy
        return (xh - s1 * ((xh.sum() - n) / s1.sum())).ravel()

    def axis_covariances(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(Xx^-1, Xy^-1, vx, vy): the covariance of the estimate is
        ``v [Xx^-1 (x) Xy^-1 - (vx (x) vy)(vx (x) vy)' / (1'vx 1'vy)]``."""
        return (self._parts["Bx"][2], self._parts["By"][2], self._parts["Bx"][3],
                self._parts["By"][3])

    def product_variances(self, Fx: np.ndarray | None, Fy: np.ndarray | None,  # noqa: N803
                          qx: tuple[np.ndarray, np.ndarray], qy: tuple[np.ndarray, np.ndarray]
                          ) -> np.ndarray:
        """Variances (shape (mx, my)) of the answers to the product queries ``f (x) g``, given
        per axis ``q = (diag(F X^-1 F'), F X^-1 1)`` (callers with implicit range workloads
        compute them without F; ``Fx``, ``Fy`` unused then)."""
        _, _, vx, _ = self.axis_covariances()
        vy = self._parts["By"][3]
        (dx, cx), (dy, cy) = qx, qy
        den = float(vx.sum()) * float(vy.sum())
        return self.v * np.maximum(np.outer(dx, dy) - np.outer(cx * cx, cy * cy) / den, 0.0)


# -------------------------------------------------------------------------------- lower bound
def _path_laplacian(w: np.ndarray) -> np.ndarray:
    n = w.size + 1
    L = np.zeros((n, n))
    i = np.arange(n - 1)
    L[i, i] += w
    L[i + 1, i + 1] += w
    L[i, i + 1] -= w
    L[i + 1, i] -= w
    return L


def _psd_sqrt(G: np.ndarray) -> np.ndarray:
    ev, U = sla.eigh(0.5 * (G + G.T))
    return (U * np.sqrt(np.clip(ev, 0.0, None))) @ U.T


def _polar(M: np.ndarray) -> np.ndarray:
    U, _, Vt = np.linalg.svd(M)
    return U @ Vt


def kron_lower_bound(Gx: np.ndarray, Gy: np.ndarray, grid: KronGrid,  # noqa: N803
                     ratios: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0), sweeps: int = 4
                     ) -> float:
    """A lower bound on the expected total squared error of EVERY private strategy (products or
    not) for the workload of Gram ``Gx (x) Gy`` on ``grid`` (module doc): the largest over the
    edge weight ratios beta / alpha in ``ratios`` of ``2 tr(W'G^{1/2} L^{1/2})^2 / Lambda`` with
    Kronecker orthogonal W chosen by alternating polar factors."""
    ex, ey = grid.edge_budgets()
    nx, ny = grid.shape
    mu, Ux = sla.eigh(_path_laplacian(1.0 / ex**2))
    nu, Uy = sla.eigh(_path_laplacian(1.0 / ey**2))
    mu, nu = np.clip(mu, 0.0, None), np.clip(nu, 0.0, None)
    Hx = Ux.T @ _psd_sqrt(Gx) @ Ux  # U' G^{1/2} U per axis
    Hy = Uy.T @ _psd_sqrt(Gy) @ Uy
    best = 0.0
    for rho in ratios:
        alpha, beta = 1.0, float(rho)
        lam = alpha * ny * (nx - 1) + beta * nx * (ny - 1)
        D = np.sqrt(alpha * mu[:, None] + beta * nu[None, :])  # noqa: N806
        Wx, Wy = np.eye(nx), np.eye(ny)  # in the eigenbases: W_k -> U_k' W_k U_k
        hx, hy = np.diag(Hx).copy(), np.diag(Hy).copy()
        val = float(hx @ D @ hy)
        for _ in range(sweeps):
            rx = D @ hy  # maximise tr(Wx' Hx diag(rx)) over orthogonal Wx (rx >= 0 not needed)
            Wx = _polar(Hx * rx[None, :])
            hx = np.einsum("ij,ij->j", Wx, Hx)  # diag(Wx' Hx)
            ry = D.T @ hx
            Wy = _polar(Hy * ry[None, :])
            hy = np.einsum("ij,ij->j", Wy, Hy)
            new = float(hx @ D @ hy)
            if new <= val * (1 + 1e-9):
                val = max(val, new)
                break
            val = new
        best = max(best, 2.0 * val * val / lam)
    return best


# ----------------------------------------------------------------------------------- the design
#: Smoothed-max temperatures and |z| smoothing (relative to the mean |entry|) per round.
TEMPERATURES = (20.0, 60.0, 200.0, 600.0, 2000.0)
SMOOTHING = (3e-2, 1e-2, 3e-3, 1e-3, 3e-4)


def _lse(v: np.ndarray, t: float) -> tuple[float, np.ndarray]:
    m = float(v.max())
    w = np.exp(t * (v - m))
    s = float(w.sum())
    return m + np.log(s) / t, w / s


def _seg_lse(v: np.ndarray, starts: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """Log-sum-exp (temperature t) of every segment of v (segments start at ``starts``) and the
    softmax weights within each segment."""
    m = np.maximum.reduceat(v, starts)
    seg = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, v.size]))
    w = np.exp(t * (v - m[seg]))
    s = np.add.reduceat(w, starts)
    return m + np.log(s) / t, w / s[seg]


class _Axis:
    """The lag-structured pairs of one evenly spaced axis and its Gram matrix."""

    def __init__(self, G: np.ndarray, n: int) -> None:  # noqa: N803
        self.G, self.n = G, n
        I, J = np.triu_indices(n, 1)  # noqa: N806, E741
        lag = J - I
        order = np.argsort(lag, kind="stable")
        self.I, self.J, lag = I[order], J[order], lag[order]
        self.starts = np.flatnonzero(np.r_[True, np.diff(lag) != 0])  # lag 1, 2, ..., n - 1

    def parts(self, B: np.ndarray, t: float, delta: float) -> dict[str, Any]:
        Z = B[:, self.J] - B[:, self.I]
        rz = np.sqrt(Z * Z + delta * delta)
        D = (rz - delta).sum(axis=0)
        Lk, wk = _seg_lse(D, self.starts, t)
        rb = np.sqrt(B * B + delta * delta)
        nc = (rb - delta).sum(axis=0)
        nmax, wn = _lse(nc, t)
        X = B.T @ B
        fac = sla.cho_factor(X, check_finite=False)
        XiG = sla.cho_solve(fac, self.G, check_finite=False)
        tr = float(np.trace(XiG))
        Y = sla.cho_solve(fac, XiG.T, check_finite=False)
        return {"L": np.r_[0.0, Lk], "n": nmax, "tr": tr, "Z": Z, "rz": rz, "wk": wk,
                "rb": rb, "wn": wn, "Y": Y}

    def grad(self, B: np.ndarray, p: dict[str, Any], gL: np.ndarray, gn: float  # noqa: N803
             ) -> np.ndarray:
        """Gradient in B of ``sum_k gL_k L_k + gn n`` (gL over lags 1..n-1)."""
        seg = np.repeat(np.arange(self.starts.size), np.diff(np.r_[self.starts, self.I.size]))
        coef = gL[seg] * p["wk"]
        GZ = (p["Z"] / p["rz"]) * coef[None, :]
        g = np.zeros_like(B)
        np.add.at(g.T, self.J, GZ.T)
        np.subtract.at(g.T, self.I, GZ.T)
        g += (B / p["rb"]) * (gn * p["wn"])[None, :]
        return g


def _objective(zx: np.ndarray, zy: np.ndarray, ax: _Axis, ay: _Axis, E: np.ndarray,  # noqa: N803
               t: float, delta: tuple[float, float]) -> tuple[float, np.ndarray, np.ndarray]:
    """2 log c + log t_x + log t_y (smoothed c, module doc) and its gradients."""
    px = ax.parts(zx, t, delta[0])
    py = ay.parts(zy, t, delta[1])
    Lx, Ly, nx, ny = px["L"], py["L"], px["n"], py["n"]  # noqa: N806
    # (lag x, lag y); (0, 0) is masked by E = inf; min(path, 2 nx ny) smoothed as -lse(-a, -b)
    a = (Lx[:, None] * ny + nx * Ly[None, :]) / E
    b = 2.0 * nx * ny / E
    m = np.minimum(a, b)
    ea, eb = np.exp(-t * (a - m)), np.exp(-t * (b - m))
    T = m - np.log(ea + eb) / t
    wa = ea / (ea + eb)
    c, w = _lse(T.ravel(), t)
    w = w.reshape(T.shape) / E
    w_a, w_b = w * wa, w * (1.0 - wa)
    gLx = (w_a * ny).sum(axis=1)[1:]  # noqa: N806
    gLy = (w_a * nx).sum(axis=0)[1:]  # noqa: N806
    gnx = float((w_a * Ly[None, :]).sum()) + 2.0 * ny * float(w_b.sum())
    gny = float((w_a * Lx[:, None]).sum()) + 2.0 * nx * float(w_b.sum())
    f = 2.0 * np.log(c) + np.log(px["tr"]) + np.log(py["tr"])
    gx = 2.0 / c * ax.grad(zx, px, gLx, gnx) - 2.0 * zx @ px["Y"] / px["tr"]
    gy = 2.0 / c * ay.grad(zy, py, gLy, gny) - 2.0 * zy @ py["Y"] / py["tr"]
    return float(f), gx, gy


@dataclass
class KronResult:
    """A private product strategy ``Bx (x) By`` (scaled: :func:`kron_ratio` <= 1)."""

    Bx: np.ndarray
    By: np.ndarray
    error: float
    max_ratio: float
    lower_bound: float | None
    identity_error: float
    report: dict[str, Any] = field(default_factory=dict)


def hierarchical_factor(n: int, decay: float = 0.75) -> np.ndarray:
    """Every cell plus the shifted dyadic blocks of every level (:mod:`shifted_blocks`'s
    intervals) on one axis, level l scaled ``decay**l``: a smooth, full-rank start."""
    from solvers.strategy.shifted_blocks import shifted_intervals

    rows = [np.eye(n)]
    lev = 1
    while 2**lev < 2 * n:
        ivs = shifted_intervals(n, lev)
        if len(ivs) <= 1:
            break
        R = np.zeros((len(ivs), n))
        for k, (lo, hi) in enumerate(ivs):
            R[k, lo:hi] = 1.0
        rows.append(decay**lev * R)
        lev += 1
    return np.vstack(rows)


def _scaled(Bx: np.ndarray, By: np.ndarray, grid: KronGrid  # noqa: N803
            ) -> tuple[np.ndarray, np.ndarray, float, tuple[float, float]]:
    """The factors scaled so that the bound :func:`kron_ratio` is (just below) 1, each by the
    same factor, and the bound after scaling."""
    c, _ = kron_ratio(Bx, By, grid)
    if not np.isfinite(c) or c <= 0:
        raise SolverError("a Kronecker strategy without a finite positive privacy ratio")
    s = 1.0 / np.sqrt(c * (1 + 1e-12))
    Bx, By = Bx * s, By * s  # noqa: N806
    c2, where = kron_ratio(Bx, By, grid)
    if not c2 <= 1.0:
        raise SolverError(f"Kronecker strategy verification failed: ratio {c2:.12g}")
    return Bx, By, c2, where


def design_kron(Gx: np.ndarray, Gy: np.ndarray, grid: KronGrid, *,  # noqa: N803
                time_limit: float = 300.0, maxiter: int = 200, lower_bound: bool = True,
                starts: tuple[str, ...] = ("identity", "hierarchical")) -> KronResult:
    """Optimise a product strategy ``Bx (x) By`` for the workload of Gram ``Gx (x) Gy`` on an
    evenly spaced ``grid`` (each axis; the exact privacy bound :func:`kron_ratio` takes any
    spacing): L-BFGS on ``2 log c + log t_x + log t_y`` with c the smoothed bound of
    :func:`kron_ratio` over lags, from each start, rounds of rising temperature.  The result is
    scaled by the exact bound and evaluated exactly (:func:`kron_error`)."""
    from scipy.optimize import minimize

    t0 = time.perf_counter()
    deadline = t0 + float(time_limit)
    nx, ny = grid.shape
    Gx, Gy = np.asarray(Gx, np.float64), np.asarray(Gy, np.float64)  # noqa: N806
    if Gx.shape != (nx, nx) or Gy.shape != (ny, ny):
        raise SolverError(f"Gram matrices {Gx.shape}, {Gy.shape} do not fit a {nx} x {ny} grid")
    for v in (grid.xs, grid.ys):
        d = np.diff(v)
        if not np.allclose(d, d[0], rtol=1e-9, atol=0.0):
            raise SolverError("the Kronecker design needs evenly spaced axes")
    hx, hy = float(np.diff(grid.xs)[0]), float(np.diff(grid.ys)[0])
    kk, ll = np.meshgrid(np.arange(nx) * hx, np.arange(ny) * hy, indexing="ij")
    E = np.asarray(grid.budget(kk, ll), dtype=np.float64)  # noqa: N806
    E[0, 0] = np.inf
    if np.any(E[np.isfinite(E)] <= 0):
        raise SolverError("two distinct cells with budget 0")
    ax, ay = _Axis(Gx, nx), _Axis(Gy, ny)
    cands: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if "identity" in starts:
        cands["identity"] = (np.eye(nx), np.eye(ny))
    if "hierarchical" in starts:
        cands["hierarchical"] = (hierarchical_factor(nx), hierarchical_factor(ny))
    scores: dict[str, float] = {}
    history: dict[str, list[dict[str, Any]]] = {}
    best: tuple[float, str, np.ndarray, np.ndarray] | None = None
    share = max(0.0, deadline - time.perf_counter()) / max(len(cands), 1)
    for k, (name, (Bx, By)) in enumerate(cands.items()):  # noqa: N806
        Bx, By, _, _ = _scaled(Bx, By, grid)  # noqa: N806
        err = kron_error(Bx, By, Gx, Gy)
        scores[name] = err
        hist = [{"round": 0, "error": err}]
        if best is None or err < best[0]:
            best = (err, name, Bx, By)
        stop_at = time.perf_counter() + share if k < len(cands) - 1 else deadline
        for r, (t, sm) in enumerate(zip(TEMPERATURES, SMOOTHING, strict=True)):
            if time.perf_counter() > stop_at:
                break
            shp = (Bx.shape, By.shape)
            cut = Bx.size
            delta = (sm * float(np.abs(Bx).mean()), sm * float(np.abs(By).mean()))

            def fun(z: np.ndarray, t: float = t, delta: tuple[float, float] = delta,
                    shp: tuple[tuple[int, ...], ...] = shp, cut: int = cut
                    ) -> tuple[float, np.ndarray]:
                try:
                    f, gx, gy = _objective(z[:cut].reshape(shp[0]), z[cut:].reshape(shp[1]),
                                           ax, ay, E, t, delta)
                except (np.linalg.LinAlgError, ValueError):
                    return 1e30, np.zeros_like(z)
                if not np.isfinite(f):
                    return 1e30, np.zeros_like(z)
                return f, np.concatenate([gx.ravel(), gy.ravel()])

            def stop(intermediate_result: object, stop_at: float = stop_at) -> None:
                if time.perf_counter() > stop_at:
                    raise StopIteration

            res = minimize(fun, np.concatenate([Bx.ravel(), By.ravel()]), jac=True,
                           method="L-BFGS-B", callback=stop,
                           options={"maxiter": maxiter, "maxcor": 20})
            try:
                Cx, Cy, _, _ = _scaled(res.x[:cut].reshape(shp[0]), res.x[cut:].reshape(shp[1]),
                                       grid)
                e2 = kron_error(Cx, Cy, Gx, Gy)
            except SolverError:
                break
            hist.append({"round": r + 1, "error": e2, "iters": int(res.nit),
                         "seconds": round(time.perf_counter() - t0, 2)})
            if e2 < best[0]:
                best = (e2, f"{name}+polish", Cx, Cy)
            if e2 > hist[-2]["error"] * (1 - 1e-4):
                break
            Bx, By = Cx, Cy  # noqa: N806
        history[name] = hist
    assert best is not None
    err, name, Bx, By = best  # noqa: N806
    ratio, where = kron_ratio(Bx, By, grid)
    ex, ey = grid.edge_budgets()
    eps_min = float(min(ex.min(), ey.min()))
    lb = kron_lower_bound(Gx, Gy, grid) if lower_bound else None
    report = {"start": name, "starts": scores, "history": history, "basis": "kronecker",
              "p": int(Bx.shape[0] * By.shape[0]), "max_ratio": ratio,
              "worst_pair": f"dx={where[0]:g}, dy={where[1]:g}",
              "seconds": time.perf_counter() - t0}
    return KronResult(Bx, By, err, ratio, lb, identity_error(Gx, Gy, eps_min), report)
