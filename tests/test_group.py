"""Group privacy: the earth-mover bound W_d(x, x') (POT), cross-checked against transport LPs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

import dprivacy as dp
from dprivacy.errors import ValidationError
from dprivacy.group import group_privacy_loss


def full_transport(a: np.ndarray, b: np.ndarray, eps: np.ndarray) -> float:
    """Independent formulation: the N x N transport LP without cancelling common mass."""
    n = len(a)
    A = np.zeros((2 * n, n * n))
    for i in range(n):
        A[i, i * n:(i + 1) * n] = 1.0
        A[n + i, i::n] = 1.0
    res = linprog(eps.ravel(), A_eq=A, b_eq=np.concatenate([a, b]), bounds=(0, None), method="highs")
    assert res.status == 0
    return float(res.fun)


def differing_lp(a: np.ndarray, b: np.ndarray, eps: np.ndarray) -> float:
    """The LP the library used before POT: HiGHS on the differing elements, finite pairs only."""
    common = np.minimum(a, b)
    src, dst = np.flatnonzero(a - common > 0), np.flatnonzero(b - common > 0)
    if src.size == 0:
        return 0.0
    cost = eps[np.ix_(src, dst)]
    rows, cols = np.nonzero(np.isfinite(cost))
    k, n_var = len(src), rows.size
    A = np.zeros((k + len(dst), n_var))
    A[rows, np.arange(n_var)] = 1.0
    A[k + cols, np.arange(n_var)] = 1.0
    res = linprog(cost[rows, cols], A_eq=A, b_eq=np.concatenate([(a - common)[src], (b - common)[dst]]),
                  bounds=(0, None), method="highs")
    if res.status == 2:
        return float("inf")
    assert res.status == 0
    return float(res.fun)


histograms = st.integers(3, 8).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 4), min_size=n, max_size=n), st.integers(0, 2**31 - 1)))


@settings(max_examples=30, deadline=None)
@given(histograms)
def test_matches_full_transport_and_bounds_the_laplace_loss(case):
    counts, seed = case
    rng = np.random.default_rng(seed)
    n = len(counts)
    x = np.array(counts, dtype=float)
    if x.sum() == 0:
        x[0] = 1
    x2 = rng.multinomial(int(x.sum()), np.full(n, 1 / n)).astype(float)
    U = dp.Universe.from_points(rng.permutation(50)[:n].reshape(-1, 1).astype(float))
    M = dp.metrics.Euclidean(rng.uniform(0.1, 2))
    W_d = group_privacy_loss(x, x2, U, M)
    assert W_d == pytest.approx(full_transport(x, x2, M.budget(U)), rel=1e-7, abs=1e-9)
    # the paper's looser form: k moves, each at most the largest budget among differing elements
    diff = np.flatnonzero(x != x2)
    k = np.abs(x - x2).sum() / 2
    if k:
        assert W_d <= k * M.budget(U)[np.ix_(diff, diff)].max() * (1 + 1e-9)
    # a d_X Laplace design loses exactly sum_k u_k |<F_k, x - x'>| between x and x'; it is <= W_d
    W = dp.Workload.random_uniform(3, n, rng=seed)
    d = dp.design(W, U, M, method="exact")
    loss = float(np.sum(d.u * np.abs(W.dense() @ (x - x2))))
    assert loss <= W_d * (1 + 1e-7) + 1e-9


def test_single_move_costs_its_budget_and_chains():
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0], [7.0]]))
    M = dp.metrics.Euclidean(0.5)
    rest = np.array([2, 1, 0, 3])
    for i, j in [(0, 1), (1, 3), (3, 0)]:
        x = rest.copy()
        x[i] += 1
        x2 = rest.copy()
        x2[j] += 1
        assert group_privacy_loss(x, x2, U, M) == pytest.approx(M.budget(U)[i, j])
    assert group_privacy_loss(rest, rest, U, M) == 0.0
    # two records 0 -> 2: cost 2 * eps_02 = 3.0, whatever else is in the histogram
    assert group_privacy_loss([3, 1, 0, 3], [1, 1, 2, 3], U, M) == pytest.approx(3.0)


def test_infinite_budgets_and_errors():
    U = dp.Universe.from_points(np.arange(4.0))
    G = dp.metrics.Graph([(0, 1), (2, 3)])  # two components: no finite move between them
    assert np.isinf(group_privacy_loss([1, 0, 0, 0], [0, 0, 1, 0], U, G))
    assert group_privacy_loss([1, 0, 1, 0], [0, 1, 0, 1], U, G) == pytest.approx(2.0)
    with pytest.raises(ValidationError, match="equal size"):
        group_privacy_loss([1, 0, 0, 0], [1, 1, 0, 0], U, G)
    with pytest.raises(ValidationError):
        group_privacy_loss([1, -1, 0, 0], [0, 0, 0, 0], U, G)


@pytest.mark.parametrize("seed", range(12))
def test_pot_equals_the_lp_on_random_cases(seed: int) -> None:
    """Random sizes, real-valued counts, point and graph metrics (with infinite budgets)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    x = rng.poisson(2.0, n).astype(float) * rng.choice([1.0, 0.5], n)
    x2 = rng.permutation(x)
    if seed % 2 == 0:  # a path graph cut into components: infinite budgets between them
        cut = set(rng.choice(n - 1, size=3, replace=False).tolist())
        U = dp.Universe.from_points(np.arange(float(n)).reshape(-1, 1))
        M = dp.metrics.Graph([(i, i + 1) for i in range(n - 1) if i not in cut])
        if seed % 4 == 0:  # records move only within their component: a finite bound
            bounds = [0, *sorted(c + 1 for c in cut), n]
            pieces = zip(bounds[:-1], bounds[1:], strict=True)
            x2 = np.concatenate([rng.permutation(x[lo:hi]) for lo, hi in pieces])
    else:
        U = dp.Universe.from_points(rng.uniform(0, 100, (n, 2)))
        M = dp.metrics.Euclidean(rng.uniform(0.01, 1))
    eps = M.budget(U)
    got = group_privacy_loss(x, x2, U, M)
    want = differing_lp(x, x2, eps)
    if seed % 4 == 0:
        assert np.isfinite(want)
    if np.isinf(want):
        assert np.isinf(got)
    else:
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
    if np.all(np.isfinite(eps)) and n <= 30:
        assert got == pytest.approx(full_transport(x, x2, eps), rel=1e-7, abs=1e-9)


def test_separate_components_are_matched_separately() -> None:
    """Two components, each balanced: the sum of two transports; unbalanced: +inf."""
    U = dp.Universe.from_points(np.arange(6.0))
    G = dp.metrics.Graph([(0, 1), (1, 2), (3, 4), (4, 5)])
    x, x2 = np.array([2, 0, 0, 0, 1, 0]), np.array([0, 1, 1, 1, 0, 0])
    assert group_privacy_loss(x, x2, U, G) == pytest.approx(4.0)  # 0->1, 0->2 (2) and 4->3
    assert differing_lp(x, x2, G.budget(U)) == pytest.approx(4.0)
    assert np.isinf(group_privacy_loss([2, 0, 0, 0, 1, 0], [0, 1, 0, 1, 1, 0], U, G))
