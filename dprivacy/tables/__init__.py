"""PINQ and ProPer tables: global and personal budgets, provenance, a durable budget ledger.

Three places (see docs/architecture.md):

* the front-ends an analyst meets, at this level: :class:`Queryable` (PINQ: one global budget,
  stability-tracked transformations, :mod:`.pinq`), :class:`ProPerTable` (ProPer, POPL'15:
  personal budgets, provenance, silent dropping, :mod:`.proper`), the noisy queries they share
  (:mod:`.queries`, :mod:`.aggregations`), grouped aggregation over a public key set
  (:mod:`.grouped`: ``group_by(keys=..., column=...).agg(eps, n=Count(), ...)``), d_X
  histogram releases (:mod:`.dx`), sampling with probabilistic stability (PST'16,
  :mod:`.sampling`) and ProPer's live data (:mod:`.live`);
* :mod:`.relations`, where the records live: the :class:`Relation` protocol, pandas in memory
  (analyst code is a Python callable of one record) or DuckDB / Spark through Ibis
  (:mod:`.relations.engine`; analyst code is a row-wise Ibis expression);
* :mod:`.budgets`, where budgets live: the ledger protocol and its stores (:class:`Ledger` on
  SQLite, :class:`MemoryLedger`, the engine's budget table) and PINQ's budget agents.

Noise comes from OpenDP's secure samplers unless the data owner fixes ``noise_seed``
(:mod:`.randomness`). Names are imported lazily (PEP 562), so a process that only needs the
ledger (e.g. a worker charging a shared SQLite file) does not pay for pandas and OpenDP.

**What in-process Python cannot guarantee.** These classes are for simulations and trusted
analysts. They run analyst functions only after the charge and map every failure (any
exception, BaseException included, or an overrun of :data:`.relations.overrun.CALL_TIME_LIMIT`) to a
documented default, lock budgets against threads and give no attribute returning a ProPer ledger;
but code running in the same process can still reach the records and budgets by introspection
(private attributes, frames, the garbage collector, the shared DuckDB connection or Spark
session), by pickling or copying a table, and can measure how long queries take, which depends
on the records. For analysts you do not trust use the service (``dprivacy serve`` and
:mod:`dprivacy.remote`, docs/service.md), which keeps the data in another process.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Queryable": "pinq",
    "ProPerTable": "proper",
    "Ledger": "budgets.ledger",
    "MemoryLedger": "budgets.memory_ledger",
    "BudgetLedger": "budgets.ledger",
    "Charge": "budgets.ledger",
    "BudgetAgent": "budgets.agents",
    "LedgerBudgetAgent": "budgets.durable",
    "UnaryAgent": "budgets.agents",
    "SigmaAgent": "budgets.agents",
    "BinaryAgent": "budgets.agents",
    "PartitionAgent": "budgets.agents",
    "NoiseSource": "randomness",
    "GroupedTable": "grouped",
    "Count": "grouped",
    "Sum": "grouped",
    "Mean": "grouped",
    "Relation": "relations.protocol",
    "PersonalBudgets": "relations.protocol",
    "PandasRelation": "relations.pandas_relation",
    "Record": "relations.rowwise",
}

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"dprivacy.tables.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'dprivacy.tables' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
