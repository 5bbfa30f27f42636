"""solvers.strategy.rowspace: strategies A = M Q' in the row space of a few dense queries."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from solvers import ConstraintSet, design
from solvers.strategy import materialise, optimize_strategy
from solvers.strategy.few_queries import rowspace_strategy
from solvers.strategy.rowspace import RowSpace, dual_basis_start, l2_relaxation, smooth_max
from tests.solvers.test_strategy import brute_ratio, known_total_error


def instance(seed: int, N: int = 24, m: int = 4):  # noqa: N803
    rng = np.random.default_rng(seed)
    P = rng.uniform(0, 10, (N, 2))
    eps = 0.1 * cdist(P, P)
    F = rng.random((m, N))
    I, J = np.triu_indices(N, 1)  # noqa: E741
    return P, eps, F, I, J, eps[I, J]


def test_error_and_constraint_of_the_reduced_problem_match_the_strategy():
    _, eps, F, I, J, e = instance(0)  # noqa: E741
    rs = RowSpace.build(F, I, J, e)
    M = np.random.default_rng(1).standard_normal((6, rs.r))
    A = rs.strategy(M)
    assert np.allclose(A.sum(axis=1), 0.0)  # rows orthogonal to 1: the total is known
    assert rs.c(M) == pytest.approx(brute_ratio(A, eps), rel=1e-12)
    assert 2 * rs.f_grad(M)[0] == pytest.approx(known_total_error(F, A), rel=1e-9)


def test_gradients_match_finite_differences():
    _, _, F, I, J, e = instance(2)  # noqa: E741
    rs = RowSpace.build(F, I, J, e)
    rng = np.random.default_rng(3)
    M = rng.standard_normal((5, rs.r))
    E = rng.standard_normal(M.shape)
    h = 1e-6
    f, g = rs.f_grad(M)
    fd = (rs.f_grad(M + h * E)[0] - rs.f_grad(M - h * E)[0]) / (2 * h)
    assert fd == pytest.approx(float(np.sum(g * E)), rel=1e-5)
    W = rs.W / np.abs(M @ rs.W).sum(axis=0).max()
    val, gs = smooth_max(M, W, 40.0, 1e-4)
    assert val >= np.abs(M @ W).sum(axis=0).max() - 1e-3  # >= the max up to the smoothing
    fd = (smooth_max(M + h * E, W, 40.0, 1e-4)[0] - smooth_max(M - h * E, W, 40.0, 1e-4)[0]) / (2 * h)
    assert fd == pytest.approx(float(np.sum(gs * E)), rel=1e-4)


@pytest.mark.parametrize("seed", [4, 5])
def test_rowspace_strategy_is_feasible_by_brute_force_and_beats_the_design(seed):
    _, eps, F, I, J, e = instance(seed)  # noqa: E741
    cs = ConstraintSet.dense(eps)
    wb = design(F, cs, method="exact")
    A, rep = rowspace_strategy(F, I, J, e, u=wb.u, rotations=2, dual_starts=1)
    A = A / brute_ratio(A, eps)
    assert brute_ratio(A, eps) <= 1 + 1e-9
    err = known_total_error(F, A)
    assert err == pytest.approx(rep["error"], rel=1e-6)
    # the (w, beta) design is one of the starts: never worse than it
    design_err = float(np.sum(2 / wb.beta**2))
    assert err <= design_err * (1 + 1e-9)
    assert {s["start"] for s in rep["starts"]} >= {"design", "l2-rotation-0", "dual-basis-0"}
    for s in rep["starts"]:  # polishing never returns worse than its start
        assert s["error"] <= s.get("start_error", np.inf) * (1 + 1e-9)


def test_l2_relaxation_is_feasible_and_a_dual_basis_makes_its_pairs_1_sparse():
    _, _, F, I, J, e = instance(6)  # noqa: E741
    rs = RowSpace.build(F, I, J, e)
    relax = l2_relaxation(rs)
    assert relax is not None
    Z, bound = relax
    q = np.sum(rs.W * (Z @ rs.W), axis=0)
    assert q.max() <= 1 + 1e-9
    B = np.argsort(-q)[:rs.r]
    M = dual_basis_start(rs, B)
    assert M is not None
    Y = M @ rs.W[:, B]
    assert np.count_nonzero(np.abs(Y) > 1e-9 * np.abs(Y).max()) == rs.r  # one row per pair
    assert rs.c(M) <= 1 + 1e-6
    # the bound holds for the l2-feasible Z itself and for every l1 strategy found
    assert 0 < bound <= 2 * float(np.trace(rs.RtR @ np.linalg.inv(Z))) * (1 + 1e-9)
    assert bound <= rs.score(M) * (1 + 1e-9)


def test_optimize_strategy_uses_the_rowspace_start_for_few_dense_queries():
    P, eps, F, *_ = instance(7, N=30, m=5)
    cs = ConstraintSet.dense(eps)
    wb = design(F, cs, method="exact")
    res = optimize_strategy(F, cs, u=wb.u, coords=P, rounds=2)
    assert "rowspace" in res.report["starts"]
    A = materialise(res.C, res.basis)
    assert brute_ratio(A, eps) <= 1 + 1e-9
    assert res.error == pytest.approx(known_total_error(F, A), rel=1e-7)
    assert res.error <= min(v for k, v in res.report["starts"].items()) * (1 + 1e-9)
    assert res.error < float(np.sum(2 / wb.beta**2))
    without = optimize_strategy(F, cs, u=wb.u, coords=P, rounds=2,
                                starts=("identity", "design", "hierarchical"))
    assert "rowspace" not in without.report["starts"]


def test_pair_rows_merge_the_demanding_pair_and_stay_feasible():
    from solvers.strategy.pairrows import demanding_pairs, merged_strategy

    _, eps, F, I, J, e = instance(8)  # noqa: E741
    Fc = F - F.mean(axis=1, keepdims=True)
    ded = demanding_pairs(Fc, I, J, e, 3)
    ends = np.r_[I[ded], J[ded]]
    assert ded.size == 3 and np.unique(ends).size == 6  # no element in two pair rows
    y2 = np.sum((Fc[:, I] - Fc[:, J]) ** 2, axis=0) / e**2
    assert ded[0] == int(np.argmax(y2))
    got = merged_strategy(F, I, J, e, 2)
    assert got is not None
    A, err = got
    A = A / max(brute_ratio(A, eps), 1.0)
    assert brute_ratio(A, eps) <= 1 + 1e-9
    assert known_total_error(F, A) == pytest.approx(err, rel=1e-6)
    _, rep = rowspace_strategy(F, I, J, e, rotations=1, dual_starts=1, merges=(1,))
    names = [s["start"] for s in rep["starts"]]
    assert "pair-rows-1" in names
    assert rep["error"] == pytest.approx(min(s["error"] for s in rep["starts"]))
