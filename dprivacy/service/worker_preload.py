"""Loaded once by the fork server of the analysts' workers and deciders
(:mod:`dprivacy.service.workers`, :mod:`dprivacy.service.deciders`), so that every process it
forks starts with the engine's modules imported and the budget kernels compiled, instead of
paying for them on its first query. The loaded objects are then frozen out of the garbage
collector (``gc.freeze``): a forked process's collections do not write to those shared pages,
so they stay shared between the processes instead of being copied into each. The fork server
runs ``DECIDER_NICE`` steps below the service process, so that forking a process (a worker
replacing a killed one) never delays the service's releases."""

from __future__ import annotations

import contextlib
import gc
import os

import ibis  # noqa: F401 - imported for the forks
import ibis.backends.duckdb  # noqa: F401

import dprivacy.service.decide  # noqa: F401
import dprivacy.service.execute  # noqa: F401
import dprivacy.service.sources  # noqa: F401
import dprivacy.tables  # noqa: F401
from dprivacy.service.shares import DECIDER_NICE
from dprivacy.tables.budgets import slot_kernels

# the fork server and what it forks run below the service's event loop from the first moment:
# a worker started in place of a killed one never competes with the releases (its process then
# sets its own priority, never higher than this)
with contextlib.suppress(OSError):
    os.nice(DECIDER_NICE)
slot_kernels.warm()
gc.collect()
gc.freeze()
