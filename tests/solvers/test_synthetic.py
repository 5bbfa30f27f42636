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


def test_smalldb_solves_problem_8():
    F, eps = euclid_instance(30, 4, np.random.default_rng(1))
    F[3] *= 0.2  # a flatter query gets a different Lipschitz constant
    cs = ConstraintSet.dense(eps)
    n, delta = 500.0, 0.05
    r = smalldb_params(F, cs, n, delta=delta)
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
