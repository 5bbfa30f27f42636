"""Predictable time (Fuzz, Haeberlen et al., USENIX Security 2011): every answer is released at a
deadline fixed from public facts, on a path no other analyst's work can delay.

A query's deadline is its arrival time plus a time that follows from its plan's static work
bound, the owner's calibrated cost per row and the analyst's guaranteed share of the CPUs
(:mod:`dprivacy.service.workbound`, :mod:`dprivacy.service.shares`), never less than the
per-query time ``query_seconds`` of the sources it reads. For every admitted query the service
does the same two things at once:

* in the analyst's lane thread, the **decision** (:mod:`dprivacy.service.decide`): the plan on
  empty shadow sources with the analyst's real PINQ budgets, which refuses the query (bad plan,
  PINQ budget exceeded) or charges it and gives its *default answer* (pure noise);
* in the analyst's own **worker process** (:mod:`dprivacy.service.workers`), the plan on the
  real sources (ProPer charging the people's budgets there).

At the deadline it answers the decision's refusal, or else the worker's real answer, or, if the
worker has not answered by then (it is killed and replaced) or failed after its checks, the
decided default. Whether a query is refused and what its PINQ charge is therefore follow from
the analyst's ledger and the plan at arrival only; the worker can only choose between the real
answer and the default one, and only the real one depends on data. The response is held until
the deadline whatever happened, so its time depends on the configuration, the plan and the
analyst's own requests only.

Admitted work cannot exceed its bound and the worker runs one query at a time with its
guaranteed share of the CPUs, so the real answer is there by the deadline as long as the
calibrated costs hold. A worker that runs past its deadline anyway (a machine slower than the
owner measured) is counted in ``Runner.overruns`` and logged for the owner.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dprivacy.errors import DPrivacyError, UnsupportedOperationError
from dprivacy.service.calibrate import calibrated
from dprivacy.service.config import ServiceConfig
from dprivacy.service.decide import Decider
from dprivacy.service.execute import Builder, schema_of
from dprivacy.service.lanes import Lanes
from dprivacy.service.plan import Plan
from dprivacy.service.sources import (
    Shadows,
    open_source,
    pinq_record,
    public_schema,
    refuse_personal,
    releases_of,
)
from dprivacy.service.workers import LaneWorker

__all__ = ["Runner", "Outcome"]

log = logging.getLogger("dprivacy.service")

#: The worker's answer is awaited until this long before the deadline (at most a tenth of the
#: time the query has): what an overrun then does (give up, kill, log, start a replacement)
#: happens before the release, not after it, so an answer is released at its deadline whether
#: the worker answered or overran -- otherwise that work after the deadline made overrun answers
#: measurably later (a best-threshold classifier told them apart 75 % of the time).
RELEASE_MARGIN = 0.010
#: A worker killed after an overrun is replaced this long after that answer's release; queries
#: of the analyst arriving in between get the default answer without any worker work.
RESTART_DELAY = 0.25
_START_SECONDS = 900.0  # the most a worker may take to open its sources when the service starts


@dataclass
class Outcome:
    """A query's result: ``value`` or a refusal ``error``; ``default`` if the default was used
    (never shown to the analyst)."""

    value: Any = None
    error: DPrivacyError | None = None
    default: bool = False


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


class Runner:
    """The service's threads and the analysts' workers: per analyst, a lane thread (decisions,
    default answers, schemas), a dispatch thread and a worker process (real queries); one
    thread holds the shared shadows, one reads PINQ budgets (never waits behind a query)."""

    def __init__(self, cfg: ServiceConfig) -> None:
        # the event loop that releases the answers takes the interpreter lock from the lane
        # threads within a millisecond (the default hand-over interval is 5 ms)
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self.cfg = cfg = calibrated(cfg)
        os.makedirs(cfg.state_dir, exist_ok=True)
        schemas = _schemas(cfg)
        self.releases = releases_of(cfg)
        # the workers start first: they open the sources while the rest is built
        self.workers = {a.name: LaneWorker(cfg, a.name) for a in cfg.analysts}
        self._shadow = ThreadPoolExecutor(1, thread_name_prefix="dp-shadow")
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="dp-budget")
        self.shadows: Shadows = self._shadow.submit(Shadows, cfg, schemas,
                                                    self.releases).result()
        self._shadow.submit(self._warm_up).result()
        self.lanes = Lanes([a.name for a in cfg.analysts])
        self._lane: dict[str, tuple[ThreadPoolExecutor, Decider]] = {}
        self._dispatch: dict[str, ThreadPoolExecutor] = {}
        for a in cfg.analysts:
            ex = ThreadPoolExecutor(1, thread_name_prefix=f"dp-lane-{a.name}"[:15])
            self._lane[a.name] = (ex, ex.submit(Decider, cfg, a.name, schemas,
                                                self.releases).result())
            self._dispatch[a.name] = ThreadPoolExecutor(
                1, thread_name_prefix=f"dp-run-{a.name}"[:15])
        self._ledger: Any = self._reader.submit(self._open_reader).result()
        until = time.monotonic() + _START_SECONDS
        try:
            for w in self.workers.values():
                if not w.wait_ready(until):
                    raise RuntimeError("the analysts' workers did not start in time")
        except BaseException:
            self.close()
            raise
        self._owner: OwnerHandles | None = None
        self._stall: dict[str, float] = {}
        self.overruns = 0

    @property
    def owner(self) -> OwnerHandles:
        """The owner's handles (opened on first use)."""
        if self._owner is None:
            self._owner = OwnerHandles(self.cfg)
        return self._owner

    def _open_reader(self) -> Any:
        from dprivacy.tables import Ledger

        return Ledger(self.cfg.state_dir / "pinq.sqlite")

    def close(self) -> None:
        """Stop the threads and the workers (queries in flight finish first)."""
        for ex in self._dispatch.values() if hasattr(self, "_dispatch") else ():
            ex.shutdown(wait=True)
        for w in self.workers.values():
            w.close()
        for ex in (getattr(self, "_shadow", None), getattr(self, "_reader", None),
                   *(e for e, _d in getattr(self, "_lane", {}).values())):
            if ex is not None:
                ex.shutdown(wait=True)

    def stall(self, analyst: str, seconds: float) -> None:
        """Make the analyst's next query wait ``seconds`` in its worker before it runs (tests:
        a worker slower than the calibrated costs)."""
        self._stall[analyst] = seconds

    # ------------------------------------------------------------------ work in the threads
    def _warm_up(self) -> None:
        """A count on every empty shadow source: the first query of a process loads and
        compiles code paths that later queries reuse."""
        for s in self.cfg.sources:
            self._default(self.shadows, Plan({"source": s.name, "steps": []},
                                             {"op": "noisy_count", "eps": 1.0},
                                             frozenset({s.name})))

    def _default(self, shadows: Shadows, plan: Plan) -> Any:
        from dprivacy.service.execute import run_query

        try:
            t = Builder(shadows.table).table(plan.table)
            assert plan.query is not None
            return run_query(t, plan.query, shadows.releases.get(plan.source))
        except Exception:  # noqa: BLE001 - a warm-up only
            return None

    def _schema(self, shadows: Shadows, plan: Plan) -> list[list[str]]:
        return schema_of(Builder(shadows.table).table(plan.table))

    def _budget(self, analyst: str, plan: Plan) -> Any:
        steps = plan.table["steps"]
        k = max((i for i, s in enumerate(steps) if s["op"] == "as_pinq"), default=None)
        if k is not None:
            return self._as_pinq_budget(analyst, plan, k)
        names: list[str] = []

        def walk(t: dict[str, Any]) -> None:
            if "source" in t:
                if t["source"] not in names:
                    names.append(t["source"])
                for s in t["steps"]:
                    if isinstance(s.get("other"), dict):
                        walk(s["other"])

        walk(plan.table)
        vals = []
        for n in names:
            src = self.cfg.source(n)
            assert src is not None
            if src.kind != "pinq":
                raise refuse_personal()
            rid = self._ledger.named_record(f"pinq:{pinq_record(n, analyst, src.notion)}", None)
            vals.append(float(self._ledger.remaining([rid])[0]))
        return vals[0] if len(vals) == 1 else vals

    def _as_pinq_budget(self, analyst: str, plan: Plan, k: int) -> float:
        """The remaining budget of an ``as_pinq`` table: its own PINQ budget ε (what the
        analyst's queries on it spent; never the people's budgets)."""
        from dprivacy.tables.params import eps_arg

        steps = plan.table["steps"]
        src = self.cfg.source(plan.source)
        if src is None or src.kind != "proper":
            raise UnsupportedOperationError("as_pinq is a ProPer operation; this table is PINQ")
        if any(isinstance(s.get("other"), dict) and "source" in s["other"] for s in steps[k:]):
            raise UnsupportedOperationError("the remaining budget of a table that mixes an "
                                            "as_pinq table with another source is not available")
        key = json.dumps([plan.source, steps[: k + 1]], sort_keys=True)
        left = self._lane[analyst][1].pinned_budget(key)
        if left is None:  # not queried yet: nobody was charged, the whole ε is left
            return eps_arg(steps[k]["eps"])
        return left

    # ------------------------------------------------------------------ async entry points
    async def query(self, analyst: str, plan: Plan, deadline: float) -> Outcome:
        """Run ``plan``'s query; returns at ``deadline`` (``time.monotonic()`` seconds)."""
        try:
            return await self._query(analyst, plan, deadline)
        finally:  # whatever happened, not before the deadline; every path wakes at the
            # same moment before it (the cutoff) and then sleeps the last stretch, so the
            # release does not depend on how long the process had been idle
            early = deadline - RELEASE_MARGIN - time.monotonic()
            if early > 0:
                await asyncio.sleep(early)
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))

    async def _query(self, analyst: str, plan: Plan, deadline: float) -> Outcome:
        loop = asyncio.get_running_loop()
        lane, decider = self._lane[analyst]
        job = (self._stall.pop(analyst, 0.0), plan.table, plan.query, plan.source)
        cutoff = deadline - min(RELEASE_MARGIN, 0.1 * max(0.0, deadline - time.monotonic()))
        worker = self.workers[analyst]
        if worker.dead:  # killed after an overrun, replaced at its fixed moment (below): the
            real = loop.create_future()  # default answer, and no worker start in this window
            real.set_result(None)
        else:
            real = loop.run_in_executor(self._dispatch[analyst], worker.run, job, cutoff)
        decided = await loop.run_in_executor(lane, decider.decide, plan)
        if decided.error is not None:  # refused from the ledger and the plan; the worker's
            return Outcome(error=decided.error)  # run ends by the deadline, unseen
        try:  # released at the deadline even if the dispatch thread is slow to give up
            got = await asyncio.wait_for(asyncio.shield(real),
                                         timeout=max(0.0, cutoff - time.monotonic()))
        except TimeoutError:
            got = None
        if got is not None and got[0] == "value":
            return Outcome(value=got[1])
        if got is None:
            # a new worker RESTART_DELAY after the release (not at the release, nor in the
            # next query's window): its start is CPU work that only an overrun causes
            loop.call_later(max(0.0, deadline - time.monotonic()) + RESTART_DELAY,
                            self._dispatch[analyst].submit, worker.replace)
            self.overruns += 1
            log.warning("a query overran its deadline in the worker of analyst %r (killed and "
                        "replaced): the default was released", analyst)
        else:
            log.warning("query failed after its checks (%s: %s): answered by the default",
                        got[0], got[1])
        return Outcome(value=decided.value, default=True)

    async def schema(self, plan: Plan, analyst: str | None = None) -> list[list[str]]:
        """The public schema of the plan's table (computed on the shadows, in the analyst's
        own lane if one is named: another analyst's schema requests never delay it)."""
        if analyst is not None:
            ex, shadows = self._lane[analyst][0], self._lane[analyst][1].shadows
        else:
            ex, shadows = self._shadow, self.shadows
        return await asyncio.get_running_loop().run_in_executor(ex, self._schema, shadows, plan)

    async def budget(self, analyst: str, plan: Plan) -> Any:
        """The analyst's remaining PINQ budget(s) of the plan's sources."""
        return await asyncio.get_running_loop().run_in_executor(
            self._reader, self._budget, analyst, plan)
