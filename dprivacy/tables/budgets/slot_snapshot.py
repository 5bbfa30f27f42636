"""Building a snapshot of a :class:`~dprivacy.tables.budgets.slot_store.SlotStore` file, in
this process or in a child process of its own.

A background compaction rebuilds the budgets from the store's file (its snapshot and the records
up to a given offset, their bitmaps folded together), compresses them and writes them, synced,
to a temporary file. That is most of its work, and it runs best in a process of its own at a
lower CPU priority (``python -m dprivacy.tables.budgets.slot_snapshot PATH INODE OFFSET TMP``):
a thread of the querying process would share its interpreter lock, and a query could wait for
a thread the scheduler starves. The child only writes the temporary file; the querying process
appends the records committed meanwhile and renames it over the store, under the store's lock.
This module imports numpy and pyarrow only (no numba, no pandas), so the child starts quickly.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.tables.budgets.slot_kernels import BitFolder
from dprivacy.tables.budgets.slot_records import (
    _MAGIC,
    _REC,
    _REC_HEAD,
    _apply_record,
    _pack,
    _unpack,
    _unpack_array,
)

__all__: list[str] = []

SYNC_SLICE = 1 << 20  # a snapshot is written and synced 1 MiB at a time
STALE = 3  # the child's exit status when the store was replaced meanwhile
# The child's CPU priority. At nice 19 a process whose queries keep both cores busy gave it
# so little CPU that a snapshot took 50 queries and fell behind (the query path then compacts);
# at nice 5 it gets about a quarter of a busy core and lands within about 15 queries.
CHILD_NICE = 5
_PACK_PIECE = 8 << 20  # a paced snapshot compresses the budgets 8 MiB at a time
Pace = Callable[[], None] | None


def _read_snapshot(f: Any, path: str) -> tuple[dict[str, Any], list[bytes], int]:
    """(the header, the compressed blobs, the offset of the first record) of the snapshot at
    the start of the open file ``f``, its CRC checked."""
    head = f.read(16)
    if len(head) < 16 or head[:8] != _MAGIC:
        raise ValidationError(f"{path} is not a dprivacy budget file")
    (mlen,) = struct.unpack("<Q", head[8:])
    meta_b = f.read(mlen)
    meta = json.loads(meta_b)
    blobs = [f.read(n) for n in meta["blobs"]]
    (crc,) = struct.unpack("<I", f.read(4))
    got = zlib.crc32(meta_b, zlib.crc32(head[8:]))
    for b in blobs:
        got = zlib.crc32(b, got)
    if got != crc:
        raise ValidationError(f"{path}: the budget snapshot is corrupt (CRC)")
    return meta, blobs, f.tell()


def _replay_into(data: bytes, remaining: np.ndarray, queries: list[list[Any]], *,
                 jit: bool | None = None, pace: Pace = None) -> tuple[int, int | None]:
    """Apply the complete records at the start of ``data`` to ``remaining`` (their bitmaps
    folded together: :class:`~dprivacy.tables.budgets.slot_kernels.BitFolder`) and append
    them to ``queries``; returns (the bytes they take, the next query number or None if
    there was no record)."""
    pos = 0
    next_query = None
    folder = BitFolder(remaining, jit=jit)
    try:
        while pos + _REC_HEAD.size <= len(data):
            magic, n, crc = _REC_HEAD.unpack_from(data, pos)
            payload = data[pos + _REC_HEAD.size: pos + _REC_HEAD.size + n]
            if magic != _REC or len(payload) < n or zlib.crc32(payload) != crc:
                break
            (mlen,) = struct.unpack_from("<I", payload, 0)
            meta = json.loads(payload[4: 4 + mlen])
            payers, total = _apply_record(remaining, meta, payload, 4 + mlen, folder)
            next_query = int(meta["q"]) + 1
            queries.append([int(meta["q"]), meta["label"], payers, total])
            pos += _REC_HEAD.size + n
    finally:
        folder.flush(pace)
    return pos, next_query


def _replayed(path: str, ino: int | None, off: int, *, jit: bool | None = None,
              pace: Pace = None) -> tuple[Any, ...] | None:
    """The arguments of :func:`_snapshot_bytes` for the budgets as the file ``path`` holds them
    up to byte ``off`` (its snapshot and the records before ``off``; ids and initial budgets
    kept compressed, as they never change), read into fresh arrays; None if the file is no
    longer inode ``ino``."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_ino != ino:
            return None
        meta, blobs, start = _read_snapshot(f, path)
        if start > off:
            return None
        data = f.read(off - start)
    raw = meta["raw"]
    remaining = _unpack_array(blobs[2], raw[2])
    queries = json.loads(_unpack(blobs[3], raw[3]) or b"[]")
    if pace is not None:
        pace()
    pos, nq = _replay_into(data, remaining, queries, jit=jit, pace=pace)
    if pos != len(data):
        return None
    packed = (blobs[0], int(raw[0]), blobs[1], int(raw[1]))
    return (bool(meta["identity"]), None, None, remaining, queries, int(meta["next_id"]),
            int(meta["next_query"]) if nq is None else nq, packed)


def _snapshot_bytes(identity: bool, ids: np.ndarray | None, initial: np.ndarray | None,
                    remaining: np.ndarray, queries: list[list[Any]], next_id: int,
                    next_query: int, packed: tuple[bytes, int, bytes, int] | None = None,
                    pace: Pace = None) -> bytes:
    """The snapshot: magic, header, compressed arrays and query log, CRC-32 (``identity``:
    slot i holds person i, no ids stored; ``packed``: ids and initial budgets already
    compressed, with their sizes, as an earlier snapshot holds them — records never change
    either; else they are compressed from ``ids`` and ``initial``)."""
    log = json.dumps(queries).encode()
    if packed is None:
        assert initial is not None and (identity or ids is not None)
        packed = (b"" if identity or ids is None else _pack(ids),
                  0 if identity or ids is None else ids.nbytes, _pack(initial), initial.nbytes)
    blobs = [packed[0], packed[2], _pack_paced(remaining, pace), _pack(log)]
    raw = [packed[1], packed[3], remaining.nbytes, len(log)]
    meta = json.dumps({"n": int(remaining.size), "identity": identity, "next_id": next_id,
                       "next_query": next_query, "blobs": [len(b) for b in blobs],
                       "raw": raw}).encode()
    body = struct.pack("<Q", len(meta)) + meta + b"".join(blobs)
    return _MAGIC + body + struct.pack("<I", zlib.crc32(body))


def _pack_paced(a: np.ndarray, pace: Pace) -> bytes:
    """``_pack(a)``, or with ``pace`` the same bytes compressed as consecutive frames of
    ``_PACK_PIECE`` bytes each (one stream: decompressed in one call), ``pace()`` after each."""
    if pace is None or a.nbytes <= _PACK_PIECE:
        return _pack(a)
    raw = a.reshape(-1).view(np.uint8)
    out = []
    for start in range(0, raw.size, _PACK_PIECE):
        out.append(_pack(raw[start: start + _PACK_PIECE]))
        pace()
    return b"".join(out)


class Pacer:
    """Called between slices of work: sleeps so that the work takes about ``duty`` of the
    time since the first call (a background job's memory traffic then spreads over many
    queries instead of slowing a few)."""

    def __init__(self, duty: float) -> None:
        self.duty = float(duty)
        self.last = time.perf_counter()

    def __call__(self) -> None:
        worked = time.perf_counter() - self.last
        time.sleep(min(1.0, worked * (1.0 - self.duty) / self.duty))
        self.last = time.perf_counter()


def _write_synced(path: str, data: bytes, pace: Pace = None) -> None:
    """Write ``data`` to a new file ``path``, synced in slices of ``SYNC_SLICE`` (a query's own
    commit, an fsync on the same disk, never waits behind the whole snapshot)."""
    with open(path, "wb") as f:
        view = memoryview(data)
        for start in range(0, len(data), SYNC_SLICE):
            f.write(view[start: start + SYNC_SLICE])
            f.flush()
            os.fdatasync(f.fileno())
            if pace is not None:
                pace()
        os.fsync(f.fileno())


def build(path: str, ino: int, off: int, tmp: str, *, jit: bool | None = None,
          pace: Pace = None) -> int | None:
    """Write the snapshot of the store file ``path`` (inode ``ino``) up to byte ``off`` to
    ``tmp``, synced; its size, or None if the file is no longer that inode. ``pace``: called
    between slices of the work (a :class:`Pacer`)."""
    state = _replayed(path, ino, off, jit=jit, pace=pace)
    if state is None:
        return None
    identity, ids, initial, remaining, queries, next_id, next_query, packed = state
    data = _snapshot_bytes(identity, ids, initial, remaining, queries, next_id, next_query,
                           packed, pace=pace)
    _write_synced(tmp, data, pace)
    return len(data)


def main(argv: list[str] | None = None) -> int:
    """The child process: ``PATH INODE OFFSET TMP``; prints the snapshot's size (exit 0) or
    exits with ``STALE``."""
    args = sys.argv[1:] if argv is None else argv
    try:
        os.nice(CHILD_NICE)  # below the queries
    except OSError:
        pass
    path, ino, off, tmp = args[0], int(args[1]), int(args[2]), args[3]
    size = build(path, ino, off, tmp, jit=False)  # numpy: no compiler to load in this process
    if size is None:
        return STALE
    print(size, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
