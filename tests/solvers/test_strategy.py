"""solvers.strategy: bases, the error and its gradient, the constraint, the optimiser (no dprivacy)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import null_space
from scipy.spatial.distance import cdist

from solvers import ConstraintSet, InfeasibleError, SolverError, design
from solvers.strategy import Basis, answer_map, choose_basis, materialise, optimize_strategy
from solvers.strategy.constraint import PairSet, strategy_scan
from solvers.strategy.objective import Objective, gram


def ranges(N: int, pairs=None) -> np.ndarray:
    lo, hi = np.triu_indices(N) if pairs is None else pairs
    F = np.zeros((len(lo), N))
    for k, (a, b) in enumerate(zip(lo, hi, strict=True)):
        F[k, a:b + 1] = 1.0
    return F


def brute_ratio(A: np.ndarray, eps: np.ndarray) -> float:
    """max over all pairs of ||A e_i - A e_j||_1 / eps_ij: a plain loop, no scan machinery."""
    N = A.shape[1]
    worst = 0.0
    for i in range(N):
        for j in range(i + 1, N):
            if np.isfinite(eps[i, j]):
                worst = max(worst, float(np.abs(A[:, i] - A[:, j]).sum()) / eps[i, j])
    return worst


def known_total_error(F: np.ndarray, A: np.ndarray) -> float:
    """2 ||F Q (A Q)^+||_F^2 with Q an orthonormal basis of the complement of 1 (the total is
    known): computed with an explicit basis, independently of the solver's centring."""
    Q = null_space(np.ones((1, F.shape[1])))
    return 2.0 * float(np.sum((F @ Q @ np.linalg.pinv(A @ Q)) ** 2))


def test_tree_basis_maps():
    rng = np.random.default_rng(0)
    N = 9
    parent = np.r_[-1, [int(rng.integers(0, k)) for k in range(1, N)]]
    child = np.arange(1, N)
    b = Basis.tree(N, child, parent[child])
    x = rng.integers(0, 5, N).astype(float)
    s = b.apply(x)
    assert np.allclose(b.T_dense() @ x, s)
    assert np.allclose(b.B() @ s + x.sum() * np.eye(N)[b.root], x)  # x = B s + n e_root
    # moving a record across a tree edge changes exactly one coordinate by one
    T = b.T_dense()
    for c in child:
        d = T[:, c] - T[:, parent[c]]
        assert np.count_nonzero(d) == 1 and abs(d.sum()) == 1
    b2 = Basis.from_json(b.to_json())
    assert np.array_equal(b2.apply(x), s)
    with pytest.raises(SolverError):
        Basis.tree(4, np.array([0, 1, 2]), np.array([1, 0, 3]))  # 3 edges on 4 vertices, not connected
    bad = b.to_json()
    bad["order"] = bad["order"][::-1]
    with pytest.raises(SolverError):
        Basis.from_json(bad)


@pytest.mark.parametrize("centre", [False, True])
def test_objective_gradient_matches_finite_differences(centre):
    rng = np.random.default_rng(1)
    K, p = 6, 9
    F = rng.random((5, K))
    obj = Objective(gram(F, centre), centre)
    C = rng.standard_normal((p, K))
    f, g = obj.value_grad(C)
    E = rng.standard_normal((p, K))
    h = 1e-6
    fd = (obj.value(C + h * E) - obj.value(C - h * E)) / (2 * h)
    assert fd == pytest.approx(float(np.sum(g * E)), rel=1e-5)
    if centre:  # f is the known-total error of an explicit basis
        assert 2 * f == pytest.approx(known_total_error(F, C), rel=1e-9)
    else:
        assert f == pytest.approx(float(np.sum((F @ np.linalg.pinv(C)) ** 2)), rel=1e-9)


def test_smooth_constraint_bounds_the_max_and_has_the_right_gradient():
    rng = np.random.default_rng(2)
    N = 7
    I, J = np.triu_indices(N, 1)  # noqa: E741
    ps = PairSet(I, J, rng.uniform(0.5, 2.0, I.size))
    C = rng.standard_normal((4, N))
    val, g = ps.smooth(C, 50.0, 1e-6)
    assert val >= ps.ratios(C).max() - 1e-5
    E = rng.standard_normal(C.shape)
    h = 1e-6
    fd = (ps.smooth(C + h * E, 50.0, 1e-6)[0] - ps.smooth(C - h * E, 50.0, 1e-6)[0]) / (2 * h)
    assert fd == pytest.approx(float(np.sum(g * E)), rel=1e-4)
    cols = PairSet(np.arange(N), -np.ones(N, np.int64), np.ones(N))
    assert np.allclose(cols.ratios(C), np.abs(C).sum(axis=0))
    with pytest.raises(InfeasibleError):
        PairSet(np.array([0]), np.array([1]), np.array([0.0]))


def test_line_ranges_use_the_path_basis_and_beat_the_rescaling_design():
    N = 24
    F = ranges(N)
    cs = ConstraintSet.edges(np.arange(N - 1), np.arange(1, N), 0.1, N)
    assert choose_basis(cs).kind == "tree"
    res = optimize_strategy(F, cs, rounds=2)
    eps = 0.1 * np.abs(np.arange(N)[:, None] - np.arange(N)[None, :])
    A = materialise(res.C, res.basis)
    assert brute_ratio(A, eps) <= 1 + 1e-9
    assert res.error == pytest.approx(known_total_error(F, A), rel=1e-7)
    wb = design(F, cs, method="exact")
    assert res.error * 100 < float(np.sum(2 / wb.beta**2))
    assert res.lower_bound is not None and res.lower_bound <= res.error * (1 + 1e-9)
    assert res.error <= res.report["starts"]["identity"] * (1 + 1e-9)


def test_all_pairs_metric_is_verified_by_scan_and_never_worse_than_the_design():
    rng = np.random.default_rng(3)
    P = rng.random((14, 2)) * 4
    eps = 0.5 * cdist(P, P)
    F = rng.random((5, 14))
    cs = ConstraintSet.dense(eps)
    wb = design(F, cs, method="exact")
    res = optimize_strategy(F, cs, u=wb.u, coords=P, rounds=2)
    A = materialise(res.C, res.basis)
    assert res.basis.kind == "identity"
    assert brute_ratio(A, eps) <= 1 + 1e-9
    assert res.max_ratio == pytest.approx(strategy_scan(res.C, res.basis, cs)[0])
    assert res.error == pytest.approx(known_total_error(F, A), rel=1e-7)
    assert res.error <= float(np.sum(2 / wb.beta**2)) * (1 + 1e-9)
    assert res.lower_bound is not None and res.lower_bound <= res.error


def test_large_pair_sets_use_scanned_working_sets():
    rng = np.random.default_rng(4)
    P = rng.random((30, 2))
    eps = cdist(P, P)
    F = rng.random((3, 30))
    import solvers.strategy as st

    old = st.ALL_PAIRS_LIMIT
    st.ALL_PAIRS_LIMIT = 10  # force the scanned working set on a small instance
    try:
        res = optimize_strategy(F, ConstraintSet.dense(eps), starts=("identity", "hierarchical"),
                                coords=P, rounds=2, active_k=40)
    finally:
        st.ALL_PAIRS_LIMIT = old
    assert brute_ratio(materialise(res.C, res.basis), eps) <= 1 + 1e-9


def test_answer_map_refuses_queries_outside_the_row_space():
    F = np.array([[1.0, 0.0, 0.0, 0.0]])
    C = np.array([[0.0, 1.0, 0.0, 0.0]])
    with pytest.raises(SolverError, match="row space"):
        answer_map(C, F, np.zeros(1), centre=True)
    M, o = answer_map(sp.csr_array(np.diag([1.0, 2.0])), np.eye(2), np.zeros(2), centre=False)
    assert np.allclose(M.toarray() if sp.issparse(M) else M, np.diag([1.0, 0.5]))


def test_unknown_start_and_bad_shape_are_refused():
    cs = ConstraintSet.edges(np.array([0, 1]), np.array([1, 2]), 1.0, 3)
    with pytest.raises(SolverError, match="unknown starts"):
        optimize_strategy(np.eye(3), cs, starts=("nope",))
    with pytest.raises(SolverError, match="F must be"):
        optimize_strategy(np.eye(4), cs)


@pytest.mark.parametrize("kind", ["dense", "kernel"])
def test_a_scaled_identity_is_checked_in_closed_form_exactly_as_a_scan(kind):
    """||d (e_i - e_j)||_1 = 2 d on every pair: the ratio is 2 d / min eps, as a full scan says."""
    import scipy.sparse as sp

    from solvers.strategy import Basis, strategy_scan

    rng = np.random.default_rng(4)
    pts = rng.uniform(0, 5, size=(30, 2))
    eps = 0.7 * np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    if kind == "dense":
        cs = ConstraintSet.dense(eps)
    else:
        import dprivacy as dp

        cs = dp.metrics.Euclidean(0.7).constraint_set(dp.Universe.from_points(pts))
    basis = Basis.identity(30)
    C = sp.csr_array(sp.eye_array(30) * 1.3)
    fast, _, _ = strategy_scan(C, basis, cs)
    full = cs.scan(np.eye(30) * 1.3, np.ones(30)).max_ratio
    assert fast == pytest.approx(full, rel=1e-12)
    uneven = sp.csr_array(sp.diags_array(np.linspace(1, 2, 30)))  # not uniform: scanned
    assert strategy_scan(uneven, basis, cs)[0] == pytest.approx(
        cs.scan(uneven.toarray(), np.ones(30)).max_ratio, rel=1e-12)


def test_a_read_only_strategy_is_scanned_without_being_changed():
    """A design's strategy may be read-only (a mechanism's frozen copy) and is the caller's: the
    closed-form check must neither write to it (scipy refuses: 'WRITEBACKIFCOPY base is
    read-only') nor drop its stored zeros."""
    from solvers.strategy import Basis, strategy_scan

    C = sp.csr_array((np.array([1.3, 0.0, 1.3, 1.3]), np.array([0, 1, 1, 2]),
                      np.array([0, 2, 3, 4])), shape=(3, 3))
    for a in (C.data, C.indices, C.indptr):
        a.setflags(write=False)
    cs = ConstraintSet.dense(np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 1.0, 0.0]]))
    ratio, _, _ = strategy_scan(C, Basis.identity(3), cs)
    assert ratio == pytest.approx(2 * 1.3 / 1.0)
    assert C.nnz == 4 and C.data[1] == 0.0  # the stored zero is still there


def test_a_sparse_query_matrix_is_copied_before_its_duplicates_are_summed():
    from solvers.operand import as_operand

    F = sp.csc_array((np.array([1.0, 2.0, 3.0]), np.array([0, 0, 1]), np.array([0, 2, 3])),
                     shape=(2, 2))  # two entries for (0, 0)
    for a in (F.data, F.indices, F.indptr):
        a.setflags(write=False)
    C = as_operand(F, 2, densify_cells=0)
    assert sp.issparse(C) and C.toarray().tolist() == [[3.0, 0.0], [0.0, 3.0]]
    assert F.nnz == 3  # the caller's matrix keeps its three stored entries


def test_the_objective_value_alone_equals_the_value_with_its_gradient():
    rng = np.random.default_rng(8)
    F = rng.uniform(size=(7, 12))
    for centre in (True, False):
        obj = Objective(gram(F, centre), centre)
        C = rng.uniform(size=(15, 12))
        assert obj.value(C) == pytest.approx(obj.value_grad(C)[0], rel=1e-12)
        singular = np.ones((3, 12))
        assert obj.value(singular) == obj.value_grad(singular)[0] == float("inf")
