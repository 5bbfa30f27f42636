"""solvers.strategy.marginals: the residual-algebra closed forms against explicit matrices, and the
l2-relaxation bound (dual certificate, zero gap, validity against real strategies)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.linalg import null_space

from solvers import ConstraintSet
from solvers.strategy import marginals as mg
from solvers.strategy import materialise, optimize_strategy
from solvers.strategy.bound import best_bound
from solvers.strategy.objective import gram


def product(domains, eps):
    """codes, the Hamming budget matrix sum_l eps_l 1[x_l != y_l], and the per-subset marginals."""
    codes = np.array(list(itertools.product(*[range(n) for n in domains])))
    E = ((codes[:, None, :] != codes[None, :, :]) * np.asarray(eps)[None, None, :]).sum(axis=2)
    np.fill_diagonal(E, np.inf)
    blocks = {}
    for S in mg.subsets(len(domains))[1:]:
        _, g = np.unique(codes[:, list(S)], axis=0, return_inverse=True)
        M = np.zeros((int(g.max()) + 1, len(codes)))
        M[np.ravel(g), np.arange(len(codes))] = 1.0
        blocks[S] = M
    return codes, E, blocks


def workload(blocks, order):
    return np.vstack([M for S, M in blocks.items() if len(S) == order])


def brute_ratio(A, E):
    N = A.shape[1]
    return max(float(np.abs(A[:, i] - A[:, j]).sum()) / E[i, j]
               for i in range(N) for j in range(i + 1, N))


def known_total_error(F, A):
    Q = null_space(np.ones((1, F.shape[1])))
    R = np.linalg.pinv(A @ Q, rcond=1e-10)
    assert np.allclose(F @ Q @ R @ A @ Q, F @ Q, atol=1e-8)  # every query answerable
    return 2.0 * float(np.sum((F @ Q @ R) ** 2))


DOM, EPS = (3, 4, 2), (1.0, 2.0, 0.5)


def test_closed_forms_match_explicit_matrices():
    rng = np.random.default_rng(0)
    _, E, blocks = product(DOM, EPS)
    for order in (1, 2):
        F = workload(blocks, order)
        lam = mg.workload_spectrum(DOM, order)
        # the workload Gram is sum_S lam_S P_S: its trace is sum lam_S d_S
        assert np.trace(F.T @ F) == pytest.approx(sum(v * d for v, d in lam.values()))
        for _ in range(3):
            theta = {S: float(rng.uniform(0.1, 1.0)) for S in blocks}
            A = np.vstack([t * blocks[S] for S, t in theta.items()])
            assert mg.marginal_cost(DOM, theta, EPS) == pytest.approx(brute_ratio(A, E))
            c = brute_ratio(A, E)
            assert mg.marginal_strategy_error(DOM, order, theta, EPS) == \
                pytest.approx(known_total_error(F, A / c), rel=1e-9)


def test_best_weighted_marginals_on_the_benchmark_instance():
    theta, err = mg.best_weighted_marginals((8, 8, 8), 2, (1, 1, 1))
    # closed form: the 2-way marginals at weight 1/4 (a move hits 2 marginals, 2 cells each);
    # mu_1 = 1, mu_2 = 1/2, error 2 (3 * 16 * 7 / 1 + 3 * 8 * 49 / (1/2)) = 5376
    assert err == pytest.approx(2 * (3 * 16 * 7 / 1 + 3 * 8 * 49 / 0.5), rel=1e-9)
    assert all(abs(theta[S] - 0.25) < 1e-4 for S in [(0, 1), (0, 2), (1, 2)])
    rng = np.random.default_rng(1)
    for _ in range(20):  # never worse than random weights
        th = {S: float(rng.uniform(0, 1)) for S in mg.subsets(3)[1:]}
        assert err <= mg.marginal_strategy_error((8, 8, 8), 2, th, (1, 1, 1)) * (1 + 1e-9)


def test_l2_bound_has_zero_gap_and_a_feasible_relaxed_gram():
    for dom, eps, order in [((8, 8, 8), (1, 1, 1), 2), (DOM, EPS, 2), ((5, 3), (1.0, 0.3), 1)]:
        lb, nu = mg.l2_bound(dom, order, eps)
        assert mg.l2_dual(dom, order, eps, nu) == pytest.approx(lb)
        mu = mg.l2_primal(dom, order, eps, nu)
        q = mg.edge_weights(dom)
        col = {S: j for j, S in enumerate(mg.subsets(len(dom)))}
        for a in range(len(dom)):  # the relaxed edge constraints hold (to the optimiser's tolerance)
            used = sum(q[a, col[S]] * m for S, m in mu.items())
            assert used <= eps[a] ** 2 * (1 + 1e-4)
        primal = mg.residual_error(mg.workload_spectrum(dom, order), mu)
        assert primal == pytest.approx(lb, rel=1e-4)  # zero duality gap
        # any other dual point gives a smaller (still valid) bound
        assert mg.l2_dual(dom, order, eps, nu * 1.3) <= lb + 1e-9
    lb8, _ = mg.l2_bound((8, 8, 8), 2, (1, 1, 1))
    assert lb8 == pytest.approx(2 * (3 * 16 * 7 / 4 + 3 * 8 * 49 / 2), rel=1e-6)  # mu = 4, 2


def test_l2_bound_is_below_every_strategy_and_above_the_uniform_weight_bound():
    codes, E, blocks = product(DOM, EPS)
    F = workload(blocks, 2)
    lb, _ = mg.l2_bound(DOM, 2, EPS)
    rng = np.random.default_rng(2)
    N = len(codes)
    cands = [np.eye(N), F, np.vstack(list(blocks.values()))]
    cands += [rng.standard_normal((N, N)) for _ in range(3)]
    for A in cands:
        assert known_total_error(F, A / brute_ratio(A, E)) >= lb * (1 - 1e-9)
    D = (codes[:, None, :] != codes[None, :, :]).sum(axis=2)  # noqa: N806
    I, J = np.nonzero(np.triu(D == 1, 1))  # noqa: N806, E741  (the metric's edges)
    res = optimize_strategy(F, ConstraintSet.edges(I, J, E[I, J], N), codes=codes, time_limit=20,
                            rounds=2)
    assert res.error >= lb * (1 - 1e-9)
    assert brute_ratio(materialise(res.C, res.basis), E) <= 1 + 1e-9  # edges suffice: all pairs hold
    I, J = np.nonzero(np.triu(np.isfinite(E), 1))  # noqa: N806, E741
    Fc = F - F.mean(axis=1, keepdims=True)
    assert lb >= best_bound(gram(Fc, True), I, J, E[I, J]) * (1 - 1e-9)


def test_conditional_line_factor_raises_the_bound_monotonically():
    base, _ = mg.l2_bound((8, 8, 8), 2, (1, 1, 1))
    cond, _ = mg.l2_bound((8, 8, 8), 2, (1, 1, 1), line_factor=[16 / 28] * 3)
    assert cond == pytest.approx(base * 28 / 16, rel=1e-6)  # the budget scales, the bound inversely


def test_bad_domains_are_refused():
    from solvers.errors import SolverError

    with pytest.raises(SolverError):
        mg.workload_spectrum((1, 4), 1)
    with pytest.raises(SolverError):
        mg.workload_spectrum((3, 4), 3)
