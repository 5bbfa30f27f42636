"""A short scheduler slice for the thread that runs the service's event loop.

Linux's fair scheduler (EEVDF, since 6.6) lets a task ask for a shorter time slice than the
default (``sched_runtime`` of ``sched_setattr`` for ``SCHED_OTHER``, honoured since 6.12,
between 0.1 and 100 ms, no privilege needed). A task with a shorter slice has an earlier virtual
deadline when it wakes, so it preempts a task with the default slice (a worker, a decider,
another user's job) at once instead of waiting for that task's slice to run out. The service's
event loop sleeps almost all the time and wakes for a request's bytes or a release: it asks for
the shortest slice, so those wake-ups are not delayed by up to a slice of whatever else is
running. The CPU share it gets does not change (that follows from its nice value alone).

Nothing here depends on requests or data. Elsewhere (another system, an older kernel) the
request is refused and nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["SHORT_SLICE_NS", "set_slice", "current_slice"]

#: the shortest slice Linux grants (0.1 ms)
SHORT_SLICE_NS = 100_000
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}


class _SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32),
                ("sched_flags", ctypes.c_uint64), ("sched_nice", ctypes.c_int32),
                ("sched_priority", ctypes.c_uint32), ("sched_runtime", ctypes.c_uint64),
                ("sched_deadline", ctypes.c_uint64), ("sched_period", ctypes.c_uint64)]


def _calls() -> tuple[object, int, int] | None:
    if not sys.platform.startswith("linux"):
        return None
    nums = _SYSCALLS.get(os.uname().machine)
    if nums is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc, nums[0], nums[1]


def _get_attr() -> tuple[object, int, _SchedAttr] | None:
    """(libc, the set call's number, the calling thread's attributes), or None if the system
    does not say."""
    calls = _calls()
    if calls is None:
        return None
    libc, set_, get = calls
    attr = _SchedAttr()
    if libc.syscall(get, 0, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:  # type: ignore[attr-defined]
        return None
    return libc, set_, attr


def current_slice() -> int | None:
    """The calling thread's slice in nanoseconds (``sched_runtime``), or None if the system
    does not say."""
    got = _get_attr()
    return None if got is None else int(got[2].sched_runtime)


def set_slice(ns: int = SHORT_SLICE_NS) -> bool:
    """Ask for a slice of ``ns`` nanoseconds for the calling thread, keeping its policy and
    nice value (only for ``SCHED_OTHER``). True if the system granted it."""
    got = _get_attr()
    if got is None:
        return False
    libc, set_, attr = got
    if attr.sched_policy != 0:  # not SCHED_OTHER: left alone
        return False
    attr.size = ctypes.sizeof(attr)
    attr.sched_flags = 0
    attr.sched_runtime = ns
    if libc.syscall(set_, 0, ctypes.byref(attr), 0) != 0:  # type: ignore[attr-defined]
        return False
    return current_slice() == ns
