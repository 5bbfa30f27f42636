"""What the service's child processes share: the fork-server context they are started from, the
set-up each does first (die with its parent, run at its nice level), and the wait for its
"ready" message.

The analysts' workers (:mod:`dprivacy.service.workers`) and deciders
(:mod:`dprivacy.service.deciders`) are both such children: started from one fork server that
has the engine's modules loaded, each sends ``("ready", pid)`` once built, or ``("failed",
reason)`` if it could not be.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

from dprivacy.errors import ConfigError

__all__ = ["context", "enter_child", "wait_ready"]

_PRELOAD = ["dprivacy.service.worker_preload"]
_CTX: Any = None
_CTX_LOCK = threading.Lock()


def context() -> Any:
    """The fork-server context (one per service process; its server loads the engine's modules
    once, so a child starts in a fraction of a second)."""
    global _CTX
    with _CTX_LOCK:
        if _CTX is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            _CTX = ctx
        return _CTX


def _die_with_parent() -> None:
    """Ask Linux for SIGKILL when the parent process dies (elsewhere: the pipe's end)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def enter_child(nice: int) -> None:
    """The first thing a child process does: die with its parent, and run at ``nice``."""
    _die_with_parent()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, nice)


def wait_ready(conn: Any, until: float, failed: str) -> bool:
    """Wait (until ``time.monotonic()`` reaches ``until``) for the child at the other end of
    ``conn`` to say it is ready: True once it has, False if it had not by then (with ``until``
    already past, whether it has said so: nothing is waited for). Raises ConfigError
    (``failed`` followed by the child's reason) if it could not be built."""
    while True:
        left = until - time.monotonic()
        if not conn.poll(max(0.0, left)):
            return False
        msg = conn.recv()
        if msg[0] == "failed":
            raise ConfigError(f"{failed}: {msg[1]}")
        if msg[0] == "ready":
            return True
