"""The on-disk record format of :class:`~dprivacy.tables.budgets.slot_store.SlotStore`.

A store file is ``DPBUDGT1``, a snapshot, then one record per charged query:
``DPQ1 | payload length | CRC-32 | payload``, where the payload is a JSON header (query number,
label, number of slots, the groups of payers) followed by the payers' bitmaps or (slot, amount)
pairs. A record is appended with one ``write`` and ``fsync``: that is the charge's commit.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Any

import numpy as np
import pyarrow as pa

from dprivacy.tables.budgets.slot_kernels import BitFolder

__all__: list[str] = []

_MAGIC, _REC = b"DPBUDGT1", b"DPQ1"
_REC_HEAD = struct.Struct("<4sII")  # magic, payload length, CRC-32 of the payload
_CODEC = "zstd"


def _pack(a: np.ndarray | bytes) -> bytes:
    raw = a.tobytes() if isinstance(a, np.ndarray) else a
    return pa.compress(raw, codec=_CODEC, asbytes=True) if raw else b""


def _unpack(blob: bytes, size: int) -> bytes:
    if size == 0:
        return b""
    return pa.decompress(blob, decompressed_size=size, codec=_CODEC, asbytes=True)


def _unpack_array(blob: bytes, size: int, dtype: type = np.int64) -> np.ndarray:
    """A compressed array decompressed into a fresh, writable buffer (no second copy)."""
    if size == 0:
        return np.zeros(0, dtype=dtype)
    buf = pa.decompress(blob, decompressed_size=size, codec=_CODEC)
    out: np.ndarray = np.frombuffer(buf, dtype)
    return out if out.flags.writeable else out.copy()


def _append(path: str, off: int, rec: bytes) -> int:
    """Append ``rec`` to the file (which ends at ``off``) and sync it: the commit. On failure
    the file is cut back to ``off`` (no half record may precede later ones)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        if os.write(fd, rec) != len(rec):
            raise OSError("short write to the budget file")
        os.fsync(fd)
    except BaseException:
        os.truncate(path, off)
        raise
    finally:
        os.close(fd)
    return len(rec)


def _encode(qid: int, label: str | None, n: int, slots: np.ndarray,
            amounts: int | np.ndarray, ok: np.ndarray | None) -> bytes:
    """One record. One amount: the payers' bitmap over the n slots, uncompressed (its size and
    the work to build it do not depend on who pays). Several amounts: per distinct amount a
    compressed bitmap, or (if smaller) the compressed (slot, amount) pairs."""
    if isinstance(amounts, int):
        mask = np.zeros(n, dtype=bool)
        mask[slots] = True if ok is None else ok
        return _encode_bits(qid, label, n, np.packbits(mask).tobytes(), amounts)
    groups: list[list[Any]] = []
    blobs: list[bytes] = []
    amt = np.asarray(amounts)
    if ok is not None:
        slots, amt = slots[ok], amt[ok]
    vals = np.unique(amt) if amt.size else np.zeros(0, np.int64)
    if vals.size * ((n + 7) // 8) <= slots.size * 16:
        for v in vals.tolist():
            mask = np.zeros(n, dtype=bool)
            mask[slots[amt == v]] = True
            packed = np.packbits(mask)
            blob = _pack(packed)
            groups.append(["bits", int(v), packed.nbytes, len(blob)])
            blobs.append(blob)
    elif slots.size:
        pairs = np.stack([slots, amt]).astype(np.int64)
        blob = _pack(pairs)
        groups.append(["pairs", 0, pairs.nbytes, len(blob)])
        blobs.append(blob)
    return _record(qid, label, n, groups, blobs)


def _encode_bits(qid: int, label: str | None, n: int, bits: bytes, amount: int) -> bytes:
    """One record where every payer pays ``amount``: ``bits`` is their bitmap over the n slots
    (``np.packbits``), stored uncompressed (same size and work whoever pays)."""
    return _record(qid, label, n, [["raw", int(amount), len(bits), len(bits)]], [bits])


def _record(qid: int, label: str | None, n: int, groups: list[list[Any]],
            blobs: list[bytes]) -> bytes:
    meta = json.dumps({"q": qid, "label": label, "n": n, "groups": groups}).encode()
    payload = b"".join([struct.pack("<I", len(meta)), meta, *blobs])
    return _REC_HEAD.pack(_REC, len(payload), zlib.crc32(payload)) + payload


_BLOCK = 1 << 20  # slots per block when a bitmap is applied densely (bounded temporaries)


def _debit_bits(remaining: np.ndarray, bits: np.ndarray, amount: int) -> int:
    """Subtract ``amount`` from the slots whose bit is set in ``bits`` (``np.packbits`` order),
    block by block with dense arithmetic (no slot list: about 7 times faster than
    ``flatnonzero`` and a scatter on a half-full bitmap of 10^7 slots). Returns the payers."""
    n = remaining.size
    amt = np.int64(amount)
    for start in range(0, n, _BLOCK):
        stop = min(n, start + _BLOCK)
        flags = np.unpackbits(bits[start // 8: (stop + 7) // 8], count=stop - start)
        remaining[start:stop] -= flags * amt
    return int(np.bitwise_count(bits).sum())


def _apply_record(remaining: np.ndarray, meta: dict, payload: bytes, pos: int,
                  folder: BitFolder | None = None) -> tuple[int, int]:
    """Debit one record's charges from ``remaining`` (its bitmaps through ``folder`` if
    given: then they are debited when it is flushed); returns (payers, total charged)."""
    n = int(meta["n"])
    if n > remaining.size:
        raise ValueError("a budget record names more slots than the store holds")
    payers = total = 0
    for kind, v, raw, size in meta["groups"]:
        blob = payload[pos: pos + size]
        pos += size
        data = np.frombuffer(blob if kind == "raw" else _unpack(blob, raw), np.uint8)
        if kind in ("bits", "raw"):
            k = (_debit_bits(remaining[:n], data, int(v)) if folder is None
                 else folder.add(data, int(v)))
            payers += k
            total += k * int(v)
        else:
            pairs = data.view(np.int64).reshape(2, -1)
            if pairs.shape[1]:
                remaining[pairs[0]] -= pairs[1]
            payers += int(pairs.shape[1])
            total += int(pairs[1].sum())
    return payers, total


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
