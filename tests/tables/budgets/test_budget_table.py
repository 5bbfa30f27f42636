"""BudgetTable: ProPer's Query rule (ids from the engine, budgets charged vectorised) against a
Python reference of POPL'15 Fig. 3; durability, replay, torn records and compaction; the store's
size; the same statements whoever can pay; SIGKILL at random points; processes racing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import ibis
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables.budgets.budget_table import BudgetTable
from dprivacy.tables.budgets.engine_budgets import proper_budgets
from dprivacy.tables.budgets.ledger import scalar_units
from dprivacy.tables.relations.engine import relation_from
from tests.sigkill import run_with_random_kills

ROOT = str(Path(__file__).resolve().parents[3])
ENV = {**os.environ, "PYTHONPATH": ROOT}


def _people(budgets, mult, *, ledger=None, ids=None):
    n = len(budgets)
    ids = np.arange(n) if ids is None else np.asarray(ids)
    df = pd.DataFrame({"id": ids, "k": np.arange(n), "m": mult, "b": budgets})
    return proper_budgets(relation_from(df, "duckdb", id_column="id"), "b", id_column="id",
                          ledger=ledger)


def _reference(budgets, queries):
    """POPL'15 Fig. 3 in plain Python: per query (eps, selected ids, copies per id)."""
    left = [int(np.floor(b * 1e9 + 1e-3)) for b in budgets]
    answers, payers = [], []
    for eps, ids, copies in queries:
        n = p = 0
        for i in ids:
            c = scalar_units(eps) * copies[i]
            if c == 0:
                continue
            if left[i] >= c:
                left[i] -= c
                n += copies[i]
                p += 1
        answers.append(n)
        payers.append(p)
    return answers, [x / 1e9 for x in left], payers


@settings(max_examples=15, deadline=None)
@given(budgets=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.3, 1.0, 2.0]), min_size=1, max_size=8),
       data=st.data(), compact=st.booleans(), sparse_ids=st.booleans())
def test_pay_matches_the_reference_rule(tmp_path_factory, budgets, data, compact, sparse_ids):
    n = len(budgets)
    mult = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    path = tmp_path_factory.mktemp("ref") / "b.dpb"
    # sparse ids (not 0..n-1) go through the store's hash index instead of direct indexing
    ids = (np.random.default_rng(n).permutation(n) * 7 + 3) if sparse_ids else np.arange(n)
    rel, table = _people(budgets, mult, ledger=str(path), ids=ids)
    if compact:
        table.store.compact_bytes = 0  # a new snapshot after every query
    queries, answers = [], []
    for _ in range(data.draw(st.integers(1, 6))):
        eps = data.draw(st.sampled_from([0.05, 0.1, 0.25]))
        lo = data.draw(st.integers(0, n - 1))
        flat = data.draw(st.booleans())  # False: one record per id (the unique route)
        sub = rel.where(lambda t, lo=lo: t.k >= lo)
        if flat:  # m copies of each record: its source pays m·eps
            sub = sub.select_many(3, lambda t: ibis.array([t.id, t.id, t.id])[: t.m], None)
            copies = dict(enumerate(mult))
        else:
            copies = dict.fromkeys(range(n), 1)
        queries.append((eps, range(lo, n), copies))
        answers.append(table.pay(sub, eps).count())
    ref_answers, ref_left, ref_payers = _reference(budgets, queries)
    assert answers == ref_answers
    assert list(table.remaining(ids)) == pytest.approx(ref_left, abs=1e-9)
    # a new process replays the records (or loads the snapshot) to the same budgets
    assert list(BudgetTable(path).remaining(ids)) == pytest.approx(ref_left, abs=1e-9)
    assert [q[2] for q in BudgetTable(path).queries()] == ref_payers  # the audit summary


def test_costs_saturate_and_unknown_ids_are_refused(tmp_path):
    rel, table = _people([1.0, 1.0], [1, 1])
    big = rel.select_many(3, lambda t: [t.id, t.id], None)
    assert table.pay(big, 1e300).count() == 0  # 2e300 per source does not fit: nobody pays
    assert list(table.remaining([0, 1])) == [1.0, 1.0]
    with pytest.raises(UnknownRecordError, match="unknown"):
        table.remaining([5])


def test_duplicate_ids_are_refused_before_registration(tmp_path):
    df = pd.DataFrame({"id": [1, 1, 2]})
    with pytest.raises(ValidationError, match="distinct"):
        proper_budgets(relation_from(df, "duckdb", id_column="id"), 1.0, id_column="id",
                       ledger=str(tmp_path / "d.dpb"))
    with pytest.raises(UnknownRecordError):  # nothing was registered
        BudgetTable(tmp_path / "d.dpb").remaining([2])


def test_a_torn_record_is_discarded_and_later_charges_replay(tmp_path):
    path = tmp_path / "t.dpb"
    rel, table = _people([1.0] * 4, [1] * 4, ledger=str(path))
    assert table.pay(rel.where(lambda t: t.k < 2), 0.25).count() == 2
    good = path.stat().st_size
    assert table.pay(rel.where(lambda t: t.k >= 2), 0.5).count() == 2
    rec = path.read_bytes()[good:]
    with open(path, "r+b") as f:  # as if the second writer died mid-write: half its record
        f.truncate(good + len(rec) // 2)
    again = BudgetTable(path)
    assert list(again.remaining([0, 1, 2, 3])) == [0.75, 0.75, 1.0, 1.0]
    assert path.stat().st_size == good  # the torn tail is cut before anything is appended
    rel2, t2 = _people([1.0] * 4, [1] * 4, ledger=again)
    assert t2.pay(rel2.where(lambda t: t.k == 3), 0.125).count() == 1
    assert list(BudgetTable(path).remaining([0, 1, 2, 3])) == [0.75, 0.75, 1.0, 0.875]
    assert [q[1:3] for q in BudgetTable(path).queries()] == [(None, 2), (None, 1)]


def test_the_store_stays_under_16_bytes_per_person_after_100_queries(tmp_path):
    n = 50_000
    gen = np.random.default_rng(1)
    df = pd.DataFrame({"id": np.arange(n), "x": gen.random(n)})
    path = tmp_path / "s.dpb"
    rel, table = proper_budgets(relation_from(df, "duckdb", id_column="id"), 1.0,
                                id_column="id", ledger=str(path))
    left = np.full(n, 10**9)
    for q in range(100):
        lo = (q % 10) / 10  # a different half of the people each time
        table.pay(rel.where(lambda t, lo=lo: (t.x >= lo) & (t.x < lo + 0.5)), 0.02)
        pays = (df["x"] >= lo) & (df["x"] < lo + 0.5) & (left >= 2 * 10**7)
        left[pays.to_numpy()] -= 2 * 10**7
    assert table.storage_bytes() / n <= 16
    assert np.array_equal(BudgetTable(path).remaining(np.arange(n)), left / 1e9)


def test_the_same_statements_run_whoever_can_pay():
    """The engine sees the same SQL for a query that everybody pays and for one nobody can."""
    seen = {}
    for label, budget in (("rich", 10.0), ("exhausted", 0.0)):
        rel, table = _people([budget] * 6, [1] * 6)
        sqls = []
        orig = rel.engine.sql
        rel.engine.sql = lambda e, orig=orig, sqls=sqls: sqls.append(orig(e)) or sqls[-1]
        try:
            for sub in (rel.where(lambda t: t.k > 2),
                        rel.select_many(2, lambda t: ibis.array([t.k, t.k]), None)):
                table.pay(sub, 0.5).count()
        finally:
            del rel.engine.sql
        seen[label] = [re.sub(r"__dp_\w+_\d+|ibis_\w+", "T", s) for s in sqls]  # fresh names
    assert seen["rich"] == seen["exhausted"] and len(seen["rich"]) >= 3


def _spawn(*args: str) -> subprocess.Popen:
    """A fresh interpreter running budget_worker.py (not yet waited for)."""
    return subprocess.Popen([sys.executable, "-m", "tests.tables.budgets.budget_worker", *args],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)


def _ready(proc: subprocess.Popen) -> subprocess.Popen:
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _worker(*args: str) -> subprocess.Popen:
    return _ready(_spawn(*args))


@pytest.mark.slow
def test_sigkill_at_random_points_never_releases_an_uncharged_answer(tmp_path):
    db, out = tmp_path / "k.dpb", tmp_path / "released.txt"
    n = 40
    kills = run_with_random_kills(lambda done: _worker("kill", str(db), str(out), str(done), str(n)),
                                  out, n, kills_wanted=3, max_wait=0.6, seed=0, max_kills=200)
    released = [line.split() for line in out.read_text().splitlines()]
    assert [r[1] for r in released] == [f"q{i}" for i in range(n)] and kills >= 2
    table = BudgetTable(db)
    logged = {q: (label, payers) for q, label, payers, _ in table.queries()}
    ids = list(range(20))
    init, left = table.initial(ids), table.remaining(ids)
    for qid, label, answer in released:  # every released answer was charged, to its payers
        assert logged[int(qid)] == (label, int(answer))
    assert all(0 <= a <= b for a, b in zip(left, init, strict=True))  # never overspent
    # 40 queries of 0.07 over 4 groups: each source is asked >= 10 times and pays each time
    # (re-run queries after a kill included): every debit is logged, none is lost or doubled
    units = scalar_units(0.07)
    spent = np.round((init - left) * 1e9).astype(np.int64)
    assert sum(p for _, p in logged.values()) * units == spent.sum()
    assert all(s % units == 0 and s >= 10 * units for s in spent)


@pytest.mark.slow
def test_processes_racing_never_overspend(tmp_path):
    db, go = tmp_path / "r.dpb", tmp_path / "go"
    BudgetTable(db).register(pa.table({"id": [0, 1, 2], "budget": [2.0, 1.0, 0.35]}), fresh=False)
    procs = [_ready(p) for p in [_spawn("race", str(db), "6", str(go)) for _ in range(4)]]
    go.touch()
    wins = np.zeros(3, dtype=int)
    for p in procs:
        stdout, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        wins += np.array(stdout.split(), dtype=int)
    assert list(wins) == [20, 10, 3]  # 24 attempts each; exactly floor(budget / 0.1) succeed
    assert list(BudgetTable(db).remaining([0, 1, 2])) == pytest.approx([0.0, 0.0, 0.05])


def test_an_in_memory_store_refuses_a_forked_child():
    """A forked copy of in-memory budgets would let two processes spend them twice."""
    rel, table = _people([1.0] * 3, [1] * 3)
    pid = os.fork()
    if pid == 0:  # the child: charging must fail, and it reports how
        try:
            table.pay(rel, 0.5)
            code = 1
        except ValidationError:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert list(table.remaining([0, 1, 2])) == [1.0, 1.0, 1.0]
    assert table.pay(rel, 0.5).count() == 3  # the parent still charges
