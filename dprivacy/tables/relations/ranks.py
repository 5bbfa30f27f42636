"""Exact rank counts of values against candidates, for the noisy order statistics of
:mod:`dprivacy.tables.quantiles` (the pandas relation's; the engine computes them in SQL,
:mod:`dprivacy.tables.relations.engine.ranks`)."""

from __future__ import annotations

import numpy as np

__all__ = ["counts_from_sorted"]


def counts_from_sorted(values: np.ndarray, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(#{v < c}, #{v = c}) per candidate c from the values (any order), exactly."""
    v = np.sort(np.asarray(values, dtype=float))
    lt = np.searchsorted(v, cands, side="left")
    le = np.searchsorted(v, cands, side="right")
    return lt.astype(np.int64), (le - lt).astype(np.int64)
