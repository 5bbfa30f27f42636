"""Live data for ProPer tables: insert, delete, update and a user-defined refresh (spec
PINQ_PROPER.md §6.6, §6.7 "Dynamic data API"; 002 P-II §6.2).

* ``insert`` is the Input rule of Fig. 3: new individuals get fresh ids (disjoint from every id
  the ledger has seen) and their own budget ℰ(r); earlier queries are 0-DP for them.
* ``delete`` removes records (a selection σ_¬p, or all records of given sources); budgets of the
  deleted sources stay in the ledger and are never given back.
* ``update`` is a per-record map on the matching records, keeping their provenance.
* ``set_refresh(f)`` / ``refresh()``: the prototype's ``SetRefresh``/``Refresh``. The seed says
  only that the user-defined function "is called by the client program each time Refresh() is
  called"; its example removes every record and inserts a new population with budget ε. Here
  ``f`` receives the table and changes it in place through the three operations above (its return
  value is ignored). A refresh never raises a budget: periodic budget increase (GUPT-style
  degradation, P-II §7) is an idea the seed leaves outside the proven model, so it is not offered.

Privacy condition: each operation is an Input or an assignment tv := F(tv) with a ⊎-preserving F
(Fig. 3), which changes no budget, so ProPer Theorem 2 (ℰ-PDP) still holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables.frames import as_frame, mask_array, select_frame
from dprivacy.tables.ledger import BudgetLedger, to_units
from dprivacy.tables.memory_ledger import Account

__all__ = ["LiveData"]


class LiveData:
    """Mixin of :class:`~dprivacy.tables.ProPerTable`: live-data operations on its state."""

    _df: pd.DataFrame
    _prov: np.ndarray
    _ledger: BudgetLedger
    _src: tuple[np.ndarray | None, bool] | None
    _acct: Account | None
    _id_offset: int | None
    _refresh: Callable[[Any], Any] | None = None

    def insert(
        self, df: pd.DataFrame, budget: float | str | Sequence[float] | np.ndarray = 1.0, *,
        id_column: str | None = None, _existing: str = "raise",
    ) -> np.ndarray:
        """Add new individuals with fresh ids and their own budgets; returns their ids."""
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
        if len(self._df) == 0:
            self._df = new
        else:
            self._df = pd.concat([self._df, new], ignore_index=True)
        if self._id_offset is not None:
            start = int(ids[0]) - len(self._prov) if n else self._id_offset
            run = id_column is None and (len(self._prov) == 0 or start == self._id_offset)
            self._id_offset = start if run else None
        self._prov = np.concatenate([self._prov, ids]) if len(self._prov) else ids
        self._acct = None  # (inserted records have sources: _src stays as it was)
        if self._src is not None and not self._src[1]:
            self._src = None
        return ids

    def delete(
        self, where: Callable[[pd.DataFrame], Any] | None = None, *, ids: Any = None
    ) -> None:
        """Remove the records matching ``where`` and/or derived from the source ``ids``."""
        drop = np.zeros(len(self._df), dtype=bool)
        if where is not None:
            drop |= mask_array(self._df, where)
        if ids is not None:
            a = np.asarray(ids, dtype=np.int64).reshape(-1)
            known = self._ledger.contains(a)
            if not known.all():
                raise UnknownRecordError(f"unknown record id {int(a[~known][0])}: nothing deleted")
            drop |= np.isin(self._prov, a)
        self._df = self._df[~drop].reset_index(drop=True)
        self._prov = self._prov[~drop]
        self._acct, self._id_offset = None, None
        if self._src is not None and not self._src[1]:
            self._src = None

    def update(
        self, f: Callable[[pd.DataFrame], Any], where: Callable[[pd.DataFrame], Any] | None = None
    ) -> None:
        """Replace the records matching ``where`` (all if None) by ``f(records)``, one for one,
        keeping their provenance (a per-record map, like ``select``)."""
        mask = np.ones(len(self._df), bool) if where is None else mask_array(self._df, where)
        out = select_frame(self._df[mask].reset_index(drop=True), f)
        if list(out.columns) != list(self._df.columns):
            raise ValidationError(
                f"update must return the same columns {list(self._df.columns)}; got "
                f"{list(out.columns)}"
            )
        df = self._df.copy()
        for col in df.columns:
            df.loc[mask, col] = out[col].to_numpy()
        self._df = df

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
