"""audit(): no violation for the d_X mechanisms, and a broken mechanism (noise halved) is flagged."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

import dprivacy as dp
from dprivacy import metrics
from dprivacy.audit import AuditResult, audit, clopper_pearson
from dprivacy.errors import ValidationError
from dprivacy.mechanisms.exponential import DXExponential
from dprivacy.mechanisms.laplace import DXLaplace
from dprivacy.mechanisms.mwem import DXMWEM
from dprivacy.mechanisms.smalldb import DXSmallDB


class HalvedNoiseLaplace(DXLaplace):
    """Deliberately broken: skips verification and adds half the designed noise (loss x 2)."""

    def _verify(self, universe, metric):
        return 0.0

    @property
    def noise_scale(self):
        return self.design.noise_scale / 2


@pytest.fixture(scope="module")
def line():
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [2.0], [4.0]]))
    M = metrics.Euclidean(1.0)
    W = dp.Workload([[0.0, 1.0, 2.0, 4.0]])
    return U, M, W, np.array([5, 3, 2, 1])


def test_dx_laplace_passes_and_halved_noise_is_flagged(line):
    U, M, W, x = line
    d = dp.design(W, U, M, method="closed_form")
    good, broken = DXLaplace(W, d), HalvedNoiseLaplace(W, d)
    for i, j in [(0, 1), (1, 3)]:
        r = audit(good, x, i, j, samples=8000, rng=i + 10 * j)
        assert isinstance(r, AuditResult)
        assert r.eps_ij == M.budget(U)[i, j]
        assert not r.violated and r.eps_lower_bound <= r.eps_ij
        assert r.samples + r.pilot_samples == 8000
    r = audit(broken, x, 0, 1, samples=8000, rng=1)
    assert r.violated and r.eps_lower_bound > 1.0 == r.eps_ij
    assert r.eps_estimate == pytest.approx(2.0, abs=0.4)  # the true loss is 2 eps_ij


def test_exponential_and_synthetic_mechanisms_pass(line):
    U, M, W, x = line
    util = -np.abs(np.arange(4)[:, None] - np.arange(4)[None, :]).astype(float)
    Q = dp.Workload.range_queries(4, [(0, 1), (1, 2), (2, 3), (0, 0)])
    # n = 11 is far too few records for a useful SmallDB (the solver says so), but its privacy
    # loss beta * max_f w_f |f_i - f_j| is still at the budget, which is what the audit probes
    with pytest.warns(UserWarning, match="degenerate"):
        smalldb = DXSmallDB.from_solver(Q, U, M, n=11, size=2)
    mechs = [DXExponential.optimal(util, U, M), DXExponential.baseline(util, U, M),
             smalldb, DXMWEM.from_solver(Q, U, M, n=11, T=2)]
    for k, mech in enumerate(mechs):
        for i, j in [(0, 1), (2, 3)]:
            r = audit(mech, x, i, j, samples=3000 if k == 3 else 6000, rng=k)
            assert not r.violated, (mech, i, j, r)
    # the exponential mechanism's loss on (0, 1) is visible: a positive lower bound
    r = audit(mechs[0], np.array([1, 1, 1, 1]), 0, 1, samples=20000, rng=5)
    assert 0 < r.eps_lower_bound <= r.eps_ij


def test_broken_exponential_is_flagged():
    """An exponential mechanism run at 2 x its private beta (verification bypassed).

    Output 0 loses one unit of utility when the record moves 0 -> 1 and 30 outputs gain one, so
    the realised loss approaches the bound beta Delta u of Theorem 3 (~1.93 at 2 x beta)."""
    U = dp.Universe.from_points(np.arange(3.0).reshape(-1, 1))
    util = np.zeros((31, 3))
    util[0, 0] = 1.0
    util[1:, 1] = 1.0
    mech = DXExponential.optimal(util, U, metrics.Euclidean(1.0))
    assert mech.beta == 1.0
    r = audit(mech, np.array([1, 0, 0]), 0, 1, samples=20000, rng=0)
    assert not r.violated
    object.__setattr__(mech, "beta", 2 * mech.beta)
    r = audit(mech, np.array([1, 0, 0]), 0, 1, samples=20000, rng=0)
    assert r.violated and r.eps_lower_bound > 1.0


def test_clopper_pearson_matches_scipy():
    for k, n in [(0, 50), (7, 50), (50, 50), (300, 1000)]:
        lo, hi = clopper_pearson(k, n, 0.025)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert lo == pytest.approx(ci.low, abs=1e-12) and hi == pytest.approx(ci.high, abs=1e-12)


def test_input_validation(line):
    U, M, W, x = line
    mech = DXLaplace(W, dp.design(W, U, M, method="closed_form"))
    with pytest.raises(ValidationError, match="no record"):
        audit(mech, np.array([0, 3, 2, 1]), 0, 1, samples=1000, rng=0)
    with pytest.raises(ValidationError, match="distinct"):
        audit(mech, x, 1, 1, samples=1000, rng=0)
    with pytest.raises(ValidationError, match="too few"):
        audit(mech, x, 0, 1, samples=60, rng=0)
    r = audit(mech, x, 0, 1, samples=2000, rng=0, eps_ij=0.1)  # an explicit, smaller budget
    assert r.eps_ij == 0.1 and r.violated


def test_budget_of_a_non_edge_pair_is_the_shortest_path_distance():
    # points on a line are constrained on their gaps (edges); the audit reads eps_ij of any pair
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [2.5], [4.0]]))
    M = metrics.Euclidean(0.5)
    W = dp.Workload([[0.0, 1.0, 2.0, 4.0]])
    mech = DXLaplace(W, dp.design(W, U, M, method="closed_form"))
    assert mech.design.constraints.kind == "edges"
    r = audit(mech, np.array([3, 1, 1, 1]), 0, 3, samples=2000, rng=0)
    assert r.eps_ij == pytest.approx(2.0)
