"""The d_X Gaussian mechanism: per-query Gaussian noise, rho-zCDP per unit of the metric.

Privacy condition (docs/theory.md, "Gaussian noise and metric zCDP"): for every pair of
elements at finite distance, ``sum_k (F_ki - F_kj)^2 / sigma_k^2 <= 2 rho eps_ij`` -- checked on
ALL pairs when the mechanism is built (against ``universe`` + ``metric`` when given, else the
every-pair constraint set the design carries), so an unsafe design never releases. A release
with maximum ratio r over the pairs is (r rho)-zCDP per unit of the metric; that is its
:attr:`release_cost`, charged in zCDP units (``release_notion = "zcdp"``).

Noise: when every coefficient of the workload is an integer (so every answer on a histogram of
counts is an integer), the exact discrete Gaussian (same Rényi bound on integer shifts);
otherwise OpenDP's floating-point-safe continuous Gaussian (``secure=True``), or numpy's seedable
sampler with ``secure=False`` (simulations only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from dprivacy import gaussian_noise
from dprivacy.discrete_noise import integer_coefficients
from dprivacy.errors import ShapeError, ValidationError
from dprivacy.gaussian_design import GaussianDesign, pair_constraint_set
from dprivacy.mechanisms._release import charge_release, setup_accounting
from dprivacy.universe import check_histogram
from dprivacy.workload import Workload

if TYPE_CHECKING:
    from dprivacy.accounting import Accountant
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe

__all__ = ["DXGaussian"]


class DXGaussian:
    """Release ``F x + N(0, diag(sigma^2))``, rho-zCDP per unit of the metric.

    Parameters
    ----------
    workload : Workload
    design : GaussianDesign (``dp.design(..., noise="gaussian", rho=...)``)
    universe, metric : optional; re-derive every pair's budget instead of trusting the design's.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> W, M = dp.Workload([[0.0, 1.0, 2.0]]), dp.metrics.Euclidean(1.0)
    >>> mech = dp.DXGaussian(W, dp.design(W, U, M, noise="gaussian", rho=0.5), universe=U, metric=M)
    >>> round(float(mech.design.sigma[0]), 6)   # pair (0, 3): 2^2 / 3 = 4/3 (not an edge): sigma^2 = 4/3
    1.154701
    >>> mech.release(np.array([5, 3, 2]), rng=0, secure=False).shape
    (1,)
    """

    kind = "gaussian"
    release_notion = "zcdp"

    def __init__(self, workload: Workload, design: GaussianDesign, *,
                 universe: Universe | None = None, metric: Metric | None = None) -> None:
        if not isinstance(workload, Workload):
            workload = Workload(workload)
        if not isinstance(design, GaussianDesign):
            raise ValidationError(f"design is a {type(design).__name__}: DXGaussian takes a "
                                  "GaussianDesign (dp.design(..., noise='gaussian', rho=...))")
        if design.m != workload.m:
            raise ShapeError(f"the design has m = {design.m} queries but the workload m = "
                             f"{workload.m}")
        if (universe is None) != (metric is None):
            raise ValidationError("give both universe and metric, or neither")
        self.workload = workload
        self.design = design
        cs = None
        if universe is not None:
            assert metric is not None
            workload.check_universe(universe)
            cs = pair_constraint_set(metric, universe)
        self.max_ratio_ = design.verify(workload, cs)
        self.integer = bool(integer_coefficients(np.ones(workload.m), workload.F)) and bool(
            np.all(design.sigma <= gaussian_noise.MAX_SIGMA))
        setup_accounting(self, universe, metric, unit=design.unit, scale=design.rho)

    @property
    def noise_scale(self) -> np.ndarray:
        """The standard deviation sigma_k of each query's noise (0 = exact answer)."""
        return self.design.sigma

    def privacy_loss(self, i: int, j: int) -> float:
        """``sum_k (F_ki - F_kj)^2 / sigma_k^2 / 2``: the zCDP rho of moving one record from
        element i to j (Rényi divergence of order alpha = alpha times this)."""
        F = self.workload.F
        cols = F[:, [i, j]].toarray() if sp.issparse(F) else F[:, [i, j]]
        d2 = (cols[:, 0] - cols[:, 1]) ** 2
        s2 = self.design.sigma**2
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(d2 == 0, 0.0, d2 / s2)
        return float(np.sum(terms) / 2)

    def expected_squared_error(self, x: Any = None) -> float:
        """E||M(x) - F x||^2 = sum_k sigma_k^2 (unbiased)."""
        return self.design.expected_squared_error()

    def release(self, x: Any, rng: Any = None, secure: bool = True, *,
                accountant: Accountant | None = None) -> np.ndarray:
        """Release ``F x + noise`` for histogram ``x``. ``accountant`` is charged
        :attr:`release_cost` (rho units) before anything is computed; without one, the built-in
        budget allows a single release."""
        arr = check_histogram(x, self.workload.N)
        charge_release(self, accountant)
        answers = self.workload.answer(arr)
        if self.integer and np.all(arr == np.round(arr)):
            vals = np.round(answers)
            out: Any = gaussian_noise.add_discrete_gaussian(
                vals.astype(np.int64), self.design.sigma, rng=rng, secure=secure)
        else:
            out = gaussian_noise.add_gaussian(answers, self.design.sigma, rng=rng, secure=secure)
        return np.asarray(out, dtype=float).reshape(self.workload.m)

    def __repr__(self) -> str:
        return (f"DXGaussian(m={self.workload.m}, N={self.workload.N}, rho={self.design.rho:g}, "
                f"max_ratio={self.max_ratio_:.6g})")
