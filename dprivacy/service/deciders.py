"""Each analyst's decider process: the lane's work at arrival, out of the service's interpreter.

The service process runs the event loop that stamps every request's arrival and releases
every analyst's answers at their deadlines. Anything else it ran in Python would hold the
interpreter lock that the loop needs at those moments: when eight analysts' requests arrive
together, parsing their plans and deciding them (the plan on empty shadow tables, tens of
milliseconds each) delayed the arrival stamps and the releases of the others by hundreds of
milliseconds on a loaded machine. So each analyst's :class:`~dprivacy.service.decide.Decider`
runs in a process of its own (:class:`DeciderProcess`, forked from the workers' fork server):

* ``bound(raw)``: parse and check a query request's body, and bound its work (the deadline
  follows from the bound, :mod:`dprivacy.service.workbound`);
* ``decide_token(token)``: once the query is admitted, the decision at arrival (refusal, or the
  PINQ charge and the default answer);
* ``schema(raw, source)`` and ``budget(raw, busy)``: the analyst's schema and budget requests.

The service asks from the analyst's lane thread, which only waits on the pipe. The process
holds no data and reads none (empty shadow tables and the analyst's PINQ ledger records), so
how long it takes depends on the plan only; it runs ``DECIDER_NICE`` steps below the service
process (the event loop always runs first) and above the workers. Decider processes die with
the service, like the workers.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from dprivacy.service.child_process import context, enter_child, wait_ready
from dprivacy.service.config import ServiceConfig
from dprivacy.service.shares import DECIDER_NICE, base_nice

__all__ = ["DeciderProcess"]

#: what the service may ask a decider (the methods of Decider)
OPS = frozenset({"bound", "decide_token", "schema", "budget"})


def _decider_main(cfg: ServiceConfig, analyst: str, schemas: dict[str, Any],
                  releases: dict[str, Any], conn: Any, nice: int) -> None:
    """The decider process: build the analyst's Decider, then answer requests until the pipe
    closes. A request is ``(op, args)``; the reply the op's tuple, or ``("failed", name)``."""
    enter_child(nice)
    from dprivacy.service.decide import Decider

    try:
        d = Decider(cfg, analyst, schemas, releases)
    except Exception as exc:  # noqa: BLE001 - reported to the service, which refuses to start
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    d.warm_up()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        op, args = msg
        try:
            out = getattr(d, op)(*args) if op in OPS else ("failed", "unknown request")
        except Exception as exc:  # noqa: BLE001 - the service answers 500
            out = ("failed", type(exc).__name__)
        try:
            conn.send(out)
        except (OSError, ValueError):
            return


class DeciderProcess:
    """The service's handle on one analyst's decider process (used from the analyst's lane
    thread only)."""

    def __init__(self, cfg: ServiceConfig, analyst: str, schemas: dict[str, Any],
                 releases: dict[str, Any]) -> None:
        self.analyst = analyst
        self.nice = min(19, base_nice() + DECIDER_NICE)
        ctx = context()
        mine, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_decider_main,
                                args=(cfg, analyst, schemas, releases, theirs, self.nice),
                                name=f"dp-decider-{analyst}", daemon=True)
        self.proc.start()
        theirs.close()
        self.conn = mine
        self.ready = False

    @property
    def pid(self) -> int | None:
        """The decider's process id."""
        return self.proc.pid

    def wait_ready(self, until: float) -> bool:
        """Wait (until ``time.monotonic()`` reaches ``until``) for the decider to be built.
        Raises ConfigError if it could not be."""
        if not self.ready:
            self.ready = wait_ready(self.conn, until,
                                    f"the decider of analyst {self.analyst!r} could not start")
        return self.ready

    def call(self, op: str, *args: Any) -> tuple[Any, ...]:
        """Ask the decider ``op(*args)`` and wait for its reply (RuntimeError if it failed)."""
        try:
            self.conn.send((op, args))
            out: tuple[Any, ...] = self.conn.recv()
        except (EOFError, OSError) as exc:
            raise RuntimeError(f"the decider of analyst {self.analyst!r} is gone") from exc
        if out[0] == "failed":
            raise RuntimeError(f"the decider of analyst {self.analyst!r} failed: {out[1]}")
        return out

    def close(self) -> None:
        """Stop the decider process."""
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            with contextlib.suppress(OSError):
                self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()
