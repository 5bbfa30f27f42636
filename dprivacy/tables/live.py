"""Live data for ProPer tables: insert, delete, update and a user-defined refresh (POPL'15 §6.2
"Dynamic data" and §8; the Input rule of Fig. 3). These are the data owner's operations (pandas
backend), not the analyst's.

* ``insert`` is the Input rule of Fig. 3: new individuals get fresh ids (disjoint from every id
  the ledger has seen) and their own budget ℰ(r); earlier queries are 0-DP for them.
* ``delete`` removes records (a selection σ_¬p, or all records of given sources); budgets of the
  deleted sources stay in the ledger and are never given back.
* ``update`` is a per-record map on the matching records, keeping their provenance:
  ``f(record)`` returns a dict of new column values.
* ``set_refresh(f)`` / ``refresh()``: the prototype's ``SetRefresh``/``Refresh``. The paper says
  only that the user-defined function "is called by the client program each time Refresh() is
  called"; its example removes every record and inserts a new population with budget ε. Here
  ``f`` receives the table and changes it in place through the three operations above (its return
  value is ignored). A refresh never raises a budget: periodic budget increase (GUPT-style
  degradation, POPL'15 §7) is an idea the paper leaves outside the proven model, so it is not offered.

Privacy condition: each operation is an Input or an assignment tv := F(tv) with a ⊎-preserving F
(Fig. 3), which changes no budget, so ProPer Theorem 2 (ℰ-PDP) still holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.errors import UnknownRecordError, UnsupportedOperationError, ValidationError
from dprivacy.tables.budgets.ledger import to_units
from dprivacy.tables.relations import rowwise
from dprivacy.tables.relations.pandas_relation import PandasRelation
from dprivacy.tables.relations.pandas_values import as_frame

__all__ = ["LiveData"]


class LiveData:
    """Mixin of :class:`~dprivacy.tables.ProPerTable`: live-data operations on its state."""

    _rel: Any
    _ledger: Any
    _cache: dict[str, Any]
    _refresh: Callable[[Any], Any] | None = None

    def _live(self) -> PandasRelation:
        if not isinstance(self._rel, PandasRelation):
            raise UnsupportedOperationError(
                "insert/delete/update/refresh change the records in place: pandas backend only "
                "(on an engine, build a new ProPerTable on the changed source with id_column)")
        return self._rel

    def _set(self, df: pd.DataFrame, ids: np.ndarray) -> None:
        self._rel = PandasRelation(df.reset_index(drop=True), ids)
        self._cache = {}

    def insert(
        self, df: pd.DataFrame, budget: float | str | Sequence[float] | np.ndarray = 1.0, *,
        id_column: str | None = None, _existing: str = "raise",
    ) -> np.ndarray:
        """Add new individuals with fresh ids (or the stable ids of ``id_column``) and their own
        budgets; returns their ids."""
        rel = self._live()
        new = as_frame(df)
        n = len(new)
        if isinstance(budget, str):
            if budget not in new.columns:
                raise ValidationError(f"budget column {budget!r} is not in {list(new.columns)}")
            b = np.asarray(new[budget], dtype=float)
        else:
            b = np.asarray(budget, dtype=float)
            if b.ndim and b.shape != (n,):
                raise ValidationError(f"budget has shape {b.shape}: need a number or ({n},)")
        to_units(b, round_up=False)  # validates: finite and >= 0
        if id_column is None:
            ids = self._ledger.new_ids(n)
        else:
            if id_column not in new.columns:
                raise ValidationError(f"id_column {id_column!r} is not in {list(new.columns)}")
            ids = np.asarray(new[id_column])
            if n and (ids.dtype.kind not in "iu" or ids.min() < 0):
                raise ValidationError(f"id_column {id_column!r}: ids are non-negative integers")
            ids = ids.astype(np.int64)
        self._ledger.register(ids, b, existing=_existing, assume_unique=id_column is None)
        if len(rel.df) == 0:
            self._set(new, ids)
        else:
            self._set(pd.concat([rel.df, new], ignore_index=True),
                      np.concatenate([rel._all_ids(), ids]))
        return ids

    def delete(self, where: Callable[[Any], Any] | None = None, *, ids: Any = None) -> None:
        """Remove the records matching the per-record predicate ``where`` and/or derived from
        the source ``ids``."""
        rel = self._live()
        drop = np.zeros(len(rel.df), dtype=bool)
        if where is not None:
            drop |= rowwise.predicate_mask(rel.df, where)
        if ids is not None:
            a = np.asarray(ids, dtype=np.int64).reshape(-1)
            known = self._ledger.contains(a)
            if not known.all():
                raise UnknownRecordError(f"unknown record id {int(a[~known][0])}: nothing deleted")
            drop |= np.isin(rel._all_ids(), a)
        self._set(rel.df[~drop], rel._all_ids()[~drop])

    def update(self, f: Callable[[Any], Any], where: Callable[[Any], Any] | None = None) -> None:
        """Replace, in the records matching ``where`` (all if None), the columns named by the
        dict ``f(record)`` returns, keeping their provenance (a per-record map)."""
        rel = self._live()
        mask = np.ones(len(rel.df), bool) if where is None else rowwise.predicate_mask(rel.df,
                                                                                       where)
        df = rel.df.copy()
        cols = list(df.columns)
        pos = np.flatnonzero(mask)
        for i, r in zip(pos, rowwise.records(rel.df.iloc[pos]), strict=True):
            new = f(r)
            if not isinstance(new, dict) or not set(new) <= set(cols):
                raise ValidationError(f"update's f must return a dict of columns among {cols}")
            for c, v in new.items():
                df.iat[int(i), cols.index(c)] = v
        self._set(df, rel._all_ids())

    def set_refresh(self, f: Callable[[Any], Any]) -> None:
        """Store the user-defined refresh ``f(table)`` (the prototype's ``SetRefresh``)."""
        if not callable(f):
            raise ValidationError(f"set_refresh needs a callable f(table), got {type(f).__name__}")
        self._refresh = f

    def refresh(self) -> None:
        """Call the stored refresh function on this table (the prototype's ``Refresh``)."""
        if self._refresh is None:
            raise ValidationError("no refresh function: call set_refresh(f) first")
        self._refresh(self)
