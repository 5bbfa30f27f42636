"""Differential harness for the leak tests (not a test module).

An attacker program runs on two neighbouring tables (the same records, with and without one
target record) with the same data-owner noise seed. What the analyst can observe is recorded as
an :class:`Outcome`: the exception type and message (or None), the answer, and the budget left.
Two outcomes are indistinguishable if the exception type and message are equal, the budgets are
equal (PINQ: the global budget; ProPer: every budget but the target's), and the answers differ
by at most what the program's sensitivity allows: with the same seed the noise draw is the same,
so the difference of the answers is the difference of the exact answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.tables import ProPerTable, Queryable

TARGET_ID = 99


def people(n: int = 12) -> pd.DataFrame:
    """A small population with ids 0..n-1."""
    return pd.DataFrame({
        "pid": np.arange(n),
        "name": [f"p{i}" for i in range(n)],
        "age": (np.arange(n) * 7) % 80 + 5,
        "g": np.arange(n) % 3,
        "x": np.linspace(-1.0, 1.0, n),
    })


def target(**values: Any) -> pd.DataFrame:
    """The target record (pid 99), by default an ordinary-looking person."""
    rec = {"pid": TARGET_ID, "name": "target", "age": 30, "g": 1, "x": 0.5}
    rec.update(values)
    return pd.DataFrame({k: [v] for k, v in rec.items()})


def neighbours(base: pd.DataFrame | None = None, tgt: pd.DataFrame | None = None
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(without the target, with the target appended)."""
    b = people() if base is None else base
    t = target() if tgt is None else tgt
    return b, pd.concat([b, t], ignore_index=True)


@dataclass
class Outcome:
    """What the analyst observed."""

    error: tuple[str, str] | None
    answer: Any
    budget: Any


def observe(program: Callable[[Any], Any], make: Callable[[], Any],
            budget: Callable[[Any], Any]) -> Outcome:
    """Run ``program(table)`` on a fresh table; never lets an exception escape."""
    table = make()
    try:
        answer, error = program(table), None
    except Exception as exc:  # noqa: BLE001 - the analyst sees every exception
        answer, error = None, (type(exc).__name__, str(exc))
    return Outcome(error, answer, budget(table))


def pinq_pair(program: Callable[[Queryable], Any], *, base: pd.DataFrame | None = None,
              tgt: pd.DataFrame | None = None, budget: float = 10.0, seed: int = 0,
              backend: str | None = None) -> tuple[Outcome, Outcome]:
    """The program on PINQ tables without / with the target (same noise seed)."""
    out = []
    for df in neighbours(base, tgt):
        out.append(observe(program,
                           lambda df=df: Queryable(df, budget=budget, noise_seed=seed,
                                                   backend=backend),
                           lambda t: t.remaining_budget()))
    return out[0], out[1]


def proper_pair(program: Callable[[ProPerTable], Any], *, base: pd.DataFrame | None = None,
                tgt: pd.DataFrame | None = None, budget: Any = 1.0, target_budget: float = 1.0,
                seed: int = 0, backend: str | None = None) -> tuple[Outcome, Outcome]:
    """The program on ProPer tables (stable ids in ``pid``) without / with the target; the
    budget observed is that of every non-target id."""
    out = []
    for df in neighbours(base, tgt):
        b = np.where(df["pid"] == TARGET_ID, target_budget,
                     budget if np.ndim(budget) == 0 else np.resize(budget, len(df)))
        n = len(df) - (df["pid"] == TARGET_ID).sum()
        others = df["pid"].to_numpy()[:n]
        out.append(observe(program,
                           lambda df=df, b=b: ProPerTable(df, budget=b, id_column="pid",
                                                          noise_seed=seed, backend=backend),
                           lambda t, o=others: [float(v) for v in t._ledger.remaining(o)]))
    return out[0], out[1]


def assert_indistinguishable(a: Outcome, b: Outcome, *, sensitivity: float | None = 0.0) -> None:
    """Same error (type and message) and budget; answers within ``sensitivity`` (None: the
    answers are not compared, e.g. a randomised choice)."""
    assert a.error == b.error, (a.error, b.error)
    assert a.budget == b.budget, (a.budget, b.budget)
    if sensitivity is None or a.answer is None or b.answer is None:
        assert (a.answer is None) == (b.answer is None)
        return
    da = np.asarray(a.answer, dtype=float)
    db = np.asarray(b.answer, dtype=float)
    assert np.all(np.abs(da - db) <= sensitivity * (1 + 1e-9) + 1e-9), (a.answer, b.answer)
