"""Pieces shared by the two HiGHS methods for the optimal randomiser LP.

:func:`solvers.channels.optimal._cutting_planes` (one LP in all N² variables) and
:mod:`solvers.channels.dantzig_wolfe` (a master over rays plus one pricing LP per output) build
their HiGHS models, their pair rows ``v[i] - exp(b) v[j] <= 0`` and their starting pair sets the
same way; this module holds those three pieces once.

numpy/highspy only.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

__all__ = ["new_highs", "add_ratio_rows", "add_complement_rows", "nearest_pairs"]


def new_highs(threads: int | None = None) -> Any:
    """A silent HiGHS model with feasibility tolerances of 1e-10 (``threads``: HiGHS's own
    thread count, default HiGHS's choice)."""
    h = _highs_without_banner()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("primal_feasibility_tolerance", 1e-10)
    h.setOptionValue("dual_feasibility_tolerance", 1e-10)
    if threads is not None:
        h.setOptionValue("threads", threads)
    return h


_BANNER_LOCK = threading.Lock()
_banner_done = False


def _highs_without_banner() -> Any:
    """``highspy.Highs()``, with the C-level stdout sent to /dev/null while the first one of the
    process is built: HiGHS prints its copyright banner there once per process, whatever its
    options, and it would spill into a command's normal output."""
    global _banner_done
    import highspy

    with _BANNER_LOCK:
        if _banner_done:
            return highspy.Highs()
        try:
            sys.stdout.flush()
            saved = os.dup(1)
        except (OSError, ValueError):  # no usable fd 1: nothing to protect
            _banner_done = True
            return highspy.Highs()
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _banner_done = True
        return h


def add_ratio_rows(h: Any, i: np.ndarray, j: np.ndarray, eb: np.ndarray) -> None:
    """Add the rows ``v[i[k]] - eb[k] · v[j[k]] <= 0`` (column indices ``i``, ``j``) to ``h``."""
    k = i.size
    if k == 0:
        return
    idx = np.empty(2 * k, dtype=np.int32)
    idx[0::2], idx[1::2] = i, j
    val = np.empty(2 * k)
    val[0::2], val[1::2] = 1.0, -eb
    h.addRows(k, np.full(k, -np.inf), np.zeros(k), 2 * k, np.arange(0, 2 * k, 2, dtype=np.int32),
              idx, val)


def add_complement_rows(h: Any, i: np.ndarray, j: np.ndarray, eb: np.ndarray) -> None:
    """Add the rows ``(1 - v[i[k]]) <= eb[k] · (1 - v[j[k]])``, i.e.
    ``-v[i[k]] + eb[k] · v[j[k]] <= eb[k] - 1``, to ``h``."""
    k = i.size
    if k == 0:
        return
    idx = np.empty(2 * k, dtype=np.int32)
    idx[0::2], idx[1::2] = i, j
    val = np.empty(2 * k)
    val[0::2], val[1::2] = -1.0, eb
    h.addRows(k, np.full(k, -np.inf), eb - 1.0, 2 * k, np.arange(0, 2 * k, 2, dtype=np.int32),
              idx, val)


def nearest_pairs(eps: np.ndarray, neighbours: int) -> np.ndarray:
    """Boolean (N, N): x and x' are among each other's ``neighbours`` nearest inputs (either way)."""
    n = eps.shape[0]
    k = min(neighbours, n - 1)
    order = np.argsort(np.where(np.eye(n, dtype=bool), np.inf, eps), axis=1)[:, :k]
    near = np.zeros((n, n), dtype=bool)
    near[np.repeat(np.arange(n), k), order.ravel()] = True
    return near | near.T
