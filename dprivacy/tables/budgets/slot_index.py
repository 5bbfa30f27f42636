"""Person ids to slots for :class:`~dprivacy.tables.budgets.slot_store.SlotStore`.

A store keeps person ``ids[slot]`` in registration order. Looking ids up is the hot step of a
ProPer charge (a query selects millions of people), so :class:`SlotIndex` picks the cheapest
exact map for the store's ids, built once per set of ids (the store drops it when people are
added or the file is reloaded):

* *identity*: slot i holds id i (ids registered as 0, 1, 2, ... or drawn fresh from the
  store): an id is its own slot, no lookup at all;
* *dense*: the ids are non-negative and their largest is below ``4 n + 1024``: a direct table
  ``slot_of[id]`` (one gather per query);
* otherwise a hash index (:class:`pandas.Index`).

Each map is derived from the store's own ids, never from a source's row order, so it cannot go
stale when a source changes: an id that is not registered simply has no slot.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["SlotIndex"]

_DENSE_FACTOR, _DENSE_EXTRA = 4, 1024


class SlotIndex:
    """The slot of each registered person id (see the module doc).

    Parameters:
        ids: ``ids[slot]``, distinct int64 person ids (not copied: the store replaces, never
            mutates, its id array).
    """

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        n = int(ids.size)
        self.n = n
        self.identity = n == 0 or (int(ids[0]) == 0 and int(ids[-1]) == n - 1 and
                                   bool(np.all(np.diff(ids) == 1)))
        self._slot_of: np.ndarray | None = None
        self._hash: pd.Index | None = None
        if not self.identity:
            lo, hi = int(ids.min()), int(ids.max())
            if lo >= 0 and hi < _DENSE_FACTOR * n + _DENSE_EXTRA:
                self._slot_of = np.full(hi + 1, -1, dtype=np.int64)
                self._slot_of[ids] = np.arange(n, dtype=np.int64)
            else:
                self._hash = pd.Index(ids)

    @classmethod
    def range(cls, n: int) -> SlotIndex:
        """The identity map over ``n`` slots (person i in slot i), with its id array, built
        without checking (a snapshot records that its ids are 0, 1, ..., n - 1)."""
        out = cls.__new__(cls)
        out.ids, out.n, out.identity = np.arange(n, dtype=np.int64), n, True
        out._slot_of, out._hash = None, None
        return out

    def lookup(self, ids: np.ndarray, *, nonneg: bool = False) -> tuple[np.ndarray, bool]:
        """(the slot of each id, -1 if unknown; whether every id is known). ``nonneg``: the
        caller knows the ids are >= 0 (saves a pass)."""
        a = np.asarray(ids, dtype=np.int64)
        if a.size == 0:
            return a, True
        if self._hash is not None:
            out = np.asarray(self._hash.get_indexer(pd.Index(a)), dtype=np.int64)
            return out, bool(out.min() >= 0)
        size = self.n if self._slot_of is None else int(self._slot_of.size)
        inside = (nonneg or int(a.min()) >= 0) and int(a.max()) < size
        if self._slot_of is None:  # identity: the ids are the slots
            if inside:
                return a, True
            out = a.copy()
            out[(a < 0) | (a >= size)] = -1
            return out, False
        if inside:
            out = self._slot_of[a]
        else:
            out = np.full(a.size, -1, dtype=np.int64)
            ok = (a >= 0) & (a < size)
            out[ok] = self._slot_of[a[ok]]
        return out, bool(out.min() >= 0)
