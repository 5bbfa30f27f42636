"""The independent quadtree pair bound equals brute force and catches violations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from solvers.pair_bound import euclidean_pair_bound


def brute(P: np.ndarray, F: np.ndarray, u: np.ndarray, scale: float) -> float:
    loss = sum(u[k] * pdist(F[k][:, None], "cityblock") for k in range(F.shape[0]))
    return float(np.max(loss / (scale * pdist(P))))


@pytest.mark.parametrize(("N", "D", "chunk"), [(400, 2, 32), (600, 3, 50), (200, 1, 16),
                                               (900, 2, 10_000)])
def test_bound_equals_brute_force_and_detects_violations(N: int, D: int, chunk: int) -> None:
    rng = np.random.default_rng([N, D])
    P = rng.random((N, D))
    P[1] = P[0] + 1e-9  # a very close pair
    F = rng.random((3, N))
    u = rng.random(3)
    true = brute(P, F, u, 2.0)
    ok = euclidean_pair_bound(P, F, u / true, 2.0, chunk_points=chunk)
    assert ok.holds and ok.max_exact == pytest.approx(1.0, rel=1e-12)
    assert ok.bound <= ok.limit and ok.pairs_exact < ok.pairs_total
    i, j = ok.worst  # the worst pair, in the caller's indices
    assert sum(u[k] / true * abs(F[k, i] - F[k, j]) for k in range(3)) == pytest.approx(
        2.0 * np.linalg.norm(P[i] - P[j]), rel=1e-9)
    bad = euclidean_pair_bound(P, F, u / true * 1.01, 2.0, chunk_points=chunk)
    assert not bad.holds and bad.max_exact == pytest.approx(1.01, rel=1e-12)


def test_coincident_points_and_exact_answers() -> None:
    rng = np.random.default_rng(3)
    P = np.repeat(rng.random((40, 2)), 3, axis=0)
    F = np.repeat(rng.random((2, 40)), 3, axis=1)
    F[1] = 5.0  # a query that never changes may be answered exactly (u = inf)
    assert euclidean_pair_bound(P, F, np.array([1e-3, np.inf]), 1.0, chunk_points=8).max_exact < 1
    F[1, 7] = 6.0
    assert euclidean_pair_bound(P, F, np.array([1e-3, np.inf]), 1.0, chunk_points=8).max_exact \
        == np.inf
    F[0, 1] += 0.1  # a record moved between two copies of one point changes the answer
    r = euclidean_pair_bound(P, F, np.array([1e-3, 1e-3]), 1.0, chunk_points=8)
    assert not r.holds and r.max_exact == np.inf and set(r.worst) <= {0, 1, 2}
    with pytest.raises(ValueError, match="u must be"):
        euclidean_pair_bound(P, F, np.array([-1.0, 1.0]), 1.0)


def test_streamed_on_dask_equals_in_process() -> None:
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(4)
    P, F, u = rng.random((1500, 2)), rng.random((3, 1500)), rng.random(3) * 1e-3
    local = euclidean_pair_bound(P, F, u, 1.0, chunk_points=100)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        on = euclidean_pair_bound(P, F, u, 1.0, chunk_points=100, client=client)
    assert on.chunks == local.chunks > 8
    assert (on.max_exact, on.worst, on.pairs_exact) == (local.max_exact, local.worst,
                                                        local.pairs_exact)
    assert on.max_exact == pytest.approx(brute(P, F, u, 1.0), rel=1e-12)
