"""Each analyst's share of the machine: the priority of their worker process and the fraction of
a CPU it is guaranteed.

Every analyst's queries run in a worker process of their own (:mod:`dprivacy.service.workers`),
one engine thread each. The operating system's fair scheduler (Linux CFS) gives every runnable
process CPU time in proportion to its *weight*, which follows from its nice value (1024 at nice
0, about 1.25 times less per step, the kernel's ``sched_prio_to_weight`` table). The workers run
``WORKER_NICE`` steps below the service process (so that the service's event loop, which
releases the answers, always runs first), plus a few steps for an analyst whose declared
``share`` is smaller than the largest one. With ``cpus`` CPUs, analyst ``a``'s worker is
therefore guaranteed

    ``f_a = min(1, cpus · w_a / Σ_b w_b)``

of one CPU whenever it is runnable, whatever the other analysts' workers do: a flooding analyst
has one worker, one query at a time, and its weight. The service process itself mostly sleeps
(it reads requests and waits for deadlines); each analyst's decider process
(:mod:`dprivacy.service.deciders`) works briefly at each admitted request, on empty tables
(a cost that depends on the plan only, within the margin of the calibrated costs); processes
outside the service (other users of the
machine) take their own share, which the margin of the calibrated costs must cover.

Everything here follows from the configuration and the service process's own nice value, never
from requests or data.
"""

from __future__ import annotations

import math
import os

from dprivacy.service.config import ServiceConfig

__all__ = ["WORKER_NICE", "DECIDER_NICE", "worker_nice", "cpu_fraction", "nice_weight",
           "base_nice"]

#: how many nice steps the workers run below the service process
WORKER_NICE = 5
#: how many nice steps the analysts' decider processes (:mod:`dprivacy.service.deciders`) run
#: below the service process: after its event loop, before the workers
DECIDER_NICE = 2

# Linux's sched_prio_to_weight for nice 0..19 (kernel/sched/core.c)
_WEIGHTS = (1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
            110, 87, 70, 56, 45, 36, 29, 23, 18, 15)


def nice_weight(nice: int) -> int:
    """The scheduler's weight of a process at ``nice`` (0..19; below 0 counts as 0)."""
    return _WEIGHTS[min(19, max(0, nice))]


def base_nice() -> int:
    """This process's nice value (the service process's, where the service computes shares)."""
    return os.getpriority(os.PRIO_PROCESS, 0)


def worker_nice(cfg: ServiceConfig, analyst: str, base: int | None = None) -> int:
    """The nice value of ``analyst``'s worker: the service's own (``base``; default this
    process's), plus ``WORKER_NICE``, plus ``round(log_1.25(largest share / own share))``;
    at most 19."""
    b = base_nice() if base is None else base
    top = max(cfg.share(a.name) for a in cfg.analysts)
    extra = round(math.log(top / cfg.share(analyst)) / math.log(1.25))
    return min(19, b + WORKER_NICE + max(0, extra))


def cpu_fraction(cfg: ServiceConfig, analyst: str, base: int | None = None) -> float:
    """``f_a``: the fraction of one CPU ``analyst``'s worker is guaranteed (module doc)."""
    weights = {a.name: nice_weight(worker_nice(cfg, a.name, base)) for a in cfg.analysts}
    return min(1.0, cfg.cpus * weights[analyst] / sum(weights.values()))
