"""Process bodies for the ledger crash and race tests (not a test module).

Run in fresh interpreters (``python -m tests.tables.ledger_worker kill|race ...``): SQLite state
must not be inherited through ``fork()``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from dprivacy.tables.ledger import Ledger


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


if __name__ == "__main__":
    if sys.argv[1] == "kill":
        print("ready", flush=True)
        kill_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        race_mode(sys.argv[2], int(sys.argv[3]), sys.argv[4])
