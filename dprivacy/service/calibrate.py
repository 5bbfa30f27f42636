"""Measuring the engine's costs when the service starts (``calibrate = true`` in ``[service]``).

The deadlines of :mod:`dprivacy.service.workbound` follow from two calibrated costs: the fixed
cost of a query and of each of its steps (``base_seconds``) and the cost of one row of work
(``row_seconds``), both on one engine thread (as an analyst's worker runs a query). With
``calibrate = true`` the service measures them before it serves: the same table code a worker
runs (a :class:`~dprivacy.tables.ProPerTable` on a DuckDB connection set up as a worker's, its
personal budgets in a durable budget store as the workers' are) on synthetic records -- never
the owner's data -- once on a tiny table (the fixed costs), and through a product with a public
table and a grouped count (the cost per row: the larger), each the median of a few runs. It
also measures ``store_seconds`` (:func:`measure_store`): a budget store's commit and another
process's catch-up with it, per person (the allowance of :mod:`dprivacy.service.workbound`
for the other analysts' charges).
Each measured cost is multiplied by ``calibrate_factor`` (4 by default: the margin for a
machine busier than at start) and the larger of it and the configured value is used. The
measurement is logged for the owner; it depends on the machine, never on the data.

A service with Spark sources measures Spark the same way
(:func:`dprivacy.service.spark_sources.measure_spark`: ProPer counts on Spark with the budgets
in a temporary SparkBudgetTable, on 10⁶ synthetic rows) and raises ``[spark]``
``base_seconds`` and ``row_seconds`` likewise (``step_seconds`` stays as configured).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import replace
from typing import Any

from dprivacy.service.config import ServiceConfig
from dprivacy.service.costs import measure_tables

__all__ = ["measure", "measure_store", "calibrated"]

log = logging.getLogger("dprivacy.service")


def measure(rows: int = 100_000, repeat: int = 5) -> tuple[float, float]:
    """(seconds per query and step, seconds per row of work), as measured now on synthetic
    records in DuckDB (see the module doc): on a connection set up as an analyst's worker sets
    up its own, with the personal budgets in a durable budget store in a temporary directory
    (the store the service's workers charge)."""
    import ibis

    from dprivacy.service.sources import WORKER_MEMORY
    from dprivacy.tables import ProPerTable
    from dprivacy.tables.budgets.budget_table import BudgetTable

    # one engine thread and the worker's memory limit, as in an analyst's worker
    con = ibis.duckdb.connect(threads=1, memory_limit=WORKER_MEMORY)
    with tempfile.TemporaryDirectory(prefix="dprivacy-calibrate-") as tmp:
        def table(n: int, name: str) -> Any:
            t = con.create_table(f"calib_{name}",
                                 ibis.memtable({"pid": range(n), "v": range(n)}))
            return ProPerTable(t, 1e12, ledger=BudgetTable(os.path.join(tmp, name)),
                               id_column="pid", backend="duckdb")

        try:
            return measure_tables(table, rows, repeat)
        finally:
            con.disconnect()


def measure_store(people: int = 1_000_000, repeat: int = 5) -> float:
    """Seconds per person of one commit to a ProPer budget store plus another process's
    catch-up with it, or of a reload of the store's snapshot divided by ``RELOAD_COMMITS``
    (the larger), as measured now on a store of ``people`` synthetic people in a temporary
    directory; each the median of ``repeat`` runs."""
    import numpy as np
    import pyarrow as pa

    from dprivacy.service.costs import timed
    from dprivacy.service.workbound import RELOAD_COMMITS
    from dprivacy.tables.budgets.budget_table import BudgetTable
    from dprivacy.tables.budgets.slot_store import SlotStore

    with tempfile.TemporaryDirectory(prefix="dprivacy-calibrate-") as tmp:
        path = os.path.join(tmp, "store")
        mine = BudgetTable(path)
        mine.register(pa.table({"id": np.arange(people, dtype=np.int64),
                                "budget": np.full(people, 1e12)}), fresh=True)
        other = SlotStore(path)
        with other.locked():
            pass
        ids = np.arange(people, dtype=np.int64)
        store = mine.store

        def commit() -> None:
            with store.locked() as s:
                s.charge_stream([ids], 1, "calibration")

        def catch_up() -> None:
            with other.locked():
                pass

        def both() -> None:
            commit()
            catch_up()

        def reload() -> None:
            with SlotStore(path).locked():
                pass

        one = max(timed(both, repeat), timed(reload, repeat) / RELOAD_COMMITS)
        store.close()
        other.close()
    return one / people


def calibrated(cfg: ServiceConfig) -> ServiceConfig:
    """``cfg`` with ``base_seconds``, ``row_seconds`` and ``store_seconds`` raised to the
    measured costs times ``calibrate_factor`` (unchanged without ``calibrate``)."""
    if not cfg.calibrate:
        return cfg
    base, per_row = measure()
    per_person = measure_store()
    f = cfg.calibrate_factor
    out = replace(cfg, base_seconds=max(cfg.base_seconds, f * base),
                  row_seconds=max(cfg.row_seconds, f * per_row),
                  store_seconds=max(cfg.store_seconds, f * per_person))
    log.warning("calibrated at start: %.4f s per query and step, %.3g s per row, %.3g s per "
                "person of a budget store's commit (measured, times %g); using base_seconds = "
                "%.4f, row_seconds = %.3g, store_seconds = %.3g", base, per_row, per_person, f,
                out.base_seconds, out.row_seconds, out.store_seconds)
    if out.spark is not None and "spark" in out.engines():
        from dprivacy.service.spark_sources import measure_spark, spark_session

        sb, sr = measure_spark(spark_session(out.spark))
        f = cfg.calibrate_factor
        sp = replace(out.spark, base_seconds=max(out.spark.base_seconds, f * sb),
                     row_seconds=max(out.spark.row_seconds, f * sr))
        out = replace(out, spark=sp)
        log.warning("calibrated Spark at start: %.4f s per query and step, %.3g s per row "
                    "(measured, times %g); using base_seconds = %.4f, row_seconds = %.3g", sb, sr,
                    f, sp.base_seconds, sp.row_seconds)
    return out
