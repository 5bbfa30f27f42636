"""Process bodies for the BudgetTable crash and race tests (not a test module).

Run in fresh interpreters: ``python -m tests.tables.budgets.budget_worker kill|race ...``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pandas as pd

from dprivacy.tables.budgets.budget_table import BudgetTable
from dprivacy.tables.budgets.engine_budgets import proper_budgets
from dprivacy.tables.relations.engine import relation_from

N = 20


def _table(db: str):  # noqa: ANN202
    df = pd.DataFrame({"id": np.arange(N), "g": np.arange(N) % 4})
    return proper_budgets(relation_from(df, "duckdb", id_column="id"), 1.0,
                          ledger=BudgetTable(db), id_column="id")


def kill_mode(db: str, out: str, start: int, stop: int) -> None:
    """Charged queries start..stop-1 (eps 0.07 on the records with g == q % 4); after each
    charge commits, ``qid q<i> answer`` is appended to ``out`` (the answer: the exact count of
    the eligible records, computed only after pay() returned)."""
    rel, budgets = _table(db)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    print("ready", flush=True)
    for q in range(start, stop):
        eligible = budgets.pay(rel.where(lambda t, q=q: t.g == q % 4), 0.07, label=f"q{q}")
        answer = eligible.count()
        os.write(fd, f"{budgets.last_query_id} q{q} {answer}\n".encode())
        time.sleep(0.02)  # pace the loop so that the parent's random kill lands inside it


def race_mode(db: str, n: int, go: str) -> None:
    """``n`` charges of 0.1 on the records 0, 1, 2 once ``go`` exists; prints who paid."""
    rel, budgets = _table(db)
    few = rel.where(lambda t: t.id < 3)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    wins = np.zeros(3, dtype=int)
    for _ in range(n):
        eligible = budgets.pay(few, 0.1)
        ids = eligible.id_multiplicities()[0]
        wins[ids] += 1
    print(" ".join(map(str, wins)), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "kill":
        kill_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        race_mode(sys.argv[2], int(sys.argv[3]), sys.argv[4])
