"""design() with the closed form, the d_X Laplace mechanism (eq. (5)), the baseline and IF."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dprivacy as dp
from dprivacy import metrics
from dprivacy.errors import (
    InfeasibleDesignError,
    PrivacyViolationError,
    ShapeError,
    ValidationError,
)

EX1 = {"G": ["M", "F"], "N": ["Y", "N"], "A": ["A", "B"]}


def example1(rule: str, eps_y: float = 1.0, eps_other: float = 5.0):
    U = dp.Universe.from_domains(EX1)
    budgets = {a: {v: eps_other for v in vals} for a, vals in EX1.items()}
    budgets["N"]["Y"] = eps_y
    M = metrics.ValueWeighted(budgets, rule=rule)
    return U, M


@pytest.mark.parametrize("rule, expected", [
    ("min", {"Y": 1.0, "M": 0.2, "MA": 0.2, "MYA": 1.0}),
    ("max", {"Y": 0.2, "M": 0.2, "MA": 0.2}),
])
def test_example1_noise_scales(rule, expected):
    """Target T10 (spec §3.8): Y gets 1/eps_Y, M and MA get 1/eps'; max rule: Y drops to 1/eps'."""
    U, M = example1(rule)
    queries = {"Y": "N == 'Y'", "M": "G == 'M'", "MA": "G == 'M' and A == 'A'",
               "MYA": "G == 'M' and N == 'Y' and A == 'A'"}
    for name, scale in expected.items():
        W = dp.Workload.from_predicates(U, [queries[name]])
        d = dp.design(W, U, M, method="closed_form")
        assert d.noise_scale[0] == pytest.approx(scale, rel=1e-12), name
        assert d.w[0] == 1.0


def brute_force_beta(f: np.ndarray, eps: np.ndarray) -> float:
    best = np.inf
    n = len(f)
    for i in range(n):
        for j in range(n):
            if i != j and f[i] != f[j] and np.isfinite(eps[i, j]):
                best = min(best, eps[i, j] / abs(f[i] - f[j]))
    return best


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 25), st.integers(0, 2**31 - 1), st.sampled_from(["euclid", "blowfish", "elem"]))
def test_closed_form_is_private_tight_and_brute_force(n, seed, kind):
    rng = np.random.default_rng(seed)
    U = dp.Universe.from_points(rng.permutation(400)[:n].reshape(-1, 1).astype(float) / 7)
    M = {"euclid": metrics.Euclidean(rng.uniform(0.1, 3)),
         "blowfish": metrics.BlowfishThreshold(10.0, 1.0, "A"),
         "elem": metrics.ElementWise(rng.uniform(0.1, 2, n))}[kind]
    f = rng.uniform(-5, 5, n)
    W = dp.Workload(f[None, :])
    d = dp.design(W, U, M, method="closed_form")
    eps = M.budget(U)
    beta = brute_force_beta(f, eps)
    assert d.beta[0] == pytest.approx(beta, rel=1e-9)
    # realised loss of every pair <= eps_ij, and some pair at equality (tight)
    fin = np.isfinite(eps) & ~np.eye(n, dtype=bool)
    if np.isfinite(beta):
        loss = d.u[0] * np.abs(f[:, None] - f[None, :])
        assert np.all(loss[fin] <= eps[fin] * (1 + 1e-9))
        assert np.max(loss[fin] / eps[fin]) == pytest.approx(1.0, rel=1e-9)


def test_multi_query_design_is_private_over_all_pairs():
    rng = np.random.default_rng(3)
    U = dp.Universe.from_points(rng.random((40, 2)))
    M = metrics.Euclidean(1.0)
    W = dp.Workload.random_uniform(5, 40, rng=4)
    eps = M.budget(U)
    F = W.dense()
    for method in ("equal_split", "uniform", "budget_sharing", "exact"):
        d = dp.design(W, U, M, method=method)
        loss = np.einsum("k,kij->ij", d.u, np.abs(F[:, :, None] - F[:, None, :]))
        off = ~np.eye(40, dtype=bool)
        assert np.all(loss[off] <= eps[off] * (1 + 1e-9)), method


def test_release_mean_and_variance_match_eq5():
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0], [4.0]]))
    W = dp.Workload([[0.0, 1.0, 2.0, 2.5], [1.0, 0.0, 0.0, 1.0]])
    d = dp.Design([0.9, 1.0], [0.25, 0.5], constraints=metrics.Euclidean(1.0).constraint_set(U))
    mech = dp.DXLaplace(W, d)
    x = np.array([3, 5, 2, 7])
    n_samples = 40_000
    rng = np.random.default_rng(11)
    sim = dp.Accountant(total=math.inf)  # a simulation on a synthetic histogram
    out = np.array([mech.release(x, rng=rng, secure=False, accountant=sim)
                    for _ in range(n_samples)])
    mean = np.array([0.9, 1.0]) * (W.dense() @ x)
    var = 2 / np.array([0.25, 0.5]) ** 2
    # mean within 5 standard errors, variance within 5 standard errors (Laplace kurtosis 6)
    se_mean = np.sqrt(var / n_samples)
    assert np.all(np.abs(out.mean(0) - mean) < 5 * se_mean)
    se_var = var * np.sqrt((6 + 2) / n_samples)
    assert np.all(np.abs(out.var(0) - var) < 5 * se_var)
    assert mech.expected_squared_error(x) == pytest.approx(
        np.sum((0.1 * (W.dense() @ x)) ** 2 * [1, 0]) + var.sum())


def test_secure_release_is_default_and_has_right_spread():
    U = dp.Universe.from_points(np.arange(3.0))
    W = dp.Workload([[0.0, 1.0, 2.0]])
    mech = dp.DXLaplace(W, dp.design(W, U, metrics.Euclidean(2.0), method="closed_form"))
    x = np.array([1, 2, 3])
    sim = dp.Accountant(total=math.inf)
    out = np.array([mech.release(x, accountant=sim)[0] for _ in range(4000)])
    b = mech.noise_scale[0]
    assert b == pytest.approx(0.5)
    assert abs(out.mean() - 8.0) < 5 * np.sqrt(2 * b**2 / 4000)
    assert abs(out.var() / (2 * b**2) - 1) < 5 * np.sqrt(8 / 4000)


def test_mechanism_refuses_unsafe_design_before_release():
    U = dp.Universe.from_points(np.arange(3.0))
    W = dp.Workload([[0.0, 1.0, 2.0]])
    M = metrics.Euclidean(1.0)
    good = dp.design(W, U, M, method="closed_form")
    bad = dp.Design(good.w, good.beta * 1.01, constraints=good.constraints)
    with pytest.raises(PrivacyViolationError, match="privacy condition"):
        dp.DXLaplace(W, bad)
    with pytest.raises(PrivacyViolationError, match="no constraint set"):
        dp.DXLaplace(W, dp.Design(good.w, good.beta))
    # re-derived from universe + metric, the hand-made design is accepted
    assert dp.DXLaplace(W, dp.Design(good.w, good.beta), universe=U, metric=M).max_ratio_ <= 1


def test_release_validates_histogram():
    U = dp.Universe.from_points(np.arange(3.0))
    W = dp.Workload([[0.0, 1.0, 2.0]])
    mech = dp.DXLaplace(W, dp.design(W, U, metrics.Euclidean(1.0), method="closed_form"))
    for bad, exc in (([1, 2], ShapeError), ([1, -1, 2], ValidationError),
                     ([1, np.nan, 2], ValidationError)):
        with pytest.raises(exc):
            mech.release(np.array(bad, dtype=float))


def test_baseline_laplace():
    U = dp.Universe.from_points(np.array([[0.0], [0.5], [3.0]]))
    W = dp.Workload([[0.0, 1.0, 4.0], [2.0, 0.0, 0.0]])
    base = dp.Laplace.for_metric(W, U, metrics.Euclidean(2.0))
    # eps_min = 1.0, Delta F = max over pairs of the L1 column distance = |0-4| + |2-0| = 6
    assert base.eps == pytest.approx(1.0)
    np.testing.assert_allclose(base.noise_scale, [6.0, 6.0])
    assert dp.Laplace(W, 0.5).noise_scale[0] == pytest.approx(12.0)
    with pytest.raises(ValidationError):
        dp.Laplace(W, -1.0)


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 30), st.integers(0, 2**31 - 1), st.floats(0.01, 100), st.floats(-5, 5),
       st.floats(0.1, 10))
def test_improvement_factor_invariances(n, seed, scale, shift, a):
    rng = np.random.default_rng(seed)
    U = dp.Universe.from_points(rng.permutation(2500)[:n].reshape(-1, 1).astype(float))
    f = rng.uniform(0, 1, n)
    if np.ptp(f) == 0:
        return
    IF = {}
    for key, M, g in (("base", metrics.Euclidean(1.0), f),
                      ("scaled", metrics.Euclidean(scale), f),
                      ("affine", metrics.Euclidean(1.0), a * f + shift)):
        W = dp.Workload(g[None, :])
        IF[key] = dp.improvement_factor(W, U, M, dp.design(W, U, M, method="closed_form"))
    assert IF["base"] >= 1 - 1e-12
    assert IF["scaled"] == pytest.approx(IF["base"], rel=1e-9)
    assert IF["affine"] == pytest.approx(IF["base"], rel=1e-9)


def test_multi_query_if_is_geometric_mean():
    rng = np.random.default_rng(5)
    U = dp.Universe.from_points(rng.random((30, 2)))
    M = metrics.Euclidean(1.0)
    W = dp.Workload.random_binary(4, 30, rng=6)
    d = dp.design(W, U, M, method="budget_sharing")
    per = dp.improvement_factor(W, U, M, d, per_query=True)
    geo = dp.improvement_factor(W, U, M, d)
    assert geo == pytest.approx(np.exp(np.log(per).mean()))
    assert geo == pytest.approx(W.sensitivity() / M.eps_min(U) * np.prod(d.beta) ** (1 / 4))


def test_zero_distance_pairs():
    U = dp.Universe.from_points(np.array([[0.0], [0.0], [1.0]]), names=["a", "b", "c"])
    M = metrics.Euclidean(1.0)
    with pytest.raises(InfeasibleDesignError):
        dp.design(dp.Workload([[0.0, 1.0, 2.0]]), U, M, method="closed_form")
    d = dp.design(dp.Workload([[1.0, 1.0, 2.0]]), U, M, method="closed_form")
    assert d.beta[0] == pytest.approx(1.0) and not np.isnan(d.beta).any()


def test_design_argument_errors():
    U = dp.Universe.from_points(np.arange(3.0))
    M = metrics.Euclidean(1.0)
    with pytest.raises(ValidationError, match="method"):
        dp.design(dp.Workload([[0.0, 1, 2]]), U, M, method="magic")
    with pytest.raises(ValidationError, match="loss"):
        dp.design(dp.Workload([[0.0, 1, 2]]), U, M, loss="cubic")
    with pytest.raises(ValidationError, match="single-query"):
        dp.design(dp.Workload([[0.0, 1, 2], [1, 0, 0]]), U, M, method="closed_form")
    with pytest.raises(ShapeError):
        dp.design(dp.Workload([[0.0, 1]]), U, M)


def test_privacy_loss_dense_and_sparse_workloads():
    import scipy.sparse as sp

    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0], [4.0]]))
    M = metrics.Euclidean(1.0)
    F = np.array([[0.0, 1.0, 0.0, 2.0], [1.0, 0.0, 0.0, 1.0]])
    for W in (dp.Workload(F), dp.Workload(sp.csr_array(F))):
        mech = dp.DXLaplace(W, dp.design(W, U, M, method="uniform"))
        u = mech.design.u
        for i, j in [(0, 1), (1, 3), (2, 0)]:
            assert mech.privacy_loss(i, j) == pytest.approx(np.sum(u * np.abs(F[:, i] - F[:, j])))
            assert mech.privacy_loss(i, j) <= M.budget(U)[i, j] * (1 + 1e-9)


@pytest.mark.parametrize("sparse", [True, False])
def test_mutating_inputs_after_verification_changes_nothing_released(sparse):
    """The caller's arrays (coordinates, element budgets, a dense or sparse F) are copied at the
    boundary: editing them after the design is verified changes no release and no check."""
    import scipy.sparse as sp

    from dprivacy.config import MechanismConfig

    coords = np.array([[0.0], [1.0], [3.0], [4.0]])
    e = np.array([1.0, 2.0, 1.0, 3.0])
    dense = np.array([[0.0, 1.0, 2.0, 0.0], [1.0, 0.0, 0.0, 3.0]])
    F = sp.csr_array(dense.copy()) if sparse else dense
    U, M, W = dp.Universe.from_points(coords), metrics.ElementWise(e), dp.Workload(F)
    d = dp.design(W, U, M, method="uniform")
    mech = dp.DXLaplace(W, d, universe=U, metric=M)
    cfg = MechanismConfig.from_mechanism(mech, U, M)
    x = np.array([3, 1, 4, 1])
    acc = dp.Accountant(total=3)
    y1 = mech.release(x, rng=7, secure=False, accountant=acc)
    fps = (U.fingerprint(), M.fingerprint(U), W.fingerprint())
    coords *= 100.0
    e[:] = 1e6
    if sparse:
        F.data[:] = 1e-6
        F.indices[:] = 0
    else:
        F[:] = 1e-6
    y2 = mech.release(x, rng=7, secure=False, accountant=acc)
    np.testing.assert_array_equal(y1, y2)
    assert (U.fingerprint(), M.fingerprint(U), W.fingerprint()) == fps
    again = cfg.bind(W, U, M).to_mechanism()  # re-verified against the frozen inputs
    assert again.max_ratio_ == mech.max_ratio_
    np.testing.assert_array_equal(again.release(x, rng=7, secure=False, accountant=acc), y1)


def test_if_leaves_out_queries_with_zero_weight_and_says_so():
    """A query with w = 0 is answered by 0 (plus meaningless noise): its beta says nothing, so
    it is left out of the mean (before: IF ~ 1e12), like a query answered exactly."""
    from dprivacy.design import ImprovementFactorWarning

    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    M = metrics.Euclidean(1.0)
    W = dp.Workload([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0], [5.0, 5.0, 5.0]])
    d = dp.Design([0.5, 0.0, 1.0], [0.4, 1e12, np.inf], constraints=M.constraint_set(U))
    dF, e = W.sensitivity(), M.eps_min(U)
    with pytest.warns(ImprovementFactorWarning, match=r"1 with w = 0 .*queries 1\).* 1 answered "
                                                       r"exactly .*queries 2\)"):
        geo = dp.improvement_factor(W, U, M, d)
    assert geo == pytest.approx(0.4 * dF / e)
    per = dp.improvement_factor(W, U, M, d, per_query=True)
    assert per[0] == pytest.approx(0.4 * dF / e) and np.isnan(per[1]) and np.isinf(per[2])
    silent = dp.Design([0.0, 0.0, 0.0], [1e12, 1.0, 1.0], constraints=M.constraint_set(U))
    with pytest.warns(ImprovementFactorWarning, match="3 with w = 0"):
        assert np.isnan(dp.improvement_factor(W, U, M, silent))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left out: no warning
        dp.improvement_factor(W, U, M, dp.Design([1.0, 1.0, 1.0], [0.1, 0.1, 0.1]))
