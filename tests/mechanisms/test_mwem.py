"""DXMWEM: Algorithm 2 / Theorem 7 with T and beta from solvers.mwem_params, and its baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import dprivacy as dp
from dprivacy import metrics, noise
from dprivacy.errors import PrivacyViolationError, ValidationError
from dprivacy.mechanisms._privacy import as_design
from dprivacy.mechanisms.mwem import DXMWEM
from tests.mechanisms.helpers import brute_max_ratio, cases


@pytest.mark.parametrize("name, U, M", cases(), ids=[c[0] for c in cases()])
def test_theorem7_holds_over_all_pairs_for_solver_designs(name, U, M):
    W = dp.Workload(np.random.default_rng(4).uniform(0, 1, size=(5, U.N)))
    eps = M.budget(U)
    for mech in (DXMWEM.from_solver(W, U, M, n=1000), DXMWEM.from_solver(W, U, M, n=1000, T=3),
                 DXMWEM.baseline(W, U, M, T=4)):
        ratio = brute_max_ratio(W.F, 2 * mech.T * mech.beta * mech.design.w, eps)
        assert ratio <= 1 + 1e-9
        assert mech.max_ratio_ == pytest.approx(ratio, rel=1e-9)
    mech = DXMWEM.from_solver(W, U, M, n=1000)
    assert mech.T == mech.design.report["T"] >= 1
    # more rounds with the same beta break the composition bound
    with pytest.raises(PrivacyViolationError, match="Theorem 7"):
        DXMWEM(W, mech.design, T=mech.T + 1, universe=U, metric=M)
    bad = as_design(W, 1.0, mech.beta * 1.01, method="manual", report={"T": mech.T})
    with pytest.raises(PrivacyViolationError):
        DXMWEM(W, bad, universe=U, metric=M)


def small_instance():
    N = 16
    U = dp.Universe.from_points(np.arange(N, dtype=float).reshape(-1, 1) / 4)
    W = dp.Workload.range_queries(N, count=30, rng=1)
    rng = np.random.default_rng(0)
    x = rng.multinomial(2000, rng.dirichlet(np.full(N, 0.5)))
    return U, W, metrics.Euclidean(1.0), x


def max_error(mech, W, x, seeds):
    sim = dp.Accountant(total=math.inf)
    return float(np.mean([np.max(np.abs(mech.answers(mech.release(x, rng=s, secure=False,
                                                                  accountant=sim))
                                        - W.answer(x))) for s in seeds]))


def test_error_decreases_from_one_round_to_the_optimal_T():
    """Spec §5.2: T* balances 2n sqrt(ln N / T) against 10 T ln|Q| / beta_bar."""
    U, W, M, x = small_instance()
    best = DXMWEM.from_solver(W, U, M, n=int(x.sum()))
    assert best.T > 2
    one = DXMWEM.from_solver(W, U, M, n=int(x.sum()), T=1)
    seeds = range(30)
    e1, e_star = max_error(one, W, x, seeds), max_error(best, W, x, seeds)
    assert e_star < 0.95 * e1
    # T* is the solver's minimiser of the bound of Theorem 8 (compare its neighbours)
    n, lnN, lnQ = x.sum(), np.log(W.N), np.log(W.m)
    beta_bar = 2 * best.T * best.beta

    def bound(T):
        return 2 * n * np.sqrt(lnN / T) + 10 * T * lnQ / beta_bar

    assert bound(best.T) <= min(bound(best.T - 1), bound(best.T + 1)) + 1e-9


def test_release_is_a_histogram_of_n_records_and_trace():
    U, W, M, x = small_instance()
    mech = DXMWEM.from_solver(W, U, M, n=int(x.sum()), T=4)
    A, chosen, measured = mech.release(x, rng=3, secure=False, return_trace=True)
    assert A.shape == (W.N,) and np.all(A > 0)
    assert A.sum() == pytest.approx(x.sum(), rel=1e-12)
    assert chosen.shape == measured.shape == (4,)
    assert np.all((chosen >= 0) & (chosen < W.m))
    # seeded runs repeat exactly on the fast path
    np.testing.assert_array_equal(mech.release(x, rng=3, secure=False,
                                              accountant=dp.Accountant(total=1)), A)


def test_secure_path_is_the_default(monkeypatch):
    U, W, M, x = small_instance()
    mech = DXMWEM.from_solver(W, U, M, n=int(x.sum()), T=2)
    seen = []
    real_choice, real_add = noise.exponential_choice, noise.add_laplace
    monkeypatch.setattr(noise, "exponential_choice",
                        lambda lw, *, rng=None, secure=True: seen.append(("em", secure))
                        or real_choice(lw, rng=rng, secure=secure))
    monkeypatch.setattr(noise, "add_laplace",
                        lambda v, s, *, rng=None, secure=True: seen.append(("lap", secure))
                        or real_add(v, s, rng=rng, secure=secure))
    A = mech.release(x)
    assert A.sum() == pytest.approx(x.sum())
    assert seen == [("em", True), ("lap", True)] * 2


def test_input_validation():
    U, W, M, x = small_instance()
    with pytest.raises(ValidationError, match="T"):
        DXMWEM.baseline(W, U, M, T=0)
    mech = DXMWEM.baseline(W, U, M, T=2)
    assert mech.beta == pytest.approx(M.eps_min(U) / 4)
    with pytest.raises(ValidationError, match="empty"):
        mech.release(np.zeros(W.N), rng=0, secure=False)
    with pytest.raises(ValidationError, match=r"\[0, 1\]"):
        DXMWEM.baseline(dp.Workload(2 * W.dense()), U, M, T=2)


def round_one_instance():
    """N = 4, six 0/1 range queries with unequal weights w_f <= 1 and the solver's beta (so
    Theorem 7 still holds), n = 20: the round-1 selection law is far from uniform and from
    degenerate."""
    N = 4
    U = dp.Universe.from_points(np.arange(N, dtype=float).reshape(-1, 1))
    W = dp.Workload.range_queries(N, [(0, 0), (0, 1), (1, 2), (2, 3), (0, 3), (3, 3)])
    M = metrics.Euclidean(1.0)
    beta = DXMWEM.from_solver(W, U, M, n=20, T=1).beta
    design = as_design(W, [0.5, 1.0, 1.0, 0.8, 0.3, 0.6], beta, method="manual", report={"T": 1})
    return DXMWEM(W, design, universe=U, metric=M), np.array([10, 1, 3, 6])


@pytest.mark.slow
def test_round_one_selection_and_measurement_follow_algorithm_2():
    """T = 1, 20000 seeded releases: Pr(f_1 = f) ∝ exp(beta s_1(x, f) / 2) with
    s_1 = |w_f <f, A_0> - w_f <f, x>|, A_0 = n uniform (chi-square), and the measurement noise
    m_1 - w_f <f, x> is Lap(1 / beta): variance 2 / beta^2 within 5 standard errors, KS test."""
    mech, x = round_one_instance()
    K, beta, n = 20_000, mech.beta, x.sum()
    rng = np.random.default_rng(2026)
    chosen, noise_1 = np.empty(K, dtype=int), np.empty(K)
    true = mech.answers(x)
    sim = dp.Accountant(total=math.inf)
    for k in range(K):
        _, f, m = mech.release(x, rng=rng, secure=False, return_trace=True, accountant=sim)
        chosen[k], noise_1[k] = f[0], m[0] - true[f[0]]
    scores = np.abs(mech.answers(np.full(x.size, n / x.size)) - true)
    assert len(set(np.round(scores, 9))) >= 5  # distinct scores: the test has power

    def law(log_w):
        p = np.exp(log_w - log_w.max())
        return p / p.sum()

    observed = np.bincount(chosen, minlength=mech.workload.m)
    expected = K * law(beta * scores / 2)
    assert expected.min() > 50
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # the same data reject the law without the 1/2 and the law without the weights w_f
    assert stats.chisquare(observed, K * law(beta * scores)).pvalue < 1e-6
    unweighted = np.abs(mech.workload.dense() @ (np.full(x.size, n / x.size) - x))
    assert stats.chisquare(observed, K * law(beta * unweighted / 2)).pvalue < 1e-6

    var, se = 2 / beta**2, np.sqrt(20 / beta**4 / K)  # Var(X^2) = 24 b^4 - 4 b^4 for Lap(b)
    assert abs(np.mean(noise_1**2) - var) < 5 * se
    assert abs(np.mean(noise_1)) < 5 * np.sqrt(var / K)
    assert stats.kstest(noise_1, "laplace", args=(0.0, 1 / beta)).pvalue > 1e-3
    assert stats.kstest(noise_1, "laplace", args=(0.0, 1.2 / beta)).pvalue < 1e-6
