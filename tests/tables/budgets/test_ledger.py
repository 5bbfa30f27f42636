"""Budget ledgers: unit behaviour, crash safety under SIGKILL, multi-process races."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables.budgets.ledger import UNIT, Ledger, scalar_units, to_units
from dprivacy.tables.budgets.memory_ledger import MemoryLedger
from tests import sigkill

ROOT = str(Path(__file__).resolve().parents[3])
ENV = {**os.environ, "PYTHONPATH": ROOT}


@pytest.fixture(params=["memory", "sqlite"])
def ledger(request, tmp_path):
    return MemoryLedger() if request.param == "memory" else Ledger(tmp_path / "l.sqlite")


def test_register_charge_remaining(ledger):
    ids = ledger.new_ids(4)
    ledger.register(ids, [1.0, 0.5, 0.2, 0.0])
    ch = ledger.charge(ids, [0.3, 0.6, 0.2, 0.0])
    assert list(ch.ok) == [True, False, True, True]
    assert list(ledger.remaining(ids)) == pytest.approx([0.7, 0.5, 0.0, 0.0])
    assert list(ledger.contains([ids[0], 999])) == [True, False]
    assert list(ledger.new_ids(2)) == [4, 5]


def test_errors_charge_nothing(ledger):
    ids = ledger.new_ids(2)
    ledger.register(ids, 1.0)
    for bad_call, err in [
        (lambda: ledger.charge([0, 77], 0.1), UnknownRecordError),
        (lambda: ledger.charge([0, 0], 0.1), ValidationError),
        (lambda: ledger.charge([0, 1], -0.1), ValidationError),
        (lambda: ledger.charge([0, 1], [0.1]), ValidationError),
        (lambda: ledger.charge([-1], 0.1), ValidationError),
        (lambda: ledger.register([5], -1.0), ValidationError),
        (lambda: ledger.register([0], 1.0), ValidationError),
        (lambda: ledger.remaining([77]), UnknownRecordError),
    ]:
        with pytest.raises(err):
            bad_call()
    assert list(ledger.remaining(ids)) == [1.0, 1.0]


def test_units_round_costs_up_and_budgets_down():
    assert to_units(0.1, round_up=True) == 100_000_000
    assert to_units(0.1 + 0.2, round_up=True) == 300_000_000  # float noise is absorbed
    assert to_units(1.5e-9, round_up=True) == 2 and to_units(1.5e-9, round_up=False) == 1
    assert UNIT == 1e-9


def test_sqlite_logs_every_charge(tmp_path):
    led = Ledger(tmp_path / "a.sqlite")
    led.register([0, 1], 1.0)
    ch = led.charge([0, 1], [0.4, 2.0], label="x")
    with sqlite3.connect(tmp_path / "a.sqlite") as db:
        rows = db.execute("SELECT query, id, amount FROM charges").fetchall()
    assert rows == [(ch.query_id, 0, 400_000_000)]


def _db_state(path: Path) -> tuple[dict, dict, set]:
    db = sqlite3.connect(path)
    rem = dict(db.execute("SELECT id, remaining FROM budgets"))
    init = dict(db.execute("SELECT id, initial FROM budgets"))
    logged = dict(db.execute("SELECT id, SUM(amount) FROM charges GROUP BY id"))
    queries = {r[0] for r in db.execute("SELECT query FROM queries")}
    db.close()
    spent = {i: init[i] - rem[i] for i in rem}
    return spent, {i: logged.get(i, 0) for i in rem}, queries


def _worker(*args: str) -> subprocess.Popen:
    """A fresh interpreter running tests/tables/budgets/ledger_worker.py; returns once it is ready."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.tables.budgets.ledger_worker", *args],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def run_with_random_kills(args: list[str], out: Path, n: int, *, kills_wanted: int, max_wait: float,
                          seed: int, max_kills: int) -> int:
    """Run ``ledger_worker`` (resuming from the released count in ``out``) until ``n`` answers are
    released, SIGKILLing the first ``kills_wanted`` runs after a random time in [0, max_wait).
    Returns the number of kills."""
    return sigkill.run_with_random_kills(
        lambda done: _worker(args[0], *args[1:3], str(done), *args[3:]), out, n,
        kills_wanted=kills_wanted, max_wait=max_wait, seed=seed, max_kills=max_kills)


@pytest.mark.slow
def test_sigkill_at_random_points_never_releases_uncharged(tmp_path):
    db, out = tmp_path / "k.sqlite", tmp_path / "released.txt"
    Ledger(db).register(np.arange(20), 1.0)
    # 200 paced commits take >= 0.2 s: kill 8 runs at random points, then finish
    kills = run_with_random_kills(["kill", str(db), str(out), "200"], out, 200, kills_wanted=8,
                                  max_wait=0.08, seed=0, max_kills=500)
    released = [line.split() for line in out.read_text().splitlines()]
    spent, logged, queries = _db_state(db)
    assert kills >= 2
    assert len(released) == 200 and [r[1] for r in released] == [f"q{i}" for i in range(200)]
    assert all(int(r[0]) in queries for r in released)  # every released answer was charged
    assert spent == logged  # budgets and log agree: debit and log are one transaction
    assert min(Ledger(db).remaining(np.arange(20))) >= 0
    with sqlite3.connect(db) as con:
        for qid, label, answer in released:
            row = con.execute("SELECT label FROM queries WHERE query=?", (int(qid),)).fetchone()
            assert row == (label,)
            payers = con.execute("SELECT COUNT(*) FROM charges WHERE query=?", (int(qid),))
            assert payers.fetchone()[0] == int(answer)
    con.close()


@pytest.mark.slow
def test_eight_processes_racing_never_overspend(tmp_path):
    db, go = tmp_path / "r.sqlite", tmp_path / "go"
    Ledger(db).register([0, 1, 2], [2.0, 1.0, 0.35])
    procs = [_worker("race", str(db), "8", str(go)) for _ in range(8)]
    go.touch()  # all eight are connected: start the race
    wins = np.zeros(3, dtype=int)
    for p in procs:
        stdout, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        wins += np.array(stdout.split(), dtype=int)
    assert list(wins) == [20, 10, 3]  # 64 attempts each; exactly floor(budget / 0.1) succeed
    rem = Ledger(db).remaining([0, 1, 2])
    assert list(rem) == pytest.approx([0.0, 0.0, 0.05])
    spent, logged, _ = _db_state(db)
    assert spent == logged


@pytest.mark.parametrize("x", [0.0, 0.1, 0.3, 0.1 + 0.2, 1.5e-9, 2.5, 1e-12, 123.456789])
def test_scalar_units_agrees_with_to_units(x):
    assert scalar_units(x) == int(to_units(x, round_up=True))


def test_memory_register_runs_and_scattered_ids():
    led = MemoryLedger()
    led.register(np.arange(5, 10), np.linspace(0, 1, 5))  # a run: slice path
    led.register(np.array([2, 0, 30]), [0.5, 0.25, 1.0])  # scattered: fancy path
    assert list(led.remaining([0, 2, 5, 9, 30])) == pytest.approx([0.25, 0.5, 0.0, 1.0, 1.0])
    assert list(led.contains([1, 3, 10])) == [False, False, False]
    with pytest.raises(ValidationError):
        led.register(np.arange(8, 12), 1.0)
    led.register(np.arange(8, 12), 1.0, existing="keep")  # 8, 9 kept; 10, 11 added
    assert list(led.remaining([8, 11])) == pytest.approx([0.75, 1.0])


def test_named_records_and_all_or_nothing_charges(tmp_path):
    led = Ledger(tmp_path / "n.sqlite")
    led.register(led.new_ids(2), 1.0)
    a = led.named_record("pinq:a", 0.5)
    assert a == 2 and Ledger(led.path).named_record("pinq:a", None) == a  # found, not re-created
    assert led.named_record("pinq:a", 0.5) == a and list(led.initial([a])) == [0.5]
    with pytest.raises(ValidationError, match="created with 0.5"):
        led.named_record("pinq:a", 0.6)
    with pytest.raises(UnknownRecordError):
        led.named_record("pinq:b", None)
    assert list(led.new_ids(1)) == [3]  # named records take ids from the same counter
    ch = led.charge([0, a], [0.2, 0.6], all_or_nothing=True)
    assert list(ch.ok) == [False, False] and ch.query_id is None
    assert list(led.remaining([0, a])) == [1.0, 0.5]
    _, _, queries = _db_state(led.path)
    assert queries == set()  # a refused all-or-nothing charge is not even logged
    assert list(led.charge([0, a], [0.2, 0.5], all_or_nothing=True).ok) == [True, True]
    assert list(led.remaining([0, a])) == [0.8, 0.0]
