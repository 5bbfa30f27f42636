"""Which engine holds a table's records: pandas in memory, or DuckDB / Spark through Ibis.

``backend=None`` picks pandas for a pandas DataFrame and the engine package
(:mod:`dprivacy.tables.relations.engine`) for everything else (a Parquet path, a DuckDB relation or table,
an Ibis table, a Spark DataFrame); ``backend="duckdb"`` on a pandas frame registers it zero-copy
with DuckDB, so the analyst's code must then be row-wise Ibis expressions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dprivacy.errors import ValidationError
from dprivacy.tables.relations.pandas_relation import PandasRelation, as_frame
from dprivacy.tables.relations.protocol import Relation

__all__ = ["BACKENDS", "check_backend", "relation_for", "is_pandas"]

BACKENDS = ("pandas", "duckdb", "spark")


def check_backend(data: Any, backend: str | None) -> str:
    """The backend name for ``data`` (validated; nothing is read)."""
    if backend is not None and backend not in BACKENDS:
        raise ValidationError(f"backend = {backend!r}: expected one of {BACKENDS} or None")
    if backend is None:
        return "pandas" if isinstance(data, pd.DataFrame) else "engine"
    if backend == "pandas" and not isinstance(data, pd.DataFrame):
        raise ValidationError(
            f"backend='pandas' needs a pandas DataFrame, got a {type(data).__name__}; use "
            "backend='duckdb' (Parquet, DuckDB, Ibis) or 'spark' (Spark DataFrame)")
    return backend


def is_pandas(rel: Relation) -> bool:
    """True for the in-memory pandas relation."""
    return isinstance(rel, PandasRelation)


def relation_for(data: Any, backend: str | None, *, ids: np.ndarray | None = None,
                 id_column: str | None = None) -> Relation:
    """A relation holding ``data`` on ``backend`` (PINQ tables: every id ⊥ unless ``ids``)."""
    name = check_backend(data, backend)
    if name == "pandas":
        return PandasRelation(as_frame(data), ids)
    from dprivacy.tables.relations import engine  # lazy: DuckDB / Ibis / PySpark only when used

    return engine.relation_from(data, None if name == "engine" else name, id_column=id_column)
