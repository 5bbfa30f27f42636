"""A directory of numbered versions with atomic, exclusive commits (the cluster budget store's
commit protocol, :mod:`dprivacy.tables.budgets.spark_budgets`).

Layout under ``root`` (a path of a filesystem that the driver and the executors share: a local
disk for a local session, a network mount on a cluster)::

    root/_commits/00000000000000000007.json   # commit 7: {"data": "v7-<token>", ...}
    root/v7-<token>/part-*.parquet            # the data of version 7 (written by the engine)
    root/_lock                                # serialises writers (flock)

A version's data is written to a fresh directory, flushed to disk, and only then published by
one atomic, exclusive step: its commit file is written and synced under a temporary name and
hard-linked to its final name (``link`` fails if another writer published that number first).
A writer killed at any point leaves the previous version current; its unpublished directory is
garbage, removed by the next :meth:`VersionLog.collect`. Spark's ``_SUCCESS`` marker is not used:
it says a write finished, not which directory is current.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dprivacy.errors import DPrivacyError, ValidationError

__all__ = ["VersionLog", "StoreLockTimeout"]

_DIGITS = 20


class StoreLockTimeout(DPrivacyError):
    """The budget store stayed locked by other processes for longer than the timeout; nothing
    was charged."""


class VersionLog:
    """Numbered versions of a dataset under ``root`` (see the module doc).

    Parameters:
        root: the store's directory (created if missing).
        timeout: seconds to wait for other processes' lock on the store.
    """

    def __init__(self, root: str | os.PathLike, *, timeout: float = 60.0) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.timeout = float(timeout)
        self._commits = os.path.join(self.root, "_commits")
        os.makedirs(self._commits, exist_ok=True)
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._pid = os.getpid()

    # ------------------------------------------------------------------ locking
    @contextmanager
    def locked(self) -> Iterator[VersionLog]:
        """This process's thread lock plus an exclusive ``flock`` on ``root/_lock``."""
        with self._thread_lock:
            if self._depth == 0:
                self._acquire()
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _acquire(self) -> None:
        if self._pid != os.getpid():  # a forked child: its own descriptor
            self._fd, self._pid = None, os.getpid()
        if self._fd is None:
            self._fd = os.open(os.path.join(self.root, "_lock"), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreLockTimeout(
                        f"the budget store {self.root} stayed locked by other processes for "
                        f"{self.timeout} s; nothing was charged") from None
                time.sleep(random.uniform(0.005, 0.05))

    # ------------------------------------------------------------------ versions
    def _name(self, k: int) -> str:
        return os.path.join(self._commits, f"{k:0{_DIGITS}d}.json")

    def numbers(self) -> list[int]:
        """The published version numbers, oldest first."""
        out = []
        for n in os.listdir(self._commits):
            stem, dot, ext = n.partition(".")
            if ext == "json" and dot and len(stem) == _DIGITS and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def latest(self) -> tuple[int, dict[str, Any] | None]:
        """(the newest version number, its commit) or (0, None) if nothing was published."""
        nums = self.numbers()
        return (nums[-1], self.read(nums[-1])) if nums else (0, None)

    def read(self, k: int) -> dict[str, Any]:
        """The commit of version ``k``."""
        with open(self._name(k), encoding="utf-8") as f:
            meta = json.load(f)
        if not isinstance(meta, dict) or "data" not in meta:
            raise ValidationError(f"{self._name(k)} is not a dprivacy budget-store commit")
        return meta

    def new_dir(self, k: int) -> str:
        """A fresh, unused data directory for a candidate version ``k`` (not created)."""
        return os.path.join(self.root, f"v{k}-{uuid.uuid4().hex}")

    def publish(self, k: int, meta: dict[str, Any]) -> bool:
        """Make version ``k`` current: write its commit durably, atomically and exclusively.
        Returns False (nothing changed) if another writer published ``k`` first. ``meta["data"]``
        names a directory under ``root`` whose files must already be on disk (:meth:`sync_dir`)."""
        tmp = os.path.join(self._commits, f".tmp-{k}-{uuid.uuid4().hex}")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({**meta, "version": k}, f)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, self._name(k))
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        _fsync_path(self._commits)
        return True

    def data_path(self, meta: dict[str, Any]) -> str:
        """The absolute data directory of a commit."""
        return os.path.join(self.root, meta["data"])

    def sync_dir(self, path: str) -> None:
        """fsync every file of a data directory (and the directories): its bytes are on disk
        before a commit can name it."""
        for dirpath, _dirs, files in os.walk(path):
            for name in files:
                _fsync_path(os.path.join(dirpath, name))
            _fsync_path(dirpath)
        _fsync_path(self.root)

    def collect(self, keep: int) -> None:
        """Delete every data directory except those of the newest ``keep`` versions (including
        directories no commit names: writers that died before publishing). Inside
        :meth:`locked`, so no writer of this store is between writing and publishing."""
        nums = self.numbers()
        live = {self.read(k)["data"] for k in nums[-max(int(keep), 1):]}
        for n in os.listdir(self.root):
            if n.startswith("v") and n not in live and os.path.isdir(os.path.join(self.root, n)):
                shutil.rmtree(os.path.join(self.root, n), ignore_errors=True)
        for n in os.listdir(self._commits):  # temporary commit files of dead writers
            if n.startswith(".tmp-"):
                os.unlink(os.path.join(self._commits, n))

    def bytes_of(self, meta: dict[str, Any]) -> int:
        """Bytes of the data files of a commit (Parquet parts; Spark's checksums excluded)."""
        total = 0
        for dirpath, _dirs, files in os.walk(self.data_path(meta)):
            total += sum(os.path.getsize(os.path.join(dirpath, n)) for n in files
                         if not n.endswith(".crc"))
        return total

    def close(self) -> None:
        """Close the lock file descriptor."""
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
