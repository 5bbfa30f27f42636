"""Predictable time (Fuzz, Haeberlen et al., USENIX Security 2011): every answer is released at a
deadline fixed from public facts, on a path no other analyst's work can delay.

A query's deadline is its arrival time (stamped when the service's event loop first sees the
request, before its body is read) plus a time that follows from its plan's static work bound,
the owner's calibrated cost per row, the size of its body and the analyst's guaranteed share of
the CPUs (:mod:`dprivacy.service.workbound`, :mod:`dprivacy.service.shares`), never less than
the per-query time ``query_seconds`` of the sources it reads. For every admitted query the
service does two things at once, each in a process of the analyst's own:

* in the analyst's **decider process** (:mod:`dprivacy.service.deciders`,
  :mod:`dprivacy.service.decide`), which already parsed and bounded the request: the plan on
  empty shadow sources with the analyst's real PINQ budgets, which refuses the query (bad plan,
  PINQ budget exceeded) or charges it and gives its *default answer* (pure noise);
* in the analyst's own **worker process** (:mod:`dprivacy.service.workers`), the plan on the
  real sources (ProPer charging the people's budgets there).

**The release.** Every query's coroutine sleeps until its *cutoff* (``RELEASE_MARGIN`` before
the deadline), then chooses: the decision's refusal, or else the worker's real answer if it is
there, or else the decided default, and builds the response's bytes; then it sleeps until the
deadline and the response is written.
The worker's answer is handed over on a thread and never wakes the event loop, and what an
overrun causes (the worker's kill, the log line, the replacement) happens after the release: every
path (answer, refusal, overrun) wakes at the same two moments and does the same work
between them, so the release time does not depend on which it was. Whether a query is refused and
what its PINQ charge is therefore follow from the analyst's ledger and the plan at arrival
only; the worker can only choose between the real answer and the default one, and only the real
one depends on data.

The service process itself runs only the event loop (reading requests, stamping arrivals,
admission, the releases) and threads that wait on pipes: no parsing of plans and no decision
shares the interpreter with the releases, so a burst of requests from every analyst at once
cannot delay another analyst's release.

Admitted work cannot exceed its bound and the worker runs one query at a time with its
guaranteed share of the CPUs, so the real answer is there by the deadline as long as the
calibrated costs hold. A worker that runs past its cutoff anyway (a machine slower than the
owner measured) is counted in ``Runner.overruns`` and logged for the owner; a query that came
while its analyst's worker was still restarting after an overrun (it is sent nothing, and its
default is released) in ``Runner.restarting``.

Set the environment variable ``DPRIVACY_SERVICE_TRACE`` to a file name to have the service
append one JSON line per answered query (analyst, arrival, cutoff, deadline, release and the
moment the response's bytes were written to the socket, on the system's monotonic clock, and
whether the default was released): the owner's view of the release times (benchmarks).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dprivacy.service.calibrate import calibrated
from dprivacy.service.config import ServiceConfig
from dprivacy.service.deciders import DeciderProcess
from dprivacy.service.lanes import Lanes
from dprivacy.service.realtime import Guard
from dprivacy.service.slices import set_slice
from dprivacy.service.sources import open_source, public_schema, releases_of
from dprivacy.service.workers import LaneWorker

__all__ = ["Runner", "Outcome"]

log = logging.getLogger("dprivacy.service")

#: The answer is chosen this long before the deadline (at most a tenth of the time the query
#: has): the cutoff, where every path wakes (see the module doc).
RELEASE_MARGIN = 0.010
#: A worker with no answer this long after the deadline is killed (after the release).
GIVE_UP_AFTER = 0.05
#: A worker killed after an overrun is replaced this long after that answer's release; queries
#: of the analyst arriving in between get the default answer without any worker work.
RESTART_DELAY = 0.25
_AFTER_RELEASE = 0.02  # the owner's log line of a default answer: after the response is sent
_START_SECONDS = 900.0  # the most a worker may take to open its sources when the service starts


@dataclass
class Outcome:
    """A query's result: ``value`` or a refusal ``error`` (``("refused", status, class,
    message)``); ``default`` if the default was used (never shown to the analyst)."""

    value: Any = None
    error: tuple[Any, ...] | None = None
    default: bool = False
    #: what ``render`` made of the outcome at the cutoff (the response to send at the deadline)
    response: Any = None
    #: the owner's trace record of the query (``DPRIVACY_SERVICE_TRACE``), completed with the
    #: moment the response's bytes were written and then appended (:meth:`Runner.trace_written`)
    trace: dict[str, Any] | None = None


class OwnerHandles:
    """The owner's read-only handles in the service process: the ProPer budget stores of the
    DuckDB sources (``budgets[source]``; they are shared by processes, and reading one catches
    up with what the workers committed; a Spark source's are under ``budget_dir``)."""

    def __init__(self, cfg: ServiceConfig) -> None:
        from dprivacy.tables.budgets.budget_table import BudgetTable

        self.budgets = {s.name: BudgetTable(cfg.state_dir / f"proper-{s.name}.duckdb")
                        for s in cfg.sources if s.kind == "proper" and s.engine != "spark"}


def _schemas(cfg: ServiceConfig) -> dict[str, Any]:
    """Every source's public schema, each checked against its cap (ConfigError if above)."""
    import ibis

    con = ibis.duckdb.connect()
    spark: Any = None
    out = {}
    try:
        for s in cfg.sources:
            if s.engine == "spark":
                from dprivacy.service.spark_sources import open_spark_source, spark_session

                if spark is None:
                    assert cfg.spark is not None
                    spark = ibis.pyspark.connect(spark_session(cfg.spark))
                t = open_spark_source(spark, s)
            else:
                t = open_source(con, s)
            out[s.name] = public_schema(s, t.schema())
        return out
    finally:
        con.disconnect()


async def _until(moment: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``moment`` (at once if it has)."""
    left = moment - time.monotonic()
    if left > 0:
        await asyncio.sleep(left)


class Runner:
    """The service's threads and the analysts' processes: per analyst, a decider process
    (parsing, bounds, decisions, schemas, budgets) asked from a lane thread, and a worker
    process (real queries) asked from a dispatch thread; those threads only wait on pipes.

    ``realtime``: the release path's threads (the event loop, which calls
    ``runner.guard.enter()`` itself, and the lane, dispatch and owner's threads) ask for
    real-time priority, within the CPU cap of :class:`~dprivacy.service.realtime.Guard`
    (``dprivacy serve``); otherwise (a service in a thread of another program) they only ask
    for the shortest fair slice."""

    def __init__(self, cfg: ServiceConfig, realtime: bool = False) -> None:
        # the event loop takes the interpreter lock from a waking thread within a millisecond
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self.cfg = cfg = calibrated(cfg)
        os.makedirs(cfg.state_dir, exist_ok=True)
        schemas = _schemas(cfg)
        self.releases = releases_of(cfg)
        # the processes start first: the workers open the sources while the rest is built
        self.workers = {a.name: LaneWorker(cfg, a.name) for a in cfg.analysts}
        self.deciders = {a.name: DeciderProcess(cfg, a.name, schemas, self.releases)
                         for a in cfg.analysts}
        self.lanes = Lanes([a.name for a in cfg.analysts])
        self.guard: Guard | None = Guard() if realtime else None
        enter = self.guard.enter if self.guard is not None else set_slice
        # the threads that wait on the analysts' pipes run for moments while holding the
        # interpreter lock the event loop needs: real time (or the shortest slice), so that a
        # wake-up of one preempts a worker at once and it is not descheduled while holding it
        self._lane = {a.name: ThreadPoolExecutor(1, thread_name_prefix=f"dp-lane-{a.name}"[:15],
                                                 initializer=enter)
                      for a in cfg.analysts}
        self._dispatch = {a.name: ThreadPoolExecutor(
            1, thread_name_prefix=f"dp-run-{a.name}"[:15], initializer=enter)
            for a in cfg.analysts}
        self._owner: OwnerHandles | None = None
        self._stall: dict[str, float] = {}
        self.overruns = 0
        self.restarting = 0  # defaults released while the analyst's worker was restarting
        trace = os.environ.get("DPRIVACY_SERVICE_TRACE")
        self._trace = open(trace, "a", buffering=1) if trace else None  # noqa: SIM115
        # the owner's log lines and trace records are written on a thread of their own, never
        # on the event loop: a write to a file can wait for the file system's journal (tens of
        # milliseconds while a worker's budget store commits), which would delay the releases
        self._owner_io = ThreadPoolExecutor(1, thread_name_prefix="dp-owner-io",
                                            initializer=enter)
        until = time.monotonic() + _START_SECONDS
        try:
            procs: list[Any] = [*self.deciders.values(), *self.workers.values()]
            for p in procs:
                if not p.wait_ready(until):
                    raise RuntimeError("the analysts' processes did not start in time")
        except BaseException:
            self.close()
            raise

    @property
    def owner(self) -> OwnerHandles:
        """The owner's handles (opened on first use)."""
        if self._owner is None:
            self._owner = OwnerHandles(self.cfg)
        return self._owner

    def close(self) -> None:
        """Stop the threads and the processes (queries in flight finish first)."""
        for ex in getattr(self, "_dispatch", {}).values():
            ex.shutdown(wait=True)
        for ex in getattr(self, "_lane", {}).values():
            ex.shutdown(wait=True)
        for w in getattr(self, "workers", {}).values():
            w.close()
        for d in getattr(self, "deciders", {}).values():
            d.close()
        guard = getattr(self, "guard", None)
        if guard is not None:
            guard.close()
        owner_io = getattr(self, "_owner_io", None)
        if owner_io is not None:
            owner_io.shutdown(wait=True)
        trace = getattr(self, "_trace", None)
        if trace is not None:
            self._trace = None
            trace.close()

    def stall(self, analyst: str, seconds: float) -> None:
        """Make the analyst's next query wait ``seconds`` in its worker before it runs (tests:
        a worker slower than the calibrated costs)."""
        self._stall[analyst] = seconds

    # ------------------------------------------------------------------ async entry points
    async def ask(self, analyst: str, op: str, *args: Any) -> tuple[Any, ...]:
        """Ask the analyst's decider ``op(*args)`` (:mod:`dprivacy.service.deciders`) from the
        analyst's lane thread; its reply tuple."""
        d = self.deciders[analyst]
        return await asyncio.get_running_loop().run_in_executor(self._lane[analyst], d.call,
                                                                op, *args)

    async def query(self, analyst: str, token: int, body: bytes, arrived: float,
                    deadline: float, render: Callable[[Outcome], Any] | None = None
                    ) -> Outcome:
        """Decide and run the admitted query ``token`` (its ``body`` was bounded by the
        analyst's decider as ``token``); returns at ``deadline`` (``time.monotonic()``).

        ``render(outcome)``, if given, is called at the cutoff on every path and its result
        kept as ``outcome.response``: the response (its bytes) is built before the deadline,
        so that at the deadline it only has to be written."""
        loop = asyncio.get_running_loop()
        cutoff = deadline - min(RELEASE_MARGIN, 0.1 * max(0.0, deadline - arrived))
        worker = self.workers[analyst]
        # a concurrent future: the worker's answer never wakes the event loop
        real: Future[Any] = self._dispatch[analyst].submit(
            worker.run, (self._stall.pop(analyst, 0.0), body), deadline + GIVE_UP_AFTER)
        try:
            decided: tuple[Any, ...] | None = await self.ask(analyst, "decide_token", token)
        except RuntimeError:
            decided = None
        await _until(cutoff)
        # the choice, at the cutoff on every path
        got = real.result() if real.done() else None
        if decided is None:
            out = Outcome(error=("refused", 500, "ServiceError", "the service failed to decide "
                                 "this query; nothing was answered"))
        elif decided[0] == "refused":
            out = Outcome(error=decided)
        elif got is not None and got[0] == "value":
            out = Outcome(value=got[1])
        else:
            out = Outcome(value=decided[1], default=True)
        if render is not None:
            out.response = render(out)
        await _until(deadline)
        released = time.monotonic()
        # after the release: the replacement of a killed worker, and the owner's log line
        if got is None:  # (replace does nothing if the worker answered after all)
            loop.call_later(RESTART_DELAY, self._dispatch[analyst].submit, worker.replace)
        if out.default:
            self.overruns += got is None
            self.restarting += got is not None and got[0] == "starting"
            loop.call_later(_AFTER_RELEASE, self._owner_io.submit, _log_default, analyst, got)
        if self._trace is not None:
            out.trace = {"analyst": analyst, "arrived": arrived, "cutoff": cutoff,
                         "deadline": deadline, "released": released, "default": out.default,
                         "refused": out.error is not None}
        return out

    @property
    def traced(self) -> bool:
        """Whether the service traces its queries (``DPRIVACY_SERVICE_TRACE``)."""
        return self._trace is not None

    def trace_written(self, rec: dict[str, Any], written: float) -> None:
        """The response of the query traced as ``rec`` was written to its socket at
        ``written`` (``time.monotonic()``): the record is appended to the trace file a little
        later (after every answer released at the same moment is sent)."""
        if self._trace is not None:
            rec["written"] = written
            asyncio.get_running_loop().call_later(_AFTER_RELEASE, self._owner_io.submit,
                                                  self._write_trace, rec)

    def _write_trace(self, rec: dict[str, Any]) -> None:
        if self._trace is not None:
            self._trace.write(json.dumps(rec) + "\n")


def _log_default(analyst: str, got: Any) -> None:
    if got is None:
        log.warning("a query overran its deadline in the worker of analyst %r (killed and "
                    "replaced): the default was released", analyst)
    elif got[0] == "starting":
        log.warning("the worker of analyst %r was still starting after a restart: the default "
                    "was released", analyst)
    else:
        log.warning("query failed after its checks (%s: %s): answered by the default",
                    got[0], got[1])
