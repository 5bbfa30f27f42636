"""PINQ: a protected table behind one global budget (PINQ, McSherry 2009; FW-PINQ, Ebadi et al.).

A :class:`Queryable` holds a :class:`~dprivacy.tables.relations.protocol.Relation` (records in pandas,
DuckDB or Spark); data leaves it only through noisy aggregations. Every transformation returns a
new Queryable whose budget agent scales the charge by the transformation's stability: Where /
Select 1, SelectMany(k) k, GroupBy 2, bounded Join 2·bound of the other side, Concat / Union /
Intersect / Except 1 per protected input, Distinct 1, Partition = max over the parts (keys given
explicitly), Take / Skip 2 (not PINQ's 1: the Take attack of Ebadi & Sands, PST'16 §3). An
aggregation of accuracy ε on a table with scaling factor s costs s·ε (FW-PINQ Fig. 1).

Privacy condition: every answer is ε-DP for its own ε, and the root budget B only pays queries
with s·ε ≤ remaining; a query that cannot be paid raises :class:`BudgetExceededError` before
anything is computed or charged (FW-PINQ's Query⊥; safe because budgets and scales do not depend
on the data).

Analyst code is row-wise: on pandas a Python callable of ONE read-only record
(``t.where(lambda r: r["age"] > 17)``, ``t.select(band=lambda r: r["age"] // 10)``), applied
one record at a time and made total (see :mod:`dprivacy.tables.relations.rowwise`); on DuckDB / Spark an
Ibis expression (``t.where(_.age > 17)``) inspected by the row-wise checker. Every argument is
checked before anything is charged, and nothing after the charge can raise because of the data.

**zCDP mode.** ``Queryable(df, rho=R)`` holds a zCDP budget R instead of a pure one (Bun &
Steinke 2016; docs/theory.md, "Gaussian noise and metric zCDP"): :meth:`gaussian_count` and
:meth:`gaussian_sum` add Gaussian noise (``sigma = Delta / sqrt(2 rho)``: Delta^2 / (2 sigma^2) =
rho) and charge their rho; every pure-ε aggregation still works and is charged ε²/2 (ε-DP
implies ε²/2-zCDP, their Proposition 1.4); a c-stable transformation multiplies a charge by c²
(a record then moves an answer by up to c: zCDP grows with the square of the sensitivity, their
Proposition 1.9). Partitions still cost the maximum (disjoint parts: a record is in
one). Transformations that combine two protected tables, and random samples, are refused in
zCDP mode: their PINQ charges add the sides' costs, which under zCDP would undercharge (the
sensitivities add before they are squared).

Durable budgets: ``Queryable(df, budget, ledger=path_or_Ledger, source="name")`` keeps the root
budget in an SQLite ledger (:mod:`.durable`): every aggregation's charge commits there before the
answer is computed, and processes sharing the file never overspend together.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, overload

import pandas as pd

from dprivacy.errors import ValidationError
from dprivacy.tables import aggregations as agg
from dprivacy.tables.budgets.agents import (
    Agent,
    BinaryAgent,
    BudgetAgent,
    PartitionAgent,
    UnaryAgent,
    charge,
    cost,
)
from dprivacy.tables.budgets.durable import LedgerBudgetAgent
from dprivacy.tables.budgets.ledger import Ledger
from dprivacy.tables.dx import PinqHistogram
from dprivacy.tables.grouped import GroupedTable
from dprivacy.tables.params import count_arg, eps_arg, real
from dprivacy.tables.queries import NoisyQueries
from dprivacy.tables.randomness import NoiseSource
from dprivacy.tables.relations.dispatch import (
    duckdb_relation,
    is_expression,
    is_pandas,
    relation_for,
)
from dprivacy.tables.relations.protocol import Relation
from dprivacy.tables.relations.rowwise import sealed
from dprivacy.tables.transform_args import (
    column_list,
    group_aggs,
    partition_keys,
    same_columns,
    select_exprs,
    select_many_columns,
)

__all__ = ["Queryable"]


@sealed
class Queryable(NoisyQueries):
    """A PINQ protected table.

    Parameters:
        data: the sensitive records: a pandas DataFrame (backend "pandas"), or a Parquet path,
            DuckDB relation, Ibis table or Spark DataFrame (backends "duckdb" / "spark").
        budget: the global privacy budget B >= 0 of this data source. With a ledger it is the
            *initial* budget, used only when the source is new to the ledger; when the source
            exists, the stored budget wins: pass None (or the same initial B) to continue.
        ledger: None (default): the budget lives in this object only. A
            :class:`~dprivacy.tables.Ledger` or the path of its SQLite file: the budget is
            durable and shared by every process and run that opens the file.
        source: the name of the data source in the ledger (its budget record ``pinq:<source>``;
            ``pinq:zcdp:<source>`` in zCDP mode).
        rho: instead of ``budget``: a zCDP budget (zCDP mode, see the module doc).
        backend: "pandas", "duckdb", "spark" or None (pandas for a DataFrame, else the engine).
        noise_seed: data owner's setting, None (default) for secure noise; an int makes the
            noise reproducible (simulations only: not floating-point-safe, and whoever knows the
            seed knows the noise). Never hand a seeded table to an untrusted analyst.

    Examples:
        >>> t = Queryable(pd.DataFrame({"age": [10, 20, 30]}), budget=1.0)
        >>> adults = t.where(lambda r: r["age"] > 17)
        >>> _ = adults.noisy_count(eps=0.5)
        >>> t.remaining_budget()
        0.5
    """

    def __init__(
        self, data: Any, budget: float | None = None, *,
        ledger: Ledger | str | os.PathLike | None = None, source: str = "default",
        backend: str | None = None, noise_seed: int | None = None, rho: float | None = None,
    ) -> None:
        noise = NoiseSource(noise_seed)
        root: BudgetAgent
        zcdp = rho is not None
        if zcdp and budget is not None:
            raise ValidationError("give budget= (pure ε) or rho= (zCDP), not both")
        if zcdp:
            budget = real(rho, "rho")
            if not budget > 0:
                raise ValidationError(f"rho = {rho!r}: a zCDP budget is a finite number > 0")
        if ledger is None:
            if budget is None:
                raise ValidationError("budget is required (or pass ledger= to continue a stored "
                                      "source's budget)")
            root = BudgetAgent(budget)
        else:
            if not isinstance(source, str) or not source:
                raise ValidationError(f"source = {source!r}: expected a non-empty string")
            root = LedgerBudgetAgent(ledger, f"zcdp:{source}" if zcdp else source, budget)
        root.notion = "zcdp" if zcdp else "pure"
        self._rel: Relation = relation_for(data, backend)
        # a pandas frame without a backend moves to DuckDB when the analyst writes expressions
        self._frame = data if backend is None and is_pandas(self._rel) else None
        self._agent: Agent = root
        self._roots: list[BudgetAgent] = [root]
        self._noise = noise

    @classmethod
    def _derive(cls, rel: Relation, agent: Agent, roots: list[BudgetAgent],
                noise: NoiseSource) -> Queryable:
        q = cls.__new__(cls)
        q._rel, q._agent, q._roots, q._noise = rel, agent, roots, noise
        q._frame = None
        return q

    def _for(self, *code: Any) -> Relation:
        """The relation the analyst's ``code`` runs on: this table's, or for a pandas frame
        opened without a backend, its zero-copy DuckDB relation when the code is Ibis
        expressions (the choice depends on the code's type only)."""
        if self._frame is not None and any(is_expression(f) for f in code):
            return duckdb_relation(self._frame)
        return self._rel

    @property
    def _df(self) -> pd.DataFrame:
        """The records of a pandas table (tests and the data owner only)."""
        return self._rel.df  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ budget, public facts
    def remaining_budget(self) -> float | list[float]:
        """The remaining budget of the source (a list if the table mixes several sources)."""
        vals = [r.remaining for r in self._roots]
        return vals[0] if len(vals) == 1 else vals

    def last_query_id(self) -> int | None | list[int | None]:
        """The ledger's query id of the last committed charge to the source (None for an
        in-memory budget or before any charge; a list if the table mixes several sources)."""
        vals = [getattr(r, "last_query_id", None) for r in self._roots]
        return vals[0] if len(vals) == 1 else vals

    @property
    def zcdp(self) -> bool:
        """True in zCDP mode (the budget is a rho; see the module doc)."""
        return any(getattr(r, "notion", "pure") == "zcdp" for r in self._roots)

    def _charge_of(self, eps: float) -> float:
        """What an ε-DP answer is charged: ε, or ε²/2 in zCDP mode."""
        return eps * eps / 2.0 if self.zcdp else eps

    def cost(self, eps: float) -> float:
        """Total budget an ε-query on this table would take now (``tv ? s`` of FW-PINQ Fig. 4;
        in zCDP mode the rho of it: s² ε²/2)."""
        return cost(self._agent, self._charge_of(eps_arg(eps)), self._roots)

    def _pay_then(self, eps: float, plan: agg.Plan) -> Any:
        charge(self._agent, self._charge_of(eps))
        return plan(self._rel, self._noise)

    def _pay_pure(self, eps: float) -> None:
        """Charge an ε-DP release computed elsewhere (d_X histograms): ε, or ε²/2 in zCDP mode."""
        charge(self._agent, self._charge_of(eps))

    # ------------------------------------------------------------------ zCDP (Gaussian) queries
    def _zcdp_only(self, what: str) -> None:
        if not self.zcdp:
            raise ValidationError(f"{what} adds Gaussian noise and is charged a zCDP rho: open "
                                  "the table in zCDP mode, Queryable(data, rho=R)")

    def gaussian_count(self, rho: float) -> float:
        """|T| + exact discrete Gaussian noise of sigma = 1/sqrt(2 rho) (zCDP mode; charged
        rho, times s² on a table of stability s).

        Examples:
            >>> t = Queryable(pd.DataFrame({"age": [10, 20, 30]}), rho=1.0)
            >>> _ = t.where(lambda r: r["age"] > 17).gaussian_count(rho=0.25)
            >>> t.remaining_budget()
            0.75
        """
        self._zcdp_only("gaussian_count")
        r, plan = agg.gaussian_count_plan(rho)
        charge(self._agent, r)
        return plan(self._rel, self._noise)

    def gaussian_sum(self, rho: float, f: Any = None, lo: float = -1.0, hi: float = 1.0) -> float:
        """Σ clamp(f(x), lo, hi) + N(0, sigma²), sigma = max(|lo|, |hi|)/sqrt(2 rho) (zCDP mode;
        OpenDP's floating-point-safe Gaussian; charged rho, times s² on a table of stability s).
        ``f`` as for :meth:`noisy_sum`."""
        self._zcdp_only("gaussian_sum")
        r, plan = agg.gaussian_sum_plan(rho, self._value(f), lo, hi)
        charge(self._agent, r)
        return plan(self._rel, self._noise)

    # ------------------------------------------------------------------ unary transformations
    def _unary(self, rel: Relation, stability: float) -> Queryable:
        if self.zcdp:  # zCDP grows with the square of the sensitivity
            stability = stability * stability
        agent = self._agent if stability == 1 else UnaryAgent(self._agent, stability)
        return Queryable._derive(rel, agent, self._roots, self._noise)

    def where(self, f: Any) -> Queryable:
        """Records for which the row-wise predicate holds (exactly True). Stability 1."""
        rel = self._for(f)
        rel.check(f)
        return self._unary(rel.where(f), 1)

    def select(self, f: Any = None, /, **named: Any) -> Queryable:
        """One output record per record: ``select(f)`` gives the column ``value``,
        ``select(a=f, b=g)`` the columns a, b. A function that raises gives None. Stability 1."""
        rel = self._for(f, *named.values())
        exprs = select_exprs(f, named, rel.check)
        return self._unary(rel.select(exprs), 1)

    def select_many(self, k: int, f: Any, columns: Sequence[str] | None = None) -> Queryable:
        """Flat-map: ``f(record)`` returns a list; at most the first ``k`` items are kept, each
        a row (column ``value``, or ``columns`` for tuple items). Stability k."""
        k = count_arg(k, "k", 1)
        rel = self._for(f)
        rel.check(f)
        return self._unary(rel.select_many(k, f, select_many_columns(columns)), k)

    @overload
    def group_by(self, key: Any = None, *, keys: None = None, column: None = None,
                 **aggs: tuple[str, str]) -> Queryable: ...

    @overload
    def group_by(self, key: Any = None, *, keys: Iterable[Hashable], column: Any = None
                 ) -> GroupedTable: ...

    def group_by(self, key: Any = None, *, keys: Iterable[Hashable] | None = None,
                 column: Any = None, **aggs: tuple[str, str]) -> Queryable | GroupedTable:
        """One record per group: the key column(s) (or ``key`` for a row-wise key function),
        ``count`` and named aggregations ``name=(column, "sum"|"mean"|"min"|"max")`` of the
        column's numeric values. Stability 2 (one group out, one in).

        With ``keys=`` (a public key set) it is not a transformation but a
        :class:`~dprivacy.tables.grouped.GroupedTable`: ``group_by(keys=[...],
        column="zip").agg(eps, n=Count(), ...)`` gives one noisy answer per listed key for ε
        in total (see :mod:`dprivacy.tables.grouped`)."""
        if keys is not None or column is not None:
            if aggs:
                raise ValidationError("group_by(keys=...): name the aggregations in .agg()")
            if key is not None and column is not None:
                raise ValidationError("group_by: give the key column once (key or column=)")
            return self._grouped(keys, column if column is not None else key)
        if key is None:
            raise ValidationError("group_by: give the key column(s) or a key function")
        keys_, key_fn = (None, key) if not isinstance(key, (str, list, tuple)) else (
            column_list(key, self.columns, "key"), None)
        rel = self._for(key_fn)
        if key_fn is not None:
            rel.check(key_fn)
        return self._unary(rel.group_by(keys_, key_fn, group_aggs(aggs, self.columns)), 2)

    def _grouped(self, keys: Iterable[Hashable] | None, column: Any) -> GroupedTable:
        rel = self._for(column)  # an expression key on a pandas frame runs in DuckDB
        t = self if rel is self._rel else Queryable._derive(rel, self._agent, self._roots,
                                                               self._noise)
        return NoisyQueries._grouped(t, keys, column)

    def distinct(self) -> Queryable:
        """Distinct records. Stability 1."""
        return self._unary(self._rel.distinct(), 1)

    def take(self, n: int) -> Queryable:
        """The first ``n`` records. Stability 2: prepending a record changes Take by 2."""
        return self._unary(self._rel.take(count_arg(n, "n")), 2)

    def skip(self, n: int) -> Queryable:
        """All but the first ``n`` records. Stability 2."""
        return self._unary(self._rel.skip(count_arg(n, "n")), 2)

    def partition(self, keys: Iterable[Hashable], f: Any) -> dict[Hashable, Queryable]:
        """Split by ``f`` (a column name or a row-wise key function) into the parts named by
        the explicit, data-independent ``keys``; records with an unlisted key are dropped. The
        parts share a max-agent: queries on different parts cost the maximum, not the sum
        (parallel composition)."""
        rel = self._for(f)
        klist = partition_keys(keys, f, self.columns, rel.check)
        parts = rel.partition(klist, f)
        shared = PartitionAgent(self._agent)
        return {k: Queryable._derive(r, shared.part(k), self._roots, self._noise)
                for k, r in zip(klist, parts, strict=True)}

    # ------------------------------------------------------------------ binary transformations
    def _pair(self, other: Queryable | pd.DataFrame) -> tuple[Relation, Relation, Agent | None,
                                                               list]:
        """(this table's relation, the other's, its agent, its roots) on one backend: a pandas
        frame opened without a backend joins a DuckDB table in DuckDB."""
        mine = self._rel
        if isinstance(other, Queryable) and other._rel.backend != mine.backend:
            if self._frame is not None and other._rel.backend == "duckdb":
                mine = duckdb_relation(self._frame)
            elif other._frame is not None and mine.backend == "duckdb":
                return mine, duckdb_relation(other._frame), other._agent, other._roots
        if isinstance(other, pd.DataFrame):
            return mine, mine.public(other), None, []
        orel, oa, orr = self._other(other)
        if orel.backend != mine.backend:
            raise ValidationError(f"cannot combine a {mine.backend} table with a {orel.backend} one")
        return mine, orel, oa, orr

    def _other(self, other: Queryable | pd.DataFrame) -> tuple[Relation, Agent | None, list]:
        if isinstance(other, Queryable):  # same backend: checked by _pair
            return other._rel, other._agent, other._roots
        if isinstance(other, pd.DataFrame):
            return self._rel.public(other), None, []  # a public literal table: no agent, no cost
        raise ValidationError(
            f"other is a {type(other).__name__}: expected a Queryable or a public DataFrame")

    def _binary(self, rel: Relation, other_agent: Agent | None, other_roots: list[BudgetAgent],
                c_self: float = 1, c_other: float = 1) -> Queryable:
        if other_agent is not None and (self.zcdp or any(
                getattr(r, "notion", "pure") == "zcdp" for r in other_roots)):
            raise ValidationError(
                "combining two protected tables is not available in zCDP mode: PINQ adds the "
                "two sides' charges, and under zCDP the sensitivities add before they are "
                "squared; query each table on its own (or join a public DataFrame)")
        if self.zcdp:
            c_self = c_self * c_self
        a = self._agent if c_self == 1 else UnaryAgent(self._agent, c_self)
        if other_agent is not None:
            b = other_agent if c_other == 1 else UnaryAgent(other_agent, c_other)
            a = BinaryAgent(a, b)
        roots = list(self._roots) + [r for r in other_roots if all(r is not s for s in self._roots)]
        return Queryable._derive(rel, a, roots, self._noise)

    def _setop(self, other: Queryable | pd.DataFrame, op: str) -> Queryable:
        mine, orel, oa, orr = self._pair(other)
        same_columns(self.columns, orel.columns, op)
        return self._binary(getattr(mine, op)(orel), oa, orr)

    def concat(self, other: Queryable | pd.DataFrame) -> Queryable:
        """Multiset union (all records of both; same columns). Stability (1, 1)."""
        return self._setop(other, "concat")

    def union(self, other: Queryable | pd.DataFrame) -> Queryable:
        """Set union (distinct records of either). Stability (1, 1)."""
        return self._setop(other, "union")

    def intersect(self, other: Queryable | pd.DataFrame) -> Queryable:
        """Distinct records present in both. Stability (1, 1)."""
        return self._setop(other, "intersect")

    def except_(self, other: Queryable | pd.DataFrame) -> Queryable:
        """Distinct records of self absent from other. Stability (1, 1)."""
        return self._setop(other, "except_")

    def join(self, other: Queryable | pd.DataFrame, bound: int | tuple[int, int],
             on: str | list[str], right_on: str | list[str] | None = None) -> Queryable:
        """Bounded equi-join: each side keeps at most ``bound`` records per key, then joins.

        Stability (2·bound_other, 2·bound_self) (PINQ.cs Join(bound1, bound2)): a new left
        record adds ≤ bound_other rows and may displace one kept record (≤ bound_other more).
        """
        b1, b2 = (bound, bound) if not isinstance(bound, tuple) else bound
        b1, b2 = count_arg(b1, "bound", 1), count_arg(b2, "bound", 1)
        mine, orel, oa, orr = self._pair(other)
        lk = column_list(on, self.columns, "on")
        rk = lk if right_on is None else column_list(right_on, orel.columns, "right_on")
        if right_on is None:
            column_list(on, orel.columns, "on")
        if len(lk) != len(rk):
            raise ValidationError("on and right_on must name the same number of columns")
        return self._binary(mine.join(orel, b1, b2, lk, rk), oa, orr,
                            c_self=2 * b2, c_other=2 * b1)

    # ------------------------------------------------------------------ d_X on tables
    def histogram(self, universe: Any, on_unknown: str = "drop") -> Any:
        """The table mapped onto ``universe`` as a protected histogram (see :mod:`.dx`)."""
        return PinqHistogram(self, universe, on_unknown)
