"""Process bodies for the ledger crash and race tests (not a test module).

Run in fresh interpreters (``python -m tests.tables.budgets.ledger_worker kill|race ...``): SQLite state
must not be inherited through ``fork()``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from dprivacy.tables.budgets.ledger import Ledger


def kill_mode(db: str, out: str, start: int, stop: int) -> None:
    """Charged queries start..stop-1; after each charge commits, the "answer" (the number of
    payers) is appended to ``out`` as ``qid label answer``."""
    led = Ledger(db)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    for q in range(start, stop):
        ids = np.random.default_rng(q).choice(20, size=5, replace=False)
        charge = led.charge(ids, 0.07, label=f"q{q}")
        answer = int(charge.ok.sum())  # computed only after the charge committed
        os.write(fd, f"{charge.query_id} q{q} {answer}\n".encode())
        time.sleep(0.0005)  # pace the loop so that the parent's random kill lands inside it


def race_mode(db: str, n: int, go: str) -> None:
    """``n`` charges of 0.1 on records 0, 1, 2 once the file ``go`` exists; prints successes."""
    led = Ledger(db)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    wins = np.zeros(3, dtype=int)
    for _ in range(n):
        wins += led.charge([0, 1, 2], 0.1).ok
    print(" ".join(map(str, wins)), flush=True)


def _pinq_table(db: str, source: str, budget: float | None):  # noqa: ANN202 (lazy pandas)
    import pandas as pd

    from dprivacy.tables.pinq import Queryable

    return Queryable(pd.DataFrame({"a": np.arange(60)}), budget, ledger=db, source=source,
                     noise_seed=0)


def pinq_kill_mode(db: str, out: str, start: int, stop: int, budget: float) -> None:
    """PINQ queries start..stop-1 (noisy counts, eps 0.01, on a Where) against the durable
    budget of source "k"; after each returns, ``qid q<i> answer`` is appended to ``out``; a
    refused query appends ``- q<i> refused``."""
    from dprivacy.errors import BudgetExceededError

    t = _pinq_table(db, "k", budget)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    print("ready", flush=True)
    for q in range(start, stop):
        try:
            answer = t.where(lambda r: r["a"] % 3 == 0).noisy_count(0.01)
            os.write(fd, f"{t.last_query_id()} q{q} {answer!r}\n".encode())
        except BudgetExceededError:
            os.write(fd, f"- q{q} refused\n".encode())
        time.sleep(0.0005)  # pace the loop so that the parent's random kill lands inside it


def pinq_race_mode(db: str, n: int, go: str) -> None:
    """``n`` attempts of a 0.1-cost PINQ query (0.05 on a GroupBy, stability 2) on the existing
    source "r" once the file ``go`` exists; prints the number answered."""
    from dprivacy.errors import BudgetExceededError

    t = _pinq_table(db, "r", None)
    g = t.group_by("a")
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    wins = 0
    for i in range(n):
        try:
            if i % 2:
                g.noisy_count(0.05)
            else:
                t.noisy_sum(0.1, lambda r: r["a"] / 60, 0.0, 1.0)
            wins += 1
        except BudgetExceededError:
            pass
    print(wins, flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "kill":
        print("ready", flush=True)
        kill_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "pinq-kill":
        pinq_kill_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                       float(sys.argv[6]))
    elif mode == "pinq-race":
        pinq_race_mode(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        race_mode(sys.argv[2], int(sys.argv[3]), sys.argv[4])
