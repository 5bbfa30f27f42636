"""Graph shortest-path metrics and user-supplied budget matrices.

:class:`Graph` is the Blowfish / social-network construction: d = infinity except on the edges of
a (discriminative secret) graph, closed under shortest paths.  :class:`Matrix` takes any budget
matrix, validates it, and replaces a matrix that breaks the triangle inequality by its closure
(with a warning; ``strict=True`` raises instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.fingerprints import Hasher, canonical_json
from dprivacy.metrics.base import Metric, shortest_path_closure, validate_budget
from dprivacy.universe import Universe


@dataclass(frozen=True, repr=False)
class Graph(Metric):
    """Shortest-path metric of a weighted undirected graph on the elements.

    ``edges`` is a sequence of ``(i, j)`` or ``(i, j, eps_ij)`` with element indices (or element
    labels, see :meth:`Universe.labels`); ``eps`` is the weight of edges given without one.
    Only the edges need to be constrained by the solvers.  Elements in different
    components are at distance +inf (no constraint).
    """

    edge_list: Sequence
    eps: float = 1.0

    def __post_init__(self) -> None:
        if float(self.eps) < 0 or np.isnan(float(self.eps)):
            raise ValidationError(f"eps = {self.eps}: edge budgets must be >= 0")
        object.__setattr__(self, "edge_list", tuple(tuple(e) for e in self.edge_list))
        for e in self.edge_list:
            if len(e) not in (2, 3):
                raise ValidationError(f"edge {e!r}: give (i, j) or (i, j, eps_ij)")
            if len(e) == 3 and (np.isnan(float(e[2])) or float(e[2]) < 0):
                raise ValidationError(f"edge {e!r}: its budget must be >= 0")

    def params(self) -> dict:
        return {"edge_list": [list(map(str, e)) for e in self.edge_list], "eps": float(self.eps)}

    def _fingerprint_data(self, universe: Universe) -> list[bytes | str]:
        # params() prints the ends as text; here an index 0 and a label "0" differ
        def tag(k: int, v: object) -> str:
            if k == 2:
                return "eps"
            return "index" if isinstance(v, int | np.integer) else "label"

        return [canonical_json([[tag(k, v), v if k < 2 and isinstance(v, str) else float(v)
                                 if k == 2 else int(v) if tag(k, v) == "index" else str(v)]
                                for e in self.edge_list for k, v in enumerate(e)])]

    def edges(self, universe: Universe):
        labels = None
        n = universe.N
        ii, jj, ww = [], [], []
        for e in self.edge_list:
            ends = []
            for v in e[:2]:
                if isinstance(v, int | np.integer):
                    k = int(v)
                else:
                    labels = labels if labels is not None else {
                        lab: t for t, lab in enumerate(universe.labels())}
                    if v not in labels:
                        raise ValidationError(f"edge {e!r}: {v!r} is not an element label")
                    k = labels[v]
                if not 0 <= k < n:
                    raise ValidationError(f"edge {e!r}: index {k} outside 0..{n - 1}")
                ends.append(k)
            if ends[0] == ends[1]:
                raise ValidationError(f"edge {e!r} is a self-loop")
            ii.append(ends[0])
            jj.append(ends[1])
            ww.append(float(e[2]) if len(e) == 3 else float(self.eps))
        return (np.asarray(ii, dtype=np.int64), np.asarray(jj, dtype=np.int64),
                np.asarray(ww, dtype=float))

    def _check_universe(self, universe: Universe) -> None:
        self.edges(universe)

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        n = universe.N
        a = np.full((n, n), np.inf)
        np.fill_diagonal(a, 0.0)
        i, j, w = self.edges(universe)
        # parallel edges: the cheapest one counts
        np.minimum.at(a, (i, j), w)
        np.minimum.at(a, (j, i), w)
        return shortest_path_closure(a)


@dataclass(frozen=True, repr=False)
class Matrix(Metric):
    """A user-supplied (N, N) budget matrix eps_ij.

    Validated on use (square, symmetric, zero diagonal, non-negative, no NaN; +inf allowed).
    A matrix that breaks the triangle inequality is replaced by its shortest-path closure with a
    warning naming the worst triple, or rejected when ``strict=True``.
    """

    eps: np.ndarray
    strict: bool = False
    metric_by_construction = False

    def __post_init__(self) -> None:
        a = np.array(self.eps, dtype=float, copy=True)
        validate_budget(a, strict=True, check_triangle=False)  # cheap checks right away
        a.setflags(write=False)
        object.__setattr__(self, "eps", a)

    def params(self) -> dict:
        return {"shape": list(self.eps.shape), "strict": self.strict}

    def _fingerprint_data(self, universe: Universe) -> list[bytes | str]:
        digest = self.__dict__.get("_digest")
        if digest is None:
            digest = Hasher("matrix").add(np.ascontiguousarray(self.eps, "<f8").tobytes())
            digest = digest.hexdigest()
            self.__dict__["_digest"] = digest
        return [digest]

    def _check_universe(self, universe: Universe) -> None:
        if self.eps.shape[0] != universe.N:
            raise ShapeError(
                f"the budget matrix is {self.eps.shape[0]} x {self.eps.shape[1]} but the universe "
                f"has N = {universe.N} elements"
            )

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        self._check_universe(universe)
        return self.eps
