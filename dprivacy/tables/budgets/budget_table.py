"""ProPer's personal budgets for the engine backends, charged in about one scan.

:class:`BudgetTable` implements :class:`dprivacy.tables.relations.protocol.PersonalBudgets` for the engine
backends on a :class:`~dprivacy.tables.budgets.slot_store.SlotStore`: one budget per person, held
as an array (integers in units of 10⁻⁹ ε, costs rounded up, budgets down), made durable by a
compact per-query record of who paid (``BudgetTable("budgets.dpb")``; in memory with no path).

**The Query rule** (ProPer, POPL'15 Fig. 3) for a relation ``rel`` and accuracy ε: each source s
is charged C(s) = ε × (records of s in ``rel``) (or Σ element costs for a d_X release) if its
budget covers it; the charge is committed; only then is ``rel`` restricted to the payers'
records and the ⊥ records, on which the caller computes the aggregate. Nothing reveals who
could not pay. Per query:

1. ONE statement in the engine that holds the records: the ids of ``rel``'s records (a
   relation whose ids are structurally unique, e.g. a where/select chain over a source), or
   the per-source costs in one GROUP BY (several records per source, element costs);
2. in the driver, under the store's lock: each chunk of ids is charged by a kernel that debits
   every selected person whose budget covers the cost (compiled with numba when installed,
   else numpy; person ids ``0..n-1`` registered in order index the budgets directly, other
   ids go through a direct table or a hash index), then one record (the payers' bitmap) is
   appended and ``fsync``-ed: the commit;
3. the eligible relation keeps the payers' ids and the ⊥ records; for a unique relation the
   payers' count is known, so a count needs no further statement, and the payers' ids are
   materialised only if another aggregate needs them.

The statements and the work are the same whoever can pay: no path depends on exhausted budgets.
For Spark the ids travel to the driver, where the budgets live (see the Spark notes in the
docs).

Examples:
    >>> import pandas as pd
    >>> from ibis import _
    >>> from dprivacy.tables.budgets.engine_budgets import proper_budgets
    >>> from dprivacy.tables.relations.engine import relation_from
    >>> rel, budgets = proper_budgets(relation_from(pd.DataFrame({"age": [15, 30]}), "duckdb"),
    ...                               budget=1.0)
    >>> budgets.pay(rel.where(_.age > 17), 0.4).count()
    1
    >>> [round(float(x), 3) for x in budgets.remaining([0, 1])]
    [1.0, 0.6]
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ibis.expr.operations as ops
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables.budgets import slot_kernels
from dprivacy.tables.budgets.ledger import _MAX_UNITS, _PER_EPS, scalar_units
from dprivacy.tables.budgets.row_alignment import RowAlignment, mask_plan
from dprivacy.tables.budgets.slot_store import LedgerLockTimeout, RowsChanged, SlotStore

if TYPE_CHECKING:
    from dprivacy.tables.relations.engine.relation import IbisRelation
    from dprivacy.tables.relations.protocol import ElementCosts

__all__ = ["BudgetTable", "LedgerLockTimeout"]

_ALIGNED_SOURCES = 8  # row alignments kept per budget table (the most recently registered)
_MASK_PLANS = 256  # mask plans of where-chains kept per budget table


class BudgetTable:
    """Personal budgets of ProPer tables on engines (see the module doc).

    Parameters:
        path: the store's file (created if missing; durable, shared by processes); None keeps
            the budgets in memory, in this object only.
        timeout: seconds to wait for other processes' locks on the file.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, timeout: float = 60.0) -> None:
        self.path = None if path is None else os.fspath(path)
        self.store = SlotStore(self.path, timeout=timeout)
        self.timeout = float(timeout)
        self.last_query_id: int | None = None
        self._rows: dict[Any, RowAlignment] = {}  # root plan -> its rows' slots
        self._plans: dict[Any, tuple[RowAlignment, Any]] = {}  # where-chain -> its mask plan
        if self.store.size >= slot_kernels.JIT_MIN_SLOTS:
            slot_kernels.warm()  # compile the charge kernel now, not in the first query

    # ------------------------------------------------------------------ registration
    def register(self, ids_budgets: pa.Table, *, fresh: bool) -> None:
        """Add sources: an Arrow table with int64 ``id`` and float ``budget``. Known ids keep
        their stored budget (re-attaching to a durable store); ``fresh`` ids must be new."""
        ids_col = ids_budgets.column("id")
        if ids_col.null_count:
            raise ValidationError("the id column must hold distinct non-negative integers "
                                  "(one stable identity per individual)")
        ids = np.asarray(ids_col.to_numpy(zero_copy_only=False), dtype=np.int64)
        if ids.size and (ids.min() < 0 or not _distinct(ids)):
            raise ValidationError("the id column must hold distinct non-negative integers "
                                  "(one stable identity per individual)")
        b = pc.cast(ids_budgets.column("budget"), pa.float64(), safe=False)
        bud = np.asarray(b.to_numpy(zero_copy_only=False), dtype=float)
        with np.errstate(invalid="ignore", over="ignore"):
            units = np.nan_to_num(np.floor(bud * _PER_EPS + 1e-3), nan=0.0, posinf=_MAX_UNITS)
        units = np.clip(units, 0, _MAX_UNITS).astype(np.int64)
        with self.store.locked() as s:
            slots = s.slots_of(ids)
            new = slots < 0
            if fresh and not new.all():
                raise ValidationError("fresh ids are already registered")
            s.add(ids[new], units[new])
            large = s.size >= slot_kernels.JIT_MIN_SLOTS
        if large:
            slot_kernels.warm()  # compile the charge kernel now, not in the first query

    def new_ids(self, n: int) -> int:
        """Reserve ``n`` fresh ids; returns the first (they are first .. first + n - 1)."""
        with self.store.locked() as s:
            return s.reserve(int(n))

    # ------------------------------------------------------------------ the Query rule
    def pay(self, rel: IbisRelation, eps: float, element_costs: ElementCosts | None = None,
            *, label: str | None = None) -> IbisRelation:
        """Charge ``rel``'s sources for an ε-query, commit, return the payers' records (and ⊥).

        Never raises because of the data or the budgets (a cost too large to store saturates:
        that source cannot pay)."""
        from dprivacy.tables.budgets import engine_costs as costs

        units = scalar_units(float(eps))
        if element_costs is None and rel.unique:
            return self._pay_unique(rel, units, label)
        at = costs.per_source(rel, units, element_costs)
        ids, c = _ints(at, "id"), _ints(at, "c")
        with self.store.locked() as s:
            slots, known_all = s.lookup(ids, nonneg=True)
            if not known_all:  # never for registered sources: unknown ids cannot pay
                k = slots >= 0
                slots, ids = slots[k], ids[k]
                c = c[k]
            ok, after = _can_pay(s.remaining, slots, c)
            paid = slots[ok] if slots is ids else ids[ok]
            self.last_query_id = s.charge(slots, c, label, ok=ok, after=after)
        return rel.keep_ids(paid)

    def _pay_unique(self, rel: IbisRelation, units: int, label: str | None) -> IbisRelation:
        """The Query rule for a relation with at most one record per source: ONE statement (the
        records' ids, kept in the engine's chunks), then under the store's lock each chunk is
        charged by :func:`~dprivacy.tables.budgets.slot_kernels.charge_chunk` (the same work
        whoever pays) and the payers' bitmap is committed. The payers' count is the answer of
        a count; their ids are materialised only if a later plan needs them."""
        from dprivacy.tables.relations.engine.relation import PID

        t = rel.table
        aligned = self._aligned_rows(rel)
        if aligned is not None:
            out = self._pay_rows(rel, aligned[0], aligned[1], units, label)
            if out is not None:
                return out
        chunks = [_int_chunk(ch) for ch in rel.engine.column_chunks(t.select(id=t[PID]))]
        with self.store.locked() as s:
            bits, payers, bottom = s.charge_stream(chunks, units, label)
            self.last_query_id = s.next_query - 1
            ids = s.ids
        return self._kept(rel, ids, bits, payers, bottom)

    def _pay_rows(self, rel: IbisRelation, al: RowAlignment, plan: Any, units: int,
                  label: str | None) -> IbisRelation | None:
        """The where-chain ``rel`` charged from one byte per source row (see
        :mod:`~dprivacy.tables.budgets.row_alignment`); None (nothing charged) if the source
        changed since it was registered. The engine's chunks (one byte per row) are read
        first, while the source's ids are checked in a second thread, and then charged under
        the store's lock; the charge is committed only if the ids are unchanged."""
        if not al.engine_keeps_order():
            return None
        unchanged = _started(al.source_unchanged)
        # the engine's work happens before the store's lock is taken: the lock is held for the
        # charge and its commit only, so a process sharing the store never waits for another's
        # query (its length would depend on that query)
        stream = rel.engine.column_stream(plan)
        try:
            masks = [_mask_chunk(ch) for ch in stream]
        except BaseException:
            unchanged()  # the check's thread ends too
            raise
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # the engine's statement ends here, whatever happened
        try:
            with self.store.locked() as s:
                bits, payers, bottom = s.charge_stream(masks, units, label, rows=al.n,
                                                       row_slots=al.slots, check=unchanged)
                self.last_query_id = s.next_query - 1
                ids = s.ids
        except RowsChanged:  # the source changed under the query: nothing was charged
            self._rows.pop(al.op, None)
            return None
        finally:
            unchanged()  # the check's thread has ended
        return self._kept(rel, ids, bits, payers, bottom)

    @staticmethod
    def _kept(rel: IbisRelation, ids: np.ndarray, bits: np.ndarray, payers: int,
              bottom: int) -> IbisRelation:
        out = rel.keep_ids_later(lambda: ids[np.flatnonzero(np.unpackbits(bits, count=ids.size))])
        out.known_count = bottom + payers
        return out

    # ------------------------------------------------------------------ row alignment
    def align(self, root: IbisRelation, source: Any, id_column: str | None,
              ids: np.ndarray) -> None:
        """Remember the slot of each row of a registered source (``ids``: its person ids in row
        order), so that where-chains over ``root`` are charged from one byte per row (see
        :mod:`~dprivacy.tables.budgets.row_alignment`). Sources that cannot be checked are
        left out (their queries take the general path)."""
        if root.engine.name != "duckdb" or not RowAlignment.supported(source, id_column):
            return
        with self.store.locked() as s:
            slots, known = s.lookup(np.asarray(ids, dtype=np.int64))
        if known:
            al = RowAlignment(root, source, id_column, slots)
            self._rows[al.op] = al
            while len(self._rows) > _ALIGNED_SOURCES:
                self._rows.pop(next(iter(self._rows)))

    def _aligned_rows(self, rel: IbisRelation) -> tuple[RowAlignment, Any] | None:
        if not self._rows:
            return None
        top = rel.table.op()
        hit = self._plans.get(top)
        if hit is not None and self._rows.get(hit[0].op) is hit[0]:
            return hit
        op = top
        while isinstance(op, ops.Filter):
            op = op.parent
        al = self._rows.get(op)
        if al is None:
            return None
        plan = mask_plan(rel.table, al.root.table)
        if plan is None:
            return None
        self._plans[top] = (al, plan)  # built once per where-chain
        while len(self._plans) > _MASK_PLANS:
            self._plans.pop(next(iter(self._plans)))
        return al, plan

    # ------------------------------------------------------------------ curator's view
    def remaining(self, ids: Any) -> np.ndarray:
        """Remaining budgets (floats) of known ids (the curator's view; never the analyst's)."""
        return self._read(ids, "remaining")

    def initial(self, ids: Any) -> np.ndarray:
        """Initial budgets (floats) of known ids."""
        return self._read(ids, "initial")

    def _read(self, ids: Any, what: str) -> np.ndarray:
        a = np.asarray(ids, dtype=np.int64).reshape(-1)
        with self.store.locked() as s:
            slots = s.slots_of(a)
            if (slots < 0).any():
                raise UnknownRecordError("unknown record id: it was never registered")
            return getattr(s, what)[slots] / _PER_EPS

    def queries(self) -> list[tuple[int, str | None, int, float]]:
        """The committed queries: (number, label, payers, total ε charged), oldest first."""
        with self.store.locked() as s:
            return [(int(q), lab, int(n), tot / _PER_EPS) for q, lab, n, tot in s.queries]

    def storage_bytes(self) -> int:
        """Size of the store's file (0 in memory)."""
        return 0 if self.path is None else os.path.getsize(self.path)

    def close(self) -> None:
        """Release the lock file descriptor."""
        self.store.close()

    def __repr__(self) -> str:
        return f"BudgetTable({self.path!r})"


def _started(check: Callable[[], bool]) -> Callable[[], bool]:
    """Run ``check`` in a thread now; the returned function waits for its answer (False if it
    raised)."""
    out: list[bool] = []

    def run() -> None:
        out.append(bool(check()))

    t = threading.Thread(target=run, name="dprivacy-source-check", daemon=True)
    t.start()

    def result() -> bool:
        t.join()
        return bool(out and out[0])

    return result


def _ints(at: pa.Table, name: str) -> np.ndarray:
    col = at.column(name)
    if at.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)


def _mask_chunk(chunk: pa.Array) -> np.ndarray:
    """One Arrow chunk of uint8 selection flags (NULL: not selected) as numpy."""
    if chunk.null_count:
        chunk = pc.fill_null(chunk, 0)
    return np.asarray(chunk.to_numpy(zero_copy_only=False), dtype=np.uint8)


def _int_chunk(chunk: pa.Array) -> np.ndarray:
    """One Arrow chunk of ids as int64 (zero-copy when it has no NULL). A NULL id is nobody
    registered: dropped (neither charged nor counted), as the eligible relation
    (``pid = -1 OR pid IN payers``), the general path (ids >= 0) and Spark do; ⊥ is -1."""
    if chunk.null_count:
        chunk = pc.drop_null(chunk)
    return np.asarray(chunk.to_numpy(zero_copy_only=False), dtype=np.int64)


def _can_pay(remaining: np.ndarray, slots: np.ndarray, c: int | np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """(which sources can pay, the budgets of all of them after the charge): the same
    vectorised work whoever can pay."""
    before = remaining[slots]
    left = before - c
    ok = left >= 0
    return ok, np.where(ok, left, before)


def _distinct(ids: np.ndarray) -> bool:
    """Whether the non-negative ``ids`` are pairwise distinct (counting when they are dense)."""
    if ids.size < 2:
        return True
    top = int(ids.max())
    if top < 4 * ids.size + 1024:
        return int(np.bincount(ids, minlength=top + 1).max()) <= 1
    return bool(pd.Index(ids).is_unique)
