"""The d_X-private Exponential mechanism, Definition 9 / Theorem 3, and its eps-DP baseline.

A linear utility is given as a matrix ``U`` (a :class:`Workload` of shape (R, N)): row r holds the
per-record contribution of each element to output r, ``u(x, r) = sum_i U[r, i] x_i``.  With the
per-output rescaling ``w`` (for a generic u, w is simply a rescaling of u),
``u_w(x, r) = w_r u(x, r)`` and the mechanism outputs r with probability ∝ exp(beta u_w(x, r) / 2).

Privacy condition (Theorem 3): beta * max_r w_r |U_ri - U_rj| <= eps_ij for every constrained pair.
Under bounded neighbours ``u_w(x, r) - u_w(x', r) = w_r (U_ri - U_rj)``, so
``Delta_ij u_w = max_r w_r |U_ri - U_rj|`` (Definition 5) and the ratio of numerators and the
ratio of normalisers are each at most exp(beta Delta_ij u_w / 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dprivacy import noise
from dprivacy.design import Design
from dprivacy.errors import ShapeError, ValidationError
from dprivacy.mechanisms._privacy import (
    as_design,
    check_max_condition,
    resolve_constraints,
    scaled_log_weights,
    shared_beta,
)
from dprivacy.mechanisms._release import charge_release, setup_accounting
from dprivacy.mechanisms.laplace import check_histogram
from dprivacy.workload import Workload

if TYPE_CHECKING:
    from dprivacy.accounting import Accountant
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe

THEOREM_3 = "Theorem 3: beta * max_r w_r |U_ri - U_rj| <= eps_ij"


class DXExponential:
    """d_X-private Exponential mechanism over R outputs with a linear utility (Definition 9).

    Privacy condition (Theorem 3): beta * max_r w_r |U_ri - U_rj| <= eps_ij for all constrained
    pairs; checked over every one of them at construction (against ``universe`` + ``metric``
    when given, else the design's constraint set): an unsafe design raises
    :class:`~dprivacy.errors.PrivacyViolationError` and never releases.

    Parameters
    ----------
    utility : Workload or (R, N) array
        ``U[r, i]``, the utility that one record at element i adds to output r.
    design : Design
        ``w`` of shape (R,) (per-output rescaling, 1 = none) and ``beta`` repeated R times.
    universe, metric : optional; re-derive the constraints instead of trusting the design's.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [2.0]]))
    >>> util = -np.abs(np.arange(3)[:, None] - np.arange(3)[None, :]).astype(float)
    >>> mech = dp.DXExponential.optimal(util, U, dp.metrics.Euclidean(1.0))
    >>> mech.beta
    1.0
    >>> mech.release(np.array([4, 1, 0]), rng=0, secure=False) in (0, 1, 2)
    True
    """

    kind = "exponential"

    def __init__(self, utility: Workload, design: Design, *, universe: Universe | None = None,
                 metric: Metric | None = None) -> None:
        if not isinstance(utility, Workload):
            utility = Workload(utility)
        if design.m != utility.m:
            raise ShapeError(f"the design has {design.m} rows but the utility has R = "
                             f"{utility.m} outputs")
        self.workload = utility
        self.design = design
        self.beta = shared_beta(design)
        self.constraints = resolve_constraints(utility, design, universe, metric)
        self.max_ratio_ = check_max_condition(self.constraints, utility.F, self._scale(), THEOREM_3)
        setup_accounting(self, universe, metric)

    def _scale(self) -> np.ndarray:
        """Per-output multiplier beta * w_r of |U_ri - U_rj| in Theorem 3 (0 where w_r = 0)."""
        w = self.design.w
        return np.where(w == 0, 0.0, self.beta * w)

    @property
    def n_outputs(self) -> int:
        return self.workload.m

    def utility(self, x) -> np.ndarray:
        """u_w(x, r) = w_r sum_i U[r, i] x_i for every output r."""
        return self.design.w * self.workload.answer(check_histogram(x, self.workload.N))

    def log_weights(self, x) -> np.ndarray:
        """beta u_w(x, r) / 2, shifted so that the largest is 0 (Definition 9)."""
        return scaled_log_weights(self.beta, self.utility(x))

    def probabilities(self, x) -> np.ndarray:
        """The exact output distribution: softmax of :meth:`log_weights`."""
        lw = self.log_weights(x)
        p = np.exp(lw)
        return p / p.sum()

    def privacy_loss(self, i: int, j: int) -> float:
        """Bound beta * max_r w_r |U_ri - U_rj| on the loss of moving one record i -> j."""
        cols = self.workload.F[:, [i, j]]
        cols = cols.toarray() if hasattr(cols, "toarray") else np.asarray(cols)
        diff = np.abs(cols[:, 0] - cols[:, 1])
        return float(np.max(np.where(diff == 0, 0.0, self._scale() * diff)))

    def release(self, x, rng=None, secure: bool = True, *,
                accountant: Accountant | None = None) -> int:
        """Sample an output index r with probability ∝ exp(beta u_w(x, r) / 2).

        ``secure=True`` (default) uses OpenDP's exact Gumbel report-noisy-max (``rng`` unused);
        ``secure=False`` is numpy's seedable Gumbel-max, for simulations only.
        ``accountant``: charged :attr:`release_cost` before anything is computed (refused:
        :class:`~dprivacy.errors.BudgetExceededError`, nothing charged); without one, the
        mechanism's built-in budget allows a single release.
        """
        check_histogram(x, self.workload.N)
        charge_release(self, accountant)
        return noise.exponential_choice(self.log_weights(x), rng=rng, secure=secure)

    def params(self) -> dict:
        """Mechanism parameters beyond (w, beta) that a config must store (none here)."""
        return {}

    # ------------------------------------------------------------------ builders
    @classmethod
    def optimal(cls, utility, universe: Universe, metric: Metric) -> DXExponential:
        """w = 1 and the largest private beta: 1 / max_ij (max_r |U_ri - U_rj| / eps_ij)."""
        W = utility if isinstance(utility, Workload) else Workload(utility)
        cs = metric.constraint_set(universe)
        W.check_universe(universe)
        L = float(cs.scan(W.F, np.ones(W.m), agg="max").max_ratio)
        beta = np.inf if L == 0 else 1.0 / L
        if beta == 0:
            raise ValidationError("a pair with eps_ij = 0 is separated by the utility: no "
                                  "positive beta is private (merge the elements)")
        d = as_design(W, 1.0, beta, method="exponential_optimal", report={"lipschitz": L},
                      constraints=cs)
        return cls(W, d, universe=universe, metric=metric)

    @classmethod
    def baseline(cls, utility, universe: Universe, metric: Metric) -> DXExponential:
        """The eps-DP baseline (Definition 6) at eps = eps_min: beta = eps_min / Delta u.

        Delta u = max_r (max_i U_ri - min_i U_ri).  Same code path and same check (Theorem 3
        with w = 1) as the d_X form; it is d_X-private because eps_min <= eps_ij.
        """
        W = utility if isinstance(utility, Workload) else Workload(utility)
        W.check_universe(universe)
        eps = metric.eps_min(universe)
        du = float(np.max(W.ranges()))
        if not np.isfinite(eps):
            raise ValidationError("no pair is constrained (eps_min = inf): the baseline is undefined")
        beta = np.inf if du == 0 else eps / du
        d = as_design(W, 1.0, beta, method="baseline", report={"eps": eps, "sensitivity": du},
                      constraints=metric.constraint_set(universe))
        return cls(W, d, universe=universe, metric=metric)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(R={self.workload.m}, N={self.workload.N}, "
                f"beta={self.beta:.6g}, max_ratio={self.max_ratio_:.6g})")
