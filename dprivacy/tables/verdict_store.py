"""An optional persistent store of Theorem-1 verdicts, so that a new process need not re-verify.

Verifying a design's privacy condition over every pair (Theorem 1) is the slow part of the first
table release of a process (1000 elements: about a second). With a store enabled by the data
owner, each verdict the library has verified is written to ``<folder>/<fingerprint>.json`` and
later processes read it instead of re-checking. The fingerprint is the content key of
:mod:`dprivacy.tables.verdicts` (workload, design's w and β, metric on universe or budgets).

**Who writes it, and why a forged file does not help.** Only the library writes a verdict, and
only after verifying it. Every file carries an HMAC-SHA256 (RFC 2104) of its fingerprint, ratio,
library version and format under a 32-byte secret drawn from the OS CSPRNG and kept in
``<folder>/secret.key`` (created once, mode 0600). A file whose MAC does not verify (edited,
copied from another fingerprint or another store, written by someone without the secret) is
ignored: the design is verified again (and refused if it is not private), and the file is
rewritten. So the store is as trustworthy as the secret: keep the folder private to the data
owner's account. The store refuses a folder or secret that other users may write, or a secret
that they may read (:class:`~dprivacy.errors.ValidationError` at :func:`use`). An analyst of the
query service never touches the file system; code running inside the data owner's own process
is trusted anyway (it could read the data).

Enable it with :func:`use` (``use(None)`` turns it off) or the environment variable
``DPRIVACY_VERDICT_STORE`` (a folder), read at the first release. Off by default.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import threading
from pathlib import Path

from dprivacy._atomic import atomic_write_text
from dprivacy._version import __version__
from dprivacy.errors import ValidationError

__all__ = ["use", "folder", "lookup", "record"]

_FORMAT = "dprivacy-verdict/1"
_LOCK = threading.Lock()
_STATE: dict[str, object] = {"init": False, "folder": None, "secret": None}


def _unsafe(mode: int, readable: bool) -> bool:
    bad = stat.S_IWGRP | stat.S_IWOTH | ((stat.S_IRGRP | stat.S_IROTH) if readable else 0)
    return bool(mode & bad)


def _open(folder: Path) -> bytes:
    """Create the folder and its secret if needed; check their permissions; return the secret."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if _unsafe(st.st_mode, readable=False) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        raise ValidationError(f"verdict store {folder}: the folder must belong to this user and "
                              "be writable by nobody else (chmod 700)")
    key = folder / "secret.key"
    try:
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(32))
            fh.flush()
            os.fsync(fh.fileno())
    st = key.stat()
    if _unsafe(st.st_mode, readable=True):
        raise ValidationError(f"verdict store {key}: the secret must be readable by this user "
                              "only (chmod 600)")
    secret = key.read_bytes()
    if len(secret) != 32:
        raise ValidationError(f"verdict store {key}: not a 32-byte secret; delete the folder")
    return secret


def use(path: str | os.PathLike | None) -> None:
    """Keep verdicts in the folder ``path`` (created, 0700), or none with None."""
    with _LOCK:
        if path is None:
            _STATE.update(init=True, folder=None, secret=None)
            return
        p = Path(path)
        secret = _open(p)
        _STATE.update(init=True, folder=p, secret=secret)


def folder() -> Path | None:
    """The store's folder (None: no store)."""
    _init()
    f = _STATE["folder"]
    return f if isinstance(f, Path) else None


def _init() -> None:
    if not _STATE["init"]:
        env = os.environ.get("DPRIVACY_VERDICT_STORE")
        use(env if env else None)


def _mac(secret: bytes, key: str, ratio: float) -> str:
    msg = json.dumps([_FORMAT, __version__, key, ratio.hex()], separators=(",", ":"))
    return hmac.new(secret, msg.encode(), hashlib.sha256).hexdigest()


def _file(f: Path, key: str) -> Path | None:
    return f / f"{key}.json" if len(key) == 64 and all(c in "0123456789abcdef" for c in key) \
        else None


def lookup(key: str) -> float | None:
    """The stored ratio of the verdict ``key`` if a valid, authenticated file holds it."""
    _init()
    f, secret = _STATE["folder"], _STATE["secret"]
    if not isinstance(f, Path) or not isinstance(secret, bytes):
        return None
    path = _file(f, key)
    if path is None:
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        ratio = float.fromhex(rec["ratio"])
        ok = (rec["format"] == _FORMAT and rec["version"] == __version__ and rec["key"] == key
              and hmac.compare_digest(str(rec["mac"]), _mac(secret, key, ratio)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ratio if ok else None


def record(key: str, ratio: float) -> None:
    """Write the verified verdict ``key`` (atomically; errors writing are ignored)."""
    _init()
    f, secret = _STATE["folder"], _STATE["secret"]
    if not isinstance(f, Path) or not isinstance(secret, bytes):
        return
    path = _file(f, key)
    if path is None:
        return
    rec = {"format": _FORMAT, "version": __version__, "key": key, "ratio": float(ratio).hex(),
           "mac": _mac(secret, key, float(ratio))}
    try:
        atomic_write_text(path, json.dumps(rec, sort_keys=True))
    except OSError:
        pass  # a store that cannot be written only costs a re-verification later
