"""The compiled charge kernel of :mod:`dprivacy.tables.budgets.slot_kernels` (imports numba;
imported only when numba is installed). Compiled code is cached on disk by numba."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["charge", "charge_rows", "same_ids", "add_lanes", "debit_counts"]


@numba.njit(cache=True, nogil=True)
def charge(slots: np.ndarray, remaining: np.ndarray, paid: np.ndarray,
           amount: int) -> int:  # pragma: no cover - compiled
    """Per slot (in order): a negative slot is counted and skipped, a slot past the end is
    skipped, any other slot not yet ``paid`` pays ``amount`` if ``remaining`` covers it (no
    branch on the budget). Returns the number of negative slots."""
    n = remaining.size
    negative = 0
    for i in range(slots.size):
        s = slots[i]
        if s < 0:
            negative += 1
            continue
        if s >= n:
            continue
        r = remaining[s]
        p = (r >= amount) & (not paid[s])
        remaining[s] = r - amount * p
        paid[s] = paid[s] | p
    return negative


@numba.njit(cache=True, nogil=True)
def charge_rows(mask: np.ndarray, first: int, row_slots: np.ndarray, identity: bool,
                remaining: np.ndarray, paid: np.ndarray,
                amount: int) -> int:  # pragma: no cover - compiled
    """Rows ``first + i`` with ``mask[i] != 0`` are selected; a selected row's slot is the row
    number (``identity``) or ``row_slots[row]``; each selected slot is charged as by
    :func:`charge`. Every row costs the same work, selected or not, paying or not (no branch
    on either). Returns the number of selected rows, or -1 (nothing charged) if a row's slot
    lies past the end of ``remaining``.

    In row order (``identity``) the loop runs over slices of ``remaining`` and ``paid`` that
    the compiler can vectorise (about three times faster than indexing ``first + i``)."""
    n = remaining.size
    m_n = mask.size
    selected = 0
    if identity:
        if first < 0 or first + m_n > n:
            return -1
        rem = remaining[first: first + m_n]
        pay = paid[first: first + m_n]
        for i in range(m_n):
            m = mask[i] != 0
            selected += int(m)
            r = rem[i]
            p = m & (r >= amount) & (not pay[i])
            rem[i] = r - amount * p
            pay[i] = pay[i] | p
        return selected
    for i in range(m_n):
        s = row_slots[first + i]
        if s < 0 or s >= n:
            return -1
    for i in range(m_n):
        m = mask[i] != 0
        selected += int(m)
        s = row_slots[first + i]
        r = remaining[s]
        p = m & (r >= amount) & (not paid[s])
        remaining[s] = r - amount * p
        paid[s] = paid[s] | p
    return selected


@numba.njit(cache=True, nogil=True)
def add_lanes(acc: np.ndarray, bits: np.ndarray,
              lanes: np.ndarray) -> None:  # pragma: no cover - compiled
    """``acc[j] += lanes[bits[j]]``: eight per-slot counters (one per byte of the uint64) add
    the eight bits of a bitmap byte at once."""
    for j in range(bits.size):
        acc[j] += lanes[bits[j]]


@numba.njit(cache=True, nogil=True)
def debit_counts(remaining: np.ndarray, counts: np.ndarray,
                 amount: int) -> None:  # pragma: no cover - compiled
    """``remaining[s] -= amount * counts[s]`` for every slot."""
    for s in range(remaining.size):
        remaining[s] -= amount * np.int64(counts[s])


@numba.njit(cache=True, nogil=True)
def same_ids(current: np.ndarray, registered: np.ndarray,
             identity: bool) -> bool:  # pragma: no cover - compiled
    """Whether ``current`` equals ``registered`` (``identity``: equals 0, 1, 2, ...), read
    once, stopping at the first difference."""
    n = current.size
    if not identity and registered.size != n:
        return False
    for i in range(n):
        if current[i] != (i if identity else registered[i]):
            return False
    return True
