"""The separation oracle of the column decomposition (every violated pair found, compared with
brute force), the blocked all-pairs check, the dense (unlisted pairs) and rebuilt-model pricing
paths, and the validity of the lower bound under skewed priors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from solvers.channels.column_lagrangian import solve_by_columns
from solvers.channels.optimal import constraint_pairs, solve_dx_lp
from solvers.channels.separation import (
    check_all_pairs,
    check_edges,
    kernel,
    lift,
    violations,
    worst_violations,
)


def _brute(v: np.ndarray, eps: np.ndarray, tol: float) -> set[tuple[int, int]]:
    n = v.size
    return {(x, y) for x in range(n) for y in range(n)
            if x != y and v[x] - np.exp(eps[x, y]) * v[y] > tol}


def _pairs_ok(T: np.ndarray, eps: np.ndarray) -> bool:  # noqa: N803
    """Every (x, x', z) directly, independent of the solvers and of the checks under test."""
    for x in range(T.shape[0]):
        if np.any(T[x][None, :] > np.exp(eps[x])[:, None] * T * (1 + 1e-9) + 1e-15):
            return False
    return True


@pytest.mark.parametrize("seed", range(6))
def test_oracle_finds_every_violated_pair(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 40))
    pts = rng.uniform(0, 5, size=(n, 2))
    eps = rng.uniform(0.2, 1.5) * cdist(pts, pts)
    v = rng.random(n) ** rng.uniform(1, 8)
    v[rng.random(n) < 0.15] = 0.0  # zero entries: every pair into them is violated
    K = kernel(eps)  # noqa: N806
    brute = _brute(v, eps, 0.0)
    assert set(zip(*(a.tolist() for a in violations(v, eps, 0.0)), strict=True)) == brute
    x, y = worst_violations(v, K, eps, 0.0, block=7)  # small blocks: the merge across blocks
    got = set(zip(x.tolist(), y.tolist(), strict=True))
    assert got <= brute  # only violated pairs
    assert set(y.tolist()) == {b for _, b in brute}  # every y with a violated pair into it
    for a, b in got:  # and its pair is the worst ratio into y
        assert v[a] * K[a, b] == pytest.approx(max(v[c] * K[c, b] for c in range(n)), rel=1e-12)
    # the lift satisfies every pair, lies above v, and keeps v where v already holds
    w = lift(v, K, block=5)
    assert np.all(w >= v) and not _brute(w, eps, 1e-12)
    free = np.array([not any(b == k for _, b in brute) for k in range(n)])
    assert np.allclose(w[free], v[free])
    # a tolerance keeps only pairs violated by more than it
    tol = 0.05
    x, y = worst_violations(v, K, eps, tol)
    assert all(v[a] - np.exp(eps[a, b]) * v[b] > tol for a, b in zip(x, y, strict=True))


def test_all_pairs_and_edge_checks_against_brute_force() -> None:
    rng = np.random.default_rng(1)
    pts = np.array([(i, j) for i in range(5) for j in range(5)], dtype=float)
    eps = 0.5 * cdist(pts, pts)
    r = solve_dx_lp(eps, cdist(pts, pts), method="lagrangian", gap=1e-6)
    T = np.array(r.T)  # noqa: N806
    assert check_all_pairs(T, eps)[0] and _pairs_ok(T, eps)
    bad = T.copy()
    k = int(rng.integers(25))
    bad[k] = np.eye(25)[k]  # one input that reports itself
    ok, ratio, pair = check_all_pairs(bad, eps)
    assert not ok and not _pairs_ok(bad, eps) and ratio == np.inf and k in pair
    # the grid's edges imply every Manhattan pair
    man = 0.5 * cdist(pts, pts, "cityblock")
    i, j = np.nonzero(np.triu(man == 0.5))
    g = solve_dx_lp(man, cdist(pts, pts), method="lagrangian", gap=1e-6)
    assert check_edges(np.array(g.T), man, i, j)[0] and _pairs_ok(np.array(g.T), man)
    assert not check_edges(bad, man, i, j)[0]
    assert not check_edges(np.array(g.T), man, i[:5], j[:5])[0]  # too few edges prove nothing


@pytest.mark.parametrize("model_bytes", [1e9, 0.0])
def test_dense_pairs_match_listed_pairs_and_the_plain_lp(model_bytes: float) -> None:
    """Every pair found by the oracle (none listed), with kept or rebuilt pricing models: the
    same optimum as the plain LP, a valid bound, a private T."""
    rng = np.random.default_rng(4)
    pts = rng.uniform(0, 4, size=(18, 2))
    d = cdist(pts, pts)
    eps = 0.7 * d
    pi = rng.random(18) ** 4
    pi /= pi.sum()
    cost = pi[:, None] * d
    direct = solve_dx_lp(eps, d, pi, method="direct")
    dense = solve_by_columns(cost, eps, None, None, None, gap=1e-9, model_bytes=model_bytes)
    listed = solve_by_columns(cost, eps, *constraint_pairs(eps), gap=1e-9, model_bytes=model_bytes)
    for r in (dense, listed):
        assert r.lower_bound <= direct.lp_objective * (1 + 1e-9)
        assert r.objective == pytest.approx(direct.lp_objective, rel=1e-6)
    T = dense.T / dense.T.sum(axis=1, keepdims=True)  # noqa: N806
    assert _pairs_ok(T, eps)


@pytest.mark.parametrize("seed", range(3))
def test_skewed_prior_bound_stays_below_the_plain_lp(seed: int) -> None:
    """A population-like prior (a few heavy cells, one person elsewhere): at every stop the
    proven bound is at most the plain LP optimum and the randomiser is private."""
    rng = np.random.default_rng(seed)
    pts = np.array([(i, j) for i in range(5) for j in range(5)], dtype=float)
    d = cdist(pts, pts)
    pi = np.ones(25)
    pi[rng.choice(25, 3, replace=False)] += rng.uniform(100, 10_000, size=3)
    pi /= pi.sum()
    for metric in ("euclidean", "cityblock"):
        eps = 0.5 * cdist(pts, pts, metric)
        opt = solve_dx_lp(eps, d, pi, method="direct").lp_objective
        for kw in ({"max_rounds": 1}, {"max_rounds": 4}, {"gap": 1e-2}, {"gap": 1e-8}):
            r = solve_dx_lp(eps, d, pi, method="lagrangian", **kw)
            assert r.lower_bound <= opt * (1 + 1e-9)
            assert r.expected_loss >= opt * (1 - 1e-9)
            assert _pairs_ok(np.array(r.T), eps)
        assert r.gap <= 1e-6


def test_single_precision_columns_are_repaired_and_private(monkeypatch) -> None:
    """Columns stored in single precision (the memory saving of large N): T is repaired to be
    exactly private and its loss stays within 1e-5 of the plain LP optimum."""
    from solvers.channels import column_lagrangian

    monkeypatch.setattr(column_lagrangian, "SINGLE_ABOVE", 0)
    pts = np.array([(i, j) for i in range(5) for j in range(5)], dtype=float)
    d = cdist(pts, pts)
    for metric in ("euclidean", "cityblock"):
        eps = 0.5 * cdist(pts, pts, metric)
        opt = solve_dx_lp(eps, d, method="direct").lp_objective
        r = solve_dx_lp(eps, d, method="lagrangian", gap=1e-8)
        assert _pairs_ok(np.array(r.T), eps) and check_all_pairs(np.array(r.T), eps)[0]
        assert r.lower_bound <= opt * (1 + 1e-9)
        assert r.expected_loss == pytest.approx(opt, rel=1e-5)


def test_pricing_retry_solves_from_scratch_and_restores_options() -> None:
    import highspy

    from solvers.channels.column_lagrangian import _retry
    from solvers.channels.lp_parts import add_ratio_rows, new_highs

    h = new_highs(threads=1)
    n = 3
    none = np.zeros(0, dtype=np.int32)
    h.addCols(n, np.array([-1.0, 0.5, 0.2]), np.zeros(n), np.ones(n), 0, none, none, np.zeros(0))
    add_ratio_rows(h, np.array([0, 0]), np.array([1, 2]), np.exp(np.array([1.0, 2.0])))
    assert _retry(h)
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    v = np.asarray(h.getSolution().col_value)
    assert v[0] == pytest.approx(1.0) and v[1] == pytest.approx(np.exp(-1.0))
    assert h.getOptionValue("simplex_strategy")[1] == 1 and h.getOptionValue("solver")[1] == "choose"
