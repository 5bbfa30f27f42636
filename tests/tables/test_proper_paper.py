"""ProPer's paper examples: the NameLengths pipeline and AsPINQ (POPL'15 §6.2) and the
user-defined refresh of live data (SetRefresh/Refresh, POPL'15 §6.2 "Dynamic data")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprivacy.errors import BudgetExceededError, UnknownRecordError, ValidationError
from dprivacy.tables import ProPerTable, Queryable

EPS = 0.1


def population() -> pd.DataFrame:
    """002 P-II §6.2: Individual{name, role1, role2}; Alice Teacher+Headmaster, Bob Manager+Teacher."""
    return pd.DataFrame({
        "name": ["Alice", "Bob", "Carol", "Dave", "Erin", "Maximilianus"],
        "role1": ["Teacher", "Manager", "Manager", "Teacher", "Clerk", "Teacher"],
        "role2": ["Headmaster", "Teacher", "Headmaster", "-", "-", "-"],
    })


TEACHERS = [0, 1, 3, 5]  # Alice, Bob, Dave, Maximilianus


def name_lengths(t: ProPerTable) -> ProPerTable:
    """Admins = Where(role1 or role2 is Teacher); NameLengths = Select(name length)."""
    admins = t.where(lambda r: r["role1"] == "Teacher" or r["role2"] == "Teacher")
    return admins.select(name=lambda r: len(r["name"]))


def spent(t: ProPerTable, initial) -> np.ndarray:
    return np.asarray(initial, float) - t._ledger.remaining(np.arange(len(initial)))


def test_name_lengths_noisy_average_shape_and_charges():
    """NoisyAverage(ε, x => x/20) * 20: one number; every teacher pays ε, the others nothing."""
    t = ProPerTable(population(), budget=1.0)
    lengths = name_lengths(t)
    assert lengths.columns == ["name"] and isinstance(lengths, ProPerTable)
    avg = lengths.noisy_average(EPS, lambda r: r["name"] / 20) * 20
    assert isinstance(avg, float) and -20 <= avg <= 20  # PINQ's clamp to [-1, 1], then ×20
    expected = np.zeros(6)
    expected[TEACHERS] = EPS
    assert spent(t, [1.0] * 6) == pytest.approx(expected)
    lengths.noisy_average(EPS, lambda r: r["name"] / 20)
    assert spent(t, [1.0] * 6) == pytest.approx(2 * expected)  # sequential: costs add per record


def test_name_lengths_average_is_of_the_payers_only():
    """With ε large the noise vanishes: the answer is the mean name length of the teachers who
    can pay; the one who cannot (Maximilianus, 12 letters) is silently left out, uncharged."""
    big = 1e4
    budget = [2 * big] * 5 + [big / 2]
    t = ProPerTable(population(), budget=budget)
    avg = name_lengths(t).noisy_average(big, lambda r: r["name"] / 20) * 20
    assert avg == pytest.approx(np.mean([5, 3, 4]), abs=0.05)  # Alice, Bob, Dave
    assert spent(t, budget) == pytest.approx([big, big, 0, big, 0, 0])
    rich = ProPerTable(population(), budget=2 * big)  # everyone can pay: Maximilianus counts
    avg = name_lengths(rich).noisy_average(big, lambda r: r["name"] / 20) * 20
    assert avg == pytest.approx(np.mean([5, 3, 4, 12]), abs=0.05)


def test_name_lengths_as_pinq():
    """var pinqObj = NameLengths.AsPINQ(ε): each involved record pays ε; a PINQ table with total
    budget ε over the payers' records, on which PINQ-only operators (GroupBy) work."""
    budget = [1.0, 1.0, 1.0, 1.0, 1.0, 0.05]
    t = ProPerTable(population(), budget=budget)
    pinq_obj = name_lengths(t).as_pinq(EPS)
    assert isinstance(pinq_obj, Queryable)
    assert pinq_obj.remaining_budget() == pytest.approx(EPS)
    assert sorted(pinq_obj._df["name"]) == [3, 4, 5]  # Maximilianus (0.05 < ε) left out
    assert spent(t, budget) == pytest.approx([EPS, EPS, 0, EPS, 0, 0])
    avg = pinq_obj.noisy_average(EPS / 2, lambda r: r["name"] / 20) * 20
    assert -20 <= avg <= 20
    pinq_obj.group_by("name").noisy_count(EPS / 4)  # GroupBy: stability 2
    assert pinq_obj.remaining_budget() == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(BudgetExceededError):
        pinq_obj.noisy_count(1e-3)
    assert spent(t, budget) == pytest.approx([EPS, EPS, 0, EPS, 0, 0])  # PINQ spends its own ε


def test_as_pinq_charges_eps_per_derived_record():
    """Corollary 1: the prototype charges ε (1-to-1 transforms); a source with 2 derived records
    pays 2ε, one with none pays nothing."""
    t = ProPerTable(population(), budget=1.0)
    roles = t.select_many(2, lambda r: [r["role1"], r["role2"]])
    roles.where(lambda r: r["value"] != "-").as_pinq(EPS)
    assert spent(t, [1.0] * 6) == pytest.approx([0.2, 0.2, 0.2, 0.1, 0.1, 0.1])


def paper_refresh(new_population: pd.DataFrame, eps: float):
    """protectData.SetRefresh(obj => obj.Remove(predicate => true).Insert(newPopulation, ε))."""
    def f(obj: ProPerTable) -> None:
        obj.delete(lambda r: True)
        obj.insert(new_population, budget=eps)
    return f


def test_refresh_replaces_the_population_with_fresh_ids_and_budgets():
    t = ProPerTable(population(), budget=0.3)
    before = t.where(lambda r: r["role1"] == "Teacher")  # a snapshot taken before the refresh
    t.noisy_count(0.2)
    newcomers = pd.DataFrame({"name": ["Fay", "Gus"], "role1": ["Teacher", "Clerk"],
                              "role2": ["-", "Teacher"]})
    t.set_refresh(paper_refresh(newcomers, EPS))
    t.refresh()
    assert list(t._df["name"]) == ["Fay", "Gus"] and list(t._prov) == [6, 7]  # fresh ids
    assert t._ledger.remaining([6, 7]) == pytest.approx([EPS, EPS])
    assert t._ledger.remaining(range(6)) == pytest.approx([0.1] * 6)  # old budgets not restored
    name_lengths(t).noisy_count(EPS)
    assert t._ledger.remaining([6, 7]) == pytest.approx([0, 0], abs=1e-12)
    t.refresh()  # the stored function runs again: newcomers re-enter with new ids 8, 9
    assert list(t._prov) == [8, 9] and t._ledger.remaining([8, 9]) == pytest.approx([EPS, EPS])
    assert len(before._df) == 3 and list(before._prov) == [0, 3, 5]  # snapshots are unaffected
    assert t._ledger.remaining(range(6)) == pytest.approx([0.1] * 6)


def test_refresh_that_keeps_records_does_not_raise_budgets():
    t = ProPerTable(pd.DataFrame({"v": [1, 2, 3]}), budget=0.2)
    t.noisy_count(0.2)  # everyone exhausted
    t.set_refresh(lambda obj: obj.update(lambda r: {"v": r["v"] + 1}))
    t.refresh()
    assert list(t._df["v"]) == [2, 3, 4] and list(t._prov) == [0, 1, 2]
    assert t.as_pinq(0.1)._df.empty  # still exhausted: a refresh never adds budget


def test_refresh_errors():
    t = ProPerTable(pd.DataFrame({"v": [1]}))
    with pytest.raises(ValidationError, match="set_refresh"):
        t.refresh()
    with pytest.raises(ValidationError, match="callable"):
        t.set_refresh(42)  # type: ignore[arg-type]
    t.set_refresh(lambda obj: obj.delete(ids=[99]))  # unknown id: the refresh raises, no change
    with pytest.raises(UnknownRecordError, match="unknown record id 99"):
        t.refresh()
    assert len(t._df) == 1
