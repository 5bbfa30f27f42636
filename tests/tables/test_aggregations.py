"""Distribution of the noisy aggregations (data owner's noise_seed; tolerances from sample size)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dprivacy.errors import ValidationError
from dprivacy.tables import ProPerTable, Queryable

R = 3000  # draws per test; KS p-value threshold 1e-3 gives a false-failure rate of 0.1 %


def frame() -> pd.DataFrame:
    return pd.DataFrame({"x": [0.5, 2.0, -3.0, 1.0, 7.0, 0.25, -0.5, 4.0]})


def test_noisy_count_is_laplace_1_over_eps():
    t = Queryable(frame(), budget=1e9, noise_seed=0)
    z = np.array([t.noisy_count(0.5) for _ in range(R)]) - 8
    assert stats.kstest(z, "laplace", args=(0, 2.0)).pvalue > 1e-3
    assert t.remaining_budget() == pytest.approx(1e9 - 0.5 * R)


def test_noisy_sum_clamps_and_scales_by_the_range():
    t = Queryable(frame(), budget=1e9, noise_seed=1)
    true = np.clip(frame()["x"], -1, 3).sum()
    z = np.array([t.noisy_sum(0.25, "x", -1, 3) for _ in range(R)]) - true
    assert stats.kstest(z, "laplace", args=(0, 3 / 0.25)).pvalue > 1e-3


def test_noisy_average_is_consistent_and_in_range():
    big = pd.DataFrame({"x": np.linspace(0, 10, 2000)})
    t = Queryable(big, budget=1e9, noise_seed=2)
    v = np.array([t.noisy_average(1.0, "x", 0, 8) for _ in range(R)])
    true = np.clip(big["x"], 0, 8).mean()
    assert v.min() >= 0 and v.max() <= 8
    # the error is ≈ Lap(8/ε)/n on the sum plus a count term: sd ≈ 0.006; tolerance 6 sd / √R
    assert abs(v.mean() - true) < 6 * 0.01 / np.sqrt(R) + 1e-3
    assert v.std() < 0.02


def test_noisy_median_follows_the_exponential_mechanism_density():
    """Empirical candidate frequencies match P(c) ∝ exp(−ε·|2·#{v<c} − (n − #{v=c})|/2), the
    rank-based median score (Δ = 1), on the grid of 11 points (chi-square)."""
    vals = np.array([0.1, 0.2, 0.45, 0.5, 0.8])
    t = Queryable(pd.DataFrame({"x": vals}), budget=1e9, noise_seed=3)
    eps = 2.0
    z = np.array([t.noisy_median(eps, "x", 0, 1, candidates=11) for _ in range(R)])
    cands = np.linspace(0, 1, 11)
    assert set(z.tolist()) <= set(cands.tolist())
    score = np.array([abs(2 * (vals < c).sum() - (5 - (vals == c).sum())) for c in cands])
    w = np.exp(-eps * score / 2)
    expected = R * w / w.sum()
    observed = np.array([(z == c).sum() for c in cands])
    keep = expected > 5  # chi-square needs populated cells; the rest must be (nearly) empty
    assert observed[~keep].sum() <= 5 + 3 * np.sqrt(expected[~keep].sum() + 1)
    e = expected[keep] * observed[keep].sum() / expected[keep].sum()
    assert stats.chisquare(observed[keep], e).pvalue > 1e-3


def test_exponential_mechanism_probabilities():
    df = pd.DataFrame({"c": [0, 0, 0, 1, 2, 2]})
    t = Queryable(df, budget=1e9, noise_seed=4)
    eps = 0.5
    cands = [0, 1, 2]

    def score(r, c):
        return r["c"] == c

    picks = [t.exponential_mechanism(eps, cands, score) for _ in range(R // 10)]
    u = np.array([3, 1, 2])
    p = np.exp(eps * u) / np.exp(eps * u).sum()
    observed = np.bincount(picks, minlength=3)
    assert stats.chisquare(observed, R // 10 * p).pvalue > 1e-3


def test_secure_path_runs_and_is_close():
    t = Queryable(pd.DataFrame({"x": np.ones(50)}), budget=10.0)
    assert abs(t.noisy_count(5.0) - 50) < 10  # Lap(0.2): |noise| > 10 has prob e^-50
    assert abs(t.noisy_sum(5.0, "x", 0, 1) - 50) < 10


def test_proper_aggregations_use_the_same_kernels():
    p = ProPerTable(frame(), budget=1e9, noise_seed=5)
    z = np.array([p.noisy_count(0.5) for _ in range(R)]) - 8
    assert stats.kstest(z, "laplace", args=(0, 2.0)).pvalue > 1e-3


def test_value_spec_errors_and_totality():
    t = Queryable(frame().assign(y=1), budget=1.0)
    with pytest.raises(ValidationError, match="not a column"):
        t.noisy_sum(0.1, "nope", 0, 1)
    with pytest.raises(ValidationError, match="columns: pass f"):
        t.noisy_sum(0.1, None, 0, 1)
    assert t.remaining_budget() == 1.0
    rel = Queryable(pd.DataFrame({"x": [np.nan, 5.0, -5.0, np.inf, "a"]}), budget=1.0)._rel
    assert list(rel.clamped_values("x", 0, 2)) == [1.0, 2.0, 0.0, 2.0, 1.0]
    vals = rel.clamped_values(lambda r: 1 / 0 if r["x"] == 5.0 else 10**400, 0, 2)
    assert list(vals) == [2.0, 1.0, 2.0, 2.0, 2.0]  # raise -> midpoint, huge int -> hi
    assert rel.clamped_sum(lambda r: 1e308, -1e308, 1e308) == 1e308  # saturates, no overflow
