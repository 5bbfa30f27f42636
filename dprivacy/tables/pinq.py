"""PINQ: a protected pandas table behind one global budget (spec PINQ_PROPER.md §2, §3).

A :class:`Queryable` wraps a DataFrame; data leaves it only through noisy aggregations. Every
transformation returns a new Queryable whose budget agent scales the charge by the
transformation's stability (spec §2.2): Where/Select 1, SelectMany(k) k, GroupBy 2, bounded Join
2·bound of the other side, Concat/Union/Intersect/Except 1 per protected input, Distinct 1,
Partition = max over the parts (keys given explicitly), Take/Skip 2 (not PINQ's 1: spec §4, the
Take attack). An aggregation of accuracy ε on a table with scaling factor s costs s·ε (FW-PINQ
Fig. 1, P-III §3, "ε·Π stability(T_i) along the chain").

Privacy condition: every answer is ε-DP for its own ε, and the root budget B only pays queries
with s·ε ≤ remaining; a query that cannot be paid raises :class:`BudgetExceededError` before
anything is computed or charged (Query⊥ of FW-PINQ; safe because budgets and scales do not
depend on the data, P-I §7).

Durable budgets: ``Queryable(df, budget, ledger=path_or_Ledger, source="name")`` keeps the root
budget in an SQLite ledger (:mod:`.durable`): every aggregation's charge commits there before the
answer is computed, a re-opened process continues with what is left, and processes sharing the
file never overspend together.

Functions passed to transformations are vectorised, as with ``DataFrame.loc[callable]``: they
receive the whole frame and return a boolean mask (Where), a frame/series/array with one row per
record (Select), or a frame whose index labels are the source rows' labels (SelectMany). Side
effects in them are outside the model (spec §4, F7).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.errors import ValidationError
from dprivacy.noise import Rng
from dprivacy.tables import aggregations as agg
from dprivacy.tables.agents import (
    Agent,
    BinaryAgent,
    BudgetAgent,
    PartitionAgent,
    UnaryAgent,
    charge,
    cost,
)
from dprivacy.tables.durable import LedgerBudgetAgent
from dprivacy.tables.frames import (
    as_frame,
    key_array,
    mask_array,
    select_frame,
    select_many_frame,
    split_positions,
)
from dprivacy.tables.ledger import Ledger

__all__ = ["Queryable"]


class Queryable:
    """A PINQ protected table.

    Parameters:
        df: the sensitive records (one row each); the frame is not copied.
        budget: the global privacy budget B >= 0 of this data source. With a ledger it is the
            *initial* budget, used only when the source is new to the ledger; when the source
            exists, the stored budget wins: pass None (or the same initial B) to continue with
            what is left; a different B raises :class:`ValidationError`.
        ledger: None (default): the budget lives in this object only and is lost with the
            process. A :class:`~dprivacy.tables.Ledger` or the path of its SQLite file: the
            budget is durable and shared by every process and run that opens the file.
        source: the name of the data source in the ledger (its budget record ``pinq:<source>``).

    Examples:
        >>> t = Queryable(pd.DataFrame({"age": [10, 20, 30]}), budget=1.0)
        >>> adults = t.where(lambda d: d["age"] > 17)
        >>> _ = adults.noisy_count(eps=0.5, rng=0, secure=False)
        >>> t.remaining_budget()
        0.5
    """

    def __init__(
        self, df: pd.DataFrame, budget: float | None = None, *,
        ledger: Ledger | str | os.PathLike | None = None, source: str = "default",
    ) -> None:
        root: BudgetAgent
        if ledger is None:
            if budget is None:
                raise ValidationError("budget is required (or pass ledger= to continue a stored "
                                      "source's budget)")
            root = BudgetAgent(budget)
        else:
            root = LedgerBudgetAgent(ledger, source, budget)
        self._df = as_frame(df)
        self._agent: Agent = root
        self._roots: list[BudgetAgent] = [root]

    @classmethod
    def _derive(cls, df: pd.DataFrame, agent: Agent, roots: list[BudgetAgent]) -> Queryable:
        q = cls.__new__(cls)
        q._df = df.reset_index(drop=True)
        q._agent = agent
        q._roots = roots
        return q

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

    def cost(self, eps: float) -> float:
        """Total budget an ε-query on this table would take now (``tv ? s`` of P-I Fig. 4)."""
        return cost(self._agent, eps, self._roots)

    @property
    def columns(self) -> list[Hashable]:
        """Column names (schema is public, as in PINQ's typed records)."""
        return list(self._df.columns)

    # ------------------------------------------------------------------ unary transformations
    def _unary(self, df: pd.DataFrame, stability: float) -> Queryable:
        agent = self._agent if stability == 1 else UnaryAgent(self._agent, stability)
        return Queryable._derive(df, agent, self._roots)

    def where(self, f: Callable[[pd.DataFrame], Any]) -> Queryable:
        """Records for which the vectorised predicate holds. Stability 1."""
        return self._unary(self._df[mask_array(self._df, f)], 1)

    def select(self, f: Callable[[pd.DataFrame], Any]) -> Queryable:
        """One output row per record, ``f(df)``. Stability 1."""
        return self._unary(select_frame(self._df, f), 1)

    def select_many(self, k: int, f: Callable[[pd.DataFrame], Any]) -> Queryable:
        """Flat-map keeping at most the first ``k`` outputs per record. Stability k."""
        out, _ = select_many_frame(self._df, k, f)
        return self._unary(out, k)

    def group_by(
        self, key: str | Sequence[str] | Callable[[pd.DataFrame], Any], **aggs: Any
    ) -> Queryable:
        """One record per group: the key column(s), ``count`` and any named pandas aggregations
        ``aggs`` (e.g. ``mean_age=("age", "mean")``). Stability 2 (one group out, one in)."""
        if callable(key):
            keys: Any = pd.Series(key_array(self._df, key), name="key")
        else:
            keys = key
        g = self._df.groupby(keys, sort=True, dropna=False)
        out = g.size().rename("count").to_frame()
        if aggs:
            out = out.join(g.agg(**aggs))
        return self._unary(out.reset_index(), 2)

    def distinct(self) -> Queryable:
        """Distinct records. Stability 1."""
        return self._unary(self._df.drop_duplicates(), 1)

    def take(self, n: int) -> Queryable:
        """The first ``n`` records. Stability 2: prepending a record changes Take by 2 (spec §4)."""
        return self._unary(self._df.iloc[: _count_arg(n, "n")], 2)

    def skip(self, n: int) -> Queryable:
        """All but the first ``n`` records. Stability 2 (spec §4)."""
        return self._unary(self._df.iloc[_count_arg(n, "n") :], 2)

    def partition(
        self, keys: Iterable[Hashable], f: str | Callable[[pd.DataFrame], Any]
    ) -> dict[Hashable, Queryable]:
        """Split by ``f`` into the parts named by the explicit, data-independent ``keys``.

        Records whose key is not listed are dropped. The parts share a max-agent: queries on
        different parts cost the maximum, not the sum (parallel composition, P-III Thm 3).
        """
        klist = list(keys)
        positions = split_positions(key_array(self._df, f), klist)
        shared = PartitionAgent(self._agent)
        return {
            k: Queryable._derive(self._df.iloc[pos], shared.part(k), self._roots)
            for k, pos in zip(klist, positions, strict=True)
        }

    # ------------------------------------------------------------------ binary transformations
    def _other(self, other: Queryable | pd.DataFrame) -> tuple[pd.DataFrame, Agent | None, list]:
        if isinstance(other, Queryable):
            return other._df, other._agent, other._roots
        if isinstance(other, pd.DataFrame):
            return as_frame(other), None, []  # a public literal table: no agent, no cost
        raise ValidationError(
            f"other is a {type(other).__name__}: expected a Queryable or a public DataFrame"
        )

    def _binary(
        self, df: pd.DataFrame, other_agent: Agent | None, other_roots: list[BudgetAgent],
        c_self: float = 1, c_other: float = 1,
    ) -> Queryable:
        a = self._agent if c_self == 1 else UnaryAgent(self._agent, c_self)
        if other_agent is not None:
            b = other_agent if c_other == 1 else UnaryAgent(other_agent, c_other)
            a = BinaryAgent(a, b)
        roots = list(self._roots) + [r for r in other_roots if all(r is not s for s in self._roots)]
        return Queryable._derive(df, a, roots)

    def concat(self, other: Queryable | pd.DataFrame) -> Queryable:
        """Multiset union (all records of both). Stability (1, 1)."""
        odf, oa, orr = self._other(other)
        return self._binary(pd.concat([self._df, odf], ignore_index=True), oa, orr)

    def union(self, other: Queryable | pd.DataFrame) -> Queryable:
        """Set union (distinct records of either). Stability (1, 1)."""
        odf, oa, orr = self._other(other)
        return self._binary(pd.concat([self._df, odf], ignore_index=True).drop_duplicates(), oa, orr)

    def intersect(self, other: Queryable | pd.DataFrame) -> Queryable:
        """Distinct records present in both. Stability (1, 1)."""
        odf, oa, orr = self._other(other)
        left = self._df.drop_duplicates()
        out = left.merge(odf.drop_duplicates(), how="inner", on=list(left.columns))
        return self._binary(out, oa, orr)

    def except_(self, other: Queryable | pd.DataFrame) -> Queryable:
        """Distinct records of self absent from other. Stability (1, 1)."""
        odf, oa, orr = self._other(other)
        left = self._df.drop_duplicates()
        m = left.merge(odf.drop_duplicates(), how="left", on=list(left.columns), indicator=True)
        out = m[m["_merge"] == "left_only"].drop(columns="_merge")
        return self._binary(out, oa, orr)

    def join(
        self, other: Queryable | pd.DataFrame, bound: int | tuple[int, int], on: str | list[str],
        right_on: str | list[str] | None = None,
    ) -> Queryable:
        """Bounded equi-join: each side keeps its first ``bound`` records per key, then joins.

        Stability (2·bound_other, 2·bound_self) (PINQ.cs Join(bound1, bound2), spec §2.2): a new
        left record adds ≤ bound_other rows and may displace one kept record (≤ bound_other more).
        """
        b1, b2 = (bound, bound) if isinstance(bound, (int, np.integer)) else bound
        b1, b2 = _count_arg(b1, "bound", 1), _count_arg(b2, "bound", 1)
        odf, oa, orr = self._other(other)
        lk = [on] if isinstance(on, str) else list(on)
        rk = lk if right_on is None else ([right_on] if isinstance(right_on, str) else right_on)
        left = self._df[self._df.groupby(lk, sort=False, dropna=False).cumcount() < b1]
        right = odf[odf.groupby(rk, sort=False, dropna=False).cumcount() < b2]
        out = left.merge(right, how="inner", left_on=lk, right_on=rk, suffixes=("", "_right"))
        return self._binary(out, oa, orr, c_self=2 * b2, c_other=2 * b1)

    # ------------------------------------------------------------------ aggregations
    def noisy_count(self, eps: float, *, rng: Rng = None, secure: bool = True) -> float:
        """|T| + Lap(1/ε); costs s·ε."""
        charge(self._agent, eps)
        return agg.count(self._df, eps, rng=rng, secure=secure)

    def noisy_sum(
        self, eps: float, f: agg.ValueSpec = None, lo: float = -1.0, hi: float = 1.0, *,
        rng: Rng = None, secure: bool = True,
    ) -> float:
        """Σ clamp(f(x), lo, hi) + Lap(max(|lo|,|hi|)/ε); costs s·ε."""
        agg.check_range(lo, hi)
        charge(self._agent, eps)
        return agg.sum_(self._df, eps, f, lo, hi, rng=rng, secure=secure)

    def noisy_average(
        self, eps: float, f: agg.ValueSpec = None, lo: float = -1.0, hi: float = 1.0, *,
        rng: Rng = None, secure: bool = True,
    ) -> float:
        """Average of clamp(f(x), lo, hi): noisy sum / noisy count at ε/2 each; costs s·ε."""
        agg.check_range(lo, hi)
        charge(self._agent, eps)
        return agg.average(self._df, eps, f, lo, hi, rng=rng, secure=secure)

    def noisy_order_statistic(
        self, eps: float, frac: float, f: agg.ValueSpec = None, lo: float = 0.0, hi: float = 1.0,
        *, rng: Rng = None, secure: bool = True,
    ) -> float:
        """Exponential-mechanism ``frac``-quantile of clamp(f(x), lo, hi); costs s·ε."""
        agg.check_range(lo, hi)
        if not 0 <= frac <= 1:
            raise ValidationError(f"frac = {frac}: need 0 <= frac <= 1")
        charge(self._agent, eps)
        return agg.order_statistic(self._df, eps, frac, f, lo, hi, rng=rng, secure=secure)

    def noisy_median(
        self, eps: float, f: agg.ValueSpec = None, lo: float = 0.0, hi: float = 1.0, *,
        rng: Rng = None, secure: bool = True,
    ) -> float:
        """``noisy_order_statistic(eps, 0.5, ...)``; costs s·ε."""
        return self.noisy_order_statistic(eps, 0.5, f, lo, hi, rng=rng, secure=secure)

    def exponential_mechanism(
        self, eps: float, candidates: Sequence[Any], score: Callable[[pd.DataFrame], Any], *,
        rng: Rng = None, secure: bool = True,
    ) -> Any:
        """A candidate r with probability ∝ exp(ε·Σ_x clamp(score(x, r), 0, 1)); costs s·ε.

        ``score(df)`` returns an array (records × candidates).
        """
        if not list(candidates):
            raise ValidationError("candidates is empty: the exponential mechanism needs a range")
        charge(self._agent, eps)
        return agg.exponential(self._df, eps, candidates, score, rng=rng, secure=secure)

    # ------------------------------------------------------------------ d_X on tables
    def histogram(self, universe: Any, on_unknown: str = "drop") -> Any:
        """The table mapped onto ``universe`` as a protected histogram (see :mod:`.dx`)."""
        from dprivacy.tables.dx import PinqHistogram

        return PinqHistogram(self, universe, on_unknown)

    def release(
        self, workload: Any, design: Any, universe: Any, *, metric: Any = None, rng: Rng = None,
        secure: bool = True,
    ) -> np.ndarray:
        """d_X Laplace release (w⊙F)x + Lap(1/β) of the table's histogram x; charges
        s·max_i Σ_k u_k|F_ki| (see :meth:`dprivacy.tables.dx.PinqHistogram.release`)."""
        return self.histogram(universe).release(workload, design, metric=metric, rng=rng,
                                                secure=secure)


def _count_arg(n: Any, name: str, minimum: int = 0) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < minimum:
        raise ValidationError(f"{name} = {n!r}: expected an integer >= {minimum}")
    return int(n)
