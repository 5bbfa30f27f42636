"""The user's public policy (data-independent accept/reject, Paper IV §3.3 and Paper V §4.1).

The public policy sees the query and the user's public state, never the data, so its decision
(and a rejection) may be revealed to the analyst. The budget check itself is made by
:class:`dprivacy.local.device.budget.PersonalBudget` in the same step that charges it.

Privacy condition: none (the decision is a function of public values only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dprivacy.local.query import Query

__all__ = ["PublicPolicy"]


@dataclass(frozen=True)
class PublicPolicy:
    """Data-independent rules a query must pass before its cost is charged.

    Parameters
    ----------
    allowed_fields : iterable of str or None
        Data fields a query may read (Paper V Note 12's ``allowedRes``); None allows every field
        of the agent's data schema.
    max_cost : float
        Largest cost one query may have.
    max_t : float
        Largest time bound (seconds) the user grants to ``pre``.
    max_memory_mb : int
        Largest memory bound the user grants.
    allow_analyst_code : bool
        Accept analyst source code (run in the sandbox) at all.
    predicate : callable(Query) -> bool, optional
        Any further rule of the user's; it receives the query only.
    publishers : iterable of str or None
        The analysts whose queries the user answers (the ``publisher`` the aggregator
        authenticated); None answers any publisher. Checked before any budget is spent.

    Examples
    --------
    >>> PublicPolicy(max_cost=0.5).max_cost
    0.5
    """

    allowed_fields: Iterable[str] | None = None
    max_cost: float = math.inf
    max_t: float = 10.0
    max_memory_mb: int = 1024
    allow_analyst_code: bool = True
    predicate: Callable[[Query], bool] | None = None
    publishers: Iterable[str] | None = None

    def __post_init__(self) -> None:
        if self.allowed_fields is not None:
            object.__setattr__(self, "allowed_fields", frozenset(self.allowed_fields))
        if self.publishers is not None:
            object.__setattr__(self, "publishers", frozenset(self.publishers))

    def check(self, query: Query, cost: float, schema: frozenset[str]) -> str | None:
        """None if the query passes, else the (public) reason for rejecting it."""
        if self.publishers is not None and query.publisher not in frozenset(self.publishers):
            return f"publisher {query.publisher!r} is not one this user answers"
        if not math.isfinite(cost):
            return "T has infinite cost (a zero in some column)"
        if cost > self.max_cost:
            return f"cost {cost:.6g} above the per-query limit {self.max_cost:.6g}"
        allowed = schema if self.allowed_fields is None else frozenset(self.allowed_fields) & schema
        extra = [f for f in query.fields if f not in allowed]
        if extra:
            shown = ", ".join(repr(f[:40]) for f in extra[:5]) + (" ..." if len(extra) > 5 else "")
            return f"{len(extra)} field(s) not offered: {shown}"
        if query.t > self.max_t:
            return f"time bound {query.t} s above {self.max_t} s"
        if query.memory_mb > self.max_memory_mb:
            return f"memory bound {query.memory_mb} MiB above {self.max_memory_mb} MiB"
        if query.needs_sandbox and not self.allow_analyst_code:
            return "analyst code is not accepted"
        if self.predicate is not None and not self.predicate(query):
            return "refused by the user's rule"
        return None
