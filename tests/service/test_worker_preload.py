"""The fork server's preload: importing it anywhere else changes nothing about the process; the
fork server itself runs below its parent with its objects frozen out of the collector."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

from dprivacy.service.child_process import context
from dprivacy.service.shares import DECIDER_NICE

_IMPORT = """
import gc, json, os
calls = []
os.nice = lambda n: calls.append(("nice", n))
_setpriority = os.setpriority
os.setpriority = lambda *a: calls.append(("setpriority", a))
before = os.getpriority(os.PRIO_PROCESS, 0)
import dprivacy.service.worker_preload as wp
print(json.dumps({"calls": calls, "before": before,
                  "after": os.getpriority(os.PRIO_PROCESS, 0),
                  "frozen": gc.get_freeze_count(),
                  "in_fork_server": getattr(wp, "in_fork_server", lambda: None)()}))
"""


def test_importing_the_preload_leaves_the_process_alone() -> None:
    out = subprocess.run([sys.executable, "-c", _IMPORT], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ), check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # no priority change asked for (whatever the process's nice, even 19), none made
    assert got["calls"] == []
    assert got["after"] == got["before"]
    assert got["frozen"] == 0
    assert got["in_fork_server"] is False


def test_the_fork_server_runs_below_its_parent_with_its_objects_frozen() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    with context().Pool(1) as pool:  # a child of the fork server
        server = pool.apply(os.getppid)
        frozen = pool.apply(gc.get_freeze_count)
    assert server != os.getpid()
    assert os.getpriority(os.PRIO_PROCESS, server) == min(19, base + DECIDER_NICE)
    assert frozen > 0
