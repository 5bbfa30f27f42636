"""The compiled charge kernel of :mod:`dprivacy.tables.budgets.slot_kernels` (imports numba;
imported only when numba is installed). Compiled code is cached on disk by numba."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["charge"]


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
    :func:`charge`. Returns the number of selected rows."""
    n = remaining.size
    selected = 0
    for i in range(mask.size):
        if mask[i] == 0:
            continue
        selected += 1
        s = first + i if identity else row_slots[first + i]
        if s < 0 or s >= n:
            continue
        r = remaining[s]
        p = (r >= amount) & (not paid[s])
        remaining[s] = r - amount * p
        paid[s] = paid[s] | p
    return selected


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
