"""The d_X-private MWEM mechanism, Algorithm 2 / Theorem 7, and its eps-DP baseline.

A_0 = n * uniform; for t = 1..T: (1) choose f_t by the exponential mechanism with score
s_t(x, f) = |w_f <f, A_{t-1}> - w_f <f, x>| and Pr ∝ exp(beta s_t / 2); (2) measure
m_t = w_{f_t} <f_t, x> + Lap(1 / beta); (3) multiplicative weights
A_t(i) ∝ A_{t-1}(i) exp(w_{f_t} f_t(i) (m_t - w_{f_t} <f_t, A_{t-1}>) / (2n)).  Output the average
A = (1/T) sum_t A_t (a histogram of n records, real-valued); f is answered by w_f <f, A>.

Privacy condition (Theorem 7, beta_E = beta_L = beta): 2 T beta max_f w_f |f_i - f_j| <= eps_ij for
every constrained pair: each round is one exponential-mechanism call (Delta_ij s <= max_f w_f
|f_i - f_j|, Theorem 3) and one Laplace call, each (d_X / 2T)-private; 2T of them compose (Fact 1.2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.special import logsumexp

import solvers
from dprivacy import noise
from dprivacy.design import Design
from dprivacy.errors import ShapeError, ValidationError
from dprivacy.mechanisms._privacy import (
    as_design,
    check_max_condition,
    resolve_constraints,
    scaled_log_weights,
    shared_beta,
    solved_design,
)
from dprivacy.mechanisms._release import charge_release, setup_accounting
from dprivacy.mechanisms.laplace import check_histogram
from dprivacy.mechanisms.smalldb import check_unit_queries
from dprivacy.workload import Workload

if TYPE_CHECKING:
    from dprivacy.accounting import Accountant
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe

THEOREM_7 = "Theorem 7: 2 T beta * max_f w_f |f_i - f_j| <= eps_ij"


class DXMWEM:
    """d_X-private MWEM (Algorithm 2): T rounds of select (EM), measure (Laplace), update (MW).

    Privacy condition (Theorem 7): 2 T beta max_f w_f |f_i - f_j| <= eps_ij for all constrained
    pairs; checked over every one of them at construction (raises PrivacyViolationError).

    Parameters
    ----------
    workload : Workload with F in [0, 1]^(m x N); queries are unnormalised, f(x) = <f, x>
    design : Design with w in [0, 1]^m and the shared beta (= beta_E = beta_L) repeated m times
    T : number of rounds (default ``design.report["T"]``, as set by :func:`solvers.mwem_params`)
    universe, metric : optional; re-derive the constraints instead of trusting the design's

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.arange(4.0).reshape(-1, 1))
    >>> W = dp.Workload.range_queries(4, [(0, 1), (1, 2), (2, 3)])
    >>> mech = dp.DXMWEM.from_solver(W, U, dp.metrics.Euclidean(1.0), n=100)
    >>> A = mech.release(np.array([40, 20, 30, 10]), rng=0, secure=False)
    >>> round(float(A.sum()), 6)
    100.0
    """

    kind = "mwem"

    def __init__(self, workload: Workload, design: Design, *, T: int | None = None,
                 universe: Universe | None = None, metric: Metric | None = None) -> None:
        if not isinstance(workload, Workload):
            workload = Workload(workload)
        if design.m != workload.m:
            raise ShapeError(f"the design has m = {design.m}, the workload m = {workload.m}")
        check_unit_queries(workload, design.w)
        T = design.report.get("T") if T is None else T
        if T is None or int(T) != T or int(T) < 1:
            raise ValidationError(f"T = {T}: MWEM needs a positive integer number of rounds")
        self.workload = workload
        self.design = design
        self.T = int(T)
        self.beta = shared_beta(design)
        self.constraints = resolve_constraints(workload, design, universe, metric)
        self.max_ratio_ = check_max_condition(self.constraints, workload.F, self._scale(),
                                              THEOREM_7)
        setup_accounting(self, universe, metric)
        self._Fw = design.w[:, None] * workload.dense()
        self._Fw.setflags(write=False)

    def _scale(self) -> np.ndarray:
        """2 T beta w_f per query: the per-row multiplier of Theorem 7 (0 where w_f = 0)."""
        return np.where(self.design.w == 0, 0.0, 2.0 * self.T * self.beta * self.design.w)

    @property
    def laplace_scale(self) -> float:
        """Scale 1 / beta of the measurement noise (0 when beta = inf)."""
        return 0.0 if np.isinf(self.beta) else 1.0 / self.beta

    def release(self, x, rng=None, secure: bool = True, *, return_trace: bool = False,
                accountant: Accountant | None = None):
        """Run Algorithm 2 on histogram ``x``; return the averaged synthetic histogram A.

        ``secure=True`` (default): OpenDP's exact samplers for both the selection and the
        Laplace measurement (``rng`` unused); ``secure=False``: numpy, seedable, simulations only.
        ``return_trace=True`` also returns the chosen query indices and measurements (they are
        private too: the released transcript of the 2T calls).
        ``accountant``: charged :attr:`release_cost` (all T rounds, Theorem 7) before anything is
        computed (refused: :class:`~dprivacy.errors.BudgetExceededError`, nothing charged);
        without one, the mechanism's built-in budget allows a single release.
        """
        arr = check_histogram(x, self.workload.N)
        n = float(arr.sum())
        if n <= 0:
            raise ValidationError("histogram x is empty (n = 0): MWEM needs n > 0 records")
        charge_release(self, accountant)
        gen = None if secure else noise.resolve_rng(rng)
        N = self.workload.N
        true = self._Fw @ arr
        log_a = np.full(N, np.log(n / N))
        total = np.zeros(N)
        chosen, measured = [], []
        for _ in range(self.T):
            A = np.exp(log_a)
            est = self._Fw @ A
            f = noise.exponential_choice(scaled_log_weights(self.beta, np.abs(est - true)),
                                         rng=gen, secure=secure)
            m_t = float(noise.add_laplace(true[f], self.laplace_scale, rng=gen, secure=secure))
            log_a = log_a + self._Fw[f] * (m_t - est[f]) / (2.0 * n)
            log_a = log_a - logsumexp(log_a) + np.log(n)
            total += np.exp(log_a)
            chosen.append(int(f))
            measured.append(m_t)
        out = total / self.T
        if return_trace:
            return out, np.array(chosen), np.array(measured)
        return out

    def answers(self, A) -> np.ndarray:
        """f_w(A) = w_f <f, A> per query."""
        return self._Fw @ np.asarray(A, dtype=float)

    def privacy_loss(self, i: int, j: int) -> float:
        """Bound 2 T beta max_f w_f |f_i - f_j| on the loss of moving one record i -> j."""
        F = self.workload.dense()
        d = np.abs(F[:, i] - F[:, j])
        return float(np.max(np.where(d == 0, 0.0, self._scale() * d)))

    def params(self) -> dict:
        """Parameters beyond (w, beta) that a config stores."""
        return {"T": self.T}

    # -------------------------------------------------------------- builders
    @classmethod
    def from_solver(cls, workload, universe: Universe, metric: Metric, n: int, *,
                    T: int | None = None) -> DXMWEM:
        """T and beta of Algorithm 2 / Theorem 7 via :func:`solvers.mwem_params` (T* unless T is given)."""
        W, d = solved_design(workload, universe, metric, solvers.mwem_params, n, T=T)
        return cls(W, d, T=int(d.report["T"]), universe=universe, metric=metric)

    @classmethod
    def baseline(cls, workload, universe: Universe, metric: Metric, T: int) -> DXMWEM:
        """eps_min-DP MWEM (HLM): w = 1, beta = eps_min / (2 T max_f Delta f).

        Same code path and check (Theorem 7 with w = 1) as the d_X form.
        """
        W = workload if isinstance(workload, Workload) else Workload(workload)
        W.check_universe(universe)
        if int(T) != T or T < 1:
            raise ValidationError(f"T = {T}: MWEM needs a positive integer number of rounds")
        eps = metric.eps_min(universe)
        if not np.isfinite(eps):
            raise ValidationError("no pair is constrained (eps_min = inf): the baseline is undefined")
        df = float(np.max(W.ranges()))
        beta = np.inf if df == 0 else eps / (2 * int(T) * df)
        d = as_design(W, 1.0, beta, method="baseline",
                      report={"eps": eps, "sensitivity": df, "T": int(T)},
                      constraints=metric.constraint_set(universe))
        return cls(W, d, T=int(T), universe=universe, metric=metric)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(m={self.workload.m}, N={self.workload.N}, T={self.T}, "
                f"beta={self.beta:.6g}, max_ratio={self.max_ratio_:.6g})")
