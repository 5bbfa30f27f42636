"""Engines for full scans: the same parts on local processes or on a Dask cluster.

Privacy condition the scans check (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` over all
pairs. A full scan is cut into independent parts (:func:`solvers.kernel_scan.parts`, about equal
pair counts); each part returns its maximum, top k or per-row maxima, and
:func:`solvers.kernel_scan.merge` combines them, so every engine returns exactly what the serial
scan returns. Attach an engine with ``ConstraintSet.with_engine(engine)`` or
``solvers.design(..., engine=engine)``; on local processes, scans with a geometric index stay
local (they are near-linear already).

Indexed sets (a geometric index, exact branch and bound of :mod:`solvers.pruned`) run on a
Dask engine too: the index with its tree, F and its node ranges go to every worker once per
design; each scan is then seed tasks (each a range of tree positions whose seed pairs' ratios
give every part the same first threshold) and walk tasks (each a share of the node pairs of one
tree level), merged exactly as the serial scan's result.

Engine choice: Dask distributed. It is already a dependency of the project (extra ``scale``, used
for Dask DataFrames), runs the same code on one machine (``LocalCluster``) and on a cluster, ships
the constraint set's budget oracle (a closure) with cloudpickle, and broadcasts the query matrix
once per scan with ``Client.scatter``. Ray would add a second, heavier runtime for the same task
graph of independent parts.

Examples
--------
>>> import numpy as np
>>> from solvers import ConstraintSet
>>> cs = ConstraintSet.dense(np.abs(np.subtract.outer(np.arange(4.0), np.arange(4.0))))
>>> with LocalProcesses(2) as eng:
...     float(cs.with_engine(eng).scan(np.array([[0.0, 1.0, 3.0, 3.0]]), np.ones(1)).max_ratio)
2.0
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from solvers.kernel_scan import PartResult, merge, parts, scan_part
from solvers.pruned import (
    GeometricIndex,
    LipArrays,
    Ranges,
    Roots,
    TopArrays,
    merge_lipschitz,
    scan_result,
    seed_lipschitz,
    seed_scan,
    split_roots,
    tree_columns,
    walk_lipschitz,
    walk_scan,
)
from solvers.scan_types import ScanResult

if TYPE_CHECKING:
    from solvers.constraints import ConstraintSet

logger = logging.getLogger(__name__)

_JOB: tuple[Any, ...] | None = None  # the scan a forked worker runs parts of


@dataclass
class PrunedContext:
    """What every part of a pruned scan reads (shipped once per design to every worker): the
    index with its k-d tree, F (dense F: the (m, N) transposed view of ``cols``, in tree order,
    read for its shape only), its columns in tree order as rows (:func:`tree_columns`), its
    per-node ranges and the budgets. It travels as four separate pieces
    (:meth:`pieces`), so that a worker never holds more than one piece twice while it receives
    them, and is put together again in each task (views only)."""

    index: GeometricIndex
    F: np.ndarray | sp.csc_array
    cols: np.ndarray | None
    ranges: Ranges
    cs: ConstraintSet

    @classmethod
    def build(cls, index: GeometricIndex, F: np.ndarray | sp.csc_array, cs: ConstraintSet
              ) -> PrunedContext:
        return cls(index, F, tree_columns(F, index.tree.perm), index.tree.f_ranges(F), cs)

    def pieces(self) -> list[Any]:
        return [self.index, self.cols if self.cols is not None else self.F, self.ranges, self.cs]

    @classmethod
    def join(cls, pieces: tuple[Any, ...] | list[Any]) -> PrunedContext:
        index, data, ranges, cs = pieces
        if isinstance(data, np.ndarray):  # dense F travels as its columns
            return cls(index, data.T, data, ranges, cs)
        return cls(index, data, None, ranges, cs)


def _seed_part(pieces: list[Any], span: tuple[int, int], u: np.ndarray, *, k: int, agg: str
               ) -> tuple[TopArrays, int]:
    ctx = PrunedContext.join(pieces)
    return seed_scan(ctx.index, ctx.F, u, ctx.cs.pair_eps, span, k=k, agg=agg, cols=ctx.cols)


def _walk_part(pieces: list[Any], roots: Roots, seed: TopArrays, u: np.ndarray, *, k: int,
               agg: str) -> tuple[TopArrays, int]:
    ctx = PrunedContext.join(pieces)
    top, n, _ = walk_scan(ctx.index, ctx.F, u, ctx.cs.pair_eps, seed, k=k, agg=agg, roots=roots,
                          ranges=ctx.ranges, cols=ctx.cols)
    return top, n


def _seed_lip(pieces: list[Any], span: tuple[int, int], power: int) -> tuple[LipArrays, int]:
    ctx = PrunedContext.join(pieces)
    return seed_lipschitz(ctx.index, ctx.F, ctx.cs.pair_eps, span, power=power, cols=ctx.cols)


def _walk_lip(pieces: list[Any], roots: Roots, seed: LipArrays, power: int
              ) -> tuple[LipArrays, int]:
    ctx = PrunedContext.join(pieces)
    state, n, _ = walk_lipschitz(ctx.index, ctx.F, ctx.cs.pair_eps, seed, power=power,
                                 roots=roots, ranges=ctx.ranges, cols=ctx.cols)
    return state, n


def _run_part(part: tuple[int, int]) -> PartResult:
    assert _JOB is not None
    cs, A, u, k, agg, mode, memory_bytes = _JOB
    return scan_part(cs, A, u, part[0], part[1], k=k, agg=agg, mode=mode,
                     memory_bytes=memory_bytes)


class LocalProcesses:
    """Full scans on ``n_workers`` local processes (fork: the constraint set and F are shared
    copy-on-write, nothing is pickled but the parts' results). A pool lives for one scan.

    Parameters
    ----------
    n_workers : number of processes (1 = serial in this process).
    parts_per_worker : parts per process (smaller parts balance better).
    """

    strategy = "processes"

    def __init__(self, n_workers: int = 2, parts_per_worker: int = 4) -> None:
        self.n_workers = max(1, int(n_workers))
        self.parts_per_worker = max(1, int(parts_per_worker))

    def __enter__(self) -> LocalProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def scan(self, cs: ConstraintSet, A: np.ndarray | sp.csc_array, u: np.ndarray | None, *,
             k: int, agg: str, mode: str, memory_bytes: int) -> PartResult:
        """Run the parts of one scan and merge them (see :mod:`solvers.kernel_scan`)."""
        global _JOB
        ps = parts(cs, self.n_workers * self.parts_per_worker)
        mem = max(memory_bytes // self.n_workers, 2**20)
        _JOB = (cs, A, u, k, agg, mode, mem)
        try:
            if self.n_workers == 1 or len(ps) <= 1:
                results = [_run_part(p) for p in ps]
            else:
                ctx = multiprocessing.get_context("fork")
                with ProcessPoolExecutor(self.n_workers, mp_context=ctx) as ex:
                    results = list(ex.map(_run_part, ps))
        finally:
            _JOB = None
        logger.debug("local processes: %d parts on %d workers", len(ps), self.n_workers)
        return merge(results, k, mode, A.shape[0])


class DaskEngine:
    """Full scans as Dask tasks, one per part, on the cluster of ``client``; pruned scans of
    sets with a geometric index as seed and walk tasks (module docstring).

    The data of a pruned scan (index, F's columns, node ranges, budgets) stays on the workers
    from one scan to the next while the same set and F are scanned (one design); use the engine
    as a context manager, or call :meth:`release`, to drop it.

    :attr:`timings` adds up wall-clock seconds per phase over the engine's life: on the driver
    ``tree`` (k-d tree), ``ranges`` (F's columns and node ranges), ``ship`` (sending them to
    the workers); on the workers, as seen by the
    driver, ``seed`` and ``walk`` (all pruned scans and row Lipschitz passes) and ``full``
    (full scans); :attr:`counts` the number of each.

    Parameters
    ----------
    client : a ``distributed.Client`` (e.g. on a ``LocalCluster`` or a remote scheduler).
    parts_per_worker : parts per worker.

    Examples
    --------
    >>> import distributed  # doctest: +SKIP
    >>> with distributed.Client(n_workers=2) as client, DaskEngine(client) as engine:  # doctest: +SKIP
    ...     result = solvers.design(F, constraints, method="exact", engine=engine)
    """

    strategy = "dask"

    def __init__(self, client: Any, parts_per_worker: int = 4) -> None:
        self.client = client
        self.parts_per_worker = max(1, int(parts_per_worker))
        self._shipped: tuple[tuple[object, ...], Any, list[tuple[int, int]]] | None = None
        self.timings: defaultdict[str, float] = defaultdict(float)
        self.counts: defaultdict[str, int] = defaultdict(int)

    def _timed(self, phase: str, t0: float) -> float:
        t = time.perf_counter()
        self.timings[phase] += t - t0
        self.counts[phase] += 1
        return t

    def _n_workers(self) -> int:
        return max(1, len(self.client.scheduler_info().get("workers", {})))

    def release(self) -> None:
        """Drop the data of the last indexed constraint set from the workers."""
        self._shipped = None

    def __enter__(self) -> DaskEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------ pruned scans (indexed sets)
    def _ship(self, cs: ConstraintSet, A: np.ndarray | sp.csc_array
              ) -> tuple[Any, list[tuple[int, int]]]:
        """The scan context (index with its tree, F, F's node ranges, the budgets) on every
        worker, and the ranges of tree positions of the seed tasks: built and sent once per
        (constraint set budgets, F), reused by every later scan."""
        key = (*cs.budget_source(), A)
        if self._shipped is not None and all(
                x is y for x, y in zip(self._shipped[0], key, strict=True)):
            return self._shipped[1], self._shipped[2]
        self._shipped = None
        index = cs.index
        assert index is not None
        t = time.perf_counter()
        _ = index.tree  # built here once, not on every worker
        t = self._timed("tree", t)
        ctx = PrunedContext.build(index, A, cs.with_engine(None).with_index(None))
        t = self._timed("ranges", t)
        ctx_f = [self.client.scatter([p], broadcast=True, hash=False)[0] for p in ctx.pieces()]
        del ctx
        self._timed("ship", t)
        n = self._n_workers() * self.parts_per_worker
        cuts = np.linspace(0, index.N, n + 1).round().astype(int)
        spans = [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]
        self._shipped = (key, ctx_f, spans)
        logger.debug("dask: scan context of N=%d m=%d shipped, %d seed spans", index.N,
                     A.shape[0], len(spans))
        return ctx_f, spans

    def _roots(self, cs: ConstraintSet) -> list[Roots]:
        assert cs.index is not None
        return split_roots(cs.index, self._n_workers() * self.parts_per_worker)

    def pruned_scan(self, cs: ConstraintSet, A: np.ndarray | sp.csc_array, u: np.ndarray, *,
                    k: int, agg: str) -> ScanResult:
        """:func:`solvers.pruned.pruned_scan` in parts: the seed pairs' ratios (one task per
        span of tree positions) give every part the same first threshold, then each part walks
        its share of the node pairs; the merged top k is the serial scan's (ties aside)."""
        ctx_f, spans = self._ship(cs, A)
        t = time.perf_counter()
        seeds = self.client.gather([self.client.submit(_seed_part, ctx_f, sp_, u, k=k, agg=agg,
                                                       pure=False) for sp_ in spans])
        seed = scan_result([top for top, _ in seeds], 1, max(k, 1), 0).top  # the max(k, 1) best
        n0 = sum(n for _, n in seeds)
        t = self._timed("seed", t)
        walks = self.client.gather([self.client.submit(_walk_part, ctx_f, r, seed, u, k=k,
                                                       agg=agg, pure=False)
                                    for r in self._roots(cs)])
        self._timed("walk", t)
        res = scan_result([top for top, _ in walks], cs.n_constraints, k,
                          n0 + sum(n for _, n in walks))
        return replace(res, strategy="dask")

    def pruned_row_lipschitz(self, cs: ConstraintSet, A: np.ndarray | sp.csc_array, power: int
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """:func:`solvers.pruned.pruned_row_lipschitz` in parts (seeds, then walks)."""
        ctx_f, spans = self._ship(cs, A)
        t = time.perf_counter()
        seeds = self.client.gather([self.client.submit(_seed_lip, ctx_f, sp_, power, pure=False)
                                    for sp_ in spans])
        seed = merge_lipschitz([s for s, _ in seeds])
        t = self._timed("seed", t)
        walks = self.client.gather([self.client.submit(_walk_lip, ctx_f, r, seed, power,
                                                       pure=False) for r in self._roots(cs)])
        self._timed("walk", t)
        c, bi, bj = merge_lipschitz([seed] + [w for w, _ in walks])
        return c, bi, bj, sum(n for _, n in seeds) + sum(n for _, n in walks)

    def scan(self, cs: ConstraintSet, A: np.ndarray | sp.csc_array, u: np.ndarray | None, *,
             k: int, agg: str, mode: str, memory_bytes: int) -> PartResult:
        """Scatter the constraint set and F to every worker, run the parts, merge."""
        t = time.perf_counter()
        n_workers = self._n_workers()
        ps = parts(cs, n_workers * self.parts_per_worker)
        cs_f, A_f = self.client.scatter([cs.with_engine(None), A], broadcast=True, hash=False)
        futs = [self.client.submit(scan_part, cs_f, A_f, u, lo, hi, k=k, agg=agg, mode=mode,
                                   memory_bytes=max(memory_bytes // n_workers, 2**20), pure=False)
                for lo, hi in ps]
        results = self.client.gather(futs)
        self._timed("full", t)
        logger.debug("dask: %d parts on %d workers", len(ps), n_workers)
        return merge(list(results), k, mode, A.shape[0])
