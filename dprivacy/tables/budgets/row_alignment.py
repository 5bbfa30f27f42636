"""Budgets aligned with a source's row order: a where-chain's selection as one byte per row.

A ProPer query on a where-chain over a source (``table.where(p1).where(p2)...``) selects each
source row at most once. Instead of sending the selected rows' person ids out of the engine
(8 bytes per selected row, and the id column read), the engine can return the conjunction of
the predicates as one byte per source row, in the source's row order; the budget store then
needs the slot of each row, which :class:`RowAlignment` keeps per source: computed once, when
the source is registered (from the ids the registration read in row order), and *checked
before every query* against the source itself, so that a source changed since (rows added,
removed, reordered, ids rewritten) never has its charges land on the wrong people: then the
query takes the general path (the ids of its records).

What is checked, per kind of source:

* an Arrow table (immutable): the very object registered;
* a pandas frame: the same object, the same number of rows, and its id column equal to the one
  registered (one comparison over the column, about a tenth of a scan);
* anything else (Parquet files, database tables, Spark): not aligned (general path).

The engine must keep the rows in their order: DuckDB does unless ``preserve_insertion_order``
is switched off, which :meth:`RowAlignment.engine_keeps_order` asks the engine every time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ibis
import ibis.expr.operations as ops
import ibis.expr.types as ir
import numpy as np
import pandas as pd
import pyarrow as pa

from dprivacy.tables.budgets import slot_kernels
from dprivacy.tables.relations.engine.backends import DuckEngine

if TYPE_CHECKING:
    from dprivacy.tables.relations.engine.relation import IbisRelation

__all__ = ["RowAlignment", "mask_plan"]


class RowAlignment:
    """The slot of each row of one registered source (see the module doc).

    Parameters:
        root: the source's relation as registered (its plan is the root of where-chains).
        source: the object the rows come from (a pandas frame or an Arrow table).
        id_column: the frame's id column (None: the ids were drawn fresh into the Arrow table).
        slots: the slot of each row, in row order (all >= 0).
    """

    def __init__(self, root: IbisRelation, source: Any, id_column: str | None,
                 slots: np.ndarray) -> None:
        self.root = root
        self.op = root.table.op()
        self.source = source
        self.id_column = id_column
        self.n = int(slots.size)
        self.identity = bool(self.n == 0 or (int(slots[0]) == 0 and int(slots[-1]) == self.n - 1
                                             and bool(np.all(np.diff(slots) == 1))))
        self.slots = None if self.identity else slots
        self._ids: np.ndarray | None = None  # the frame's id column as registered
        ids = _frame_ids(source, id_column) if isinstance(source, pd.DataFrame) else None
        self._ranged = ids is not None and slot_kernels.same_ids(ids, None)  # 0, 1, 2, ...
        if ids is not None and not self._ranged:
            self._ids = ids.copy()

    @staticmethod
    def supported(source: Any, id_column: str | None) -> bool:
        """Whether rows of ``source`` can be aligned (an Arrow table, or a pandas frame whose
        id column is int64 without NULLs)."""
        if isinstance(source, pa.Table):
            return True
        return isinstance(source, pd.DataFrame) and _frame_ids(source, id_column) is not None

    def engine_keeps_order(self) -> bool:
        """Whether the engine (DuckDB) returns rows in their order (``preserve_insertion_order``
        on). Asks the engine: call from the thread that runs its queries."""
        eng = self.root.engine
        if not isinstance(eng, DuckEngine):
            return False
        try:
            keep = eng.execute("SELECT current_setting('preserve_insertion_order')").fetchall()
        except Exception:
            return False
        return bool(keep) and keep[0][0] is True

    def source_unchanged(self) -> bool:
        """Whether the source still has the rows and ids it had when registered (no engine
        call: may run beside a query)."""
        if isinstance(self.source, pa.Table):
            return self.source.num_rows == self.n
        cur = _frame_ids(self.source, self.id_column)
        if cur is None or cur.size != self.n or (self._ids is None and not self._ranged):
            return False
        return slot_kernels.same_ids(cur, None if self._ranged else self._ids)


def _frame_ids(df: pd.DataFrame, id_column: str | None) -> np.ndarray | None:
    if id_column is None or id_column not in df.columns:
        return None
    col = df[id_column]
    if not isinstance(col, pd.Series) or col.dtype != np.int64:
        return None
    return col.to_numpy()


def mask_plan(table: ir.Table, root: ir.Table) -> ir.Table | None:
    """For a plan ``root.filter(p1).filter(p2)...`` (one or more filters, nothing else), the plan
    of one column ``m``: 1 where every predicate holds, else 0 or NULL, one row per row of
    ``root`` in its order; None for any other plan."""
    op = table.op()
    root_op = root.op()
    preds: list[Any] = []
    while isinstance(op, ops.Filter):
        parent = op.parent
        for p in op.predicates:
            preds.append(p if parent == root_op else p.replace({parent: root_op}))
        op = parent
    if op != root_op or not preds:
        return None
    cond = ibis.and_(*[p.to_expr() for p in preds])
    return root.select(m=cond.cast("uint8"))
