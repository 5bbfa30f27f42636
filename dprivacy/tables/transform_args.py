"""Checks of transformation arguments against the public schema, made before anything runs.

Every check looks only at the arguments and the column names (public), never at the records, so
its outcome and message are the same on neighbouring tables. Analyst code is checked by the
relation's ``check`` (a callable on pandas, a row-wise expression on the engines).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from dprivacy.errors import ValidationError
from dprivacy.tables.relations.rowwise import clean

__all__ = ["select_exprs", "select_many_columns", "column_list", "group_aggs",
           "partition_keys", "same_columns", "GROUP_AGGS"]

GROUP_AGGS = ("sum", "mean", "min", "max")


def _name(n: Any, what: str) -> str:
    if type(n) is not str or not n:
        raise ValidationError(f"{what} {n!r}: column names are non-empty strings")
    return n


def select_exprs(f: Any, named: Mapping[str, Any], check: Callable[[Any], None]
                 ) -> dict[str, Any]:
    """``select(f)`` -> {"value": f}; ``select(a=f, b=g)`` -> {"a": f, "b": g}."""
    if f is not None and named:
        raise ValidationError("select takes one function (column 'value') or named functions "
                              "(select(a=f, b=g)), not both")
    exprs = {"value": f} if f is not None else dict(named)
    if not exprs:
        raise ValidationError("select needs a function: select(f) or select(name=f, ...)")
    for name, g in exprs.items():
        _name(name, "select column")
        check(g)
    return exprs


def select_many_columns(columns: Sequence[str] | None) -> list[str] | None:
    """The output columns of a flat-map (None: one column ``value``)."""
    if columns is None:
        return None
    if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
        raise ValidationError("columns must be a non-empty list of column names (or None)")
    cols = [_name(c, "select_many column") for c in columns]
    if len(set(cols)) != len(cols):
        raise ValidationError(f"columns {cols} repeat a name")
    return cols


def column_list(cols: Any, columns: Sequence[Hashable], what: str) -> list[Any]:
    """``cols`` (a name or a list of names) checked against the table's columns."""
    names = [cols] if isinstance(cols, str) else list(cols) if isinstance(cols, (list, tuple)) \
        else None
    if not names:
        raise ValidationError(f"{what} must be a column name or a non-empty list of names")
    missing = [c for c in names if c not in columns]
    if missing:
        raise ValidationError(f"{what}: {missing} are not columns; columns are {list(columns)}")
    return names


def group_aggs(aggs: Mapping[str, Any], columns: Sequence[Hashable]) -> dict[str, tuple]:
    """Named group aggregations ``name=(column, fn)`` with fn in sum/mean/min/max."""
    out = {}
    for name, spec in aggs.items():
        if not (isinstance(spec, tuple) and len(spec) == 2 and spec[1] in GROUP_AGGS):
            raise ValidationError(
                f"aggregation {name}={spec!r}: expected (column, one of {GROUP_AGGS})")
        if name == "count":
            raise ValidationError("'count' is always computed: name the aggregation otherwise")
        column_list(spec[0], columns, f"aggregation {name}")
        out[name] = (spec[0], spec[1])
    return out


def partition_keys(keys: Iterable[Hashable], f: Any, columns: Sequence[Hashable],
                   check: Callable[[Any], None]) -> list[Hashable]:
    """The explicit, distinct, hashable keys of a partition; ``f`` a column or analyst code."""
    if isinstance(keys, (str, bytes)):
        raise ValidationError("keys must be a list of keys, not a string")
    klist = []
    for k in keys:
        c = clean(k)
        if (c is None) != (k is None):
            raise ValidationError(
                f"partition key {k!r}: keys are plain values (None, bool, int, float, str, bytes, "
                "dates and times, Decimal, or tuples of those)")
        klist.append(c)
    try:
        distinct = len(set(klist)) == len(klist)
    except TypeError as exc:
        raise ValidationError("partition keys must be hashable") from exc
    if not distinct:
        raise ValidationError("partition keys must be distinct")
    if isinstance(f, str):
        column_list(f, columns, "partition key")
    else:
        check(f)
    return klist


def same_columns(mine: Sequence[Hashable], theirs: Sequence[Hashable], op: str) -> None:
    """Set operations and concat need the same columns in the same order."""
    if list(mine) != list(theirs):
        raise ValidationError(
            f"{op}: both tables need the same columns; got {list(mine)} and {list(theirs)}")
