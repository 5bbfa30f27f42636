"""Sources read through Spark (``engine = "spark"`` in a ``[[source]]``; the ``[spark]`` table).

The service holds one SparkSession (the driver runs in the service's process; ``master`` says
where the executors run: ``local[*]`` threads of the same process, or a cluster). A Spark
source is read where it lives (Parquet or CSV at a path or URL Spark reads, or a table of
Spark's catalogue) and is served with the same protections as a DuckDB source:

* its rows are counted when the service starts and a source above its ``max_rows`` is refused,
  never truncated; afterwards a Parquet source is read through :func:`row_guard` (each file's
  rows beyond those counted at start are left out), a CSV source or a catalogue table through
  a ``LIMIT`` of the cap, so no later change of the files can make a plan do more work than its
  static bound (:mod:`dprivacy.service.workbound`, with Spark's own costs from ``[spark]``);
* a PINQ source's budgets are the analysts' records in the service's SQLite ledger, charged
  before anything is computed, as for DuckDB sources;
* a ProPer source's personal budgets are a
  :class:`~dprivacy.tables.budgets.spark_budgets.SparkBudgetTable` under ``budget_dir``: charged
  by Spark where the data is, each charge committed (files synced, an atomic exclusive publish)
  before the answer is computed, so a killed service or driver loses no charge and pays nobody
  twice. ``budget_dir`` is a directory of a POSIX file system that the service and every
  executor mount (a local disk for ``local[*]``).

An overrun query is stopped by cancelling its running Spark jobs (each query's jobs form a job
group of their own); a charge cancelled before its commit charged nobody (its files are
collected later), one committed stands.
"""

from __future__ import annotations

import logging
import tempfile
from typing import Any

from dprivacy.errors import ConfigError, DPrivacyError
from dprivacy.service.config import ServiceConfig, SourceConfig, SparkConfig

__all__ = ["spark_session", "open_spark_source", "row_guard", "spark_budgets", "measure_spark",
           "cancel_spark", "warm_up_spark"]

log = logging.getLogger("dprivacy.service")


def spark_session(sc: SparkConfig) -> Any:
    """The service's SparkSession for ``sc`` (the process's active one if it exists: a
    process has one SparkContext)."""
    from pyspark.sql import SparkSession

    from dprivacy.tables.relations.engine.spark import _quiet_log4j2

    b = (SparkSession.builder.master(sc.master).appName("dprivacy-serve")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.ansi.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.driver.memory", sc.driver_memory)
         .config("spark.driver.extraJavaOptions",
                 f"-Dlog4j2.configurationFile={_quiet_log4j2()}"))
    if sc.master.startswith("local"):  # few shuffle partitions: one machine's cores
        b = b.config("spark.sql.shuffle.partitions", "2")
    for k, v in sc.conf:
        b = b.config(k, v)
    try:
        session = b.getOrCreate()
    except Exception as exc:
        raise ConfigError(f"[spark]: cannot start a Spark session on {sc.master!r}: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                          ) from None
    session.sparkContext.setLogLevel("ERROR")
    return session


def _reader(session: Any, src: SourceConfig) -> Any:
    if src.format == "catalog":
        return session.table(str(src.table))
    if src.format == "csv":
        sep = "\t" if str(src.url).lower().endswith(".tsv") else ","
        return session.read.option("header", True).option("inferSchema", True) \
            .option("sep", sep).csv(src.url)
    return session.read.parquet(src.url)


def open_spark_source(con: Any, src: SourceConfig) -> Any:
    """The Ibis table of the Spark source ``src`` on the PySpark backend ``con``: counted and
    checked against ``max_rows`` (refused above it), then read through a guard that no change
    of the files can get more rows through (see :func:`row_guard`)."""
    session = con._session
    name = f"src_{src.name.replace('.', '_').replace('-', '_')}"
    where = src.url if src.url is not None else f"table {src.table}"
    try:
        df = _reader(session, src)
        per_file = _rows_per_file(df) if src.format == "parquet" else None
        n = int(df.count()) if per_file is None else sum(per_file.values())
    except Exception as exc:
        raise ConfigError(f"source {src.name!r}: Spark cannot read {where}: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                          ) from None
    if n > src.max_rows:
        raise ConfigError(f"source {src.name!r} has {n} rows, above its max_rows = "
                          f"{src.max_rows}: declare a larger max_rows in its [[source]] (the "
                          "deadlines follow from it)")
    if per_file is None:  # CSV, a catalogue table: a global LIMIT (Spark runs it in one task)
        df.createOrReplaceTempView(name)
        return con.table(name).limit(src.max_rows)
    row_guard(df, per_file).createOrReplaceTempView(name)
    return con.table(name)


def _rows_per_file(df: Any) -> dict[str, int]:
    """The number of rows of every Parquet file of ``df`` (one aggregation; no row reaches the
    driver)."""
    from pyspark.sql import functions as F

    got = df.select(F.col("_metadata.file_path").alias("f")).groupBy("f").count().collect()
    return {str(r["f"]): int(r["count"]) for r in got}


def row_guard(df: Any, per_file: dict[str, int]) -> Any:
    """``df`` (Parquet files) restricted to the first ``per_file[f]`` rows of each file ``f``
    counted at start, by each row's position in its file (``_metadata.row_index``): whatever
    the files become later (rewritten longer, new files beside them), no more rows than were
    counted get through. A global ``LIMIT`` would do the same in ONE task (Spark gathers a
    limit's rows into a single partition); this filter keeps the scan's parallelism."""
    from pyspark.sql import functions as F

    if not per_file:
        return df.filter(F.lit(False))
    caps = F.create_map(*[x for f, c in sorted(per_file.items())
                          for x in (F.lit(f), F.lit(c).cast("long"))])
    return df.filter(F.col("_metadata.row_index")
                     < F.element_at(caps, F.col("_metadata.file_path")))


def spark_budgets(cfg: ServiceConfig, src: SourceConfig, session: Any) -> Any:
    """The personal budgets of the ProPer Spark source ``src`` in ``budget_dir/proper-<source>``:
    a SparkBudgetTable, or with ``[spark] budgets = "slots"`` a SparkSlotBudgets (Parquet
    sources only: the budgets sit beside the rows of the files, which every charge checks are
    unchanged)."""
    from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable
    from dprivacy.tables.budgets.spark_slots import SparkSlotBudgets

    assert cfg.spark is not None
    path = cfg.spark.budget_dir / f"proper-{src.name}"
    if cfg.spark.budgets == "slots" and src.format != "parquet":
        raise ConfigError(f"source {src.name!r}: [spark] budgets = 'slots' keeps the budgets "
                          "beside the rows of Parquet files; this source is "
                          f"{src.format} (use budgets = 'table')")
    try:
        if cfg.spark.budgets == "slots":
            return SparkSlotBudgets(path, session=session)
        return SparkBudgetTable(path, session=session)
    except (OSError, DPrivacyError) as exc:
        raise ConfigError(f"source {src.name!r}: cannot open its budgets in "
                          f"{cfg.spark.budget_dir}: {exc}") from None


def cancel_spark(session: Any, group: str) -> None:
    """Cancel the running jobs of the job group ``group`` (an overrun query's)."""
    try:
        session.sparkContext.cancelJobGroup(group)
    except Exception as exc:  # noqa: BLE001 - a stopped context: nothing runs
        log.warning("cancelling Spark jobs failed (%s)", type(exc).__name__)


def warm_up_spark(session: Any) -> None:
    """Run the Spark code paths of a ProPer count and of a PINQ sum once on synthetic records
    (never the owner's data, a temporary budget store): the first queries of a session load
    and compile code that later ones reuse, and would otherwise overrun their deadlines."""
    import ibis

    from dprivacy.tables import ProPerTable, Queryable
    from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable

    df = session.range(8).selectExpr("id AS pid", "id AS v")
    with tempfile.TemporaryDirectory(prefix="dprivacy-warm-up-") as tmp:
        p = ProPerTable(df, 1e12, ledger=SparkBudgetTable(f"{tmp}/b", session=session),
                        id_column="pid", backend="spark")
        for _i in range(2):
            p.where(ibis._.v >= 0).noisy_count(1e-9)
        q = Queryable(df, budget=1e12, backend="spark")
        q.where(ibis._.v >= 0).noisy_count(1e-9)
        q.noisy_sum(1e-9, "v", 0, 1)


def measure_spark(session: Any, rows: int = 1_000_000, repeat: int = 3) -> tuple[float, float]:
    """(seconds per query and step, seconds per row of work) of ProPer counts on Spark, as
    measured now on synthetic records (never the owner's data) with the budgets in a
    temporary SparkBudgetTable: as :func:`dprivacy.service.calibrate.measure` does for
    DuckDB."""
    from dprivacy.service.costs import measure_tables
    from dprivacy.tables import ProPerTable
    from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable

    with tempfile.TemporaryDirectory(prefix="dprivacy-calibrate-") as tmp:
        def table(k: int, name: str) -> Any:
            df = session.range(k).selectExpr("id AS pid", "id AS v")
            store = SparkBudgetTable(f"{tmp}/{name}", session=session)
            return ProPerTable(df, 1e12, ledger=store, id_column="pid", backend="spark")

        return measure_tables(table, rows, repeat, grouped=False)
