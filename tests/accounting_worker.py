"""Process bodies for the accountant crash tests (not a test module).

Run in fresh interpreters (``python -m tests.accounting_worker MODE DB OUT ...``): SQLite state
must not be inherited through ``fork()``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import dprivacy as dp
from dprivacy import noise


def _mechanism() -> dp.DXLaplace:
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    W, M = dp.Workload([[0.0, 1.0, 2.0]]), dp.metrics.Euclidean(1.0)
    return dp.DXLaplace(W, dp.design(W, U, M, method="closed_form"), universe=U, metric=M)


def hang_mode(db: str, out: str) -> None:
    """Charge one release, then hang where the noise would be drawn (the parent SIGKILLs us)."""
    mech = _mechanism()
    acc = dp.Accountant.durable(db, total=5.0)

    def hang(*args, **kwargs):  # noqa: ANN002, ANN003 (the sampler's signature)
        print("charged", flush=True)  # the charge has returned, i.e. it is committed
        time.sleep(600)

    noise.add_laplace = hang
    print("ready", flush=True)
    y = mech.release(np.array([5, 3, 2]), rng=0, secure=False, accountant=acc)
    with open(out, "a") as fh:  # never reached
        fh.write(f"{y[0]!r}\n")


def loop_mode(db: str, out: str, start: int, stop: int) -> None:
    """Releases start..stop-1; after each returns, its answer is appended to ``out``."""
    mech = _mechanism()
    acc = dp.Accountant.durable(db, total=1000.0)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    print("ready", flush=True)
    for q in range(start, stop):
        y = mech.release(np.array([5, 3, 2]), rng=q, secure=False, accountant=acc)
        os.write(fd, f"q{q} {y[0]!r}\n".encode())
        time.sleep(0.0005)  # pace the loop so that the parent's random kill lands inside it


if __name__ == "__main__":
    if sys.argv[1] == "hang":
        hang_mode(sys.argv[2], sys.argv[3])
    else:
        loop_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
