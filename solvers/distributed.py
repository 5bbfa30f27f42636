"""Engines for full scans: the same parts on local processes or on a Dask cluster.

Privacy condition the scans check (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij`` over all
pairs. A full scan is cut into independent parts (:func:`solvers.kernel_scan.parts`, about equal
pair counts); each part returns its maximum, top k or per-row maxima, and
:func:`solvers.kernel_scan.merge` combines them, so every engine returns exactly what the serial
scan returns. Attach an engine with ``ConstraintSet.with_engine(engine)`` or
``solvers.design(..., engine=engine)``; scans with a geometric index stay local (they are
near-linear already).

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
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from solvers.kernel_scan import PartResult, merge, parts, scan_part

if TYPE_CHECKING:
    from solvers.constraints import ConstraintSet

logger = logging.getLogger(__name__)

_JOB: tuple[Any, ...] | None = None  # the scan a forked worker runs parts of


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
    """Full scans as Dask tasks, one per part, on the cluster of ``client``.

    Parameters
    ----------
    client : a ``distributed.Client`` (e.g. on a ``LocalCluster`` or a remote scheduler).
    parts_per_worker : parts per worker.
    """

    strategy = "dask"

    def __init__(self, client: Any, parts_per_worker: int = 4) -> None:
        self.client = client
        self.parts_per_worker = max(1, int(parts_per_worker))

    def scan(self, cs: ConstraintSet, A: np.ndarray | sp.csc_array, u: np.ndarray | None, *,
             k: int, agg: str, mode: str, memory_bytes: int) -> PartResult:
        """Scatter the constraint set and F to every worker, run the parts, merge."""
        n_workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        ps = parts(cs, n_workers * self.parts_per_worker)
        cs_f, A_f = self.client.scatter([cs, A], broadcast=True, hash=False)
        futs = [self.client.submit(scan_part, cs_f, A_f, u, lo, hi, k=k, agg=agg, mode=mode,
                                   memory_bytes=max(memory_bytes // n_workers, 2**20), pure=False)
                for lo, hi in ps]
        results = self.client.gather(futs)
        logger.debug("dask: %d parts on %d workers", len(ps), n_workers)
        return merge(list(results), k, mode, A.shape[0])
