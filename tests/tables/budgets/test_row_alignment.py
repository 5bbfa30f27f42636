"""Where-chains charged from one byte per source row (budgets aligned with the source's rows):
the charges land on the right people whatever the ids' order, the alignment is checked before
every query (a source whose ids changed takes the general path, charged by its current ids),
and the engine must keep row order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from ibis import _

from dprivacy.tables import ProPerTable
from dprivacy.tables.budgets import slot_kernels
from dprivacy.tables.budgets.budget_table import BudgetTable
from dprivacy.tables.relations.engine.relation import PID


@pytest.fixture
def row_calls(monkeypatch):
    """Counts the queries charged through the row-aligned path."""
    calls = []
    orig = slot_kernels.charge_rows

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    monkeypatch.setattr(slot_kernels, "charge_rows", spy)
    return calls


def _ref_charge(left, ids, selected, units):
    paid = 0
    for i, s in zip(ids, selected, strict=True):
        if s and left[i] >= units:
            left[i] -= units
            paid += 1
    return paid


@pytest.mark.parametrize("order", ["in order", "permuted"])
def test_row_charges_land_on_the_right_people(tmp_path, row_calls, order):
    n = 500
    rng = np.random.default_rng(3)
    ids = np.arange(n) if order == "in order" else rng.permutation(n) * 3 + 2
    df = pd.DataFrame({"pid": ids.astype(np.int64), "x": rng.random(n), "y": rng.integers(0, 5, n)})
    budgets = BudgetTable(tmp_path / "r.dpb")
    p = ProPerTable(df, 1.0, id_column="pid", ledger=budgets, backend="duckdb", noise_seed=1)
    left = dict.fromkeys(ids.tolist(), 10**9)
    queries = [(p.where(_.x > 0.3), df.x > 0.3), (p.where(_.x > 0.3).where(_.y < 3),
                                                  (df.x > 0.3) & (df.y < 3)),
               (p.where(_.y == 1), df.y == 1)]
    for k in range(6):
        table, sel = queries[k % 3]
        eligible = budgets.pay(table._rel, 0.3)
        assert eligible.count() == _ref_charge(left, ids.tolist(), sel.tolist(), 3 * 10**8)
    assert len(row_calls) > 0  # the row-aligned path ran (one call per chunk)
    want = np.array([left[i] for i in ids.tolist()]) / 1e9
    assert np.array_equal(budgets.remaining(ids), want)
    assert np.array_equal(BudgetTable(tmp_path / "r.dpb").remaining(ids), want)


def test_a_source_whose_ids_changed_is_charged_by_its_current_ids(tmp_path, row_calls):
    n = 50
    df = pd.DataFrame({"pid": np.arange(n, dtype=np.int64), "x": np.linspace(0, 1, n)})
    budgets = BudgetTable(tmp_path / "c.dpb")
    p = ProPerTable(df, 1.0, id_column="pid", ledger=budgets, backend="duckdb")
    sel = p.where(_.x < 0.5)  # rows 0..24
    assert budgets.pay(sel._rel, 0.5).count() == 25
    used = len(row_calls)
    assert used > 0
    df.loc[:, "pid"] = np.arange(n, dtype=np.int64)[::-1].copy()  # rows now hold other people
    assert budgets.pay(sel._rel, 0.25).count() == 25
    # the ids are checked while the rows stream: the row charge was undone, not committed,
    # the general path charged instead, and the alignment is dropped for later queries
    assert len(budgets.queries()) == 2 and not budgets._rows
    used = len(row_calls)
    assert budgets.pay(sel._rel, 0.0).count() == 25
    assert len(row_calls) == used and len(budgets.queries()) == 3
    # which ids the engine sees for those rows (the frame's new ones or the old ones it kept)
    # is the engine's business: the people charged are exactly the ones it counted
    t = sel._rel.table
    seen = sel._rel.engine.arrow(t.select(i=t[PID])).column("i").to_numpy()
    left = budgets.remaining(np.arange(n))
    want = np.full(n, 1.0)
    want[:25] -= 0.5
    want[seen] -= 0.25
    assert np.array_equal(left, want)


def test_arrow_sources_and_fresh_ids_are_aligned(row_calls):
    n = 40
    at = pa.table({"x": np.linspace(0, 1, n)})
    budgets = BudgetTable()
    p = ProPerTable(at, 1.0, ledger=budgets, backend="duckdb")
    first = budgets.store.ids.min()
    assert budgets.pay(p.where(_.x >= 0.5)._rel, 0.6).count() == 20
    assert budgets.pay(p.where(_.x >= 0.25)._rel, 0.6).count() == 10  # rows 10..19 only
    assert len(row_calls) > 0
    left = budgets.remaining(np.arange(n) + first)
    assert list(left) == pytest.approx([1.0] * 10 + [0.4] * 30)


def test_an_engine_that_may_reorder_rows_takes_the_general_path(row_calls):
    df = pd.DataFrame({"pid": np.arange(10, dtype=np.int64), "x": np.arange(10.0)})
    budgets = BudgetTable()
    p = ProPerTable(df, 1.0, id_column="pid", ledger=budgets, backend="duckdb")
    eng = p._rel.engine
    eng.execute("SET preserve_insertion_order = false")
    try:
        assert budgets.pay(p.where(_.x >= 4)._rel, 0.5).count() == 6
    finally:
        eng.execute("SET preserve_insertion_order = true")
    assert row_calls == []
    assert list(budgets.remaining(np.arange(10))) == [1.0] * 4 + [0.5] * 6


def test_the_store_lock_is_free_while_the_engine_works(tmp_path, row_calls, monkeypatch):
    """The budget store's file lock (shared by every process charging the store) is taken for
    the charge and its commit only: while the engine produces a query's chunks another process
    could take it, so no process waits for another one's engine work."""
    import fcntl
    import os

    from dprivacy.tables.relations.engine.backends import DuckEngine, Engine

    n = 3000
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"pid": np.arange(n, dtype=np.int64), "x": rng.random(n)})
    path = tmp_path / "l.dpb"
    budgets = BudgetTable(path)
    p = ProPerTable(df, 10.0, id_column="pid", ledger=budgets, backend="duckdb")
    free: list[bool] = []

    def lock_is_free() -> bool:
        fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    def spied(orig):
        def gen(self, expr):
            for ch in orig(self, expr):
                free.append(lock_is_free())
                yield ch
        return gen

    monkeypatch.setattr(DuckEngine, "column_stream", spied(DuckEngine.column_stream))
    monkeypatch.setattr(Engine, "column_chunks", spied(Engine.column_chunks))
    assert budgets.pay(p.where(_.x > 0.5)._rel, 0.5).count() == int((df.x > 0.5).sum())
    assert len(row_calls) > 0  # the row-aligned path
    p.noisy_count(0.5)  # the general unique path
    assert len(free) >= 2 and all(free)
    assert len(budgets.queries()) == 2
