"""Grouped aggregation over a public key set: one noisy answer per key for ε in total."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dprivacy.errors import BudgetExceededError, UnsupportedOperationError, ValidationError
from dprivacy.tables import MemoryLedger, ProPerTable, Queryable
from dprivacy.tables.grouped import Count, GroupedTable, Mean, Sum

DF = pd.DataFrame({"pid": range(7), "zip": ["a", "a", "a", "b", "b", "x", "y"],
                   "inc": [1.0, 2.0, 3.0, 10.0, 20.0, 50.0, 60.0]})
KEYS = ["a", "b", "c"]
BACKENDS = ["pandas", "duckdb"]


def _exact(backend: str, kind: str) -> pd.DataFrame:
    """The grouped answer at ε = 1e6 (noise ~ 1e-6): the exact values."""
    if kind == "pinq":
        t = Queryable(DF, budget=1e9, backend=backend)
    else:
        t = ProPerTable(DF, budget=1e9, id_column="pid", backend=backend)
    return t.group_by(keys=KEYS, column="zip").agg(
        3e6, n=Count(), s=Sum("inc", 0, 100), m=Mean("inc", 0, 100))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["pinq", "proper"])
def test_one_row_per_public_key_with_the_exact_values(backend: str, kind: str) -> None:
    out = _exact(backend, kind)
    assert list(out.index) == KEYS and list(out.columns) == ["n", "s", "m"]
    np.testing.assert_allclose(out["n"], [3, 2, 0], atol=1e-3)
    np.testing.assert_allclose(out["s"], [6, 30, 0], atol=1e-2)
    # a key with no record: its mean is the midpoint plus noise (never an error, never absent)
    np.testing.assert_allclose(out["m"], [2, 15, 50], atol=1e-2)


def test_spark_gives_the_same_answers(spark) -> None:  # noqa: ANN001 (the session fixture)
    sdf = spark.createDataFrame(DF)
    t = Queryable(sdf, budget=1e9)
    out = t.group_by(keys=KEYS, column="zip").agg(2e6, n=Count(), s=Sum("inc", 0, 100))
    np.testing.assert_allclose(out[["n", "s"]].to_numpy(), [[3, 6], [2, 30], [0, 0]], atol=1e-2)
    p = ProPerTable(sdf, budget=2e5, id_column="pid")
    first = p.group_by(keys=KEYS, column="zip").agg(2e5, n=Count(), m=Mean("inc", 0, 100))
    np.testing.assert_allclose(first.to_numpy(), [[3, 2], [2, 15], [0, 50]], atol=1e-2)
    last = p.group_by(keys=["a", "x"], column="zip").count(1e5)  # the a's are exhausted
    assert {k: round(v) for k, v in last.items()} == {"a": 0, "x": 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_pinq_charges_eps_once_not_per_key_or_per_aggregation(backend: str) -> None:
    t = Queryable(DF, budget=1.0, backend=backend)
    g = t.group_by(keys=[f"k{i}" for i in range(50)] + KEYS, column="zip")
    g.agg(0.25, n=Count(), s=Sum("inc", 0, 100), m=Mean("inc", 0, 100))
    assert t.remaining_budget() == pytest.approx(0.75)
    doubled = t.select_many(2, (lambda r: [r["zip"], r["zip"]]) if backend == "pandas"
                            else (lambda s: [s.zip, s.zip]))
    doubled.group_by(keys=KEYS, column="value").count(0.25)
    assert t.remaining_budget() == pytest.approx(0.25)   # stability 2: 2 x 0.25
    with pytest.raises(BudgetExceededError):
        g.agg(0.3, n=Count())
    assert t.remaining_budget() == pytest.approx(0.25)


@pytest.mark.parametrize("backend", BACKENDS)
def test_proper_each_listed_record_pays_eps_once_unlisted_records_nothing(backend: str) -> None:
    """Budget 2e5, ε 1e5 (noise ~1e-5): two grouped queries exhaust the listed people (one
    record each: ε per query, whatever the number of keys and aggregations); the unlisted "x"
    was never charged, so it still counts at full budget."""
    led = MemoryLedger() if backend == "pandas" else None
    p = ProPerTable(DF, budget=2e5, id_column="pid", ledger=led, backend=backend)
    p.group_by(keys=KEYS, column="zip").agg(1e5, n=Count(), m=Mean("inc", 0, 100))
    if led is not None:
        assert list(led.remaining(np.arange(7))) == pytest.approx([1e5] * 5 + [2e5] * 2)
    first = p.group_by(keys=KEYS, column="zip").count(1e5)
    assert {k: round(v) for k, v in first.items()} == {"a": 3, "b": 2, "c": 0}
    last = p.group_by(keys=["a", "b", "x"], column="zip").count(1e5)
    assert {k: round(v) for k, v in last.items()} == {"a": 0, "b": 0, "x": 1}


def test_proper_silent_drop_matches_per_key_semantics() -> None:
    led = MemoryLedger()
    p = ProPerTable(DF, budget=2e5, id_column="pid", ledger=led)
    p.where(lambda r: r["zip"] == "a").noisy_count(1.5e5)     # the a's keep 0.5e5
    out = p.group_by(keys=["a", "b", "x"], column="zip").count(1e5)
    assert {k: round(v) for k, v in out.items()} == {"a": 0, "b": 2, "x": 1}
    assert list(led.remaining(np.arange(7))) == pytest.approx(
        [0.5e5] * 3 + [1e5] * 3 + [2e5])


@pytest.mark.parametrize("backend", BACKENDS)
def test_unlisted_keys_are_never_revealed(backend: str) -> None:
    """Records whose key is not listed change no answer: a table of only unlisted keys answers
    like an empty one (exactly, with the same seed), and no row names them."""
    only_unlisted = DF[DF.zip.isin(["x", "y"])].reset_index(drop=True)
    empty = DF.iloc[0:0]
    answers = []
    for data in (only_unlisted, empty):
        t = Queryable(data, budget=10.0, backend=backend, noise_seed=7)
        answers.append(t.group_by(keys=KEYS, column="zip").agg(
            1.0, n=Count(), s=Sum("inc", 0, 100), m=Mean("inc", 0, 100)))
    pd.testing.assert_frame_equal(answers[0], answers[1])
    assert "x" not in answers[0].index and "y" not in answers[0].index


def _noise_grouped(t: Queryable, keys: list[str], eps: float) -> np.ndarray:
    return np.array(list(t.group_by(keys=keys, column="zip").count(eps).values()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_noise_matches_the_per_key_answers(backend: str) -> None:
    """The grouped counts' noise has the distribution of per-key noisy counts (two-sample
    Kolmogorov-Smirnov) and is Lap(1/ε) per key (one-sample KS), not Lap(K/ε)."""
    eps, n_keys = 0.5, 1500
    keys = [f"k{i}" for i in range(n_keys)]                    # empty keys: the answer is noise
    t = Queryable(DF, budget=1e9, backend=backend, noise_seed=3)
    grouped = _noise_grouped(t, keys, eps)
    parts = t.partition(keys[:300], "zip")
    per_key = np.array([parts[k].noisy_count(eps) for k in keys[:300]])
    assert stats.ks_2samp(grouped, per_key).pvalue > 1e-3
    assert stats.kstest(grouped, stats.laplace(scale=1 / eps).cdf).pvalue > 1e-3
    # and a K-times larger scale would be rejected: the test can fail
    assert stats.kstest(grouped, stats.laplace(scale=2 / eps).cdf).pvalue < 1e-6


def test_sum_and_mean_noise_match_the_in_table_queries() -> None:
    """Per key, Sum and Mean draw the noise of noisy_sum / noisy_average on the key's group at
    the aggregation's share of ε (two-sample KS against the per-key queries)."""
    t = Queryable(DF, budget=1e12, noise_seed=11)
    g = t.group_by(keys=["a"], column="zip")
    a = t.where(lambda r: r["zip"] == "a")
    reps = 400
    grouped = np.array([g.agg(1.0, s=Sum("inc", 0, 10), m=Mean("inc", 0, 10)).loc["a"].to_numpy()
                        for _ in range(reps)])
    per = np.array([[a.noisy_sum(0.5, "inc", 0, 10), a.noisy_average(0.5, "inc", 0, 10)]
                    for _ in range(reps)])
    for j in range(2):
        assert stats.ks_2samp(grouped[:, j], per[:, j]).pvalue > 1e-3
    assert abs(np.median(grouped[:, 0]) - 6.0) < 3.0           # the sum of the a's is 6


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_arguments_are_refused_before_any_charge(backend: str) -> None:
    t = Queryable(DF, budget=1.0, backend=backend)
    p = ProPerTable(DF, budget=1.0, id_column="pid", backend=backend)
    bad_calls = [
        lambda: t.group_by(keys=["a", "a"], column="zip"),
        lambda: t.group_by(keys="ab", column="zip"),
        lambda: t.group_by(keys=KEYS, column="nope"),
        lambda: t.group_by(keys=KEYS),
        lambda: t.group_by("zip", keys=KEYS, column="zip"),
        lambda: t.group_by(keys=KEYS, column="zip", n=("inc", "sum")),
        lambda: t.group_by(keys=KEYS, column="zip").agg(0, n=Count()),
        lambda: t.group_by(keys=KEYS, column="zip").agg(1.0),
        lambda: t.group_by(keys=KEYS, column="zip").agg(1.0, n="count"),
        lambda: t.group_by(keys=KEYS, column="zip").agg(1.0, s=Sum("inc", 5, 1)),
        lambda: t.group_by(keys=KEYS, column="zip").agg(1.0, s=Sum("nope", 0, 1)),
        lambda: p.group_by(keys=KEYS, column="zip").agg(float("nan"), n=Count()),
    ]
    if backend == "duckdb":
        bad_calls.append(lambda: t.group_by(keys=[1, 2], column="zip"))
    for call in bad_calls:
        with pytest.raises(ValidationError):
            call()
    with pytest.raises(UnsupportedOperationError):
        p.group_by("zip")                                      # no public key set: untrackable
    assert t.remaining_budget() == 1.0
    assert isinstance(p.group_by(keys=KEYS, column="zip"), GroupedTable)


def test_an_expression_key_on_a_pandas_frame_runs_in_duckdb() -> None:
    from ibis import _

    t = Queryable(DF, budget=2e6)
    out = t.count_by([0, 1, 2], _.inc // 10, eps=1e6)         # inc 1, 2, 3 | 10 | 20
    assert {k: round(v) for k, v in out.items()} == {0: 3, 1: 1, 2: 1}
    assert t.remaining_budget() == pytest.approx(1e6)          # charged to the same budget
