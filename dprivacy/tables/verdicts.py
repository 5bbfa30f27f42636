"""Theorem-1 verdicts of table releases, checked once per (workload, design, constraints).

A d_X release on a table (:mod:`dprivacy.tables.dx`) must check that its design satisfies the
privacy condition of Theorem 1 over every constrained pair before anything is charged; for 1000
elements that is 499 500 pairs and takes most of the release's time. The verdict depends only
on public numbers, so it is cached under a fingerprint (:mod:`dprivacy.fingerprints`) of
everything it reads: the workload F, the design's w and β (exact float bytes), and either the
metric on the universe (its fingerprint) or the design's own constraint set (the bytes of its
budgets or edges). A cached design is therefore one whose every input is bit-for-bit the one
that was verified; a changed number is a new key and is verified again. Only successes are
cached (a failing design raises every time); constraint sets given as an oracle function have no
content to fingerprint and are verified every time.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import scipy.sparse as sp

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.fingerprints import Hasher
from dprivacy.mechanisms.laplace import DXLaplace
from dprivacy.workload import Workload

__all__ = ["check_design", "clear", "element_costs"]

_CACHE: OrderedDict[str, tuple[float, np.ndarray]] = OrderedDict()
_LOCK = threading.Lock()
_SIZE = 256


def element_costs(workload: Any, design: Any) -> np.ndarray:
    """c_i = Σ_k u_k |F_ki| for every element i: the add/remove privacy loss of one record at i."""
    if not isinstance(workload, Workload):
        workload = Workload(workload)
    u = np.asarray(design.u, dtype=float)
    if u.shape != (workload.m,):
        raise ShapeError(f"design has u of shape {u.shape}; the workload has m = {workload.m}")
    F: np.ndarray | sp.csr_array = workload.F
    with np.errstate(invalid="ignore"):
        c = abs(F).T @ u if sp.issparse(F) else np.abs(np.asarray(F)).T @ u
    c = np.asarray(c, dtype=float).reshape(workload.N)
    if not np.all(np.isfinite(c)):
        i = int(np.flatnonzero(~np.isfinite(c))[0])
        raise ValidationError(
            f"element {i} has an infinite privacy cost Σ_k u_k|F_ki| (a query with beta = inf is "
            "answered exactly): a table release needs finite noise for every query that counts it"
        )
    return c


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        b = np.ascontiguousarray(a)
        h.update(str((b.dtype.str, b.shape)).encode())
        h.update(b.data.cast("B"))
    return h.hexdigest()


def _constraints_part(cs: Any) -> str | None:
    """A digest of a constraint set's budgets (None: an oracle, nothing to fingerprint)."""
    if cs is None:
        return "none"
    if cs.kind == "dense":
        return "dense:" + _digest(np.asarray(cs._eps, dtype="<f8"))
    if cs.kind == "edges":
        return "edges:" + _digest(np.array([cs.N], "<i8"), cs._I.astype("<i8"),
                                  cs._J.astype("<i8"), cs._E.astype("<f8"))
    return None


def _key(workload: Any, design: Any, universe: Any, metric: Any) -> str | None:
    h = Hasher("table-release-verdict").add(workload.fingerprint())
    h.add(_digest(np.asarray(design.w, dtype="<f8"), np.asarray(design.beta, dtype="<f8")))
    if metric is not None:
        h.add(b"metric").add(metric.fingerprint(universe))
    else:
        part = _constraints_part(getattr(design, "constraints", None))
        if part is None:
            return None
        h.add(b"constraints").add(part)
    return h.hexdigest()


def check_design(workload: Any, design: Any, universe: Any = None, metric: Any = None
                 ) -> tuple[float, np.ndarray]:
    """Theorem 1 for ``design`` on ``workload`` (against ``metric`` on ``universe`` if given,
    else the design's constraint set), from the cache or verified now (raising
    :class:`~dprivacy.errors.PrivacyViolationError` and the other errors of
    :class:`~dprivacy.DXLaplace` as it does). Returns (max ratio, element costs c_i of
    :func:`element_costs`, read-only)."""
    key = _key(workload, design, universe, metric)
    if key is not None:
        with _LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return hit
    if metric is None:
        ratio = DXLaplace(workload, design).max_ratio_
    else:
        ratio = DXLaplace(workload, design, universe=universe, metric=metric).max_ratio_
    costs = element_costs(workload, design)
    costs.setflags(write=False)
    out = (float(ratio), costs)
    if key is not None:
        with _LOCK:
            _CACHE[key] = out
            while len(_CACHE) > _SIZE:
                _CACHE.popitem(last=False)
    return out


def clear() -> None:
    """Forget every cached verdict."""
    with _LOCK:
        _CACHE.clear()
