"""design_strategy(noise="gaussian"): privacy on every pair by the exact l2 condition, for many
metric kinds, and the certificate of the design."""

from __future__ import annotations

import numpy as np
import pytest

import dprivacy as dp
from dprivacy import metrics
from dprivacy.errors import ValidationError

RHO = 0.3


def _ratio(A: np.ndarray, eps: np.ndarray, rho: float) -> float:
    """max over every pair of ||A e_i - A e_j||_2^2 / (2 rho eps_ij), from the columns."""
    N = A.shape[1]
    worst = 0.0
    for i in range(N - 1):
        q = ((A[:, i:i + 1] - A[:, i + 1:]) ** 2).sum(axis=0)
        e = eps[i, i + 1:]
        ok = np.isfinite(e)
        worst = max(worst, float(np.max(q[ok] / (2 * rho * e[ok]), initial=0.0)))
    return worst


def _cases():
    rng = np.random.default_rng(7)
    line = dp.Universe.from_points(np.arange(12.0)[:, None])
    pts = dp.Universe.from_points(rng.uniform(0, 5, (14, 2)))
    geo = dp.Universe.from_points(np.c_[rng.uniform(30, 45, 10), rng.uniform(-120, -75, 10)])
    prod = dp.Universe.from_domains({"a": [0, 1, 2], "b": [0, 1], "c": [0, 1]})
    q = rng.uniform(0, 3, (9, 3))
    E = np.abs(q[:, None] - q[None]).sum(-1)  # an l1 metric, given as a matrix
    small = dp.Universe.from_points(np.arange(9.0)[:, None])
    return [
        ("euclidean line", line, metrics.Euclidean(0.5)),
        ("euclidean points", pts, metrics.Euclidean(0.2)),
        ("geodesic", geo, metrics.Geodesic(eps_per_km=0.001)),
        ("blowfish", pts, metrics.BlowfishThreshold(3.0, 1.0, "A")),
        ("graph", line, metrics.Graph([(i, i + 1, 0.5 + 0.1 * i) for i in range(11)]
                                      + [(0, 6, 0.4)])),
        ("matrix", small, metrics.Matrix(E)),
        ("attribute", prod, metrics.AttributeWeighted({"a": 1.0, "b": 0.5, "c": 2.0})),
        ("elementwise", small, metrics.ElementWise(rng.uniform(0.2, 1.0, 9))),
        ("discrete", small, metrics.Discrete(eps=1.0)),
    ]


@pytest.mark.parametrize("name, U, M", _cases(), ids=[c[0] for c in _cases()])
def test_every_pair_satisfies_the_l2_condition(name, U, M):
    rng = np.random.default_rng(1)
    W = dp.Workload(rng.random((4, U.N)))
    d = dp.design_strategy(W, U, M, noise="gaussian", rho=RHO, tol=1e-3)
    assert d.noise == "gaussian" and d.rho == RHO
    ratio = _ratio(d.strategy, M.budget(U), RHO)
    assert ratio <= 1.0
    assert ratio > 0.999  # scaled to the budget: some pair is tight
    assert d.report["certified_gap"] <= 1e-3
    err = d.expected_squared_error()
    assert d.lower_bound <= err <= d.lower_bound / (1 - 1e-3) * (1 + 1e-9)
    # unit-variance rows: the error is ||F A^+||^2, not twice it
    Fc = W.dense() - W.dense().mean(axis=1, keepdims=True)
    A = d.strategy
    Ac = A - A.mean(axis=1, keepdims=True)
    assert err == pytest.approx(float(np.sum((Fc @ np.linalg.pinv(Ac, rcond=1e-10)) ** 2)),
                                rel=1e-6)


def test_gaussian_beats_its_rho_on_a_larger_budget_and_scales_as_one_over_rho():
    U = dp.Universe.from_points(np.arange(10.0)[:, None])
    W = dp.ImplicitWorkload.all_ranges(10)
    M = metrics.Euclidean(1.0)
    e1 = dp.design_strategy(W, U, M, noise="gaussian", rho=0.5, tol=1e-5)
    e2 = dp.design_strategy(W, U, M, noise="gaussian", rho=1.0, tol=1e-5)
    # X scales with rho, the error tr(G X^+) with 1 / rho
    assert e1.expected_squared_error() == pytest.approx(2 * e2.expected_squared_error(), rel=1e-4)
    assert np.isclose(e1.query_variances().sum(), e1.expected_squared_error())


def test_bad_calls_are_refused_before_any_work():
    U = dp.Universe.from_points(np.arange(5.0)[:, None])
    W = dp.Workload(np.ones((1, 5)))
    M = metrics.Euclidean(1.0)
    with pytest.raises(ValidationError, match="rho"):
        dp.design_strategy(W, U, M, noise="gaussian")
    with pytest.raises(ValidationError, match="rho"):
        dp.design_strategy(W, U, M, noise="gaussian", rho=-1)
    with pytest.raises(ValidationError, match="noise"):
        dp.design_strategy(W, U, M, noise="cauchy")
    with pytest.raises(ValidationError, match="rho"):
        dp.design_strategy(W, U, M, rho=1.0)
    with pytest.raises(ValidationError, match="unknown options"):
        dp.design_strategy(W, U, M, noise="gaussian", rho=1.0, starts=("identity",))
    W2 = dp.Workload(np.random.default_rng(0).random((2, 5)))
    d = dp.design_strategy(W2, U, M, noise="gaussian", rho=1.0)
    mech = dp.StrategyMechanism(W2, d, universe=U, metric=M)  # Gaussian releases (zCDP)
    assert mech.release_notion == "zcdp"
