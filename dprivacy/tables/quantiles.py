"""Noisy order statistics (median, quantiles) over data-independent candidates.

The released value is always one of a finite list of **candidates** fixed before the data is
read: a list given by the analyst, or the grid ``numpy.linspace(lo, hi, grid)`` (default
:data:`DEFAULT_GRID` = 1025 points, i.e. a resolution of (hi − lo)/1024: on [0, 1] the
points k/1024 are exact binary fractions). No data value ever flows into the output, so its bits
cannot depend on the records (an output built from a data value, e.g. a point drawn uniformly
between two records, has low-order bits that tell records apart).

The candidate is chosen by the exponential mechanism (McSherry & Talwar 2007) with the rank-based
quantile score of OpenDP's ``make_quantile_score_candidates`` (Smith 2011): with the values
v = clamp(f(x), lo, hi) (NaN, non-numbers and failures count as (lo + hi)/2) and the quantile
α = num/den (``frac`` read as the nearest fraction with denominator ≤ 10 000),

    score(c) = | den · #{v < c} − num · (n − #{v = c}) |   (an exact integer; lower is better),

and P(c) ∝ exp(−ε · score(c) / (2Δ)) with Δ = max(num, den − num): adding or removing one
record moves #{v < c} or #{v > c} = n − #{v < c} − #{v = c} by one, so every score moves by at
most Δ, and the exponential mechanism with utility −score is ε-DP (Dwork & Roth 2014,
Theorem 3.10). The engine computes only the exact integer counts #{v < c} and #{v = c} per
candidate; the driver forms the integer scores and samples with OpenDP's exact report-noisy-min
with Gumbel noise of scale 2Δ/ε (rounded up), which is exactly the exponential mechanism and
floating-point-safe (secure source), or with numpy's Gumbel draws for a seeded table
(simulations only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.tables.params import range_arg, real
from dprivacy.tables.relations.ranks import counts_from_sorted

__all__ = ["DEFAULT_GRID", "MAX_CANDIDATES", "ALPHA_DENOMINATOR", "candidates_arg", "alpha",
           "scores", "counts_from_sorted", "score_scale", "choose"]

DEFAULT_GRID = 1025
"""Default number of grid points over [lo, hi] (a resolution of (hi − lo)/1024)."""
MAX_CANDIDATES = 10_000
"""At most this many candidates (user list or grid)."""
ALPHA_DENOMINATOR = 10_000
"""``frac`` is read as the nearest fraction num/den with den ≤ this (as OpenDP's default)."""


def candidates_arg(lo: Any, hi: Any, candidates: Any) -> tuple[np.ndarray, float, float]:
    """(candidates as a strictly increasing float array inside [lo, hi], lo, hi).

    ``candidates`` is None (the default grid), an int m >= 2 (the grid of m points over
    [lo, hi]; lo, hi default to 0, 1) or a list of finite numbers (sorted here; duplicates
    refused; lo, hi default to the smallest and largest candidate). Checked before any charge."""
    if candidates is None or (isinstance(candidates, (int, np.integer))
                              and not isinstance(candidates, bool)):
        m = DEFAULT_GRID if candidates is None else int(candidates)
        if not 2 <= m <= MAX_CANDIDATES:
            raise ValidationError(f"grid = {m} points: need 2 <= grid <= {MAX_CANDIDATES}")
        lo, hi = range_arg(0.0 if lo is None else lo, 1.0 if hi is None else hi)
        grid = np.linspace(lo, hi, m)
        grid[0], grid[-1] = lo, hi
        if not np.all(np.diff(grid) > 0):
            raise ValidationError(f"[{lo}, {hi}] is too narrow for {m} distinct grid points")
        return grid, lo, hi
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, (Sequence, np.ndarray)):
        raise ValidationError("candidates must be None (the default grid), a number of grid "
                              "points, or a list of numbers")
    vals = [real(c, "candidate") for c in candidates]
    if not 1 <= len(vals) <= MAX_CANDIDATES:
        raise ValidationError(f"{len(vals)} candidates: need 1 to {MAX_CANDIDATES}")
    arr = np.sort(np.asarray(vals, dtype=float))
    if np.any(np.diff(arr) <= 0):
        raise ValidationError("candidates must be distinct")
    a = float(arr[0]) if lo is None else lo
    b = float(arr[-1]) if hi is None else hi
    if arr.size == 1 and lo is None and hi is None:
        a = b = float(arr[0])  # one candidate: released whatever the data
    else:
        a, b = range_arg(a, b)
    if arr[0] < a or arr[-1] > b:
        raise ValidationError(f"candidates must lie in [lo, hi] = [{a}, {b}]")
    return arr, a, b


def alpha(frac: float) -> tuple[int, int]:
    """``frac`` as (num, den): the nearest fraction with den ≤ :data:`ALPHA_DENOMINATOR`."""
    f = Fraction(frac).limit_denominator(ALPHA_DENOMINATOR)
    return f.numerator, f.denominator


def scores(lt: Sequence[int] | np.ndarray, eq: Sequence[int] | np.ndarray, n: int, num: int,
           den: int) -> list[int]:
    """The exact integer scores |den·#{v<c} − num·(n − #{v=c})| (Python ints), capped at
    2^64 − 1 (the sampler's integer type; capping keeps the sensitivity)."""
    cap = (1 << 64) - 1
    return [min(abs(den * int(a) - num * (int(n) - int(e))), cap)
            for a, e in zip(lt, eq, strict=True)]


def score_scale(eps: float, num: int, den: int) -> float:
    """Gumbel scale 2Δ/ε (Δ = max(num, den − num)), rounded up so the mechanism is ε-DP."""
    sens = max(num, den - num)
    s = 2.0 * sens / eps
    if not math.isfinite(s) or s <= 0:
        raise ValidationError(f"the score scale 2*{sens}/eps = {s} is not a positive finite "
                              "number: use another eps")
    return math.nextafter(s, math.inf)


@lru_cache(maxsize=64)
def _noisy_min(scale: float) -> Any:
    """OpenDP's report-noisy-min with Gumbel noise of ``scale`` on u64 scores (exact)."""
    import opendp.prelude as dp

    from dprivacy.noise import _opendp_contrib

    with _opendp_contrib():
        space = dp.vector_domain(dp.atom_domain(T="u64")), dp.linf_distance(T="u64")
        return dp.m.make_noisy_max(*space, dp.zero_concentrated_divergence(), scale=scale,
                                   negate=True)


def choose(score_list: list[int], scale: float, rng: np.random.Generator | None) -> int:
    """An index k with probability ∝ exp(−score_k / scale): exact (OpenDP) when ``rng`` is
    None, numpy's Gumbel-max with the data owner's seeded generator otherwise."""
    if len(score_list) == 1:
        return 0
    if rng is None:
        return int(_noisy_min(scale)(score_list))
    s = np.asarray(score_list, dtype=float)
    return int(np.argmax(-(s - s.min()) / scale + rng.gumbel(size=s.size)))
