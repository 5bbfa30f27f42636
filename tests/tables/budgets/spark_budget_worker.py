"""Process body for the SparkBudgetTable crash test (not a test module).

Run in a fresh interpreter: ``python -m tests.tables.budgets.spark_budget_worker STORE OUT START
STOP``.
"""

from __future__ import annotations

import logging
import os
import sys

import numpy as np
import pandas as pd

from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable
from dprivacy.tables.relations.engine import local_session, relation_from

N = 12


def kill_mode(store: str, out: str, start: int, stop: int) -> None:
    """Charged queries start..stop-1 (eps 0.07 on the records with g == q % 3); after each
    charge commits, ``qid q<i> answer`` is appended to ``out`` (the answer: the count of the
    eligible records, known only once pay() returned)."""
    logging.getLogger("py4j").setLevel(logging.ERROR)
    spark = local_session(1)
    df = pd.DataFrame({"id": np.arange(N), "g": np.arange(N) % 3})
    budgets = SparkBudgetTable(store, session=spark)
    rel, _ = budgets.attach(relation_from(spark.createDataFrame(df), "spark", id_column="id"),
                            1.0, id_column="id")
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    print("ready", flush=True)
    for q in range(start, stop):
        eligible = budgets.pay(rel.where(lambda t, q=q: t.g == q % 3), 0.07, label=f"q{q}")
        answer = eligible.count()
        os.write(fd, f"{budgets.last_query_id} q{q} {answer}\n".encode())


if __name__ == "__main__":
    kill_mode(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
