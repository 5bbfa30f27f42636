"""Real-time priority for the threads that release the answers, with a cap on its CPU.

Every answer of the service is released at its deadline by the service process's event loop;
the threads beside it (each analyst's lane and dispatch thread, the owner's log thread) wake
for moments and share the interpreter lock with it. Under Linux's fair scheduler (EEVDF) a
thread that has just worked for a few milliseconds (several answers released, or requests read,
at the same moment) has used more than its fair share, and once the workers keep every CPU busy
it waits in the run queue until they have caught up: measured on a 2-CPU machine with eight
workers, the event loop was runnable but not running for up to 45 ms, and every release due
then came late by as much (a nice value or a short slice does not change this).

A thread of the ``SCHED_FIFO`` real-time class runs as soon as it is runnable, before every
fair-scheduled process. :func:`enter` gives the calling thread that class (priority
:data:`RT_PRIORITY`, with ``SCHED_RESET_ON_FORK``: a thread or process it starts is back in the
fair class), where the system allows it: as root, with ``CAP_SYS_NICE``, or with an
``RLIMIT_RTPRIO`` of at least 3 (systemd's ``LimitRTPRIO=3``, ``ulimit -r 3``). Elsewhere the
thread asks for the shortest fair slice (:mod:`dprivacy.service.slices`) as before.

A real-time thread is never preempted by the workers, so requests could take their CPU: a
:class:`Guard` measures the service process's CPU time and, while it is above
:data:`CPU_CAP` of one CPU over the last second (a flood of requests), moves every registered
thread back to the fair class; they return to real time after :data:`CALM_SECONDS` below half
the cap. The workers therefore never lose more than about :data:`CPU_CAP` of one CPU to the
real-time threads. What the guard does depends on the requests' number and sizes only (the
service process never reads the protected data), never on the data.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable

from dprivacy.service.slices import set_slice

log = logging.getLogger("dprivacy.service")

__all__ = ["RT_PRIORITY", "CPU_CAP", "CALM_SECONDS", "enter", "to_fair", "policy_of", "Guard"]

#: the real-time priority of the release path's threads (above every fair thread; one step
#: above the lowest, so that other real-time work of the owner's can be put below them)
RT_PRIORITY = 2
#: the guard's priority: above the threads it may have to move back to the fair class
GUARD_PRIORITY = 3
#: the fraction of one CPU the service process may use over a second while it is real-time
CPU_CAP = 0.25
#: how long the process's use must stay below half the cap before real time is given back
CALM_SECONDS = 5.0


def _fifo(tid: int, priority: int) -> bool:
    policy = getattr(os, "SCHED_FIFO", None)
    if policy is None:  # not Linux
        return False
    try:
        os.sched_setscheduler(tid, policy | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    except (OSError, AttributeError):
        return False
    return True


def enter(priority: int = RT_PRIORITY) -> bool:
    """Put the calling thread in the real-time class at ``priority`` if the system allows it
    (True); otherwise ask for the shortest fair slice (False)."""
    if _fifo(0, priority):
        return True
    set_slice()
    return False


def to_fair(tid: int = 0) -> bool:
    """Move thread ``tid`` (0: the calling thread) to the fair class (``SCHED_OTHER``), with the
    shortest slice if it is the calling thread. True if it was moved."""
    try:
        os.sched_setscheduler(tid, os.SCHED_OTHER | os.SCHED_RESET_ON_FORK, os.sched_param(0))
    except (OSError, AttributeError):
        return False
    if tid == 0:
        set_slice()
    return True


def policy_of(tid: int = 0) -> str:
    """``"realtime"`` if thread ``tid`` (0: the calling thread) is in the FIFO class, else
    ``"fair"``."""
    try:
        pol = os.sched_getscheduler(tid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    except (OSError, AttributeError):
        return "fair"
    return "realtime" if pol == getattr(os, "SCHED_FIFO", -1) else "fair"


class Guard:
    """Keeps the real-time threads of this process within :data:`CPU_CAP` of one CPU.

    ``enter()`` is called by each thread of the release path (it registers the thread); the
    guard's own thread samples the process's CPU time every ``period`` seconds and moves the
    registered threads to the fair class while the last second's use is above the cap, back
    to real time after ``calm`` seconds below half of it. ``clock`` and ``cpu`` (seconds) are
    for tests."""

    def __init__(self, cap: float = CPU_CAP, calm: float = CALM_SECONDS, period: float = 0.1,
                 clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.process_time) -> None:
        self.cap, self.calm, self.period = cap, calm, period
        self._clock, self._cpu = clock, cpu
        self._tids: set[int] = set()
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, float]] = deque()
        self._calm_since: float | None = None
        self.realtime = False  # whether the registered threads are in the real-time class now
        self.allowed = False  # whether the system granted real time at all
        self.demotions = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def enter(self) -> bool:
        """Register the calling thread and give it real time if the guard has it now (else the
        shortest fair slice); True if it is real-time."""
        tid = threading.get_native_id()
        with self._lock:
            self._tids.add(tid)
            first = self._thread is None and not self.allowed
            want = self.realtime or first
        if not want:
            set_slice()
            return False
        got = enter()
        with self._lock:
            if first and got:
                self.allowed = self.realtime = True
                self._start()
        return got

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dp-rt-guard", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        enter(GUARD_PRIORITY)
        while not self._stop.wait(self.period):
            self.tick()

    def use(self) -> float:
        """The process's CPU use over the last second (fraction of one CPU), from the samples."""
        if len(self._samples) < 2:
            return 0.0
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0

    def tick(self) -> None:
        """Sample the CPU time; demote or promote the registered threads."""
        now = self._clock()
        self._samples.append((now, self._cpu()))
        while len(self._samples) > 2 and now - self._samples[1][0] >= 1.0:
            self._samples.popleft()
        used = self.use()
        if self.realtime and used > self.cap:
            self._set(False)
            self.demotions += 1
            self._calm_since = None
            log.warning("the service process used %.0f%% of a CPU over the last second (its "
                        "real-time cap is %.0f%%): its threads are in the fair class until it "
                        "has used less than half that for %g s", 100 * used, 100 * self.cap,
                        self.calm)
        elif not self.realtime and self.allowed:
            if used > self.cap / 2:
                self._calm_since = None
            elif self._calm_since is None:
                self._calm_since = now
            elif now - self._calm_since >= self.calm:
                self._set(True)

    def _set(self, realtime: bool) -> None:
        with self._lock:
            tids = sorted(self._tids)
            self.realtime = realtime
        gone = []
        for tid in tids:
            ok = _fifo(tid, RT_PRIORITY) if realtime else to_fair(tid)
            if not ok and not os.path.exists(f"/proc/self/task/{tid}"):
                gone.append(tid)
        with self._lock:
            self._tids.difference_update(gone)

    def close(self) -> None:
        """Stop the guard's thread."""
        self._stop.set()
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._thread.join(timeout=1.0)
