"""PINQ's global budget kept in the SQLite ledger: re-opening, refusal, SIGKILL, process races."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprivacy.errors import BudgetExceededError, UnknownRecordError, ValidationError
from dprivacy.tables import Ledger, LedgerBudgetAgent, ProPerTable, Queryable
from tests.tables.budgets.test_ledger import _worker, run_with_random_kills

DF = pd.DataFrame({"a": np.arange(60)})


def _log(db: Path) -> tuple[list[tuple], list[tuple]]:
    with sqlite3.connect(db) as con:
        queries = con.execute("SELECT query, label FROM queries ORDER BY query").fetchall()
        charges = con.execute("SELECT query, id, amount FROM charges ORDER BY query").fetchall()
    con.close()
    return queries, charges


def test_reopened_queryable_continues_with_the_reduced_budget(tmp_path):
    db = tmp_path / "p.sqlite"
    t = Queryable(DF, 1.0, ledger=db, source="census")
    assert isinstance(t._roots[0], LedgerBudgetAgent)
    t.noisy_count(0.25)
    t.group_by("a").noisy_count(0.1)  # stability 2: 0.2
    assert t.remaining_budget() == pytest.approx(0.55)
    del t  # "the process ends": only the file remains
    again = Queryable(DF, ledger=Ledger(db), source="census")  # budget=None: continue
    assert again.remaining_budget() == pytest.approx(0.55)
    assert Queryable(DF, 1.0, ledger=str(db), source="census").remaining_budget() == 0.55
    other = Queryable(DF, 0.3, ledger=db, source="survey")  # another source: its own budget
    other.noisy_count(0.3)
    assert other.remaining_budget() == 0.0 and again.remaining_budget() == pytest.approx(0.55)
    queries, charges = _log(db)
    assert [q[1] for q in queries] == ["pinq:census", "pinq:census", "pinq:survey"]
    assert [c[2] for c in charges] == [250_000_000, 200_000_000, 300_000_000]


def test_conflicting_or_missing_initial_budget_is_refused(tmp_path):
    db = tmp_path / "p.sqlite"
    Queryable(DF, 1.0, ledger=db).noisy_count(0.5)
    with pytest.raises(ValidationError, match="created with 1 .*0.5 left.*budget=None"):
        Queryable(DF, 2.0, ledger=db)  # a re-opened source cannot be given a fresh budget
    with pytest.raises(UnknownRecordError, match="no budget named 'pinq:new'"):
        Queryable(DF, ledger=db, source="new")
    with pytest.raises(ValidationError, match="budget is required"):
        Queryable(DF)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValidationError):
            Queryable(DF, bad, ledger=db, source="bad")
    with pytest.raises(ValidationError, match="SQLite"):
        Queryable(DF, 1.0, ledger=object())
    assert Queryable(DF, ledger=db).remaining_budget() == 0.5
    assert len(_log(db)[0]) == 1


def test_query_beyond_the_durable_budget_raises_and_charges_nothing(tmp_path, monkeypatch):
    db = tmp_path / "p.sqlite"
    t = Queryable(DF, 1.0, ledger=db)
    t.noisy_sum(0.7, "a", 0.0, 60.0)
    computed = []
    from dprivacy.tables.relations.pandas_relation import PandasRelation

    real = PandasRelation.count
    monkeypatch.setattr(PandasRelation, "count", lambda self: computed.append(1) or real(self))
    other_process_view = Queryable(DF, ledger=Ledger(db))  # a second connection, same source
    with pytest.raises(BudgetExceededError):
        other_process_view.where(lambda r: r["a"] > 3).noisy_count(0.31)
    with pytest.raises(BudgetExceededError):
        t.group_by("a").noisy_count(0.16)  # 0.32 > 0.3
    assert computed == []  # refused before computing anything
    assert t.remaining_budget() == pytest.approx(0.3)
    assert len(_log(db)[0]) == 1 and len(_log(db)[1]) == 1  # nothing charged or logged
    t.noisy_count(0.3)  # exactly the rest is allowed
    assert computed == [1] and t.remaining_budget() == 0.0


def test_refusal_rolls_back_memory_agents_and_other_roots(tmp_path):
    led = Ledger(tmp_path / "p.sqlite")
    rich = Queryable(DF, 5.0, ledger=led, source="rich")
    poor = Queryable(DF, 0.3, ledger=led, source="poor")
    mem = Queryable(DF, 5.0)
    parts = rich.partition([0, 1], lambda r: r["a"] % 2)
    parts[0].noisy_count(0.5)  # partition maximum 0.5
    joined = parts[1].concat(poor).concat(mem)
    with pytest.raises(BudgetExceededError):
        joined.noisy_count(0.4)  # poor cannot pay 0.4
    assert joined.remaining_budget() == pytest.approx([4.5, 0.3, 5.0])
    assert parts[1].cost(0.5) == 0.0  # the partition's running total was rolled back too
    joined.noisy_count(0.2)  # part 1 at 0.2 <= max 0.5: rich pays nothing
    assert joined.remaining_budget() == pytest.approx([4.5, 0.1, 4.8])
    parts[1].noisy_count(0.4)  # part 1 at 0.6: rich pays 0.1
    joined.noisy_count(0.1)  # rich and poor pay in one transaction
    assert joined.remaining_budget() == pytest.approx([4.3, 0.0, 4.7])
    queries, charges = _log(led.path)
    assert [q[1] for q in queries] == ["pinq:rich", "pinq:poor", "pinq:rich",
                                       "pinq:poor+pinq:rich"]
    assert sorted(c[2] for c in charges if c[0] == queries[-1][0]) == [100_000_000] * 2
    with pytest.raises(ValidationError, match="different Ledger objects"):
        rich.concat(Queryable(DF, 1.0, ledger=tmp_path / "q.sqlite")).noisy_count(0.1)
    assert rich.remaining_budget() == pytest.approx(4.3)


def test_pinq_and_proper_can_share_one_ledger(tmp_path):
    led = Ledger(tmp_path / "p.sqlite")
    t = Queryable(DF, 1.0, ledger=led)
    rid = t._roots[0].record_id
    p = ProPerTable(DF, budget=0.5, ledger=led)  # fresh ids never collide with the PINQ record
    p.noisy_count(0.5)
    assert t.remaining_budget() == 1.0
    with pytest.raises(ValidationError, match="named budget"):
        ProPerTable(pd.DataFrame({"i": [rid]}), budget=9.0, ledger=led, id_column="i")


def _state(db: Path, rid: int) -> tuple[int, int, dict[int, int]]:
    with sqlite3.connect(db) as con:
        init, rem = con.execute("SELECT initial, remaining FROM budgets WHERE id=?",
                                (rid,)).fetchone()
        per_query = dict(con.execute("SELECT query, amount FROM charges WHERE id=?", (rid,)))
    con.close()
    return init, rem, per_query


@pytest.mark.slow
def test_sigkill_during_pinq_queries_never_releases_uncharged(tmp_path):
    db, out = tmp_path / "k.sqlite", tmp_path / "released.txt"
    n, budget, cost = 200, 1.9, 10_000_000  # 190 queries fit; crashes lose a few more
    rid = Queryable(DF, budget, ledger=db, source="k")._roots[0].record_id
    # 200 paced queries take >= 0.15 s: kill 5 runs at random points, then finish
    kills = run_with_random_kills(["pinq-kill", str(db), str(out), str(n), str(budget)], out, n,
                                  kills_wanted=5, max_wait=0.12, seed=1, max_kills=200)
    lines = [line.split(maxsplit=2) for line in out.read_text().splitlines()]
    assert [q for _, q, _ in lines] == [f"q{i}" for i in range(n)] and kills >= 2
    released = [(int(qid), float(a)) for qid, _, a in lines if qid != "-"]
    refused = [q for qid, q, _ in lines if qid == "-"]
    init, rem, per_query = _state(db, rid)
    assert rem >= 0 and init - rem == sum(per_query.values())  # debit and log agree
    assert set(per_query.values()) == {cost}
    assert {q for q, _ in released} <= set(per_query)  # every released answer was charged
    assert len({q for q, _ in released}) == len(released)  # ... by its own charge
    lost = len(per_query) - len(released)  # charged, then killed before the answer was out
    assert 0 <= lost <= kills  # (the restarted worker re-runs a lost query: a new charge)
    assert len(per_query) == 190 and rem == 0  # the budget runs out exactly ...
    assert len(refused) == n - len(released) >= 10  # ... and every later query is refused
    assert refused == [f"q{i}" for i in range(n - len(refused), n)]
    assert all(abs(a - 20) < 20 * 100 for _, a in released)  # answers: 20 + Lap(100)


@pytest.mark.slow
def test_four_processes_racing_on_one_pinq_source_never_overspend(tmp_path):
    db, go = tmp_path / "r.sqlite", tmp_path / "go"
    rid = Queryable(DF, 2.05, ledger=db, source="r")._roots[0].record_id
    procs = [_worker("pinq-race", str(db), "10", str(go)) for _ in range(4)]
    go.touch()  # all four are connected: start the race
    wins = 0
    for p in procs:
        stdout, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        wins += int(stdout)
    assert wins == 20  # 40 attempts of 0.1; exactly floor(2.05 / 0.1) are answered
    init, rem, per_query = _state(db, rid)
    assert rem == 50_000_000 and init - rem == sum(per_query.values()) == 20 * 100_000_000
    assert Queryable(DF, ledger=db, source="r").remaining_budget() == 0.05
