"""The optimal d_X-local randomiser LP decomposed by output column, with a proven lower bound.

The LP (:mod:`solvers.channels.optimal`) is::

    minimise    sum_(x, z) cost[x, z] T[x, z]
    subject to  T[x, z] <= exp(b) T[x', z]     for the constrained pairs (x, x', b), every z
                sum_z T[x, z] = 1,  T >= 0.

The pair constraints only involve one column ``T[:, z]`` at a time; the columns are coupled by
the N row sums alone. Every column lies in the polytope
``P = {v : 0 <= v <= 1, v[x] <= exp(b) v[x']}`` (the box is implied by the row sums), so
relaxing the row sums with multipliers ``u`` gives, for ANY ``u``, the lower bound

    L(u) = sum_x u[x] + sum_z min_{v in P} <cost[:, z] - u, v>,

N independent small LPs (N variables, one row per pair). The best ``L(u)`` equals the LP optimum
(the box adds nothing to the LP), so the bound can close the gap completely. ``u`` is found by
Dantzig–Wolfe column generation (Dantzig & Wolfe, *Oper. Res.* 8, 1960) with one convexity row
per output: the master LP mixes known vertices of P per output under the N row sums; its row duals
are the next ``u``. Stabilised as in :mod:`solvers.channels.dantzig_wolfe`: slack columns with a
growing penalty keep the duals in a box (du Merle et al., 1999), and pricing happens at
``alpha · u_best + (1 - alpha) · u`` (Wentges, 1997).

Each pricing value is turned into a bound that does not trust the LP solver: with ``w >= 0`` the
pair rows' duals (clipped), ``r = g + A' w`` is computed here and ``sum_x min(r[x], 0)`` is a
lower bound on ``min_{v in P} <g, v>`` for any such ``w`` (``A v <= 0`` and ``0 <= v <= 1``); the
certificate is the sum of those numbers, so a solver inaccuracy can only weaken it.

Symmetry: given a group of permutations p with ``cost[p][:, p] == cost`` and the pair set
invariant (:mod:`solvers.channels.symmetry`), an optimal T with ``T[p[x], p[z]] = T[x, z]``
exists. Then only one output per orbit is priced, the master has one row per orbit of inputs,
and ``u`` is constant on orbits (the bound above still holds: it holds for any ``u``).

The slack columns' box on the master's duals is centred on the multipliers of the best bound
so far (boxstep; Marsten, Hogan & Blankenship, 1975), so a warm start (``start_duals``, e.g. a
smaller grid's multipliers, :mod:`solvers.channels.warm_start`) is kept, and the master can start
from given columns (``start_columns``). From a cold start the centre is ``u = 0``, whose bound
(the sum of the negative costs, 0 for a nonnegative cost) is known without pricing: a first
bound below it (the 808 US cities: -1.2e5) never becomes the centre. The symmetric channel is
built exactly symmetric (:func:`expand`), which lets its privacy check look at one column per
orbit.

Pairs with budgets above a cap stay out of the pricing LPs (a relaxation: the bound stays
valid), and each column the LPs return is lifted to ``v'[y] = max_x v[x] exp(-D[x, y])`` (D: the
path metric of the pair budgets), the least vector above v that satisfies every pair; it moves
entries of about ``exp(-cap)`` of the column's largest. The cap is ``CAP`` (23 nats) for listed
pairs; with every pair of a metric constrained it is :func:`dense_cap` (8 nats on a grid at 0.5
per unit, at most 16 nats): the longer pairs are then implied, up to a dilation close to 1, by
chains of shorter ones, so little is lost, and HiGHS is kept away from coefficients near
``exp(23)``, with which its pricing LPs returned far weaker bounds (50 x 50 grid: 3.4516 against
3.6387 from the same multipliers, the optimum being near 3.64). What remains of HiGHS's dual
errors times ``exp(b)`` is taken out of each certificate by lowering the multipliers of the rows
that make a reduced cost negative (:func:`_tighten_duals`; any multipliers >= 0 give a valid
bound). Every master solve is checked to be optimal (retried from scratch otherwise).

Any multipliers ``w >= 0`` of a pricing LP's rows bound that output's pricing problem at every
later ``g`` too, so the duals of each output's last solved LP are kept (one float per row) and
a pricing LP stopped by its time limit, or not solved, still gets a bound close to the last one
(:meth:`_Pricer.bound`). Optionally (``complement=True``) the pricing LPs also take the
complementary rows ``1 - v[x] <= exp(b) (1 - v[y])``, which every column of a private channel
satisfies (the pair rows summed over the other outputs; a column with an entry 1 is then all
ones), a tighter relaxation.

With every pair of a metric constrained
(e.g. the Euclidean distance, which no smaller set of pairs implies) no pair list is built: each
pricing LP starts from the pairs of each input with its nearest inputs and of the output with
every input, and the separation oracle of :mod:`solvers.channels.separation` adds, for every
input y, its most violated pair (one pass over a shared ``exp(-eps)`` in row blocks) until none
is violated. With a sparse pair set (the edges of a graph metric,
:func:`solvers.channels.spanner.graph_edges`) the rows are all there from the start. When the
pricing LPs of all outputs would not fit in memory (``model_bytes``), each is rebuilt per solve
from its rows and its last basis.

numpy/scipy/highspy only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from solvers.channels.lp_parts import add_complement_rows, add_ratio_rows, nearest_pairs, new_highs
from solvers.channels.separation import kernel, lift, worst_violations

__all__ = ["ColumnResult", "solve_by_columns", "expand"]

log = logging.getLogger(__name__)

_NONE = np.zeros(0, dtype=np.int32)

_SMALL = 1e-12  # HiGHS's smallest matrix value (it drops smaller entries)

#: Above this many inputs the columns kept for building T are stored in single precision.
SINGLE_ABOVE = 4096

#: Largest pair budget (nats) put into a pricing LP; pairs above it are met by lifting the column.
CAP = 23.0

#: With every pair of a metric constrained, the pricing LPs take pairs up to
#: ``min(DENSE_MAX, max(DENSE_CAP, DENSE_STEPS x the median nearest-neighbour budget,
#: DENSE_SPREAD x the largest nearest-neighbour budget))`` nats (:func:`dense_cap`): the longer
#: pairs are implied, up to a dilation close to 1, by chains of the shorter ones, and leaving them
#: out (a relaxation: the bound stays valid) keeps HiGHS away from large coefficients ``exp(b)``,
#: which turn its dual errors into far weaker bounds. Measured on a 50 x 50 grid (0.5 per unit,
#: warm start from 25 x 25): the first bound 3.4516 with the cap at 23 nats, 3.6387 with 8
#: (primal 3.6495); on the 808 US cities (one over the median nearest-neighbour distance): a
#: bound of 3.61 against a master of 7.06 after 300 s with 23 nats, a gap of 0.63 % after 120 s
#: with 16. The third term keeps the nearest pairs of an outlying point (up to
#: ``DENSE_MAX / DENSE_SPREAD`` nats from the others); a point farther out has pairs of weight at
#: most ``exp(-DENSE_MAX)`` (1e-7), met by the lift.
DENSE_CAP = 8.0
DENSE_STEPS = 16.0
DENSE_SPREAD = 4.0
DENSE_MAX = 16.0

#: Largest pair budget (nats) of a complementary row ``1 - v[x] <= exp(b) (1 - v[y])`` in a pricing
#: LP. Such a row can only bind where ``v[x] >= 1 - exp(-b)``; leaving the others out is a
#: relaxation (the bound stays valid) and keeps the right-hand sides ``exp(b) - 1`` small.
COMPLEMENT_CAP = 5.0


@dataclass(frozen=True)
class ColumnResult:
    """The channel ``T`` (row sums 1 up to the master's tolerance), the master's value, the
    proven lower bound on the LP optimum and solver facts."""

    T: np.ndarray  # noqa: N815
    objective: float
    lower_bound: float
    status: str
    rounds: int
    columns: int
    pricing_solves: int
    pricing_rows: int
    pricing_seconds: float
    master_seconds: float
    group_order: int
    outputs_priced: int  # orbits of outputs (N without symmetry)
    history: tuple[tuple[float, float, float], ...] = ()  # (seconds, master value, best bound)
    duals: np.ndarray | None = None  # the multipliers u of the best bound (N,)


class _Pricer:
    """``min <g, v>`` over ``P`` for each priced output, by HiGHS (warm-started).

    Two ways to hold the pair rows: the listed pairs ``(x, y, b)`` (a graph's edges, a
    spanner), all in each LP from the start unless there are many (then added while violated);
    or, with ``x`` None, every pair of the metric ``eps``, found by the separation oracle
    (:func:`solvers.channels.separation.worst_violations`) and added while violated, so that no
    list of the N² pairs exists. When the models of all outputs would not fit in
    ``model_bytes``, each LP is rebuilt for every solve from its rows and its last basis
    (a few bytes per row) instead of being kept.
    """

    def __init__(self, n: int, x: np.ndarray | None, y: np.ndarray | None, b: np.ndarray | None,
                 eps: np.ndarray, outputs: np.ndarray, neighbours: int, tol: float,
                 model_bytes: float = 3e9, lp_seconds: float = np.inf,
                 complement: bool = False, cap: float = CAP) -> None:
        self.n, self.tol, self.eps, self.lp_seconds = n, tol, eps, lp_seconds
        self.complement, self.cap = complement, cap
        self.Kc: np.ndarray | None = None
        self.dense = x is None
        self.K: np.ndarray | None = None
        self.closure: np.ndarray | None = None
        if self.dense:
            self.K = kernel(eps)  # the lift's matrix (and the oracle's when no budget is above cap)
            if np.max(eps) > cap:  # the oracle's: the pairs above cap are not looked at
                self.Kc = np.where(eps <= cap, self.K, 0.0)
            self.lazy = True
            self.x: np.ndarray = _NONE
            self.y: np.ndarray = _NONE
            self.eb: np.ndarray = np.zeros(0)
            self.b: np.ndarray = np.zeros(0)
            self.skip: np.ndarray = np.zeros(0, dtype=bool)
            near = _near_rows(eps, neighbours)  # (n, k): each input's nearest inputs
            a = np.repeat(np.arange(n), near.shape[1])
            c = near.ravel()
            start_x = np.concatenate([a, c])
            start_y = np.concatenate([c, a])
            keep = eps[start_x, start_y] <= cap
            code = np.unique(start_x[keep] * n + start_y[keep])
            self.start_x, self.start_y = code // n, code % n
            rows0 = self.start_x.size + 2 * n
        else:
            assert x is not None and y is not None and b is not None
            self.x, self.y, self.b = x, y, b
            # pairs with budgets above CAP stay out of the LPs (HiGHS cannot handle coefficients
            # like e^400; leaving rows out keeps the bound valid) and each column is then lifted
            # to the least vector above it that satisfies every pair (closure below)
            self.eb = np.exp(np.minimum(b, cap))
            self.skip = b > cap
            if self.skip.any():
                self.closure = np.exp(-shortest_path(csr_matrix((b, (x, y)), shape=(n, n)),
                                                     directed=True))
            self.lazy = x.size > 32 * n
            self.start = (nearest_pairs(eps, neighbours)[x, y] if self.lazy
                          else np.ones(x.size, dtype=bool))
            self.start &= ~self.skip
            rows0 = int(self.start.sum()) + (2 * n if self.lazy else 0)
        # ~1 600 bytes per column and start row of a solved model, rows added later included
        # (measured: 2.5 GB for the 113 models of a 30 x 30 grid under the Euclidean distance)
        self.keep = outputs.size * (n + rows0) * 1600.0 <= model_bytes
        self.models: dict[int, Any] = {}
        self.bases: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # rows of each output's LP in the order they were added: (x, y, exp(b), complementary)
        self.rows: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray, bool]]] = {}
        self.added: dict[int, Any] = {}
        self.cadded: dict[int, Any] = {}  # the complementary rows already in each LP
        # the pair-row duals of each output's last solved LP: any w >= 0 bounds every later
        # pricing problem of that output too (see solve), so a stopped LP keeps a good bound
        self.last_w: dict[int, np.ndarray] = {}
        self.solves = 0
        for z in outputs.tolist():
            self.rows[z] = []
            if self.dense:
                others = np.flatnonzero((np.arange(n) != z) & (eps[z] <= cap))
                xs = np.concatenate([self.start_x, np.full(others.size, z), others])
                ys = np.concatenate([self.start_y, others, np.full(others.size, z)])
                code = np.unique(xs * n + ys)
                self.added[z] = set()
                self.cadded[z] = set()
                self._note(z, code // n, code % n)
            else:
                added = ((self.start | (self.x == z) | (self.y == z)) & ~self.skip if self.lazy
                         else self.start.copy())
                self.added[z] = added
                self.cadded[z] = np.zeros(self.x.size, dtype=bool)
                p = np.flatnonzero(added)
                self._note(z, self.x[p], self.y[p], self.eb[p])
            if self.keep:
                self.models[z] = self._build(z)

    def _note(self, z: int, xs: np.ndarray, ys: np.ndarray, eb: np.ndarray | None = None,
              comp: bool = False) -> None:
        """Record rows ``v[xs] <= eb v[ys]`` (``comp``: ``1 - v[xs] <= eb (1 - v[ys])``) of
        output z's LP (``eb`` from ``eps`` if None, the pairs then noted as added)."""
        if eb is None:
            eb = np.exp(self.eps[xs, ys])
            (self.cadded if comp else self.added)[z].update((xs * self.n + ys).tolist())
        self.rows[z].append((xs, ys, eb, comp))

    def _build(self, z: int) -> Any:
        h = new_highs(threads=1)
        h.addCols(self.n, np.zeros(self.n), np.zeros(self.n), np.ones(self.n), 0, _NONE, _NONE,
                  np.zeros(0))
        for xs, ys, eb, comp in self.rows[z]:
            (add_complement_rows if comp else add_ratio_rows)(h, xs, ys, eb)
        return h

    def _new_complement_rows(self, z: int, v: np.ndarray
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Violated complementary pairs ``1 - v[x] > exp(b) (1 - v[y])`` of output z's column
        (budgets up to ``COMPLEMENT_CAP``) not yet in its LP, or None."""
        if not self.complement:
            return None
        c = 1.0 - v
        if self.dense:
            assert self.K is not None
            xs, ys = worst_violations(c, self.K if self.Kc is None else self.Kc, self.eps,
                                      self.tol, cap=min(COMPLEMENT_CAP, self.cap))
            if xs.size:
                seen = self.cadded[z]
                new = np.array([k not in seen for k in (xs * self.n + ys).tolist()], dtype=bool)
                xs, ys = xs[new], ys[new]
            if xs.size == 0:
                return None
            return xs, ys, np.exp(self.eps[xs, ys])
        viol = c[self.x] - self.eb * c[self.y]
        added = self.cadded[z]
        bad = np.flatnonzero((viol > self.tol) & ~added & (self.b <= min(COMPLEMENT_CAP, self.cap)))
        if bad.size == 0:
            return None
        if bad.size > 4 * self.n:
            bad = bad[np.argpartition(-viol[bad], 4 * self.n)[:4 * self.n]]
        added[bad] = True
        return self.x[bad], self.y[bad], self.eb[bad]

    def feasible(self, v: np.ndarray) -> np.ndarray:
        """The least vector above ``v`` (entries in [0, 1]) that satisfies every pair, capped at 1:
        ``max_x v[x] exp(-D[x, y])`` for D the path metric of the pair budgets."""
        if self.dense:
            assert self.K is not None
            return np.minimum(lift(v, self.K), 1.0)
        if self.closure is not None:
            return np.minimum(np.max(v[:, None] * self.closure, axis=0), 1.0)
        # log v'[y] = max_x (log v[x] - D[x, y]): shortest paths from a source joined to each x
        # at length -log v[x] (>= 0), over the pairs x -> y of length b
        pos = np.flatnonzero(v > 0)
        src = self.n
        g = csr_matrix((np.concatenate([self.b, -np.log(v[pos]) + 1e-300]),
                        (np.concatenate([self.x, np.full(pos.size, src)]),
                         np.concatenate([self.y, pos]))), shape=(self.n + 1, self.n + 1))
        dist = shortest_path(g, method="D", directed=True, indices=src)[:self.n]
        return np.minimum(np.exp(-dist), 1.0)

    def n_rows(self) -> int:
        return int(sum(sum(r[0].size for r in rows) for rows in self.rows.values()))

    def _new_rows(self, z: int, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Violated pairs of output z's column ``v`` not yet in its LP (at most 4N), or None."""
        if self.dense:
            assert self.K is not None
            xs, ys = worst_violations(v, self.K if self.Kc is None else self.Kc, self.eps,
                                      self.tol, cap=self.cap)
            if xs.size:
                seen = self.added[z]
                new = np.array([c not in seen for c in (xs * self.n + ys).tolist()], dtype=bool)
                xs, ys = xs[new], ys[new]
            if xs.size == 0:
                return None
            return xs, ys, np.exp(self.eps[xs, ys])
        viol = v[self.x] - self.eb * v[self.y]
        added = self.added[z]
        bad = np.flatnonzero((viol > self.tol) & ~added & ~self.skip)
        if bad.size == 0:
            return None
        if bad.size > 4 * self.n:
            bad = bad[np.argpartition(-viol[bad], 4 * self.n)[:4 * self.n]]
        added[bad] = True
        return self.x[bad], self.y[bad], self.eb[bad]

    def solve(self, z: int, g: np.ndarray,
              stop_at: float | None = None) -> tuple[np.ndarray | None, float]:
        """A vertex ``v`` of P of least ``<g, v>`` (pair rows within ``tol``) and a proven lower
        bound on that least value (``v`` None if HiGHS did not solve the LP, or if the clock is
        past ``stop_at``; the bound is then that of the last LP's duals, or ``sum(min(g, 0))``)."""
        import highspy

        if stop_at is not None and time.perf_counter() > stop_at:
            return None, self._weak(z, g)

        if self.keep:
            h = self.models[z]
        else:
            h = self._build(z)
            if z in self.bases:
                _set_basis(h, *self.bases[z])
        self.solves += 1
        h.changeColsCost(self.n, np.arange(self.n, dtype=np.int32), g)
        t_start, cuts, iters = time.perf_counter(), 0, 0
        until = t_start + self.lp_seconds if stop_at is None else min(stop_at, t_start + self.lp_seconds)
        timed_out = False
        while True:
            # (HiGHS's time limit counts the model's run time over all its runs)
            h.setOptionValue("time_limit", float(h.getRunTime()) + max(0.01, until - time.perf_counter()))
            h.run()
            iters += 1
            if h.getModelStatus() == highspy.HighsModelStatus.kTimeLimit:
                # stopped: its current duals still give a valid bound (any w >= 0 does) and its
                # current point, lifted, a column of P
                timed_out = True
                log.info("pricing LP of output %d stopped at its time limit (%.0f s)", z,
                         time.perf_counter() - t_start)
                v = np.clip(np.asarray(h.getSolution().col_value), 0.0, 1.0)
                break
            if h.getModelStatus() != highspy.HighsModelStatus.kOptimal and not _retry(h):
                log.warning("pricing LP of output %d: %s", z,
                            h.modelStatusToString(h.getModelStatus()))
                self.bases.pop(z, None)
                return None, self._weak(z, g)
            v = np.clip(np.asarray(h.getSolution().col_value), 0.0, 1.0)
            new = self._new_rows(z, v) if self.lazy else None
            newc = self._new_complement_rows(z, v)
            if new is None and newc is None:
                break
            if new is not None:
                if self.dense:
                    self._note(z, new[0], new[1], None)
                else:
                    self.rows[z].append((*new, False))
                add_ratio_rows(h, *new)
                cuts += new[0].size
            if newc is not None:
                if self.dense:
                    self._note(z, newc[0], newc[1], None, comp=True)
                else:
                    self.rows[z].append((*newc, True))
                add_complement_rows(h, *newc)
                cuts += newc[0].size
        if log.isEnabledFor(5):
            log.log(5, "output %d: %d solves, %d rows added, %.2f s, %d simplex iterations", z,
                    iters, cuts, time.perf_counter() - t_start, h.getInfo().simplex_iteration_count)
        w = np.clip(-np.asarray(h.getSolution().row_dual), 0.0, None)
        if not self.keep:
            self.bases[z] = _get_basis(h)
            del h
        lb = self.bound(z, g, w)
        if z in self.last_w:  # the last LP's duals, at this g: also a valid bound
            lb = max(lb, self.bound(z, g, self.last_w[z]))
        if not timed_out and w.size == sum(r[0].size for r in self.rows[z]):
            self.last_w[z] = w
        if timed_out and not self.dense and self.closure is None:  # (rows may be violated)
            v = self.feasible(v)
        elif self.dense:  # v'[y] = max_x v[x] exp(-eps[x, y]): in P (eps a metric), and >= v
            assert self.K is not None
            v = np.minimum(lift(v, self.K), 1.0)
        elif self.closure is not None:  # the same over the path metric of the pair budgets
            v = np.minimum(np.max(v[:, None] * self.closure, axis=0), 1.0)
        return v, lb


    def _weak(self, z: int, g: np.ndarray) -> float:
        """The bound without an LP solve: from the last duals of output z's LP if any, else
        ``sum(min(g, 0))`` (``0 <= v <= 1``)."""
        lb = float(np.minimum(g, 0.0).sum())
        if z in self.last_w:
            lb = max(lb, self.bound(z, g, self.last_w[z]))
        return lb

    def bound(self, z: int, g: np.ndarray, w: np.ndarray) -> float:
        """A proven lower bound on ``min <g, v>`` over output z's polytope from multipliers
        ``w >= 0`` of the first ``w.size`` rows of its LP (any such ``w``, optimal or not):
        every ``v`` of the polytope has ``A v <= c`` (row by row), so ``<g, v> >= <g + A'w, v>
        - <w, c> >= sum_x min((g + A'w)[x], 0) - <w, c>`` over ``0 <= v <= 1``. ``w`` of the
        wrong size: the bound with ``w = 0``.

        HiGHS's duals carry relative errors of about 1e-8, which a pair row's coefficient
        ``exp(b)`` (up to ``exp(16)``, 9e6) turns into reduced costs of -0.1 or less where the
        LP's own are 0 (measured: -0.46 on an LP whose optimum was -1e-9). So ``w`` is first
        lowered (:func:`_tighten_duals`) where that lifts a negative reduced cost; any ``w >= 0``
        gives a valid bound, and the bound is the better of the two."""
        parts = []
        done = 0
        for xs, ys, eb, comp in self.rows[z]:
            k = xs.size
            if done + k > w.size:
                break
            parts.append((xs, ys, eb, comp, w[done:done + k]))
            done += k
        if done != w.size:
            return float(np.minimum(g, 0.0).sum())
        lb = _dual_bound(g, parts)
        if not any(comp for *_, comp, _ in parts):
            lb = max(lb, _dual_bound(g, _tighten_duals(g, parts)))
        return lb


def _dual_bound(g: np.ndarray,
                parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, bool, np.ndarray]]) -> float:
    """``sum_x min((g + A'w)[x], 0) - <w, c>`` for the rows ``(xs, ys, exp(b), complementary,
    w)`` (:meth:`_Pricer.bound`)."""
    r = g.copy()
    const = 0.0
    for xs, ys, eb, comp, wk in parts:
        if comp:  # -v[x] + eb v[y] <= eb - 1
            np.add.at(r, xs, -wk)
            np.add.at(r, ys, eb * wk)
            const += float(wk @ (eb - 1.0))
        else:  # v[x] - eb v[y] <= 0
            np.add.at(r, xs, wk)
            np.add.at(r, ys, -eb * wk)
    return float(np.minimum(r, 0.0).sum()) - const


def _tighten_duals(g: np.ndarray,
                   parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, bool, np.ndarray]],
                   passes: int = 3) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, bool, np.ndarray]]:
    """Lower the multipliers ``w`` of pair rows ``v[x] <= exp(b) v[y]`` whose ``y`` has a negative
    reduced cost ``r[y] = (g + A'w)[y]``: by the same factor on every row into ``y``, just enough
    to bring ``r[y]`` to 0 (or all of them). That raises ``r[y]`` by up to ``-r[y]`` and lowers
    ``r[x]`` by ``exp(-b)`` as much; a few passes, since the lowered ``r[x]`` may turn negative.
    Returns the same rows with the new ``w`` (still >= 0; the bound is recomputed from them)."""
    if not parts:
        return parts
    xs = np.concatenate([p[0] for p in parts])
    ys = np.concatenate([p[1] for p in parts])
    eb = np.concatenate([p[2] for p in parts])
    w = np.concatenate([p[4] for p in parts])
    n = g.size
    r = g + np.bincount(xs, weights=w, minlength=n) - np.bincount(ys, weights=eb * w, minlength=n)
    for _ in range(passes):
        k = np.flatnonzero((r[ys] < 0) & (w > 0))
        if k.size == 0:
            break
        supply = np.bincount(ys[k], weights=eb[k] * w[k], minlength=n)
        f = np.zeros(n)
        neg = (r < 0) & (supply > 0)
        f[neg] = np.minimum(1.0, -r[neg] / supply[neg])
        d = f[ys[k]] * w[k]
        w[k] -= d
        w[k] = np.maximum(w[k], 0.0)
        r += np.bincount(ys[k], weights=eb[k] * d, minlength=n) - np.bincount(xs[k], weights=d,
                                                                             minlength=n)
    out, at = [], 0
    for px, py, pe, comp, wk in parts:
        out.append((px, py, pe, comp, w[at:at + wk.size]))
        at += wk.size
    return out


def _retry(h: Any) -> bool:
    """Solve an LP whose warm start failed (HiGHS reports such a bounded LP, with pair
    coefficients up to exp(CAP), as unbounded or unknown now and then; the master, now and then,
    as unknown after columns were added): from scratch, then by primal simplex, then by interior
    point with crossover, each option set back to the value it had. True when one of them is
    optimal."""
    import highspy

    for option, value in ((None, None), ("simplex_strategy", 4), ("solver", "ipm")):
        h.clearSolver()
        before = None if option is None else h.getOptionValue(option)[1]
        if option is not None:
            h.setOptionValue(option, value)
        h.run()
        if option is not None:
            h.setOptionValue(option, before)
        if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            return True
    return False


def _run_master(h: Any) -> None:
    """Solve the master LP to optimality, or raise: a master that HiGHS leaves "unknown" has a
    solution whose row sums may be far from 1 (measured on 18 points: 0.76 to 1.03, its value
    below the proven bound), which must not be taken for a channel."""
    import highspy

    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal and not _retry(h):
        raise RuntimeError("the master LP was not solved: "
                           + h.modelStatusToString(h.getModelStatus()))


def _get_basis(h: Any) -> tuple[np.ndarray, np.ndarray]:
    b = h.getBasis()
    return (np.fromiter((int(s) for s in b.col_status), dtype=np.int8),
            np.fromiter((int(s) for s in b.row_status), dtype=np.int8))


def _set_basis(h: Any, cols: np.ndarray, rows: np.ndarray) -> None:
    import highspy

    st = [highspy.HighsBasisStatus(k) for k in range(5)]
    b = highspy.HighsBasis()
    b.col_status = [st[k] for k in cols.tolist()]
    b.row_status = [st[k] for k in rows.tolist()]
    b.valid = True
    h.setBasis(b)


def dense_cap(eps: np.ndarray) -> float:
    """The largest pair budget the pricing LPs take when every pair of ``eps`` is constrained:
    ``min(DENSE_MAX, max(DENSE_CAP, DENSE_STEPS x median(nn), DENSE_SPREAD x max(nn)))``, ``nn``
    the budget of each input to its nearest other input.

    Examples
    --------
    >>> d = np.abs(np.subtract.outer(np.arange(5.0), np.arange(5.0)))
    >>> dense_cap(0.1 * d), dense_cap(0.5 * d), dense_cap(5.0 * d)
    (8.0, 8.0, 16.0)
    >>> far = np.abs(np.subtract.outer([0.0, 1, 2, 3, 12], [0.0, 1, 2, 3, 12]))  # one far point
    >>> dense_cap(0.5 * far), dense_cap(0.2 * far)
    (16.0, 8.0)
    """
    near = _near_rows(eps, 1)[:, 0]
    nn = eps[np.arange(eps.shape[0]), near]
    return float(min(DENSE_MAX, max(DENSE_CAP, DENSE_STEPS * float(np.median(nn)),
                                    DENSE_SPREAD * float(np.max(nn)))))


def _near_rows(eps: np.ndarray, k: int, block: int = 512) -> np.ndarray:
    """(N, k): the k nearest other inputs of each input (row blocks, no N² temporary)."""
    n = eps.shape[0]
    k = min(k, n - 1)
    out = np.empty((n, k), dtype=np.int64)
    for s in range(0, n, block):
        e = np.array(eps[s:s + block], dtype=float)
        e[np.arange(e.shape[0]), np.arange(s, s + e.shape[0])] = np.inf
        out[s:s + block] = np.argpartition(e, k - 1, axis=1)[:, :k]
    return out


def expand(W: np.ndarray, P: np.ndarray, reps: np.ndarray) -> np.ndarray:  # noqa: N803
    """The (N, N) channel of the representative columns ``W`` (N, m) under the group ``P``
    (|G|, N): ``T[p[x], p[reps[k]]] = Wbar[x, k]``, ``Wbar`` the average of ``W[:, k]`` over the
    stabiliser of ``reps[k]``.

    The group average of the master's solution, built so that ``T[p[x], p[z]] == T[x, z]``
    holds *exactly* in floating point: the stabiliser averages are sums of the same sorted
    numbers for every point of an orbit, and every other column is a copy of one of them. So a
    check of one column per orbit of outputs is a check of every column
    (:func:`solvers.channels.separation.check_all_pairs` with a group).
    """
    n, m = W.shape
    G = P.shape[0]  # noqa: N806
    inv = np.empty_like(P)
    inv[np.arange(G)[:, None], P] = np.arange(n)[None, :]
    Wbar = np.empty((n, m))  # noqa: N806
    for k, r in enumerate(reps.tolist()):
        st = np.flatnonzero(P[:, r] == r)  # the stabiliser of r
        # Wbar[y] = mean over s of W[s^-1[y]]: the same multiset of numbers for y and s'[y]
        vals = np.sort(W[inv[st], k], axis=0)
        Wbar[:, k] = vals.sum(axis=0) / st.size
    T = np.zeros((n, n))  # noqa: N806
    done = np.zeros(n, dtype=bool)
    for p in P:  # column p[r] is Wbar[:, k] moved by p, for the first p that reaches it
        z = p[reps]
        new = ~done[z]
        if new.any():
            T[np.ix_(p, z[new])] = Wbar[:, new]
            done[z[new]] = True
    return T


def _start_columns(n: int, x: np.ndarray | None, y: np.ndarray | None, b: np.ndarray | None,
                   eps: np.ndarray, outputs: np.ndarray,
                   block: int = 512) -> list[tuple[int, np.ndarray]]:
    """Vertices of P to start from: the uniform column, the exponential mechanism's column and
    the cone ``exp(-D[:, z])`` (D: shortest paths over the pair budgets; ``eps`` itself when
    every pair is constrained, ``x`` None). Row blocks: no N² temporary."""
    if x is None:
        D = np.asarray(eps[:, outputs], dtype=float)  # noqa: N806  # D[x, k]
    else:
        assert x is not None and y is not None and b is not None
        D = shortest_path(csr_matrix((b, (y, x)), shape=(n, n)), method="D",  # noqa: N806
                          directed=True, indices=outputs).T
    ex = np.empty((n, outputs.size))  # the exponential mechanism (eps/2 in the exponent)
    for s in range(0, n, block):
        half = np.where(np.isfinite(eps[s:s + block]), eps[s:s + block], np.inf) / 2
        w = np.exp(-(half - half.min(axis=1, keepdims=True)))
        ex[s:s + block] = w[:, outputs] / w.sum(axis=1, keepdims=True)
    cols = []
    for k, z in enumerate(outputs.tolist()):
        cols.append((z, np.full(n, 1.0 / n)))
        cols.append((z, ex[:, k].copy()))
        cols.append((z, np.exp(-(D[:, k] - D[:, k].min()))))
    return cols


def solve_by_columns(cost: np.ndarray, eps: np.ndarray, x: np.ndarray | None, y: np.ndarray | None,
                     b: np.ndarray | None,
                     *, group: list[np.ndarray] | None = None, gap: float = 1e-9,
                     time_limit: float | None = None, max_rounds: int = 100_000,
                     alpha: float = 0.5, box: float = 3.0, neighbours: int = 8,
                     tol: float = 1e-10, workers: int = 2, purge_age: int = 10,
                     start_duals: np.ndarray | None = None, stall: int = 25,
                     model_bytes: float = 3e9, row_weight: np.ndarray | None = None,
                     start_columns: Callable[[int], np.ndarray] | None = None,
                     recentre: bool = True, warm_box: float = 0.2,
                     lp_seconds: float = 120.0, complement: bool = False,
                     cap: float | None = None) -> ColumnResult:
    """Solve ``min <cost, T>`` over row-stochastic T with ``T[x, z] <= exp(b) T[y, z]`` on the pairs.

    Parameters
    ----------
    cost : array (N, N)
        ``prior[x] · loss[x, z]``, or ``loss[x, z]`` alone with ``row_weight`` the prior (the
        product is then formed one column at a time: no second N² matrix).
    eps : array (N, N)
        Pair budgets (start columns and the lazy pricing models' first rows).
    x, y, b : arrays or None
        The constrained ordered pairs and their budgets (> 0); None: every pair, with budget
        ``eps`` (a metric, > 0 off the diagonal), found violated by the separation oracle
        (:mod:`solvers.channels.separation`) instead of listed.
    group : list of permutations, optional
        A group (containing the identity) under which ``cost``, ``eps`` and the pair set are
        invariant (:func:`solvers.channels.symmetry.invariant_group`); the caller checks it.
    gap : float
        Stop when ``(master - bound) <= gap · |master|`` (relative).
    time_limit : float, optional
        Seconds; the master's current feasible T and the best bound so far are returned (after
        one round of pricing at least, so that there is a bound).
    max_rounds : int
    alpha : float in [0, 1)
        Wentges smoothing weight on the best multipliers so far.
    box : float
        Start penalty of the master's slack columns (times the largest cost of a row).
    neighbours : int
        Lazy pricing models start with the pairs of each input with this many nearest inputs.
    tol : float
        Pair violation the pricing LPs' cutting planes tolerate.
    workers : int
        Pricing LPs solved in parallel (threads).
    purge_age : int
        Master rounds a column may stay idle before it is dropped from the master.
    start_duals : array (N,), optional
        Multipliers ``u`` to price at first (e.g. interpolated from a coarser grid's solution).
    model_bytes : float
        Memory allowed for keeping every pricing LP between rounds (about 1 600 bytes per
        variable and row each); above it each LP is rebuilt per solve from its rows and last
        basis (slower, but the memory stays that of one LP per worker).
    row_weight : array (N,), optional
        The cost is ``row_weight[x] · cost[x, z]`` (default: ``cost`` itself).
    start_columns : callable, optional
        ``start_columns(z)``: a nonnegative column (N,) for output z to add to the master at the
        start (e.g. a coarser grid's solution, :func:`solvers.channels.warm_start.grid_columns`),
        scaled to a largest entry of 1 and lifted to the least vector above it that satisfies
        every pair; called for one output per orbit.
    complement : bool
        Also give the pricing LPs the complementary rows ``1 - v[x] <= exp(b) (1 - v[y])`` (pairs
        up to ``COMPLEMENT_CAP`` nats), which every column of a private channel satisfies (sum
        the pair rows over the other outputs): a tighter relaxation, so a higher bound at the
        same multipliers, for larger LPs. Off by default (measured on 30 x 30: the first bound
        unchanged, the run about twice as long).
    cap : float, optional
        Largest pair budget (nats) put into the pricing LPs (the rest are met by lifting each
        column; a relaxation). Default: :func:`dense_cap` when every pair is constrained, else
        ``CAP``.
    lp_seconds : float
        Time limit of one pricing LP (with its cutting planes). An LP stopped by it still gives a
        valid bound (from its current duals) and a column (its current point, lifted), so one
        slow LP (HiGHS now and then takes minutes on a pricing LP with coefficients up to
        ``exp(CAP)``) cannot hold up a round.
    recentre : bool
        Centre the box of the master's duals on the multipliers of the best bound so far
        (boxstep) instead of on 0 (or on ``start_duals``). From a cold start ``u = 0`` counts,
        with its bound (the sum of the negative costs) known without pricing, so the box moves
        only to multipliers whose bound beats it.
    warm_box : float
        With ``start_duals``, the box's half-width as a fraction of each start multiplier
        (widened tenfold on the rows whose slack the master still uses when the gap is met).
    stall : int
        Stop (status ``"Stalled"``) when neither the master's value nor the bound has moved for
        this many rounds: near the solvers' tolerances (relative gaps of about 1e-7 at N = 900)
        the proven bound stops improving.
    """
    n = cost.shape[0]
    if x is None:
        if any(np.any(np.delete(eps[k], k) <= 0) for k in range(n)):
            raise ValueError("pairs with budget 0 must be merged before solving (identical rows)")
    elif b is None or np.any(b <= 0):
        raise ValueError("pairs with budget 0 must be merged before solving (identical rows)")
    if not 0 <= alpha < 1:
        raise ValueError(f"alpha = {alpha}: use 0 <= alpha < 1")
    if not gap >= 0:
        raise ValueError(f"gap = {gap}: use a relative gap >= 0")
    t0 = time.perf_counter()
    perms = [np.arange(n)] if not group else [np.asarray(p, dtype=np.int64) for p in group]
    from solvers.channels.symmetry import orbits

    orb = orbits(perms, n)
    m = int(orb.max()) + 1
    size = np.bincount(orb, minlength=m).astype(float)  # orbit sizes
    reps = np.array([int(np.flatnonzero(orb == k)[0]) for k in range(m)])
    P = np.stack(perms)  # noqa: N806  # (|G|, N)
    G = P.shape[0]  # noqa: N806

    def lift(v: np.ndarray) -> np.ndarray:
        """Row sums, per input orbit, of output orbit k's columns (a multiple of v): the group
        average of v at each orbit's representative."""
        return v[P[:, reps]].mean(axis=0)

    if cap is None:
        cap = dense_cap(eps) if x is None else CAP
    pricer = _Pricer(n, x, y, b, eps, reps, neighbours, tol, model_bytes, lp_seconds, complement,
                     cap)
    master = new_highs(threads=1)
    master.setOptionValue("small_matrix_value", _SMALL)
    master.setOptionValue("simplex_strategy", 4)  # primal: adding columns keeps the basis feasible
    master.addRows(m, np.ones(m), np.ones(m), 0, _NONE, _NONE, np.zeros(0))  # row sums per orbit
    master.addRows(m, np.full(m, -np.inf), np.ones(m), 0, _NONE, _NONE, np.zeros(0))  # convexity
    wgt = None if row_weight is None else np.asarray(row_weight, dtype=float)
    # the representatives' cost columns (N x m), formed once: the only part of the cost used
    C = np.empty((n, m))  # noqa: N806
    for k, z in enumerate(reps.tolist()):
        C[:, k] = cost[:, z] if wgt is None else wgt * cost[:, z]
    scale = np.array([max(float(np.max(np.abs(cost[o]))) * (1.0 if wgt is None else float(wgt[o])),
                          1e-300) for o in reps]) * size
    # one penalty per row, from that row's own costs: with a skewed prior (a population) the rows
    # differ by orders of magnitude, and one penalty for all leaves the light rows' multipliers
    # unstabilised (measured: no positive bound in 300 s on a 20 x 20 grid under the US cities'
    # population; with per-row penalties 0.5 % at 300 s)
    pen = box * np.concatenate([scale, scale]) if box > 0 else np.zeros(0)
    ns = pen.size
    # the box of the duals is centred (boxstep, Marsten et al. 1975): the slack columns cost
    # centre + pen (s+) and pen - centre (s-), so the master's row duals stay within pen of the
    # centre, which follows the multipliers of the best bound (from the warm start on)
    centre = np.zeros(m)

    def slack_cost() -> np.ndarray:
        return np.concatenate([centre + pen[:m], pen[m:] - centre])
    slack_idx = np.arange(ns, dtype=np.int32)
    if ns:
        master.addCols(ns, slack_cost(), np.zeros(ns), np.full(ns, np.inf), ns, slack_idx,
                       np.tile(np.arange(m, dtype=np.int32), 2), np.repeat([1.0, -1.0], m))
    col_k: list[int] = []
    col_v: list[np.ndarray] = []
    # the columns kept for building T: single precision above 4 096 inputs (half the memory;
    # the rounding, about 1e-7 of each entry, is repaired and checked like any other error)
    store = np.float32 if n > SINGLE_ABOVE else np.float64
    age: list[int] = []

    def column(k: int, v: np.ndarray) -> tuple[float, np.ndarray]:
        """The master column of output orbit k with vertex v: its cost and its row entries, the
        entries below HiGHS's smallest matrix value set to 0 (as HiGHS would), so that reduced
        costs computed here are the master's own (the row sums of T then exceed 1 by at most
        about that much, and are normalised afterwards)."""
        a = size[k] * lift(v)
        a[a < _SMALL] = 0.0
        return size[k] * float(C[:, k] @ v), a

    def add(k: int, v: np.ndarray) -> None:
        c, a = column(k, v)
        idx = np.flatnonzero(a > 0)
        master.addCols(1, np.array([c]), np.zeros(1), np.full(1, np.inf), idx.size + 1,
                       np.zeros(1, dtype=np.int32), np.append(idx, m + k).astype(np.int32),
                       np.append(a[idx], 1.0))
        col_k.append(k)
        col_v.append(v.astype(store))
        age.append(0)

    k_of = {int(z): k for k, z in enumerate(reps.tolist())}
    start = _start_columns(n, x, y, b, eps, reps)
    for z, v in start[0::3] + start[1::3] + start[2::3]:  # (kept for good: see the purge below)
        add(k_of[z], v)
    del start
    if start_columns is not None:  # e.g. a coarser grid's columns: made feasible by the lift
        for k, z in enumerate(reps.tolist()):
            v = np.clip(np.asarray(start_columns(z), dtype=float), 0.0, None)
            if v.shape == (n,) and v.max() > 0:
                add(k, pricer.feasible(v / v.max()))
    u_start = None
    if start_duals is not None:  # averaged over each orbit: the bound prices one output per orbit
        sd = np.asarray(start_duals, dtype=float)
        if sd.shape != (n,):
            raise ValueError(f"start_duals has shape {sd.shape}, expected ({n},)")
        u_start = (np.bincount(orb, weights=sd, minlength=m) / size)[orb]
        if ns and recentre:  # a box of +-warm_box of each multiplier around the warm start
            centre = u_start[reps] * size
            pen = np.tile(np.maximum(warm_box * np.abs(centre), 1e-6 * scale), 2)
            master.changeColsCost(ns, slack_idx, slack_cost())
    # the stability centre (boxstep's box and Wentges's smoothing): the multipliers of the best
    # bound so far, counting u = 0 from a cold start, whose bound sum_z min_v <cost_z, v> is at
    # least the sum of the negative costs without any pricing (0 for a nonnegative cost). A
    # priced bound below it never becomes the centre: the first bound can be far below 0 (the
    # 808 US cities: -1.2e5, from the first master's multipliers of isolated cities), and a box
    # centred there stays near those multipliers (a bound of -4.4e4 after 420 s; 0.63 % in 120 s
    # from the centre 0)
    best_lb = -np.inf  # the best priced bound
    if u_start is None:
        u_best, centre_lb = np.zeros(n), float(size @ np.minimum(C, 0.0).sum(axis=0))
    else:
        u_best, centre_lb = u_start, -np.inf
    a, rounds, status, t_master, t_price = alpha, 0, "Optimal", 0.0, 0.0
    slack_off = False  # the master was last solved with the slack columns fixed at 0
    best_free, W_best = np.inf, None

    def mix(lam: np.ndarray) -> np.ndarray:
        """(N, m): the column of each output orbit's representative for master weights lam."""
        W = np.zeros((n, m))  # noqa: N806
        for k, v, lm in zip(col_k, col_v, lam, strict=True):
            if lm > 0:
                W[:, k] += lm * v.astype(float)
        return W
    history: list[tuple[float, float, float]] = []
    with ThreadPoolExecutor(max(1, workers)) as ex:
        while True:
            tm = time.perf_counter()
            _run_master(master)
            t_master += time.perf_counter() - tm
            obj = float(master.getInfo().objective_function_value)
            sol = master.getSolution()
            duals = np.asarray(sol.row_dual)
            mu, sigma = duals[:m], duals[m:]
            vals = np.asarray(sol.col_value)
            used = vals[:ns] > 1e-12
            rounds += 1
            # the best channel so far: the master's own solution, or (slack in use) the master
            # solved once more with the slack fixed at 0; a time limit returns the best of them
            if not used.any():
                free, lam_f = obj, vals[ns:]
            else:
                master.changeColsBounds(ns, slack_idx, np.zeros(ns), np.zeros(ns))
                tm = time.perf_counter()
                _run_master(master)
                t_master += time.perf_counter() - tm
                free = float(master.getInfo().objective_function_value)
                lam_f = np.asarray(master.getSolution().col_value)[ns:]
                master.changeColsBounds(ns, slack_idx, np.zeros(ns), np.full(ns, np.inf))
            if free < best_free:
                best_free, W_best = free, mix(lam_f)
            met = obj - best_lb <= gap * max(abs(obj), 1e-300)
            history.append((time.perf_counter() - t0, obj, best_lb))
            if met and not used.any():
                status = "Optimal" if gap <= 1e-9 else "Gap reached"
                break
            if rounds >= max_rounds:
                status = "Round limit reached"
                break
            if len(history) > stall and not used.any():
                t_old, obj_old, lb_old = history[-1 - stall]
                if obj_old - obj <= 1e-12 * abs(obj) and best_lb - lb_old <= 1e-12 * abs(obj):
                    status = "Stalled"  # neither side moved for `stall` rounds: the gap is final
                    break
            if (time_limit is not None and time.perf_counter() - t0 > time_limit
                    and np.isfinite(best_lb)):  # (one round of pricing first: a bound to report)
                status = "Time limit reached"
                break
            if met:  # the bound met a master that still uses slack: is the master without
                # slack (a channel) within the gap already?
                master.changeColsBounds(ns, slack_idx, np.zeros(ns), np.zeros(ns))
                tm = time.perf_counter()
                _run_master(master)
                t_master += time.perf_counter() - tm
                plain = float(master.getInfo().objective_function_value)
                if plain - best_lb <= gap * max(abs(plain), 1e-300):
                    obj, slack_off = plain, True
                    status = "Optimal" if gap <= 1e-9 else "Gap reached"
                    break
                master.changeColsBounds(ns, slack_idx, np.zeros(ns), np.full(ns, np.inf))
                # no: widen the box of the rows that use slack
                rows = used[:m] | used[m:]
                pen[np.concatenate([rows, rows])] *= 10.0
                master.changeColsCost(ns, slack_idx, slack_cost())
                continue
            u = mu[orb] / size[orb]  # the master's multipliers, spread over each orbit
            if u_start is not None and rounds == 1:  # a warm start: its bound first
                u_s = u_start
            elif a > 0:
                u_s = a * u_best + (1 - a) * u
            else:
                u_s = u
            tp = time.perf_counter()
            # past the time limit the outputs not yet priced get the weak bound sum(min(g, 0))
            # (valid for any g), so a round never runs far beyond the limit
            stop_at = None if time_limit is None else t0 + time_limit
            out = list(ex.map(pricer.solve, reps.tolist(), (C[:, k] - u_s for k in range(m)),
                              [stop_at] * m))
            t_price += time.perf_counter() - tp
            lb = float(u_s.sum() + sum(size[k] * out[k][1] for k in range(m)))
            best_lb = max(best_lb, lb)
            if lb > centre_lb:
                centre_lb, u_best = lb, u_s
                if ns and recentre:
                    centre = u_s[reps] * size
                    master.changeColsCost(ns, slack_idx, slack_cost())
            added = 0
            # columns must improve on the master by more than its own dual tolerance, else
            # HiGHS sees nothing to do and the same columns come back every round
            tau = max(1e-12, 0.01 * gap) * max(abs(obj), 1e-300) / m
            for k in range(m):
                vk = out[k][0]
                if vk is None:
                    continue
                v = vk
                ck, ak = column(k, v)
                rc = ck - float(mu @ ak) - sigma[k]
                if rc < -tau:
                    add(k, v)
                    added += 1
            log.debug("round %d, %.1f s: master %.10g, bound %.10g (this round %.10g), added %d, "
                      "columns %d, slack in use on %d rows", rounds, time.perf_counter() - t0,
                      obj, best_lb, lb, added, len(col_k), int(used.sum()))
            # mispricing (nothing added, or the master stuck): price at its own duals next
            stuck = len(history) > 2 and history[-3][1] - obj <= 1e-12 * abs(obj)
            a = alpha if added and not stuck else 0.0
            # idle columns (non-basic for purge_age rounds) leave the master
            cd = np.asarray(sol.col_dual)[ns:ns + len(age) - added]
            basic = vals[ns:ns + len(age) - added] > 0
            for i in range(len(age) - added):
                # (the start columns are never dropped: the exponential mechanism among them keeps
                # the master without slack a reasonable channel whatever the duals)
                age[i] = 0 if basic[i] or cd[i] <= tau or i < 3 * m else age[i] + 1
            drop = [i for i in range(len(age)) if age[i] >= purge_age]
            if len(drop) >= m:
                master.deleteCols(len(drop), (ns + np.asarray(drop)).astype(np.int32))
                keep = np.ones(len(age), dtype=bool)
                keep[drop] = False
                col_k[:] = [c for c, kp in zip(col_k, keep, strict=True) if kp]
                col_v[:] = [c for c, kp in zip(col_v, keep, strict=True) if kp]
                age[:] = [c for c, kp in zip(age, keep, strict=True) if kp]
    if ns and not slack_off and np.any(np.asarray(master.getSolution().col_value)[:ns] > 1e-12):
        # stopped by a limit with slack in use: the master without slack (feasible: start columns)
        master.changeColsBounds(ns, slack_idx, np.zeros(ns), np.zeros(ns))
        _run_master(master)
        obj = float(master.getInfo().objective_function_value)
    W = mix(np.asarray(master.getSolution().col_value)[ns:])  # noqa: N806
    if best_free < obj and W_best is not None:  # an earlier master was the better channel
        obj, W = best_free, W_best  # noqa: N806
    solves, prows = pricer.solves, pricer.n_rows()
    del col_v[:], pricer  # (the column store and the kernel: free them before T's N² floats)
    T = expand(W, P, reps)  # noqa: N806
    return ColumnResult(T=T, objective=obj, lower_bound=float(max(best_lb, centre_lb)), status=status,
                        rounds=rounds, columns=len(col_k), pricing_solves=solves,
                        pricing_rows=prows, pricing_seconds=t_price,
                        master_seconds=t_master, group_order=G, outputs_priced=m,
                        history=tuple(history),
                        duals=np.asarray(u_best, dtype=float))
