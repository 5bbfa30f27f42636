"""Exact rank counts of an IbisRelation for the noisy order statistics, computed in the engine.

For sorted, distinct public candidates c_0 < ... < c_{m-1} and the clamped values v of the
records (see :func:`dprivacy.tables.relations.engine.aggregates.value_expr`), the engine stacks the
records (weight 1) and the candidates (weight 0) and sorts them once; a running sum of the
weights read at each candidate's row counts the records before it. Sorting candidates before
equal values gives #{v < c}; sorting them after gives #{v <= c}. The query returns m rows of
exact integer counts; no data value reaches the driver. (One sort, O(n log n), and a constant-size
query whatever m: a CASE per candidate would make the query grow with m.)
"""

from __future__ import annotations

import ibis
import numpy as np
import pandas as pd

from dprivacy.tables.relations.engine.aggregates import value_expr
from dprivacy.tables.relations.engine.ibis_plan import IbisPlan

__all__ = ["rank_counts"]


def rank_counts(rel: IbisPlan, value: object, lo: float, hi: float, cands: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """(#{v < c}, #{v = c}) per candidate, and n, for the clamped values of ``rel``."""
    m = len(cands)
    data = rel.table.select(dp_v=value_expr(rel, value, lo, hi),
                            dp_w=ibis.literal(1, "int64"), dp_k=ibis.literal(-1, "int64"))
    pub = rel.public(pd.DataFrame({"dp_v": np.asarray(cands, dtype=float),
                                   "dp_w": np.zeros(m, np.int64),
                                   "dp_k": np.arange(m, dtype=np.int64)})).table
    both = data.union(pub.select("dp_v", "dp_w", "dp_k"), distinct=False)
    first = ibis.ifelse(both.dp_k >= 0, 0, 1)  # candidates before equal values
    last = ibis.ifelse(both.dp_k >= 0, 1, 0)   # candidates after equal values
    w_lt = ibis.window(order_by=[both.dp_v, first, both.dp_k], rows=(None, 0))
    w_le = ibis.window(order_by=[both.dp_v, last, both.dp_k], rows=(None, 0))
    runs = both.select(both.dp_k, lt=both.dp_w.sum().over(w_lt), le=both.dp_w.sum().over(w_le),
                       n=both.dp_w.sum().over(ibis.window()))
    at = rel.engine.arrow(runs.filter(runs.dp_k >= 0))
    k = np.asarray(at.column("dp_k").to_numpy(zero_copy_only=False), dtype=np.int64)
    lt, le = np.zeros(m, np.int64), np.zeros(m, np.int64)
    lt[k] = np.nan_to_num(np.asarray(at.column("lt").to_numpy(zero_copy_only=False), float))
    le[k] = np.nan_to_num(np.asarray(at.column("le").to_numpy(zero_copy_only=False), float))
    n = at.column("n").to_numpy(zero_copy_only=False)
    return lt, le - lt, int(np.nan_to_num(float(n[0]))) if len(n) else 0
