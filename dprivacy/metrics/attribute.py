"""Metrics on attribute universes and per-element budgets (paper §1, §5, Example 1).

* :class:`AttributeWeighted`: d(x, x') = sum_k eps_k 1[x_k != x'_k] (the introduction's metric).
* :class:`ValueWeighted`: per-value budgets eps_{k,a} combined by the min rule of eq. (3)
  (binary attributes only), the max rule, or the hub rule (eps_{k,a} + eps_{k,b}) / 2.
* :class:`ElementWise`: d(chi_i, chi_j) = (eps_i + eps_j) / 2 (element-level budgets).
* :class:`Discrete`: eps for every distinct pair, i.e. plain eps-DP.

The first two are sums of per-attribute metrics, i.e. shortest-path metrics of the Hamming graph,
so on a full cartesian-product universe their edges (pairs differing in one attribute) suffice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import numpy as np

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.metrics.base import Metric
from dprivacy.metrics.geometric import _positive
from dprivacy.universe import Universe


def _codes(universe: Universe, attrs: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per attribute: (integer code per element, array of distinct values)."""
    out = []
    for a in attrs:
        if a not in universe.elements.columns:
            raise ValidationError(
                f"attribute {a!r} is not a column of the universe ({list(universe.key_columns)})"
            )
        col = universe.elements[a]
        if col.isna().any():
            raise ValidationError(
                f"attribute {a!r} has missing values (NaN/None) at elements "
                f"{np.flatnonzero(col.isna().to_numpy())[:5].tolist()}: a budget cannot tell "
                "them apart; fill them with a real value or drop the weight on this column"
            )
        codes, uniques = col.factorize()
        out.append((np.asarray(codes), np.asarray(uniques, dtype=object)))
    return out


def _hamming_edges(universe: Universe, attrs: list[str], weight_fn) -> tuple:
    """Edges of the Hamming graph of a full-product universe: pairs differing in one attribute.

    ``weight_fn(k, code_a, code_b)`` gives the edge weight for attribute k (vectorised).
    """
    codes = np.stack([c for c, _ in _codes(universe, attrs)], axis=1)
    ii, jj, ww = [], [], []
    for k in range(len(attrs)):
        others = np.delete(codes, k, axis=1)
        if others.shape[1]:
            _, group = np.unique(others, axis=0, return_inverse=True)
        else:
            group = np.zeros(len(codes), dtype=np.int64)
        order = np.lexsort((codes[:, k], group.ravel()))
        size = int(codes[:, k].max()) + 1
        members = order.reshape(-1, size)
        a, b = np.triu_indices(size, 1)
        i, j = members[:, a].ravel(), members[:, b].ravel()
        w = weight_fn(k, codes[i, k], codes[j, k])
        keep = np.isfinite(w)
        ii.append(i[keep])
        jj.append(j[keep])
        ww.append(w[keep])
    return (np.concatenate(ii).astype(np.int64), np.concatenate(jj).astype(np.int64),
            np.concatenate(ww).astype(float))


def _sum_over_attributes(universe: Universe, attrs: list[str], weight_fn,
                         rows: np.ndarray | None = None) -> np.ndarray:
    """sum_k weight_k(a, b) 1[a != b] for the pairs (rows, all elements): exact on any universe
    and any attribute columns (key or not)."""
    rows = np.arange(universe.N) if rows is None else np.asarray(rows)
    out = np.zeros((len(rows), universe.N))
    for k, (codes, _) in enumerate(_codes(universe, attrs)):
        a, b = codes[rows][:, None], codes[None, :]
        w = weight_fn(k, a, b)
        out += np.where(a != b, w, 0.0)  # masks 0 * inf = 0 (convention of eq. (3))
    return out


def _non_key(universe: Universe, attrs) -> list[str]:
    return [a for a in attrs if a not in universe.key_columns]


def _hamming_applies(universe: Universe, attrs) -> bool:
    """The Hamming-graph edges give the metric exactly only when the weighted attributes are
    exactly the key attributes (each element one distinct tuple of them) and the universe is
    their full cartesian product; otherwise (a subset, or a weighted non-key column) every
    pair is constrained instead."""
    return not _non_key(universe, attrs) and universe.is_full_product()


@dataclass(frozen=True, repr=False)
class AttributeWeighted(Metric):
    """d(x, x') = sum_k eps_k 1[x_k != x'_k] with one budget per attribute (paper §1, Appendix C).

    ``weights`` maps every key attribute of the universe to its budget (inf = unprotected).
    """

    weights: Mapping[str, float]

    def __post_init__(self) -> None:
        if not self.weights:
            raise ValidationError("AttributeWeighted needs a budget for at least one attribute")
        for a, e in self.weights.items():
            _positive(f"weights[{a!r}]", e, allow_inf=True)
        object.__setattr__(self, "weights", MappingProxyType(
            {str(a): float(e) for a, e in self.weights.items()}))

    def params(self) -> dict:
        return {"weights": {k: float(v) for k, v in self.weights.items()}}

    def _check_universe(self, universe: Universe) -> None:
        missing = [a for a in universe.key_columns if a not in self.weights]
        if missing:
            raise ValidationError(
                f"AttributeWeighted has no budget for attributes {missing}; elements differing "
                "only there would be indistinguishable. Give every key attribute a weight."
            )

    def _w(self, k: int, a, b):
        e = float(self.weights[list(self.weights)[k]])
        return np.full(np.broadcast(a, b).shape, e)

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        return self.block(universe, np.arange(universe.N))

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        self._check_universe(universe)
        out = _sum_over_attributes(universe, list(self.weights), self._w, rows)
        out[np.arange(len(out)), np.asarray(rows)] = 0.0
        return out

    def edges(self, universe: Universe):
        self._check_universe(universe)
        if not _hamming_applies(universe, self.weights):
            return None  # a subset or a weighted non-key column: all pairs are constrained
        return _hamming_edges(universe, list(self.weights), self._w)

    def _fingerprint_data(self, universe: Universe) -> list[bytes | str]:
        extra = _non_key(universe, self.weights)
        return [universe.column_fingerprint(extra)] if extra else []


@dataclass(frozen=True, repr=False)
class ValueWeighted(Metric):
    """Per-value budgets eps_{k,a} combined per attribute (eq. (3) and paper §5).

    ``rule="min"``: eq. (3), sum_k min(eps_{k,a}, eps_{k,b}) 1[a != b]; a metric only when every
    attribute has at most two values (eps_a = 1, eps_b = eps_c = 5 gives d(b, c) = 5 > d(b, a) +
    d(a, c) = 2), so it refuses larger domains.  ``rule="max"``: max(eps_{k,a}, eps_{k,b}), a metric
    but it protects the sensitive value less (Example 1).  ``rule="hub"``: (eps_{k,a} +
    eps_{k,b}) / 2, a star-tree metric for any number of values.
    """

    budgets: Mapping[str, Mapping]
    rule: Literal["min", "max", "hub"] = "min"

    def __post_init__(self) -> None:
        if self.rule not in ("min", "max", "hub"):
            raise ValidationError(f"rule must be 'min', 'max' or 'hub', got {self.rule!r}")
        if not self.budgets:
            raise ValidationError("ValueWeighted needs budgets for at least one attribute")
        clean = {}
        for a, per_value in self.budgets.items():
            if not per_value:
                raise ValidationError(f"attribute {a!r} has no value budgets")
            for v, e in per_value.items():
                _positive(f"budgets[{a!r}][{v!r}]", e, allow_inf=True)
            if self.rule == "min" and len(per_value) > 2:
                raise ValidationError(
                    f"the min rule of eq. (3) is not a metric for attribute {a!r} with "
                    f"{len(per_value)} values (eps_a=1, eps_b=eps_c=5 gives d(b,c)=5 > "
                    "d(b,a)+d(a,c)=2); use rule='hub' (a star metric) or rule='max'"
                )
            clean[str(a)] = MappingProxyType(dict(per_value))
        object.__setattr__(self, "budgets", MappingProxyType(clean))

    def params(self) -> dict:
        return {"budgets": {a: {str(v): float(e) for v, e in d.items()}
                            for a, d in self.budgets.items()}, "rule": self.rule}

    def _tables(self, universe: Universe) -> list[np.ndarray]:
        missing = [a for a in universe.key_columns if a not in self.budgets]
        if missing:
            raise ValidationError(f"ValueWeighted has no budgets for attributes {missing}")
        tables = []
        for (_, uniques), a in zip(_codes(universe, list(self.budgets)), self.budgets,
                                  strict=True):
            per_value = self.budgets[a]
            unknown = [u for u in uniques if u not in per_value]
            if unknown:
                raise ValidationError(f"attribute {a!r}: no budget for values {unknown[:5]}")
            tables.append(np.array([float(per_value[u]) for u in uniques]))
        return tables

    def _combine(self, ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
        if self.rule == "min":
            return np.minimum(ea, eb)
        if self.rule == "max":
            return np.maximum(ea, eb)
        return (ea + eb) / 2

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        return self.block(universe, np.arange(universe.N))

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        tables = self._tables(universe)
        out = _sum_over_attributes(
            universe, list(self.budgets), lambda k, a, b: self._combine(tables[k][a], tables[k][b]),
            rows)
        out[np.arange(len(out)), np.asarray(rows)] = 0.0
        return out

    def _fingerprint_data(self, universe: Universe) -> list[bytes | str]:
        extra = _non_key(universe, self.budgets)
        return [universe.column_fingerprint(extra)] if extra else []

    def _check_universe(self, universe: Universe) -> None:
        self._tables(universe)

    def edges(self, universe: Universe):
        tables = self._tables(universe)
        if not _hamming_applies(universe, self.budgets):
            return None
        return _hamming_edges(
            universe, list(self.budgets), lambda k, a, b: self._combine(tables[k][a], tables[k][b])
        )


@dataclass(frozen=True, repr=False)
class ElementWise(Metric):
    """d(chi_i, chi_j) = (eps_i + eps_j) / 2 for i != j (element-level budgets).

    ``eps`` is an array of length N, a mapping from element label to budget, or the name of a
    numeric column of the universe's elements.  More sensitive elements get a lower eps_i.
    """

    eps: object

    def __post_init__(self) -> None:
        e = self.eps
        if isinstance(e, str):
            return
        if isinstance(e, Mapping):
            try:
                frozen = {k: float(v) for k, v in e.items()}
            except (TypeError, ValueError) as exc:
                raise ValidationError(f"element budgets must be numbers: {exc}") from exc
            object.__setattr__(self, "eps", MappingProxyType(frozen))
            return
        try:
            v = np.array(e, dtype=float, copy=True).ravel()
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"element budgets must be numbers: {exc}") from exc
        v.setflags(write=False)  # our own copy: the caller's later writes change nothing
        object.__setattr__(self, "eps", v)

    def _fingerprint_data(self, universe: Universe) -> list[bytes | str]:
        if isinstance(self.eps, str):  # the budget column is data the budget depends on
            return [universe.column_fingerprint([self.eps])]
        return []

    def _vector(self, universe: Universe) -> np.ndarray:
        e = self.eps
        if isinstance(e, str):
            if e not in universe.elements.columns:
                raise ValidationError(f"column {e!r} is not in the universe's elements")
            v = universe.elements[e].to_numpy(dtype=float)
        elif isinstance(e, Mapping):
            labels = universe.labels()
            missing = [lab for lab in labels if lab not in e]
            if missing:
                raise ValidationError(f"no budget for elements {missing[:5]}")
            v = np.array([float(e[lab]) for lab in labels])
        else:
            v = np.asarray(e, dtype=float).ravel()
        if v.shape[0] != universe.N:
            raise ShapeError(f"{v.shape[0]} element budgets for a universe of N = {universe.N}")
        if np.isnan(v).any() or (v < 0).any():
            i = int(np.flatnonzero(np.isnan(v) | (v < 0))[0])
            raise ValidationError(f"eps[{i}] = {v[i]}: element budgets must be >= 0")
        return v

    def params(self) -> dict:
        e = self.eps
        if isinstance(e, str | Mapping):
            return {"eps": e if isinstance(e, str) else {str(k): float(v) for k, v in e.items()}}
        return {"eps": np.asarray(e, dtype=float).tolist()}

    def _check_universe(self, universe: Universe) -> None:
        self._vector(universe)

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        v = self._vector(universe)
        rows = np.asarray(rows)
        out = (v[rows, None] + v[None, :]) / 2
        out[np.arange(len(rows)), rows] = 0.0
        return out

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        return self.block(universe, np.arange(universe.N))


@dataclass(frozen=True, repr=False)
class Discrete(Metric):
    """eps_ij = eps for every i != j: plain eps-DP (the paper's baseline, Definition 1)."""

    eps: float = 1.0

    def __post_init__(self) -> None:
        _positive("eps", self.eps)

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        out = np.full((len(rows), universe.N), float(self.eps))
        out[np.arange(len(rows)), rows] = 0.0
        return out

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        return self.block(universe, np.arange(universe.N))

    def eps_min(self, universe: Universe) -> float:
        return float(self.eps) if universe.N > 1 and self.eps > 0 else float("inf")
