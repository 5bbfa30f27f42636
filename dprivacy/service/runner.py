"""Predictable time (Fuzz, Haeberlen et al., USENIX Security 2011): every answer is released at a
deadline fixed from public facts.

A query's deadline is its arrival time plus a time that follows from its plan's static work
bound, the owner's calibrated cost per row and the analyst's share of the engine
(:mod:`dprivacy.service.workbound`), never less than the per-query time ``query_seconds`` of the
sources it reads. For every admitted query the service runs the same statements: the plan on
the empty shadow sources in the analyst's own lane (the *default answer*: the same query on an
empty table, pure noise, charged to nobody) and the plan on the real sources (checked, charged,
then computed) on the engine thread, earliest deadline first (:mod:`dprivacy.service.lanes`).
At the deadline it answers:

* the real answer, or the refusal it raised before any charge
  (:class:`~dprivacy.errors.DPrivacyError`: bad plan, PINQ budget exceeded; these depend on the
  plan and the analyst's own spending only);
* any other exception raised while running (which the tables never raise because of the data)
  is answered by the default, so no exception can tell records apart.

The response is held until the deadline whatever happened, so its time depends on the
configuration, the plan and the analyst's own requests only. Admitted work cannot exceed its
bound and the schedule leaves every query its cost, so a query finishes before its deadline as
long as the calibrated cost per row holds. If the engine falls behind that calibration anyway
(a machine slower than the owner measured), an overrun query is interrupted (its charge, if
committed, stands) or, if it had not started, not run (a PINQ query is still charged its s·ε on
an empty selection), its default is released, and the owner sees it in the log and in
``Runner.overruns``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dprivacy.errors import DPrivacyError, UnsupportedOperationError
from dprivacy.service.calibrate import calibrated
from dprivacy.service.config import ServiceConfig
from dprivacy.service.execute import Builder, run_query, schema_of
from dprivacy.service.lanes import EngineThread, Lanes
from dprivacy.service.plan import Plan
from dprivacy.service.sources import (
    Owner,
    Shadows,
    pinq_record,
    public_schema,
    refuse_personal,
)

__all__ = ["Runner", "Outcome"]

log = logging.getLogger("dprivacy.service")


@dataclass
class Outcome:
    """A query's result: ``value`` or a refusal ``error``; ``default`` if the default was used
    (never shown to the analyst)."""

    value: Any = None
    error: DPrivacyError | None = None
    default: bool = False


class _Job:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state = "queued"  # queued -> running -> done, or queued -> skipped
        self.queued = time.monotonic()
        self.started: float | None = None


def _has_as_pinq(t: dict[str, Any]) -> bool:
    """Whether the plan table ``t`` (or a table it reads) has an ``as_pinq`` step."""
    return any(s["op"] == "as_pinq" or isinstance(s.get("other"), dict)
               and "steps" in s["other"] and _has_as_pinq(s["other"])
               for s in t.get("steps", []))


class Runner:
    """The owner's threads: the engine runs real queries (the engine and the ledgers) earliest
    deadline first; each analyst's lane has a thread for its default answers and schema
    requests; one thread holds the shared shadows, one reads PINQ budgets (never waits behind a
    query)."""

    def __init__(self, cfg: ServiceConfig) -> None:
        self._main = EngineThread("dp-engine")
        self.cfg = cfg = self._main.submit(calibrated, cfg).result()
        self._shadow = ThreadPoolExecutor(1, thread_name_prefix="dp-shadow")
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="dp-budget")
        self.owner: Owner = self._main.submit(Owner, cfg).result()
        schemas = {s.name: public_schema(s, self.owner.raw[s.name].schema())
                   for s in cfg.sources}
        self.shadows: Shadows = self._shadow.submit(Shadows, cfg, schemas).result()
        self._shadow.submit(self._warm_up).result()
        self.lanes = Lanes([a.name for a in cfg.analysts])
        self._lane: dict[str, tuple[ThreadPoolExecutor, Shadows]] = {}
        for a in cfg.analysts:
            ex = ThreadPoolExecutor(1, thread_name_prefix=f"dp-lane-{a.name}"[:15])
            self._lane[a.name] = (ex, ex.submit(Shadows, cfg, schemas,
                                                self.shadows.releases).result())
        self._ledger: Any = self._reader.submit(self._open_reader).result()
        self._cache: dict[str, OrderedDict[str, Any]] = {}
        self._pinned: dict[str, dict[str, Any]] = {}  # analyst -> as_pinq tables (Builder)
        self.overruns = 0

    def _open_reader(self) -> Any:
        from dprivacy.tables import Ledger

        return Ledger(self.cfg.state_dir / "pinq.sqlite")

    def close(self) -> None:
        """Stop the threads (queries in flight finish first)."""
        self._main.shutdown(wait=True)
        for ex in (self._shadow, self._reader, *(e for e, _s in self._lane.values())):
            ex.shutdown(wait=True)

    # ------------------------------------------------------------------ work in the threads
    def _real(self, analyst: str, plan: Plan, job: _Job) -> Outcome:
        with job.lock:
            skipped = job.state == "skipped"
            job.state = "running"
            job.started = time.monotonic()
        self.owner.begin()  # what an interrupt stops: this query's engine work only
        if skipped:
            self._charge_only(analyst, plan)
            return Outcome(default=True)
        try:
            t = self._builder(analyst).table(plan.table)
            assert plan.query is not None
            return Outcome(value=run_query(t, plan.query, self.owner.releases.get(plan.source)))
        except DPrivacyError as exc:
            return Outcome(error=exc)
        except BaseException as exc:  # noqa: BLE001 - answered by the default, logged for the owner
            if not isinstance(exc, Exception):
                raise
            log.warning("query failed after its checks (answered by the default): %s",
                        type(exc).__name__)
            return Outcome(default=True)
        finally:
            with job.lock:
                job.state = "done"

    def _builder(self, analyst: str) -> Builder:
        return Builder(lambda s: self.owner.table(s, analyst),
                       self._cache.setdefault(analyst, OrderedDict()),
                       self._pinned.setdefault(analyst, {}), self.cfg.max_as_pinq)

    def _charge_only(self, analyst: str, plan: Plan) -> None:
        """A query that overran before it started: its default was released, and its charge is
        made now: the same query on an empty selection. PINQ charges s·ε (a release: s·max_i c_i)
        exactly as the query would have; ProPer charges nobody (no record was read, so nobody's
        data was used), so a plan on ProPer sources only, without ``as_pinq``, runs nothing
        (on Spark an empty charge still rewrites the budgets: an engine that fell behind would
        stay behind)."""
        import ibis

        kinds = {s.kind for s in self.cfg.sources if s.name in plan.sources}
        if kinds == {"proper"} and not _has_as_pinq(plan.table):
            return
        try:
            t = self._builder(analyst).table(plan.table)
            assert plan.query is not None
            run_query(t.where(ibis.literal(False)), plan.query,
                      self.owner.releases.get(plan.source))
        except Exception as exc:  # noqa: BLE001 - e.g. the budget cannot pay: nothing to charge
            log.warning("overrun query: charge not made (%s)", type(exc).__name__)

    def _default(self, shadows: Shadows, plan: Plan) -> Outcome:
        try:
            t = Builder(shadows.table).table(plan.table)
            assert plan.query is not None
            return Outcome(value=run_query(t, plan.query, shadows.releases.get(plan.source)),
                           default=True)
        except DPrivacyError as exc:
            return Outcome(error=exc, default=True)
        except Exception as exc:  # noqa: BLE001 - the default must exist: None
            log.warning("the default answer failed (%s): answered None", type(exc).__name__)
            return Outcome(value=None, default=True)

    def _warm_up(self) -> None:
        """A count on every empty shadow source: the first query of a process loads and
        compiles code paths that later queries reuse (not counted in the calibrated costs)."""
        for s in self.cfg.sources:
            self._default(self.shadows, Plan({"source": s.name, "steps": []},
                                             {"op": "noisy_count", "eps": 1.0},
                                             frozenset({s.name})))

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
        hit = self._pinned.get(analyst, {}).get(key)
        if hit is None:  # not queried yet: nobody was charged, the whole ε is left
            return eps_arg(steps[k]["eps"])
        return float(hit.remaining_budget())

    # ------------------------------------------------------------------ async entry points
    async def query(self, analyst: str, plan: Plan, deadline: float) -> Outcome:
        """Run ``plan``'s query; returns at ``deadline`` (``time.monotonic()`` seconds)."""
        try:
            return await self._query(analyst, plan, deadline)
        finally:  # whatever happened, not before the deadline
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))

    async def _query(self, analyst: str, plan: Plan, deadline: float) -> Outcome:
        loop = asyncio.get_running_loop()
        job = _Job()
        lane, shadows = self._lane[analyst]
        dflt = loop.run_in_executor(lane, self._default, shadows, plan)
        real = asyncio.wrap_future(self._main.submit(self._real, analyst, plan, job,
                                                     deadline=deadline))
        out: Outcome
        try:
            out = await asyncio.wait_for(asyncio.shield(real),
                                         timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            with job.lock:  # held while interrupting: the owner's thread cannot move on to
                if job.state == "queued":  # another query meanwhile
                    job.state = "skipped"
                elif job.state == "running":
                    self.owner.interrupt()
            self.overruns += 1
            now = time.monotonic()
            log.warning("a query overran its deadline (%s when it was due, %.3f s after it was "
                        "queued, %s): answered by the default", job.state, now - job.queued,
                        "not started" if job.started is None
                        else f"started {job.started - job.queued:.3f} s after")
            out = Outcome(default=True)
        if out.default:
            out = await dflt
        return out

    async def schema(self, plan: Plan, analyst: str | None = None) -> list[list[str]]:
        """The public schema of the plan's table (computed on the shadows, in the analyst's
        own lane if one is named: another analyst's schema requests never delay it)."""
        ex, shadows = self._lane[analyst] if analyst is not None else (self._shadow,
                                                                        self.shadows)
        return await asyncio.get_running_loop().run_in_executor(ex, self._schema, shadows, plan)

    async def budget(self, analyst: str, plan: Plan) -> Any:
        """The analyst's remaining PINQ budget(s) of the plan's sources."""
        return await asyncio.get_running_loop().run_in_executor(
            self._reader, self._budget, analyst, plan)
