"""The optimal d_X-locally-private randomiser: a linear program (Bordenabe et al., CCS 2014).

For N inputs with a budget matrix ``eps[x, x'] = d(x, x')`` (a metric scaled by ε), a prior
``pi`` and a loss ``loss[x, z]`` (e.g. the distance between the true and the reported location),
the best randomiser over the same N outputs solves::

    minimise    sum_x pi[x] sum_z T[x, z] loss[x, z]
    subject to  T[x, z] <= exp(eps[x, x']) T[x', z]     for the constrained pairs (x, x'), all z
                sum_z T[x, z] = 1,  T >= 0.

With every pair constrained the optimum is exact. With a spanner (constraints only on its
edges, each edge's budget divided by the dilation δ, :mod:`solvers.channels.spanner`) any path of
the spanner between x and x' has budget at most ``δ·eps[x, x'] / δ``, so the solution is still
``eps``-private for every pair, with far fewer constraints (Bordenabe et al. §5).

The LP is solved by HiGHS, by default decomposed by output column
(:mod:`solvers.channels.column_lagrangian`; certified by a proven lower bound), or by
Dantzig–Wolfe column generation over the rays of the privacy cone
(:mod:`solvers.channels.dantzig_wolfe`), or with cutting planes (constraints added while
violated; exact), or all at once with
``scipy.optimize.linprog``. Its small feasibility errors are repaired by
mixing in the uniform matrix with the least weight that makes every constraint hold exactly, and
the caller re-checks the result over all triples (:func:`dprivacy.local.optimal_randomiser`
does).

numpy/scipy/highspy only.
Privacy condition: ``T[x, z] <= exp(eps[x, x']) T[x', z]`` for all x, x', z.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from solvers.channels.column_lagrangian import solve_by_columns
from solvers.channels.dantzig_wolfe import dantzig_wolfe
from solvers.channels.lp_parts import add_ratio_rows, nearest_pairs, new_highs
from solvers.channels.spanner import graph_edges

__all__ = ["LPResult", "solve_dx_lp", "constraint_pairs", "HIGHS_MAX_NATS"]

#: The largest pair budget (nats) the methods that put ``exp(budget)`` into HiGHS's matrix take:
#: HiGHS rejects matrix values above 1e15 = exp(34.5).
HIGHS_MAX_NATS = 34.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LPResult:
    """Solution of :func:`solve_dx_lp`: ``T``, its expected loss, a lower bound on the optimum,
    and solver facts.

    ``lower_bound`` bounds the expected loss of every randomiser that satisfies the constraints
    solved for (every pair, or the spanner's edges); ``-inf`` when the solver stopped without one.
    """

    T: np.ndarray  # noqa: N815
    expected_loss: float
    lp_objective: float
    n_constraints: int
    solve_seconds: float
    build_seconds: float
    repair_weight: float
    info: dict[str, Any] = field(default_factory=dict)
    lower_bound: float = -np.inf

    @property
    def gap(self) -> float:
        """Relative gap ``(expected_loss - lower_bound) / expected_loss`` (>= 0 up to rounding)."""
        if not np.isfinite(self.lower_bound):
            return float("inf")
        return float((self.expected_loss - self.lower_bound) / max(abs(self.expected_loss), 1e-300))


def constraint_pairs(eps: np.ndarray, edges: tuple[np.ndarray, np.ndarray] | None = None,
                     dilation: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ordered pairs (x, x') to constrain and their budgets.

    All ordered pairs with a finite budget (``edges=None``), or both directions of each spanner
    edge with budget ``eps / dilation``. Pairs at budget 0 are kept (they force equal rows).
    """
    n = eps.shape[0]
    if edges is None:
        x, y = np.nonzero(~np.eye(n, dtype=bool) & np.isfinite(eps))
        return x, y, eps[x, y]
    i, j = (np.asarray(a, dtype=np.int64) for a in edges)
    x = np.concatenate([i, j])
    y = np.concatenate([j, i])
    return x, y, eps[x, y] / float(dilation)


def _constraints(n: int, x: np.ndarray, y: np.ndarray, b: np.ndarray) -> sp.csr_matrix:
    """Rows ``T[x, z] - exp(b) T[y, z] <= 0`` for every pair and every z (variables x*n + z)."""
    p = x.size
    z = np.tile(np.arange(n), p)
    rows = np.arange(p * n)
    xs, ys = np.repeat(x, n), np.repeat(y, n)
    coef = -np.exp(np.repeat(b, n))
    data = np.concatenate([np.ones(p * n), coef])
    r = np.concatenate([rows, rows])
    c = np.concatenate([xs * n + z, ys * n + z])
    return sp.csr_matrix((data, (r, c)), shape=(p * n, n * n))


def _repair(T: np.ndarray, x: np.ndarray, y: np.ndarray, b: np.ndarray,  # noqa: N803
            group: list[np.ndarray] | None = None) -> tuple[np.ndarray, float]:
    """Make ``T`` a channel in which every constrained pair holds exactly, at the least loss
    (:func:`_mix_uniform`). With ``group``, an exactly symmetric T stays so."""
    T = np.clip(T, 0.0, None, out=T)  # noqa: N806  # in place: T is the solver's own array
    pos = b[b > 0]
    if pos.size != b.size:  # zero budgets need equal rows: average them instead of mixing
        raise ValueError("pairs with budget 0 must be merged before solving (identical rows)")
    step = max(1, min(4096, 2 ** 22 // T.shape[0]))  # (pairs per block: at most ~4M floats)

    def violation(T: np.ndarray) -> float:  # noqa: N803
        viol = 0.0
        for s in range(0, x.size, step):
            xs, ys, bs = x[s:s + step], y[s:s + step], b[s:s + step]
            viol = max(viol, float(np.max(T[xs] - np.exp(bs)[:, None] * T[ys])))
        return viol

    return _mix_uniform(T, group, violation, float(pos.min()) if pos.size else np.inf)


def _mix_uniform(T: np.ndarray, group: list[np.ndarray] | None,  # noqa: N803
                 violation: Callable[[np.ndarray], float], low: float,
                 eps: np.ndarray | None = None, loss: np.ndarray | None = None,
                 prior: np.ndarray | None = None, block: int = 512) -> tuple[np.ndarray, float]:
    """Rows summing to 1 and every pair exact, by a scale and row-wise private parts.

    ``T`` (nonnegative, rows summing to about 1, its pairs held up to rounding) is divided by
    its largest row sum (a common factor keeps every ratio), so the row sums are ``s[x] <= 1``,
    ``d = 1 - min s``. Each row's missing mass ``r[x] = mu s[x] + 1 - s[x]`` (``mu`` of the row
    taken away) comes from a filler ``F``: ``T_in = (1 - mu) T + diag(r) F`` has rows summing to
    1. With the uniform filler, ``r[x] <= mu + d`` and ``r[y] >= mu min s`` keep every pair once
    ``mu (exp(low) min s - 1) >= d`` (``low``: the least budget); with ``eps`` the filler is the
    exponential mechanism at a quarter of the budgets, ``F[x, z] <= exp(b / 2) F[y, z]``, which
    needs ``exp(low / 2)`` in place of ``exp(low)`` and can cost far less than the uniform rows
    (squared loss over the 808 US cities: a few km² against about 2.5e6); it is used when the
    ``loss`` (and ``prior``) given say it costs less. Then the pairs that
    ``T`` itself breaks by ``viol`` (rounding) are repaired by the uniform matrix:
    ``T' = (1 - nu) T_in + nu / N`` with ``(1 - nu) viol <= nu (exp(low) - 1) / N``.

    Dividing each row by its own sum instead turns a row-sum error ``d`` (HiGHS's master leaves
    a few 1e-9) into pair violations of about ``d`` times the entries, which the uniform matrix
    repairs only with a weight up to ``N`` times larger (measured on the 808 US cities: 5.0e-5,
    1.4 % added to the expected loss). With ``group``, each row's sum (and the filler's
    normaliser) is taken from the first row of its orbit, so an exactly symmetric T stays so.
    Returns ``(T', mu + nu)``.
    """
    n = T.shape[0]
    rs = T.sum(axis=1)
    first = np.arange(n)
    if group and len(group) > 1:
        from solvers.channels.symmetry import orbits

        orb = orbits(group, n)
        first = np.unique(orb, return_index=True)[1][orb]
        rs = rs[first]
    T /= rs.max()
    s = rs / rs.max()
    viol, d = max(violation(T), 0.0), float(1.0 - s.min())
    if viol <= 0 and d <= 0:
        return T, 0.0
    if eps is not None and (loss is None or float(np.max(eps)) / 4 > 700):  # (underflow)
        eps = None
    w = np.full(n, 1.0 / n) if prior is None else np.asarray(prior, dtype=float)
    z = np.empty(n)
    if eps is not None:  # the filler's normalisers, and whether it costs less than uniform rows
        assert loss is not None
        cost_f, cost_u = np.empty(n), np.empty(n)
        for b0 in range(0, n, block):
            f = np.exp(-np.asarray(eps[b0:b0 + block], dtype=float) / 4)
            lb = np.asarray(loss[b0:b0 + block], dtype=float)
            z[b0:b0 + block] = f.sum(axis=1)
            cost_f[b0:b0 + block] = np.einsum("xz,xz->x", f, lb) / z[b0:b0 + block]
            cost_u[b0:b0 + block] = lb.mean(axis=1)
        z = z[first]
        half = np.exp(low / 2) * float(s.min()) - 1.0
        full = np.exp(low) * float(s.min()) - 1.0
        if half <= 0 or (w @ cost_f) / half >= (w @ cost_u) / max(full, 1e-300):
            eps = None
    gain = np.exp(low if eps is None else low / 2) * float(s.min()) - 1.0
    mu = (0.0 if d <= 0 else min(1.0, 1.01 * d / gain) if gain > 0 else 1.0)
    r = mu * s + (1.0 - s)  # (1 - (1 - mu) s, precise when mu is tiny: its ratios keep pairs)
    nu = (0.0 if viol <= 0 else
          min(1.0, 1.01 * n * viol / (n * viol + np.exp(low) - 1.0)) if low > 0 else 1.0)
    T *= (1 - mu) * (1 - nu)
    if eps is None:
        T += ((1 - nu) * r / n)[:, None]
    else:
        for b0 in range(0, n, block):
            f = np.exp(-np.asarray(eps[b0:b0 + block], dtype=float) / 4)
            f *= ((1 - nu) * r[b0:b0 + block] / z[b0:b0 + block])[:, None]
            T[b0:b0 + block] += f
    if nu > 0:
        T += nu / n
    return T, float(mu + nu - mu * nu)


def _repair_dense(T: np.ndarray, eps: np.ndarray,  # noqa: N803
                  group: list[np.ndarray] | None = None, loss: np.ndarray | None = None,
                  prior: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """:func:`_repair` for every pair of ``eps`` (one input at a time: no pair list, N³ steps).

    With ``group`` (permutations under which ``eps`` is exactly unchanged) and an exactly
    symmetric ``T`` (checked entry by entry), the violation is measured on one column per orbit
    of outputs (the others hold the same numbers under the same budgets), about ``|G|`` times
    fewer steps. The scale and the row-wise parts (:func:`_mix_uniform`; with ``loss`` and
    ``prior``, the exponential-mechanism filler where it costs less) keep the symmetry.
    """
    from solvers.channels.symmetry import invariant_group, orbits

    n = T.shape[0]
    T = np.clip(T, 0.0, None, out=T)  # noqa: N806  # in place: T is the solver's own array
    cols = np.arange(n)
    if group and len(group) > 1 and len(invariant_group(group, [T])) == len(group):
        cols = np.unique(orbits(group, n), return_index=True)[1]
    low = np.inf
    for x in range(n):
        low = min(low, float(np.min(eps[x][np.arange(n) != x])))
    if not low > 0:
        raise ValueError("pairs with budget 0 must be merged before solving (identical rows)")

    def violation(T: np.ndarray) -> float:  # noqa: N803
        Tc = T if cols.size == n else T[:, cols]  # noqa: N806
        viol = 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            for x in range(n):  # (the pair (x, x) gives 0: it never raises viol above 0)
                m = Tc[x][None, :] - np.exp(eps[x])[:, None] * Tc
                viol = max(viol, float(np.nanmax(m)))
        return viol

    return _mix_uniform(T, group, violation, low, eps, loss, prior)


def _expected_loss(pi: np.ndarray, T: np.ndarray, L: np.ndarray, block: int = 256) -> float:  # noqa: N803
    """``sum_x pi[x] sum_z T[x, z] L[x, z]`` in row blocks (no N² temporary)."""
    return float(sum(pi[s:s + block] @ np.einsum("xz,xz->x", T[s:s + block], L[s:s + block])
                     for s in range(0, T.shape[0], block)))


def _add_pair_rows(h: Any, n: int, xs: np.ndarray, ys: np.ndarray, bs: np.ndarray, zs: np.ndarray) -> None:
    """Rows ``T[x, z] - exp(b) T[y, z] <= 0`` (variable ``x * n + z``)."""
    add_ratio_rows(h, xs * n + zs, ys * n + zs, np.exp(bs))


def _violations(T: np.ndarray, x: np.ndarray, y: np.ndarray, b: np.ndarray, tol: float,  # noqa: N803
                cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(pair index, z) of the constraints violated by more than ``tol`` (the ``cap`` worst)."""
    ps, zs, vs = [], [], []
    for s in range(0, x.size, 2048):
        v = T[x[s:s + 2048]] - np.exp(b[s:s + 2048])[:, None] * T[y[s:s + 2048]]
        p, z = np.nonzero(v > tol)
        ps.append(p + s)
        zs.append(z)
        vs.append(v[p, z])
    p, z, v = np.concatenate(ps), np.concatenate(zs), np.concatenate(vs)
    if p.size > cap:
        keep = np.argpartition(-v, cap)[:cap]
        p, z = p[keep], z[keep]
    return p, z


def _cutting_planes(c: np.ndarray, n: int, x: np.ndarray, y: np.ndarray, b: np.ndarray,
                    eps: np.ndarray, *, neighbours: int, tol: float, time_limit: float | None,
                    max_rounds: int, lp_solver: str = "simplex") -> tuple[np.ndarray, float, int, int, str]:
    """Solve the LP with the pair constraints added lazily (exact: stops when none is violated)."""
    h = new_highs()
    if lp_solver == "ipm":  # interior point without crossover: faster on the big rounds
        h.setOptionValue("solver", "ipm")
        h.setOptionValue("run_crossover", "off")
    nv = n * n
    h.addCols(nv, c, np.zeros(nv), np.full(nv, np.inf), 0, np.zeros(0, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    h.addRows(n, np.ones(n), np.ones(n), nv, (np.arange(n) * n).astype(np.int32),
              np.arange(nv, dtype=np.int32), np.ones(nv))
    # start with every z for the pairs of each input with its nearest neighbours
    start = np.flatnonzero(nearest_pairs(eps, neighbours)[x, y])
    _add_pair_rows(h, n, np.repeat(x[start], n), np.repeat(y[start], n), np.repeat(b[start], n),
                   np.tile(np.arange(n), start.size))
    rows, rounds, t0 = start.size * n, 0, time.perf_counter()
    while True:
        if time_limit is not None:
            h.setOptionValue("time_limit", max(1.0, time_limit - (time.perf_counter() - t0)))
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        T = np.asarray(h.getSolution().col_value).reshape(n, n)  # noqa: N806
        rounds += 1
        p, z = _violations(T, x, y, b, tol, cap=max(20 * nv, 10_000))
        if p.size == 0 or rounds >= max_rounds:
            break
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        _add_pair_rows(h, n, x[p], y[p], b[p], z)
        rows += p.size
    return T, float(h.getInfo().objective_function_value), rows, rounds, status


def solve_dx_lp(eps: Any, loss: Any, prior: Any = None, *,
                edges: tuple[np.ndarray, np.ndarray] | None = None, dilation: float = 1.0,
                method: str = "lagrangian", neighbours: int = 8, max_rounds: int | None = None,
                time_limit: float | None = None, lp_solver: str = "simplex",
                pricing_batch: int | None = None, gap: float | None = None,
                symmetries: list[np.ndarray] | None = None, workers: int = 2,
                start_duals: np.ndarray | None = None,
                start_columns: Callable[[int], np.ndarray] | None = None) -> LPResult:
    """Solve the optimal d_X-local randomiser LP.

    Parameters
    ----------
    eps : array (N, N)
        Privacy budget of each pair (``ε·d``); ``inf`` = unconstrained.
    loss : array (N, N)
        ``loss[x, z]``: the cost of reporting z when the truth is x.
    prior : array (N,), optional
        Distribution of the true input (default uniform).
    edges : (i, j) arrays, optional
        Spanner edges: constrain only these pairs with budget ``eps / dilation``.
    dilation : float
        The spanner's dilation δ (>= 1).
    method : "lagrangian", "dantzig_wolfe", "cutting_planes" or "direct"
        ``"lagrangian"`` (default) decomposes the LP by output column
        (:func:`solvers.channels.column_lagrangian.solve_by_columns`): one small LP per output
        (per orbit of outputs under ``symmetries``), coordinated by a master over the row sums,
        stopped when the master's value is within ``gap`` of a lower bound computed from the
        pricing LPs' duals (valid whatever the solver's tolerances). Without ``edges``, when the
        budget matrix is the path metric of a sparse graph
        (:func:`solvers.channels.spanner.graph_edges`, e.g. a grid under the Manhattan distance)
        only that graph's edges are constrained, each with its full budget: exact, not a spanner.
        ``"dantzig_wolfe"`` generates the columns of T as rays of the privacy cone
        (:func:`solvers.channels.dantzig_wolfe.dantzig_wolfe`): a master LP with N rows plus one
        small pricing LP per output, stopped when the master's value meets a Lagrangian lower
        bound (relative gap 1e-9), so the result is optimal for the full LP. ``"cutting_planes"``
        solves the LP in all N² variables from the pairs of each input with its ``neighbours``
        nearest inputs, adding violated constraints until none is violated (HiGHS, warm-started;
        also optimal). ``"direct"`` passes every constraint at once to
        ``scipy.optimize.linprog`` (small N; an independent check). The last three put
        ``exp(budget)`` into HiGHS's matrix, so they refuse budgets above ``HIGHS_MAX_NATS``
        (HiGHS rejects coefficients above 1e15); ``"lagrangian"`` keeps such pairs out of its
        LPs and meets them by lifting its columns, so it takes any budget.
    neighbours : int
        Start set of the cutting planes, and of the pricing LPs of ``"lagrangian"`` when every
        pair is constrained (the pairs of each input with this many nearest inputs).
    max_rounds : int, optional
        Round limit (default 200 cutting-plane rounds, 100 000 Dantzig–Wolfe rounds); the result
        is then private but maybe not optimal, like with ``time_limit``.
    time_limit : float, optional
        Time limit in seconds (the result is then feasible after repair but maybe not optimal).
    lp_solver : "simplex" or "ipm"
        With ``"cutting_planes"``, HiGHS's algorithm for each round: dual simplex (default, warm-started) or
        interior point without crossover (measured ~1.7x faster at N = 100 on an idle 2-core
        machine, 60 s vs 105 s, same optimum to ~1e-8 relative; its small infeasibilities are
        repaired like any other, so the result is private either way).

    pricing_batch : int, optional
        With ``"dantzig_wolfe"``, the outputs priced per round (default all whose certified
        bound is negative; see :func:`solvers.channels.dantzig_wolfe.dantzig_wolfe`).
    gap : float, optional
        With ``"lagrangian"``, stop at this relative gap between the expected loss and the
        proven lower bound (default 1e-6).
    symmetries : list of permutations, optional
        With ``"lagrangian"``, candidate symmetries of the inputs
        (:func:`solvers.channels.symmetry.square_symmetries`); those that leave ``eps`` and
        ``prior · loss`` exactly unchanged are used.
    workers : int
        With ``"lagrangian"``, pricing LPs solved in parallel.
    start_duals : array (N,), optional
        With ``"lagrangian"``, row multipliers to start from (a warm start; averaged over each
        orbit of the symmetries used), e.g. a smaller grid's
        (:func:`solvers.channels.warm_start.grid_duals`).
    start_columns : callable, optional
        With ``"lagrangian"``, ``start_columns(z)``: a column for output z to start the master
        with (made feasible by lifting), e.g. a smaller grid's channel moved onto this one
        (:func:`solvers.channels.warm_start.grid_columns`).

    Returns
    -------
    LPResult

    Examples
    --------
    >>> d = np.abs(np.subtract.outer(np.arange(3.0), np.arange(3.0)))
    >>> r = solve_dx_lp(1.0 * d, d)
    >>> bool(np.allclose(r.T.sum(axis=1), 1) and r.expected_loss < d.mean())
    True
    """
    e = np.asarray(eps, dtype=float)
    L = np.asarray(loss, dtype=float)  # noqa: N806
    n = e.shape[0]
    if e.shape != (n, n) or L.shape != (n, n):
        raise ValueError(f"eps and loss must be square of the same size, got {e.shape} and {L.shape}")
    pi = np.full(n, 1.0 / n) if prior is None else np.asarray(prior, dtype=float)
    if pi.shape != (n,) or np.any(pi < 0) or not np.isclose(pi.sum(), 1.0):
        raise ValueError("prior must be a probability vector of length N")
    if dilation < 1:
        raise ValueError(f"dilation = {dilation}: a spanner's dilation is >= 1")
    t0 = time.perf_counter()
    graph = None
    dense = False  # every pair, found by the separation oracle instead of listed
    if method == "lagrangian" and edges is None and n > 2:
        graph = graph_edges(e)  # exact: the metric is the path metric of these edges
        if graph is not None:
            edges, dilation = graph, 1.0
        else:
            dense = bool(np.all(np.isfinite(e)))
    if dense:  # (no pair list: the column solver finds the violated pairs)
        x = y = np.zeros(0, dtype=np.int64)
        b = np.zeros(0)
        n_pairs = n * (n - 1)
    else:
        x, y, b = constraint_pairs(e, edges, dilation)
        n_pairs = int(x.size)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()
    if method not in ("lagrangian", "dantzig_wolfe", "cutting_planes", "direct"):
        raise ValueError(f"method = {method!r}: use 'lagrangian', 'dantzig_wolfe', "
                         "'cutting_planes' or 'direct'")
    if lp_solver not in ("simplex", "ipm"):
        raise ValueError(f"lp_solver = {lp_solver!r}: use 'simplex' or 'ipm'")
    if gap is not None and not (0 <= gap < 1):
        raise ValueError(f"gap = {gap}: give a relative gap in [0, 1)")
    if method != "lagrangian" and b.size and float(b.max()) > HIGHS_MAX_NATS:
        raise ValueError(f"method = {method!r} cannot take pair budgets above {HIGHS_MAX_NATS} "
                         f"nats (the largest is {float(b.max()):.4g}): HiGHS rejects the "
                         "coefficient exp(budget); use method='lagrangian'")
    lower = -np.inf
    group = None
    # the cost pi[x] L[x, z]: formed whole only by the methods for small N (the column
    # decomposition forms the columns it prices, so that only eps, L and T are N x N)
    c = None if method == "lagrangian" else (pi[:, None] * L).ravel()
    if method == "lagrangian":
        from solvers.channels.symmetry import invariant_group

        # symmetries of eps, L and the prior are symmetries of the cost pi[x] L[x, z]
        group = invariant_group(list(symmetries), [e, L], [pi]) if symmetries else None
        if group is not None and edges is not None and not dense:  # pair set invariant too
            pairs = np.zeros((n, n), dtype=bool)
            pairs[x, y] = True
            group = invariant_group(group, [pairs])
        listed = (None, None, None) if dense else (x, y, b)
        cl = solve_by_columns(L, e, *listed, row_weight=pi, group=group,
                              gap=1e-6 if gap is None else gap,
                              time_limit=time_limit,
                              max_rounds=100_000 if max_rounds is None else max_rounds,
                              workers=workers, start_duals=start_duals, neighbours=neighbours,
                              start_columns=start_columns)
        Tx, fun, rows, lower = cl.T, cl.objective, cl.pricing_rows, cl.lower_bound  # noqa: N806
        info: dict[str, Any] = {"status": cl.status, "rounds": cl.rounds, "pairs": n_pairs,
                "lower_bound": cl.lower_bound, "columns": cl.columns,
                "group_order": cl.group_order, "outputs_priced": cl.outputs_priced,
                "pricing_solves": cl.pricing_solves, "pricing_seconds": cl.pricing_seconds,
                "master_seconds": cl.master_seconds,
                "graph_edges": graph is not None,
                "history": cl.history, "duals": cl.duals}
    elif method == "dantzig_wolfe":
        assert c is not None
        dw = dantzig_wolfe(c.reshape(n, n), e, x, y, b, time_limit=time_limit,
                           max_rounds=100_000 if max_rounds is None else max_rounds,
                           batch=pricing_batch)
        Tx, fun, rows = dw.T, dw.objective, dw.pricing_rows  # noqa: N806
        info = {"status": dw.status, "rounds": dw.rounds, "pairs": int(x.size),
                "lower_bound": dw.lower_bound, "columns": dw.columns,
                "pricing_rounds": dw.pricing_rounds, "pricing_solves": dw.pricing_solves,
                "pricing_seconds": dw.pricing_seconds, "master_seconds": dw.master_seconds,
                "purged": dw.purged}
        lower = dw.lower_bound
    elif method == "cutting_planes":
        assert c is not None
        Tx, fun, rows, rounds, status = _cutting_planes(  # noqa: N806
            c, n, x, y, b, e, neighbours=neighbours, tol=1e-10, time_limit=time_limit,
            max_rounds=200 if max_rounds is None else max_rounds, lp_solver=lp_solver)
        info = {"status": status, "rounds": rounds, "pairs": int(x.size)}
        if "ptimal" in status:  # the last round's LP is a relaxation: its optimum is a bound
            lower = fun
    else:  # "direct" (the method was checked above)
        assert c is not None
        A_ub = _constraints(n, x, y, b)  # noqa: N806
        A_eq = sp.kron(sp.identity(n, format="csr"), np.ones((1, n)), format="csr")  # noqa: N806
        opts: dict[str, Any] = {"primal_feasibility_tolerance": 1e-10}
        if time_limit is not None:
            opts["time_limit"] = float(time_limit)
        res = linprog(c, A_ub=A_ub, b_ub=np.zeros(A_ub.shape[0]), A_eq=A_eq, b_eq=np.ones(n),
                      bounds=(0, None), method="highs", options=opts)  # type: ignore[call-overload]  # scipy-stubs: sparse A_ub
        if res.x is None:
            raise RuntimeError(f"HiGHS found no solution: {res.message}")
        Tx, fun, rows = res.x.reshape(n, n), float(res.fun), int(A_ub.shape[0])  # noqa: N806
        info = {"status": str(res.message), "rounds": 1, "pairs": int(x.size)}
        if res.status == 0:
            lower = fun
    solve = time.perf_counter() - t1
    if "ptimal" not in str(info["status"]) and info["status"] not in ("Gap reached", "Stalled"):
        log.warning("the LP stopped before optimality (%s): the repaired T is private but its loss "
                    "may be far from optimal", info["status"])
    Tx = np.array(Tx, dtype=float, copy=not Tx.flags.owndata or not Tx.flags.writeable)  # noqa: N806
    T, lam = (_repair_dense(Tx, e, group, L, pi) if dense  # noqa: N806
              else _repair(Tx, x, y, b, group))
    T.setflags(write=False)
    return LPResult(T=T, expected_loss=_expected_loss(pi, T, L), lp_objective=fun,
                    n_constraints=rows, solve_seconds=solve, build_seconds=build, repair_weight=lam,
                    info=info, lower_bound=float(lower))
