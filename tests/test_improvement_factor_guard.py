"""improvement_factor: a numerically zero w counts as zero (and says so); a design that is not
private is refused, never credited with IF = inf (API and the command's report)."""

from __future__ import annotations

import numpy as np
import pytest

import dprivacy as dp
from dprivacy import metrics
from dprivacy.cli.report import report_text
from dprivacy.design import W_ZERO_TOL, ImprovementFactorWarning
from dprivacy.errors import PrivacyViolationError


@pytest.fixture
def inputs():
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    M = metrics.Euclidean(1.0)
    W = dp.Workload([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]])
    return U, M, W


def test_numerically_zero_w_is_treated_as_zero_and_said(inputs):
    U, M, W = inputs
    # query 1: w = 1e-17 with a beta so large that IF_1 alone would be ~3e16
    d = dp.Design([0.5, 1e-17], [0.4, 3e16], constraints=M.constraint_set(U))
    assert d.max_ratio(W) <= 1  # private: u_1 = 0.3
    with pytest.warns(ImprovementFactorWarning, match="numerically zero"):
        geo = dp.improvement_factor(W, U, M, d)
    assert geo == pytest.approx(0.4 * W.sensitivity() / M.eps_min(U))
    per = dp.improvement_factor(W, U, M, d, per_query=True)
    assert np.isnan(per[1]) and per[0] == pytest.approx(geo)
    with pytest.warns(ImprovementFactorWarning):
        text = report_text(W, U, M, d)
    assert "e+16" not in text and "3e16" not in text
    assert f"geometric-mean IF: {geo:.4g}" in text


def test_w_just_above_the_tolerance_still_counts(inputs):
    U, M, W = inputs
    w1 = W_ZERO_TOL * 10
    d = dp.Design([0.5, w1], [0.4, 0.1 / w1], constraints=M.constraint_set(U))
    per = dp.improvement_factor(W, U, M, d, per_query=True)
    assert np.isfinite(per).all()


@pytest.mark.parametrize("w,beta", [([1.0, 1.0], [0.4, np.inf]),   # exact answer that separates
                                    ([1.0, 1.0], [10.0, 10.0])])   # plain too-low noise
def test_a_design_that_is_not_private_is_refused(inputs, w, beta):
    U, M, W = inputs
    d = dp.Design(w, beta)
    with pytest.raises(PrivacyViolationError):
        dp.improvement_factor(W, U, M, d)
    with pytest.raises(PrivacyViolationError):
        dp.improvement_factor(W, U, M, d, per_query=True)
    with pytest.raises(PrivacyViolationError):
        report_text(W, U, M, d)


def test_an_exact_answer_to_a_constant_query_is_private_and_left_out(inputs):
    U, M, _ = inputs
    W = dp.Workload([[0.0, 1.0, 2.0], [7.0, 7.0, 7.0]])
    d = dp.Design([1.0, 1.0], [0.4, np.inf])
    with pytest.warns(ImprovementFactorWarning, match="answered exactly"):
        assert dp.improvement_factor(W, U, M, d) == pytest.approx(0.4 * W.sensitivity() / M.eps_min(U))
