"""ProPerTable refuses a ledger or budget its backend cannot use, before anything is registered.

Before, a pandas table given an engine BudgetTable (or a DuckDB path) failed deep inside with a
TypeError / AttributeError, and an engine table given per-row budgets got an unhelpful message.
"""

import numpy as np
import pandas as pd
import pytest

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables import Ledger, ProPerTable
from dprivacy.tables.budgets.budget_table import BudgetTable
from dprivacy.tables.relations.pandas_relation import PandasRelation

DF = pd.DataFrame({"pid": [3, 4], "a": [1.0, 2.0]})


def test_pandas_table_refuses_an_engine_budget_table():
    bt = BudgetTable()
    with pytest.raises(ValidationError, match="pandas ProPerTable keeps budgets"):
        ProPerTable(DF, budget=1.0, ledger=bt, id_column="pid")
    with pytest.raises(UnknownRecordError):  # nobody registered
        bt.remaining([3])


def test_pandas_table_refuses_a_duckdb_path(tmp_path):
    path = tmp_path / "budgets.duckdb"
    with pytest.raises(ValidationError, match="backend='duckdb'"):
        ProPerTable(DF, budget=1.0, ledger=str(path), id_column="pid")
    assert not path.exists()


@pytest.mark.parametrize("budget", [[1.0, 2.0], np.array([1.0, 2.0]), np.array([1.0])])
def test_engine_table_refuses_per_row_budgets(budget):
    with pytest.raises(ValidationError, match="pandas backend only"):
        ProPerTable(DF, budget=budget, id_column="pid", backend="duckdb")


def test_engine_table_refuses_a_sqlite_ledger(tmp_path):
    led = Ledger(tmp_path / "l.db")
    with pytest.raises(ValidationError, match="BudgetTable"):
        ProPerTable(DF, budget=1.0, ledger=led, id_column="pid", backend="duckdb")
    assert not led.contains([3, 4]).any()


def test_engine_table_still_takes_a_numpy_scalar_budget():
    t = ProPerTable(DF, budget=np.int64(2), id_column="pid", backend="duckdb")
    assert [float(b) for b in t._ledger.remaining([3, 4])] == [2.0, 2.0]


def test_pandas_relation_refuses_a_relation_of_another_backend():
    rel = PandasRelation(DF)
    other = ProPerTable(DF, budget=1.0, id_column="pid", backend="duckdb")._rel
    with pytest.raises(ValidationError, match="pandas backend"):
        rel.concat(other)
