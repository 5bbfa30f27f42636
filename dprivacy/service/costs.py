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

__all__ = ["measure_tables", "timed", "GROUP_KEYS"]


def timed(f: Any, repeat: int) -> float:
    """The median of ``repeat`` timings of ``f()`` in seconds."""
    out = []
    for _i in range(repeat):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


#: the public keys of the grouped count measured (as many as a typical grouped query's)
GROUP_KEYS = 64


def measure_tables(table: Callable[[int, str], Any], rows: int, repeat: int, *,
                   grouped: bool = True) -> tuple[float, float]:
    """(seconds per query and step, seconds per row of work) of ProPer queries on the tables
    ``table(n, name)`` makes (``n`` synthetic records with columns ``pid`` and ``v``, on the
    engine being measured): a tiny table gives the fixed costs; the cost per row is the
    largest of two plan shapes whose rows cost differently: a product of ``rows / 14``
    records with a 14-row public table (fan-out), and (``grouped``) grouped counts over
    ``GROUP_KEYS`` public keys (the payers' records grouped after the charge) of ``rows / 4``
    and ``rows`` records, whose difference gives the cost per row (their fixed cost, a
    commit's sync among them, raises the fixed cost if larger); each the median of ``repeat``
    runs."""
    import ibis
    import pandas as pd

    pub = pd.DataFrame({"j": range(14)})
    n = max(rows // 14, 1)
    tiny, big = table(100, "tiny"), table(n, "big")
    one = timed(lambda: tiny.where(ibis._.v >= 0).noisy_count(1e-9), repeat)
    fan = timed(lambda: big.where(ibis._.v >= 0).product(pub).noisy_count(1e-9), repeat)
    work = n + n + 14 * n + 14 * n + 14 * n  # as workbound counts this plan
    base = one / 2  # a query with one step
    per_row = max(fan - 3 * base, 0.0) / work
    if grouped:  # the slope between two sizes: the fixed costs (a commit's sync) cancel
        keys = list(range(GROUP_KEYS))
        sizes = (max(rows // 4, 1), max(rows, 2))
        ts, ws = [], []
        for m in sizes:
            wide = table(m, f"wide{m}")
            ts.append(timed(lambda w=wide: w.count_by(keys, lambda t: t.v % GROUP_KEYS, 1e-9),
                            repeat))
            ws.append(m + 2 * m + GROUP_KEYS + m)  # as workbound counts it (no steps)
        slope = max(ts[1] - ts[0], 0.0) / (ws[1] - ws[0])
        per_row = max(per_row, slope)
        base = max(base, ts[0] - slope * ws[0])  # its fixed cost: one query, no step
    return base, per_row
