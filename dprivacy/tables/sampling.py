"""Sampling and partitioning with probabilistic stability (Paper III; spec PINQ_PROPER.md §7).

A sampler RS is σ-probabilistically stable if M∘RS is σ(ε)-DP for every ε-DP M (P-III Def. 5).
Each operator here returns a PINQ :class:`~dprivacy.tables.Queryable` whose agent is a
:class:`~dprivacy.tables.agents.SigmaAgent`: queries of total accuracy E on the sample cost
σ(E) upstream (σ's composed from the mechanism back to the source, §7.1 [NOTE]).

Costs (spec §7.6, with the corrections [R] of the spec):

=============================  ===================================  =============================
operator                       σ(ε) (sample)                        σ̂(ε) (sample + complement)
=============================  ===================================  =============================
fixed size n, no replacement   ln((n e^{2ε} + 1)/(n + 1))  (Thm 6)  ln((n e^{3ε} + e^{ε})/(n + 1)) [R]
fixed size n, replacement      n·ε (group privacy lower bound §7.3)  –
fraction p                     ln(p e^{3ε} + (1−p) e^{ε}) (Thm 8)   ln max(p e^{3ε} + (1−p) e^{ε},
                                                                     p e^{5ε} + (1−p) e^{3ε}) [R]
Bernoulli b                    ln(b e^{ε} + 1 − b)                  ε (Thm 9)
=============================  ===================================  =============================

Privacy condition: the answers on a sample (or on both parts of a sampled partition) of total
accuracy E cost σ(E) (σ̂(E)) times the upstream scaling; the root budget must cover it.
These samplers are not ⊎-preserving, so a ProPer table must go through ``as_pinq`` first.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dprivacy import noise
from dprivacy.errors import ValidationError
from dprivacy.noise import Rng
from dprivacy.tables.agents import PartitionAgent, SigmaAgent
from dprivacy.tables.pinq import Queryable

__all__ = [
    "sigma_take",
    "sigma_fixed",
    "sigma_fixed_partition",
    "sigma_with_replacement",
    "sigma_fraction",
    "sigma_fraction_partition",
    "sigma_bernoulli",
    "sigma_bernoulli_partition",
    "sample_fixed",
    "sample_with_replacement",
    "sample_fraction",
    "sample_bernoulli",
    "partition_fixed",
    "partition_fraction",
    "partition_bernoulli",
]

Sigma = Callable[[float], float]


def sigma_take(eps: float) -> float:
    """Take/Skip: deterministic, stability 2 (spec §4): 2ε."""
    return 2 * eps


def _n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValidationError(f"n = {n!r}: a sample size is an integer >= 1")
    return int(n)


def _p(p: float, name: str) -> float:
    if not 0 < p <= 1:
        raise ValidationError(f"{name} = {p}: a sampling probability lies in (0, 1]")
    return float(p)


def sigma_fixed(n: int) -> Sigma:
    """Uniform n-subset without replacement R_n (P-III Thm 6): ln((n e^{2ε}+1)/(n+1))."""
    n = _n(n)
    return lambda eps: math.log((n * math.exp(2 * eps) + 1) / (n + 1))


def sigma_fixed_partition(n: int) -> Sigma:
    """(R_n(D), D − R_n(D)) (P-III Thm 7, [R] form): ln((n e^{3ε} + e^{ε})/(n+1))."""
    n = _n(n)
    return lambda eps: math.log((n * math.exp(3 * eps) + math.exp(eps)) / (n + 1))


def sigma_with_replacement(n: int) -> Sigma:
    """n draws with replacement: n·ε (∅ vs {a} gives n copies of a; spec §7.3)."""
    n = _n(n)
    return lambda eps: n * eps


def sigma_fraction(p: float) -> Sigma:
    """⌊p|D|⌋ uniform items P_p (P-III Thm 8; the second term dominates): ln(p e^{3ε}+(1−p)e^{ε})."""
    p = _p(p, "p")
    return lambda eps: math.log(p * math.exp(3 * eps) + (1 - p) * math.exp(eps))


def sigma_fraction_partition(p: float) -> Sigma:
    """(P_p(D), rest) ([R] of spec §7.4): ln max(p e^{3ε}+(1−p)e^{ε}, p e^{5ε}+(1−p)e^{3ε})."""
    p = _p(p, "p")
    return lambda eps: math.log(max(p * math.exp(3 * eps) + (1 - p) * math.exp(eps),
                                    p * math.exp(5 * eps) + (1 - p) * math.exp(3 * eps)))


def sigma_bernoulli(b: float) -> Sigma:
    """Bernoulli sampling B_b (amplification; P-III §4.5): ln(b e^{ε} + 1 − b)."""
    b = _p(b, "b")
    return lambda eps: math.log(b * math.exp(eps) + 1 - b)


def sigma_bernoulli_partition(b: float) -> Sigma:
    """(B_b(D), rest) (P-III Thm 9): ε, like a deterministic 1-stable partition."""
    _p(b, "b")
    return lambda eps: eps


def _sample(q: Queryable, positions: np.ndarray, sigma: Sigma) -> Queryable:
    return Queryable._derive(q._df.iloc[positions], SigmaAgent(q._agent, sigma), q._roots)


def _split(q: Queryable, chosen: np.ndarray, sigma: Sigma) -> tuple[Queryable, Queryable]:
    shared = PartitionAgent(SigmaAgent(q._agent, sigma))
    mask = np.zeros(len(q._df), dtype=bool)
    mask[chosen] = True
    k = Queryable._derive(q._df[mask], shared.part(True), q._roots)
    kbar = Queryable._derive(q._df[~mask], shared.part(False), q._roots)
    return k, kbar


def _subset(size: int, k: int, rng: Rng) -> np.ndarray:
    gen = noise.resolve_rng(rng)
    return np.sort(gen.choice(size, size=min(k, size), replace=False))


def sample_fixed(q: Queryable, n: int, *, rng: Rng = None) -> Queryable:
    """A uniform n-subset (all of D if |D| ≤ n); cost σ_fixed(n)."""
    return _sample(q, _subset(len(q._df), _n(n), rng), sigma_fixed(n))


def sample_with_replacement(q: Queryable, n: int, *, rng: Rng = None) -> Queryable:
    """n independent uniform draws (empty if D is empty); cost n·ε."""
    gen = noise.resolve_rng(rng)
    size = len(q._df)
    pos = gen.integers(0, size, size=_n(n)) if size else np.zeros(0, dtype=np.int64)
    return _sample(q, pos, sigma_with_replacement(n))


def sample_fraction(q: Queryable, p: float, *, rng: Rng = None) -> Queryable:
    """⌊p·|D|⌋ records uniformly without replacement; cost σ_fraction(p)."""
    size = len(q._df)
    return _sample(q, _subset(size, math.floor(_p(p, "p") * size), rng), sigma_fraction(p))


def sample_bernoulli(q: Queryable, b: float, *, rng: Rng = None) -> Queryable:
    """Each record independently with probability b; cost σ_bernoulli(b) < ε."""
    gen = noise.resolve_rng(rng)
    keep = np.flatnonzero(gen.random(len(q._df)) < _p(b, "b"))
    return _sample(q, keep, sigma_bernoulli(b))


def partition_fixed(q: Queryable, n: int, *, rng: Rng = None) -> tuple[Queryable, Queryable]:
    """(uniform n-subset, the rest); the parts share a max-agent; cost σ̂_fixed(n)."""
    return _split(q, _subset(len(q._df), _n(n), rng), sigma_fixed_partition(n))


def partition_fraction(q: Queryable, p: float, *, rng: Rng = None) -> tuple[Queryable, Queryable]:
    """(⌊p|D|⌋ uniform records, the rest); cost σ̂_fraction(p)."""
    size = len(q._df)
    chosen = _subset(size, math.floor(_p(p, "p") * size), rng)
    return _split(q, chosen, sigma_fraction_partition(p))


def partition_bernoulli(q: Queryable, b: float, *, rng: Rng = None) -> tuple[Queryable, Queryable]:
    """(Bernoulli(b) sample, the rest); cost ε (Thm 9)."""
    gen = noise.resolve_rng(rng)
    chosen = np.flatnonzero(gen.random(len(q._df)) < _p(b, "b"))
    return _split(q, chosen, sigma_bernoulli_partition(b))
