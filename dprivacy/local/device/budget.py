"""A user's durable personal budget (``totalCost`` of Paper IV Alg. 1) on the SQLite ledger.

One user holds named budgets in a :class:`dprivacy.tables.Ledger` file: a total budget, optional
per-field budgets (heterogeneous privacy) and optional per-event budgets (event-level privacy),
Paper IV §3.3. A query is charged its cost on every budget that covers it, in one
all-or-nothing ledger transaction: either all pay and the charge is committed before any data
is touched, or nothing is charged and the query is refused.

A per-event budget needs a total budget: event names are the analyst's free choice, so per-event
budgets alone would let an analyst spend a fresh budget per invented event (every query about an
event is also charged to the total).

Each answered query id is recorded in the same transaction as its charge
(:meth:`PersonalBudget.charge_query`), and its reply afterwards (:meth:`PersonalBudget.store_reply`):
an agent restarted on the same ledger, or a second agent process on it, neither charges a query
again nor answers it a second time.

**Analyst code is charged to every field and every event.** Two runs of analyst ``pre`` on one
kernel share state that no sandbox clears: a ``pre`` can leave what it read in the page cache
(by reading chosen pages of a file every sandbox can read) and a later ``pre`` can read it back
(by probing which pages are cached). A query whose ``pre`` is analyst code can therefore reveal
any field and any event an earlier analyst ``pre`` saw, so it is charged (``code=True``) to the
total, to every per-field budget and to every event budget opened so far (and its own event),
all found inside the charge's transaction. Per-field and per-event budgets bound queries with a
builtin ``pre``, which runs no analyst code, as before.

Privacy condition: the total loss of a user is at most their total budget; the loss about one
field (one event) is at most that field's (event's) budget, counting what analyst code could
relay between queries.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from dprivacy.errors import ValidationError
from dprivacy.tables.budgets.ledger import Ledger

__all__ = ["PersonalBudget"]


def _budget(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValidationError(f"{name} = {v!r}: a budget is a finite number >= 0")
    return float(v)


class PersonalBudget:
    """Named budgets of one user, charged atomically.

    Parameters
    ----------
    ledger : Ledger or path
        The durable store (a path creates/opens an SQLite ledger file).
    user : str
        The user's id (prefix of the budget names).
    total : float or None
        Budget on the user's whole data (None: no total budget).
    per_field : mapping field -> budget, optional
    per_event : float or None
        Budget of every event (each event name gets its own budget); needs ``total``.

    Examples
    --------
    >>> b = PersonalBudget(":memory:", "u1", total=1.0)
    >>> b.try_charge(0.6, fields=("x",)), b.try_charge(0.6, fields=("x",))
    (True, False)
    >>> round(b.remaining()["total"], 9)
    0.4
    """

    def __init__(self, ledger: Ledger | str | os.PathLike, user: str, *, total: float | None = None,
                 per_field: Mapping[str, float] | None = None, per_event: float | None = None) -> None:
        if not isinstance(user, str) or not user or "/" in user:
            raise ValidationError(f"user = {user!r}: a non-empty id without '/'")
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.user = user
        self.total = None if total is None else _budget("total", total)
        self.per_field = {str(k): _budget(f"per_field[{k!r}]", v) for k, v in (per_field or {}).items()}
        self.per_event = None if per_event is None else _budget("per_event", per_event)
        if self.total is None and not self.per_field and self.per_event is None:
            raise ValidationError("give a total, per-field or per-event budget (else the loss is unbounded)")
        if self.per_event is not None and self.total is None:
            raise ValidationError(
                "a per-event budget needs a total budget: event names are chosen by the analyst, so "
                "without a total every new event name would bring a fresh budget")
        self._ids: dict[str, int] = {}
        if self.total is not None:
            self._id("total", self.total)
        for f, v in self.per_field.items():
            self._id(f"field/{f}", v)

    def _id(self, name: str, budget: float) -> int:
        if name not in self._ids:
            self._ids[name] = self.ledger.named_record(f"{self.user}/{name}", budget)
        return self._ids[name]

    def covering(self, fields: tuple[str, ...], event: str | None) -> list[str]:
        """Names of the budgets a query on ``fields`` (about ``event``) is charged to."""
        names = ["total"] if self.total is not None else []
        names += [f"field/{f}" for f in fields if f in self.per_field]
        if event is not None and self.per_event is not None:
            names.append(f"event/{event}")
        return names

    def _covering_ids(self, fields: tuple[str, ...], event: str | None) -> list[int]:
        ids = []
        for n in self.covering(tuple(fields), event):
            if n.startswith("event/"):
                assert self.per_event is not None
                ids.append(self._id(n, self.per_event))
            else:
                ids.append(self._ids[n])
        return ids

    def _everything(self, code: bool) -> tuple[str, ...]:
        """Name prefixes of the budgets an analyst-code query is also charged to."""
        return (f"{self.user}/field/", f"{self.user}/event/") if code else ()

    def try_charge(self, cost: float, *, fields: tuple[str, ...], event: str | None = None,
                   label: str | None = None, code: bool = False) -> bool:
        """Charge ``cost`` to every covering budget, all or nothing; True iff charged (committed).

        ``code=True`` (the query runs analyst code) also charges every field and event budget.
        A query covered by no budget, or with an infinite or invalid cost, is refused (False).
        """
        if not (isinstance(cost, (int, float)) and math.isfinite(cost) and cost >= 0):
            return False
        ids = self._covering_ids(fields, event)
        if not ids:
            return False
        ch = self.ledger.charge(ids, float(cost), all_or_nothing=True, label=label,
                                named_prefixes=self._everything(code))
        return bool(ch.ok.all())

    def _key(self, qid: str) -> str:
        return f"{self.user}/query/{qid}"

    def charge_query(self, qid: str, cost: float, *, fields: tuple[str, ...],
                     event: str | None = None, label: str | None = None,
                     code: bool = False) -> str:
        """Charge query ``qid`` at most once: ``"charged"``, ``"refused"`` or ``"answered"``.

        The query id is recorded in the ledger in the same transaction as the charge, so once
        ``"charged"`` has been returned the id is answered for good (across restarts and
        processes): a later call returns ``"answered"`` and charges nothing. A refused charge
        records nothing (the query may be judged again). ``code=True`` (the query runs analyst
        code) also charges every field budget and every event budget, found in the same
        transaction."""
        if not (isinstance(cost, (int, float)) and math.isfinite(cost) and cost >= 0):
            return "refused"
        ids = self._covering_ids(fields, event)
        if not ids:
            return "refused"
        ch = self.ledger.charge(ids, float(cost), all_or_nothing=True, label=label, key=self._key(qid),
                                named_prefixes=self._everything(code))
        if ch.repeated:
            return "answered"
        return "charged" if bool(ch.ok.all()) else "refused"

    def answered(self, qid: str) -> tuple[bool, dict[str, Any] | None]:
        """``(charged, reply)``: whether query ``qid`` was charged, and the reply stored for it
        (None when the agent stopped between the charge and storing its reply)."""
        got = self.ledger.keyed(self._key(qid))
        if got is None:
            return False, None
        return True, (None if got[1] is None else json.loads(got[1]))

    def store_reply(self, qid: str, reply: Mapping[str, Any]) -> None:
        """Store the reply of charged query ``qid`` durably (replayed by :meth:`answered`)."""
        self.ledger.note(self._key(qid), json.dumps(dict(reply), allow_nan=False))

    def remaining(self) -> dict[str, float]:
        """Remaining budget of every named budget opened so far."""
        names = list(self._ids)
        rem: Any = self.ledger.remaining([self._ids[n] for n in names]) if names else []
        return {n: float(r) for n, r in zip(names, rem, strict=True)}
