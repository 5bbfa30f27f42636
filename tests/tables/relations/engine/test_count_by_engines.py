"""count_by on the engines: the same counts and the same cost as on pandas (DuckDB, Spark)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprivacy.tables import ProPerTable, Queryable

ZIPS = pd.DataFrame({"pid": np.arange(7), "zip": ["a", "a", "a", "b", "b", "x", "y"]})
TRUE = {"a": 3, "b": 2, "c": 0}


def test_count_by_on_spark(spark) -> None:  # noqa: ANN001 (the session fixture)
    sdf = spark.createDataFrame(ZIPS)
    t = Queryable(sdf, budget=1e9, noise_seed=0)
    counts = t.count_by(["a", "b", "c"], "zip", eps=1e6)
    assert {k: round(v) for k, v in counts.items()} == TRUE
    t2 = Queryable(sdf, budget=1.0, noise_seed=0)
    t2.count_by(["a", "b", "c"], "zip", eps=0.25)
    assert t2.remaining_budget() == pytest.approx(0.75)


def test_proper_count_by_on_duckdb_charges_each_record_once() -> None:
    """Budget 2e5 and eps 1e5 (noise ~1e-5): two calls are paid in full by the listed records,
    the third finds them exhausted, while the never-listed "x" still has its whole budget."""
    pytest.importorskip("duckdb")
    p = ProPerTable(ZIPS, budget=2e5, id_column="pid", backend="duckdb", noise_seed=0)
    for _ in range(2):
        counts = p.count_by(["a", "b", "c"], "zip", eps=1e5)
        assert {k: round(v) for k, v in counts.items()} == TRUE
    last = p.count_by(["a", "b", "x"], "zip", eps=1e5)
    assert {k: round(v) for k, v in last.items()} == {"a": 0, "b": 0, "x": 1}
