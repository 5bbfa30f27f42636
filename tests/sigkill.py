"""The crash driver shared by the durable-budget tests: run fresh worker interpreters that release
answers to a file, SIGKILLing the first few at random moments, until all answers are out."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np


def released(out: Path) -> int:
    """How many answers the workers have appended to ``out`` so far."""
    return len(out.read_text().splitlines()) if out.exists() else 0


def run_with_random_kills(spawn: Callable[[int], subprocess.Popen], out: Path, n: int, *,
                          kills_wanted: int, max_wait: float, seed: int, max_kills: int,
                          final_timeout: float = 300) -> int:
    """Start ``spawn(done)`` (a ready worker resuming after the ``done`` answers already in
    ``out``) until ``n`` answers are released, SIGKILLing each of the first ``kills_wanted``
    runs after a random time in [0, max_wait); later runs get ``final_timeout`` seconds.
    Returns the number of kills."""
    rng = np.random.default_rng(seed)
    done, kills = 0, 0
    while done < n:
        proc = spawn(done)
        try:
            proc.wait(timeout=rng.uniform(0.0, max_wait) if kills < kills_wanted else final_timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        done = released(out)
        assert kills < max_kills, "the worker never got through its queries"
    return kills
