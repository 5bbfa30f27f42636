"""Noisy median / order statistics release only data-independent candidates.

* outputs of an empty and a one-record table lie in the same finite candidate set (every output
  is exactly one of the candidates: no bit of a data value reaches the output);
* the engines (DuckDB) compute the same exact rank counts as pandas;
* the privacy condition: every score moves by at most Δ = max(num, den − num) between
  neighbouring tables, so the exact output probabilities differ by a factor ≤ e^ε;
* the secure sampler's outputs follow the exact exponential-mechanism probabilities (chi-square).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dprivacy.errors import ValidationError
from dprivacy.tables import ProPerTable, Queryable
from dprivacy.tables import quantiles as qt

GRID = set(np.linspace(0.0, 1.0, qt.DEFAULT_GRID).tolist())


def _outputs(df, n, backend="pandas", **kw):
    t = Queryable(df, budget=1e9, backend=backend)
    return [t.noisy_median(1.0, "x", **kw) for _ in range(n)]


@pytest.mark.parametrize("backend,n", [("pandas", 1000), ("duckdb", 200)])
def test_empty_and_one_record_tables_give_outputs_in_one_finite_set(backend, n):
    empty = pd.DataFrame({"x": np.zeros(0)})
    for df in (empty, pd.DataFrame({"x": [0.5]}), pd.DataFrame({"x": [0.1234567891234]}),
               pd.DataFrame({"x": [0.5, 0.1]})):
        outs = _outputs(df, n, backend)
        assert all(type(o) is float and o in GRID for o in outs)
    # a user-given list: exactly its members
    cands = [0.1, 1 / 3, 0.5, 2 ** -40, 0.999]
    for df in (empty, pd.DataFrame({"x": [0.3333]})):
        outs = _outputs(df, n // 4, backend, candidates=cands)
        assert set(outs) <= set(cands)


def test_proper_median_outputs_are_candidates():
    df = pd.DataFrame({"pid": [1, 2], "x": [0.25, 0.123456789]})
    p = ProPerTable(df, budget=1e9, id_column="pid")
    outs = [p.noisy_median(1.0, "x", candidates=7) for _ in range(100)]
    assert set(outs) <= set(np.linspace(0, 1, 7).tolist())


def _values(rng, n):
    v = rng.choice([0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 1.0, 1.5, -2.0], size=n)
    return np.where(rng.random(n) < 0.5, v, rng.random(n))


@pytest.mark.parametrize("seed", range(3))
def test_engine_rank_counts_equal_pandas(seed):
    rng = np.random.default_rng(seed)
    x = _values(rng, 500).astype(object)
    x[:5] = [np.nan, None, "abc", math.inf, -math.inf]  # midpoint, midpoint, ..., clamped
    df = pd.DataFrame({"x": x})
    cands = np.array(sorted({0.0, 0.1, 0.25, 0.5, 0.6, 0.75, 1.0}))
    pan = Queryable(df, budget=1.0)._rel.rank_counts("x", 0.0, 1.0, cands)
    duck = Queryable(df, budget=1.0, backend="duckdb")._rel.rank_counts("x", 0.0, 1.0, cands)
    assert pan[2] == duck[2] == len(df)
    np.testing.assert_array_equal(pan[0], duck[0])
    np.testing.assert_array_equal(pan[1], duck[1])
    v = np.clip(np.array([0.5, 0.5, 0.5, 1.0, 0.0] + list(x[5:]), dtype=float), 0, 1)
    np.testing.assert_array_equal(pan[0], [(v < c).sum() for c in cands])
    np.testing.assert_array_equal(pan[1], [(v == c).sum() for c in cands])


def _probabilities(values, cands, frac, eps):
    num, den = qt.alpha(frac)
    lt, eq = qt.counts_from_sorted(np.asarray(values, float), cands)
    s = np.array(qt.scores(lt, eq, len(values), num, den), dtype=float)
    logw = -s / qt.score_scale(eps, num, den)
    w = np.exp(logw - logw.max())
    return w / w.sum(), s, max(num, den - num)


@pytest.mark.parametrize("frac", [0.5, 0.25, 0.9, 1 / 3, 0.0, 1.0])
def test_scores_move_by_at_most_delta_and_probabilities_by_at_most_e_eps(frac):
    rng = np.random.default_rng(7)
    cands = np.linspace(0, 1, 11)
    eps = 0.8
    for _ in range(200):
        base = _values(rng, int(rng.integers(0, 30)))
        extra = _values(rng, 1)
        p0, s0, delta = _probabilities(np.clip(base, 0, 1), cands, frac, eps)
        p1, s1, _ = _probabilities(np.clip(np.concatenate([base, extra]), 0, 1), cands, frac, eps)
        assert np.max(np.abs(s1 - s0)) <= delta
        assert np.max(np.abs(np.log(p1) - np.log(p0))) <= eps * (1 + 1e-9)


def test_frac_is_read_as_a_small_fraction():
    assert qt.alpha(0.5) == (1, 2)
    assert qt.alpha(1 / 3) == (1, 3)
    num, den = qt.alpha(0.123456)
    assert den <= qt.ALPHA_DENOMINATOR and abs(num / den - 0.123456) < 1e-4


@pytest.mark.parametrize("secure", [True, False])
def test_output_distribution_matches_the_exact_exponential_mechanism(secure):
    values = [0.05, 0.2, 0.2, 0.3, 0.55, 0.6, 0.9]
    cands = [0.1, 0.25, 0.4, 0.5, 0.8]
    eps = 0.7
    # lo, hi default to the smallest and largest candidate: the values are clamped to them
    probs, _, _ = _probabilities(np.clip(values, 0.1, 0.8), np.array(cands), 0.5, eps)
    t = Queryable(pd.DataFrame({"x": values}), budget=1e9, noise_seed=None if secure else 11)
    n = 3000
    outs = [t.noisy_median(eps, "x", candidates=cands) for _ in range(n)]
    counts = np.array([outs.count(c) for c in cands])
    assert counts.sum() == n
    chi = stats.chisquare(counts, probs * n)
    assert chi.pvalue > 1e-4, (counts, probs * n)


@pytest.mark.parametrize("bad", [
    dict(candidates=[0.1, 0.1]), dict(candidates=[]), dict(candidates=[0.5, 2.0], hi=1.0),
    dict(candidates=["a"]), dict(candidates=[math.nan]), dict(candidates=1),
    dict(candidates=10**6), dict(candidates="0.5"), dict(lo=1.0, hi=0.0),
])
def test_bad_candidates_are_refused_before_the_charge(bad):
    t = Queryable(pd.DataFrame({"x": [0.5]}), budget=1.0)
    with pytest.raises(ValidationError):
        t.noisy_median(0.5, "x", **bad)
    assert t.remaining_budget() == 1.0


def test_one_candidate_is_released_whatever_the_data():
    t = Queryable(pd.DataFrame({"x": [0.5, 3.0]}), budget=1.0)
    assert t.noisy_median(0.5, "x", candidates=[7.0]) == 7.0
    assert t.remaining_budget() == 0.5



def test_the_default_grid_on_0_1_is_exact_binary_fractions():
    grid, lo, hi = qt.candidates_arg(None, None, None)
    assert (lo, hi) == (0.0, 1.0) and len(grid) == qt.DEFAULT_GRID == 1025
    assert [float(g) for g in grid] == [k / 1024 for k in range(1025)]
    outs = _outputs(pd.DataFrame({"x": [0.1234567]}), 50)
    assert all((o * 2**10).is_integer() for o in outs)  # so also on the 2^-53 grid
