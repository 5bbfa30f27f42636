"""PINQ and ProPer tables: global and personal budgets, provenance, a durable budget ledger.

See the spec ``PINQ_PROPER.md``: :class:`Queryable` (PINQ, one global budget and stability-tracked
transformations), :class:`ProPerTable` (personal budgets, affine provenance, silent dropping),
:class:`Ledger` / :class:`MemoryLedger` (budget stores), :mod:`.sampling` (Paper III),
:mod:`.live` (ProPer's insert/delete/update/refresh) and :mod:`.multiset` (the multiset and
multi-relation semantics of ProPer's provenance, spec §6.2).

Names are imported lazily (PEP 562), so a process that only needs the ledger (e.g. a worker
charging a shared SQLite file) does not pay for pandas and OpenDP.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Queryable": "pinq",
    "ProPerTable": "proper",
    "Ledger": "ledger",
    "MemoryLedger": "memory_ledger",
    "BudgetLedger": "ledger",
    "Charge": "ledger",
    "BudgetAgent": "agents",
    "LedgerBudgetAgent": "durable",
    "UnaryAgent": "agents",
    "SigmaAgent": "agents",
    "BinaryAgent": "agents",
    "PartitionAgent": "agents",
}

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"dprivacy.tables.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'dprivacy.tables' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
