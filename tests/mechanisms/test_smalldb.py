"""DXSmallDB: Algorithm 1 / Theorem 5, exact sampling over R, candidate-count guard, baseline."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import chisquare

import dprivacy as dp
from dprivacy import metrics
from dprivacy.errors import CandidateSetTooLargeError, PrivacyViolationError, ValidationError
from dprivacy.mechanisms._privacy import as_design
from dprivacy.mechanisms.smalldb import DXSmallDB, synthetic_size
from tests.mechanisms.helpers import brute_max_ratio, cases


def unit_workload(N, rng, m=4):
    return dp.Workload(rng.uniform(0, 1, size=(m, N)))


@pytest.mark.parametrize("name, U, M", cases(), ids=[c[0] for c in cases()])
def test_theorem5_holds_over_all_pairs_for_solver_designs(name, U, M):
    W = unit_workload(U.N, np.random.default_rng(3))
    eps = M.budget(U)
    for mech in (DXSmallDB.from_solver(W, U, M, n=500, size=2),
                 DXSmallDB.baseline(W, U, M, size=2)):
        ratio = brute_max_ratio(W.F, mech.beta * mech.design.w, eps)
        assert ratio <= 1 + 1e-9
        assert mech.max_ratio_ == pytest.approx(ratio, rel=1e-9)
    bad = as_design(W, DXSmallDB.from_solver(W, U, M, n=500, size=2).design.w,
                    DXSmallDB.from_solver(W, U, M, n=500, size=2).beta * 1.01, method="manual")
    with pytest.raises(PrivacyViolationError, match="Theorem 5"):
        DXSmallDB(W, bad, size=2, universe=U, metric=M)


def test_release_is_a_histogram_of_the_prescribed_size():
    U = dp.Universe.from_points(np.arange(5.0).reshape(-1, 1))
    W = dp.Workload.range_queries(5, [(0, 1), (1, 3), (2, 4), (0, 4)])
    M = metrics.Euclidean(1.0)
    x = np.array([30, 10, 0, 25, 35])
    for size in (1, 3, 6):
        mech = DXSmallDB.from_solver(W, U, M, n=100, size=size)
        assert mech.n_candidates == math.comb(5 + size - 1, size)
        sim = dp.Accountant(total=math.inf)
        for seed in range(3):
            y = mech.release(x, rng=seed, secure=False, accountant=sim)
            assert y.shape == (5,) and y.dtype.kind == "i" and y.min() >= 0 and y.sum() == size
    y = mech.release(x, accountant=sim)  # secure default path
    assert y.sum() == 6
    s = synthetic_size(W.m, alpha=0.5)
    assert s == math.ceil(math.log(4) / 0.25)
    assert DXSmallDB.from_solver(W, U, M, n=100, alpha=0.5).release(x, rng=0, secure=False).sum() == s


def test_exact_sampling_law_over_all_candidates():
    """Frequencies of y match exp(beta n u(x, y) / 2) over the enumerated R (chi-square)."""
    U = dp.Universe.from_points(np.arange(3.0).reshape(-1, 1))
    W = dp.Workload([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.5, 0.5, 0.0]])
    M = metrics.Euclidean(0.5)
    # a tight, non-degenerate design: beta * max_f |f_i - f_j| <= 0.5 |i - j| binds on (0, 1)
    # (from_solver would shrink w to ~0 at n = 20, making the law nearly uniform and the test weak)
    d = dp.Design(np.ones(3), np.full(3, 0.5), constraints=M.constraint_set(U))
    mech = DXSmallDB(W, d, size=2, universe=U, metric=M)
    x = np.array([12, 3, 5])
    n = x.sum()
    cands = [np.bincount(c, minlength=3) for c in itertools.combinations_with_replacement(range(3), 2)]
    Fw = mech.design.w[:, None] * W.dense()
    u = np.array([-np.max(np.abs(Fw @ x / n - Fw @ y / 2)) for y in cands])
    p = np.exp(mech.beta * n * u / 2)
    p /= p.sum()
    np.testing.assert_allclose(np.exp(mech.log_weights(x)) / np.exp(mech.log_weights(x)).sum(), p,
                               rtol=1e-10)
    rng = np.random.default_rng(99)
    k = 12000
    index = {tuple(y): r for r, y in enumerate(cands)}
    counts = np.zeros(len(cands))
    sim = dp.Accountant(total=math.inf)
    for _ in range(k):
        counts[index[tuple(mech.release(x, rng=rng, secure=False, accountant=sim))]] += 1
    keep = p * k >= 5
    expected = np.append(p[keep] * k, p[~keep].sum() * k)
    observed = np.append(counts[keep], counts[~keep].sum())
    if expected[-1] == 0:
        expected, observed = expected[:-1], observed[:-1]
    assert chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3


def test_candidate_set_too_large_states_the_count():
    U = dp.Universe.from_points(np.arange(40.0).reshape(-1, 1))
    W = dp.Workload(np.random.default_rng(0).uniform(size=(3, 40)))
    with pytest.raises(CandidateSetTooLargeError, match=r"C\(47, 8\) = 3\.145e\+08"):
        DXSmallDB.baseline(W, U, metrics.Euclidean(1.0), size=8)
    with pytest.raises(CandidateSetTooLargeError, match="max_candidates = 100"):
        DXSmallDB.baseline(W, U, metrics.Euclidean(1.0), size=2, max_candidates=100)


def test_input_validation():
    U = dp.Universe.from_points(np.arange(3.0).reshape(-1, 1))
    M = metrics.Euclidean(1.0)
    with pytest.raises(ValidationError, match=r"\[0, 1\]"):
        DXSmallDB.baseline(dp.Workload([[0.0, 2.0, 1.0]]), U, M, size=2)
    W = dp.Workload([[0.0, 1.0, 1.0]])
    with pytest.raises(ValidationError, match="exactly one"):
        DXSmallDB.baseline(W, U, M)
    with pytest.raises(ValidationError, match="size"):
        DXSmallDB.baseline(W, U, M, size=0)
    mech = DXSmallDB.baseline(W, U, M, size=2)
    with pytest.raises(ValidationError, match="empty"):
        mech.release(np.zeros(3), rng=0, secure=False)
