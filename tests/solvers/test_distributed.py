"""Full scans on engines (local processes, a two-worker Dask cluster) equal the serial scan."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from solvers import ConstraintSet, design
from solvers.distributed import DaskEngine, LocalProcesses
from solvers.kernel_scan import parts
from tests.solvers.conftest import hamming_graph


def sets(rng: np.random.Generator) -> list[ConstraintSet]:
    P = rng.random((300, 2))
    eps = cdist(P, P)
    eps[0, 5] = eps[5, 0] = np.inf  # an unconstrained pair
    _, ei, ej, E, _ = hamming_graph(6, np.array([0.5, 1.0, 2.0, 3.0, 0.7, 1.1]))
    return [ConstraintSet.dense(eps), ConstraintSet.oracle(300, lambda rows: eps[rows]),
            ConstraintSet.edges(ei, ej, E, 64)]


def check_engine(engine: object) -> None:
    rng = np.random.default_rng(0)
    for cs in sets(rng):
        F = rng.random((4, cs.N))
        u = np.array([0.5, 2.0, 0.0, 1.0])
        on = cs.with_engine(engine)
        for agg in ("sum", "max"):
            a, b = cs.scan(F, u, k=15, agg=agg), on.scan(F, u, k=15, agg=agg)
            assert a.max_ratio == b.max_ratio and a.worst == b.worst
            np.testing.assert_array_equal(a.top[2], b.top[2])
        for x, y in zip(cs.row_lipschitz(F), on.row_lipschitz(F), strict=True):
            np.testing.assert_array_equal(x, y)
        assert on.stats.snapshot()["full"] >= 3


def test_parts_cover_every_pair_once():
    for N in (1, 2, 3, 10, 1001):
        cs = ConstraintSet.oracle(N, lambda rows, N=N: np.ones((len(rows), N)))
        for n in (1, 2, 7):
            ps = parts(cs, n)
            rows = [r for lo, hi in ps for r in range(lo, hi)]
            assert rows == list(range(max(N - 1, 0)))


def test_local_processes_equal_serial():
    check_engine(LocalProcesses(2, parts_per_worker=3))


def test_dask_two_workers_equal_local_and_design_unchanged():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        engine = DaskEngine(client, parts_per_worker=2)
        check_engine(engine)
        rng = np.random.default_rng(1)
        P = rng.random((200, 2))
        cs = ConstraintSet.oracle(200, lambda rows: cdist(P[rows], P))
        F = rng.random((3, 200))
        a = design(F, cs, method="exact")
        b = design(F, cs, method="exact", engine=engine)
        assert b.objective == pytest.approx(a.objective, rel=1e-9)
        assert b.report["certificate"]["strategy"] == "dask"
        assert b.report["passes"]["full"] == b.report["passes"]["passes"] >= 3


def test_dask_pruned_scans_equal_serial_and_design_unchanged():
    """Indexed sets on Dask: seed and walk parts give the serial branch and bound's results."""
    distributed = pytest.importorskip("distributed")
    from solvers.pruned import GeometricIndex

    rng = np.random.default_rng(2)
    N = 1500
    P = rng.random((N, 2))
    F = rng.random((3, N))

    def pair(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        d = P[i] - P[j]
        return np.sqrt(np.einsum("pd,pd->p", d, d))

    cs = ConstraintSet.oracle(N, lambda rows: cdist(P[rows], P), pair=pair).with_index(
        GeometricIndex(P, 1.0, all_finite=True, min_n=100))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, DaskEngine(client, parts_per_worker=3) as eng:
        on = cs.with_engine(eng)
        u = np.array([0.002, 0.0005, 0.001])
        for k, agg in ((0, "sum"), (12, "sum"), (5, "max"), (5, "sq")):
            a, b = cs.scan(F, u, k=k, agg=agg), on.scan(F, u, k=k, agg=agg)
            assert b.strategy == "dask" and a.strategy == "pruned"
            assert a.max_ratio == b.max_ratio and a.worst == b.worst
            np.testing.assert_array_equal(a.top[2], b.top[2])
        full = ConstraintSet.oracle(N, lambda rows: cdist(P[rows], P)).scan(F, u, k=3)
        assert on.scan(F, u).max_ratio == pytest.approx(full.max_ratio, rel=1e-12)
        for power in (1, 2):
            for x, y in zip(cs.row_lipschitz(F, power=power), on.row_lipschitz(F, power=power),
                            strict=True):
                np.testing.assert_array_equal(x, y)
        a = design(F, cs, method="exact")
        b = design(F, cs, method="exact", engine=eng)
        assert b.objective == pytest.approx(a.objective, rel=1e-9)
        np.testing.assert_allclose(b.beta, a.beta, rtol=1e-7)
        assert b.report["certificate"]["strategy"] == "dask"
        assert b.report["passes"]["pruned"] == b.report["passes"]["passes"] >= 3
        assert on.scan(F, b.u).max_ratio <= 1 + 1e-12
