"""The optimal randomiser's symmetric reduction and warm starts: the symmetric channel is built
exactly symmetric, the group check equals the full all-pairs check, the reduced LP's bound is
valid against the unreduced plain LP, warm starts from a smaller grid keep the bound valid and the
result private, and the time limit is kept inside a pricing round."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from solvers.channels.column_lagrangian import expand, solve_by_columns
from solvers.channels.optimal import solve_dx_lp
from solvers.channels.separation import check_all_pairs
from solvers.channels.symmetry import invariant_group, is_invariant, orbits, square_symmetries
from solvers.channels.warm_start import grid_columns, grid_duals, grid_index_map


def _grid(side: int) -> np.ndarray:
    return np.array([(i, j) for i in range(side) for j in range(side)], dtype=float)


def _pairs_ok(T: np.ndarray, eps: np.ndarray) -> bool:  # noqa: N803
    """Every (x, x', z) directly, independent of the solvers and of the checks under test."""
    for x in range(T.shape[0]):
        if np.any(T[x][None, :] > np.exp(eps[x])[:, None] * T * (1 + 1e-9) + 1e-15):
            return False
    return True


def _group(side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    P = np.stack(square_symmetries(_grid(side)))  # noqa: N806
    orb = orbits(list(P), side * side)
    reps = np.unique(orb, return_index=True)[1]
    return P, orb, reps


@pytest.mark.parametrize("side", [4, 5])
def test_expand_is_exactly_symmetric_and_the_group_average(side: int) -> None:
    P, orb, reps = _group(side)  # noqa: N806
    n = side * side
    W = np.random.default_rng(side).random((n, reps.size))  # noqa: N806
    T = expand(W, P, reps)  # noqa: N806
    for p in P:  # exactly, entry by entry (no rounding difference between images)
        assert np.array_equal(T[np.ix_(p, p)], T)
    ref = np.zeros((n, n))  # the plain group average: sum over g of W moved by g
    stab = len(P) / np.bincount(orb)[orb[reps]]
    for p in P:
        ref[np.ix_(p, p[reps])] += W / stab
    assert np.allclose(T, ref, rtol=1e-13, atol=0)


def test_group_check_equals_the_full_check() -> None:
    side = 5
    pts = _grid(side)
    eps = 0.5 * cdist(pts, pts)
    P, orb, reps = _group(side)  # noqa: N806
    mix = np.random.default_rng(0).random(reps.size)
    good = expand(np.exp(-eps[:, reps]) * mix, P, reps)  # cones at the budget's own rate: private
    bad = expand(np.exp(-1.5 * eps[:, reps]) * mix, P, reps)  # falls too fast: not private
    group = square_symmetries(pts)
    for T, want in ((good, True), (bad, False)):  # noqa: N806
        full = check_all_pairs(T, eps)
        red = check_all_pairs(T, eps, group=group)
        assert full[0] == red[0] == want == _pairs_ok(T, eps)
        assert red[1] == pytest.approx(full[1], rel=1e-12)
    # a T that is not symmetric: the group is not used, so a violation in any column is found
    odd = good.copy()
    odd[3, 7] *= 50.0
    assert not check_all_pairs(odd, eps, group=group)[0] and not _pairs_ok(odd, eps)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
def test_reduced_bound_below_the_unreduced_lp_and_channel_private(metric: str) -> None:
    """The orbit-reduced decomposition (one output and one row sum per orbit, duals averaged on
    orbits) against the plain LP with every constraint and no symmetry: its bound never exceeds
    the plain optimum at any stop, and meets it when solved out."""
    pts = _grid(4)
    d = cdist(pts, pts)
    eps = 0.7 * cdist(pts, pts, "cityblock" if metric == "manhattan" else "euclidean")
    plain = solve_dx_lp(eps, d, None, method="direct")
    for rounds in (1, 3, 100_000):
        r = solve_dx_lp(eps, d, None, gap=1e-9, max_rounds=rounds,
                        symmetries=square_symmetries(pts))
        assert r.info["group_order"] == 8
        assert r.lower_bound <= plain.lp_objective * (1 + 1e-9)
        assert _pairs_ok(r.T, eps) and np.allclose(r.T.sum(axis=1), 1.0)
        for p in square_symmetries(pts):  # the returned channel is exactly symmetric
            assert np.array_equal(r.T[np.ix_(p, p)], r.T)
    assert r.expected_loss == pytest.approx(plain.expected_loss, rel=1e-7)


def test_grid_maps() -> None:
    assert grid_index_map(5, 9).tolist() == [0, 1, 2, 2, 2, 2, 2, 3, 4]
    with pytest.raises(ValueError):
        grid_index_map(6, 5)
    u = np.arange(16.0)
    big = grid_duals(u, 4, 6).reshape(6, 6) * 36 / 16  # (uniform priors: scaled by 16 / 36)
    k = [0, 1, 2, 2, 2, 3]
    assert np.allclose(big, u.reshape(4, 4)[np.ix_(k, k)], rtol=1e-14)
    col = grid_columns(np.arange(256.0).reshape(16, 16), 4, 6)(5 * 6 + 5).reshape(6, 6)
    assert col[2:, 2:].ravel().tolist() == np.arange(256.0).reshape(16, 16)[:, 15].tolist()
    assert not col[:2].any() and not col[:, :2].any()


@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
def test_warm_start_from_a_smaller_grid(metric: str) -> None:
    """Multipliers and columns of a 4 x 4 solution moved onto 7 x 7: the bound from the first
    round on is valid (below the plain LP), the result is private and optimal when solved out."""
    def problem(side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pts = _grid(side)
        return pts, 0.6 * cdist(pts, pts, "cityblock" if metric == "manhattan" else "euclidean"), \
            cdist(pts, pts)

    p4, e4, d4 = problem(4)
    small = solve_dx_lp(e4, d4, None, gap=1e-9, symmetries=square_symmetries(p4))
    p7, e7, d7 = problem(7)
    plain = solve_dx_lp(e7, d7, None, method="direct")
    sd, sc = grid_duals(small.info["duals"], 4, 7), grid_columns(small.T, 4, 7)
    for rounds in (1, 100_000):
        r = solve_dx_lp(e7, d7, None, gap=1e-9, max_rounds=rounds, start_duals=sd,
                        start_columns=sc, symmetries=square_symmetries(p7))
        assert np.isfinite(r.lower_bound) or rounds == 1
        assert r.lower_bound <= plain.lp_objective * (1 + 1e-9)
        assert _pairs_ok(r.T, e7)
    assert r.expected_loss == pytest.approx(plain.expected_loss, rel=1e-6)
    # a start that is not symmetric is averaged on the orbits: the bound stays valid
    noisy = sd * np.random.default_rng(1).uniform(0.5, 1.5, sd.size)
    r = solve_dx_lp(e7, d7, None, gap=1e-9, max_rounds=2, start_duals=noisy,
                    symmetries=square_symmetries(p7))
    assert r.lower_bound <= plain.lp_objective * (1 + 1e-9)


def test_row_weight_is_the_prior_times_the_loss() -> None:
    pts = _grid(4)
    d = cdist(pts, pts)
    eps = 0.5 * d
    pi = np.random.default_rng(2).random(16)
    pi /= pi.sum()
    a = solve_by_columns(pi[:, None] * d, eps, None, None, None, gap=1e-9)
    b = solve_by_columns(d, eps, None, None, None, gap=1e-9, row_weight=pi)
    assert a.objective == pytest.approx(b.objective, rel=1e-9)
    assert a.lower_bound == pytest.approx(b.lower_bound, rel=1e-6)


def test_invariant_group_blockwise_and_with_vectors() -> None:
    pts = _grid(5)
    d = cdist(pts, pts)
    sq = square_symmetries(pts)
    assert len(invariant_group(sq, [d], block=3)) == 8
    w = np.ones(25)
    w[0] = 2.0  # a corner: all but the identity and the reflection through the diagonal break
    assert len(invariant_group(sq, [d], [w], block=7)) == 2
    assert not is_invariant(sq[1], [d + np.diag(np.arange(25.0))], block=4)


def test_time_limit_is_kept_inside_a_round() -> None:
    """A limit shorter than one round: the round stops pricing at the limit, the outputs not priced
    get the weak bound sum(min(g, 0)), so the result comes back at once with a valid bound."""
    pts = _grid(9)
    d = cdist(pts, pts)
    eps = 0.5 * d
    t0 = time.perf_counter()
    r = solve_dx_lp(eps, d, None, gap=1e-9, time_limit=1e-3, symmetries=square_symmetries(pts))
    took = time.perf_counter() - t0
    full = solve_dx_lp(eps, d, None, gap=1e-3, symmetries=square_symmetries(pts))
    assert r.info["status"] == "Time limit reached" and np.isfinite(r.lower_bound)
    assert r.lower_bound <= full.lower_bound + 1e-9 and r.lower_bound <= full.expected_loss
    assert _pairs_ok(r.T, eps)
    assert took < max(5.0, 0.5 * full.solve_seconds)
