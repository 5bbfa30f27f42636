"""Where protected records come from: ``relation_from(source, backend)`` (ProPer's budgets on an
engine: :mod:`dprivacy.tables.budgets.engine_budgets`).

Sources: a pandas DataFrame or an Arrow table (registered zero-copy in DuckDB, or copied into
Spark), Parquet file path(s) or globs (a DuckDB view scanned out of core on every query, or
``spark.read.parquet``), an Ibis table of a DuckDB database or of a PySpark session (e.g.
``ibis.duckdb.connect("warehouse.duckdb").table("people")``), or a Spark DataFrame.

Examples:
    >>> import pandas as pd
    >>> r = relation_from(pd.DataFrame({"age": [15, 30]}), "duckdb")
    >>> r.backend, r.columns, r.count()
    ('duckdb', ['age'], 2)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import ibis
import ibis.expr.types as ir
import pandas as pd
import pyarrow as pa

from dprivacy.errors import ValidationError
from dprivacy.tables.relations.engine.backends import DuckEngine, Engine, SparkEngine, default_duckdb
from dprivacy.tables.relations.engine.relation import PID, IbisRelation

__all__ = ["relation_from", "infer_backend"]

_ENGINES: dict[int, Engine] = {}
_lock = threading.Lock()


def _engine_for(key: Any, make: Any) -> Engine:
    with _lock:
        eng = _ENGINES.get(id(key))
        if eng is None:
            eng = _ENGINES[id(key)] = make()
        return eng


def _is_spark_df(x: Any) -> bool:
    mod = type(x).__module__
    return mod.startswith("pyspark.sql") and type(x).__name__ == "DataFrame"


def _is_paths(x: Any) -> bool:
    if isinstance(x, (str, os.PathLike)):
        return True
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(p, (str, os.PathLike))
                                                            for p in x)


def infer_backend(source: Any) -> str | None:
    """``"duckdb"`` for Parquet paths, Arrow tables and DuckDB Ibis tables, ``"spark"`` for Spark
    DataFrames and PySpark Ibis tables, None (pandas) for a pandas DataFrame."""
    if isinstance(source, pd.DataFrame):
        return None
    if _is_spark_df(source):
        return "spark"
    if isinstance(source, ir.Table):
        name = source._find_backend().name
        return "spark" if name == "pyspark" else name
    if _is_paths(source) or isinstance(source, pa.Table):
        return "duckdb"
    raise ValidationError(f"source is a {type(source).__name__}: expected a pandas DataFrame, an "
                          "Arrow table, Parquet path(s), an Ibis table or a Spark DataFrame")


def _check_columns(cols: Sequence[Any]) -> None:
    for c in cols:
        if not isinstance(c, str) or c.startswith("__dp_"):
            raise ValidationError(f"column {c!r}: engine tables need string column names not "
                                  "starting with '__dp_'")


def _spark_session() -> Any:
    from pyspark.sql import SparkSession

    from dprivacy.tables.relations.engine.spark import local_session

    return SparkSession.getActiveSession() or local_session()


def relation_from(source: Any, backend: str | None = None, *,
                  id_column: str | None = None) -> IbisRelation:
    """An :class:`IbisRelation` over ``source`` on ``backend`` ("duckdb" or "spark").

    Parameters:
        source: see the module doc.
        backend: "duckdb", "spark", or None to infer it from the source (a pandas frame then
            goes to DuckDB).
        id_column: a column of distinct non-negative integers naming each record's individual
            (a stable identity; ProPer's budgets are keyed by it). None: ids are ⊥ until
            :func:`proper_budgets` assigns them.

    Returns:
        The relation; nothing has been read yet (only the schema).
    """
    backend = backend or infer_backend(source) or "duckdb"
    if backend not in ("duckdb", "spark"):
        raise ValidationError(f"backend = {backend!r}: use 'duckdb' or 'spark' (or 'pandas' through "
                              "Queryable/ProPerTable)")
    table: ir.Table
    if isinstance(source, ir.Table):
        con = source._find_backend()
        want = "pyspark" if backend == "spark" else backend
        if con.name != want:
            raise ValidationError(f"the Ibis table lives in {con.name!r}, not {want!r}")
        engine = _engine_for(con, lambda: DuckEngine(con) if backend == "duckdb" else
                             _spark_engine_of_backend(con))
        table = source
    elif _is_spark_df(source):
        if backend != "spark":
            raise ValidationError("a Spark DataFrame needs backend='spark'")
        session = source.sparkSession
        engine = _engine_for(session, lambda: SparkEngine(session))
        assert isinstance(engine, SparkEngine)
        table = engine.register_dataframe(source)
    elif _is_paths(source):
        paths = [os.fspath(p) for p in (source if isinstance(source, (list, tuple)) else [source])]
        for p in paths:
            if not any(ch in p for ch in "*?[") and not os.path.exists(p):
                raise ValidationError(f"Parquet path {p!r} does not exist")
        if backend == "duckdb":
            engine = default_duckdb()
            table = engine.register_parquet(paths)
        else:
            session = _spark_session()
            engine = _engine_for(session, lambda: SparkEngine(session))
            assert isinstance(engine, SparkEngine)
            table = engine.register_dataframe(session.read.parquet(*paths))
    elif isinstance(source, (pd.DataFrame, pa.Table)):
        if backend == "duckdb":
            engine = default_duckdb()
        else:
            session = _spark_session()
            engine = _engine_for(session, lambda: SparkEngine(session))
        _check_columns(list(source.column_names if isinstance(source, pa.Table) else
                            source.columns))
        table = engine.register_frame(source)  # DuckDB scans the frame's arrays in place
    else:
        infer_backend(source)  # raises the helpful error
        raise AssertionError("unreachable")
    _check_columns(table.columns)
    if id_column is not None:
        if id_column not in table.columns:
            raise ValidationError(f"id_column {id_column!r} is not a column; columns are "
                                  f"{list(table.columns)}")
        dt = table[id_column].type()
        if not dt.is_integer():  # as the pandas backend: a float id 0.4 would be cast to 0
            raise ValidationError(f"id_column {id_column!r} has type {dt}: ids are "
                                  "non-negative integers")
        pid = table[id_column].try_cast("int64")
    else:
        pid = ibis.literal(-1, "int64")
    return IbisRelation(engine, table.mutate(**{PID: pid}), unique=True)


def _spark_engine_of_backend(con: Any) -> SparkEngine:
    return SparkEngine(con._session)
