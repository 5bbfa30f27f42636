"""The data owner's side of the service: the sources, their engine and every budget.

:class:`Owner` opens every configured DuckDB source on ONE DuckDB connection (so that plans may
join sources), every Spark source (``engine = "spark"``) on the service's Spark session
(:mod:`dprivacy.service.spark_sources`), and builds the protected tables with the public table
API:

* a PINQ source gives each analyst their own :class:`~dprivacy.tables.Queryable` whose budget
  is the durable record ``pinq:<source>/<analyst>`` of the SQLite ledger ``pinq.sqlite`` in the
  state directory (charged and committed before an answer is computed);
* a ProPer source is ONE :class:`~dprivacy.tables.ProPerTable` shared by every analyst (personal
  budgets belong to the people, POPL'15), its budgets in the DuckDB file ``proper-<source>.duckdb``
  (a Spark source: the SparkBudgetTable ``proper-<source>`` under ``[spark]`` ``budget_dir``).

:class:`Shadows` holds an empty table with the same schema for each source: the plan run on it
gives the public schema of a derived table and the documented default answer (the same query on
an empty table: pure noise, charged to nobody).

An Owner lives in one analyst's worker process (:mod:`dprivacy.service.workers`): it opens the
sources that analyst may use, on a DuckDB connection of one thread. There its PINQ tables are
*prepaid*: the service charged the analyst's durable PINQ budget before the query reached the
worker (:mod:`dprivacy.service.runner`), so they keep no ledger of their own. ProPer tables charge
the people's personal budgets in the worker, in the durable store every worker shares (it is
safe for processes). Without an analyst, an Owner opens every source with the durable PINQ
ledgers (the in-process use of the tables, and tests).
"""

from __future__ import annotations

import os
from typing import Any

from dprivacy.errors import ConfigError, DPrivacyError, UnsupportedOperationError
from dprivacy.service.config import ServiceConfig, SourceConfig
from dprivacy.service.releases import ReleaseInputs, open_release

__all__ = ["Owner", "Shadows", "open_source", "analyst_columns", "public_schema"]

_SHADOW_BUDGET = 1e6
WORKER_MEMORY = "1GB"  # DuckDB's buffers in one analyst's worker (it spills beyond)
_PREPAID = 1e12  # a worker's PINQ tables: the charge was made before the query reached it


def open_source(con: Any, src: SourceConfig) -> Any:
    """The Ibis table of ``src`` on the DuckDB connection ``con``, checked against the owner's
    ``max_rows`` (a source above its cap is refused, never truncated) and read through a
    ``LIMIT`` of that cap, so that no later change of the file can make a plan do more work than
    its static bound (:mod:`dprivacy.service.workbound`)."""
    t = _open(con, src)
    try:
        n = int(t.count().execute())
    except Exception as exc:
        raise ConfigError(f"source {src.name!r}: cannot count the rows of {src.path}: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    if n > src.max_rows:
        raise ConfigError(f"source {src.name!r} has {n} rows, above its max_rows = "
                          f"{src.max_rows}: declare a larger max_rows in its [[source]] (the "
                          "deadlines follow from it)")
    return t.limit(src.max_rows)


def _open(con: Any, src: SourceConfig) -> Any:
    if not src.path.exists():
        raise ConfigError(f"source {src.name!r}: {src.path} does not exist")
    name = f"src_{src.name.replace('.', '_').replace('-', '_')}"
    try:
        if src.format == "parquet":
            return con.read_parquet(str(src.path), table_name=name)
        if src.format == "csv":
            return con.read_csv(str(src.path), table_name=name)
        con.attach(str(src.path), name=f"db_{name}", read_only=True)
        return con.table(str(src.table), database=f"db_{name}")
    except DPrivacyError:
        raise
    except Exception as exc:
        raise ConfigError(f"source {src.name!r}: cannot open {src.path}: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None


class Owner:
    """Sources, tables and budgets of the running service (see the module doc)."""

    def __init__(self, cfg: ServiceConfig, analyst: str | None = None) -> None:
        import ibis

        from dprivacy.tables import Ledger

        self.cfg = cfg
        self.analyst = analyst
        os.makedirs(cfg.state_dir, exist_ok=True)
        if analyst is None:
            self.con = ibis.duckdb.connect()
            self.ledger: Any = Ledger(cfg.state_dir / "pinq.sqlite")
        else:  # one engine thread per worker: its share of the machine is its process's
            self.con = ibis.duckdb.connect(threads=1, memory_limit=WORKER_MEMORY)
            self.con.raw_sql("SET enable_progress_bar = false")
            self.ledger = None
        mine = [s for s in cfg.sources if analyst is None or any(
            a.name == analyst and a.may_use(s.name) for a in cfg.analysts)]
        self.spark: Any = None  # the Ibis PySpark backend of the Spark sources, if any
        self._query = 0  # the number of the query the engine runs (its Spark job group)
        if cfg.spark is not None and any(s.engine == "spark" for s in mine):
            from dprivacy.service.spark_sources import spark_session, warm_up_spark

            session = spark_session(cfg.spark)
            warm_up_spark(session)
            self.spark = ibis.pyspark.connect(session)
        self.raw: dict[str, Any] = {s.name: self._read(s) for s in mine}
        self.pinq: dict[tuple[str, str], Any] = {}
        self.proper: dict[str, Any] = {}
        self.budgets: dict[str, Any] = {}  # ProPer budget tables: the owner's handles
        self.releases = releases_of(cfg)
        for s in mine:
            try:
                self._open(s)
            except DPrivacyError as exc:
                raise ConfigError(f"source {s.name!r}: {exc}") from None

    def _read(self, s: SourceConfig) -> Any:
        if s.engine == "spark":
            from dprivacy.service.spark_sources import open_spark_source

            return open_spark_source(self.spark, s)
        return open_source(self.con, s)

    def _open(self, s: SourceConfig) -> None:
        from dprivacy.tables import ProPerTable, Queryable

        if s.kind == "pinq":
            for a in self.cfg.analysts:
                if self.analyst is not None and a.name == self.analyst:
                    self.pinq[(s.name, a.name)] = Queryable(
                        self.raw[s.name], **pinq_budget_kwargs(s.notion, _PREPAID),
                        backend=s.engine)
                elif self.analyst is None and a.may_use(s.name):
                    self.pinq[(s.name, a.name)] = Queryable(
                        self.raw[s.name], **pinq_budget_kwargs(s.notion, s.budget),
                        ledger=self.ledger, source=pinq_record(s.name, a.name),
                        backend=s.engine)
        else:
            budget = s.budget_column if s.budget_column is not None else s.budget
            assert budget is not None
            data = self.raw[s.name]
            if s.engine == "spark":
                from dprivacy.service.spark_sources import spark_budgets

                session = self.spark._session
                self.budgets[s.name] = spark_budgets(self.cfg, s, session)
                if self.cfg.spark is not None and self.cfg.spark.budgets == "slots":
                    # the store reads the files itself, checking at every charge that they are
                    # the ones counted at start (their rows cannot grow past the count)
                    data = session.read.parquet(s.url)
            else:
                from dprivacy.tables.budgets.budget_table import BudgetTable

                self.budgets[s.name] = BudgetTable(self.cfg.state_dir / f"proper-{s.name}.duckdb")
            t = ProPerTable(data, budget, ledger=self.budgets[s.name], id_column=s.id,
                            backend=s.engine)
            if s.budget_column is not None:  # the budgets are the owner's, never a column
                import ibis

                t = t.select(**{c: ibis._[c] for c in analyst_columns(s, t.columns)})
            self.proper[s.name] = t

    def table(self, source: str, analyst: str) -> Any:
        """The analyst's base table object of ``source``."""
        if (source, analyst) in self.pinq:
            return self.pinq[(source, analyst)]
        return self.proper[source]

    def begin(self) -> None:
        """Mark the engine work that follows as one query's (called on the engine thread when
        a query starts): its Spark jobs get a job group of their own, so that an interrupt
        cancels them and never the next query's."""
        self._query += 1
        if self.spark is not None:
            self.spark._session.sparkContext.setJobGroup(
                f"dprivacy-query-{self._query}", "a served query", interruptOnCancel=True)

    def interrupt(self) -> None:
        """Interrupt the query running on the engine connection (an overrun): DuckDB's, and
        the current query's Spark jobs if the service has Spark sources."""
        self.con.con.interrupt()
        if self.spark is not None:
            from dprivacy.service.spark_sources import cancel_spark

            cancel_spark(self.spark._session, f"dprivacy-query-{self._query}")


def analyst_columns(src: SourceConfig, columns: Any) -> list[str]:
    """The columns of ``src`` an analyst sees: all but the personal budgets' column."""
    return [str(c) for c in columns if c != src.budget_column]


def public_schema(src: SourceConfig, schema: Any) -> Any:
    """The schema an analyst sees of ``src`` (``schema``: the source's Ibis schema)."""
    import ibis

    return ibis.schema({c: schema[c] for c in analyst_columns(src, schema.names)})


def releases_of(cfg: ServiceConfig) -> dict[str, ReleaseInputs]:
    """The owner's release universe and metric of every source that has them."""
    out = {}
    for s in cfg.sources:
        if s.release is not None:
            try:
                out[s.name] = open_release(s.release)
            except DPrivacyError as exc:
                raise ConfigError(f"source {s.name!r}: {exc}") from None
    return out


def pinq_record(source: str, analyst: str, notion: str = "pure") -> str:
    """The ledger name (without its ``pinq:`` prefix) of an analyst's budget on a PINQ source
    (``zcdp:<source>/<analyst>`` for a zCDP source: a Queryable in zCDP mode keeps its budget
    apart from a pure one)."""
    return f"{source}/{analyst}" if notion == "pure" else f"zcdp:{source}/{analyst}"


class Shadows:
    """Empty tables with the sources' schemas (see the module doc)."""

    def __init__(self, cfg: ServiceConfig, schemas: dict[str, Any],
                 releases: dict[str, ReleaseInputs] | None = None) -> None:
        import ibis

        from dprivacy.tables import ProPerTable

        self.cfg = cfg
        self.con = ibis.duckdb.connect(threads=1)  # empty tables: one thread is plenty
        self.empty = {n: self.con.create_table(f"shadow_{i}", schema=sch)
                      for i, (n, sch) in enumerate(schemas.items())}
        self.proper = {s.name: ProPerTable(self.empty[s.name], _SHADOW_BUDGET, id_column=s.id,
                                           backend="duckdb")
                       for s in cfg.sources if s.kind == "proper"}
        self.releases = releases_of(cfg) if releases is None else releases

    def table(self, source: str) -> Any:
        """A fresh empty table object for ``source`` (PINQ) or the shared empty ProPer one."""
        from dprivacy.tables import Queryable

        if source in self.proper:
            return self.proper[source]
        # never less than the analysts' own budget: a query the real table accepts must have a
        # default too (a refusal only when the real query overran would depend on the data)
        src = self.cfg.source(source)
        budget = max(_SHADOW_BUDGET, src.budget or 0.0) if src is not None else _SHADOW_BUDGET
        notion = src.notion if src is not None else "pure"
        return Queryable(self.empty[source], **pinq_budget_kwargs(notion, budget), backend="duckdb")


def pinq_budget_kwargs(notion: str, amount: float | None) -> dict[str, float | None]:
    """Queryable's budget argument: ``budget=`` (pure ε) or ``rho=`` (zCDP mode)."""
    return {"rho": amount} if notion == "zcdp" else {"budget": amount}


def refuse_personal() -> UnsupportedOperationError:
    """The error for a budget request on a ProPer source."""
    return UnsupportedOperationError(
        "personal budgets are the data owner's: a ProPer source never reveals them (an exhausted "
        "person's records are silently left out of answers)")
