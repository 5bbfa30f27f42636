"""PINQ and ProPer tables: global and personal budgets, provenance, a durable budget ledger.

See the spec ``PINQ_PROPER.md``: :class:`Queryable` (PINQ, one global budget and stability-tracked
transformations), :class:`ProPerTable` (personal budgets, affine provenance, silent dropping),
:class:`Ledger` / :class:`MemoryLedger` (budget stores) and :mod:`.sampling` (Paper III).
"""

from dprivacy.tables.agents import (
    BinaryAgent,
    BudgetAgent,
    PartitionAgent,
    SigmaAgent,
    UnaryAgent,
)
from dprivacy.tables.ledger import BudgetLedger, Charge, Ledger, MemoryLedger
from dprivacy.tables.pinq import Queryable
from dprivacy.tables.proper import ProPerTable

__all__ = [
    "Queryable",
    "ProPerTable",
    "Ledger",
    "MemoryLedger",
    "BudgetLedger",
    "Charge",
    "BudgetAgent",
    "UnaryAgent",
    "SigmaAgent",
    "BinaryAgent",
    "PartitionAgent",
]
