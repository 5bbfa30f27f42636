"""Geometric indexes of the point metrics: the chord bound holds, WGS84 through pyproj equals
geopy (the oracle), pruned designs through dp.design are exact, private and counted."""

from __future__ import annotations

import numpy as np
import pytest
from geopy.distance import geodesic
from scipy.spatial.distance import cdist

import dprivacy as dp
import solvers
import solvers.constraints as sc
from dprivacy.metrics.geometric import ecef_km, wgs84_km
from solvers import ConstraintSet


def latlon(n: int, rng: np.random.Generator) -> np.ndarray:
    pts = np.c_[rng.uniform(-90, 90, n), rng.uniform(-180, 180, n)]
    extra = np.array([[90.0, 0.0], [-90.0, 10.0], [0.0, 180.0], [0.0, -180.0], [0.0, 0.0],
                      [0.5, 179.7], [-0.5, -0.2], [45.0, 7.0], [45.0, 7.0 + 1e-9]])
    return np.r_[pts, extra]


def test_wgs84_pyproj_equals_geopy_oracle():
    rng = np.random.default_rng(0)
    P = latlon(60, rng)
    i, j = np.triu_indices(len(P), 1)
    ours = wgs84_km(P[i], P[j])
    ref = np.array([geodesic(tuple(P[a]), tuple(P[b])).km for a, b in zip(i, j, strict=True)])
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-9)
    M = dp.metrics.Geodesic(2.0, "wgs84")
    U = dp.Universe.from_points(P[:20])
    E = M.budget(U)
    assert E[3, 7] == pytest.approx(2.0 * geodesic(tuple(P[3]), tuple(P[7])).km, rel=1e-9)
    np.testing.assert_allclose(M.block(U, np.array([3, 5])), E[[3, 5]], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("model", ["sphere", "wgs84"])
def test_chord_bound_holds_for_every_pair(model):
    rng = np.random.default_rng(1)
    P = latlon(150, rng)
    P = np.r_[P, P[:30] + rng.normal(size=(30, 2)) * 1e-7]  # near-coincident pairs
    U = dp.Universe.from_points(P)
    M = dp.metrics.Geodesic(0.3, model)
    idx = M.geometric_index(U)
    E = M.budget(U)
    chord = cdist(ecef_km(P, model), ecef_km(P, model))
    assert np.all(E >= idx.lower(chord))
    pair = M.pair_budget(U)
    i, j = np.triu_indices(len(P), 1)
    np.testing.assert_allclose(pair(i, j), E[i, j], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("model", ["sphere", "wgs84"])
def test_pruned_geodesic_scans_equal_full_scans(model, monkeypatch):
    monkeypatch.setattr(sc, "PRUNE_MIN_N", 0)
    rng = np.random.default_rng(2)
    P = latlon(250, rng)
    U = dp.Universe.from_points(P)
    M = dp.metrics.Geodesic(0.1, model)
    cs = M.constraint_set(U)
    plain = ConstraintSet.dense(M.budget(U))
    F = rng.random((5, U.N))
    F[4] = np.sin(np.radians(P[:, 0]))  # smooth
    u = rng.random(5)
    a, b = cs.scan(F, u, k=10), plain.scan(F, u, k=10)
    assert a.strategy == "pruned" and b.strategy == "full"
    assert a.max_ratio == pytest.approx(b.max_ratio, rel=1e-12)
    np.testing.assert_allclose(a.top[2], b.top[2], rtol=1e-12)
    np.testing.assert_allclose(cs.row_lipschitz(F)[0], plain.row_lipschitz(F)[0], rtol=1e-12)


def test_eps_min_above_dense_limit_by_nearest_neighbours():
    rng = np.random.default_rng(3)
    N = dp.metrics.DENSE_LIMIT + 500
    P = rng.random((N, 2))
    P[10] = P[11]  # a zero distance is left out of eps_min (named points may coincide)
    U = dp.Universe.from_points(P, names=[f"p{i}" for i in range(N)])
    M = dp.metrics.Euclidean(2.5)
    best = np.inf
    for r in range(0, N, 2000):
        D = cdist(P[r:r + 2000], P)
        best = min(best, D[D > 0].min())
    assert M.eps_min(U) == pytest.approx(2.5 * best, rel=1e-15)


def test_design_through_dp_is_pruned_exact_private_and_counted(monkeypatch):
    monkeypatch.setattr(sc, "PRUNE_MIN_N", 0)
    rng = np.random.default_rng(4)
    N, m = 1500, 6
    U = dp.Universe.from_points(rng.random((N, 2)))
    W = dp.Workload(rng.random((m, N)))
    M = dp.metrics.Euclidean(1.0)
    d = dp.design(W, U, M, method="exact")
    passes = d.report["passes"]
    assert passes["pruned"] == passes["passes"] >= 3 and passes["full"] == 0
    assert passes["by"]["feasibility"] == 1 and passes["by"]["finalize"] >= 1
    assert d.report["verified_by"].startswith("certificate")  # no extra verification pass
    assert passes["pairs_evaluated"] < passes["passes"] * N * (N - 1) / 2 / 10
    plain = ConstraintSet.dense(M.budget(U))
    ref = solvers.design(W.F, plain, method="exact")
    assert d.objective == pytest.approx(ref.objective, rel=1e-9)
    assert plain.scan(W.F, d.u).max_ratio <= 1 + 1e-12  # full scan over all pairs
    before = d.constraints.stats.passes
    d.verify(W)
    assert d.constraints.stats.passes == before + 1
