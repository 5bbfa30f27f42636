"""IbisRelation: a lazy bag of records in DuckDB or Spark, transformed by row-wise Ibis expressions.

It implements :class:`dprivacy.tables.relations.protocol.Relation`. A relation is an Ibis table expression
over a registered source plus a hidden privacy-id column ``__dp_pid`` (int64, ``-1`` = ⊥) that
the library carries through every operation; a chain of transformations is one plan, and nothing
runs until an exact aggregate is asked for (after the query's charge).

Analyst code is data: every predicate, projection, flat-map, key and value is an Ibis expression
resolved on a public, unbound table with the relation's schema (never the data, never the id
column), checked against the row-wise allow-list of :mod:`dprivacy.tables.relations.engine.rowwise`, made
total, and only then bound to the real plan. ``select_many(k, f)`` explodes the array expression
``f`` in the engine, numbers each parent's outputs (the unnest offset) and keeps those numbered
< k; every output row gets its parent's id from the plan, never from user code.

Examples:
    >>> import pandas as pd
    >>> from ibis import _
    >>> from dprivacy.tables.relations.engine import relation_from
    >>> r = relation_from(pd.DataFrame({"age": [15, 30, 47]}), "duckdb")
    >>> r.where(_.age > 17).select({"band": _.age // 10}).count()
    2
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd
import pyarrow as pa
from ibis.common.deferred import Deferred

from dprivacy.errors import DPrivacyError, ValidationError
from dprivacy.tables.relations.engine import aggregates, setops
from dprivacy.tables.relations.engine.backends import Engine
from dprivacy.tables.relations.engine.ibis_plan import PID
from dprivacy.tables.relations.engine.rowwise import needs_guard, public_table, rebind, resolve_rowwise
from dprivacy.tables.relations.protocol import ElementCosts, Relation

__all__ = ["IbisRelation", "PID"]

_ARR, _POS = "__dp_arr", "__dp_pos"


class IbisRelation:
    """A :class:`~dprivacy.tables.relations.protocol.Relation` on an Ibis engine (DuckDB or Spark).

    Parameters:
        engine: the :class:`~dprivacy.tables.relations.engine.backends.Engine` that holds the data.
        table: an Ibis table expression on that engine whose columns are the public columns plus
            the int64 id column ``__dp_pid``.
        unique: whether no two records share an id >= 0 (a structural fact of the plan: true for
            a source and kept by where/select; lets ProPer skip the per-id GROUP BY).
    """

    def __init__(self, engine: Engine, table: ir.Table, *, unique: bool = False) -> None:
        if PID not in table.columns:
            raise ValidationError(f"an IbisRelation's table needs the id column {PID!r}")
        self.engine = engine
        self.backend: str = engine.name
        self.table = table
        self.unique = unique
        self._resolved: dict[int, tuple[Any, ir.Value]] = {}
        self.known_count: int | None = None  # set by a charge that counted the records already
        cols = [c for c in table.columns if c != PID]
        sch = table.schema()
        self._public = public_table(ibis.schema({c: sch[c] for c in cols}))

    # ------------------------------------------------------------------ plumbing
    def _derive(self, table: ir.Table, *, unique: bool | None = None) -> IbisRelation:
        return IbisRelation(self.engine, table, unique=self.unique if unique is None else unique)

    def expr(self, f: Any, what: str) -> ir.Value:
        """The analyst's row-wise ``f`` checked
        (:func:`~dprivacy.tables.relations.engine.rowwise.resolve_rowwise`) and bound to this
        relation's plan."""
        hit = self._resolved.get(id(f))
        if hit is not None and hit[0] is f:  # checked before (Relation.check): reuse exactly it
            v = hit[1]
        else:
            v = resolve_rowwise(f, self._public, what=what)
            self._resolved[id(f)] = (f, v)
        return rebind(v, self._public, self.table)

    def _pid(self) -> ir.IntegerColumn:
        return self.table[PID]

    def _same_engine(self, other: Relation, what: str) -> IbisRelation:
        if not isinstance(other, IbisRelation) or other.engine is not self.engine:
            raise ValidationError(f"{what}: both tables must live in the same engine (connection); "
                                  "open them with the same backend and source connection")
        return other

    @property
    def columns(self) -> list[str]:
        """The public column names (the hidden id column is not one of them)."""
        return list(self._public.columns)

    @property
    def schema(self) -> Any:
        """The public Ibis schema (column names and types)."""
        return self._public.schema()

    def public(self, df: pd.DataFrame) -> IbisRelation:
        """The public records ``df`` on the same engine, every id ⊥ (-1)."""
        if not isinstance(df, pd.DataFrame):
            raise ValidationError(f"a public table must be a pandas DataFrame, got {type(df).__name__}")
        if PID in df.columns:
            raise ValidationError(f"column name {PID!r} is reserved for the library")
        at = pa.Table.from_pandas(df, preserve_index=False)
        at = at.append_column(PID, pa.array(np.full(len(df), -1, dtype=np.int64)))
        return IbisRelation(self.engine, self.engine.register_frame(at, "public"), unique=True)

    # ------------------------------------------------------------------ row-wise
    def where(self, pred: Any) -> IbisRelation:
        """Records for which the row-wise boolean expression ``pred`` is true (NULL drops)."""
        v = self.expr(pred, "where")
        if not v.type().is_boolean():
            raise ValidationError(f"where: the predicate has type {v.type()}; need a boolean "
                                  "expression such as `_.age > 17`")
        return self._derive(self.table.filter(v))

    def select(self, exprs: Mapping[str, Any]) -> IbisRelation:
        """One record per record with the columns ``exprs`` (name -> row-wise expression)."""
        if not isinstance(exprs, Mapping) or not exprs:
            raise ValidationError("select: give at least one output column, e.g. "
                                  "select(band=_.age // 10)")
        out: dict[str, ir.Value] = {PID: self._pid()}
        for name, f in exprs.items():
            _check_name(name, "select")
            out[name] = self.expr(f, f"select({name}=...)").name(name)
        return self._derive(self.table.select(**out))

    def select_many(self, k: int, f: Any, columns: Sequence[str] | None) -> IbisRelation:
        """Flat-map: the array expression ``f`` exploded, at most ``k`` outputs per parent, each
        with its parent's id. ``columns``: name the fields of struct elements (or the positions
        of array elements); None gives one column ``value``."""
        k = _int_at_least(k, 1, "k")
        arr = self.expr(f, "select_many")
        if not arr.type().is_array():
            raise ValidationError(f"select_many: the expression has type {arr.type()}; need an "
                                  "array expression (e.g. `_.tags.split(',')` or "
                                  "`ibis.array([_.a, _.b])`)")
        flat = (self.table.select(self._pid(), **{_ARR: arr})
                .unnest(_ARR, offset=_POS).filter(lambda t: t[_POS] < k))
        elem = flat[_ARR]
        if columns is None:
            outs: dict[str, ir.Value] = {"value": elem}
        else:
            cols = [_check_name(c, "select_many") for c in columns]
            et = elem.type()
            if et.is_struct():
                outs = {c: (elem[c] if c in et.names else ibis.null()).name(c) for c in cols}
            elif et.is_array():
                outs = {c: elem[i].name(c) for i, c in enumerate(cols)}
            else:
                raise ValidationError(f"select_many: columns were named but the array's elements "
                                      f"have type {et}; need structs or arrays")
        return self._derive(flat.select(flat[PID], **outs), unique=self.unique and k == 1)

    def partition(self, keys: Sequence[Hashable], key: Any) -> list[Relation]:
        """One relation per public key: the records whose row-wise ``key`` equals it."""
        kv = self.expr(key, "partition")
        parts: list[Relation] = []
        for k in keys:
            k = k.item() if isinstance(k, np.generic) else k
            try:
                cond = kv.isnull() if k is None else (kv == ibis.literal(k))
            except DPrivacyError:
                raise
            except Exception as exc:
                raise ValidationError(f"partition: key {k!r} cannot be compared with the key "
                                      f"expression of type {kv.type()}") from exc
            parts.append(self._derive(self.table.filter(cond)))
        return parts

    def check_keys(self, keys: Sequence[Hashable], key: Any) -> None:
        """Raise now (before any charge) if the public ``keys`` cannot be compared with the
        row-wise ``key`` (a column or an expression)."""
        aggregates.in_keys_filter(self, keys, key)

    def in_keys(self, keys: Sequence[Hashable], key: Any) -> IbisRelation:
        """The records whose row-wise ``key`` is one of the public ``keys`` (ids kept)."""
        return self._derive(self.table.filter(aggregates.in_keys_filter(self, keys, key)))

    def concat(self, other: Relation) -> IbisRelation:
        """Multiset union ⊎ (same columns and types; ids kept)."""
        o = self._same_engine(other, "concat")
        if dict(o.schema.items()) != dict(self.schema.items()):
            raise ValidationError(f"concat: the tables have different columns or types "
                                  f"({dict(self.schema.items())} vs {dict(o.schema.items())})")
        right = o.table.select(*self.table.columns)
        return self._derive(self.table.union(right, distinct=False), unique=False)

    def product(self, public: Relation) -> IbisRelation:
        """Cross product with a public relation; outputs keep this record's id."""
        p = self._same_engine(public, "product").table.drop(PID)
        return self._derive(self.table.cross_join(p, rname="{name}_public"), unique=False)

    def join_public(self, public: Relation, on: Sequence[str],
                    right_on: Sequence[str]) -> IbisRelation:
        """Inner equi-join with a public relation; outputs keep this record's id."""
        p = self._same_engine(public, "join_public").table.drop(PID)
        preds = [self.table[a] == p[b] for a, b in zip(on, right_on, strict=True)]
        return self._derive(self.table.join(p, preds, rname="{name}_public"), unique=False)

    def exclude(self, public: Relation, on: Sequence[str]) -> IbisRelation:
        """Records whose ``on`` columns match no public row (σ_{∉T})."""
        p = self._same_engine(public, "exclude").table.drop(PID)
        return self._derive(self.table.anti_join(p, list(on)))

    # ------------------------------------------------------------------ not row-wise (PINQ)
    def group_by(self, keys: Sequence[str] | None, key_fn: Any,
                 aggs: Mapping[str, tuple[str, str]]) -> IbisRelation:
        """One record per group: keys, ``count`` and ``aggs``; ids ⊥."""
        return setops.group_by(self, keys, key_fn, aggs)

    def distinct(self) -> IbisRelation:
        """Distinct records; ids ⊥."""
        return setops.distinct(self)

    def union(self, other: Relation) -> IbisRelation:
        """Set union; ids ⊥."""
        return setops.setop(self, self._same_engine(other, "union"), "union")

    def intersect(self, other: Relation) -> IbisRelation:
        """Distinct records in both; ids ⊥."""
        return setops.setop(self, self._same_engine(other, "intersect"), "intersect")

    def except_(self, other: Relation) -> IbisRelation:
        """Distinct records of self absent from other; ids ⊥."""
        return setops.setop(self, self._same_engine(other, "except_"), "except")

    def join(self, other: Relation, bound_self: int, bound_other: int, on: Sequence[str],
             right_on: Sequence[str]) -> IbisRelation:
        """Bounded equi-join (each side keeps ≤ bound records per key); ids ⊥."""
        return setops.bounded_join(self, self._same_engine(other, "join"), bound_self,
                                   bound_other, on, right_on)

    def take(self, n: int) -> IbisRelation:
        """The first ``n`` records in the order of their values (a total order on records, so
        adding one record changes the result by at most two)."""
        return setops.take(self, _int_at_least(n, 0, "n"))

    def skip(self, n: int) -> IbisRelation:
        """All but the first ``n`` records in the order of their values."""
        return setops.skip(self, _int_at_least(n, 0, "n"))

    def sample(self, kind: str, param: float, secret: int) -> tuple[IbisRelation, IbisRelation]:
        """A random sample and its complement, coins derived from ``secret`` (see
        :func:`.setops.sample`)."""
        return setops.sample(self, kind, param, secret)

    # ------------------------------------------------------------------ pre-charge checks
    def check(self, f: Any) -> None:
        """Refuse analyst code that is not a row-wise expression on this table's columns (raise
        :class:`~dprivacy.errors.ValidationError`, message from the expression only), and let
        the engine compile and bind it, all before any charge. A two-argument function is an
        exponential-mechanism score ``(t, c)``: it is checked per candidate by
        :meth:`check_score`."""
        if callable(f) and not isinstance(f, (Deferred, ir.Value)) and _n_params(f) == 2:
            return
        v = self.expr(f, "expression")
        if needs_guard(v.op()):  # comparisons of columns and literals need no engine binding
            self.engine.bind(self.table.select(__dp_check=v))

    def check_value(self, value: Any) -> None:
        """Raise now (before any charge) if ``value`` is not a usable row-wise value spec."""
        v = aggregates.value_expr(self, value, 0.0, 1.0)
        self.engine.bind(self.table.select(__dp_check=v))

    def check_score(self, score: Any, candidates: Sequence[Any]) -> None:
        """Raise now (before any charge) if ``score`` is not usable with ``candidates``."""
        exprs = aggregates.score_exprs(self, score, candidates)
        if exprs:
            self.engine.bind(self.table.select(**{f"__dp_s{i}": e for i, e in enumerate(exprs)}))

    # ------------------------------------------------------------------ exact aggregates
    def count(self) -> int:
        """The number of records (exact). Call only after the charge."""
        if self.known_count is not None:
            return self.known_count
        return aggregates.count(self)

    def clamped_sum(self, value: Any, lo: float, hi: float) -> float:
        """Σ clamp(v, lo, hi) (exact; NULL/NaN/non-numbers -> midpoint). After the charge."""
        return aggregates.clamped_sum(self, value, lo, hi)

    def clamped_values(self, value: Any, lo: float, hi: float) -> np.ndarray:
        """The clamped values as a float array. After the charge."""
        return aggregates.clamped_values(self, value, lo, hi)

    def rank_counts(self, value: Any, lo: float, hi: float, candidates: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, int]:
        from dprivacy.tables.relations.engine.ranks import rank_counts

        return rank_counts(self, value, lo, hi, candidates)

    def score_sums(self, score: Any, candidates: Sequence[Any]) -> np.ndarray:
        """Σ_records clamp(score(t, c), 0, 1) per candidate c. After the charge."""
        return aggregates.score_sums(self, score, candidates)

    def group_counts(self, columns: Sequence[str]) -> pd.DataFrame:
        """Exact GROUP BY ``columns`` with ``count``. After the charge."""
        return aggregates.group_counts(self, columns)

    def key_aggregates(self, keys: Sequence[Hashable], key: Any,
                       values: Sequence[tuple[Any, float, float, float]]
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Per public key: the count and Σ (clamp(v, lo, hi) − shift) of each value, in one
        GROUP BY. After the charge."""
        return aggregates.key_aggregates(self, keys, key, values)

    # ------------------------------------------------------------------ ProPer (driver only)
    def id_multiplicities(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, counts) of the ids >= 0 present."""
        return aggregates.id_multiplicities(self)

    def id_costs(self, costs: ElementCosts) -> tuple[np.ndarray, np.ndarray]:
        """(ids, total element cost) of the ids >= 0 present."""
        return aggregates.id_costs(self, costs)

    def keep_ids(self, ids: np.ndarray) -> IbisRelation:
        """Records whose id is in ``ids``, plus every ⊥ record."""
        keep = self.engine.register_frame(
            pa.table({"id": pa.array(np.asarray(ids, dtype=np.int64))}), "ids")
        pid = self._pid()
        return self._derive(self.table.filter((pid == -1) | pid.isin(keep["id"])))

    def keep_ids_later(self, ids: Callable[[], np.ndarray]) -> IbisRelation:
        """:meth:`keep_ids` with the ids computed (and registered) only when a plan first needs
        them: a count whose answer the charge already knows (``known_count``) never does."""
        return _KeptLater(self, ids)

    def drop_ids(self, ids: np.ndarray) -> IbisRelation:
        """Records whose id is NOT in ``ids`` (the sources that could not pay); ⊥ kept."""
        drop = self.engine.register_frame(
            pa.table({"id": pa.array(np.asarray(ids, dtype=np.int64))}), "ids")
        return self._derive(self.table.filter(~self._pid().isin(drop["id"])))

    def with_table(self, table: ir.Table, *, unique: bool | None = None) -> IbisRelation:
        """The same relation type on another plan of this engine (library use)."""
        return self._derive(table, unique=unique)

    def __repr__(self) -> str:
        return f"IbisRelation(backend={self.backend!r}, columns={self.columns})"


class _KeptLater(IbisRelation):
    """``base.keep_ids(ids())``, built on first use of :attr:`table` (see
    :meth:`IbisRelation.keep_ids_later`)."""

    def __init__(self, base: IbisRelation, ids: Callable[[], np.ndarray]) -> None:
        self.engine, self.backend, self.unique = base.engine, base.backend, base.unique
        self._resolved = {}
        self.known_count = None
        self._public = base._public
        self._base: IbisRelation | None = base
        self._ids: Callable[[], np.ndarray] | None = ids
        self._table: ir.Table | None = None
        self._lock = threading.Lock()

    @property
    def table(self) -> ir.Table:
        with self._lock:
            if self._table is None:
                assert self._base is not None and self._ids is not None
                self._table = self._base.keep_ids(self._ids()).table
                self._base = self._ids = None  # the mask and the plan are no longer needed
            return self._table

    @table.setter
    def table(self, value: ir.Table) -> None:
        with self._lock:
            self._table, self._base, self._ids = value, None, None


def _n_params(f: Any) -> int:
    try:
        return len(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        return 1


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValidationError(f"{what}: column names are non-empty strings, got {name!r}")
    if name.startswith("__dp_"):
        raise ValidationError(f"{what}: column names starting with '__dp_' are reserved for the "
                              "library")
    return name


def _int_at_least(x: Any, lo: int, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < lo:
        raise ValidationError(f"{what} = {x!r}: need an integer >= {lo}")
    return int(x)
