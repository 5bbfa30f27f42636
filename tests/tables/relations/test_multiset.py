"""Multisets and multi-relations of ProPer (spec §6.2, §9 rows 4–5; Prop. 2, Lemma 2) and the
correspondence between ProPerTable's provenance and these semantics (Def. 5–7, Fig. 3)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprivacy.tables import ProPerTable
from dprivacy.tables.relations.multiset import (
    BOTTOM,
    apply,
    compose,
    comprehension,
    const,
    dom,
    identity,
    lift,
    mset,
    query_rule,
    restrict,
)

R = mset([("x", "y"), ("x", "w"), ("x", "w")])
S = mset([("y", "z"), ("w", "z"), ("w", "v")])


def test_comprehension_vectors_of_section_4_2():
    """Row 4: {x^[n] | x ∈ⁿ {5,5,−5} ∧ x > 0} = {5,5}; {0×x^[n] | x ∈ⁿ {5,5,−5}} = {0,0,0}."""
    a = mset([5, 5, -5])
    assert comprehension(a, where=lambda x: x > 0) == mset([5, 5])
    assert comprehension(a, lambda x: 0 * x) == mset([0, 0, 0])
    assert comprehension(a, lambda x: 0 * x) != mset([0])  # multiplicities add, not collapse


def test_example_1():
    """Row 5: dom(S) = {y,w,w}; R;S = {(x,z)^3,(x,v)^2}; R▷{w} = {(x,w)^2}; R•{w^2,y} = {x^5}."""
    assert dom(S) == mset(["y", "w", "w"])
    assert compose(R, S) == mset({("x", "z"): 3, ("x", "v"): 2})
    assert restrict(R, {"w"}) == mset({("x", "w"): 2})
    assert apply(R, mset({"w": 2, "y": 1})) == mset({"x": 5})


def test_provenance_example_and_additive_union():
    """Three copies of r, two from Alice and one from Bob; ⊎ adds multiplicities."""
    d = mset([("r", "Alice"), ("r", "Alice"), ("r", "Bob")])
    assert d + d == mset({("r", "Alice"): 4, ("r", "Bob"): 2})
    assert apply(d, mset(["Alice"])) == mset({"r": 2}) and apply(d, mset(["Bob"])) == mset(["r"])
    eligible, paid = query_rule(d, {"Alice": 0.15, "Bob": 1.0}, 0.1)  # Alice owes 0.2 > 0.15
    assert eligible == mset(["r"]) and paid == {"Bob": pytest.approx(0.1)}


def test_mset_rejects_bad_multiplicities():
    with pytest.raises(ValueError):
        mset({"a": -1})
    assert mset({"a": 0, "b": 2}) == Counter({"b": 2})


def test_identity_const_and_lemma_2():
    d = identity(["a", "b"]) + const(mset(["lit", "lit"]))
    assert dom(d) == mset(["a", "b", "lit", "lit"])
    assert apply(d, mset([BOTTOM])) == mset(["lit", "lit"])
    twice = lift(lambda r: [r, r.upper()], d)  # a flat-map F, 1 → 2
    assert dom(twice) == mset(["a", "A", "b", "B", "lit", "LIT", "lit", "LIT"])  # F(dom(D))
    assert restrict(twice, {"a"}) == mset({("a", "a"): 1, ("A", "a"): 1})  # provenance kept


small = st.sampled_from("abc")
rel = st.lists(st.tuples(small, small), max_size=6).map(mset)


@settings(max_examples=60, deadline=None)
@given(r=rel, r2=rel, s=rel, s2=rel, t=st.sets(small))
def test_proposition_2(r, r2, s, s2, t):
    """; is ⊎-preserving in both arguments, ▷ in its first; (R;S)▷T = R;(S▷T); dom(R▷T) = R•T."""
    assert compose(r + r2, s) == compose(r, s) + compose(r2, s)
    assert compose(r, s + s2) == compose(r, s) + compose(r, s2)
    assert restrict(r + r2, t) == restrict(r, t) + restrict(r2, t)
    assert restrict(compose(r, s), t) == compose(r, restrict(s, t))
    assert dom(restrict(r, t)) == apply(r, mset(t))


def as_multiset(t: ProPerTable, col: str) -> Counter:
    """A ProPer table as the provenance table D of Def. 5 (⊥ = None)."""
    return mset(zip(t._df[col], [None if p < 0 else int(p) for p in t._prov], strict=True))


@settings(max_examples=30, deadline=None)
@given(
    vals=st.lists(st.integers(0, 5), min_size=1, max_size=6),
    budgets=st.data(),
    k=st.integers(1, 3),
    cut=st.integers(0, 5),
    lit=st.lists(st.integers(0, 5), max_size=3),
)
def test_proper_table_is_the_lifting_and_follows_the_query_rule(vals, budgets, k, cut, lit):
    """Where/SelectMany/concat on a ProPerTable give F̂(D) of Def. 7 (with ⊎ and Const), and a
    query charges and keeps exactly what the reference Query rule says."""
    b = budgets.draw(st.lists(st.sampled_from([0.0, 0.125, 0.25, 0.375]), min_size=len(vals),
                              max_size=len(vals)))
    t = ProPerTable(pd.DataFrame({"v": vals}), budget=b)
    derived = (t.where(lambda r: r["v"] >= cut)
               .select_many(k, lambda r: [(r["v"] + i,) for i in range(k)], columns=["v"])
               .concat(pd.DataFrame({"v": lit})))
    d0 = identity(range(len(vals)))
    d0 = compose(mset({(v, i): 1 for i, v in enumerate(vals)}), d0)  # records keyed by value
    expected = lift(lambda v: [v + i for i in range(k)] if v >= cut else [], d0) + const(mset(lit))
    assert as_multiset(derived, "v") == expected
    eligible, paid = query_rule(expected, dict(enumerate(b)), 0.125)  # exact in binary
    q = derived.as_pinq(0.125)
    assert mset(q._df["v"]) == eligible
    spent = np.asarray(b) - t._ledger.remaining(np.arange(len(vals)))
    assert spent == pytest.approx([paid.get(i, 0.0) for i in range(len(vals))], abs=1e-9)
