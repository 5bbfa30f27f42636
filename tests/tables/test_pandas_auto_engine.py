"""A PINQ table on a pandas frame opened without a backend runs the analyst's Ibis expressions in
DuckDB (the frame registered without a copy) and keeps the per-record path for callables; the
choice depends only on the type of the analyst's code, and both share the table's one budget."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from ibis import _

from dprivacy.errors import ValidationError
from dprivacy.tables import Queryable


def _frame() -> pd.DataFrame:
    gen = np.random.default_rng(0)
    return pd.DataFrame({"x": gen.random(200), "y": gen.integers(0, 10, 200)})


def test_expressions_run_in_duckdb_and_callables_stay_on_pandas():
    df = _frame()
    q = Queryable(df, budget=10.0, noise_seed=3)
    assert q.backend == "pandas"
    fast = q.where(_.x > 0.5).where(_.y < 3)
    slow = q.where(lambda r: r["x"] > 0.5).where(lambda r: r["y"] < 3)
    assert (fast.backend, slow.backend) == ("duckdb", "pandas")
    ref = Queryable(df, budget=10.0, backend="duckdb", noise_seed=3).where(_.x > 0.5).where(
        _.y < 3)
    assert fast.noisy_count(1.0) == ref.noisy_count(1.0)  # same records, same seeded noise
    slow.noisy_count(1.0)
    assert q.remaining_budget() == pytest.approx(8.0)  # both paths charge the one budget
    assert q.select(z=_.x * 2).backend == "duckdb"
    assert set(q.partition([0, 1], _.y).keys()) == {0, 1}
    assert q.group_by(_.y % 2).backend == "duckdb"


def test_a_duckdb_derived_table_combines_with_its_pandas_root():
    df = _frame()
    q = Queryable(df, budget=10.0, noise_seed=1)
    both = q.where(_.x > 0.5).concat(q)
    assert both.backend == "duckdb"
    exact = int((df["x"] > 0.5).sum()) + len(df)
    assert abs(both.noisy_count(5.0) - exact) < 20
    assert q.remaining_budget() == pytest.approx(0.0)  # concat of q with itself: stability 2


def test_a_frame_duckdb_cannot_hold_is_refused_before_any_charge():
    q = Queryable(pd.DataFrame({0: [1.0, 2.0]}), budget=1.0)  # a non-string column name
    with pytest.raises(ValidationError, match="column"):
        q.where(_[0] > 1).noisy_count(0.5)
    assert q.remaining_budget() == 1.0
