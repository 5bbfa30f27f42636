"""count_by: one noisy count per key of a public list, ε in total (parallel composition)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprivacy.errors import BudgetExceededError, ValidationError
from dprivacy.tables import MemoryLedger, ProPerTable, Queryable

ZIPS = pd.DataFrame({"pid": range(7), "zip": ["a", "a", "a", "b", "b", "x", "y"]})
TRUE = {"a": 3, "b": 2, "c": 0}


def budgets(ledger: MemoryLedger) -> list[float]:
    return list(ledger.remaining(np.arange(7)))


@pytest.mark.parametrize("backend", ["pandas", "duckdb"])
def test_pinq_counts_each_key_for_eps_in_total(backend: str) -> None:
    if backend == "duckdb":
        pytest.importorskip("duckdb")
    t = Queryable(ZIPS, budget=1e9, backend=backend, noise_seed=0)
    counts = t.count_by(["a", "b", "c"], "zip", eps=1e6)      # noise ~ 1e-6
    assert list(counts) == ["a", "b", "c"]                     # the keys, in the order given
    assert {k: round(v) for k, v in counts.items()} == TRUE    # "x", "y": outside the list
    t2 = Queryable(ZIPS, budget=1.0, backend=backend, noise_seed=0)
    t2.count_by(["a", "b", "c"], "zip", eps=0.25)
    assert t2.remaining_budget() == pytest.approx(0.75)        # eps in total, not 3 x eps


def test_pinq_cost_follows_the_scaling_factor_and_refuses_before_charging() -> None:
    t = Queryable(ZIPS, budget=1.0, noise_seed=0)
    doubled = t.select_many(2, lambda r: [r["zip"], r["zip"]])
    doubled.count_by(["a", "b"], "value", eps=0.25)
    assert t.remaining_budget() == pytest.approx(0.5)          # stability 2: 2 x 0.25
    with pytest.raises(BudgetExceededError):
        doubled.count_by(["a", "b"], "value", eps=0.3)
    for bad in ((["a", "a"], "zip", 0.1), (["a"], "zip", 0), (["a"], "no_such_column", 0.1),
                ("ab", "zip", 0.1)):
        with pytest.raises(ValidationError):
            t.count_by(*bad)
    assert t.remaining_budget() == pytest.approx(0.5)          # nothing charged by the refusals


def test_group_by_is_the_number_of_groups_at_twice_the_cost() -> None:
    """The trap count_by replaces: group_by(...).noisy_count is ONE number (the groups) at 2ε."""
    t = Queryable(ZIPS, budget=1e9, noise_seed=0)
    assert round(t.group_by("zip").noisy_count(eps=1e6)) == 4
    t = Queryable(ZIPS, budget=1.0, noise_seed=0)
    t.group_by("zip").noisy_count(eps=0.25)
    assert t.remaining_budget() == pytest.approx(0.5)


def test_noise_scale_is_one_over_eps_per_key() -> None:
    """Every key gets Lap(1/ε), not Lap(K/ε): mean |noise| over 4000 empty keys is 1/ε."""
    t = Queryable(ZIPS, budget=1e9, noise_seed=1)
    keys = [f"k{i}" for i in range(4000)]
    noise = np.array(list(t.count_by(keys, "zip", eps=0.5).values()))
    assert abs(np.mean(np.abs(noise)) - 2.0) < 0.15            # E|Lap(2)| = 2, sd of the mean 0.03


def test_proper_each_record_pays_eps_once() -> None:
    led = MemoryLedger()
    p = ProPerTable(ZIPS, budget=1.0, id_column="pid", ledger=led, noise_seed=0)
    counts = p.count_by(["a", "b", "c"], "zip", eps=0.25)
    assert list(counts) == ["a", "b", "c"]
    assert budgets(led) == pytest.approx([0.75] * 5 + [1.0, 1.0])  # x, y: not counted, not charged


def test_proper_leaves_out_those_who_cannot_pay() -> None:
    led = MemoryLedger()
    p = ProPerTable(ZIPS, budget=2e5, id_column="pid", ledger=led, noise_seed=0)
    p.where(lambda r: r["zip"] == "a").noisy_count(eps=1.5e5)  # the a's have 0.5e5 left
    counts = p.count_by(["a", "b"], "zip", eps=1e5)            # noise ~ 1e-5
    assert round(counts["a"]) == 0 and round(counts["b"]) == 2  # the a's could not pay
    assert budgets(led) == pytest.approx([0.5e5] * 3 + [1e5] * 2 + [2e5] * 2)
