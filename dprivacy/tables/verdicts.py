"""Theorem-1 verdicts of table releases, checked once per (workload, design, constraints).

A d_X release on a table (:mod:`dprivacy.tables.dx`) must check that its design satisfies the
privacy condition of Theorem 1 over every constrained pair before anything is charged; for 1000
elements that is 499 500 pairs and takes most of the release's time. The verdict depends only
on public numbers, so it is kept, with the library's own validated copies of those numbers
(:class:`Verified`), under two keys:

* a **content fingerprint** (:mod:`dprivacy.fingerprints`) of everything the verdict reads: the
  workload F, the design's w and β (exact float bytes), and either the metric on the universe
  (its fingerprint) or the design's own constraint set (the bytes of its budgets or edges). A
  changed number is a new key and is verified again. This is also the key of the optional
  persistent store (:mod:`dprivacy.tables.verdict_store`), so a new process need not re-verify;
* a **quick key** (shapes, the exact bytes of w and β, the metric's fingerprint or the constraint
  set's kind) whose entries are confirmed by comparing the caller's F and budgets element by
  element with the verified copies: a comparison reads each number once, cheaper than hashing
  it, and the release then uses the verified copies, never the caller's arrays, so a caller that
  changes its arrays during the release gets either a miss or exactly the verified numbers.

Only successes are kept (a failing design raises every time); constraint sets given as an
oracle function have no content to compare and are verified every time.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.fingerprints import Hasher
from dprivacy.mechanisms.laplace import DXLaplace
from dprivacy.tables import verdict_store
from dprivacy.tables.integer_release import integer_matrix
from dprivacy.workload import Workload

__all__ = ["Verified", "verify", "check_design", "clear", "element_costs"]

_LOCK = threading.Lock()
_SIZE = 256  # verdicts kept by content fingerprint
_QUICK_BYTES = 512 * 2**20  # memory of the verified copies kept for comparisons


@dataclass(frozen=True, eq=False)
class Verified:
    """A verified (workload, design): the library's own copies, the Theorem-1 ratio, the element
    costs c_i (read-only) and the integer form of w ⊙ F (or None; :mod:`.integer_release`)."""

    workload: Workload
    design: Any
    ratio: float
    costs: np.ndarray
    integer: Any
    budgets: tuple[np.ndarray, ...]  # copies of the constraint set's arrays ((): a metric)

    @property
    def nbytes(self) -> int:
        F = self.workload.F
        f = F.data.nbytes + F.indices.nbytes if sp.issparse(F) else np.asarray(F).nbytes
        return int(f + sum(a.nbytes for a in self.budgets))


_CACHE: OrderedDict[str, Verified] = OrderedDict()
_QUICK: OrderedDict[tuple, list[Verified]] = OrderedDict()


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


def _budget_arrays(cs: Any) -> tuple[np.ndarray, ...] | None:
    """The arrays a constraint set's verdict reads (None: an oracle, nothing to compare)."""
    if cs is None:
        return ()
    if cs.kind == "dense":
        return (np.asarray(cs._eps, dtype="<f8"),)
    if cs.kind == "edges":
        return (np.array([cs.N], "<i8"), np.asarray(cs._I).astype("<i8"),
                np.asarray(cs._J).astype("<i8"), np.asarray(cs._E).astype("<f8"))
    return None


def _key(workload: Any, design: Any, universe: Any, metric: Any) -> str | None:
    """The content fingerprint of a verdict (None: not cacheable)."""
    h = Hasher("table-release-verdict").add(workload.fingerprint())
    h.add(_digest(np.asarray(design.w, dtype="<f8"), np.asarray(design.beta, dtype="<f8")))
    if metric is not None:
        h.add(b"metric").add(metric.fingerprint(universe))
    else:
        cs = getattr(design, "constraints", None)
        parts = _budget_arrays(cs)
        if parts is None:
            return None
        h.add(b"constraints").add("none" if cs is None else f"{cs.kind}:" + _digest(*parts))
    return h.hexdigest()


def _quick_key(F: Any, w: np.ndarray, beta: np.ndarray, cs: Any, mfp: str | None) -> tuple | None:
    kind = "sparse" if sp.issparse(F) else "dense"
    try:
        shape = tuple(int(n) for n in F.shape)
    except (AttributeError, TypeError, ValueError):
        return None
    if mfp is not None:
        where: tuple = ("metric", mfp)
    elif cs is None:
        where = ("none",)
    else:
        where = ("constraints", str(getattr(cs, "kind", "?")), int(getattr(cs, "N", -1)))
    return (kind, shape, _digest(w, beta), where)


def _same_matrix(F: Any, G: Any) -> bool:
    if sp.issparse(F) != sp.issparse(G) or tuple(F.shape) != tuple(G.shape):
        return False
    if sp.issparse(F):
        return bool((sp.csr_array(cast(Any, F), dtype=cast(Any, float)) != G).nnz == 0)
    return bool(np.array_equal(np.asarray(F, dtype=float), G))


def _matches(v: Verified, F: Any, cs: Any, use_metric: bool) -> bool:
    if not _same_matrix(F, v.workload.F):
        return False
    if use_metric:
        return True
    parts = _budget_arrays(cs)
    return parts is not None and len(parts) == len(v.budgets) and all(
        a.shape == b.shape and np.array_equal(a, b) for a, b in zip(parts, v.budgets, strict=True))


def verify(workload: Any, design: Any, universe: Any = None, metric: Any = None) -> Verified:
    """Theorem 1 for ``design`` on ``workload`` (against ``metric`` on ``universe`` if given,
    else the design's constraint set), from the caches or verified now (raising
    :class:`~dprivacy.errors.PrivacyViolationError` and the other errors of
    :class:`~dprivacy.DXLaplace` as it does). Returns the library's verified copies."""
    from dprivacy.design import Design

    F_in = workload.F if isinstance(workload, Workload) else workload
    try:
        w_in = np.asarray(design.w, dtype=float)
        b_in = np.asarray(design.beta, dtype=float)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValidationError(f"design: expected w and beta arrays ({exc})") from exc
    cs = getattr(design, "constraints", None)
    mfp = metric.fingerprint(universe) if metric is not None else None
    quick = _quick_key(F_in, w_in, b_in, cs, mfp)
    if quick is not None:
        with _LOCK:
            cands = list(_QUICK.get(quick, ()))
        for v in cands:
            if _matches(v, F_in, cs, mfp is not None):
                return v
    # the slow path: our own validated copies, the content fingerprint, the full check
    F_copy = (sp.csr_array(cast(Any, F_in), dtype=cast(Any, float), copy=True) if sp.issparse(F_in)
              else np.array(F_in, dtype=float))
    W = Workload(F_copy)
    D = Design(w=w_in.copy(), beta=b_in.copy(), constraints=cs)
    key = _key(W, D, universe, metric)
    hit = None
    if key is not None:
        with _LOCK:
            hit = _CACHE.get(key)
    if hit is None:
        ratio = verdict_store.lookup(key) if key is not None else None
        if ratio is None:
            if metric is None:
                ratio = DXLaplace(W, D).max_ratio_
            else:
                ratio = DXLaplace(W, D, universe=universe, metric=metric).max_ratio_
            if key is not None:
                verdict_store.record(key, float(ratio))
        costs = element_costs(W, D)
        costs.setflags(write=False)
        with np.errstate(divide="ignore"):
            scale = np.where(D.w == 0, 0.0, 1.0 / D.beta)
        parts = () if metric is not None else _budget_arrays(cs)
        hit = Verified(W, D, float(ratio), costs, integer_matrix(W.F, D.w, scale),
                       tuple(np.array(a) for a in parts) if parts else ())
    if key is not None:
        _remember(key, quick, hit)
    return hit


def _remember(key: str, quick: tuple | None, v: Verified) -> None:
    with _LOCK:
        _CACHE[key] = v
        _CACHE.move_to_end(key)
        while len(_CACHE) > _SIZE:
            _CACHE.popitem(last=False)
        if quick is None:
            return
        lst = _QUICK.setdefault(quick, [])
        if not any(x is v for x in lst):
            lst.append(v)
        _QUICK.move_to_end(quick)
        total = sum(x.nbytes for vs in _QUICK.values() for x in vs)
        while total > _QUICK_BYTES and len(_QUICK) > 1:
            _, old = _QUICK.popitem(last=False)
            total -= sum(x.nbytes for x in old)


def check_design(workload: Any, design: Any, universe: Any = None, metric: Any = None
                 ) -> tuple[float, np.ndarray]:
    """(max ratio, element costs c_i, read-only) of :func:`verify`."""
    v = verify(workload, design, universe, metric)
    return v.ratio, v.costs


def clear() -> None:
    """Forget every cached verdict (in memory; the persistent store is not touched)."""
    with _LOCK:
        _CACHE.clear()
        _QUICK.clear()
