"""ProPer: personal budgets with provenance and silent dropping (spec PINQ_PROPER.md §5, §6).

Every source record gets an id and its own budget ℰ(r) in a ledger. A derived record carries the
id of the one source record it comes from (affine provenance, Def. 5), or −1 (⊥) if it comes from
no individual (a public literal). Only unary union-preserving transformations keep provenance
(Theorem 1 and the table of §6.3): ``where``, ``select``, ``select_many``, ``concat`` (⊎), a
product or an equi-join with a *public* table, and removal of the records listed in a public table
(read as σ_{∉T}, the ⊎-preserving reading of A − T). Everything else goes through
:meth:`ProPerTable.as_pinq`.

Query rule (Fig. 3, Corollary 1): an ε-aggregation charges each source s the cost
C(s) = ε × (number of records with provenance s in the queried table). Sources with B(s) ≥ C(s)
pay; the others are not charged and their records are silently left out of the query's input;
⊥ records are always included. Nothing (no error, no flag) reveals that a budget is exhausted.

Privacy condition: the whole interaction is ℰ-PDP: for every record r, neighbouring runs with and
without r differ by a factor ≤ exp(ℰ(r)) (ProPer Theorem 2), because budgets never go below zero.

Transformations are eager: a derived table is a snapshot. ``insert``/``delete``/``update`` and a
user-defined ``refresh`` modify a table in place (live data, §6.6; :mod:`.live`); tables derived
earlier are unaffected (the C# prototype's lazy LINQ queries would see the new data).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NoReturn

import numpy as np
import pandas as pd

from dprivacy.errors import UnsupportedOperationError, ValidationError
from dprivacy.noise import Rng
from dprivacy.tables import aggregations as agg
from dprivacy.tables.agents import _check_eps
from dprivacy.tables.frames import (
    as_frame,
    key_array,
    mask_array,
    select_frame,
    select_many_frame,
    split_positions,
)
from dprivacy.tables.ledger import BudgetLedger, scalar_units
from dprivacy.tables.live import LiveData
from dprivacy.tables.memory_ledger import Account, MemoryLedger
from dprivacy.tables.pinq import Queryable

__all__ = ["ProPerTable"]

_UNTRACKABLE = (
    "ProPer tracks provenance only through unary union-preserving transformations (where, select, "
    "select_many, concat, product/join/exclude with a public table); {op} mixes records of "
    "several individuals or depends on order or multiplicity. Use as_pinq(eps) first."
)


class ProPerTable(LiveData):
    """A table of records with personal budgets and provenance (ProPer, POPL'15).

    Parameters:
        df: the source records, one individual each.
        budget: the initial budget ℰ(r): a number for all, a column name, or one value per row.
        ledger: where budgets live (default: a fresh :class:`MemoryLedger`); pass a
            :class:`~dprivacy.tables.Ledger` for durable budgets shared between processes.
        id_column: a column of non-negative integer record ids. Ids already in the ledger keep
            their stored budget (re-attaching to a durable ledger); new ones get ``budget``.
            Without it, fresh ids are drawn from the ledger.

    Examples:
        >>> p = ProPerTable(pd.DataFrame({"role": ["T", "M", "T"]}), budget=1.0)
        >>> _ = p.where(lambda d: d["role"] == "T").noisy_count(0.5, rng=0, secure=False)
    """

    def __init__(
        self, df: pd.DataFrame, budget: float | str | Sequence[float] | np.ndarray = 1.0, *,
        ledger: BudgetLedger | None = None, id_column: str | None = None,
    ) -> None:
        self._ledger = ledger if ledger is not None else MemoryLedger()
        self._df = as_frame(df)
        self._prov = np.empty(0, np.int64)
        self._unique = True
        # (mask of records with a source, whether all have one); a source table has no ⊥ record
        self._src: tuple[np.ndarray | None, bool] | None = (None, True)
        self._acct: Account | None = None
        self._id_offset: int | None = 0  # set while provenance is one run of consecutive ids
        self._df = self._df.iloc[0:0]
        self.insert(df, budget, id_column=id_column, _existing="keep")

    @classmethod
    def _derive(
        cls, df: pd.DataFrame, prov: np.ndarray, ledger: BudgetLedger, unique: bool
    ) -> ProPerTable:
        t = cls.__new__(cls)
        t._df = df.reset_index(drop=True)
        t._prov = prov
        t._ledger = ledger
        t._unique = unique
        t._src = None
        t._acct = None
        t._id_offset = None
        return t

    @property
    def ledger(self) -> BudgetLedger:
        """The budget store (the curator's object; never hand it to the analyst)."""
        return self._ledger

    @property
    def columns(self) -> list[Hashable]:
        """Column names (public schema)."""
        return list(self._df.columns)

    # ------------------------------------------------------------------ tracked transformations
    def _same(self, df: pd.DataFrame, prov: np.ndarray, unique: bool, *,
              subset: bool = True) -> ProPerTable:
        """A derived table; ``subset``: its records' sources are a sub-multiset of ours, so if
        all of ours have a source (no ⊥ record) so do its own."""
        t = ProPerTable._derive(df, prov, self._ledger, unique)
        if subset and self._src is not None and self._src[1]:
            t._src = (None, True)
        return t

    def where(self, f: Callable[[pd.DataFrame], Any]) -> ProPerTable:
        """σ_p: records satisfying the vectorised predicate; provenance kept."""
        m = mask_array(self._df, f)
        return self._same(self._df[m], self._prov[m], self._unique)

    def select(self, f: Callable[[pd.DataFrame], Any]) -> ProPerTable:
        """π / per-record map, one output per record; provenance kept."""
        return self._same(select_frame(self._df, f), self._prov, self._unique)

    def select_many(self, k: int, f: Callable[[pd.DataFrame], Any]) -> ProPerTable:
        """Flat-map (at most ``k`` outputs per record, as in PINQ); each output has its source's
        provenance, so a source with j outputs pays j·ε (Corollary 1)."""
        out, src = select_many_frame(self._df, k, f)
        return self._same(out, self._prov[src], self._unique and k == 1)

    def partition(
        self, keys: Iterable[Hashable], f: str | Callable[[pd.DataFrame], Any]
    ) -> dict[Hashable, ProPerTable]:
        """One ``where`` per key: by the selection principle (§5) the parts need no shared agent;
        a record pays only for the queries on its own part."""
        klist = list(keys)
        positions = split_positions(key_array(self._df, f), klist)
        off = self._id_offset  # provenance = arange(off, off + n): prov[pos] is pos + off
        return {k: self._same(self._df.iloc[pos], self._prov[pos] if off is None else
                              (pos if off == 0 else pos + off), self._unique)
                for k, pos in zip(klist, positions, strict=True)}

    def concat(self, other: ProPerTable | pd.DataFrame) -> ProPerTable:
        """Additive union ⊎ with another table of the same ledger, or with a public table (⊥)."""
        if isinstance(other, ProPerTable):
            if other._ledger is not self._ledger:
                raise ValidationError("concat: both tables must share one ledger (ids are per ledger)")
            odf, oprov = other._df, other._prov
        elif isinstance(other, pd.DataFrame):
            odf, oprov = as_frame(other), np.full(len(other), -1, np.int64)
        else:
            raise ValidationError(f"concat: expected a ProPerTable or a public DataFrame, got "
                                  f"{type(other).__name__}")
        return self._same(pd.concat([self._df, odf], ignore_index=True),
                          np.concatenate([self._prov, oprov]), False, subset=False)

    def product(self, public: pd.DataFrame) -> ProPerTable:
        """A_V × T with a public table T: each record yields |T| pairs with its provenance."""
        pub = as_frame(public)
        out = self._df.merge(pub, how="cross", suffixes=("", "_public"))
        return self._same(out, np.repeat(self._prov, len(pub)), self._unique and len(pub) <= 1)

    def join_public(
        self, public: pd.DataFrame, on: str | list[str], right_on: str | list[str] | None = None
    ) -> ProPerTable:
        """Equi-join with a public table (a product with T followed by a selection): each output
        row has the provenance of its one sensitive record."""
        pos = "__proper_pos__"
        left = self._df.assign(**{pos: np.arange(len(self._df))})
        out = left.merge(as_frame(public), how="inner", on=on if right_on is None else None,
                         left_on=None if right_on is None else on, right_on=right_on,
                         suffixes=("", "_public"))
        src = out.pop(pos).to_numpy()
        return self._same(out, self._prov[src], False)

    def exclude(self, public: pd.DataFrame, on: list[str] | None = None) -> ProPerTable:
        """Remove every record that occurs in the public table (σ_{∉T}; spec §6.3 caveat)."""
        cols = list(self._df.columns) if on is None else on
        key = pd.MultiIndex.from_frame(self._df[cols]) if len(cols) > 1 else self._df[cols[0]]
        pkey = pd.MultiIndex.from_frame(as_frame(public)[cols]) if len(cols) > 1 else public[cols[0]]
        keep = ~np.asarray(pd.Index(key).isin(pd.Index(pkey)))
        return self._same(self._df[keep], self._prov[keep], self._unique)

    def _untrackable(self, op: str) -> NoReturn:
        raise UnsupportedOperationError(_UNTRACKABLE.format(op=op))

    def group_by(self, *a: Any, **k: Any) -> NoReturn:
        """Not trackable (a group has many provenances): raises; use ``as_pinq(eps)``."""
        self._untrackable("group_by")

    def join(self, *a: Any, **k: Any) -> NoReturn:
        """Not trackable (two individuals per output, PINQuin's flaw): use ``join_public`` or
        ``as_pinq(eps)``."""
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
    def _eligible(self, eps: float) -> pd.DataFrame:
        """Charge every source ε × its record count; return the records that may be used."""
        _check_eps(eps)
        keep = self._pay(lambda counts: float(eps) * counts)
        return self._df if keep is None else self._df[keep]

    def _pay(self, cost_of: Callable[[np.ndarray], np.ndarray], per_record: np.ndarray | None = None
             ) -> np.ndarray | None:
        """Charge sources; ``cost_of(counts)`` gives costs from record counts, or ``per_record``
        gives each record's own cost (summed per source). Returns the keep mask (None = all)."""
        prov = self._prov
        if self._src is None:  # provenance of a snapshot never changes: compute once
            mask = prov >= 0
            self._src = (mask, bool(mask.all()))
        src, all_src = self._src
        ids = prov if all_src else prov[src]  # src is None only when all_src
        if per_record is None and self._unique:
            costs = cost_of(np.ones(1))[0]
            if isinstance(self._ledger, MemoryLedger):
                if self._acct is None:
                    self._acct = self._ledger.account(ids)
                ok = self._ledger.charge_account(self._acct, scalar_units(float(costs)))
                if ok is None:
                    return None
            else:
                ok = self._ledger.charge(ids, costs, assume_unique=True).ok
            okr = ok
        else:
            uniq, inv, counts = np.unique(ids, return_inverse=True, return_counts=True)
            if per_record is None:
                costs = cost_of(counts.astype(float))
            else:
                pr = per_record if all_src else per_record[src]
                costs = np.bincount(inv, weights=pr, minlength=uniq.size)
            ok = self._ledger.charge(uniq, costs, assume_unique=True).ok
            okr = ok[inv]
        if okr.all():
            return None
        keep = np.ones(len(prov), dtype=bool)
        if all_src:
            keep = okr
        else:
            keep[src] = okr
        return keep

    def as_pinq(self, eps: float) -> Queryable:
        """Charge each involved source ε × its records and return the payers' records (plus ⊥
        records) as a PINQ table with global budget ε (spec §6.7, Corollary 1)."""
        return Queryable(self._eligible(eps), budget=eps)

    def noisy_count(self, eps: float, *, rng: Rng = None, secure: bool = True) -> float:
        """|L| + Lap(1/ε) on the eligible records L."""
        return agg.count(self._eligible(eps), eps, rng=rng, secure=secure)

    def noisy_sum(self, eps: float, f: agg.ValueSpec = None, lo: float = -1.0, hi: float = 1.0,
                  *, rng: Rng = None, secure: bool = True) -> float:
        """Σ clamp(f(x), lo, hi) + Lap(max(|lo|,|hi|)/ε) on the eligible records."""
        agg.check_range(lo, hi)
        return agg.sum_(self._eligible(eps), eps, f, lo, hi, rng=rng, secure=secure)

    def noisy_average(self, eps: float, f: agg.ValueSpec = None, lo: float = -1.0,
                      hi: float = 1.0, *, rng: Rng = None, secure: bool = True) -> float:
        """Noisy average of clamp(f(x), lo, hi) on the eligible records."""
        agg.check_range(lo, hi)
        return agg.average(self._eligible(eps), eps, f, lo, hi, rng=rng, secure=secure)

    def noisy_median(self, eps: float, f: agg.ValueSpec = None, lo: float = 0.0, hi: float = 1.0,
                     *, rng: Rng = None, secure: bool = True) -> float:
        """Exponential-mechanism median of clamp(f(x), lo, hi) on the eligible records."""
        agg.check_range(lo, hi)
        return agg.order_statistic(self._eligible(eps), eps, 0.5, f, lo, hi, rng=rng,
                                   secure=secure)

    def exponential_mechanism(self, eps: float, candidates: Sequence[Any],
                              score: Callable[[pd.DataFrame], Any], *, rng: Rng = None,
                              secure: bool = True) -> Any:
        """Exponential mechanism (per-record scores in [0, 1]) on the eligible records."""
        if not list(candidates):
            raise ValidationError("candidates is empty: the exponential mechanism needs a range")
        return agg.exponential(self._eligible(eps), eps, candidates, score, rng=rng,
                               secure=secure)

    # ------------------------------------------------------------------ d_X on tables
    def histogram(self, universe: Any, on_unknown: str = "drop") -> Any:
        """The table mapped onto ``universe`` as a protected histogram (see :mod:`.dx`)."""
        from dprivacy.tables.dx import ProPerHistogram

        return ProPerHistogram(self, universe, on_unknown)

    def release(self, workload: Any, design: Any, universe: Any, *, metric: Any = None,
                rng: Rng = None, secure: bool = True) -> np.ndarray:
        """d_X Laplace release on the histogram of the records whose sources can pay their
        personal cost Σ_k u_k|F_ki| (see :meth:`dprivacy.tables.dx.ProPerHistogram.release`)."""
        return self.histogram(universe).release(workload, design, metric=metric, rng=rng,
                                                secure=secure)
