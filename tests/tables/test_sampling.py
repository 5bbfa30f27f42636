"""Sampling and partitioning (PST'16, Paper III): the σ values and their accounting."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dprivacy.errors import BudgetExceededError, ValidationError
from dprivacy.tables import Queryable
from dprivacy.tables import sampling as s


@pytest.mark.parametrize(
    ("sigma", "eps", "value"),
    [
        (s.sigma_take, 0.1, 0.2),
        (s.sigma_take, 1.0, 2.0),
        (s.sigma_fixed(10), 0.1, 0.183384),
        (s.sigma_fixed(10), 1.0, 1.918133),
        (s.sigma_fixed_partition(10), 0.1, 0.283384),
        (s.sigma_fixed_partition(10), 1.0, 2.918133),
        (s.sigma_fixed(100), 0.1, 0.198204),
        (s.sigma_fixed(100), 1.0, 1.991402),
        (s.sigma_fraction(0.1), 0.1, 0.121899),
        (s.sigma_fraction(0.1), 1.0, 1.494029),
        (s.sigma_fraction_partition(0.1), 0.1, 0.321899),
        (s.sigma_fraction_partition(0.1), 1.0, 3.494029),
        (s.sigma_fraction(0.5), 0.1, 0.204992),
        (s.sigma_fraction(0.5), 1.0, 2.433781),
        (s.sigma_fraction_partition(0.5), 0.1, 0.404992),
        (s.sigma_fraction_partition(0.5), 1.0, 4.433781),
        (s.sigma_bernoulli(0.1), 0.1, 0.010462),
        (s.sigma_bernoulli(0.1), 1.0, 0.158565),
        (s.sigma_bernoulli(0.5), 0.1, 0.051249),
        (s.sigma_bernoulli(0.5), 1.0, 0.620115),
        (s.sigma_bernoulli_partition(0.3), 0.7, 0.7),
        (s.sigma_with_replacement(100), 1.0, 100.0),
    ],
)
def test_sigma_values(sigma, eps, value):
    assert sigma(eps) == pytest.approx(value, abs=1e-6)


def data(n: int = 50) -> pd.DataFrame:
    return pd.DataFrame({"v": np.arange(n)})


@pytest.mark.parametrize(
    ("make", "sigma"),
    [
        (lambda q: s.sample_fixed(q, 10), s.sigma_fixed(10)),
        (lambda q: s.sample_with_replacement(q, 5), s.sigma_with_replacement(5)),
        (lambda q: s.sample_fraction(q, 0.5), s.sigma_fraction(0.5)),
        (lambda q: s.sample_bernoulli(q, 0.1), s.sigma_bernoulli(0.1)),
        (lambda q: s.partition_fixed(q, 10)[0], s.sigma_fixed_partition(10)),
        (lambda q: s.partition_fraction(q, 0.1)[1], s.sigma_fraction_partition(0.1)),
        (lambda q: s.partition_bernoulli(q, 0.5)[0], s.sigma_bernoulli_partition(0.5)),
    ],
)
def test_samplers_charge_sigma_through_the_chain(make, sigma):
    t = Queryable(data(), budget=100.0)
    q = make(t.where(lambda r: r["v"] >= 0).select_many(2, lambda r: [r["v"], r["v"]]))
    assert q.cost(0.3) == pytest.approx(2 * sigma(0.3))  # upstream stability 2 times σ
    q.noisy_count(0.3)
    assert t.remaining_budget() == pytest.approx(100 - 2 * sigma(0.3))


def test_repeated_queries_on_one_sample_cost_sigma_of_the_total():
    """All queries on one sample form one mechanism: σ(ε1 + ε2), not σ(ε1) + σ(ε2) (σ convex)."""
    t = Queryable(data(), budget=10.0)
    b = s.sample_bernoulli(t, 0.1)
    b.noisy_count(1.0)
    b.noisy_count(1.0)
    sig = s.sigma_bernoulli(0.1)
    assert 10 - t.remaining_budget() == pytest.approx(sig(2.0))
    assert sig(2.0) > 2 * sig(1.0)


def test_sampled_partition_parts_share_one_max():
    t = Queryable(data(), budget=10.0)
    k, kbar = s.partition_fixed(t, 10)
    assert len(k._df) == 10 and len(kbar._df) == 40
    assert set(k._df["v"]).isdisjoint(kbar._df["v"])
    assert sorted([*k._df["v"], *kbar._df["v"]]) == list(range(50))
    k.noisy_count(0.5)
    kbar.noisy_count(0.5)
    assert 10 - t.remaining_budget() == pytest.approx(s.sigma_fixed_partition(10)(0.5))


def test_refused_sample_query_leaves_sigma_total_unchanged():
    t = Queryable(data(), budget=0.5)
    b = s.sample_fixed(t, 10)
    with pytest.raises(BudgetExceededError):
        b.noisy_count(1.0)
    assert b.cost(0.2) == pytest.approx(s.sigma_fixed(10)(0.2))


def test_sample_sizes_and_uniformity():
    t = Queryable(data(6), budget=1.0, noise_seed=0)
    assert len(s.sample_fixed(t, 100)._df) == 6  # |D| ≤ n: the whole table
    assert len(s.sample_fraction(t, 0.5)._df) == 3
    assert len(s.sample_with_replacement(t, 9)._df) == 9
    # R_n is uniform over the C(6, 2) = 15 subsets (PST'16 Thm 5), chi-square on 3000 draws
    draws = [tuple(sorted(s.sample_fixed(t, 2)._df["v"])) for _ in range(3000)]
    counts = pd.Series(draws).value_counts()
    assert len(counts) == math.comb(6, 2)
    assert stats.chisquare(counts.to_numpy()).pvalue > 1e-3
    bern = [len(s.sample_bernoulli(t, 0.25)._df) for _ in range(2000)]
    assert abs(np.mean(bern) - 1.5) < 5 * np.sqrt(6 * 0.25 * 0.75 / 2000)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, float("nan"), "0.5"])
def test_bad_sampling_parameters(bad):
    t = Queryable(data(), budget=1.0)
    with pytest.raises(ValidationError):
        s.sample_bernoulli(t, bad)
    with pytest.raises(ValidationError):
        s.sample_fixed(t, bad)


def test_samplers_refuse_proper_tables():
    from dprivacy.tables import ProPerTable

    p = ProPerTable(data(), budget=1.0)
    with pytest.raises(ValidationError, match="as_pinq"):
        s.sample_bernoulli(p, 0.5)
    assert (p._ledger.remaining(range(50)) == 1.0).all()
