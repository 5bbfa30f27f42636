"""PINQ's non-row-wise transformations on an :class:`~.relation.IbisRelation` (ids become ⊥).

Grouping, set operations, the bounded join, Take/Skip and sampling are computed by the library
(never by analyst code), so they may look at several records; PINQ accounts for them with their
stability (group_by 2, join 2·bound, take/skip 2, ...). ProPer refuses all of them.

*Order.* SQL engines have no row order, so "the first n records" (take, skip, the join's bound)
is defined by a total order on the records' values (every public column, ascending, NULLs
first): it depends only on the multiset of records, so adding one record changes take(n) by at
most two records, as PINQ's stability 2 requires, and re-running a plan gives the same records.

*Sampling.* Each record gets a uniform number u in [0, 1) from a keyed hash of its position and
the library's 128-bit secret; the numbers are computed once and materialised (a temporary
table), so a sample and its complement are exact complements however often they are re-run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import ibis
import ibis.expr.types as ir

from dprivacy.errors import UnsupportedOperationError, ValidationError
from dprivacy.tables.relations.engine.backends import DuckEngine, SparkEngine, fresh_name
from dprivacy.tables.relations.engine.ibis_plan import PID, IbisPlan

__all__ = ["group_by", "distinct", "setop", "bounded_join", "take", "skip", "sample"]

_AGG = ("sum", "mean", "min", "max")

R = TypeVar("R", bound=IbisPlan)


def _bottom(t: ir.Table) -> ir.Table:
    """``t`` with a ⊥ id column appended."""
    return t.mutate(**{PID: ibis.literal(-1, "int64")})


def _public_cols(rel: R) -> ir.Table:
    return rel.table.drop(PID)


def group_by(rel: R, keys: Sequence[str] | None, key_fn: Any,
             aggs: Mapping[str, tuple[str, str]]) -> R:
    """One record per group: key column(s) (``key`` for ``key_fn``), ``count``, ``aggs``."""
    base = _public_cols(rel)
    if key_fn is not None:
        base = rel.table.mutate(key=rel.expr(key_fn, "group_by key")).drop(PID)
        gkeys = ["key"]
    else:
        gkeys = list(keys or [])
    metrics: dict[str, Any] = {"count": base.count()}
    for name, spec in aggs.items():
        col, fn = spec
        if fn not in _AGG:
            raise ValidationError(f"group_by: aggregation {fn!r} for {name!r}: use one of {_AGG}")
        v = base[col]
        t = v.type()
        if not (t.is_numeric() or t.is_boolean() or t.is_string()):
            raise ValidationError(f"group_by: column {col!r} has type {t}; aggregations need "
                                  "numbers")
        metrics[name] = getattr(v.try_cast("float64"), fn)()
    out = base.group_by(gkeys).aggregate(**metrics) if gkeys else base.aggregate(**metrics)
    return rel.with_table(_bottom(out), unique=False)


def distinct(rel: R) -> R:
    """Distinct records, ids ⊥."""
    return rel.with_table(_bottom(_public_cols(rel).distinct()), unique=False)


def setop(rel: R, other: R, kind: str) -> R:
    """Set union / intersection / difference of the records (distinct), ids ⊥."""
    if dict(rel.schema.items()) != dict(other.schema.items()):
        raise ValidationError(f"{kind}: the tables have different columns or types")
    a = _public_cols(rel)
    b = _public_cols(other).select(*a.columns)
    if kind == "union":
        out = a.union(b, distinct=True)
    elif kind == "intersect":
        out = a.intersect(b, distinct=True)
    else:
        out = a.difference(b, distinct=True)
    return rel.with_table(_bottom(out), unique=False)


def _first_per_key(t: ir.Table, keys: list[str], bound: int) -> ir.Table:
    rn = ibis.row_number().over(group_by=keys, order_by=list(t.columns))
    return t.mutate(__dp_rn=rn).filter(lambda x: x.__dp_rn < bound).drop("__dp_rn")


def bounded_join(rel: R, other: R, bound_self: int, bound_other: int,
                 on: Sequence[str], right_on: Sequence[str]) -> R:
    """Each side keeps its first ``bound`` records per key (value order), then an inner join."""
    left = _first_per_key(_public_cols(rel), list(on), int(bound_self))
    right = _first_per_key(_public_cols(other), list(right_on), int(bound_other)).view()
    preds = [left[a] == right[b] for a, b in zip(on, right_on, strict=True)]
    out = left.join(right, preds, rname="{name}_right")
    return rel.with_table(_bottom(out), unique=False)


def _ordered(rel: R) -> ir.Table:
    cols = [c for c in rel.table.columns if c != PID]
    return rel.table.order_by([ibis.asc(c, nulls_first=True) for c in cols])


def take(rel: R, n: int) -> R:
    """The first ``n`` records in value order (ids kept)."""
    return rel.with_table(_ordered(rel).limit(n))


def skip(rel: R, n: int) -> R:
    """All but the first ``n`` records in value order (ids kept)."""
    return rel.with_table(_ordered(rel).limit(None, offset=n))


def _materialise_uniform(rel: R, secret: int) -> ir.Table:
    """``rel`` with a column ``__dp_u`` ~ U[0, 1) from a keyed hash, stored once (temp table)."""
    eng = rel.engine
    s1, s2 = int(secret) & ((1 << 62) - 1), (int(secret) >> 62) & ((1 << 62) - 1)
    inner = eng.sql(rel.table)
    name = fresh_name("sample")
    if isinstance(eng, DuckEngine):
        eng.execute(
            f'CREATE TEMP TABLE "{name}" AS SELECT *, '
            f"(hash(row_number() OVER (), {s1}::BIGINT, {s2}::BIGINT) >> 11)::DOUBLE "
            f"/ 9007199254740992.0 AS __dp_u FROM ({inner})"
        )
        return eng.ibis.table(name)
    if not isinstance(eng, SparkEngine):
        raise UnsupportedOperationError(
            f"sampling is implemented on DuckDB and Spark, not on a {type(eng).__name__}")
    sdf = eng.session.sql(
        f"SELECT *, CAST(pmod(xxhash64(monotonically_increasing_id(), {s1}L, {s2}L), "
        f"9007199254740992) AS DOUBLE) / 9007199254740992.0 AS __dp_u FROM ({inner})"
    ).localCheckpoint(eager=True)
    return eng.register_dataframe(sdf, "sample")


def sample(rel: R, kind: str, param: float,
           secret: int) -> tuple[R, R]:
    """(sample, complement) for ``kind`` in bernoulli / fraction / fixed (see module doc)."""
    if kind == "replacement":
        raise UnsupportedOperationError(
            "sampling with replacement is not available on the DuckDB and Spark backends; use "
            "kind 'fixed', 'fraction' or 'bernoulli', or the pandas backend")
    if kind not in ("bernoulli", "fraction", "fixed"):
        raise ValidationError(f"sample kind {kind!r}: use 'fixed', 'fraction' or 'bernoulli'")
    t = _materialise_uniform(rel, secret)
    if kind == "bernoulli":
        inside = t.__dp_u < float(param)
    else:
        rank = ibis.row_number().over(order_by=t.__dp_u)
        t = t.mutate(__dp_rank=rank)
        if kind == "fixed":
            inside = t.__dp_rank < int(param)
        else:
            n_all = t.count().as_scalar()
            inside = t.__dp_rank < (n_all * float(param)).floor()
    keep = [c for c in rel.table.columns]
    return (rel.with_table(t.filter(inside).select(*keep), unique=rel.unique),
            rel.with_table(t.filter(~inside).select(*keep), unique=rel.unique))
