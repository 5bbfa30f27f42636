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
``A = c I (x) I`` (every cell once) this is the exact ``2 c / eps_min``.  A strategy that also
measures every cell, ``[c I_N ; A_x (x) A_y]``, adds exactly ``||c (e_i - e_j)||_1 = 2 c`` to
every pair (the l1 norm of stacked rows is the sum of the blocks' norms), and its normal matrix
``c^2 I + X_x (x) X_y`` is diagonal in the product of the factors' eigenbases, so its error and
estimate stay in closed form (:class:`Spectrum`).  Only the Pareto frontier of
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


def kron_ratio(Bx: np.ndarray, By: np.ndarray, grid: KronGrid, cells: float = 0.0  # noqa: N803
               ) -> tuple[float, tuple[float, float]]:
    """An upper bound on ``max_ij ||A (e_i - e_j)||_1 / eps_ij`` over every pair of cells for
    ``A = [cells I ; Bx (x) By]`` (module doc: exact for a Manhattan budget on unit-spaced axes),
    and the coordinate differences (dx, dy) where it is reached.  Dividing the strategy by it
    makes it private."""
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
        num = np.minimum(DDx * ny + nx * Dy[None, :], 2.0 * nx * ny) + 2.0 * abs(float(cells))
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
@dataclass
class Spectrum:
    """The normal matrix of ``A = [c I_N ; Bx (x) By]`` in the axes' eigenbases:
    ``A'A = (Ux (x) Uy) diag(c^2 + lx_a ly_b) (Ux (x) Uy)'`` (``Bx'Bx = Ux diag(lx) Ux'``)."""

    Ux: np.ndarray
    Uy: np.ndarray
    delta: np.ndarray  # (nx, ny): c^2 + lx_a ly_b

    @classmethod
    def of(cls, Bx: np.ndarray, By: np.ndarray, cells: float = 0.0) -> Spectrum:  # noqa: N803
        from solvers.strategy.optimize import blas_threads

        with blas_threads(1):  # small eigenproblems: threads only wait on a loaded machine
            lx, Ux = sla.eigh(np.asarray(Bx, np.float64).T @ np.asarray(Bx, np.float64))  # noqa: N806
            ly, Uy = sla.eigh(np.asarray(By, np.float64).T @ np.asarray(By, np.float64))  # noqa: N806
        lx, ly = np.clip(lx, 0.0, None), np.clip(ly, 0.0, None)
        delta = float(cells) ** 2 + np.outer(lx, ly)
        if not delta.min() > 1e-12 * delta.max():
            raise SolverError("the strategy does not have full column rank: some query cannot be "
                              "answered (a Kronecker factor is rank deficient and no cells are "
                              "measured)")
        return cls(Ux, Uy, delta)

    def inv_apply(self, R: np.ndarray) -> np.ndarray:  # noqa: N803
        """``(A'A)^{-1} vec(R)`` as an (nx, ny) matrix."""
        return self.Ux @ ((self.Ux.T @ R @ self.Uy) / self.delta) @ self.Uy.T

    def ones_terms(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(W, V, u): ``W = Delta^{-1} o (ox oy')`` (ox = Ux'1), ``V = (A'A)^{-1} 1`` as an
        (nx, ny) matrix and ``u = 1'(A'A)^{-1} 1``."""
        ox, oy = self.Ux.sum(axis=0), self.Uy.sum(axis=0)
        W = np.outer(ox, oy) / self.delta  # noqa: N806
        return W, self.Ux @ W @ self.Uy.T, float(np.sum(W * np.outer(ox, oy)))


def kron_error(Bx: np.ndarray, By: np.ndarray, Gx: np.ndarray, Gy: np.ndarray,  # noqa: N803
               cells: float = 0.0) -> float:
    """Expected total squared error of ``[cells I ; Bx (x) By]`` (rows released with Lap(1)) on
    the workload of Gram ``Gx (x) Gy``, the total known (module doc)."""
    sp_ = Spectrum.of(Bx, By, cells)
    hx = np.sum(sp_.Ux * (Gx @ sp_.Ux), axis=0)  # diag(Ux' Gx Ux), by BLAS
    hy = np.sum(sp_.Uy * (Gy @ sp_.Uy), axis=0)
    t = float(np.sum(np.outer(hx, hy) / sp_.delta))
    _, V, u = sp_.ones_terms()  # noqa: N806
    s = float(np.sum((Gx @ V) * (V @ Gy)))  # vec(V)' (Gx (x) Gy) vec(V) = tr(V' Gx V Gy)
    return 2.0 * max(t - s / u, 0.0)


def identity_error(Gx: np.ndarray, Gy: np.ndarray, eps_min: float) -> float:  # noqa: N803
    """Error of measuring every cell once, at the budget of the closest pair (each column of
    ``(eps_min / 2) I`` is at l1 distance eps_min from every other), the total known:
    ``2 tr(P G P) / (eps_min / 2)^2``."""
    tr = float(np.trace(Gx)) * float(np.trace(Gy))
    N = Gx.shape[0] * Gy.shape[0]  # noqa: N806
    tot = float(Gx.sum()) * float(Gy.sum())
    return 2.0 * (tr - tot / N) / (eps_min / 2.0) ** 2


# ---------------------------------------------------------------------------------- estimates
def _range_rows(M: np.ndarray) -> np.ndarray:  # noqa: N803
    """``F M`` for the all-ranges matrix F of the rows' axis (ranges [a, b] by a, then b)."""
    n = M.shape[0]
    P = np.vstack([np.zeros((1, M.shape[1])), np.cumsum(M, axis=0)])  # noqa: N806
    a, b = np.triu_indices(n)
    return P[b + 1] - P[a]


@dataclass
class KronEstimator:
    """Least-squares estimates and answer variances of the release
    ``y = [cells x ; (Bx (x) By) x] + Z`` (Z with variance ``v`` per row), the total n known:
    never an N x N matrix."""

    Bx: np.ndarray
    By: np.ndarray
    cells: float = 0.0
    v: float = 2.0

    def __post_init__(self) -> None:
        self.Bx = np.asarray(self.Bx, dtype=np.float64)
        self.By = np.asarray(self.By, dtype=np.float64)
        self.cells = float(self.cells)
        self.spectrum = Spectrum.of(self.Bx, self.By, self.cells)
        _, self._V, self._u = self.spectrum.ones_terms()

    @property
    def shape(self) -> tuple[int, int]:
        return self.Bx.shape[1], self.By.shape[1]

    def measure(self, x: np.ndarray) -> np.ndarray:
        """``A x`` for x in element order (length nx * ny): the cells (when measured) first."""
        X = np.asarray(x, np.float64).reshape(self.shape)  # noqa: N806
        kron = (self.Bx @ X @ self.By.T).ravel()
        return np.concatenate([self.cells * X.ravel(), kron]) if self.cells else kron

    def estimate(self, y: np.ndarray, n: float) -> np.ndarray:
        """The least-squares histogram from the release y with ``1'x = n``."""
        nx, ny = self.shape
        y = np.asarray(y, np.float64).ravel()
        k = nx * ny if self.cells else 0
        Y = y[k:].reshape(self.Bx.shape[0], self.By.shape[0])  # noqa: N806
        R = self.Bx.T @ Y @ self.By  # noqa: N806
        if self.cells:
            R = R + self.cells * y[:k].reshape(nx, ny)  # noqa: N806
        xh = self.spectrum.inv_apply(R)
        return (xh - self._V * ((xh.sum() - n) / self._u)).ravel()

    def range_variances(self, rows: slice | None = None) -> np.ndarray:
        """Variances of the answers to all rectangles (x range, y range) as an (mx, my) table
        (``rows``: a slice of the x ranges only)."""
        if not hasattr(self, "_q"):
            sp_ = self.spectrum
            Qx, Qy = _range_rows(sp_.Ux), _range_rows(sp_.Uy)  # noqa: N806
            W, _, u = sp_.ones_terms()  # noqa: N806
            self._q = (Qx, Qy, (Qy * Qy).T, 1.0 / sp_.delta, W @ Qy.T, u)
        Qx, _, Qy2T, Dinv, WQyT, u = self._q  # noqa: N806
        if rows is not None:
            Qx = Qx[rows]  # noqa: N806
        t1 = (Qx * Qx) @ Dinv @ Qy2T
        t2 = Qx @ WQyT
        return self.v * np.maximum(t1 - t2 * t2 / u, 0.0)

    @property
    def n_ranges(self) -> tuple[int, int]:
        nx, ny = self.shape
        return nx * (nx + 1) // 2, ny * (ny + 1) // 2


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

    def parts(self, B: np.ndarray, t: float, delta: float, trace: bool = True
              ) -> dict[str, Any]:
        Z = B[:, self.J] - B[:, self.I]
        rz = np.sqrt(Z * Z + delta * delta)
        D = (rz - delta).sum(axis=0)
        Lk, wk = _seg_lse(D, self.starts, t)
        rb = np.sqrt(B * B + delta * delta)
        nc = (rb - delta).sum(axis=0)
        nmax, wn = _lse(nc, t)
        if not trace:
            return {"L": np.r_[0.0, Lk], "n": nmax, "Z": Z, "rz": rz, "wk": wk, "rb": rb,
                    "wn": wn}
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
    c, gLx, gLy, gnx, gny, _ = _smoothed_ratio(px, py, 0.0, E, t)  # noqa: N806
    f = 2.0 * np.log(c) + np.log(px["tr"]) + np.log(py["tr"])
    gx = 2.0 / c * ax.grad(zx, px, gLx, gnx) - 2.0 * zx @ px["Y"] / px["tr"]
    gy = 2.0 / c * ay.grad(zy, py, gLy, gny) - 2.0 * zy @ py["Y"] / py["tr"]
    return float(f), gx, gy


def _smoothed_ratio(px: dict[str, Any], py: dict[str, Any], cells: float, E: np.ndarray,  # noqa: N803
                    t: float) -> tuple[float, np.ndarray, np.ndarray, float, float, float]:
    """The smoothed bound of :func:`kron_ratio` over lags and its derivatives in the lag
    profiles, the largest column norms and the cells weight: (c, gLx, gLy, gnx, gny, gcells)."""
    Lx, Ly, nx, ny = px["L"], py["L"], px["n"], py["n"]  # noqa: N806
    a = (Lx[:, None] * ny + nx * Ly[None, :]) / E
    b = 2.0 * nx * ny / E
    m = np.minimum(a, b)
    ea, eb = np.exp(-t * (a - m)), np.exp(-t * (b - m))
    T = m - np.log(ea + eb) / t + 2.0 * cells / E  # noqa: N806
    wa = ea / (ea + eb)
    c, w = _lse(T.ravel(), t)
    w = w.reshape(T.shape) / E
    w_a, w_b = w * wa, w * (1.0 - wa)
    gLx = (w_a * ny).sum(axis=1)[1:]  # noqa: N806
    gLy = (w_a * nx).sum(axis=0)[1:]  # noqa: N806
    gnx = float((w_a * Ly[None, :]).sum()) + 2.0 * ny * float(w_b.sum())
    gny = float((w_a * Lx[:, None]).sum()) + 2.0 * nx * float(w_b.sum())
    return c, gLx, gLy, gnx, gny, 2.0 * float(w.sum())


def _union_objective(zx: np.ndarray, zy: np.ndarray, gamma: float, ax: _Axis, ay: _Axis,
                     E: np.ndarray, t: float, delta: tuple[float, float]  # noqa: N803
                     ) -> tuple[float, np.ndarray, np.ndarray, float]:
    """``2 log c + log tr(G X^{-1})`` for ``[e^gamma I ; Bx (x) By]`` (smoothed c; X in the
    factors' eigenbases, :class:`Spectrum`) and its gradients in Bx, By and gamma."""
    cells = float(np.exp(gamma))
    px = ax.parts(zx, t, delta[0], trace=False)
    py = ay.parts(zy, t, delta[1], trace=False)
    c, gLx, gLy, gnx, gny, gcl = _smoothed_ratio(px, py, cells, E, t)  # noqa: N806
    lx, Ux = sla.eigh(zx.T @ zx)  # noqa: N806
    ly, Uy = sla.eigh(zy.T @ zy)  # noqa: N806
    lx, ly = np.clip(lx, 0.0, None), np.clip(ly, 0.0, None)
    D = cells * cells + np.outer(lx, ly)  # noqa: N806
    Hx, Hy = Ux.T @ ax.G @ Ux, Uy.T @ ay.G @ Uy  # noqa: N806
    hx, hy = np.diag(Hx), np.diag(Hy)
    R = 1.0 / D  # noqa: N806
    tr = float(hx @ R @ hy)
    Kx = Hx * ((R * (hy * ly)[None, :]) @ R.T)  # noqa: N806
    Ky = Hy * ((R.T * (hx * lx)[None, :]) @ R)  # noqa: N806
    gtx = -2.0 * zx @ (Ux @ Kx @ Ux.T)
    gty = -2.0 * zy @ (Uy @ Ky @ Uy.T)
    gtc = -2.0 * cells * float(hx @ (R * R) @ hy)
    f = 2.0 * np.log(c) + np.log(tr)
    gx = 2.0 / c * ax.grad(zx, px, gLx, gnx) + gtx / tr
    gy = 2.0 / c * ay.grad(zy, py, gLy, gny) + gty / tr
    gg = cells * (2.0 / c * gcl + gtc / tr)
    return float(f), gx, gy, float(gg)


def _polish(Hx: np.ndarray, Hy: np.ndarray, cells: float | None, ax: _Axis, ay: _Axis,  # noqa: N803
            E: np.ndarray, grid: KronGrid, Gx: np.ndarray, Gy: np.ndarray,  # noqa: N803
            deadline: float, maxiter: int, *, sharpen: float = 1.0, patience: int = 1
            ) -> tuple[float, np.ndarray, np.ndarray, float, list[dict[str, Any]]]:
    """L-BFGS from ``Hx (x) Hy`` in rounds of rising temperature until ``deadline``.

    With ``cells=None`` the strategy is the pure product and the objective is
    :func:`_objective`; with a weight it is ``[cells I ; Bx (x) By]`` and the objective is
    :func:`_union_objective` (the weight optimised too, as its logarithm).  Each round's result
    is scaled by the exact bound and scored exactly (:func:`kron_error`); the next round starts
    from the best so far, and ``patience`` rounds without a gain end the search.  ``sharpen``
    multiplies every temperature.  Returns the best (error, Bx, By, cells, history); cells is
    0.0 for the pure product."""
    from scipy.optimize import minimize

    union = cells is not None
    c0 = float(cells) if cells is not None else 0.0
    best = (kron_error(Hx, Hy, Gx, Gy, c0), Hx, Hy, c0)
    hist: list[dict[str, Any]] = [{"round": 0, "error": best[0]}]
    Bx, By, c = Hx, Hy, c0  # noqa: N806
    t0 = time.perf_counter()
    failed = 0
    for r, (t, sm) in enumerate(zip(TEMPERATURES, SMOOTHING, strict=True)):
        t = t * sharpen
        if time.perf_counter() > deadline:
            break
        shp = (Bx.shape, By.shape)
        cut = Bx.size
        end = -1 if union else None
        delta = (sm * float(np.abs(Bx).mean()), sm * float(np.abs(By).mean()))

        def fun(z: np.ndarray, t: float = t, delta: tuple[float, float] = delta,
                shp: tuple[tuple[int, ...], ...] = shp, cut: int = cut, end: int | None = end
                ) -> tuple[float, np.ndarray]:
            zx, zy = z[:cut].reshape(shp[0]), z[cut:end].reshape(shp[1])
            try:
                if union:
                    f, gx, gy, gg = _union_objective(zx, zy, float(z[-1]), ax, ay, E, t, delta)
                    extra = [gg]
                else:
                    f, gx, gy = _objective(zx, zy, ax, ay, E, t, delta)
                    extra = []
            except (np.linalg.LinAlgError, ValueError, FloatingPointError):
                return 1e30, np.zeros_like(z)
            if not np.isfinite(f):
                return 1e30, np.zeros_like(z)
            return f, np.concatenate([gx.ravel(), gy.ravel(), extra])

        def stop(intermediate_result: object) -> None:
            if time.perf_counter() > deadline:
                raise StopIteration

        z0 = [Bx.ravel(), By.ravel()] + ([[np.log(max(c, 1e-300))]] if union else [])
        with np.errstate(over="ignore", under="ignore"):
            res = minimize(fun, np.concatenate(z0), jac=True, method="L-BFGS-B", callback=stop,
                           options={"maxiter": maxiter, "maxcor": 20})
        try:
            Cx, Cy, cc, _ = _scaled(res.x[:cut].reshape(shp[0]),  # noqa: N806
                                    res.x[cut:end].reshape(shp[1]), grid,
                                    float(np.exp(res.x[-1])) if union else 0.0)
            e2 = kron_error(Cx, Cy, Gx, Gy, cc)
        except SolverError:
            break
        hist.append({"round": r + 1, "error": e2, "iters": int(res.nit),
                     "seconds": round(time.perf_counter() - t0, 2)})
        if e2 < best[0] * (1 - 1e-4):
            best, failed = (e2, Cx, Cy, cc), 0
        else:  # no gain at this temperature: the next (sharper) one starts from the best
            failed += 1
            if failed >= patience:
                break
        _, Bx, By, c = best  # noqa: N806
    return best[0], best[1], best[2], best[3], hist


@dataclass
class KronResult:
    """A private strategy ``[cells I ; Bx (x) By]`` (scaled: :func:`kron_ratio` <= 1)."""

    Bx: np.ndarray
    By: np.ndarray
    cells: float
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


def level_factors(n: int) -> list[np.ndarray]:
    """The shifted dyadic blocks of each level l >= 1 on one axis (:mod:`shifted_blocks`'s
    intervals), as 0/1 matrices, up to the first level with a single block."""
    from solvers.strategy.shifted_blocks import shifted_intervals

    out = []
    lev = 1
    while True:
        ivs = shifted_intervals(n, lev)
        if len(ivs) <= 1:
            break
        R = np.zeros((len(ivs), n))
        for k, (lo, hi) in enumerate(ivs):
            R[k, lo:hi] = 1.0
        out.append(R)
        lev += 1
    return out or [np.ones((1, n))]


def _scaled(Bx: np.ndarray, By: np.ndarray, grid: KronGrid, cells: float = 0.0  # noqa: N803
            ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The strategy scaled so that the bound :func:`kron_ratio` is (just below) 1 (the factors
    by the same factor), and the bound after scaling: (Bx, By, cells, bound)."""
    c, _ = kron_ratio(Bx, By, grid, cells)
    if not np.isfinite(c) or c <= 0:
        raise SolverError("a Kronecker strategy without a finite positive privacy ratio")
    s = 1.0 / (c * (1 + 1e-12))
    Bx, By, cells = Bx * np.sqrt(s), By * np.sqrt(s), cells * s  # noqa: N806
    c2, _ = kron_ratio(Bx, By, grid, cells)
    if not c2 <= 1.0:
        raise SolverError(f"Kronecker strategy verification failed: ratio {c2:.12g}")
    return Bx, By, cells, c2


def _cells_and_levels(Gx: np.ndarray, Gy: np.ndarray, grid: KronGrid,  # noqa: N803
                      deadline: float) -> tuple[float, np.ndarray, np.ndarray, float, int]:
    """``[c I ; Hx (x) Hy]`` with H the shifted dyadic blocks of every level >= 1, level l
    weighted w_l on both axes: (c, w) by Nelder-Mead on the exact scaled error (log scale),
    until ``deadline``.  Returns (error, Hx, Hy, c, evaluations), scaled to the bound."""
    from scipy.optimize import minimize

    nx, ny = grid.shape
    Lx, Ly = level_factors(nx), level_factors(ny)  # noqa: N806
    k = max(len(Lx), len(Ly))

    def build(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        w = np.exp(theta[1:])
        Hx = np.vstack([w[i] * L for i, L in enumerate(Lx)])  # noqa: N806
        Hy = np.vstack([w[i] * L for i, L in enumerate(Ly)])  # noqa: N806
        return Hx, Hy, float(np.exp(theta[0]))

    best: list[Any] = [np.inf, None]
    evals = [0]

    class _Stop(Exception):
        pass

    def f(theta: np.ndarray) -> float:
        if time.perf_counter() > deadline:
            raise _Stop
        evals[0] += 1
        Hx, Hy, c = build(theta)  # noqa: N806
        try:
            r, _ = kron_ratio(Hx, Hy, grid, c)
            e = kron_error(Hx, Hy, Gx, Gy, c) * r * r
        except SolverError:
            return 1e300
        if e < best[0]:
            best[0], best[1] = e, theta.copy()
        return float(np.log(e))

    theta0 = np.r_[1.0, np.zeros(k)]  # the cells at e times every level's weight
    try:
        for c0 in (0.0, 1.0, 2.0):  # a coarse look at the share of the cells first
            f(np.r_[c0, np.zeros(k)])
        minimize(f, best[1] if best[1] is not None else theta0, method="Nelder-Mead",
                 options={"maxfev": 400 * (k + 1), "xatol": 1e-3, "fatol": 1e-5})
    except _Stop:
        pass
    if best[1] is None:
        raise SolverError("no cells-and-levels strategy was evaluated before the deadline")
    Hx, Hy, c = build(best[1])  # noqa: N806
    Hx, Hy, c, _ = _scaled(Hx, Hy, grid, c)  # noqa: N806
    return kron_error(Hx, Hy, Gx, Gy, c), Hx, Hy, c, evals[0]


def design_kron(Gx: np.ndarray, Gy: np.ndarray, grid: KronGrid, *,  # noqa: N803
                time_limit: float = 300.0, maxiter: int = 200, lower_bound: bool = True,
                starts: tuple[str, ...] = ("levels", "identity"),
                levels_share: float = 0.4, polish_share: float = 0.9,
                threads: int | None = 1) -> KronResult:
    """:func:`_design_kron` with at most ``threads`` BLAS threads (default 1: on a loaded
    2-core machine a threaded 128 x 128 eigendecomposition took 100 times longer)."""
    from solvers.strategy.optimize import blas_threads

    with blas_threads(threads):
        return _design_kron(Gx, Gy, grid, time_limit=time_limit, maxiter=maxiter,
                            lower_bound=lower_bound, starts=starts, levels_share=levels_share,
                            polish_share=polish_share)


def _design_kron(Gx: np.ndarray, Gy: np.ndarray, grid: KronGrid, *,  # noqa: N803
                 time_limit: float, maxiter: int, lower_bound: bool, starts: tuple[str, ...],
                 levels_share: float, polish_share: float) -> KronResult:
    """Optimise a strategy ``[cells I ; Bx (x) By]`` for the workload of Gram ``Gx (x) Gy`` on
    an evenly spaced ``grid`` (each axis; the privacy bound :func:`kron_ratio` takes any
    spacing), the best of:

    * ``levels``: every cell plus the product of the shifted dyadic blocks of the axes, one
      weight per level and one for the cells, by Nelder-Mead on the exact scaled error
      (:func:`_cells_and_levels`, ``levels_share`` of the time), then every entry of both
      factors and the cells weight by L-BFGS on the smoothed bound and the error in the
      factors' eigenbases (:func:`_polish`, ``polish_share`` of the time left);
    * ``identity`` (each cell once, the pure product ``I (x) I``) polished: L-BFGS on
      ``2 log c + log t_x + log t_y`` with c the smoothed bound of :func:`kron_ratio` over lags,
      rounds of rising temperature, until the time limit.

    The result is scaled by the exact bound and evaluated exactly (:func:`kron_error`)."""
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
    unknown = set(starts) - {"levels", "identity", "hierarchical"}
    if unknown:
        raise SolverError(f"unknown Kronecker starts {sorted(unknown)}")
    ax, ay = _Axis(Gx, nx), _Axis(Gy, ny)
    scores: dict[str, float] = {}
    history: dict[str, list[dict[str, Any]]] = {}
    best: tuple[float, str, np.ndarray, np.ndarray, float] | None = None
    if "levels" in starts:
        t1 = time.perf_counter()
        share_end = t1 + levels_share * max(0.0, deadline - t1) if len(starts) > 1 else deadline
        e_l, Hx, Hy, c_l, n_ev = _cells_and_levels(Gx, Gy, grid, share_end)  # noqa: N806
        scores["levels"] = e_l
        history["levels"] = [{"evaluations": n_ev, "error": e_l,
                              "seconds": round(time.perf_counter() - t1, 2)}]
        best = (e_l, "levels", Hx, Hy, c_l)
        t2 = time.perf_counter()
        polish_end = t2 + polish_share * max(0.0, deadline - t2) if len(starts) > 1 else deadline
        # the smoothed maximum runs over every (lag x, lag y): sharper on larger grids, so that
        # its excess over the maximum (at most log(terms) / t) stays that of a 64 x 64 grid
        sharpen = max(1.0, np.log(E.size) / np.log(4096.0))
        e_p, Px, Py, c_p, hist_p = _polish(Hx, Hy, c_l, ax, ay, E, grid, Gx, Gy,  # noqa: N806
                                           polish_end, maxiter, sharpen=sharpen, patience=2)
        history["levels+polish"] = hist_p
        if e_p < best[0]:
            best = (e_p, "levels+polish", Px, Py, c_p)
    cands: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if "identity" in starts:
        cands["identity"] = (np.eye(nx), np.eye(ny))
    if "hierarchical" in starts:
        cands["hierarchical"] = (hierarchical_factor(nx), hierarchical_factor(ny))
    share = max(0.0, deadline - time.perf_counter()) / max(len(cands), 1)
    for k, (name, (Bx, By)) in enumerate(cands.items()):  # noqa: N806
        Bx, By, _, _ = _scaled(Bx, By, grid)  # noqa: N806
        err = kron_error(Bx, By, Gx, Gy)
        scores[name] = err
        if best is None or err < best[0]:
            best = (err, name, Bx, By, 0.0)
        stop_at = time.perf_counter() + share if k < len(cands) - 1 else deadline
        e2, Cx, Cy, _, hist = _polish(Bx, By, None, ax, ay, E, grid, Gx, Gy,  # noqa: N806
                                      stop_at, maxiter)
        if e2 < best[0]:
            best = (e2, f"{name}+polish", Cx, Cy, 0.0)
        history[name] = hist
    assert best is not None
    err, name, Bx, By, cells = best  # noqa: N806
    ratio, where = kron_ratio(Bx, By, grid, cells)
    ex, ey = grid.edge_budgets()
    eps_min = float(min(ex.min(), ey.min()))
    lb = kron_lower_bound(Gx, Gy, grid) if lower_bound else None
    report = {"start": name, "starts": scores, "history": history, "basis": "kronecker",
              "p": int(Bx.shape[0] * By.shape[0] + (nx * ny if cells else 0)),
              "cells": cells, "max_ratio": ratio,
              "worst_pair": f"dx={where[0]:g}, dy={where[1]:g}",
              "seconds": time.perf_counter() - t0}
    return KronResult(Bx, By, cells, err, ratio, lb, identity_error(Gx, Gy, eps_min), report)
