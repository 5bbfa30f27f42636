"""ε-DP aggregations on a pandas DataFrame (the noisy primitives of PINQ, spec §2.3 [EXT]).

These kernels only compute and add noise; the caller (a PINQ :class:`~dprivacy.tables.Queryable`
or a :class:`~dprivacy.tables.ProPerTable`) charges the budget *before* calling them. Every
kernel is ε-DP with respect to adding or removing one record of ``df`` (unbounded DP, spec §1):

* ``count``: count + Lap(1/ε) (sensitivity 1).
* ``sum``: values clamped to [lo, hi], sum + Lap(max(|lo|, |hi|)/ε).
* ``average``: ε/2 on a noisy sum of the centred clamped values (sensitivity (hi−lo)/2) and ε/2
  on a noisy count; the ratio is post-processing, clamped to [lo, hi] (sequential composition).
* ``order_statistic`` / ``median``: the exponential mechanism over [lo, hi] with utility
  u(z) = −|#{v < z} − q·n| (|Δu| ≤ 1 per added record), density ∝ exp(ε·u(z)/2) (McSherry–Talwar).
* ``exponential``: per-record scores clamped to [0, 1] and summed per candidate; adding a record
  raises every candidate's utility by a value in [0, 1] (a monotone utility), so
  P(r) ∝ exp(ε·u_r) is ε-DP (Dwork & Roth 2014, remark after Thm 3.10).

Values are taken from a column name or a vectorised callable ``f(df) -> array``; NaN values are
replaced by the midpoint of [lo, hi] before clamping (so NaN cannot make a release fail).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from dprivacy import noise
from dprivacy.errors import ValidationError
from dprivacy.noise import Rng

__all__ = ["count", "sum_", "average", "order_statistic", "exponential", "ValueSpec"]

ValueSpec = str | Callable[[pd.DataFrame], Any] | None


def check_range(lo: float, hi: float) -> None:
    """Validate a clamping range (before anything is charged)."""
    if not (np.isfinite(lo) and np.isfinite(hi)) or not lo < hi:
        raise ValidationError(f"clamping range (lo, hi) = ({lo}, {hi}): need finite lo < hi")


def values(df: pd.DataFrame, f: ValueSpec, lo: float, hi: float) -> np.ndarray:
    """The clamped float values f(df) in [lo, hi] (NaN -> midpoint)."""
    if f is None:
        if df.shape[1] != 1:
            raise ValidationError(
                f"the table has {df.shape[1]} columns: pass f (a column name or a function)"
            )
        raw = df.iloc[:, 0].to_numpy()
    elif isinstance(f, str):
        if f not in df.columns:
            raise ValidationError(f"f = {f!r} is not a column; columns are {list(df.columns)}")
        raw = df[f].to_numpy()
    else:
        raw = f(df)
    v = np.asarray(raw, dtype=float).reshape(-1)
    if v.shape[0] != len(df):
        raise ValidationError(f"f returned {v.shape[0]} values for {len(df)} records: need one each")
    return np.clip(np.nan_to_num(v, nan=(lo + hi) / 2, posinf=hi, neginf=lo), lo, hi)


def count(df: pd.DataFrame, eps: float, *, rng: Rng = None, secure: bool = True) -> float:
    """NoisyCount: |df| + Lap(1/ε)."""
    return float(noise.add_laplace(float(len(df)), 1.0 / eps, rng=rng, secure=secure))


def sum_(
    df: pd.DataFrame, eps: float, f: ValueSpec, lo: float, hi: float, *, rng: Rng = None,
    secure: bool = True,
) -> float:
    """NoisySum: Σ clamp(f(x), lo, hi) + Lap(max(|lo|, |hi|)/ε)."""
    v = values(df, f, lo, hi)
    sens = max(abs(lo), abs(hi))
    return float(noise.add_laplace(float(v.sum()), sens / eps, rng=rng, secure=secure))


def average(
    df: pd.DataFrame, eps: float, f: ValueSpec, lo: float, hi: float, *, rng: Rng = None,
    secure: bool = True,
) -> float:
    """NoisyAverage: (noisy centred sum at ε/2) / (noisy count at ε/2), clamped to [lo, hi]."""
    v = values(df, f, lo, hi)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    noisy = cast(np.ndarray, noise.add_laplace(  # an array: the values have shape (2,)
        np.array([float((v - mid).sum()), float(len(v))]),
        np.array([2 * half / eps, 2 / eps]),
        rng=rng,
        secure=secure,
    ))
    s, c = float(noisy[0]), float(noisy[1])
    return float(np.clip(mid + s / max(c, 1.0), lo, hi))


def order_statistic(
    df: pd.DataFrame, eps: float, frac: float, f: ValueSpec, lo: float, hi: float, *,
    rng: Rng = None, secure: bool = True,
) -> float:
    """NoisyOrderStatistic: a point z of [lo, hi] with density ∝ exp(−ε·|#{v<z} − frac·n|/2)."""
    if not 0 <= frac <= 1:
        raise ValidationError(f"frac = {frac}: an order statistic needs 0 <= frac <= 1")
    v = np.sort(values(df, f, lo, hi))
    n = v.shape[0]
    edges = np.concatenate(([lo], v, [hi]))
    lengths = np.diff(edges)  # interval j has j values below it
    util = -np.abs(np.arange(n + 1) - frac * n)
    with np.errstate(divide="ignore"):
        logw = np.log(lengths) + eps * util / 2
    j = noise.exponential_choice(logw, rng=rng, secure=secure)
    gen = noise.resolve_rng(rng)
    return float(edges[j] + gen.uniform() * lengths[j])


def exponential(
    df: pd.DataFrame, eps: float, candidates: Sequence[Any],
    score: Callable[[pd.DataFrame], Any], *, rng: Rng = None, secure: bool = True,
) -> Any:
    """Exponential mechanism: candidate r with probability ∝ exp(ε·Σ_x clamp(score(x, r), 0, 1)).

    ``score(df)`` returns an array of shape (len(df), len(candidates)) of per-record scores.
    """
    cands = list(candidates)
    if not cands:
        raise ValidationError("candidates is empty: the exponential mechanism needs a range")
    s = np.asarray(score(df), dtype=float)
    if s.size == 0 and len(df) == 0:
        s = np.zeros((0, len(cands)))
    if s.shape != (len(df), len(cands)):
        raise ValidationError(
            f"score(df) has shape {s.shape}: expected (records, candidates) = "
            f"({len(df)}, {len(cands)})"
        )
    util = np.clip(np.nan_to_num(s, nan=0.0), 0.0, 1.0).sum(axis=0)
    return cands[noise.exponential_choice(eps * util, rng=rng, secure=secure)]
