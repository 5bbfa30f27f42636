"""The metric base class, budget validation and the shortest-path closure (Definition 2).

A metric d_X on the universe defines the privacy budget eps_ij = d_X(chi_i, chi_j) of every pair.
It must satisfy eps_ii = 0, eps_ij = eps_ji >= 0 and eps_ij <= eps_ik + eps_kj (Definition 2).
+inf means "no constraint"; a zero distance between distinct elements means "indistinguishable".
"""

from __future__ import annotations

import hashlib
import json
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from dprivacy.errors import MetricError, ShapeError, TriangleInequalityError, ValidationError
from dprivacy.fingerprints import Hasher, canonical_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from dprivacy.universe import Universe
    from solvers import ConstraintSet
    from solvers.pruned import GeometricIndex

#: Above this many elements the budget is never held as one dense N x N matrix.
DENSE_LIMIT = 8000


class ClosureWarning(UserWarning):
    """A budget matrix broke the triangle inequality and was replaced by its closure."""


def shortest_path_closure(eps: np.ndarray) -> np.ndarray:
    """The shortest-path closure d-bar of a non-negative symmetric matrix.

    d-bar is the largest metric below ``eps``; +inf entries are non-edges and zero entries are
    kept as zero-weight edges.  Any mechanism that is d-bar-private is also eps-private.
    """
    from scipy.sparse.csgraph import csgraph_from_dense, shortest_path  # slow import: on use

    graph = csgraph_from_dense(np.asarray(eps, dtype=float), null_value=np.inf)
    return shortest_path(graph, method="auto", directed=False)


def _worst_triple(eps: np.ndarray, closed: np.ndarray) -> tuple[int, int, int]:
    with np.errstate(invalid="ignore"):
        gap = np.where(np.isinf(eps) & np.isinf(closed), 0.0, eps - closed)
    gap = np.nan_to_num(gap, nan=0.0, posinf=np.finfo(float).max)
    i, j = np.unravel_index(int(np.argmax(gap)), gap.shape)
    via = eps[i, :] + eps[:, j]
    via[[i, j]] = np.inf
    k = int(np.argmin(via))
    return int(i), int(j), k


def validate_budget(
    eps: np.ndarray, *, strict: bool = False, check_triangle: bool = True,
    labels: list[str] | None = None, rtol: float = 1e-12,
) -> np.ndarray:
    """Validate a budget matrix and return it (closed under the triangle inequality).

    Checks: square, no NaN, non-negative, zero diagonal, symmetric.  When ``check_triangle`` the
    matrix is compared with its shortest-path closure; a violating matrix is replaced by the
    closure with a :class:`ClosureWarning` naming the worst triple, or rejected with
    :class:`TriangleInequalityError` when ``strict``.
    """
    a = np.array(eps, dtype=float, copy=True)

    def name(i: int) -> str:
        return f"{i} ({labels[i]})" if labels is not None else str(i)

    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ShapeError(f"a budget matrix must be square, got shape {a.shape}")
    if np.isnan(a).any():
        i, j = np.argwhere(np.isnan(a))[0]
        raise MetricError(f"eps[{i}, {j}] is NaN: every pair needs a budget (use inf for none)")
    if (a < 0).any():
        i, j = np.argwhere(a < 0)[0]
        raise MetricError(f"eps[{i}, {j}] = {a[i, j]}: a metric is non-negative")
    diag = np.diag(a)
    if np.any(diag != 0):
        i = int(np.flatnonzero(diag != 0)[0])
        raise MetricError(f"eps[{i}, {i}] = {diag[i]}: a metric is zero on the diagonal")
    both_inf = np.isinf(a) & np.isinf(a.T)
    with np.errstate(invalid="ignore"):
        diff = np.where(both_inf, 0.0, np.abs(a - a.T))
    scale = np.where(both_inf, 1.0, np.maximum(np.abs(a), np.abs(a.T)))
    bad = diff > rtol * np.where(np.isfinite(scale), scale, 1.0)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise MetricError(
            f"eps[{i}, {j}] = {a[i, j]} but eps[{j}, {i}] = {a[j, i]}: a metric is symmetric"
        )
    a = np.minimum(a, a.T)  # exact symmetry after the tolerance check
    if not check_triangle or a.shape[0] < 3:
        return a
    closed = shortest_path_closure(a)
    viol = closed < a * (1 - 1e-12)
    if viol.any():
        i, j, k = _worst_triple(a, closed)
        msg = (
            f"the budget breaks the triangle inequality: eps[{name(i)}, {name(j)}] = {a[i, j]:.6g}"
            f" > eps[{name(i)}, {name(k)}] + eps[{name(k)}, {name(j)}] = {a[i, k] + a[k, j]:.6g}"
            f" ({int(viol.sum()) // 2} pairs violate)"
        )
        if strict:
            raise TriangleInequalityError(msg + "; pass strict=False to use its shortest-path closure")
        warnings.warn(msg + "; using its shortest-path closure instead", ClosureWarning,
                      stacklevel=3)
        return closed
    return a


_TINY = np.finfo(float).tiny


def checked_budget(metric: Metric, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """Run ``compute`` (budget entries) refusing float64 overflow and subnormal budgets.

    A finite distance whose budget overflows to inf would silently mean "no constraint", and a
    subnormal one (below 2.2e-308) is too small to divide by: both raise :class:`MetricError`
    naming the metric, instead of being mistaken for "no constraint" or for eps = 0.
    """
    try:
        with np.errstate(over="raise"):
            eps = np.asarray(compute())
    except FloatingPointError as exc:
        raise MetricError(
            f"{metric!r}: a budget overflows float64 (above {np.finfo(float).max:.3g}) and would "
            "be taken for +inf, i.e. no constraint; use smaller parameters (e.g. a larger "
            "distance unit)"
        ) from exc
    tiny = (eps > 0) & (eps < _TINY)
    if np.any(tiny):
        where = tuple(int(t) for t in np.argwhere(tiny)[0])
        raise MetricError(
            f"{metric!r}: budget entry {where} = {float(eps[where]):.3g} is subnormal (positive "
            f"but below {_TINY:.3g}), too small to compute with (it is not 0, yet noise would "
            "have to be ~1/eps); use larger parameters (e.g. a smaller distance unit)"
        )
    return eps


class Metric(ABC):
    """A metric d_X on a universe, i.e. the budget eps_ij of every pair (Definition 2).

    Subclasses implement :meth:`_raw_budget` (and, where cheaper, :meth:`block` and
    :meth:`edges`).  ``strict`` turns the closure warning into an error.
    """

    #: True when the construction always yields a metric (no triangle check needed).
    metric_by_construction: bool = True
    strict: bool = False

    # -- to implement ------------------------------------------------------------
    @abstractmethod
    def _raw_budget(self, universe: Universe) -> np.ndarray:
        """The (N, N) budget before validation and closure."""

    def params(self) -> dict[str, Any]:
        """The metric's parameters, JSON-serialisable (used in fingerprints and configs)."""
        out = {}
        for k, v in vars(self).items():
            if k.startswith("_"):
                continue
            if isinstance(v, np.ndarray):
                v = v.tolist()
            out[k] = v
        return out

    # -- provided ----------------------------------------------------------------
    @property
    def name(self) -> str:
        return type(self).__name__

    def _check_universe(self, universe: Universe) -> None:  # noqa: B027 (optional hook)
        """Hook: raise when the metric cannot apply to ``universe``."""

    def budget(self, universe: Universe) -> np.ndarray:
        """The validated (N, N) budget matrix eps (closed under the triangle inequality).

        Raises a :class:`MemoryError`-free :class:`ValidationError` above
        ``DENSE_LIMIT`` elements: use :meth:`block` or :meth:`constraint_set` there.
        Cached under :meth:`fingerprint`, i.e. everything that determines the budget.
        """
        cache = self.__dict__.setdefault("_cache", {})
        key = self.fingerprint(universe)
        if key in cache:
            return cache[key]
        self._check_universe(universe)
        if universe.N > DENSE_LIMIT:
            raise ValidationError(
                f"N = {universe.N} is above the dense limit {DENSE_LIMIT}: the budget would take "
                f"{universe.N ** 2 * 8 / 2**30:.1f} GiB; use metric.block(...) or constraint_set(...)"
            )
        raw = checked_budget(self, lambda: self._raw_budget(universe))
        eps = validate_budget(
            raw, strict=self.strict, check_triangle=not self.metric_by_construction,
            labels=universe.labels() if universe.N <= 100_000 else None,
        )
        eps.setflags(write=False)
        cache.clear()
        cache[key] = eps
        return eps

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        """Budget rows eps[rows, :] of shape (len(rows), N)."""
        return self.budget(universe)[np.asarray(rows)]

    def edges(self, universe: Universe) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """For graph-type metrics, an edge list (i, j, eps_ij) whose shortest-path metric is d_X.

        Constraining the edges then implies every pair constraint (a shortest-path metric is
        fixed by its edges).  None otherwise.
        """
        return None

    def constraint_set(self, universe: Universe, *, dense_limit: int = DENSE_LIMIT) -> ConstraintSet:
        """The solver's constraint set: edges for graph metrics, else all pairs (dense or blocked)."""
        from solvers import ConstraintSet

        e = self.edges(universe)
        if e is not None:
            i, j, w = e
            checked_budget(self, lambda: np.asarray(w, dtype=float))
            return ConstraintSet.edges(i, j, w, universe.N)
        if universe.N <= dense_limit and not self._prunes(universe):
            return with_scan_hints(self, universe, ConstraintSet.dense(self.budget(universe)))
        self._check_universe(universe)
        return with_scan_hints(self, universe, ConstraintSet.oracle(
            universe.N, lambda rows: checked_budget(self, lambda: self.block(universe, rows)),
            pair=self.pair_budget(universe)))

    def _prunes(self, universe: Universe) -> bool:
        """From ``solvers.constraints.PRUNE_MIN_N`` elements on, a metric with a geometric index
        is scanned through a budget oracle plus the index (exact pruned scans) even below the
        dense limit: the dense N x N budget would cost more than every scan of the design."""
        from solvers.constraints import PRUNE_MIN_N

        if universe.N < PRUNE_MIN_N:
            return False
        self._check_universe(universe)
        return self.geometric_index(universe) is not None

    def geometric_index(self, universe: Universe) -> GeometricIndex | None:
        """Hook: points phi and c with eps_ij >= c ||phi_i - phi_j|| (see solvers.pruned), which
        turns scans over all pairs into exact branch and bound. None: no index (full scans)."""
        return None

    def pair_budget(self, universe: Universe) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
        """Hook: a function (i, j) -> eps_ij of given pairs (else rows of :meth:`block` are used)."""
        return None

    def eps_min(self, universe: Universe) -> float:
        """min over distinct pairs with positive budget: the baseline's eps (Definition 4).

        Zero-distance pairs are indistinguishable elements (a quotient) and are left
        out; infinite pairs are unconstrained.
        """
        cs = self.constraint_set(universe) if universe.N > DENSE_LIMIT else None
        if cs is not None:
            return float(cs.min_eps())
        eps = self.budget(universe)
        off = eps[~np.eye(universe.N, dtype=bool)]
        off = off[(off > 0) & np.isfinite(off)]
        if off.size == 0:
            return float("inf")
        return float(off.min())

    def _fingerprint_data(self, universe: Universe) -> list[bytes | str]:
        """Hook: data beyond :meth:`params` and the universe's keys and coordinates that the
        budget reads (e.g. a budget column, a user matrix), as canonical bytes or digests."""
        return []

    def fingerprint(self, universe: Universe) -> str:
        """sha256 of everything that determines the budget on ``universe``: the metric's kind,
        its parameters (canonical JSON), the universe's fingerprint and the data the metric reads
        beyond it (see :mod:`dprivacy.fingerprints`; never the computed floats, so a config keeps
        loading when a later version computes the same budget with other rounding)."""
        h = Hasher("metric").add(self.name).add(canonical_json(self.params()))
        h.add(universe.fingerprint())
        for part in self._fingerprint_data(universe):
            h.add(part)
        return h.hexdigest()

    def legacy_fingerprint_v1(self, universe: Universe) -> str:
        """The fingerprint of config version 1 (with budget bytes); only to read old configs."""
        h = hashlib.sha256()
        h.update(self.name.encode())
        h.update(json.dumps(self.params(), sort_keys=True, default=str).encode())
        if universe.N <= DENSE_LIMIT:
            h.update(np.ascontiguousarray(self.budget(universe), dtype="<f8").tobytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{self.name}({inner})"


def with_scan_hints(metric: Metric, universe: Universe, cs: ConstraintSet) -> ConstraintSet:
    """``cs`` with the metric's geometric index attached (exact pruned scans), if it has one."""
    index = metric.geometric_index(universe)
    return cs if index is None else cs.with_index(index)
