"""ProPer: personal budgets, provenance, silent dropping, live data (POPL'15 §4-§6)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprivacy.errors import (
    BudgetExceededError,
    UnknownRecordError,
    UnsupportedOperationError,
    ValidationError,
)
from dprivacy.tables import Ledger, MemoryLedger, ProPerTable, Queryable


def eligible(t: ProPerTable, eps: float) -> pd.DataFrame:
    """The records a query of accuracy eps would use (as_pinq charges exactly like a query)."""
    return t.as_pinq(eps)._df


def budgets(t: ProPerTable, ids) -> np.ndarray:
    return t._ledger.remaining(np.asarray(ids))


def staff() -> pd.DataFrame:
    """002 P-II §6.2: at most two roles each; pairwise overlaps, no triple overlap."""
    return pd.DataFrame(
        {
            "name": ["Alice", "Bob", "Carol", "Dave", "Erin"],
            "role1": ["Teacher", "Manager", "Manager", "Teacher", "Clerk"],
            "role2": ["Headmaster", "Teacher", "Headmaster", "-", "-"],
        }
    )


def has(role):
    return lambda r: r["role1"] == role or r["role2"] == role


def test_teachers_managers_headmasters_pinq_3eps_proper_2eps():
    eps = 0.1
    pinq = Queryable(staff(), budget=1.0)
    prop = ProPerTable(staff(), budget=1.0)
    for role in ("Teacher", "Manager", "Headmaster"):
        pinq.where(has(role)).noisy_count(eps)
        prop.where(has(role)).noisy_count(eps)
    assert 1.0 - pinq.remaining_budget() == pytest.approx(3 * eps)
    spent = 1.0 - budgets(prop, range(5))
    assert spent.max() == pytest.approx(2 * eps)
    assert list(spent) == pytest.approx([0.2, 0.2, 0.2, 0.1, 0.0])


def test_disjoint_queries_cost_eps_in_both():
    df = pd.DataFrame({"role": ["a", "b", "c", "a"]})
    pinq = Queryable(df, budget=1.0)
    parts = pinq.partition(["a", "b", "c"], "role")
    prop = ProPerTable(df, budget=1.0)
    for r in "abc":
        parts[r].noisy_count(0.1)
        prop.where(lambda rec, r=r: rec["role"] == r).noisy_count(0.1)
    assert 1 - pinq.remaining_budget() == pytest.approx(0.1)
    assert (1 - budgets(prop, range(4))).max() == pytest.approx(0.1)


def test_drop_exactly_when_the_source_cannot_pay():
    df = pd.DataFrame({"who": ["s0", "s1", "s2", "s3"], "v": [0, 1, 2, 3]})
    t = ProPerTable(df, budget=[0.3, 0.5, 0.25, 1.0])
    # records per source in the queried table: s0 1, s1 2, s2 3, s3 0
    times = {"s0": 1, "s1": 2, "s2": 3, "s3": 0}
    derived = t.select_many(3, lambda r: [r["who"]] * times[r["who"]])
    got = eligible(derived, 0.1)  # costs 0.1, 0.2, 0.3, 0
    assert sorted(got["value"]) == ["s0", "s1", "s1"]
    assert list(budgets(t, range(4))) == pytest.approx([0.2, 0.3, 0.25, 1.0])
    got = eligible(derived, 0.1)  # now s0 0.2 ≥ 0.1, s1 0.3 ≥ 0.2
    assert sorted(got["value"]) == ["s0", "s1", "s1"]
    got = eligible(derived, 0.1)  # s1 has 0.1 < 0.2: dropped; s0 pays its last 0.1
    assert sorted(got["value"]) == ["s0"]
    assert list(budgets(t, range(4))) == pytest.approx([0.0, 0.1, 0.25, 1.0])
    assert len(eligible(derived, 0.1)) == 0  # everyone exhausted: an empty table, no error


def test_exact_equality_pays():
    t = ProPerTable(pd.DataFrame({"v": [1]}), budget=0.3)
    for _ in range(3):
        assert len(eligible(t, 0.1)) == 1  # 3 × 0.1 fits in 0.3 exactly (integer units)
    assert len(eligible(t, 0.1)) == 0
    assert budgets(t, [0])[0] == 0.0


def test_provenance_example_alice_2eps_bob_eps():
    """POPL'15 §4.2: {(r, Alice), (r, Alice), (r, Bob)} costs Alice 2ε and Bob ε."""
    t = ProPerTable(pd.DataFrame({"name": ["Alice", "Bob"]}), budget=1.0)
    r = t.select_many(2, lambda rec: ["r", "r"] if rec["name"] == "Alice" else ["r"])
    r.noisy_count(0.1)
    assert list(1 - budgets(t, [0, 1])) == pytest.approx([0.2, 0.1])
    t.concat(t).noisy_count(0.1)  # x ⊎ x: 2ε each
    assert list(1 - budgets(t, [0, 1])) == pytest.approx([0.4, 0.3])


def test_records_derived_from_no_source_are_always_included():
    t = ProPerTable(pd.DataFrame({"v": [1, 2]}), budget=0.1)
    lit = pd.DataFrame({"v": [10, 20, 30]})
    both = t.concat(lit)
    assert len(eligible(both, 0.1)) == 5
    assert len(eligible(both, 0.1)) == 3  # sources exhausted; ⊥ rows stay
    assert sorted(eligible(both.where(lambda r: r["v"] > 1), 5.0)["v"]) == [10, 20, 30]


def test_no_error_reveals_exhaustion():
    t = ProPerTable(pd.DataFrame({"v": [1, 2]}), budget=0.0)
    for call in (
        lambda: t.noisy_count(1.0),
        lambda: t.noisy_sum(1.0, "v", 0, 2),
        lambda: t.noisy_average(1.0, "v", 0, 2),
        lambda: t.noisy_median(1.0, "v", 0, 2),
        lambda: t.exponential_mechanism(1.0, [0, 1], lambda r, c: 1.0),
    ):
        call()  # never raises
    assert list(budgets(t, [0, 1])) == [0.0, 0.0]


def test_study_on_a_subgroup_leaves_others_intact():
    """AB-negative motivation (P-II §1): only the subgroup pays."""
    df = pd.DataFrame({"blood": ["AB-"] * 3 + ["O+"] * 97, "age": np.arange(100)})
    t = ProPerTable(df, budget=1.0)
    ab = t.where(lambda r: r["blood"] == "AB-")
    ab.noisy_average(0.5, "age", 0, 100)
    spent = 1 - budgets(t, range(100))
    assert list(spent[:3]) == pytest.approx([0.5] * 3) and not spent[3:].any()


def test_as_pinq_charges_each_involved_source_and_returns_a_global_budget():
    df = pd.DataFrame({"name": ["Al", "Bea", "Cy"], "teach": [True, True, False]})
    t = ProPerTable(df, budget=[1.0, 0.05, 1.0])
    names = t.where(lambda r: r["teach"]).select(name=lambda r: len(r["name"]))
    q = names.as_pinq(0.1)  # the NameLengths pipeline of POPL'15 §6.2
    assert isinstance(q, Queryable) and q.remaining_budget() == pytest.approx(0.1)
    assert list(q._df["name"]) == [2]  # Bea cannot pay 0.1 and is left out
    assert list(budgets(t, range(3))) == pytest.approx([0.9, 0.05, 1.0])
    q.group_by("name").noisy_count(0.05)  # GroupBy inside PINQ: 2 × 0.05
    with pytest.raises(BudgetExceededError):
        q.noisy_count(0.01)


@pytest.mark.parametrize(
    "op",
    [
        lambda t: t.group_by("v"),
        lambda t: t.join(t, 1, on="v"),
        lambda t: t.intersect(t),
        lambda t: t.except_(t),
        lambda t: t.union(t),
        lambda t: t.distinct(),
        lambda t: t.take(1),
        lambda t: t.skip(1),
    ],
)
def test_untrackable_transformations_raise_and_charge_nothing(op):
    t = ProPerTable(pd.DataFrame({"v": [1, 2, 2]}), budget=1.0)
    with pytest.raises(UnsupportedOperationError, match="as_pinq"):
        op(t)
    assert list(budgets(t, range(3))) == [1.0, 1.0, 1.0]


def test_bad_input_raises_and_charges_nothing():
    df = pd.DataFrame({"v": [1, 2], "b": [0.5, -0.1], "id": [7, 8]})
    with pytest.raises(ValidationError, match=">= 0"):
        ProPerTable(df, budget="b")
    with pytest.raises(ValidationError, match=">= 0"):
        ProPerTable(df, budget=-1.0)
    with pytest.raises(ValidationError):
        ProPerTable(df, budget=[1.0, 2.0, 3.0])
    t = ProPerTable(df, budget=1.0, id_column="id")
    with pytest.raises(UnknownRecordError):
        t.delete(ids=[99])
    with pytest.raises(UnknownRecordError):
        t._ledger.charge([7, 99], 0.5)
    with pytest.raises(ValidationError, match="fresh"):
        t.insert(df.iloc[:1], budget=1.0, id_column="id")  # id 7 is not fresh
    with pytest.raises(ValidationError, match="twice"):
        t._ledger.charge([7, 7], 0.5)
    with pytest.raises(ValidationError):
        t.noisy_count(-1.0)
    with pytest.raises(ValidationError):
        t.noisy_sum(0.1, "v", 3, 1)
    assert list(budgets(t, [7, 8])) == [1.0, 1.0]
    assert len(t._df) == 2


def test_live_data_insert_delete_update():
    t = ProPerTable(pd.DataFrame({"v": [1, 2]}), budget=0.1)
    eligible(t, 0.1)  # the first two are exhausted
    new = t.insert(pd.DataFrame({"v": [3]}), budget=0.25)
    assert list(new) == [2]
    assert list(eligible(t, 0.1)["v"]) == [3]  # old exhausted records filtered automatically
    t.update(lambda r: {"v": r["v"] * 10}, where=lambda r: r["v"] == 3)
    assert list(t._df["v"]) == [1, 2, 30] and list(t._prov) == [0, 1, 2]
    assert list(eligible(t, 0.1)["v"]) == [30]  # provenance kept: the same individual pays
    t.delete(lambda r: r["v"] == 1)
    t.delete(ids=[2])
    assert list(t._df["v"]) == [2] and list(t._prov) == [1]
    assert budgets(t, [2])[0] == pytest.approx(0.05)


def test_public_table_operations_keep_provenance():
    t = ProPerTable(pd.DataFrame({"k": [1, 2, 3], "v": [10, 20, 30]}), budget=1.0)
    pub = pd.DataFrame({"k": [1, 1, 2], "w": ["a", "b", "c"]})
    t.join_public(pub, on="k").noisy_count(0.1)  # k=1 twice, k=2 once, k=3 none
    assert list(1 - budgets(t, range(3))) == pytest.approx([0.2, 0.1, 0.0])
    t.product(pd.DataFrame({"x": [0, 1, 2]})).noisy_count(0.1)  # |T| = 3 each
    assert list(1 - budgets(t, range(3))) == pytest.approx([0.5, 0.4, 0.3])
    rest = t.exclude(pd.DataFrame({"k": [2]}), on=["k"])
    assert list(rest._df["k"]) == [1, 3] and list(rest._prov) == [0, 2]
    parts = t.partition([1, 3], "k")
    parts[1].noisy_count(0.1)
    parts[3].noisy_count(0.1)
    assert list(1 - budgets(t, range(3))) == pytest.approx([0.6, 0.4, 0.4])


def test_concat_requires_one_ledger():
    a = ProPerTable(pd.DataFrame({"v": [1]}))
    b = ProPerTable(pd.DataFrame({"v": [1]}))
    with pytest.raises(ValidationError, match="ledger"):
        a.concat(b)


def test_durable_ledger_reattaches_by_id(tmp_path):
    path = tmp_path / "b.sqlite"
    df = pd.DataFrame({"pid": [10, 11], "v": [1, 2]})
    t = ProPerTable(df, budget=1.0, ledger=Ledger(path), id_column="pid")
    t.where(lambda r: r["v"] == 1).noisy_count(0.4)
    again = ProPerTable(df, budget=1.0, ledger=Ledger(path), id_column="pid")  # a new process
    assert list(again._ledger.remaining([10, 11])) == pytest.approx([0.6, 1.0])
    fresh = ProPerTable(pd.DataFrame({"v": [5]}), ledger=Ledger(path))
    assert list(fresh._prov) == [12]  # fresh ids never collide with stored ones


def _reference(counts: dict[int, int], budget: dict[int, float], eps: float) -> set[int]:
    """POPL'15 Fig. 3 (Query rule) as a reference: who pays."""
    ok = {p for p, k in counts.items() if budget[p] >= eps * k - 1e-12}
    for p in ok:
        budget[p] -= eps * counts[p]
    return ok


@settings(max_examples=40, deadline=None)
@given(
    init=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]), min_size=1, max_size=8),
    program=st.lists(
        st.tuples(st.integers(0, 255), st.integers(1, 3), st.sampled_from([0.05, 0.1, 0.3])),
        min_size=1,
        max_size=12,
    ),
)
def test_property_matches_reference_and_neighbours_only_differ_in_r(init, program):
    """Budgets never go below zero; the payers are those of the reference Query rule; adding one
    record r leaves every other budget unchanged and charges r at most ℰ(r)."""
    n = len(init)
    base = pd.DataFrame({"id": np.arange(n), "v": np.arange(n)})
    neighbour = pd.concat([base, pd.DataFrame({"id": [n], "v": [n]})], ignore_index=True)
    states = []
    for df, b in ((base, init), (neighbour, [*init, 0.5])):
        t = ProPerTable(df, budget=b, id_column="id")
        ref = dict(enumerate(b))
        for mask_bits, mult, eps in program:
            sel = t.where(lambda r, m=mask_bits: (m >> (r["v"] % 8)) & 1 == 1)
            q = sel.select_many(mult, lambda r, k=mult: [r["v"]] * k)
            counts = pd.Series(q._prov).value_counts().to_dict()
            expected = _reference(counts, ref, eps)
            got = eligible(q, eps)
            assert sorted(set(got["value"])) == sorted(expected)
            assert (t._ledger.remaining(np.arange(len(b))) >= 0).all()
        rem = t._ledger.remaining(np.arange(len(b)))
        assert rem == pytest.approx([ref[i] for i in range(len(b))], abs=1e-9)
        states.append(rem)
    assert states[0] == pytest.approx(states[1][:n])
    assert 0 <= 0.5 - states[1][n] <= 0.5


def test_memory_ledger_rejects_sparse_ids_clearly():
    led = MemoryLedger()
    with pytest.raises(ValidationError, match="sparse"):
        led.register([10**12], 1.0)


def test_partition_provenance_with_and_without_consecutive_ids():
    df = pd.DataFrame({"k": [0, 1, 0, 1, 2]})
    t = ProPerTable(df.iloc[:2], budget=1.0)
    t.insert(df.iloc[2:], budget=1.0)  # ids 2..4 continue the run 0..1
    u = ProPerTable(df, budget=1.0, id_column=None)
    u.delete(lambda r: r["k"] == 2)
    u.insert(df.iloc[4:], budget=1.0)  # prov [0, 1, 2, 3, 5]: not a run any more
    for table, expected in ((t, [[0, 2], [1, 3]]), (u, [[0, 2], [1, 3]])):
        parts = table.partition([0, 1], "k")
        assert [list(parts[k]._prov) for k in (0, 1)] == expected
    v = ProPerTable(df, budget=1.0, ledger=t._ledger)  # ids 5..9 of a shared ledger
    assert list(v.partition([2], "k")[2]._prov) == [9]
    v.partition([2], "k")[2].noisy_count(0.5)
    assert list(1 - t._ledger.remaining(range(10))) == pytest.approx([0] * 9 + [0.5])


def test_deferred_account_charges_match_immediate_ones():
    """Alternating queries on overlapping tables (accounts opened, settled, exhausted)."""
    df = pd.DataFrame({"v": np.arange(12)})
    t = ProPerTable(df, budget=np.linspace(0, 1.1, 12))
    a = t.where(lambda r: r["v"] % 2 == 0)
    b = t.where(lambda r: r["v"] < 7)
    expected = np.linspace(0, 1.1, 12)
    for table, eps in [(a, 0.2), (a, 0.2), (b, 0.3), (a, 0.1), (b, 0.3), (b, 0.3), (a, 0.5)]:
        ids = table._prov
        pay = ids[expected[ids] >= eps - 1e-12]
        got = eligible(table, eps)
        assert sorted(got["v"]) == sorted(pay)
        expected[pay] -= eps
    assert t._ledger.remaining(range(12)) == pytest.approx(expected, abs=1e-9)
    assert (t._ledger.remaining(range(12)) >= 0).all()
