"""The d_X-private Laplace mechanism, eq. (5), and its eps-DP baseline (Definition 4).

M(x) = (w ⊙ F) x + (Y_1, ..., Y_m), Y_k ~ Lap(1 / beta_k) independent.

Privacy condition (Theorem 1): sum_k beta_k w_k |F_ki - F_kj| <= eps_ij for every constrained pair.
Proof sketch (Theorem 1): the density ratio of neighbouring outputs is a product over k of
exp(beta_k (|w_k<F_k,x'> - z_k| - |w_k<F_k,x> - z_k|)) <= exp(sum_k beta_k w_k |F_ki - F_kj|) by the
triangle inequality.  The answer is not divided by w (it is biased when w != 1; Theorem 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from dprivacy import noise
from dprivacy.design import PRIVACY_RTOL, Design
from dprivacy.errors import PrivacyViolationError, ShapeError, ValidationError
from dprivacy.mechanisms._release import charge_release, setup_accounting
from dprivacy.universe import check_histogram
from dprivacy.workload import Workload

if TYPE_CHECKING:
    from dprivacy.accounting import Accountant
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe

__all__ = ["DXLaplace", "Laplace", "check_histogram"]


class DXLaplace:
    """d_X-private Laplace mechanism for linear queries, eq. (5).

    Privacy condition (Theorem 1): sum_k beta_k w_k |F_ki - F_kj| <= eps_ij for all constrained
    pairs; checked over all of them at construction (against ``universe`` + ``metric`` when given,
    else against the constraint set the design carries), so an unsafe design never releases.

    Parameters
    ----------
    workload : Workload
    design : Design
    universe, metric : optional; re-derive the constraints instead of trusting the design's.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> W = dp.Workload([[0.0, 1.0, 2.0]])
    >>> M = dp.metrics.Euclidean(1.0)
    >>> mech = dp.DXLaplace(W, dp.design(W, U, M, method="closed_form"))
    >>> mech.release(np.array([5, 3, 2]), rng=0, secure=False).shape
    (1,)
    """

    kind = "laplace"

    def __init__(self, workload: Workload, design: Design, *, universe: Universe | None = None,
                 metric: Metric | None = None) -> None:
        if not isinstance(workload, Workload):
            workload = Workload(workload)
        if design.m != workload.m:
            raise ShapeError(f"the design has m = {design.m} queries but the workload m = "
                             f"{workload.m}")
        self.workload = workload
        self.design = design
        self.max_ratio_ = self._verify(universe, metric)
        setup_accounting(self, universe, metric)

    def _verify(self, universe: Universe | None, metric: Metric | None) -> float:
        if (universe is None) != (metric is None):
            raise ValidationError("give both universe and metric, or neither")
        cs = None
        if universe is not None:
            assert metric is not None  # both or neither
            self.workload.check_universe(universe)
            cs = metric.constraint_set(universe)
        return self.design.verify(self.workload, cs)

    @property
    def noise_scale(self) -> np.ndarray:
        """Laplace scale 1 / beta_k per query (0 = exact answer)."""
        return self.design.noise_scale

    def privacy_loss(self, i: int, j: int) -> float:
        """Realised loss sum_k u_k |F_ki - F_kj| of moving one record from chi_i to chi_j."""
        F = self.workload.F
        cols = F[:, [i, j]].toarray() if sp.issparse(F) else F[:, [i, j]]
        return float(np.sum(self.design.u * np.abs(cols[:, 0] - cols[:, 1])))

    def expected_squared_error(self, x) -> float:
        """E||M(x) - F x||^2 = sum_k (1 - w_k)^2 <F_k, x>^2 + 2 / beta_k^2 (Theorem 2)."""
        fx = self.workload.answer(check_histogram(x, self.workload.N))
        return float(np.sum((1 - self.design.w) ** 2 * fx**2) + np.sum(2 * self.noise_scale**2))

    def release(self, x, rng=None, secure: bool = True, *,
                accountant: Accountant | None = None) -> np.ndarray:
        """Release (w ⊙ F) x + Lap(1 / beta) for histogram ``x`` (eq. (5)).

        ``secure=True`` (default) uses OpenDP's floating-point-safe sampler (``rng`` unused);
        ``secure=False`` is numpy's seedable sampler, for simulations only.
        ``accountant``: charged :attr:`release_cost` (alpha) before anything is computed; a
        refused release raises :class:`~dprivacy.errors.BudgetExceededError` and charges
        nothing. Without one, the mechanism's built-in budget allows a single release.
        """
        arr = check_histogram(x, self.workload.N)
        charge_release(self, accountant)
        answers = self.design.w * self.workload.answer(arr)
        return np.asarray(noise.add_laplace(answers, self.noise_scale, rng=rng, secure=secure),
                          dtype=float).reshape(self.workload.m)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(m={self.workload.m}, N={self.workload.N}, "
                f"method={self.design.method!r}, max_ratio={self.max_ratio_:.6g})")


class Laplace(DXLaplace):
    """The eps-DP Laplace baseline (Definition 4): every query gets Lap(Delta F / eps).

    It is d_X-private for a metric only with eps = eps_min (Definition 4); build that case with
    :meth:`for_metric`.  Same code path as :class:`DXLaplace` with w = 1, beta = eps / Delta F.
    Privacy condition: beta * Delta_ij F <= eps for all pairs, i.e. beta * Delta F <= eps.
    """

    def __init__(self, workload: Workload, eps: float, *, universe: Universe | None = None,
                 metric: Metric | None = None) -> None:
        if not isinstance(workload, Workload):
            workload = Workload(workload)
        eps = float(eps)
        if not eps > 0 or not np.isfinite(eps):
            raise ValidationError(f"eps = {eps}: the baseline needs a positive finite budget")
        dF = workload.sensitivity()
        beta = np.full(workload.m, np.inf if dF == 0 else eps / dF)
        self.eps = eps
        self.sensitivity = dF
        d = Design(np.ones(workload.m), beta, method="baseline", loss="squared",
                   report={"eps": eps, "sensitivity": dF})
        super().__init__(workload, d, universe=universe, metric=metric)

    def _verify(self, universe: Universe | None, metric: Metric | None) -> float:
        if universe is not None or metric is not None:
            return super()._verify(universe, metric)
        # all pairs at budget eps: the max over pairs of beta * Delta_ij F / eps is beta*Delta F/eps
        b = self.design.beta[0]
        ratio = 0.0 if self.sensitivity == 0 else b * self.sensitivity / self.eps
        if ratio > 1 + PRIVACY_RTOL:
            raise PrivacyViolationError(f"baseline loses {ratio} x its budget")
        return ratio

    @classmethod
    def for_metric(cls, workload: Workload, universe: Universe, metric: Metric) -> Laplace:
        """The baseline at eps = eps_min of the metric, verified against the metric's pairs."""
        return cls(workload, metric.eps_min(universe), universe=universe, metric=metric)
