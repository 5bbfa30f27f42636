"""Sampling and partitioning with probabilistic stability (Ebadi & Sands, PST'16).

A sampler RS is σ-probabilistically stable if M∘RS is σ(ε)-DP for every ε-DP M (PST'16 Def. 5).
Each operator here returns a PINQ :class:`~dprivacy.tables.Queryable` whose agent is a
:class:`~dprivacy.tables.budgets.agents.SigmaAgent`: queries of total accuracy E on the sample cost
σ(E) upstream (σ's composed from the mechanism back to the source).

Costs (PST'16 §4; [R] marks a corrected form of a garbled formula of the paper):

=============================  ===================================  ==================================
operator                       σ(ε) (sample)                        σ̂(ε) (sample + complement)
=============================  ===================================  ==================================
fixed size n, no replacement   ln((n e^{2ε} + 1)/(n + 1)) (Thm 6)   ln((n e^{3ε} + e^{ε})/(n + 1)) [R]
fixed size n, replacement      n·ε (group privacy lower bound)      –
fraction p                     ln(p e^{3ε} + (1−p) e^{ε}) (Thm 8)   ln max(p e^{3ε} + (1−p) e^{ε},
                                                                    p e^{5ε} + (1−p) e^{3ε}) [R]
Bernoulli b                    ln(b e^{ε} + 1 − b)                  ε (Thm 9)
=============================  ===================================  ==================================

Privacy condition: the answers on a sample (or on both parts of a sampled partition) of total
accuracy E cost σ(E) (σ̂(E)) times the upstream scaling; the root budget must cover it.
These samplers are not ⊎-preserving, so a ProPer table must go through ``as_pinq`` first.

Randomness: a sample is drawn from a fresh 128-bit secret of the table's noise source (the
operating system's CSPRNG; the data owner's ``noise_seed`` for simulations), never from anything
the analyst passes: a sample the analyst could predict would void the amplification.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dprivacy.errors import ValidationError
from dprivacy.tables.budgets.agents import PartitionAgent, SigmaAgent
from dprivacy.tables.params import count_arg, prob_arg
from dprivacy.tables.pinq import Queryable
from dprivacy.tables.relations.protocol import Relation
from dprivacy.tables.relations.rowwise import quietly

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
    """Take/Skip: deterministic, stability 2 (PST'16 §3, the Take attack): 2ε."""
    return 2 * eps


def _n(n: int) -> int:
    return count_arg(n, "n (a sample size)", 1)


def _p(p: float, name: str) -> float:
    return prob_arg(p, name)


def sigma_fixed(n: int) -> Sigma:
    """Uniform n-subset without replacement R_n (PST'16 Thm 6): ln((n e^{2ε}+1)/(n+1))."""
    n = _n(n)
    return lambda eps: math.log((n * math.exp(2 * eps) + 1) / (n + 1))


def sigma_fixed_partition(n: int) -> Sigma:
    """(R_n(D), D − R_n(D)) (PST'16 Thm 7, [R] form): ln((n e^{3ε} + e^{ε})/(n+1))."""
    n = _n(n)
    return lambda eps: math.log((n * math.exp(3 * eps) + math.exp(eps)) / (n + 1))


def sigma_with_replacement(n: int) -> Sigma:
    """n draws with replacement: n·ε (∅ vs {a} gives n copies of a; group privacy)."""
    n = _n(n)
    return lambda eps: n * eps


def sigma_fraction(p: float) -> Sigma:
    """⌊p|D|⌋ uniform items P_p (PST'16 Thm 8; the second term dominates): ln(p e^{3ε}+(1−p)e^{ε})."""
    p = _p(p, "p")
    return lambda eps: math.log(p * math.exp(3 * eps) + (1 - p) * math.exp(eps))


def sigma_fraction_partition(p: float) -> Sigma:
    """(P_p(D), rest) ([R], corrected from PST'16 §4.4): ln max(p e^{3ε}+(1−p)e^{ε}, p e^{5ε}+(1−p)e^{3ε})."""
    p = _p(p, "p")
    return lambda eps: math.log(max(p * math.exp(3 * eps) + (1 - p) * math.exp(eps),
                                    p * math.exp(5 * eps) + (1 - p) * math.exp(3 * eps)))


def sigma_bernoulli(b: float) -> Sigma:
    """Bernoulli sampling B_b (amplification; PST'16 §4.5): ln(b e^{ε} + 1 − b)."""
    b = _p(b, "b")
    return lambda eps: math.log(b * math.exp(eps) + 1 - b)


def sigma_bernoulli_partition(b: float) -> Sigma:
    """(B_b(D), rest) (PST'16 Thm 9): ε, like a deterministic 1-stable partition."""
    _p(b, "b")
    return lambda eps: eps


def _split(q: Queryable, kind: str, param: float, sigma: Sigma
           ) -> tuple[Relation, Relation]:
    """(sample, rest) drawn with a fresh secret from the table's noise source."""
    if not isinstance(q, Queryable):
        raise ValidationError(
            f"sampling needs a PINQ Queryable, got a {type(q).__name__}: samplers are not "
            "union-preserving, so a ProPerTable must go through as_pinq(eps) first")
    if q.zcdp:
        raise ValidationError("random samples are not available on a table in zCDP mode (their "
                              "probabilistic stabilities are stated for pure ε)")
    return q._rel.sample(kind, param, q._noise.secret())


def _sample(q: Queryable, kind: str, param: float, sigma: Sigma) -> Queryable:
    rel, _ = _split(q, kind, param, sigma)
    return Queryable._derive(rel, SigmaAgent(q._agent, sigma), q._roots, q._noise)


def _parts(q: Queryable, kind: str, param: float, sigma: Sigma) -> tuple[Queryable, Queryable]:
    k, kbar = _split(q, kind, param, sigma)
    shared = PartitionAgent(SigmaAgent(q._agent, sigma))
    return (Queryable._derive(k, shared.part(True), q._roots, q._noise),
            Queryable._derive(kbar, shared.part(False), q._roots, q._noise))


@quietly
def sample_fixed(q: Queryable, n: int) -> Queryable:
    """A uniform n-subset (all of D if |D| ≤ n); cost σ_fixed(n)."""
    n = _n(n)
    return _sample(q, "fixed", n, sigma_fixed(n))


@quietly
def sample_with_replacement(q: Queryable, n: int) -> Queryable:
    """n independent uniform draws (empty if D is empty); cost n·ε."""
    n = _n(n)
    return _sample(q, "replacement", n, sigma_with_replacement(n))


@quietly
def sample_fraction(q: Queryable, p: float) -> Queryable:
    """⌊p·|D|⌋ records uniformly without replacement; cost σ_fraction(p)."""
    p = _p(p, "p")
    return _sample(q, "fraction", p, sigma_fraction(p))


@quietly
def sample_bernoulli(q: Queryable, b: float) -> Queryable:
    """Each record independently with probability b; cost σ_bernoulli(b) < ε."""
    b = _p(b, "b")
    return _sample(q, "bernoulli", b, sigma_bernoulli(b))


@quietly
def partition_fixed(q: Queryable, n: int) -> tuple[Queryable, Queryable]:
    """(uniform n-subset, the rest); the parts share a max-agent; cost σ̂_fixed(n)."""
    n = _n(n)
    return _parts(q, "fixed", n, sigma_fixed_partition(n))


@quietly
def partition_fraction(q: Queryable, p: float) -> tuple[Queryable, Queryable]:
    """(⌊p|D|⌋ uniform records, the rest); cost σ̂_fraction(p)."""
    p = _p(p, "p")
    return _parts(q, "fraction", p, sigma_fraction_partition(p))


@quietly
def partition_bernoulli(q: Queryable, b: float) -> tuple[Queryable, Queryable]:
    """(Bernoulli(b) sample, the rest); cost ε (Thm 9)."""
    b = _p(b, "b")
    return _parts(q, "bernoulli", b, sigma_bernoulli_partition(b))
