"""In-memory personal budgets: a numpy int64 array indexed by record id, with deferred charges.

Privacy condition: as for every ledger, a record pays a cost only if its remaining budget covers
it, and no budget ever goes below zero (ProPer Theorem 2 needs exactly this).

**Accounts (the fast path of ProPer's Query rule).** A table whose records each come from a
different source (unique provenance) charges every source the same ε per query. An
:class:`Account` for that set of ids lets a run of queries on one table be charged in O(1):

* the first query reads the stored budgets of the ids once (one gather) and remembers their
  minimum ``m``; it may then *defer* charges while ``pending + cost ≤ m``, because every source's
  true budget (stored − pending) still covers the cost;
* any other operation on the ledger (another account, a plain charge, ``remaining``,
  ``register``) first *settles* every deferred charge into the array (one gather and scatter per
  account) and bumps a version number, which invalidates the remembered minima.

So the true budget of every id is always ``stored − pending of the one open account holding it``,
charges are never lost or doubled, and the answer of a query is released only after its charge
is recorded (deferred or written). Thread-safe: every public method holds the ledger's lock, so
threads charging the same budgets never overspend them. Not durable (use the SQLite ``Ledger``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables.budgets.ledger import (
    UNIT,
    BudgetLedger,
    Charge,
    budget_units,
    check_unique,
    cost_units,
    ids_array,
)

__all__ = ["MemoryLedger", "Account"]

_BIG = np.iinfo(np.int64).max
_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(f: _F) -> _F:
    """Method decorator: run under the ledger's re-entrant lock."""
    @functools.wraps(f)
    def wrapper(self: MemoryLedger, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return f(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class Account:
    """A fixed set of distinct, known record ids that are charged together (see module doc)."""

    __slots__ = ("ids", "pending", "version", "min_stored")

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.pending = 0  # units charged to every id but not yet written to the array
        self.version = -1  # ledger version at which min_stored was read
        self.min_stored = 0


class MemoryLedger(BudgetLedger):
    """Budgets in a numpy int64 array indexed by id (ids from :meth:`new_ids` are dense)."""

    def __init__(self) -> None:
        self._rem = np.zeros(0, dtype=np.int64)
        self._known = np.zeros(0, dtype=bool)
        self._next = 0
        self._version = 0
        self._open: list[Account] = []
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ deferred charges
    def _settle(self) -> None:
        """Write every deferred charge into the array (before any other read or write)."""
        if self._open:
            for acct in self._open:
                self._rem[acct.ids] -= acct.pending  # ids are distinct: gather, subtract, scatter
                acct.pending = 0
            self._open.clear()
            self._version += 1

    @_locked
    def account(self, ids: np.ndarray) -> Account:
        """An account for distinct known ids (checked here, once)."""
        a = ids_array(ids)
        self._check_known(a)
        return Account(a)

    @_locked
    def charge_account(self, acct: Account, cost: int) -> np.ndarray | None:
        """Charge ``cost`` units to every id of ``acct`` that can pay; None means all paid."""
        if acct.version == self._version and acct.pending + cost <= acct.min_stored:
            acct.pending += cost  # every true budget (stored − pending) covers the cost
            return None
        self._settle()
        rem = self._rem[acct.ids]
        low = int(rem.min()) if rem.size else _BIG
        if low >= cost:
            acct.pending, acct.min_stored, acct.version = cost, low, self._version
            self._open.append(acct)
            return None
        ok = rem >= cost
        self._rem[acct.ids[ok]] = rem[ok] - cost
        self._version += 1
        return ok

    # ------------------------------------------------------------------ the ledger interface
    @_locked
    def new_ids(self, n: int) -> np.ndarray:
        out = np.arange(self._next, self._next + int(n), dtype=np.int64)
        self._next += int(n)
        return out

    def _grow(self, size: int) -> None:
        if size > self._rem.size:
            if size > 4 * max(int(self._known.sum()), 1) + (1 << 22):
                raise ValidationError(
                    f"record id {size - 1} is too sparse for the in-memory ledger; use ids from "
                    "new_ids() or the SQLite Ledger"
                )
            new = max(size, 2 * self._rem.size)
            rem, known = np.zeros(new, np.int64), np.zeros(new, bool)  # calloc: lazy zero pages
            rem[: self._rem.size] = self._rem
            known[: self._known.size] = self._known
            self._rem, self._known = rem, known

    @_locked
    def register(
        self, ids: Any, budgets: Any, *, existing: str = "raise", assume_unique: bool = False
    ) -> None:
        a = ids_array(ids)
        b = budget_units(budgets, a.size)
        if not assume_unique:
            check_unique(a)
        if a.size == 0:
            return
        self._settle()
        lo, hi = int(a[0]), int(a[-1])
        if hi - lo == a.size - 1 and np.all(np.diff(a) == 1):  # a run of ids: slices, no fancy
            self._grow(hi + 1)
            if self._known[lo : hi + 1].any():
                if existing == "raise":
                    raise ValidationError("a record id is already registered: new records need "
                                          "fresh ids")
            else:
                self._rem[lo : hi + 1] = b
                self._known[lo : hi + 1] = True
                self._next = max(self._next, hi + 1)
                self._version += 1
                return
        self._grow(int(a.max()) + 1)
        old = self._known[a]
        if old.any() and existing == "raise":
            raise ValidationError(
                f"record id {int(a[old][0])} is already registered: new records need fresh ids"
            )
        self._rem[a[~old]] = b[~old]
        self._known[a] = True
        self._next = max(self._next, int(a.max()) + 1)
        self._version += 1

    def _check_known(self, a: np.ndarray) -> None:
        if a.size and (a.max() >= self._known.size or not self._known[a].all()):
            bad = a[(a >= self._known.size) | ~self._known[np.minimum(a, self._known.size - 1)]]
            raise UnknownRecordError(f"unknown record id {int(bad[0])}: nothing was charged")

    @_locked
    def charge(self, ids: Any, costs: Any, *, assume_unique: bool = False) -> Charge:
        a = ids_array(ids)
        c = cost_units(costs, a.size)
        if not assume_unique:
            check_unique(a)
        self._check_known(a)
        self._settle()
        rem = self._rem[a]
        ok = rem >= c
        self._rem[a[ok]] = rem[ok] - c[ok]
        self._version += 1
        return Charge(ok, None)

    @_locked
    def remaining(self, ids: Any) -> np.ndarray:
        a = ids_array(ids)
        self._check_known(a)
        self._settle()
        return self._rem[a] * UNIT

    @_locked
    def contains(self, ids: Any) -> np.ndarray:
        a = ids_array(ids)
        out = np.zeros(a.size, dtype=bool)
        inside = a < self._known.size
        out[inside] = self._known[a[inside]]
        return out
