"""Engines behind :class:`~dprivacy.tables.relations.engine.relation.IbisRelation`: DuckDB and Spark.

An :class:`Engine` owns one Ibis backend connection, registers sources on it (pandas/Arrow frames
zero-copy, Parquet files as views, existing tables), and runs compiled plans. Every plan is
compiled by Ibis to SQL and then hardened before it runs: every ``CAST`` in the SQL becomes
``TRY_CAST`` (NULL instead of a conversion error), including the casts Ibis itself generates
(``FLOOR(x)`` typed as an integer, for instance), so that no record can make a plan raise
(see :mod:`dprivacy.tables.relations.engine.rowwise` for the expression-level rewrite). Spark sessions
additionally run with ``spark.sql.ansi.enabled=false`` (non-ANSI arithmetic returns NULL or wraps
instead of raising).

Nothing here draws randomness or touches budgets; results are exact and go to the driver only
when a table's aggregation asks for them, after its charge.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import ibis
import ibis.expr.operations as ops
import ibis.expr.types as ir
import numpy as np
import pandas as pd
import pyarrow as pa
import sqlglot.expressions as sge

from dprivacy.errors import ValidationError

__all__ = ["Engine", "DuckEngine", "SparkEngine", "default_duckdb"]

log = logging.getLogger(__name__)
_names = itertools.count()
_lock = threading.Lock()
_SQL_CACHE = 256  # compiled plans kept per engine
STREAM_ROWS = 1 << 17  # rows per Arrow batch of a streamed result


def fresh_name(prefix: str) -> str:
    """A process-unique name for a registered view or temporary table."""
    with _lock:
        return f"__dp_{prefix}_{next(_names)}"


def _try_casts(query: sge.Expression) -> sge.Expression:
    """Every ``CAST`` of ``query`` (nested ones too) replaced by ``TRY_CAST``, in place."""
    for node in list(query.find_all(sge.Cast)):
        if type(node) is sge.Cast:
            node.replace(sge.TryCast(**node.args))
    return query


class Engine:
    """Common part of the engines: compile (hardened) and run Ibis expressions."""

    name: str = ""

    def __init__(self, con: Any) -> None:
        self.ibis = con
        self._sql_cache: OrderedDict[Any, str] = OrderedDict()

    def sql(self, expr: ir.Expr) -> str:
        """The hardened SQL of ``expr`` (every CAST a TRY_CAST). Compiled once per plan: Ibis
        operations compare by structure (sources, columns, literals), so an equal plan built
        again (the same query on a new table object) reuses the text."""
        op = expr.op()
        with _lock:
            hit = self._sql_cache.get(op)
            if hit is not None:
                self._sql_cache.move_to_end(op)
                return hit
        query = self.ibis.compiler.to_sqlglot(expr)
        text = _try_casts(query).sql(dialect=self.ibis.dialect)
        with _lock:
            self._sql_cache[op] = text
            while len(self._sql_cache) > _SQL_CACHE:
                self._sql_cache.popitem(last=False)
        return text

    def bind(self, expr: ir.Expr) -> None:
        """Compile ``expr`` and let the engine bind (analyse) it without running it: type errors
        surface now, before any charge. Raises :class:`ValidationError`."""
        try:
            self._bind(self.sql(expr))
        except Exception as exc:
            raise ValidationError(f"the expression cannot run on {self.name}: "
                                  f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from exc

    def _bind(self, sql: str) -> None:
        raise NotImplementedError

    def scalar(self, expr: ir.Expr) -> Any:
        """The single value of a one-row, one-column expression."""
        raise NotImplementedError

    def arrow(self, expr: ir.Expr) -> pa.Table:
        """The result of a table expression as an Arrow table."""
        raise NotImplementedError

    def column_chunks(self, expr: ir.Expr) -> Iterator[pa.Array]:
        """The chunks of the first column of a table expression's result (no concatenation)."""
        yield from self.arrow(expr).column(0).chunks

    def column_stream(self, expr: ir.Expr) -> Iterator[pa.Array]:
        """The chunks of the first column of a table expression's result, in order, as the
        engine produces them where it can (the caller works on one chunk while the engine
        computes the next); all of them at once otherwise."""
        yield from self.column_chunks(expr)

    def pandas(self, expr: ir.Expr) -> pd.DataFrame:
        """The result of a table expression as a pandas frame."""
        return self.arrow(expr).to_pandas()

    def register_frame(self, data: pd.DataFrame | pa.Table, prefix: str = "src") -> ir.Table:
        """A frame (copied as little as possible) as a table of this engine."""
        raise NotImplementedError


def _files_key(paths: list[str]) -> tuple | None:
    """(path, size, mtime_ns) of every file, or None for a glob or a path that is not a file."""
    out = []
    for p in paths:
        if any(ch in p for ch in "*?[") or not os.path.isfile(p):
            return None
        st = os.stat(p)
        out.append((os.path.abspath(p), st.st_size, st.st_mtime_ns))
    return tuple(out)


class DuckEngine(Engine):
    """DuckDB through Ibis (in-process, out of core, multi-threaded).

    Parameters:
        con: an Ibis DuckDB backend; None opens a fresh in-memory database.
    """

    name = "duckdb"

    def __init__(self, con: Any = None) -> None:
        super().__init__(con if con is not None else ibis.duckdb.connect())
        self.raw = self.ibis.con  # the duckdb connection
        self._parquet: OrderedDict[tuple, ir.Table] = OrderedDict()

    def execute(self, sql: str, params: list | None = None) -> Any:
        """Run SQL on the native connection (a cursor-like result)."""
        return self.raw.execute(sql, params) if params is not None else self.raw.execute(sql)

    def _bind(self, sql: str) -> None:
        self.raw.execute("EXPLAIN " + sql).fetchall()

    def scalar(self, expr: ir.Expr) -> Any:
        rows = self.execute(self.sql(expr)).fetchall()  # fetch all: leaves no open result
        return rows[0][0] if rows else None

    def arrow(self, expr: ir.Expr) -> pa.Table:
        return self.raw.sql(self.sql(expr)).to_arrow_table()

    def column_stream(self, expr: ir.Expr) -> Iterator[pa.Array]:
        """The first column's Arrow batches of ``STREAM_ROWS`` rows as DuckDB's streaming
        result yields them (its threads run ahead while the caller consumes a batch). The
        statement holds the connection until the stream is exhausted or closed: consume it in
        the thread that issued it, with no other statement on this engine in between."""
        reader = self.raw.sql(self.sql(expr)).to_arrow_reader(STREAM_ROWS)
        try:
            for batch in reader:
                yield batch.column(0)
        finally:
            reader.close()

    def table(self, name: str) -> ir.Table:
        """An Ibis table over the view ``name`` (schema read from a zero-row Arrow result, which
        is much cheaper than Ibis's own catalogue lookup)."""
        try:
            schema = self.raw.sql(f'SELECT * FROM "{name}" LIMIT 0').to_arrow_table().schema
            sch = ibis.Schema.from_pyarrow(schema)
        except Exception:  # a type Arrow cannot describe: ask Ibis
            return self.ibis.table(name)
        return ops.DatabaseTable(name=name, schema=sch, source=self.ibis,
                                 namespace=ops.Namespace()).to_expr()

    def register_frame(self, data: pd.DataFrame | pa.Table, prefix: str = "src") -> ir.Table:
        name = fresh_name(prefix)
        self.raw.register(name, data)  # zero-copy scan of the frame's buffers
        if isinstance(data, pa.Table):  # the schema is the Arrow table's: no query needed
            try:
                sch = ibis.Schema.from_pyarrow(data.schema)
            except Exception:  # a type Ibis cannot map: ask DuckDB
                return self.table(name)
            return ops.DatabaseTable(name=name, schema=sch, source=self.ibis,
                                     namespace=ops.Namespace()).to_expr()
        return self.table(name)

    def register_parquet(self, paths: list[str]) -> ir.Table:
        """A view over Parquet file(s): scanned out of core, in parallel, on every query.

        The view of the same plain files (no glob), unchanged since (same size and modification
        time, nanoseconds), is reused: no new view, no schema query, and the plans built on it
        are the same Ibis operations, so their SQL is compiled once (:meth:`Engine.sql`)."""
        key = _files_key(paths)
        if key is not None:
            with _lock:
                hit = self._parquet.get(key)
                if hit is not None:
                    self._parquet.move_to_end(key)
                    return hit
        name = fresh_name("parquet")
        lit = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
        self.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS SELECT * FROM read_parquet([{lit}])')
        table = self.table(name)
        if key is not None:
            with _lock:
                self._parquet[key] = table
                while len(self._parquet) > _SQL_CACHE:
                    self._parquet.popitem(last=False)
        return table


class SparkEngine(Engine):
    """Spark through Ibis's PySpark backend (a local or cluster session).

    The session is switched to non-ANSI mode (``spark.sql.ansi.enabled=false``): in ANSI mode an
    overflow, a bad cast or a zero divisor in ONE record fails the whole query, which would tell
    the analyst that such a record exists.
    """

    name = "spark"

    def __init__(self, session: Any) -> None:
        session.conf.set("spark.sql.ansi.enabled", "false")
        super().__init__(ibis.pyspark.connect(session))
        self.session = session

    def run(self, expr: ir.Expr) -> Any:
        """The Spark DataFrame of a hardened plan (lazy)."""
        return self.session.sql(self.sql(expr))

    def _bind(self, sql: str) -> None:
        _ = self.session.sql(sql).schema  # analysis only; nothing runs

    def scalar(self, expr: ir.Expr) -> Any:
        rows = self.run(expr).collect()
        return rows[0][0] if rows else None

    def arrow(self, expr: ir.Expr) -> pa.Table:
        df = self.run(expr)
        if hasattr(df, "toArrow"):
            return df.toArrow()
        return pa.Table.from_pandas(df.toPandas(), preserve_index=False)

    def register_dataframe(self, sdf: Any, prefix: str = "src") -> ir.Table:
        """A Spark DataFrame as a table (a temporary view of its lazy plan)."""
        name = fresh_name(prefix)
        sdf.createOrReplaceTempView(name)
        return self.ibis.table(name)

    def register_frame(self, data: pd.DataFrame | pa.Table, prefix: str = "src") -> ir.Table:
        frame = data.to_pandas() if isinstance(data, pa.Table) else data
        if len(frame) == 0:
            schema = ibis.schema(frame.dtypes.to_dict()) if len(frame.columns) else None
            if schema is None:
                raise ValidationError("an empty public table needs at least one column")
            sdf = self.session.createDataFrame([], schema=_spark_schema(schema))
        else:
            sdf = self.session.createDataFrame(frame)
        return self.register_dataframe(sdf, prefix)


def _spark_schema(schema: Any) -> Any:
    from ibis.backends.pyspark.datatypes import PySparkSchema

    return PySparkSchema.from_ibis(schema)


_DEFAULT: DuckEngine | None = None


def default_duckdb() -> DuckEngine:
    """The process's shared in-memory DuckDB engine (frames are registered on it)."""
    global _DEFAULT
    with _lock:
        if _DEFAULT is None:
            _DEFAULT = DuckEngine()
        return _DEFAULT


def as_float_array(table: pa.Table) -> np.ndarray:
    """The first column of an Arrow table as a float64 numpy array (NULL -> NaN)."""
    if table.num_rows == 0:
        return np.zeros(0)
    col = table.column(0).to_numpy(zero_copy_only=False)
    return np.asarray(col, dtype=float)
