"""Exact aggregates of an :class:`~dprivacy.tables.relations.engine.relation.IbisRelation`, computed in the
engine and returned to the driver as Python numbers (the driver adds the noise).

Every aggregate is total: values are ``TRY_CAST`` to float64 (a non-number, NULL or NaN counts as
the midpoint (lo + hi)/2, or as 0 for exponential-mechanism scores), clamped to [lo, hi] (±inf
too), an empty relation gives 0, and a sum saturates at ±1e308. So an aggregate raises only for
reasons that depend on the expression, never on the records; the ``check_*`` methods of the
relation surface those before the charge.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd
import pyarrow as pa

from dprivacy.errors import ValidationError
from dprivacy.tables.relations.engine.backends import as_float_array
from dprivacy.tables.relations.engine.ibis_plan import PID, IbisPlan
from dprivacy.tables.relations.protocol import ElementCosts

__all__ = ["count", "clamped_sum", "clamped_values", "score_sums", "group_counts",
           "in_keys_filter", "key_aggregates",
           "id_multiplicities", "id_costs", "value_expr", "score_exprs"]

_SAT = 1e308


def _as_float(v: ir.Value) -> ir.FloatingValue | None:
    t = v.type()
    if t.is_numeric() or t.is_boolean() or t.is_string():
        return v.try_cast("float64")
    return None


def _clamp(v: ir.Value, lo: float, hi: float, default: float) -> ir.FloatingValue:
    d = _as_float(v)
    if d is None:  # a type with no numeric reading: every record counts as the default
        return ibis.literal(float(default), "float64")
    return ibis.cases((d.isnull() | d.isnan(), float(default)), else_=d.clip(float(lo), float(hi)))


def value_expr(rel: IbisPlan, value: Any, lo: float, hi: float) -> ir.FloatingValue:
    """The clamped float64 value of each record (NULL, NaN, non-numbers -> midpoint)."""
    if value is None:
        cols = rel.columns
        if len(cols) != 1:
            raise ValidationError(f"the table has {len(cols)} columns: pass the value (a column "
                                  "name or an expression)")
        value = cols[0]
    return _clamp(rel.expr(value, "value"), lo, hi, (float(lo) + float(hi)) / 2)


def count(rel: IbisPlan) -> int:
    """|rel| (exact)."""
    n = rel.engine.scalar(rel.table.count())
    return int(n or 0)


def clamped_sum(rel: IbisPlan, value: Any, lo: float, hi: float) -> float:
    """Σ clamp(v, lo, hi), saturated at ±1e308; 0 for an empty relation."""
    v = value_expr(rel, value, lo, hi)
    s = rel.engine.scalar(rel.table.select(v=v).v.sum())
    if s is None or not np.isfinite(float(s)):
        return 0.0 if s is None or np.isnan(float(s)) else float(np.clip(float(s), -_SAT, _SAT))
    return float(np.clip(float(s), -_SAT, _SAT))


def clamped_values(rel: IbisPlan, value: Any, lo: float, hi: float) -> np.ndarray:
    """The clamped values (any order) as a float array."""
    v = value_expr(rel, value, lo, hi)
    return as_float_array(rel.engine.arrow(rel.table.select(v=v)))


def score_exprs(rel: IbisPlan, score: Any, candidates: Sequence[Any]) -> list[ir.Value]:
    """Per-candidate clamped score expressions ``clamp(score(t, c), 0, 1)`` (non-number -> 0)."""
    if not callable(score):
        raise ValidationError("score must be a function (t, c) -> row-wise expression, e.g. "
                              "`lambda t, c: (t.city == c).cast('float64')`")
    out = []
    for i, c in enumerate(candidates):
        e = rel.expr(lambda t, c=c: score(t, c), f"score(candidate {i})")
        out.append(_clamp(e, 0.0, 1.0, 0.0))
    return out


def score_sums(rel: IbisPlan, score: Any, candidates: Sequence[Any]) -> np.ndarray:
    """For each candidate, Σ_records clamp(score(t, c), 0, 1)."""
    exprs = score_exprs(rel, score, candidates)
    if not exprs:
        return np.zeros(0)
    agg = rel.table.aggregate(**{f"s{i}": e.sum() for i, e in enumerate(exprs)})
    row = rel.engine.arrow(agg).to_pylist()
    vals = row[0] if row else {}
    return np.array([float(vals.get(f"s{i}") or 0.0) for i in range(len(exprs))])


def group_counts(rel: IbisPlan, columns: Sequence[str]) -> pd.DataFrame:
    """Exact GROUP BY ``columns`` with a ``count`` column."""
    cols = list(columns)
    g = rel.table.group_by(cols).aggregate(count=lambda t: t.count())
    at = rel.engine.arrow(g)
    if all(_plain_number(at.column(c)) for c in cols):
        # numeric keys without NULLs: the numpy columns are exactly what to_pandas() gives,
        # without its per-call overhead (milliseconds, as long as a 1000-group GROUP BY)
        out = pd.DataFrame({c: at.column(c).to_numpy() for c in cols})
        out["count"] = np.asarray(at.column("count").to_numpy(zero_copy_only=False), np.int64)
        return out
    out = at.to_pandas()
    out["count"] = out["count"].astype(np.int64)
    return out[[*cols, "count"]]


_KEY = "__dp_key"


def in_keys_filter(rel: IbisPlan, keys: Sequence[Hashable], key: Any) -> ir.BooleanValue:
    """The row-wise condition "the key of the record is one of the public ``keys``" (a NULL
    key matches the public key None), refused before any charge when a key cannot be compared
    with the key expression."""
    kv = rel.expr(key, "group key")
    plain = [k.item() if isinstance(k, np.generic) else k for k in keys if k is not None]
    for k in plain:
        if not isinstance(k, (bool, int, float, str)):
            raise ValidationError(f"group key {k!r}: on the engines keys are numbers, strings, "
                                  "booleans or None")
        try:
            kv == ibis.literal(k)  # noqa: B015 - building the comparison checks the types
        except Exception:  # noqa: BLE001 - the key's type, not the data
            raise ValidationError(f"group key {k!r} cannot be compared with the key "
                                  f"expression of type {kv.type()}") from None
    cond: ir.BooleanValue = kv.isin(plain) if plain else ibis.literal(False)
    if len(plain) < len(keys):
        cond = cond | kv.isnull()
    return cond


def key_aggregates(rel: IbisPlan, keys: Sequence[Hashable], key: Any,
                   values: Sequence[tuple[Any, float, float, float]]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per public key (in order): the record count and, per value (f, lo, hi, shift),
    Σ (clamp(f, lo, hi) − shift), saturated at ±1e308; one GROUP BY over the records whose key
    is listed. Keys with no record get 0."""
    t = rel.table.filter(in_keys_filter(rel, keys, key))
    cols = {_KEY: rel.expr(key, "group key")}
    for i, (f, lo, hi, shift) in enumerate(values):
        cols[f"v{i}"] = value_expr(rel, f, lo, hi) - float(shift)
    sel = t.select(**cols)
    aggs = {"n": sel.count(), **{f"s{i}": sel[f"v{i}"].sum() for i in range(len(values))}}
    rows = rel.engine.arrow(sel.group_by(_KEY).aggregate(**aggs)).to_pylist()
    where = {(None if k is None else (k.item() if isinstance(k, np.generic) else k)): i
             for i, k in enumerate(keys)}
    counts = np.zeros(len(keys), np.int64)
    sums = np.zeros((len(values), len(keys)))
    for r in rows:
        at = where.get(r[_KEY])
        if at is None:  # a value equal in the engine but not in Python: not a listed key
            continue
        i = at
        counts[i] = int(r["n"] or 0)
        for j in range(len(values)):
            s = r[f"s{j}"]
            sums[j, i] = 0.0 if s is None or np.isnan(float(s)) else float(
                np.clip(float(s), -_SAT, _SAT))
    return counts, sums


def _plain_number(col: pa.ChunkedArray) -> bool:
    t = col.type
    return (pa.types.is_integer(t) or pa.types.is_floating(t)) and col.null_count == 0


def id_multiplicities(rel: IbisPlan) -> tuple[np.ndarray, np.ndarray]:
    """(ids, record counts) for the ids >= 0 present."""
    t = rel.table
    g = t.filter(t[PID] >= 0).group_by(PID).aggregate(n=lambda x: x.count())
    at = rel.engine.arrow(g)
    return _int_col(at, PID), _int_col(at, "n")


def id_costs(rel: IbisPlan, costs: ElementCosts) -> tuple[np.ndarray, np.ndarray]:
    """(ids, Σ element cost of their records) for the ids >= 0 present."""
    t = rel.table
    ct = rel.public(costs.table[[*costs.columns, "cost"]]).table.drop(PID)
    j = t.filter(t[PID] >= 0).join(ct, list(costs.columns))
    g = j.group_by(PID).aggregate(c=lambda x: x.cost.sum())
    at = rel.engine.arrow(g)
    return _int_col(at, PID), np.asarray(at.column("c").to_numpy(zero_copy_only=False), float)


def _int_col(at: pa.Table, name: str) -> np.ndarray:
    if at.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(at.column(name).to_numpy(zero_copy_only=False), dtype=np.int64)
