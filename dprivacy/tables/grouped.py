"""Grouped aggregation over a PUBLIC key set: one noisy answer per key, ε in total.

``t.group_by(keys=[...], column="zip")`` (PINQ or ProPer, any backend) gives a
:class:`GroupedTable`; its :meth:`~GroupedTable.agg` computes, for every listed key, the
aggregations named by the analyst in ONE pass over the records (one GROUP BY in the engine)::

    g = t.group_by(keys=["02139", "02140", "02141"], column="zip")
    g.agg(1.0, n=Count(), income=Sum("income", 0, 1e5), avg=Mean("income", 0, 1e5))

The answer is a DataFrame with one row per listed key, in the order given, and one column per
aggregation. The key set is public (chosen without looking at the records), so:

* every listed key gets a noisy answer, including keys with no record (the output's shape says
  nothing about which keys occur);
* records whose key is not listed are read by no aggregation, and their values never appear:
  there is no row for an unlisted key;
* the keys split the records into disjoint groups, so the per-key answers compose in parallel.

**Cost.** ``agg(eps, **aggs)`` costs ε in total, not ε per key: each aggregation gets an equal
share ε/m of ε (m aggregations, sequential composition within a group) and every key is
answered at that share (parallel composition across the disjoint groups). PINQ charges s·ε to
the table's budget (s its scaling factor); ProPer charges every person ε × their records whose
key is listed (one record: ε once, since it is in one group), silently leaving out those who
cannot pay, and charges nothing to records whose key is not listed.

**Noise per key**, at the aggregation's share ε' (each is the in-table query of the same name
run on the key's group): ``Count()`` n + Lap(1/ε'); ``Sum(f, lo, hi)`` Σ clamp(f, lo, hi) +
Lap(max(|lo|, |hi|)/ε'); ``Mean(f, lo, hi)`` the noisy centred sum at ε'/2 over the noisy count
at ε'/2, clamped to [lo, hi] (a key with no record gets a noisy value around the midpoint).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from dprivacy.errors import ValidationError
from dprivacy.tables.aggregations import _scale
from dprivacy.tables.params import eps_arg, range_arg
from dprivacy.tables.randomness import NoiseSource
from dprivacy.tables.relations.protocol import Relation, ValueSpec
from dprivacy.tables.transform_args import partition_keys

__all__ = ["Count", "Sum", "Mean", "GroupedTable", "HOWS"]

HOWS = ("count", "sum", "mean")


@dataclass(frozen=True)
class Count:
    """The number of records of each key: n + Lap(1/ε')."""

    how = "count"


@dataclass(frozen=True)
class Sum:
    """Σ clamp(f, lo, hi) per key + Lap(max(|lo|, |hi|)/ε'); ``f`` a column name or a row-wise
    function (None: the table's only column)."""

    f: ValueSpec | None = None
    lo: float = -1.0
    hi: float = 1.0
    how = "sum"


@dataclass(frozen=True)
class Mean:
    """The average of clamp(f, lo, hi) per key: noisy centred sum / noisy count at ε'/2 each,
    clamped to [lo, hi]."""

    f: ValueSpec | None = None
    lo: float = -1.0
    hi: float = 1.0
    how = "mean"


_Spec = Count | Sum | Mean


class _Table(Protocol):
    """What a grouping needs of its PINQ or ProPer table (a
    :class:`~dprivacy.tables.queries.NoisyQueries`)."""

    _rel: Relation

    @property
    def columns(self) -> list[Hashable]: ...

    def _value(self, f: ValueSpec | None) -> ValueSpec: ...

    def _in_keys(self, keys: list[Hashable], column: Any) -> Any: ...


class GroupedTable:
    """A table grouped by a public key set (see the module doc); made by
    ``group_by(keys=..., column=...)``. Nothing is read or charged until :meth:`agg`."""

    def __init__(self, table: _Table, keys: Iterable[Hashable], column: Any) -> None:
        if column is None:
            raise ValidationError("group_by(keys=...): give the key column (column=) or a "
                                  "row-wise key function")
        rel: Relation = table._rel
        self._keys = partition_keys(keys, column, table.columns, rel.check)
        rel.check_keys(self._keys, column)
        self._table = table
        self._column = column

    @property
    def keys(self) -> list[Hashable]:
        """The public keys, in the order given."""
        return list(self._keys)

    def _spec(self, name: str, a: Any) -> tuple[str, Any, float, float]:
        if not isinstance(a, (Count, Sum, Mean)):
            raise ValidationError(f"agg({name}=...): expected Count(), Sum(f, lo, hi) or "
                                  f"Mean(f, lo, hi), got {type(a).__name__}")
        if isinstance(a, Count):
            return "count", None, 0.0, 0.0
        lo, hi = range_arg(a.lo, a.hi)
        return a.how, self._table._value(a.f), lo, hi

    def agg(self, eps: float, **aggs: _Spec) -> pd.DataFrame:
        """One row per public key, one column per named aggregation, for ε in total (see the
        module doc). Every argument is checked before anything is charged."""
        e = eps_arg(eps)
        if not aggs:
            raise ValidationError("agg: name at least one aggregation, e.g. n=Count()")
        specs = [(str(n), *self._spec(str(n), a)) for n, a in aggs.items()]
        share = e / len(specs)
        values: list[tuple[Any, float, float, float]] = []
        scales: list[np.ndarray] = []
        k = len(self._keys)
        for _, how, f, lo, hi in specs:
            if how == "count":
                scales.append(np.full(k, _scale(1.0, share)))
            elif how == "sum":
                values.append((f, lo, hi, 0.0))
                scales.append(np.full(k, _scale(max(abs(lo), abs(hi)), share)))
            else:
                mid, half = lo / 2 + hi / 2, hi / 2 - lo / 2
                values.append((f, lo, hi, mid))
                scales.append(np.full(k, _scale(2 * half, share)))
                scales.append(np.full(k, _scale(2.0, share)))
        keys, column = self._keys, self._column

        def run(rel: Relation, noise: NoiseSource) -> pd.DataFrame:
            counts, sums = rel.key_aggregates(keys, column, values)
            exact: list[np.ndarray] = []
            j = 0
            for _, how, _f, _lo, _hi in specs:
                if how == "count":
                    exact.append(counts.astype(float))
                else:
                    exact.append(sums[j])
                    if how == "mean":
                        exact.append(counts.astype(float))
                    j += 1
            noisy = np.asarray(noise.add_laplace(np.concatenate(exact), np.concatenate(scales)),
                               dtype=float).reshape(len(exact), k) if k else np.zeros((len(exact), 0))
            cols: dict[str, np.ndarray] = {}
            i = 0
            for name, how, _f, lo, hi in specs:
                if how == "mean":
                    mid = lo / 2 + hi / 2
                    with np.errstate(all="ignore"):
                        out = mid + noisy[i] / np.maximum(noisy[i + 1], 1.0)
                    cols[name] = np.clip(np.nan_to_num(out, nan=mid), lo, hi)
                    i += 2
                else:
                    cols[name] = noisy[i]
                    i += 1
            index = pd.Index(keys, dtype=object, tupleize_cols=False,
                             name=column if isinstance(column, str) else "key")
            return pd.DataFrame(cols, index=index)

        return self._table._in_keys(keys, column)._pay_then(e, run)

    def count(self, eps: float) -> dict[Hashable, float]:
        """``{key: n_key + Lap(1/ε)}`` for every public key, ε in total."""
        out = self.agg(eps, count=Count())["count"]
        return {k: float(v) for k, v in zip(self._keys, out.to_numpy(), strict=True)}

    def __repr__(self) -> str:
        return f"GroupedTable(keys={len(self._keys)}, column={self._column!r})"
