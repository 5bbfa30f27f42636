"""Parquet sources on DuckDB: the view of unchanged plain files is reused (no new view, same
compiled SQL); a rewritten file or a glob gets a new view, so a query never reads a stale schema."""

from __future__ import annotations

import os

import pandas as pd

from dprivacy.tables import Queryable
from dprivacy.tables.relations.engine.backends import DuckEngine


def test_unchanged_files_reuse_their_view_and_changed_files_do_not(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"a": [1, 2, 3]}).to_parquet(path)
    eng = DuckEngine()
    t1 = eng.register_parquet([str(path)])
    assert eng.register_parquet([str(path)]) is t1
    pd.DataFrame({"a": [1, 2, 3, 4], "b": [0.5] * 4}).to_parquet(path)  # rewritten: new schema
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # even within one mtime tick
    t2 = eng.register_parquet([str(path)])
    assert t2 is not t1 and "b" in t2.columns and "b" not in t1.columns
    glob = str(tmp_path / "*.parquet")
    assert eng.register_parquet([glob]) is not eng.register_parquet([glob])


def test_counts_on_a_reused_view_follow_the_file(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"a": list(range(10))}).to_parquet(path)
    n1 = Queryable(str(path), 1e9, noise_seed=0).noisy_count(1e9)
    n2 = Queryable(str(path), 1e9, noise_seed=0).noisy_count(1e9)
    assert round(n1) == round(n2) == 10
    pd.DataFrame({"a": list(range(25))}).to_parquet(path)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert round(Queryable(str(path), 1e9, noise_seed=0).noisy_count(1e9)) == 25


def test_group_counts_numeric_keys_equal_the_pandas_conversion():
    """Numeric keys without NULLs skip Arrow's to_pandas (same dtypes and values); strings and
    NULL keys take the general conversion."""
    import numpy as np

    from dprivacy.tables.relations.engine.sources import relation_from

    df = pd.DataFrame({"i": np.array([3, 1, 3, 2], dtype=np.int32), "f": [0.5, 0.5, 1.5, 0.5],
                       "s": ["a", "b", "a", "a"], "n": [1.0, None, 1.0, None]})
    rel = relation_from(df, "duckdb")
    for cols in (["i"], ["i", "f"], ["s"], ["n"], ["i", "s"]):
        got = rel.group_counts(cols).sort_values(cols).reset_index(drop=True)
        want = (df.groupby(cols, dropna=False).size().reset_index(name="count")
                .sort_values(cols).reset_index(drop=True))
        assert list(got.columns) == [*cols, "count"]
        assert got["count"].dtype == np.int64
        assert got["count"].tolist() == want["count"].tolist(), cols
        for c in cols:
            a, b = got[c].tolist(), want[c].tolist()
            assert all((x == y) or (x != x and y != y) or (x is None and y != y)
                       for x, y in zip(a, b, strict=True)), (c, a, b)
    assert rel.group_counts(["i"])["i"].dtype == np.int32
