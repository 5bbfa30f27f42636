"""Personal budgets keyed by record id: the ledger interface and the durable SQLite ledger.

The in-memory ledger is :class:`dprivacy.tables.budgets.memory_ledger.MemoryLedger`.

ProPer (POPL'15, Fig. 3 Query rule) keeps one budget B(r) per input record r. A query charges each
record r a cost C(r); r pays iff B(r) ≥ C(r), and then B(r) −= C(r); records that cannot pay are
not charged (and the caller silently leaves their data out). Privacy condition: a budget never
goes below zero, so each record's total privacy loss is at most its initial budget ℰ(r)
(ProPer Theorem 2).

Budgets are stored as integers in units of 10⁻⁹ ε (costs rounded up, initial budgets rounded
down, beyond a 10⁻³-unit float tolerance), so repeated charges add up exactly and 3 × 0.1 fits in
a budget of 0.3.

Crash safety (:class:`Ledger`): :meth:`BudgetLedger.charge` runs one ``BEGIN IMMEDIATE``
transaction that checks, debits, logs the charge and commits, and only then returns the mask of
records that paid. The caller computes the answer from that mask, after the commit: a crash
after the commit loses budget, and no answer can exist for an uncommitted charge. ``BEGIN
IMMEDIATE`` takes SQLite's write lock before reading the budgets, so concurrent processes sharing
one file serialise their charges and can never overspend.

Named budgets (:meth:`Ledger.named_record`) are ordinary records whose id is stored under a name
in the ``meta`` table; PINQ's durable global budgets use them
(:mod:`dprivacy.tables.budgets.durable`), charged with ``all_or_nothing=True``.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from dprivacy.errors import UnknownRecordError, ValidationError

__all__ = ["UNIT", "Charge", "BudgetLedger", "Ledger", "to_units", "scalar_units"]

UNIT = 1e-9
_PER_EPS = 1e9  # units per epsilon: dividing by it is exact where multiplying by UNIT is not
_MAX_UNITS = np.iinfo(np.int64).max // 4


def to_units(x: Any, *, round_up: bool) -> np.ndarray:
    """Budgets/costs in integer units of 1e-9 ε (up for costs, down for budgets).

    Costs saturate: a cost above the largest storable budget (including +inf, e.g. ε times a
    huge multiplicity) becomes ``_MAX_UNITS + 1`` units, which no budget can pay, so a source
    with too many records simply cannot pay instead of making the query raise (which would
    reveal its multiplicity). Budgets above that size are refused."""
    a = np.asarray(x, dtype=float)
    if np.any(np.isnan(a)) or (not round_up and np.any(np.isinf(a))):
        raise ValidationError("budgets and costs must be finite numbers")
    if np.any(a < 0):
        bad = float(a.reshape(-1)[np.argmax(a.reshape(-1) < 0)])
        raise ValidationError(f"budget or cost = {bad}: privacy budgets and costs are >= 0")
    with np.errstate(over="ignore"):
        u = a / UNIT
    big = u > _MAX_UNITS
    if np.any(big):
        if not round_up:
            raise ValidationError(
                f"budget above {_MAX_UNITS * UNIT:.3g}: too large to store")
        u = np.where(big, 0.0, u)
    r = np.round(u)
    near = np.abs(u - r) <= 1e-3 + 1e-12 * np.abs(u)
    out = np.where(near, r, np.ceil(u) if round_up else np.floor(u)).astype(np.int64)
    return np.where(big, _MAX_UNITS + 1, out) if np.any(big) else out


def charge_units(rel: Any, eps: float, backend: str, store: str) -> int:
    """ε in units for a charge of the relation ``rel`` by a store (named ``store``) that
    charges ``backend`` relations; a relation of another backend is refused before anything is
    charged."""
    if rel.backend != backend:
        raise ValidationError(f"a {store} charges {backend} relations, not {rel.backend!r}")
    return scalar_units(float(eps))


#: The payers' view of each relation returned by :func:`keep_payers` (name, Spark DataFrame).
_PAYER_VIEWS: weakref.WeakKeyDictionary[Any, tuple[str, Any]] = weakref.WeakKeyDictionary()


def keep_payers(rel: Any, payers: Any, column: str, known: int | None) -> Any:
    """The tail of a Spark store's Query rule, after its commit: ``rel`` restricted to the
    payers' records (ids in the column ``column`` of the Spark DataFrame ``payers``, read
    lazily) and the ⊥ records; ``known``: their number, when the charge counted it (a count
    then runs nothing more). See :func:`pin_payers`."""
    from dprivacy.tables.relations.engine.backends import fresh_name
    from dprivacy.tables.relations.engine.ibis_plan import PID

    name = fresh_name("paid")
    payers.createOrReplaceTempView(name)
    paid = rel.engine.ibis.table(name)
    t = rel.table
    out = rel.with_table(t.filter((t[PID] == -1) | t[PID].isin(paid[column])))
    out.known_count = known
    _PAYER_VIEWS[out] = (name, payers)
    return out


def pin_payers(rel: Any) -> None:
    """Make the payers of a relation from :func:`keep_payers` outlive the store's files: they are
    read once now and kept by Spark (a local checkpoint), so later charges and folds, which
    delete old files, cannot change or break it (e.g. the table of ``as_pinq``)."""
    got = _PAYER_VIEWS.get(rel)
    if got is not None:
        name, payers = got
        payers.localCheckpoint(eager=True).createOrReplaceTempView(name)


def scalar_units(x: float) -> int:
    """:func:`to_units` (rounding up) for one Python number, without numpy overhead."""
    if not (isinstance(x, (int, float)) and math.isfinite(x) and x >= 0):
        return int(to_units(x, round_up=True))
    u = x / UNIT
    if u > _MAX_UNITS:
        return _MAX_UNITS + 1  # saturated: no budget can pay it
    r = round(u)
    return int(r) if abs(u - r) <= 1e-3 + 1e-12 * abs(u) else math.ceil(u)


@dataclass(frozen=True)
class Charge:
    """The committed outcome of a charge: ``ok[i]`` iff record ``ids[i]`` paid; ``query_id``
    names the logged charge (durable ledgers) or is None; ``repeated``: the charge's ``key`` had
    been charged before, so nothing was charged this time."""

    ok: np.ndarray
    query_id: int | None
    repeated: bool = False


class BudgetLedger(ABC):
    """Interface of a personal-budget store (one budget per record id)."""

    @abstractmethod
    def new_ids(self, n: int) -> np.ndarray:
        """``n`` ids never used before (reserved, not yet registered)."""

    @abstractmethod
    def register(
        self, ids: Any, budgets: Any, *, existing: str = "raise", assume_unique: bool = False
    ) -> None:
        """Add records with initial budgets. ``existing="keep"`` leaves known ids untouched
        (re-attaching to a durable ledger); ``"raise"`` refuses them (fresh input only).
        ``assume_unique`` skips the duplicate check (ids from :meth:`new_ids`)."""

    @abstractmethod
    def charge(self, ids: Any, costs: Any, *, assume_unique: bool = False) -> Charge:
        """Debit ``costs`` from the records that can pay; commit; return which paid."""

    @abstractmethod
    def remaining(self, ids: Any) -> np.ndarray:
        """Remaining budgets (floats) of known ids."""

    @abstractmethod
    def contains(self, ids: Any) -> np.ndarray:
        """Which ids are registered."""


def ids_array(ids: Any) -> np.ndarray:
    a = np.asarray(ids)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.size and a.dtype.kind not in "iu":
        raise ValidationError(f"record ids have dtype {a.dtype}: ids are non-negative integers")
    a = a.astype(np.int64, copy=False).reshape(-1)
    if a.size and a.min() < 0:
        raise ValidationError(f"record id {int(a.min())} is negative: ids are non-negative")
    return a


def _units_per_record(x: Any, n: int, *, round_up: bool, what: str) -> np.ndarray:
    """``x`` (a scalar or one value per record) as an (n,) array of units (:func:`to_units`)."""
    u = to_units(x, round_up=round_up)
    if u.ndim == 0:
        return np.full(n, int(u), dtype=np.int64)
    if u.shape != (n,):
        raise ValidationError(f"{what} has shape {u.shape}: need a scalar or ({n},)")
    return u


def cost_units(costs: Any, n: int) -> np.ndarray:
    """Costs of n records in units, rounded up (a charge never undercounts the true cost)."""
    return _units_per_record(costs, n, round_up=True, what="costs")


def budget_units(budgets: Any, n: int) -> np.ndarray:
    """Initial budgets of n records in units, rounded down (never more than was granted)."""
    return _units_per_record(budgets, n, round_up=False, what="budgets")


def check_unique(ids: np.ndarray) -> None:
    if ids.size > 1 and np.unique(ids).size != ids.size:
        raise ValidationError("a charge lists a record id twice: pass each id once with its total")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS budgets (
    id INTEGER PRIMARY KEY, initial INTEGER NOT NULL, remaining INTEGER NOT NULL,
    CHECK (remaining >= 0 AND remaining <= initial));
CREATE TABLE IF NOT EXISTS queries (query INTEGER PRIMARY KEY AUTOINCREMENT, label TEXT);
CREATE TABLE IF NOT EXISTS charges (query INTEGER NOT NULL, id INTEGER NOT NULL,
    amount INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS keyed (key TEXT PRIMARY KEY, query INTEGER NOT NULL, note TEXT);
INSERT OR IGNORE INTO meta VALUES ('next_id', 0);
"""


_INHERITED: list[sqlite3.Connection] = []


class Ledger(BudgetLedger):
    """Durable budgets in an SQLite file (WAL mode, ``synchronous=FULL``).

    Every charge is one ``BEGIN IMMEDIATE`` transaction that debits the payers, logs the charge
    (``queries`` and ``charges`` tables) and commits before :meth:`charge` returns. Several
    processes may open the same file; each gets its own connection. Start worker processes
    with ``spawn``/``forkserver`` or a fresh interpreter: SQLite does not survive ``fork()`` of
    a process that has SQLite connections open (https://www.sqlite.org/howtocorrupt.html §2.6;
    the crash test of this package lost commits with forked workers and none with fresh ones).

    Parameters:
        path: the database file (created if missing).
        log: also log per-record charge amounts (needed for audits; costs one row per payer).
    """

    def __init__(self, path: str | os.PathLike, *, log: bool = True, timeout: float = 60.0) -> None:
        self.path = os.fspath(path)
        self.log = log
        self.timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._retry_locked(lambda: self._db().executescript(_SCHEMA))

    def _retry_locked(self, f: Any) -> Any:
        """``f()``, retried while SQLite says the database is locked, for up to ``timeout``
        seconds. Opening a store (the WAL switch, the schema) can meet another process opening
        it at the same moment; SQLite may then refuse at once instead of waiting in its busy
        handler."""
        give_up = time.monotonic() + self.timeout
        while True:
            try:
                return f()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > give_up:
                    raise
                if self._conn is not None and self._pid == os.getpid():
                    self._conn.close()
                self._conn = None
                time.sleep(0.05)

    def _db(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid != os.getpid():
            # a forked child must neither use nor close its parent's connection (closing it could
            # checkpoint and remove the parent's WAL): keep it referenced, open a new one
            _INHERITED.append(self._conn)
            self._conn = None
        if self._conn is None:
            self._conn, self._pid = self._retry_locked(self._open), os.getpid()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS req (id INTEGER PRIMARY KEY, cost INT)")
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        """Close this process's connection."""
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def new_ids(self, n: int) -> np.ndarray:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            (start,) = db.execute("SELECT value FROM meta WHERE key='next_id'").fetchone()
            (top,) = db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM budgets").fetchone()
            start = max(start, top)
            db.execute("UPDATE meta SET value=? WHERE key='next_id'", (start + int(n),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return np.arange(start, start + int(n), dtype=np.int64)

    def register(
        self, ids: Any, budgets: Any, *, existing: str = "raise", assume_unique: bool = False
    ) -> None:
        a = ids_array(ids)
        b = budget_units(budgets, a.size)
        check_unique(a)
        verb = "INSERT OR IGNORE" if existing == "keep" else "INSERT"
        rows = zip(a.tolist(), b.tolist(), b.tolist(), strict=True)
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            named = {v for (v,) in db.execute("SELECT value FROM meta WHERE key LIKE 'name:%'")}
            if named and not named.isdisjoint(a.tolist()):
                raise ValidationError(
                    f"record id {min(named.intersection(a.tolist()))} holds a named budget (a "
                    "PINQ source): records need other ids"
                )
            db.executemany(f"{verb} INTO budgets (id, initial, remaining) VALUES (?,?,?)", rows)
            db.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            db.execute("ROLLBACK")
            raise ValidationError(
                f"a record id is already registered ({exc}): new records need fresh ids"
            ) from exc
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def named_record(self, key: str, budget: float | None) -> int:
        """The record id holding the budget named ``key``, created with ``budget`` if absent.

        One ``BEGIN IMMEDIATE`` transaction looks the name up (``meta`` row ``name:<key>``) and,
        if absent, takes a fresh id and registers it, so processes racing to create the same
        name all get the one record. An existing record keeps its stored budget: ``budget`` must
        then be None or equal to the stored *initial* budget, else :class:`ValidationError`
        (a changed initial budget would silently raise or lower the total privacy loss).
        """
        if not isinstance(key, str) or not key:
            raise ValidationError(f"budget name = {key!r}: expected a non-empty string")
        want = None if budget is None else int(to_units(budget, round_up=False))
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT value FROM meta WHERE key=?", (f"name:{key}",)).fetchone()
            if row is not None:
                rid = int(row[0])
                init, rem = db.execute(
                    "SELECT initial, remaining FROM budgets WHERE id=?", (rid,)).fetchone()
                if want is not None and want != init:
                    raise ValidationError(
                        f"budget {key!r} in {self.path} was created with {init * UNIT:.9g} "
                        f"({rem * UNIT:.9g} left), not {budget!r}: pass budget=None (or the "
                        "original budget) to continue it, or use another name"
                    )
            else:
                if want is None:
                    raise UnknownRecordError(
                        f"no budget named {key!r} in {self.path}: give an initial budget")
                (start,) = db.execute("SELECT value FROM meta WHERE key='next_id'").fetchone()
                (top,) = db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM budgets").fetchone()
                rid = max(start, top)
                db.execute("UPDATE meta SET value=? WHERE key='next_id'", (rid + 1,))
                db.execute("INSERT INTO budgets VALUES (?,?,?)", (rid, want, want))
                db.execute("INSERT INTO meta VALUES (?,?)", (f"name:{key}", rid))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return rid

    def charge(
        self, ids: Any, costs: Any, *, assume_unique: bool = False, label: str | None = None,
        all_or_nothing: bool = False, key: str | None = None,
        named_prefixes: tuple[str, ...] = (),
    ) -> Charge:
        """See :meth:`BudgetLedger.charge`. ``label`` is logged with the query.
        ``all_or_nothing``: if any record cannot pay, roll back and charge (and log) nothing;
        the returned mask is then all False and ``query_id`` None (PINQ's global budgets).
        ``key``: charge at most once per key. The key is recorded in the same transaction as the
        charge, so a key charged before (by any process, before any restart) charges nothing and
        returns ``repeated=True``; a refused charge records no key. See :meth:`keyed`.
        ``named_prefixes``: also charge every named budget (:meth:`named_record`) whose name
        starts with one of these, as found *inside* the transaction (``costs`` is then one
        number for all); the returned mask covers ``ids`` followed by those budgets."""
        a = ids_array(ids)
        c = cost_units(costs, a.size)
        if named_prefixes and np.ndim(costs) != 0:
            raise ValidationError("named_prefixes needs one cost for every budget charged")
        if key is not None and (not isinstance(key, str) or not key):
            raise ValidationError(f"charge key = {key!r}: expected a non-empty string")
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            if key is not None:
                row = db.execute("SELECT query FROM keyed WHERE key=?", (key,)).fetchone()
                if row is not None:
                    db.execute("ROLLBACK")
                    return Charge(np.zeros(a.size, dtype=bool), int(row[0]), repeated=True)
            if named_prefixes:
                extra: list[int] = []
                for pre in named_prefixes:
                    extra += [int(v) for (v,) in db.execute(
                        "SELECT value FROM meta WHERE substr(key, 1, ?) = ?",
                        (len(pre) + 5, f"name:{pre}"))]
                known = set(a.tolist())
                more = [i for i in dict.fromkeys(extra) if i not in known]
                a = np.concatenate([a, np.asarray(more, dtype=np.int64)])
                c = np.concatenate([c, np.full(len(more), c[0] if c.size else
                                               cost_units(costs, 1)[0], dtype=c.dtype)])
            db.execute("DELETE FROM temp.req")
            try:
                db.executemany("INSERT INTO temp.req VALUES (?,?)", zip(a.tolist(), c.tolist(), strict=True))
            except sqlite3.IntegrityError as exc:
                raise ValidationError("a charge lists a record id twice") from exc
            bad = db.execute(
                "SELECT r.id FROM temp.req r LEFT JOIN budgets b ON b.id = r.id "
                "WHERE b.id IS NULL LIMIT 1"
            ).fetchone()
            if bad is not None:
                raise UnknownRecordError(f"unknown record id {bad[0]}: nothing was charged")
            paid = db.execute(
                "SELECT r.id FROM temp.req r JOIN budgets b ON b.id = r.id "
                "WHERE b.remaining >= r.cost"
            ).fetchall()
            if all_or_nothing and len(paid) < a.size:
                db.execute("ROLLBACK")
                return Charge(np.zeros(a.size, dtype=bool), None)
            cur = db.execute("INSERT INTO queries (label) VALUES (?)", (label,))
            assert cur.lastrowid is not None  # set by the INSERT above
            qid = int(cur.lastrowid)
            if self.log:
                db.execute(
                    "INSERT INTO charges (query, id, amount) SELECT ?, r.id, r.cost "
                    "FROM temp.req r JOIN budgets b ON b.id = r.id "
                    "WHERE b.remaining >= r.cost AND r.cost > 0",
                    (qid,),
                )
            db.execute(
                "UPDATE budgets SET remaining = budgets.remaining - r.cost FROM temp.req r "
                "WHERE r.id = budgets.id AND budgets.remaining >= r.cost AND r.cost > 0"
            )
            if key is not None:
                db.execute("INSERT INTO keyed (key, query) VALUES (?, ?)", (key, qid))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        ok = np.isin(a, np.fromiter((p[0] for p in paid), dtype=np.int64, count=len(paid)))
        return Charge(ok, qid)

    def keyed(self, key: str) -> tuple[int, str | None] | None:
        """``(query_id, note)`` of the charge made with ``key``, or None if no charge has it."""
        row = self._db().execute("SELECT query, note FROM keyed WHERE key=?", (key,)).fetchone()
        return None if row is None else (int(row[0]), row[1])

    def note(self, key: str, text: str) -> None:
        """Store ``text`` with the charge made with ``key`` (durably; replaces an earlier note).

        Raises :class:`UnknownRecordError` if no charge has that key."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            cur = db.execute("UPDATE keyed SET note=? WHERE key=?", (str(text), key))
            if cur.rowcount != 1:
                raise UnknownRecordError(f"no charge has the key {key!r}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def named_budgets(self, prefix: str = "") -> list[tuple[str, float, float, int]]:
        """The data owner's view of the named budgets whose name starts with ``prefix``:
        ``(name, initial, remaining, charges)`` sorted by name, ``charges`` the number of
        committed charges that debited it (logged charges only)."""
        rows = self._db().execute(
            "SELECT substr(m.key, 6), b.initial, b.remaining, "
            "(SELECT COUNT(*) FROM charges c WHERE c.id = b.id) "
            "FROM meta m JOIN budgets b ON b.id = m.value "
            "WHERE m.key LIKE 'name:%' AND substr(m.key, 6, ?) = ? ORDER BY m.key",
            (len(prefix), prefix)).fetchall()
        return [(str(n), int(i) / _PER_EPS, int(r) / _PER_EPS, int(c)) for n, i, r, c in rows]

    def remaining(self, ids: Any) -> np.ndarray:
        a = ids_array(ids)
        got = dict(self._select("SELECT id, remaining FROM budgets WHERE id IN", a))
        missing = [i for i in a.tolist() if i not in got]
        if missing:
            raise UnknownRecordError(f"unknown record id {missing[0]}")
        return np.array([got[i] for i in a.tolist()], dtype=float) / _PER_EPS

    def initial(self, ids: Any) -> np.ndarray:
        """Initial budgets (floats) of known ids."""
        a = ids_array(ids)
        got = dict(self._select("SELECT id, initial FROM budgets WHERE id IN", a))
        missing = [i for i in a.tolist() if i not in got]
        if missing:
            raise UnknownRecordError(f"unknown record id {missing[0]}")
        return np.array([got[i] for i in a.tolist()], dtype=float) / _PER_EPS

    def contains(self, ids: Any) -> np.ndarray:
        a = ids_array(ids)
        got = {r[0] for r in self._select("SELECT id FROM budgets WHERE id IN", a)}
        return np.array([i in got for i in a.tolist()], dtype=bool)

    def _select(self, sql: str, a: np.ndarray) -> list[tuple]:
        out: list[tuple] = []
        db = self._db()
        for s in range(0, a.size, 900):
            chunk = a[s : s + 900].tolist()
            out += db.execute(f"{sql} ({','.join('?' * len(chunk))})", chunk).fetchall()
        return out
