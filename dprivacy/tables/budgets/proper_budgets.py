"""ProPer's Query rule on the pandas backend: personal budgets in a BudgetLedger.

:class:`LedgerBudgets` implements :class:`~dprivacy.tables.relations.protocol.PersonalBudgets` for a
:class:`~dprivacy.tables.relations.pandas_relation.PandasRelation` and a
:class:`~dprivacy.tables.budgets.ledger.BudgetLedger` (the in-memory :class:`MemoryLedger` or the durable
SQLite :class:`Ledger`). A query charges each source s the cost C(s) = ε × (its records in the
queried relation), or the sum of its records' element costs for a d_X release; the sources whose
budget covers C(s) pay, the charge is committed, and only then is the relation restricted to the
payers' records and the ⊥ records (POPL'15 Fig. 3, Corollary 1). Nothing raises or reveals who
could not pay; a cost too large to store saturates and simply cannot be paid.

Fast paths (same results): when every source has one record in the relation, the cost is one
number; with the memory ledger an :class:`~dprivacy.tables.budgets.memory_ledger.Account` defers the
debits while every budget of the relation covers them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dprivacy.tables.budgets.ledger import BudgetLedger, scalar_units
from dprivacy.tables.budgets.memory_ledger import MemoryLedger
from dprivacy.tables.relations.pandas_relation import PandasRelation
from dprivacy.tables.relations.protocol import ElementCosts

__all__ = ["LedgerBudgets"]


class LedgerBudgets:
    """Personal budgets of a pandas ProPer table, kept in ``ledger``."""

    def __init__(self, ledger: BudgetLedger) -> None:
        self.ledger = ledger

    def pay(self, rel: PandasRelation, eps: float, element_costs: ElementCosts | None = None,
            *, unique: bool = False, cache: dict[str, Any] | None = None) -> PandasRelation:
        """Charge, commit, and return the eligible records (see the module doc).

        ``unique``: the caller knows every source has at most one record in ``rel``.
        ``cache``: a dict owned by the (immutable) relation's table, for the fast paths.
        """
        keep = self._keep(rel, eps, element_costs, unique, {} if cache is None else cache)
        return rel if keep is None else rel.keep_mask(keep)

    def _keep(self, rel: PandasRelation, eps: float, element_costs: ElementCosts | None,
              unique: bool, cache: dict[str, Any]) -> np.ndarray | None:
        prov = rel._all_ids()
        if "src" not in cache:  # the ids of an immutable relation never change
            mask = prov >= 0
            cache["src"] = (mask, bool(mask.all()))
        src, all_src = cache["src"]
        ids = prov if all_src else prov[src]
        led = self.ledger
        if element_costs is None and unique:
            if isinstance(led, MemoryLedger):
                if "acct" not in cache:
                    cache["acct"] = led.account(ids)
                ok = led.charge_account(cache["acct"], scalar_units(eps))
                if ok is None:
                    return None
            else:
                ok = led.charge(ids, eps, assume_unique=True).ok
            okr = ok
        else:
            uniq, inv, counts = np.unique(ids, return_inverse=True, return_counts=True)
            costs: np.ndarray
            if element_costs is None:
                with np.errstate(over="ignore"):
                    costs = eps * counts.astype(float)
            else:
                per = rel.record_costs(element_costs)
                with np.errstate(over="ignore"):
                    costs = eps * np.bincount(inv, weights=per if all_src else per[src],
                                              minlength=uniq.size)
            ok = led.charge(uniq, costs, assume_unique=True).ok
            okr = ok[inv]
        if okr.all():
            return None
        if all_src:
            return okr
        keep = np.ones(len(prov), dtype=bool)
        keep[src] = okr
        return keep
