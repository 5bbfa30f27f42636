"""An optional persistent store of Theorem-1 verdicts, so that a new process need not re-verify.

Verifying a design's privacy condition over every pair (Theorem 1) is the slow part of the first
table release of a process (1000 elements: about a second). With a store enabled by the data
owner, each verdict the library has verified is written to ``<folder>/<fingerprint>.json`` and
later processes read it instead of re-checking. The fingerprint is the content key of
:mod:`dprivacy.tables.verdicts` (workload, design's w and β, metric on universe or budgets).

**Who writes it, and why a forged file does not help.** Only the library writes a verdict, and
only after verifying it. Every file carries an HMAC-SHA256 (RFC 2104) of its fingerprint, ratio,
library version and format under a secret key of at least 32 bytes that the data owner keeps
**apart from the entries**: a key file given to :func:`use` (``key=``; created once from the OS
CSPRNG, mode 0600, if it does not exist) or named by the environment variable
``DPRIVACY_VERDICT_KEY_FILE``, or the key's bytes themselves. A key file inside the store folder
is refused, and no file of the folder is ever read as a key, so whoever can read (or write) the
folder cannot sign an entry. A file whose MAC does not verify (edited, copied from another
fingerprint or another store, signed with any other key) is ignored: the design is verified again
(and refused if it is not private), and the file is rewritten. The store refuses a folder or key
file that other users may write, or a key file that they may read
(:class:`~dprivacy.errors.ValidationError` at :func:`use`). An analyst of the query service never
touches the file system; code running inside the data owner's own process is trusted anyway (it
could read the data).

Enable it with :func:`use` (``use(None)`` turns it off) or the environment variables
``DPRIVACY_VERDICT_STORE`` (a folder) and ``DPRIVACY_VERDICT_KEY_FILE`` (the key file, outside
that folder), read at the first release. Off by default.
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


#: the shortest key accepted, in bytes (a new key file holds this many CSPRNG bytes)
KEY_BYTES = 32


def _check_folder(folder: Path) -> None:
    """Create the store folder if needed and check that only this user may write it."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if _unsafe(st.st_mode, readable=False) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        raise ValidationError(f"verdict store {folder}: the folder must belong to this user and "
                              "be writable by nobody else (chmod 700)")


def _key_file(path: Path, folder: Path) -> bytes:
    """The key held in ``path`` (created if missing); refused inside the store folder."""
    where, store = path.resolve(), folder.resolve()
    if where == store or store in where.parents:
        raise ValidationError(f"verdict store {folder}: the key file {path} is inside the store "
                              "folder; keep it apart from the entries it signs (e.g. in the data "
                              "owner's home folder), or anyone who can read the folder could "
                              "sign a verdict")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ValidationError(f"verdict store key {path}: cannot create it ({exc})") from None
    else:
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(KEY_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
    st = path.stat()
    if _unsafe(st.st_mode, readable=True) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        raise ValidationError(f"verdict store key {path}: the key file must belong to this user "
                              "and be readable by this user only (chmod 600)")
    secret = path.read_bytes()
    if len(secret) < KEY_BYTES:
        raise ValidationError(f"verdict store key {path}: shorter than {KEY_BYTES} bytes; delete "
                              "it to have a new one made")
    return secret


def _secret(folder: Path, key: bytes | str | os.PathLike | None) -> bytes:
    if key is None:
        env = os.environ.get("DPRIVACY_VERDICT_KEY_FILE")
        if not env:
            raise ValidationError(
                f"verdict store {folder}: give the key that signs its entries, kept apart from "
                "them: use(folder, key='path/to/verdicts.key') or the environment variable "
                "DPRIVACY_VERDICT_KEY_FILE (a file outside the folder; created if missing)")
        key = env
    if isinstance(key, (bytes, bytearray)):
        if len(key) < KEY_BYTES:
            raise ValidationError(f"verdict store: a key must have at least {KEY_BYTES} bytes")
        return bytes(key)
    return _key_file(Path(key), folder)


def use(path: str | os.PathLike | None, key: bytes | str | os.PathLike | None = None) -> None:
    """Keep verdicts in the folder ``path`` (created, 0700), or none with None.

    ``key`` signs the entries and must live apart from them: a key file outside ``path``
    (created with a fresh random key, mode 0600, if it does not exist) or the key's bytes (at
    least 32). Default: the file named by ``DPRIVACY_VERDICT_KEY_FILE``; without either, a store
    is refused (:class:`~dprivacy.errors.ValidationError`).
    """
    with _LOCK:
        if path is None:
            _STATE.update(init=True, folder=None, secret=None)
            return
        p = Path(path)
        _check_folder(p)
        secret = _secret(p, key)
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
