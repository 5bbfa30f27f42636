"""A progress bar for the command's long steps (tqdm on stderr; honours ``TQDM_DISABLE``).

The bar appears only once a run has lasted :data:`DELAY` seconds, so quick commands print
nothing extra; it names the current step and its elapsed time, refreshed by a background thread
while a step (such as the solver) runs without reporting progress itself.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: Seconds before the bar is shown.
DELAY = 2.0


class Steps:
    """A bar over named steps, shown after :data:`DELAY` seconds, closed by :meth:`close`.

    Examples
    --------
    >>> with Steps(["read", "solve"]) as steps:
    ...     with steps.step("read"):
    ...         pass
    """

    def __init__(self, names: Sequence[str], *, desc: str = "dprivacy",
                 delay: float = DELAY) -> None:
        self.names = list(names)
        self.desc = desc
        self.delay = delay
        self.t0 = time.monotonic()
        self.done = 0
        self.current = ""
        self._bar: Any = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        # tqdm reads TQDM_* variables when it is imported; read TQDM_DISABLE now as well
        if os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false"):
            return
        while not self._stop.wait(0.5):
            with self._lock:
                if self._bar is None and time.monotonic() - self.t0 >= self.delay:
                    from tqdm import tqdm

                    self._bar = tqdm(total=len(self.names), desc=self.desc, file=sys.stderr, disable=False,
                                     leave=False, unit="step", initial=self.done,
                                     bar_format="{desc}: {n_fmt}/{total_fmt} steps |{bar:20}| "
                                     "{elapsed} {postfix}")
                if self._bar is not None:
                    self._bar.set_postfix_str(self.current, refresh=False)
                    self._bar.refresh()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Run one named step (the bar shows its name while it runs)."""
        with self._lock:
            self.current = name
        yield
        with self._lock:
            self.done += 1
            if self._bar is not None:
                self._bar.update(1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
