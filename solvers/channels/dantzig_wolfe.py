"""Dantzig–Wolfe column generation for the optimal d_X-local randomiser LP.

Every column ``T[:, z]`` of a d_X-private matrix lies in the cone
``K = {v >= 0 : v[x] <= exp(eps[x, x']) v[x'] for the constrained pairs}``, and the LP
(:mod:`solvers.channels.optimal`) only couples the columns through the row sums. Writing each
column as a non-negative combination of rays ``v`` of K with ``sum(v) = 1`` gives the master
problem (Dantzig & Wolfe, *Oper. Res.* 8, 1960)::

    minimise    sum_(z, v) lam[z, v] <cost[:, z], v>
    subject to  sum_(z, v) lam[z, v] v[x] = 1    for every input x,   lam >= 0,

with only N rows. A new column for output z is the ray minimising the reduced cost ``<cost[:, z] -
mu, v>`` over ``K ∩ {sum v = 1}`` (``mu``: the master's row duals): a small LP in N variables,
solved exactly with its own cutting planes over the pairs, started from the basis of the cone ray
``exp(-D[:, z])`` (D: shortest paths over the pair budgets; its shortest-path tree is a vertex)
and warm-started between rounds; the pricing LPs of a round run on threads. The optimal randomiser
of Bordenabe et al. (CCS 2014) has few outputs in use, so the master needs few columns.

Convergence is certified by the Lagrangian bound: because every ray sums to 1, the master's
columns carry total weight N, so ``sum(mu) + N · min_z (least reduced cost of z)`` is a lower
bound on the LP optimum for any ``mu``. The master is highly degenerate (every ray has full
support, and the rows ask for exact sums), so its duals are far from unique: a plain master
returned duals hundreds of times the scale of the costs, sat on one vertex for dozens of rounds
while the bound stayed useless, and spent most of the run there. Two stabilisations fix this.
Each row gets two slack columns ``+e_x`` and ``-e_x`` at a penalty (``box`` times the largest
cost), which keeps its dual in ``[-penalty, penalty]`` (the box step of du Merle, Villeneuve,
Desrosiers and Hansen, *Discrete Math.* 194, 1999); and pricing happens at
``alpha · mu_best + (1 - alpha) · mu`` (Wentges' smoothing, *Int. Trans. Oper. Res.* 4, 1997;
``mu_best``: the duals with the best bound so far). The bound holds for any duals, so the box
costs no exactness: when the bound meets a master that still uses slack, the penalty of those
rows grows tenfold and the loop goes on. The loop stops when the master's value, with no slack in
use, and the bound agree to ``gap_tol`` (relative): the result is optimal for the full LP, not a
heuristic. The last pricing of each output certifies a lower bound on its next value
(``_Pricer.solve``), so outputs that cannot improve are not priced again.

The master's columns are dense (a ray has full support), and each HiGHS solve costs time in
proportion to them, so columns that have been neither basic nor priced near zero for
``purge_age`` rounds leave the master; they stay in the pool of known rays, which is searched
every round (one matrix product), so a column that becomes attractive again comes back.
Measured on one idle 2-core machine (plain master -> box -> box and purge): a 20 x 20 grid
1.1-spanner 155 s -> 46 s -> 42 s, a 10 x 10 grid with every pair 31 s -> 8 s -> 6 s, the 100
most populous Californian cities 525 s -> 98 s -> 54-62 s. Columns are rays of
K, so ``T`` satisfies every pair constraint up to the solver's tolerance (the caller repairs and
re-checks it).

numpy/scipy/highspy only (with the shared LP pieces of :mod:`solvers.channels.lp_parts`).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from solvers.channels.lp_parts import add_ratio_rows, nearest_pairs, new_highs

__all__ = ["DWResult", "dantzig_wolfe"]

_NONE = np.zeros(0, dtype=np.int32)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DWResult:
    """The master's solution ``T``, its value, the certified lower bound and solver facts."""

    T: np.ndarray  # noqa: N815
    objective: float
    lower_bound: float
    status: str
    rounds: int
    columns: int  # in the master at the end
    pricing_rounds: int
    pricing_solves: int
    pricing_rows: int
    pricing_seconds: float
    master_seconds: float
    purged: int = 0  # columns moved out of the master for idling


def _highs() -> Any:
    return new_highs(threads=1)  # small models: HiGHS's own threads only cost (we run models in parallel)


class _Pricer:
    """One warm-started HiGHS model per output z: ``min <g, v>`` over ``K ∩ {sum v = 1}``.

    Pair rows start with the pairs of each input with its nearest inputs and the pairs that involve
    z (or all pairs when there are few, e.g. a spanner's edges) and are added while violated.
    """

    def __init__(self, n: int, x: np.ndarray, y: np.ndarray, b: np.ndarray, eps: np.ndarray,
                 neighbours: int, tol: float) -> None:
        self.n, self.x, self.y, self.eb, self.tol = n, x, y, np.exp(b), tol
        self.models: dict[int, Any] = {}
        self.added: dict[int, np.ndarray] = {}
        if x.size <= 32 * n:
            self.start = np.ones(x.size, dtype=bool)
        else:
            self.start = nearest_pairs(eps, neighbours)[x, y]
        self.rows = np.zeros(n, dtype=np.int64)
        self.solves = 0
        # the cone ray centred on z is a vertex of K ∩ {sum v = 1}: its shortest-path tree's pairs
        # are tight, so each model starts from that basis instead of from scratch
        index = np.full((n, n), -1, dtype=np.int64)
        index[x, y] = np.arange(x.size)
        _, pred = shortest_path(csr_matrix((b, (x, y)), shape=(n, n)), directed=True,
                                return_predecessors=True)
        for z in range(n):
            others = np.flatnonzero(np.arange(n) != z)
            self._model(z, index[pred[z, others], others])

    def _model(self, z: int, tree: np.ndarray) -> None:
        import highspy

        n = self.n
        h = _highs()
        h.setOptionValue("simplex_strategy", 4)  # primal: after a cost change the basis stays feasible
        h.addCols(n, np.zeros(n), np.zeros(n), np.full(n, np.inf), 0, _NONE, _NONE, np.zeros(0))
        h.addRows(1, np.ones(1), np.ones(1), n, np.zeros(1, dtype=np.int32),
                  np.arange(n, dtype=np.int32), np.ones(n))
        added = self.start | (self.x == z) | (self.y == z)
        added[tree] = True
        rows = np.flatnonzero(added)
        self.models[z], self.added[z] = h, added
        self._add(z, rows)
        basis = highspy.HighsBasis()
        basis.col_status = [highspy.HighsBasisStatus.kBasic] * n
        status = np.full(rows.size, highspy.HighsBasisStatus.kBasic, dtype=object)
        status[np.searchsorted(rows, tree)] = highspy.HighsBasisStatus.kUpper
        basis.row_status = [highspy.HighsBasisStatus.kLower, *status.tolist()]
        basis.valid = True
        h.setBasis(basis)

    def _add(self, z: int, p: np.ndarray) -> None:
        add_ratio_rows(self.models[z], self.x[p], self.y[p], self.eb[p])
        self.rows[z] += p.size

    def solve(self, z: int, g: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
        """The ray of least reduced cost for output z, its value and the LP's reduced costs.

        For any ray u of K with ``sum(u) = 1`` and any costs h: ``<h, u> >= value + min(rc + h - g)``
        (rc: the reduced costs, >= 0; the pair rows' duals only add), so a later pricing of z can
        be skipped when that bound is not negative.
        """
        h = self.models[z]
        self.solves += 1
        h.changeColsCost(self.n, np.arange(self.n, dtype=np.int32), g)
        added = self.added[z]
        while True:
            h.run()
            v = np.clip(np.asarray(h.getSolution().col_value), 0.0, None)
            viol = v[self.x] - self.eb * v[self.y]
            bad = np.flatnonzero((viol > self.tol) & ~added)
            if bad.size == 0:
                break
            if bad.size > 4 * self.n:
                bad = bad[np.argpartition(-viol[bad], 4 * self.n)[:4 * self.n]]
            added[bad] = True
            self._add(z, bad)
        v = v / v.sum()
        sol = h.getSolution()
        return v, float(sol.row_dual[0]), np.asarray(sol.col_dual)


def _cone_rays(n: int, x: np.ndarray, y: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rays ``exp(-D[:, a])`` of K, one per centre a (D: shortest paths over the pair budgets)."""
    # v[x] / v[y] = exp(D[y, a] - D[x, a]) <= exp(b(x, y)) needs an arc y -> x of length b(x, y)
    g = csr_matrix((b, (y, x)), shape=(n, n))
    D = shortest_path(g, method="D" if n > 200 else "auto", directed=True)  # noqa: N806
    R = np.exp(-(D - D.min(axis=0, keepdims=True)))  # noqa: N806
    return R / R.sum(axis=0, keepdims=True)


def dantzig_wolfe(cost: np.ndarray, eps: np.ndarray, x: np.ndarray, y: np.ndarray, b: np.ndarray, *,
                  neighbours: int = 4, centres: int = 10, alpha: float = 0.8, gap_tol: float = 1e-9,
                  tol: float = 1e-10, time_limit: float | None = None,
                  max_rounds: int = 100_000, workers: int = 2,
                  batch: int | None = None, box: float = 3.0,
                  purge_age: int | None = 20) -> DWResult:
    """Solve ``min <cost, T>`` over row-stochastic T with ``T[x, z] <= exp(b) T[y, z]`` on the pairs.

    Parameters
    ----------
    cost : array (N, N)
        ``prior[x] · loss[x, z]``.
    eps : array (N, N)
        Pair budgets (only used to choose the pricing models' first rows).
    x, y, b : arrays
        The constrained ordered pairs and their budgets (all > 0).
    neighbours : int
        Each pricing model starts with the pairs of every input with this many nearest inputs.
    centres : int
        Start columns for output z: the uniform ray and the cone rays centred on the ``centres``
        inputs nearest z.
    alpha : float in [0, 1)
        Wentges smoothing weight on the best duals.
    gap_tol : float
        Stop when ``master - bound <= gap_tol · max(1, |master|)``.
    tol : float
        Pair violation that the pricing models' cutting planes tolerate.
    time_limit : float, optional
        Seconds; the master's current (feasible, maybe not optimal) solution is returned.
    max_rounds : int
        Round limit.
    workers : int
        Pricing models solved in parallel (threads).
    batch : int, optional
        Outputs priced per round: those whose certified bound is most negative (default: every
        output whose bound is negative). Smaller batches mean more, cheaper rounds.
    box : float
        Start penalty of the master's slack columns, in units of the largest cost (the box its
        duals live in); 0 turns the box off.
    purge_age : int, optional
        Master rounds a column may sit idle (not basic, reduced cost above zero) before it
        leaves the master (it stays in the pool); None keeps every column.
    """
    if np.any(b <= 0):
        raise ValueError("pairs with budget 0 must be merged before solving (identical rows)")
    if not 0 <= alpha < 1:
        raise ValueError(f"alpha = {alpha}: use 0 <= alpha < 1")
    if not box >= 0:
        raise ValueError(f"box = {box}: use box >= 0 (0: no slack columns)")
    if purge_age is not None and purge_age < 1:
        raise ValueError(f"purge_age = {purge_age}: use an integer >= 1, or None")
    n = cost.shape[0]
    batch = n if batch is None else max(1, int(batch))
    t0 = time.perf_counter()
    pricer = _Pricer(n, x, y, b, eps, neighbours, tol)
    cone = _cone_rays(n, x, y, b)
    pool = [np.full((n, 1), 1.0 / n), cone]  # rays of K, as column blocks
    master = _highs()
    master.setOptionValue("simplex_strategy", 4)  # adding columns keeps the basis primal feasible
    master.addRows(n, np.ones(n), np.ones(n), 0, _NONE, _NONE, np.zeros(0))
    cols_z: list[int] = []
    cols_r: list[int] = []
    age: list[int] = []  # master rounds since the column was last basic or priced out at ~0
    in_master: set[tuple[int, int]] = set()
    V = np.hstack(pool)  # noqa: N806
    CV = cost.T @ V  # noqa: N806  # every output's cost of every ray, kept up to date
    bufs = [np.empty((n, 4 * V.shape[1])), np.empty((n, 4 * V.shape[1]))]
    bufs[0][:, :V.shape[1]], bufs[1][:, :V.shape[1]] = V, CV

    def add(zs: np.ndarray, rs: np.ndarray) -> int:
        new = [(int(z), int(r)) for z, r in zip(zs, rs, strict=True) if (int(z), int(r)) not in in_master]
        if not new:
            return 0
        z_, r_ = np.array(new).T
        vs = V[:, r_]
        c = np.einsum("ij,ij->j", cost[:, z_], vs)
        k = len(new)
        master.addCols(k, c, np.zeros(k), np.full(k, np.inf), k * n,
                       np.arange(0, k * n, n, dtype=np.int32),
                       np.tile(np.arange(n, dtype=np.int32), k), vs.T.ravel())
        in_master.update(new)
        cols_z.extend(z_.tolist())
        cols_r.extend(r_.tolist())
        age.extend([0] * k)
        return k

    k = min(centres, n)
    near = np.argsort(eps, axis=0)[:k]  # the k inputs nearest each z (z itself first)
    # elastic rows: slack columns +-e_x at cost `pen` keep the master's duals in [-pen, pen]
    ns = 2 * n if box > 0 else 0
    pen = np.full(ns, box * max(float(np.max(np.abs(cost))), 1e-300))
    slack_idx = np.arange(ns, dtype=np.int32)
    if ns:
        master.addCols(ns, pen, np.zeros(ns), np.full(ns, np.inf), ns, slack_idx,
                       np.tile(np.arange(n, dtype=np.int32), 2), np.repeat([1.0, -1.0], n))
    add(np.arange(n), np.zeros(n, dtype=int))
    add(np.tile(np.arange(n), k), 1 + near.ravel())
    best_lb, mu_best, a, rounds, priced, status = -np.inf, None, alpha, 0, 0, "Optimal"
    purged = 0
    t_master = t_price = 0.0
    last_val, last_mu, last_rc = np.full(n, -np.inf), np.zeros((n, n)), np.zeros((n, n))
    with ThreadPoolExecutor(max(1, workers)) as pool_ex:  # HiGHS releases the GIL while solving
        while True:
            tm = time.perf_counter()
            master.run()
            t_master += time.perf_counter() - tm
            obj = float(master.getInfo().objective_function_value)
            sol = master.getSolution()
            mu, col_val = np.asarray(sol.row_dual), np.asarray(sol.col_value)
            rounds += 1
            used = col_val[:ns] > 0
            met = obj - best_lb <= gap_tol * max(1.0, abs(obj))
            tau = 0.1 * gap_tol * max(1.0, abs(obj)) / n  # below this a column cannot matter
            if met and not used.any():
                break
            if rounds >= max_rounds:
                status = "Round limit reached"
                break
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                status = "Time limit reached"
                break
            if purge_age:
                ages = np.where((col_val[ns:] > 0) | (np.asarray(sol.col_dual)[ns:] <= tau), 0,
                                np.asarray(age) + 1)
                ages[:n] = 0  # the uniform rays stay: without slack they keep the master feasible
                drop = np.flatnonzero(ages >= purge_age)
                age[:] = ages.tolist()
                if drop.size >= n:  # idle columns leave the master (they stay in the pool)
                    master.deleteCols(drop.size, (ns + drop).astype(np.int32))
                    keep = np.ones(len(age), dtype=bool)
                    keep[drop] = False
                    in_master.difference_update((cols_z[i], cols_r[i]) for i in drop.tolist())
                    cols_z[:] = np.asarray(cols_z)[keep].tolist()
                    cols_r[:] = np.asarray(cols_r)[keep].tolist()
                    age[:] = ages[keep].tolist()
                    purged += drop.size
            if met:  # the bound met a relaxed master: widen the box of the rows that use slack
                rows = used[:n] | used[n:]
                pen[np.concatenate([rows, rows])] *= 10.0
                master.changeColsCost(ns, slack_idx, pen)
                log.debug("slack in %d rows at the bound: their box widened", rows.sum())
                continue
            # 1. the pool: every known ray against every output (a matrix product)
            red = CV - (mu @ V)[None, :]
            best_r = np.argmin(red, axis=1)
            zs = np.flatnonzero(red[np.arange(n), best_r] < -tau)
            if zs.size and add(zs, best_r[zs]):
                continue
            # 2. exact pricing at the smoothed duals: new rays and the Lagrangian bound. An output
            # whose last pricing certifies a non-negative value at mu_s (_Pricer.solve) is skipped.
            mu_s = mu if mu_best is None else a * mu_best + (1 - a) * mu
            bound = last_val + np.min(last_rc + last_mu - mu_s[:, None], axis=0)
            zs = np.flatnonzero(bound < 0)
            if zs.size > batch:  # the most promising outputs first; the others keep their bound
                zs = zs[np.argpartition(bound[zs], batch)[:batch]]
            priced += 1
            tp = time.perf_counter()
            out = list(pool_ex.map(pricer.solve, zs, (cost[:, z] - mu_s for z in zs)))
            t_price += time.perf_counter() - tp
            rays = np.column_stack([o[0] for o in out]) if out else np.zeros((n, 0))
            last_val[zs] = [o[1] for o in out]
            if out:
                last_rc[:, zs] = np.column_stack([o[2] for o in out])
            last_mu[:, zs] = mu_s[:, None]
            bound[zs] = last_val[zs]
            lb = float(mu_s.sum() + n * bound.min())
            if lb > best_lb:
                best_lb, mu_best = lb, mu_s
            log.debug("round %d, %.1f s: master %.10g, bound %.10g, priced %d, columns %d (%d purged)",
                      rounds, time.perf_counter() - t0, obj, best_lb, zs.size, len(cols_z), purged)
            r0 = V.shape[1]
            r1 = r0 + rays.shape[1]
            if r1 > bufs[0].shape[1]:  # grow the pool's buffers geometrically (no copy per round)
                bufs = [np.hstack([bf[:, :r0], np.empty((n, r1 + r0))]) for bf in bufs]
            bufs[0][:, r0:r1], bufs[1][:, r0:r1] = rays, cost.T @ rays
            V, CV = bufs[0][:, :r1], bufs[1][:, :r1]  # noqa: N806
            red_new = np.einsum("ij,ij->j", cost[:, zs] - mu[:, None], rays)
            new = np.flatnonzero(red_new < -tau)
            # none: mispricing (price at the master's own duals next); at those duals, the bound
            # then meets the master's value within gap_tol
            a = alpha if add(zs[new], r0 + new) else 0.0
    if ns and np.any(np.asarray(master.getSolution().col_value)[:ns] > 0):
        # stopped by a limit with slack in use: the master without slack (feasible: uniform rays)
        master.changeColsBounds(ns, slack_idx, np.zeros(ns), np.zeros(ns))
        master.run()
        obj = float(master.getInfo().objective_function_value)
    lam = np.asarray(master.getSolution().col_value)[ns:]
    T = np.zeros((n, n))  # noqa: N806
    np.add.at(T.T, np.asarray(cols_z), (V[:, np.asarray(cols_r)] * lam).T)
    return DWResult(T=T, objective=obj, lower_bound=float(best_lb), status=status, rounds=rounds,
                    columns=len(cols_z), pricing_rounds=priced, pricing_solves=pricer.solves,
                    pricing_rows=int(pricer.rows.sum()), pricing_seconds=t_price,
                    master_seconds=t_master, purged=purged)
