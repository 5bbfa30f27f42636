"""The pandas implementation of :class:`~dprivacy.tables.relations.protocol.Relation` (in memory, lazy).

Records are the rows of a DataFrame with a RangeIndex; privacy ids are a parallel int64 array
(``None`` when every id is ⊥, e.g. a PINQ table, so a PINQ table pays nothing for them). Analyst
code is a per-record Python callable applied to one read-only record at a time
(:mod:`dprivacy.tables.relations.rowwise`), so the row-wise methods are row-wise by construction. Every
method is total: pandas operations that could fail on particular values (mixed key types in a
merge, unsortable group keys, unhashable objects) are run on object-typed keys or fall back to a
form that cannot fail, so no exception depends on the records.

**Lazy.** Every transformation (``where``, ``select``, ..., ``join``, ``sample``) only records
what to do; the records, and the analyst's per-record functions, are computed when an
aggregation first reads them, i.e. after the query's charge (PINQ: the agents; ProPer: while the
Query rule computes who pays). So ``t.where(f)`` returns at once whatever ``f`` does on the
records, and a function that is slow or odd on one record costs its query's budget to run. The
result is computed once and kept (a second query on the same table does not run ``f`` again).
The column names of a pending relation are those of the same transformation applied to empty
inputs (no record, so no analyst call): the schema is public.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

import numpy as np
import pandas as pd

from dprivacy.errors import ValidationError
from dprivacy.tables.relations import rowwise
from dprivacy.tables.relations.pandas_values import _hashable, _numeric, _safe, as_frame
from dprivacy.tables.relations.protocol import ElementCosts, Relation, SampleKind, ValueSpec
from dprivacy.tables.relations.ranks import counts_from_sorted

__all__ = ["PandasRelation", "as_frame"]

_SATURATE = 1e308
_M = TypeVar("_M", bound=Callable[..., Any])


def _deferred(method: _M) -> _M:
    """Make a transformation lazy: it returns a pending relation that runs ``method`` on its
    (forced) inputs when the records are first read."""
    @functools.wraps(method)
    def lazy(self: PandasRelation, *args: Any) -> PandasRelation:
        for a in args:  # a table of another backend is refused now, not when read
            if hasattr(a, "backend") and not isinstance(a, PandasRelation):
                PandasRelation._same(a, method.__name__)
        return PandasRelation._pending(method, self, args)

    return lazy  # type: ignore[return-value]


class PandasRelation:
    """Records in a pandas DataFrame (RangeIndex) plus their privacy ids (``None`` = all ⊥);
    computed lazily by the transformations (see the module doc)."""

    backend = "pandas"
    __slots__ = ("_df", "_ids", "_op", "_schema_rel")

    def __init__(self, df: pd.DataFrame, ids: np.ndarray | None = None) -> None:
        self._df: pd.DataFrame | None = as_frame(df)
        self._ids = ids
        self._op: tuple[Callable[..., Any], PandasRelation, tuple] | None = None
        self._schema_rel: PandasRelation | None = None

    @classmethod
    def _pending(cls, method: Callable[..., Any], src: PandasRelation, args: tuple
                 ) -> PandasRelation:
        r = cls.__new__(cls)
        r._df, r._ids, r._op, r._schema_rel = None, None, (method, src, args), None
        return r

    def _force(self) -> None:
        op = self._op
        if op is None:
            return
        method, src, args = op
        out = method(src, *args)
        out._force()
        self._df, self._ids, self._op = out._df, out._ids, None

    @property
    def df(self) -> pd.DataFrame:
        """The records (computes a pending relation: call only after the charge)."""
        self._force()
        assert self._df is not None
        return self._df

    @property
    def ids(self) -> np.ndarray | None:
        """The privacy ids (``None``: all ⊥); computes a pending relation."""
        self._force()
        return self._ids

    def _schema(self) -> PandasRelation:
        """An empty relation with this relation's columns (no analyst code runs: no records)."""
        if self._schema_rel is None:
            if self._op is None:
                assert self._df is not None
                ids = None if self._ids is None else self._ids[:0]
                self._schema_rel = PandasRelation(self._df.iloc[0:0], ids)
            else:
                method, src, args = self._op
                empty = tuple(a._schema() if isinstance(a, PandasRelation) else a for a in args)
                out = method(src._schema(), *empty)
                out._force()
                self._schema_rel = out
        return self._schema_rel

    # ------------------------------------------------------------ helpers
    def _sub(self, rows: np.ndarray) -> PandasRelation:
        """Rows by boolean mask or positions."""
        df = self.df[rows] if rows.dtype == bool else self.df.iloc[rows]
        return PandasRelation(df.reset_index(drop=True), None if self.ids is None else self.ids[rows])

    def _all_ids(self) -> np.ndarray:
        return np.full(len(self.df), -1, np.int64) if self.ids is None else self.ids

    @property
    def columns(self) -> list[str]:
        # pandas types labels as Hashable; the tables API names columns by str (labels of other
        # types are passed through unchanged, as before)
        df = self._df if self._op is None else self._schema()._df
        assert df is not None
        return cast(list[str], list(df.columns))

    @staticmethod
    def _same(other: Relation, what: str) -> PandasRelation:
        """``other`` as a PandasRelation, or a ValidationError (tables on different backends)."""
        if not isinstance(other, PandasRelation):
            raise ValidationError(f"{what}: both tables must use the pandas backend, got a "
                                  f"{type(other).__name__}; open them with the same backend")
        return other

    def check(self, f: Any) -> None:
        if not callable(f):
            raise ValidationError(
                f"got a {type(f).__name__}: on the pandas backend analyst code is a Python "
                "callable of ONE record, e.g. lambda r: r['age'] > 17 (for expressions, use "
                "backend='duckdb')"
            )

    def check_value(self, value: ValueSpec | None) -> None:
        if value is None or isinstance(value, str):
            return  # column names are checked against the public schema by the caller
        self.check(value)

    def check_score(self, score: Any, candidates: Sequence[Any]) -> None:
        self.check(score)

    def public(self, df: pd.DataFrame) -> PandasRelation:
        """Public records (ids ⊥); values of analyst-made types are replaced by None, so no
        analyst ``__eq__``/``__hash__`` ever meets a protected value in a merge."""
        pub = as_frame(df)
        obj = [c for c in pub.columns if pub[c].dtype.kind == "O"]
        if obj:
            pub = pub.copy()
            for c in obj:
                pub[c] = pd.Series([rowwise.clean(v) for v in pub[c].tolist()], dtype=object,
                                   index=pub.index)
        return PandasRelation(pub, None)

    def __len__(self) -> int:
        return len(self.df)

    # ------------------------------------------------------------ row-wise
    @_deferred
    def where(self, pred: Callable[[rowwise.Record], Any]) -> PandasRelation:
        return self._sub(rowwise.predicate_mask(self.df, pred))

    @_deferred
    def select(self, exprs: Mapping[str, Callable[[rowwise.Record], Any]]) -> PandasRelation:
        cols = {name: rowwise.map_values(self.df, f) for name, f in exprs.items()}
        return PandasRelation(pd.DataFrame(cols, index=pd.RangeIndex(len(self.df))), self.ids)

    @_deferred
    def select_many(self, k: int, f: Callable[[rowwise.Record], Any],
                    columns: Sequence[str] | None) -> PandasRelation:
        rows, parents = rowwise.flat_map(self.df, k, f, columns)
        names = ["value"] if columns is None else list(columns)
        out = pd.DataFrame.from_records(rows, columns=names) if rows else pd.DataFrame(
            {c: pd.Series(dtype=object) for c in names})
        return PandasRelation(out, None if self.ids is None else self.ids[parents])

    def _keys(self, key: ValueSpec) -> np.ndarray:
        if isinstance(key, str):
            return self.df[key].to_numpy()
        vals = rowwise.map_values(self.df, key)
        arr = np.empty(len(vals), dtype=object)
        for i, v in enumerate(vals):  # element by element: tuples stay single objects
            arr[i] = v
        return arr

    def partition(self, keys: Sequence[Hashable], key: ValueSpec) -> list[Relation]:
        """One pending relation per key; the first one read computes them all."""
        return list[Relation](self._split(lambda src: src._partition_now(keys, key), len(keys)))

    def _split(self, compute: Callable[[PandasRelation], Sequence[PandasRelation]], n: int
               ) -> list[PandasRelation]:
        """``n`` pending relations: the parts of ``compute(self)``, computed once when the
        first is read (the schema of a part is computed from the empty schema, uncached)."""
        memo: list[Sequence[PandasRelation]] = []

        def part(src: PandasRelation, i: int) -> PandasRelation:
            if src is not self:  # the empty schema: no records, no analyst call
                return compute(src)[i]
            if not memo:
                memo.append(compute(src))
            return memo[0][i]

        return [PandasRelation._pending(part, self, (i,)) for i in range(n)]

    def _codes(self, keys: Sequence[Hashable], key: ValueSpec) -> np.ndarray:
        """Each record's position in the public ``keys`` (-1 for a key not in the list)."""
        karr = self._keys(key)
        if not keys:
            return np.full(len(karr), -1, np.int64)
        try:
            return np.asarray(pd.Index(list(keys), dtype=object, tupleize_cols=False).get_indexer(
                pd.Index(karr, dtype=object, tupleize_cols=False)), np.int64)
        except TypeError:  # unhashable values in the data: look them up one by one
            where_key = {k: i for i, k in enumerate(keys)}
            return np.array([where_key.get(_hashable(v), -1) for v in karr], dtype=np.int64)

    def _partition_now(self, keys: Sequence[Hashable], key: ValueSpec) -> list[PandasRelation]:
        if not keys:
            return []
        codes = self._codes(keys, key)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
        return [self._sub(order[bounds[i]: bounds[i + 1]]) for i in range(len(keys))]

    def check_keys(self, keys: Sequence[Hashable], key: ValueSpec) -> None:
        if not isinstance(key, str):
            self.check(key)

    @_deferred
    def in_keys(self, keys: Sequence[Hashable], key: ValueSpec) -> PandasRelation:
        return self._sub(np.flatnonzero(self._codes(keys, key) >= 0))

    @_deferred
    def concat(self, other: Relation) -> PandasRelation:
        o = self._same(other, "concat")
        df = pd.concat([self.df, o.df], ignore_index=True)
        if self.ids is None and o.ids is None:
            return PandasRelation(df, None)
        return PandasRelation(df, np.concatenate([self._all_ids(), o._all_ids()]))

    @_deferred
    def product(self, public: Relation) -> PandasRelation:
        o = self._same(public, "product")
        out = self.df.merge(o.df, how="cross", suffixes=("", "_public"))
        ids = None if self.ids is None else np.repeat(self.ids, len(o.df))
        return PandasRelation(out, ids)

    @staticmethod
    def _merge(left: pd.DataFrame, right: pd.DataFrame, lk: Sequence[Hashable],
               rk: Sequence[Hashable], how: Literal["inner", "left", "right", "outer"],
               suffixes: tuple[str, str],
               indicator: bool = False) -> pd.DataFrame:
        """Merge on object-typed keys (mixed types or odd values cannot make it fail); when
        both sides name their keys alike, the right side's key columns are dropped."""
        keys = [f"__dprivacy_k{i}" for i in range(len(lk))]
        lsafe = _safe(left, lk).set_axis(keys, axis=1)
        rsafe = _safe(right, rk).set_axis(keys, axis=1)
        if list(lk) == list(rk):
            right = right.drop(columns=list(rk))
        out = pd.concat([left, lsafe], axis=1).merge(
            pd.concat([right, rsafe], axis=1), how=how, on=keys, suffixes=suffixes,
            indicator=indicator)
        return out.drop(columns=keys)

    @_deferred
    def join_public(self, public: Relation, on: Sequence[str],
                    right_on: Sequence[str]) -> PandasRelation:
        o = self._same(public, "join_public")
        pos = "__dprivacy_pos__"
        left = self.df.assign(**{pos: np.arange(len(self.df))})
        out = self._merge(left, o.df, on, right_on, "inner", ("", "_public"))
        src = out.pop(pos).to_numpy()
        return PandasRelation(out.reset_index(drop=True),
                              None if self.ids is None else self.ids[src])

    @_deferred
    def exclude(self, public: Relation, on: Sequence[str]) -> PandasRelation:
        o = self._same(public, "exclude")
        left = _safe(self.df, on)
        right = _safe(o.df, on)
        key = pd.MultiIndex.from_frame(left) if len(on) > 1 else pd.Index(left.iloc[:, 0])
        pkey = pd.MultiIndex.from_frame(right) if len(on) > 1 else pd.Index(right.iloc[:, 0])
        return self._sub(~np.asarray(key.isin(pkey)))

    # ------------------------------------------------------------ not row-wise
    @_deferred
    def group_by(self, keys: Sequence[str] | None, key_fn: Any,
                 aggs: Mapping[str, tuple[str, str]]) -> PandasRelation:
        if key_fn is not None:
            kframe = pd.DataFrame({"key": self._keys(key_fn)})
        else:
            kframe = self.df[list(keys or [])]
        names = list(kframe.columns)
        safe = _safe(kframe, names)
        g = safe.groupby(names, sort=False, dropna=False)
        out = g.size().rename("count").to_frame()
        for name, (col, fn) in aggs.items():
            vals = pd.Series(_numeric(self.df[col]), index=safe.index)
            out[name] = vals.groupby([safe[c] for c in names], sort=False, dropna=False).agg(fn)
        out = out.reset_index()
        try:
            out = out.sort_values(names, kind="stable", ignore_index=True)
        except TypeError:
            pass  # mixed key types: first-appearance order
        return PandasRelation(out, None)

    @_deferred
    def distinct(self) -> PandasRelation:
        dup = _safe(self.df, list(self.df.columns)).duplicated().to_numpy()
        return PandasRelation(self.df[~dup].reset_index(drop=True), None)

    @_deferred
    def union(self, other: Relation) -> PandasRelation:
        o = self._same(other, "union")
        return PandasRelation(pd.concat([self.df, o.df], ignore_index=True)).distinct()

    def _marked(self, other: PandasRelation) -> tuple[pd.DataFrame, np.ndarray]:
        """Distinct records of self and whether each occurs in ``other``."""
        cols = list(self.df.columns)
        left = self.distinct().df
        right = other.distinct().df[cols].set_axis([f"__c{i}" for i in range(len(cols))], axis=1)
        m = self._merge(left.assign(__dprivacy_pos__=np.arange(len(left))), right, cols,
                        list(right.columns), "inner", ("", "_r"))
        hit = np.zeros(len(left), dtype=bool)
        hit[m["__dprivacy_pos__"].to_numpy()] = True
        return left, hit

    @_deferred
    def intersect(self, other: Relation) -> PandasRelation:
        left, hit = self._marked(self._same(other, "intersect"))
        return PandasRelation(left[hit].reset_index(drop=True), None)

    @_deferred
    def except_(self, other: Relation) -> PandasRelation:
        left, hit = self._marked(self._same(other, "except_"))
        return PandasRelation(left[~hit].reset_index(drop=True), None)

    @_deferred
    def join(self, other: Relation, bound_self: int, bound_other: int,
             on: Sequence[str], right_on: Sequence[str]) -> PandasRelation:
        o = self._same(other, "join")

        def first(df: pd.DataFrame, keys: Sequence[str], b: int) -> pd.DataFrame:
            rank = _safe(df, keys).groupby(list(keys), sort=False, dropna=False).cumcount()
            return df[rank.to_numpy() < b]

        left = first(self.df, on, bound_self)
        right = first(o.df, right_on, bound_other)
        out = self._merge(left, right, on, right_on, "inner", ("", "_right"))
        return PandasRelation(out.reset_index(drop=True), None)

    @_deferred
    def take(self, n: int) -> PandasRelation:
        return self._sub(np.arange(min(n, len(self.df))))

    @_deferred
    def skip(self, n: int) -> PandasRelation:
        return self._sub(np.arange(min(n, len(self.df)), len(self.df)))

    def sample(self, kind: SampleKind, param: float, secret: int
               ) -> tuple[PandasRelation, PandasRelation]:
        a, b = self._split(lambda src: src._sample_now(kind, param, secret), 2)
        return a, b

    def _sample_now(self, kind: SampleKind, param: float, secret: int
                    ) -> tuple[PandasRelation, PandasRelation]:
        gen = np.random.Generator(np.random.Philox(key=secret % (1 << 128)))
        size = len(self.df)
        if kind == "bernoulli":
            chosen = gen.random(size) < param
        elif kind == "replacement":
            pos = gen.integers(0, size, size=int(param)) if size else np.zeros(0, np.int64)
            return self._sub(pos), self._sub(np.zeros(0, np.int64))
        else:
            k = int(param) if kind == "fixed" else int(np.floor(param * size))
            chosen = np.zeros(size, dtype=bool)
            chosen[gen.choice(size, size=min(k, size), replace=False)] = True
        return self._sub(chosen), self._sub(~chosen)

    # ------------------------------------------------------------ exact aggregates
    def count(self) -> int:
        return len(self.df)

    def clamped_values(self, value: ValueSpec, lo: float, hi: float) -> np.ndarray:
        return rowwise.float_values(self.df, value, lo, hi)

    def clamped_sum(self, value: ValueSpec, lo: float, hi: float) -> float:
        v = self.clamped_values(value, lo, hi)
        s = float((v * 2.0**-64).sum()) * 2.0**64  # power-of-two scaling: no overflow inside
        return float(np.clip(s, -_SATURATE, _SATURATE))

    def rank_counts(self, value: ValueSpec, lo: float, hi: float, candidates: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, int]:
        v = self.clamped_values(value, lo, hi)
        lt, eq = counts_from_sorted(v, candidates)
        return lt, eq, int(v.size)

    def score_sums(self, score: Callable[[Any, Any], Any], candidates: Sequence[Any]
                   ) -> np.ndarray:
        return rowwise.score_sums(self.df, score, candidates)

    def group_counts(self, columns: Sequence[str]) -> pd.DataFrame:
        cols = list(columns)
        if len(self.df) == 0:
            return pd.DataFrame({**{c: [] for c in cols}, "count": np.zeros(0, np.int64)})
        safe = _safe(self.df, cols)
        return safe.groupby(cols, sort=False, dropna=False).size().rename("count").reset_index()

    def key_aggregates(self, keys: Sequence[Hashable], key: ValueSpec,
                       values: Sequence[tuple[ValueSpec, float, float, float]]
                       ) -> tuple[np.ndarray, np.ndarray]:
        codes = self._codes(keys, key)
        inside = codes >= 0
        c = codes[inside]
        counts = np.bincount(c, minlength=len(keys)).astype(np.int64)
        sums = np.zeros((len(values), len(keys)))
        for i, (f, lo, hi, shift) in enumerate(values):
            v = (self.clamped_values(f, lo, hi)[inside] - shift) * 2.0**-64
            s = np.bincount(c, weights=v, minlength=len(keys)) * 2.0**64  # no overflow inside
            sums[i] = np.clip(np.nan_to_num(s, nan=0.0), -_SATURATE, _SATURATE)
        return counts, sums

    # ------------------------------------------------------------ ProPer's charge
    def id_multiplicities(self) -> tuple[np.ndarray, np.ndarray]:
        ids = self._all_ids()
        return np.unique(ids[ids >= 0], return_counts=True)

    def record_costs(self, costs: ElementCosts) -> np.ndarray:
        """Each record's element cost (0 for records matching no element)."""
        cols = list(costs.columns)
        table = costs.table.reset_index(drop=True)
        key = pd.MultiIndex.from_frame(_safe(table, cols)) if len(cols) > 1 else pd.Index(
            _safe(table, cols).iloc[:, 0])
        rec = _safe(self.df, cols)
        target = pd.MultiIndex.from_frame(rec) if len(cols) > 1 else pd.Index(rec.iloc[:, 0])
        idx = np.asarray(key.get_indexer(target))
        c = table["cost"].to_numpy(dtype=float)
        return np.where(idx >= 0, c[np.maximum(idx, 0)], 0.0)

    def id_costs(self, costs: ElementCosts) -> tuple[np.ndarray, np.ndarray]:
        ids = self._all_ids()
        per = self.record_costs(costs)
        src = ids >= 0
        uniq, inv = np.unique(ids[src], return_inverse=True)
        return uniq, np.bincount(inv, weights=per[src], minlength=uniq.size)

    def keep_ids(self, ids: np.ndarray) -> PandasRelation:
        if self.ids is None:
            return self
        return self._sub((self.ids < 0) | np.isin(self.ids, ids))

    def keep_mask(self, mask: np.ndarray) -> PandasRelation:
        """The records where ``mask`` is True (pandas fast path of ProPer's charge)."""
        return self._sub(mask)
