"""Each analyst's own worker process: where the analyst's real queries run, and nobody else's.

The service starts one process per analyst (:class:`LaneWorker`, forked from a
``multiprocessing`` fork server that has the engine's modules loaded). A worker opens the sources
its analyst may use (an :class:`~dprivacy.service.sources.Owner` on a DuckDB connection of ONE
thread), then runs the analyst's queries one at a time: no other analyst's work shares its
interpreter, its engine thread or its memory, and the operating system's scheduler guarantees
it its share of the CPUs (:mod:`dprivacy.service.shares`: it runs a few nice steps below the
service process, whose event loop releases the answers, so the release path is never behind a
query).

The service process talks to the worker over a pipe from a dispatch thread of the analyst's
lane: it sends the request's body (the worker parses it again: its plan was checked by the
analyst's decider, :mod:`dprivacy.service.deciders`) and waits for the answer. The service
takes the answer if it is there at the query's cutoff, just before the deadline
(:mod:`dprivacy.service.runner`); otherwise the decided default is released
(:mod:`dprivacy.service.decide`), whatever the data. A worker with no answer shortly after the
deadline is killed (``SIGKILL``), after the release so that the kill's work cannot move it,
and a fresh one is started in its place a little later (:meth:`LaneWorker.replace`, scheduled
by the service); until it has opened its sources the analyst's queries get the default without
any worker work (:meth:`LaneWorker.run` sends them nothing): a query handed to a worker still
starting would overrun and have it killed again. The replacement's start is the analyst's own
work: it runs at the worker's priority, in place of the killed worker, and no other analyst's
worker waits for it.
A charge the killed worker had committed stands (the people's budget stores are crash-safe: a
record is complete or discarded); an ``as_pinq`` table or a partition it held is rebuilt by the
next worker, which charges its payers again (more spending, never less).

Workers die with the service: each asks the kernel for ``SIGKILL`` when its parent (the fork
server, which exits when the service does) dies, and exits when its pipe closes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import OrderedDict
from typing import Any

from dprivacy.errors import ConfigError, DPrivacyError
from dprivacy.service.child_process import context, enter_child, wait_ready
from dprivacy.service.config import ServiceConfig
from dprivacy.service.shares import worker_nice

__all__ = ["LaneWorker"]

log = logging.getLogger("dprivacy.service")

def _worker_main(cfg: ServiceConfig, analyst: str, conn: Any, nice: int) -> None:
    """The worker process: open the analyst's sources, then answer jobs until the pipe closes.

    A job is ``(stall, body)``; the reply ``("value", v)``, ``("refused",
    name)`` (a library refusal) or ``("failed", name)`` (any other exception)."""
    enter_child(nice)
    from dprivacy.service.execute import Builder, run_query
    from dprivacy.service.plan import parse_plan
    from dprivacy.service.sources import Owner

    try:
        owner = Owner(cfg, analyst=analyst)
    except Exception as exc:  # noqa: BLE001 - reported to the service, which refuses to start
        conn.send(("failed", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
        return
    _warm_up(cfg, owner)
    builder = Builder(lambda s: owner.table(s, analyst), OrderedDict(), {}, cfg.max_as_pinq)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        stall, raw = job
        if stall:
            time.sleep(stall)
        try:
            plan = parse_plan(raw, cfg)
            assert plan.query is not None
            out: tuple[str, Any] = ("value", run_query(builder.table(plan.table), plan.query,
                                                       owner.releases.get(plan.source)))
        except DPrivacyError as exc:
            out = ("refused", type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - the service answers the default
            out = ("failed", type(exc).__name__)
        try:
            conn.send(out)
        except (OSError, ValueError):
            return


def _warm_up(cfg: ServiceConfig, owner: Any) -> None:
    """A count and a grouped count on an empty copy of each of the worker's sources: the first
    query of a process compiles code paths that later ones reuse (not the calibrated costs)."""
    from dataclasses import replace

    from dprivacy.service.execute import Builder, run_query
    from dprivacy.service.sources import Shadows, public_schema

    try:
        mine = replace(cfg, sources=tuple(s for s in cfg.sources if s.name in owner.raw))
        sh = Shadows(mine, {s.name: public_schema(s, owner.raw[s.name].schema())
                            for s in mine.sources}, owner.releases)
        for s in mine.sources:
            col = next(iter(owner.raw[s.name].schema().names))
            t = Builder(sh.table).table({"source": s.name, "steps": []})
            run_query(t, {"op": "noisy_count", "eps": 1.0})
            run_query(t, {"op": "grouped", "eps": 1.0, "by": col, "keys": [0, 1],
                          "aggs": {"n": {"how": "count"}}})
    except Exception as exc:  # noqa: BLE001 - a warm-up only
        log.warning("worker warm-up: %s", type(exc).__name__)


class LaneWorker:
    """The service's handle on one analyst's worker process (used from the analyst's dispatch
    thread only)."""

    def __init__(self, cfg: ServiceConfig, analyst: str) -> None:
        self.cfg, self.analyst = cfg, analyst
        self.nice = worker_nice(cfg, analyst)
        self.kills = 0
        self.proc: Any = None
        self.conn: Any = None
        self.ready = False
        self.dead = False
        self._start()

    def _start(self) -> None:
        ctx = context()
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=_worker_main, args=(self.cfg, self.analyst, theirs, self.nice),
                        name=f"dp-worker-{self.analyst}", daemon=True)
        p.start()
        theirs.close()
        self.proc, self.conn, self.ready, self.dead = p, mine, False, False

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return None if self.proc is None else self.proc.pid

    def wait_ready(self, until: float) -> bool:
        """Wait (until ``time.monotonic()`` reaches ``until``) for the worker to have opened its
        sources. Raises ConfigError if it could not."""
        if not self.ready:
            self.ready = wait_ready(self.conn, until, f"the worker of analyst {self.analyst!r} "
                                                      "could not open its sources")
        return self.ready

    def run(self, job: tuple[Any, ...], give_up: float) -> tuple[str, Any] | None:
        """Run ``job`` on the worker; its reply, or None if there was none by ``give_up``
        (``time.monotonic()``; the worker is then killed at once) or if the worker was killed
        and not replaced yet (nothing is sent: only :meth:`replace` starts a new one), or
        ``("starting", None)`` if its replacement had not opened its sources when the job came
        (nothing is sent: a job it could not finish in time would have it killed again)."""
        if self.dead:
            return None
        try:
            if not self.wait_ready(time.monotonic()):  # still starting (after a kill)
                return ("starting", None)
            self.conn.send(job)
            left = give_up - time.monotonic()
            if left > 0 and self.conn.poll(left):
                out: tuple[str, Any] = self.conn.recv()
                return out
        except (EOFError, OSError, ConfigError) as exc:
            log.warning("the worker of analyst %r failed (%s)", self.analyst, type(exc).__name__)
        self.kills += 1
        self._signal()
        self.dead = True
        return None

    def replace(self) -> None:
        """Start a new worker in place of a killed one (nothing if it is alive)."""
        if self.dead:
            self._kill()
            self._start()

    def restart(self) -> None:
        """Kill the worker (SIGKILL) and start a new one."""
        self.kills += 1
        self._kill()
        self._start()

    def _signal(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(OSError):
                os.kill(self.proc.pid, signal.SIGKILL)

    def _kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self._signal()
        if self.proc is not None:
            self.proc.join(timeout=10)
        if self.conn is not None:
            self.conn.close()

    def close(self) -> None:
        """Stop the worker (after the query it is running, at most a few seconds)."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.proc.join(timeout=5)
        self._kill()
        self.proc = None
