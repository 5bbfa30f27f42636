"""SmallDB problem (8) and MWEM parameters (spec §5.1, §5.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from solvers import ConstraintSet, SolverError, mwem_params, smalldb_params
from tests.solvers.conftest import euclid_instance


def max_lipschitz_rows(F: np.ndarray, eps: np.ndarray) -> np.ndarray:
    N = eps.shape[0]
    c = np.zeros(F.shape[0])
    for i in range(N):
        for j in range(i + 1, N):
            c = np.maximum(c, np.abs(F[:, i] - F[:, j]) / eps[i, j])
    return c


@pytest.mark.parametrize("n, degenerate", [(500.0, True), (1e5, False)])
def test_smalldb_solves_problem_8(n, degenerate):
    F, eps = euclid_instance(30, 4, np.random.default_rng(1))
    F[3] *= 0.2  # a flatter query gets a different Lipschitz constant
    cs = ConstraintSet.dense(eps)
    delta = 0.05
    if degenerate:  # n = 500 is below eq. (10)'s threshold: true optimum of (8), but vacuous
        with pytest.warns(UserWarning, match="degenerate"):
            r = smalldb_params(F, cs, n, delta=delta)
    else:
        r = smalldb_params(F, cs, n, delta=delta)
    assert r.report["degenerate"] is degenerate
    c = max_lipschitz_rows(F, eps)
    C = 16 * math.log(30) * math.log(4) + 4 * math.log(1 / delta)

    def phi(b: float) -> float:
        w = np.minimum(1.0, 1.0 / (b * c))
        return float(np.max((1 - w) * F.max(1)) + (C / (b * n)) ** (1 / 3))

    grid = np.exp(np.linspace(-np.log(c.max()) - 2, -np.log(c.max()) + 15, 20001))
    assert r.objective <= min(phi(b) for b in grid) + 1e-9
    assert r.objective == pytest.approx(phi(float(r.beta[0])), rel=1e-9)
    assert np.all(r.w <= 1) and np.all(r.w > 0)
    assert np.all(r.beta == r.beta[0])  # one shared beta (Theorem 5)
    # privacy (Theorem 5): beta max_f w_f |f_i - f_j| <= eps_ij on every pair
    assert np.max(r.u * c) <= 1 + 1e-9
    assert r.report["max_ratio"] <= 1 + 1e-12


def test_mwem_parameters():
    F, eps = euclid_instance(25, 3, np.random.default_rng(2))
    cs = ConstraintSet.dense(eps)
    n = 1e5
    r = mwem_params(F, cs, n)
    c = max_lipschitz_rows(F, eps)
    beta_bar = 1 / c.max()
    T_star = (n * beta_bar * math.sqrt(math.log(25)) / (10 * math.log(3))) ** (2 / 3)
    T = r.report["T"]
    assert T in (math.floor(T_star), math.ceil(T_star))
    assert r.beta[0] == pytest.approx(beta_bar / (2 * T), rel=1e-12)
    # privacy (Theorem 7): 2 T beta max_f |f_i - f_j| <= eps_ij
    assert 2 * T * r.beta[0] * c.max() <= 1 + 1e-9
    assert r.report["max_ratio"] == pytest.approx(1.0, rel=1e-9)
    fixed = mwem_params(F, cs, n, T=3)
    assert fixed.report["T"] == 3 and fixed.beta[0] == pytest.approx(beta_bar / 6, rel=1e-12)


def test_synthetic_input_checks():
    F, eps = euclid_instance(5, 2, np.random.default_rng(3))
    cs = ConstraintSet.dense(eps)
    with pytest.raises(SolverError, match=r"\[0, 1\]"):
        smalldb_params(F * 2, cs, 10)
    with pytest.raises(SolverError, match="positive"):
        mwem_params(F, cs, 0)
    with pytest.raises(SolverError, match="T must"):
        mwem_params(F, cs, 10, T=0)
    one = smalldb_params(np.array([[0.5]]), ConstraintSet.dense(np.zeros((1, 1))), 10)
    assert one.beta[0] == np.inf and not np.isnan(one.objective)


def test_smalldb_degenerate_design_is_flagged_and_warned():
    """Spec §5.1 (9)-(10): for small n the optimum of (8) is 'answer nothing' (w -> 0)."""
    F, eps = euclid_instance(30, 4, np.random.default_rng(1))
    cs = ConstraintSet.dense(eps)
    c = max_lipschitz_rows(F, eps)
    C = 16 * math.log(30) * math.log(4) + 4 * math.log(1 / 0.05)
    n0 = C * c.max() / F.max() ** 3  # eq. (10) at w = 1, beta = 1 / max c, alpha = max ||f||_inf
    with pytest.warns(UserWarning, match="degenerate") as rec:
        small = smalldb_params(F, cs, n0 / 3)
    assert small.report["degenerate"] and small.w.min() < 1e-6
    assert small.objective >= F.max() * (1 - 1e-9)  # the bound is vacuous
    assert small.report["n_nonvacuous"] == pytest.approx(n0, rel=1e-9)
    assert f"{n0:.4g}" in str(rec[0].message) and any("n >" in s for s in small.report["notes"])
    assert small.report["max_ratio"] <= 1 + 1e-12  # still a private design
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning above the threshold
        big = smalldb_params(F, cs, n0 * 3)
    assert not big.report["degenerate"] and big.objective < F.max()
    assert big.w.min() > 1e-6
