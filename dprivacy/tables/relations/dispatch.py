"""Which engine holds a table's records: pandas in memory, or DuckDB / Spark through Ibis.

``backend=None`` picks pandas for a pandas DataFrame and the engine package
(:mod:`dprivacy.tables.relations.engine`) for everything else (a Parquet path, a DuckDB relation or table,
an Ibis table, a Spark DataFrame); ``backend="duckdb"`` on a pandas frame registers it zero-copy
with DuckDB, so the analyst's code must then be row-wise Ibis expressions.

A PINQ table on a pandas frame opened with ``backend=None`` runs in DuckDB as soon as the
analyst's code is an Ibis expression (:func:`duckdb_relation`: the frame is registered without
a copy, once per frame); per-record Python callables keep the pandas path, which calls the
function once per record (about a microsecond each, so ~100-1000x a vectorised scan).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.errors import ValidationError
from dprivacy.tables.relations.pandas_relation import PandasRelation
from dprivacy.tables.relations.pandas_values import as_frame
from dprivacy.tables.relations.protocol import Relation

__all__ = ["BACKENDS", "check_backend", "relation_for", "is_pandas", "is_expression",
           "duckdb_relation"]

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


def is_expression(f: Any) -> bool:
    """Whether ``f`` is an Ibis expression (``_.age > 17`` or a bound column expression), the
    analyst code of the engine backends (judged from its type, never by calling it)."""
    return type(f).__module__.startswith("ibis.")


_DUCK: dict[int, tuple[Any, tuple, Relation]] = {}
_DUCK_LOCK = threading.Lock()


def duckdb_relation(frame: pd.DataFrame) -> Relation:
    """The DuckDB relation of a pandas frame (registered zero-copy; reused while the frame
    object lives with the same columns, dtypes and length)."""
    from dprivacy.tables.relations import engine

    sig = (tuple(map(str, frame.columns)), tuple(map(str, frame.dtypes)), len(frame))
    key = id(frame)
    with _DUCK_LOCK:
        hit = _DUCK.get(key)
        if hit is not None and hit[0]() is frame and hit[1] == sig:
            return hit[2]
    rel = engine.relation_from(frame, "duckdb")

    def forget(_ref: Any, k: int = key, cache: dict = _DUCK) -> None:
        cache.pop(k, None)  # the dict itself, not the module global (gone at shutdown)

    with _DUCK_LOCK:
        _DUCK[key] = (weakref.ref(frame, forget), sig, rel)
    return rel
