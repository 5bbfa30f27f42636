"""The noisy aggregations shared by PINQ and ProPer tables (one API, two ways of paying).

Every method follows the same three steps: (1) check every argument and plan the aggregation
(:mod:`dprivacy.tables.aggregations`), raising :class:`~dprivacy.errors.ValidationError` before
anything is charged; (2) pay: PINQ charges s·ε to the global budget (raising
:class:`~dprivacy.errors.BudgetExceededError` if it cannot, a data-independent event), ProPer
charges every source its own cost and silently leaves out those who cannot pay (never raising);
(3) compute the exact aggregate in the engine and add noise from the table's
:class:`~dprivacy.tables.randomness.NoiseSource`. There is no ``rng`` or ``secure`` argument:
the analyst cannot choose or seed the noise (the data owner may fix ``noise_seed`` on the table
for simulations).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from dprivacy.errors import ValidationError
from dprivacy.tables import aggregations as agg
from dprivacy.tables.grouped import GroupedTable
from dprivacy.tables.randomness import NoiseSource
from dprivacy.tables.relations.protocol import Relation, ValueSpec
from dprivacy.tables.relations.rowwise import sealed

__all__ = ["NoisyQueries"]


@sealed
class NoisyQueries:
    """Mixin: noisy aggregations on ``self._rel`` paid by ``self._pay_then(eps, plan)``."""

    _rel: Relation
    _noise: NoiseSource

    @property
    def columns(self) -> list[Hashable]:
        """Column names (the schema is public, as PINQ's typed records)."""
        return list(self._rel.columns)

    @property
    def backend(self) -> str:
        """The engine holding the records: ``"pandas"``, ``"duckdb"`` or ``"spark"``."""
        return str(self._rel.backend)

    def _pay_then(self, eps: float, plan: agg.Plan) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _value(self, f: ValueSpec | None) -> ValueSpec:
        spec = agg.value_spec(f, self.columns, self._rel.check_value)
        self._rel.check_value(spec)
        return spec

    def noisy_count(self, eps: float) -> float:
        """|T| + Lap(1/ε) (PINQ's NoisyCount).

        Examples:
            >>> import pandas as pd
            >>> from dprivacy.tables import Queryable
            >>> t = Queryable(pd.DataFrame({"age": [10, 20, 30]}), budget=1.0)
            >>> _ = t.where(lambda r: r["age"] > 17).noisy_count(eps=0.5)
            >>> t.remaining_budget()
            0.5
        """
        e, plan = agg.count_plan(eps)
        return self._pay_then(e, plan)

    def partition(self, keys: Iterable[Hashable], f: Any) -> dict[Hashable, Any]:  # pragma: no cover
        raise NotImplementedError

    def count_by(self, keys: Iterable[Hashable], column: Any, eps: float) -> dict[Hashable, float]:
        """A noisy count per key of a PUBLIC list of keys, in one call: {key: |T_key| + Lap(1/ε)}.

        ``column`` is the key column (or a row-wise key function); ``keys`` the explicit,
        distinct keys to count, chosen without looking at the data (e.g. every zip code of a
        public list). A record whose key is not in ``keys`` is counted nowhere and pays nothing.
        The same query on every backend (pandas, DuckDB, Spark).

        Cost: **ε in total**, not ε per key: the keys split the records into disjoint parts
        (as :meth:`partition`), so the counts compose in parallel (PINQ: s·ε on a table of
        scaling factor s; ProPer: each record pays ε once, for the count of its own key).
        Computed in one pass (one GROUP BY): ``group_by(keys=keys, column=column).count(eps)``
        (:mod:`dprivacy.tables.grouped`, which also gives sums and means per key). Unlike
        ``group_by(column).noisy_count(eps)``, which counts the *groups* (one number) and costs
        2ε, this returns one count per key, including a noisy count for keys with no record
        (which hides whether the key occurs).

        Examples:
            >>> import pandas as pd
            >>> from dprivacy.tables import Queryable
            >>> t = Queryable(pd.DataFrame({"zip": ["a", "a", "b", "z"]}), budget=1.0)
            >>> counts = t.count_by(["a", "b", "c"], "zip", eps=0.5)
            >>> sorted(counts), t.remaining_budget()
            (['a', 'b', 'c'], 0.5)
        """
        return self._grouped(keys, column).count(eps)

    def _grouped(self, keys: Iterable[Hashable] | None, column: Any) -> GroupedTable:
        """``group_by(keys=..., column=...)``: the table grouped by a public key set."""
        if keys is None:
            raise ValidationError("group_by: keys= is the public key set")
        return GroupedTable(self, keys, column)

    def _in_keys(self, keys: list[Hashable], column: Any) -> NoisyQueries:
        """The table a grouped aggregation over ``keys`` pays on (PINQ: this one, whose
        charge does not depend on the records; ProPer overrides it: only the records whose
        key is listed pay)."""
        return self

    def noisy_sum(self, eps: float, f: ValueSpec | None = None, lo: float = -1.0,
                  hi: float = 1.0) -> float:
        """Σ clamp(f(x), lo, hi) + Lap(max(|lo|, |hi|)/ε).

        ``f`` is a column name or a per-record function (None: the only column); values that
        are NaN, not numbers or whose function raises count as (lo + hi)/2."""
        e, plan = agg.sum_plan(eps, self._value(f), lo, hi)
        return self._pay_then(e, plan)

    def noisy_average(self, eps: float, f: ValueSpec | None = None, lo: float = -1.0,
                      hi: float = 1.0) -> float:
        """Average of clamp(f(x), lo, hi): noisy sum / noisy count at ε/2 each, in [lo, hi]."""
        e, plan = agg.average_plan(eps, self._value(f), lo, hi)
        return self._pay_then(e, plan)

    def noisy_order_statistic(self, eps: float, frac: float, f: ValueSpec | None = None,
                              lo: float | None = None, hi: float | None = None, *,
                              candidates: Sequence[float] | int | None = None) -> float:
        """The ``frac``-quantile of clamp(f(x), lo, hi), released as one of ``candidates``.

        ``candidates``: None (default) for the grid of 1025 points ``numpy.linspace(lo, hi,
        1025)`` (lo, hi default to 0, 1), an int for a grid of that many points, or a list of
        numbers (lo, hi default to its smallest and largest). The output is always exactly one
        of the candidates, chosen by the exponential mechanism with OpenDP's rank-based
        quantile score and an exact sampler (ε-DP; see :mod:`dprivacy.tables.quantiles`), so
        it is the same finite set whatever the records. ``frac`` is read as the nearest
        fraction with denominator ≤ 10 000."""
        e, plan = agg.order_statistic_plan(eps, frac, self._value(f), lo, hi, candidates)
        return self._pay_then(e, plan)

    def noisy_median(self, eps: float, f: ValueSpec | None = None, lo: float | None = None,
                     hi: float | None = None, *,
                     candidates: Sequence[float] | int | None = None) -> float:
        """``noisy_order_statistic(eps, 0.5, f, lo, hi, candidates=candidates)``."""
        return self.noisy_order_statistic(eps, 0.5, f, lo, hi, candidates=candidates)

    def exponential_mechanism(self, eps: float, candidates: Sequence[Any],
                              score: Callable[[Any, Any], Any]) -> Any:
        """A candidate r with probability ∝ exp(ε·Σ_x clamp(score(x, r), 0, 1)).

        ``score(record, candidate)`` is the per-record score (non-numbers and failures score 0).
        """
        e, cands, run = agg.exponential_plan(eps, candidates)
        self._rel.check_score(score, cands)
        return self._pay_then(e, lambda rel, noise: run(rel, noise, score))

    # ------------------------------------------------------------ d_X on tables
    def release(self, workload: Any, design: Any, universe: Any, *, metric: Any = None,
                total_eps: float | None = None) -> Any:
        """d_X Laplace release (w⊙F)x + Lap(1/β) of the table's histogram x over ``universe``
        (see :meth:`histogram`); a strategy design releases A x + Lap(1)^p and the number of
        records with Laplace noise of scale 1 / ``total_eps`` (:mod:`dprivacy.tables.dx`)."""
        return self.histogram(universe).release(workload, design, metric=metric,
                                                total_eps=total_eps)

    def histogram(self, universe: Any, on_unknown: str = "drop") -> Any:  # pragma: no cover
        raise NotImplementedError
