"""ConstraintSet: blocked scans agree with brute force, conventions for 0 and inf budgets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers import ConstraintSet, InfeasibleError, SolverError
from tests.solvers.conftest import euclid_instance, hamming_graph


def brute_ratios(F: np.ndarray, eps: np.ndarray, u: np.ndarray) -> dict[tuple[int, int], float]:
    out = {}
    N = eps.shape[0]
    for i in range(N):
        for j in range(i + 1, N):
            if np.isinf(eps[i, j]):
                continue
            loss = float(np.sum(u * np.abs(F[:, i] - F[:, j])))
            out[(i, j)] = 0.0 if loss == 0 else (np.inf if eps[i, j] == 0 else loss / eps[i, j])
    return out


@settings(max_examples=40, deadline=None)
@given(N=st.integers(1, 25), m=st.integers(1, 4), seed=st.integers(0, 10**6),
       mem=st.sampled_from([1, 2000, 2**30]), p_inf=st.floats(0, 0.5))
def test_scan_matches_brute_force(N, m, seed, mem, p_inf):
    rng = np.random.default_rng(seed)
    F, eps = euclid_instance(N, m, rng)
    mask = np.triu(rng.random((N, N)) < p_inf, 1)
    eps[mask | mask.T] = np.inf
    u = rng.random(m) * 3
    bf = brute_ratios(F, eps, u)
    for cs in (ConstraintSet.dense(eps),
               ConstraintSet.oracle(N, lambda rows: eps[rows])):
        sc = cs.scan(F, u, memory_bytes=mem, k=5)
        assert cs.n_constraints == len(bf)
        expect = max(bf.values(), default=0.0)
        assert sc.max_ratio == pytest.approx(expect, rel=1e-12, abs=1e-300)
        ti, tj, tr = sc.top
        assert len(tr) == min(5, len(bf))
        assert np.all(np.diff(tr) <= 0)
        for a, b, r in zip(ti, tj, tr, strict=True):
            assert a < b and bf[(int(a), int(b))] == pytest.approx(r, rel=1e-12)
        if bf:
            assert sorted(bf.values())[-len(tr):][::-1] == pytest.approx(list(tr), rel=1e-12)


def test_edges_scan_and_lookup():
    rng = np.random.default_rng(3)
    X, ei, ej, E, D = hamming_graph(4, np.array([0.5, 1.0, 2.0, 3.0]))
    F = rng.random((3, X.shape[0]))
    cs = ConstraintSet.edges(ej, ei, E, X.shape[0])  # orientation does not matter
    assert cs.n_constraints == 32
    u = np.array([0.3, 0.2, 0.1])
    loss = (u[:, None] * np.abs(F[:, ei] - F[:, ej])).sum(0) / E
    assert cs.scan(F, u).max_ratio == pytest.approx(loss.max(), rel=1e-12)
    np.testing.assert_array_equal(cs.pair_eps(ei, ej), E)
    assert cs.pair_eps(np.array([0]), np.array([3]))[0] == np.inf  # not an edge
    assert cs.min_eps() == 0.5
    # duplicates keep the smaller budget; inf edges are dropped
    cs2 = ConstraintSet.edges([0, 1, 0], [1, 0, 2], [2.0, 1.0, np.inf], 3)
    assert cs2.n_constraints == 1 and cs2.pair_eps([0], [1])[0] == 1.0


def test_lipschitz_conventions():
    eps = np.array([[0, 0, 2.0], [0, 0, np.inf], [2.0, np.inf, 0]])
    cs = ConstraintSet.dense(eps)
    assert cs.lipschitz(np.array([1.0, 1.0, 5.0])) == 2.0  # 0/0 -> 0 on the zero pair
    assert cs.lipschitz(np.array([1.0, 2.0, 1.0])) == np.inf  # x/0 -> inf
    assert cs.lipschitz(np.array([3.0, 3.0, 3.0])) == 0.0
    assert cs.min_eps() == 0.0
    with pytest.raises(InfeasibleError) as exc:
        cs.check_feasible(np.array([[1.0, 2.0, 1.0]]))
    assert exc.value.pair == (0, 1)
    assert "eps[0, 1] = 0" in str(exc.value)


def test_scan_infinite_u_and_single_element():
    eps = np.array([[0, 1.0], [1.0, 0]])
    cs = ConstraintSet.dense(eps)
    F = np.array([[1.0, 1.0], [0.0, 2.0]])
    assert cs.scan(F, np.array([np.inf, 0.5])).max_ratio == 1.0  # inf * 0 = 0
    assert cs.scan(F, np.array([0.5, np.inf])).max_ratio == np.inf
    one = ConstraintSet.dense(np.zeros((1, 1)))
    sc = one.scan(np.array([[4.0]]), np.array([1.0]))
    assert one.n_constraints == 0 and sc.max_ratio == 0.0 and sc.worst is None
    assert one.min_eps() == np.inf


@pytest.mark.parametrize("bad, msg", [
    (np.array([[0, 1.0], [2.0, 0]]), "symmetric"),
    (np.array([[0, np.nan], [np.nan, 0]]), "NaN"),
    (np.array([[0, -1.0], [-1.0, 0]]), "non-negative"),
    (np.ones(3), "square"),
])
def test_dense_validation(bad, msg):
    with pytest.raises(SolverError, match=msg):
        ConstraintSet.dense(bad)


def test_scan_validation_and_immutability():
    cs = ConstraintSet.dense(np.array([[0, 1.0], [1.0, 0]]))
    with pytest.raises(SolverError, match="columns"):
        cs.scan(np.ones((1, 3)), np.ones(1))
    with pytest.raises(SolverError, match="NaN"):
        cs.scan(np.array([[np.nan, 1.0]]), np.ones(1))
    with pytest.raises(SolverError, match="u must"):
        cs.scan(np.ones((2, 2)), np.ones(3))
    with pytest.raises(AttributeError):
        cs.N = 5
    with pytest.raises(SolverError, match="self-loop"):
        ConstraintSet.edges([1], [1], [1.0], 3)
