"""The d_X-private SmallDB mechanism, Algorithm 1 / Theorem 5, with exact sampling.

Candidates are all synthetic histograms of a fixed size s, R = {y in N^N : ||y||_1 = s}
(s = ceil(ln|Q| / alpha^2), DR Thm 4.2).  With normalised queries f(x) = <f, x> / ||x||_1 and
f_w = w_f f, the utility is u(x, y) = -max_f |f_w(x) - f_w(y)| (eq. (7)) and y is drawn with
probability ∝ exp(beta n u(x, y) / 2) over the whole of R (no MCMC: exact where |R| is enumerable).

Privacy condition (Theorem 5): beta * max_f w_f |f_i - f_j| <= eps_ij for every constrained pair.
n |u(x, y) - u(x', y)| <= max_f w_f |f_i - f_j| (|max a - max b| <= max |a - b| and the triangle
inequality), so Theorem 3 applies to the utility n u.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

import solvers
from dprivacy import noise
from dprivacy.design import Design
from dprivacy.errors import (
    CandidateSetTooLargeError,
    ShapeError,
    ValidationError,
)
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
from dprivacy.workload import Workload

if TYPE_CHECKING:
    from dprivacy.accounting import Accountant
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe

THEOREM_5 = "Theorem 5: beta * max_f w_f |f_i - f_j| <= eps_ij"
#: Default cap on the number of candidate histograms C(N + s - 1, s).
MAX_CANDIDATES = 2_000_000
_CACHE_CELLS = 2**22  # candidate answers kept in memory up to this many floats (32 MiB)


def synthetic_size(m: int, alpha: float) -> int:
    """s = ceil(ln|Q| / alpha^2) (DR Thm 4.2), at least 1."""
    if not 0 < alpha < 1:
        raise ValidationError(f"alpha = {alpha}: the accuracy parameter lies in (0, 1)")
    return max(1, math.ceil(math.log(m) / alpha**2))


def check_unit_queries(workload: Workload, w: np.ndarray) -> None:
    """Algorithms 1-2 take queries f in [0, 1]^N and w_f in [0, 1] (Algorithms 1 and 2)."""
    F = workload.dense()
    if F.min() < 0 or F.max() > 1:
        raise ValidationError(f"queries must lie in [0, 1]^N (got coefficients in [{F.min():.6g}, "
                              f"{F.max():.6g}]): rescale the workload")
    if np.any(w > 1):
        raise ValidationError(f"w max = {w.max():.6g}: keep w_f <= 1 so that f_w stays in [0, 1]")


class DXSmallDB:
    """d_X-private SmallDB (Algorithm 1): a synthetic histogram of ``size`` records.

    Privacy condition (Theorem 5): beta * max_f w_f |f_i - f_j| <= eps_ij for all constrained
    pairs; checked over every one of them at construction (raises PrivacyViolationError).

    Parameters
    ----------
    workload : Workload with F in [0, 1]^(m x N) (the query class Q)
    design : Design with w in [0, 1]^m and the shared beta repeated m times
    size, alpha : the synthetic size s, or alpha with s = ceil(ln m / alpha^2)
    universe, metric : optional; re-derive the constraints instead of trusting the design's
    max_candidates : refuse (CandidateSetTooLargeError) when C(N + s - 1, s) exceeds it

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.arange(4.0).reshape(-1, 1))
    >>> W = dp.Workload.range_queries(4, [(0, 1), (1, 2), (2, 3)])
    >>> mech = dp.DXSmallDB.from_solver(W, U, dp.metrics.Euclidean(1.0), n=50, size=5)
    >>> int(mech.release(np.array([20, 10, 15, 5]), rng=0, secure=False).sum())
    5
    """

    kind = "smalldb"

    def __init__(self, workload: Workload, design: Design, *, size: int | None = None,
                 alpha: float | None = None, universe: Universe | None = None,
                 metric: Metric | None = None, max_candidates: int = MAX_CANDIDATES) -> None:
        if not isinstance(workload, Workload):
            workload = Workload(workload)
        if design.m != workload.m:
            raise ShapeError(f"the design has m = {design.m}, the workload m = {workload.m}")
        check_unit_queries(workload, design.w)
        if (size is None) == (alpha is None):
            raise ValidationError("give exactly one of size= (records in the synthetic histogram) "
                                  "or alpha= (size = ceil(ln m / alpha^2))")
        if size is not None and (int(size) != size or size < 1):
            raise ValidationError(f"size = {size}: a positive integer number of records")
        if size is None:
            assert alpha is not None  # exactly one of size and alpha was given
            s = synthetic_size(workload.m, alpha)
        else:
            s = int(size)
        self.workload = workload
        self.design = design
        self.size = s
        self.beta = shared_beta(design)
        self.n_candidates = math.comb(workload.N + s - 1, s)
        if self.n_candidates > max_candidates:
            raise CandidateSetTooLargeError(
                f"exact SmallDB would enumerate C(N + s - 1, s) = C({workload.N + s - 1}, {s}) = "
                f"{self.n_candidates:.4g} candidate histograms (N = {workload.N}, s = {s}), above "
                f"max_candidates = {max_candidates:g}; use a smaller size/larger alpha, a smaller "
                "universe, or DXMWEM"
            )
        self.constraints = resolve_constraints(workload, design, universe, metric)
        self.max_ratio_ = check_max_condition(self.constraints, workload.F, self._scale(),
                                              THEOREM_5)
        setup_accounting(self, universe, metric)
        self._Fw = design.w[:, None] * workload.dense()  # (m, N) rows f_w
        self._Fw.setflags(write=False)
        self._cache: np.ndarray | None = None

    def _scale(self) -> np.ndarray:
        return np.where(self.design.w == 0, 0.0, self.beta * self.design.w)

    # ------------------------------------------------------------ candidates
    def _combos(self) -> itertools.combinations_with_replacement:
        """Candidates as multisets of s element indices (y = their bincount), in a fixed order."""
        return itertools.combinations_with_replacement(range(self.workload.N), self.size)

    def _answer_blocks(self):
        """Yield (start, f_w(y) of shape (k, m)) over all candidates, in blocks."""
        if self._cache is not None:
            yield 0, self._cache
            return
        s, m = self.size, self.workload.m
        chunk = max(1, _CACHE_CELLS // (s * max(m, 1)))
        it, start = self._combos(), 0
        keep = self.n_candidates * m <= _CACHE_CELLS
        parts = []
        FwT = self._Fw.T  # (N, m)
        while True:
            flat = np.fromiter(itertools.chain.from_iterable(itertools.islice(it, chunk)),
                               dtype=np.int64)
            if flat.size == 0:
                break
            C = flat.reshape(-1, s)
            A = FwT[C].sum(axis=1) / s
            if keep:
                parts.append(A)
            yield start, A
            start += C.shape[0]
        if keep:
            self._cache = np.concatenate(parts)

    def candidate(self, r: int) -> np.ndarray:
        """The r-th candidate histogram y (length N, sum s)."""
        combo = next(itertools.islice(self._combos(), int(r), None))
        return np.bincount(np.asarray(combo, dtype=np.int64), minlength=self.workload.N)

    def log_weights(self, x) -> np.ndarray:
        """beta n u(x, y) / 2 for every candidate y, u = -max_f |f_w(x) - f_w(y)| (eq. (7))."""
        arr = check_histogram(x, self.workload.N)
        n = float(arr.sum())
        if n <= 0:
            raise ValidationError("histogram x is empty (n = 0): SmallDB normalises by n")
        ax = self._Fw @ arr / n
        util = np.empty(self.n_candidates)
        for start, A in self._answer_blocks():
            util[start:start + A.shape[0]] = -n * np.max(np.abs(A - ax), axis=1)
        return scaled_log_weights(self.beta, util)

    def release(self, x, rng=None, secure: bool = True, *,
                accountant: Accountant | None = None) -> np.ndarray:
        """Sample a synthetic histogram y (``size`` records) with Pr ∝ exp(beta n u(x, y) / 2).

        ``secure=True`` (default): OpenDP's exact Gumbel report-noisy-max (``rng`` unused);
        ``secure=False``: numpy's seedable Gumbel-max, for simulations only.
        ``accountant``: charged :attr:`release_cost` before anything is computed (refused:
        :class:`~dprivacy.errors.BudgetExceededError`, nothing charged); without one, the
        mechanism's built-in budget allows a single release.
        """
        arr = check_histogram(x, self.workload.N)
        if not float(arr.sum()) > 0:
            raise ValidationError("histogram x is empty (n = 0): SmallDB normalises by n")
        charge_release(self, accountant)
        r = noise.exponential_choice(self.log_weights(x), rng=rng, secure=secure)
        return self.candidate(r)

    def answers(self, y, n: float | None = None) -> np.ndarray:
        """f_w(y) = w_f <f, y> / ||y||_1 per query (times n when given: counts, not fractions)."""
        arr = check_histogram(y, self.workload.N)
        out = self._Fw @ arr / arr.sum()
        return out if n is None else out * float(n)

    def privacy_loss(self, i: int, j: int) -> float:
        """Bound beta * max_f w_f |f_i - f_j| on the loss of moving one record i -> j."""
        d = np.abs(self.workload.dense()[:, i] - self.workload.dense()[:, j])
        return float(np.max(np.where(d == 0, 0.0, self._scale() * d)))

    def params(self) -> dict:
        """Parameters beyond (w, beta) that a config stores."""
        return {"size": self.size}

    # -------------------------------------------------------------- builders
    @classmethod
    def from_solver(cls, workload, universe: Universe, metric: Metric, n: int, *,
                    size: int | None = None, alpha: float | None = None, delta: float = 0.05,
                    max_candidates: int = MAX_CANDIDATES) -> DXSmallDB:
        """(w, beta) from problem (8) via :func:`solvers.smalldb_params` for n records."""
        W, d = solved_design(workload, universe, metric, solvers.smalldb_params, n, delta=delta)
        return cls(W, d, size=size, alpha=alpha, universe=universe, metric=metric,
                   max_candidates=max_candidates)

    @classmethod
    def baseline(cls, workload, universe: Universe, metric: Metric, *, size: int | None = None,
                 alpha: float | None = None, max_candidates: int = MAX_CANDIDATES) -> DXSmallDB:
        """eps_min-DP SmallDB (DR Alg. 4 with Definition 6): w = 1, beta = eps_min / max_f Delta f.

        Same code path and check (Theorem 5 with w = 1) as the d_X form.
        """
        W = workload if isinstance(workload, Workload) else Workload(workload)
        W.check_universe(universe)
        eps = metric.eps_min(universe)
        if not np.isfinite(eps):
            raise ValidationError("no pair is constrained (eps_min = inf): the baseline is undefined")
        df = float(np.max(W.ranges()))
        beta = np.inf if df == 0 else eps / df
        d = as_design(W, 1.0, beta, method="baseline", report={"eps": eps, "sensitivity": df},
                      constraints=metric.constraint_set(universe))
        return cls(W, d, size=size, alpha=alpha, universe=universe, metric=metric,
                   max_candidates=max_candidates)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(m={self.workload.m}, N={self.workload.N}, size={self.size},"
                f" candidates={self.n_candidates}, beta={self.beta:.6g})")
