"""The optimal randomiser decomposed by output column: certificate, exact graph edges, symmetry,
and an independent all-pairs d_X check of every returned randomiser."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import dprivacy as dp
from dprivacy.local import dx_randomiser
from dprivacy.local.dx_randomiser import optimal_randomiser
from solvers.channels.column_lagrangian import solve_by_columns
from solvers.channels.optimal import constraint_pairs, solve_dx_lp
from solvers.channels.spanner import graph_edges
from solvers.channels.symmetry import invariant_group, orbits, square_symmetries


def _pairs_ok(T: np.ndarray, eps: np.ndarray) -> bool:  # noqa: N803
    """Every (x, x', z) by brute force, independent of the solvers and of check_dx."""
    n = T.shape[0]
    for x in range(n):
        if np.any(T[x][None, :] > np.exp(eps[x])[:, None] * T * (1 + 1e-9) + 1e-15):
            return False
    return True


def d_of(pts: np.ndarray) -> np.ndarray:
    return cdist(pts, pts)


def _grid(side: int, rows: int | None = None) -> np.ndarray:
    return np.array([(i, j) for i in range(rows or side) for j in range(side)], dtype=float)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
@pytest.mark.parametrize("prior", ["uniform", "random"])
def test_matches_the_direct_lp_and_is_private(metric: str, prior: str) -> None:
    pts = _grid(4)
    d = cdist(pts, pts)
    eps = 0.6 * cdist(pts, pts, "cityblock" if metric == "manhattan" else "euclidean")
    pi = None
    if prior == "random":
        pi = np.random.default_rng(3).random(len(pts))
        pi /= pi.sum()
    r = solve_dx_lp(eps, d ** 2, pi, method="lagrangian", gap=1e-9,
                    symmetries=square_symmetries(pts))
    direct = solve_dx_lp(eps, d ** 2, pi, method="direct")  # every constraint at once
    assert _pairs_ok(r.T, eps) and np.allclose(r.T.sum(axis=1), 1.0)
    assert r.expected_loss == pytest.approx(direct.expected_loss, rel=1e-7)
    # the bound is below the true optimum and meets it
    assert r.lower_bound <= direct.lp_objective * (1 + 1e-9)
    assert 0 <= r.gap <= 1e-7
    assert r.info["graph_edges"] == (metric == "manhattan")
    assert r.info["group_order"] == (8 if prior == "uniform" else 1)


def test_bound_is_valid_at_every_stop() -> None:
    """A loose gap or one round: the bound is still below the optimum, T still private."""
    pts = _grid(5)
    d = cdist(pts, pts)
    eps = 0.5 * d
    opt = solve_dx_lp(eps, d, method="direct").lp_objective
    for kw in ({"gap": 0.05}, {"max_rounds": 1}, {"max_rounds": 3}):
        r = solve_dx_lp(eps, d, method="lagrangian", **kw)
        assert r.lower_bound <= opt * (1 + 1e-12)
        assert r.expected_loss >= opt * (1 - 1e-12)
        assert _pairs_ok(r.T, eps)
    loose = solve_dx_lp(eps, d, method="lagrangian", gap=0.05)
    assert loose.gap <= 0.05 + 1e-12 and loose.info["status"] == "Gap reached"


def test_graph_edges_exact_only_for_graph_metrics() -> None:
    pts = _grid(6, 4)
    man = cdist(pts, pts, "cityblock")
    i, j = graph_edges(man)
    assert i.size == 6 * 3 + 4 * 5  # the grid's edges, nothing else
    assert np.all(man[i, j] == 1)
    assert graph_edges(cdist(pts, pts)) is None  # Euclidean: not a sparse graph's path metric
    # a path metric of a random sparse weighted graph is recognised, and its edges rebuild it
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    rng = np.random.default_rng(0)
    n = 30
    a, b = np.arange(n - 1), np.arange(1, n)  # a path keeps it connected
    extra = rng.integers(0, n, size=(20, 2))
    a, b = np.concatenate([a, extra[:, 0]]), np.concatenate([b, extra[:, 1]])
    keep = a != b
    w = rng.uniform(0.5, 2.0, size=a.size)
    D = shortest_path(coo_matrix((w[keep], (a[keep], b[keep])), shape=(n, n)).tocsr(),  # noqa: N806
                      directed=False)
    e = graph_edges(D, neighbours=n - 1)
    assert e is not None
    back = shortest_path(coo_matrix((D[e], e), shape=(n, n)).tocsr(), directed=False)
    assert np.allclose(back, D, rtol=1e-12)


def test_symmetry_group_and_orbits() -> None:
    sq = square_symmetries(_grid(5))
    assert len(sq) == 8 and np.array_equal(sq[0], np.arange(25))
    assert len(square_symmetries(_grid(5, 3))) == 4  # a rectangle: no quarter turns
    lab = orbits(sq, 25)
    assert lab.max() + 1 == 6  # 5 x 5 under the square group: 6 orbits
    d = cdist(_grid(5), _grid(5))
    w = np.ones(25)
    w[0] = 2.0  # a prior that breaks the symmetry of one corner
    assert len(invariant_group(sq, [d, w[:, None] * d])) == 2  # the diagonal reflection remains


def test_solver_bound_does_not_trust_the_lp() -> None:
    """The bound of a one-round solve equals sum(u) + sum of the per-column bounds (recomputed)."""
    pts = _grid(4)
    d = cdist(pts, pts)
    eps = 0.7 * d
    x, y, b = constraint_pairs(eps)
    c = d / 16
    r = solve_by_columns(c, eps, x, y, b, gap=1e-9)
    assert r.lower_bound <= r.objective + 1e-12
    assert (r.objective - r.lower_bound) <= 1e-7 * r.objective
    assert r.history and all(lb <= obj + 1e-12 for _, obj, lb in r.history)


def test_wrapper_certificate_symmetry_and_edge_check(monkeypatch) -> None:
    pts = _grid(6)
    U = dp.Universe.from_points(pts)  # noqa: N806
    r = optimal_randomiser(U, dp.metrics.Euclidean(eps_per_unit=0.8), gap=1e-6)
    eps = 0.8 * cdist(pts, pts)
    assert r.checked == "all pairs" and r.check.ok
    assert r.lower_bound <= r.expected_loss and r.gap <= 1e-6
    assert r.lp.info["group_order"] == 8
    full = np.zeros((36, 36))
    full[:, r.randomiser.outputs] = r.randomiser.matrix
    assert _pairs_ok(full, eps)
    # a graph metric above the all-pairs limit is checked on its edges plus the path lengths
    monkeypatch.setattr(dx_randomiser, "CHECK_ALL_MAX", 10)
    man = cdist(pts, pts, "cityblock")
    i, j = np.nonzero(np.triu(man == 1))
    grid_graph = dp.metrics.Graph([(int(a), int(b)) for a, b in zip(i, j, strict=True)], eps=0.8)
    g = optimal_randomiser(U, grid_graph, quality=d_of(pts), gap=1e-6)
    assert g.checked == "graph edges" and g.check.ok
    assert g.lp.info["pairs"] == 2 * i.size  # only the edges were constrained (both ways)
    assert g.lp.info["group_order"] == 8
    full = np.zeros((36, 36))
    full[:, g.randomiser.outputs] = g.randomiser.matrix
    assert _pairs_ok(full, 0.8 * man)
    # the same program from the budget matrix alone (edges found by graph_edges) agrees
    same = solve_dx_lp(0.8 * man, d_of(pts), method="lagrangian", gap=1e-9)
    assert same.info["graph_edges"]
    assert same.expected_loss == pytest.approx(g.expected_loss, rel=1e-5)


def test_edge_check_catches_a_violation() -> None:
    pts = _grid(3)
    eps = 0.5 * cdist(pts, pts, "cityblock")
    i, j = graph_edges(eps)
    T = np.full((9, 9), 1 / 9)  # noqa: N806
    assert dx_randomiser._check_edges(T, eps, i, j).ok
    T[0] = np.eye(9)[0]  # noqa: N806  # the corner reports itself: breaks every pair
    assert not dx_randomiser._check_edges(T, eps, i, j).ok
    # edges that do not rebuild the budgets prove nothing
    assert dx_randomiser._check_edges(T, eps, i[:3], j[:3]) is None


def test_large_budgets_left_out_of_the_lps_and_met_by_lifting(monkeypatch) -> None:
    """Pairs above CAP nats never enter a pricing LP; the columns are lifted to satisfy them and
    the bound stays valid (a small CAP forces the path; with CAP = 1.2 nats the lifting is coarse,
    so the gap need not close, but the certificate must stay true)."""
    from solvers.channels import column_lagrangian

    monkeypatch.setattr(column_lagrangian, "CAP", 1.2)
    rng = np.random.default_rng(5)
    pts = rng.uniform(0, 6, size=(14, 2))
    d = cdist(pts, pts)
    eps = 0.8 * d
    assert (eps > 1.2).mean() > 0.5
    direct = solve_dx_lp(eps, d, method="direct")
    r = solve_dx_lp(eps, d, method="lagrangian", gap=1e-7)
    assert _pairs_ok(r.T, eps)
    assert r.lower_bound <= direct.lp_objective * (1 + 1e-9)
    assert r.expected_loss >= direct.lp_objective * (1 - 1e-9)
