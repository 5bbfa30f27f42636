"""BudgetTable: ProPer's Query rule set-based in DuckDB, against a Python reference of POPL'15
Fig. 3; durability; SIGKILL at random points; processes racing for the same budgets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import ibis
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprivacy.tables.budgets.budget_table import BudgetTable
from dprivacy.tables.budgets.engine_budgets import proper_budgets
from dprivacy.tables.budgets.ledger import scalar_units
from dprivacy.tables.relations.engine import relation_from
from tests.sigkill import run_with_random_kills

ROOT = str(Path(__file__).resolve().parents[3])
ENV = {**os.environ, "PYTHONPATH": ROOT}


def _people(budgets, mult):
    df = pd.DataFrame({"id": np.arange(len(budgets)), "m": mult, "b": budgets})
    return proper_budgets(relation_from(df, "duckdb", id_column="id"), "b", id_column="id")


def _reference(budgets, queries):
    """POPL'15 Fig. 3 in plain Python: per query (eps, selected ids, copies per id)."""
    left = [int(np.floor(b * 1e9 + 1e-3)) for b in budgets]
    answers = []
    for eps, ids, copies in queries:
        n = 0
        for i in ids:
            c = scalar_units(eps) * copies[i]
            if c == 0:
                continue
            if left[i] >= c:
                left[i] -= c
                n += copies[i]
        answers.append(n)
    return answers, [x / 1e9 for x in left]


@settings(max_examples=15, deadline=None)
@given(budgets=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.3, 1.0, 2.0]), min_size=1, max_size=8),
       data=st.data(), fold=st.sampled_from([None, 1]))
def test_pay_matches_the_reference_rule(budgets, data, fold):
    n = len(budgets)
    mult = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    rel, table = _people(budgets, mult)
    table.fold_rows = fold  # 1: fold pending debits after every query (the exact path's state)
    queries, answers = [], []
    for _ in range(data.draw(st.integers(1, 6))):
        eps = data.draw(st.sampled_from([0.05, 0.1, 0.25]))
        lo = data.draw(st.integers(0, n - 1))
        flat = data.draw(st.booleans())  # False: one record per id (the unique fast path)
        sub = rel.where(lambda t, lo=lo: t.id >= lo)
        if flat:  # m copies of each record: its source pays m·eps
            sub = sub.select_many(3, lambda t: ibis.array([t.id, t.id, t.id])[: t.m], None)
            copies = dict(enumerate(mult))
        else:
            copies = dict.fromkeys(range(n), 1)
        queries.append((eps, range(lo, n), copies))
        answers.append(table.pay(sub, eps).count())
    ref_answers, ref_left = _reference(budgets, queries)
    assert answers == ref_answers
    assert list(table.remaining(range(n))) == pytest.approx(ref_left, abs=1e-9)


def test_costs_saturate_and_unknown_ids_are_refused(tmp_path):
    rel, table = _people([1.0, 1.0], [1, 1])
    big = rel.select_many(3, lambda t: [t.id, t.id], None)
    assert table.pay(big, 1e300).count() == 0  # 2e300 per source does not fit: nobody pays
    assert list(table.remaining([0, 1])) == [1.0, 1.0]
    with pytest.raises(Exception, match="unknown"):
        table.remaining([5])


def test_duplicate_ids_are_refused_before_registration(tmp_path):
    df = pd.DataFrame({"id": [1, 1, 2]})
    with pytest.raises(Exception, match="distinct"):
        proper_budgets(relation_from(df, "duckdb", id_column="id"), 1.0, id_column="id",
                       ledger=str(tmp_path / "d.duckdb"))
    con = duckdb.connect(str(tmp_path / "d.duckdb"))
    assert con.execute("SELECT COUNT(*) FROM budgets").fetchall() == [(0,)]
    con.close()


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
    db, out = tmp_path / "k.duckdb", tmp_path / "released.txt"
    n = 40
    kills = run_with_random_kills(lambda done: _worker("kill", str(db), str(out), str(done), str(n)),
                                  out, n, kills_wanted=3, max_wait=0.6, seed=0, max_kills=200)
    released = [line.split() for line in out.read_text().splitlines()]
    assert [r[1] for r in released] == [f"q{i}" for i in range(n)] and kills >= 2
    con = duckdb.connect(str(db))
    labels = dict(con.execute("SELECT query, label FROM queries").fetchall())
    payers = dict(con.execute("SELECT query, COUNT(*) FROM charges GROUP BY query").fetchall())
    rows = con.execute("SELECT b.id, b.initial, b.remaining - COALESCE(SUM(c.amount), 0) FROM "
                       "budgets b LEFT JOIN charges c USING (id) "
                       "GROUP BY b.id, b.initial, b.remaining").fetchall()
    con.close()
    for qid, label, answer in released:  # every released answer was charged, to its payers
        assert labels[int(qid)] == label
        assert payers.get(int(qid), 0) == int(answer)
    assert all(0 <= left <= init for _, init, left in rows)  # never overspent
    # 40 queries of 0.07 over 4 groups: each source is asked >= 10 times and pays each time
    # (re-run queries after a kill included): every debit is logged, none is lost or doubled
    spent = {i: init - left for i, init, left in rows}
    assert sum(payers.values()) * scalar_units(0.07) == sum(spent.values())
    assert all(s % scalar_units(0.07) == 0 and s >= 10 * scalar_units(0.07) for s in spent.values())


@pytest.mark.slow
def test_processes_racing_never_overspend(tmp_path):
    db, go = tmp_path / "r.duckdb", tmp_path / "go"
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
