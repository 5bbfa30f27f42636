"""DXExponential: Definition 9 / Theorem 3, its eps_min baseline, sampling law and safety."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chisquare

import dprivacy as dp
from dprivacy import metrics, noise
from dprivacy.errors import PrivacyViolationError, ShapeError, ValidationError
from dprivacy.mechanisms._privacy import as_design
from dprivacy.mechanisms.exponential import DXExponential
from tests.mechanisms.helpers import brute_max_ratio, cases


def utility_for(U, rng):
    return rng.normal(size=(5, U.N))


@pytest.mark.parametrize("name, U, M", cases(), ids=[c[0] for c in cases()])
def test_theorem3_holds_over_all_pairs_and_is_tight(name, U, M):
    util = utility_for(U, np.random.default_rng(1))
    eps = M.budget(U)
    for mech in (DXExponential.optimal(util, U, M), DXExponential.baseline(util, U, M)):
        ratio = brute_max_ratio(util, mech.beta * mech.design.w, eps)
        assert ratio <= 1 + 1e-9
        assert mech.max_ratio_ == pytest.approx(ratio, rel=1e-9)
    # the optimal beta is tight (some pair at its budget) and beats the baseline's
    opt, base = DXExponential.optimal(util, U, M), DXExponential.baseline(util, U, M)
    assert brute_max_ratio(util, opt.beta * opt.design.w, eps) == pytest.approx(1.0, rel=1e-9)
    assert opt.beta >= base.beta


@pytest.mark.parametrize("name, U, M", cases(), ids=[c[0] for c in cases()])
def test_raised_beta_is_refused_at_construction(name, U, M):
    util = utility_for(U, np.random.default_rng(2))
    opt = DXExponential.optimal(util, U, M)
    bad = as_design(dp.Workload(util), 1.0, opt.beta * 1.001, method="manual")
    with pytest.raises(PrivacyViolationError, match="Theorem 3"):
        DXExponential(util, bad, universe=U, metric=M)
    # a per-output w that rescales the worst output up is refused too
    w = np.ones(util.shape[0])
    w[0] = 2.0
    d = as_design(dp.Workload(util), w, opt.beta, method="manual")
    if brute_max_ratio(util, opt.beta * w, M.budget(U)) > 1 + 1e-9:
        with pytest.raises(PrivacyViolationError):
            DXExponential(util, d, universe=U, metric=M)


def test_without_constraints_nothing_is_built():
    util = np.eye(3)
    d = as_design(dp.Workload(util), 1.0, 0.1, method="manual")
    with pytest.raises(PrivacyViolationError, match="no constraint set"):
        DXExponential(util, d)
    with pytest.raises(ShapeError):
        DXExponential(np.eye(4)[:, :3], d)


def test_output_frequencies_match_exp_beta_u_over_2():
    """Chi-square goodness of fit of 20000 draws against exp(beta u / 2) normalised."""
    U = dp.Universe.from_points(np.arange(5.0).reshape(-1, 1))
    M = metrics.Euclidean(0.6)
    util = -np.abs(np.arange(5)[:, None] - np.arange(5)[None, :]).astype(float)
    mech = DXExponential.optimal(util, U, M)
    x = np.array([3, 1, 0, 2, 1])
    u = util @ x
    p = np.exp(mech.beta * u / 2)
    p /= p.sum()
    np.testing.assert_allclose(mech.probabilities(x), p, rtol=1e-12)
    rng = np.random.default_rng(12345)
    k = 20000
    sim = dp.Accountant(total=math.inf)
    draws = np.array([mech.release(x, rng=rng, secure=False, accountant=sim) for _ in range(k)])
    counts = np.bincount(draws, minlength=5)
    assert chisquare(counts, k * p).pvalue > 1e-3
    # a wrong law (beta doubled) is rejected by the same test
    q = np.exp(2 * mech.beta * u / 2)
    q /= q.sum()
    assert chisquare(counts, k * q).pvalue < 1e-6


def test_large_utilities_do_not_overflow():
    U = dp.Universe.from_points(np.arange(3.0).reshape(-1, 1))
    util = np.array([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]) * 1e5
    mech = DXExponential.optimal(util, U, metrics.Euclidean(1.0))
    x = np.array([10**6, 0, 0])
    assert mech.release(x, rng=0, secure=False) == 1
    assert np.all(np.isfinite(mech.log_weights(x)))


def test_secure_sampler_is_the_default(monkeypatch):
    calls = []
    real = noise.exponential_choice

    def spy(lw, *, rng=None, secure=True):
        calls.append(secure)
        return real(lw, rng=rng, secure=secure)

    monkeypatch.setattr(noise, "exponential_choice", spy)
    U = dp.Universe.from_points(np.arange(3.0).reshape(-1, 1))
    mech = DXExponential.optimal(np.eye(3), U, metrics.Euclidean(1.0))
    r = mech.release(np.array([1, 2, 3]))
    assert r in (0, 1, 2) and calls == [True]


def test_baseline_uses_eps_min_over_utility_range():
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    M = metrics.Euclidean(2.0)
    util = np.array([[0.0, 1.0, 4.0], [1.0, 1.0, 1.0]])
    b = DXExponential.baseline(util, U, M)
    assert b.beta == pytest.approx(2.0 / 4.0)
    assert b.design.method == "baseline"
    with pytest.raises(ShapeError, match="N = 3 columns"):
        DXExponential.baseline(util, dp.Universe.from_points(np.zeros((2, 1)) + [[0], [1]]), M)
    with pytest.raises(ValidationError, match="eps_ij = 0"):
        DXExponential.optimal(util, U, metrics.Matrix(np.zeros((3, 3))))
