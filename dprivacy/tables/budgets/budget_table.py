"""ProPer's personal budgets as a table, charged with set-based statements (no per-record Python).

:class:`BudgetTable` implements :class:`dprivacy.tables.relations.protocol.PersonalBudgets` for the engine
backends. Budgets live in a DuckDB database: in memory (``BudgetTable()``) or in a file
(``BudgetTable("budgets.duckdb")``, durable). Budgets are integers in units of 10⁻⁹ ε, as in
:mod:`dprivacy.tables.budgets.ledger` (costs rounded up, budgets down).

**The Query rule** (ProPer, POPL'15 Fig. 3) for a relation ``rel`` and accuracy ε: the engine
that holds ``rel`` computes the per-source costs C(s) = ε × (records of s) in one GROUP BY (or,
for a relation whose ids are structurally unique, simply its ids at cost ε; or Σ element costs
for a d_X release), and hands them to the budget database as one Arrow table. There, in ONE
transaction, set-based statements decide who can pay (remaining ≥ C(s)), debit the payers, log
the non-payers and the query, and COMMIT. Only then does :meth:`BudgetTable.pay` return ``rel``
without the non-payers' records, on which the caller computes the exact aggregate: an answer
never exists without its committed charge.

**Schema.** ``budgets(id, initial, remaining)``, ``charges(query, id, amount)`` (debits not yet
folded into ``remaining``), ``unpaid(query, id)``, ``queries(query, label, cost_max, fast)``,
``meta(key, value)``. A source's budget is ``remaining − Σ charges.amount``. ``meta.floor`` is
a lower bound of every source's budget: a query whose largest per-source cost is ≤ floor is
paid by everyone, so it only appends its debits (the *fast path*: an append, no join) and
lowers the floor by that cost; otherwise the exact path joins the costs with the budgets. The
pending debits are folded into ``remaining`` (and the floor recomputed exactly) when they
outnumber the sources.

**Durability and races.** A file database is attached for each operation and detached after it;
DuckDB holds an exclusive lock on the file meanwhile, so processes sharing the file serialise
(a process that finds the file locked retries until ``timeout``) and can never overspend
together; a commit is durable (DuckDB's write-ahead log), and a process killed at any point
leaves either the whole charge or none of it. SQLite (:class:`~dprivacy.tables.Ledger`) would do
too, but cannot read Arrow tables set-based without per-record inserts; DuckDB scans them
zero-copy. For Spark, the budget table stays in this driver-side DuckDB file: Delta Lake's
``MERGE`` would need its JARs from Maven, and the ledger belongs in the driver anyway (the
per-source costs are computed by Spark; only those travel).

Examples:
    >>> import pandas as pd
    >>> from ibis import _
    >>> from dprivacy.tables.relations.engine import relation_from
    >>> from dprivacy.tables.budgets.engine_budgets import proper_budgets
    >>> rel, budgets = proper_budgets(relation_from(pd.DataFrame({"age": [15, 30]}), "duckdb"),
    ...                               budget=1.0)
    >>> budgets.pay(rel.where(_.age > 17), 0.4).count()
    1
    >>> [round(float(x), 3) for x in budgets.remaining([0, 1])]
    [1.0, 0.6]
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from dprivacy.errors import DPrivacyError, UnknownRecordError, ValidationError
from dprivacy.tables.budgets.ledger import _MAX_UNITS, _PER_EPS, scalar_units

if TYPE_CHECKING:
    from dprivacy.tables.relations.engine.relation import IbisRelation
    from dprivacy.tables.relations.protocol import ElementCosts

__all__ = ["BudgetTable", "LedgerLockTimeout"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {d}.budgets (id BIGINT NOT NULL, initial BIGINT NOT NULL,
    remaining BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS {d}.charges (query BIGINT NOT NULL, id BIGINT NOT NULL,
    amount BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS {d}.unpaid (query BIGINT NOT NULL, id BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS {d}.queries (query BIGINT PRIMARY KEY, label VARCHAR,
    cost_max BIGINT, fast BOOLEAN);
CREATE TABLE IF NOT EXISTS {d}.meta (key VARCHAR PRIMARY KEY, value BIGINT NOT NULL);
INSERT OR IGNORE INTO {d}.meta VALUES ('next_id', 0), ('next_query', 1), ('floor', {big}),
    ('sources', 0);
"""


class LedgerLockTimeout(DPrivacyError):
    """The budget file stayed locked by other processes for longer than the timeout; nothing
    was charged."""


class BudgetTable:
    """Personal budgets in a DuckDB database (see the module doc).

    Parameters:
        path: the database file (created if missing; durable, shared by processes); None keeps
            the budgets in memory, in this object only.
        timeout: seconds to wait for other processes' locks on the file.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, timeout: float = 60.0) -> None:
        self.path = None if path is None else os.fspath(path)
        self.timeout = float(timeout)
        self._db = duckdb.connect()
        self._db.execute("PRAGMA disable_checkpoint_on_shutdown")
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._alias = "led"
        if self.path is None:
            self._db.execute(f"ATTACH ':memory:' AS {self._alias}")
        with self._session() as d:
            self._db.execute(_SCHEMA.format(d=d, big=_MAX_UNITS))
        self.last_query_id: int | None = None
        self.fold_rows: int | None = None  # pending debits that trigger a fold (None: automatic)

    # ------------------------------------------------------------------ sessions
    def _session(self) -> _Session:
        if self._pid != os.getpid():  # a forked child: never reuse the parent's connection
            self._db = duckdb.connect()
            self._db.execute("PRAGMA disable_checkpoint_on_shutdown")
            self._pid = os.getpid()
            if self.path is None:
                raise ValidationError("an in-memory BudgetTable cannot be shared with a forked "
                                      "process; give it a file path")
        return _Session(self)

    def _meta(self, key: str) -> int:
        return int(self._db.execute(f"SELECT value FROM {self._alias}.meta WHERE key = ?",
                                    [key]).fetchall()[0][0])

    def _set_meta(self, key: str, value: int) -> None:
        self._db.execute(f"UPDATE {self._alias}.meta SET value = ? WHERE key = ?", [int(value), key])

    # ------------------------------------------------------------------ registration
    def register(self, ids_budgets: pa.Table, *, fresh: bool) -> None:
        """Add sources: an Arrow table with int64 ``id`` and float ``budget``. Known ids keep
        their stored budget (re-attaching to a durable table); ``fresh`` ids must be new."""
        d = self._alias
        with self._session():
            self._db.register("__dp_new", ids_budgets)
            try:
                self._db.execute("BEGIN TRANSACTION")
                dup, bad = self._db.execute(
                    "SELECT COUNT(*) - COUNT(DISTINCT id), COUNT(*) FILTER (WHERE id IS NULL OR "
                    "id < 0) FROM __dp_new").fetchall()[0]
                if dup or bad:
                    raise ValidationError("the id column must hold distinct non-negative integers "
                                          "(one stable identity per individual)")
                units = (f"LEAST(GREATEST(COALESCE(FLOOR(TRY_CAST(budget AS DOUBLE) * {_PER_EPS} "
                         f"+ 1e-3), 0), 0), {_MAX_UNITS})::BIGINT")
                new = (f"SELECT id, {units} AS u FROM __dp_new n WHERE NOT EXISTS "
                       f"(SELECT 1 FROM {d}.budgets b WHERE b.id = n.id)")
                if fresh:
                    (clash,) = self._db.execute(
                        f"SELECT COUNT(*) FROM __dp_new n JOIN {d}.budgets b USING (id)").fetchall()[0]
                    if clash:
                        raise ValidationError("fresh ids are already registered")
                n_new, low = self._db.execute(f"SELECT COUNT(*), MIN(u) FROM ({new})").fetchall()[0]
                self._db.execute(f"INSERT INTO {d}.budgets SELECT id, u, u FROM ({new})")
                top = self._db.execute("SELECT MAX(id) FROM __dp_new").fetchall()[0][0]
                if top is not None:
                    self._set_meta("next_id", max(self._meta("next_id"), int(top) + 1))
                if n_new:
                    self._set_meta("floor", min(self._meta("floor"), int(low)))
                    self._set_meta("sources", self._meta("sources") + int(n_new))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                self._db.unregister("__dp_new")

    def new_ids(self, n: int) -> int:
        """Reserve ``n`` fresh ids; returns the first (they are first .. first + n - 1)."""
        with self._session():
            self._db.execute("BEGIN TRANSACTION")
            start = self._meta("next_id")
            self._set_meta("next_id", start + int(n))
            self._db.execute("COMMIT")
        return start

    # ------------------------------------------------------------------ the Query rule
    def pay(self, rel: IbisRelation, eps: float, element_costs: ElementCosts | None = None,
            *, label: str | None = None) -> IbisRelation:
        """Charge ``rel``'s sources for an ε-query, commit, return the payers' records (and ⊥).

        Never raises because of the data or the budgets (a cost too large to store saturates:
        that source cannot pay)."""
        from dprivacy.tables.budgets import engine_costs as costs

        units = scalar_units(float(eps))
        if element_costs is None and rel.unique:
            arrow, cmax = costs.unique_ids(rel), units
            costs_sql = f"SELECT id, {units}::BIGINT AS c FROM __dp_cost"
        else:
            arrow = costs.per_source(rel, units, element_costs)
            cmax = None
            costs_sql = "SELECT id, c FROM __dp_cost"
        unpaid = self._charge(arrow, costs_sql, cmax, label)
        return rel if unpaid.size == 0 else rel.drop_ids(unpaid)

    def _charge(self, arrow: pa.Table, costs_sql: str, cmax: int | None,
                label: str | None) -> np.ndarray:
        d = self._alias
        with self._session():
            self._db.register("__dp_cost", arrow)
            try:
                self._db.execute("BEGIN TRANSACTION")
                qid, floor = self._meta("next_query"), self._meta("floor")
                if cmax is None:
                    (cmax,) = self._db.execute(
                        f"SELECT COALESCE(MAX(c), 0) FROM ({costs_sql})").fetchall()[0]
                cmax = int(cmax)
                fast = cmax <= floor
                if fast:
                    self._db.execute(f"INSERT INTO {d}.charges SELECT ?, id, c FROM ({costs_sql}) "
                                     "WHERE c > 0", [qid])
                else:
                    pend = (f"SELECT id, SUM(amount) AS a FROM {d}.charges WHERE id IN "
                            f"(SELECT id FROM __dp_cost) GROUP BY id")
                    self._db.execute(
                        f"CREATE TEMP TABLE __dp_left AS SELECT c.id, c.c, b.remaining - "
                        f"COALESCE(p.a, 0) AS r FROM ({costs_sql}) c JOIN {d}.budgets b USING (id) "
                        f"LEFT JOIN ({pend}) p USING (id)")
                    self._db.execute(f"INSERT INTO {d}.charges SELECT ?, id, c FROM __dp_left "
                                     "WHERE r >= c AND c > 0", [qid])
                    self._db.execute(f"INSERT INTO {d}.unpaid SELECT ?, id FROM __dp_left "
                                     "WHERE r < c", [qid])
                self._db.execute(f"INSERT INTO {d}.queries VALUES (?, ?, ?, ?)",
                                 [qid, label, cmax, fast])
                self._set_meta("next_query", qid + 1)
                self._set_meta("floor", floor - cmax)
                self._maybe_fold()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                self._db.unregister("__dp_cost")
                self._db.execute("DROP TABLE IF EXISTS temp.__dp_left")
            self.last_query_id = qid
            if fast:
                return np.zeros(0, dtype=np.int64)
            got = self._db.execute(f"SELECT id FROM {d}.unpaid WHERE query = ?", [qid]).fetchnumpy()
            return np.asarray(got["id"], dtype=np.int64)

    def _maybe_fold(self) -> None:
        """Fold pending debits into ``remaining`` once they outnumber the sources (inside the
        caller's transaction), and recompute the floor exactly."""
        d = self._alias
        (pending,) = self._db.execute(f"SELECT COUNT(*) FROM {d}.charges").fetchall()[0]
        limit = self.fold_rows if self.fold_rows is not None else max(self._meta("sources"), 1 << 16)
        if pending <= limit:
            return
        self._db.execute(
            f"CREATE OR REPLACE TABLE {d}.budgets AS SELECT b.id, b.initial, b.remaining - "
            f"COALESCE(s.a, 0) AS remaining FROM {d}.budgets b LEFT JOIN (SELECT id, SUM(amount) "
            f"AS a FROM {d}.charges GROUP BY id) s USING (id)")
        self._db.execute(f"DELETE FROM {d}.charges")
        (low,) = self._db.execute(f"SELECT MIN(remaining) FROM {d}.budgets").fetchall()[0]
        self._set_meta("floor", _MAX_UNITS if low is None else int(low))

    # ------------------------------------------------------------------ curator's view
    def remaining(self, ids: Any) -> np.ndarray:
        """Remaining budgets (floats) of known ids (the curator's view; never the analyst's)."""
        a = np.asarray(ids, dtype=np.int64).reshape(-1)
        d = self._alias
        with self._session():
            self._db.register("__dp_q", pa.table({"id": a, "pos": np.arange(a.size)}))
            try:
                rows = self._db.execute(
                    f"SELECT q.pos, b.remaining - COALESCE((SELECT SUM(amount) FROM {d}.charges c "
                    f"WHERE c.id = q.id), 0) FROM __dp_q q LEFT JOIN {d}.budgets b USING (id) "
                    "ORDER BY q.pos").fetchall()
            finally:
                self._db.unregister("__dp_q")
        vals = [r[1] for r in rows]
        if any(v is None for v in vals):
            raise UnknownRecordError("unknown record id: it was never registered")
        return np.array(vals, dtype=float) / _PER_EPS

    def close(self) -> None:
        """Close this object's connection."""
        self._db.close()

    def __repr__(self) -> str:
        return f"BudgetTable({self.path!r})"


class _Session:
    """Attach the budget file (retrying while another process holds its lock) for one
    operation, detach after it; the in-memory database stays attached."""

    def __init__(self, owner: BudgetTable) -> None:
        self.o = owner

    def __enter__(self) -> str:
        o = self.o
        o._lock.acquire()
        if o.path is None:
            return o._alias
        deadline = time.monotonic() + o.timeout
        lit = o.path.replace("'", "''")
        while True:
            try:
                o._db.execute(f"ATTACH '{lit}' AS {o._alias}")
                return o._alias
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    o._lock.release()
                    if "lock" in str(exc).lower():
                        raise LedgerLockTimeout(
                            f"the budget file {o.path} stayed locked by other processes for "
                            f"{o.timeout} s; nothing was charged") from exc
                    raise
                time.sleep(random.uniform(0.001, 0.02))

    def __exit__(self, *exc: Any) -> None:
        o = self.o
        try:
            if o.path is not None:
                o._db.execute(f"DETACH {o._alias}")
        finally:
            o._lock.release()
