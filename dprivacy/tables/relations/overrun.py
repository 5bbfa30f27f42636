"""A time limit on each call of an analyst's per-record function (pandas backend).

A per-record function that runs too long on one record (an endless loop or a slow path taken only
for some value) is stopped and counts as a function that raised: the record gets its documented
default (dropped, None, the midpoint of [lo, hi], score 0), like any other failure. The limit is
:data:`CALL_TIME_LIMIT` seconds per call (default 1 s; the data owner may change it).

How: while a table runs analyst functions (:func:`watch`), a periodic ``SIGALRM`` timer ticks
every :data:`TICK` seconds; at a tick, if the current call has run longer than the limit, the
handler raises :class:`Overrun` inside it, which the caller (``rowwise._call``) catches.

Limits (in-process Python cannot do better; the service runs queries in another process):

* only in the main thread, and only when no other ``SIGALRM`` handler or real-time timer is in
  use (it never replaces one); elsewhere calls run without a limit;
* a long operation in C that does not return to the interpreter (a huge integer power, a
  regular expression that backtracks) is stopped only when it returns;
* a function that catches ``BaseException`` and keeps running is interrupted again at every
  tick, and may keep running;
* the time a query takes still depends on what the functions do with the records: that time is
  observable by the analyst in-process, after the query has been charged.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

__all__ = ["CALL_TIME_LIMIT", "TICK", "Overrun", "watch", "started", "stopped"]

CALL_TIME_LIMIT = 1.0
"""Seconds one call of an analyst function may run before it counts as failed."""
TICK = 0.05
"""Seconds between two checks of the running call."""


class Overrun(BaseException):  # noqa: N818 - not an error of the program, a stop signal
    """Raised inside an analyst function that overran :data:`CALL_TIME_LIMIT`."""


class _State(threading.local):
    start: float | None = None


_STATE = _State()


def started() -> None:
    """Mark the start of one analyst call (this thread)."""
    _STATE.start = time.monotonic()


def stopped() -> None:
    """Mark the end of the current analyst call."""
    _STATE.start = None


def _tick(signum: int, frame: FrameType | None) -> None:
    t0 = _STATE.start
    if t0 is not None and time.monotonic() - t0 > CALL_TIME_LIMIT:
        raise Overrun()


@contextlib.contextmanager
def watch() -> Iterator[None]:
    """Enforce the per-call limit while the block runs analyst functions (see the module doc)."""
    usable = (threading.current_thread() is threading.main_thread()
              and hasattr(signal, "setitimer")
              and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
              and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))
    if not usable:
        yield
        return
    old = signal.signal(signal.SIGALRM, _tick)
    try:
        signal.setitimer(signal.ITIMER_REAL, TICK, TICK)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0, 0.0)
        signal.signal(signal.SIGALRM, old if old is not None else signal.SIG_DFL)
        stopped()
