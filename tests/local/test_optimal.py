"""Optimal d_X-local randomiser (LP): all-triples check, direct vs cutting planes, spanner, baselines."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import dprivacy as dp
from dprivacy.local.baselines import exponential_randomiser, planar_laplace_loss
from dprivacy.local.cost import check_dx
from dprivacy.local.dx_randomiser import optimal_randomiser
from solvers.channels.optimal import solve_dx_lp
from solvers.channels.spanner import greedy_spanner, spanner_dilation


def _triples_ok(T: np.ndarray, eps: np.ndarray) -> bool:  # noqa: N803
    """Every (x, x', z) by brute force, independent of the LP and of check_dx."""
    n = T.shape[0]
    for x in range(n):
        for y in range(n):
            if np.any(T[x] > np.exp(eps[x, y]) * T[y] * (1 + 1e-9) + 1e-15):
                return False
    return True


@pytest.fixture(scope="module")
def grid() -> tuple[np.ndarray, np.ndarray]:
    pts = np.array([(i, j) for i in range(4) for j in range(4)], dtype=float)
    return pts, cdist(pts, pts)


@pytest.mark.parametrize("eps_unit", [0.5, 1.0])
def test_lp_private_and_beats_baselines(grid, eps_unit: float) -> None:
    pts, d = grid
    eps = eps_unit * d
    r = solve_dx_lp(eps, d)
    assert _triples_ok(r.T, eps) and check_dx(r.T, eps).ok
    assert np.allclose(r.T.sum(axis=1), 1.0)
    direct = solve_dx_lp(eps, d, method="direct")  # an independent formulation: all rows at once
    assert r.expected_loss == pytest.approx(direct.expected_loss, rel=1e-6)
    em = float(np.mean(np.sum(exponential_randomiser(eps) * d, axis=1)))
    pl, se = planar_laplace_loss(pts, eps_unit, d, samples=4000, rng=0)
    assert r.expected_loss <= em and r.expected_loss <= pl - 3 * se


def test_spanner_feasible_and_no_better_than_exact(grid) -> None:
    pts, d = grid
    eps = 1.0 * d
    i, j, _ = greedy_spanner(eps, 1.5)
    assert spanner_dilation(eps, i, j) <= 1.5 + 1e-9 and i.size < 16 * 15 / 2
    sp = solve_dx_lp(eps, d, edges=(i, j), dilation=1.5)
    assert _triples_ok(sp.T, eps)  # private for every pair, not only the edges
    ex = solve_dx_lp(eps, d)
    assert sp.expected_loss >= ex.expected_loss - 1e-9


def test_wrapper_with_metric_and_squared_loss() -> None:
    pts = np.array([(i, j) for i in range(3) for j in range(3)], dtype=float)
    U = dp.Universe.from_points(pts)
    M = dp.metrics.Euclidean(eps_per_unit=0.8)
    r = optimal_randomiser(U, M, loss="squared", dilation=1.2)
    assert r.check.ok and r.spanner_edges is not None
    assert r.randomiser.cost() < np.inf


def test_interior_point_rounds_reach_the_same_private_optimum(grid) -> None:
    pts, d = grid
    eps = 0.5 * d
    simplex = solve_dx_lp(eps, d)
    ipm = solve_dx_lp(eps, d, lp_solver="ipm")
    assert _triples_ok(ipm.T, eps) and check_dx(ipm.T, eps).ok
    assert np.allclose(ipm.T.sum(axis=1), 1.0)
    assert ipm.expected_loss == pytest.approx(simplex.expected_loss, rel=1e-6)
    with pytest.raises(ValueError, match="lp_solver"):
        solve_dx_lp(eps, d, lp_solver="barrier")


def test_column_generation_matches_cutting_planes_and_direct_with_a_prior() -> None:
    rng = np.random.default_rng(3)
    pts = rng.uniform(0, 5, size=(14, 2))
    d = cdist(pts, pts)
    eps = 0.7 * d
    prior = rng.dirichlet(np.ones(14))
    dw = solve_dx_lp(eps, d ** 2, prior, method="dantzig_wolfe")
    cp = solve_dx_lp(eps, d ** 2, prior, method="cutting_planes")
    direct = solve_dx_lp(eps, d ** 2, prior, method="direct")
    assert dw.info["status"] == "Optimal" and dw.repair_weight < 1e-6
    assert dw.expected_loss == pytest.approx(direct.expected_loss, rel=1e-7)
    assert dw.expected_loss == pytest.approx(cp.expected_loss, rel=1e-7)
    # the certificate: the Lagrangian bound meets the master's value, below the true optimum
    assert dw.info["lower_bound"] <= direct.lp_objective * (1 + 1e-9)
    assert dw.lp_objective - dw.info["lower_bound"] <= 1e-9 * dw.lp_objective
    assert _triples_ok(dw.T, eps) and np.allclose(dw.T.sum(axis=1), 1.0)


def test_column_generation_stopped_early_is_still_private(grid) -> None:
    pts, d = grid
    eps = 0.5 * d
    r = solve_dx_lp(eps, d, max_rounds=2)
    assert r.info["status"] == "Round limit reached"
    assert _triples_ok(r.T, eps) and np.allclose(r.T.sum(axis=1), 1.0)
    assert r.expected_loss >= solve_dx_lp(eps, d).expected_loss - 1e-9
    with pytest.raises(ValueError, match="method"):
        solve_dx_lp(eps, d, method="simplex")
    zero = eps.copy()
    zero[0, 1] = zero[1, 0] = 0.0
    with pytest.raises(ValueError, match="budget 0"):
        solve_dx_lp(zero, d)


def test_pricing_certificate_bounds_later_pricings() -> None:
    """A skipped output's bound (value + min(rc + h - g)) never exceeds its exact pricing value."""
    from solvers.channels.dantzig_wolfe import _Pricer
    from solvers.channels.optimal import constraint_pairs

    rng = np.random.default_rng(5)
    pts = rng.uniform(0, 4, size=(12, 2))
    eps = 0.6 * cdist(pts, pts)
    x, y, b = constraint_pairs(eps)
    pr = _Pricer(12, x, y, b, eps, neighbours=2, tol=1e-10)
    for z in range(12):
        g = rng.normal(size=12)
        v, val, rc = pr.solve(z, g)
        assert np.all(v[x] <= np.exp(b) * v[y] * (1 + 1e-8)) and v.sum() == pytest.approx(1.0)
        assert val == pytest.approx(g @ v, abs=1e-9) and rc.min() >= -1e-9
        for _ in range(5):
            h = g + rng.normal(scale=0.5, size=12)
            bound = val + np.min(rc + h - g)
            assert bound <= pr.solve(z, h)[1] + 1e-9


@pytest.mark.parametrize("box", [0.0, 1e-3, 3.0])
def test_dual_box_changes_the_path_not_the_optimum(box: float, caplog) -> None:
    """Without slack columns, with a box so tight the bound first meets a relaxed master (which
    must widen it, not stop), and with the default box: the same certified optimum."""
    import logging

    from solvers.channels.dantzig_wolfe import dantzig_wolfe
    from solvers.channels.optimal import constraint_pairs

    rng = np.random.default_rng(11)
    pts = rng.uniform(0, 5, size=(12, 2))
    d = cdist(pts, pts)
    eps = 0.6 * d
    x, y, b = constraint_pairs(eps)
    direct = solve_dx_lp(eps, d, method="direct")
    with caplog.at_level(logging.DEBUG, logger="solvers.channels.dantzig_wolfe"):
        r = dantzig_wolfe(d / 12, eps, x, y, b, box=box)
    assert r.status == "Optimal"
    assert r.objective == pytest.approx(direct.lp_objective, rel=1e-7)
    assert r.lower_bound <= direct.lp_objective * (1 + 1e-9)
    assert np.allclose(r.T.sum(axis=1), 1.0, atol=1e-9)
    widened = "box widened" in caplog.text
    assert widened == (box == 1e-3)
    # stopped by a round limit while slack is in use: the master is re-solved without slack
    early = dantzig_wolfe(d / 12, eps, x, y, b, box=1e-3, max_rounds=1)
    assert early.status == "Round limit reached"
    assert np.allclose(early.T.sum(axis=1), 1.0, atol=1e-9)
    assert early.objective >= direct.lp_objective * (1 - 1e-9)
    with pytest.raises(ValueError, match="box"):
        dantzig_wolfe(d / 12, eps, x, y, b, box=-1.0)


@pytest.mark.parametrize("purge_age", [None, 1])
def test_purging_idle_columns_keeps_the_optimum(purge_age: int | None) -> None:
    """Columns idle for one round leave the master (many purges) and the certified optimum is
    the one without purging and the direct LP's."""
    from solvers.channels.dantzig_wolfe import dantzig_wolfe
    from solvers.channels.optimal import constraint_pairs

    rng = np.random.default_rng(2)
    pts = rng.uniform(0, 6, size=(16, 2))
    d = cdist(pts, pts)
    eps = 0.5 * d
    x, y, b = constraint_pairs(eps)
    direct = solve_dx_lp(eps, d ** 2, method="direct")
    r = dantzig_wolfe(d ** 2 / 16, eps, x, y, b, purge_age=purge_age)
    assert r.status == "Optimal"
    assert (r.purged > 0) == (purge_age is not None)
    assert r.objective == pytest.approx(direct.lp_objective, rel=1e-7)
    assert r.lower_bound <= direct.lp_objective * (1 + 1e-9)
    assert np.allclose(r.T.sum(axis=1), 1.0, atol=1e-9) and _triples_ok(r.T, eps * (1 + 1e-7))
    with pytest.raises(ValueError, match="purge_age"):
        dantzig_wolfe(d / 16, eps, x, y, b, purge_age=0)


def _scaled_plain_lp(eps: np.ndarray, loss: np.ndarray) -> float:
    """The plain LP with each pair row written ``exp(-b/2) T[x, z] <= exp(b/2) T[x', z]``, so that
    budgets up to ~40 nats stay inside HiGHS's coefficient range (an independent formulation)."""
    import scipy.sparse as sps
    from scipy.optimize import linprog

    n = eps.shape[0]
    x, y = np.nonzero(~np.eye(n, dtype=bool))
    b = eps[x, y]
    p = x.size
    rows = np.repeat(np.arange(p * n), 2)
    z = np.tile(np.arange(n), p)
    cols = np.column_stack([np.repeat(x, n) * n + z, np.repeat(y, n) * n + z]).ravel()
    vals = np.column_stack([np.exp(-np.repeat(b, n) / 2), -np.exp(np.repeat(b, n) / 2)]).ravel()
    A = sps.csr_matrix((vals, (rows, cols)), shape=(p * n, n * n))  # noqa: N806
    E = sps.kron(sps.identity(n), np.ones((1, n)), format="csr")  # noqa: N806
    res = linprog(loss.ravel() / n, A_ub=A, b_ub=np.zeros(p * n), A_eq=E, b_eq=np.ones(n),
                  bounds=(0, None), method="highs")
    assert res.status == 0
    return float(res.fun)


def test_large_budgets_default_method_against_a_plain_lp() -> None:
    """Budgets up to 40 nats (beyond HiGHS's exp(budget) range): the default method matches a
    plain LP written with split exponents; the HiGHS-matrix methods refuse instead of returning a
    near-uniform channel."""
    rng = np.random.default_rng(0)
    pts = rng.uniform(0, 1000, size=(12, 2))
    d = cdist(pts, pts)
    eps = d * (40.0 / d.max())
    plain = _scaled_plain_lp(eps, d)
    r = solve_dx_lp(eps, d, gap=1e-7)
    assert r.info["status"] in ("Gap reached", "Stalled", "Optimal")
    assert _triples_ok(r.T, eps) and check_dx(r.T, eps).ok
    assert r.lower_bound <= plain * (1 + 1e-7)
    assert r.expected_loss == pytest.approx(plain, rel=1e-5)
    for m in ("dantzig_wolfe", "cutting_planes", "direct"):
        with pytest.raises(ValueError, match="lagrangian"):
            solve_dx_lp(eps, d, method=m)


def test_repair_scales_rows_off_by_the_master_tolerance_instead_of_normalising_them() -> None:
    """A private channel whose columns are scaled by 1 +- 1e-8 (every pair still holds exactly;
    the row sums are off by a few 1e-9, as the master leaves them): the repair returns rows that
    sum to 1, every pair held, adding less than a tenth of the loss that normalising each row
    and then mixing with the uniform matrix adds (dense repair with the loss, which picks the
    cheaper filler, and the listed-pairs repair)."""
    from solvers.channels.optimal import _repair, _repair_dense, constraint_pairs

    rng = np.random.default_rng(0)
    pts = rng.uniform(0, 4, size=(25, 2))
    n = len(pts)
    d = cdist(pts, pts)
    eps = 0.7 * d
    opt = np.array(solve_dx_lp(eps, d, method="direct").T)
    T = opt * (1 + 1e-8 * rng.uniform(-1, 1, size=n))[None, :]  # noqa: N806
    assert np.abs(T.sum(axis=1) - 1).max() > 1e-9
    rows = T / T.sum(axis=1, keepdims=True)
    viol = max(float(np.max(rows[x][None, :] - np.exp(eps[x])[:, None] * rows)) for x in range(n))
    lam = 1.01 * viol / (viol + (np.exp(eps[eps > 0].min()) - 1) / n)
    old = float((((1 - lam) * rows + lam / n) * d).sum() - (T * d).sum())
    assert old > 0
    for R, mu in (_repair_dense(T.copy(), eps, None, d),  # noqa: N806
                  _repair(T.copy(), *constraint_pairs(eps)[:3])):
        assert 0 < mu < 1e-6
        assert np.abs(R.sum(axis=1) - 1).max() < 1e-12
        assert float((R * d).sum() - (T * d).sum()) < old / 10
        for x in range(n):
            assert np.all(R[x][None, :] <= np.exp(eps[x])[:, None] * R * (1 + 1e-12))


def test_repair_filler_of_a_spread_out_set_is_the_cheaper_exponential_mechanism() -> None:
    """Points far apart at a small budget per unit and the squared loss: the uniform rows
    would cost about the mean squared distance; the exponential mechanism at a quarter of the
    budgets is used instead (its added loss is under half the uniform one's), rows sum to 1 and every
    pair holds, also for near-zero entries (ratios checked relative to the entries)."""
    from solvers.channels.optimal import _repair_dense
    from solvers.channels.separation import check_all_pairs

    rng = np.random.default_rng(1)
    pts = rng.uniform(0, 100, size=(40, 2))
    n = len(pts)
    sq = cdist(pts, pts) ** 2
    eps = 0.3 * cdist(pts, pts)
    opt = np.array(solve_dx_lp(eps, sq, method="direct").T)
    T = opt * (1 + 1e-8 * rng.uniform(-1, 1, size=n))[None, :]  # noqa: N806
    R, _ = _repair_dense(T.copy(), eps, None, sq)  # noqa: N806
    U, _ = _repair_dense(T.copy(), eps)  # noqa: N806  # without the loss: uniform rows
    added, uniform = float(((R - T) * sq).sum()), float(((U - T) * sq).sum())
    assert 0 < added < uniform / 2
    assert np.abs(R.sum(axis=1) - 1).max() < 1e-12
    assert check_all_pairs(R, eps, rtol=1e-9)[0]


def test_master_solve_raises_when_highs_cannot_solve_it() -> None:
    """The master is used only when HiGHS solves it to optimality: an infeasible LP raises."""
    from solvers.channels.column_lagrangian import _run_master
    from solvers.channels.lp_parts import new_highs

    none = np.zeros(0, dtype=np.int32)
    ok = new_highs(threads=1)
    ok.addCols(1, np.array([1.0]), np.zeros(1), np.ones(1), 0, none, none, np.zeros(0))
    _run_master(ok)
    bad = new_highs(threads=1)
    bad.addCols(1, np.array([1.0]), np.zeros(1), np.ones(1), 0, none, none, np.zeros(0))
    bad.addRows(1, np.array([2.0]), np.array([np.inf]), 1, np.zeros(1, dtype=np.int32),
                np.zeros(1, dtype=np.int32), np.ones(1))
    with pytest.raises(RuntimeError, match="master LP was not solved"):
        _run_master(bad)
