"""Lanes and admission control: every analyst's answers come on a schedule of their own.

Each analyst has a **lane** holding at most one query: a query is admitted only if the
analyst's previous query has reached its deadline; otherwise it is refused at once (HTTP 429
with ``Retry-After``: the seconds until that deadline), charging nothing. Whether a request is
admitted depends on the times of the analyst's own requests and on their plans' static bounds
(which fix the deadlines, :mod:`dprivacy.service.workbound`), never on what the engine is doing.

The engine (:class:`EngineThread`) is one thread that runs the admitted queries **earliest deadline
first**; a query that has started is not pre-empted. With an analyst's reserved share ``s`` of
the engine, its query of cost ``C`` gets the deadline ``B + C / s`` (at least ``query_seconds``)
where ``B`` is the cost of the largest plan the service admits. Then every admitted query
finishes by its deadline whatever the other analysts send, as long as each query's cost is at
most ``C`` (the calibrated cost per row is an upper bound) and the shares add up to at most 1:
if a query missed its deadline ``d``, let ``t0`` be the last time before ``d`` at which the
engine was idle or running a query with a deadline after ``d``; in ``[t0, d]`` the engine ran at
most one such query (at most ``B``, it had started before ``t0``) and queries that arrived after
``t0`` with deadlines at most ``d``. An analyst's admitted queries have disjoint windows
``[arrival, deadline]`` (one in the lane at a time), each of length at least ``B + C / s``, so
they add up to at most ``s · (d - t0 - B)``; summed over the analysts with ``Σ s ≤ 1``, the engine
had at most ``B + (d - t0 - B) = d - t0`` of work in ``[t0, d]``, and the query did not miss.

The *default answers* (the plan on empty shadow sources) and the analyst's schema requests run
on a thread of the analyst's own lane, never behind real work nor behind other analysts'
requests.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["EngineThread", "Lanes"]


class EngineThread:
    """One thread running submitted calls in the order of their deadlines (earliest first; a
    call without a deadline goes before every query)."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...], Future[Any]]] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any,
               deadline: float = -math.inf) -> Future[Any]:
        """Run ``fn(*args)`` on the engine's thread; its place in the queue is ``deadline``."""
        fut: Future[Any] = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("the engine is shut down")
            heapq.heappush(self._heap, (deadline, next(self._seq), fn, args, fut))
            self._cv.notify()
        return fut

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._heap and not self._closed:
                    self._cv.wait()
                if not self._heap:
                    return
                _d, _s, fn, args, fut = heapq.heappop(self._heap)
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
                fut.set_exception(exc)

    def shutdown(self, wait: bool = True) -> None:
        """Stop after the queued calls."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if wait:
            self._thread.join()


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
