"""Noisy median on Spark: exact rank counts in the engine, outputs only candidates."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dprivacy.tables import Queryable


def test_spark_rank_counts_and_outputs(spark):
    x = np.array([0.1, 0.5, 0.5, 0.7, np.nan, 2.0, -1.0])
    cands = np.array([0.0, 0.5, 0.7, 1.0])
    t = Queryable(spark.createDataFrame(pd.DataFrame({"x": x})), budget=100.0)
    lt, eq, n = t._rel.rank_counts("x", 0.0, 1.0, cands)
    v = np.clip(np.nan_to_num(x, nan=0.5), 0, 1)
    assert n == len(x)
    np.testing.assert_array_equal(lt, [(v < c).sum() for c in cands])
    np.testing.assert_array_equal(eq, [(v == c).sum() for c in cands])
    outs = {t.noisy_median(1.0, "x", candidates=list(cands)) for _ in range(5)}
    assert outs <= set(cands.tolist())
    empty = Queryable(spark.createDataFrame(pd.DataFrame({"x": [0.5]})).limit(0), budget=10.0)
    assert empty.noisy_median(1.0, "x", candidates=11) in set(np.linspace(0, 1, 11).tolist())
