"""ε-DP aggregations of PINQ and ProPer tables, planned before the charge and run after it.

Each ``*_plan`` function checks the analyst's arguments (ε, the clamping range, the value
specification, the candidates) and the noise scales they imply, raising
:class:`~dprivacy.errors.ValidationError` BEFORE anything is charged; it returns a plan
``plan(relation, noise) -> answer`` that the table runs only after the charge has been committed.
The plan asks the relation for one exact aggregate (computed in the engine) and adds noise in the
driver from the table's :class:`~dprivacy.tables.randomness.NoiseSource`. Every plan is total: an
empty table gives a noisy answer, huge values saturate, nothing raises because of the records.

Each is ε-DP with respect to adding or removing one record (unbounded DP, PINQ §2):

* count: |T| + Lap(1/ε) (sensitivity 1).
* sum: values clamped to [lo, hi]; Σ + Lap(max(|lo|, |hi|)/ε).
* average: ε/2 on the sum of the centred clamped values (sensitivity (hi−lo)/2) and ε/2 on the
  count; the ratio is post-processing, clamped to [lo, hi] (sequential composition).
* order statistic / median: the exponential mechanism over a finite, data-independent list of
  candidates (given, or a grid over [lo, hi]) with OpenDP's exact rank-based quantile score and
  an exact sampler (see :mod:`dprivacy.tables.quantiles`); the output is always a candidate.
* exponential mechanism: per-record scores clamped to [0, 1] summed per candidate; adding a
  record raises every utility by a value in [0, 1] (a monotone utility), so P(r) ∝ exp(ε·u_r) is
  ε-DP (Dwork & Roth 2014, remark after Theorem 3.10).

Values come from a column name or a row-wise function (a per-record callable on pandas, an Ibis
expression on the engines); NaN, non-numbers and failures count as the midpoint (lo + hi)/2,
±inf clamp to lo / hi.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.tables import quantiles
from dprivacy.tables.params import eps_arg, frac_arg, range_arg, real
from dprivacy.tables.randomness import NoiseSource
from dprivacy.tables.relations.protocol import Relation, ValueSpec

__all__ = ["Plan", "ScorePlan", "count_plan", "sum_plan", "gaussian_count_plan",
           "gaussian_sum_plan", "average_plan", "order_statistic_plan",
           "exponential_plan", "value_spec"]

Plan = Callable[[Relation, NoiseSource], Any]
ScorePlan = Callable[[Relation, NoiseSource, Any], Any]
"""A plan that also takes the analyst's score function (the exponential mechanism)."""


def _scale(sens: float, eps: float) -> float:
    s = sens / eps
    if not math.isfinite(s):
        raise ValidationError(
            f"the noise scale {sens}/eps = {s} is not finite: use a larger eps or a narrower range"
        )
    return s


def value_spec(f: ValueSpec | None, columns: Sequence[Hashable], check: Callable[[Any], None]
               ) -> ValueSpec:
    """The value specification of an aggregation, checked against the public schema.

    ``None`` means the table's only column; a string must name a column; anything else is
    row-wise analyst code, checked by the relation's ``check`` (before any charge)."""
    if f is None:
        if len(columns) != 1:
            raise ValidationError(
                f"the table has {len(columns)} columns: pass f (a column name or a function)")
        return str(columns[0]) if not isinstance(columns[0], str) else columns[0]
    if isinstance(f, str):
        if f not in columns:
            raise ValidationError(f"f = {f!r} is not a column; columns are {list(columns)}")
        return f
    check(f)
    return f


def count_plan(eps: Any) -> tuple[float, Plan]:
    """(ε as a float, plan of NoisyCount: |T| + Lap(1/ε))."""
    e = eps_arg(eps)
    scale = _scale(1.0, e)

    def run(rel: Relation, noise: NoiseSource) -> float:
        return float(noise.add_laplace(float(rel.count()), scale))

    return e, run


def sum_plan(eps: Any, f: ValueSpec, lo: Any, hi: Any) -> tuple[float, Plan]:
    """NoisySum: Σ clamp(f(x), lo, hi) + Lap(max(|lo|, |hi|)/ε)."""
    e = eps_arg(eps)
    a, b = range_arg(lo, hi)
    scale = _scale(max(abs(a), abs(b)), e)

    def run(rel: Relation, noise: NoiseSource) -> float:
        return float(noise.add_laplace(rel.clamped_sum(f, a, b), scale))

    return e, run


def _rho(rho: Any) -> float:
    r = real(rho, "rho")
    if not (r > 0 and math.isfinite(r)):
        raise ValidationError(f"rho = {rho!r}: a zCDP cost is a finite number > 0")
    return r


def gaussian_count_plan(rho: Any) -> tuple[float, Plan]:
    """(rho, plan of |T| + exact discrete Gaussian of sigma = 1/sqrt(2 rho)): sensitivity 1, so
    the Rényi divergence of order α is α / (2 sigma²) = α rho (rho-zCDP)."""
    r = _rho(rho)
    sigma = _scale(1.0, math.sqrt(2.0 * r))

    def run(rel: Relation, noise: NoiseSource) -> float:
        return float(noise.add_discrete_gaussian(int(rel.count()), sigma))
    return r, run


def gaussian_sum_plan(rho: Any, f: ValueSpec, lo: Any, hi: Any) -> tuple[float, Plan]:
    """(rho, plan of Σ clamp(f(x), lo, hi) + N(0, sigma²)), sigma = max(|lo|, |hi|)/sqrt(2 rho)."""
    r = _rho(rho)
    a, b = range_arg(lo, hi)
    sigma = _scale(max(abs(a), abs(b)), math.sqrt(2.0 * r))

    def run(rel: Relation, noise: NoiseSource) -> float:
        return float(noise.add_gaussian(rel.clamped_sum(f, a, b), sigma))
    return r, run


def average_plan(eps: Any, f: ValueSpec, lo: Any, hi: Any) -> tuple[float, Plan]:
    """NoisyAverage: (noisy centred sum at ε/2) / (noisy count at ε/2), clamped to [lo, hi]."""
    e = eps_arg(eps)
    a, b = range_arg(lo, hi)
    mid, half = a / 2 + b / 2, b / 2 - a / 2
    scales = np.array([_scale(2 * half, e), _scale(2.0, e)])

    def run(rel: Relation, noise: NoiseSource) -> float:
        v = rel.clamped_values(f, a, b)
        centred = float(np.clip(((v - mid) * 2.0**-64).sum() * 2.0**64, -1e308, 1e308))
        s, c = (float(x) for x in noise.add_laplace(np.array([centred, float(v.size)]), scales))
        with np.errstate(all="ignore"):
            out = mid + s / max(c, 1.0)
        return float(np.clip(np.nan_to_num(out, nan=mid), a, b))

    return e, run


def order_statistic_plan(eps: Any, frac: Any, f: ValueSpec, lo: Any, hi: Any,
                         candidates: Any = None) -> tuple[float, Plan]:
    """NoisyOrderStatistic: one of the candidates, by the exponential mechanism with the
    rank-based quantile score (see :mod:`dprivacy.tables.quantiles`)."""
    e = eps_arg(eps)
    q = frac_arg(frac)
    cands, a, b = quantiles.candidates_arg(lo, hi, candidates)
    num, den = quantiles.alpha(q)
    scale = quantiles.score_scale(e, num, den)

    def run(rel: Relation, noise: NoiseSource) -> float:
        if cands.size == 1:
            return float(cands[0])
        lt, eq, n = rel.rank_counts(f, a, b, cands)
        rng, _ = noise.release_rng()
        k = quantiles.choose(quantiles.scores(lt, eq, n, num, den), scale, rng)
        return float(cands[k])

    return e, run


def exponential_plan(eps: Any, candidates: Sequence[Any]
                     ) -> tuple[float, list[Any], ScorePlan]:
    """Exponential mechanism: candidate r with probability ∝ exp(ε·Σ_x clamp(score(x, r), 0, 1))
    (the score function is passed to the plan)."""
    e = eps_arg(eps)
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise ValidationError("candidates must be a list (or tuple) of public candidates")
    cands = list(candidates)
    if not cands:
        raise ValidationError("candidates is empty: the exponential mechanism needs a range")

    def run(rel: Relation, noise: NoiseSource, score: Any = None) -> Any:
        util = np.asarray(rel.score_sums(score, cands), dtype=float)
        util = np.nan_to_num(util, nan=0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            logw = e * (util - util.max())
        logw = np.where(np.isnan(logw), -np.inf, logw)
        return cands[noise.choice(logw)]

    return e, cands, run
