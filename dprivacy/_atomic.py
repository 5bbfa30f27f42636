"""Atomic text files: write a temporary file in the target's folder, fsync it, then
``os.replace`` it over the target, so a reader (or a crash) never sees a half-written file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write_text"]


def atomic_write_text(path: str | os.PathLike, text: str, *,
                      on_create_error: Callable[[OSError], Exception] | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically and return the path.

    The file gets the ordinary permissions ``0o666 & ~umask`` (``mkstemp`` would leave 0600).
    ``on_create_error`` turns a failure to create the temporary file (missing or read-only
    folder) into the caller's own exception; other errors propagate, and the temporary file is
    removed whatever happens.
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        if on_create_error is None:
            raise
        raise on_create_error(exc) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return p
