"""Lanes and admission control: every analyst's answers come on a schedule of their own.

Each analyst has a **lane** holding at most one query: a query is admitted only if the
analyst's previous query has reached its deadline; otherwise it is refused at once (HTTP 429
with ``Retry-After``: the seconds until that deadline), charging nothing. Whether a request is
admitted depends on the times of the analyst's own requests and on their plans' static bounds
(which fix the deadlines, :mod:`dprivacy.service.workbound`), never on what any worker is doing.

Behind the lane are the analyst's own resources, which no other analyst's request touches:

* a **worker process** (:mod:`dprivacy.service.workers`) that runs the analyst's real queries,
  one at a time: when a query is admitted the previous one has reached its deadline, so it is
  finished or its worker was killed and replaced. The worker is guaranteed a fraction ``f`` of
  one CPU by the operating system's fair scheduler (:mod:`dprivacy.service.shares`), so a query
  of cost ``C`` on one CPU finishes within ``C / f`` of its arrival whatever the other analysts
  send: real queries share no engine thread, no interpreter lock and no queue.
  The deadline is ``max(query_seconds, C / f)``;
* a **decider process** (:mod:`dprivacy.service.deciders`) that parses, checks and bounds the
  analyst's requests and decides each query at arrival (refusal or charge, and the default
  answer, on empty shadow tables: :mod:`dprivacy.service.decide`), and answers the analyst's
  schema and budget requests. It reads no data, so its work depends on the plans only, and it
  shares no interpreter with the event loop that releases every analyst's answers; a **lane
  thread** in the service process only waits for its replies;
* a **dispatch thread** that hands the query to the worker and waits for its answer, and kills
  the worker if it has none shortly after the deadline.

The answer is released by the service's event loop at the deadline (an ``asyncio`` timer), which
runs a few nice steps above every worker and decider, so neither can delay it, and whose thread
asks the scheduler for the shortest time slice (:mod:`dprivacy.service.slices`), so that its
wake-ups preempt them at once.
"""

from __future__ import annotations

import math

__all__ = ["Lanes"]


class Lanes:
    """Which analysts have a query in their lane, and until when (``time.monotonic()``)."""

    def __init__(self, analysts: list[str]) -> None:
        self._until = {a: -math.inf for a in analysts}

    def busy_for(self, analyst: str, now: float) -> float:
        """Seconds until the analyst's lane is free (0 if it is)."""
        return max(0.0, self._until[analyst] - now)

    def admit(self, analyst: str, now: float, deadline: float) -> float:
        """Take the analyst's lane until ``deadline`` if it is free at ``now`` (returns 0), or
        return the seconds until it is (nothing taken). Called from the event loop only."""
        wait = self.busy_for(analyst, now)
        if wait <= 0.0:
            self._until[analyst] = deadline
        return wait
