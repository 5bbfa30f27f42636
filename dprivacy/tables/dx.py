"""d_X Laplace releases on PINQ and ProPer tables (mechanisms on tables).

A table is mapped onto a :class:`~dprivacy.Universe` (records → elements by the universe's key
columns; records that are not elements are dropped, a Where) and the d_X Laplace mechanism of
eq. (5), (w ⊙ F) x + Lap(1/β), releases a workload on the histogram x, computed in the engine as
one GROUP BY over the key columns.

**What one record costs (add/remove neighbours).** Adding a record at element i changes x by
e_i, so answer k moves by w_k F_ki, and Laplace noise of scale 1/β_k turns that into a privacy
loss of β_k w_k |F_ki|; over all queries the loss is c_i = Σ_k u_k |F_ki| (u = w ⊙ β), i.e. the
release is c_i-PDP for a record at element i (ProPer Def. 2). (Theorem 1's d_X guarantee bounds
the *moving* neighbour, not adding or removing a record, which is what table budgets account.)

* ProPer: by Lemma 1 a source pays the sum of c_i over its records in the table; sources that
  cannot pay are silently left out of the histogram; ⊥ records are always counted.
* PINQ: the release is (max_i c_i)-DP for add/remove neighbours, so the global charge is
  s · max_i c_i (s = the table's scaling factor), a data-independent amount.

**Strategy designs** (:class:`~dprivacy.StrategyDesign`, or a bound strategy config's design)
release ``y = A x + Lap(1)^p`` and answer by least squares. Adding a record at element i moves y
by A e_i, a loss of c_i = ||A e_i||_1; the least-squares answers also use the number of records,
known exactly under d_X's moving neighbours but not under add/remove, so it is released too, as
n + Lap(1/ε_n) with ``total_eps`` = ε_n (default max_i c_i), and every record pays c_i + ε_n
(ProPer; PINQ: s · (max_i c_i + ε_n)). The strategy is re-checked against the metric over every
constrained pair (or the design's constraint set) before the charge.

The analyst's workload, design and universe are only read for public numbers (F, w, β, the
element keys), copied into the library's own types before any record is touched, so no analyst
method ever sees a record or the histogram; every check happens before the charge.

Privacy condition: each source's budget covers Σ c_i of its records before its records are
counted (ProPer), or the global budget covers s·max_i c_i before anything is computed (PINQ).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

import numpy as np
import pandas as pd

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.tables.budgets.agents import Agent
from dprivacy.tables.integer_release import integer_release
from dprivacy.tables.relations import rowwise
from dprivacy.tables.relations.protocol import ElementCosts, Relation
from dprivacy.tables.relations.rowwise import sealed
from dprivacy.tables.verdicts import element_costs, verify

__all__ = ["element_costs", "PinqHistogram", "ProPerHistogram"]


class _Plan:
    """The public parts of a release, copied into library types and checked (no data read)."""

    def __init__(self, workload: Any, design: Any, universe: Any, metric: Any,
                 columns: list[Any]) -> None:
        keys = tuple(str(c) for c in universe.key_columns)
        elements = pd.DataFrame({c: [rowwise.clean(v) for v in universe.elements[c].tolist()]
                                 for c in keys})
        # the d_X condition (Theorem 1) of the design, against its constraints or the metric,
        # verified once per (workload, design, constraints) and then taken from the cache; the
        # release uses the verified copies of F, w and beta, never the caller's objects
        v = verify(workload, design, universe, metric)
        self.W, self.D, self.costs, self.A = v.workload, v.design, v.costs, v.integer
        if self.W.N != len(elements):
            raise ShapeError(f"the workload has N = {self.W.N} but the universe N = {len(elements)}")
        missing = [c for c in keys if c not in columns]
        if missing:
            raise ValidationError(f"the table lacks the universe's key columns {missing}; it has "
                                  f"{columns}")
        if elements.duplicated().any():
            raise ValidationError("the universe lists an element twice")
        with np.errstate(divide="ignore"):
            self.scale = np.where(self.D.w == 0, 0.0, 1.0 / self.D.beta)
        if not np.all(np.isfinite(self.scale)):
            raise ValidationError("a query with beta = 0 has infinite noise: drop it or set w = 0")
        self.keys = keys
        self.elements = elements

    def histogram(self, rel: Relation) -> np.ndarray:
        """x: records per element (records outside the universe are dropped). After the charge."""
        counts = rel.group_counts(list(self.keys))
        n = len(self.elements)
        if len(counts) == 0:
            return np.zeros(n, dtype=np.int64)
        cols = list(self.keys)
        el = self.elements.astype(object)
        ck = counts[cols].astype(object)
        index = pd.MultiIndex.from_frame(el) if len(cols) > 1 else pd.Index(el.iloc[:, 0])
        target = pd.MultiIndex.from_frame(ck) if len(cols) > 1 else pd.Index(ck.iloc[:, 0])
        idx = np.asarray(index.get_indexer(target))
        ok = idx >= 0
        return np.bincount(idx[ok], weights=counts["count"].to_numpy(dtype=float)[ok],
                           minlength=n).astype(np.int64)

    def release(self, x: np.ndarray, noise: Any) -> np.ndarray:
        """(w ⊙ F) x + noise: exact integers plus discrete Laplace noise when every w_k F_ki is
        an integer (:func:`integer_matrix`), else OpenDP's exact continuous Laplace."""
        if self.A is not None:
            z = noise.discrete_laplace(self.scale)
            return integer_release(self.A, x, z).reshape(self.W.m)
        answers = self.D.w * (self.W.F @ x.astype(float))
        return np.asarray(noise.add_laplace(np.asarray(answers, dtype=float), self.scale),
                          dtype=float).reshape(self.W.m)

    def element_cost_table(self) -> ElementCosts:
        return ElementCosts(self.keys, self.elements.assign(cost=self.costs))


def _is_strategy(design: Any) -> bool:
    from dprivacy.mechanisms.strategy import StrategyDesign

    return isinstance(design, StrategyDesign)


class _StrategyPlan:
    """A strategy release on a table: verified strategy, per-element add/remove costs, release."""

    def __init__(self, workload: Any, design: Any, universe: Any, metric: Any,
                 columns: list[Any], total_eps: float | None) -> None:
        import solvers.strategy as st
        from dprivacy.mechanisms.strategy import StrategyMechanism

        if getattr(design, "noise", "laplace") != "laplace":
            raise ValidationError("a table releases Laplace strategies (Lap(1) per measurement); "
                                  f"this design's noise is {design.noise!r}")
        keys = tuple(str(c) for c in universe.key_columns)
        missing = [c for c in keys if c not in columns]
        if missing:
            raise ValidationError(f"the table lacks the universe's key columns {missing}; it has "
                                  f"{columns}")
        # the mechanism's own read-only copies, re-checked over every constrained pair
        bound = {"universe": universe, "metric": metric} if metric is not None else {}
        self.mech = StrategyMechanism(workload, design, **bound)
        if self.mech.workload.N != universe.N:
            raise ShapeError(f"the workload has N = {self.mech.workload.N} but the universe "
                             f"N = {universe.N}")
        d = self.mech.design
        A = st.materialise(d.C, d.basis)
        col = np.abs(np.asarray(A)).sum(axis=0)
        if total_eps is None:
            total_eps = float(col.max(initial=0.0))
        if not (np.isfinite(total_eps) and total_eps > 0):
            raise ValidationError(f"total_eps = {total_eps}: the number of records is released "
                                  "with Laplace noise of scale 1 / total_eps > 0")
        self.total_eps = float(total_eps)
        self.costs = col + self.total_eps
        self.keys = keys
        self.elements = pd.DataFrame({c: [rowwise.clean(v) for v in universe.elements[c].tolist()]
                                      for c in keys})
        if self.elements.duplicated().any():
            raise ValidationError("the universe lists an element twice")

    histogram = _Plan.histogram
    element_cost_table = _Plan.element_cost_table

    def release(self, x: np.ndarray, noise: Any) -> np.ndarray:
        """y = A x + Lap(1)^p and n + Lap(1 / total_eps); the least-squares answers."""
        from dprivacy.mechanisms.strategy import _answers

        m = self.mech
        s = m.design.basis.apply(x.astype(float))
        y_true = np.asarray(m.design.C @ s, dtype=np.float64).ravel()
        y = np.asarray(noise.add_laplace(y_true, np.ones(y_true.shape)), dtype=float).ravel()
        n = np.asarray(noise.add_laplace(np.array([float(np.sum(x))]),
                                         np.array([1.0 / self.total_eps])), dtype=float)
        return _answers(m.workload, m.M, m.o, m.X, m.z, y, float(n[0]))

    def answer_variances(self) -> np.ndarray:
        """Variance of every answer: the strategy's own plus that of the noisy total."""
        from dprivacy.mechanisms.strategy import _answers

        m = self.mech
        per_n = _answers(m.workload, m.M, m.o, m.X, m.z, np.zeros(m.design.p), 1.0)  # d/dn
        return m.query_variances() + per_n ** 2 * 2.0 / self.total_eps ** 2


def _plan(workload: Any, design: Any, universe: Any, metric: Any, columns: list[Any],
          total_eps: float | None) -> Any:
    if _is_strategy(design):
        return _StrategyPlan(workload, design, universe, metric, columns, total_eps)
    if total_eps is not None:
        raise ValidationError("total_eps applies to strategy designs only")
    return _Plan(workload, design, universe, metric, columns)


class _PinqLike(Protocol):
    """What a PINQ histogram reads of its :class:`~dprivacy.tables.pinq.Queryable`."""

    _agent: Agent
    _rel: Relation
    _noise: Any

    @property
    def columns(self) -> list[Hashable]: ...

    def cost(self, eps: float) -> float: ...

    def _pay_pure(self, eps: float) -> None: ...


class _ProPerLike(Protocol):
    """What a ProPer histogram reads of its :class:`~dprivacy.tables.proper.ProPerTable`."""

    _noise: Any

    @property
    def columns(self) -> list[Hashable]: ...

    def _eligible(self, eps: float, element_costs: ElementCosts | None = None) -> Relation: ...


def _check_on_unknown(on_unknown: str) -> str:
    if on_unknown != "drop":
        raise ValidationError(
            f"on_unknown = {on_unknown!r}: records outside the universe are always dropped (a "
            "Where); raising on them would reveal the data after the charge")
    return on_unknown


@sealed
class PinqHistogram:
    """A PINQ table seen as a histogram over ``universe``; only noisy releases leave it."""

    def __init__(self, table: _PinqLike, universe: Any, on_unknown: str = "drop") -> None:
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

    def release(self, workload: Any, design: Any, *, metric: Any = None,
                total_eps: float | None = None) -> np.ndarray:
        """Check everything, charge s·max_i c_i (raising ``BudgetExceededError`` before anything
        else), then release (w ⊙ F) x + Lap(1/β) on the table's histogram. ``metric``: check the
        design against it (needed when the design carries no constraint set). A strategy design
        releases A x + Lap(1)^p and the noisy total (``total_eps``; module doc)."""
        t = self._table
        plan = _plan(workload, design, self.universe, metric, t.columns, total_eps)
        c = float(plan.costs.max(initial=0.0))
        if c > 0:
            t._pay_pure(c)  # c, or c²/2 on a table in zCDP mode
        return plan.release(plan.histogram(t._rel), t._noise)


@sealed
class ProPerHistogram:
    """A ProPer table seen as a histogram over ``universe``, with per-record charges."""

    def __init__(self, table: _ProPerLike, universe: Any, on_unknown: str = "drop") -> None:
        self._table = table
        self.universe = universe
        self.on_unknown = _check_on_unknown(on_unknown)

    @property
    def N(self) -> int:  # noqa: N802
        return int(self.universe.N)

    def release(self, workload: Any, design: Any, *, metric: Any = None,
                total_eps: float | None = None) -> np.ndarray:
        """Charge every source Σ c_i over its records; drop the records of sources that cannot
        pay (silently); release (w ⊙ F) x + Lap(1/β) on the payers' (and ⊥ records')
        histogram. ``metric``, ``total_eps``: as in :meth:`PinqHistogram.release`."""
        t = self._table
        plan = _plan(workload, design, self.universe, metric, t.columns, total_eps)
        eligible = t._eligible(1.0, plan.element_cost_table())
        return plan.release(plan.histogram(eligible), t._noise)
