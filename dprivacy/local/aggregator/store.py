"""The aggregator's durable state in SQLite: credentials, queries and replies.

* **Credentials.** An analyst's API key and a device's token are issued here, once, and only
  their sha256 is stored. A credential reads ``dpa_<id>_<secret>`` (analyst) or
  ``dpd_<id>_<secret>`` (device); it is looked up by its id and its secret's hash compared with
  :func:`hmac.compare_digest`. One device credential per user: enrolling a user again is
  refused unless the old credential is replaced (and so revoked).
* **Queries** are stored with their publisher (the analyst whose key published them), their
  position (agents poll "after position k") and cost(T) computed at publication. Query ids are
  **namespaced per analyst**: analyst ``alice``'s query ``q1`` is ``alice/q1`` on the wire to
  the devices (and in their replies), so two analysts may both use ``q1``; an analyst names
  their own queries by their own ids, sees only their own queries and replies, and cannot tell
  whether another analyst's id exists.
* **Replies** are stored once per (query, user): a repeated reply is ignored ("replay memory"),
  a different reply after an answer is refused (a refusal, which charged nothing, may be
  replaced by a later reply of the same device). Only the query's publisher may read them.

Everything is committed before a request is answered, so a restarted server (same file) keeps
its analysts, devices, queries, replies and replay memory.

Privacy condition: none (the store holds replies, which are already randomised on the devices).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from dprivacy.errors import ValidationError
from dprivacy.local.aggregator.errors import ConflictError, ForbiddenError, UnknownError
from dprivacy.local.aggregator.replies import (
    MAX_REPLY_BYTES,
    check_reply,
    largest_answer,
    output_checker,
)
from dprivacy.local.limits import DEFAULT_LIMITS, check_query_json
from dprivacy.local.query import Query

__all__ = ["AggregatorStore", "ConflictError", "ForbiddenError", "Principal", "UnknownError",
           "local_id", "qualified"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS credentials (
    kid TEXT PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('analyst', 'device')),
    principal TEXT NOT NULL, secret_sha256 TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS one_device ON credentials (principal)
    WHERE kind = 'device' AND revoked = 0;
CREATE TABLE IF NOT EXISTS queries (
    pos INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, publisher TEXT NOT NULL,
    cost REAL NOT NULL, body TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS replies (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, query TEXT NOT NULL REFERENCES queries (id),
    user TEXT NOT NULL, body TEXT NOT NULL, received REAL NOT NULL, UNIQUE (query, user));
"""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}")
_TOKEN = re.compile(r"(dpa|dpd)_([0-9a-f]{16})_([0-9a-f]{64})")
_KINDS = {"dpa": "analyst", "dpd": "device"}


def qualified(publisher: str, qid: str) -> str:
    """The id devices see for analyst ``publisher``'s query ``qid``: ``publisher/qid``.

    Examples
    --------
    >>> qualified("alice", "q1"), local_id("alice", "alice/q1")
    ('alice/q1', 'q1')
    """
    return f"{publisher}/{qid}"


def local_id(publisher: str, full: str) -> str:
    """The analyst's own id of the query devices know as ``full``."""
    prefix = f"{publisher}/"
    return full[len(prefix):] if full.startswith(prefix) else full


def _servable(body: str) -> dict[str, Any] | None:
    """A stored query's JSON if it passes the publish checks (UTF-8, caps), else None."""
    try:
        d = json.loads(body)
        check_query_json(d)
    except (ValueError, RecursionError):
        return None
    return d if isinstance(d, dict) else None


class Principal(NamedTuple):
    """Who a credential belongs to: ``kind`` ("analyst" or "device") and ``name``."""

    kind: str
    name: str


def _sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _name(v: Any, what: str) -> str:
    if not isinstance(v, str) or not _NAME.fullmatch(v):
        raise ValidationError(f"{what} = {str(v)[:40]!r}: 1-128 letters, digits or ._@:- "
                              "(starting with a letter or digit)")
    return v


class AggregatorStore:
    """Credentials, queries and replies in one SQLite file (``":memory:"`` for a throw-away one).

    Parameters
    ----------
    path : str or path-like
        The database file (created if missing).
    page_bytes : int
        A page of ``since`` or ``collected`` stops after this many bytes of JSON.

    Examples
    --------
    >>> s = AggregatorStore()
    >>> key = s.add_analyst("alice")
    >>> s.authenticate(key)
    Principal(kind='analyst', name='alice')
    >>> s.authenticate(key[:-1] + "0") is None or s.authenticate(key[:-1] + "1") is None
    True
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, page_bytes: int = 4 << 20) -> None:
        self.path = os.fspath(path)
        self.page_bytes = int(page_bytes)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                   timeout=30.0)
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._queries: OrderedDict[str, tuple[str, Query, float, Callable[[Any], bool]]] = OrderedDict()

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ credentials
    def _issue(self, kind: str, principal: str, *, replace: bool = False) -> str:
        kid, secret = secrets.token_hex(8), secrets.token_hex(32)
        prefix = "dpa" if kind == "analyst" else "dpd"
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if replace:
                    self._db.execute("UPDATE credentials SET revoked = 1 WHERE kind = ? AND "
                                     "principal = ?", (kind, principal))
                self._db.execute("INSERT INTO credentials (kid, kind, principal, secret_sha256, "
                                 "created) VALUES (?, ?, ?, ?, ?)",
                                 (kid, kind, principal, _sha(secret), time.time()))
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                self._db.execute("ROLLBACK")
                raise ConflictError(f"{kind} {principal!r} is already enrolled: replace its "
                                    "credential (replace=True) to issue a new one") from exc
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return f"{prefix}_{kid}_{secret}"

    def add_analyst(self, name: str) -> str:
        """Issue a new API key for analyst ``name`` (shown once: only its hash is stored)."""
        return self._issue("analyst", _name(name, "analyst"))

    def enrol(self, user: str, *, replace: bool = False) -> str:
        """Enrol user ``user``'s device: its token (shown once). A user has one device credential;
        ``replace=True`` revokes the old one, else enrolling an enrolled user is refused."""
        return self._issue("device", _name(user, "user"), replace=replace)

    def revoke(self, kind: str, name: str) -> int:
        """Revoke every credential of an analyst or a device; the number revoked."""
        with self._lock:
            cur = self._db.execute("UPDATE credentials SET revoked = 1 WHERE kind = ? AND "
                                   "principal = ? AND revoked = 0", (kind, name))
            return int(cur.rowcount)

    def authenticate(self, token: Any) -> Principal | None:
        """The principal of a valid, unrevoked credential; None for anything else."""
        m = _TOKEN.fullmatch(token) if isinstance(token, str) else None
        if m is None:
            return None
        prefix, kid, secret = m.groups()
        with self._lock:
            row = self._db.execute("SELECT kind, principal, secret_sha256, revoked FROM credentials "
                                   "WHERE kid = ?", (kid,)).fetchone()
        if row is None:
            _ = hmac.compare_digest(_sha(secret), "0" * 64)  # same work as a wrong secret
            return None
        kind, principal, digest, revoked = row
        if not hmac.compare_digest(_sha(secret), digest) or revoked or kind != _KINDS[prefix]:
            return None
        return Principal(kind, principal)

    # ------------------------------------------------------------------ queries
    def publish(self, publisher: str, body: Any) -> tuple[int, str]:
        """Validate and store ``body`` (a query's JSON) for ``publisher``; (position, the id the
        devices see: ``publisher/id``)."""
        if not isinstance(body, dict):
            raise ValidationError("a query is a JSON object")
        if body.get("publisher") not in (None, publisher):
            raise ForbiddenError(f"a query of analyst {publisher!r} cannot name another publisher")
        q = Query.from_dict({**body, "publisher": publisher})  # size caps first, then validation
        c = q.T.cost()
        if not math.isfinite(c):
            raise ValidationError("T has infinite cost (a zero in some column): no user could answer")
        full = qualified(publisher, q.id)
        if len(full) > DEFAULT_LIMITS.max_id:
            raise ValidationError(f"the query id with its analyst's prefix ({publisher}/...) has "
                                  f"{len(full)} characters: at most {DEFAULT_LIMITS.max_id}")
        q = dataclasses.replace(q, id=full)
        size = largest_answer(q)
        if size > MAX_REPLY_BYTES:
            raise ValidationError(f"an answer to this query can take {size} bytes of JSON, and a "
                                  f"reply holds at most {MAX_REPLY_BYTES}: every device would be "
                                  "charged and its reply refused (use fewer coordinates in T)")
        text = q.to_json()
        with self._lock:
            try:
                cur = self._db.execute("INSERT INTO queries (id, publisher, cost, body, created) "
                                       "VALUES (?, ?, ?, ?, ?)", (q.id, publisher, c, text, time.time()))
            except sqlite3.IntegrityError as exc:
                raise ConflictError(f"query id {local_id(publisher, full)!r} is already "
                                    "published") from exc
            pos = int(cur.lastrowid or 0)
        return pos, q.id

    def _query(self, qid: Any) -> tuple[str, Query, float, Callable[[Any], bool]]:
        if not isinstance(qid, str):
            raise UnknownError("a reply names its query by its string id")
        with self._lock:
            hit = self._queries.get(qid)
            if hit is not None:
                self._queries.move_to_end(qid)
                return hit
            row = self._db.execute("SELECT publisher, body, cost FROM queries WHERE id = ?",
                                   (qid,)).fetchone()
        if row is None:
            raise UnknownError(f"unknown query {qid[:80]!r}")
        q = Query.from_dict(json.loads(row[1]))
        entry = (str(row[0]), q, float(row[2]), output_checker(q))
        with self._lock:
            self._queries[qid] = entry
            while len(self._queries) > 64:
                self._queries.popitem(last=False)
        return entry

    def since(self, after: int, limit: int = 100,
              publisher: str | None = None) -> tuple[list[dict[str, Any]], int]:
        """The queries published after position ``after`` (at most ``limit``, at most
        ``page_bytes`` of JSON but at least one) and the position to poll from next.

        With ``publisher`` (an analyst's view): only that analyst's queries, under their own ids.
        """
        lim = max(1, min(int(limit), 1000))
        with self._lock:
            if publisher is None:
                rows = self._db.execute("SELECT pos, body FROM queries WHERE pos > ? ORDER BY pos "
                                        "LIMIT ?", (int(after), lim)).fetchall()
            else:
                rows = self._db.execute("SELECT pos, body FROM queries WHERE pos > ? AND "
                                        "publisher = ? ORDER BY pos LIMIT ?",
                                        (int(after), publisher, lim)).fetchall()
        out: list[dict[str, Any]] = []
        size, nxt = 0, max(int(after), 0)
        for pos, body in rows:
            if out and size + len(body) > self.page_bytes:
                break
            q = _servable(body)
            if q is not None:  # a row stored before today's checks is passed over, never served
                if publisher is not None:
                    q["id"] = local_id(publisher, str(q.get("id", "")))
                out.append(q)
            size, nxt = size + len(body), int(pos)
        return out, nxt

    def count(self) -> int:
        """Number of published queries."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM queries").fetchone()[0])

    # ------------------------------------------------------------------ replies
    def reply(self, device: str, body: Any) -> bool:
        """Check and store a reply sent by ``device``; True if stored, False if it repeats the
        stored one (a replay); ConflictError if the device already sent a different answer (a
        stored refusal is replaced)."""
        qid = body.get("query") if isinstance(body, dict) else None
        _, q, c, is_output = self._query(qid)
        text = json.dumps(check_reply(body, device=device, query=q, cost=c, is_output=is_output),
                          sort_keys=True)
        with self._lock:
            cur = self._db.execute("INSERT OR IGNORE INTO replies (query, user, body, received) "
                                   "VALUES (?, ?, ?, ?)", (q.id, device, text, time.time()))
            if cur.rowcount == 1:
                return True
            (old,) = self._db.execute("SELECT body FROM replies WHERE query = ? AND user = ?",
                                      (q.id, device)).fetchone()
            if old != text and json.loads(old).get("status") == "rejected":
                # a refusal charged nothing: the device may answer later (e.g. its policy changed)
                self._db.execute("UPDATE replies SET body = ?, received = ? WHERE query = ? AND "
                                 "user = ?", (text, time.time(), q.id, device))
                return True
        if old != text:
            raise ConflictError(f"user {device!r} already answered {q.id!r} (the first answer is kept)")
        return False

    def collected(self, analyst: str, qid: str, after: int = 0,
                  limit: int = 100_000) -> tuple[list[dict[str, Any]], int]:
        """Replies to the analyst's query ``qid`` (their own id) after position ``after`` (a
        page) and the next position, each naming the query by that id. Only the analyst's own
        queries are found (UnknownError otherwise: another analyst's ids are not theirs to see)."""
        if not isinstance(qid, str):
            raise UnknownError("a query is named by its string id")
        name, qid = qid, qualified(analyst, qid)
        try:
            publisher = self._query(qid)[0]
        except UnknownError:
            raise UnknownError(f"analyst {analyst!r} has no query {name[:80]!r}") from None
        if publisher != analyst:  # pragma: no cover (an id under analyst/ is the analyst's)
            raise ForbiddenError(f"query {name!r} was published by another analyst")
        with self._lock:
            rows = self._db.execute("SELECT seq, body FROM replies WHERE query = ? AND seq > ? "
                                    "ORDER BY seq LIMIT ?",
                                    (qid, int(after), max(1, min(int(limit), 100_000)))).fetchall()
        out: list[dict[str, Any]] = []
        size, nxt = 0, max(int(after), 0)
        for seq, body in rows:
            if out and size + len(body) > self.page_bytes:
                break
            out.append({**json.loads(body), "query": name})
            size, nxt = size + len(body), int(seq)
        return out, nxt
