"""Value types shared by every pair scan: blocks, results, running top-k, pass counters.

Privacy condition the scans check (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every
constrained pair; a scan reports ``max_ij loss_ij / eps_ij`` (<= 1 means private).
Conventions (see docs/theory.md, "Zero and infinite distances"): 0/x = 0 (also 0/0 and 0/inf),
x/0 = inf, x/inf = 0, and a pair with ``eps_ij = +inf`` is unconstrained.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

_T = TypeVar("_T")


def given(value: _T | None) -> _T:
    """``value``, asserting it was filled in (attributes a constructor always sets)."""
    assert value is not None
    return value


class PairBudgets(Protocol):
    """The budgets of a constraint set as a kernel scan reads them (what
    :class:`solvers.constraints.ConstraintSet` provides): its ``kind`` ("dense", "oracle" or
    "edges"), ``N`` points, ``n_constraints`` pairs, the edge arrays of an edge set and the budget
    rows of a dense or oracle set."""

    @property
    def kind(self) -> str: ...

    @property
    def N(self) -> int: ...  # noqa: N802 (the paper's symbol)

    @property
    def n_constraints(self) -> int: ...

    def edge_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def eps_rows(self, r0: int, r1: int) -> np.ndarray: ...


@dataclass(frozen=True)
class Block:
    """A block of constrained pairs: budgets ``eps`` (any shape S; +inf = no constraint) and the
    absolute column differences ``ad`` of shape (m,) + S. ``pairs(flat)`` maps flat positions of
    S back to global (i, j) with i < j."""

    eps: np.ndarray
    ad: np.ndarray
    r0: int
    ncols: int
    I: np.ndarray | None = None  # noqa: E741 (edge blocks only)
    J: np.ndarray | None = None

    def pairs(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = np.asarray(flat, dtype=np.int64)
        if self.I is not None:
            return self.I[flat], given(self.J)[flat]
        return self.r0 + flat // self.ncols, self.r0 + flat % self.ncols


def safe_ratio(num: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """``num / eps`` with 0/x = 0 (also 0/0 and 0/inf), x/0 = inf and x/inf = 0.

    Examples
    --------
    >>> safe_ratio(np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.0, 4.0])).tolist()
    [0.0, inf, 0.5]
    """
    out = np.zeros(np.broadcast_shapes(num.shape, eps.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(num, eps, out=out, where=(num > 0) & (eps < np.inf))
    return out


@dataclass(frozen=True)
class ScanResult:
    """Outcome of a scan of the realised loss ratios over ALL constrained pairs.

    ``max_ratio`` = max over all constrained pairs of ``loss_ij / eps_ij`` (0 if there are none),
    ``worst`` its pair, ``top`` = (i, j, ratio) arrays of the k largest ratios (descending; a
    pruned scan may leave out pairs of ratio 0), ``n_pairs`` the number of constrained
    (finite-budget) pairs, ``pairs_evaluated`` how many pairs were computed exactly and
    ``strategy`` which scan answered ("full", "pruned", "processes", "dask")."""

    max_ratio: float
    worst: tuple[int, int] | None
    top: tuple[np.ndarray, np.ndarray, np.ndarray]
    n_pairs: int
    pairs_evaluated: int = 0
    strategy: str = "full"


class TopK:
    """Running k largest values (with their pairs) over batches.

    Examples
    --------
    >>> t = TopK(2)
    >>> t.add(np.array([0, 1, 2]), np.array([5, 6, 7]), np.array([0.1, 0.9, 0.5]))
    >>> t.result()[2].tolist()
    [0.9, 0.5]
    """

    def __init__(self, k: int) -> None:
        self.k = int(k)
        self.i = np.empty(0, np.int64)
        self.j = np.empty(0, np.int64)
        self.r = np.empty(0)

    def add(self, i: np.ndarray, j: np.ndarray, r: np.ndarray) -> None:
        """Offer pairs (i, j) with ratios r (entries < 0 are ignored)."""
        if self.k <= 0 or r.size == 0:
            return
        if self.r.size >= self.k:  # only values reaching the current k-th largest can enter
            keep = r >= self.threshold()
            i, j, r = i[keep], j[keep], r[keep]
        if r.size > self.k:
            idx = np.argpartition(r, r.size - self.k)[-self.k:]
            i, j, r = i[idx], j[idx], r[idx]
        self.i = np.concatenate([self.i, np.asarray(i, np.int64)])
        self.j = np.concatenate([self.j, np.asarray(j, np.int64)])
        self.r = np.concatenate([self.r, r])
        if self.r.size > 4 * self.k:
            self._trim()

    def add_block(self, block: Block, flat_vals: np.ndarray) -> None:
        """Offer every cell of a block (``flat_vals`` = its ratios, raveled)."""
        if self.k <= 0 or flat_vals.size == 0:
            return
        if flat_vals.size > self.k:
            idx = np.argpartition(flat_vals, flat_vals.size - self.k)[-self.k:]
        else:
            idx = np.arange(flat_vals.size)
        bi, bj = block.pairs(idx)
        self.add(bi, bj, flat_vals[idx])

    def threshold(self) -> float:
        """The k-th largest value so far (0 until k values were offered): a lower bound on the
        final k-th largest ratio."""
        if self.k <= 0:
            return np.inf
        self._trim()
        return float(self.r.min()) if self.r.size >= self.k else 0.0

    def _trim(self) -> None:
        keep = self.r >= 0
        self.i, self.j, self.r = self.i[keep], self.j[keep], self.r[keep]
        key = (self.i << 32) | self.j  # a pair offered twice counts once (N < 2^31)
        _, first = np.unique(key, return_index=True)
        if first.size < key.size:
            self.i, self.j, self.r = self.i[first], self.j[first], self.r[first]
        if self.r.size > self.k:
            top = np.argpartition(self.r, self.r.size - self.k)[-self.k:]
            self.i, self.j, self.r = self.i[top], self.j[top], self.r[top]

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._trim()
        order = np.argsort(-self.r, kind="stable")
        return self.i[order], self.j[order], self.r[order]


@dataclass
class ScanStats:
    """Pass counter of one constraint set (thread safe): ``full`` blocked passes over all pairs,
    ``pruned`` branch-and-bound passes, ``pairs`` pairs evaluated exactly, ``by`` counts per
    caller tag. A pass is one question "what is the maximum ratio over all pairs" answered.

    Examples
    --------
    >>> s = ScanStats(); s.record("full", 10, "verify"); s.passes
    1
    """

    full: int = 0
    pruned: int = 0
    pairs: int = 0
    by: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def passes(self) -> int:
        return self.full + self.pruned

    def __getstate__(self) -> dict[str, object]:  # a lock does not pickle: engines ship sets
        with self._lock:
            return {"full": self.full, "pruned": self.pruned, "pairs": self.pairs,
                    "by": dict(self.by)}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def record(self, strategy: str, pairs: int, tag: str = "scan") -> None:
        with self._lock:
            if strategy == "pruned":
                self.pruned += 1
            else:
                self.full += 1
            self.pairs += int(pairs)
            self.by[tag] = self.by.get(tag, 0) + 1

    def snapshot(self) -> dict[str, object]:
        """A copy as a plain dict (for reports)."""
        with self._lock:
            return {"passes": self.passes, "full": self.full, "pruned": self.pruned,
                    "pairs_evaluated": self.pairs, "by": dict(self.by)}

    def since(self, before: dict[str, object]) -> dict[str, object]:
        """The passes made after ``before`` (a :meth:`snapshot`)."""
        now = self.snapshot()
        b_by = before["by"]
        assert isinstance(b_by, dict)
        n_by = now["by"]
        assert isinstance(n_by, dict)
        out: dict[str, object] = {k: int(now[k]) - int(before[k])  # type: ignore[call-overload]
                                  for k in ("passes", "full", "pruned", "pairs_evaluated")}
        out["by"] = {k: v - b_by.get(k, 0) for k, v in n_by.items() if v - b_by.get(k, 0)}
        return out
