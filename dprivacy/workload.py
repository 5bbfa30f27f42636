"""Workloads: the query matrix F (m x N) of m linear queries, and its builders (paper §2, Definition 3).

Query k answers <F_k, x> on a histogram x.  Under bounded neighbours (one record moves from chi_i to
chi_j) the generalised sensitivity of the pair is Delta_ij F = sum_k |F_ki - F_kj| and the global
sensitivity is Delta F = max_ij Delta_ij F (Definition 3; for m = 1 it is the range of f).
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.fingerprints import Hasher, matrix_bytes
from dprivacy.noise import resolve_rng
from dprivacy.universe import Universe


def _as_matrix(F) -> np.ndarray | sp.csr_array:
    A: np.ndarray | sp.csr_array
    if hasattr(F, "to_workload") and hasattr(F, "gram"):
        raise ValidationError(f"{F!r} is an implicit workload: only design_strategy and "
                              "StrategyMechanism take it; elsewhere pass W.to_workload() (the "
                              "explicit (m, N) matrix) if it fits in memory")
    if sp.issparse(F):
        # our own copy (csr_array(F) alone may share F's arrays): the caller's later writes to
        # F.data / F.indices / F.indptr change nothing here
        S: Any = sp.csr_array(cast(Any, F), dtype=cast(Any, float), copy=True)
        S.sum_duplicates()
        S.sort_indices()
        A, data = S, S.data
    else:
        try:
            A = np.array(F, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"F must be a numeric (m, N) array: {exc}") from exc
        if A.ndim == 1:
            A = A[None, :]
        if A.ndim != 2:
            raise ShapeError(f"F must be a 2-D (m, N) array, got {A.ndim} dimensions")
        data = A
    if not np.all(np.isfinite(data)):
        if sp.issparse(A):
            coo = A.tocoo()
            bad = int(np.flatnonzero(~np.isfinite(coo.data))[0])
            k, i, v = coo.row[bad], coo.col[bad], coo.data[bad]
        else:
            k, i = np.argwhere(~np.isfinite(A))[0]
            v = A[k, i]
        raise ValidationError(
            f"F[{k}, {i}] = {v}: query coefficients must be finite numbers (no NaN or inf)"
        )
    if A.shape[0] == 0 or A.shape[1] == 0:
        raise ShapeError(f"F has shape {A.shape}: need at least one query and one element")
    mag = np.abs(data)
    huge = mag > _HUGE
    tiny = (mag > 0) & (mag < _TINY)
    if huge.any() or tiny.any():
        k, i, v = _first_entry(A, huge if huge.any() else tiny)
        if huge.any():
            raise ValidationError(
                f"F[{k}, {i}] = {v:.6g}: too large, differences of coefficients would overflow "
                f"float64 (above {np.finfo(float).max:.3g}) and look infinite; rescale the queries"
            )
        raise ValidationError(
            f"F[{k}, {i}] = {v:.3g} is subnormal (non-zero but below {_TINY:.3g}): too small to "
            "compute with (the noise precision would overflow); rescale the queries or use 0"
        )
    return A


_HUGE = np.finfo(float).max / 2
_TINY = np.finfo(float).tiny


def _first_entry(A: np.ndarray | sp.csr_array, mask: np.ndarray) -> tuple[int, int, float]:
    """(row, column, value) of the first entry of A where ``mask`` (over its stored values)."""
    if sp.issparse(A):
        coo = A.tocoo()
        t = int(np.flatnonzero(mask)[0])
        return int(coo.row[t]), int(coo.col[t]), float(coo.data[t])
    k, i = np.argwhere(mask)[0]
    return int(k), int(i), float(A[k, i])


@dataclass(frozen=True, eq=False)
class Workload:
    """m linear queries over a universe of N elements: F of shape (m, N), dense or sparse.

    Non-finite coefficients and malformed shapes raise :class:`ValidationError` at construction,
    before anything else happens.

    **A query that never changes when a record moves is released exactly.** d_X neighbours move
    a record, they never add or remove one, so the total count (a row of ones), or any query
    constant over the elements at finite distance from each other, gets no noise at all
    (``beta = inf``; :func:`dprivacy.design` warns with an ``ExactAnswerWarning``). Leave such
    queries out if their answer must stay secret (docs/theory.md, "What d_X-privacy does not
    hide").

    Examples
    --------
    >>> W = Workload([[1, 0, 1], [0, 1, 1]])
    >>> W.m, W.N, W.sensitivity()
    (2, 3, 2.0)
    """

    F: np.ndarray | sp.csr_array
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        A = _as_matrix(self.F)
        if isinstance(A, np.ndarray):
            A.setflags(write=False)
        else:
            for arr in (A.data, A.indices, A.indptr):
                arr.setflags(write=False)
        object.__setattr__(self, "F", A)
        if self.names is not None:
            names = tuple(str(n) for n in self.names)
            if len(names) != A.shape[0]:
                raise ShapeError(f"{len(names)} query names for m = {A.shape[0]} queries")
            object.__setattr__(self, "names", names)

    # ----------------------------------------------------------------- shape
    @property
    def m(self) -> int:
        """Number of queries."""
        return int(self.F.shape[0])

    @property
    def N(self) -> int:  # noqa: N802
        """Universe size the queries are defined on."""
        return int(self.F.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        return (self.m, self.N)

    @property
    def is_sparse(self) -> bool:
        return sp.issparse(self.F)

    def dense(self) -> np.ndarray:
        """F as a dense (m, N) array."""
        return self.F.toarray() if sp.issparse(self.F) else np.asarray(self.F)

    def query_names(self) -> list[str]:
        return list(self.names) if self.names is not None else [f"q{k}" for k in range(self.m)]

    def to_csv(self, path: str | os.PathLike, universe: Universe | None = None) -> None:
        """Write the queries as the command line reads them (``--queries FILE.csv``).

        One row per query: its name, then one coefficient per element in universe order, each
        written exactly (17 significant digits, so the file reads back to the same F and the
        same fingerprint; a config made from this workload loads with the file). The header row
        is ``query`` and the universe's element labels (the command line then checks the
        columns against ``--universe``), or ``e0, e1, ...`` without a universe. Rows are written
        one at a time, so a sparse F is never made dense as a whole.

        >>> import tempfile, os
        >>> W = Workload([[1.0, 0.5, 0.0]], names=("first_two",))
        >>> path = os.path.join(tempfile.mkdtemp(), "q.csv")
        >>> W.to_csv(path)
        >>> open(path).read().splitlines()
        ['query,e0,e1,e2', 'first_two,1,0.5,0']
        """
        import csv

        if universe is not None:
            self.check_universe(universe)
            labels = universe.labels()
        else:
            labels = [f"e{i}" for i in range(self.N)]
        names = self.query_names()
        num = [n for n in names if _looks_numeric(n)]
        if num:
            raise ValidationError(f"query name {num[0]!r} looks like a number; the command line "
                                  "reads a numeric first column as coefficients: rename it")
        F = self.F.tocsr() if sp.issparse(self.F) else np.asarray(self.F)
        with open(path, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh, lineterminator="\n")
            out.writerow(["query", *labels])
            for k in range(self.m):
                row = F[k].toarray().ravel() if sp.issparse(F) else F[k]
                out.writerow([names[k], *(f"{v:.17g}" for v in row.tolist())])

    def check_universe(self, universe: Universe) -> None:
        """Raise :class:`ShapeError` unless F has one column per element of ``universe``."""
        if self.N != universe.N:
            raise ShapeError(
                f"the workload has N = {self.N} columns but the universe has N = {universe.N} "
                "elements: F must be (m, N) with one column per element, in universe order"
            )

    # ----------------------------------------------------------- sensitivity
    def answer(self, x: np.ndarray) -> np.ndarray:
        """The exact answers F x."""
        return np.asarray(self.F @ np.asarray(x, dtype=float)).ravel()

    def ranges(self) -> np.ndarray:
        """Per-query range Delta f_k = max_i F_ki - min_i F_ki (single-query sensitivity)."""
        if sp.issparse(self.F):
            A = self.F
            mx = A.max(axis=1).toarray().ravel()
            mn = A.min(axis=1).toarray().ravel()
            return mx - mn
        return np.ptp(self.F, axis=1)

    def inf_norms(self) -> np.ndarray:
        """||F_k||_inf per query (the bias coefficient of Theorem 2)."""
        return np.asarray(abs(self.F).max(axis=1).toarray().ravel() if sp.issparse(self.F)
                          else np.abs(self.F).max(axis=1))

    def pair_sensitivity(self, i: int, j: int) -> float:
        """Delta_ij F = sum_k |F_ki - F_kj| (Definition 3 for linear queries)."""
        cols = self.F[:, [i, j]]
        cols = cols.toarray() if sp.issparse(cols) else cols
        return float(np.abs(cols[:, 0] - cols[:, 1]).sum())

    def sensitivity(self, memory_bytes: int = 2**28) -> float:
        """Global sensitivity Delta F = max_{i,j} sum_k |F_ki - F_kj| (bounded neighbours).

        Exact, never densifying a sparse F: for m <= 12 through the l1 norm's sign vectors
        (O(N 2^(m-1)), :func:`solvers.kernel_scan.l1_diameter`), else a blocked scan over
        column pairs (never an N x N x m array).  Computed once per workload (cached; a sparse
        F is re-checked by its entries' checksum).
        """
        if self.m == 1:
            return float(self.ranges()[0])
        return _cached_sensitivity(self, memory_bytes)

    def fingerprint(self) -> str:
        """sha256 of F's shape and values (canonical CSR bytes: the same for a dense and a sparse
        F with equal values; see :mod:`dprivacy.fingerprints`). Computed once (F is frozen)."""
        cached = self.__dict__.get("_fingerprint")
        if cached is None:
            cached = Hasher("workload").add(matrix_bytes(self.F)).hexdigest()
            self.__dict__["_fingerprint"] = cached
        return cached

    def legacy_fingerprint_v1(self) -> str:
        """The fingerprint of config version 1 (dense bytes); only to read old configs."""
        h = hashlib.sha256()
        h.update(repr(self.shape).encode())
        h.update(np.ascontiguousarray(self.dense(), dtype="<f8").tobytes())
        return h.hexdigest()

    # -------------------------------------------------------------- builders
    @classmethod
    def random_uniform(cls, m: int, N: int, low: float = 0.0, high: float = 1.0,  # noqa: N803
                       rng=None) -> Workload:
        """m queries with i.i.d. U[low, high) coefficients (as in the paper's §4 experiments)."""
        _check_mn(m, N)
        return cls(resolve_rng(rng).uniform(low, high, size=(m, N)))

    @classmethod
    def random_binary(cls, m: int, N: int, p: float = 0.5, rng=None) -> Workload:  # noqa: N803
        """m counting queries with i.i.d. Bernoulli(p) {0, 1} coefficients (paper §4.2)."""
        _check_mn(m, N)
        if not 0 <= p <= 1:
            raise ValidationError(f"p = {p}: a probability is in [0, 1]")
        return cls((resolve_rng(rng).random((m, N)) < p).astype(float))

    @classmethod
    def range_queries(cls, N: int, ranges: Sequence[tuple[int, int]] | None = None, *,  # noqa: N803
                      count: int | None = None, rng=None) -> Workload:
        """Range counts over an ordered universe: query (lo, hi) counts elements lo..hi inclusive.

        Give ``ranges`` explicitly or ``count`` random ones.
        """
        if (ranges is None) == (count is None):
            raise ValidationError("give exactly one of ranges=[(lo, hi), ...] or count=...")
        if ranges is None:
            assert count is not None  # exactly one of ranges and count was given
            g = resolve_rng(rng)
            ends = np.sort(g.integers(0, N, size=(int(count), 2)), axis=1)
            ranges = [tuple(r) for r in ends]
        F = np.zeros((len(ranges), N))
        names = []
        for k, (lo, hi) in enumerate(ranges):
            if not 0 <= lo <= hi < N:
                raise ValidationError(f"range {k} = ({lo}, {hi}): need 0 <= lo <= hi < N = {N}")
            F[k, lo:hi + 1] = 1.0
            names.append(f"[{lo},{hi}]")
        return cls(F, tuple(names))

    @classmethod
    def marginals(cls, universe: Universe, k: int = 1,
                  attributes: Sequence[str] | None = None) -> Workload:
        """All k-way marginals over ``attributes`` (default: the key attributes).

        One counting query per attribute subset S (|S| = k) and per value combination of S:
        it counts the records whose attributes in S take those values (paper Appendix C).
        """
        attrs = list(attributes) if attributes is not None else list(universe.key_columns)
        missing = [a for a in attrs if a not in universe.elements.columns]
        if missing:
            raise ValidationError(f"attributes {missing} are not columns of the universe")
        if not 1 <= k <= len(attrs):
            raise ValidationError(f"k = {k}: need 1 <= k <= {len(attrs)} attributes")
        rows, names = [], []
        el = universe.elements
        for S in itertools.combinations(attrs, k):
            for vals, idx in el.groupby(list(S), sort=True).indices.items():
                vals = vals if isinstance(vals, tuple) else (vals,)
                row = np.zeros(universe.N)
                row[idx] = 1.0
                rows.append(row)
                names.append(",".join(f"{a}={v}" for a, v in zip(S, vals, strict=True)))
        return cls(np.array(rows), tuple(names))

    @classmethod
    def from_predicates(cls, universe: Universe,
                        predicates: Sequence[str] | Mapping[str, str]) -> Workload:
        """Queries from pandas expressions over the universe's columns.

        Each expression is evaluated with ``universe.elements.eval(expr)``; a boolean result is a
        counting query, a numeric one is a weighted (sum) query, e.g. ``"age > 30"`` or
        ``"elevation * (state == 'CA')"``.
        """
        items = list(predicates.items()) if isinstance(predicates, Mapping) else \
            [(p, p) for p in predicates]
        if not items:
            raise ValidationError("from_predicates needs at least one expression")
        rows = []
        for _name, expr in items:
            try:
                v = universe.elements.eval(expr)
            except Exception as exc:  # pandas raises many kinds
                raise ValidationError(f"predicate {expr!r} could not be evaluated: {exc}") from exc
            v = np.broadcast_to(np.asarray(v, dtype=float), (universe.N,))
            rows.append(v)
        return cls(np.array(rows), tuple(str(n) for n, _ in items))


def _cached_sensitivity(workload: Workload, memory_bytes: int) -> float:
    """Delta F of ``workload``, memoised on the object (dense F is read-only; a sparse F is
    keyed by its shape, nnz and the sums of its entries and indices)."""
    from solvers.kernel_scan import l1_diameter

    F = workload.F
    key: tuple = ("dense",)
    if sp.issparse(F):
        key = (F.shape, int(F.nnz), float(np.sum(F.data)), int(np.sum(F.indices)))
    cache = workload.__dict__.setdefault("_sensitivity_cache", {})
    if key not in cache:
        cache.clear()
        cache[key] = l1_diameter(F, memory_bytes=memory_bytes)
    return float(cache[key])


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_mn(m: int, N: int) -> None:  # noqa: N803
    if int(m) < 1 or int(N) < 1:
        raise ValidationError(f"m = {m}, N = {N}: both must be positive")
