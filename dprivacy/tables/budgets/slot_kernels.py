"""The kernel of a ProPer charge: debit the selected slots that can pay, chunk by chunk.

:func:`charge_chunk` takes one chunk of selected slots (as they stream out of the engine) and,
for each slot not yet marked in ``paid``, debits ``amount`` if the remaining budget covers it
and marks it. Every slot costs the same work whether it pays or not (no branch on the budget):
a query's time does not tell who was exhausted. A slot listed twice pays once.

With numba installed (the ``duckdb`` extra) the kernel is one compiled pass over the chunk
(nogil); otherwise a vectorised numpy gather/scatter computes the same thing. Compiling takes
about a second, so it happens once per process, when a large store is opened
(:func:`warm`), and the compiled code is cached on disk by numba.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["charge_chunk", "charge_rows", "same_ids", "credit", "BitFolder", "warm",
           "compiled"]

JIT_MIN_SLOTS = 1 << 16  # smaller stores use the numpy kernel (no compile)
_lock = threading.Lock()
_jit: Any = None  # the compiled kernel; False once compiling failed or numba is missing


def _compile() -> Any:
    from dprivacy.tables.budgets import slot_jit

    probe = np.zeros(2, np.int64)  # compile (or load from numba's cache) now, for writeable
    slot_jit.charge(probe, np.ones(2, np.int64), np.zeros(2, np.bool_), 1)
    probe.flags.writeable = False  # and read-only slots (zero-copy Arrow chunks)
    slot_jit.charge(probe, np.ones(2, np.int64), np.zeros(2, np.bool_), 1)
    mask, dummy = np.zeros(2, np.uint8), np.zeros(0, np.int64)
    for writeable in (True, False):
        mask.flags.writeable = writeable
        for row_slots in (dummy, probe):  # no row slots (identity), and read-only ones
            for identity in (True, False):
                slot_jit.charge_rows(mask, 0, row_slots, identity, np.ones(2, np.int64),
                                     np.zeros(2, np.bool_), 1)
    acc, bits = np.zeros(1, np.uint64), np.zeros(1, np.uint8)
    for writeable in (True, False):  # record bitmaps are read-only (views of the file's bytes)
        bits.flags.writeable = writeable
        slot_jit.add_lanes(acc, bits, _LANES)
    slot_jit.debit_counts(np.zeros(8, np.int64), acc.view(np.uint8), 1)
    ids = np.arange(2, dtype=np.int64)
    for writeable in (True, False):
        ids.flags.writeable = writeable
        slot_jit.same_ids(ids, dummy, True)
        slot_jit.same_ids(ids, probe, False)
    return slot_jit


def warm() -> bool:
    """Compile (or load) the numba kernel once per process; whether it is available."""
    global _jit
    with _lock:
        if _jit is None:
            try:
                _jit = _compile()
            except Exception:  # numba missing or unusable here: the numpy kernel
                _jit = False
        return _jit is not False


def compiled() -> Any:
    """The compiled kernel, or None (not compiled yet, or unavailable)."""
    return _jit or None


def charge_chunk(slots: np.ndarray, remaining: np.ndarray, paid: np.ndarray, amount: int, *,
                 jit: bool | None = None) -> int:
    """Charge one chunk of selected slots (int64; a negative slot is a ⊥ record, a slot
    ``>= remaining.size`` an unregistered id: both pay nothing). Updates ``remaining`` and the
    bool mask ``paid`` in place; returns the number of negative slots.

    ``jit``: use the compiled kernel (None: when the store is large and numba is available)."""
    if jit is None:
        jit = remaining.size >= JIT_MIN_SLOTS and warm()
    if jit:
        k = compiled() if warm() else None
        if k is not None:
            return int(k.charge(slots, remaining, paid, int(amount)))
    return _charge_numpy(slots, remaining, paid, int(amount))


def charge_rows(mask: np.ndarray, first: int, row_slots: np.ndarray | None,
                remaining: np.ndarray, paid: np.ndarray, amount: int, *,
                jit: bool | None = None) -> int:
    """Charge the rows ``first + i`` where the uint8 ``mask[i]`` is non-zero (a chunk of a
    source's rows in order); a row's slot is its number (``row_slots`` None) or
    ``row_slots[row]``. As :func:`charge_chunk` otherwise (the same work whoever pays);
    returns the number of selected rows, or -1 (nothing charged by this chunk) if a row lies
    past the store's slots or the row map."""
    n = remaining.size
    if first < 0 or first + mask.size > (n if row_slots is None else row_slots.size):
        return -1
    if jit is None:
        jit = n >= JIT_MIN_SLOTS and warm()
    if jit:
        k = compiled() if warm() else None
        if k is not None:
            dummy = row_slots if row_slots is not None else np.zeros(0, np.int64)
            return int(k.charge_rows(mask, int(first), dummy, row_slots is None, remaining,
                                     paid, int(amount)))
    rows = np.flatnonzero(mask) + int(first)
    slots = rows if row_slots is None else row_slots[rows]
    if slots.size and (int(slots.min()) < 0 or int(slots.max()) >= n):
        return -1
    _charge_numpy(slots, remaining, paid, int(amount))
    return int(rows.size)


def same_ids(current: np.ndarray, registered: np.ndarray | None) -> bool:
    """Whether the int64 ids ``current`` equal ``registered`` (None: equal 0, 1, 2, ...)."""
    n = int(current.size)
    if registered is not None and int(registered.size) != n:
        return False
    if n >= JIT_MIN_SLOTS and warm():
        k = compiled()
        if k is not None:
            ref = registered if registered is not None else np.zeros(0, np.int64)
            return bool(k.same_ids(current, ref, registered is None))
    if registered is None:
        return n == 0 or (int(current[0]) == 0 and bool(np.all(np.diff(current) == 1)))
    return bool(np.array_equal(current, registered))


def _charge_numpy(slots: np.ndarray, remaining: np.ndarray, paid: np.ndarray,
                  amount: int) -> int:
    n = remaining.size
    negative = int(np.count_nonzero(slots < 0))
    if negative or (slots.size and int(slots.max()) >= n):
        slots = slots[(slots >= 0) & (slots < n)]
    before = remaining[slots]
    ok = before >= amount
    ok &= ~paid[slots]  # listed in an earlier chunk: paid (or refused) once already
    remaining[slots] = before - amount * ok  # a slot listed twice in the chunk: same value
    paid[slots] |= ok
    return negative


def credit(remaining: np.ndarray, paid: np.ndarray, amount: int) -> None:
    """Undo a charge: ``remaining += amount`` where ``paid`` (a failed commit)."""
    if paid.size:
        remaining += paid.astype(np.int64) * int(amount)


def _lanes() -> np.ndarray:
    """For each byte value b, a uint64 whose L-th byte in memory is bit L of b in
    ``np.packbits`` order (the most significant bit first): eight 0/1 counters, one per slot
    of that byte, read back through a uint8 view."""
    b = np.arange(256, dtype=np.uint64)
    out = np.zeros(256, dtype=np.uint64)
    little = sys.byteorder == "little"
    for lane in range(8):
        at = 8 * lane if little else 8 * (7 - lane)
        out |= ((b >> np.uint64(7 - lane)) & np.uint64(1)) << np.uint64(at)
    return out


_LANES = _lanes()
_LANE_MAX = 255  # a byte counter holds this many bitmaps
_BLOCK = 1 << 18  # slots per block of a fold (its counters, 256 KiB, stay in the cache)


class BitFolder:
    """Subtracts many payers' bitmaps from ``remaining`` at once. The bitmaps are kept (not
    copied) until :meth:`flush`, which walks the slots block by block (``_BLOCK`` slots: the
    counters stay in the CPU's cache): in each block every bitmap of one amount adds one to a
    byte-wide counter per slot (eight slots per uint64 add), and the counters are debited from
    that block of budgets once (per 255 bitmaps). Replaying 33 half-full bitmaps of 10⁷ slots
    reads and writes the budgets once instead of 33 times, and the memory traffic is little
    more than the bitmaps themselves.

    Debits commute, so the order in which bitmaps are added does not matter; nothing is
    debited before :meth:`flush`."""

    def __init__(self, remaining: np.ndarray, *, jit: bool | None = None) -> None:
        self.remaining = remaining
        # the compiled kernels (None: when the store is large and numba is available)
        self.jit = remaining.size >= JIT_MIN_SLOTS if jit is None else bool(jit)
        self._pending: dict[int, list[np.ndarray]] = {}  # amount -> its bitmaps

    def add(self, bits: np.ndarray, amount: int) -> int:
        """Count the slots marked in ``bits`` (``np.packbits`` order over the first slots) as
        paying ``amount``; returns how many are marked. ``bits`` must not change until
        :meth:`flush`."""
        bits = np.asarray(bits, dtype=np.uint8)
        if bits.size > (self.remaining.size + 7) // 8:
            raise ValueError("a payers' bitmap names more slots than the store holds")
        self._pending.setdefault(int(amount), []).append(bits)
        return int(np.bitwise_count(bits).sum())

    def flush(self, pace: Callable[[], None] | None = None) -> None:
        """Debit every bitmap added so far (``pace()`` after each block, if given)."""
        pending, self._pending = self._pending, {}
        rem = self.remaining
        k = compiled() if self.jit and warm() else None
        for start in range(0, rem.size, _BLOCK):  # a multiple of 8: whole bytes of bitmaps
            stop = min(rem.size, start + _BLOCK)
            lo, hi = start // 8, (stop + 7) // 8
            acc = np.zeros(hi - lo, np.uint64)
            counts = acc.view(np.uint8)[: stop - start]  # byte L of acc[j]: slot 8j + L
            block = rem[start:stop]
            for amount, maps in pending.items():
                for first in range(0, len(maps), _LANE_MAX):
                    acc.fill(0)
                    for bits in maps[first: first + _LANE_MAX]:
                        part = bits[lo: min(hi, bits.size)]
                        if k is not None:
                            k.add_lanes(acc, part, _LANES)
                        else:
                            acc[: part.size] += _LANES[part]
                    if k is not None:
                        k.debit_counts(block, counts, amount)
                    else:
                        block -= counts.astype(np.int64) * amount
            if pace is not None:
                pace()
