"""Process body for the Spark budget stores' crash test (not a test module).

Run in a fresh interpreter: ``python -m tests.tables.budgets.spark_kill_worker KIND STORE DATA
OUT START STOP``, KIND ``slots`` (SparkSlotBudgets, folding every 2 queries in the background)
or ``table`` (SparkBudgetTable). The Parquet source DATA must exist (written by the test).
"""

from __future__ import annotations

import logging
import os
import sys

from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable
from dprivacy.tables.budgets.spark_slots import SparkSlotBudgets
from dprivacy.tables.relations.engine import local_session, relation_from


def kill_mode(kind: str, store: str, data: str, out: str, start: int, stop: int) -> None:
    """Charged queries start..stop-1 (eps 0.07 on the records with g == q % 3); after each
    charge commits, ``qid q<i> answer`` is appended to ``out`` (the answer: the count of the
    eligible records, known only once pay() returned)."""
    logging.getLogger("py4j").setLevel(logging.ERROR)
    spark = local_session(1)
    sdf = spark.read.parquet(data)
    rel = relation_from(sdf, "spark", id_column="id")
    if kind == "slots":
        budgets = SparkSlotBudgets(store, session=spark, fold_every=2)
        rel, _ = budgets.attach(rel, 1.0, id_column="id", source=sdf)
    else:
        budgets = SparkBudgetTable(store, session=spark)
        rel, _ = budgets.attach(rel, 1.0, id_column="id")
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    print("ready", flush=True)
    for q in range(start, stop):
        eligible = budgets.pay(rel.where(lambda t, q=q: t.g == q % 3), 0.07, label=f"q{q}")
        answer = eligible.count()
        os.write(fd, f"{budgets.last_query_id} q{q} {answer}\n".encode())


if __name__ == "__main__":
    kill_mode(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
              int(sys.argv[6]))
