"""The user-facing optimal randomiser's all-pairs check (one output per orbit of the square's
maps that leave the channel exactly unchanged) against check_dx over every triple: the same
outcome and worst ratio on private, broken, asymmetric and partly unconstrained channels."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import dprivacy as dp
from dprivacy.local import dx_randomiser
from dprivacy.local.cost import check_dx
from solvers.channels.column_lagrangian import expand
from solvers.channels.symmetry import invariant_group, orbits, square_symmetries


def _grid(side: int) -> np.ndarray:
    return np.array([(i, j) for i in range(side) for j in range(side)], dtype=float)


def _same(T: np.ndarray, eps: np.ndarray, group: list[np.ndarray] | None) -> bool:  # noqa: N803
    full = check_dx(T, eps, rtol=1e-9)
    fast = dx_randomiser._check_all_pairs(T, eps, group)
    assert fast.ok == full.ok
    assert fast.ratio == pytest.approx(full.ratio, rel=1e-12, abs=0)
    # the reported pair is one of the worst ones of the full check (maybe another of its orbit)
    x, y = fast.worst
    assert fast.eps == eps[x, y]
    if full.ratio > 0 and np.isfinite(full.ratio):
        assert fast.loss / fast.eps == pytest.approx(full.ratio, rel=1e-12)
    return fast.ok


def _symmetric(side: int, rate: float, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """An exactly symmetric row-stochastic channel of cones exp(-rate d) (private at rate or
    more per unit, not below)."""
    pts = _grid(side)
    group = square_symmetries(pts)
    P = np.stack(group)  # noqa: N806
    reps = np.unique(orbits(group, side * side), return_index=True)[1]
    d = cdist(pts, pts)
    mix = np.random.default_rng(seed).uniform(0.5, 1.5, reps.size)
    T = expand(np.exp(-rate * d[:, reps]) * mix, P, reps)  # noqa: N806
    orb = orbits(group, side * side)
    first = np.unique(orb, return_index=True)[1]
    T /= T.sum(axis=1)[first[orb]][:, None]  # one divisor per orbit of rows: stays exact
    assert len(invariant_group(group, [T])) == 8  # (so the checks below do use the group)
    return T, group


@pytest.mark.parametrize("seed", range(3))
def test_group_check_equals_check_dx(seed: int) -> None:
    side = 5
    d = cdist(_grid(side), _grid(side))
    T, group = _symmetric(side, 0.4, seed)  # noqa: N806
    assert len(invariant_group(group, [T, 0.9 * d])) == 8
    assert _same(T, 0.9 * d, group)  # cones at 0.4 per unit with row sums: within 0.9
    assert not _same(T, 0.3 * d, group)  # below their own rate: broken
    odd = T.copy()  # not symmetric any more: every output is checked, a lone violation found
    odd[3, 7] *= 40.0
    odd /= odd.sum(axis=1, keepdims=True)
    assert not _same(odd, 0.9 * d, group)
    assert _same(T, 0.9 * d, None)


def test_group_check_with_unconstrained_pairs_and_zeros() -> None:
    """inf budgets (no constraint) and outputs a row never reports, as check_dx treats them."""
    side = 4
    d = cdist(_grid(side), _grid(side))
    T, group = _symmetric(side, 0.5, 0)  # noqa: N806
    eps = 1.2 * d
    eps[0, 15] = eps[15, 0] = np.inf  # a pair of opposite corners left free (symmetric too)
    eps[3, 12] = eps[12, 3] = np.inf
    assert _same(T, eps, group)
    Z = T.copy()  # noqa: N806
    Z[0, 5] = 0.0  # a zero where the others report: a break at every finite budget of row 0
    Z /= Z.sum(axis=1, keepdims=True)
    assert not _same(Z, eps, group)


def test_optimal_randomiser_uses_the_group_check() -> None:
    pts = _grid(6)
    r = dx_randomiser.optimal_randomiser(dp.Universe.from_points(pts),
                                         dp.metrics.Euclidean(eps_per_unit=0.8), gap=1e-6)
    eps = 0.8 * cdist(pts, pts)
    full = np.zeros((36, 36))
    full[:, r.randomiser.outputs] = r.randomiser.matrix
    ref = check_dx(r.lp.T, eps, rtol=1e-9)
    assert len(invariant_group(square_symmetries(pts), [r.lp.T, eps])) == 8  # the group is used
    assert r.check.ok and ref.ok and r.checked == "all pairs"
    assert r.check.ratio == pytest.approx(ref.ratio, rel=1e-12)
