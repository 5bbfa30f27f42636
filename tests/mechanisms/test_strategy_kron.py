"""Kronecker strategies through dprivacy: design_strategy on grids, StrategyMechanism's structured
check and release, configs, the command-line report, clear refusals."""

from __future__ import annotations

import numpy as np
import pytest

import dprivacy as dp
from dprivacy import metrics
from dprivacy.config import MechanismConfig
from dprivacy.errors import ConfigError, PrivacyViolationError, ShapeError, ValidationError
from dprivacy.mechanisms.kron_strategy import KronOperator
from solvers.strategy.basis import Basis
from tests.mechanisms.test_strategy import all_pairs_ratio


def _grid(nx: int, ny: int, step: float = 1.0) -> dp.Universe:
    return dp.Universe.from_points(
        np.array([[a * step, b] for a in range(nx) for b in range(ny)], float))


@pytest.fixture(scope="module")
def small():
    U, M = _grid(6, 5, 0.5), metrics.Euclidean(0.8)
    W = dp.ImplicitWorkload.all_rectangles(6, 5)
    d = dp.design_strategy(W, U, M, structure="kronecker", time_limit=4)
    return W, U, M, d


def test_kron_design_passes_the_independent_all_pairs_check(small):
    W, U, M, d = small
    assert d.is_kron and isinstance(d.C, KronOperator)
    assert d.max_ratio <= 1.0
    assert all_pairs_ratio(d.strategy, M.budget(U)) <= 1.0
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    assert mech.max_ratio_ == pytest.approx(d.max_ratio)
    # the error against the dense computation from the written-out workload
    F = W.to_workload().dense()
    from tests.mechanisms.test_strategy import known_total_error

    assert mech.expected_squared_error() == pytest.approx(known_total_error(F, d.strategy), rel=1e-8)
    assert np.sum(mech.query_variances()) == pytest.approx(mech.expected_squared_error(), rel=1e-8)
    assert d.lower_bound is not None and 0 < d.lower_bound <= mech.expected_squared_error()


def test_kron_release_is_unbiased_with_the_promised_variances(small):
    W, U, M, d = small
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    x = np.arange(W.N) % 4
    truth = W.answer(x)
    rng = np.random.default_rng(1)
    acc = dp.Accountant(1e9)
    reps = np.array([mech.release(x, rng=rng, secure=False, accountant=acc) for _ in range(1500)])
    var = mech.query_variances()
    se = np.sqrt(var / reps.shape[0])
    ok = var > 1e-9
    assert np.all(np.abs(reps.mean(axis=0) - truth)[ok] <= 5 * se[ok])
    assert np.allclose(reps[:, ~ok], truth[~ok])  # the total: exact
    emp = reps.var(axis=0)[ok]
    assert np.median(emp / var[ok]) == pytest.approx(1.0, abs=0.1)
    assert acc.spent == pytest.approx(1500 * mech.release_cost)


def test_release_estimate_gives_the_same_answers(small):
    W, U, M, d = small
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    acc = dp.Accountant(10.0)
    x = np.arange(W.N) % 3
    a = mech.release(x, rng=np.random.default_rng(4), secure=False, accountant=acc)
    h = mech.release_estimate(x, rng=np.random.default_rng(4), secure=False, accountant=acc)
    assert h.shape == (W.N,) and np.allclose(W.answer(h), a)
    assert acc.spent == pytest.approx(2 * mech.release_cost)


def test_kron_config_round_trip_and_tampered_factors_refused(small, tmp_path):
    W, U, M, d = small
    cfg = MechanismConfig.from_design(W, U, M, d)
    path = cfg.save(tmp_path / "kron.json")
    loaded = MechanismConfig.load(path, U, M, W)
    assert loaded.to_mechanism().expected_squared_error() == pytest.approx(
        dp.StrategyMechanism(W, d, universe=U, metric=M).expected_squared_error())
    doc = cfg.to_dict()
    doc["design"]["strategy"]["kron"]["x"]["dense"] = [
        2.0 * v for v in doc["design"]["strategy"]["kron"]["x"]["dense"]]
    with pytest.raises((ConfigError, PrivacyViolationError)):
        MechanismConfig.from_dict(doc).bind(W, U, M)
    bad = dp.StrategyDesign(W, KronOperator(2 * d.C.Bx, d.C.By), d.basis, None, None)
    with pytest.raises(PrivacyViolationError, match="Kronecker"):
        dp.StrategyMechanism(W, bad, universe=U, metric=M)


def test_kron_refusals():
    U = _grid(4, 3)
    W = dp.ImplicitWorkload.all_rectangles(4, 3)
    eps = metrics.Euclidean(1.0).budget(U) * 1.5
    with pytest.raises(ValidationError, match="Euclidean"):
        dp.design_strategy(W, U, metrics.Matrix(eps), structure="kronecker")
    with pytest.raises(ValidationError, match="rectangles"):
        dp.design_strategy(dp.ImplicitWorkload.all_ranges(12),
                           dp.Universe.from_points(np.arange(12.0)[:, None]),
                           metrics.Euclidean(1.0), structure="kronecker")
    with pytest.raises(ValidationError, match="structure"):
        dp.design_strategy(W, U, metrics.Euclidean(1.0), structure="cubes")
    with pytest.raises(ValidationError, match="Laplace"):
        dp.design_strategy(W, U, metrics.Euclidean(1.0), structure="kronecker", noise="gaussian",
                           rho=1.0)


def test_large_rectangles_are_implicit_per_axis():
    W = dp.ImplicitWorkload.all_rectangles(256, 256)
    assert W.N == 65536 and W.m == (256 * 257 // 2) ** 2
    with pytest.raises(ShapeError, match="axis_grams"):
        W.gram()
    Gx, Gy = W.axis_grams()
    assert Gx.shape == Gy.shape == (256, 256)
    small = dp.ImplicitWorkload.all_rectangles(3, 4)
    names = small.query_names()
    assert [small.query_name(k) for k in range(small.m)] == names
    with pytest.raises(ShapeError):
        dp.ImplicitWorkload.all_ranges(10_000)


@pytest.mark.slow
def test_grids_beyond_64x64_get_a_kronecker_strategy_automatically():
    U, M = _grid(65, 64), metrics.Euclidean(0.1)
    W = dp.ImplicitWorkload.all_rectangles(65, 64)
    d = dp.design_strategy(W, U, M, time_limit=3)
    assert d.is_kron and d.max_ratio <= 1.0
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    err = mech.expected_squared_error()
    # every cell once is among the candidates: never worse than the identity strategy
    assert d.lower_bound <= err <= d.report["identity_error"] * (1 + 1e-9)
    x = np.zeros(W.N)
    x[100] = 5
    out = mech.release(x, rng=0, secure=False)
    assert out.shape == (W.m,)
    from dprivacy.cli.report import summary_text

    text = summary_text(W, U, M, d)
    assert "certified lower bound" in text and "Kronecker" in text and "EXACTLY" in text


def test_release_of_256x256_refused_before_any_charge_estimate_given():
    n = 256
    U, M = _grid(n, n), metrics.Euclidean(0.1)
    W = dp.ImplicitWorkload.all_rectangles(n, n)
    s = np.sqrt(0.1 / 2)  # each cell once at half the closest pair's budget (exact ratio 1)
    d = dp.StrategyDesign(W, KronOperator(s * np.eye(n), s * np.eye(n)), Basis.identity(n * n),
                          None, None)
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    assert mech.max_ratio_ <= 1.0
    acc = dp.Accountant(10.0)
    x = np.zeros(W.N)
    x[7] = 3
    with pytest.raises(ValidationError, match="release_estimate"):
        mech.release(x, rng=0, secure=False, accountant=acc)
    assert acc.spent == 0
    h = mech.release_estimate(x, rng=0, secure=False, accountant=acc)
    assert h.shape == (W.N,) and abs(h.sum() - 3) < 1e-6
    assert acc.spent == pytest.approx(mech.release_cost)
