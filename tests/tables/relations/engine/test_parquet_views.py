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
