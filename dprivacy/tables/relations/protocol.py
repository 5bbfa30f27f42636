"""The Relation protocol: what PINQ and ProPer tables need from the engine that holds the records.

A :class:`~dprivacy.tables.Queryable` or :class:`~dprivacy.tables.ProPerTable` keeps its budget
agents, ledgers and noise in the driver and holds a :class:`Relation`: an immutable (and, on an
engine, lazily evaluated) bag of records living in pandas, DuckDB or Spark. Implementations:
``PandasRelation`` (:mod:`dprivacy.tables.relations.pandas_relation`; analyst code is a plain Python
per-record callable, applied to one read-only record at a time) and ``IbisRelation``
(:mod:`dprivacy.tables.relations.engine`; analyst code is a row-wise Ibis expression, inspected before it
runs).

**Privacy ids.** Every record carries a hidden, library-managed privacy id (int64): the source
record it derives from (ProPer's affine provenance, POPL'15 Def. 5), or ``-1`` (⊥) for records
derived from no individual (public literals) or from several (outputs of group_by, join,
distinct, ...; those are refused by ProPer anyway). Analyst code never sees, returns or sets ids:
the library copies them (:meth:`Relation.select_many` gives every output its parent's id).

**Row-wise methods.** ``where``, ``select``, ``select_many``, ``partition``, ``concat``,
``product``, ``join_public`` and ``exclude`` must compute each output record from ONE input record
(plus public tables and public constants): an implementation must refuse or neutralise any
analyst code that could read another record (whole-frame functions, reductions, windows, joins,
subqueries, state kept between calls, randomness). This is what makes them 1-stable (k-stable
for select_many) and ⊎-preserving, which both PINQ's scaling factors and ProPer's provenance
rely on.

**Totality.** No method may raise, or change its exception type or message, because of the
protected records: argument checks (types, column names, ranges) are made by the caller before
anything is charged, and everything after that is total. A per-record function that raises,
returns a value of the wrong type, NaN, ±inf or an over-large number on some record is replaced
by a documented default for that record (see each method); arithmetic saturates instead of
overflowing.

**Exact aggregates** (``count``, ``clamped_sum``, ``clamped_values``, ``rank_counts``,
``score_sums``, ``group_counts``, ``key_aggregates``) return exact numbers to the driver,
which adds noise. They are called only AFTER the query's charge has been committed (PINQ: the
agents and the durable ledger; ProPer: :meth:`PersonalBudgets.pay`), and each is called once per
answer, so re-running a lazy plan never redraws noise. ``id_multiplicities`` /
``id_key_counts`` are the exception: they compute the per-source charge itself and never leave
the driver.

Value specifications (``ValueSpec``): a column name, or a row-wise function of one record (a
Python callable for pandas, an Ibis expression for the engines).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

__all__ = ["Relation", "PersonalBudgets", "ElementCosts", "SampleKind", "ValueSpec", "RowFn"]

RowFn = Any
"""A row-wise function of one record: ``Callable[[Mapping[str, Any]], Any]`` on pandas, an Ibis
(deferred) expression on the engines."""

ValueSpec = str | RowFn
"""A column name or a row-wise function giving one value per record."""

SampleKind = str
"""``"fixed"`` (n records without replacement), ``"replacement"`` (n uniform draws),
``"fraction"`` (⌊p·|D|⌋ records without replacement), ``"bernoulli"`` (each record with
probability b)."""


@dataclass(frozen=True)
class ElementCosts:
    """Per-record privacy costs that depend on the record's element (a d_X release on a ProPer
    table): a record whose key columns ``columns`` equal a row of ``table`` costs that row's
    ``cost``; records matching no row cost 0 (they are not counted in the histogram).

    ``table`` is a small public pandas frame with the key columns and a float column ``cost``.
    """

    columns: tuple[str, ...]
    table: pd.DataFrame


@runtime_checkable
class Relation(Protocol):
    """An immutable bag of records with hidden privacy ids, living in one engine.

    Every method returns a new Relation (or a plain number / small frame for the exact
    aggregates) and leaves ``self`` unchanged. Arguments have been validated by the caller
    (column names exist, integers are ints >= their minimum, floats are finite built-in
    floats); implementations may re-check them but must then raise the same
    :class:`~dprivacy.errors.ValidationError` whatever the data.
    """

    backend: str
    """``"pandas"``, ``"duckdb"`` or ``"spark"``."""

    @property
    def columns(self) -> list[str]:
        """The column names: public schema, independent of the records."""
        ...

    def check(self, f: Any) -> None:
        """Refuse analyst code this engine cannot run row-wise: raise
        :class:`~dprivacy.errors.ValidationError` (message independent of the records; no data
        is touched). The table calls it on every row-wise argument BEFORE any charge (pandas: a
        callable; engines: an expression passing the row-wise checker)."""
        ...

    def check_value(self, value: ValueSpec | None) -> None:
        """Refuse a value specification of an aggregation (a column name, None = the only
        column, or row-wise code) that cannot be evaluated: ValidationError, before any charge."""
        ...

    def check_score(self, score: Any, candidates: Sequence[Any]) -> None:
        """Refuse a score function ``score(record, candidate)`` of the exponential mechanism
        that cannot be evaluated row-wise for these candidates: ValidationError, before any
        charge."""
        ...

    def public(self, df: pd.DataFrame) -> Relation:
        """A relation of the public records ``df`` on the same engine, every id ⊥ (``-1``)."""
        ...

    # ------------------------------------------------------------ row-wise (ids are kept)
    def where(self, pred: RowFn) -> Relation:
        """Records for which ``pred`` holds. ROW-WISE. A record is kept iff ``pred`` returns
        True (a bool / boolean); an exception or any other value drops it."""
        ...

    def select(self, exprs: Mapping[str, RowFn]) -> Relation:
        """One output record per input record, with columns ``exprs`` (name -> row-wise
        function), in that order. ROW-WISE. A function that raises gives None (SQL NULL) for
        that record and column. Ids are kept."""
        ...

    def select_many(self, k: int, f: RowFn, columns: Sequence[str] | None) -> Relation:
        """Flat-map: ``f(record)`` is a LIST of outputs; the library explodes it and keeps at
        most the first ``k`` per input record. ROW-WISE. With ``columns=None`` each output is
        one value (column ``"value"``); otherwise each output is a sequence (or mapping) with
        those columns (missing entries None). A function that raises or returns no list gives
        no output for that record. Every output row gets its PARENT's id from the library."""
        ...

    def partition(self, keys: Sequence[Hashable], key: ValueSpec) -> list[Relation]:
        """For each of the explicit, public ``keys`` the records whose key equals it (one
        relation per key, in order); records with any other key are in no part. ROW-WISE. A key
        function that raises gives the key None."""
        ...

    def check_keys(self, keys: Sequence[Hashable], key: ValueSpec) -> None:
        """Refuse (ValidationError, before any charge) public ``keys`` that cannot be compared
        with the row-wise ``key`` (a column name or analyst code) on this engine."""
        ...

    def in_keys(self, keys: Sequence[Hashable], key: ValueSpec) -> Relation:
        """The records whose ``key`` is one of the public ``keys`` (equality as in
        :meth:`partition`: the records of all its parts). ROW-WISE; ids kept."""
        ...

    def concat(self, other: Relation) -> Relation:
        """Multiset union ⊎ (all records of both, ids kept)."""
        ...

    def product(self, public: Relation) -> Relation:
        """Cross product with a public relation (suffix ``_public`` on clashing names); each
        output keeps the id of its protected record."""
        ...

    def join_public(
        self, public: Relation, on: Sequence[str], right_on: Sequence[str]
    ) -> Relation:
        """Inner equi-join with a public relation; outputs keep the protected record's id."""
        ...

    def exclude(self, public: Relation, on: Sequence[str]) -> Relation:
        """Records whose ``on`` columns match no row of the public relation (σ_{∉T})."""
        ...

    # ------------------------------------------------------------ not row-wise (PINQ only)
    def group_by(
        self, keys: Sequence[str] | None, key_fn: RowFn | None, aggs: Mapping[str, tuple[str, str]]
    ) -> Relation:
        """One record per group (stability 2): the key column(s) (or column ``"key"`` computed
        by the row-wise ``key_fn``; None where it raises), ``count``, and ``aggs``
        (name -> (column, one of "sum", "mean", "min", "max"), computed on the column's
        numeric values, non-numbers as NULL). Output ids are ⊥."""
        ...

    def distinct(self) -> Relation:
        """Distinct records (ids ⊥)."""
        ...

    def union(self, other: Relation) -> Relation:
        """Set union (ids ⊥)."""
        ...

    def intersect(self, other: Relation) -> Relation:
        """Distinct records present in both (ids ⊥)."""
        ...

    def except_(self, other: Relation) -> Relation:
        """Distinct records of self absent from other (ids ⊥)."""
        ...

    def join(
        self, other: Relation, bound_self: int, bound_other: int, on: Sequence[str],
        right_on: Sequence[str],
    ) -> Relation:
        """Bounded equi-join: each side keeps at most ``bound`` records per key (chosen in the
        relation's order), then inner join; suffix ``_right`` on clashing names; ids ⊥."""
        ...

    def take(self, n: int) -> Relation:
        """The first ``n`` records in the relation's order (ids kept)."""
        ...

    def skip(self, n: int) -> Relation:
        """All but the first ``n`` records (ids kept)."""
        ...

    def sample(self, kind: SampleKind, param: float, secret: int) -> tuple[Relation, Relation]:
        """A random sample and its complement (``"replacement"``: the complement is empty).

        The randomness is derived from ``secret`` (a 128-bit integer drawn by the library from
        the secure source, or from the data owner's ``noise_seed``), never from the analyst;
        e.g. a keyed hash of each record's position/id. See :mod:`dprivacy.tables.sampling`."""
        ...

    # ------------------------------------------------------------ exact aggregates
    def count(self) -> int:
        """The number of records. Call only after the charge is committed."""
        ...

    def clamped_sum(self, value: ValueSpec, lo: float, hi: float) -> float:
        """Σ clamp(v, lo, hi) over the records, with v = NaN, a non-number or an exception
        replaced by (lo + hi)/2 and ±inf clamped; saturates at ±1e308 instead of overflowing.
        Call only after the charge is committed."""
        ...

    def clamped_values(self, value: ValueSpec, lo: float, hi: float) -> np.ndarray:
        """The per-record values clamped to [lo, hi] (same replacement rules as
        :meth:`clamped_sum`), as a float array in any order (for the median / order
        statistics). Call only after the charge is committed."""
        ...

    def rank_counts(self, value: ValueSpec, lo: float, hi: float, candidates: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, int]:
        """For the sorted, distinct public ``candidates``: (#{v < c}, #{v = c}) per candidate
        (int64 arrays) and the number of records n, with v the clamped values (same rules as
        :meth:`clamped_sum`); exact, computed in the engine (the noisy order statistics). Call
        only after the charge is committed."""
        ...

    def score_sums(self, score: Callable[[Any, Any], Any] | RowFn,
                   candidates: Sequence[Any]) -> np.ndarray:
        """For each candidate c, Σ_records clamp(score(record, c), 0, 1) (a non-number or an
        exception scores 0): the utilities of the exponential mechanism. Call only after the
        charge is committed."""
        ...

    def group_counts(self, columns: Sequence[str]) -> pd.DataFrame:
        """Exact GROUP BY ``columns``: one row per distinct key with its ``count`` (the
        histogram over element keys of a d_X release). Call only after the charge is
        committed."""
        ...

    def key_aggregates(self, keys: Sequence[Hashable], key: ValueSpec,
                       values: Sequence[tuple[ValueSpec, float, float, float]]
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Grouped aggregates over a public key set, in one pass: for each of the ``keys`` (in
        order; equality as in :meth:`partition`) the number of records whose key equals it
        (int64, length K) and, for each ``(value, lo, hi, shift)``, Σ (clamp(v, lo, hi) −
        shift) over those records (same replacement rules as :meth:`clamped_sum`; a
        float array of shape (len(values), K)). A key with no record gets 0; records with
        other keys are read by nobody. Call only after the charge is committed."""
        ...

    # ------------------------------------------------------------ ProPer's charge (driver only)
    def id_multiplicities(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, counts): every privacy id >= 0 present and its number of records. Used to
        compute ProPer's per-source charge; never released."""
        ...

    def id_costs(self, costs: ElementCosts) -> tuple[np.ndarray, np.ndarray]:
        """(ids, total cost): for every privacy id >= 0 present, the sum of its records'
        element costs. Used to compute ProPer's per-source charge; never released."""
        ...

    def keep_ids(self, ids: np.ndarray) -> Relation:
        """Records whose id is in ``ids`` (the sources that paid), plus every ⊥ record."""
        ...


class PersonalBudgets(Protocol):
    """ProPer's personal budgets as seen by a :class:`~dprivacy.tables.ProPerTable`.

    The pandas implementation wraps a :class:`~dprivacy.tables.budgets.ledger.BudgetLedger`; the engine
    implementation is a budget table in the engine (one set-based statement per charge).
    """

    def pay(self, rel: Relation, eps: float, element_costs: ElementCosts | None = None
            ) -> Relation:
        """ProPer's Query rule (POPL'15 Fig. 3): charge every source s its cost C(s) = ε × its
        records in ``rel`` (or, with ``element_costs``, ε × the sum of its records' element
        costs; d_X releases pass ε = 1),
        only if its remaining budget covers C(s); COMMIT; then return ``rel`` restricted to the
        payers' records and the ⊥ records. Never raises because of the data or the budgets
        (costs too large to store saturate: such a source simply cannot pay)."""
        ...
