"""ProPer: personal budgets with provenance and silent dropping (Ebadi, Sands & Schneider, POPL'15).

Every source record has an id and its own budget ℰ(r). A derived record carries the id of the
one source record it comes from (affine provenance, Def. 5), or ⊥ if it comes from no individual
(a public literal). The ids are managed by the library: analyst code never sees or returns them
(``select_many`` gives every output its parent's id). Only unary union-preserving transformations
keep provenance (Theorem 1): ``where``, ``select``, ``select_many``, ``partition``, ``concat``
(⊎), a product or an equi-join with a *public* table, and removal of the records listed in a
public table. Everything else goes through :meth:`ProPerTable.as_pinq`.

Query rule (Fig. 3, Corollary 1): an ε-aggregation charges each source s the cost
C(s) = ε × (number of records with provenance s in the queried table). Sources with B(s) ≥ C(s)
pay; the others are not charged and their records are silently left out of the query's input;
⊥ records are always included. Nothing (no error, no flag) reveals that a budget is exhausted.

**A stable identity is needed.** Budgets are kept per id. Without ``id_column`` every
``ProPerTable(df, ...)`` registers its records under fresh ids, so each run (each new table
object on the same people) hands everybody a fresh budget and the personal guarantee holds only
within one object. With ``id_column`` naming a stable person identifier and a durable
:class:`~dprivacy.tables.Ledger`, a person keeps one budget across tables, runs and processes.

Privacy condition: the whole interaction is ℰ-PDP: for every record r, neighbouring runs with and
without r differ by a factor ≤ exp(ℰ(r)) (ProPer Theorem 2), because budgets never go below zero.
"""

from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import pandas as pd

from dprivacy.errors import UnsupportedOperationError, ValidationError
from dprivacy.tables import aggregations as agg
from dprivacy.tables.budgets.agents import BudgetAgent
from dprivacy.tables.budgets.ledger import BudgetLedger
from dprivacy.tables.budgets.memory_ledger import MemoryLedger
from dprivacy.tables.budgets.proper_budgets import LedgerBudgets
from dprivacy.tables.dx import ProPerHistogram
from dprivacy.tables.grouped import GroupedTable
from dprivacy.tables.live import LiveData
from dprivacy.tables.params import count_arg, eps_arg
from dprivacy.tables.pinq import Queryable
from dprivacy.tables.queries import NoisyQueries
from dprivacy.tables.randomness import NoiseSource
from dprivacy.tables.relations.dispatch import check_backend, is_pandas
from dprivacy.tables.relations.pandas_relation import PandasRelation
from dprivacy.tables.relations.protocol import ElementCosts, Relation
from dprivacy.tables.relations.rowwise import sealed
from dprivacy.tables.transform_args import (
    column_list,
    partition_keys,
    same_columns,
    select_exprs,
    select_many_columns,
)

if TYPE_CHECKING:
    from dprivacy.tables.budgets.budget_table import BudgetTable

__all__ = ["ProPerTable"]

logger = logging.getLogger(__name__)
_WARNED = False  # the missing-id_column warning is logged once per process

_UNTRACKABLE = (
    "ProPer tracks provenance only through unary union-preserving transformations (where, select, "
    "select_many, concat, product/join/exclude with a public table); {op} mixes records of "
    "several individuals or depends on order or multiplicity. Use as_pinq(eps) first."
)


@sealed
class ProPerTable(LiveData, NoisyQueries):
    """A table of records with personal budgets and provenance (ProPer, POPL'15).

    Parameters:
        data: the source records, one individual each (a pandas DataFrame, or a Parquet path /
            DuckDB / Ibis / Spark table for the engine backends).
        budget: the initial budget ℰ(r): a number for all, a column name, or (pandas only) one
            value per row.
        ledger: where budgets live. pandas: a :class:`MemoryLedger` (the default) or a durable
            SQLite :class:`~dprivacy.tables.Ledger` shared between processes; engines: None (in
            memory), the path of a DuckDB file, or a
            ``dprivacy.tables.budgets.budget_table.BudgetTable``; Spark: also a
            ``dprivacy.tables.budgets.spark_budgets.SparkBudgetTable``, which keeps the budgets
            in the cluster's storage (needs ``id_column``), or a
            ``dprivacy.tables.budgets.spark_slots.SparkSlotBudgets`` (for a Parquet source: the
            budgets laid out like its rows, charged in the scan of each query).
            The ledger is the data owner's handle: the table exposes no attribute that returns
            it (its remaining budgets show who matched a filter), so an owner who wants to read
            or top up budgets passes the ledger here and keeps it. In-process Python cannot stop
            an analyst who runs code in the same process from reaching it anyway (private
            attributes, the garbage collector): for untrusted analysts use the service
            (docs/service.md).
        id_column: a column of stable, non-negative integer person ids (strongly recommended:
            without it every new table hands everybody a fresh budget). Ids already in the
            ledger keep their stored budget; new ones get ``budget``.
        backend: "pandas", "duckdb", "spark" or None (pandas for a DataFrame, else the engine).
        noise_seed: the data owner's reproducible-noise seed (simulations only; default secure).

    Examples:
        >>> df = pd.DataFrame({"pid": [7, 8, 9], "role": ["T", "M", "T"]})
        >>> budgets = MemoryLedger()  # the owner keeps this handle
        >>> p = ProPerTable(df, budget=1.0, ledger=budgets, id_column="pid")
        >>> _ = p.where(lambda r: r["role"] == "T").noisy_count(0.5)
        >>> [float(b) for b in budgets.remaining([7, 8, 9])]
        [0.5, 1.0, 0.5]
    """

    def __init__(
        self, data: Any, budget: float | str | Sequence[float] | np.ndarray = 1.0, *,
        ledger: BudgetLedger | BudgetTable | str | os.PathLike | None = None,
        id_column: str | None = None,
        backend: str | None = None, noise_seed: int | None = None,
    ) -> None:
        self._noise = NoiseSource(noise_seed)
        self._unique = True
        self._cache: dict[str, Any] = {}
        name = check_backend(data, backend)
        global _WARNED
        if id_column is None and not _WARNED:
            _WARNED = True
            logger.warning(
                "ProPerTable without id_column: its records get fresh ids, so their budgets do "
                "not carry over to any other table or run; pass id_column= (a stable person id)")
        if name == "pandas":
            if ledger is not None and not isinstance(ledger, BudgetLedger):
                raise ValidationError(
                    f"ledger is a {type(ledger).__name__}: a pandas ProPerTable keeps budgets in "
                    "a MemoryLedger or a durable dprivacy.tables.Ledger (a BudgetTable or a "
                    "DuckDB path is for the engine backends: pass backend='duckdb' or 'spark')")
            self._ledger: Any = ledger if ledger is not None else MemoryLedger()
            self._budgets: Any = LedgerBudgets(self._ledger)
            self._rel: Relation = PandasRelation(data.iloc[0:0], np.empty(0, np.int64))
            self.insert(data, budget, id_column=id_column, _existing="keep")
        else:
            import pyarrow

            from dprivacy.tables.budgets import budget_table, engine_budgets, spark_budgets, spark_slots
            from dprivacy.tables.relations import engine

            if not isinstance(budget, (str, numbers.Real)):
                raise ValidationError(
                    f"budget is a {type(budget).__name__}: per-row budget sequences are "
                    "supported on the pandas backend only; on an engine give one number or the "
                    "name of a budget column")
            if ledger is not None and not isinstance(ledger, (budget_table.BudgetTable, str,
                                                              os.PathLike,
                                                              spark_budgets.SparkBudgetTable,
                                                              spark_slots.SparkSlotBudgets)):
                raise ValidationError(
                    f"ledger is a {type(ledger).__name__}: the engine backends keep budgets in "
                    "a dprivacy.tables.budgets.budget_table.BudgetTable (or give the path of its "
                    "DuckDB file), or on Spark in a spark_budgets.SparkBudgetTable or a "
                    "spark_slots.SparkSlotBudgets")
            rel = engine.relation_from(data, None if name == "engine" else name,
                                       id_column=id_column)
            b = budget if isinstance(budget, str) else float(budget)
            if isinstance(ledger, spark_budgets.SparkBudgetTable):  # budgets held in the cluster
                self._rel, self._budgets = ledger.attach(rel, b, id_column=id_column)
            elif isinstance(ledger, spark_slots.SparkSlotBudgets):  # beside the data's rows
                self._rel, self._budgets = ledger.attach(rel, b, id_column=id_column, source=data)
            else:
                self._rel, self._budgets = engine_budgets.proper_budgets(
                    rel, b, ledger=ledger, id_column=id_column,
                    source=data if isinstance(data, (pd.DataFrame, pyarrow.Table)) else None)
            self._ledger = self._budgets

    def _derive(self, rel: Relation, unique: bool) -> ProPerTable:
        t = ProPerTable.__new__(ProPerTable)
        t._rel, t._unique, t._cache = rel, unique, {}
        t._ledger, t._budgets, t._noise = self._ledger, self._budgets, self._noise
        return t

    @property
    def _df(self) -> pd.DataFrame:
        """The records of a pandas table (tests and the data owner only)."""
        return self._rel.df  # type: ignore[attr-defined]

    @property
    def _prov(self) -> np.ndarray:
        """The privacy ids of a pandas table's records (tests and the data owner only)."""
        return self._rel._all_ids()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ tracked transformations
    def where(self, f: Any) -> ProPerTable:
        """σ_p: records for which the row-wise predicate holds; provenance kept."""
        self._rel.check(f)
        return self._derive(self._rel.where(f), self._unique)

    def select(self, f: Any = None, /, **named: Any) -> ProPerTable:
        """π / per-record map, one output per record (see :meth:`Queryable.select`)."""
        exprs = select_exprs(f, named, self._rel.check)
        return self._derive(self._rel.select(exprs), self._unique)

    def select_many(self, k: int, f: Any, columns: Sequence[str] | None = None) -> ProPerTable:
        """Flat-map (at most ``k`` outputs per record); each output gets its parent's id from
        the library, so a source with j outputs pays j·ε (Corollary 1)."""
        k = count_arg(k, "k", 1)
        self._rel.check(f)
        return self._derive(self._rel.select_many(k, f, select_many_columns(columns)),
                            self._unique and k == 1)

    def partition(self, keys: Iterable[Hashable], f: Any) -> dict[Hashable, ProPerTable]:
        """One ``where`` per key: by the selection principle the parts need no shared agent;
        a record pays only for the queries on its own part."""
        klist = partition_keys(keys, f, self.columns, self._rel.check)
        parts = self._rel.partition(klist, f)
        return {k: self._derive(r, self._unique) for k, r in zip(klist, parts, strict=True)}

    def concat(self, other: ProPerTable | pd.DataFrame) -> ProPerTable:
        """Additive union ⊎ with another table of the same ledger, or with a public table (⊥)."""
        if isinstance(other, ProPerTable):
            if other._ledger is not self._ledger:
                raise ValidationError("concat: both tables must share one ledger (ids are per ledger)")
            orel = other._rel
        elif isinstance(other, pd.DataFrame):
            orel = self._rel.public(other)
        else:
            raise ValidationError(f"concat: expected a ProPerTable or a public DataFrame, got "
                                  f"{type(other).__name__}")
        same_columns(self.columns, orel.columns, "concat")
        return self._derive(self._rel.concat(orel), False)

    def _public(self, public: Any, what: str) -> Relation:
        if not isinstance(public, pd.DataFrame):
            raise ValidationError(f"{what}: expected a public pandas DataFrame, got "
                                  f"{type(public).__name__}")
        return self._rel.public(public)

    def product(self, public: pd.DataFrame) -> ProPerTable:
        """A_V × T with a public table T: each record yields |T| pairs with its provenance."""
        pub = self._public(public, "product")
        return self._derive(self._rel.product(pub), self._unique and len(public) <= 1)

    def join_public(self, public: pd.DataFrame, on: str | list[str],
                    right_on: str | list[str] | None = None) -> ProPerTable:
        """Equi-join with a public table (a product with T followed by a selection): each output
        row has the provenance of its one sensitive record."""
        pub = self._public(public, "join_public")
        lk = column_list(on, self.columns, "on")
        rk = column_list(on if right_on is None else right_on, pub.columns, "right_on")
        if len(lk) != len(rk):
            raise ValidationError("on and right_on must name the same number of columns")
        return self._derive(self._rel.join_public(pub, lk, rk), False)

    def exclude(self, public: pd.DataFrame, on: list[str] | None = None) -> ProPerTable:
        """Remove every record that occurs in the public table (σ_{∉T})."""
        pub = self._public(public, "exclude")
        cols = column_list(self.columns if on is None else on, self.columns, "on")
        column_list(cols, pub.columns, "on (public table)")
        return self._derive(self._rel.exclude(pub, cols), self._unique)

    def _untrackable(self, op: str) -> NoReturn:
        raise UnsupportedOperationError(_UNTRACKABLE.format(op=op))

    def group_by(self, key: Any = None, *, keys: Iterable[Hashable] | None = None,
                 column: Any = None, **aggs: Any) -> GroupedTable:
        """Over a public key set only: ``group_by(keys=[...], column=...)`` gives a
        :class:`~dprivacy.tables.grouped.GroupedTable` (one noisy answer per listed key; each
        person pays ε × their records whose key is listed). Without ``keys`` a group has many
        provenances, so it is not trackable: raises; use ``as_pinq(eps)``."""
        if keys is None or aggs:
            self._untrackable("group_by without a public key set (keys=)")
        if key is not None and column is not None:
            raise ValidationError("group_by: give the key column once (key or column=)")
        return self._grouped(keys, column if column is not None else key)

    def _in_keys(self, keys: list[Hashable], column: Any) -> ProPerTable:
        """Only the records whose key is listed pay (a key outside the set reads nothing)."""
        return self._derive(self._rel.in_keys(keys, column), self._unique)

    def join(self, *a: Any, **k: Any) -> NoReturn:
        """Not trackable (two individuals per output): use ``join_public`` or ``as_pinq``."""
        self._untrackable("join of two protected tables")

    def intersect(self, *a: Any, **k: Any) -> NoReturn:
        """Not ⊎-preserving: raises; use ``as_pinq(eps)``."""
        self._untrackable("intersect")

    def except_(self, *a: Any, **k: Any) -> NoReturn:
        """Not ⊎-preserving in its second argument: raises; use ``exclude`` for a public table."""
        self._untrackable("except_")

    def union(self, *a: Any, **k: Any) -> NoReturn:
        """Set union is not ⊎-preserving: raises; use ``concat``."""
        self._untrackable("union (set union)")

    def distinct(self, *a: Any, **k: Any) -> NoReturn:
        """Not ⊎-preserving: raises; use ``as_pinq(eps)``."""
        self._untrackable("distinct")

    def take(self, *a: Any, **k: Any) -> NoReturn:
        """Depends on order: raises; use ``as_pinq(eps)``."""
        self._untrackable("take")

    def skip(self, *a: Any, **k: Any) -> NoReturn:
        """Depends on order: raises; use ``as_pinq(eps)``."""
        self._untrackable("skip")

    # ------------------------------------------------------------------ the Query rule
    def _eligible(self, eps: float, element_costs: ElementCosts | None = None) -> Relation:
        """Charge every source its cost (committed); return the records that may be used."""
        if is_pandas(self._rel):
            return self._budgets.pay(self._rel, eps, element_costs, unique=self._unique,
                                     cache=self._cache)
        return self._budgets.pay(self._rel, eps, element_costs)

    def _pay_then(self, eps: float, plan: agg.Plan) -> Any:
        return plan(self._eligible(eps), self._noise)

    def as_pinq(self, eps: float) -> Queryable:
        """Charge each involved source ε × its records and return the payers' records (plus ⊥
        records) as a PINQ table with global budget ε (POPL'15 §6.2, Corollary 1)."""
        e = eps_arg(eps)
        elig = self._eligible(e)
        pin = getattr(self._budgets, "pin", None)
        if pin is not None:  # stores whose later charges delete the files the payers are in
            pin(elig)
        return Queryable._derive(elig, (root := BudgetAgent(e)), [root], self._noise)

    # ------------------------------------------------------------------ d_X on tables
    def histogram(self, universe: Any, on_unknown: str = "drop") -> Any:
        """The table mapped onto ``universe`` as a protected histogram (see :mod:`.dx`)."""
        return ProPerHistogram(self, universe, on_unknown)
