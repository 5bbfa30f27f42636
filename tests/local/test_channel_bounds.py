"""The proven lower bound of the column decomposition: the complementary rows
``1 - v[x] <= exp(b) (1 - v[y])`` hold on every column of every private channel, the bound with
them never exceeds the plain LP's optimum, and the duals of an earlier pricing LP still give a
valid bound at new multipliers (the fallback of a stopped LP)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.spatial.distance import cdist

from solvers.channels.column_lagrangian import _Pricer, dense_cap, solve_by_columns
from solvers.channels.optimal import solve_dx_lp


def _grid(side: int) -> np.ndarray:
    return np.array([(i, j) for i in range(side) for j in range(side)], dtype=float)


def _column_min(g: np.ndarray, eps: np.ndarray, complement: bool) -> float:
    """``min <g, v>`` over ``0 <= v <= 1`` with every pair row (and every complementary row),
    by scipy's HiGHS with every row at once: the reference for the pricer's bounds."""
    n = g.size
    x, y = np.nonzero(~np.eye(n, dtype=bool))
    k = x.size
    rows = np.arange(k)
    a = np.zeros((k, n))
    a[rows, x] = 1.0
    a[rows, y] -= np.exp(eps[x, y])
    b = np.zeros(k)
    if complement:
        a = np.vstack([a, -a])
        b = np.concatenate([b, np.exp(eps[x, y]) - 1.0])
    res = linprog(g, A_ub=a, b_ub=b, bounds=(0, 1), method="highs")
    assert res.status == 0
    return float(res.fun)


def test_complementary_rows_hold_on_private_channels() -> None:
    """Summing the pair rows of a private channel over every other output gives
    ``1 - T[x, z] <= exp(eps) (1 - T[y, z])``: checked on the optimal channel and on random
    mixtures of private channels, and shown to fail on a channel that is not private."""
    pts = _grid(4)
    eps = 0.7 * cdist(pts, pts)
    n = len(pts)
    opt = np.array(solve_dx_lp(eps, cdist(pts, pts), method="direct").T)
    rng = np.random.default_rng(0)
    expo = np.exp(-eps / 2)
    expo /= expo.sum(axis=1, keepdims=True)  # the exponential mechanism: eps-private
    for T in (opt, expo, 0.3 * opt + 0.7 * expo, np.full((n, n), 1.0 / n)):  # noqa: N806
        c = 1.0 - T
        lhs = c[:, None, :]  # [x, y, z]
        rhs = np.exp(eps)[:, :, None] * c[None, :, :]
        assert np.all(lhs <= rhs * (1 + 1e-12) + 1e-15)
    bad = np.eye(n) * 0.9 + 0.1 / n  # nearly the truth: not private at 0.7 per unit
    c = 1.0 - bad
    assert not np.all(c[:, None, :] <= np.exp(eps)[:, :, None] * c[None, :, :] + 1e-15)
    mix = rng.dirichlet(np.ones(3))  # a convex mixture of private channels is private: holds too
    T = mix[0] * opt + mix[1] * expo + mix[2] / n  # noqa: N806
    c = 1.0 - T
    assert np.all(c[:, None, :] <= np.exp(eps)[:, :, None] * c[None, :, :] * (1 + 1e-12) + 1e-15)


@pytest.mark.parametrize("complement", [False, True])
def test_bound_with_complementary_rows_below_the_plain_lp(complement: bool) -> None:
    """At every stop (1, 2, 4 rounds, solved out) the bound is at most the plain LP optimum, for
    both row families; solved out, both meet it."""
    pts = _grid(4)
    d = cdist(pts, pts)
    eps = 0.5 * d
    n = len(pts)
    opt = solve_dx_lp(eps, d, method="direct").lp_objective
    w = np.full(n, 1.0 / n)
    for rounds in (1, 2, 4, 100_000):
        r = solve_by_columns(d, eps, None, None, None, row_weight=w, gap=1e-9,
                             max_rounds=rounds, complement=complement)
        assert r.lower_bound <= opt * (1 + 1e-9)
    assert r.lower_bound == pytest.approx(opt, rel=1e-6)


@pytest.mark.parametrize("complement", [False, True])
def test_pricer_bound_is_below_the_column_minimum_and_kept_duals_stay_valid(
        complement: bool) -> None:
    """One output's pricing LP against scipy with every row at once: its bound is at most the
    true minimum; the duals kept from that solve, applied at other costs (a stopped LP's
    fallback), bound the new minimum too and are exact at the old costs."""
    pts = _grid(4)
    n = len(pts)
    eps = 0.6 * cdist(pts, pts)
    z = 5
    pr = _Pricer(n, None, None, None, eps, np.array([z]), 3, 1e-10, complement=complement)
    rng = np.random.default_rng(1)
    g = cdist(pts, pts)[:, z] / n - rng.uniform(0.5, 2.5, n) / n
    v, lb = pr.solve(z, g)
    true = _column_min(g, eps, complement)
    assert v is not None and lb <= true + 1e-12
    assert lb == pytest.approx(true, rel=1e-6, abs=1e-12)
    w = pr.last_w[z]
    assert pr.bound(z, g, w) == pytest.approx(lb, rel=1e-9, abs=1e-15)
    for k in range(5):
        g2 = g + rng.normal(0, 0.3 / n, n) * (k + 1)
        kept = pr.bound(z, g2, w)
        assert kept <= _column_min(g2, eps, complement) + 1e-12
        assert pr._weak(z, g2) == pytest.approx(max(kept, float(np.minimum(g2, 0).sum())))


def test_complementary_rows_tighten_the_column_minimum() -> None:
    """The complementary rows cut off columns near 1 that no private channel has: with costs
    that reward a large entry, the minimum with them is strictly higher (a stronger bound)."""
    pts = _grid(3)
    n = len(pts)
    eps = 0.5 * cdist(pts, pts)
    g = np.full(n, 0.1)
    g[4] = -1.0  # one entry rewarded: v[4] = 1 costs the plain rows little
    plain = _column_min(g, eps, complement=False)
    tight = _column_min(g, eps, complement=True)
    assert tight > plain + 1e-3
    pr = _Pricer(n, None, None, None, eps, np.array([4]), 2, 1e-10, complement=True)
    v, lb = pr.solve(4, g)
    assert lb <= tight + 1e-12 and lb == pytest.approx(tight, rel=1e-6)


@pytest.mark.parametrize("cap", [0.6, 1.2, None])
def test_capped_pricing_lps_keep_a_valid_bound_and_a_private_channel(cap: float | None) -> None:
    """Pairs above the cap stay out of the pricing LPs (a relaxation): the bound is at most the
    plain LP's optimum at every cap, even one that keeps only the nearest pairs (0.6 nats: the
    4 neighbours and the diagonals at 0.5 per unit), the channel is private on every pair, and
    the default cap (8 nats here) loses nothing measurable against the plain LP."""
    pts = _grid(5)
    d = cdist(pts, pts)
    eps = 0.5 * d
    n = len(pts)
    opt = solve_dx_lp(eps, d, method="direct").lp_objective
    assert dense_cap(eps) == 8.0
    r = solve_by_columns(d, eps, None, None, None, row_weight=np.full(n, 1.0 / n), gap=1e-9,
                         cap=cap)
    assert r.lower_bound <= opt * (1 + 1e-9)
    assert r.objective >= opt * (1 - 1e-9)
    T = r.T / r.T.sum(axis=1, keepdims=True)  # noqa: N806
    for x in range(n):
        assert np.all(T[x][None, :] <= np.exp(eps[x])[:, None] * T * (1 + 1e-9) + 1e-15)
    if cap is None:
        assert r.lower_bound == pytest.approx(opt, rel=1e-6)
    if cap == 0.6:  # the relaxation is strictly weaker there: the cap does leave pairs out
        assert r.lower_bound < opt * (1 - 1e-6)


def test_default_cap_keeps_the_pairs_of_an_isolated_point() -> None:
    """A grid plus one point 20 units away (10 nats to its nearest neighbour): a cap of 8 nats
    leaves that point without rows and the bound falls below the optimum (still valid);
    the default cap covers its nearest pairs and the bound meets the plain LP's optimum."""
    pts = np.vstack([_grid(4), [[23.0, 3.0]]])
    d = cdist(pts, pts)
    eps = 0.5 * d
    n = len(pts)
    opt = solve_dx_lp(eps, d, method="direct").lp_objective
    assert dense_cap(eps) == 16.0  # 4 x 10 nats, at most DENSE_MAX
    w = np.full(n, 1.0 / n)
    low = solve_by_columns(d, eps, None, None, None, row_weight=w, gap=1e-9, cap=8.0)
    ok = solve_by_columns(d, eps, None, None, None, row_weight=w, gap=1e-9)
    assert low.lower_bound <= opt * (1 + 1e-9) and ok.lower_bound <= opt * (1 + 1e-9)
    assert low.lower_bound < opt * (1 - 1e-4)
    assert ok.lower_bound == pytest.approx(opt, rel=1e-6)


def test_tightened_duals_give_a_valid_bound_and_remove_most_of_the_dual_error() -> None:
    """Duals with relative errors of 1e-6 (HiGHS's are about 1e-8 of values up to 9e6 times
    larger) on rows with coefficients up to exp(16): the bound from them falls below the exact
    optimum; lowering the rows into each negative reduced cost removes most of that loss, and the
    result is still at most the optimum (scipy's HiGHS with every row at once)."""
    from solvers.channels.column_lagrangian import _dual_bound, _tighten_duals

    rng = np.random.default_rng(0)
    n = 14
    pts = rng.uniform(0, 4, size=(n, 2))
    eps = 4.0 * cdist(pts, pts)
    x, y = np.nonzero(~np.eye(n, dtype=bool) & (eps <= 16))
    eb = np.exp(eps[x, y])
    assert eb.max() > 1e6
    a = np.zeros((x.size, n))
    a[np.arange(x.size), x] = 1.0
    a[np.arange(x.size), y] -= eb
    for shift in (0.0, 0.5):
        g = rng.normal(size=n) + shift
        res = linprog(g, A_ub=a, b_ub=np.zeros(x.size), bounds=(0, 1), method="highs")
        w = -res.ineqlin.marginals
        assert _dual_bound(g, [(x, y, eb, False, w)]) == pytest.approx(res.fun, rel=1e-9)
        noisy = w * (1 + 1e-6 * rng.normal(size=w.size))
        before = _dual_bound(g, [(x, y, eb, False, noisy)])
        after = _dual_bound(g, _tighten_duals(g, [(x, y, eb, False, noisy.copy())]))
        assert before < res.fun - 1e-6
        assert after <= res.fun + 1e-12
        assert res.fun - after < 0.1 * (res.fun - before)


def _cities(n: int, per_median: float) -> tuple[np.ndarray, np.ndarray]:
    """The n most populous shipped lower-48 US cities in km, distances and budgets of
    ``per_median`` over the median nearest-neighbour distance (isolated western cities get
    budgets of tens of nats to their nearest neighbour)."""
    from dprivacy.data import load_us_cities

    c = load_us_cities()
    c = c[~c.state.isin(["AK", "HI", "PR"])].nlargest(n, "population")
    lat, lon = np.radians(c.latitude.to_numpy()), np.radians(c.longitude.to_numpy())
    pts = 6371.0 * np.column_stack([(lon - lon.mean()) * np.cos(lat.mean()), lat - lat.mean()])
    d = cdist(pts, pts)
    nn = np.where(np.eye(n, dtype=bool), np.inf, d).min(axis=1)
    return d, per_median / float(np.median(nn)) * d


def test_us_cities_with_large_budgets_reach_a_small_gap() -> None:
    """100 US cities at 3 nats per median nearest-neighbour distance, uniform prior: within 12
    rounds the gap is at most 0.1 % and the channel is private on every pair. (Before the dense
    cap of 16 nats and the tightened duals: a bound of 1.17 against a loss of 4.13 after 10
    and after 20 rounds.)"""
    d, eps = _cities(100, 3.0)
    r = solve_dx_lp(eps, d, method="lagrangian", gap=1e-3, max_rounds=12)
    assert r.info["status"] == "Gap reached"
    assert 0 < r.lower_bound <= r.expected_loss <= r.lower_bound * (1 + 2e-3)
    T = np.array(r.T)  # noqa: N806
    for x in range(len(d)):
        assert np.all(T[x][None, :] <= np.exp(eps[x])[:, None] * T * (1 + 1e-9) + 1e-15)


def test_a_first_bound_below_zero_does_not_become_the_centre() -> None:
    """150 US cities at 6 nats per median nearest-neighbour distance: the first multipliers
    priced give a bound far below 0 (isolated cities priced high by the first master). The
    bound of u = 0 (0: the cost is nonnegative) is better, so it stays the centre: after one
    pricing round the reported bound is 0 and the multipliers returned are 0; the solve then
    reaches a gap of 1e-4."""
    d, eps = _cities(150, 6.0)
    n = len(d)
    w = np.full(n, 1.0 / n)
    one = solve_by_columns(d, eps, None, None, None, row_weight=w, gap=1e-4, max_rounds=2)
    assert one.history[1][2] < -100.0  # the first priced bound
    assert one.lower_bound == 0.0 and one.duals is not None and not one.duals.any()
    full = solve_by_columns(d, eps, None, None, None, row_weight=w, gap=1e-4, max_rounds=30)
    assert 0 < full.lower_bound <= full.objective <= full.lower_bound * (1 + 1e-4)
