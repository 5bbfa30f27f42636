"""Kronecker strategies for all rectangles of large grids: design, check, answers, variances.

All rectangles of an nx x ny grid have the Gram matrix ``G_x (x) G_y`` (the all-ranges Gram
matrices of the two axes).  Beyond 64 x 64 cells a dense strategy is out of reach (its N x N
normal matrix alone is 2 GB at 128 x 128, 32 GB at 256 x 256), so the strategy is the product
``A = A_x (x) A_y`` of two per-axis factors (:mod:`solvers.strategy.kron`): its privacy ratio is
bounded from the factors (a proof in that module; the bound is what the release is scaled by),
its error is in closed form, the release ``A x`` is ``A_x X A_y'`` and the least-squares
estimate ``A_x^+ Y A_y^+'`` corrected to the known total.  Nothing of size N x N is formed.

The budget must depend on the coordinate differences only, monotonically: the Euclidean metric
(``eps_per_unit * ||p_i - p_j||``) on a full grid of points.  Other metrics are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.sparse.linalg import LinearOperator

from dprivacy.errors import ValidationError
from solvers.strategy.kron import KronEstimator, KronGrid

if TYPE_CHECKING:
    from dprivacy.implicit_workload import ImplicitWorkload
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe

#: Rectangles of grids with at least this many cells use a Kronecker strategy by default
#: (Euclidean metric): from 32 x 32 on it beats the dense strategy, and in a fraction of its time
#: (experiments/results/bench_strategy_grids.md).
KRON_MIN_N = 1024


def default_time_limit(N: int) -> float:  # noqa: N803
    """Seconds of search of a Kronecker design by default: 40 s at 64 x 64, in proportion to
    the number of cells, between 20 s and 600 s."""
    return float(min(600.0, max(20.0, 40.0 * N / 4096)))


def kron_metric(metric: Metric) -> bool:
    """True when the Kronecker privacy bound is proved for ``metric`` (the Euclidean one)."""
    from dprivacy.metrics.geometric import Euclidean

    return type(metric) is Euclidean
#: Rows of a variance block when the worst queries are found (rows of the (mx, my) table).
_ROW_BLOCK = 2**22


class KronOperator(LinearOperator):
    """The strategy ``[cells I ; Bx (x) By]`` as a linear operator on histograms in element
    order (``a * ny + b``): ``(Bx (x) By) x = vec(Bx X By')``, after ``cells * x`` when cells is
    not 0.  Read-only copies of the factors."""

    def __init__(self, Bx: np.ndarray, By: np.ndarray, cells: float = 0.0) -> None:  # noqa: N803
        bx = np.array(Bx, dtype=np.float64, copy=True)
        by = np.array(By, dtype=np.float64, copy=True)
        if bx.ndim != 2 or by.ndim != 2 or bx.size == 0 or by.size == 0:
            raise ValidationError("Kronecker factors must be non-empty 2-D arrays")
        if not (np.all(np.isfinite(bx)) and np.all(np.isfinite(by))):
            raise ValidationError("the strategy has NaN or infinite entries")
        cells = float(cells)
        if not np.isfinite(cells) or cells < 0:
            raise ValidationError(f"cells = {cells}: the weight of the cell counts must be a "
                                  "finite number >= 0")
        bx.setflags(write=False)
        by.setflags(write=False)
        self.Bx, self.By, self.cells = bx, by, cells
        n = bx.shape[1] * by.shape[1]
        super().__init__(np.float64,  # type: ignore[call-arg]
                         (bx.shape[0] * by.shape[0] + (n if cells else 0), n))

    def _matvec(self, x: np.ndarray) -> np.ndarray:
        X = np.asarray(x, np.float64).reshape(self.Bx.shape[1], self.By.shape[1])  # noqa: N806
        kron = (self.Bx @ X @ self.By.T).ravel()
        return np.concatenate([self.cells * X.ravel(), kron]) if self.cells else kron

    def _rmatvec(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, np.float64).ravel()
        k = self.shape[1] if self.cells else 0
        Y = y[k:].reshape(self.Bx.shape[0], self.By.shape[0])  # noqa: N806
        out = (self.Bx.T @ Y @ self.By).ravel()
        return out + self.cells * y[:k] if self.cells else out

    def dense(self) -> np.ndarray:
        """The (p, N) matrix (small grids only: tests and plots)."""
        if self.shape[0] * self.shape[1] > 2**26:
            raise ValidationError(f"a {self.shape[0]} x {self.shape[1]} Kronecker strategy is "
                                  "not materialised; use its factors Bx, By")
        kron = np.kron(self.Bx, self.By)
        return np.vstack([self.cells * np.eye(self.shape[1]), kron]) if self.cells else kron


def kron_grid(universe: Universe, metric: Metric) -> KronGrid:
    """The grid of ``universe`` with the budget of ``metric`` as a function of coordinate
    differences; refuses metrics for which the Kronecker privacy bound is not proved."""
    if not kron_metric(metric):
        raise ValidationError(f"a Kronecker strategy needs a budget that depends only on the "
                              f"coordinate differences of the grid's points (the Euclidean "
                              f"metric); {metric!r} is not supported: a dense strategy, checked on "
                              "every pair, takes grids of at most 8192 cells")
    pts = universe.coords
    if pts is None or pts.shape[1] != 2:
        raise ValidationError("a Kronecker strategy needs a universe of 2-D points on a full grid")
    xs, ia = np.unique(pts[:, 0], return_inverse=True)
    ys, ib = np.unique(pts[:, 1], return_inverse=True)
    if xs.size * ys.size != universe.N or not np.array_equal(
            np.ravel(ia) * ys.size + np.ravel(ib), np.arange(universe.N)):
        raise ValidationError("a Kronecker strategy needs the points on a full grid, element "
                              "a * ny + b at the a-th x and the b-th y value")
    from dprivacy.metrics.geometric import Euclidean

    assert isinstance(metric, Euclidean)
    e = float(metric.eps_per_unit)
    return KronGrid(xs, ys, lambda dx, dy: e * np.hypot(dx, dy))


def kron_query_variances(W: ImplicitWorkload, est: KronEstimator) -> np.ndarray:  # noqa: N803
    """The variance of every rectangle's answer (shape (m,), rectangle order)."""
    return est.range_variances().ravel()


def kron_worst(W: ImplicitWorkload, est: KronEstimator, k: int = 10  # noqa: N803
               ) -> tuple[float, np.ndarray, np.ndarray, int]:
    """(total variance, the k queries of largest variance, their variances, the number of
    queries answered exactly), one block of the (mx, my) variance table at a time."""
    mx, my = est.n_ranges
    step = max(1, _ROW_BLOCK // my)
    total, n_exact, vmax = 0.0, 0, 0.0
    top_i: list[np.ndarray] = []
    top_v: list[np.ndarray] = []
    for r in range(0, mx, step):
        T = est.range_variances(slice(r, r + step)).ravel()  # noqa: N806
        total += float(T.sum())
        vmax = max(vmax, float(T.max()))
        n_exact += int(np.count_nonzero(T <= 1e-12 * vmax))  # rounding of an exact 0
        kk = min(k, T.size)
        idx = np.argpartition(-T, kk - 1)[:kk]
        top_i.append(idx + r * my)
        top_v.append(T[idx])
    ii, vv = np.concatenate(top_i), np.concatenate(top_v)
    order = np.argsort(-vv, kind="stable")[:k]
    return total, ii[order], vv[order], n_exact


def kron_report(W: ImplicitWorkload, d: Any) -> dict[str, Any]:  # noqa: N803
    """Numbers of the design report of a Kronecker strategy, without the m per-query rows."""
    est = KronEstimator(d.C.Bx, d.C.By, d.C.cells)
    total, idx, var, n_exact = kron_worst(W, est)
    return {"total": total, "worst": [(W.query_name(int(i)), float(v)) for i, v in zip(idx, var,
                                                                                       strict=True)],
            "exact": n_exact}
