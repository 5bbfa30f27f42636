"""The charge path of ProPer's budget store: the id -> slot maps (identity, dense table, hash),
the chunk kernel (compiled and numpy, which must agree), charges landing on the right people
when ids are not 0..n-1 or people are added later, a failed commit leaving no debit, and the
payers' records materialised only when a plan needs them."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprivacy.tables.budgets import slot_kernels, slot_store
from dprivacy.tables.budgets.budget_table import BudgetTable
from dprivacy.tables.budgets.engine_budgets import proper_budgets
from dprivacy.tables.budgets.slot_index import SlotIndex
from dprivacy.tables.relations.engine import relation_from


def _reference_lookup(ids, queries):
    pos = {int(v): i for i, v in enumerate(ids)}
    return np.array([pos.get(int(q), -1) for q in queries], dtype=np.int64)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["identity", "dense", "hash"]), n=st.integers(1, 40), data=st.data())
def test_every_id_map_finds_exactly_the_registered_ids(kind, n, data):
    rng = np.random.default_rng(n)
    ids = {"identity": np.arange(n), "dense": rng.permutation(3 * n + 5)[:n],
           "hash": (rng.permutation(n) + 1) * 10**12 + 7}[kind].astype(np.int64)
    index = SlotIndex(ids)
    assert index.identity == (kind == "identity" or (n == 1 and int(ids[0]) == 0))
    assert (index._slot_of is not None) == (kind == "dense" and not index.identity)
    assert (index._hash is not None) == (kind == "hash")
    queries = np.array(data.draw(st.lists(st.sampled_from(
        [*ids.tolist(), -1, -5, 10**15, int(ids.max()) + 1]), max_size=30)), dtype=np.int64)
    slots, known = index.lookup(queries)
    ref = _reference_lookup(ids, queries)
    assert np.array_equal(slots, ref)
    assert known == bool((ref >= 0).all())


def _python_charge(slots, remaining, paid, amount):
    neg = 0
    for s in slots.tolist():
        if s < 0:
            neg += 1
        elif s < remaining.size and not paid[s] and remaining[s] >= amount:
            remaining[s] -= amount
            paid[s] = True
    return neg


needs_jit = pytest.mark.skipif(not slot_kernels.warm(), reason="numba is not installed")


@needs_jit
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), data=st.data())
def test_compiled_and_numpy_kernels_charge_like_the_rule(n, data):
    """Duplicates within and across chunks pay once, ⊥ slots are counted, slots past the end
    pay nothing, exhausted slots are skipped: both kernels, chunk by chunk, as plain Python."""
    amount = data.draw(st.integers(0, 5))
    start = np.array(data.draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)), np.int64)
    chunks = [np.array(c, dtype=np.int64) for c in data.draw(st.lists(
        st.lists(st.integers(-2, n + 2), max_size=12), max_size=4))]
    results = []
    for how in ("python", "jit", "numpy"):
        rem, paid = start.copy(), np.zeros(n, dtype=bool)
        neg = 0
        for c in chunks:
            ro = c.copy()
            ro.flags.writeable = False  # engine chunks are read-only
            if how == "python":
                neg += _python_charge(ro, rem, paid, amount)
            else:
                neg += slot_kernels.charge_chunk(ro, rem, paid, amount, jit=how == "jit")
        results.append((rem.tolist(), paid.tolist(), neg))
    assert results[0] == results[1] == results[2]


def _frame(ids, x):
    return pd.DataFrame({"pid": np.asarray(ids, dtype=np.int64), "x": np.asarray(x, float)})


@pytest.mark.parametrize("kind", ["permuted dense", "sparse hash"])
def test_charges_land_on_the_right_people_whatever_their_ids(tmp_path, kind):
    n = 300
    rng = np.random.default_rng(5)
    ids = rng.permutation(n) + 11 if kind == "permuted dense" else rng.permutation(n) * 10**13 + 1
    x = rng.random(n)
    path = tmp_path / "b.dpb"
    rel, table = proper_budgets(relation_from(_frame(ids, x), "duckdb", id_column="pid"), 1.0,
                                id_column="pid", ledger=str(path))
    left = dict.fromkeys(ids.tolist(), 10**9)
    for q, (lo, eps) in enumerate([(0.2, 0.4), (0.5, 0.4), (0.1, 0.4), (0.0, 0.3)]):
        got = table.pay(rel.where(lambda t, lo=lo: t.x >= lo), eps, label=f"q{q}").count()
        units = round(eps * 1e9)
        payers = [i for i, v in zip(ids.tolist(), x, strict=True)
                  if v >= lo and left[i] >= units]
        for i in payers:
            left[i] -= units
        assert got == len(payers)
    want = np.array([left[i] for i in ids.tolist()]) / 1e9
    assert np.array_equal(table.remaining(ids), want)
    assert np.array_equal(BudgetTable(path).remaining(ids), want)  # replayed from the records


def test_people_added_later_are_charged_under_their_own_ids(tmp_path):
    """The id map is rebuilt when people join (identity -> dense table): no charge is shifted."""
    path = tmp_path / "j.dpb"
    rel, table = proper_budgets(relation_from(_frame(np.arange(6), np.ones(6)), "duckdb",
                                              id_column="pid"), 1.0, id_column="pid",
                                ledger=str(path))
    assert table.pay(rel.where(lambda t: t.pid < 2), 0.5).count() == 2
    assert table.store.identity()
    late = _frame([40, 9, 3], [1.0, 1.0, 1.0])  # 3 is known; 40 and 9 are new
    rel2, _ = proper_budgets(relation_from(late, "duckdb", id_column="pid"), 2.0,
                             id_column="pid", ledger=table)
    assert not table.store.identity()
    assert table.pay(rel2.where(lambda t: t.pid != 9), 0.75).count() == 2
    assert table.pay(rel.where(lambda t: t.pid <= 3), 0.5).count() == 3  # 3 has 0.25 left
    want = {0: 0.0, 1: 0.0, 2: 0.5, 3: 0.25, 4: 1.0, 5: 1.0, 40: 1.25, 9: 2.0}
    for t in (table, BudgetTable(path)):
        assert dict(zip(want, t.remaining(list(want)), strict=True)) == pytest.approx(want)


def test_a_failed_commit_leaves_no_debit_and_no_record(tmp_path, monkeypatch):
    path = tmp_path / "f.dpb"
    rel, table = proper_budgets(relation_from(_frame(np.arange(5), np.ones(5)), "duckdb",
                                              id_column="pid"), 1.0, id_column="pid",
                                ledger=str(path))
    size = path.stat().st_size

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(slot_store, "_append", broken)
    with pytest.raises(OSError, match="disk full"):
        table.pay(rel.where(lambda t: t.pid < 3), 0.5)
    assert list(table.remaining(range(5))) == [1.0] * 5
    assert path.stat().st_size == size and table.queries() == []
    monkeypatch.undo()
    assert table.pay(rel.where(lambda t: t.pid < 3), 0.5).count() == 3
    assert list(BudgetTable(path).remaining(range(5))) == [0.5, 0.5, 0.5, 1.0, 1.0]


def test_the_payers_records_are_what_later_plans_see():
    """A count is known from the charge; any other plan on the eligible records materialises
    the payers' ids (and only theirs, plus ⊥ records)."""
    df = _frame(np.arange(8), np.arange(8) / 10)
    rel, table = proper_budgets(relation_from(df, "duckdb", id_column="pid"), 1.0,
                                id_column="pid")
    table.pay(rel.where(lambda t: t.pid < 3), 0.75)  # 0, 1, 2 keep 0.25
    eligible = table.pay(rel.concat(rel.public(pd.DataFrame({"pid": [99], "x": [0.0]})))
                         .where(lambda t: t.x >= 0.0), 0.5)
    assert eligible.count() == 5 + 1  # people 3..7 pay, plus the public record
    ids, mult = eligible.id_multiplicities()
    assert sorted(ids.tolist()) == [3, 4, 5, 6, 7] and set(mult.tolist()) == {1}
    assert eligible.clamped_sum("x", 0.0, 1.0) == pytest.approx(0.3 + 0.4 + 0.5 + 0.6 + 0.7)


def test_a_large_store_takes_the_compiled_path_and_writes_the_same_records(tmp_path,
                                                                          monkeypatch):
    """Above the size threshold the compiled kernel runs; its store file is byte for byte the
    one the numpy kernel writes for the same queries."""
    n = slot_kernels.JIT_MIN_SLOTS + 10
    x = np.random.default_rng(2).random(n)
    files = []
    for jit in (True, False):
        if not jit:
            monkeypatch.setattr(slot_kernels, "JIT_MIN_SLOTS", 10**12)
        path = tmp_path / f"l{jit}.dpb"
        rel, table = proper_budgets(relation_from(_frame(np.arange(n), x), "duckdb",
                                                  id_column="pid"), 1.0, id_column="pid",
                                    ledger=str(path))
        counts = [table.pay(rel.where(lambda t, lo=lo: t.x >= lo), 0.3).count()
                  for lo in (0.5, 0.2, 0.6, 0.1)]
        files.append((counts, path.read_bytes(), table.remaining(np.arange(n))))
    assert files[0][0] == files[1][0] and files[0][1] == files[1][1]
    assert np.array_equal(files[0][2], files[1][2])
    expect = np.full(n, 1.0)
    for lo in (0.5, 0.2, 0.6, 0.1):
        pays = (x >= lo) & (expect >= 0.3 - 1e-12)
        expect[pays] -= 0.3
    assert np.allclose(files[0][2], expect)


def test_a_null_id_is_nobody_neither_charged_nor_counted():
    """A NULL id in the engine's answer belongs to nobody registered: not charged and not in
    the answer (review: the count's fast path counted it as ⊥, for free, while the eligible
    relation, the general path and Spark drop it, so a count and a sum disagreed on it)."""
    table = BudgetTable()
    table.register(pa.table({"id": [0, 1], "budget": [1.0, 1.0]}), fresh=False)
    df = pd.DataFrame({"pid": pd.array([0, None, 1], dtype="Int64"), "x": [1.0, 10.0, 100.0]})
    rel = relation_from(df, "duckdb", id_column="pid")
    eligible = table.pay(rel, 0.25)
    assert eligible.count() == 2
    t = eligible.table
    assert len(eligible.engine.arrow(t.select(x=t.x))) == 2  # the rows the other aggregates read
    assert list(table.remaining([0, 1])) == [0.75, 0.75]
    bottom = rel.concat(rel.public(pd.DataFrame({"pid": [5], "x": [0.0]})))  # a real ⊥ record
    assert table.pay(bottom, 0.25).count() == 3


@needs_jit
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), data=st.data())
def test_compiled_and_numpy_row_kernels_agree(n, data):
    """Rows selected by a uint8 mask, in chunks cut anywhere, identity or permuted row -> slot:
    both kernels charge exactly what charging the selected rows' slots one by one does, and
    mark exactly the payers."""
    amount = data.draw(st.integers(0, 5))
    start = np.array(data.draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)), np.int64)
    mask = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.uint8)
    perm = data.draw(st.booleans())
    row_slots = np.random.default_rng(n).permutation(n).astype(np.int64) if perm else None
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    results = []
    for how in ("python", "jit", "numpy"):
        rem, paid = start.copy(), np.zeros(n, dtype=bool)
        if how == "python":
            rows = np.flatnonzero(mask)
            _python_charge(rows if row_slots is None else row_slots[rows], rem, paid, amount)
            selected = rows.size
        else:
            selected = 0
            for first, stop in zip([0, *cuts], [*cuts, n], strict=True):
                ro = mask[first:stop].copy()
                ro.flags.writeable = False
                selected += slot_kernels.charge_rows(ro, first, row_slots, rem, paid, amount,
                                                     jit=how == "jit")
        results.append((rem.tolist(), paid.tolist(), selected))
    assert results[0] == results[1] == results[2]


@needs_jit
@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("permuted", [True, False])
def test_row_kernels_refuse_rows_past_the_slots(jit, permuted):
    """A chunk reaching past the store's slots (or the row map) charges nothing: -1."""
    rem = np.full(10, 5, np.int64)
    paid = np.zeros(10, bool)
    row_slots = np.arange(10, dtype=np.int64)[::-1].copy() if permuted else None
    assert slot_kernels.charge_rows(np.ones(4, np.uint8), 8, row_slots, rem, paid, 1,
                                    jit=jit) == -1
    assert rem.tolist() == [5] * 10 and not paid.any()
    if permuted:
        bad = np.array([0, 1, 10], np.int64)  # a slot past the end
        assert slot_kernels.charge_rows(np.ones(3, np.uint8), 0, bad, rem, paid, 1,
                                        jit=jit) == -1
        assert rem.tolist() == [5] * 10 and not paid.any()


@pytest.mark.parametrize("jit", [True, False])
def test_folded_bitmaps_debit_like_one_by_one(monkeypatch, jit):
    """Bitmaps folded through byte counters (more than 255 with one amount, several amounts,
    bitmaps shorter than the store, a store of several blocks) debit exactly what debiting
    each bitmap alone does."""
    if jit and not slot_kernels.warm():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(slot_kernels, "JIT_MIN_SLOTS", 1 if jit else 10**12)
    monkeypatch.setattr(slot_kernels, "_BLOCK", 16)  # two blocks and a part
    rng = np.random.default_rng(7)
    n = 37
    rem = np.full(n, 10**6, np.int64)
    ref = rem.copy()
    folder = slot_kernels.BitFolder(rem)
    for k in range(300):
        m = rng.random(n if k % 7 else 13) < 0.6
        amount = [3, 3, 3, 5, 11][k % 5] if k < 290 else 1000 + k
        bits = np.packbits(m)
        bits.flags.writeable = False
        assert folder.add(bits, amount) == int(m.sum())
        ref[: m.size] -= amount * m
    folder.flush()
    assert rem.tolist() == ref.tolist()


@needs_jit
@pytest.mark.parametrize("case", ["range", "range changed", "equal", "changed", "shorter"])
def test_id_checks_agree_compiled_and_numpy(monkeypatch, case):
    n = 50
    ids = np.arange(n, dtype=np.int64)
    ref = None if case.startswith("range") else np.random.default_rng(0).permutation(n)
    cur = (ids if ref is None else ref).copy()
    if "changed" in case:
        cur[17] += 1
    if case == "shorter":
        cur = cur[:-1]
    want = case in ("range", "equal")
    monkeypatch.setattr(slot_kernels, "JIT_MIN_SLOTS", 1)  # compiled
    assert slot_kernels.same_ids(cur, ref) is want
    monkeypatch.setattr(slot_kernels, "JIT_MIN_SLOTS", 10**12)  # numpy
    assert slot_kernels.same_ids(cur, ref) is want


@pytest.mark.parametrize("jit", [True, False])
def test_a_row_stream_that_fails_or_changes_charges_nothing(tmp_path, monkeypatch, jit):
    """Rows charged straight into the payers' bitmap: a stream that fails part way, is too
    long or too short, or whose source check says the ids changed leaves every budget and
    the file as they were; a complete one commits exactly its payers."""
    if jit and not slot_kernels.warm():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(slot_kernels, "JIT_MIN_SLOTS", 1 if jit else 10**12)
    path = str(tmp_path / "rows.dpb")
    n = 21
    s = slot_store.SlotStore(path)
    with s.locked():
        s.add(np.arange(n, dtype=np.int64), np.full(n, 10, np.int64))
        s.charge(np.array([3], np.int64), 8, "setup")  # 3 cannot pay 3 any more
    setup = list(s.queries)
    size = os.path.getsize(path)
    mask = np.array([1, 0, 1, 1] * 5 + [1], np.uint8)

    def broken():
        yield mask[:5]
        yield mask[5:13]
        raise OSError("the engine failed")

    def cut(parts):
        return lambda: iter([mask[a:b] for a, b in parts])

    cases = [(broken, None, OSError), (cut([(0, 13), (0, 13)]), None, slot_store.RowsChanged),
             (cut([(0, 20)]), None, slot_store.RowsChanged),
             (cut([(0, 9), (9, 21)]), lambda: False, slot_store.RowsChanged)]
    for chunks, check, error in cases:
        with s.locked(), pytest.raises(error):
            s.charge_stream(chunks(), 3, "q", rows=n, check=check)
        assert s.remaining.tolist() == [10, 10, 10, 2] + [10] * 17
        assert os.path.getsize(path) == size and s.queries == setup
    with s.locked():
        bits, payers, bottom = s.charge_stream(cut([(0, 9), (9, 21)])(), 3, "ok", rows=n,
                                               check=lambda: True)
    want = (mask == 1) & (np.arange(n) != 3)
    assert payers == int(want.sum()) and bottom == 0
    assert bits.tolist() == np.packbits(want).tolist()
    s.close()
    again = slot_store.SlotStore(path)
    with again.locked():
        assert again.remaining.tolist() == np.where(want, 7, [10, 10, 10, 2] + [10] * 17).tolist()
        assert again.queries == [*setup, [2, "ok", payers, 3 * payers]]


def test_a_store_with_hundreds_of_records_replays_exactly(tmp_path):
    """More records than a byte counter holds (255), two amounts, bitmaps and (slot, amount)
    records interleaved: a reopened store equals the one that charged them."""
    path = str(tmp_path / "many.dpb")
    s = slot_store.SlotStore(path)
    s.compact_bytes = 10**12  # never folded into a snapshot: everything is replayed
    n = 37
    with s.locked():
        s.add(np.arange(n, dtype=np.int64), np.full(n, 10**6, np.int64))
    rng = np.random.default_rng(5)
    for q in range(300):
        picked = np.flatnonzero(rng.random(n) < 0.5)
        with s.locked():
            if q % 50 == 7:
                s.charge(picked, rng.integers(1, 9, picked.size), f"q{q}")
            else:
                s.charge(picked, 3 if q % 3 else 5, f"q{q}")
    want, log = s.remaining.copy(), [list(q) for q in s.queries]
    s.close()
    again = slot_store.SlotStore(path)
    with again.locked():
        assert again.remaining.tolist() == want.tolist()
        assert [list(q) for q in again.queries] == log and again.next_query == 301
