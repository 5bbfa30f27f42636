"""d_X Laplace releases on PINQ and ProPer tables (the design card: mechanisms on tables).

A table is mapped onto a :class:`~dprivacy.Universe` (records → element indices; records that
are not elements are dropped, a Where) and the d_X Laplace mechanism of eq. (5),
(w ⊙ F) x + Lap(1/β), releases a workload on the histogram x.

**What one record costs (add/remove neighbours).** Tables use unbounded DP: neighbouring tables
differ by one added or removed record (spec §1). Adding a record at element i changes x by e_i,
so answer k moves by w_k F_ki, and Laplace noise of scale 1/β_k turns that into a privacy loss of
β_k w_k |F_ki|; over all queries (independent noise) the loss is

    c_i = Σ_k u_k |F_ki|,  u = w ⊙ β,

i.e. the release is c_i-PDP for a record at element i (ProPer Def. 2). (The d_X guarantee of
Theorem 1, Σ_k u_k |F_ki − F_kj| ≤ ε_ij, is the *moving* neighbour; it does not bound adding or
removing a record, which is what table budgets account for.)

* ProPer: by Lemma 1 a source pays the sum of c_i over its records in the table; sources that
  cannot pay are silently left out of the histogram and not charged; records derived from no
  source are always counted (Fig. 3 Query rule with per-record costs).
* PINQ: the release is (max_i c_i)-DP for add/remove neighbours, so the global charge is
  s · max_i c_i (s = the table's scaling factor), a data-independent amount.

Privacy condition: each source's budget covers Σ c_i of its records before its records are
counted (ProPer), or the global budget covers s·max_i c_i before anything is computed (PINQ).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.noise import Rng
from dprivacy.tables.agents import charge

if TYPE_CHECKING:
    from dprivacy.tables.pinq import Queryable
    from dprivacy.tables.proper import ProPerTable

__all__ = ["element_costs", "PinqHistogram", "ProPerHistogram"]


def element_costs(workload: Any, design: Any) -> np.ndarray:
    """c_i = Σ_k u_k |F_ki| for every element i: the add/remove privacy loss of one record at i."""
    from dprivacy import Workload

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


def _mechanism(workload: Any, design: Any, universe: Any, metric: Any) -> Any:
    """The DXLaplace mechanism; it also re-checks the design's d_X condition (Theorem 1) against
    the design's constraint set, or against ``metric`` on ``universe`` when a metric is given."""
    from dprivacy import DXLaplace, Workload

    if not isinstance(workload, Workload):
        workload = Workload(workload)
    if workload.N != universe.N:
        raise ShapeError(f"the workload has N = {workload.N} but the universe N = {universe.N}")
    if metric is None:
        return DXLaplace(workload, design)
    return DXLaplace(workload, design, universe=universe, metric=metric)


def _check_on_unknown(on_unknown: str) -> str:
    if on_unknown not in ("drop", "raise"):
        raise ValidationError(f"on_unknown must be 'drop' or 'raise', got {on_unknown!r}")
    return on_unknown


class PinqHistogram:
    """A PINQ table seen as a histogram over ``universe``; only noisy releases leave it.

    ``on_unknown="raise"`` raises on records outside the universe, which reveals something about
    the data after the charge; the default ``"drop"`` treats them as filtered out (a Where).
    """

    def __init__(self, table: Queryable, universe: Any, on_unknown: str = "drop") -> None:
        self._table = table
        self.universe = universe
        self.on_unknown = _check_on_unknown(on_unknown)

    @property
    def N(self) -> int:  # noqa: N802 (the paper's symbol)
        return int(self.universe.N)

    def cost(self, workload: Any, design: Any) -> float:
        """The global budget a release would take: s · max_i Σ_k u_k |F_ki|."""
        c = float(element_costs(workload, design).max(initial=0.0))
        return self._table.cost(c) if c > 0 else 0.0

    def release(self, workload: Any, design: Any, *, metric: Any = None, rng: Rng = None,
                secure: bool = True) -> np.ndarray:
        """Charge s·max_i c_i (raising ``BudgetExceededError`` before anything else), then
        release (w ⊙ F) x + Lap(1/β) on the table's histogram. ``metric``: check the design
        against it (needed when the design carries no constraint set)."""
        mech = _mechanism(workload, design, self.universe, metric)
        c = float(element_costs(mech.workload, design).max(initial=0.0))
        if c > 0:
            charge(self._table._agent, c)
        x = self.universe.histogram(self._table._df, on_unknown=self.on_unknown)
        return mech.release(x, rng=rng, secure=secure)


class ProPerHistogram:
    """A ProPer table seen as a histogram over ``universe``, with per-record charges."""

    def __init__(self, table: ProPerTable, universe: Any, on_unknown: str = "drop") -> None:
        self._table = table
        self.universe = universe
        self.on_unknown = _check_on_unknown(on_unknown)

    @property
    def N(self) -> int:  # noqa: N802
        return int(self.universe.N)

    def release(self, workload: Any, design: Any, *, metric: Any = None, rng: Rng = None,
                secure: bool = True) -> np.ndarray:
        """Charge every source Σ c_i over its records; drop the records of sources that cannot
        pay (silently); release (w ⊙ F) x + Lap(1/β) on the payers' (and ⊥ records') histogram.
        ``metric``: as in :meth:`PinqHistogram.release`."""
        mech = _mechanism(workload, design, self.universe, metric)
        c = element_costs(mech.workload, design)
        t = self._table
        idx = self.universe.element_index(t._df, on_unknown=self.on_unknown)
        known = idx >= 0
        per_record = np.where(known, c[np.maximum(idx, 0)], 0.0)
        keep = t._pay(lambda counts: counts, per_record=per_record)
        use = known if keep is None else known & keep
        x = np.bincount(idx[use], minlength=self.N).astype(np.int64)
        return mech.release(x, rng=rng, secure=secure)
