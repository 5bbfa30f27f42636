"""Closed form vs brute force, the paper's orderings (T6-T7), degenerate inputs (spec §9.3)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import pdist

from solvers import LOSSES, METHODS, ConstraintSet, InfeasibleError, SolverError, design
from tests.solvers.conftest import euclid_instance

MULTI = [m for m in METHODS if m != "closed_form"]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), N=st.integers(1, 30), p_inf=st.floats(0, 0.7),
       levels=st.integers(1, 5))
def test_closed_form_equals_brute_force(seed, N, p_inf, levels):
    rng = np.random.default_rng(seed)
    f = rng.integers(0, levels, N).astype(float)  # ties make 0/x and 0/0 cases
    _, eps = euclid_instance(N, 1, rng)
    mask = np.triu(rng.random((N, N)) < p_inf, 1)
    eps[mask | mask.T] = np.inf
    lip = 0.0
    for i in range(N):
        for j in range(i + 1, N):
            if np.isfinite(eps[i, j]) and f[i] != f[j]:
                lip = max(lip, abs(f[i] - f[j]) / eps[i, j])
    r = design(f[None, :], ConstraintSet.dense(eps), method="closed_form")
    expect = np.inf if lip == 0 else 1 / lip
    assert r.beta[0] == pytest.approx(expect, rel=1e-12)
    assert r.w[0] == 1.0 and r.report["max_ratio"] <= 1 + 1e-12


def multi_if(F: np.ndarray, eps: np.ndarray, beta: np.ndarray) -> float:
    """Spec §3.10: IF = (Delta F / eps_min) (prod_k beta_k)^(1/m)."""
    dF = pdist(F.T, metric="cityblock").max()
    eps_min = eps[np.triu_indices(eps.shape[0], 1)].min()
    return float(dF / eps_min * np.exp(np.mean(np.log(beta))))


def strategy_ifs(binary: bool, m: int, reps: int = 3) -> dict[str, float]:
    out = {"equal_split": [], "uniform": [], "budget_sharing": [], "exact": []}
    for rep in range(reps):
        F, eps = euclid_instance(300, m, np.random.default_rng(100 * m + rep), binary=binary,
                                 grid=1000)
        cs = ConstraintSet.dense(eps)
        for meth in out:
            r = design(F, cs, method=meth, loss="log")
            out[meth].append(multi_if(F, eps, r.beta))
    return {k: float(np.mean(v)) for k, v in out.items()}


@pytest.mark.parametrize("m", [5, 10])
def test_paper_ordering_binary(m):
    """T6/T7: on binary matrices Strategy 3 beats 1 and 2; Strategy 1 stays near IF 1."""
    ifs = strategy_ifs(True, m)
    assert ifs["budget_sharing"] > ifs["equal_split"]
    assert ifs["budget_sharing"] > ifs["uniform"]
    assert 0.7 < ifs["equal_split"] < 1.6
    assert ifs["exact"] >= ifs["budget_sharing"] * (1 - 1e-9)  # the optimum of the log loss


@pytest.mark.parametrize("m", [5, 10])
def test_paper_ordering_uniform(m):
    """T6: on uniform matrices Strategy 3 >= Strategy 2 on average (and > Strategy 1)."""
    ifs = strategy_ifs(False, m)
    assert ifs["budget_sharing"] >= ifs["uniform"] * (1 - 1e-9)
    assert ifs["budget_sharing"] > ifs["equal_split"]
    assert ifs["exact"] >= ifs["budget_sharing"] * (1 - 1e-9)


@pytest.mark.parametrize("method", MULTI)
def test_infinite_budgets_constant_rows_and_zero_distances(method):
    rng = np.random.default_rng(4)
    F, eps = euclid_instance(12, 3, rng)
    F[1] = 7.0  # constant row
    eps[:6, 6:] = eps[6:, :6] = np.inf  # two unlinked clusters
    F[:, 3] = F[:, 2]  # identical columns ...
    eps[2, 3] = eps[3, 2] = 0.0  # ... at zero distance: allowed
    cs = ConstraintSet.dense(eps)
    r = design(F, cs, method=method)
    assert r.beta[1] == np.inf and np.isfinite(r.beta[[0, 2]]).all()
    assert not np.isnan(r.beta).any() and not np.isnan(r.objective)
    assert r.report["max_ratio"] <= 1 + 1e-9
    # all budgets infinite: every query is answered exactly
    free = design(F, ConstraintSet.dense(np.full((12, 12), np.inf)), method=method)
    assert np.all(free.beta == np.inf) and free.report["max_ratio"] == 0.0
    assert free.objective == 0.0
    # a zero distance between differing columns is infeasible and names the pair
    F2 = F.copy()
    F2[0, 3] += 1.0
    with pytest.raises(InfeasibleError) as exc:
        design(F2, cs, method=method)
    assert exc.value.pair == (2, 3)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("loss", LOSSES)
def test_single_element_universe(method, loss):
    cs = ConstraintSet.dense(np.zeros((1, 1)))
    if method == "bcd" and loss != "squared":  # bcd is the squared-loss BCD of spec §8.1
        with pytest.raises(SolverError, match="squared"):
            design(np.array([[3.0]]), cs, method=method, loss=loss)
        return
    r = design(np.array([[3.0]]), cs, method=method, loss=loss)
    assert r.beta.tolist() == [np.inf] and r.w.tolist() == [1.0]
    assert r.report["n_constraints"] == 0 and not np.isnan(r.objective)


def test_errors_and_sparse_input():
    F, eps = euclid_instance(10, 2, np.random.default_rng(9))
    cs = ConstraintSet.dense(eps)
    with pytest.raises(SolverError, match="m = 1"):
        design(F, cs, method="closed_form")
    with pytest.raises(SolverError, match="unknown method"):
        design(F, cs, method="magic")
    with pytest.raises(SolverError, match="unknown loss"):
        design(F, cs, loss="hinge")
    with pytest.raises(SolverError, match="squared"):
        design(F, cs, method="bcd", loss="absolute")
    with pytest.raises(SolverError, match="n must"):
        design(F, cs, n=-1)
    with pytest.raises(SolverError, match="ConstraintSet"):
        design(F, eps)
    dense = design(F, cs, method="exact")
    sparse = design(sp.csr_matrix(F), cs, method="exact")
    np.testing.assert_allclose(dense.beta, sparse.beta, rtol=1e-9)


def test_budget_sharing_round_limit_and_report():
    F, eps = euclid_instance(60, 6, np.random.default_rng(2), binary=True)
    cs = ConstraintSet.dense(eps)
    one = design(F, cs, method="budget_sharing", max_rounds=1)
    full = design(F, cs, method="budget_sharing")
    assert one.report["iterations"] == 1 and one.report["T"] == 1
    assert full.report["iterations"] >= 1 and full.report["T"] == 50
    assert np.all(full.beta >= one.beta * (1 - 1e-12))  # later rounds only add budget
    for key in ("n_constraints", "n_constraints_used", "iterations", "seconds", "max_ratio",
                "scaled_back", "status", "notes"):
        assert key in full.report
