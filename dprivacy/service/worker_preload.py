"""Loaded once by the fork server of the analysts' workers and deciders
(:mod:`dprivacy.service.workers`, :mod:`dprivacy.service.deciders`), so that every process it
forks starts with the engine's modules imported and the budget kernels compiled, instead of
paying for them on its first query.

Importing the module only imports the engine's modules. The fork server's own set-up is
:func:`prepare_fork_server`, which runs when the fork server itself imports the module (and in
no other process): it lowers the fork server's priority ``DECIDER_NICE`` steps below the
service process, so that forking a process (a worker replacing a killed one) never delays the
service's releases, compiles the budget kernels, and freezes the loaded objects out of the
garbage collector (``gc.freeze``): a forked process's collections do not write to those shared
pages, so they stay shared between the processes instead of being copied into each."""

from __future__ import annotations

import contextlib
import gc
import os
import sys

import ibis  # noqa: F401 - imported for the forks
import ibis.backends.duckdb  # noqa: F401

import dprivacy.service.decide  # noqa: F401
import dprivacy.service.execute  # noqa: F401
import dprivacy.service.sources  # noqa: F401
import dprivacy.tables  # noqa: F401
from dprivacy.service.shares import DECIDER_NICE
from dprivacy.tables.budgets import slot_kernels

__all__ = ["prepare_fork_server", "in_fork_server"]


def prepare_fork_server() -> None:
    """The fork server's set-up: ``DECIDER_NICE`` steps below the process it was started from
    (a worker started in place of a killed one never competes with the releases; each child then
    sets its own priority, never higher than this), the budget kernels compiled, the loaded
    objects frozen out of the garbage collector."""
    with contextlib.suppress(OSError):
        os.nice(DECIDER_NICE)
    slot_kernels.warm()
    gc.collect()
    gc.freeze()


def in_fork_server() -> bool:
    """Whether this module is being imported by :mod:`multiprocessing`'s fork server loading
    its preload list (its ``main`` is on the stack)."""
    import multiprocessing.forkserver as fs

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is fs.main.__code__:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


if in_fork_server():
    prepare_fork_server()
