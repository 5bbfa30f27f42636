"""The ProPer ledger is the data owner's handle, not the analyst's: no public attribute of a
ProPer table (or of anything derived from it) returns the ledger or any budget store, whose
remaining budgets would show exactly who matched a filter."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprivacy.tables import Ledger, MemoryLedger, ProPerTable
from dprivacy.tables.budgets.ledger import BudgetLedger


def _public_values(obj):
    for name in dir(obj):
        if name.startswith("_"):
            continue
        try:
            yield name, getattr(obj, name)
        except Exception:  # noqa: BLE001 - a property that refuses is not a leak
            continue


def _is_store(v, led):
    if v is led or isinstance(v, BudgetLedger):
        return True
    try:
        from dprivacy.tables.budgets.budget_table import BudgetTable
    except ImportError:  # pragma: no cover
        return False
    return isinstance(v, BudgetTable)


def _derived(p):
    yield p
    yield p.where(lambda r: r["x"] > 0)
    yield p.select(v=lambda r: r["x"])
    yield from p.partition([0, 1], "g").values()
    yield p.as_pinq(0.1)


@pytest.mark.parametrize("make", ["memory", "sqlite", "default"])
def test_no_public_attribute_returns_the_ledger(tmp_path, make):
    df = pd.DataFrame({"pid": np.arange(6), "x": np.linspace(-1, 1, 6), "g": np.arange(6) % 2})
    led = {"memory": MemoryLedger, "sqlite": lambda: Ledger(tmp_path / "b.sqlite"),
           "default": lambda: None}[make]()
    p = ProPerTable(df, budget=1.0, ledger=led, id_column="pid")
    assert not hasattr(p, "ledger")
    for t in _derived(p):
        for name, v in _public_values(t):
            assert not _is_store(v, led), (type(t).__name__, name)


def test_the_owner_reads_budgets_through_the_handle_it_passed():
    df = pd.DataFrame({"pid": [7, 8, 9], "role": ["T", "M", "T"]})
    budgets = MemoryLedger()
    p = ProPerTable(df, budget=1.0, ledger=budgets, id_column="pid")
    p.where(lambda r: r["role"] == "T").noisy_count(0.5)
    assert [float(b) for b in budgets.remaining([7, 8, 9])] == [0.5, 1.0, 0.5]


def test_engine_table_exposes_no_budget_table():
    pytest.importorskip("duckdb")
    from dprivacy.tables.budgets.budget_table import BudgetTable

    df = pd.DataFrame({"pid": np.arange(6), "x": np.linspace(-1, 1, 6), "g": np.arange(6) % 2})
    bt = BudgetTable()
    p = ProPerTable(df, budget=1.0, ledger=bt, id_column="pid", backend="duckdb")
    for t in (p, p.where(lambda t: t.x > 0)):
        for name, v in _public_values(t):
            assert not _is_store(v, bt), name
    p.noisy_count(0.25)
    np.testing.assert_allclose(bt.remaining(np.arange(6)), 0.75)
