"""Metric family: axioms on random universes, closure, strict mode, edge lists, geodesic accuracy."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import shortest_path

from dprivacy import Universe, Workload, metrics
from dprivacy.errors import MetricError, ShapeError, TriangleInequalityError, ValidationError
from dprivacy.metrics import ClosureWarning


def assert_metric(eps: np.ndarray) -> None:
    n = eps.shape[0]
    assert eps.shape == (n, n)
    assert not np.isnan(eps).any()
    assert np.all(np.diag(eps) == 0)
    assert np.all(eps >= 0)
    assert np.array_equal(eps, eps.T)
    # triangle inequality for all i, j, k (inf-safe)
    via = eps[:, :, None] + eps[None, :, :]  # via[i, k, j] = eps_ik + eps_kj
    assert np.all(eps <= via.min(axis=1) * (1 + 1e-12) + 1e-12)


points = st.integers(2, 12).flatmap(
    lambda n: st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=n, max_size=n,
                       unique=True)
)


@settings(max_examples=30, deadline=None)
@given(points, st.floats(0.01, 10))
def test_geometric_metrics_are_metrics(pts, e):
    U = Universe.from_points(np.array(pts, dtype=float))
    for M in (metrics.Euclidean(e), metrics.BlowfishThreshold(5.0, e, "A"),
              metrics.BlowfishThreshold(5.0, e, "A", smooth=True),
              metrics.BlowfishThreshold(5.0, e, "B"), metrics.BlowfishThreshold(5.0, e, "B", True),
              metrics.Discrete(e)):
        assert_metric(M.budget(U))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(2, 3), min_size=1, max_size=3),
       st.lists(st.floats(0.1, 5), min_size=6, max_size=6))
def test_attribute_metrics_are_metrics_and_edges_suffice(sizes, ws):
    doms = {f"a{k}": list(range(s)) for k, s in enumerate(sizes)}
    U = Universe.from_domains(doms)
    aw = metrics.AttributeWeighted({a: ws[k] for k, a in enumerate(doms)})
    hub = metrics.ValueWeighted({a: {v: ws[(k + v) % 6] for v in vals}
                                 for k, (a, vals) in enumerate(doms.items())}, rule="hub")
    mx = metrics.ValueWeighted({a: {v: ws[(k + v) % 6] for v in vals}
                                for k, (a, vals) in enumerate(doms.items())}, rule="max")
    for M in (aw, hub, mx):
        eps = M.budget(U)
        assert_metric(eps)
        i, j, w = M.edges(U)
        g = np.full_like(eps, np.inf)
        g[i, j] = w
        g[j, i] = w
        np.fill_diagonal(g, 0)
        # the shortest-path metric of the edges is the metric itself (spec §9.2)
        np.testing.assert_allclose(shortest_path(g, directed=False), eps, rtol=1e-12)
        assert len(i) == U.N * sum(s - 1 for s in sizes) // 2


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(0.0, 5).filter(lambda v: v == 0 or v > 1e-300), min_size=2,
                max_size=10))
def test_elementwise_is_metric(e):
    U = Universe.from_points(np.arange(len(e), dtype=float))
    assert_metric(metrics.ElementWise(np.array(e)).budget(U))


def test_graph_metric_shortest_path_and_components():
    U = Universe.from_points(np.arange(5, dtype=float))
    eps = metrics.Graph([(0, 1), (1, 2, 3.0), (3, 4, 0.5)], eps=1.0).budget(U)
    assert eps[0, 2] == 4.0 and eps[3, 4] == 0.5 and np.isinf(eps[0, 4])
    assert_metric(eps)


def test_closure_repairs_and_warns_naming_the_triple():
    U = Universe.from_points(np.arange(3, dtype=float))
    bad = np.array([[0, 1, 5.0], [1, 0, 1], [5, 1, 0]])
    with pytest.warns(ClosureWarning, match=r"eps\[0.*2.*\] = 5 > eps\[0.*1.*\] \+ eps\[1.*2.*\] = 2"):
        eps = metrics.Matrix(bad).budget(U)
    assert eps[0, 2] == 2.0
    assert_metric(eps)
    with pytest.raises(TriangleInequalityError, match="triangle"):
        metrics.Matrix(bad, strict=True).budget(U)


def test_valid_matrix_gives_no_warning_and_inf_is_allowed():
    U = Universe.from_points(np.arange(3, dtype=float))
    good = np.array([[0, 1, np.inf], [1, 0, np.inf], [np.inf, np.inf, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(metrics.Matrix(good).budget(U), good)


@pytest.mark.parametrize("bad, msg", [
    (np.array([[0, -0.5], [-0.5, 0]]), "non-negative"),
    (np.array([[0, 1.0], [2.0, 0]]), "symmetric"),
    (np.array([[1.0, 1], [1, 0]]), "diagonal"),
    (np.array([[0, np.nan], [np.nan, 0]]), "NaN"),
])
def test_matrix_rejects_non_metrics(bad, msg):
    with pytest.raises(MetricError, match=msg):
        metrics.Matrix(bad)


def test_matrix_size_must_match_universe():
    with pytest.raises(ShapeError, match="N = 3"):
        metrics.Matrix(np.zeros((2, 2))).budget(Universe.from_points(np.arange(3.0)))


def test_min_rule_refuses_more_than_two_values_and_says_why():
    with pytest.raises(ValidationError, match="not a metric.*hub"):
        metrics.ValueWeighted({"a": {"x": 1, "y": 5, "z": 5}}, rule="min")


def test_attribute_weighted_needs_every_attribute():
    U = Universe.from_domains({"a": [0, 1], "b": [0, 1]})
    with pytest.raises(ValidationError, match="no budget"):
        metrics.AttributeWeighted({"a": 1.0}).budget(U)


def test_edges_only_on_full_products():
    import pandas as pd

    U = Universe.from_dataframe(pd.DataFrame({"a": [0, 1, 1], "b": [0, 0, 1]}), ["a", "b"])
    assert metrics.AttributeWeighted({"a": 1, "b": 1}).edges(U) is None


def test_zero_value_budget_is_zero_distance_and_inf_masks():
    U = Universe.from_domains({"a": [0, 1], "b": [0, 1]})
    eps = metrics.ValueWeighted({"a": {0: np.inf, 1: np.inf}, "b": {0: 1.0, 1: 2.0}}).budget(U)
    assert eps[0, 1] == 1.0  # a equal (0*inf masked to 0), b differs
    assert np.isinf(eps[0, 2])
    assert not np.isnan(eps).any()


def test_geodesic_sphere_matches_geopy_within_half_percent():
    rng = np.random.default_rng(1)
    coords = np.column_stack([rng.uniform(25, 49, 25), rng.uniform(-124, -67, 25)])
    U = Universe.from_points(coords)
    sphere = metrics.Geodesic(1.0, "sphere").budget(U)
    wgs = metrics.Geodesic(1.0, "wgs84").budget(U)
    off = ~np.eye(U.N, dtype=bool)
    assert np.max(np.abs(sphere[off] / wgs[off] - 1)) < 0.005
    assert_metric(sphere)


def test_geodesic_rejects_bad_coordinates():
    U = Universe.from_points(np.array([[95.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ValidationError, match="latitude"):
        metrics.Geodesic(1.0).budget(U)


def test_blowfish_readings():
    U = Universe.from_points(np.array([[0.0], [1.0], [2.0], [10.0]]))
    a1 = metrics.BlowfishThreshold(1.5, 2.0, "A").budget(U)
    assert a1[0, 1] == 2.0 and a1[0, 2] == 4.0 and np.isinf(a1[0, 3])  # eps x hops, inf across
    b1 = metrics.BlowfishThreshold(1.5, 2.0, "B").budget(U)
    assert b1[0, 1] == 2.0 and b1[0, 3] == pytest.approx(2.0 * 10 / 1.5)
    a2 = metrics.BlowfishThreshold(1.5, 2.0, "A", smooth=True).budget(U)
    assert a2[0, 1] == pytest.approx(2.0 / 1.5)
    assert metrics.BlowfishThreshold(1.5, 2.0, "B").edges(U) is None
    assert len(metrics.BlowfishThreshold(1.5, 2.0, "A").edges(U)[0]) == 2


def test_negative_parameters_raise():
    for make in (lambda: metrics.Euclidean(-1), lambda: metrics.Discrete(float("nan")),
                 lambda: metrics.Geodesic(-2), lambda: metrics.BlowfishThreshold(0, 1)):
        with pytest.raises(ValidationError):
            make()


def test_block_matches_dense_and_eps_min():
    rng = np.random.default_rng(0)
    U = Universe.from_points(rng.random((30, 2)))
    for M in (metrics.Euclidean(3.0), metrics.Geodesic(2.0), metrics.ElementWise(rng.random(30)),
              metrics.Discrete(0.7), metrics.BlowfishThreshold(0.3, 1.0, "B")):
        if isinstance(M, metrics.Geodesic):
            U2 = Universe.from_points(rng.uniform(-50, 50, (30, 2)))
        else:
            U2 = U
        rows = np.array([3, 7, 11])
        np.testing.assert_allclose(M.block(U2, rows), M.budget(U2)[rows], rtol=1e-12)
        e = M.budget(U2)
        off = e[~np.eye(U2.N, dtype=bool)]
        assert M.eps_min(U2) == pytest.approx(off[off > 0].min())


def test_fingerprint_changes_with_parameters():
    U = Universe.from_points(np.arange(4.0))
    assert metrics.Euclidean(1.0).fingerprint(U) != metrics.Euclidean(2.0).fingerprint(U)
    assert metrics.Euclidean(1.0).fingerprint(U) == metrics.Euclidean(1.0).fingerprint(U)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 10), st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9),
                                              st.floats(0.0, 4.0, allow_subnormal=False)), max_size=25))
def test_random_graph_and_matrix_metrics(n, raw_edges):
    U = Universe.from_points(np.arange(n, dtype=float))
    edges = [(i % n, j % n, w) for i, j, w in raw_edges if i % n != j % n]
    eps = metrics.Graph(edges).budget(U)
    assert_metric(eps)
    # any symmetric non-negative matrix becomes a metric through the closure
    rng = np.random.default_rng(n + len(edges))
    a = rng.uniform(0, 3, (n, n))
    a = a + a.T
    np.fill_diagonal(a, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClosureWarning)
        closed = metrics.Matrix(a).budget(U)
    assert_metric(closed)
    assert np.all(closed <= a + 1e-12)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 5), st.floats(0.1, 5)), min_size=1, max_size=4))
def test_min_rule_on_binary_attributes_is_attribute_weighted(pairs):
    doms = {f"a{k}": [0, 1] for k in range(len(pairs))}
    U = Universe.from_domains(doms)
    vw = metrics.ValueWeighted({a: {0: p[0], 1: p[1]} for a, p in zip(doms, pairs, strict=True)})
    aw = metrics.AttributeWeighted({a: min(p) for a, p in zip(doms, pairs, strict=True)})
    np.testing.assert_allclose(vw.budget(U), aw.budget(U))
    assert_metric(vw.budget(U))


def test_budget_cache_is_keyed_on_the_budget_column():
    """The cache key covers the ElementWise budget column (before: only the key columns)."""
    keys = ["a", "b", "c"]
    U1 = Universe(pd.DataFrame({"k": keys, "e": [1.0, 2.0, 3.0]}), ("k",))
    U2 = Universe(pd.DataFrame({"k": keys, "e": [1.0, 2.0, 30.0]}), ("k",))
    M = metrics.ElementWise("e")
    assert U1.fingerprint() == U2.fingerprint()  # same elements ...
    assert M.fingerprint(U1) != M.fingerprint(U2)  # ... but not the same budget
    e1, e2 = M.budget(U1), M.budget(U2)
    assert e1[0, 2] == 2.0 and e2[0, 2] == 15.5
    assert M.budget(U1)[0, 2] == 2.0  # and back again
    W = Workload([[0.0, 0.0, 1.0]])
    from dprivacy import design

    b1 = design(W, U1, M, method="closed_form").beta[0]
    b2 = design(W, U2, M, method="closed_form").beta[0]
    # beta = min over the separated pairs (0, 2), (1, 2) of (e_i + e_j) / 2
    assert b1 == pytest.approx(2.0) and b2 == pytest.approx(15.5)


def test_metric_parameters_are_copied():
    e = np.array([1.0, 2.0, 3.0])
    M = metrics.ElementWise(e)
    U = Universe.from_points(np.arange(3.0))
    before = M.budget(U).copy()
    fp = M.fingerprint(U)
    e[:] = 100.0
    np.testing.assert_array_equal(M.budget(U), before)
    assert M.fingerprint(U) == fp and not M.eps.flags.writeable
    d = {"0.0": 1.0, "1.0": 2.0, "2.0": 3.0}
    Md = metrics.ElementWise(d)
    d["0.0"] = 50.0
    assert Md.budget(U)[0, 1] == 1.5
    w = {"a": 1.0, "b": 2.0}
    Ma = metrics.AttributeWeighted(w)
    w["a"] = 100.0
    Ud = Universe.from_domains({"a": [0, 1], "b": [0, 1]})
    assert Ma.budget(Ud)[0, 2] == 1.0
    with pytest.raises(TypeError):
        Ma.weights["a"] = 5.0  # type: ignore[index]


def _brute_attribute_budget(U, weights):
    el = U.elements
    n = U.N
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            out[i, j] = sum(w for a, w in weights.items() if el[a].iloc[i] != el[a].iloc[j])
    return out


def _brute_value_budget(U, budgets):
    el = U.elements
    n = U.N
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            for a, per in budgets.items():
                va, vb = el[a].iloc[i], el[a].iloc[j]
                if va != vb:
                    out[i, j] += (per[va] + per[vb]) / 2
    return out


@pytest.mark.parametrize("kind", ["attribute", "value"])
@pytest.mark.parametrize("full", [True, False])
def test_weights_on_a_non_key_column_are_exact(full, kind):
    """A weighted non-key column: the budget is exactly the sum over the weighted attributes and
    every pair is constrained (before: Hamming edges over the wrong grid, beta = inf)."""
    U0 = Universe.from_domains({"a": [0, 1, 2], "b": ["x", "y"]})
    el = U0.elements.copy()
    el["region"] = np.where(el["a"] >= 1, "north", "south")  # a function of the key
    if not full:
        el = el.iloc[[0, 1, 2, 4, 5]].reset_index(drop=True)
    U = Universe(el, ("a", "b"))
    if kind == "attribute":
        weights = {"a": 2.0, "b": 1.0, "region": 0.5}
        M = metrics.AttributeWeighted(weights)
        brute = _brute_attribute_budget(U, weights)
    else:
        budgets = {"a": {0: 1.0, 1: 2.0, 2: 4.0}, "b": {"x": 1.0, "y": 3.0},
                   "region": {"north": 0.5, "south": 0.25}}
        M = metrics.ValueWeighted(budgets, rule="hub")
        brute = _brute_value_budget(U, budgets)
    np.testing.assert_allclose(M.budget(U), brute, rtol=1e-15)
    assert M.edges(U) is None
    np.testing.assert_allclose(M.block(U, np.array([1, 3])), brute[[1, 3]], rtol=1e-15)
    from dprivacy import design

    W = Workload((el["region"] == "north").astype(float).to_numpy()[None, :])
    d = design(W, U, M, method="closed_form")
    assert np.isfinite(d.beta[0])
    F = W.dense()[0]
    for i in range(U.N):
        for j in range(U.N):
            if i != j:
                assert d.beta[0] * abs(F[i] - F[j]) <= brute[i, j] * (1 + 1e-9)
    # the column changes the fingerprint (it determines the budget)
    el2 = el.copy()
    el2["region"] = "north"
    assert M.fingerprint(Universe(el2, ("a", "b"))) != M.fingerprint(U)
    el2.loc[0, "region"] = None
    with pytest.raises(ValidationError, match="'region' has missing values"):
        M.budget(Universe(el2, ("a", "b")))


@pytest.mark.parametrize("make", [
    lambda: metrics.Euclidean(1e-320),
    lambda: metrics.Discrete(1e-315),
    lambda: metrics.ElementWise(np.array([1e-320, 1e-320, 1e-320])),
    lambda: metrics.Graph([(0, 1, 1e-320), (1, 2, 1.0)]),
])
def test_subnormal_budgets_are_diagnosed_as_such(make):
    U = Universe.from_points(np.array([0.0, 1.0, 3.0]))
    with pytest.raises(MetricError, match="subnormal"):
        make().constraint_set(U)


def test_overflowing_budgets_are_diagnosed_as_such():
    U = Universe.from_points(np.array([0.0, 1.0, 3.0]))
    for M in (metrics.Euclidean(1e308), metrics.ElementWise(np.array([1.7e308, 1.7e308, 1.0]))):
        with pytest.raises(MetricError, match="overflows float64"):
            M.budget(U)
    Ud = Universe.from_domains({"a": [0, 1], "b": [0, 1]})
    with pytest.raises(MetricError, match="overflows"):
        metrics.AttributeWeighted({"a": 1.7e308, "b": 1.7e308}).budget(Ud)
    # +inf given on purpose is "no constraint", not an overflow
    assert metrics.AttributeWeighted({"a": np.inf, "b": 1.0}).budget(Ud)[0, 2] == np.inf
