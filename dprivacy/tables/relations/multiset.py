"""Multisets and multi-relations: the semantics behind ProPer's provenance (ProPer,
POPL'15 §4.2: Def. 3, Example 1, Prop. 2; Def. 5–7 of §4.3).

A multiset ``mset(A) ≅ A → ℕ`` is a :class:`collections.Counter` (``a ∈ⁿ A`` ⇔ ``A[a] == n``); a
multi-relation ``A ↔ B = mset(A × B)`` is a Counter of pairs (``a Rⁿ b`` ⇔ ``R[(a, b)] == n``).
Additive union ``A ⊎ B`` is ``A + B``. Every operation multiplies multiplicities as Def. 3 says::

    dom(R) = {a^[n] | (a,b) ∈ⁿ R}              R;S = {(a,c)^[m·n] | a Rⁿ b ∧ b Sᵐ c}
    R•U    = {a^[n·m] | a Rⁿ b ∧ b ∈ᵐ U}       R▷T = {(a,b)^[n] | a Rⁿ b ∧ b ∈ T}

**How** :class:`~dprivacy.tables.ProPerTable` **implements these semantics.** A ProPer table is a
provenance table D ∈ Rec ↔ Rec_⊥ (Def. 5): its rows are the copies of dom(D) (the underlying
table) and its provenance array holds, row by row, the source b of each pair (r, b) — a record id,
or −1 for ⊥ (no provenance). A source table is Id(T) (Def. 6, the Input rule); a public literal
joined by ``concat`` is Const(T); ``where``/``select``/``select_many``/``product`` compute the
lifting F̂(D) = F̃ ; D (Def. 7: each row r with provenance p becomes the rows F({r}), each with
provenance p); ``concat`` is ⊎. The Query rule (Fig. 3) charges source s the cost
C(s) = ε · size(D • {s}) and answers on the eligible table L = D • (A ∪ {⊥}); ``as_pinq`` and every
noisy aggregation compute exactly that (see :func:`query_rule`, a reference used by the tests).

Privacy condition: none by itself (pure set algebra); these are the definitions under which ProPer
Theorem 2 (ℰ-PDP of the protected system) is stated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

__all__ = [
    "BOTTOM", "mset", "comprehension", "dom", "compose", "apply", "restrict", "identity",
    "const", "lift", "query_rule",
]

A = TypeVar("A", bound=Hashable)
B = TypeVar("B", bound=Hashable)
C = TypeVar("C", bound=Hashable)

BOTTOM: None = None
"""⊥: the provenance of a record derived from no individual (a public literal)."""


def mset(items: Iterable[A] | Mapping[A, int]) -> Counter[A]:
    """The multiset of ``items`` (an iterable with repetitions, or a map element → multiplicity)."""
    m: Counter[A] = Counter(items)
    if any(not isinstance(n, int) or n < 0 for n in m.values()):
        raise ValueError("multiplicities must be non-negative integers")
    return +m  # drop zero multiplicities


def comprehension(
    source: Counter[A], f: Callable[[A], Any] | None = None,
    where: Callable[[A], bool] | None = None,
) -> Counter[Any]:
    """``{f(x)^[n] | x ∈ⁿ source ∧ where(x)}`` (f and where default to the identity and true):
    multiplicities of equal images add up (§4.2)."""
    out: Counter[Any] = Counter()
    for x, n in source.items():
        if n > 0 and (where is None or where(x)):
            out[x if f is None else f(x)] += n
    return out


def dom(r: Counter[tuple[A, B]]) -> Counter[A]:
    """``dom(R) = {a^[n] | (a,b) ∈ⁿ R}`` (Def. 3)."""
    return comprehension(r, lambda ab: ab[0])


def compose(r: Counter[tuple[A, B]], s: Counter[tuple[B, C]]) -> Counter[tuple[A, C]]:
    """``R;S = {(a,c)^[m·n] | a Rⁿ b ∧ b Sᵐ c}`` (Def. 3); ⊎-preserving in both arguments."""
    by_b: dict[B, list[tuple[C, int]]] = {}
    for (b, c), m in s.items():
        if m > 0:
            by_b.setdefault(b, []).append((c, m))
    out: Counter[tuple[A, C]] = Counter()
    for (a, b), n in r.items():
        for c, m in by_b.get(b, ()) if n > 0 else ():
            out[(a, c)] += n * m
    return out


def apply(r: Counter[tuple[A, B]], u: Counter[B]) -> Counter[A]:
    """``R•U = {a^[n·m] | a Rⁿ b ∧ b ∈ᵐ U}`` (Def. 3)."""
    out: Counter[A] = Counter()
    for (a, b), n in r.items():
        if n > 0 and u[b] > 0:
            out[a] += n * u[b]
    return out


def restrict(r: Counter[tuple[A, B]], t: Iterable[B]) -> Counter[tuple[A, B]]:
    """``R▷T = {(a,b)^[n] | a Rⁿ b ∧ b ∈ T}`` for a *set* T (Def. 3); ⊎-preserving in R."""
    keep = set(t)
    return comprehension(r, where=lambda ab: ab[1] in keep)


def identity(t: Iterable[A]) -> Counter[tuple[A, A]]:
    """``Id_T = {(r,r) | r ∈ T}`` (Def. 6): the provenance table of newly input individuals."""
    recs = set(t)
    return Counter({(r, r): 1 for r in recs})


def const(t: Counter[A]) -> Counter[tuple[A, None]]:
    """``Const_T = {(r,⊥)^[n] | r ∈ⁿ T}`` (Def. 6): a public literal table, no provenance."""
    return comprehension(t, lambda r: (r, BOTTOM))


def lift(f: Callable[[A], Iterable[B]], d: Counter[tuple[A, C]]) -> Counter[tuple[B, C]]:
    """``F̂(D) = F̃ ; D`` (Def. 7) for a ⊎-preserving F given by its action on singletons:
    ``f(r)`` lists F({r}) with repetitions; every output keeps the provenance of its input.

    Lemma 2: ``dom(lift(f, D)) == F(dom(D))``.
    """
    f_tilde: Counter[tuple[B, A]] = Counter()
    for r in dom(d):
        for t, m in Counter(f(r)).items():
            f_tilde[(t, r)] += m
    return compose(f_tilde, d)


def query_rule(
    d: Counter[tuple[A, Any]], budget: dict[Any, float], eps: float
) -> tuple[Counter[A], dict[Any, float]]:
    """ProPer's Query rule (Fig. 3) on a provenance table ``d`` (⊥ = ``None``): returns the
    eligible table L = D • (A ∪ {⊥}) and the cost map C restricted to the payers A, where
    C(s) = ε · size(D • {s}) and A = {s | B(s) ≥ C(s)}. ``budget`` is not modified."""
    cost = {s: eps * sum(apply(d, Counter({s: 1})).values()) for s in budget}
    payers = {s for s in budget if budget[s] >= cost[s]}
    eligible = apply(d, Counter({**{s: 1 for s in payers}, BOTTOM: 1}))
    return eligible, {s: cost[s] for s in payers}
