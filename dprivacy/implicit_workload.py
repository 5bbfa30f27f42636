"""Structured workloads too large for an m x N query matrix: all ranges, prefixes, rectangles.

All ranges of a line of 1024 points are 524 800 queries; as a sparse matrix they hold 1.8e8
entries (2 GB), and all rectangles of a 32 x 32 grid are 278 784 queries.  An
:class:`ImplicitWorkload` never builds that matrix: the strategy optimiser sees the workload
only through its Gram matrix ``F'F`` (N x N, in closed form), the answers are evaluated from the
estimated histogram with prefix sums, and the variance of every answer comes from the
estimate's covariance with the same prefix-sum trick (four terms per range, sixteen per
rectangle).  Use it with :func:`dprivacy.design_strategy` and :class:`dprivacy.StrategyMechanism`;
the (w, beta) designs need an explicit :class:`dprivacy.Workload` (``W.to_workload()`` builds
one when it fits in memory).

Query order: ranges ``[a, b]`` by a, then b (a <= b); prefixes ``[0, b]`` by b; rectangles
``[x0, x1] x [y0, y1]`` by their x range, then their y range (each in range order), over a grid
whose element ``a * ny + b`` is the cell (a, b) -- the order of
``Universe.from_points([[a, b] for a in range(nx) for b in range(ny)])``.

Examples
--------
>>> W = ImplicitWorkload.all_ranges(4)
>>> W.m, W.N
(10, 4)
>>> W.answer([1, 2, 3, 4])[:4]
array([ 1.,  3.,  6., 10.])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.fingerprints import Hasher
from dprivacy.workload import Workload
from solvers.strategy import implicit as gram_forms

if TYPE_CHECKING:
    from dprivacy.universe import Universe

KINDS = ("ranges", "prefixes", "rectangles")
#: Largest m * N that :meth:`ImplicitWorkload.to_workload` materialises.
MATERIALISE_LIMIT = 50_000_000
#: Largest N of ranges and prefixes: their Gram matrix and the estimate's covariance are dense
#: N x N (512 MB at 8192); also the largest N whose rectangles get a dense Gram matrix.
MAX_N = 8192
#: Largest N of rectangles: beyond MAX_N they are designed, checked and answered from per-axis
#: matrices only (a Kronecker strategy, :mod:`solvers.strategy.kron`); 512 x 512 cells.
MAX_GRID_N = 2**18


def as_workload(workload: Any) -> Workload | ImplicitWorkload:
    """An :class:`ImplicitWorkload` or a :class:`Workload` as it is, anything else (an (m, N)
    matrix) as a Workload."""
    return workload if isinstance(workload, Workload | ImplicitWorkload) else Workload(workload)


def _range_ends(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of every range [a, b] of n points, by a then b."""
    a, b = np.triu_indices(n)
    return a.astype(np.int64), b.astype(np.int64)


def _padded_cumsum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Cumulative sums over ``axes`` with a leading zero on each: out[i] = sum of x[:i]."""
    out = np.asarray(x, dtype=np.float64)
    for ax in axes:
        out = np.cumsum(out, axis=ax)
        pad = [(0, 0)] * out.ndim
        pad[ax] = (1, 0)
        out = np.pad(out, pad)
    return out


@dataclass(frozen=True)
class ImplicitWorkload:
    """Every range, every prefix or every axis-aligned rectangle of an ordered universe.

    Build it with :meth:`all_ranges`, :meth:`all_prefixes` or :meth:`all_rectangles`.
    """

    kind: str
    shape_: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValidationError(f"kind = {self.kind!r}: choose one of {', '.join(KINDS)}")
        want = 2 if self.kind == "rectangles" else 1
        dims = tuple(self.shape_) if isinstance(self.shape_, tuple | list) else (self.shape_,)
        if len(dims) != want or not all(isinstance(d, int | np.integer) and
                                        not isinstance(d, bool | np.bool_) and d >= 1 for d in dims):
            raise ShapeError(f"{self.kind} need {want} positive integer size(s), got {self.shape_!r}")
        dims = tuple(int(d) for d in dims)
        limit = MAX_GRID_N if self.kind == "rectangles" else MAX_N
        if math.prod(dims) > limit:
            raise ShapeError(f"{self.kind} over {math.prod(dims)} elements: at most {limit} (the "
                             "strategy's Gram and covariance matrices are dense N x N"
                             + (")" if self.kind != "rectangles" else
                                ", or per-axis n x n for a Kronecker strategy)"))
        object.__setattr__(self, "shape_", dims)

    @classmethod
    def all_ranges(cls, N: int) -> ImplicitWorkload:  # noqa: N803
        """The N (N + 1) / 2 range counts [a, b] (a <= b) of a line of N ordered elements."""
        return cls("ranges", (N,))

    @classmethod
    def all_prefixes(cls, N: int) -> ImplicitWorkload:  # noqa: N803
        """The N prefix counts [0, b] of a line of N ordered elements."""
        return cls("prefixes", (N,))

    @classmethod
    def all_rectangles(cls, nx: int, ny: int) -> ImplicitWorkload:
        """The nx (nx + 1) ny (ny + 1) / 4 rectangle counts of an nx x ny grid (module doc)."""
        return cls("rectangles", (nx, ny))

    # ------------------------------------------------------------------ shape
    @property
    def N(self) -> int:  # noqa: N802
        return math.prod(self.shape_)

    @property
    def m(self) -> int:
        if self.kind == "prefixes":
            return self.shape_[0]
        return math.prod(d * (d + 1) // 2 for d in self.shape_)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.m, self.N)

    def __repr__(self) -> str:
        return f"ImplicitWorkload.{'all_' + self.kind}{self.shape_} (m={self.m}, N={self.N})"

    def fingerprint(self) -> str:
        """sha256 of the kind and the sizes (the queries are determined by them)."""
        return Hasher("implicit-workload").add(self.kind).add(repr(self.shape_)).hexdigest()

    def query_name(self, k: int) -> str:
        """The name of query k (as in :meth:`query_names`, without listing all m)."""
        k = int(k)
        if not 0 <= k < self.m:
            raise ShapeError(f"query {k} of {self.m}")
        if self.kind == "prefixes":
            return f"[0,{k}]"
        if self.kind == "ranges":
            a, b = _range_ends(self.N)
            return f"[{a[k]},{b[k]}]"
        a, b = _range_ends(self.shape_[0])
        c, d = _range_ends(self.shape_[1])
        i, j = divmod(k, c.size)
        return f"[{a[i]},{b[i]}]x[{c[j]},{d[j]}]"

    def query_names(self) -> list[str]:
        """``[a,b]`` per range or prefix, ``[x0,x1]x[y0,y1]`` per rectangle, in query order."""
        if self.kind == "prefixes":
            return [f"[0,{b}]" for b in range(self.N)]
        a, b = _range_ends(self.shape_[0])
        if self.kind == "ranges":
            return [f"[{i},{j}]" for i, j in zip(a, b, strict=True)]
        c, d = _range_ends(self.shape_[1])
        return [f"[{i},{j}]x[{k},{l}]" for i, j in zip(a, b, strict=True)
                for k, l in zip(c, d, strict=True)]  # noqa: E741

    # -------------------------------------------------------------- the maths
    def gram(self) -> np.ndarray:
        """F'F (N x N) in closed form (rectangles: up to :data:`MAX_N` cells; beyond,
        :meth:`axis_grams`)."""
        if self.N > MAX_N:
            raise ShapeError(f"the Gram matrix of {self!r} would be dense {self.N} x {self.N}; "
                             "use axis_grams() (its Kronecker factors)")
        if self.kind == "ranges":
            return gram_forms.range_gram(self.N)
        if self.kind == "prefixes":
            return gram_forms.prefix_gram(self.N)
        return gram_forms.rectangle_gram(*self.shape_)

    def axis_grams(self) -> tuple[np.ndarray, np.ndarray]:
        """Rectangles: the Gram matrices of all ranges of each axis, ``F'F = G_x (x) G_y``."""
        if self.kind != "rectangles":
            raise ValidationError(f"axis_grams is for rectangles, not {self.kind}")
        return gram_forms.range_gram(self.shape_[0]), gram_forms.range_gram(self.shape_[1])

    def answer(self, x: np.ndarray) -> np.ndarray:
        """F x (shape (m,)) without F: differences of prefix sums of x."""
        v = np.asarray(x, dtype=np.float64)
        if v.shape != (self.N,):
            raise ShapeError(f"x has shape {v.shape}; the workload needs ({self.N},)")
        if self.kind == "prefixes":
            return np.cumsum(v)
        if self.kind == "ranges":
            P = _padded_cumsum(v, (0,))
            a, b = _range_ends(self.N)
            return P[b + 1] - P[a]
        nx, ny = self.shape_
        P = _padded_cumsum(v.reshape(nx, ny), (0, 1))
        a, b = _range_ends(nx)
        c, d = _range_ends(ny)
        A0, A1 = a[:, None], b[:, None] + 1  # noqa: N806
        B0, B1 = c[None, :], d[None, :] + 1  # noqa: N806
        return (P[A1, B1] - P[A0, B1] - P[A1, B0] + P[A0, B0]).ravel()

    def quadratic_diagonal(self, S: np.ndarray) -> np.ndarray:
        """diag(F S F') (shape (m,)) for a symmetric (N, N) S: the variance of every answer
        when S is the covariance of the estimated histogram."""
        S = np.asarray(S, dtype=np.float64)
        if S.shape != (self.N, self.N):
            raise ShapeError(f"S has shape {S.shape}; need ({self.N}, {self.N})")
        if self.kind == "prefixes":
            T = _padded_cumsum(S, (0, 1))
            e = np.arange(1, self.N + 1)
            return T[e, e]
        if self.kind == "ranges":
            T = _padded_cumsum(S, (0, 1))
            a, b = _range_ends(self.N)
            e = b + 1
            return T[e, e] - T[a, e] - T[e, a] + T[a, a]
        nx, ny = self.shape_
        T = _padded_cumsum(S.reshape(nx, ny, nx, ny), (0, 1, 2, 3))
        a, b = _range_ends(nx)
        c, d = _range_ends(ny)
        xs = ((a[:, None], -1.0), (b[:, None] + 1, 1.0))
        ys = ((c[None, :], -1.0), (d[None, :] + 1, 1.0))
        out = np.zeros((a.size, c.size))
        for xi, sx in xs:
            for yi, sy in ys:
                for xj, tx in xs:
                    for yj, ty in ys:
                        out += (sx * sy * tx * ty) * T[xi, yi, xj, yj]
        return out.ravel()

    # ------------------------------------------------------------ the universe
    def check_universe(self, universe: Universe) -> None:
        """Raise unless ``universe`` has N elements in the order the queries assume: points on a
        line in increasing order (ranges, prefixes), or a full grid with element
        ``a * ny + b`` at the a-th x value and the b-th y value (rectangles)."""
        if universe.N != self.N:
            raise ShapeError(f"the workload covers N = {self.N} elements but the universe has "
                             f"N = {universe.N}")
        if universe.coords is None:
            self._check_keys(universe)
            return
        pts = np.asarray(universe.coords, dtype=np.float64)
        if self.kind in ("ranges", "prefixes"):
            if pts.shape[1] != 1 or np.any(np.diff(pts[:, 0]) <= 0):
                raise ValidationError(f"{self.kind} need the universe's points on a line in "
                                      "increasing order (element k is the k-th point)")
            return
        nx, ny = self.shape_
        ok = pts.shape[1] == 2
        if ok:
            xs, ia = np.unique(pts[:, 0], return_inverse=True)
            ys, ib = np.unique(pts[:, 1], return_inverse=True)
            ok = xs.size == nx and ys.size == ny and \
                np.array_equal(np.ravel(ia) * ny + np.ravel(ib), np.arange(self.N))
        if not ok:
            raise ValidationError(f"rectangles need the universe's points on a full {nx} x {ny} "
                                  "grid, element a * ny + b at the a-th x and the b-th y value")

    def _check_keys(self, universe: Universe) -> None:
        """A universe without points: its key attributes must be the line (one attribute, its
        values increasing) or the grid (two attributes with nx and ny values, the first one
        varying slowest), as :meth:`dprivacy.Universe.from_domains` lists them."""
        keys = list(universe.key_columns)
        el = universe.elements
        if self.kind in ("ranges", "prefixes"):
            ok = len(keys) == 1 and bool(el[keys[0]].is_monotonic_increasing) and \
                el[keys[0]].is_unique
            if not ok:
                raise ValidationError(f"{self.kind} need a universe with one key attribute whose "
                                      "values increase along the elements")
            return
        nx, ny = self.shape_
        ok = len(keys) == 2
        if ok:
            a = el[keys[0]].factorize(sort=True)[0]
            b = el[keys[1]].factorize(sort=True)[0]
            ok = int(a.max()) + 1 == nx and int(b.max()) + 1 == ny and \
                np.array_equal(a * ny + b, np.arange(self.N))
        if not ok:
            raise ValidationError(f"rectangles need a universe with two key attributes of {nx} "
                                  f"and {ny} values, listed as Universe.from_domains lists them "
                                  "(the first attribute varying slowest)")

    def to_workload(self) -> Workload:
        """The explicit (m, N) :class:`Workload` (sparse), when m * N is at most
        :data:`MATERIALISE_LIMIT`."""
        if self.m * self.N > MATERIALISE_LIMIT:
            raise ValidationError(f"{self!r} has m * N = {self.m * self.N:.3g} entries, beyond "
                                  f"{MATERIALISE_LIMIT:.3g}: use it implicitly (design_strategy)")
        import scipy.sparse as sp

        eye = np.eye(self.N)
        cols = [self.answer(eye[:, i]) for i in range(self.N)]
        return Workload(sp.csr_array(np.stack(cols, axis=1)), tuple(self.query_names()))
