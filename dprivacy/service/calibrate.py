"""Measuring the engine's costs when the service starts (``calibrate = true`` in ``[service]``).

The deadlines of :mod:`dprivacy.service.workbound` follow from two calibrated costs: the fixed
cost of a query and of each of its steps (``base_seconds``) and the cost of one row of work
(``row_seconds``), both on one engine thread (as an analyst's worker runs a query). With
``calibrate = true`` the service measures them before it serves: the same table code (a
:class:`~dprivacy.tables.ProPerTable` on DuckDB, personal budgets and all) on synthetic records
-- never the owner's data -- once on a tiny table (the fixed costs) and once through a product
with a public table on ``rows`` records (the cost per row), each the median of a few runs.
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
from dataclasses import replace
from typing import Any

from dprivacy.service.config import ServiceConfig
from dprivacy.service.costs import measure_tables

__all__ = ["measure", "calibrated"]

log = logging.getLogger("dprivacy.service")


def measure(rows: int = 100_000, repeat: int = 5) -> tuple[float, float]:
    """(seconds per query and step, seconds per row of work), as measured now on synthetic
    records in DuckDB (see the module doc)."""
    import ibis

    from dprivacy.tables import ProPerTable

    con = ibis.duckdb.connect(threads=1)  # one engine thread, as in an analyst's worker

    def table(n: int, name: str) -> Any:
        t = con.create_table(f"calib_{name}", ibis.memtable({"pid": range(n), "v": range(n)}))
        return ProPerTable(t, 1e12, id_column="pid", backend="duckdb")

    try:
        return measure_tables(table, rows, repeat)
    finally:
        con.disconnect()


def calibrated(cfg: ServiceConfig) -> ServiceConfig:
    """``cfg`` with ``base_seconds`` and ``row_seconds`` raised to the measured costs times
    ``calibrate_factor`` (unchanged without ``calibrate``)."""
    if not cfg.calibrate:
        return cfg
    base, per_row = measure()
    out = replace(cfg, base_seconds=max(cfg.base_seconds, cfg.calibrate_factor * base),
                  row_seconds=max(cfg.row_seconds, cfg.calibrate_factor * per_row))
    log.warning("calibrated at start: %.4f s per query and step, %.3g s per row (measured, "
                "times %g); using base_seconds = %.4f, row_seconds = %.3g", base, per_row,
                cfg.calibrate_factor, out.base_seconds, out.row_seconds)
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
