"""Empirical privacy audit: a statistical lower bound on the privacy loss of one pair (i, j).

Definition 2 requires Pr[M(x) in S] <= exp(eps_ij) Pr[M(x') in S] for x' = x - e_i + e_j and
every event S (and the same with x, x' swapped).  :func:`audit` samples the mechanism on both
histograms, projects each output to one number, and

1. on a *pilot* sample, bins the projection (its distinct values when there are few, else
   quantile bins), ranks the bins by their empirical likelihood ratio and picks, among the
   unions of the top-k bins in either direction, the event S with the best pilot lower bound;
2. on *fresh* samples, bounds p = Pr[M(x) in S] from below and q = Pr[M(x') in S] from above
   with one-sided Clopper-Pearson intervals (scipy.stats.beta), each at level (1 - confidence)/2,
   so that ``eps_lower_bound = ln(p_lo / q_hi)`` is a valid lower bound on the true loss with
   probability >= ``confidence`` (S is chosen independently of the fresh samples).

``violated`` is True when that lower bound exceeds eps_ij: the mechanism then breaks its privacy
condition with high confidence.  An audit can only ever refute privacy, never prove it.
Sampling uses the fast numpy path (``secure=False``) with the audit's ``rng``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dprivacy.accounting import Accountant
from dprivacy.errors import ValidationError
from dprivacy.mechanisms.laplace import check_histogram
from dprivacy.noise import resolve_rng


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit` for the move of one record from element i to element j.

    ``eps_lower_bound`` holds with probability >= ``confidence``; ``eps_estimate`` is the plain
    estimate ln(p_hat / q_hat) on the chosen event; ``violated`` = eps_lower_bound > eps_ij.
    ``direction`` is "x/x'" when S is more likely under x, "x'/x" otherwise.
    """

    i: int
    j: int
    eps_ij: float
    eps_lower_bound: float
    eps_estimate: float
    violated: bool
    samples: int
    pilot_samples: int
    confidence: float
    p_hat: float
    q_hat: float
    direction: str
    event: str


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (lower, upper) on a binomial p, each at level alpha."""
    from scipy.stats import beta as beta_dist  # scipy.stats is slow to import; load on use

    lo = 0.0 if k == 0 else float(beta_dist.ppf(alpha, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1 - alpha, k + 1, n - k))
    return lo, hi


def _log_ratio_lower(kp: int, kq: int, n: int, alpha: float) -> float:
    p_lo = clopper_pearson(kp, n, alpha)[0]
    q_hi = clopper_pearson(kq, n, alpha)[1]
    return -np.inf if p_lo <= 0 else float(np.log(p_lo / q_hi))


def _draw(mechanism: Any, x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    # an audit samples the mechanism on synthetic neighbouring histograms: a simulation, so its
    # releases are counted on an unlimited accountant of their own
    try:
        takes = "accountant" in inspect.signature(mechanism.release).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        takes = False
    kw = {"accountant": Accountant(total=math.inf, name="audit simulation")} if takes else {}
    outs = [np.atleast_1d(np.asarray(mechanism.release(x, rng=rng, secure=False, **kw),
                                     dtype=float)) for _ in range(k)]
    return np.vstack(outs)


class _Binner:
    """Maps projections to bin ids, fitted on the pilot (categorical when few values)."""

    def __init__(self, pooled: np.ndarray, bins: int) -> None:
        vals = np.unique(pooled)
        self.categorical = vals.size <= bins
        if self.categorical:
            self.values = vals
            self.n_bins = vals.size + 1  # last bin: values unseen in the pilot
        else:
            edges = np.unique(np.quantile(pooled, np.linspace(0, 1, bins + 1)[1:-1]))
            self.edges = edges
            self.n_bins = edges.size + 1

    def __call__(self, z: np.ndarray) -> np.ndarray:
        if self.categorical:
            pos = np.clip(np.searchsorted(self.values, z), 0, self.values.size - 1)
            return np.where(self.values[pos] == z, pos, self.values.size)
        return np.searchsorted(self.edges, z, side="right")

    def describe(self, ids: np.ndarray) -> str:
        ids = np.sort(ids)
        if self.categorical:
            vals = [f"{self.values[b]:.6g}" if b < self.values.size else "other" for b in ids]
            return "projection in {" + ", ".join(vals[:12]) + (", ..." if len(vals) > 12 else "") + "}"
        lo = np.concatenate([[-np.inf], self.edges])
        hi = np.concatenate([self.edges, [np.inf]])
        parts = [f"[{lo[b]:.4g}, {hi[b]:.4g})" for b in ids]
        return "projection in " + " u ".join(parts[:8]) + (" u ..." if len(parts) > 8 else "")


def _budget(mechanism: Any, i: int, j: int) -> float:
    cs = getattr(mechanism, "constraints", None)
    if cs is None and getattr(mechanism, "design", None) is not None:
        cs = mechanism.design.constraints
    if cs is None:
        raise ValidationError("the mechanism carries no constraint set: pass eps_ij= explicitly")
    eps = float(cs.pair_eps(np.array([i]), np.array([j]))[0])
    if np.isinf(eps) and cs.kind == "edges":
        # a graph metric is the shortest-path distance over its edges (also points on a line)
        from scipy.sparse import coo_array
        from scipy.sparse.csgraph import dijkstra

        I, J, E = cs.edge_arrays()  # noqa: N806, E741
        g = coo_array((E, (I, J)), shape=(cs.N, cs.N)).tocsr()
        eps = float(dijkstra(g, directed=False, indices=[int(i)])[0, j])
    return eps


def audit(mechanism: Any, x, i: int, j: int, samples: int = 20000, rng=None, *,
          eps_ij: float | None = None, confidence: float = 0.95, pilot_fraction: float = 0.25,
          bins: int = 30, projection: Callable[[np.ndarray], float] | None = None) -> AuditResult:
    """Statistical lower bound on the privacy loss between x and x - e_i + e_j.

    Parameters
    ----------
    mechanism : any object with ``release(x, rng, secure)`` (DXLaplace, DXExponential,
        DXSmallDB, DXMWEM, the baselines, or your own).
    x : histogram with x[i] >= 1 (a record at element i to move to element j).
    samples : draws per histogram, pilot included.
    rng : seed or Generator (outputs are drawn with ``secure=False``).
    eps_ij : the budget of the pair; default from the mechanism's constraint set.
    confidence : probability that ``eps_lower_bound`` is below the true loss.
    pilot_fraction : share of the samples used to choose the event S.
    bins : number of bins of the projection (or the cut-off for treating it as categorical).
    projection : output -> float; default: the output itself when it is a scalar, else its
        inner product with the pilot's mean difference between x and x'.

    Returns
    -------
    AuditResult, with ``violated = eps_lower_bound > eps_ij``.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> W, M = dp.Workload([[0.0, 1.0, 2.0]]), dp.metrics.Euclidean(1.0)
    >>> mech = dp.DXLaplace(W, dp.design(W, U, M, method="closed_form"))
    >>> r = audit(mech, np.array([4, 2, 1]), 0, 1, samples=4000, rng=0)
    >>> r.violated, r.eps_ij, r.eps_lower_bound <= 1.0
    (False, 1.0, True)
    """
    arr = check_histogram(x, len(np.asarray(x)))
    N = arr.shape[0]
    if not (0 <= i < N and 0 <= j < N) or i == j:
        raise ValidationError(f"(i, j) = ({i}, {j}): need two distinct elements in [0, {N})")
    if arr[i] < 1:
        raise ValidationError(f"x[{i}] = {arr[i]}: no record at element {i} to move")
    if not 0 < confidence < 1 or not 0 < pilot_fraction < 1:
        raise ValidationError("confidence and pilot_fraction lie in (0, 1)")
    x2 = arr.copy()
    x2[i] -= 1
    x2[j] += 1
    budget = _budget(mechanism, i, j) if eps_ij is None else float(eps_ij)
    gen = resolve_rng(rng)
    n_pilot = max(50, int(samples * pilot_fraction))
    n_main = int(samples) - n_pilot
    if n_main < 50:
        raise ValidationError(f"samples = {samples}: too few (need >= {n_pilot + 50})")
    alpha = (1 - confidence) / 2

    pa, pb = _draw(mechanism, arr, n_pilot, gen), _draw(mechanism, x2, n_pilot, gen)
    if projection is not None:
        def project(o: np.ndarray) -> np.ndarray:
            return np.array([float(projection(r)) for r in o])
    elif pa.shape[1] == 1:
        def project(o: np.ndarray) -> np.ndarray:
            return o[:, 0]
    else:
        v = pa.mean(axis=0) - pb.mean(axis=0)
        v = v if np.any(v != 0) else np.eye(pa.shape[1])[0]

        def project(o: np.ndarray) -> np.ndarray:
            return o @ v
    za, zb = project(pa), project(pb)
    binner = _Binner(np.concatenate([za, zb]), bins)
    ca = np.bincount(binner(za), minlength=binner.n_bins)
    cb = np.bincount(binner(zb), minlength=binner.n_bins)

    best = (-np.inf, np.array([0]), 1)
    for sign in (1, -1):  # +1: S more likely under x; -1: under x'
        num, den = (ca, cb) if sign == 1 else (cb, ca)
        order = np.argsort(-np.log((num + 0.5) / (den + 0.5)), kind="stable")
        cum_p, cum_q = np.cumsum(num[order]), np.cumsum(den[order])
        for k in range(order.size):
            score = _log_ratio_lower(int(cum_p[k]), int(cum_q[k]), n_pilot, alpha)
            if score > best[0]:
                best = (score, order[:k + 1], sign)
    _, event_bins, sign = best

    ma, mb = _draw(mechanism, arr, n_main, gen), _draw(mechanism, x2, n_main, gen)
    in_a = np.isin(binner(project(ma)), event_bins)
    in_b = np.isin(binner(project(mb)), event_bins)
    kp, kq = (int(in_a.sum()), int(in_b.sum())) if sign == 1 else (int(in_b.sum()), int(in_a.sum()))
    lower = max(0.0, _log_ratio_lower(kp, kq, n_main, alpha))
    with np.errstate(divide="ignore"):
        est = float(np.log(kp / kq)) if kp > 0 and kq > 0 else (np.inf if kp > 0 else 0.0)
    return AuditResult(
        i=int(i), j=int(j), eps_ij=budget, eps_lower_bound=lower, eps_estimate=est,
        violated=bool(lower > budget), samples=n_main, pilot_samples=n_pilot,
        confidence=float(confidence), p_hat=kp / n_main, q_hat=kq / n_main,
        direction="x/x'" if sign == 1 else "x'/x", event=binner.describe(event_bins),
    )
