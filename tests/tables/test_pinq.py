"""PINQ Queryable: stabilities (PINQ §2.2 / FW-PINQ), the G = 22 vector, budget rules, the Take attack."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from dprivacy.errors import BudgetExceededError, ValidationError
from dprivacy.tables import Queryable


def people(n: int = 20) -> pd.DataFrame:
    return pd.DataFrame({"age": np.arange(n) * 5 % 90, "g": np.arange(n) % 2, "k": np.arange(n) % 4})


def explode(times: int):
    """A flat-map with ``times`` copies of the record (as a tuple in column ``value``)."""
    return lambda r: [tuple(r.values())] * times


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda t: t.where(lambda r: r["age"] > 17), 1),
        (lambda t: t.select(lambda r: r["age"] * 2), 1),
        (lambda t: t.select_many(3, explode(5)), 3),
        (lambda t: t.select_many(7, explode(2)), 7),
        (lambda t: t.group_by("g"), 2),
        (lambda t: t.join(t, 3, on="g"), 12),  # 2·3 on each side, one source
        (lambda t: t.join(t, (2, 5), on="g"), 14),  # self ·2·5 + other ·2·2
        (lambda t: t.join(people(), 3, on="g"), 6),  # public right side: self · 2·3 only
        (lambda t: t.concat(t), 2),
        (lambda t: t.union(t), 2),
        (lambda t: t.intersect(t), 2),
        (lambda t: t.except_(t), 2),
        (lambda t: t.concat(people(3)), 1),
        (lambda t: t.distinct(), 1),
        (lambda t: t.take(3), 2),
        (lambda t: t.skip(3), 2),
        (lambda t: t.where(lambda r: r["g"] == 1).group_by("k").take(1), 4),
    ],
)
def test_stability_multipliers(make, expected):
    t = Queryable(people(), budget=100.0)
    q = make(t)
    assert q.cost(0.5) == pytest.approx(0.5 * expected)
    q.noisy_count(0.5)
    assert t.remaining_budget() == pytest.approx(100.0 - 0.5 * expected)


def test_transformations_compute_the_right_tables():
    t = Queryable(people(8), budget=1.0)
    assert len(t.where(lambda r: r["g"] == 1)._df) == 4
    assert list(t.select(lambda r: r["age"] + 1)._df["value"]) == list(people(8)["age"] + 1)
    two = t.select(a=lambda r: r["age"], b=lambda r: -r["k"])._df
    assert list(two.columns) == ["a", "b"] and list(two["b"]) == list(-people(8)["k"])
    assert len(t.select_many(2, explode(5))._df) == 16
    g = t.group_by("g", mean_age=("age", "mean"))._df
    assert list(g["count"]) == [4, 4] and list(g["g"]) == [0, 1]
    j = t.join(t, 1, on="g")._df
    assert len(j) == 2  # one kept record per key on each side
    assert len(t.take(3)._df) == 3 and len(t.skip(3)._df) == 5
    assert len(t.concat(t).distinct()._df) == 8
    half = t.where(lambda r: r["k"] < 2)
    assert len(t.intersect(half)._df) == 4 and len(t.except_(half)._df) == 4
    parts = t.partition([0, 1, 99], "k")
    assert [len(parts[k]._df) for k in (0, 1, 99)] == [2, 2, 0]  # keys 2, 3 are dropped
    parts = t.partition(["even", "odd"], lambda r: "even" if r["k"] % 2 == 0 else "odd")
    assert [len(parts[k]._df) for k in ("even", "odd")] == [4, 4]


def test_scaling_factor_dag_g_equals_22():
    """Spec §2.2 worked example (002 P-I Fig. 2-3): s = A1 B2 C3 D10 E3 F3 G22."""
    a = Queryable(people(), budget=1000.0)
    b = a.group_by("k")  # stability 2
    c = a.select_many(3, explode(3))  # stability 3
    d = b.select_many(5, explode(5))  # 2 * 5 = 10
    parts = c.partition([0, 1], lambda r: r["value"][1])  # (age, g, k)[1] = g
    e, f = parts[0], parts[1]
    g = d.concat(e.select_many(4, explode(4)))  # 10*1 + 3*4 = 22
    assert [x.cost(1.0) for x in (a, b, c, d, e, f, g)] == pytest.approx([1, 2, 3, 10, 3, 3, 22])
    d.noisy_count(1.0)
    assert a.remaining_budget() == pytest.approx(990.0)  # a query with ε on D costs 10ε
    g.noisy_count(1.0)
    assert a.remaining_budget() == pytest.approx(968.0)


def test_partition_costs_the_max_and_listing_3_1():
    """002 P-I Listing 3.1: the per-gender averages cost budget/2 in total; the final query throws
    iff c > budget/2."""
    budget = 1.0
    for c, throws in [(0.5, False), (0.5000001, True)]:
        data = Queryable(people(), budget=budget)
        adults = data.where(lambda r: r["age"] > 17)
        parts = adults.partition([0, 1], "g")
        for key in (0, 1):
            parts[key].noisy_average(budget / 2, "age", 0, 100)
        assert data.remaining_budget() == pytest.approx(budget / 2)
        if throws:
            with pytest.raises(BudgetExceededError):
                data.noisy_average(c, "age", 0, 100)
            assert data.remaining_budget() == pytest.approx(budget / 2)
        else:
            data.noisy_average(c, "age", 0, 100)
            assert data.remaining_budget() == pytest.approx(0.0)


def test_partition_max_is_tracked_per_part():
    t = Queryable(people(), budget=10.0)
    p = t.partition([0, 1], "g")
    p[0].noisy_count(1.0)
    p[0].noisy_count(1.0)  # part 0 at 2
    p[1].noisy_count(1.5)  # part 1 at 1.5 < max: free
    assert t.remaining_budget() == pytest.approx(8.0)
    p[1].noisy_count(1.0)  # part 1 at 2.5: forwards 0.5
    assert t.remaining_budget() == pytest.approx(7.5)


def test_budget_exceeded_raises_before_computing_or_charging():
    t = Queryable(people(), budget=1.0)
    calls = []

    def f(r):
        calls.append(1)
        return r["age"]

    t.noisy_sum(0.6, f, 0, 100)
    assert len(calls) == 20
    with pytest.raises(BudgetExceededError):
        t.noisy_sum(0.6, f, 0, 100)
    assert len(calls) == 20  # the value function never ran
    assert t.remaining_budget() == pytest.approx(0.4)
    t.noisy_count(0.4)  # equality is allowed
    assert t.remaining_budget() == pytest.approx(0.0)


def test_binary_agent_rolls_back_the_first_source():
    a = Queryable(people(), budget=1.0)
    b = Queryable(people(), budget=0.1)
    both = a.concat(b)
    with pytest.raises(BudgetExceededError):
        both.noisy_count(0.5)
    assert a.remaining_budget() == 1.0 and b.remaining_budget() == 0.1
    assert both.remaining_budget() == [1.0, 0.1]
    both.noisy_count(0.1)
    assert both.remaining_budget() == pytest.approx([0.9, 0.0])


def test_partition_rollback_restores_the_running_max():
    a = Queryable(people(), budget=1.0)
    b = Queryable(people(), budget=0.05)
    part = a.partition([0, 1], "g")[0]
    with pytest.raises(BudgetExceededError):
        part.concat(b).noisy_count(0.5)
    assert part.cost(0.5) == pytest.approx(0.5)  # the max was not left at 0.5
    part.noisy_count(0.5)
    assert a.remaining_budget() == pytest.approx(0.5)


@pytest.mark.parametrize("bad", [0, -0.1, float("nan"), float("inf"), "0.1", True])
def test_bad_eps_raises_and_charges_nothing(bad):
    t = Queryable(people(), budget=1.0)
    with pytest.raises(ValidationError):
        t.noisy_count(bad)
    assert t.remaining_budget() == 1.0


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValidationError, match="budget"):
        Queryable(people(), budget=-1.0)
    t = Queryable(people(), budget=1.0)
    with pytest.raises(ValidationError, match="clamping range"):
        t.noisy_sum(0.1, "age", 5, 5)
    with pytest.raises(ValidationError, match="callable"):
        t.where("age > 3")
    with pytest.raises(ValidationError, match="not columns"):
        t.group_by("nope")
    with pytest.raises(ValidationError, match="same columns"):
        t.concat(pd.DataFrame({"x": [1]}))
    with pytest.raises(ValidationError, match="k ="):
        t.select_many(0, explode(2))
    with pytest.raises(ValidationError, match="bound"):
        t.join(t, 0, on="g")
    with pytest.raises(ValidationError, match="distinct"):
        t.partition([0, 0], "g")
    assert t.remaining_budget() == 1.0


def _reveal(data: Queryable, target: int, scale: int, take_stability: int) -> Queryable:
    """002 P-III Alg. 3: D ← Take(K ∪ {r}, 1) ∪ K̄ with K = D ∩ {target}."""
    d = data
    for s in range(scale):
        parts = d.partition([True, False], lambda r: r["v"] == target)
        k, kbar = parts[True], parts[False]
        fresh = pd.DataFrame({"v": [999 + s * 0.0001]})
        kr = k.concat(fresh)
        taken = kr.take(1) if take_stability == 2 else kr._unary(kr._rel.take(1), 1)
        d = taken.concat(kbar)
    return d


def test_take_attack_succeeds_with_pinq_accounting_and_is_defeated_by_stability_2():
    """Spec §4 / §9 row 13: {1..6, 8, 9, 10}, target 7, budget 1.0, NoisyCount(0.01)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    try:
        raw = pd.DataFrame({"v": [1, 2, 3, 4, 5, 6, 8, 9, 10]})
        with7 = pd.DataFrame({"v": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]})
        scale = 1000
        outs = []
        for df in (raw, with7):
            t = Queryable(df, budget=1.0, noise_seed=1)
            d = _reveal(t, 7, scale, take_stability=1)
            assert d.cost(0.01) == pytest.approx(0.01)  # PINQ's Take = 1: the attack is cheap
            outs.append(d.noisy_count(0.01))
            assert t.remaining_budget() == pytest.approx(0.99)
        assert outs[0] - outs[1] > scale / 2  # ≈ 1009 vs ≈ 10: 7's presence is revealed
        # with the true stability 2 the max-agent charges 2^scale · ε
        for s, ok in [(6, True), (7, False)]:
            t = Queryable(with7, budget=1.0)
            d = _reveal(t, 7, s, take_stability=2)
            assert d.cost(0.01) == pytest.approx(2**s * 0.01)
            if ok:
                d.noisy_count(0.01)
            else:
                with pytest.raises(BudgetExceededError):
                    d.noisy_count(0.01)
                assert t.remaining_budget() == 1.0
    finally:
        sys.setrecursionlimit(old)


def test_take_stability_counterexample_spec_row_14():
    """Take({a1..an}, 1) vs Take({ax} ∪ {a1..an}, 1): the outputs differ in 2 records."""
    base = pd.DataFrame({"v": ["a1", "a2", "a3"]})
    plus = pd.concat([pd.DataFrame({"v": ["ax"]}), base], ignore_index=True)
    out1 = set(Queryable(base, budget=1.0).take(1)._df["v"])
    out2 = set(Queryable(plus, budget=1.0).take(1)._df["v"])
    assert len(out1 ^ out2) == 2  # one input change, two output changes: stability 2
    assert Queryable(base, budget=1.0).take(1).cost(1.0) == 2.0
