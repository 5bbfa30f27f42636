"""The two costs a deadline is built from, measured on synthetic tables of any engine.

:func:`measure_tables` times ProPer counts on tables an engine makes from synthetic records
(never an owner's data): :mod:`dprivacy.service.calibrate` uses it for DuckDB,
:func:`dprivacy.service.spark_sources.measure_spark` for Spark.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["measure_tables"]


def _timed(f: Any, repeat: int) -> float:
    out = []
    for _i in range(repeat):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def measure_tables(table: Callable[[int, str], Any], rows: int, repeat: int
                   ) -> tuple[float, float]:
    """(seconds per query and step, seconds per row of work) of ProPer counts on the tables
    ``table(n, name)`` makes (``n`` synthetic records with columns ``pid`` and ``v``, on the
    engine being measured): a tiny table gives the fixed costs, a product of ``rows / 14``
    records with a 14-row public table the cost per row, each the median of ``repeat`` runs."""
    import ibis
    import pandas as pd

    pub = pd.DataFrame({"j": range(14)})
    n = max(rows // 14, 1)
    tiny, big = table(100, "tiny"), table(n, "big")
    one = _timed(lambda: tiny.where(ibis._.v >= 0).noisy_count(1e-9), repeat)
    fan = _timed(lambda: big.where(ibis._.v >= 0).product(pub).noisy_count(1e-9), repeat)
    work = n + n + 14 * n + 14 * n + 14 * n  # as workbound counts this plan
    base = one / 2  # a query with one step
    per_row = max(fan - 3 * base, 0.0) / work
    return base, per_row
